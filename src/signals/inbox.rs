//! The webhook's side of the episode record: notifications accepted by any
//! replica are appended to the record before Alertmanager gets its 200, so
//! a notification is either in the record or retried by Alertmanager.
//! Concurrent deliveries are batched into one write, and writes are spaced
//! by `min_interval`, so a burst of deliveries costs a few writes a second.

use crate::model::scope::{AlertRules, Scope};
use crate::record::configmap::RecordApi;
use crate::record::{Notice, Record, RecordError};
use crate::signals::{AlertEvent, AlertStatus};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Conflicting writes (another replica, the leader) retried at once.
const MAX_CONFLICTS: u32 = 8;
/// Deliveries waiting for a write; beyond it the webhook answers 503.
const QUEUE: usize = 1024;
/// The longest a delivery waits for its write before answering 503.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

struct Submission {
    entries: Vec<Notice>,
    done: oneshot::Sender<Result<(), RecordError>>,
}

#[derive(Clone)]
pub struct Inbox {
    alerts: AlertRules,
    tx: mpsc::Sender<Submission>,
}

impl Inbox {
    /// Starts the writer task.
    pub fn start(
        api: Arc<RecordApi>,
        alerts: AlertRules,
        min_interval: Duration,
        tasks: &mut crate::supervise::Tasks,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tasks.add("episode record writer", run(api, rx, min_interval));
        Self { alerts, tx }
    }

    /// Makes `events` durable; `Ok` once they are in the record.
    pub async fn submit(&self, events: &[AlertEvent]) -> Result<(), RecordError> {
        let entries: Vec<Notice> = events
            .iter()
            .filter_map(|ev| {
                let rule = self.alerts.get(&ev.alertname)?;
                let scope = Scope::from_alert(rule, &ev.labels);
                // It could select no object; the leader would refuse it
                // (counted there as invalid_scope), so it takes no room.
                // The webhook refuses such alerts before (counted
                // `unselectable`): this only keeps any other caller's out.
                if !scope.is_selectable() {
                    tracing::warn!(alert = %ev.alertname, "alert label value longer than any object name: not recorded");
                    return None;
                }
                // Its times tell the leader a delayed retry of an alert
                // that has resolved from a new firing.
                Some(Notice::new(
                    scope,
                    ev.status == AlertStatus::Firing,
                    ev.received_at,
                    Some(ev.starts_at),
                    ev.ends_at,
                ))
            })
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        let (done, answer) = oneshot::channel();
        self.tx
            .try_send(Submission { entries, done })
            .map_err(|_| RecordError::Full)?;
        match tokio::time::timeout(WRITE_TIMEOUT, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RecordError::Closed),
            Err(_) => Err(RecordError::Timeout(WRITE_TIMEOUT)),
        }
    }
}

async fn run(api: Arc<RecordApi>, mut rx: mpsc::Receiver<Submission>, min_interval: Duration) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let results = append(&api, &batch).await;
        for (s, r) in batch.into_iter().zip(results) {
            // The delivery may have timed out and gone: nothing to tell.
            let _ = s.done.send(r);
        }
        tokio::time::sleep(min_interval).await;
    }
}

/// Appends each submission (all of it or none) in one write; on a conflict
/// reads and redoes. Returns one result per submission.
async fn append(api: &RecordApi, batch: &[Submission]) -> Vec<Result<(), RecordError>> {
    let mut conflicts = 0;
    loop {
        let read = match api.read().await {
            Ok(r) => r,
            Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
        };
        let (mut record, rv) = match read {
            Some(f) => (f.record, Some(f.rv)),
            None => (Record::empty(), None),
        };
        let results: Vec<Result<usize, RecordError>> =
            batch.iter().map(|s| record.append(&s.entries)).collect();
        if results.iter().all(|r| matches!(r, Ok(0) | Err(_))) {
            // Nothing new to write (all duplicates or refused).
            return results.into_iter().map(|r| r.map(|_| ())).collect();
        }
        match api
            .write(
                crate::metrics::values::RecordWriter::Webhook,
                &record,
                rv.as_deref(),
            )
            .await
        {
            Ok(Some(_)) => return results.into_iter().map(|r| r.map(|_| ())).collect(),
            Ok(None) => {
                conflicts += 1;
                if conflicts >= MAX_CONFLICTS {
                    return batch
                        .iter()
                        .map(|_| Err(RecordError::Conflict(conflicts)))
                        .collect();
                }
            }
            Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}
