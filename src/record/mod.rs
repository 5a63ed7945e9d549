//! The episode record: alert episodes kept in the Kubernetes API, so that
//! any replica can accept Alertmanager's notification and the leader, this
//! one or the next, acts on it. Pure: the document, how notifications are
//! appended to it and how the leader folds them into its episodes. The
//! ConfigMap I/O is in [`configmap`], the batching webhook writer in [`inbox`].
//!
//! Why a ConfigMap: it is the smallest namespaced object every cluster has
//! that holds a bounded document (1 MiB) under optimistic concurrency, needs
//! no CRD, and RBAC can limit to one name. The Lease was the other candidate,
//! but its annotations hold 256 KiB and its holder renews it every few
//! seconds, so episode writes and renewals would conflict with each other.
//!
//! Two kinds of writer share the document, each with its own part, and
//! every write carries the resourceVersion it read (a 409 means read again):
//! - any replica appends notifications to `inbox`, each with the next
//!   sequence number, and answers Alertmanager only once that write is in;
//! - the leader folds inbox entries after `consumed` into its episodes, then
//!   writes the episodes and `consumed` and drops what it folded.

pub mod configmap;
pub mod sync;

use crate::decide::episodes::{AlertTimes, Book, Episode};
use crate::model::scope::Scope;
use crate::model::view::ResourceKey;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};

/// What a read of the record found ([`configmap::RecordApi::read`]):
/// nothing yet (the first write creates it), or this.
pub type Read = Option<Found>;

#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub record: Record,
    /// The resourceVersion to write against.
    pub rv: String,
    /// The ConfigMap's uid: a new one means the record was deleted and
    /// made again, with its notifications numbered from 1.
    pub uid: String,
}

impl Found {
    pub fn new(record: Record, rv: impl Into<String>, uid: impl Into<String>) -> Self {
        Self {
            record,
            rv: rv.into(),
            uid: uid.into(),
        }
    }
}

/// Format version of the document. Version 2 added the alert's times to
/// the inbox's notices: a remedy that reads only version 1 (whose notices
/// refuse unknown fields) leaves such a record alone instead of taking it
/// for corrupt and rewriting it empty during a rollout.
pub const VERSION: u32 = 2;
/// The oldest version this remedy reads: what version 1 lacks is optional.
const OLDEST: u32 = 1;
/// Notifications waiting for the leader at most; a write beyond it is
/// refused (503), so Alertmanager retries once the leader has caught up.
pub const MAX_INBOX: usize = 256;
/// Encoded size at most: a ConfigMap holds 1 MiB with its metadata.
pub const MAX_BYTES: usize = 900 * 1024;
/// The leader sheds episodes down to this, so that whatever the episodes
/// hold, a quarter of the record (225 KiB, a hundred notifications even
/// of scopes with four 253-byte values) stays free for the webhook's notifications: a full
/// record would answer every delivery 503, the real resolved one too.
pub const LEADER_BYTES: usize = MAX_BYTES / 4 * 3;
/// Remediation targets kept across all episodes; an episode that would
/// take more is over its cap (it remediates nothing, counted).
pub const MAX_TARGETS: usize = 2000;
/// The ConfigMap key that holds the document.
pub const DATA_KEY: &str = "episodes.json";

#[derive(Clone, Debug, thiserror::Error)]
pub enum RecordError {
    #[error("episode record is not valid: {0}")]
    Invalid(String),
    #[error("episode record is corrupt: {0}")]
    Corrupt(String),
    #[error("episode record would be {0} bytes, over {MAX_BYTES}")]
    TooLarge(usize),
    #[error("episode record inbox holds {MAX_INBOX} notifications not yet taken by the leader")]
    Full,
    #[error("episode record changed under us {0} times in a row")]
    Conflict(u32),
    #[error("episode record: forbidden (RBAC): {0}")]
    Forbidden(String),
    #[error("episode record: apiserver error: {0}")]
    Api(String),
    #[error("episode record writer is not running")]
    Closed,
    #[error("episode record write took longer than {0:?}")]
    Timeout(std::time::Duration),
}

impl RecordError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid",
            Self::Corrupt(_) => "corrupt",
            Self::TooLarge(_) => "too_large",
            Self::Full => "full",
            Self::Conflict(_) => "conflict",
            Self::Forbidden(_) => "forbidden",
            Self::Api(_) => "error",
            Self::Closed => "closed",
            Self::Timeout(_) => "timeout",
        }
    }
}

