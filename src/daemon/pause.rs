//! The pause switch, remedy's andon cord: one ConfigMap (`pause_switch`)
//! that every replica reads at every tick. While its `paused` key is
//! "true", remedy writes nothing to the resources it watches: no hold,
//! release or remediation is queued, queued ones are dropped, and the
//! executor refuses the next write of a goal already running. What is held
//! stays held; watching, metrics, the breaker and the webhook go on.
//! `remedy pause --reason …` and `remedy resume` set and clear it.

use crate::metrics::values::PauseRead;
use crate::metrics::{Metrics, PauseReadLabels};
use crate::sync::LockExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub const PAUSED_KEY: &str = "paused";
pub const REASON_KEY: &str = "reason";
pub const BY_KEY: &str = "by";
pub const SINCE_KEY: &str = "since";
/// Longest reason, author or time kept from the ConfigMap (anyone who may
/// write it writes these; they end up in logs and /status).
const MAX_TEXT: usize = 512;

/// Who paused remedy, when and why, as the ConfigMap says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    pub reason: String,
    pub by: String,
    pub since: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    #[error("{key} is {value:?}, not \"true\" or \"false\": treated as paused")]
    Invalid { key: &'static str, value: String },
    #[error("cannot read the pause switch ConfigMap {name}: {source}")]
    Read {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot write the pause switch ConfigMap {name}: {source}")]
    Write {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl PauseError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Invalid { .. } => "invalid",
            Self::Read { .. } => "error",
            Self::Write { .. } => "write",
        }
    }
}

fn capped(s: Option<&String>) -> String {
    let s = s.map(String::as_str).unwrap_or("");
    match s.char_indices().nth(MAX_TEXT) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// What the ConfigMap's data says: paused or not. `paused` must be "true"
/// or "false" (absent: not paused); any other value is an error the caller
/// treats as paused: someone meant to stop remedy.
pub fn read(data: &BTreeMap<String, String>) -> Result<Option<Paused>, PauseError> {
    let paused = Paused {
        reason: capped(data.get(REASON_KEY)),
        by: capped(data.get(BY_KEY)),
        since: capped(data.get(SINCE_KEY)),
    };
    match data.get(PAUSED_KEY).map(|v| v.trim()) {
        None | Some("false") => Ok(None),
        Some("true") => Ok(Some(paused)),
        Some(other) => Err(PauseError::Invalid {
            key: PAUSED_KEY,
            value: capped(Some(&other.to_string())),
        }),
    }
}

/// The data `remedy pause` (Some) or `remedy resume` (None) writes.
pub fn data(paused: Option<&Paused>, by: &str, since: &str) -> BTreeMap<String, String> {
    let mut d = BTreeMap::from([
        (BY_KEY.to_string(), by.to_string()),
        (SINCE_KEY.to_string(), since.to_string()),
    ]);
    match paused {
        Some(p) => {
            d.insert(PAUSED_KEY.into(), "true".into());
            d.insert(REASON_KEY.into(), p.reason.clone());
        }
        None => {
            d.insert(PAUSED_KEY.into(), "false".into());
        }
    }
    d
}

/// Sets (`Some`) or clears (`None`) the switch with a server-side apply
/// that owns the four keys, creating the ConfigMap if needed.
pub async fn write(
    api: &Api<ConfigMap>,
    name: &str,
    paused: Option<&Paused>,
    by: &str,
    since: &str,
) -> Result<(), PauseError> {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "remedy"}},
        "data": data(paused, by, since),
    });
    api.patch(
        name,
        &PatchParams::apply("remedy-cli").force(),
        &Patch::Apply(&body),
    )
    .await
    .map(|_| ())
    .map_err(|e| PauseError::Write {
        name: name.to_string(),
        source: Box::new(e),
    })
}

/// The switch as this replica last read it. Until one read succeeds it
/// counts as set: a new or restarted replica that cannot read it (a Role
/// without `get`, an apiserver error) must not write while an operator may
/// have pulled the cord (#38.4).
pub struct PauseSwitch {
    api: Option<(Api<ConfigMap>, String)>,
    paused: AtomicBool,
    /// Whether a read has succeeded since the process started.
    read_once: AtomicBool,
    /// The last read was refused (403): the Role is wrong, /readyz says so.
    forbidden: AtomicBool,
    state: Mutex<Option<Paused>>,
    problem: Mutex<Option<String>>,
    metrics: Arc<Metrics>,
}

impl PauseSwitch {
    /// Reads `namespace/name`; an empty name is a switch that is never set.
    pub fn new(client: kube::Client, namespace: &str, name: &str, metrics: Arc<Metrics>) -> Self {
        let api =
            (!name.is_empty()).then(|| (Api::namespaced(client, namespace), name.to_string()));
        let read_once = AtomicBool::new(api.is_none());
        Self {
            api,
            paused: AtomicBool::new(false),
            read_once,
            forbidden: AtomicBool::new(false),
            state: Mutex::new(None),
            problem: Mutex::new(None),
            metrics,
        }
    }

