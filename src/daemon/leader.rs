//! Leader election on a coordination.k8s.io Lease. Only the leader writes;
//! followers watch and export metrics. The flag is checked before every
//! write, so a leader that loses its lease stops mid-release and the new
//! leader carries on from what the objects themselves record.
//!
//! kube-lease-manager's `watch()` keeps its last state while the apiserver
//! cannot be reached (errors only log and back off), so its "leader" alone
//! would let a partitioned instance go on writing after another one took
//! the Lease. Leadership therefore also expires locally: it lasts only as
//! long as the last read of the Lease that showed us as holder allows
//! (renewal + lease duration − margin, see [`Claim`]), and `is_leader()`
//! compares that deadline with the monotonic clock when it is called, so it
//! expires even if no task gets to run.
//!
//! On shutdown the holder stops leading, then clears the Lease
//! ([`Leadership::release`]). kube-lease-manager's followers sleep until the
//! old holder's lease would expire, so a follower also reads the Lease every
//! `confirm_every` and, when it finds it vacant, restarts its lease manager,
//! which takes a free Lease at once: the successor leads within about a
//! second instead of a lease duration.

use crate::config::LeaderConfig;
use crate::metrics::Metrics;
use crate::sync::LockExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::MissedTickBehavior;

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("cannot set up the leader lease: {0}")]
    Lease(#[from] kube_lease_manager::LeaseManagerError),
}

impl LeaderError {
    pub fn label(&self) -> &'static str {
        "lease"
    }
}

/// A read of the Lease that could not confirm the claim. It changes nothing:
/// the deadline set by the last good read keeps running out.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    #[error("reading the Lease took longer than {0:?}")]
    Timeout(Duration),
    #[error("reading the Lease: {0}")]
    Api(#[from] kube::Error),
}

impl ConfirmError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Timeout(_) => "timeout",
            Self::Api(_) => "api",
        }
    }
}

/// Timings derived from the configured lease duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Lease duration in whole seconds, as the Lease stores it.
    pub lease_secs: u64,
    /// kube-lease-manager renews when this much of the lease is left.
    pub grace_secs: u64,
    /// How often the holder reads the Lease back.
    pub confirm_every: Duration,
    /// Taken off every confirmed deadline: covers clock skew against the
    /// other candidates (they compare their wall clock with our renewTime)
    /// and a write already on its way when the deadline passes.
    pub margin: Duration,
}

impl Timing {
    pub fn for_lease(lease_duration: Duration) -> Self {
        let lease_secs = lease_duration.as_secs().max(2);
        // Renew with two thirds of the lease left (client-go's 15 s / 10 s):
        // each renewal must be read back before the previous one's deadline,
        // which is the lease less the margin.
        let grace_secs = (lease_secs * 2).div_ceil(3).min(lease_secs - 1);
        let lease = Duration::from_secs(lease_secs);
        Self {
            lease_secs,
            grace_secs,
            confirm_every: lease / 10,
            margin: lease / 6,
        }
    }
}

/// What one read of the Lease showed about this instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// We hold it: renewed at `renewed` (wall clock, as the Lease records
    /// it) for `duration`.
    Ours {
        renewed: SystemTime,
        duration: Duration,
    },
    /// Someone else holds it, nobody does, or it names us without a renewal
    /// time (which other candidates treat as expired).
    Other { holder: Option<String> },
}

/// What the Lease says about `identity`. Pure, so it is tested without an
/// apiserver.
pub fn seen(lease: &Lease, identity: &str) -> Seen {
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.clone());
    if holder.as_deref() == Some(identity)
        && let Some(s) = spec
        && let (Some(renewed), Some(secs)) = (&s.renew_time, s.lease_duration_seconds)
        && let Ok(secs) = u64::try_from(secs)
        && secs > 0
    {
        return Seen::Ours {
            renewed: SystemTime::from(renewed.0),
            duration: Duration::from_secs(secs),
        };
    }
    Seen::Other { holder }
}

