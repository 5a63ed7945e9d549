//! How the engine follows the episode record from tick to tick. Pure: what
//! was read in, what to do with the episodes and what to write out.
//!
//! - A follower shows the record's episodes (for /status) and writes none.
//! - A leader loads them once per term, as its predecessor left them, then
//!   keeps its own (it is the only writer of episodes) and folds in what
//!   replicas appended since. It writes when its episodes or the inbox
//!   changed, against the resourceVersion it read that tick.

use super::{Found, Notice, Read, Record, RecordError};
use crate::decide::episodes::Book;

#[derive(Debug, Default)]
pub struct Tracker {
    /// This leadership term has loaded the record.
    loaded: bool,
    /// Inbox entries up to here are in the leader's episodes.
    consumed: u64,
    /// This tick's read, to write against; `None` after a failed read.
    base: Option<(Record, Option<String>)>,
    /// Last read or write error, for readiness notes.
    error: Option<String>,
    /// The uid of the ConfigMap `consumed` counts in.
    uid: Option<String>,
}

/// What a read asks of the engine.
#[derive(Debug, Default)]
pub struct Update {
    /// Replace the episodes with these.
    pub replace: Option<Book>,
    /// The episodes came from the record: no need to rebuild them from
    /// Prometheus.
    pub covered: bool,
    /// Notifications to apply, oldest first; call [`Tracker::folded`] after
    /// each.
    pub fold: Vec<Notice>,
}

impl Tracker {
    pub fn read(&mut self, leader: bool, read: Result<Read, RecordError>) -> Update {
        let mut up = Update::default();
        if !leader {
            self.loaded = false;
        }
        match read {
            Err(e) => {
                self.error = Some(e.to_string());
                self.base = None;
            }
            Ok(None) => {
                self.error = None;
                // Gone: the next record numbers its notifications from 1.
                self.consumed = 0;
                self.uid = None;
                self.base = Some((Record::empty(), None));
                if !leader {
                    up.replace = Some(Book::default());
                } else if !self.loaded {
                    // Nothing recorded (first start, or deleted): the
                    // episodes are rebuilt from Prometheus as before.
                    self.loaded = true;
                    self.consumed = 0;
                }
            }
            Ok(Some(Found { record, rv, uid })) => {
                self.error = None;
                if !leader {
                    up.replace = Some(record.book());
                } else {
                    if !self.loaded {
                        self.loaded = true;
                        self.consumed = record.consumed;
                        up.replace = Some(record.book());
                        up.covered = true;
                    } else if self.uid.as_ref().is_some_and(|u| *u != uid)
                        || record.last_seq < self.consumed
                    {
                        // Deleted and made again, or emptied, under a running
                        // leader: its numbering started over, and skipping
                        // what is numbered below the old count would lose
                        // notifications that were answered 200.
                        tracing::warn!(
                            consumed = self.consumed,
                            last_seq = record.last_seq,
                            "the episode record was replaced: taking its notifications from the start"
                        );
                        self.consumed = record.consumed;
                    }
                    up.fold = record.after(self.consumed).cloned().collect();
                }
                self.uid = Some(uid);
                self.base = Some((record, Some(rv)));
            }
        }
        up
    }

    pub fn folded(&mut self, seq: u64) {
        self.consumed = self.consumed.max(seq);
    }

    /// The leader's write for this tick, if its episodes or the inbox
    /// changed since the read: the record and the resourceVersion to write
    /// against (`None`: create).
    pub fn to_write(
        &mut self,
        book: &Book,
        leader: &str,
    ) -> Option<Result<(Record, Option<String>), RecordError>> {
        let (read, rv) = self.base.take()?;
        let next = read.with_episodes(book, self.consumed, leader);
        let same = next.episodes == read.episodes && next.inbox == read.inbox;
        if same && next.consumed == read.consumed {
            return None;
        }
        Some(match next.encode() {
            Ok(_) => Ok((next, rv)),
            Err(e) => {
                self.error = Some(e.to_string());
                Err(e)
            }
        })
    }

    /// Drops what is least worth keeping from `book` until this tick's
    /// write fits the record's bound (see [`super::shed_to_fit`]).
    pub fn fit(
        &self,
        book: &mut Book,
        leader: &str,
    ) -> Vec<(crate::model::scope::Scope, super::Shed)> {
        match &self.base {
            Some((read, _)) => super::shed_to_fit(read, book, self.consumed, leader),
            None => Vec::new(),
        }
    }

    /// The outcome of [`Tracker::to_write`]'s write (`Ok(None)`: conflict,
    /// redone next tick from a fresh read).
    pub fn written(&mut self, result: &Result<Option<String>, RecordError>) {
        if let Err(e) = result {
            self.error = Some(e.to_string());
        }
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AlertRule, Selector};
    use crate::decide::episodes::{Evidence, Refusal};
    use crate::model::scope::Scope;
    use chrono::{DateTime, Utc};
    use std::collections::BTreeMap;

