//! Carries out a goal against the apiserver: fetch fresh, plan one step,
//! write it with a resourceVersion precondition, repeat. A 409 means the
//! object changed under us, so we fetch and plan again rather than retry the
//! same write; this is what keeps actions from being lost or doubled.

use crate::daemon::leader::Leadership;
use crate::daemon::pause::PauseSwitch;
use crate::daemon::store::Store;
use crate::daemon::watch;
use crate::decide::bucket::TokenBucket;
use crate::metrics::values::ActionResult;
use crate::metrics::{ActionKindLabels, Metrics};
use crate::model::profile::{Profile, RESUMED_ANNOTATION};
use crate::model::view::ResourceKey;
use crate::remediate::step::{self, Done, Goal, Step};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Mutex;

/// The `action` label of a `hold.resume` touch.
const RESUME: &str = "resume";

/// Conflicts tolerated per goal before giving up until its retry.
const MAX_CONFLICTS: u32 = 5;

/// Writes one goal may make: twice the longest plan (guard, clear, reset,
/// unpause, unguard). A controller or webhook that writes back what remedy
/// clears would otherwise make a write loop bounded only by the write
/// limiter; past this the goal gives up and waits its retry backoff.
pub const MAX_STEPS: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{key}: forbidden (RBAC or an admission policy): {source}")]
    Forbidden {
        key: ResourceKey,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{key}: still conflicting after {MAX_CONFLICTS} attempts")]
    Conflict { key: ResourceKey },
    #[error("{key}: not the leader any more; left for the new leader")]
    NotLeader { key: ResourceKey },
    #[error("{key}: the pause switch is set; nothing written until it is cleared")]
    Paused { key: ResourceKey },
    #[error(
        "{key}: gave up after {MAX_STEPS} writes: something writes back what remedy clears (last step {last:?})"
    )]
    Unconverged { key: ResourceKey, last: Step },
    #[error(
        "{key}: the object exists but its status cannot be written (no status subresource?): the profile's clear_status/reset_status need one: {source}"
    )]
    NoStatusSubresource {
        key: ResourceKey,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{key}: apiserver error: {source}")]
    Api {
        key: ResourceKey,
        #[source]
        source: Box<kube::Error>,
    },
}

impl ExecError {
    /// The apiserver answered 429 past the slowdown gate's sends: it did not
    /// process the write, and the shared gate already paces what follows.
    pub fn throttled(&self) -> bool {
        matches!(self, Self::Api { source, .. } if matches!(&**source, kube::Error::Api(ae) if ae.code == 429))
    }

