//! Remediation planning: the steps that take an object from what it is to
//! what a goal asks (`step`), and who to touch after a hold goes (`resume`). Pure; the executor that carries them out
//! against the apiserver is `daemon::execute`.

pub mod resume;
pub mod step;