    fn rule() -> AlertRule {
        AlertRule {
            alertname: "A".into(),
            select: Selector {
                kind_label: Some("kind".into()),
                ..Selector::default()
            },
            verify_query: None,
            allow_cluster_wide: false,
            max_resources: 10,
        }
    }

    fn scope(kind: &str) -> Scope {
        let labels: BTreeMap<String, String> = [("kind".to_string(), kind.to_string())].into();
        Scope::from_alert(&rule(), &labels)
    }

    fn n(scope: Scope, firing: bool, at: DateTime<Utc>) -> Notice {
        Notice::new(scope, firing, at, None, None)
    }

    /// Applies an update as the engine does.
    fn apply(t: &mut Tracker, book: &mut Book, up: Update) {
        if let Some(b) = up.replace {
            *book = b;
        }
        for n in up.fold {
            book.notify(&rule(), &n.scope, n.firing, n.at).unwrap();
            t.folded(n.seq);
        }
    }

    #[test]
    fn a_notification_taken_by_a_follower_reaches_the_next_leader_once() {
        let t0 = Utc::now();
        // The old leader folded a firing notification and wrote it.
        let mut old = Tracker::default();
        let mut old_book = Book::default();
        let mut rec = Record::empty();
        rec.append(&[n(scope("K"), true, t0)]).unwrap();
        let up = old.read(true, Ok(Some(Found::new(rec.clone(), "1", "uid-1"))));
        apply(&mut old, &mut old_book, up);
        let (written, rv) = old.to_write(&old_book, "old").unwrap().unwrap();
        assert_eq!(rv.as_deref(), Some("1"));
        assert!(written.inbox.is_empty() && written.consumed == 1);
        // A follower appends the resolved notification; the old leader dies.
        let mut rec = written;
        rec.append(&[n(scope("K"), false, t0)]).unwrap();
        // The follower showed the record; on becoming leader it loads it
        // and folds the resolved notification.
        let mut new = Tracker::default();
        let mut book = Book::default();
        let up = new.read(false, Ok(Some(Found::new(rec.clone(), "2", "uid-1"))));
        assert!(up.fold.is_empty(), "a follower folds nothing");
        apply(&mut new, &mut book, up);
        let up = new.read(true, Ok(Some(Found::new(rec.clone(), "2", "uid-1"))));
        assert!(up.covered);
        apply(&mut new, &mut book, up);
        let ep = &book.map()[&scope("K")];
        assert!(
            !ep.firing && ep.fired,
            "resolved, and proven by the firing one"
        );
        let (written, _) = new.to_write(&book, "new").unwrap().unwrap();
        assert_eq!(written.consumed, 2);
        assert!(written.inbox.is_empty());
        // Nothing changed next tick: no write.
        let up = new.read(true, Ok(Some(Found::new(written.clone(), "3", "uid-1"))));
        assert!(up.fold.is_empty() && up.replace.is_none());
        assert!(new.to_write(&book, "new").is_none());
    }

    #[test]
    fn a_record_made_again_under_a_running_leader_is_folded_from_the_start() {
        let t0 = Utc::now();
        let mut t = Tracker::default();
        let mut book = Book::default();
        let mut rec = Record::empty();
        for k in ["A", "B", "C"] {
            rec.append(&[n(scope(k), true, t0)]).unwrap();
        }
        let up = t.read(true, Ok(Some(Found::new(rec.clone(), "1", "uid-1"))));
        apply(&mut t, &mut book, up);
        assert_eq!(book.len(), 3);
        // Deleted; a replica takes a notification into a new ConfigMap,
        // numbered 1 again; then two more.
        t.read(true, Ok(None));
        let mut fresh = Record::empty();
        fresh.append(&[n(scope("D"), true, t0)]).unwrap();
        let up = t.read(true, Ok(Some(Found::new(fresh.clone(), "7", "uid-2"))));
        assert_eq!(up.fold.len(), 1, "seq 1 of the new record is not skipped");
        apply(&mut t, &mut book, up);
        // Deleted and made again between two reads, with as many entries
        // as the leader had taken: told apart by the uid.
        let mut again = Record::empty();
        for k in ["E", "F", "G", "H"] {
            again.append(&[n(scope(k), true, t0)]).unwrap();
        }
        let up = t.read(true, Ok(Some(Found::new(again, "9", "uid-3"))));
        assert_eq!(up.fold.len(), 4);
        apply(&mut t, &mut book, up);
        assert_eq!(book.len(), 8);
    }

    #[test]
    fn a_write_that_conflicted_is_redone_from_the_next_read() {
        let t0 = Utc::now();
        let mut t = Tracker::default();
        let mut book = Book::default();
        let mut rec = Record::empty();
        rec.append(&[n(scope("K"), true, t0)]).unwrap();
        let up = t.read(true, Ok(Some(Found::new(rec.clone(), "1", "uid-1"))));
        apply(&mut t, &mut book, up);
        let _ = t.to_write(&book, "l").unwrap().unwrap();
        t.written(&Ok(None));
        // The conflict came from a replica appending another notification.
        rec.append(&[n(scope("J"), true, t0)]).unwrap();
        let up = t.read(true, Ok(Some(Found::new(rec.clone(), "2", "uid-1"))));
        let seqs: Vec<u64> = up.fold.iter().map(|n| n.seq).collect();
        assert_eq!(seqs, vec![2], "the first is folded already");
        apply(&mut t, &mut book, up);
        let (w, rv) = t.to_write(&book, "l").unwrap().unwrap();
        assert_eq!(rv.as_deref(), Some("2"));
        assert_eq!(w.episodes.len(), 2);
        assert!(w.inbox.is_empty());
    }