    /// The stable label: the `result` it is counted under.
    pub fn label(&self) -> &'static str {
        self.result().label()
    }

    pub fn result(&self) -> ActionResult {
        match self {
            Self::Forbidden { .. } => ActionResult::Forbidden,
            Self::Conflict { .. } => ActionResult::Conflict,
            Self::NotLeader { .. } => ActionResult::NotLeader,
            Self::Paused { .. } => ActionResult::Paused,
            Self::Unconverged { .. } => ActionResult::GaveUp,
            Self::NoStatusSubresource { .. } => ActionResult::NoStatusSubresource,
            Self::Api { .. } => ActionResult::Error,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub steps: Vec<Step>,
    pub done: Done,
    /// True when the object no longer exists.
    pub gone: bool,
}

/// Paces writes cluster-wide (one leader writes): at most `burst` at once,
/// then `per_second`. Separate from the release budget so holds during an
/// outage are fast but still bounded. The async shell around the same pure
/// [`TokenBucket`] the release budget uses.
pub struct WriteLimiter {
    origin: Instant,
    bucket: Mutex<TokenBucket>,
}

impl WriteLimiter {
    pub fn new(per_second: f64, burst: u32) -> Self {
        // Config validation rejects these; never wait forever if it did not.
        let per_second = if per_second.is_finite() && per_second > 0.0 {
            per_second
        } else {
            1.0
        };
        Self {
            origin: Instant::now(),
            bucket: Mutex::new(TokenBucket::new(per_second, burst.max(1))),
        }
    }

    pub async fn acquire(&self) {
        loop {
            let wait = {
                let mut bucket = self.bucket.lock().await;
                let now = self.origin.elapsed();
                if bucket.try_take(now) {
                    return;
                }
                bucket.time_until_token(now)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

pub struct Executor {
    own: Option<Arc<Store>>,
    client: Client,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    limiter: Arc<WriteLimiter>,
    leader: Leadership,
    dry_run: bool,
    pause: Option<Arc<PauseSwitch>>,
}

impl Executor {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        limiter: Arc<WriteLimiter>,
        leader: Leadership,
        dry_run: bool,
    ) -> Self {
        Self {
            own: None,
            recorder: recorder(&client),
            client,
            metrics,
            limiter,
            leader,
            dry_run,
            pause: None,
        }
    }

    /// Refuses every write while `switch` is set (`daemon::pause`).
    pub fn with_pause(mut self, switch: Arc<PauseSwitch>) -> Self {
        self.pause = Some(switch);
        self
    }

    /// Tells the store about every write (in flight, then the version it
    /// produced), so it tells remedy's own writes, and the stale signals
    /// they leave, from new failures.
    pub fn with_write_log(mut self, store: Arc<Store>) -> Self {
        self.own = Some(store);
        self
    }

    fn api(&self, profile: &Profile, key: &ResourceKey) -> Api<DynamicObject> {
        let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_ref());
        watch::api(self.client.clone(), profile, ns)
    }

    /// Drives `goal` to completion for one resource.
    pub async fn run(
        &self,
        profile: &Profile,
        key: &ResourceKey,
        goal: &Goal,
    ) -> Result<Outcome, ExecError> {
        let api = self.api(profile, key);
        let mut steps = Vec::new();
        let mut conflicts = 0;
        loop {
            let obj = match api.get_opt(&key.name).await {
                Ok(Some(o)) => o,
                Ok(None) => {
                    return Ok(Outcome {
                        steps,
                        done: Done::Complete,
                        gone: true,
                    });
                }
                Err(e) => return Err(self.classify_err(key, e)),
            };
            let step = match step::next_step(profile, &obj, goal) {
                Ok(s) => s,
                Err(done) => {
                    if done == Done::ForeignPause && steps.is_empty() {
                        self.metrics
                            .actions
                            .count(goal.label(), ActionResult::Skipped);
                        tracing::info!(resource = %key, goal = goal.label(), "paused by someone else: not touching it");
                    }
                    if done == Done::Replaced && steps.is_empty() {
                        self.metrics
                            .actions
                            .count(goal.label(), ActionResult::Skipped);
                        tracing::info!(resource = %key, goal = goal.label(), "its owner is replacing it (hold.not_while): a pause would not stop that; not holding it");
                    }
                    return Ok(Outcome {
                        steps,
                        done,
                        gone: false,
                    });
                }
            };
            if self.dry_run {
                let (planned, done) = step::all_steps(profile, &obj, goal);
                for s in &planned {
                    self.metrics
                        .actions
                        .count(s.action(goal), ActionResult::DryRun);
                }
                tracing::info!(resource = %key, goal = goal.label(), steps = ?planned, "dry run: would write");
                return Ok(Outcome {
                    steps: planned,
                    done,
                    gone: false,
                });
            }
            if steps.len() >= MAX_STEPS {
                self.metrics
                    .actions
                    .count(goal.label(), ActionResult::GaveUp);
                tracing::warn!(resource = %key, goal = goal.label(), ?step, writes = steps.len(), "goal does not converge: something writes back what remedy clears; giving up until its retry");
                self.warn(
                    profile,
                    &obj,
                    "RemedyGaveUp",
                    &format!(
                        "remedy gave up {} after {MAX_STEPS} writes: {step:?} is undone as soon as it is written; retrying with backoff",
                        goal.label()
                    ),
                    goal.label(),
                )
                .await;
                return Err(ExecError::Unconverged {
                    key: key.clone(),
                    last: step,
                });
            }
            let body = step::patch(profile, &obj, goal, step);
            self.limiter.acquire().await;
            // Checked right before writing: the lease may have moved while
            // we waited for the limiter.
            if !self.leader.is_leader() {
                self.metrics
                    .actions
                    .count(step.action(goal), ActionResult::NotLeader);
                return Err(ExecError::NotLeader { key: key.clone() });
            }
            // The pause switch stops a goal between two of its writes: what
            // it already wrote stays (a hold stays held).
            if self.pause.as_ref().is_some_and(|p| p.is_paused()) {
                self.metrics
                    .actions
                    .count(step.action(goal), ActionResult::Paused);
                return Err(ExecError::Paused { key: key.clone() });
            }
            let started = Instant::now();
            let pp = PatchParams::default();
            let res = self
                .logged(key, async {
                    if step.is_json_patch() {
                        let ops = step::conditions_patch(profile, &obj);
                        api.patch_status(&key.name, &pp, &Patch::<()>::Json(ops))
                            .await
                    } else if step.is_status() {
                        api.patch_status(&key.name, &pp, &Patch::Merge(&body)).await
                    } else {
                        api.patch(&key.name, &pp, &Patch::Merge(&body)).await
                    }
                })
                .await;
            let action = step.action(goal);
            self.metrics
                .actions
                .duration
                .get_or_create(&ActionKindLabels { action })
                .observe(started.elapsed().as_secs_f64());
            match res {
                Ok(updated) => {
                    self.metrics.actions.count(action, ActionResult::Success);
                    tracing::info!(resource = %key, goal = goal.label(), action, "done");
                    self.event(profile, &updated, goal, step).await;
                    steps.push(step);
                    conflicts = 0;
                    if step.ends(profile, goal) {
                        return Ok(Outcome {
                            steps,
                            done: Done::Complete,
                            gone: false,
                        });
                    }
                }
                // A JSON patch's failed test (422) is a conflict too: what
                // it tested changed since the object was read.
                Err(kube::Error::Api(s))
                    if s.code == 409 || (s.code == 422 && step.is_json_patch()) =>
                {
                    self.metrics.actions.count(action, ActionResult::Conflict);
                    conflicts += 1;
                    tracing::debug!(resource = %key, action, conflicts, "conflict; re-reading");
                    if conflicts >= MAX_CONFLICTS {
                        return Err(ExecError::Conflict { key: key.clone() });
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    // A 404 on the status subresource of an object that is
                    // still there means the CRD has no status subresource:
                    // a configuration error, not a finished goal.
                    if step.is_status() && matches!(api.get_opt(&key.name).await, Ok(Some(_))) {
                        self.metrics
                            .actions
                            .count(action, ActionResult::NoStatusSubresource);
                        return Err(ExecError::NoStatusSubresource {
                            key: key.clone(),
                            source: Box::new(kube::Error::Api(s)),
                        });
                    }
                    self.metrics.actions.count(action, ActionResult::Skipped);
                    return Ok(Outcome {
                        steps,
                        done: Done::Complete,
                        gone: true,
                    });
                }
                Err(e) => {
                    let err = self.classify_err(key, e);
                    self.metrics.actions.count(action, err.result());
                    return Err(err);
                }
            }
        }
    }

    /// Touches `keys` (objects of `profile`) after the hold on `released`
    /// went, so their controller reconciles them now (`hold.resume`). Each
    /// is one annotation write through the write limiter, as leader and
    /// outside the pause switch. A failed one is counted and logged, not
    /// retried: the controller's own resync still comes, only later.
    pub async fn resume(&self, profile: &Profile, released: &ResourceKey, keys: &[ResourceKey]) {
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let body = serde_json::json!({"metadata": {"annotations": {RESUMED_ANNOTATION: at}}});
        for key in keys {
            if self.dry_run {
                self.metrics.actions.count(RESUME, ActionResult::DryRun);
                tracing::info!(resource = %key, %released, "dry run: would touch it to resume it");
                continue;
            }
            self.limiter.acquire().await;
            if !self.leader.is_leader() {
                self.metrics.actions.count(RESUME, ActionResult::NotLeader);
                return;
            }
            if self.pause.as_ref().is_some_and(|p| p.is_paused()) {
                self.metrics.actions.count(RESUME, ActionResult::Paused);
                return;
            }
            let api = self.api(profile, key);
            let res = self
                .logged(
                    key,
                    api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&body)),
                )
                .await;
            match res {
                Ok(obj) => {
                    self.metrics.actions.count(RESUME, ActionResult::Success);
                    tracing::info!(resource = %key, %released, "touched: its controller reconciles it now that the hold is gone");
                    let note = format!(
                        "remedy removed its hold on {} {}: touched so its controller reconciles now, not at its resync",
                        released.kind, released.name
                    );
                    self.publish(profile, &obj, EventType::Normal, "Resumed", &note, RESUME)
                        .await;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.metrics.actions.count(RESUME, ActionResult::Skipped);
                }
                Err(e) => {
                    let err = self.classify_err(key, e);
                    self.metrics.actions.count(RESUME, err.result());
                    tracing::warn!(error = %err, %released, "could not touch it after the hold went: its controller reconciles it at its resync");
                }
            }
        }
    }

    /// Runs one write with the store told of it (in flight, then the
    /// version it produced), so remedy's own writes are known as its own.
    async fn logged(
        &self,
        key: &ResourceKey,
        write: impl std::future::Future<Output = kube::Result<DynamicObject>>,
    ) -> kube::Result<DynamicObject> {
        if let Some(store) = &self.own {
            store.begin_write(key);
        }
        let res = write.await;
        if let Some(store) = &self.own {
            let rv = res
                .as_ref()
                .ok()
                .and_then(|o| o.metadata.resource_version.as_deref());
            store.end_write(key, rv);
        }
        res
    }

    fn classify_err(&self, key: &ResourceKey, e: kube::Error) -> ExecError {
        match e {
            kube::Error::Api(ref s) if s.code == 403 => ExecError::Forbidden {
                key: key.clone(),
                source: Box::new(e),
            },
            e => ExecError::Api {
                key: key.clone(),
                source: Box::new(e),
            },
        }
    }

    /// A Warning Event on the object; like every Event, a report only.
    /// A Warning Event on the object `key` names, fetched for its
    /// reference; an object gone or unreadable gets none (logged).
    pub async fn warn_on(
        &self,
        profile: &Profile,
        key: &ResourceKey,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        match self.api(profile, key).get_opt(&key.name).await {
            Ok(Some(obj)) => self.warn(profile, &obj, reason, note, action).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(resource = %key, error = %e, reason, "could not read the object for its Event")
            }
        }
    }

    async fn warn(
        &self,
        profile: &Profile,
        obj: &DynamicObject,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        self.publish(profile, obj, EventType::Warning, reason, note, action)
            .await;
    }

    /// Publishes one Event on `obj`. An Event is a report, not part of the
    /// action: failing to write it must not fail or repeat the action. Not
    /// leader-gated for the same reason: it reports a write this instance
    /// made while it led.
    async fn publish(
        &self,
        profile: &Profile,
        obj: &DynamicObject,
        type_: EventType,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        let reference = obj.object_ref(&watch::api_resource(profile));
        publish_event(&self.recorder, &reference, type_, reason, note, action).await;
    }

    async fn event(&self, profile: &Profile, obj: &DynamicObject, goal: &Goal, step: Step) {
        let (reason, note): (&str, &str) = match (step, goal) {
            // Each change of a held resource's state: the note itself.
            (Step::Note, Goal::Note(text)) => ("Waiting", text.as_str()),
            (step, _) => Self::said(step, goal),
        };
        self.publish(
            profile,
            obj,
            EventType::Normal,
            reason,
            note,
            step.action(goal),
        )
        .await;
    }

    /// The Event for a step: (reason, note).
    fn said(step: Step, goal: &Goal) -> (&'static str, &'static str) {
        match step {
            Step::Hold => ("Held", "remedy paused reconciliation during a cloud outage"),
            Step::Unpause if *goal == Goal::Release => (
                "Released",
                "remedy removed its pause: the outage breaker closed",
            ),
            Step::Unpause => (
                "Unpaused",
                "remedy removed its pause: the alert is verified cleared",
            ),
            Step::SetSkipRemediation => (
                "SkipRemediationSet",
                "remedy guards the status clear from health-check remediation",
            ),
            Step::RemoveSkipRemediation => (
                "SkipRemediationRemoved",
                "remedy finished clearing failure status",
            ),
            Step::ClearFailure => (
                "FailureCleared",
                "remedy cleared transient failure status so the controller retries",
            ),
            Step::ClearConditions => (
                "FailureCleared",
                "remedy removed the failure condition the controller stops on, so it retries; the other conditions are kept",
            ),
            Step::ResetCounters => (
                "CountersReset",
                "remedy reset crash counters after the outage cleared",
            ),
            Step::Note => ("Waiting", "remedy updated its note on why this is held"),
            Step::MarkRetry => (
                "Retrying",
                "its controller gave up on a transient failure: remedy retries it (crash count and time in remedy.dev/crash-count and failure-time, why in remedy.dev/why)",
            ),
        }
    }
}

/// The Event recorder of remedy's writers: reporting controller `remedy`,
/// instance the pod's name.
pub(crate) fn recorder(client: &Client) -> Recorder {
    let reporter = Reporter {
        controller: "remedy".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    Recorder::new(client.clone(), reporter)
}

/// Publishes one Event on `reference`; a failure is logged, never returned:
/// an Event reports an action and must not fail or repeat it.
pub(crate) async fn publish_event(
    recorder: &Recorder,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
    action: &str,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, reference).await {
        tracing::warn!(error = %e, reason, "could not publish Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::{CAPI_PAUSED, HOLD_ANNOTATION, HoldMark, PAUSE_MARKER, builtin};
    use axum::response::IntoResponse;
    use serde_json::json;

    /// An apiserver that answers every GET with `obj` and refuses any
    /// write; it logs the requests it saw.
    async fn fake_apiserver(
        obj: serde_json::Value,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        fake_apiserver_refusing(obj, axum::http::StatusCode::INTERNAL_SERVER_ERROR).await
    }

    /// The same, refusing writes with `refusal`; a write is logged with
    /// its content type.
    async fn fake_apiserver_refusing(
        obj: serde_json::Value,
        refusal: axum::http::StatusCode,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (log, obj) = (log.clone(), obj.clone());
            async move {
                let mut line = format!("{} {}", req.method(), req.uri().path());
                if req.method() != axum::http::Method::GET {
                    let ct = req.headers().get(axum::http::header::CONTENT_TYPE);
                    let ct = ct.and_then(|v| v.to_str().ok()).unwrap_or_default();
                    line.push_str(&format!(" {ct}"));
                }
                log.lock().unwrap().push(line);
                if req.method() == axum::http::Method::GET {
                    axum::Json(obj).into_response()
                } else {
                    refusal.into_response()
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), seen)
    }

    /// remedy's hold record of a breaker hold, as the annotation holds it.
    fn breaker_record() -> String {
        serde_json::to_string(&HoldMark {
            since: chrono::Utc::now(),
            reason: "breaker".into(),
            crash_count: 1,
            value: None,
        })
        .unwrap()
    }

    /// Leadership lost before a write: counted as `not_leader` (what the
    /// README documents), not `skipped`, and nothing is written.
    #[tokio::test]
    async fn a_write_without_leadership_counts_not_leader() {
        let record = breaker_record();
        let held = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": "m", "namespace": "ns", "resourceVersion": "1",
                         "annotations": {CAPI_PAUSED: PAUSE_MARKER, HOLD_ANNOTATION: record}},
            "status": {"instanceState": "ACTIVE"}
        });
        let (url, seen) = fake_apiserver(held).await;
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let metrics = Arc::new(Metrics::new(10));
        metrics.preset(&crate::metrics::Known::default());
        let ex = Executor::new(
            client,
            metrics.clone(),
            Arc::new(WriteLimiter::new(10.0, 10)),
            Leadership::fixed(false),
            false,
        );
        let profile = builtin("openstack-machine").unwrap();
        let key = ResourceKey::new("OpenStackMachine", "ns", "m");
        let err = ex.run(&profile, &key, &Goal::Release).await.unwrap_err();
        assert!(matches!(err, ExecError::NotLeader { .. }), "{err}");
        let counted: Vec<String> = metrics
            .encode()
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("remedy_actions_total{") && !l.ends_with(" 0"))
            .map(String::from)
            .collect();
        assert_eq!(
            counted,
            [r#"remedy_actions_total{action="release",result="not_leader"} 1"#]
        );
        let seen = seen.lock().unwrap().clone();
        assert!(
            !seen.is_empty() && seen.iter().all(|r| r.starts_with("GET ")),
            "{seen:?}"
        );
    }

    /// #38.12: a blocking condition is removed by a JSON patch to the
    /// status subresource; its failed test (422: the condition moved or
    /// changed) is a conflict: the object is read and planned again, up to
    /// the conflict limit, like a 409.
    #[tokio::test]
    async fn a_condition_removal_is_a_json_patch_and_its_failed_test_a_conflict() {
        let record = breaker_record();
        let held = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "OpenStackMachine",
            "metadata": {"name": "m", "namespace": "ns", "resourceVersion": "1",
                         "annotations": {CAPI_PAUSED: PAUSE_MARKER, HOLD_ANNOTATION: record}},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "InstanceStateError"},
                {"type": "InstanceReady", "status": "False", "reason": "InstanceStateError"}
            ]}
        });
        let (url, seen) =
            fake_apiserver_refusing(held, axum::http::StatusCode::UNPROCESSABLE_ENTITY).await;
        let client = Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let metrics = Arc::new(Metrics::new(10));
        let ex = Executor::new(
            client,
            metrics.clone(),
            Arc::new(WriteLimiter::new(1000.0, 100)),
            Leadership::fixed(true),
            false,
        );
        let mut profile = builtin("openstack-machine").unwrap();
        profile.version = "v1beta2".into();
        let key = ResourceKey::new("OpenStackMachine", "ns", "m");
        let err = ex.run(&profile, &key, &Goal::Release).await.unwrap_err();
        assert!(matches!(err, ExecError::Conflict { .. }), "{err}");
        let seen = seen.lock().unwrap().clone();
        let path =
            "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/ns/openstackmachines/m";
        let writes: Vec<&String> = seen.iter().filter(|r| !r.starts_with("GET ")).collect();
        assert_eq!(writes.len(), MAX_CONFLICTS as usize, "{seen:?}");
        for w in writes {
            assert_eq!(
                *w,
                format!("PATCH {path}/status application/json-patch+json")
            );
        }
        assert_eq!(
            seen.iter().filter(|r| r.starts_with("GET ")).count(),
            MAX_CONFLICTS as usize,
            "read again after each refusal: {seen:?}"
        );
        let counted = metrics.encode().unwrap();
        assert!(
            counted.contains(&format!(
                r#"remedy_actions_total{{action="clear_failure",result="conflict"}} {MAX_CONFLICTS}"#
            )),
            "{counted}"
        );
    }
}
