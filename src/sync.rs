//! Locks whose poisoning is fatal. A poisoned lock means a task panicked
//! while changing shared state: the state may be half-written, so carrying
//! on (or quietly returning nothing, as `lock().ok()` would) could act on
//! it. The process exits with the cause and Kubernetes restarts it.
//!
//! The one rule for every std lock of the crate: take it with
//! [`LockExt::locked`], [`RwLockExt::read_locked`] or
//! [`RwLockExt::write_locked`]. scripts/check-layers.py fails on production
//! code that handles a lock's result itself (`PoisonError::into_inner`,
//! `.ok()`, `.unwrap()`).

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Exit code of a process that found shared state poisoned.
pub const POISONED_EXIT: i32 = 70;

pub trait LockExt<T> {
    /// The guard; exits the process if another thread panicked holding it.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|_| poisoned::<T>())
    }
}

pub trait RwLockExt<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|_| poisoned::<T>())
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|_| poisoned::<T>())
    }
}

fn poisoned<T>() -> ! {
    let type_name = std::any::type_name::<T>();
    tracing::error!(
        type_name,
        "a lock was poisoned by a panicking task: exiting, the state may be half-written"
    );
    eprintln!("remedy: fatal: lock on {type_name} poisoned by a panicking task");
    std::process::exit(POISONED_EXIT)
}
