//! One kube-runtime watcher per profile (and namespace, when namespaces are
//! restricted). Relists and 410 Gone are handled by kube-runtime; here each
//! event is projected into the store and the full object dropped at once.
//! A 410 is counted as `type="expired"`, apart from real errors, so a relist
//! forced by etcd compaction is visible without looking like a failure.
//!
//! The initial list is a streaming list (`sendInitialEvents`, WatchList) where
//! the apiserver serves one: one request, read from the watch cache, with no
//! continue token that etcd compaction can expire halfway through a large
//! list. Otherwise it is paginated, and a page whose continue token expired
//! (410) switches the stream to unpaginated lists, as client-go does, instead
//! of starting the same paginated list over and over.

use crate::daemon::store::Store;
use crate::metrics::Metrics;
use crate::metrics::values::WatchEvent;
use crate::model::profile::Profile;
use crate::model::view::ResourceKey;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::HashSet;
use std::sync::Arc;

/// How a stream fetches its initial list (and every relist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialList {
    /// `watch?sendInitialEvents=true`: objects stream in, then a bookmark.
    Streaming,
    /// `list?limit=500`, then `continue=` pages.
    Paginated,
    /// One `list` without a limit: a page token cannot expire.
    Unpaginated,
}

impl InitialList {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::Paginated => "paginated",
            Self::Unpaginated => "unpaginated",
        }
    }

    fn config(self) -> watcher::Config {
        match self {
            Self::Streaming => watcher::Config::default().streaming_lists(),
            Self::Paginated => watcher::Config::default().page_size(PAGE_SIZE),
            Self::Unpaginated => watcher::Config {
                page_size: None,
                ..watcher::Config::default()
            },
        }
    }

    /// The strategy to switch to after `e`, if `e` says this one cannot work.
    pub fn fallback(self, e: &watcher::Error) -> Option<Self> {
        match (self, e) {
            // 422 (400 on some versions): the WatchList feature gate is off.
            (Self::Streaming, watcher::Error::WatchStartFailed(kube::Error::Api(s)))
                if s.code == 422 || s.code == 400 =>
            {
                Some(Self::Paginated)
            }
            // "continue parameter is too old": etcd compacted past the
            // list's revision between two pages. Paginated again, a list
            // that took that long would most likely expire again.
            (Self::Paginated, watcher::Error::InitialListFailed(kube::Error::Api(s)))
                if s.code == 410 =>
            {
                Some(Self::Unpaginated)
            }
            _ => None,
        }
    }
}

/// Same page size as client-go.
const PAGE_SIZE: u32 = 500;

/// Streaming lists where the apiserver may serve them: they exist since
/// Kubernetes 1.27 (WatchList, on by default from 1.34; a server with the
/// gate off answers 422 and [`InitialList::fallback`] pages instead). An older
/// server ignores `sendInitialEvents` and never sends the bookmark that ends
/// the initial list, so it gets paginated lists from the start, as does a
/// server whose version cannot be read.
pub async fn initial_list(client: &Client) -> InitialList {
    match client.apiserver_version().await {
        Ok(v) if version_streams(&v.major, &v.minor) => InitialList::Streaming,
        Ok(v) => {
            tracing::info!(major = %v.major, minor = %v.minor, "apiserver older than 1.27: paginated initial lists");
            InitialList::Paginated
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the apiserver version: paginated initial lists");
            InitialList::Paginated
        }
    }
}

/// `minor` may carry a suffix on managed clusters ("27+").
fn version_streams(major: &str, minor: &str) -> bool {
    let digits = |s: &str| {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    };
    match (digits(major), digits(minor)) {
        (Some(1), Some(m)) => m >= 27,
        (Some(ma), Some(_)) => ma > 1,
        _ => false,
    }
}

pub fn api_resource(p: &Profile) -> ApiResource {
    let gvk = GroupVersionKind::gvk(&p.group, &p.version, &p.kind);
    ApiResource::from_gvk_with_plural(&gvk, &p.plural())
}

