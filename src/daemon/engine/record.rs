//! The episode record (several replicas): the leader takes notifications
//! from it and writes its episodes back.

use super::Engine;
use crate::decide::episodes::Evidence;
use crate::decide::episodes::Refusal;
use crate::record::configmap::RecordApi;
use crate::sync::LockExt;
use std::sync::Arc;

/// The episode record and the name this replica writes it under.
/// The episode record and the identity this replica writes it as.
pub struct RecordLink {
    pub api: Arc<RecordApi>,
    pub identity: String,
}

impl Engine {
    /// Keeps alert episodes in the episode record (several replicas): the
    /// leader takes notifications from it and writes its episodes there.
    /// Set before `run`.
    /// Reads the episode record: a follower shows its episodes, a leader
    /// loads them once per term and takes the notifications any replica
    /// appended since.
    pub(super) async fn record_in(&self, leader: bool) {
        let Some(link) = self.deps.record.as_ref() else {
            return;
        };
        let Some(read) = self
            .apiserver("read the episode record", link.api.read())
            .await
        else {
            return;
        };
        if let Err(e) = &read {
            tracing::warn!(error = %e, label = e.label(), record = link.api.name(), "cannot read the episode record");
        }
        let mut forged = Vec::new();
        let up = {
            let mut st = self.state.locked();
            let up = st.record.read(leader, read);
            if let Some(mut book) = up.replace {
                if up.covered {
                    // Leading from what the record says: re-check all of it.
                    forged = book.distrust(&self.settings.alerts);
                }
                st.episodes = book;
            }
            if up.covered {
                tracing::info!(
                    episodes = st.episodes.len(),
                    "leading: alert episodes taken from the episode record, to be verified again"
                );
            }
            (up.covered, up.fold)
        };
        for scope in forged {
            self.refused(&scope.alertname, Refusal::InvalidScope);
            tracing::warn!(alert = %scope.alertname, ?scope, "episode record holds a scope the alert's selector cannot produce: dropped");
        }
        let (covered, fold) = up;
        if covered {
            self.with_schedule(|s| s.covered(leader));
        }
        for n in fold {
            // An alert no longer configured: its notification is dropped.
            if let Some(rule) = self.settings.alerts.get(&n.scope.alertname) {
                self.notify(
                    rule,
                    &n.scope,
                    n.firing,
                    n.at,
                    Evidence::Unproven(n.times()),
                );
            }
            {
                let mut st = self.state.locked();
                st.record.folded(n.seq);
            }
        }
    }

    /// The leader writes its episodes back when they or the inbox changed.
    pub(super) async fn record_out(&self, leader: bool) {
        let Some(link) = self.deps.record.as_ref() else {
            return;
        };
        if !leader {
            return;
        }
        let (next, shed) = {
            let mut st = self.state.locked();
            let st = &mut *st;
            // The record must stay writable whatever arrived: over its
            // bound, the least valuable episodes go, counted and logged.
            let shed = st.record.fit(&mut st.episodes, &link.identity);
            (st.record.to_write(&st.episodes, &link.identity), shed)
        };
        for (scope, why) in shed {
            self.metrics
                .record
                .shed
                .get_or_create(&crate::metrics::ShedLabels {
                    reason: why.label(),
                })
                .inc();
            tracing::warn!(alert = %scope.alertname, matchers = ?scope.matchers, reason = why.label(), "episode dropped to keep the episode record under its size bound");
        }
        let (record, rv) = match next {
            None => return,
            Some(Ok(w)) => w,
            Some(Err(e)) => {
                tracing::error!(error = %e, label = e.label(), "episode record not written");
                return;
            }
        };
        let Some(result) = self
            .apiserver(
                "write the episode record",
                link.api.write(
                    crate::metrics::values::RecordWriter::Leader,
                    &record,
                    rv.as_deref(),
                ),
            )
            .await
        else {
            return;
        };
        match &result {
            Ok(Some(_)) => tracing::debug!(
                episodes = record.episodes.len(),
                consumed = record.consumed,
                "episode record written"
            ),
            Ok(None) => {
                tracing::debug!("episode record changed since it was read; written next tick")
            }
            Err(e) => {
                tracing::warn!(error = %e, label = e.label(), "cannot write the episode record")
            }
        }
        {
            let mut st = self.state.locked();
            st.record.written(&result);
        }
    }
}
