//! Actions carried out on resources (`daemon::execute`): how many, with
//! what result, and how long each took.

use super::labels::{ActionKindLabels, ActionLabels};
use super::values::{self, ActionResult};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// The executor's families.
pub struct ActionMetrics {
    pub taken: Family<ActionLabels, Counter>,
    pub duration: Family<ActionKindLabels, Histogram, fn() -> Histogram>,
}

impl ActionMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            taken: Family::default(),
            duration: Family::new_with_constructor(action_histogram),
        };
        r.register(
            "remedy_actions",
            "Actions taken, by result",
            m.taken.clone(),
        );
        r.register_with_unit(
            "remedy_action_duration",
            "Time to carry out an action, retries included",
            Unit::Seconds,
            m.duration.clone(),
        );
        m
    }

    /// One action with its result.
    pub fn count(&self, action: &'static str, result: ActionResult) {
        self.taken
            .get_or_create(&ActionLabels { action, result })
            .inc();
    }

    /// Every action with every result at 0.
    pub(super) fn preset(&self) {
        for &action in values::ACTIONS {
            for &result in ActionResult::ALL {
                self.taken
                    .get_or_create(&ActionLabels { action, result })
                    .inc_by(0);
            }
        }
    }
}

fn action_histogram() -> Histogram {
    // 5 ms .. ~41 s: a status patch is milliseconds, a 409 retry loop seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}
