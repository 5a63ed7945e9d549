//! The listener (`daemon::server`, `daemon::tls`): connections, their
//! timeouts and the served certificate.

use super::labels::{ReloadLabels, TimeoutLabels};
use super::values::{HttpTimeout, Reload};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// The listener's families.
pub struct HttpMetrics {
    pub connections: Gauge,
    pub refused: Counter,
    pub timeouts: Family<TimeoutLabels, Counter>,
    pub tls_reloads: Family<ReloadLabels, Counter>,
    pub tls_expiry: Gauge,
    pub tls_not_before: Gauge,
}

impl HttpMetrics {
    pub(super) fn register(r: &mut Registry) -> Self {
        let m = Self {
            connections: Gauge::default(),
            refused: Counter::default(),
            timeouts: Family::default(),
            tls_reloads: Family::default(),
            tls_expiry: Gauge::default(),
            tls_not_before: Gauge::default(),
        };
        r.register(
            "remedy_http_connections",
            "Open connections to the listener",
            m.connections.clone(),
        );
        r.register(
            "remedy_http_connections_refused",
            "Connections closed at once because http.max_connections were open",
            m.refused.clone(),
        );
        r.register(
            "remedy_http_connection_timeouts",
            "Connections closed by a timeout: TLS handshake, request head (header) or no traffic (idle)",
            m.timeouts.clone(),
        );
        r.register(
            "remedy_tls_reloads",
            "Re-reads of the TLS certificate files that loaded a new pair (reloaded) or failed (error)",
            m.tls_reloads.clone(),
        );
        r.register_with_unit(
            "remedy_tls_certificate_expiry",
            "Unix time the served TLS certificate expires (0: plain HTTP)",
            Unit::Seconds,
            m.tls_expiry.clone(),
        );
        r.register_with_unit(
            "remedy_tls_certificate_not_before",
            "Unix time the served TLS certificate becomes valid (0: plain HTTP)",
            Unit::Seconds,
            m.tls_not_before.clone(),
        );
        m
    }

    /// Every timeout at 0 (the listener always runs), and the certificate
    /// reloads when TLS is on.
    pub(super) fn preset(&self, tls: bool) {
        for &timeout in HttpTimeout::ALL {
            self.timeouts
                .get_or_create(&TimeoutLabels { timeout })
                .inc_by(0);
        }
        if tls {
            for &result in Reload::ALL {
                self.tls_reloads
                    .get_or_create(&ReloadLabels { result })
                    .inc_by(0);
            }
        }
    }
}
