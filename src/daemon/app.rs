//! `remedy serve`: wires config, watchers, store, engine, signals, metrics
//! and HTTP together.

use crate::config::Validated;
use crate::daemon::engine::{Deps, Engine, RecordLink};
use crate::daemon::execute::{Executor, WriteLimiter};
use crate::daemon::leader;
use crate::daemon::pause::PauseSwitch;
use crate::daemon::server::{self, Http, Readiness};
use crate::daemon::store::Store;
use crate::daemon::tls::{self, TlsError};
use crate::daemon::watch;
use crate::metrics::Metrics;
use crate::metrics::values::Reload;
use crate::model::profile::Profile;
use crate::record::configmap::RecordApi;
use crate::signals::SignalError;
use crate::signals::dedupe::Dedupe;
use crate::signals::inbox::Inbox;
use crate::signals::verify::{SignalHealth, Verifier};
use crate::signals::webhook::{self, TokenStore, WebhookState};
use crate::supervise::{Heartbeat, Supervisor, Tasks};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Spacing of a replica's episode-record writes for the webhook: a burst of
/// deliveries is batched into at most five writes a second.
const INBOX_INTERVAL: Duration = Duration::from_millis(200);

/// Fingerprints remembered for deduplication.
const DEDUPE_CAPACITY: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot reach Kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error("signals: {0}")]
    Signals(#[from] SignalError),
    #[error("leader election: {0}")]
    Leader(#[from] leader::LeaderError),
    #[error("{0}")]
    Preflight(#[from] crate::daemon::preflight::PreflightError),
    #[error("task {task} ended ({cause}): exiting so that Kubernetes restarts remedy")]
    TaskEnded { task: String, cause: String },
}

impl ServeError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kube",
            Self::Listen { .. } => "listen",
            Self::Tls(e) => e.label(),
            Self::Signals(e) => e.label(),
            Self::Leader(e) => e.label(),
            Self::Preflight(e) => e.label(),
            Self::TaskEnded { .. } => "task_ended",
        }
    }
}

/// Ready once every watch stream has completed its initial list.
/// Verification problems do not make remedy unready (it must keep taking
/// webhooks); they are reported as degraded notes, at /status and in metrics.
struct WatchReadiness {
    store: Arc<Store>,
    streams: Vec<String>,
    engine: Arc<Engine>,
    signals: Option<Arc<SignalHealth>>,
    heartbeat: Arc<Heartbeat>,
}

impl Readiness for WatchReadiness {
    fn check(&self) -> Result<Vec<String>, Vec<String>> {
        let missing: Vec<String> = self
            .streams
            .iter()
            .filter(|s| !self.store.is_synced(s))
            .map(|s| format!("watch {s}: initial list not synced yet"))
            .chain(self.engine.pause_unready())
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
        let mut notes = self.engine.problems();
        for (target, err) in self.signals.iter().flat_map(|h| h.status()) {
            if let Some(err) = err {
                notes.push(format!(
                    "{target}: last query failed ({err}); no remediation until it answers"
                ));
            }
        }
        Ok(notes)
    }

    fn alive(&self) -> Result<(), String> {
        self.heartbeat.check()
    }
}

/// `remedy serve`: the certificate, the client, then [`App::build`], then
/// [`App::run`].
pub async fn serve(v: Validated) -> Result<(), ServeError> {
    // First: a bad certificate or key stops startup with the reason,
    // before anything connects or listens.
    let tls = v.config.tls.as_ref().map(tls::load).transpose()?;
    let metrics = Arc::new(Metrics::new(v.config.max_resource_series));
    let client =
        crate::daemon::client::kube_client_observed(crate::daemon::slowdown::layer::Observer {
            throttled: metrics.apiserver.throttled.clone(),
            backoff: metrics.apiserver.backoff.clone(),
        })
        .await?;
    App::build(v, tls, client, metrics).await?.run().await
}

/// Everything `remedy serve` runs, built and not started: the HTTP app,
/// and every long-lived task, which [`App::run`] starts and supervises.
pub struct App {
    tasks: Tasks,
    router: axum::Router,
    listen: std::net::SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    http: crate::config::HttpConfig,
    metrics: Arc<Metrics>,
    leadership: leader::Leadership,
    dry_run: bool,
}