/// Whether the Lease may be taken at `now` (wall clock, as the Lease
/// protocol compares): nobody holds it, or its holder (us included) has not
/// renewed it within its duration. kube-lease-manager backs off up to 30 s
/// after errors and sleeps until a live holder's expiry, so after an
/// apiserver storm in which every renewal failed it may come back long
/// after the Lease lapsed (#38.16); a fresh manager takes such a Lease at
/// once. Pure.
pub fn takeable(lease: &Lease, now: SystemTime) -> bool {
    let Some(spec) = lease.spec.as_ref() else {
        return true;
    };
    if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
        return true;
    }
    match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(renewed), Some(secs)) => {
            let secs = u64::try_from(secs).unwrap_or(0);
            SystemTime::from(renewed.0) + Duration::from_secs(secs) < now
        }
        // Other candidates treat a Lease without a renewal as expired.
        _ => true,
    }
}

/// Why this instance does not lead right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// The lease manager does not hold the lease.
    NotElected,
    /// Elected, but no read has confirmed it yet.
    Unconfirmed,
    /// The last confirmation ran out; `unconfirmed_for` is the time since
    /// the read that gave it started.
    Expired { unconfirmed_for: Duration },
    /// The last read showed another holder, or none.
    NotOurs { holder: Option<String> },
}

impl Why {
    pub fn label(&self) -> &'static str {
        match self {
            Self::NotElected => "not_elected",
            Self::Unconfirmed => "unconfirmed",
            Self::Expired { .. } => "expired",
            Self::NotOurs { .. } => "not_ours",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Leader { left: Duration },
    Follower(Why),
}

impl Role {
    pub fn is_leader(&self) -> bool {
        matches!(self, Self::Leader { .. })
    }

