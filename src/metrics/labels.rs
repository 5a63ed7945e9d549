//! The label sets of remedy's families. Values remedy writes itself are
//! the enums of [`super::values`] (or `&'static str` named by a layer the
//! metrics may not import); kinds, namespaces, domains and alert names come
//! from the config and the watched objects.

use super::values::{
    ActionResult, HttpTimeout, OverwriteResult, PauseRead, RecordResult, RecordWriter, Reload,
    SignalResult, SignalTarget, WatchEvent, WebhookResult, WebhookStatus,
};
#[cfg(test)]
use crate::model::view::ResourceKey;
use prometheus_client::encoding::EncodeLabelSet;

/// The per-resource series' labels, for prometheus-client's reference
/// encoding in the tests: remedy writes those series by hand (series.rs).
#[cfg(test)]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

#[cfg(test)]
impl From<&ResourceKey> for ResourceLabels {
    fn from(k: &ResourceKey) -> Self {
        Self {
            namespace: k.namespace.to_string(),
            kind: k.kind.to_string(),
            name: k.name.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub namespace: String,
    pub kind: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindResultLabels {
    pub kind: String,
    pub result: OverwriteResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindStateLabels {
    pub kind: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindReasonLabels {
    pub kind: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    /// How domains are keyed: cluster | kind | namespace | label | field.
    pub scope: &'static str,
    /// The failure domain (bounded, `domains::MAX_DOMAINS`).
    pub domain: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
    pub result: ActionResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionKindLabels {
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub status: WebhookStatus,
    pub result: WebhookResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    pub target: SignalTarget,
    pub result: SignalResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub result: Reload,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PauseReadLabels {
    pub result: PauseRead,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RecordLabels {
    /// webhook | leader
    pub writer: RecordWriter,
    pub result: RecordResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShedLabels {
    /// finished | unproven | corrupt
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EpisodeLabels {
    /// Not `alertname`: Prometheus would overwrite it with the name of the
    /// alert rule that fires on this metric.
    pub alert: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimeoutLabels {
    /// handshake | header | idle
    pub timeout: HttpTimeout,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub kind: String,
    pub r#type: WatchEvent,
}