impl App {
    /// Builds every part from a validated config, its loaded certificate
    /// (`tls::load` of `config.tls`), a client and the metrics the client
    /// reports into. Checks what can fail at start (signals, status
    /// subresources, the lease manager) and starts nothing: no task runs,
    /// nothing listens.
    pub async fn build(
        v: Validated,
        tls_config: Option<tls::Tls>,
        client: kube::Client,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ServeError> {
        let cfg = v.config;
        let mut tasks = Tasks::default();
        crate::daemon::fdlimit::ensure(crate::daemon::fdlimit::needed(
            cfg.http.max_connections,
            watch::stream_ids(&v.profiles, &cfg.namespaces).len(),
        ));
        metrics.preset(&crate::metrics::Known::from_config(&cfg, &v.profiles));
        if let Some(t) = &tls_config {
            let seen = check_certificate(&t.certs, &metrics, None);
            tasks.add(
                "certificate reload",
                reload_certificates(t.certs.clone(), metrics.clone(), cfg.reload_interval, seen),
            );
        }
        let profiles: Arc<[Profile]> = Arc::from(v.profiles.clone());
        let store = Arc::new(Store::new(
            profiles.clone(),
            v.classifier,
            cfg.backoff.clone(),
            metrics.clone(),
        ));

        // Fail at start, with the reason, rather than run half-configured.
        let verifier = match cfg.signals.prometheus_url {
            Some(_) => Some(Arc::new(Verifier::new(&cfg.signals, metrics.clone())?)),
            None => None,
        };
        let signal_health = verifier.as_ref().map(|v| v.health());
        let (tx, rx) = tokio::sync::mpsc::channel(cfg.webhook.queue);
        crate::daemon::preflight::check_status_subresources(&client, &v.profiles).await?;
        // With leader election, several replicas may take Alertmanager's
        // notifications: they meet in the episode record.
        let le = &cfg.leader_election;
        let record = le.enabled.then(|| {
            Arc::new(RecordApi::new(
                client.clone(),
                &le.namespace,
                &le.episode_record,
                metrics.clone(),
            ))
        });
        let webhook_router = match cfg.webhook.token_file {
            Some(_) => {
                let mut state = WebhookState::from_config(
                    &cfg.webhook,
                    cfg.reload_interval,
                    &cfg.alerts,
                    tx,
                    Arc::new(Mutex::new(Dedupe::new(DEDUPE_CAPACITY))),
                    metrics.clone(),
                )?;
                if let Some(api) = &record {
                    state = state.with_inbox(Inbox::start(
                        api.clone(),
                        crate::model::scope::AlertRules::new(cfg.alerts.clone()),
                        INBOX_INTERVAL,
                        &mut tasks,
                    ));
                }
                tasks.add(
                    "webhook token reload",
                    reload_token(state.tokens(), metrics.clone(), cfg.reload_interval),
                );
                Some(webhook::router(state))
            }
            None => {
                if !cfg.alerts.is_empty() {
                    tracing::warn!(
                        "alerts configured but webhook.token_file is not: the webhook is disabled"
                    );
                }
                drop(tx);
                None
            }
        };

        let list = watch::initial_list(&client).await;
        for (i, p) in v.profiles.iter().enumerate() {
            let namespaces: Vec<Option<String>> = if cfg.namespaces.is_empty() {
                vec![None]
            } else {
                cfg.namespaces.iter().cloned().map(Some).collect()
            };
            for ns in namespaces {
                let name = match &ns {
                    None => format!("watch {}", p.kind),
                    Some(ns) => format!("watch {} in {ns}", p.kind),
                };
                tasks.add(
                    name,
                    watch::run(
                        client.clone(),
                        store.clone(),
                        (i, profiles[i].clone()),
                        metrics.clone(),
                        ns,
                        list,
                    ),
                );
            }
        }

        let identity = leader::identity();
        let leadership = leader::start(
            client.clone(),
            &cfg.leader_election,
            identity.clone(),
            metrics.clone(),
            &mut tasks,
        )
        .await?;
        let limiter = Arc::new(WriteLimiter::new(
            cfg.budget.writes_per_second,
            cfg.budget.write_burst,
        ));
        let pause = Arc::new(PauseSwitch::new(
            client.clone(),
            &cfg.pause_switch.namespace,
            &cfg.pause_switch.configmap,
            metrics.clone(),
        ));
        // Read once before anything can be written: a remedy started while
        // paused writes nothing.
        pause.refresh().await;
        let remediation_client = client.clone();
        let executor = Arc::new(
            Executor::new(
                client,
                metrics.clone(),
                limiter,
                leadership.clone(),
                cfg.dry_run,
            )
            .with_write_log(store.clone())
            .with_pause(pause.clone()),
        );
        let engine = Engine::new(
            &cfg,
            Deps {
                profiles: profiles.clone(),
                metrics: metrics.clone(),
                store: store.clone(),
                executor,
                verifier,
                leader: leadership.clone(),
                pause: Some(pause),
                record: record.map(|api| RecordLink { api, identity }),
            },
        );
        tasks.add("engine", engine.clone().run(cfg.tick, rx));
        // Cluster API external remediation (daemon::remediation): on only
        // with remedy.dev's CRDs installed.
        if crate::daemon::remediation::installed(&remediation_client).await {
            tracing::info!("external remediation on: RemedyRemediation requests are carried out");
            tasks.add(
                "external remediation",
                crate::daemon::remediation::Remediator::new(
                    remediation_client,
                    engine.clone(),
                    metrics.clone(),
                    leadership.clone(),
                    cfg.namespaces.clone(),
                    cfg.dry_run,
                )
                .run(cfg.tick),
            );
        } else {
            tracing::info!(
                "external remediation off: the remedy.dev CRDs (RemedyRemediation) are not installed"
            );
        }

        let readiness = Arc::new(WatchReadiness {
            store,
            streams: watch::stream_ids(&v.profiles, &cfg.namespaces),
            engine: engine.clone(),
            signals: signal_health,
            heartbeat: engine.heartbeat(),
        });
        // Keep remedy_ready current without depending on a probe calling /readyz.
        tasks.add(
            "readiness gauge",
            ready_gauge(readiness.clone(), metrics.clone(), cfg.tick),
        );
        let mut router = server::router(Http {
            metrics: metrics.clone(),
            readiness,
        })
        .merge(crate::daemon::engine::http::routes(engine));
        if let Some(w) = webhook_router {
            router = router.merge(w);
        }
        Ok(Self {
            tasks,
            router,
            listen: cfg.listen,
            tls: tls_config.map(|t| t.config),
            http: cfg.http,
            metrics,
            leadership,
            dry_run: cfg.dry_run,
        })
    }

    /// Listens on the configured address and runs.
    pub async fn run(self) -> Result<(), ServeError> {
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .map_err(|source| ServeError::Listen {
                addr: self.listen,
                source,
            })?;
        self.run_on(listener, shutdown_signal()).await
    }

    /// Starts every task and serves on `listener` until `shutdown` (then
    /// the Lease is handed back and the listener drains) or until a task
    /// ends, which ends the process with its name and cause.
    pub async fn run_on(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        tracing::info!(
            addr = %listener.local_addr().map_or_else(|_| self.listen.to_string(), |a| a.to_string()),
            tls = self.tls.is_some(),
            dry_run = self.dry_run,
            "listening"
        );
        let mut supervisor = Supervisor::default();
        supervisor.start(self.tasks);
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stop_then_release(self.leadership, stopping.clone(), shutdown);
        let server = server::serve(
            listener,
            self.tls,
            self.router,
            self.http,
            self.metrics,
            stop,
        );
        tokio::pin!(server);
        loop {
            tokio::select! {
                () = &mut server => return Ok(()),
                end = supervisor.next_end() => {
                    // On SIGTERM the leader task ends by design: the
                    // listener is draining, wait for it.
                    if stopping.load(Ordering::SeqCst) {
                        tracing::debug!(task = %end.task, cause = %end.cause, "task ended while shutting down");
                        continue;
                    }
                    tracing::error!(task = %end.task, cause = %end.cause, "a long-lived task ended: exiting so that Kubernetes restarts remedy");
                    return Err(ServeError::TaskEnded { task: end.task, cause: end.cause });
                }
            }
        }
    }
}

/// Keeps remedy_ready current without depending on a probe calling /readyz.
async fn ready_gauge(readiness: Arc<WatchReadiness>, metrics: Arc<Metrics>, tick: Duration) {
    let mut every = tokio::time::interval(tick);
    loop {
        every.tick().await;
        metrics
            .process
            .ready
            .set(i64::from(readiness.check().is_ok()));
    }
}

/// Runs `f` every `period`, the first time one period from now (what it
/// re-reads was just loaded), for as long as the process runs: the one loop
/// behind every file remedy re-reads.
async fn reload_every(period: Duration, mut f: impl FnMut()) {
    let mut every = tokio::time::interval(period);
    every.tick().await;
    loop {
        every.tick().await;
        f();
    }
}

/// Re-reads the certificate files now and then: a renewed Secret is served
/// without a restart, well before the old certificate expires. `seen` is the
/// served certificate's validity as last reported.
async fn reload_certificates(
    certs: Arc<tls::CertStore>,
    metrics: Arc<Metrics>,
    period: Duration,
    mut seen: tls::Validity,
) {
    reload_every(period, move || {
        let result = match certs.reload() {
            Ok(false) => {
                // The same certificate can still expire while served.
                seen = check_certificate(&certs, &metrics, Some(seen));
                return;
            }
            Ok(true) => {
                tracing::info!("TLS certificate reloaded");
                seen = check_certificate(&certs, &metrics, None);
                Reload::Reloaded
            }
            Err(e) => {
                // The files may be mid-update; the working pair stays.
                tracing::warn!(error = %e, label = e.label(), "cannot reload the TLS certificate; serving the previous one");
                seen = check_certificate(&certs, &metrics, Some(seen));
                Reload::Error
            }
        };
        metrics
            .http.tls_reloads
            .get_or_create(&crate::metrics::ReloadLabels { result })
            .inc();
    })
    .await;
}

/// Sets the certificate gauges and warns when the served certificate is
/// expired, not yet valid or expires within 7 days: rustls serves it
/// anyway, and clients then refuse every handshake. With `last` (the
/// verdict already reported) it warns only on a change, so an unchanged
/// file is not logged every period; a load or reload (`None`) always is.
fn check_certificate(
    certs: &tls::CertStore,
    metrics: &Metrics,
    last: Option<tls::Validity>,
) -> tls::Validity {
    let (not_before, not_after) = (certs.not_before(), certs.not_after());
    metrics.http.tls_expiry.set(not_after.unwrap_or(0));
    metrics.http.tls_not_before.set(not_before.unwrap_or(0));
    let now = chrono::Utc::now().timestamp();
    let validity = tls::validity(not_before, not_after, now);
    if validity.is_problem() && last != Some(validity) {
        tracing::warn!(
            validity = validity.label(),
            not_before = not_before.unwrap_or(0),
            not_after = not_after.unwrap_or(0),
            "the served TLS certificate is {}; clients refuse it once it is expired or not yet valid",
            match validity {
                tls::Validity::Expired => "expired",
                tls::Validity::NotYetValid => "not valid yet",
                tls::Validity::ExpiresSoon => "about to expire (within 7 days)",
                tls::Validity::Unknown | tls::Validity::Valid =>
                    "of unknown validity (its dates do not parse)",
            }
        );
    }
    validity
}

/// Re-reads the webhook token file, as the certificate files are: a
/// rotated Secret is followed without a restart (the previous token stays
/// accepted for one period, see `TokenStore`). Requests with an unknown
/// token re-read it sooner (`TokenStore::check`); this loop covers a token
/// no sender uses yet.
async fn reload_token(tokens: Arc<TokenStore>, metrics: Arc<Metrics>, period: Duration) {
    reload_every(period, move || {
        webhook::record_reload(&metrics, &tokens.reload(), "interval")
    })
    .await;
}

/// On SIGTERM: stop writing and hand the Lease back before the listener
/// drains, so a successor leads at once instead of after a lease duration.
async fn stop_then_release(
    leadership: leader::Leadership,
    stopping: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    shutdown.await;
    stopping.store(true, Ordering::SeqCst);
    tracing::info!("shutting down");
    leadership.release(LEASE_RELEASE_TIMEOUT).await;
}

/// Within Kubernetes' 30 s grace period with room for draining.
const LEASE_RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Resolves on Ctrl-C or SIGTERM (what Kubernetes sends on pod stop).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
