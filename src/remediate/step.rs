//! Remediation planning. Pure: from the *current* object (fetched fresh at
//! action time, never the cached view) and a goal, decide the next single
//! write. Executing one step and planning again from the new object makes
//! every goal idempotent: a retried or repeated goal never doubles a write.

use crate::model::profile::{
    CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HOLD_ANNOTATION, HoldMark, HoldTarget, Profile,
    SKIP_MARKER, WHY_ANNOTATION, WITH_PREFIX,
};
use crate::model::view::{Owner, PauseState};
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

/// What remedy wants for a resource.
#[derive(Clone, Debug, PartialEq)]
pub enum Goal {
    /// Pause it (outage): only if nobody paused it already.
    Hold(HoldMark),
    /// Undo our own hold so the controller tries again. Where the profile
    /// says so (`remediation.release_clears_failure`, on for the CAPI
    /// providers, which skip a resource whose failureReason is set), the
    /// failure fields are cleared first with the same guards as
    /// remediation; counters are kept, so the next hold backs off longer.
    Release,
    /// The triggering condition is verified cleared: clear failure status,
    /// reset counters and undo our hold.
    Remediate,
    /// Write remedy's note (`remedy.dev/why`) on a resource it holds; never
    /// on one it does not.
    Note(String),
    /// Its controller gave up on a transient failure
    /// (`remediation.retry`): record the attempt (remedy's crash count and
    /// failure time, its note), then clear what stops the controller, so it
    /// tries again. Never on a resource that is held.
    Retry(RetryMark),
}

/// What a retry records on the object: the attempt's number (one more than
/// its crash count when planned) and time, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryMark {
    pub crash_count: u32,
    pub at: chrono::DateTime<chrono::Utc>,
    pub note: String,
}

impl Goal {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Hold(_) => "hold",
            Self::Release => "release",
            Self::Remediate => "remediate",
            Self::Note(_) => "note",
            Self::Retry(_) => "retry",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Hold,
    SetSkipRemediation,
    ClearFailure,
    /// Removes the conditions the controller stops on
    /// (`remediation.clear_conditions`), each tested first: a JSON patch.
    ClearConditions,
    ResetCounters,
    RemoveSkipRemediation,
    /// Removes our pause. Reported as `release` or `unpause` by goal.
    Unpause,
    /// Writes the note of a held resource.
    Note,
    /// Records a retry (`Goal::Retry`): crash count, failure time, note.
    MarkRetry,
}

impl Step {
    /// The `action` metric label.
    pub fn action(&self, goal: &Goal) -> &'static str {
        match self {
            Self::Hold => "hold",
            Self::SetSkipRemediation | Self::RemoveSkipRemediation => "skip_remediation",
            Self::ClearFailure | Self::ClearConditions => "clear_failure",
            Self::ResetCounters => "reset_counters",
            Self::Unpause => match goal {
                Goal::Release => "release",
                _ => "unpause",
            },
            Self::Note => "note",
            Self::MarkRetry => "retry",
        }
    }

    /// Whether the patch goes to the status subresource.
    pub fn is_status(&self) -> bool {
        matches!(
            self,
            Self::ClearFailure | Self::ClearConditions | Self::ResetCounters
        )
    }

    /// Whether the patch is a JSON patch ([`conditions_patch`]), not a
    /// merge patch.
    pub fn is_json_patch(&self) -> bool {
        matches!(self, Self::ClearConditions)
    }

    /// Whether the goal ends with this write. The unpause hands the object
    /// back to its controller: what the controller writes from then on
    /// (CAPO's InstanceReady False while the new server builds) is its own,
    /// not a failure for the same goal to clear again. A note is one write.
    pub fn ends_goal(&self) -> bool {
        matches!(self, Self::Unpause | Self::Note)
    }

    /// Whether `goal` ends with this write. A retry ends with its clear
    /// (or the skip-remediation it wrapped the clear in): from there the
    /// object is its controller's, and a quick new failure is the retry's
    /// answer, not something for the same goal to clear again.
    pub fn ends(&self, profile: &Profile, goal: &Goal) -> bool {
        match goal {
            Goal::Retry(_) => match self {
                // The conditions come after the fields, if any are named.
                Self::ClearFailure => {
                    profile.remediation.skip_remediation_annotation.is_none()
                        && profile.remediation.clear_conditions.is_empty()
                }
                Self::ClearConditions => profile.remediation.skip_remediation_annotation.is_none(),
                Self::RemoveSkipRemediation => true,
                _ => false,
            },
            _ => self.ends_goal(),
        }
    }
}

/// Why there is nothing (more) to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// Goal reached.
    Complete,
    /// Someone else paused it: remedy never touches it.
    ForeignPause,
    /// Being deleted: leave it alone.
    Deleting,
    /// The profile has no hold mechanism.
    NotHoldable,
    /// Opted out (`remedy.dev/ignore`) since the goal was planned.
    Ignored,
    /// Its owner is replacing it (`hold.not_while`): a pause would not
    /// stop that, so remedy does not claim to hold it.
    Replaced,
}

impl Done {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::ForeignPause => "foreign_pause",
            Self::Deleting => "deleting",
            Self::NotHoldable => "not_holdable",
            Self::Ignored => "ignored",
            Self::Replaced => "replaced",
        }
    }
}

