//! Long-lived tasks (watches, the engine and its workers, leader election,
//! the episode-record writer, reload loops) are owned here rather than
//! detached: if one returns or panics, the process says which and why, and
//! exits non-zero so Kubernetes restarts it. A detached task that died would
//! leave a process that looks alive and does nothing.

use futures::FutureExt;
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
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

type Supervised = Pin<Box<dyn Future<Output = Ended> + Send>>;

/// Long-lived tasks built but not started: `App::build` collects them,
/// `App::run` starts them all under one [`Supervisor`]. Nothing runs
/// before that, so a build that fails half-way leaves nothing behind.
#[derive(Default)]
pub struct Tasks {
    tasks: Vec<(String, Supervised)>,
}

impl Tasks {
    pub fn add<F>(&mut self, task: impl Into<String>, f: F)
    where
        F: Future + Send + 'static,
        F::Output: Exit,
    {
        let task = task.into();
        self.tasks
            .push((task.clone(), Box::pin(supervised(task, f))));
    }

    /// The names of the tasks, in the order they were added.
    #[cfg(test)]
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tasks.iter().map(|(n, _)| n.as_str())
    }
}

/// `f` with the reason it ended: its output, or the panic's message.
async fn supervised<F>(task: String, f: F) -> Ended
where
    F: Future,
    F::Output: Exit,
{
    let cause = match AssertUnwindSafe(f).catch_unwind().await {
        Ok(out) => out.cause(),
        Err(p) => format!("panicked: {}", panic_message(p.as_ref())),
    };
    Ended { task, cause }
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
        self.set.spawn(supervised(task.into(), f));
    }

    /// Starts every task of `tasks`.
    pub fn start(&mut self, tasks: Tasks) {
        for (_, t) in tasks.tasks {
            self.set.spawn(t);
        }
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

    #[cfg(test)]
    fn len(&self) -> usize {
        self.set.len()
    }
}

/// The engine loop's pulse: /healthz fails when it stops. It measures that
/// the loop runs, not how fast its dependencies answer: before an await
/// that its own timeout bounds (a Prometheus query, an apiserver call), the
/// loop says so with [`Heartbeat::waiting`], and counts as running until
/// that bound has passed too. A slow Prometheus thus never fails /healthz
/// (a restart would only lose the breakers' state); a loop stuck anywhere
/// else, or past a bound, does.
pub struct Heartbeat {
    origin: Instant,
    last_ms: std::sync::atomic::AtomicU64,
    /// Milliseconds since `origin` after which the loop counts as stalled.
    deadline_ms: std::sync::atomic::AtomicU64,
    limit: Duration,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Heartbeat {
    /// Stalled after `limit` without a beat (or a wait's bound beyond it).
    pub fn new(limit: Duration) -> Self {
        Self {
            origin: Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
            deadline_ms: std::sync::atomic::AtomicU64::new(millis(limit)),
            limit,
        }
    }

    pub fn beat(&self) {
        self.beat_with(Duration::ZERO);
    }

    /// The loop is about to wait on a dependency for at most `bound`: it is
    /// running until then, plus the usual limit. The next beat ends it.
    pub fn waiting(&self, bound: Duration) {
        self.beat_with(bound);
    }

    fn beat_with(&self, bound: Duration) {
        let now = self.origin.elapsed();
        let ordering = std::sync::atomic::Ordering::Relaxed;
        self.last_ms.store(millis(now), ordering);
        self.deadline_ms
            .store(millis(now + self.limit + bound), ordering);
    }

    /// Time since the last beat.
    pub fn since(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    /// `Err(why)` once the loop has gone past its limit (and the bound of
    /// the wait it announced) without a beat.
    pub fn check(&self) -> Result<(), String> {
        let deadline =
            Duration::from_millis(self.deadline_ms.load(std::sync::atomic::Ordering::Relaxed));
        if self.origin.elapsed() > deadline {
            Err(format!(
                "engine stalled: no tick for {:.1} s (limit {:.1} s, plus the bound of any wait it announced)",
                self.since().as_secs_f64(),
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

    #[tokio::test]
    async fn built_tasks_run_only_once_started_and_are_supervised_alike() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let ran = Arc::new(AtomicBool::new(false));
        let mut tasks = Tasks::default();
        let flag = ran.clone();
        tasks.add("marks", async move {
            flag.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        });
        tasks.add("boom", boom());
        assert_eq!(tasks.names().collect::<Vec<_>>(), ["marks", "boom"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!ran.load(Ordering::SeqCst), "built, not started");
        let mut s = Supervisor::default();
        s.start(tasks);
        let end = s.next_end().await;
        assert_eq!(end.task, "boom");
        assert_eq!(end.cause, "panicked: engine exploded");
        assert!(ran.load(Ordering::SeqCst));
        assert_eq!(s.len(), 1);
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

    #[test]
    fn an_announced_wait_is_running_until_its_bound_and_no_longer() {
        let h = Heartbeat::new(Duration::from_millis(50));
        h.waiting(Duration::from_millis(100));
        std::thread::sleep(Duration::from_millis(80));
        assert!(h.check().is_ok(), "inside the wait's bound");
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            h.check().is_err_and(|e| e.contains("engine stalled")),
            "past the bound and the limit"
        );
        // A beat after the wait brings back the plain limit.
        h.waiting(Duration::from_secs(60));
        h.beat();
        std::thread::sleep(Duration::from_millis(80));
        assert!(h.check().is_err());
    }
}