/// One notification, as the scope it is about and its status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notice {
    pub seq: u64,
    pub scope: Scope,
    pub firing: bool,
    /// When the webhook received it.
    pub at: DateTime<Utc>,
    /// The alert's `startsAt` and `endsAt` as Alertmanager sent them
    /// ([`AlertTimes`]); absent from records written before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<DateTime<Utc>>,
}

impl Notice {
    /// A notification received `at`, about an alert that started
    /// `starts_at` (and ended `ends_at`, if it has); [`Record::append`]
    /// numbers it.
    pub fn new(
        scope: Scope,
        firing: bool,
        at: DateTime<Utc>,
        starts_at: Option<DateTime<Utc>>,
        ends_at: Option<DateTime<Utc>>,
    ) -> Self {
        Self {
            seq: 0,
            scope,
            firing,
            at,
            starts_at,
            ends_at,
        }
    }

    pub fn times(&self) -> AlertTimes {
        AlertTimes {
            starts_at: self.starts_at,
            ends_at: self.ends_at,
        }
    }
}

/// An episode with the remediation targets it has left.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stored {
    pub scope: Scope,
    pub episode: Episode,
    /// `[kind, namespace, name]`; `None` until verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<[String; 3]>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub version: u32,
    /// Inbox entries up to this sequence number are in `episodes`.
    pub consumed: u64,
    /// The last sequence number handed out.
    pub last_seq: u64,
    /// Who wrote `episodes` last (a pod name).
    #[serde(default)]
    pub leader: String,
    pub episodes: Vec<Stored>,
    pub inbox: Vec<Notice>,
}

impl Record {
    pub fn empty() -> Self {
        Self {
            version: VERSION,
            ..Self::default()
        }
    }

    /// Parses what the ConfigMap holds. A document of another version is
    /// refused and left alone (a newer remedy may be rolling out); anything
    /// that is not a consistent document of this format is corrupt, and is
    /// rewritten by the next writer (its text is logged first): otherwise
    /// it would refuse every notification for good.
    pub fn decode(text: &str) -> Result<Self, RecordError> {
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        if let Ok(v) = serde_json::from_str::<Versioned>(text)
            && !(OLDEST..=VERSION).contains(&v.version)
        {
            return Err(RecordError::Invalid(format!(
                "version {} (this remedy reads {VERSION})",
                v.version
            )));
        }
        let r: Self =
            serde_json::from_str(text).map_err(|e| RecordError::Corrupt(e.to_string()))?;
        if !(OLDEST..=VERSION).contains(&r.version) {
            return Err(RecordError::Invalid(format!(
                "version {} (this remedy reads {VERSION})",
                r.version
            )));
        }
        if r.inbox.iter().any(|n| n.seq > r.last_seq) {
            return Err(RecordError::Corrupt(
                "an inbox entry is numbered after last_seq".into(),
            ));
        }
        if r.episodes.len() > crate::decide::episodes::MAX_EPISODES || r.inbox.len() > MAX_INBOX {
            return Err(RecordError::Corrupt("over its bounds".into()));
        }
        Ok(r)
    }

    pub fn encode(&self) -> Result<String, RecordError> {
        let text = serde_json::to_string(self).map_err(|e| RecordError::Invalid(e.to_string()))?;
        if text.len() > MAX_BYTES {
            return Err(RecordError::TooLarge(text.len()));
        }
        Ok(text)
    }

    /// Appends notifications (their `seq` is set here), all or none. One
    /// that repeats the status of the newest waiting entry for its scope
    /// (the same notification sent to two replicas, or redelivered) is
    /// already there and is skipped. Returns how many were appended.
    pub fn append(&mut self, notices: &[Notice]) -> Result<usize, RecordError> {
        let mut added: Vec<Notice> = Vec::new();
        for notice in notices {
            let newest = added
                .iter()
                .rev()
                .chain(self.inbox.iter().rev())
                .find(|n| n.scope == notice.scope);
            if newest.is_some_and(|n| n.firing == notice.firing) {
                continue;
            }
            added.push(notice.clone());
        }
        if self.inbox.len() + added.len() > MAX_INBOX || !self.has_room_for(&added) {
            return Err(RecordError::Full);
        }
        let n = added.len();
        // Written in this version's form from now on.
        self.version = VERSION;
        for mut notice in added {
            self.last_seq += 1;
            notice.seq = self.last_seq;
            self.inbox.push(notice);
        }
        Ok(n)
    }

