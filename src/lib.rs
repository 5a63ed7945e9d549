//! remedy: turns Prometheus signals into safe, automatic remediation of stuck
//! cloud resources on Kubernetes.
//!
//! Pure decision logic (`classify`, `backoff`, `budget`, `remediate::plan`) has
//! no I/O; Kubernetes, HTTP and Prometheus live in the edge modules.

pub mod app;
pub mod authorship;
pub mod backoff;
pub mod budget;
pub mod classify;
pub mod cli;
pub mod config;
pub mod engine;
pub mod episodes;
pub mod leader;
pub mod metrics;
pub mod profile;
pub mod recovery;
pub mod remediate;
pub mod scope;
pub mod server;
pub mod signals;
pub mod sim;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod view;
pub mod watch;
