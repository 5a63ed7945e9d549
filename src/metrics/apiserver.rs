//! The apiserver's 429s and the gate every request then waits behind
//! (`daemon::slowdown`).

use super::FGauge;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::{Registry, Unit};

/// The 429 gate's families.
pub struct ApiserverMetrics {
    pub throttled: Counter,
    pub backoff: FGauge,
}

impl ApiserverMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            throttled: Counter::default(),
            backoff: FGauge::default(),
        };
        r.register(
            "remedy_apiserver_throttled",
            "Apiserver answers 429 Too Many Requests; every request to it then waits behind one gate",
            m.throttled.clone(),
        );
        r.register_with_unit(
            "remedy_apiserver_backoff",
            "How long a request to the apiserver now waits after a 429",
            Unit::Seconds,
            m.backoff.clone(),
        );
        m
    }
}
