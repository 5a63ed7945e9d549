//! An object projected through its profile into the compact view the
//! store keeps, and the failure texts classification reads.

use super::{
    CRASH_ANNOTATION, FAILURE_TIME_ANNOTATION, HELD_WITH_LABEL, IGNORE_ANNOTATION, Profile,
    SKIP_MARKER, WHY_ANNOTATION,
};
use crate::model::view::{ConditionView, FailureText, Labels, Owner, Projection, ResourceView};
use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::BTreeMap;

impl Profile {
    /// Projects a full object into the compact view. Never fails: fields of
    /// the wrong type are recorded in `malformed` so the resource is reported
    /// unclassifiable instead of being guessed at.
    pub fn project(&self, obj: &DynamicObject) -> Projection {
        let meta = &obj.metadata;
        let mut view = ResourceView {
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            resource_version: meta.resource_version.as_deref().unwrap_or_default().into(),
            labels: Labels::from_pairs(
                meta.labels
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .chain(
                        first(&obj.data, &self.fields.failure_domain)
                            .and_then(Value::as_str)
                            .filter(|d| !d.is_empty())
                            .map(|d| (crate::model::domains::FIELD_LABEL, d)),
                    )
                    .chain(
                        first(&obj.data, &self.fields.owner)
                            .and_then(Value::as_str)
                            .filter(|o| !o.is_empty())
                            .map(|o| (crate::model::owner::OWNER_LABEL, o)),
                    )
                    .chain(self.held_with(obj).map(|o| (HELD_WITH_LABEL, o))),
            ),
            deleting: meta.deletion_timestamp.is_some(),
            created: meta.creation_timestamp.as_ref().and_then(|t| {
                let nanos = u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0);
                DateTime::from_timestamp(t.0.as_second(), nanos)
            }),
            ..ResourceView::default()
        };
        let empty = BTreeMap::new();
        let annotations = meta.annotations.as_ref().unwrap_or(&empty);
        view.ignored = annotations.contains_key(IGNORE_ANNOTATION);
        view.why = annotations
            .get(WHY_ANNOTATION)
            .map_or(0, |t| crate::model::why::digest(t));
        view.pause = self.pause_state(annotations, &obj.data);
        view.clearable = self.clearable(&obj.data);
        view.uncreated = self.hold.as_ref().is_some_and(|h| {
            !h.new_until.is_empty() && !h.new_until.iter().any(|p| is_set(&obj.data, p))
        });
        view.skip_remediation = match self
            .remediation
            .skip_remediation_annotation
            .as_ref()
            .and_then(|k| annotations.get(k))
        {
            None => Owner::Absent,
            Some(v) if v == SKIP_MARKER => Owner::Remedy,
            Some(_) => Owner::Other,
        };

