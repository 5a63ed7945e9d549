//! Per-resource series (crash count, backoff delay, release estimate),
//! bounded by `max_resource_series`, kept in one map and written by hand.
//!
//! Not a prometheus-client `Collector`: its encoder costs ~500 ns a sample
//! (a dynamic write per token), ~100 ms a scrape at 100k resources
//! (`benches/load.rs`); these families are the only ones that grow with the
//! fleet. The text is the same as prometheus-client writes, which a test
//! checks (`resource_series_match_prometheus_client`).

use super::exposition::Format;
use crate::model::view::ResourceKey;
use crate::sync::RwLockExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::RwLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Longest resource name copied into [`ResourceValues`]; CAPI machine names
/// are ~30 bytes. Longer names are read through the key.
pub(super) const INLINE_NAME: usize = 47;

/// One resource's per-resource values, inline in the map with a copy of its
/// name: a scrape then reads one table in order instead of chasing a
/// pointer per series, which at 100k resources is 5x faster
/// (benches/load.rs). Namespace and kind are shared strings (`Store::key`).
#[derive(Debug)]
struct ResourceValues {
    crash_count: AtomicI64,
    /// f64 bits.
    backoff_seconds: AtomicU64,
    /// f64 bits; NaN: no estimate, no sample.
    release_eta_seconds: AtomicU64,
    /// 0: the name is not copied.
    name_len: u8,
    name: [u8; INLINE_NAME],
}

impl ResourceValues {
    fn new(name: &str) -> Self {
        let mut v = Self {
            crash_count: AtomicI64::new(0),
            backoff_seconds: AtomicU64::new(0),
            release_eta_seconds: AtomicU64::new(f64::NAN.to_bits()),
            name_len: 0,
            name: [0; INLINE_NAME],
        };
        if let (Some(dst), Ok(len)) = (v.name.get_mut(..name.len()), u8::try_from(name.len())) {
            dst.copy_from_slice(name.as_bytes());
            v.name_len = len;
        }
        v
    }

    fn name<'a>(&'a self, key: &'a ResourceKey) -> &'a str {
        match self.name_len {
            0 => &key.name,
            // A whole str was copied, so this is valid UTF-8.
            n => std::str::from_utf8(&self.name[..usize::from(n)]).unwrap_or(&key.name),
        }
    }

    fn set(&self, crash_count: i64, backoff_seconds: f64) {
        self.crash_count.store(crash_count, Ordering::Relaxed);
        self.backoff_seconds
            .store(backoff_seconds.to_bits(), Ordering::Relaxed);
    }
}

// Not `_crash_count`: a `_count` suffix is reserved for histograms and
// summaries, and `promtool check metrics` rejects it.
pub(super) const CRASHES: &str = "remedy_resource_crashes";
// prometheus-client appends a full stop to every help text; so do these.
pub(super) const CRASHES_HELP: &str = "Crash (failure) count of a failing resource.";
pub(super) const BACKOFF_DELAY: &str = "remedy_resource_backoff_delay_seconds";
pub(super) const BACKOFF_DELAY_HELP: &str = "Backoff delay for the resource's crash count: min(base*2^n, cap), or its controller's rule (brupop: 2^n+1 whole minutes).";
pub(super) const RELEASE_ETA: &str = "remedy_resource_release_eta_seconds";
pub(super) const RELEASE_ETA_HELP: &str = "Estimated seconds until a held resource is released at the current pace (its backoff, its place in line over the release rate); absent while its breaker is open or remedy is paused.";

/// OpenMetrics label value escaping (as prometheus-client does it).
fn push_label_value(out: &mut String, v: &str) {
    if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn push_labels(out: &mut String, family: &str, k: &ResourceKey, v: &ResourceValues) {
    out.push_str(family);
    out.push_str("{namespace=\"");
    push_label_value(out, &k.namespace);
    out.push_str("\",kind=\"");
    push_label_value(out, &k.kind);
    out.push_str("\",name=\"");
    push_label_value(out, v.name(k));
    out.push_str("\"} ");
}

fn push_f64(out: &mut String, v: f64) -> std::fmt::Result {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        // Debug keeps the ".0" of whole numbers, like prometheus-client.
        write!(out, "{v:?}")?;
    }
    Ok(())
}

