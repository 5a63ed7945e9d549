//! SVG plots of simulator runs: how hard each policy hits the cloud, and how
//! many resources fail or are held, through an outage. Pure: the document is
//! returned as a string, the caller decides where it goes.
//!
//! SVG text is written as `<text>` elements and laid out by the viewer, so no
//! font files are needed (plotters' font features stay off; the image is
//! built FROM scratch).

use plotters::prelude::*;

/// One policy's time series, one point per `step_secs` seconds from the start of the outage.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub policy: &'static str,
    pub step_secs: u32,
    /// Cloud calls per second, averaged over each step.
    pub calls_per_sec: Vec<f64>,
    /// Resources failing at the end of each step.
    pub failing: Vec<u32>,
    /// Resources held (paused by remedy) at the end of each step; all zero for other policies.
    pub held: Vec<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("nothing to plot: no series, or no points in any series")]
    Empty,
    #[error("series `{0}`: step_secs is zero")]
    ZeroStep(&'static str),
    #[error("drawing the plot: {0}")]
    Draw(String),
}

const CAPTIONS: [&str; 3] = ["Cloud calls/s", "Failing resources", "Held resources"];

/// Plotters' errors are generic over the backend; keep only the message.
fn draw<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// The `i`th value of a series sits at the end of its step, in minutes:
/// failing and held are sampled there, and calls/s is a trailing average.
/// Non-finite values are dropped: they have no place on an axis.
fn points<T: Copy + Into<f64>>(step_secs: u32, values: &[T]) -> Vec<(f64, f64)> {
    let step = f64::from(step_secs) / 60.0;
    let at = |(i, v): (usize, &T)| ((i + 1) as f64 * step, (*v).into());
    values
        .iter()
        .enumerate()
        .map(at)
        .filter(|p| p.1.is_finite())
        .collect()
}

