//! The process as a whole: leading, ready, and the pause switch.

use super::labels::PauseReadLabels;
use super::values::PauseRead;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The process's families.
pub struct ProcessMetrics {
    pub leader: Gauge,
    pub ready: Gauge,
    pub paused: Gauge,
    pub pause_reads: Family<PauseReadLabels, Counter>,
}

impl ProcessMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            leader: Gauge::default(),
            ready: Gauge::default(),
            paused: Gauge::default(),
            pause_reads: Family::default(),
        };
        r.register(
            "remedy_leader",
            "1 while this instance holds the leader lease",
            m.leader.clone(),
        );
        r.register(
            "remedy_ready",
            "1 while /readyz answers 200",
            m.ready.clone(),
        );
        r.register(
            "remedy_paused",
            "1 while the pause switch is set: remedy writes nothing to the resources it watches",
            m.paused.clone(),
        );
        r.register(
            "remedy_pause_switch_reads",
            "Reads of the pause switch ConfigMap, by what it said (set, clear, absent, invalid: treated as set) or error",
            m.pause_reads.clone(),
        );
        m
    }

    /// The pause switch's reads at 0 when it is read (at every tick).
    pub(super) fn preset(&self, pause_switch: bool) {
        if pause_switch {
            for &result in PauseRead::ALL {
                self.pause_reads
                    .get_or_create(&PauseReadLabels { result })
                    .inc_by(0);
            }
        }
    }
}
