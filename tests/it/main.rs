//! Integration tests against a real kube-apiserver + etcd (`testenv/`), one
//! test binary so the cluster is started once and every helper is used.

mod kube_watch;
mod rbac;
mod remediate;
mod support;
mod throttle;