/// Tick labels without float noise or a trailing ".0": "2", "0.5", "120".
fn tick(v: &f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// From zero to a little above the highest value, so lines never sit on the
/// frame; at least 1 so an all-zero panel still has a scale.
fn y_max(lines: &[Vec<(f64, f64)>]) -> f64 {
    let max = lines.iter().flatten().map(|p| p.1).fold(0.0, f64::max);
    (max * 1.05).max(1.0)
}

/// An SVG document: three stacked panels sharing the x axis (time in minutes since the outage began):
/// cloud calls/s, failing resources, held resources; one coloured line per policy with a legend,
/// a vertical dashed marker at `outage_end_secs`, and `title` on top. Pure: no I/O.
pub fn svg(title: &str, outage_end_secs: u64, series: &[Series]) -> Result<String, PlotError> {
    if let Some(s) = series.iter().find(|s| s.step_secs == 0) {
        return Err(PlotError::ZeroStep(s.policy));
    }
    // Per panel, per series: the points; series may differ in length.
    let per = |f: fn(&Series) -> Vec<(f64, f64)>| series.iter().map(f).collect::<Vec<_>>();
    let panels = [
        per(|s| points(s.step_secs, &s.calls_per_sec)),
        per(|s| points(s.step_secs, &s.failing)),
        per(|s| points(s.step_secs, &s.held)),
    ];
    let last_x = panels.iter().flatten().flatten().map(|&(x, _)| x);
    let Some(data_end) = last_x.reduce(f64::max) else {
        return Err(PlotError::Empty);
    };
    let marker = outage_end_secs as f64 / 60.0;
    let x_max = data_end.max(marker);

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1000, 900)).into_drawing_area();
        root.fill(&WHITE).map_err(draw)?;
        let root = root.titled(title, ("sans-serif", 24)).map_err(draw)?;
        let areas = root.split_evenly((3, 1));
        for (p, (area, lines)) in areas.iter().zip(&panels).enumerate() {
            let top = y_max(lines);
            let mut chart = ChartBuilder::on(area)
                .caption(CAPTIONS[p], ("sans-serif", 18))
                .margin(8)
                // Room for the last x tick label, centred on the frame's edge.
                .margin_right(24)
                .x_label_area_size(35)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..x_max, 0.0..top)
                .map_err(draw)?;
            let mut mesh = chart.configure_mesh();
            mesh.light_line_style(WHITE)
                .x_label_formatter(&tick)
                .y_label_formatter(&tick);
            // The axis is shared: name it once, under the bottom panel.
            if p + 1 == CAPTIONS.len() {
                mesh.x_desc("minutes since the outage began");
            }
            mesh.draw().map_err(draw)?;
            for (i, (s, pts)) in series.iter().zip(lines).enumerate() {
                let style = Palette99::pick(i).stroke_width(2);
                let drawn = chart
                    .draw_series(LineSeries::new(pts.iter().copied(), style))
                    .map_err(draw)?;
                // The legend is on the top panel only: the colours are the same below.
                if p == 0 {
                    drawn
                        .label(s.policy)
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
                }
            }
            let end = [(marker, 0.0), (marker, top)];
            chart
                .draw_series(DashedLineSeries::new(end, 6, 4, BLACK.stroke_width(1)))
                .map_err(draw)?;
            if p == 0 {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(draw)?;
            }
        }
        root.present().map_err(draw)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(policy: &'static str, n: usize, scale: f64) -> Series {
        Series {
            policy,
            step_secs: 30,
            calls_per_sec: (0..n).map(|i| scale * i as f64).collect(),
            failing: (0..n).map(|i| (i * 2) as u32).collect(),
            held: (0..n).map(|i| i as u32 / 3).collect(),
        }
    }

    #[test]
    fn names_policies_and_panels() {
        let all = [
            series("naive", 40, 3.0),
            series("remedy", 25, 1.0),
            series("jitter", 10, 2.0),
        ];
        let doc = svg("Zone outage", 600, &all).unwrap();
        assert!(doc.starts_with("<svg"), "{}", &doc[..doc.len().min(80)]);
        assert!(doc.trim_end().ends_with("</svg>"));
        assert!(doc.contains("Zone outage"));
        for name in ["naive", "remedy", "jitter"].into_iter().chain(CAPTIONS) {
            assert!(doc.contains(name), "missing {name}");
        }
        assert!(doc.contains("minutes since the outage began"));
        assert!(doc.contains("<text"));
        assert!(doc.contains("<polyline"));
    }

    #[test]
    fn empty_is_an_error() {
        let err = svg("t", 60, &[]).unwrap_err();
        assert!(matches!(err, PlotError::Empty), "{err:?}");
        let err = svg("t", 60, &[series("naive", 0, 1.0)]).unwrap_err();
        assert!(matches!(err, PlotError::Empty), "{err:?}");
    }

    #[test]
    fn zero_step_is_an_error() {
        let mut s = series("naive", 5, 1.0);
        s.step_secs = 0;
        let err = svg("t", 60, &[s]).unwrap_err();
        assert!(matches!(err, PlotError::ZeroStep(_)), "{err:?}");
    }

    #[test]
    fn all_zeros_still_render() {
        let s = Series {
            policy: "idle",
            step_secs: 60,
            calls_per_sec: vec![0.0; 5],
            failing: vec![0; 5],
            held: vec![0; 5],
        };
        let doc = svg("quiet", 0, &[s]).unwrap();
        assert!(doc.starts_with("<svg"));
        assert!(doc.contains("idle"));
        assert!(doc.contains("Held resources"));
    }

    #[test]
    fn points_ranges_and_ticks() {
        let pts = points(30, &[4.0, f64::NAN, 10.0]);
        assert_eq!(pts, [(0.5, 4.0), (1.5, 10.0)]);
        assert!((y_max(&[pts]) - 10.5).abs() < 1e-9);
        assert_eq!(y_max(&[vec![(1.0, 0.0)]]), 1.0);
        let ticks = [2.0, 0.5, 120.0, 0.0].map(|v| tick(&v));
        assert_eq!(ticks, ["2", "0.5", "120", "0"]);
    }
}