        let data = &obj.data;
        let f = &self.fields;
        if !self.has_native_counter() {
            if let Some(v) = annotations.get(CRASH_ANNOTATION) {
                match v.parse::<u32>() {
                    Ok(n) => view.crash_count = Some(n),
                    Err(_) => view.malformed.push("crash_count"),
                }
            }
            if let Some(v) = annotations.get(FAILURE_TIME_ANNOTATION) {
                match DateTime::parse_from_rfc3339(v) {
                    Ok(t) => view.failure_time = Some(t.with_timezone(&Utc)),
                    Err(_) => view.malformed.push("failure_time"),
                }
            }
        }
        let mut failure = FailureText {
            reason: text(
                data,
                &f.failure_reason,
                "failure_reason",
                &mut view.malformed,
            ),
            message: text(
                data,
                &f.failure_message,
                "failure_message",
                &mut view.malformed,
            ),
            state: text(data, &f.state, "state", &mut view.malformed),
            conditions: Vec::new(),
        };
        if let Some(v) = first(data, &f.crash_count) {
            match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => view.crash_count = Some(n),
                None => view.malformed.push("crash_count"),
            }
        }
        if let Some(v) = first(data, &f.failure_time) {
            match v
                .as_str()
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            {
                Some(t) => view.failure_time = Some(t.with_timezone(&Utc)),
                None => view.malformed.push("failure_time"),
            }
        }
        if let Some(v) = first(data, &f.conditions) {
            match conditions(v) {
                Some(c) => {
                    let not_while = self.hold.as_ref().map_or(&[][..], |h| &h.not_while[..]);
                    view.replaced = c.iter().any(|c| {
                        c.status.as_ref() == "False" && not_while.iter().any(|t| **t == *c.type_)
                    });
                    failure.conditions = c
                        .into_iter()
                        .filter(|c| !self.ignore_conditions.skips(&c.type_, c.reason.as_deref()))
                        .collect();
                }
                None => view.malformed.push("conditions"),
            }
        }
        Projection { view, failure }
    }

    /// The name of the owner whose hold this object follows
    /// (`hold.with_owner`): its first ownerReference of that kind.
    fn held_with<'a>(&self, obj: &'a DynamicObject) -> Option<&'a str> {
        let kind = self.hold.as_ref()?.with_owner.as_deref()?;
        obj.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.kind == kind && !r.name.is_empty())
            .map(|r| r.name.as_str())
    }

    /// Whether remediation may write `clear_status` or `clear_conditions`
    /// on this object now: one of its fields is set or one of its
    /// conditions is there, and none of `keep_if_set` is set.
    pub fn clearable(&self, data: &Value) -> bool {
        let r = &self.remediation;
        !r.keep_if_set.iter().any(|p| is_set(data, p))
            && (self.clear_paths(data).next().is_some()
                || self
                    .condition_lists(data)
                    .any(|(_, items)| items.iter().any(|c| self.clears_condition(c))))
    }

    /// The `clear_conditions` on this object now: the JSON pointer of each
    /// and its content, the last of a list first, so that removing them in
    /// this order leaves each pointer right.
    pub fn conditions_to_clear(&self, data: &Value) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for (list, items) in self.condition_lists(data) {
            for (i, c) in items.iter().enumerate().rev() {
                if self.clears_condition(c) {
                    out.push((format!("{list}/{i}"), c.clone()));
                }
            }
        }
        out
    }

    fn clears_condition(&self, condition: &Value) -> bool {
        let r = &self.remediation;
        r.clear_conditions.iter().any(|m| m.matches(condition))
    }

    /// The conditions lists `clear_conditions` applies to, each path once.
    fn condition_lists<'a>(
        &'a self,
        data: &'a Value,
    ) -> impl Iterator<Item = (&'a String, &'a Vec<Value>)> + 'a {
        let lists = &self.fields.conditions;
        lists
            .iter()
            .enumerate()
            .filter(|_| !self.remediation.clear_conditions.is_empty())
            .filter(move |(i, p)| !lists[..*i].contains(p))
            .filter_map(move |(_, p)| Some((p, data.pointer(p)?.as_array()?)))
    }

    /// The `clear_status` fields that hold something to clear now: set,
    /// and for a list of conditions, one of them False. CAPO v0.15 answers
    /// every status write with a True condition of its own
    /// (OpenStackAuthenticationSucceeded), which is nothing to clear: read
    /// as a failure it made remedy clear again and again.
    pub fn to_clear(&self, data: &Value) -> Vec<String> {
        self.clear_paths(data).cloned().collect()
    }

    /// [`Self::to_clear`] without copying: `clearable` runs on every
    /// projected object.
    fn clear_paths<'a>(&'a self, data: &'a Value) -> impl Iterator<Item = &'a String> + 'a {
        self.remediation
            .clear_status
            .iter()
            .filter(|p| data.pointer(p).is_some_and(failing_value))
    }

    /// Whether the object itself counts failures (brupop); otherwise remedy
    /// keeps its own count in annotations.
    pub fn has_native_counter(&self) -> bool {
        !self.fields.crash_count.is_empty()
    }
}

/// Longest failure message kept; the rest is not needed to classify and
/// would make 100k views expensive.
pub(super) const MAX_MESSAGE: usize = 512;

fn first<'a>(data: &'a Value, paths: &[String]) -> Option<&'a Value> {
    paths
        .iter()
        .filter_map(|p| data.pointer(p))
        .find(|v| !v.is_null())
}

fn text(
    data: &Value,
    paths: &[String],
    field: &'static str,
    malformed: &mut Vec<&'static str>,
) -> Option<Box<str>> {
    let v = first(data, paths)?;
    match v.as_str() {
        Some("") => None,
        Some(s) => Some(truncate(s).into()),
        None => {
            malformed.push(field);
            None
        }
    }
}

fn truncate(s: &str) -> &str {
    if s.len() <= MAX_MESSAGE {
        return s;
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn conditions(v: &Value) -> Option<Vec<ConditionView>> {
    let mut out = Vec::new();
    for c in v.as_array()? {
        let type_ = c.get("type")?.as_str()?;
        let status = c.get("status")?.as_str()?;
        if status == "True" {
            continue;
        }
        let opt = |k: &str| {
            c.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|s| Box::from(truncate(s)))
        };
        out.push(ConditionView {
            type_: type_.into(),
            status: status.into(),
            reason: opt("reason"),
            message: opt("message"),
        });
    }
    Some(out)
}

/// A status value worth clearing: anything set, except a list of
/// conditions none of which is False.
fn failing_value(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(items)
            if !items.is_empty()
                && items
                    .iter()
                    .all(|c| c.get("type").is_some() && c.get("status").is_some()) =>
        {
            items.iter().any(|c| c["status"] == "False")
        }
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
}

/// Whether the field at JSON pointer `p` is there and not null.
fn is_set(data: &Value, p: &str) -> bool {
    data.pointer(p).is_some_and(|v| !v.is_null())
}