pub fn api(client: Client, p: &Profile, namespace: Option<&str>) -> Api<DynamicObject> {
    let ar = api_resource(p);
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    }
}

/// Stream identity used for readiness: `kind` or `kind/namespace`.
pub fn stream_id(p: &Profile, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("{}/{}", p.kind, ns),
        None => p.kind.clone(),
    }
}

/// Every stream `serve` starts for this config, for readiness.
pub fn stream_ids(profiles: &[Profile], namespaces: &[String]) -> Vec<String> {
    profiles
        .iter()
        .flat_map(|p| {
            if namespaces.is_empty() {
                vec![stream_id(p, None)]
            } else {
                namespaces.iter().map(|ns| stream_id(p, Some(ns))).collect()
            }
        })
        .collect()
}

/// The `type` label of `remedy_watch_events_total` for a watcher error.
/// `expired` is a 410 Gone that etcd compaction causes and a relist cures:
/// an event on an open watch (the resourceVersion remedy resumed from was
/// compacted away) or a list page whose continue token was. Everything else
/// is `error`, a 410 answering the watch request itself included:
/// kube-runtime retries that with the same resourceVersion instead of
/// relisting, so it is a request that failed, not the expected end of a watch.
pub fn error_type(e: &watcher::Error) -> WatchEvent {
    match e {
        watcher::Error::WatchError(s) if s.code == 410 => WatchEvent::Expired,
        watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 410 => {
            WatchEvent::Expired
        }
        _ => WatchEvent::Error,
    }
}

