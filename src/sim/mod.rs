//! A deterministic fleet simulator comparing retry policies through a cloud
//! outage (issue "Cluster-wide throttling"). Pure: no I/O, no wall clock; a
//! run is a function of the scenario and its seed. See docs/simulation.md.

pub mod engine;
pub mod model;
pub mod plot;
pub mod policy;
pub mod remedy;

pub use engine::{PolicyReport, SERIES_STEP_MS, jain};
pub use model::{CallKind, Ms, Outcome, Resource};
pub use policy::Policy;
pub use remedy::{Remedy, RemedyParams};

use std::fmt::Write as _;
use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    #[error("simulation parameter `{field}`: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("plot {path}: {message}")]
    Plot { path: String, message: String },
    #[error("config {path}: {message}")]
    Config { path: String, message: String },
}

impl SimError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Invalid { .. } => "invalid",
            Self::Plot { .. } => "plot",
            Self::Config { .. } => "config",
        }
    }

    fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            message: message.into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One zone, a fixed subset of resources, fails every call.
    Correlated,
    /// Every call fails independently with probability `failing`.
    Random,
    /// `zones` zones: zone 0 is down for the whole outage, the others for
    /// its first sixth; `failing` of each zone's resources break at first.
    Zones,
    /// A 429 storm: `failing` of the resources break at first while the
    /// cloud's quota is cut in half for the outage; no call fails otherwise.
    Quota,
}

impl Mode {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Correlated => "correlated",
            Self::Random => "random",
            Self::Zones => "zones",
            Self::Quota => "quota",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub seed: u64,
    pub resources: u32,
    pub controllers: u32,
    /// Cloud API quota; calls above it in a given second get a 429.
    pub api_limit: u32,
    pub outage: Duration,
    /// Simulated time after the outage ends.
    pub after: Duration,
    /// Share of resources (correlated) or of calls (random) failing.
    pub failing: f64,
    pub mode: Mode,
    /// Periodic reconcile of every resource, evenly spread.
    pub resync: Duration,
    /// The outage breaks affected resources over this span from its start.
    pub detect_spread: Duration,
    /// Failure domains: resource `id` lives in zone `id % zones`.
    pub zones: u32,
    /// remedy's config sections (`breaker`, `budget`, `backoff`) from a
    /// daemon config file; `None`: [`RemedyParams::for_scenario`].
    pub remedy: Option<RemedyParams>,
}

impl Scenario {
    /// The default: 10,000 resources, 50 controllers, 100 calls/s,
    /// a 30 min outage failing 60%, then 4 h.
    pub fn default_for(mode: Mode) -> Self {
        Self {
            seed: 1,
            resources: 10_000,
            controllers: 50,
            api_limit: 100,
            outage: Duration::from_secs(30 * 60),
            after: Duration::from_secs(4 * 3600),
            failing: 0.6,
            mode,
            resync: Duration::from_secs(600),
            detect_spread: Duration::from_secs(60),
            zones: if mode == Mode::Zones { 2 } else { 1 },
            remedy: None,
        }
    }

    pub(crate) fn resync_ms(&self) -> Ms {
        self.resync.as_millis() as Ms
    }

    pub fn zone_of(&self, id: u32) -> u32 {
        id % self.zones.max(1)
    }

    /// Zones mode: when the zones other than zone 0 come back.
    pub(crate) fn zones_back_ms(&self) -> Ms {
        self.outage.as_millis() as Ms / 6
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if !(1..=5_000_000).contains(&self.resources) {
            return Err(SimError::invalid("resources", "must be within 1..=5000000"));
        }
        if self.controllers == 0 || self.controllers > self.resources {
            return Err(SimError::invalid(
                "controllers",
                "must be at least 1 and at most the number of resources",
            ));
        }
        if self.api_limit == 0 {
            return Err(SimError::invalid("api_limit", "must be at least 1"));
        }
        if !(self.failing.is_finite() && (0.0..=1.0).contains(&self.failing)) {
            return Err(SimError::invalid("failing", "must be within 0..=1"));
        }
        // Whole seconds: the report's per-second buckets start at the end
        // of the outage.
        for (field, d) in [("outage", self.outage), ("after", self.after)] {
            if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
                return Err(SimError::invalid(
                    field,
                    "must be a whole number of seconds, >= 1s",
                ));
            }
        }
        // The per-second call counter is a dense vector: bound its size.
        if self.outage + self.after > Duration::from_secs(31 * 24 * 3600) {
            return Err(SimError::invalid(
                "after",
                "outage + after must be at most 31 days",
            ));
        }
        if self.resync < Duration::from_secs(1) {
            return Err(SimError::invalid("resync", "must be at least 1s"));
        }
        if !(1..=64).contains(&self.zones) || self.zones > self.resources {
            return Err(SimError::invalid(
                "zones",
                "must be within 1..=64 and at most the number of resources",
            ));
        }
        if self.mode == Mode::Zones && self.zones < 2 {
            return Err(SimError::invalid("zones", "zones mode needs at least 2"));
        }
        Ok(())
    }
}

