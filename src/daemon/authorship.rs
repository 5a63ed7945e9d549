//! Whose write an object's current state is. remedy's own writes (holds,
//! releases, cleared failure status) are not new failures, and the failure
//! signals an object still shows right after remedy's write (a condition
//! the controller has not rewritten yet) predate it: they are stale until
//! someone else writes the object again.
//!
//! The executor records the resourceVersion each of its writes produced;
//! the store asks, for every watched version, whether it is that write (or
//! an older event arriving late) or a later one. In memory only: a restart
//! or a new leader starts with no records, so for at most one
//! `controller_grace` after it stale signals count as they did before.

use crate::model::view::ResourceKey;
use crate::sync::LockExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Is the watched version remedy's latest write, or newer?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Author {
    /// remedy wrote this state (or the event predates remedy's write): its
    /// failure signals are what remedy already acted on.
    Remedy { at: Instant },
    /// Someone else wrote after remedy, or remedy never wrote it.
    Other,
}

/// Pure ordering of two resourceVersions. Kubernetes calls them opaque, but
/// every apiserver backed by etcd serves the etcd revision, a number; when
/// either is not a number only equality is known.
pub fn judge(ours: &str, seen: &str) -> Option<std::cmp::Ordering> {
    if ours == seen {
        return Some(std::cmp::Ordering::Equal);
    }
    match (ours.parse::<u64>(), seen.parse::<u64>()) {
        (Ok(a), Ok(b)) => Some(b.cmp(&a)),
        _ => None,
    }
}

/// remedy's write to one object: the version it produced, and writes in
/// flight. A write in flight owns whatever version arrives meanwhile: the
/// patch carries a resourceVersion precondition, so if anyone else wrote
/// first the patch fails (409), and the store judges the version it holds
/// again when the write ends (`Store::end_write`).
#[derive(Debug)]
struct Write {
    rv: Option<Box<str>>,
    in_flight: u32,
    at: Instant,
}

#[derive(Default)]
pub struct OwnWrites {
    writes: Mutex<HashMap<ResourceKey, Write>>,
}

impl OwnWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ResourceKey, Write>> {
        self.writes.locked()
    }

    /// Called right before remedy's patch is sent: the watch may deliver
    /// its result before the response arrives.
    pub fn begin(&self, key: &ResourceKey) {
        let mut w = self.lock();
        let e = w.entry(key.clone()).or_insert(Write {
            rv: None,
            in_flight: 0,
            at: Instant::now(),
        });
        e.in_flight = e.in_flight.saturating_add(1);
        e.at = Instant::now();
    }

    /// Called with the resourceVersion the write produced, `None` if it
    /// failed.
    pub fn end(&self, key: &ResourceKey, resource_version: Option<&str>) {
        let mut w = self.lock();
        let Some(e) = w.get_mut(key) else {
            return;
        };
        e.in_flight = e.in_flight.saturating_sub(1);
        if let Some(rv) = resource_version.filter(|rv| !rv.is_empty()) {
            e.rv = Some(rv.into());
            e.at = Instant::now();
        }
        if e.in_flight == 0 && e.rv.is_none() {
            w.remove(key);
        }
    }

    /// Who wrote the watched `resource_version` of `key`. A later version
    /// by someone else ends remedy's record.
    pub fn author(&self, key: &ResourceKey, resource_version: &str) -> Author {
        let mut w = self.lock();
        let Some(e) = w.get(key) else {
            return Author::Other;
        };
        if e.in_flight > 0 {
            return Author::Remedy { at: e.at };
        }
        let ours = e.rv.as_deref().unwrap_or_default();
        match judge(ours, resource_version) {
            Some(std::cmp::Ordering::Equal | std::cmp::Ordering::Less) => {
                Author::Remedy { at: e.at }
            }
            Some(std::cmp::Ordering::Greater) | None => {
                w.remove(key);
                Author::Other
            }
        }
    }

    pub fn forget(&self, key: &ResourceKey) {
        self.lock().remove(key);
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    #[cfg(test)]
    pub fn remember(&self, key: &ResourceKey, resource_version: &str) {
        self.begin(key);
        self.end(key, Some(resource_version));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering;

    #[test]
    fn versions_order_numerically_and_opaque_ones_only_by_equality() {
        assert_eq!(judge("100", "100"), Some(Ordering::Equal));
        assert_eq!(judge("100", "99"), Some(Ordering::Less));
        assert_eq!(judge("100", "1000"), Some(Ordering::Greater), "not lexical");
        assert_eq!(judge("abc", "abc"), Some(Ordering::Equal));
        assert_eq!(judge("abc", "abd"), None);
        assert_eq!(judge("100", "x"), None);
    }

    #[test]
    fn our_write_and_late_older_events_are_ours_until_someone_writes_after() {
        let w = OwnWrites::default();
        let k = ResourceKey::new("K", "ns", "a");
        assert_eq!(w.author(&k, "5"), Author::Other, "never written by remedy");
        w.remember(&k, "10");
        assert!(
            matches!(w.author(&k, "9"), Author::Remedy { .. }),
            "older event arriving late"
        );
        assert!(matches!(w.author(&k, "10"), Author::Remedy { .. }));
        assert_eq!(
            w.author(&k, "11"),
            Author::Other,
            "the controller wrote after us"
        );
        assert!(w.is_empty(), "the record ends with the later write");
        assert_eq!(w.author(&k, "10"), Author::Other);
        w.remember(&k, "12");
        w.forget(&k);
        assert_eq!(w.author(&k, "12"), Author::Other);
        w.remember(&k, "");
        assert!(w.is_empty(), "a write without a version records nothing");
    }

    #[test]
    fn a_write_in_flight_owns_what_the_watch_delivers_before_its_response() {
        let w = OwnWrites::default();
        let k = ResourceKey::new("K", "ns", "a");
        w.remember(&k, "10");
        w.begin(&k);
        assert!(
            matches!(w.author(&k, "11"), Author::Remedy { .. }),
            "our patch, seen first by the watch"
        );
        w.end(&k, Some("11"));
        assert!(matches!(w.author(&k, "11"), Author::Remedy { .. }));
        assert_eq!(w.author(&k, "12"), Author::Other);
        // A failed write (409: someone else wrote first) leaves no record.
        w.begin(&k);
        w.end(&k, None);
        assert!(w.is_empty());
        assert_eq!(w.author(&k, "13"), Author::Other);
    }
}