/// Runs until the stream ends (it does not: kube-runtime retries with backoff).
pub async fn run(
    client: Client,
    store: Arc<Store>,
    (profile, p): (usize, Profile),
    metrics: Arc<Metrics>,
    namespace: Option<String>,
    mut list: InitialList,
) {
    let ns = namespace.as_deref();
    let id = stream_id(&p, ns);
    let kind = p.kind.clone();
    let mut seen: HashSet<ResourceKey> = HashSet::new();
    tracing::info!(stream = %id, api_version = %p.api_version(), initial_list = list.as_str(), label_selector = p.label_selector.as_deref().unwrap_or(""), "watch starting");
    // A new watcher starts with `Init`, which resets `seen`, and its
    // `InitDone` drops whatever the store holds that it did not list.
    'strategy: loop {
        let mut config = list.config();
        if let Some(sel) = &p.label_selector {
            // Filtered by the apiserver: an object that stops matching
            // arrives as a delete, one that starts matching as an apply.
            config = config.labels(sel);
        }
        let mut events = watcher::watcher(api(client.clone(), &p, ns), config)
            .default_backoff()
            .boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Event::Init) => {
                    metrics.watch.event(&kind, WatchEvent::Init);
                    seen.clear();
                }
                Ok(Event::InitApply(obj)) => {
                    metrics.watch.event(&kind, WatchEvent::InitApply);
                    if let Some(k) = store.apply(profile, &obj) {
                        seen.insert(k);
                    }
                }
                Ok(Event::InitDone) => {
                    metrics.watch.event(&kind, WatchEvent::InitDone);
                    store.retain_seen(&kind, ns, &seen);
                    seen = HashSet::new();
                    if !store.is_synced(&id) {
                        tracing::info!(stream = %id, objects = store.len(), "initial list synced");
                    }
                    store.mark_synced(&id);
                    metrics
                        .watch
                        .synced
                        .get_or_create(&crate::metrics::KindLabels { kind: kind.clone() })
                        .set(1);
                }
                Ok(Event::Apply(obj)) => {
                    metrics.watch.event(&kind, WatchEvent::Apply);
                    store.apply(profile, &obj);
                }
                Ok(Event::Delete(obj)) => {
                    metrics.watch.event(&kind, WatchEvent::Delete);
                    if let Some(k) = store.key(profile, &obj) {
                        store.remove(&k);
                    }
                }
                Err(e) => {
                    let t = error_type(&e);
                    let next = list.fallback(&e);
                    // A server refusing streaming lists answered a capability
                    // question: no error to count. An expired page is counted.
                    if !(list == InitialList::Streaming && next.is_some()) {
                        metrics.watch.event(&kind, t);
                    }
                    if let Some(next) = next {
                        tracing::info!(stream = %id, error = %e, from = list.as_str(), to = next.as_str(), "initial list strategy unavailable: switching");
                        list = next;
                        continue 'strategy;
                    }
                    if t == WatchEvent::Expired {
                        // Expected after a long disconnect: the next events are a
                        // fresh list, and `InitDone` drops what was deleted meanwhile.
                        tracing::info!(stream = %id, error = %e, "watch expired (410 Gone): relisting");
                    } else {
                        tracing::warn!(stream = %id, error = %e, "watch error; kube-runtime retries with backoff");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16, reason: &str) -> Box<Status> {
        Box::new(Status {
            code,
            reason: reason.into(),
            message: "too old resource version: 1 (2)".into(),
            ..Status::default()
        })
    }

    #[test]
    fn watch_410_is_expired_everything_else_an_error() {
        use watcher::Error as E;
        let error_type = |e: &E| error_type(e).label();
        assert_eq!(
            error_type(&E::WatchError(status(410, "Expired"))),
            "expired"
        );
        // The code decides, as it does for kube-runtime's relist.
        assert_eq!(error_type(&E::WatchError(status(410, ""))), "expired");
        assert_eq!(
            error_type(&E::WatchError(status(500, "InternalError"))),
            "error"
        );
        assert_eq!(
            error_type(&E::WatchError(status(403, "Forbidden"))),
            "error"
        );
        // Failed requests, not an open watch ending: still errors.
        assert_eq!(
            error_type(&E::WatchStartFailed(kube::Error::Api(status(
                410, "Expired"
            )))),
            "error"
        );
        // An expired continue token: compaction, cured by a relist.
        assert_eq!(
            error_type(&E::InitialListFailed(kube::Error::Api(status(
                410, "Expired"
            )))),
            "expired"
        );
        assert_eq!(
            error_type(&E::InitialListFailed(kube::Error::Api(status(
                500,
                "InternalError"
            )))),
            "error"
        );
        assert_eq!(error_type(&E::NoResourceVersion), "error");
    }

    #[test]
    fn fallbacks_page_when_streaming_is_refused_and_unpage_on_an_expired_page() {
        use watcher::Error as E;
        let api = |code, reason| kube::Error::Api(status(code, reason));
        let s = InitialList::Streaming;
        assert_eq!(
            s.fallback(&E::WatchStartFailed(api(422, "Invalid"))),
            Some(InitialList::Paginated)
        );
        // Transient failures keep the strategy: kube-runtime retries.
        assert_eq!(s.fallback(&E::WatchStartFailed(api(500, "x"))), None);
        assert_eq!(s.fallback(&E::WatchStartFailed(api(403, "x"))), None);
        assert_eq!(s.fallback(&E::WatchError(status(410, "Expired"))), None);
        let p = InitialList::Paginated;
        assert_eq!(
            p.fallback(&E::InitialListFailed(api(410, "Expired"))),
            Some(InitialList::Unpaginated)
        );
        assert_eq!(p.fallback(&E::InitialListFailed(api(500, "x"))), None);
        assert_eq!(p.fallback(&E::WatchError(status(410, "Expired"))), None);
        let u = InitialList::Unpaginated;
        assert_eq!(u.fallback(&E::InitialListFailed(api(410, "Expired"))), None);
        assert_eq!(InitialList::Unpaginated.config().page_size, None);
        assert_eq!(InitialList::Paginated.config().page_size, Some(500));
    }

    #[test]
    fn streams_from_1_27() {
        assert!(version_streams("1", "36"));
        assert!(version_streams("1", "27+"));
        assert!(!version_streams("1", "26"));
        assert!(!version_streams("1", ""));
        assert!(version_streams("2", "0"));
    }
}
