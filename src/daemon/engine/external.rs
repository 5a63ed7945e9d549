//! What external remediation (`daemon::remediation`) asks of the engine: the
//! engine's own breakers, alert episodes and budget, so that a
//! MachineHealthCheck's requests answer to the same outage and the same
//! budget as everything else remedy does, with no second copy of them.

use super::Engine;
use crate::model::domains::NONE;
use crate::model::view::ResourceKey;
use crate::remediate::step::Goal;
use crate::sync::LockExt;
use std::time::Duration;

/// An outage that covers an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Covered {
    /// Its failure domain's breaker is open (the domain's name).
    Breaker(String),
    /// A configured alert fires for a scope that selects it (the alert).
    Alert(String),
}

impl Engine {
    /// The outage that covers `key`, if any: its domain's breaker, as the
    /// engine derives the domain from the stored object, or from `zone`
    /// for an object remedy does not watch; then the firing alert episodes
    /// whose scope selects it.
    pub fn outage_for(&self, key: &ResourceKey, zone: Option<&str>) -> Option<Covered> {
        let entry = self.deps.store.get(key);
        let st = self.state.locked();
        let breakers = st.core.breakers();
        let domain = match &entry {
            Some(e) => breakers.slot_for(key, &e.view),
            None => breakers.slot_of(zone.filter(|z| !z.is_empty()).unwrap_or(NONE)),
        };
        if breakers.is_open(domain) {
            return Some(Covered::Breaker(domain.to_string()));
        }
        let e = entry?;
        st.episodes
            .map()
            .iter()
            .find(|(s, ep)| ep.firing && ep.fired && s.matches(key, &e.view))
            .map(|(s, _)| Covered::Alert(s.alertname.clone()))
    }

    /// `key`'s owner under `budget.per`, the owner's releases unanswered and
    /// its `max_in_flight`; `None` without `budget.per` or for an object
    /// remedy does not watch or whose owner it cannot name.
    pub fn owner_of(&self, key: &ResourceKey) -> Option<(String, usize, u32)> {
        let e = self.deps.store.get(key)?;
        let st = self.state.locked();
        let per = st.core.config().budget.per.as_ref()?;
        let name = per.of(key, &e.view)?;
        let in_flight = st.core.in_flight(&name);
        Some((name, in_flight, per.max_in_flight))
    }

    /// Budget tokens there are now (whole ones), and how long until the
    /// next if none.
    pub fn budget_now(&self) -> (usize, Duration) {
        let now = self.now();
        let st = self.state.locked();
        let tokens = st.core.tokens(now).max(0.0).floor() as usize;
        (tokens, st.core.time_until_token(now))
    }

    /// Takes up to `want` tokens from the budget; how many it took.
    pub fn take_budget(&self, want: usize) -> usize {
        let now = self.now();
        self.state.locked().core.take_tokens(now, want)
    }

    /// The crash count remedy keeps for `key`, 0 if it does not watch it.
    pub fn crash_count(&self, key: &ResourceKey) -> u32 {
        self.deps
            .store
            .get(key)
            .and_then(|e| e.view.crash_count)
            .unwrap_or(0)
    }

    /// What external remediation does with each Machine that has a
    /// request, as of its last round: `explain` shows it.
    pub fn set_external(&self, by_machine: std::collections::HashMap<ResourceKey, String>) {
        self.state.locked().external = by_machine;
    }

    /// Queues remedy's own remediation of `key` (clear what stops its
    /// controller), carried out by the engine's workers like any other.
    /// False if remedy does not watch it or a goal for it is under way.
    pub fn remediate(&self, key: &ResourceKey) -> bool {
        if self.deps.store.get(key).is_none() || self.settings.dry_run {
            return false;
        }
        self.pending.offer(key.clone(), Goal::Remediate)
    }
}