    /// Checked by the executor right before each write: set, or not read
    /// yet.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst) || !self.read_once.load(Ordering::SeqCst)
    }

    /// Why this replica is not ready because of the switch: it was never
    /// read (so remedy writes nothing), or reading it is forbidden.
    pub fn unready(&self) -> Option<String> {
        let name = self.api.as_ref().map_or("", |(_, n)| n.as_str());
        let problem = self.problem();
        if !self.read_once.load(Ordering::SeqCst) {
            return Some(format!(
                "pause switch ConfigMap {name} not read yet: remedy writes nothing until it is{}",
                problem.map(|p| format!(" ({p})")).unwrap_or_default()
            ));
        }
        if self.forbidden.load(Ordering::SeqCst) {
            return problem;
        }
        None
    }

    pub fn state(&self) -> Option<Paused> {
        self.state.locked().clone()
    }

    /// Why the last read failed, for /readyz.
    pub fn problem(&self) -> Option<String> {
        self.problem.locked().clone()
    }

    /// Reads the ConfigMap. A failed read keeps the last answer (the
    /// switch is a control, not a signal: an apiserver hiccup neither
    /// pauses nor resumes) and is reported.
    pub async fn refresh(&self) {
        let Some((api, name)) = &self.api else {
            return;
        };
        let (result, next) = match api.get_opt(name).await {
            Ok(None) => (PauseRead::Absent, Ok(None)),
            Ok(Some(cm)) => match read(&cm.data.unwrap_or_default()) {
                Ok(None) => (PauseRead::Clear, Ok(None)),
                Ok(Some(p)) => (PauseRead::Set, Ok(Some(p))),
                Err(e) => (
                    PauseRead::Invalid,
                    Ok(Some(Paused {
                        reason: e.to_string(),
                        ..Paused::default()
                    })),
                ),
            },
            Err(e) => (
                PauseRead::Error,
                Err(PauseError::Read {
                    name: name.clone(),
                    source: Box::new(e),
                }),
            ),
        };
        self.metrics
            .process
            .pause_reads
            .get_or_create(&PauseReadLabels { result })
            .inc();
        match next {
            Ok(next) => {
                *self.problem.locked() = None;
                self.forbidden.store(false, Ordering::SeqCst);
                if !self.read_once.swap(true, Ordering::SeqCst) && next.is_none() {
                    tracing::info!(configmap = %name, "pause switch read: not set, remedy writes");
                }
                let was = self.paused.swap(next.is_some(), Ordering::SeqCst);
                match (&next, was) {
                    (Some(p), false) => tracing::warn!(
                        reason = %p.reason, by = %p.by, since = %p.since, configmap = %name,
                        "pause switch set: remedy writes nothing until it is cleared; held resources stay held"
                    ),
                    (None, true) => {
                        tracing::warn!(configmap = %name, "pause switch cleared: remedy writes again")
                    }
                    _ => {}
                }
                self.metrics.process.paused.set(i64::from(next.is_some()));
                *self.state.locked() = next;
            }
            Err(e) => {
                let forbidden = matches!(
                    &e,
                    PauseError::Read { source, .. }
                        if matches!(&**source, kube::Error::Api(ae) if ae.code == 403)
                );
                self.forbidden.store(forbidden, Ordering::SeqCst);
                if self.read_once.load(Ordering::SeqCst) {
                    tracing::warn!(error = %e, forbidden, "pause switch not read; keeping the last answer");
                } else {
                    tracing::warn!(error = %e, forbidden, "pause switch never read: remedy writes nothing until one read succeeds");
                }
                *self.problem.locked() = Some(e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_true_pauses_only_false_or_nothing_resumes_anything_else_pauses() {
        assert_eq!(read(&map(&[])).unwrap(), None);
        assert_eq!(read(&map(&[("paused", "false")])).unwrap(), None);
        let p = read(&map(&[
            ("paused", "true"),
            ("reason", "INC-1"),
            ("by", "alice"),
        ]))
        .unwrap()
        .expect("paused");
        assert_eq!((p.reason.as_str(), p.by.as_str()), ("INC-1", "alice"));
        for odd in ["yes", "True", "1", ""] {
            let e = read(&map(&[("paused", odd)])).expect_err(odd);
            assert_eq!(e.label(), "invalid");
        }
    }

    #[test]
    fn texts_from_the_configmap_are_capped() {
        let long = "x".repeat(10_000);
        let p = read(&map(&[("paused", "true"), ("reason", &long)]))
            .unwrap()
            .expect("paused");
        assert_eq!(p.reason.chars().count(), MAX_TEXT + 1);
    }

    #[test]
    fn pause_and_resume_write_what_read_reads_back() {
        let p = Paused {
            reason: "cloud maintenance".into(),
            by: "bob".into(),
            since: "2026-12-05T12:00:00Z".into(),
        };
        let set = data(Some(&p), "bob", "2026-12-05T12:00:00Z");
        assert_eq!(read(&set).unwrap(), Some(p));
        let clear = data(None, "bob", "2026-12-05T13:00:00Z");
        assert_eq!(read(&clear).unwrap(), None);
        assert!(!clear.contains_key(REASON_KEY));
    }
}