/// remedy's parameters: the config file's, or those fitted to the scenario.
fn remedy_params(s: &Scenario) -> RemedyParams {
    s.remedy
        .clone()
        .unwrap_or_else(|| RemedyParams::for_scenario(s))
}

/// All six policies, in table order; a zoned fleet adds remedy with one
/// breaker for the whole fleet, for comparison.
pub fn all(s: &Scenario) -> Vec<Box<dyn Policy>> {
    let mut all: Vec<Box<dyn Policy>> = vec![
        Box::new(policy::ClientGoDefault::new(s.controllers)),
        Box::new(policy::FullJitter),
        Box::new(policy::Brupop::default()),
        Box::new(policy::AwsStandardRetry::new(s.resources, s.controllers)),
        Box::new(policy::SreAdaptive::new(s.controllers)),
        Box::new(Remedy::new(remedy_params(s), s)),
    ];
    if s.zones > 1 {
        let one = remedy_params(s).one_breaker();
        all.push(Box::new(Remedy::new(one, s).named("remedy, one breaker")));
    }
    all
}

/// Runs every policy through the scenario.
pub fn run(s: &Scenario) -> Result<Vec<PolicyReport>, SimError> {
    run_with(s, |_, _| {})
}

/// Like [`run`], calling `each(index, report)` after every policy (the
/// bench uses it to time policies one by one).
pub fn run_with(
    s: &Scenario,
    mut each: impl FnMut(usize, &PolicyReport),
) -> Result<Vec<PolicyReport>, SimError> {
    s.validate()?;
    let fleet = engine::Fleet::new(s);
    let mut out = Vec::new();
    for (i, mut p) in all(s).into_iter().enumerate() {
        let r = engine::run_policy(s, &fleet, p.as_mut(), i as u64);
        each(i, &r);
        out.push(r);
    }
    Ok(out)
}

fn secs(ms: Option<Ms>) -> String {
    ms.map_or("never".into(), |ms| format!("{} s", ms.div_ceil(1000)))
}

/// The aligned table for one scenario.
pub fn table(s: &Scenario, reports: &[PolicyReport]) -> String {
    let headers = [
        "policy",
        "calls in outage",
        "of which retries",
        "above limit",
        "peak/s after",
        "failing at end",
        "99% after",
        "100% after",
        "Jain",
        "healthy delayed",
    ];
    let rows: Vec<[String; 10]> = reports
        .iter()
        .map(|r| {
            [
                r.policy.to_string(),
                r.calls_outage.to_string(),
                r.retries_outage.to_string(),
                r.above_limit.to_string(),
                r.peak_after.to_string(),
                r.failing_at_end.to_string(),
                secs(r.t99_ms),
                secs(r.t100_ms),
                r.jain.map_or("-".into(), |j| format!("{j:.3}")),
                format!("{}/{}", r.healthy_delayed, r.healthy),
            ]
        })
        .collect();
    let mut width = headers.map(str::len);
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "mode {}: {} resources, {} controllers, API limit {}/s, outage {} failing {:.0}%, then {}, seed {}",
        s.mode.label(),
        s.resources,
        s.controllers,
        s.api_limit,
        humantime::format_duration(s.outage),
        s.failing * 100.0,
        humantime::format_duration(s.after),
        s.seed,
    );
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(width).enumerate() {
            if i == 0 {
                let _ = write!(l, "{c:<w$}");
            } else {
                let _ = write!(l, "  {c:>w$}");
            }
        }
        l
    };
    let _ = writeln!(out, "{}", line(&headers.map(String::from)));
    let _ = writeln!(
        out,
        "{}",
        "-".repeat(width.iter().sum::<usize>() + 2 * (width.len() - 1))
    );
    for row in &rows {
        let _ = writeln!(out, "{}", line(row));
    }
    for r in reports.iter().filter(|r| !r.note.is_empty()) {
        let _ = writeln!(out, "  {}: {}", r.policy, r.note);
    }
    out
}

/// How much of the run a plot shows after the outage: the recovery, not
/// hours of quiet.
const PLOT_AFTER: Duration = Duration::from_secs(30 * 60);

/// The plot's series: each report from the outage's start to
/// [`PLOT_AFTER`] past its end.
pub fn series(s: &Scenario, reports: &[PolicyReport]) -> Vec<plot::Series> {
    let step = (SERIES_STEP_MS / 1000) as usize;
    let secs = (s.outage + s.after.min(PLOT_AFTER)).as_secs() as usize;
    let points = secs / step;
    reports
        .iter()
        .map(|r| plot::Series {
            policy: r.policy,
            step_secs: step as u32,
            calls_per_sec: (0..points)
                .map(|i| {
                    let calls = r.calls_per_second.iter().skip(i * step).take(step);
                    calls.map(|c| f64::from(*c)).sum::<f64>() / step as f64
                })
                .collect(),
            failing: r
                .failing_series
                .iter()
                .skip(1)
                .take(points)
                .copied()
                .collect(),
            held: r.held_series.iter().skip(1).take(points).copied().collect(),
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