    #[test]
    fn no_write_without_a_read_and_errors_are_kept_for_readiness() {
        let mut t = Tracker::default();
        let book = Book::default();
        t.read(true, Err(RecordError::Api("down".into())));
        assert!(t.to_write(&book, "l").is_none());
        assert!(t.error().is_some_and(|e| e.contains("down")));
        // Nothing recorded yet: the leader keeps its episodes (recovered
        // from Prometheus), and creates the record once it has some.
        let up = t.read(true, Ok(None));
        assert!(up.replace.is_none() && !up.covered);
        assert!(t.error().is_none());
        assert!(t.to_write(&book, "l").is_none(), "nothing to say yet");
        let mut book = Book::default();
        book.notify(&rule(), &scope("K"), true, Utc::now()).unwrap();
        t.read(true, Ok(None));
        let (_, rv) = t.to_write(&book, "l").unwrap().unwrap();
        assert_eq!(rv, None, "created");
    }

    /// Folds as the engine does: a notice from the record carries its
    /// alert's times and is no proof that the alert fired.
    fn fold(t: &mut Tracker, book: &mut Book, up: Update) -> Vec<Result<(), Refusal>> {
        if let Some(mut b) = up.replace {
            if up.covered {
                b.distrust(&[rule()]);
            }
            *book = b;
        }
        let mut out = Vec::new();
        for n in up.fold {
            let times = Evidence::Unproven(n.times());
            out.push(book.notify_as(&rule(), &n.scope, n.firing, n.at, times));
            t.folded(n.seq);
        }
        out
    }

    #[test]
    fn a_late_firing_notice_after_the_resolution_is_refused_by_this_leader_and_the_next() {
        let k = scope("K");
        let started = Utc::now() - chrono::Duration::minutes(30);
        let ended = started + chrono::Duration::minutes(10);
        // Alertmanager's firing notice carries an end 4 minutes ahead.
        let expected_end = Some(started + chrono::Duration::minutes(4));
        let mut leader = Tracker::default();
        let mut book = Book::default();
        let mut rec = Record::empty();
        rec.append(&[Notice::new(
            k.clone(),
            true,
            started,
            Some(started),
            expected_end,
        )])
        .unwrap();
        let up = leader.read(true, Ok(Some(Found::new(rec.clone(), "1", "uid-1"))));
        assert_eq!(fold(&mut leader, &mut book, up), vec![Ok(())]);
        book.get_mut(&k).unwrap().fired = true; // Prometheus proved it
        rec.append(&[Notice::new(
            k.clone(),
            false,
            ended,
            Some(started),
            Some(ended),
        )])
        .unwrap();
        let up = leader.read(true, Ok(Some(Found::new(rec.clone(), "2", "uid-1"))));
        assert_eq!(fold(&mut leader, &mut book, up), vec![Ok(())]);
        book.get_mut(&k).unwrap().verified_at = Some(ended);
        let a = crate::model::view::ResourceKey::new("OpenStackMachine", "ns", "a");
        book.fix_targets(|_| 10, |_, _| [a.clone()].into());
        let (written, _) = leader.to_write(&book, "old").unwrap().unwrap();
        // Another replica takes the firing notice again, late (an
        // Alertmanager retry), and appends it after the resolved one.
        let mut rec = written;
        let late = ended + chrono::Duration::minutes(1);
        rec.append(&[Notice::new(
            k.clone(),
            true,
            late,
            Some(started),
            expected_end,
        )])
        .unwrap();
        // This leader refuses it: nothing held, the remediation goes on.
        let up = leader.read(true, Ok(Some(Found::new(rec.clone(), "3", "uid-1"))));
        assert_eq!(fold(&mut leader, &mut book, up), vec![Err(Refusal::Stale)]);
        let ep = &book.map()[&k];
        assert!(!ep.firing && ep.remediates());
        assert!(book.targets(&a));
        // A new leader, which loads the episode from the record, refuses it
        // too: the resolution's end went with the episode.
        let mut next = Tracker::default();
        let mut book = Book::default();
        let up = next.read(true, Ok(Some(Found::new(rec, "3", "uid-1"))));
        assert!(up.covered);
        assert_eq!(fold(&mut next, &mut book, up), vec![Err(Refusal::Stale)]);
        let ep = &book.map()[&k];
        assert!(!ep.firing && ep.ended_at == Some(ended));
        assert!(
            ep.busy(),
            "its target waits for the episode to be verified again"
        );
    }
}