    /// Whether the leader's episodes can take every scope waiting in the
    /// inbox plus `added`. The leader refuses a new scope only when every
    /// slot holds an episode that is firing or has remediations to do: a
    /// notification it would refuse so must be refused here, with a 503
    /// that Alertmanager retries, never answered 200 and then lost.
    fn has_room_for(&self, added: &[Notice]) -> bool {
        let known: HashSet<&Scope> = self.episodes.iter().map(|s| &s.scope).collect();
        let busy = self
            .episodes
            .iter()
            .filter(|s| s.episode.firing || s.targets.as_ref().is_some_and(|t| !t.is_empty()))
            .count();
        let new: HashSet<&Scope> = self
            .inbox
            .iter()
            .chain(added)
            .map(|n| &n.scope)
            .filter(|s| !known.contains(s))
            .collect();
        busy + new.len() <= crate::decide::episodes::MAX_EPISODES
    }

    /// Inbox entries not yet folded, oldest first.
    pub fn after(&self, consumed: u64) -> impl Iterator<Item = &Notice> {
        self.inbox.iter().filter(move |n| n.seq > consumed)
    }

    /// The leader's write: its episodes, folded up to `consumed`.
    pub fn with_episodes(&self, book: &Book, consumed: u64, leader: &str) -> Self {
        Self {
            version: VERSION,
            consumed,
            last_seq: self.last_seq.max(consumed),
            leader: leader.to_string(),
            episodes: stored(book),
            inbox: self.after(consumed).cloned().collect(),
        }
    }

    /// The episodes as a book. Entries over the bound are left out (the
    /// decoder already refuses such a record).
    pub fn book(&self) -> Book {
        let mut book = Book::default();
        for s in &self.episodes {
            let mut ep = s.episode.clone();
            ep.targets = s.targets.as_ref().map(|t| {
                t.iter()
                    .map(|[k, ns, n]| ResourceKey::new(k, ns, n))
                    .collect::<BTreeSet<_>>()
            });
            let _ = book.put(s.scope.clone(), ep);
        }
        book
    }
}

/// What was dropped to keep the record writable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// Resolved, with nothing left to remediate: the least valuable.
    Finished,
    /// Firing, but neither a webhook nor Prometheus has shown that it
    /// really fired (junk written into the record, or not checked yet).
    Unproven,
    /// The whole record: not a document of this format.
    Corrupt,
}

impl Shed {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::Unproven => "unproven",
            Self::Corrupt => "corrupt",
        }
    }
}

/// Drops episodes from `book` until `base` written with them fits in
/// [`LEADER_BYTES`]: finished ones first (oldest first), then firing ones not
/// proven to have fired (largest first). Firing episodes proven real and
/// episodes with remediations to do are never dropped. Returns what went.
pub fn shed_to_fit(
    base: &Record,
    book: &mut Book,
    consumed: u64,
    leader: &str,
) -> Vec<(Scope, Shed)> {
    let size = |book: &Book| {
        serde_json::to_string(&base.with_episodes(book, consumed, leader))
            .map_or(usize::MAX, |t| t.len())
    };
    let mut total = size(book);
    if total <= LEADER_BYTES {
        return Vec::new();
    }
    let entry = |scope: &Scope, ep: &Episode| {
        let mut one = Book::default();
        let _ = one.put(scope.clone(), ep.clone());
        // Its share of the document, with the comma that separates it.
        serde_json::to_string(&stored(&one)).map_or(0, |t| t.len().saturating_sub(1))
    };
    let mut finished: Vec<(Scope, usize, chrono::DateTime<Utc>)> = Vec::new();
    let mut unproven: Vec<(Scope, usize)> = Vec::new();
    for (scope, ep) in book.map() {
        if !ep.busy() {
            finished.push((scope.clone(), entry(scope, ep), ep.changed_at));
        } else if ep.firing && !ep.fired {
            unproven.push((scope.clone(), entry(scope, ep)));
        }
    }
    finished.sort_by_key(|(_, _, at)| *at);
    unproven.sort_by_key(|u| std::cmp::Reverse(u.1));
    let order = finished
        .into_iter()
        .map(|(s, n, _)| (s, n, Shed::Finished))
        .chain(unproven.into_iter().map(|(s, n)| (s, n, Shed::Unproven)));
    let mut shed = Vec::new();
    for (scope, n, why) in order {
        if total <= LEADER_BYTES {
            break;
        }
        book.remove(&scope);
        total = total.saturating_sub(n);
        shed.push((scope, why));
    }
    shed
}

