//! Long-lived tasks (watches, the engine and its workers, leader election,
//! the episode-record writer, reload loops) are owned here rather than
//! detached: if one returns or panics, the process says which and why, and
//! exits non-zero so Kubernetes restarts it. A detached task that died would
//! leave a process that looks alive and does nothing.

use futures::FutureExt;
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// A supervised task that ended, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub task: String,
    pub cause: String,
}

/// What a task's output says about why it ended.
pub trait Exit {
    fn cause(self) -> String;
}

impl Exit for () {
    fn cause(self) -> String {
        "returned".into()
    }
}

/// A task that never ends on its own returns why it had to.
impl Exit for String {
    fn cause(self) -> String {
        self
    }
}

#[derive(Default)]
pub struct Supervisor {
    set: JoinSet<Ended>,
}

pub fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

impl Supervisor {
    pub fn spawn<F>(&mut self, task: impl Into<String>, f: F)
    where
        F: Future + Send + 'static,
        F::Output: Exit,
    {
        let task = task.into();
        self.set.spawn(async move {
            let cause = match AssertUnwindSafe(f).catch_unwind().await {
                Ok(out) => out.cause(),
                Err(p) => format!("panicked: {}", panic_message(p.as_ref())),
            };
            Ended { task, cause }
        });
    }

    /// The next task to end; never resolves while none is supervised.
    pub async fn next_end(&mut self) -> Ended {
        match self.set.join_next().await {
            Some(Ok(ended)) => ended,
            // The wrapper catches panics, so only an abort lands here.
            Some(Err(e)) => Ended {
                task: "unknown".into(),
                cause: e.to_string(),
            },
            None => std::future::pending().await,
        }
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

/// The engine loop's pulse: /healthz fails when it stops.
pub struct Heartbeat {
    origin: Instant,
    last_ms: std::sync::atomic::AtomicU64,
    limit: Duration,
}

impl Heartbeat {
    /// Stalled after `limit` without a beat.
    pub fn new(limit: Duration) -> Self {
        Self {
            origin: Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
            limit,
        }
    }

    pub fn beat(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Time since the last beat.
    pub fn since(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    /// `Err(why)` once the loop has not beaten within its limit.
    pub fn check(&self) -> Result<(), String> {
        let since = self.since();
        if since > self.limit {
            Err(format!(
                "engine stalled: no tick for {:.1} s (limit {:.1} s)",
                since.as_secs_f64(),
                self.limit.as_secs_f64()
            ))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn boom() {
        panic!("engine exploded");
    }

    #[tokio::test]
    async fn a_task_that_returns_or_panics_is_reported_with_its_name_and_cause() {
        let mut s = Supervisor::default();
        s.spawn("forever", std::future::pending::<()>());
        s.spawn("quits", async {});
        let first = s.next_end().await;
        assert_eq!(
            first,
            Ended {
                task: "quits".into(),
                cause: "returned".into()
            }
        );
        s.spawn("boom", boom());
        let second = s.next_end().await;
        assert_eq!(second.task, "boom");
        assert_eq!(second.cause, "panicked: engine exploded");
        s.spawn("says why", async { String::from("a worker ended") });
        assert_eq!(s.next_end().await.cause, "a worker ended");
        assert_eq!(s.len(), 1, "the pending one is still supervised");
    }

    #[test]
    fn the_heartbeat_fails_once_its_limit_passes_without_a_beat() {
        let h = Heartbeat::new(Duration::from_millis(50));
        h.beat();
        assert!(h.check().is_ok());
        std::thread::sleep(Duration::from_millis(80));
        assert!(h.check().is_err_and(|e| e.contains("engine stalled")));
        h.beat();
        assert!(h.check().is_ok());
    }
}
