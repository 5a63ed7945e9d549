//! Locks whose poisoning is fatal. A poisoned lock means a task panicked
//! while changing shared state: the state may be half-written, so carrying
//! on (or quietly returning nothing, as `lock().ok()` would) could act on
//! it. The process exits with the cause and Kubernetes restarts it.

use std::sync::{Mutex, MutexGuard};

/// Exit code of a process that found shared state poisoned.
pub const POISONED_EXIT: i32 = 70;

pub trait LockExt<T> {
    /// The guard; exits the process if another thread panicked holding it.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        match self.lock() {
            Ok(g) => g,
            Err(_) => {
                tracing::error!(
                    type_name = std::any::type_name::<T>(),
                    "a lock was poisoned by a panicking task: exiting, the state may be half-written"
                );
                eprintln!(
                    "remedy: fatal: lock on {} poisoned by a panicking task",
                    std::any::type_name::<T>()
                );
                std::process::exit(POISONED_EXIT)
            }
        }
    }
}
