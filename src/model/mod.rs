//! The model: what remedy knows about a resource and its failures, with no
//! I/O. Profiles say where a kind keeps its fields and how it is held; the
//! view is a resource projected through its profile; classification says
//! whether a failure is transient or terminal; backoff, scopes and failure
//! domains and owners are the vocabulary the decisions in `decide` are made in.
//!
//! May import: `config`, serde (and schemars, for the config's JSON Schema),
//! regex, chrono and kube's data types
//! (`kube::core`). Never tokio, kube's client, reqwest or `daemon`
//! (scripts/check-layers.py).

pub mod backoff;
pub mod classify;
pub mod domains;
pub mod owner;
pub mod profile;
pub mod remediation;
pub mod scope;
pub mod view;
pub mod why;

/// The JSON Schema of a duration as the config writes it (humantime, read
/// by `humantime_serde`): a number with a unit, `30s`, `5m`, `1h 30m`. A
/// bare number has no unit and is refused.
pub struct DurationSchema;

impl schemars::JsonSchema for DurationSchema {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": r"^\s*([0-9]+\s*[a-zA-Zµ]+\s*)+$",
            "description": "A duration with its unit: `500ms`, `30s`, `5m`, `1h 30m`, `2d`.",
        })
    }
}
