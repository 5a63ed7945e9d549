//! The two exposition formats remedy serves, chosen by the scrape's
//! `Accept` header.

use prometheus_client::encoding::prometheus_text;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Exposition format of a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus text 0.0.4: what `promtool check metrics`, older
    /// Prometheus and most other scrapers read.
    Text004,
}

impl Format {
    /// OpenMetrics when the `Accept` header accepts it (Prometheus asks for
    /// it first), text 0.0.4 otherwise (curl, promtool, other agents).
    pub fn negotiate(accept: Option<&str>) -> Self {
        let accepts_openmetrics = accept.unwrap_or("").split(',').any(|range| {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            media.eq_ignore_ascii_case("application/openmetrics-text")
                && !parts.any(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .and_then(|q| q.trim().parse::<f32>().ok())
                        == Some(0.0)
                })
        });
        if accepts_openmetrics {
            Self::OpenMetrics
        } else {
            Self::Text004
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => CONTENT_TYPE,
            Self::Text004 => prometheus_text::CONTENT_TYPE,
        }
    }
}
