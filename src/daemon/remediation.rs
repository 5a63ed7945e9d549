//! Cluster API external remediation (issue #36, docs/guides/external-remediation.md):
//! remedy carries out the `RemedyRemediation` requests a MachineHealthCheck
//! with `spec.remediation.templateRef` creates, one per unhealthy Machine.
//!
//! Each round (every `tick`) lists the requests, reads each one's Machine,
//! asks the engine for the outage that covers it (its domain's breaker, a
//! firing alert for its scope) and for the budget, and lets the pure planner
//! (`decide::external`) pick one action per request. It writes the request's
//! status (status subresource), Events on the Machine and the request, the
//! note `remedy.dev/why` on the Machine, `remedy_remediation_requests{phase}`
//! and `remedy_actions_total{action="replace"}`. When the MHC deletes a
//! request (its Machine is healthy again), remedy removes its note.
//!
//! Off unless the CRD is installed ([`installed`]); only the leader writes.

use crate::daemon::engine::{Covered, Engine};
use crate::daemon::leader::Leadership;
use crate::decide::external::{
    self, Action, Budget, Done, MachineFacts, Outage, Progress, Request, Wait,
};
use crate::metrics::Metrics;
use crate::metrics::values::ActionResult;
use crate::model::profile::{CAPI_PAUSED, WHY_ANNOTATION};
use crate::model::remediation::{
    self as rr, EXTERNALLY_REMEDIATED, HEALTH_CHECK_SUCCEEDED, OWNER_REMEDIATED, Phase,
    RemediationCondition, RemedyRemediationStatus, Step, StepKind, WaitingFor,
};
use crate::model::view::ResourceKey;
use chrono::{DateTime, SecondsFormat, Utc};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::events::{EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The Machine's API: the version CAPI v1.14 stores and serves first.
const MACHINE_GROUP: &str = "cluster.x-k8s.io";
const MACHINE_VERSION: &str = "v1beta2";
/// The kind of the Machine's key in remedy's store (the built-in profile's).
const MACHINE_KIND: &str = "Machine";
/// The request's condition remedy keeps.
const CONDITION: &str = "Remediating";

/// Errors of one round: logged, the next round tries again.
#[derive(Debug, thiserror::Error)]
pub enum RemediationError {
    #[error("list RemedyRemediations: {0}")]
    List(#[source] kube::Error),
}

impl RemediationError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::List(_) => "list",
        }
    }
}

/// Whether the `remedy.dev` CRDs are served: without them external
/// remediation is off (said in the log at start).
pub async fn installed(client: &Client) -> bool {
    let gv = format!("{}/{}", rr::GROUP, rr::VERSION);
    match client.list_api_group_resources(&gv).await {
        Ok(list) => list.resources.iter().any(|r| r.name == rr::PLURAL),
        Err(e) => {
            tracing::debug!(error = %e, "remedy.dev not served");
            false
        }
    }
}

fn request_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(rr::GROUP, rr::VERSION, rr::KIND),
        rr::PLURAL,
    )
}

fn machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(MACHINE_GROUP, MACHINE_VERSION, "Machine"),
        "machines",
    )
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn parse_time(s: Option<&str>) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A condition of an object's `status.conditions` (v1beta2 form).
fn condition<'a>(obj: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// What the planner needs of a Machine, and the keys remedy's store knows
/// it and its infrastructure object by.
fn machine_facts(m: Option<&DynamicObject>) -> MachineFacts {
    let Some(m) = m else {
        return MachineFacts::default();
    };
    MachineFacts {
        found: true,
        deleting: m.metadata.deletion_timestamp.is_some(),
        healthy: condition(m, HEALTH_CHECK_SUCCEEDED).is_none_or(|c| c["status"] != "False"),
        zone: m.data["spec"]["failureDomain"]
            .as_str()
            .filter(|z| !z.is_empty())
            .map(String::from),
        crash_count: 0,
        paused: m.annotations().contains_key(CAPI_PAUSED),
    }
}

/// One request as read this round.
struct Item {
    obj: DynamicObject,
    ns: String,
    name: String,
    machine_name: String,
    machine: Option<DynamicObject>,
    status: RemedyRemediationStatus,
    steps: Result<Vec<Step>, rr::SpecError>,
    keys: Vec<ResourceKey>,
}

