//! Remediation: pure planning (`plan`) and the Kubernetes executor (`execute`).

pub mod execute;
pub mod plan;
