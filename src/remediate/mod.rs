//! Remediation planning: the steps that take an object from what it is to
//! what a goal asks (`plan`). Pure; the executor that carries them out
//! against the apiserver is `daemon::execute`.

pub mod plan;
