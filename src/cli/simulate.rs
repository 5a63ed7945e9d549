//! `remedy simulate`: the command line over the pure simulator in `sim`,
//! which reads no file and writes none; this reads the daemon config
//! (`--config`) and writes the plots (`--plot`).

use crate::sim::{Mode, RemedyParams, Scenario, SimError, plot, series, table};
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Correlated,
    Random,
    /// Correlated and random.
    Both,
    Zones,
    Quota,
    /// All four.
    All,
}

/// `remedy simulate` arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct SimArgs {
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value_t = 10_000)]
    pub resources: u32,
    #[arg(long, default_value_t = 50)]
    pub controllers: u32,
    /// Cloud API quota in calls per second.
    #[arg(long, default_value_t = 100)]
    pub api_limit: u32,
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub outage: Duration,
    /// Simulated time after the outage.
    #[arg(long, default_value = "4h", value_parser = humantime::parse_duration)]
    pub after: Duration,
    /// Share of resources (correlated) or calls (random) failing.
    #[arg(long, default_value_t = 0.6)]
    pub failing: f64,
    #[arg(long, value_enum, default_value = "both")]
    pub mode: ModeArg,
    /// Also draw calls/s, failing and held resources over time per policy
    /// as SVG; with several modes, the mode goes before the extension.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Run remedy with the `breaker`, `budget` and `backoff` sections of
    /// this daemon config file instead of parameters fitted to the
    /// scenario: what your config would do in this outage.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

impl SimArgs {
    /// The remedy parameters of `--config`, if given.
    pub fn remedy(&self) -> Result<Option<RemedyParams>, SimError> {
        let Some(path) = &self.config else {
            return Ok(None);
        };
        let v = crate::config::Config::load(path).map_err(|e| SimError::Config {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(Some(RemedyParams::from_config(&v.config)))
    }

    pub fn scenarios(&self) -> Vec<Scenario> {
        let modes: &[Mode] = match self.mode {
            ModeArg::Correlated => &[Mode::Correlated],
            ModeArg::Random => &[Mode::Random],
            ModeArg::Both => &[Mode::Correlated, Mode::Random],
            ModeArg::Zones => &[Mode::Zones],
            ModeArg::Quota => &[Mode::Quota],
            ModeArg::All => &[Mode::Correlated, Mode::Random, Mode::Zones, Mode::Quota],
        };
        modes
            .iter()
            .map(|&mode| Scenario {
                seed: self.seed,
                resources: self.resources,
                controllers: self.controllers,
                api_limit: self.api_limit,
                outage: self.outage,
                after: self.after,
                failing: self.failing,
                ..Scenario::default_for(mode)
            })
            .collect()
    }
}

/// Where the plot of one of several modes goes: `sim.svg` → `sim-random.svg`.
fn plot_path(base: &std::path::Path, mode: Mode, several: bool) -> std::path::PathBuf {
    if !several {
        return base.to_path_buf();
    }
    let stem = base
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("simulate");
    let ext = base.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    base.with_file_name(format!("{stem}-{}.{ext}", mode.label()))
}

/// `remedy simulate`: the tables, one per mode (and the plots).
pub fn run(args: &SimArgs) -> Result<String, SimError> {
    let mut out = String::new();
    let remedy = args.remedy()?;
    let scenarios: Vec<Scenario> = args
        .scenarios()
        .into_iter()
        .map(|s| Scenario {
            remedy: remedy.clone(),
            ..s
        })
        .collect();
    if let Some(path) = &args.config {
        let _ = writeln!(
            out,
            "remedy runs with breaker, budget and backoff from {}",
            path.display()
        );
        // The simulated provider fails only what it retries (brupop, CAPI
        // providers with failure fields): holding its healthy resources
        // would change nothing it models.
        if remedy
            .as_ref()
            .is_some_and(|r| r.core.breaker.hold == crate::config::BreakerHold::Domain)
        {
            out.push_str(
                "breaker.hold: domain is simulated as `failing`: the simulated controller makes no calls for healthy resources\n",
            );
        }
    }
    for (i, s) in scenarios.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let reports = crate::sim::run(s)?;
        out.push_str(&table(s, &reports));
        if let Some(base) = &args.plot {
            let path = plot_path(base, s.mode, scenarios.len() > 1);
            let err = |message: String| SimError::Plot {
                path: path.display().to_string(),
                message,
            };
            let title = format!(
                "{} outage of {}, {} resources, API limit {}/s (seed {})",
                s.mode.label(),
                humantime::format_duration(s.outage),
                s.resources,
                s.api_limit,
                s.seed
            );
            let svg = plot::svg(&title, s.outage.as_secs(), &series(s, &reports))
                .map_err(|e| err(e.to_string()))?;
            std::fs::write(&path, svg).map_err(|e| err(e.to_string()))?;
            let _ = writeln!(out, "plot: {}", path.display());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tests::{by_name, reduced};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimArgs,
    }

    #[test]
    fn cli_arguments_map_to_scenarios() {
        let defaults = Cli::parse_from(["sim"]).args.scenarios();
        assert_eq!(
            defaults,
            vec![
                Scenario::default_for(Mode::Correlated),
                Scenario::default_for(Mode::Random)
            ]
        );
        let cli = Cli::parse_from([
            "sim",
            "--seed",
            "7",
            "--resources",
            "500",
            "--controllers",
            "5",
            "--outage",
            "10m",
            "--after",
            "2h",
            "--failing",
            "0.5",
            "--mode",
            "random",
        ]);
        let s = cli.args.scenarios();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].mode, Mode::Random);
        assert_eq!(s[0].seed, 7);
        assert_eq!(s[0].resources, 500);
        assert_eq!(s[0].controllers, 5);
        assert_eq!(s[0].outage, Duration::from_secs(600));
        assert_eq!(s[0].after, Duration::from_secs(7200));
        assert_eq!(s[0].failing, 0.5);
        assert!(Cli::try_parse_from(["sim", "--mode", "sideways"]).is_err());
        assert!(Cli::try_parse_from(["sim", "--outage", "soon"]).is_err());
    }

