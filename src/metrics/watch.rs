//! The watches (`daemon::watch`): events by kind and type, and whether
//! each kind's initial list is in.

use super::labels::{KindLabels, WatchLabels};
use super::values::WatchEvent;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The watches' families.
pub struct WatchMetrics {
    pub events: Family<WatchLabels, Counter>,
    pub synced: Family<KindLabels, Gauge>,
}

impl WatchMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            events: Family::default(),
            synced: Family::default(),
        };
        r.register(
            "remedy_watch_events",
            "Kubernetes watch events, by kind and type",
            m.events.clone(),
        );
        r.register(
            "remedy_watch_synced",
            "1 once the initial list of the kind is synced",
            m.synced.clone(),
        );
        m
    }

    /// One watch event of `kind`.
    pub fn event(&self, kind: &str, r#type: WatchEvent) {
        self.events
            .get_or_create(&WatchLabels {
                kind: kind.to_string(),
                r#type,
            })
            .inc();
    }

    /// Every kind's event types at 0.
    pub(super) fn preset(&self, kinds: &[String]) {
        for kind in kinds {
            for &r#type in WatchEvent::ALL {
                self.events
                    .get_or_create(&WatchLabels {
                        kind: kind.clone(),
                        r#type,
                    })
                    .inc_by(0);
            }
        }
    }
}
