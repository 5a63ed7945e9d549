//! The goals the tick planned, waiting for a worker: at most one per
//! resource, queued or running, handed out in the order they were offered
//! (decide's order: holds, then releases lowest crash count first with
//! domains taking turns).

use crate::model::view::ResourceKey;
use crate::remediate::step::Goal;
use crate::sync::LockExt;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use tokio::sync::Notify;

#[derive(Default)]
pub(super) struct Queue {
    /// Queued goals, first offered first.
    pub(super) queued: VecDeque<(ResourceKey, Goal)>,
    /// Keys with a goal queued (the same keys as `queued`, for lookups),
    /// and whether that goal is a note (`contains` is asked for every
    /// object every tick: no scan of the queue).
    pub(super) queued_keys: HashMap<ResourceKey, bool>,
    pub(super) running: HashSet<ResourceKey>,
}

/// Goals waiting for a worker, at most one per resource.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) goals: Mutex<Queue>,
    pub(super) notify: Notify,
}

impl Pending {
    /// Adds unless the resource already has a goal queued or running. A
    /// queued note gives way to any other goal (a release removes the note
    /// anyway): it never holds back a hold, release or remediation.
    pub(super) fn offer(&self, key: ResourceKey, goal: Goal) -> bool {
        let mut g = self.goals.locked();
        if g.running.contains(&key) {
            return false;
        }
        match g.queued_keys.get(&key) {
            Some(false) => return false,
            Some(true) if matches!(goal, Goal::Note(_)) => return false,
            Some(true) => {
                let Some(slot) = g.queued.iter_mut().find(|(k, _)| *k == key) else {
                    return false;
                };
                slot.1 = goal;
                g.queued_keys.insert(key, false);
                return true;
            }
            None => {}
        }
        g.queued_keys
            .insert(key.clone(), matches!(goal, Goal::Note(_)));
        g.queued.push_back((key, goal));
        drop(g);
        self.notify.notify_one();
        true
    }

    /// Whether the resource has a goal queued or running, a queued note
    /// aside (it gives way: `offer`).
    pub(super) fn contains(&self, key: &ResourceKey) -> bool {
        let g = self.goals.locked();
        g.running.contains(key) || g.queued_keys.get(key) == Some(&false)
    }

    /// The first queued goal, now running.
    pub(super) fn take(&self) -> Option<(ResourceKey, Goal)> {
        let mut g = self.goals.locked();
        let (key, goal) = g.queued.pop_front()?;
        g.queued_keys.remove(&key);
        g.running.insert(key.clone());
        Some((key, goal))
    }

    pub(super) fn finish(&self, key: &ResourceKey) {
        self.goals.locked().running.remove(key);
    }

    /// Drops queued (not running) goals that became unsafe (a new firing
    /// alert, an opened breaker); returns their keys.
    pub(super) fn cancel(
        &self,
        mut pred: impl FnMut(&ResourceKey, &Goal) -> bool,
    ) -> Vec<ResourceKey> {
        let mut g = self.goals.locked();
        let q = &mut *g;
        let mut dropped = Vec::new();
        q.queued.retain(|(k, goal)| {
            let drop = pred(k, goal);
            if drop {
                dropped.push(k.clone());
            }
            !drop
        });
        for k in &dropped {
            q.queued_keys.remove(k);
        }
        dropped
    }

    pub(super) fn len(&self) -> usize {
        let g = self.goals.locked();
        g.queued.len() + g.running.len()
    }

    pub(super) fn keys(&self) -> Vec<String> {
        let g = self.goals.locked();
        let mut running: Vec<String> = g.running.iter().map(|k| format!("{k} running")).collect();
        running.sort();
        g.queued
            .iter()
            .map(|(k, goal)| format!("{k} {}", goal.label()))
            .chain(running)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ResourceKey {
        ResourceKey::new("Machine", "ns", name)
    }

    #[test]
    fn goals_are_taken_in_the_order_offered_not_in_key_order() {
        let p = Pending::default();
        for name in ["m-c", "m-a", "m-b"] {
            assert!(p.offer(key(name), Goal::Release));
        }
        let order: Vec<String> = std::iter::from_fn(|| p.take())
            .map(|(k, _)| k.name.to_string())
            .collect();
        assert_eq!(order, ["m-c", "m-a", "m-b"]);
    }

    #[test]
    fn a_key_queued_or_running_is_refused_and_reported_as_contained() {
        let p = Pending::default();
        assert!(p.offer(key("a"), Goal::Release));
        assert!(!p.offer(key("a"), Goal::Remediate));
        assert!(p.contains(&key("a")));
        let (k, _) = p.take().expect("queued");
        assert!(p.contains(&k), "running counts");
        assert!(!p.offer(key("a"), Goal::Release));
        p.finish(&k);
        assert!(!p.contains(&k));
        assert!(p.offer(key("a"), Goal::Release));
    }

    #[test]
    fn a_queued_note_gives_way_to_any_other_goal() {
        let p = Pending::default();
        assert!(p.offer(key("a"), Goal::Note("waits".into())));
        assert!(!p.contains(&key("a")), "a note does not make it planned");
        assert!(!p.offer(key("a"), Goal::Note("other".into())));
        assert!(
            p.offer(key("a"), Goal::Release),
            "the release takes its place"
        );
        assert!(p.contains(&key("a")));
        assert_eq!(p.len(), 1);
        assert_eq!(p.take(), Some((key("a"), Goal::Release)));
        assert!(!p.offer(key("a"), Goal::Note("x".into())), "running");
    }

    #[test]
    fn cancel_returns_the_dropped_keys_and_frees_them() {
        let p = Pending::default();
        p.offer(key("a"), Goal::Release);
        p.offer(key("b"), Goal::Remediate);
        let dropped = p.cancel(|_, g| *g == Goal::Release);
        assert_eq!(dropped, vec![key("a")]);
        assert!(!p.contains(&key("a")));
        assert_eq!(p.len(), 1);
        assert!(p.offer(key("a"), Goal::Release));
    }
}