fn stored(book: &Book) -> Vec<Stored> {
    book.map()
        .iter()
        .map(|(scope, ep)| Stored {
            scope: scope.clone(),
            // Targets are kept beside it, as names.
            episode: Episode {
                targets: None,
                ..ep.clone()
            },
            targets: ep.targets.as_ref().map(|t| {
                t.iter()
                    .map(|k| {
                        [
                            k.kind.to_string(),
                            k.namespace.to_string(),
                            k.name.to_string(),
                        ]
                    })
                    .collect()
            }),
        })
        .collect()
}

/// Remediation targets held by a book, for [`MAX_TARGETS`].
pub fn targets_held(book: &Book) -> usize {
    book.map()
        .values()
        .filter_map(|e| e.targets.as_ref().map(BTreeSet::len))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AlertRule, Selector};
    use std::collections::BTreeMap;

    fn rule() -> AlertRule {
        AlertRule {
            alertname: "CloudAPIDegraded".into(),
            select: Selector {
                namespace_label: Some("namespace".into()),
                kind_label: Some("kind".into()),
                ..Selector::default()
            },
            verify_query: None,
            allow_cluster_wide: false,
            max_resources: 200,
        }
    }

    fn scope(ns: &str) -> Scope {
        let labels: BTreeMap<String, String> = [
            ("namespace".to_string(), ns.to_string()),
            ("kind".to_string(), "OpenStackMachine".to_string()),
        ]
        .into();
        Scope::from_alert(&rule(), &labels)
    }

    /// A notice with both of the alert's times, as the webhook writes it.
    fn n(scope: Scope, firing: bool, at: DateTime<Utc>) -> Notice {
        let starts_at = at - chrono::Duration::minutes(5);
        let ends_at = at + chrono::Duration::minutes(4);
        Notice::new(scope, firing, at, Some(starts_at), Some(ends_at))
    }

    #[test]
    fn the_same_notification_from_two_replicas_is_appended_once() {
        let mut r = Record {
            version: VERSION,
            ..Record::default()
        };
        let t = Utc::now();
        assert_eq!(r.append(&[n(scope("a"), true, t)]).unwrap(), 1);
        assert_eq!(r.append(&[n(scope("a"), true, t)]).unwrap(), 0);
        assert_eq!(
            r.append(&[n(scope("a"), false, t), n(scope("a"), false, t)])
                .unwrap(),
            1
        );
        assert_eq!(r.append(&[n(scope("b"), false, t)]).unwrap(), 1);
        let seqs: Vec<u64> = r.inbox.iter().map(|n| n.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert_eq!(r.last_seq, 3);
    }

    #[test]
    fn a_full_inbox_refuses_the_whole_batch() {
        let mut r = Record {
            version: VERSION,
            ..Record::default()
        };
        let t = Utc::now();
        for i in 0..MAX_INBOX {
            r.append(&[n(scope(&format!("ns-{i}")), true, t)]).unwrap();
        }
        let before = r.clone();
        assert!(matches!(
            r.append(&[n(scope("late"), true, t)]),
            Err(RecordError::Full)
        ));
        assert_eq!(r, before, "nothing appended");
    }

    #[test]
    fn a_new_scope_the_leader_would_refuse_as_full_is_refused_by_the_inbox() {
        let rule = rule();
        let t = Utc::now();
        let mut book = Book::default();
        for i in 0..crate::decide::episodes::MAX_EPISODES {
            book.notify(&rule, &scope(&format!("ns-{i}")), true, t)
                .unwrap();
        }
        let mut r = Record::empty().with_episodes(&book, 0, "leader-0");
        // Known scopes still go in (the leader has their slot)...
        assert_eq!(r.append(&[n(scope("ns-7"), false, t)]).unwrap(), 1);
        // ...a new one does not: the leader would drop it.
        assert!(matches!(
            r.append(&[n(scope("junk"), true, t)]),
            Err(RecordError::Full)
        ));
        // Once an episode is finished there is room again.
        book.notify(&rule, &scope("ns-0"), false, t).unwrap();
        let mut r = Record::empty().with_episodes(&book, 0, "leader-0");
        assert_eq!(r.append(&[n(scope("junk"), true, t)]).unwrap(), 1);
        assert!(matches!(
            r.append(&[n(scope("junk-2"), true, t)]),
            Err(RecordError::Full)
        ));
    }

    #[test]
    fn the_leader_folds_what_it_read_and_keeps_what_came_after() {
        let rule = rule();
        let t = Utc::now();
        let mut r = Record {
            version: VERSION,
            ..Record::default()
        };
        r.append(&[n(scope("a"), true, t), n(scope("b"), true, t)])
            .unwrap();
        let mut book = Book::default();
        let mut consumed = 0;
        for n in r.after(0) {
            book.notify(&rule, &n.scope, n.firing, n.at).unwrap();
            consumed = n.seq;
        }
        // Another replica appends before the leader writes: the leader's
        // write (made from what it read) keeps nothing it did not fold, and
        // the 409 it gets makes it read the new entry next time.
        let written = r.with_episodes(&book, consumed, "leader-0");
        assert!(written.inbox.is_empty());
        assert_eq!(written.consumed, 2);
        r.append(&[n(scope("a"), false, t)]).unwrap();
        let pending: Vec<u64> = r.after(consumed).map(|n| n.seq).collect();
        assert_eq!(pending, vec![3]);
        let later = r.with_episodes(&book, consumed, "leader-0");
        assert_eq!(later.inbox.len(), 1, "an entry not folded stays");
        assert_eq!(later.last_seq, 3);
    }

    #[test]
    fn episodes_and_their_targets_survive_the_round_trip() {
        let rule = rule();
        let t = Utc::now();
        let mut book = Book::default();
        let s = scope("a");
        book.notify(&rule, &s, true, t).unwrap();
        book.notify(&rule, &s, false, t).unwrap();
        book.get_mut(&s).unwrap().verified_at = Some(t);
        let key = ResourceKey::new("OpenStackMachine", "a", "m-1");
        book.fix_targets(|_| 10, |_, _| [key.clone()].into());
        book.adopt_hold(Scope::recovered("Other", "AWSMachine"), t);
        let r = Record::default().with_episodes(&book, 7, "leader-0");
        let text = r.encode().unwrap();
        let back = Record::decode(&text).unwrap();
        assert_eq!(back, r);
        let again = back.book();
        assert_eq!(again.map(), book.map());
        assert!(again.targets(&key), "the target is still to be remediated");
        assert_eq!(targets_held(&again), 1);
    }

    #[test]
    fn notices_keep_their_alerts_times_and_records_written_without_them_still_read() {
        let t = Utc::now();
        let mut r = Record::empty();
        r.append(&[n(scope("a"), false, t)]).unwrap();
        let back = Record::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(back.inbox[0].times(), n(scope("a"), false, t).times());
        assert!(back.inbox[0].times().ends_at.is_some());
        // As remedy wrote it before the times were kept (version 1).
        let mut v: serde_json::Value = serde_json::from_str(&r.encode().unwrap()).unwrap();
        let notice = v["inbox"][0].as_object_mut().unwrap();
        assert!(notice.remove("starts_at").is_some() && notice.remove("ends_at").is_some());
        v["version"] = 1.into();
        let mut old = Record::decode(&v.to_string()).expect("an older record reads");
        assert_eq!(old.inbox[0].times(), AlertTimes::default());
        assert_eq!(old.inbox[0].scope, scope("a"));
        // Written again with times: in this version, which a remedy that
        // reads only version 1 leaves alone rather than rewriting it.
        assert_eq!(old.version, 1);
        old.append(&[n(scope("a"), true, t)]).unwrap();
        assert!(old.version > 1 && old.version == VERSION);
        assert_eq!(
            Record::empty().with_episodes(&old.book(), 0, "l").version,
            VERSION
        );
    }

    #[test]
    fn bad_documents_are_refused() {
        for text in [
            "",
            "{}",
            "{not json",
            r#"{"version":1,"consumed":0,"last_seq":0,"episodes":[],"inbox":[],"extra":1}"#,
        ] {
            assert!(
                matches!(Record::decode(text), Err(RecordError::Corrupt(_))),
                "{text}"
            );
        }
        // Another version is left alone, never rewritten.
        let newer = r#"{"version":3,"consumed":0,"last_seq":0,"episodes":[],"inbox":[],"new":1}"#;
        assert!(matches!(
            Record::decode(newer),
            Err(RecordError::Invalid(_))
        ));
        let mut r = Record {
            version: VERSION,
            ..Record::default()
        };
        r.append(&[n(scope("a"), true, Utc::now())]).unwrap();
        r.last_seq = 0;
        let text = serde_json::to_string(&r).unwrap();
        assert!(matches!(
            Record::decode(&text),
            Err(RecordError::Corrupt(_))
        ));
    }

    #[test]
    fn junk_over_the_size_bound_is_shed_but_never_a_real_firing_or_pending_episode() {
        let rule = rule();
        let t = Utc::now();
        let mut book = Book::default();
        // The real ones: proven firing, and verified with a target waiting.
        let firing = scope("prod");
        book.notify(&rule, &firing, true, t).unwrap();
        let pending = scope("stage");
        book.notify(&rule, &pending, true, t).unwrap();
        book.notify(&rule, &pending, false, t).unwrap();
        book.get_mut(&pending).unwrap().verified_at = Some(t);
        let key = ResourceKey::new("OpenStackMachine", "stage", "m-1");
        book.fix_targets(
            |_| 10,
            |s, _| {
                if *s == pending {
                    [key.clone()].into()
                } else {
                    BTreeSet::new()
                }
            },
        );
        // Junk: 253-byte namespaces, firing from the record (unproven), and
        // finished ones.
        let long = |i: usize| {
            let v = format!("{i:04}{}", "x".repeat(249));
            let labels: std::collections::BTreeMap<String, String> = [
                ("namespace".to_string(), v.clone()),
                ("kind".to_string(), v),
            ]
            .into();
            Scope::from_alert(&rule, &labels)
        };
        for i in 0..690 {
            book.notify_as(
                &rule,
                &long(i),
                true,
                t,
                crate::decide::episodes::Evidence::Unproven(AlertTimes::default()),
            )
            .unwrap();
        }
        for i in 690..990 {
            book.notify(&rule, &long(i), false, t).unwrap();
        }
        let base = Record::empty();
        assert!(
            base.with_episodes(&book, 0, "l").encode().is_err(),
            "over the bound"
        );
        let shed = shed_to_fit(&base, &mut book, 0, "l");
        let text = base
            .with_episodes(&book, 0, "l")
            .encode()
            .expect("fits now");
        assert!(text.len() <= LEADER_BYTES, "{}", text.len());
        // Every finished one went before the first unproven one.
        let first_unproven = shed.iter().position(|(_, w)| *w == Shed::Unproven);
        assert_eq!(first_unproven, Some(300), "{} shed", shed.len());
        // What is left leaves room for a hundred notifications of the
        // largest scopes.
        let mut after = base.with_episodes(&book, 0, "l");
        let notices: Vec<_> = (2000..2100).map(|i| n(long(i), true, t)).collect();
        assert_eq!(after.append(&notices).map_err(|e| e.to_string()), Ok(100));
        after
            .encode()
            .expect("the notifications fit beside the episodes");
        assert!(book.map().contains_key(&firing) && book.targets(&key));
        // Under the bound nothing goes.
        assert!(shed_to_fit(&base, &mut book, 0, "l").is_empty());
    }

    /// The bound docs/evidence/measurements.md states: every episode slot taken, a full inbox
    /// and the target cap reached, with realistic names, fits a ConfigMap.
    #[test]
    fn a_full_record_fits_a_configmap() {
        let rule = rule();
        let t = Utc::now();
        let mut book = Book::default();
        for i in 0..crate::decide::episodes::MAX_EPISODES {
            let s = scope(&format!("capi-workload-cluster-{i:04}"));
            book.notify(&rule, &s, true, t).unwrap();
            book.notify(&rule, &s, false, t).unwrap();
            book.get_mut(&s).unwrap().verified_at = Some(t);
        }
        let per = MAX_TARGETS / crate::decide::episodes::MAX_EPISODES;
        let mut i = 0;
        book.fix_targets(
            |_| per,
            |s, _| {
                i += 1;
                (0..per)
                    .map(|j| {
                        ResourceKey::new(
                            "OpenStackMachine",
                            s.namespace.as_deref().unwrap_or(""),
                            &format!("workload-md-0-{i:04}-{j:02}-x7k2p"),
                        )
                    })
                    .collect()
            },
        );
        let mut r = Record {
            version: VERSION,
            ..Record::default()
        };
        for j in 0..MAX_INBOX {
            r.append(&[n(scope(&format!("capi-workload-cluster-{j:04}")), true, t)])
                .unwrap();
        }
        let full = r.with_episodes(&book, 0, "remedy-7c9f8d6b5-x2x9z");
        let bytes = full.encode().expect("fits").len();
        assert!(bytes < MAX_BYTES, "{bytes}");
        println!("full record: {bytes} bytes");
    }
}
