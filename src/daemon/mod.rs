//! The daemon: everything that runs. The app wires the parts and supervises
//! their tasks; watches fill the store; the engine ticks, asks `decide` and
//! queues goals for the executor, which writes them step by step; the leader task holds the Lease;
//! the server answers probes, /metrics, /status and the webhook; the
//! slowdown layer paces every apiserver request.
//!
//! May import every other layer.

pub mod app;
pub mod authorship;
pub mod client;
pub mod engine;
pub mod execute;
pub mod fault;
pub mod fdlimit;
pub mod leader;
pub mod pause;
pub mod preflight;
pub mod remediation;
pub mod server;
pub mod slowdown;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod watch;
