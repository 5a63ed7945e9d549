//! Integration tests against a real kube-apiserver + etcd (`testenv/`), one
//! test binary so the cluster is started once and every helper is used.

mod alert_loop;
mod cli;
mod deploy;
mod episode_recovery;
mod kube_watch;
mod leader;
mod listener;
mod provider_rules;
mod rbac;
mod remediate;
mod signals_verify;
mod signals_webhook;
mod stack;
mod support;
mod throttle;
mod tls;
mod token_rotation;
mod watch_expiry;
mod watch_restart;