    pub fn label(&self) -> &'static str {
        match self {
            Self::Leader { .. } => "leader",
            Self::Follower(w) => w.label(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Confirmation {
    None,
    Until {
        valid_until: Instant,
        /// Start of the read that confirmed it.
        confirmed_at: Instant,
    },
    NotOurs(Option<String>),
}

/// The decision, without I/O or a clock of its own: time comes in as
/// arguments, so tests drive it with made-up instants.
///
/// Leader only while the lease manager says so AND a read of the Lease
/// showed us as holder recently enough that no other candidate may have
/// taken it: until renewTime + leaseDuration − margin, converted to our
/// monotonic clock at the start of that read.
#[derive(Clone, Debug)]
pub struct Claim {
    margin: Duration,
    elected: bool,
    confirmation: Confirmation,
    last_error: Option<&'static str>,
}

impl Claim {
    pub fn new(margin: Duration) -> Self {
        Self {
            margin,
            elected: false,
            confirmation: Confirmation::None,
            last_error: None,
        }
    }

    pub fn elected(&self) -> bool {
        self.elected
    }

    /// The lease manager's view. A change either way needs a fresh
    /// confirmation: a read from before it says nothing about the new term.
    pub fn set_elected(&mut self, elected: bool) {
        if elected != self.elected {
            self.elected = elected;
            self.confirmation = Confirmation::None;
        }
    }

    /// A read that started at `started` (monotonic) / `started_wall` (wall
    /// clock, taken just after) showed `seen`.
    pub fn observe(&mut self, started: Instant, started_wall: SystemTime, seen: Seen) {
        if !self.elected {
            return;
        }
        self.last_error = None;
        self.confirmation = match seen {
            Seen::Ours { renewed, duration } => {
                // The Lease protocol compares wall clocks (others take over at
                // renewTime + duration on theirs), so the renewal's age is a
                // wall-clock difference; a renewal "in the future" (skew, or
                // written while we read) counts as now, never longer.
                let age = started_wall
                    .duration_since(renewed)
                    .unwrap_or(Duration::ZERO);
                let left = duration.saturating_sub(age).saturating_sub(self.margin);
                Confirmation::Until {
                    valid_until: started + left,
                    confirmed_at: started,
                }
            }
            Seen::Other { holder } => Confirmation::NotOurs(holder),
        };
    }

    /// A read failed: nothing is extended; kept only to say why in the logs.
    pub fn failed(&mut self, label: &'static str) {
        self.last_error = Some(label);
    }

    pub fn last_error(&self) -> Option<&'static str> {
        self.last_error
    }

    /// The deadline, while one is set and we are elected.
    pub fn valid_until(&self) -> Option<Instant> {
        match self.confirmation {
            Confirmation::Until { valid_until, .. } if self.elected => Some(valid_until),
            _ => None,
        }
    }

    pub fn role(&self, now: Instant) -> Role {
        if !self.elected {
            return Role::Follower(Why::NotElected);
        }
        match &self.confirmation {
            Confirmation::None => Role::Follower(Why::Unconfirmed),
            Confirmation::NotOurs(holder) => Role::Follower(Why::NotOurs {
                holder: holder.clone(),
            }),
            Confirmation::Until {
                valid_until,
                confirmed_at,
            } => match valid_until.checked_duration_since(now) {
                Some(left) if !left.is_zero() => Role::Leader { left },
                _ => Role::Follower(Why::Expired {
                    unconfirmed_for: now.saturating_duration_since(*confirmed_at),
                }),
            },
        }
    }
}

#[derive(Debug)]
enum Inner {
    /// Leader election disabled (always leads) or a fixed answer for tests
    /// and one-shot commands.
    Fixed(bool),
    Elected {
        claim: Mutex<Claim>,
        release: Mutex<Option<oneshot::Sender<ReleaseRequest>>>,
    },
}

/// Sent to the election task to release the Lease; it answers when done.
type ReleaseRequest = oneshot::Sender<()>;

/// Shared "am I the leader", checked right before every write.
#[derive(Clone, Debug)]
pub struct Leadership(Arc<Inner>);

impl Leadership {
    pub fn fixed(leader: bool) -> Self {
        Self(Arc::new(Inner::Fixed(leader)))
    }

    fn elected(margin: Duration, release: oneshot::Sender<ReleaseRequest>) -> Self {
        Self(Arc::new(Inner::Elected {
            claim: Mutex::new(Claim::new(margin)),
            release: Mutex::new(Some(release)),
        }))
    }

    /// Stops leading at once, then clears the Lease's holder so a
    /// successor need not wait out the lease (on SIGTERM). Gives up after
    /// `timeout`: the lease then expires as it would after a crash.
    pub async fn release(&self, timeout: Duration) {
        let Inner::Elected { claim, release } = &*self.0 else {
            return;
        };
        claim.locked().set_elected(false);
        let Some(tx) = release.locked().take() else {
            return;
        };
        let (done, released) = oneshot::channel();
        if tx.send(done).is_ok() && tokio::time::timeout(timeout, released).await.is_err() {
            tracing::warn!("lease not released within {timeout:?}; it expires on its own");
        }
    }

    /// Decided at call time against the monotonic clock: a write is refused
    /// the moment the deadline passes, whether or not any task ran since.
    pub fn is_leader(&self) -> bool {
        self.role(Instant::now()).is_leader()
    }

    pub fn role(&self, now: Instant) -> Role {
        match &*self.0 {
            Inner::Fixed(true) => Role::Leader {
                left: Duration::MAX,
            },
            Inner::Fixed(false) => Role::Follower(Why::NotElected),
            Inner::Elected { claim, .. } => claim.locked().role(now),
        }
    }

    fn with_claim<T>(&self, f: impl FnOnce(&mut Claim) -> T) -> Option<T> {
        match &*self.0 {
            Inner::Fixed(_) => None,
            Inner::Elected { claim, .. } => Some(f(&mut claim.locked())),
        }
    }
}

/// This instance's identity: the pod name when deployed, else host + pid.
pub fn identity() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "remedy".into());
        format!("{host}-{}", std::process::id())
    })
}

