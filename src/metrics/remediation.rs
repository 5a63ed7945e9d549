//! Cluster API external remediation (`daemon::remediation`): the requests
//! a MachineHealthCheck created, by phase.

use crate::model::remediation::Phase;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: Phase,
}

impl EncodeLabelValue for Phase {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

pub struct RemediationMetrics {
    pub requests: Family<PhaseLabels, Gauge>,
}

impl RemediationMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            requests: Family::default(),
        };
        r.register(
            "remedy_remediation_requests",
            "External remediation requests (RemedyRemediation, created by a MachineHealthCheck) by phase",
            m.requests.clone(),
        );
        m
    }

    /// Every phase's count, the ones not given at 0: the gauge is the
    /// whole picture of the last round.
    pub fn set(&self, counts: &std::collections::BTreeMap<&'static str, i64>) {
        for phase in Phase::ALL {
            let n = counts.get(phase.as_str()).copied().unwrap_or(0);
            self.requests.get_or_create(&PhaseLabels { phase }).set(n);
        }
    }

    /// Every phase at 0 (the feature is on only when the CRD is installed,
    /// but an empty gauge reads the same as no requests).
    pub(super) fn preset(&self) {
        self.set(&Default::default());
    }
}