/// The next step towards `goal`, or why there is none.
pub fn next_step(profile: &Profile, obj: &DynamicObject, goal: &Goal) -> Result<Step, Done> {
    let view = profile.project(obj).view;
    if view.ignored {
        return Err(Done::Ignored);
    }
    if view.deleting {
        return Err(Done::Deleting);
    }
    if view.pause == PauseState::Foreign {
        return Err(Done::ForeignPause);
    }
    let ours = matches!(view.pause, PauseState::Ours { .. });
    match goal {
        Goal::Hold(_) => {
            if profile.hold.is_none() {
                Err(Done::NotHoldable)
            } else if ours {
                Err(Done::Complete)
            } else if view.replaced {
                Err(Done::Replaced)
            } else {
                Ok(Step::Hold)
            }
        }
        Goal::Release => {
            if !ours {
                return Err(Done::Complete);
            }
            let clears = profile.remediation.release_clears_failure;
            let needs = Clear::of(profile, obj).only_if(clears);
            if let Some(step) = clear_step(profile, needs, view.skip_remediation) {
                Ok(step)
            } else if view.skip_remediation == Owner::Remedy {
                Ok(Step::RemoveSkipRemediation)
            } else {
                Ok(Step::Unpause)
            }
        }
        Goal::Note(text) => {
            let current = obj
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(WHY_ANNOTATION));
            if ours && current != Some(text) {
                Ok(Step::Note)
            } else {
                Err(Done::Complete)
            }
        }
        Goal::Retry(mark) => {
            // Held meanwhile: the hold decides now.
            if ours {
                return Err(Done::Complete);
            }
            // Recorded once: the attempt's time says it is this one.
            if view.failure_time != Some(mark.at) || view.crash_count != Some(mark.crash_count) {
                return Ok(Step::MarkRetry);
            }
            let needs = Clear::of(profile, obj);
            if let Some(step) = clear_step(profile, needs, view.skip_remediation) {
                Ok(step)
            } else if view.skip_remediation == Owner::Remedy {
                Ok(Step::RemoveSkipRemediation)
            } else {
                Err(Done::Complete)
            }
        }
        Goal::Remediate => {
            let needs = Clear::of(profile, obj);
            let needs_reset = !differing_resets(profile, obj).is_empty();
            if let Some(step) = clear_step(profile, needs, view.skip_remediation) {
                Ok(step)
            } else if needs_reset {
                Ok(Step::ResetCounters)
            } else if view.skip_remediation == Owner::Remedy {
                Ok(Step::RemoveSkipRemediation)
            } else if ours {
                Ok(Step::Unpause)
            } else {
                Err(Done::Complete)
            }
        }
    }
}

/// What failure status an object has to clear now.
#[derive(Clone, Copy)]
struct Clear {
    /// `clear_status` fields.
    fields: bool,
    /// `clear_conditions`.
    conditions: bool,
}

impl Clear {
    fn of(profile: &Profile, obj: &DynamicObject) -> Self {
        Self {
            fields: !present_paths(profile, obj).is_empty(),
            conditions: !present_conditions(profile, obj).is_empty(),
        }
    }

    fn only_if(self, wanted: bool) -> Self {
        Self {
            fields: wanted && self.fields,
            conditions: wanted && self.conditions,
        }
    }
}

/// Clearing failure fields and conditions is wrapped in skip-remediation
/// where the profile names one (a MachineHealthCheck must not delete the
/// Machine mid-way); a skip-remediation someone else set is left as it is.
fn clear_step(profile: &Profile, needs: Clear, skip: Owner) -> Option<Step> {
    let guard = profile.remediation.skip_remediation_annotation.is_some();
    let any = needs.fields || needs.conditions;
    if any && guard && skip == Owner::Absent {
        Some(Step::SetSkipRemediation)
    } else if needs.fields {
        Some(Step::ClearFailure)
    } else if needs.conditions {
        Some(Step::ClearConditions)
    } else {
        None
    }
}

