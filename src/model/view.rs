//! The compact projection of a watched object. Only what decisions need is
//! kept, so memory stays small with 100k objects.

use chrono::{DateTime, Utc};
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::num::NonZeroU64;
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

/// Labels packed into one allocation, `key\0value\0key\0value\0`: one
/// allocation instead of two per label keeps 100k views within budget
/// (benches/load.rs). Kubernetes label keys and values cannot contain NUL;
/// a pair that does is not kept.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Labels(Box<str>);

impl Labels {
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut packed = String::new();
        for (k, v) in pairs {
            if k.contains('\0') || v.contains('\0') {
                continue;
            }
            packed.push_str(k);
            packed.push('\0');
            packed.push_str(v);
            packed.push('\0');
        }
        Self(packed.into_boxed_str())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut parts = self.0.split_terminator('\0');
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(Box<str>, Box<str>)> for Labels {
    fn from_iter<I: IntoIterator<Item = (Box<str>, Box<str>)>>(iter: I) -> Self {
        let pairs: Vec<_> = iter.into_iter().collect();
        Self::from_pairs(pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
    }
}

/// A condition that is not `True` (healthy conditions are not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionView {
    pub type_: Box<str>,
    pub status: Box<str>,
    pub reason: Option<Box<str>>,
    pub message: Option<Box<str>>,
}

/// The compact state of a watched object that the store keeps: what
/// decisions after classification need. The failure texts are not in it (see
/// [`FailureText`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ResourceView {
    pub uid: Box<str>,
    pub resource_version: Box<str>,
    /// All labels: alert scopes may select by any label.
    pub labels: Labels,
    pub crash_count: Option<u32>,
    pub failure_time: Option<DateTime<Utc>>,
    pub pause: PauseState,
    pub skip_remediation: Owner,
    pub deleting: bool,
    /// Carries `remedy.dev/ignore`: not remedy's to count, hold or
    /// remediate.
    pub ignored: bool,
    /// [`crate::model::why::digest`] of remedy's note (`remedy.dev/why`),
    /// 0 without one: enough to tell whether a new note differs.
    pub why: u64,
    /// Remediation has status to clear ([`crate::model::profile::Profile::clearable`]).
    pub clearable: bool,
    /// Its owner is replacing it (a `hold.not_while` condition is False):
    /// remedy does not hold it.
    pub replaced: bool,
    /// Its controller has not made it in the cloud yet (none of
    /// `hold.new_until` is set): its next step is a create call.
    pub uncreated: bool,
    /// `metadata.creationTimestamp` (whole seconds, the apiserver's clock).
    pub created: Option<DateTime<Utc>>,
    /// Fields the profile names that exist but have the wrong type. Such a
    /// resource is reported unclassifiable and never touched.
    pub malformed: Vec<&'static str>,
}

impl ResourceView {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
}

/// What an object says about its failure. Classification reads it once per
/// event; the store keeps only its [`digest`](FailureText::digest), because
/// messages and conditions are most of a failing object's size (they took a
/// failing fleet from 1 KiB to 1.8 KiB per object, benches/load.rs).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FailureText {
    pub reason: Option<Box<str>>,
    pub message: Option<Box<str>>,
    pub conditions: Vec<ConditionView>,
    pub state: Option<Box<str>>,
}

impl FailureText {
    pub fn has_failure(&self) -> bool {
        self.reason.is_some() || self.message.is_some()
    }

    /// Identifies the failure fields, so a repeated failure (relist, status
    /// churn) is told from a new one without keeping the text. `None` when
    /// there is no failure. A collision only merges two counts of a metric.
    pub fn digest(&self) -> Option<NonZeroU64> {
        if !self.has_failure() {
            return None;
        }
        let mut h = DefaultHasher::new();
        self.reason.hash(&mut h);
        self.message.hash(&mut h);
        NonZeroU64::new(h.finish()).or(NonZeroU64::new(1))
    }
}

/// A projected object: the view the store keeps and the failure texts
/// classification reads.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Projection {
    pub view: ResourceView,
    pub failure: FailureText,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_labels_round_trip() {
        let pairs = [
            ("cluster.x-k8s.io/cluster-name", "prod-eu1"),
            ("empty", ""),
            ("", "empty-key"),
            ("machine-template-hash", "3859411"),
        ];
        let l = Labels::from_pairs(pairs);
        assert_eq!(l.iter().collect::<Vec<_>>(), pairs);
        assert_eq!(l.get("cluster.x-k8s.io/cluster-name"), Some("prod-eu1"));
        assert_eq!(l.get("empty"), Some(""));
        assert_eq!(l.get(""), Some("empty-key"));
        assert_eq!(l.get("prod-eu1"), None, "values are not keys");
        assert_eq!(l.get("missing"), None);
        assert!(Labels::default().is_empty());
        assert_eq!(Labels::default().iter().count(), 0);
    }

    #[test]
    fn a_pair_with_nul_is_dropped_not_misread() {
        let l = Labels::from_pairs([("a\0b", "c"), ("k", "v\0w"), ("x", "y")]);
        assert_eq!(l.iter().collect::<Vec<_>>(), [("x", "y")]);
        assert_eq!(l.get("b"), None);
        assert_eq!(format!("{l:?}"), r#"{"x": "y"}"#);
    }

    #[test]
    fn failure_digest_tells_failures_apart_and_ignores_conditions() {
        let f = |reason: Option<&str>, message: Option<&str>| FailureText {
            reason: reason.map(Box::from),
            message: message.map(Box::from),
            ..FailureText::default()
        };
        assert_eq!(f(None, None).digest(), None);
        let a = f(Some("CreateError"), Some("503"));
        assert!(a.digest().is_some());
        assert_eq!(a.digest(), a.clone().digest());
        assert_ne!(a.digest(), f(Some("CreateError"), Some("504")).digest());
        assert_ne!(a.digest(), f(Some("UpdateError"), Some("503")).digest());
        // Reason and message are not run together: ("ab", "c") != ("a", "bc").
        assert_ne!(
            f(Some("ab"), Some("c")).digest(),
            f(Some("a"), Some("bc")).digest()
        );
        assert_ne!(f(Some("x"), None).digest(), f(None, Some("x")).digest());
        let mut with_conditions = a.clone();
        with_conditions.conditions.push(ConditionView {
            type_: "Ready".into(),
            status: "False".into(),
            reason: None,
            message: None,
        });
        assert_eq!(with_conditions.digest(), a.digest());
    }
}
