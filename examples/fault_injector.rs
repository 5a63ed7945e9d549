//! Fault injector: a stand-in for the cloud and its controllers, so remedy's
//! whole loop can be watched on one machine (scripts/playground runs it).
//!
//! It connects with KUBECONFIG, creates a fleet (OpenStackMachines with their
//! v1beta2 Machines, BottlerocketShadows, and a really broken machine), serves
//! `cloud_api_error_ratio{kind}` on /metrics, then runs scripted partial
//! outages: healthy for --healthy, then for --outage a --share of each kind
//! fails with transient cloud errors written into status, then the cloud
//! recovers and the controllers bring back every resource that is not paused
//! and no longer has failure status. One line per event on stdout.
//!
//!   KUBECONFIG=... cargo run --example fault_injector -- --namespace playground
//!
//! Exits 0 on Ctrl-C/SIGTERM; with --exit-when-recovered, 0 once everything
//! is healthy after the last outage and 1 if that takes over --recovery-timeout.
//! The implementation lives in fault/injector.rs, shared with tests/it/stack.rs.

#[path = "fault/injector.rs"]
mod injector;

use anyhow::{Context, Result, bail};
use clap::Parser;
use injector::{FleetSpec, Injector, Kind};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    about = "Scripted partial cloud outages against a Kubernetes API, for remedy's playground"
)]
struct Args {
    /// Namespace for the fleet (created if missing).
    #[arg(long, default_value = "playground")]
    namespace: String,
    /// Name prefix and cluster name of the fleet.
    #[arg(long, default_value = "play")]
    prefix: String,
    /// OpenStackMachines, each with its CAPI Machine.
    #[arg(long, default_value_t = 12)]
    machines: usize,
    #[arg(long, default_value_t = 6)]
    shadows: usize,
    /// OpenStackMachines broken for real (terminal), which remedy must not touch.
    #[arg(long, default_value_t = 1)]
    broken: usize,
    /// Share of each kind that fails during an outage (0..=1).
    #[arg(long, default_value_t = 0.6)]
    share: f64,
    /// Where /metrics is served (cloud_api_error_ratio).
    #[arg(long, default_value = "127.0.0.1:19100")]
    listen: SocketAddr,
    /// Healthy time before the first outage.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    healthy: Duration,
    /// Length of each outage.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    outage: Duration,
    /// Time from the end of one outage to the start of the next.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2m")]
    between: Duration,
    /// During an outage brupop retries and fails again this often (0s: never).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    crash_every: Duration,
    /// How long a server takes to build once its controller retries.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    provision: Duration,
    /// Number of outages; 0 repeats them until stopped.
    #[arg(long, default_value_t = 1)]
    cycles: u32,
    /// Exit once every resource is healthy after the last outage.
    #[arg(long)]
    exit_when_recovered: bool,
    /// With --exit-when-recovered: give up (exit 1) after this long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    recovery_timeout: Duration,
    /// Seeds which resources fail, so runs repeat.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tokio::select! {
        r = run(args) => match r {
            Ok(code) => code,
            Err(e) => {
                eprintln!("fault_injector: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        () = remedy::daemon::app::shutdown_signal() => {
            println!("fault_injector: stopping");
            ExitCode::SUCCESS
        }
    }
}

async fn run(args: Args) -> Result<ExitCode> {
    if !(0.0..=1.0).contains(&args.share) {
        bail!("--share must be within 0..=1, got {}", args.share);
    }
    let client = kube::Client::try_default()
        .await
        .context("cannot reach Kubernetes (set KUBECONFIG)")?;
    let spec = FleetSpec {
        prefix: args.prefix.clone(),
        machines: args.machines,
        shadows: args.shadows,
        broken: args.broken,
        share: args.share,
        seed: args.seed,
        provision: args.provision,
    };
    let inj = Injector::new(
        client,
        &args.namespace,
        spec,
        // Not println!: it panics when stdout is gone (the playground's tee
        // stopped first), and a log line is not worth dying for.
        Arc::new(|line: &str| {
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }),
    );
    inj.create_fleet().await?;
    let addr = inj.serve_metrics(args.listen).await?;
    inj.say(format!(
        "serving {} on http://{addr}/metrics",
        injector::CLOUD_RATIO
    ));
    let _controllers = inj.spawn_controller();

    let mut wait = args.healthy;
    for cycle in 1.. {
        inj.say(format!(
            "cloud healthy; outage {cycle} starts in {}",
            humantime::format_duration(Duration::from_secs(wait.as_secs()))
        ));
        tokio::time::sleep(wait).await;
        let failed = inj.start_outage(cycle).await?;
        let end = Instant::now() + args.outage;
        // brupop cannot be paused: it keeps retrying through the outage.
        while !args.crash_every.is_zero() && Instant::now() + args.crash_every < end {
            tokio::time::sleep(args.crash_every).await;
            inj.crash_again().await?;
        }
        tokio::time::sleep(end.saturating_duration_since(Instant::now())).await;
        let outage = inj.end_outage();
        let last = args.cycles != 0 && cycle >= args.cycles;
        let limit = if last {
            args.recovery_timeout
        } else {
            args.between
        };
        let ended = Instant::now();
        let recovered = inj.wait_recovered(limit).await;
        let holdable = outage.holdable();
        let shadows = failed
            .iter()
            .filter(|(k, _)| *k == Kind::BottlerocketShadow)
            .count();
        // One machine-readable line per cycle, for scripts/playground --check.
        inj.say(format!(
            "summary cycle={cycle} failed={} holdable={} held={} shadows={shadows} recovered={} after={:.1}s",
            failed.len(),
            holdable.len(),
            outage.held.intersection(&holdable).count(),
            recovered.is_ok(),
            ended.elapsed().as_secs_f64()
        ));
        if let Err(e) = &recovered {
            inj.say(format!("cycle {cycle}: {e:#}"));
        }
        if last {
            if args.exit_when_recovered {
                return Ok(if recovered.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
            break;
        }
        wait = args.between.saturating_sub(ended.elapsed());
    }
    inj.say("script done; serving metrics and reconciling until stopped");
    std::future::pending::<()>().await;
    Ok(ExitCode::SUCCESS)
}
