//! The signal edge (`signals`): Alertmanager's notifications, the queries
//! to Prometheus and Alertmanager, refused episodes and the webhook token.

use super::labels::{EpisodeLabels, ReloadLabels, SignalLabels, WebhookLabels};
use super::values::{self, Reload, SignalResult, SignalTarget, WebhookResult, WebhookStatus};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The webhook's and the verifier's families.
pub struct SignalMetrics {
    pub notifications: Family<WebhookLabels, Counter>,
    pub queries: Family<SignalLabels, Counter>,
    pub episodes_refused: Family<EpisodeLabels, Counter>,
    pub token_reloads: Family<ReloadLabels, Counter>,
    pub token_rereads: Counter,
}

impl SignalMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            notifications: Family::default(),
            queries: Family::default(),
            episodes_refused: Family::default(),
            token_reloads: Family::default(),
            token_rereads: Counter::default(),
        };
        r.register(
            "remedy_webhook_notifications",
            "Alertmanager notifications received, by alert status and result",
            m.notifications.clone(),
        );
        r.register(
            "remedy_signal_queries",
            "Queries to Prometheus/Alertmanager, by result",
            m.queries.clone(),
        );
        r.register(
            "remedy_episodes_refused",
            "Alert notifications or episodes remedy refused to act on, by alert and reason",
            m.episodes_refused.clone(),
        );
        r.register(
            "remedy_webhook_token_reloads",
            "Re-reads of the webhook token file that loaded a new token (reloaded) or failed (error)",
            m.token_reloads.clone(),
        );
        r.register(
            "remedy_webhook_token_rereads",
            "Reads of the webhook token file caused by a request with an unknown token (at most one a second)",
            m.token_rereads.clone(),
        );
        m
    }

    /// One notification by alert status and result.
    pub fn notification(&self, status: WebhookStatus, result: WebhookResult) {
        self.notifications
            .get_or_create(&WebhookLabels { status, result })
            .inc();
    }

    /// One query to Prometheus or Alertmanager by result.
    pub fn query(&self, target: SignalTarget, result: SignalResult) {
        self.queries
            .get_or_create(&SignalLabels { target, result })
            .inc();
    }

    /// The webhook's notifications and token reloads (when it runs), every
    /// signal source's queries and every alert's refusals at 0 (with those
    /// of alerts not configured, `other`).
    pub(super) fn preset(&self, webhook: bool, targets: &[SignalTarget], alerts: &[String]) {
        if webhook {
            for &status in WebhookStatus::ALL {
                for &result in WebhookResult::ALL {
                    self.notifications
                        .get_or_create(&WebhookLabels { status, result })
                        .inc_by(0);
                }
            }
            // The token file is reloaded only when the webhook has one.
            for &result in Reload::ALL {
                self.token_reloads
                    .get_or_create(&ReloadLabels { result })
                    .inc_by(0);
            }
        }
        for &target in targets {
            for &result in SignalResult::ALL {
                self.queries
                    .get_or_create(&SignalLabels { target, result })
                    .inc_by(0);
            }
        }
        let other = values::OTHER_ALERT.to_string();
        for alert in alerts.iter().chain([&other]) {
            for &reason in values::REFUSALS {
                self.episodes_refused
                    .get_or_create(&EpisodeLabels {
                        alert: alert.clone(),
                        reason,
                    })
                    .inc_by(0);
            }
        }
    }
}
