//! Integration tests against a real kube-apiserver + etcd (`testenv/`), one
//! test binary so the cluster is started once and every helper is used.

mod admission;
mod alert_loop;
mod cli;
mod crds;
mod crossplane;
mod deploy;
mod domains;
mod episode_recovery;
mod episodes;
mod events_rbac;
mod exposition;
mod ha;
mod helm;
mod image;
mod initial_list;
mod kube_watch;
mod leader;
mod listener;
mod otlp;
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
mod token_rotation;
mod user_agent;
mod watch_expiry;
mod watch_restart;
