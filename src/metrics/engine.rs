//! What the engine exports each tick: resources by state, their errors,
//! the breakers, the budget and what remedy holds and releases.

use super::FGauge;
use super::labels::{
    ErrorLabels, KindLabels, KindReasonLabels, KindResultLabels, KindStateLabels, ScopeLabels,
};
use super::values::OverwriteResult;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The engine's families (`daemon::engine`).
pub struct EngineMetrics {
    pub resources: Family<KindStateLabels, Gauge>,
    pub transient_errors: Family<ErrorLabels, Counter>,
    pub terminal_errors: Family<ErrorLabels, Counter>,
    pub transient_ratio: Family<KindLabels, FGauge>,
    pub breaker_open: Family<ScopeLabels, Gauge>,
    pub breaker_ratio: Family<ScopeLabels, FGauge>,
    pub breaker_failing: Family<ScopeLabels, Gauge>,
    pub release_pace: Family<ScopeLabels, FGauge>,
    pub budget_tokens: FGauge,
    pub held: Family<KindLabels, Gauge>,
    pub waiting: Family<KindReasonLabels, Gauge>,
    pub releases: Family<KindLabels, Counter>,
    pub resets_overwritten: Family<KindResultLabels, Counter>,
    pub pending_actions: Gauge,
}

impl EngineMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            resources: Family::default(),
            transient_errors: Family::default(),
            terminal_errors: Family::default(),
            transient_ratio: Family::default(),
            breaker_open: Family::default(),
            breaker_ratio: Family::default(),
            breaker_failing: Family::default(),
            release_pace: Family::default(),
            budget_tokens: FGauge::default(),
            held: Family::default(),
            waiting: Family::default(),
            releases: Family::default(),
            resets_overwritten: Family::default(),
            pending_actions: Gauge::default(),
        };
        r.register(
            "remedy_resources",
            "Watched resources by state",
            m.resources.clone(),
        );
        r.register(
            "remedy_transient_errors",
            "Transient failures observed (new failure or changed failure)",
            m.transient_errors.clone(),
        );
        r.register(
            "remedy_terminal_errors",
            "Terminal failures observed",
            m.terminal_errors.clone(),
        );
        r.register(
            "remedy_transient_error_ratio",
            "Share of watched resources of a kind currently in a transient failure",
            m.transient_ratio.clone(),
        );
        r.register(
            "remedy_outage_breaker_open",
            "1 while the outage breaker holds failing resources",
            m.breaker_open.clone(),
        );
        r.register(
            "remedy_outage_breaker_failing_ratio",
            "Share of a failure domain's watched resources failing transiently while not held, averaged over breaker.window: what its breaker opens on",
            m.breaker_ratio.clone(),
        );
        r.register(
            "remedy_outage_breaker_failing",
            "Resources of a failure domain failing transiently while not held, at the last tick: its breaker opens only with breaker.min_resources of them",
            m.breaker_failing.clone(),
        );
        r.register(
            "remedy_release_pace",
            "Releases per second a failure domain may make now: the budget's refill unless its adaptive pace is lower",
            m.release_pace.clone(),
        );
        r.register(
            "remedy_retry_budget_tokens",
            "Tokens left in the cluster-wide retry budget",
            m.budget_tokens.clone(),
        );
        r.register(
            "remedy_held_resources",
            "Resources remedy currently holds paused",
            m.held.clone(),
        );
        r.register(
            "remedy_waiting_resources",
            "Held resources waiting for release, by what they wait for",
            m.waiting.clone(),
        );
        r.register(
            "remedy_releases",
            "Held resources released",
            m.releases.clone(),
        );
        r.register(
            "remedy_resets_overwritten",
            "Resets remedy wrote that a stale write undid (the old crash count and failure time back), and what remedy did",
            m.resets_overwritten.clone(),
        );
        r.register(
            "remedy_pending_actions",
            "Actions planned and not yet carried out",
            m.pending_actions.clone(),
        );
        m
    }

    /// Every kind's releases and reset outcomes at 0.
    pub(super) fn preset(&self, kinds: &[String]) {
        for kind in kinds {
            self.releases
                .get_or_create(&KindLabels { kind: kind.clone() })
                .inc_by(0);
            for &result in OverwriteResult::ALL {
                self.resets_overwritten
                    .get_or_create(&KindResultLabels {
                        kind: kind.clone(),
                        result,
                    })
                    .inc_by(0);
            }
        }
    }
}
