//! Reads and writes the episode record's ConfigMap. Every write carries the
//! resourceVersion it read, so two writers never overwrite each other: the
//! second gets a conflict and reads again.

use super::{DATA_KEY, Found, Read, Record, RecordError};
use crate::metrics::values::{RecordResult, RecordWriter};
use crate::metrics::{Metrics, RecordLabels};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct RecordApi {
    api: Api<ConfigMap>,
    name: String,
    metrics: Arc<Metrics>,
}

fn api_error(e: kube::Error) -> RecordError {
    match &e {
        kube::Error::Api(s) if s.code == 403 => RecordError::Forbidden(e.to_string()),
        _ => RecordError::Api(e.to_string()),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    // 409: the resourceVersion moved on, or a create raced another.
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl RecordApi {
    pub fn new(client: kube::Client, namespace: &str, name: &str, metrics: Arc<Metrics>) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            metrics,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub async fn read(&self) -> Result<Read, RecordError> {
        let cm = self.api.get_opt(&self.name).await.map_err(api_error)?;
        let Some(cm) = cm else {
            return Ok(None);
        };
        let rv = cm.metadata.resource_version.clone().unwrap_or_default();
        let uid = cm.metadata.uid.clone().unwrap_or_default();
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(DATA_KEY))
            .map(String::as_str)
            // Created empty by deploy/ (so RBAC needs no create): no episodes.
            .unwrap_or("");
        if text.is_empty() {
            return Ok(Some(Found::new(Record::empty(), rv, uid)));
        }
        self.metrics.record.bytes.set(text.len() as i64);
        match Record::decode(text) {
            Ok(r) => Ok(Some(Found::new(r, rv, uid))),
            // Refusing it would refuse every notification until someone
            // deletes it: it is replaced by an empty record at once (against
            // the resourceVersion read, so a repair never overwrites a
            // newer write), and its text is kept in the log.
            Err(RecordError::Corrupt(why)) => {
                let copy: String = text.chars().take(64 * 1024).collect();
                tracing::error!(record = %self.name, %rv, error = %why, old_text = %copy, "episode record is corrupt: rewriting it; its old text is in this line");
                self.metrics
                    .record
                    .shed
                    .get_or_create(&crate::metrics::ShedLabels { reason: "corrupt" })
                    .inc();
                let empty = Record::empty();
                let rv = match self.write(RecordWriter::Repair, &empty, Some(&rv)).await {
                    Ok(Some(new_rv)) => new_rv,
                    // A conflict or an error: the next write against the old
                    // resourceVersion fails too, and reads again.
                    Ok(None) | Err(_) => rv,
                };
                Ok(Some(Found::new(empty, rv, uid)))
            }
            Err(e) => Err(e),
        }
    }

    /// Writes `record` if the object is still at `rv` (`None`: create it).
    /// `Ok(false)` is a conflict: read again and redo.
    pub async fn write(
        &self,
        writer: RecordWriter,
        record: &Record,
        rv: Option<&str>,
    ) -> Result<Option<String>, RecordError> {
        let outcome = self.put(record, rv).await;
        let result = match &outcome {
            Ok(Some(_)) => RecordResult::Ok,
            Ok(None) | Err(RecordError::Conflict(_)) => RecordResult::Conflict,
            Err(RecordError::TooLarge(_)) => RecordResult::TooLarge,
            Err(RecordError::Forbidden(_)) => RecordResult::Forbidden,
            // The rest (an API error; a record that does not serialize)
            // are errors.
            Err(_) => RecordResult::Error,
        };
        self.metrics
            .record
            .writes
            .get_or_create(&RecordLabels { writer, result })
            .inc();
        outcome
    }

    async fn put(&self, record: &Record, rv: Option<&str>) -> Result<Option<String>, RecordError> {
        let text = record.encode()?;
        let len = text.len();
        let written = match rv {
            // A merge patch that names the resourceVersion is refused (409)
            // if the object moved on, and leaves labels others set alone.
            Some(rv) => {
                let patch = serde_json::json!({
                    "metadata": {"resourceVersion": rv},
                    "data": {DATA_KEY: text},
                });
                self.api
                    .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
            None => {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/name".to_string(),
                            "remedy".to_string(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    data: Some(BTreeMap::from([(DATA_KEY.to_string(), text)])),
                    ..ConfigMap::default()
                };
                self.api.create(&PostParams::default(), &cm).await
            }
        };
        match written {
            Ok(cm) => {
                self.metrics.record.bytes.set(len as i64);
                Ok(Some(cm.metadata.resource_version.unwrap_or_default()))
            }
            Err(e) if is_conflict(&e) => Ok(None),
            Err(e) => Err(api_error(e)),
        }
    }
}