    #[test]
    fn run_cli_prints_one_table_per_mode_and_reports_bad_input() {
        let mut args = Cli::parse_from(["sim", "--resources", "300", "--controllers", "3"]).args;
        args.after = Duration::from_secs(600);
        let out = super::run(&args).expect("valid");
        assert_eq!(out.matches("\nremedy ").count(), 2, "{out}");
        assert!(out.contains("mode correlated:") && out.contains("mode random:"));
        args.failing = 2.0;
        assert_eq!(super::run(&args).expect_err("invalid").label(), "invalid");
    }

    #[test]
    fn a_plot_is_written_per_mode_and_a_bad_path_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("remedy-sim-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cli = Cli::parse_from([
            "sim",
            "--resources",
            "200",
            "--controllers",
            "4",
            "--api-limit",
            "10",
            "--outage",
            "2m",
            "--after",
            "5m",
            "--mode",
            "both",
            "--plot",
            dir.join("p.svg").to_str().unwrap(),
        ]);
        let out = super::run(&cli.args).expect("runs");
        for mode in ["correlated", "random"] {
            let svg = std::fs::read_to_string(dir.join(format!("p-{mode}.svg"))).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("remedy"), "{mode}");
            assert!(out.contains(&format!("p-{mode}.svg")), "{out}");
        }
        let bad = Cli::parse_from([
            "sim",
            "--resources",
            "200",
            "--controllers",
            "4",
            "--mode",
            "random",
            "--plot",
            "/nonexistent/dir/p.svg",
        ]);
        let err = super::run(&bad.args).unwrap_err();
        assert_eq!(err.label(), "plot");
        assert!(err.to_string().contains("/nonexistent/dir/p.svg"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_daemon_config_file_drives_the_remedy_row() {
        let dir = std::env::temp_dir().join(format!("remedy-sim-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("remedy.yaml");
        // A budget of 1 release/s: 1,200 held resources take 20 minutes.
        std::fs::write(
            &file,
            "budget: {refill_per_second: 1, burst: 1}\n\
             backoff: {base: 1s, cap: 5m, jitter: 0, quiet_window: 1h}\n\
             breaker: {open_ratio: 0.3, close_ratio: 0.1, min_resources: 5, window: 10s, cooldown: 20s, \
             release: {probe_every: 2s, window: 2s, step: 2, min_success: 0.2}}\n",
        )
        .unwrap();
        let args = |config: &str| {
            Cli::parse_from([
                "sim",
                "--resources",
                "2000",
                "--controllers",
                "10",
                "--api-limit",
                "20",
                "--outage",
                "15m",
                "--after",
                "1h",
                "--mode",
                "correlated",
                "--config",
                config,
            ])
            .args
        };
        let a = args(file.to_str().unwrap());
        let params = a.remedy().unwrap().expect("from the file");
        assert_eq!(params.core.budget.refill_per_second, 1.0);
        assert_eq!(
            params.core.breaker.release.probe_every,
            Some(Duration::from_secs(2))
        );
        let out = super::run(&a).unwrap();
        assert!(
            out.starts_with("remedy runs with breaker, budget and backoff from"),
            "{out}"
        );
        let s = Scenario {
            remedy: Some(params),
            ..reduced(Mode::Correlated)
        };
        let slow = by_name(&crate::sim::run(&s).unwrap(), "remedy").clone();
        let fitted = by_name(
            &crate::sim::run(&reduced(Mode::Correlated)).unwrap(),
            "remedy",
        )
        .clone();
        let (slow_t, fitted_t) = (slow.t100_ms.unwrap_or(u64::MAX), fitted.t100_ms.unwrap());
        assert!(
            slow_t > 10 * fitted_t,
            "1/s budget {slow_t} ms vs fitted {fitted_t} ms"
        );
        let bad = super::run(&args("/nonexistent/remedy.yaml")).unwrap_err();
        assert_eq!(bad.label(), "config");
        std::fs::write(&file, "budget: {refill_per_second: -1}\n").unwrap();
        let bad = super::run(&args(file.to_str().unwrap())).unwrap_err();
        assert!(bad.to_string().contains("budget"), "{bad}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
