//! The model: what remedy knows about a resource and its failures, with no
//! I/O. Profiles say where a kind keeps its fields and how it is held; the
//! view is a resource projected through its profile; classification says
//! whether a failure is transient or terminal; backoff, scopes and failure
//! domains and owners are the vocabulary the decisions in `decide` are made in.
//!
//! May import: `config`, serde, regex, chrono and kube's data types
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