/// Starts the election; the returned flag follows the lease and expires on
/// its own when the hold cannot be confirmed.
pub async fn start(
    client: Client,
    cfg: &LeaderConfig,
    identity: String,
    metrics: Arc<Metrics>,
    tasks: &mut crate::supervise::Tasks,
) -> Result<Leadership, LeaderError> {
    if !cfg.enabled {
        metrics.process.leader.set(1);
        return Ok(Leadership::fixed(true));
    }
    metrics.process.leader.set(0);
    let timing = Timing::for_lease(cfg.lease_duration);
    let params = ManagerParams {
        client: client.clone(),
        lease_name: cfg.lease_name.clone(),
        namespace: cfg.namespace.clone(),
        identity: identity.clone(),
        timing,
    };
    // Built here first so a bad setup stops startup with the reason.
    let manager = params.build().await?;
    let (release_tx, release_rx) = oneshot::channel();
    let leadership = Leadership::elected(timing.margin, release_tx);
    let reader = LeaseReader {
        api: Api::namespaced(client, &cfg.namespace),
        name: cfg.lease_name.clone(),
        identity: identity.clone(),
        // Longer than one read every confirm_every: a read the apiserver
        // answers 429 waits its Retry-After (up to 1 s, the Lease lane of
        // daemon::slowdown) and must still be able to confirm. Safe: the
        // deadline counts from the read's start.
        timeout: (timing.confirm_every * 3).max(crate::daemon::slowdown::LEASE_MAX_WAIT * 2),
    };
    let signals = Signals {
        wake: Arc::new(Notify::new()),
        changed: Arc::new(Notify::new()),
        vacant: Arc::new(Notify::new()),
    };
    // Supervised like every long-lived task; `elect` only stops it.
    let stop = Arc::new(Notify::new());
    let confirming = confirm(
        reader,
        leadership.clone(),
        timing.confirm_every,
        signals.clone(),
    );
    let stopped = stop.clone();
    tasks.add("lease confirmer", async move {
        tokio::select! {
            () = confirming => "returned".to_string(),
            () = stopped.notified() => "stopped with the election".to_string(),
        }
    });
    tasks.add(
        "leader election",
        elect(
            params,
            manager,
            leadership.clone(),
            metrics,
            signals,
            stop,
            release_rx,
        ),
    );
    Ok(leadership)
}

/// What a lease manager is built from, kept to build another one.
struct ManagerParams {
    client: Client,
    lease_name: String,
    namespace: String,
    identity: String,
    timing: Timing,
}

impl ManagerParams {
    async fn build(&self) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
        LeaseManagerBuilder::new(self.client.clone(), &self.lease_name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.timing.lease_secs)
            .with_grace(self.timing.grace_secs)
            .build()
            .await
    }
}

/// Between the confirm loop and the election task.
#[derive(Clone)]
struct Signals {
    /// Read the Lease now (just elected).
    wake: Arc<Notify>,
    /// A read finished: the verdict may have changed.
    changed: Arc<Notify>,
    /// A follower found the Lease without a holder.
    vacant: Arc<Notify>,
}

/// How one lease manager's run ended.
enum Exit {
    Release(ReleaseRequest),
    Vacant,
    ManagerStopped,
}

