//! Logging and tracing setup. Logs go to stderr as text or JSON; with the
//! `otlp` cargo feature and `OTEL_EXPORTER_OTLP_ENDPOINT` set, spans (one
//! per goal, carrying the resource and a trace id) are also exported over
//! OTLP/gRPC, and the goal's log lines carry the span's trace id. Without
//! the feature the binary has no collector dependency.

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

/// What [`init`] started that must be stopped on exit: the OTLP batch
/// processor holds spans in memory until its next export.
#[must_use = "call shutdown() on exit, or buffered spans are lost"]
#[derive(Default)]
pub struct Telemetry {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still buffered and stops the exporter. Blocking:
    /// call it outside the runtime's `block_on`, while the runtime lives
    /// (the gRPC channel runs on it).
    pub fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "OTLP tracer shutdown failed: spans may be lost");
        }
    }
}

/// Records the goal span's trace id in its `trace_id` field: the
/// OpenTelemetry trace id when spans are exported, so a log line leads to
/// its trace; otherwise a random id that ties the goal's log lines together.
pub fn record_trace_id(span: &tracing::Span) {
    #[cfg(feature = "otlp")]
    {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let id = span.context().span().span_context().trace_id();
        if id != opentelemetry::trace::TraceId::INVALID {
            span.record("trace_id", tracing::field::display(id));
            return;
        }
    }
    span.record(
        "trace_id",
        tracing::field::display(format_args!("{:016x}", rand::random::<u64>())),
    );
}

/// Installs the global subscriber. `json` selects JSON log lines.
pub fn init(json: bool) -> Result<Telemetry, TelemetryError> {
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
        let (otlp, provider) = match std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(_) => {
                let (layer, provider) = otlp_layer()?;
                (Some(layer), Some(provider))
            }
            None => (None, None),
        };
        registry.with(otlp).try_init()?;
        Ok(Telemetry { provider })
    }
    #[cfg(not(feature = "otlp"))]
    {
        registry.try_init()?;
        Ok(Telemetry::default())
    }
}

#[cfg(feature = "otlp")]
fn otlp_layer<S>() -> Result<
    (
        impl tracing_subscriber::Layer<S>,
        opentelemetry_sdk::trace::SdkTracerProvider,
    ),
    TelemetryError,
>
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
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok((tracing_opentelemetry::layer().with_tracer(tracer), provider))
}