/// The JSON merge patch for `step`, guarded by the object's resourceVersion
/// so a concurrent change makes the write fail with 409 instead of
/// overwriting what someone else just did.
pub fn patch(profile: &Profile, obj: &DynamicObject, goal: &Goal, step: Step) -> Value {
    let rv = obj.metadata.resource_version.clone().unwrap_or_default();
    let meta = |annotations: Value| json!({"metadata": {"resourceVersion": rv, "annotations": annotations}});
    let skip_key = profile
        .remediation
        .skip_remediation_annotation
        .clone()
        .unwrap_or_default();
    match step {
        Step::Hold => {
            let mut a = Map::new();
            let pause = profile.hold.as_ref().map(|h| h.pause_value());
            if let Goal::Hold(r) = goal {
                // The record says what remedy wrote: ownership is judged
                // from it (profile::pause_state).
                let r = HoldMark {
                    value: pause.clone(),
                    ..r.clone()
                };
                a.insert(
                    HOLD_ANNOTATION.into(),
                    Value::from(serde_json::to_string(&r).unwrap_or_default()),
                );
                if !profile.has_native_counter() && !r.reason.starts_with(WITH_PREFIX) {
                    a.insert(
                        CRASH_ANNOTATION.into(),
                        Value::from(r.crash_count.to_string()),
                    );
                    a.insert(
                        FAILURE_TIME_ANNOTATION.into(),
                        Value::from(r.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                    );
                }
            }
            let mut body = meta(Value::Object(a));
            set_pause(profile, &mut body, pause.unwrap_or(Value::Null));
            body
        }
        Step::Unpause => {
            let mut a = Map::new();
            a.insert(HOLD_ANNOTATION.into(), Value::Null);
            // The note goes with the hold it explained.
            if obj
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(WHY_ANNOTATION))
            {
                a.insert(WHY_ANNOTATION.into(), Value::Null);
            }
            let mut body = meta(Value::Object(a));
            set_pause(profile, &mut body, Value::Null);
            body
        }
        Step::SetSkipRemediation => {
            let mut a = Map::new();
            a.insert(skip_key, Value::from(SKIP_MARKER));
            meta(Value::Object(a))
        }
        Step::Note => {
            let mut a = Map::new();
            if let Goal::Note(text) = goal {
                a.insert(WHY_ANNOTATION.into(), Value::from(text.as_str()));
            }
            meta(Value::Object(a))
        }
        Step::RemoveSkipRemediation => {
            let mut a = Map::new();
            a.insert(skip_key, Value::Null);
            meta(Value::Object(a))
        }
        Step::MarkRetry => {
            let mut a = Map::new();
            if let Goal::Retry(m) = goal {
                a.insert(
                    CRASH_ANNOTATION.into(),
                    Value::from(m.crash_count.to_string()),
                );
                a.insert(
                    FAILURE_TIME_ANNOTATION.into(),
                    Value::from(m.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                );
                a.insert(WHY_ANNOTATION.into(), Value::from(m.note.as_str()));
            }
            meta(Value::Object(a))
        }
        Step::ClearFailure => {
            let mut body = json!({"metadata": {"resourceVersion": rv}});
            for p in present_paths(profile, obj) {
                set_path(&mut body, &p, Value::Null);
            }
            body
        }
        Step::ClearConditions => {
            serde_json::to_value(conditions_patch(profile, obj)).unwrap_or_default()
        }
        Step::ResetCounters => {
            let mut body = json!({"metadata": {"resourceVersion": rv}});
            for (p, v) in differing_resets(profile, obj) {
                set_path(&mut body, &p, v);
            }
            body
        }
    }
}

/// The JSON patch of [`Step::ClearConditions`]: each condition to clear is
/// tested (its index and content) and removed, the last of a list first,
/// after a test of the resourceVersion. A merge patch can only replace a
/// whole list, and with it every condition the controller wrote; a
/// condition moved or changed since it was read fails its test (422), as
/// any change fails the resourceVersion's, and the goal plans again.
pub fn conditions_patch(profile: &Profile, obj: &DynamicObject) -> json_patch::Patch {
    use json_patch::{PatchOperation, RemoveOperation, TestOperation};
    let rv = obj.metadata.resource_version.clone().unwrap_or_default();
    let mut ops = vec![PatchOperation::Test(TestOperation {
        path: pointer("/metadata/resourceVersion"),
        value: Value::from(rv),
    })];
    for (path, condition) in present_conditions(profile, obj) {
        let path = pointer(&path);
        ops.push(PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: condition,
        }));
        ops.push(PatchOperation::Remove(RemoveOperation { path }));
    }
    json_patch::Patch(ops)
}

/// A JSON pointer (validated to start with '/') as json_patch takes it.
fn pointer(p: &str) -> json_patch::jsonptr::PointerBuf {
    json_patch::jsonptr::PointerBuf::from_tokens(
        p.split('/')
            .skip(1)
            .map(|t| t.replace("~1", "/").replace("~0", "~")),
    )
}

/// Writes the profile's pause (annotation or spec field) into a patch body;
/// `Value::Null` removes it.
fn set_pause(profile: &Profile, body: &mut Value, value: Value) {
    match profile.hold.as_ref().and_then(|h| h.target()) {
        Some(HoldTarget::Annotation(k)) => {
            set_path(body, &format!("/metadata/annotations/{}", escape(k)), value)
        }
        Some(HoldTarget::Field(p)) => set_path(body, p, value),
        None => {}
    }
}

/// JSON pointer escaping of one reference token (annotation keys hold '/').
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Clearable status fields that are set now. Only these go into the patch:
/// a merge patch naming an absent nested path would create empty parents.
/// None while a `keep_if_set` field is set: that failure is real.
fn present_paths(profile: &Profile, obj: &DynamicObject) -> Vec<String> {
    if !profile.clearable(&obj.data) {
        return Vec::new();
    }
    profile.to_clear(&obj.data)
}

/// The `clear_conditions` on the object now (pointer, content), last
/// first; none while a `keep_if_set` field is set.
fn present_conditions(profile: &Profile, obj: &DynamicObject) -> Vec<(String, Value)> {
    if !profile.clearable(&obj.data) {
        return Vec::new();
    }
    profile.conditions_to_clear(&obj.data)
}

fn differing_resets(profile: &Profile, obj: &DynamicObject) -> Vec<(String, Value)> {
    profile
        .remediation
        .reset_status
        .iter()
        .filter(|r| obj.data.pointer(&r.path).is_some_and(|v| *v != r.value))
        .map(|r| (r.path.clone(), r.value.clone()))
        .collect()
}

/// Sets `value` at a JSON pointer, creating objects on the way.
fn set_path(root: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, parents)) = parts.split_last() else {
        return;
    };
    let mut cur = root;
    for part in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(map) = cur else { return };
        cur = map
            .entry(part.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    if let Value::Object(map) = cur {
        map.insert(last.clone(), value);
    }
}

/// RFC 7386 JSON merge patch, as the apiserver applies it. Used for dry-run
/// plans and tests; resourceVersion handling is the server's, so it is
/// ignored here.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Applies a step's patch to a local copy of the object (dry-run, tests):
/// a JSON patch (an array) as RFC 6902 says, its tests included.
pub fn apply_locally(obj: &DynamicObject, body: &Value) -> Option<DynamicObject> {
    let mut v = serde_json::to_value(obj).ok()?;
    if body.is_array() {
        let p: json_patch::Patch = serde_json::from_value(body.clone()).ok()?;
        json_patch::patch(&mut v, &p).ok()?;
        return serde_json::from_value(v).ok();
    }
    let mut body = body.clone();
    if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    merge(&mut v, &body);
    serde_json::from_value(v).ok()
}