/// How long the lease manager may take to clear the Lease on shutdown.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// Runs lease managers one after another: a new one when a follower finds
/// the Lease vacant (the old one would sleep until the previous holder's
/// expiry), none after a release.
async fn elect(
    params: ManagerParams,
    first: LeaseManager,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    signals: Signals,
    confirmer: Arc<Notify>,
    mut release: oneshot::Receiver<ReleaseRequest>,
) {
    let identity = params.identity.as_str();
    let mut manager = Some(first);
    loop {
        let m = match manager.take() {
            Some(m) => m,
            None => match params.build().await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot restart the lease manager; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let (rx, task) = m.watch().await;
        let not_before = Instant::now() + params.timing.confirm_every.saturating_mul(3);
        let exit = follow(
            rx,
            &leadership,
            &metrics,
            identity,
            &signals,
            &mut release,
            not_before,
        )
        .await;
        // `follow` dropped the receiver: the manager's task clears the
        // Lease if it holds it, and ends.
        let mut task = task;
        let ended = tokio::time::timeout(RELEASE_TIMEOUT, &mut task).await;
        if ended.is_err() {
            // Stuck in its error backoff: it would wake later and clear a
            // Lease the next manager (same identity) holds by then.
            task.abort();
        }
        match exit {
            Exit::Release(done) => {
                confirmer.notify_one();
                metrics.process.leader.set(0);
                match ended {
                    Ok(Ok(Ok(_))) => tracing::info!(identity, "lease released"),
                    Ok(Ok(Err(e))) => {
                        tracing::warn!(identity, error = %e, "cannot release the lease; it expires on its own");
                    }
                    _ => tracing::warn!(
                        identity,
                        "lease release did not finish; it expires on its own"
                    ),
                }
                let _ = done.send(());
                return;
            }
            Exit::Vacant => {
                tracing::info!(
                    identity,
                    "the Lease has no live holder (released or lapsed): competing for it now"
                );
            }
            Exit::ManagerStopped => {
                // The lease task ended: stop acting rather than guess.
                confirmer.notify_one();
                leadership.with_claim(|h| h.set_elected(false));
                metrics.process.leader.set(0);
                tracing::error!(identity, "lease manager stopped; acting as follower");
                return;
            }
        }
    }
}

struct LeaseReader {
    api: Api<Lease>,
    name: String,
    identity: String,
    timeout: Duration,
}

impl LeaseReader {
    /// What the Lease says about us, and whether it may be taken now.
    async fn read(&self) -> Result<(Seen, bool), ConfirmError> {
        // Bounded: kube has no read timeout, and a partition makes requests
        // hang rather than fail.
        let lease = tokio::time::timeout(self.timeout, self.api.get(&self.name))
            .await
            .map_err(|_| ConfirmError::Timeout(self.timeout))??;
        Ok((
            seen(&lease, &self.identity),
            takeable(&lease, SystemTime::now()),
        ))
    }
}

/// Reads the Lease back every `every` while elected (at once when `wake`d)
/// and records what it showed.
async fn confirm(reader: LeaseReader, leadership: Leadership, every: Duration, signals: Signals) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = signals.wake.notified() => {}
        }
        if !leadership.with_claim(|h| h.elected()).unwrap_or(false) {
            // A follower looks for a released or lapsed Lease, which its
            // lease manager would only notice at the old holder's expiry,
            // or after its own error backoff.
            if let Ok((_, true)) = reader.read().await {
                signals.vacant.notify_one();
            }
            continue;
        }
        // Monotonic first, wall second: any gap makes the renewal look
        // older and the deadline earlier, never later.
        let started = Instant::now();
        let started_wall = SystemTime::now();
        match reader.read().await {
            Ok((s, takeable)) => {
                leadership.with_claim(|h| h.observe(started, started_wall, s));
                if takeable {
                    // Elected, yet the Lease lapsed: the manager's renewals
                    // failed and it is backing off.
                    signals.vacant.notify_one();
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, label = e.label(), "lease hold not confirmed");
                leadership.with_claim(|h| h.failed(e.label()));
            }
        }
        signals.changed.notify_one();
    }
}

