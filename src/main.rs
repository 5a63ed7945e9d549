use clap::{Parser, Subcommand};
use remedy::config::{Config, TlsConfig};
use std::path::PathBuf;
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
    /// Show what a running remedy holds, waits for and plans.
    Status {
        #[arg(long, default_value = "http://127.0.0.1:8080", env = "REMEDY_URL")]
        url: String,
    },
    /// Remediate one resource by hand (NAMESPACE/KIND/NAME) with the same
    /// guards as the daemon.
    Clear {
        target: String,
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
    Simulate(remedy::sim::SimArgs),
}

/// Runs one CLI future and prints its result.
fn run_async<F>(rt: &tokio::runtime::Runtime, f: F) -> ExitCode
where
    F: std::future::Future<Output = Result<String, remedy::cli::CliError>>,
{
    match rt.block_on(f) {
        Ok(s) => {
            println!("{}", s.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the OTLP exporter (feature `otlp`) binds to it.
    let telemetry = {
        let _in_runtime = rt.enter();
        remedy::telemetry::init(cli.log_format == "json")
    };
    let telemetry = match telemetry {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = run(cli.command, &rt);
    // Outside block_on, with the runtime still up: the exporter needs it.
    telemetry.shutdown();
    code
}

fn run(command: Command, rt: &tokio::runtime::Runtime) -> ExitCode {
    match command {
        Command::Serve {
            config,
            tls_cert_file,
            tls_key_file,
        } => {
            let mut v = match Config::load(&config) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            if let (Some(cert_file), Some(key_file)) = (tls_cert_file, tls_key_file) {
                v.config.tls = Some(TlsConfig {
                    cert_file,
                    key_file,
                });
            }
            match rt.block_on(remedy::app::serve(v)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { file } => match Config::load(&file) {
            Ok(v) => {
                println!("config OK: {} profiles", v.profiles.len());
                for p in &v.profiles {
                    println!("  {:<20} {}/{}", p.name, p.api_version(), p.kind);
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Status { url } => run_async(rt, remedy::cli::status(&url)),
        Command::Clear {
            target,
            config,
            dry_run,
            require_cleared,
        } => match Config::load(&config) {
            Ok(v) => run_async(rt, async move {
                remedy::cli::clear(&v, &target, dry_run, require_cleared.as_deref()).await
            }),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Simulate(args) => match remedy::sim::run_cli(&args) {
            Ok(table) => {
                print!("{table}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Profiles => match serde_yaml_ng::to_string(&remedy::profile::builtins()) {
            Ok(s) => {
                print!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