pub struct Remediator {
    client: Client,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    leader: Leadership,
    namespaces: Vec<String>,
    dry_run: bool,
    /// Requests seen last round (`ns/name` → Machine), to clean up after
    /// the ones the MHC deleted.
    seen: tokio::sync::Mutex<BTreeMap<(String, String), String>>,
}

impl Remediator {
    pub fn new(
        client: Client,
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        leader: Leadership,
        namespaces: Vec<String>,
        dry_run: bool,
    ) -> Self {
        Self {
            recorder: crate::daemon::execute::recorder(&client),
            client,
            engine,
            metrics,
            leader,
            namespaces,
            dry_run,
            seen: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    fn requests(&self, ns: Option<&str>) -> Api<DynamicObject> {
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &request_resource()),
            None => Api::all_with(self.client.clone(), &request_resource()),
        }
    }

    fn machines(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &machine_resource())
    }

    /// Runs a round every `tick`; never ends (a round's error is logged).
    pub async fn run(self, tick: Duration) -> String {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if let Err(e) = self.round(Utc::now()).await {
                tracing::warn!(error = %e, label = e.label(), "external remediation round failed; tried again next tick");
            }
        }
    }

    async fn list(&self) -> Result<Vec<DynamicObject>, RemediationError> {
        let mut out = Vec::new();
        let scopes: Vec<Option<&str>> = if self.namespaces.is_empty() {
            vec![None]
        } else {
            self.namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        for ns in scopes {
            let list = self
                .requests(ns)
                .list(&ListParams::default())
                .await
                .map_err(RemediationError::List)?;
            out.extend(list.items);
        }
        Ok(out)
    }

    async fn read(&self, obj: DynamicObject) -> Item {
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        // CAPI names the request like the Machine and makes it its owner.
        let machine_name = obj
            .owner_references()
            .iter()
            .find(|o| o.kind == "Machine")
            .map(|o| o.name.clone())
            .unwrap_or_else(|| name.clone());
        let machine = match self.machines(&ns).get_opt(&machine_name).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(request = %format!("{ns}/{name}"), error = %e, "could not read the request's Machine");
                None
            }
        };
        let status: RemedyRemediationStatus =
            serde_json::from_value(obj.data["status"].clone()).unwrap_or_default();
        let steps = rr::parse_spec(&obj.data["spec"]);
        let mut keys = vec![ResourceKey::new(MACHINE_KIND, &ns, &machine_name)];
        if let Some(m) = &machine {
            let infra = &m.data["spec"]["infrastructureRef"];
            if let (Some(kind), Some(n)) = (infra["kind"].as_str(), infra["name"].as_str()) {
                keys.push(ResourceKey::new(kind, &ns, n));
            }
        }
        Item {
            obj,
            ns,
            name,
            machine_name,
            machine,
            status,
            steps,
            keys,
        }
    }

    /// One round over every request.
    pub async fn round(&self, now: DateTime<Utc>) -> Result<(), RemediationError> {
        let mut items = Vec::new();
        for obj in self.list().await? {
            items.push(self.read(obj).await);
        }
        items.sort_by(|a, b| (&a.ns, &a.name).cmp(&(&b.ns, &b.name)));
        let leader = self.leader.is_leader();
        let mut phases: BTreeMap<&'static str, i64> = BTreeMap::new();

        // Facts for the planner, for the requests with a valid spec.
        let valid: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].steps.is_ok())
            .collect();
        let keys: Vec<String> = valid
            .iter()
            .map(|&i| format!("{}/{}", items[i].ns, items[i].name))
            .collect();
        // budget.per: an owner's replacements under way (escalated, the
        // Machine not gone yet) and its releases unanswered take its slots.
        let owners: Vec<Option<(String, usize, u32)>> = valid
            .iter()
            .map(|&i| items[i].keys.iter().find_map(|k| self.engine.owner_of(k)))
            .collect();
        let mut per_owner: BTreeMap<String, usize> = BTreeMap::new();
        for (n, o) in owners.iter().enumerate() {
            if let Some((name, in_flight, max)) = o {
                let free = per_owner
                    .entry(name.clone())
                    .or_insert((*max as usize).saturating_sub(*in_flight));
                if items[valid[n]].status.phase == Some(Phase::Escalated) {
                    *free = free.saturating_sub(1);
                }
            }
        }
        let mut requests = Vec::with_capacity(valid.len());
        for (n, &i) in valid.iter().enumerate() {
            let it = &items[i];
            let mut machine = machine_facts(it.machine.as_ref());
            machine.crash_count = it
                .keys
                .iter()
                .map(|k| self.engine.crash_count(k))
                .max()
                .unwrap_or(0);
            let outage = it
                .keys
                .iter()
                .find_map(|k| self.engine.outage_for(k, machine.zone.as_deref()))
                .map(|c| match c {
                    Covered::Breaker(domain) => (Outage::Breaker { domain }, None),
                    Covered::Alert(alert) => (Outage::Alert { alert }, None),
                });
            let s = &it.status;
            requests.push(Request {
                key: &keys[n],
                steps: it.steps.as_deref().unwrap_or_default(),
                progress: Progress {
                    current_step: s.current_step.map(|c| c as usize),
                    step_started: parse_time(s.step_started_at.as_deref()),
                    acted: s.acted,
                    deferred: s.phase == Some(Phase::Deferred),
                },
                machine,
                outage,
                owner: owners[n].as_ref().map(|(name, _, _)| name.as_str()),
            });
        }
        let (tokens, next) = self.engine.budget_now();
        let budget = Budget {
            starts: if leader { tokens } else { 0 },
            next_start: chrono::Duration::from_std(next).ok().map(|d| now + d),
            per_owner,
        };
        let mut actions = external::plan(&requests, &budget, now);
        // Take the tokens the starts need; a start the engine spent first
        // waits (the later ones in the planner's order are the last to go).
        let starts = actions
            .iter()
            .filter(|a| matches!(a, Action::StartStep(_)))
            .count();
        let taken = if leader && starts > 0 {
            self.engine.take_budget(starts)
        } else {
            0
        };
        let mut order: Vec<usize> = (0..actions.len())
            .filter(|&n| matches!(actions[n], Action::StartStep(_)))
            .collect();
        order.sort_by_key(|&n| (requests[n].machine.crash_count, requests[n].key));
        for &n in order.iter().skip(taken) {
            actions[n] = Action::Wait {
                why: Wait::Budget,
                until: budget.next_start,
            };
        }
        drop(requests);

        let mut acted: BTreeMap<usize, Action> = valid.iter().copied().zip(actions).collect();
        let mut explained = std::collections::HashMap::new();
        for (i, it) in items.iter().enumerate() {
            let phase = match (&it.steps, acted.remove(&i)) {
                (Err(e), _) => {
                    if leader {
                        self.refuse(it, e, now).await;
                    }
                    Some(Phase::Invalid)
                }
                (Ok(steps), Some(action)) => {
                    if leader {
                        self.carry_out(it, steps, &action, now).await
                    } else {
                        action.phase(steps).or(it.status.phase)
                    }
                }
                (Ok(_), None) => it.status.phase,
            };
            let phase = phase.unwrap_or(Phase::Pending);
            *phases.entry(phase.as_str()).or_default() += 1;
            explained.insert(it.keys[0].clone(), explain(it, phase));
        }
        self.metrics.remediation.set(&phases);
        self.engine.set_external(explained);

        // The MHC deleted these (their Machine is healthy again, or gone):
        // remove the note remedy left on the Machine.
        let now_seen: BTreeMap<(String, String), String> = items
            .iter()
            .map(|it| ((it.ns.clone(), it.name.clone()), it.machine_name.clone()))
            .collect();
        let gone: Vec<((String, String), String)> = {
            let mut seen = self.seen.lock().await;
            let gone = seen
                .iter()
                .filter(|(k, _)| !now_seen.contains_key(*k))
                .map(|(k, m)| (k.clone(), m.clone()))
                .collect();
            *seen = now_seen;
            gone
        };
        if leader {
            for ((ns, name), machine) in gone {
                tracing::info!(request = %format!("{ns}/{name}"), machine, "request deleted by its MachineHealthCheck; removing remedy's note");
                self.note(&ns, &machine, None).await;
            }
        }
        Ok(())
    }

    /// A request whose spec remedy cannot carry out: its status says why,
    /// once (a Warning Event on the request), and nothing else is done.
    async fn refuse(&self, it: &Item, e: &rr::SpecError, now: DateTime<Utc>) {
        let waiting = WaitingFor {
            reason: "InvalidSpec".into(),
            message: Some(e.to_string()),
            until: None,
        };
        if it.status.phase == Some(Phase::Invalid)
            && it.status.waiting_for.as_ref() == Some(&waiting)
        {
            return;
        }
        tracing::warn!(request = %format!("{}/{}", it.ns, it.name), reason = e.label(), error = %e, "remediation request refused");
        let mut status = it.status.clone();
        status.phase = Some(Phase::Invalid);
        status.waiting_for = Some(waiting);
        set_condition(&mut status, Phase::Invalid, &e.to_string(), now);
        self.write_status(it, &status).await;
        self.event(
            &it.obj,
            &request_resource(),
            EventType::Warning,
            "RemediationRefused",
            &format!("remedy refused this request ({}): {e}", e.label()),
            "Refuse",
        )
        .await;
    }

    /// Carries out one action; returns the phase the request is in after it.
    async fn carry_out(
        &self,
        it: &Item,
        steps: &[Step],
        action: &Action,
        now: DateTime<Utc>,
    ) -> Option<Phase> {
        let old = it.status.clone();
        let mut status = old.clone();
        let mut events: Vec<(EventType, &'static str, String)> = Vec::new();
        let mut phase = action.phase(steps);
        match action {
            Action::Done(Done::Gone) => return old.phase,
            Action::Done(Done::Healthy) => {
                status.waiting_for = None;
                if old.phase != Some(Phase::Succeeded) {
                    events.push((
                        EventType::Normal,
                        "MachineHealthy",
                        "the Machine is healthy again: nothing more to do (its MachineHealthCheck deletes this request)".into(),
                    ));
                }
            }
            Action::Defer { outage, until } => {
                // The step under way starts again after the outage
                // (decide::external): its start and action are forgotten.
                status.step_started_at = None;
                status.acted = false;
                status.waiting_for = Some(WaitingFor {
                    reason: outage.reason().into(),
                    message: Some(outage.message()),
                    until: until.map(rfc3339),
                });
                if old.phase != Some(Phase::Deferred) {
                    events.push((
                        EventType::Normal,
                        "RemediationDeferred",
                        format!(
                            "remedy defers remediation: {}; the Machine is neither retried nor replaced until it ends",
                            outage.message()
                        ),
                    ));
                }
            }
            Action::StartStep(i) => {
                let kind = steps.get(*i).map_or(StepKind::Retry, |s| s.kind);
                status.current_step = Some(*i as u32);
                status.step_started_at = Some(rfc3339(now));
                status.acted = false;
                status.waiting_for = None;
                events.push((
                    EventType::Normal,
                    "RemediationStepStarted",
                    format!("step {i} ({}) starts", kind.as_str()),
                ));
            }
            Action::Retry => {
                // remedy's own remediation of the infrastructure object (and
                // of the Machine), if remedy watches them: what stops the
                // provider is cleared by the engine's workers.
                let queued: Vec<String> = it
                    .keys
                    .iter()
                    .rev()
                    .filter(|k| !self.dry_run && self.engine.remediate(k))
                    .map(|k| format!("{} {}", k.kind, k.name))
                    .collect();
                status.acted = true;
                status.attempts += 1;
                let note = if queued.is_empty() {
                    "remedy retried: nothing it watches had failure status to clear; waiting for the Machine to become healthy".to_string()
                } else {
                    format!(
                        "remedy retried: remediation of {} queued; waiting for the Machine to become healthy",
                        queued.join(", ")
                    )
                };
                events.push((EventType::Normal, "RemediationRetried", note));
                status.waiting_for = self.step_wait(steps, &status, Wait::Healing);
            }
            Action::Escalate => {
                let result = self.escalate(it, now).await;
                self.metrics.actions.count("replace", result);
                if result != ActionResult::Success {
                    return old.phase;
                }
                status.acted = true;
                status.attempts += 1;
                events.push((
                    EventType::Warning,
                    "RemediationEscalated",
                    format!(
                        "remedy set {OWNER_REMEDIATED}=False ({}): the MachineSet deletes and replaces the Machine",
                        rr::ESCALATED_REASON
                    ),
                ));
                status.waiting_for = self.step_wait(steps, &status, Wait::Replacement);
            }
            Action::Wait { why, until } => {
                status.waiting_for = Some(WaitingFor {
                    reason: why.reason().into(),
                    message: match why {
                        Wait::BudgetPer { owner } => Some(format!("budget.per: {owner}")),
                        _ => None,
                    },
                    until: until.map(rfc3339),
                });
                if *why == Wait::Exhausted && old.phase != Some(Phase::Exhausted) {
                    events.push((
                        EventType::Warning,
                        "RemediationExhausted",
                        "the last step timed out and none replaces the Machine: left to an operator".into(),
                    ));
                }
            }
        }
        if phase.is_none() {
            phase = old.phase;
        }
        status.phase = phase;
        let message = status
            .waiting_for
            .as_ref()
            .map(|w| w.reason.clone())
            .unwrap_or_default();
        if let Some(p) = phase {
            set_condition(&mut status, p, &message, now);
        }
        if status != old {
            self.write_status(it, &status).await;
        }
        let machine = it.machine.as_ref();
        for (type_, reason, note) in &events {
            self.event(&it.obj, &request_resource(), *type_, reason, note, reason)
                .await;
            if let Some(m) = machine {
                self.event(m, &machine_resource(), *type_, reason, note, reason)
                    .await;
            }
        }
        if old.phase != phase
            && let Some(p) = phase
        {
            let why = match &status.waiting_for {
                Some(w) => format!(
                    "external remediation {}: {}{}",
                    p.as_str(),
                    w.message.as_deref().unwrap_or(&w.reason),
                    w.until
                        .as_deref()
                        .map(|u| format!(" (until {u})"))
                        .unwrap_or_default()
                ),
                None => format!("external remediation {}", p.as_str()),
            };
            self.note(&it.ns, &it.machine_name, Some(&why)).await;
        }
        phase
    }

    fn step_wait(
        &self,
        steps: &[Step],
        status: &RemedyRemediationStatus,
        why: Wait,
    ) -> Option<WaitingFor> {
        let started = parse_time(status.step_started_at.as_deref())?;
        let step = steps.get(status.current_step? as usize)?;
        let until = started + chrono::Duration::from_std(step.timeout).ok()?;
        Some(WaitingFor {
            reason: why.reason().into(),
            message: None,
            until: Some(rfc3339(until)),
        })
    }

    /// `OwnerRemediated=False` on the Machine, with a resourceVersion
    /// precondition (a 409 is tried again next round).
    async fn escalate(&self, it: &Item, now: DateTime<Utc>) -> ActionResult {
        if self.dry_run {
            return ActionResult::DryRun;
        }
        let Some(m) = &it.machine else {
            return ActionResult::Skipped;
        };
        let mut conditions: Vec<Value> = m.data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c["type"] != OWNER_REMEDIATED)
            .collect();
        conditions.push(json!({
            "type": OWNER_REMEDIATED,
            "status": "False",
            "reason": rr::ESCALATED_REASON,
            "message": "remedy's external remediation: the retry timed out, the Machine is to be replaced",
            "lastTransitionTime": rfc3339(now),
        }));
        let body = json!({
            "metadata": {"resourceVersion": m.resource_version()},
            "status": {"conditions": conditions},
        });
        match self
            .machines(&it.ns)
            .patch_status(
                &it.machine_name,
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(machine = %format!("{}/{}", it.ns, it.machine_name), externally_remediated = condition(m, EXTERNALLY_REMEDIATED).is_some(), "escalated: OwnerRemediated=False");
                ActionResult::Success
            }
            Err(kube::Error::Api(e)) if e.code == 409 => ActionResult::Conflict,
            Err(kube::Error::Api(e)) if e.code == 403 => ActionResult::Forbidden,
            Err(e) => {
                tracing::warn!(machine = %format!("{}/{}", it.ns, it.machine_name), error = %e, "could not set OwnerRemediated=False");
                ActionResult::Error
            }
        }
    }

    async fn write_status(&self, it: &Item, status: &RemedyRemediationStatus) {
        if self.dry_run {
            return;
        }
        // A merge patch: fields remedy no longer sets are written null.
        let mut body = serde_json::to_value(status).unwrap_or(Value::Null);
        if let Some(map) = body.as_object_mut() {
            for f in [
                "phase",
                "currentStep",
                "stepStartedAt",
                "waitingFor",
                "conditions",
            ] {
                map.entry(f).or_insert(Value::Null);
            }
        }
        if let Err(e) = self
            .requests(Some(&it.ns))
            .patch_status(
                &it.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": body })),
            )
            .await
        {
            tracing::warn!(request = %format!("{}/{}", it.ns, it.name), error = %e, "could not write the request's status");
        }
    }

    /// Writes (or with `None` removes) remedy's note on the Machine.
    async fn note(&self, ns: &str, machine: &str, text: Option<&str>) {
        if self.dry_run {
            return;
        }
        let api = self.machines(ns);
        if text.is_none() {
            match api.get_opt(machine).await {
                Ok(Some(m)) if m.annotations().contains_key(WHY_ANNOTATION) => {}
                _ => return,
            }
        }
        let body = json!({"metadata": {"annotations": {WHY_ANNOTATION: text}}});
        if let Err(e) = api
            .patch(machine, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            tracing::debug!(machine, error = %e, "note not written");
        }
    }

    async fn event(
        &self,
        obj: &DynamicObject,
        ar: &ApiResource,
        type_: EventType,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        let reference = obj.object_ref(ar);
        crate::daemon::execute::publish_event(
            &self.recorder,
            &reference,
            type_,
            reason,
            note,
            action,
        )
        .await;
    }
}

