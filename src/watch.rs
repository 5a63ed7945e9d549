//! One kube-runtime watcher per profile (and namespace, when namespaces are
//! restricted). Relists and 410 Gone are handled by kube-runtime; here each
//! event is projected into the store and the full object dropped at once.
//! A 410 is counted as `type="expired"`, apart from real errors, so a relist
//! forced by etcd compaction is visible without looking like a failure.

use crate::profile::Profile;
use crate::store::Store;
use crate::view::ResourceKey;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::HashSet;
use std::sync::Arc;

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
/// `expired` is a 410 Gone event on an open watch: the resourceVersion
/// remedy resumed from was compacted away and kube-runtime relists from
/// scratch. Everything else is `error`, a 410 on a failed request included
/// (the watch request itself, which kube-runtime retries with the same
/// resourceVersion instead of relisting, or an expired list page): those
/// are requests that failed, not the expected end of a watch.
pub fn error_type(e: &watcher::Error) -> &'static str {
    match e {
        watcher::Error::WatchError(s) if s.code == 410 => "expired",
        _ => "error",
    }
}

/// Runs until the stream ends (it does not: kube-runtime retries with backoff).
pub async fn run(client: Client, store: Arc<Store>, profile: usize, namespace: Option<String>) {
    let p = store.profiles()[profile].clone();
    let ns = namespace.as_deref();
    let id = stream_id(&p, ns);
    let kind = p.kind.clone();
    let metrics = store.metrics().clone();
    let cfg = watcher::Config::default().page_size(500);
    let mut events = watcher::watcher(api(client, &p, ns), cfg)
        .default_backoff()
        .boxed();
    let mut seen: HashSet<ResourceKey> = HashSet::new();
    tracing::info!(stream = %id, api_version = %p.api_version(), "watch starting");
    while let Some(ev) = events.next().await {
        match ev {
            Ok(Event::Init) => {
                metrics.watch_event(&kind, "init");
                seen.clear();
            }
            Ok(Event::InitApply(obj)) => {
                metrics.watch_event(&kind, "init_apply");
                if let Some(k) = store.apply(profile, &obj) {
                    seen.insert(k);
                }
            }
            Ok(Event::InitDone) => {
                metrics.watch_event(&kind, "init_done");
                store.retain_seen(&kind, ns, &seen);
                seen = HashSet::new();
                if !store.is_synced(&id) {
                    tracing::info!(stream = %id, objects = store.len(), "initial list synced");
                }
                store.mark_synced(&id);
                metrics
                    .watch_synced
                    .get_or_create(&crate::metrics::KindLabels { kind: kind.clone() })
                    .set(1);
            }
            Ok(Event::Apply(obj)) => {
                metrics.watch_event(&kind, "apply");
                store.apply(profile, &obj);
            }
            Ok(Event::Delete(obj)) => {
                metrics.watch_event(&kind, "delete");
                if let Some(k) = store.key(profile, &obj) {
                    store.remove(&k);
                }
            }
            Err(e) => {
                let t = error_type(&e);
                metrics.watch_event(&kind, t);
                if t == "expired" {
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
        assert_eq!(
            error_type(&E::InitialListFailed(kube::Error::Api(status(
                410, "Expired"
            )))),
            "error"
        );
        assert_eq!(error_type(&E::NoResourceVersion), "error");
    }
}