/// The per-resource series of every failing resource remedy tracks.
pub struct ResourceSeries {
    /// Series not created because the bound was reached.
    pub dropped: Counter,
    max: usize,
    tracked: RwLock<HashMap<ResourceKey, ResourceValues>>,
}

impl ResourceSeries {
    pub(super) fn register(r: &mut Registry, max: usize) -> Self {
        let m = Self {
            dropped: Counter::default(),
            max,
            tracked: RwLock::default(),
        };
        r.register(
            "remedy_resource_series_dropped",
            "Per-resource series not created because max_resource_series was reached",
            m.dropped.clone(),
        );
        m
    }

    /// Sets the per-resource series, unless the bound is reached (then the
    /// drop is counted, so the truncation is visible).
    pub fn set(&self, key: &ResourceKey, crash_count: i64, backoff_seconds: f64) {
        // An update of a known series needs only the read lock, so it does
        // not wait for a scrape in progress.
        if let Some(v) = self.tracked.read_locked().get(key) {
            v.set(crash_count, backoff_seconds);
            return;
        }
        let mut tracked = self.tracked.write_locked();
        if !tracked.contains_key(key) && tracked.len() >= self.max {
            self.dropped.inc();
            return;
        }
        tracked
            .entry(key.clone())
            .or_insert_with(|| ResourceValues::new(&key.name))
            .set(crash_count, backoff_seconds);
    }

    /// Sets every tracked resource's release estimate (`None`: no sample).
    /// Only resources that already have series get one: the estimate never
    /// adds series past `max_resource_series`.
    pub fn set_release_etas(&self, eta: impl Fn(&ResourceKey) -> Option<f64>) {
        let tracked = self.tracked.read_locked();
        for (k, v) in tracked.iter() {
            let bits = eta(k)
                .filter(|s| s.is_finite())
                .unwrap_or(f64::NAN)
                .to_bits();
            v.release_eta_seconds.store(bits, Ordering::Relaxed);
        }
    }

    pub fn remove(&self, key: &ResourceKey) {
        // Called on every healthy update: the read lock answers "no series"
        // without waiting for a scrape in progress.
        let tracked = self.tracked.read_locked();
        if !tracked.contains_key(key) {
            return;
        }
        drop(tracked);
        self.tracked.write_locked().remove(key);
    }

    pub fn count(&self) -> usize {
        self.tracked.read_locked().len()
    }

    /// The per-resource families, written directly: prometheus-client's
    /// encoder costs ~500 ns a sample (a dynamic write per token), ~100 ms a
    /// scrape at 100k resources (benches/load.rs). Same text as it writes;
    /// `resource_series_match_prometheus_client` checks that.
    /// Sample lines are the same in both formats; 0.0.4 has no `# UNIT`.
    pub(super) fn encode(&self, out: &mut String, format: Format) -> std::fmt::Result {
        let series = self.tracked.read_locked();
        writeln!(out, "# HELP {CRASHES} {CRASHES_HELP}")?;
        writeln!(out, "# TYPE {CRASHES} gauge")?;
        for (k, v) in series.iter() {
            push_labels(out, CRASHES, k, v);
            writeln!(out, "{}", v.crash_count.load(Ordering::Relaxed))?;
        }
        writeln!(out, "# HELP {BACKOFF_DELAY} {BACKOFF_DELAY_HELP}")?;
        writeln!(out, "# TYPE {BACKOFF_DELAY} gauge")?;
        if format == Format::OpenMetrics {
            writeln!(out, "# UNIT {BACKOFF_DELAY} seconds")?;
        }
        for (k, v) in series.iter() {
            push_labels(out, BACKOFF_DELAY, k, v);
            push_f64(
                out,
                f64::from_bits(v.backoff_seconds.load(Ordering::Relaxed)),
            )?;
            out.push('\n');
        }
        writeln!(out, "# HELP {RELEASE_ETA} {RELEASE_ETA_HELP}")?;
        writeln!(out, "# TYPE {RELEASE_ETA} gauge")?;
        if format == Format::OpenMetrics {
            writeln!(out, "# UNIT {RELEASE_ETA} seconds")?;
        }
        for (k, v) in series.iter() {
            let eta = f64::from_bits(v.release_eta_seconds.load(Ordering::Relaxed));
            if eta.is_nan() {
                continue;
            }
            push_labels(out, RELEASE_ETA, k, v);
            push_f64(out, eta)?;
            out.push('\n');
        }
        Ok(())
    }
}