/// What `explain` says of a Machine's request: its name, phase, step and
/// what it waits for, as of the round that read it.
fn explain(it: &Item, phase: Phase) -> String {
    let s = &it.status;
    let step = match (&it.steps, s.current_step) {
        (Ok(steps), Some(i)) => steps
            .get(i as usize)
            .map(|st| format!(", step {i} ({})", st.kind.as_str()))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let waiting = s
        .waiting_for
        .as_ref()
        .map(|w| {
            format!(
                ", waiting for {}{}",
                w.reason,
                w.until
                    .as_deref()
                    .map(|u| format!(" until {u}"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_default();
    format!(
        "{}/{} {}{step}, {} attempts{waiting}",
        rr::KIND,
        it.name,
        phase.as_str(),
        s.attempts
    )
}

/// The request's one condition: `Remediating`, True while remedy still
/// has something to do.
fn set_condition(s: &mut RemedyRemediationStatus, phase: Phase, message: &str, now: DateTime<Utc>) {
    let active = !matches!(phase, Phase::Succeeded | Phase::Exhausted | Phase::Invalid);
    let status = if active { "True" } else { "False" };
    let old = s.conditions.iter().find(|c| c.type_ == CONDITION);
    let last = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => rfc3339(now),
    };
    let c = RemediationCondition {
        type_: CONDITION.into(),
        status: status.into(),
        reason: phase.as_str().into(),
        message: message.into(),
        last_transition_time: last,
    };
    s.conditions.retain(|c| c.type_ != CONDITION);
    s.conditions.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(conds: Value, spec: Value) -> DynamicObject {
        let mut m = DynamicObject::new("m", &machine_resource()).within("ns");
        m.data = json!({"spec": spec, "status": {"conditions": conds}});
        m
    }

    #[test]
    fn machine_facts_read_health_zone_and_deletion() {
        let m = machine(
            json!([{"type": HEALTH_CHECK_SUCCEEDED, "status": "False"}]),
            json!({"failureDomain": "az1"}),
        );
        let f = machine_facts(Some(&m));
        assert!(f.found && !f.healthy && !f.deleting);
        assert_eq!(f.zone.as_deref(), Some("az1"));
        assert!(!f.paused);
        let mut ok = machine(json!([]), json!({}));
        ok.annotations_mut()
            .insert(CAPI_PAUSED.into(), String::new());
        let f = machine_facts(Some(&ok));
        assert!(f.healthy && f.paused);
        assert_eq!(f.zone, None);
        assert!(!machine_facts(None).found);
    }

    #[test]
    fn the_condition_keeps_its_transition_time_while_its_status_holds() {
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("t");
        let t1 = t0 + chrono::Duration::seconds(30);
        let mut s = RemedyRemediationStatus::default();
        set_condition(&mut s, Phase::Deferred, "BreakerOpen", t0);
        set_condition(&mut s, Phase::Retrying, "", t1);
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].last_transition_time, rfc3339(t0));
        assert_eq!(s.conditions[0].reason, "Retrying");
        set_condition(&mut s, Phase::Succeeded, "", t1);
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].last_transition_time, rfc3339(t1));
    }
}
