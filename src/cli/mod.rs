//! The `remedy` command line: parsing and dispatch (`main.rs` only calls
//! [`main`]). `serve` runs the daemon; `status` and `clear` operate on a
//! running remedy or the cluster (`operate`); `simulate` runs the simulator
//! (`simulate`); `check-config` and `profiles` print what a config resolves
//! to.

mod operate;
// The generated docs/reference pages, written and checked by its tests.
#[cfg(test)]
mod reference;
mod simulate;

pub use operate::{CliError, clear, render, status};
pub use simulate::{ModeArg, SimArgs};

use crate::config::{Config, ConfigError, TlsConfig, Validated};
use crate::daemon::app::ServeError;
use clap::{Parser, Subcommand};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "remedy",
    version,
    about = "Safe, automatic remediation of stuck cloud resources"
)]
struct Cli {
    /// Log format: text or json.
    #[arg(long, global = true, default_value = "text", env = "REMEDY_LOG_FORMAT")]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch, classify, export metrics and remediate.
    Serve {
        /// The config file (docs/reference/configuration.md).
        #[arg(long, env = "REMEDY_CONFIG")]
        config: PathBuf,
        /// Serve HTTPS with this PEM certificate chain (overrides `tls` in
        /// the config): lets a deployment mount a Secret without editing the
        /// config file.
        #[arg(long, env = "REMEDY_TLS_CERT_FILE", requires = "tls_key_file")]
        tls_cert_file: Option<PathBuf>,
        /// The PEM private key for --tls-cert-file.
        #[arg(long, env = "REMEDY_TLS_KEY_FILE", requires = "tls_cert_file")]
        tls_key_file: Option<PathBuf>,
    },
    /// Validate a config file and print the resolved profiles.
    CheckConfig { file: PathBuf },
    /// Print the built-in profiles as YAML.
    Profiles,
    /// Print the JSON Schema of the config file (editors and CI check a
    /// config with it; docs/reference/config.schema.json).
    ConfigSchema,
    /// Show what a running remedy holds, waits for and plans.
    Status {
        #[arg(long, default_value = "http://127.0.0.1:8080", env = "REMEDY_URL")]
        url: String,
    },
    /// Why one resource (NAMESPACE/KIND/NAME) is held or waits, and until
    /// when, from a running remedy; with the Events remedy wrote on it.
    Explain {
        target: String,
        #[arg(long, default_value = "http://127.0.0.1:8080", env = "REMEDY_URL")]
        url: String,
    },
    /// Remediate one resource by hand (NAMESPACE/KIND/NAME) with the same
    /// guards as the daemon.
    Clear {
        target: String,
        /// The config file remedy runs with: its profiles and guards.
        #[arg(long, env = "REMEDY_CONFIG")]
        config: PathBuf,
        /// Report the plan without writing.
        #[arg(long)]
        dry_run: bool,
        /// Refuse unless this alert is verified cleared in Prometheus/Alertmanager.
        #[arg(long)]
        require_cleared: Option<String>,
    },
    /// Compare retry policies through a simulated cloud outage.
    Simulate(SimArgs),
    /// Stop every write of every remedy replica within one tick (the pause
    /// switch ConfigMap); what is held stays held.
    Pause {
        /// Why, for /status, the logs and the RemedyPaused alert.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        switch: SwitchArgs,
    },
    /// Clear the pause switch: remedy writes again from its next tick.
    Resume {
        #[command(flatten)]
        switch: SwitchArgs,
    },
}

/// Where the pause switch is (`pause_switch` in the config) and who sets it.
#[derive(clap::Args)]
struct SwitchArgs {
    #[arg(long, default_value = "remedy-system")]
    namespace: String,
    #[arg(long, default_value = "remedy-pause")]
    configmap: String,
    /// Who, recorded in the ConfigMap (default: $USER).
    #[arg(long, env = "USER", default_value = "unknown")]
    by: String,
}

/// How a command failed, and its exit status: 2 for a config or argument
/// that cannot be used, 1 for a failure while running.
/// Why a command failed: the exit code (2 for bad input, 1 for the rest),
/// the failing boundary's stable label (`error[LABEL]: …`, for whoever
/// matches on it: a log pipeline, a script) and the message.
struct Failure {
    code: u8,
    label: &'static str,
    message: String,
}

impl Failure {
    fn input(label: &'static str, e: impl Display) -> Self {
        Self {
            code: 2,
            label,
            message: e.to_string(),
        }
    }

    fn running(label: &'static str, e: impl Display) -> Self {
        Self {
            code: 1,
            label,
            message: e.to_string(),
        }
    }

    fn config(e: ConfigError) -> Self {
        Self::input(e.label(), e)
    }

    fn serve(e: ServeError) -> Self {
        Self::running(e.label(), e)
    }

    fn cli(e: CliError) -> Self {
        Self::running(e.label(), e)
    }
}

/// Parses the command line, runs the command, prints its output (or the
/// error) and returns the exit status.
pub fn main() -> ExitCode {
    let cli = parse();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            return exit(Err(Failure::running(
                "runtime",
                format!("cannot start runtime: {e}"),
            )));
        }
    };
    // Inside the runtime: the OTLP exporter (feature `otlp`) binds to it.
    let telemetry = {
        let _in_runtime = rt.enter();
        crate::daemon::telemetry::init(cli.log_format == "json")
    };
    let telemetry = match telemetry {
        Ok(t) => t,
        Err(e) => return exit(Err(Failure::running(e.label(), e))),
    };
    let code = exit(run(cli.command, &rt));
    // Outside block_on, with the runtime still up: the exporter needs it.
    telemetry.shutdown();
    code
}