/// Follows the lease manager and keeps `remedy_leader` and the logs in step
/// with the verdict, including the moment the deadline passes.
async fn follow(
    mut rx: watch::Receiver<bool>,
    leadership: &Leadership,
    metrics: &Metrics,
    identity: &str,
    signals: &Signals,
    release: &mut oneshot::Receiver<ReleaseRequest>,
    not_before: Instant,
) -> Exit {
    let elected = *rx.borrow_and_update();
    leadership.with_claim(|h| h.set_elected(elected));
    let mut shown = None;
    loop {
        report(leadership, metrics, identity, &mut shown);
        let expiry = leadership
            .with_claim(|h| h.valid_until())
            .flatten()
            .filter(|t| *t > Instant::now());
        tokio::select! {
            r = rx.changed() => match r {
                Ok(()) => {
                    let elected = *rx.borrow_and_update();
                    leadership.with_claim(|h| h.set_elected(elected));
                    if elected {
                        signals.wake.notify_one();
                    }
                }
                Err(_) => return Exit::ManagerStopped,
            },
            r = &mut *release => match r {
                Ok(done) => {
                    leadership.with_claim(|h| h.set_elected(false));
                    return Exit::Release(done);
                }
                // Every Leadership handle is gone: nothing can act anyway.
                Err(_) => return Exit::ManagerStopped,
            },
            () = signals.vacant.notified() => {
                // Not leading, and the Lease can be taken: a new manager
                // takes it now. At most one restart per `restart_gap`.
                if !leadership.is_leader() && Instant::now() >= not_before {
                    return Exit::Vacant;
                }
            }
            () = signals.changed.notified() => {}
            () = sleep_until(expiry) => {}
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// Sets the metric; logs when the verdict's kind changes.
fn report(
    leadership: &Leadership,
    metrics: &Metrics,
    identity: &str,
    shown: &mut Option<&'static str>,
) {
    let verdict = leadership.role(Instant::now());
    metrics.process.leader.set(i64::from(verdict.is_leader()));
    if *shown == Some(verdict.label()) {
        return;
    }
    *shown = Some(verdict.label());
    let last_error = leadership.with_claim(|h| h.last_error()).flatten();
    match verdict {
        Role::Leader { left } => {
            tracing::info!(identity, valid_for = ?left, "leading: lease held and confirmed");
        }
        Role::Follower(Why::NotElected) => {
            tracing::info!(identity, "not the lease holder; acting as follower");
        }
        Role::Follower(Why::Unconfirmed) => {
            tracing::info!(identity, "lease won, not confirmed yet; acting as follower");
        }
        Role::Follower(Why::Expired { unconfirmed_for }) => {
            tracing::warn!(
                identity,
                last_error,
                "lease not confirmed for {}s; acting as follower",
                unconfirmed_for.as_secs()
            );
        }
        Role::Follower(Why::NotOurs { holder }) => {
            tracing::warn!(
                identity,
                holder = holder.as_deref().unwrap_or("nobody"),
                "the Lease names another holder; acting as follower"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    /// A made-up pair of clocks: `t0` monotonic, `w0` the wall time then.
    fn clocks() -> (Instant, SystemTime) {
        (
            Instant::now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        )
    }

    fn ours(renewed: SystemTime, duration: Duration) -> Seen {
        Seen::Ours { renewed, duration }
    }

    fn elected(margin: Duration) -> Claim {
        let mut h = Claim::new(margin);
        h.set_elected(true);
        h
    }

    #[test]
    fn timing_lets_every_renewal_be_read_back_before_the_deadline() {
        for secs in 2..=600 {
            let t = Timing::for_lease(Duration::from_secs(secs));
            let lease = Duration::from_secs(t.lease_secs);
            assert!(t.grace_secs >= 1 && t.grace_secs < t.lease_secs, "{t:?}");
            // Next renewal + one read interval, against lease − margin, with
            // at least a fifth of the lease left for the two requests.
            let renew_every = Duration::from_secs(t.lease_secs - t.grace_secs);
            let needed = renew_every + t.confirm_every + t.margin;
            assert!(needed + lease / 5 <= lease, "{t:?}");
        }
        assert_eq!(Timing::for_lease(Duration::ZERO).lease_secs, 2);
        let t = Timing::for_lease(Duration::from_secs(3));
        assert_eq!(
            (t.grace_secs, t.confirm_every, t.margin),
            (2, 300 * MS, 500 * MS)
        );
    }

    #[test]
    fn a_confirmed_hold_lasts_until_renewal_plus_duration_minus_margin() {
        let (t0, w0) = clocks();
        let mut h = elected(500 * MS);
        h.observe(t0, w0, ours(w0 - S, 3 * S));
        assert_eq!(h.valid_until(), Some(t0 + 1500 * MS));
        assert_eq!(h.role(t0), Role::Leader { left: 1500 * MS });
        assert!(h.role(t0 + 1499 * MS).is_leader());
        assert_eq!(
            h.role(t0 + 1500 * MS),
            Role::Follower(Why::Expired {
                unconfirmed_for: 1500 * MS
            })
        );
    }

    #[test]
    fn a_partitioned_leader_expires_without_any_further_input() {
        let (t0, w0) = clocks();
        let mut h = elected(500 * MS);
        // Renewed every second and read back, then the apiserver is gone:
        // reads fail, the lease manager still says "leader".
        for i in 0..5u32 {
            h.observe(t0 + i * S, w0 + i * S, ours(w0 + i * S - 100 * MS, 3 * S));
            assert!(h.role(t0 + i * S + 900 * MS).is_leader());
        }
        h.failed("timeout");
        h.failed("timeout");
        let last_renewal = t0 + 4 * S - 100 * MS;
        assert!(h.role(last_renewal + 2499 * MS).is_leader());
        assert!(!h.role(last_renewal + 2500 * MS).is_leader());
        assert!(!h.role(last_renewal + 3600 * S).is_leader());
        assert!(
            h.elected(),
            "the lease manager's view is not needed for this"
        );
        assert_eq!(h.last_error(), Some("timeout"));
    }

    #[test]
    fn an_expired_lease_still_naming_us_is_not_leadership() {
        let (t0, w0) = clocks();
        let mut h = elected(500 * MS);
        h.observe(t0, w0, ours(w0 - 5 * S, 3 * S));
        assert_eq!(
            h.role(t0),
            Role::Follower(Why::Expired {
                unconfirmed_for: Duration::ZERO
            })
        );
        // Within the margin of expiry counts as expired too.
        h.observe(t0, w0, ours(w0 - 2600 * MS, 3 * S));
        assert!(!h.role(t0).is_leader());
    }

    #[test]
    fn a_renewal_in_the_future_never_lasts_longer_than_the_duration() {
        let (t0, w0) = clocks();
        let mut h = elected(500 * MS);
        h.observe(t0, w0, ours(w0 + 60 * S, 3 * S));
        assert_eq!(h.valid_until(), Some(t0 + 2500 * MS));
    }

    #[test]
    fn the_latest_read_wins_even_when_it_shortens_the_hold() {
        let (t0, w0) = clocks();
        let mut h = elected(500 * MS);
        h.observe(t0, w0, ours(w0, 3 * S));
        h.observe(t0 + S, w0 + S, ours(w0, 2 * S));
        assert_eq!(h.valid_until(), Some(t0 + 1500 * MS));
    }

    #[test]
    fn another_holder_ends_leadership_at_once() {
        let (t0, w0) = clocks();
        let mut h = elected(500 * MS);
        h.observe(t0, w0, ours(w0, 3 * S));
        h.observe(
            t0 + S,
            w0 + S,
            Seen::Other {
                holder: Some("b".into()),
            },
        );
        assert_eq!(
            h.role(t0 + S),
            Role::Follower(Why::NotOurs {
                holder: Some("b".into())
            })
        );
        assert_eq!(h.valid_until(), None);
    }

    #[test]
    fn the_lease_managers_view_is_required_and_each_term_needs_its_own_read() {
        let (t0, w0) = clocks();
        let mut h = Claim::new(500 * MS);
        assert_eq!(h.role(t0), Role::Follower(Why::NotElected));
        // A read finishing while not elected counts for nothing.
        h.observe(t0, w0, ours(w0, 3 * S));
        h.set_elected(true);
        assert_eq!(h.role(t0), Role::Follower(Why::Unconfirmed));
        h.observe(t0, w0, ours(w0, 3 * S));
        assert!(h.role(t0 + S).is_leader());
        h.set_elected(true);
        assert!(h.role(t0 + S).is_leader(), "no change, no reset");
        h.set_elected(false);
        assert_eq!(h.role(t0 + S), Role::Follower(Why::NotElected));
        assert_eq!(h.valid_until(), None);
        h.set_elected(true);
        assert_eq!(h.role(t0 + S), Role::Follower(Why::Unconfirmed));
    }

    #[test]
    fn fixed_leadership_does_not_expire() {
        let far = Instant::now() + 3600 * S;
        assert!(Leadership::fixed(true).role(far).is_leader());
        assert!(!Leadership::fixed(false).is_leader());
        assert_eq!(Leadership::fixed(false).role(far).label(), "not_elected");
    }

    #[test]
    fn elected_leadership_starts_as_follower() {
        let l = Leadership::elected(500 * MS, oneshot::channel().0);
        assert!(!l.is_leader());
        l.with_claim(|h| h.set_elected(true));
        assert_eq!(l.role(Instant::now()).label(), "unconfirmed");
    }

    fn lease(holder: Option<&str>, renewed: Option<SystemTime>, secs: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                renew_time: renewed.map(|t| MicroTime(t.try_into().unwrap())),
                lease_duration_seconds: secs,
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_is_takeable_when_vacant_or_lapsed_whoever_held_it() {
        let now = SystemTime::now();
        let ten_ago = now - 10 * S;
        assert!(takeable(&lease(None, None, None), now));
        assert!(takeable(&lease(Some(""), Some(now), Some(15)), now));
        assert!(!takeable(&lease(Some("b"), Some(ten_ago), Some(15)), now));
        assert!(takeable(&lease(Some("b"), Some(ten_ago), Some(6)), now));
        assert!(
            takeable(&lease(Some("me"), Some(ten_ago), Some(6)), now),
            "ours, lapsed"
        );
        assert!(takeable(&lease(Some("b"), None, Some(15)), now));
    }

    #[test]
    fn what_a_lease_says_about_us() {
        let (_, w0) = clocks();
        assert_eq!(
            seen(&lease(Some("a"), Some(w0), Some(3)), "a"),
            ours(w0, 3 * S)
        );
        assert_eq!(
            seen(&lease(Some("b"), Some(w0), Some(3)), "a"),
            Seen::Other {
                holder: Some("b".into())
            }
        );
        assert_eq!(
            seen(&lease(None, None, None), "a"),
            Seen::Other { holder: None }
        );
        assert_eq!(seen(&Lease::default(), "a"), Seen::Other { holder: None });
        for (renewed, secs) in [
            (None, Some(3)),
            (Some(w0), None),
            (Some(w0), Some(0)),
            (Some(w0), Some(-1)),
        ] {
            assert_eq!(
                seen(&lease(Some("a"), renewed, secs), "a"),
                Seen::Other {
                    holder: Some("a".into())
                },
                "{renewed:?} {secs:?}"
            );
        }
    }

    #[test]
    fn labels_are_stable() {
        let labels: Vec<_> = [
            Role::Leader { left: S },
            Role::Follower(Why::NotElected),
            Role::Follower(Why::Unconfirmed),
            Role::Follower(Why::Expired { unconfirmed_for: S }),
            Role::Follower(Why::NotOurs { holder: None }),
        ]
        .iter()
        .map(Role::label)
        .collect();
        assert_eq!(
            labels,
            [
                "leader",
                "not_elected",
                "unconfirmed",
                "expired",
                "not_ours"
            ]
        );
        assert_eq!(ConfirmError::Timeout(S).label(), "timeout");
    }
}