/// Every step a goal takes from this object, computed without writing.
/// Bounded: a plan never has more steps than there are step kinds.
pub fn all_steps(profile: &Profile, obj: &DynamicObject, goal: &Goal) -> (Vec<Step>, Done) {
    let mut steps = Vec::new();
    let mut cur = obj.clone();
    for _ in 0..8 {
        match next_step(profile, &cur, goal) {
            Err(done) => return (steps, done),
            Ok(step) => {
                let body = patch(profile, &cur, goal, step);
                steps.push(step);
                if step.ends(profile, goal) {
                    break;
                }
                match apply_locally(&cur, &body) {
                    Some(next) => cur = next,
                    None => break,
                }
            }
        }
    }
    (steps, Done::Complete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::{CAPI_PAUSED, CAPI_SKIP_REMEDIATION, PAUSE_MARKER, builtin};
    use chrono::Utc;

    use crate::testkit::object as obj;

    fn failed_machine(annotations: Value) -> DynamicObject {
        obj(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m-0", "namespace": "default", "resourceVersion": "42", "annotations": annotations},
            "status": {
                "phase": "Failed",
                "deprecated": {"v1beta1": {"failureReason": "CreateError", "failureMessage": "503 Service Unavailable"}},
                "conditions": [{"type": "Ready", "status": "False", "reason": "Failed"}]
            }
        }))
    }

    fn record() -> HoldMark {
        HoldMark {
            since: Utc::now(),
            reason: "alert RemedyTransientErrorRatioHigh".into(),
            crash_count: 2,
            value: None,
        }
    }

    /// The note goes only on a resource remedy holds, only when its text
    /// differs, and leaves with the hold.
    #[test]
    fn a_note_is_written_on_a_held_resource_when_it_changes_and_goes_with_the_hold() {
        let p = builtin("openstack-machine").unwrap();
        let free = obj(json!({"apiVersion": "v", "kind": "K",
            "metadata": {"name": "o", "namespace": "d", "resourceVersion": "3"}}));
        let note = Goal::Note("held; waits for budget".into());
        assert_eq!(
            next_step(&p, &free, &note),
            Err(Done::Complete),
            "not held: no note"
        );
        let held =
            apply_locally(&free, &patch(&p, &free, &Goal::Hold(record()), Step::Hold)).unwrap();
        assert_eq!(next_step(&p, &held, &note), Ok(Step::Note));
        let noted = apply_locally(&held, &patch(&p, &held, &note, Step::Note)).unwrap();
        let a = noted.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            a.get(WHY_ANNOTATION).map(String::as_str),
            Some("held; waits for budget")
        );
        assert_eq!(
            next_step(&p, &noted, &note),
            Err(Done::Complete),
            "same text: no write"
        );
        assert_eq!(
            next_step(&p, &noted, &Goal::Note("held; waits for breaker".into())),
            Ok(Step::Note)
        );
        assert_eq!(Step::Note.action(&note), "note");
        let released =
            apply_locally(&noted, &patch(&p, &noted, &Goal::Release, Step::Unpause)).unwrap();
        let a = released.metadata.annotations.unwrap_or_default();
        assert!(
            !a.contains_key(WHY_ANNOTATION) && !a.contains_key(HOLD_ANNOTATION),
            "{a:?}"
        );
    }

    #[test]
    fn remediation_wraps_clear_in_skip_remediation_and_unpauses_last() {
        let p = builtin("capi-machine").unwrap();
        let held = failed_machine(
            json!({CAPI_PAUSED: PAUSE_MARKER, HOLD_ANNOTATION: serde_json::to_string(&record()).unwrap()}),
        );
        let (steps, done) = all_steps(&p, &held, &Goal::Remediate);
        assert_eq!(
            steps,
            vec![
                Step::SetSkipRemediation,
                Step::ClearFailure,
                Step::RemoveSkipRemediation,
                Step::Unpause
            ]
        );
        assert_eq!(done, Done::Complete);
    }

    #[test]
    fn clear_patch_names_only_present_fields_and_carries_resource_version() {
        let p = builtin("capi-machine").unwrap();
        let m = failed_machine(json!({CAPI_SKIP_REMEDIATION: SKIP_MARKER}));
        let body = patch(&p, &m, &Goal::Remediate, Step::ClearFailure);
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "42"},
                   "status": {"deprecated": {"v1beta1": {"failureReason": null, "failureMessage": null}}}})
        );
        let after = apply_locally(&m, &body).unwrap();
        assert_eq!(after.data["status"]["deprecated"]["v1beta1"], json!({}));
        assert_eq!(after.data["status"]["phase"], "Failed");
    }

    #[test]
    fn a_human_pause_is_never_touched() {
        let p = builtin("capi-machine").unwrap();
        for value in ["", "true", "maintenance"] {
            let m = failed_machine(json!({CAPI_PAUSED: value}));
            for goal in [Goal::Remediate, Goal::Release, Goal::Hold(record())] {
                assert_eq!(
                    next_step(&p, &m, &goal),
                    Err(Done::ForeignPause),
                    "{value:?} {goal:?}"
                );
            }
        }
        // Our marker without our hold mark is not ours either.
        let m = failed_machine(json!({CAPI_PAUSED: PAUSE_MARKER}));
        assert_eq!(next_step(&p, &m, &Goal::Release), Err(Done::ForeignPause));
    }

    #[test]
    fn foreign_skip_remediation_is_left_in_place() {
        let p = builtin("capi-machine").unwrap();
        let m = failed_machine(json!({CAPI_SKIP_REMEDIATION: "true"}));
        let (steps, done) = all_steps(&p, &m, &Goal::Remediate);
        assert_eq!(steps, vec![Step::ClearFailure]);
        assert_eq!(done, Done::Complete);
    }

    #[test]
    fn hold_then_release_round_trips_annotations() {
        let p = builtin("openstack-machine").unwrap();
        let m = obj(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": "o", "namespace": "d", "resourceVersion": "1", "annotations": {"keep": "me"}},
            "status": {"instanceState": "BUILD"}
        }));
        let goal = Goal::Hold(record());
        let (steps, _) = all_steps(&p, &m, &goal);
        assert_eq!(steps, vec![Step::Hold]);
        let held = apply_locally(&m, &patch(&p, &m, &goal, Step::Hold)).unwrap();
        assert!(matches!(
            p.project(&held).view.pause,
            PauseState::Ours { .. }
        ));
        assert_eq!(next_step(&p, &held, &goal), Err(Done::Complete));
        let view = p.project(&held).view;
        assert_eq!(
            view.crash_count,
            Some(2),
            "remedy's own counter is recorded"
        );
        assert!(view.failure_time.is_some());
        let released =
            apply_locally(&held, &patch(&p, &held, &Goal::Release, Step::Unpause)).unwrap();
        let left: Vec<String> = released.metadata.annotations.unwrap().into_keys().collect();
        // The pause and hold mark go; the counter stays for the next backoff.
        assert_eq!(
            left,
            vec!["keep", CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION]
        );
    }

    fn held(p: &Profile, m: &DynamicObject) -> DynamicObject {
        apply_locally(m, &patch(p, m, &Goal::Hold(record()), Step::Hold)).unwrap()
    }

    #[test]
    fn a_release_clears_failure_so_the_provider_retries_but_keeps_counters() {
        // CAPO returns early while failureReason is set: a release that only
        // unpaused would probe nothing.
        let p = builtin("capi-machine").unwrap();
        let m = held(&p, &failed_machine(json!({})));
        let (steps, done) = all_steps(&p, &m, &Goal::Release);
        assert_eq!(
            steps,
            vec![
                Step::SetSkipRemediation,
                Step::ClearFailure,
                Step::RemoveSkipRemediation,
                Step::Unpause
            ]
        );
        assert_eq!(done, Done::Complete);
        assert_eq!(Step::Unpause.action(&Goal::Release), "release");
        let o = builtin("openstack-machine").unwrap();
        let osm = held(
            &o,
            &obj(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
                "metadata": {"name": "o", "namespace": "d", "resourceVersion": "1"},
                "status": {"failureReason": "CreateError", "failureMessage": "got 503 instead"}
            })),
        );
        let (steps, _) = all_steps(&o, &osm, &Goal::Release);
        assert_eq!(steps, vec![Step::ClearFailure, Step::Unpause]);
        let mut cur = osm.clone();
        for s in steps {
            cur = apply_locally(&cur, &patch(&o, &cur, &Goal::Release, s)).unwrap();
        }
        let view = o.project(&cur).view;
        assert_eq!(
            view.crash_count,
            Some(2),
            "the counter stays for the next backoff"
        );
        assert_eq!(cur.data["status"], json!({}));
        // A profile can opt out: then a release only unpauses.
        let mut unpause_only = o.clone();
        unpause_only.remediation.release_clears_failure = false;
        assert_eq!(
            all_steps(&unpause_only, &osm, &Goal::Release).0,
            vec![Step::Unpause]
        );
    }

    /// The unpause is the goal's last write: the executor stops there, for
    /// the controller's next write (CAPO's InstanceReady False while the new
    /// server builds) would otherwise read as more to clear.
    #[test]
    fn the_unpause_ends_the_goal_though_the_controller_writes_a_false_condition_next() {
        let p = builtin("openstack-machine").unwrap();
        let osm = |status: Value| crate::testkit::openstack_machine("m", 1, json!({}), status);
        let failed = held(
            &p,
            &osm(
                json!({"failureReason": "CreateError", "failureMessage": "got 503", "conditions": [
                    {"type": "InstanceReady", "status": "False", "reason": "InstanceCreateFailed"}
                ]}),
            ),
        );
        let (steps, done) = all_steps(&p, &failed, &Goal::Remediate);
        assert_eq!(steps, vec![Step::ClearFailure, Step::Unpause]);
        assert_eq!(done, Done::Complete);
        assert!(Step::Unpause.ends_goal() && Step::Note.ends_goal());
        assert!(!Step::ClearFailure.ends_goal() && !Step::Hold.ends_goal());
        // What the controller writes after the unpause (CAPO v0.15 copying
        // a server still ERROR into Ready), planned afresh, would be
        // cleared: only ending at the unpause prevents it.
        let copied = osm(json!({"instanceState": "ERROR", "conditions": [
            {"type": "Ready", "status": "False", "reason": "InstanceStateError"}
        ]}));
        assert_eq!(
            next_step(&p, &copied, &Goal::Remediate),
            Ok(Step::ClearConditions)
        );
        assert!(!Step::ClearConditions.ends_goal());
        // A condition CAPO does not stop on is not remedy's to clear.
        let building = osm(json!({"instanceState": "BUILD", "conditions": [
            {"type": "InstanceReady", "status": "False", "severity": "Info", "reason": "InstanceNotReady"}
        ]}));
        assert_eq!(
            next_step(&p, &building, &Goal::Remediate),
            Err(Done::Complete)
        );
    }

    fn v1beta2_osm(conditions: Value) -> DynamicObject {
        obj(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "OpenStackMachine",
            "metadata": {"name": "m", "namespace": "d", "resourceVersion": "7"},
            "status": {"instanceState": "ERROR", "conditions": conditions}
        }))
    }

    /// #38.12, CAPO v0.15 (v1beta2): Ready False/InstanceStateError stops
    /// the controller, and Ready is derived again from InstanceReady
    /// False/InstanceStateError if that stays (capo_real::v015); the
    /// release removes those two alone, by a JSON patch that tests each
    /// one's index and content and the resourceVersion first, and keeps
    /// every other one.
    #[test]
    fn a_v1beta2_machine_loses_only_the_condition_capo_stops_on() {
        let mut p = builtin("openstack-machine").unwrap();
        p.version = "v1beta2".into();
        let instance = json!({"type": "InstanceReady", "status": "False", "reason": "InstanceStateError",
            "message": "got 503 instead", "lastTransitionTime": "2026-12-03T01:00:00Z", "observedGeneration": 1});
        let ready = json!({"type": "Ready", "status": "False", "reason": "InstanceStateError",
            "message": "got 503 instead", "lastTransitionTime": "2026-12-03T01:00:00Z", "observedGeneration": 1});
        let paused = json!({"type": "Paused", "status": "False", "reason": "NotPaused",
            "lastTransitionTime": "2026-12-03T00:00:00Z", "observedGeneration": 1});
        let m = held(
            &p,
            &v1beta2_osm(json!([instance.clone(), ready.clone(), paused.clone()])),
        );
        for goal in [Goal::Release, Goal::Remediate] {
            assert_eq!(
                all_steps(&p, &m, &goal).0,
                vec![Step::ClearConditions, Step::Unpause],
                "{goal:?}"
            );
        }
        let body = patch(&p, &m, &Goal::Release, Step::ClearConditions);
        assert_eq!(
            body,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "test", "path": "/status/conditions/1", "value": ready},
                {"op": "remove", "path": "/status/conditions/1"},
                {"op": "test", "path": "/status/conditions/0", "value": instance},
                {"op": "remove", "path": "/status/conditions/0"},
            ])
        );
        assert!(Step::ClearConditions.is_status() && Step::ClearConditions.is_json_patch());
        assert_eq!(
            Step::ClearConditions.action(&Goal::Release),
            "clear_failure"
        );
        let after = apply_locally(&m, &body).unwrap();
        assert_eq!(
            after.data["status"]["conditions"],
            json!([paused]),
            "the other conditions are kept"
        );
        assert_eq!(after.data["status"]["instanceState"], "ERROR");
        assert_eq!(
            next_step(&p, &after, &Goal::Release),
            Ok(Step::Unpause),
            "nothing left to clear"
        );
        // The tests guard the write: the condition moved, or changed, or
        // the object changed since it was read.
        let moved = v1beta2_osm(json!([ready.clone(), instance.clone(), paused.clone()]));
        assert!(apply_locally(&moved, &body).is_none(), "moved");
        let mut changed = ready.clone();
        changed["message"] = json!("got 502 instead");
        let changed = v1beta2_osm(json!([instance.clone(), changed, paused.clone()]));
        assert!(apply_locally(&changed, &body).is_none(), "changed");
        let mut newer = m.clone();
        newer.metadata.resource_version = Some("8".into());
        assert!(apply_locally(&newer, &body).is_none(), "a newer version");
        // Two of them (a duplicate type), both removed, the last first.
        let twice = held(
            &p,
            &v1beta2_osm(json!([ready.clone(), instance.clone(), ready.clone()])),
        );
        let body = patch(&p, &twice, &Goal::Release, Step::ClearConditions);
        let paths: Vec<&str> = body
            .as_array()
            .unwrap()
            .iter()
            .map(|op| op["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "/metadata/resourceVersion",
                "/status/conditions/2",
                "/status/conditions/2",
                "/status/conditions/1",
                "/status/conditions/1",
                "/status/conditions/0",
                "/status/conditions/0"
            ]
        );
        let after = apply_locally(&twice, &body).unwrap();
        assert_eq!(after.data["status"]["conditions"], json!([]));
        // Ready for another reason, True or Unknown: not what CAPO stops on.
        for other in [
            json!({"type": "Ready", "status": "False", "reason": "InstanceNotReady"}),
            json!({"type": "Ready", "status": "True", "reason": "InstanceStateError"}),
            json!({"type": "Ready", "status": "Unknown", "reason": "InstanceStateError"}),
        ] {
            let m = held(&p, &v1beta2_osm(json!([other.clone()])));
            assert_eq!(
                all_steps(&p, &m, &Goal::Release).0,
                vec![Step::Unpause],
                "{other}"
            );
        }
        // A profile that does not clear on release only unpauses.
        let mut unpause_only = p.clone();
        unpause_only.remediation.release_clears_failure = false;
        let m = held(&p, &v1beta2_osm(json!([ready])));
        assert_eq!(
            all_steps(&unpause_only, &m, &Goal::Release).0,
            vec![Step::Unpause]
        );
    }

    /// #38.12, CAPO v0.14 (v1beta1): failureReason is what stops the
    /// controller; the merge patch clears the failure fields and no longer
    /// the whole `/status/conditions` (it wiped every condition CAPO
    /// wrote). Its Ready summary and InstanceReady, False/InstanceStateError,
    /// go by the JSON patch; the others stay.
    #[test]
    fn a_v1beta1_machine_keeps_its_conditions_when_its_failure_is_cleared() {
        let p = builtin("openstack-machine").unwrap();
        let mut m = crate::testkit::sample(include_str!(
            "../../testenv/samples/capo-openstackmachine-error.yaml"
        ));
        m.metadata.resource_version = Some("12".into());
        let conditions = m.data["status"]["conditions"].as_array().unwrap().clone();
        assert_eq!(conditions[0]["type"], "Ready");
        assert_eq!(conditions[1]["type"], "InstanceReady");
        let networks = json!({"type": "NetworkReady", "status": "True",
            "lastTransitionTime": "2025-03-14T09:10:00Z"});
        m.data["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(networks.clone());
        let m = held(&p, &m);
        let (steps, done) = all_steps(&p, &m, &Goal::Remediate);
        assert_eq!(
            steps,
            vec![Step::ClearFailure, Step::ClearConditions, Step::Unpause]
        );
        assert_eq!(done, Done::Complete);
        let body = patch(&p, &m, &Goal::Remediate, Step::ClearFailure);
        assert_eq!(
            body["status"],
            json!({"failureReason": null, "failureMessage": null}),
            "the conditions are not in the merge patch"
        );
        let cleared = apply_locally(&m, &body).unwrap();
        let body = patch(&p, &cleared, &Goal::Remediate, Step::ClearConditions);
        assert_eq!(body[1]["path"], "/status/conditions/1");
        assert_eq!(body[1]["value"], conditions[1]);
        assert_eq!(body[3]["path"], "/status/conditions/0");
        assert_eq!(body[3]["value"], conditions[0]);
        let after = apply_locally(&cleared, &body).unwrap();
        let s = &after.data["status"];
        assert!(s.get("failureReason").is_none() && s.get("failureMessage").is_none());
        assert_eq!(
            s["conditions"],
            json!(
                conditions[2..]
                    .iter()
                    .cloned()
                    .chain([networks])
                    .collect::<Vec<_>>()
            )
        );
        assert_eq!(s["instanceState"], "ERROR");
        assert_eq!(s["instanceID"], m.data["status"]["instanceID"]);
    }

    /// CAPO's OpenStackServer: an ERROR from a failed create (no
    /// instanceID) is cleared on release, so CAPO creates the server again;
    /// one Nova reports (an instanceID) is never touched, only unpaused.
    /// #39.1: a retry records the attempt once (crash count, time, note),
    /// then clears what stops the controller and ends there; a held
    /// resource, or Nova's own ERROR (an instanceID), is not retried.
    #[test]
    fn a_retry_marks_the_attempt_once_then_clears_and_ends() {
        let p = builtin("openstack-server").unwrap();
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-07T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let goal = Goal::Retry(RetryMark {
            crash_count: 3,
            at,
            note: "retried by remedy".into(),
        });
        let server = |annotations: Value, status: Value| {
            obj(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "OpenStackServer",
                "metadata": {"name": "s", "namespace": "d", "resourceVersion": "1", "annotations": annotations},
                "status": status
            }))
        };
        let failed = json!({"instanceState": "ERROR", "conditions": [
            {"type": "InstanceReady", "status": "False", "reason": "InstanceCreateFailed", "message": "got 503 instead"}
        ]});
        let s = server(json!({CRASH_ANNOTATION: "2"}), failed.clone());
        let (steps, done) = all_steps(&p, &s, &goal);
        assert_eq!(steps, vec![Step::MarkRetry, Step::ClearFailure]);
        assert_eq!(done, Done::Complete);
        assert!(Step::ClearFailure.ends(&p, &goal) && !Step::MarkRetry.ends(&p, &goal));
        let body = patch(&p, &s, &goal, Step::MarkRetry);
        let a = &body["metadata"]["annotations"];
        assert_eq!(a[CRASH_ANNOTATION], "3");
        assert_eq!(a[FAILURE_TIME_ANNOTATION], "2026-12-07T10:00:00Z");
        assert_eq!(a[WHY_ANNOTATION], "retried by remedy");
        assert_eq!(body["metadata"]["resourceVersion"], "1");
        // Marked already (the goal ran again after a failed clear): not
        // counted twice.
        let marked = server(
            json!({CRASH_ANNOTATION: "3", FAILURE_TIME_ANNOTATION: "2026-12-07T10:00:00Z"}),
            failed.clone(),
        );
        assert_eq!(all_steps(&p, &marked, &goal).0, vec![Step::ClearFailure]);
        // Held meanwhile, or Nova's own ERROR: nothing.
        let held_now = held(&p, &s);
        assert_eq!(all_steps(&p, &held_now, &goal), (vec![], Done::Complete));
        let real = server(
            json!({CRASH_ANNOTATION: "3", FAILURE_TIME_ANNOTATION: "2026-12-07T10:00:00Z"}),
            json!({"instanceState": "ERROR", "instanceID": "b4c1"}),
        );
        assert_eq!(all_steps(&p, &real, &goal), (vec![], Done::Complete));
        // Behind a skip-remediation guard (a custom Machine profile), the
        // goal ends once the guard it set is gone again.
        let mut m = builtin("capi-machine").unwrap();
        m.remediation.retry = Some(crate::model::profile::RetrySpec::default());
        let steps = all_steps(&m, &failed_machine(json!({})), &goal).0;
        assert_eq!(
            steps,
            vec![
                Step::MarkRetry,
                Step::SetSkipRemediation,
                Step::ClearFailure,
                Step::RemoveSkipRemediation
            ]
        );
    }

    #[test]
    fn a_server_error_from_a_failed_create_is_cleared_and_novas_own_is_kept() {
        let p = builtin("openstack-server").unwrap();
        let server = |status: Value| {
            obj(json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "OpenStackServer",
                "metadata": {"name": "s", "namespace": "d", "resourceVersion": "1"},
                "status": status
            }))
        };
        let failed = held(
            &p,
            &server(json!({"instanceState": "ERROR", "ready": false})),
        );
        let (steps, done) = all_steps(&p, &failed, &Goal::Release);
        assert_eq!(steps, vec![Step::ClearFailure, Step::Unpause]);
        assert_eq!(done, Done::Complete);
        let body = patch(&p, &failed, &Goal::Release, Step::ClearFailure);
        assert_eq!(body["status"], json!({"instanceState": null}));
        // Its stale InstanceCreateFailed condition goes with it.
        let with_condition = held(
            &p,
            &server(json!({"instanceState": "ERROR", "conditions": [
                {"type": "InstanceReady", "status": "False", "reason": "InstanceCreateFailed", "message": "got 503 instead"}
            ]})),
        );
        let body = patch(&p, &with_condition, &Goal::Release, Step::ClearFailure);
        assert_eq!(
            body["status"],
            json!({"instanceState": null, "conditions": null})
        );
        // Cleared, and CAPO v0.15 has written a True condition of its own
        // since: nothing is left to clear, the release unpauses.
        let answered = held(
            &p,
            &server(json!({"conditions": [
                {"type": "OpenStackAuthenticationSucceeded", "status": "True"}
            ]})),
        );
        assert_eq!(
            all_steps(&p, &answered, &Goal::Release).0,
            vec![Step::Unpause]
        );
        for goal in [Goal::Release, Goal::Remediate] {
            let real = held(
                &p,
                &server(json!({"instanceState": "ERROR", "instanceID": "b4c1", "ready": false})),
            );
            assert_eq!(all_steps(&p, &real, &goal).0, vec![Step::Unpause]);
        }
        // Held with its owner: no crash count or failure time of its own.
        let with = HoldMark {
            reason: format!("{WITH_PREFIX}OpenStackMachine/s"),
            crash_count: 0,
            ..record()
        };
        let body = patch(&p, &server(json!({})), &Goal::Hold(with), Step::Hold);
        let a = &body["metadata"]["annotations"];
        assert_eq!(a[CAPI_PAUSED], PAUSE_MARKER);
        assert!(a.get(CRASH_ANNOTATION).is_none() && a.get(FAILURE_TIME_ANNOTATION).is_none());
    }

    #[test]
    fn holds_write_the_profiles_pause_and_record_what_they_wrote() {
        use crate::model::profile::HoldSpec;
        let mut p = builtin("openstack-machine").unwrap();
        p.hold = Some(HoldSpec {
            annotation: Some("crossplane.io/paused".into()),
            field: None,
            value: Some(Value::from("true")),
            ..HoldSpec::default()
        });
        let m = obj(json!({"apiVersion": "v", "kind": "K",
            "metadata": {"name": "o", "namespace": "d", "resourceVersion": "3"}}));
        let body = patch(&p, &m, &Goal::Hold(record()), Step::Hold);
        assert_eq!(
            body["metadata"]["annotations"]["crossplane.io/paused"],
            "true"
        );
        let rec = HoldMark::parse(
            body["metadata"]["annotations"][HOLD_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(rec.value, Some(Value::from("true")));
        let h = apply_locally(&m, &body).unwrap();
        assert!(matches!(p.project(&h).view.pause, PauseState::Ours { .. }));
        let released = apply_locally(&h, &patch(&p, &h, &Goal::Release, Step::Unpause)).unwrap();
        let a = released.metadata.annotations.unwrap_or_default();
        assert!(!a.contains_key("crossplane.io/paused") && !a.contains_key(HOLD_ANNOTATION));

        // A spec-field pause (CAPI Cluster.spec.paused) round-trips the same way.
        let mut c = builtin("capi-cluster").unwrap();
        c.hold = Some(HoldSpec::field("/spec/paused"));
        let cl = obj(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "d", "resourceVersion": "9"},
            "spec": {"controlPlaneEndpoint": {"host": "h", "port": 6443}}}),
        );
        let body = patch(&c, &cl, &Goal::Hold(record()), Step::Hold);
        assert_eq!(body["spec"], json!({"paused": true}));
        let h = apply_locally(&cl, &body).unwrap();
        assert!(matches!(c.project(&h).view.pause, PauseState::Ours { .. }));
        let body = patch(&c, &h, &Goal::Release, Step::Unpause);
        assert_eq!(body["spec"], json!({"paused": null}));
        let r = apply_locally(&h, &body).unwrap();
        assert_eq!(
            r.data["spec"],
            json!({"controlPlaneEndpoint": {"host": "h", "port": 6443}})
        );
        // clusterctl move (or a human) paused it: never touched.
        let foreign = obj(json!({"apiVersion": "v", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "d", "resourceVersion": "9"}, "spec": {"paused": true}}));
        assert_eq!(
            next_step(&c, &foreign, &Goal::Release),
            Err(Done::ForeignPause)
        );
        assert_eq!(
            next_step(&c, &foreign, &Goal::Hold(record())),
            Err(Done::ForeignPause)
        );
    }

    #[test]
    fn brupop_reset_sets_crash_count_zero_and_drops_timestamp() {
        let p = builtin("bottlerocket-shadow").unwrap();
        let b = obj(json!({
            "apiVersion": "brupop.bottlerocket.aws/v2", "kind": "BottlerocketShadow",
            "metadata": {"name": "brs-node-1", "namespace": "brupop-bottlerocket-aws", "resourceVersion": "7"},
            "status": {"current_version": "1.19.2", "target_version": "1.19.3", "current_state": "Idle",
                       "crash_count": 4, "state_transition_failure_timestamp": "2026-12-02T10:00:00Z"}
        }));
        let (steps, done) = all_steps(&p, &b, &Goal::Remediate);
        assert_eq!(steps, vec![Step::ClearFailure, Step::ResetCounters]);
        assert_eq!(done, Done::Complete);
        assert_eq!(
            next_step(&p, &b, &Goal::Hold(record())),
            Err(Done::NotHoldable)
        );
        let body = patch(&p, &b, &Goal::Remediate, Step::ResetCounters);
        assert_eq!(body["status"], json!({"crash_count": 0}));
    }

    #[test]
    fn deleting_objects_are_left_alone() {
        let p = builtin("capi-machine").unwrap();
        let mut v = serde_json::to_value(failed_machine(json!({}))).unwrap();
        v["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:00:00Z");
        let m = obj(v);
        assert_eq!(next_step(&p, &m, &Goal::Remediate), Err(Done::Deleting));
    }

    #[test]
    fn merge_follows_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
    }
}
