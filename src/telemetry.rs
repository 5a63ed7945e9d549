//! Logging and tracing setup. Logs go to stderr as text or JSON; with the
//! `otlp` cargo feature and `OTEL_EXPORTER_OTLP_ENDPOINT` set, spans (one
//! per goal, carrying the resource and a trace id) are also exported over
//! OTLP/gRPC. Without the feature the binary has no collector dependency.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot install the log subscriber: {0}")]
    Init(#[from] tracing_subscriber::util::TryInitError),
    #[cfg(feature = "otlp")]
    #[error("cannot build the OTLP exporter: {0}")]
    Otlp(#[from] opentelemetry_otlp::ExporterBuildError),
}

impl TelemetryError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Init(_) => "init",
            #[cfg(feature = "otlp")]
            Self::Otlp(_) => "otlp",
        }
    }
}

/// Installs the global subscriber. `json` selects JSON log lines.
pub fn init(json: bool) -> Result<(), TelemetryError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only on a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
    });
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
    });
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json);
    #[cfg(feature = "otlp")]
    {
        let otlp = match std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(_) => Some(otlp_layer()?),
            None => None,
        };
        registry.with(otlp).try_init()?;
    }
    #[cfg(not(feature = "otlp"))]
    registry.try_init()?;
    Ok(())
}

#[cfg(feature = "otlp")]
fn otlp_layer<S>() -> Result<impl tracing_subscriber::Layer<S>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use opentelemetry::trace::TracerProvider as _;
    // The endpoint and headers come from the standard OTEL_* variables.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()?;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("remedy")
                .build(),
        )
        .build();
    let tracer = provider.tracer("remedy");
    opentelemetry::global::set_tracer_provider(provider);
    Ok(tracing_opentelemetry::layer().with_tracer(tracer))
}