/// The command line's definition, for the generated reference
/// (`reference`).
#[cfg(test)]
fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

/// The name kubectl runs a plugin by: `kubectl remedy status` runs
/// `kubectl-remedy status` from PATH (a copy or link of this binary).
pub const KUBECTL_PLUGIN: &str = "kubectl-remedy";

/// As `Cli::parse`, with the help and errors saying `kubectl remedy` when
/// run as the kubectl plugin.
fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let as_plugin = std::env::args_os()
        .next()
        .and_then(|a| Path::new(&a).file_name().map(|n| n == KUBECTL_PLUGIN))
        .unwrap_or(false);
    let mut cmd = Cli::command();
    if as_plugin {
        cmd = cmd.bin_name("kubectl remedy");
    }
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn exit(result: Result<String, Failure>) -> ExitCode {
    match result {
        Ok(out) => {
            // Not println!: it panics when the reader has gone (`| head`).
            // A closed pipe is the reader's choice, not a failure.
            if !out.is_empty() {
                use std::io::Write;
                let mut stdout = std::io::stdout().lock();
                if let Err(e) = writeln!(stdout, "{}", out.trim_end()).and_then(|()| stdout.flush())
                    && e.kind() != std::io::ErrorKind::BrokenPipe
                {
                    eprintln!("error: cannot write the output: {e}");
                    return ExitCode::from(1);
                }
            }
            ExitCode::SUCCESS
        }
        Err(f) => {
            eprintln!("error[{}]: {}", f.label, f.message);
            ExitCode::from(f.code)
        }
    }
}

fn load(path: &Path) -> Result<Validated, Failure> {
    Config::load(path).map_err(Failure::config)
}

fn run(command: Command, rt: &tokio::runtime::Runtime) -> Result<String, Failure> {
    match command {
        Command::Serve {
            config,
            tls_cert_file,
            tls_key_file,
        } => {
            let mut v = load(&config)?;
            for p in &v.profiles {
                for warning in p.hold_warnings() {
                    tracing::warn!(profile = %p.name, "{warning}");
                }
            }
            if let (Some(cert_file), Some(key_file)) = (tls_cert_file, tls_key_file) {
                v.config.tls = Some(TlsConfig {
                    cert_file,
                    key_file,
                });
            }
            rt.block_on(crate::daemon::app::serve(v))
                .map_err(Failure::serve)?;
            Ok(String::new())
        }
        Command::CheckConfig { file } => {
            let v = load(&file)?;
            let mut out = format!("config OK: {} profiles\n", v.profiles.len());
            for p in &v.profiles {
                out.push_str(&format!(
                    "  {:<20} {}/{}\n",
                    p.name,
                    p.api_version(),
                    p.kind
                ));
                // The resolved hold: what remedy will write, and what a
                // controller known to read it would not do with it.
                match &p.hold {
                    Some(h) => {
                        out.push_str(&format!("  {:<20} hold: {}\n", "", h.describe()));
                        for why in p.hold_warnings() {
                            out.push_str(&format!("  {:<20} warning: {why}\n", ""));
                        }
                    }
                    None => out.push_str(&format!("  {:<20} hold: none (never held)\n", "")),
                }
            }
            Ok(out)
        }
        Command::Profiles => serde_yaml_ng::to_string(&crate::model::profile::builtins())
            .map_err(|e| Failure::running("yaml", e)),
        Command::ConfigSchema => serde_json::to_string_pretty(&Config::json_schema())
            .map_err(|e| Failure::running("json", e)),
        Command::Status { url } => rt.block_on(status(&url)).map_err(Failure::cli),
        Command::Explain { target, url } => rt
            .block_on(operate::explain(&url, &target))
            .map_err(Failure::cli),
        Command::Clear {
            target,
            config,
            dry_run,
            require_cleared,
        } => {
            let v = load(&config)?;
            rt.block_on(clear(&v, &target, dry_run, require_cleared.as_deref()))
                .map_err(Failure::cli)
        }
        Command::Simulate(args) => simulate::run(&args).map_err(|e| Failure::input(e.label(), e)),
        Command::Pause { reason, switch } => rt
            .block_on(operate::pause(
                &switch.namespace,
                &switch.configmap,
                Some(&reason),
                &switch.by,
            ))
            .map_err(Failure::cli),
        Command::Resume { switch } => rt
            .block_on(operate::pause(
                &switch.namespace,
                &switch.configmap,
                None,
                &switch.by,
            ))
            .map_err(Failure::cli),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #38.13: `check-config` prints the hold warnings, the CAPI Cluster's
    /// missing `resume` among them.
    #[test]
    fn check_config_warns_of_a_cluster_held_by_spec_without_resume() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.yaml");
        std::fs::write(
            &file,
            "profiles: [capi-machine, {name: my-cluster, group: cluster.x-k8s.io, version: v1beta2, \
             kind: Cluster, hold: {field: /spec/paused}}]\n",
        )
        .unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let out = match run(Command::CheckConfig { file }, &rt) {
            Ok(out) => out,
            Err(f) => panic!("error[{}]: {}", f.label, f.message),
        };
        let warnings: Vec<&str> = out.lines().filter(|l| l.contains("warning:")).collect();
        assert_eq!(warnings.len(), 1, "{out}");
        assert!(
            warnings[0].contains("resume: {kind: Machine, label: cluster.x-k8s.io/cluster-name}"),
            "{out}"
        );
    }
}
