//! Integration tests against a real kube-apiserver + etcd (`testenv/`), one
//! test binary so the cluster is started once and every helper is used.

mod alert_loop;
mod cli;
mod crds;
mod crossplane;
mod deploy;
mod episode_recovery;
mod episodes;
mod exposition;
mod initial_list;
mod kube_watch;
mod leader;
mod provider_rules;
mod rbac;
mod remediate;
mod signals_auth;
mod signals_verify;
mod signals_webhook;
mod stack;
mod support;
mod throttle;
mod tls;
mod user_agent;
mod watch_expiry;
mod watch_restart;
