//! The goals the tick planned, waiting for a worker: at most one per
//! resource, queued or running.

use crate::remediate::plan::Goal;
use crate::view::ResourceKey;
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Goals waiting for a worker, at most one per resource.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) goals: Mutex<(BTreeMap<ResourceKey, Goal>, HashSet<ResourceKey>)>,
    pub(super) notify: Notify,
}

impl Pending {
    /// Adds unless the resource already has a goal queued or running.
    pub(super) fn offer(&self, key: ResourceKey, goal: Goal) -> bool {
        let Ok(mut g) = self.goals.lock() else {
            return false;
        };
        if g.0.contains_key(&key) || g.1.contains(&key) {
            return false;
        }
        g.0.insert(key, goal);
        drop(g);
        self.notify.notify_one();
        true
    }

    pub(super) fn take(&self) -> Option<(ResourceKey, Goal)> {
        let mut g = self.goals.lock().ok()?;
        let key = g.0.keys().next()?.clone();
        let goal = g.0.remove(&key)?;
        g.1.insert(key.clone());
        Some((key, goal))
    }

    pub(super) fn finish(&self, key: &ResourceKey) {
        if let Ok(mut g) = self.goals.lock() {
            g.1.remove(key);
        }
    }

    /// Drops queued (not running) goals a new firing alert makes unsafe.
    pub(super) fn cancel(&self, mut pred: impl FnMut(&ResourceKey, &Goal) -> bool) -> usize {
        let Ok(mut g) = self.goals.lock() else {
            return 0;
        };
        let before = g.0.len();
        g.0.retain(|k, goal| !pred(k, goal));
        before - g.0.len()
    }

    pub(super) fn len(&self) -> usize {
        self.goals
            .lock()
            .map(|g| g.0.len() + g.1.len())
            .unwrap_or(0)
    }

    pub(super) fn keys(&self) -> Vec<String> {
        self.goals
            .lock()
            .map(|g| {
                g.0.iter()
                    .map(|(k, goal)| format!("{k} {}", goal.label()))
                    .chain(g.1.iter().map(|k| format!("{k} running")))
                    .collect()
            })
            .unwrap_or_default()
    }
}
