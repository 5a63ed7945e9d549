//! The compact projection of a watched object. Only what decisions need is
//! kept, so memory stays small with 100k objects.

use chrono::{DateTime, Utc};
use std::fmt;
use std::sync::Arc;

/// Identity of a watched resource: profile kind + namespace + name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub kind: Arc<str>,
    pub namespace: Arc<str>,
    pub name: Box<str>,
}

impl ResourceKey {
    pub fn new(kind: &str, namespace: &str, name: &str) -> Self {
        Self {
            kind: Arc::from(kind),
            namespace: Arc::from(namespace),
            name: Box::from(name),
        }
    }
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// Who holds the resource paused, judged from its annotations.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum PauseState {
    #[default]
    NotPaused,
    /// Paused by remedy: the pause value is remedy's marker and the hold
    /// annotation is present.
    Ours {
        since: Option<DateTime<Utc>>,
        reason: Option<Box<str>>,
    },
    /// Paused by someone else. Never touched.
    Foreign,
}

/// Who set an annotation remedy may toggle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Owner {
    #[default]
    Absent,
    Remedy,
    Other,
}

/// A condition that is not `True` (healthy conditions are not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionView {
    pub type_: Box<str>,
    pub status: Box<str>,
    pub reason: Option<Box<str>>,
    pub message: Option<Box<str>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ResourceView {
    pub uid: Box<str>,
    pub resource_version: Box<str>,
    /// All labels: alert scopes may select by any label.
    pub labels: Vec<(Box<str>, Box<str>)>,
    pub failure_reason: Option<Box<str>>,
    pub failure_message: Option<Box<str>>,
    pub conditions: Vec<ConditionView>,
    pub state: Option<Box<str>>,
    pub crash_count: Option<u32>,
    pub failure_time: Option<DateTime<Utc>>,
    pub pause: PauseState,
    pub skip_remediation: Owner,
    pub deleting: bool,
    /// Fields the profile names that exist but have the wrong type. Such a
    /// resource is reported unclassifiable and never touched.
    pub malformed: Vec<&'static str>,
}

impl ResourceView {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| v.as_ref())
    }

    pub fn has_failure(&self) -> bool {
        self.failure_reason.is_some() || self.failure_message.is_some()
    }
}
