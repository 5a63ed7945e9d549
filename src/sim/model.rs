//! What the simulator's parts share: time, calls, outcomes and resources.
//! The event engine and the policies both depend on this, not on each other.

/// Simulated milliseconds since the outage started.
pub type Ms = u64;

/// Why a resource calls the cloud.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// The periodic resync (a fresh reconcile, a "first attempt").
    Resync,
    /// A retry scheduled by the policy (or a release by remedy).
    Retry,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// The outage failed the call.
    Failed,
    /// Over the cloud API's per-second quota (a 429).
    Throttled,
    /// Refused client-side by the policy: no cloud call was made.
    Rejected,
    /// The outage broke the resource (an in-flight operation failed); no
    /// call of ours is involved.
    Broke,
}

impl Outcome {
    pub fn is_failure(self) -> bool {
        !matches!(self, Self::Success)
    }
}

#[derive(Clone, Debug)]
pub struct Resource {
    pub id: u32,
    pub controller: u32,
    /// The cloud resource is failed; one successful call repairs it.
    pub broken: bool,
    /// Healthy, but its last reconcile was throttled or refused: it needs a
    /// retry (and it was delayed by the policy or the quota).
    pub pending: bool,
    /// Consecutive failed attempts (the crash count).
    pub failures: u32,
    /// An in-flight operation failed and the controller set the failure
    /// status (CAPI's failureReason): a CAPI provider skips it until
    /// someone clears it.
    pub failed_status: bool,
    /// Paused (by remedy): its controller skips it.
    pub paused: bool,
    /// Its last failed call was a 429 (its status says "throttled").
    pub throttled: bool,
    /// The zone it lives in (`Scenario::zones`).
    pub zone: u32,
    pub(crate) retry_at: Option<Ms>,
    pub(crate) retry_gen: u32,
}

impl Resource {
    pub fn needs_call(&self) -> bool {
        self.broken || self.pending
    }

    /// A resource of controller 0, broken iff it has failures.
    #[cfg(test)]
    pub(crate) fn test_new(id: u32, failures: u32) -> Self {
        Self {
            id,
            controller: 0,
            broken: failures > 0,
            pending: false,
            failures,
            failed_status: failures > 0,
            paused: false,
            throttled: false,
            zone: 0,
            retry_at: None,
            retry_gen: 0,
        }
    }

    pub(crate) fn new(id: u32, controller: u32, zone: u32) -> Self {
        Self {
            id,
            controller,
            broken: false,
            pending: false,
            failures: 0,
            failed_status: false,
            paused: false,
            throttled: false,
            zone,
            retry_at: None,
            retry_gen: 0,
        }
    }
}
