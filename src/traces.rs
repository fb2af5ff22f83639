//! OpenTelemetry traces (docs/operations.md#traces): off unless `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set; then one span per tool call, a child of the client's own when its `_meta` carries
//! a W3C `traceparent`, with a child span for each embedding (`embed`), each search
//! (`search`) and each other store call (`store.<call>`), sent by OTLP over HTTP (JSON) in
//! batches from a thread of their own. Spans carry the tool's name and whether it failed:
//! never a memory, a query, a tenant or a conversation (docs/operations.md#logs).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{FutureExt, SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::variables::text;

/// The variables of traces.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "traces")]
pub struct Variables {
    /// where OTLP/HTTP traces are sent (e.g. http://otel-collector:4318; `/v1/traces` is
    /// added); unset: no traces. OTEL_BSP_SCHEDULE_DELAY and the other OTEL_BSP_* variables
    /// tune the batches [default: unset]
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_parser = endpoint)]
    pub otel_exporter_otlp_endpoint: Option<String>,
}

fn endpoint(raw: &str) -> Result<String, String> {
    let url = text(raw)?;
    match url.starts_with("http://") || url.starts_with("https://") {
        true => Ok(url.trim_end_matches('/').to_owned()),
        false => Err(format!(
            "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, got \"{raw}\""
        )),
    }
}

/// The tracer, once traces are on; without it every span below is not made at all.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// What sends the spans; shut down at the end, which sends what is left.
pub struct Traces(Option<SdkTracerProvider>);

impl Traces {
    /// Starts sending spans to `endpoint`, if one is set.
    pub fn start(variables: &Variables) -> Result<Traces, String> {
        let Some(endpoint) = &variables.otel_exporter_otlp_endpoint else {
            return Ok(Traces(None));
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .build()
            .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(crate::SERVER_NAME)
                    .build(),
            )
            .build();
        // A second start in one process (tests) keeps the first tracer.
        let _ = TRACER.set(provider.tracer(crate::SERVER_NAME));
        Ok(Traces(Some(provider)))
    }

    /// Sends what is left, within the exporter's own timeout, off the runtime's threads.
    pub async fn shutdown(&self) {
        if let Some(provider) = self.0.clone() {
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

/// Runs `call`, a tool call of `tool`, in its span: a child of `traceparent` (the client's
/// `_meta`) when that is a valid W3C trace context. `failed` tells from its output whether
/// the call failed.
pub async fn tool_call<T>(
    tool: &str,
    traceparent: Option<&str>,
    call: impl Future<Output = T>,
    failed: impl FnOnce(&T) -> bool,
) -> T {
    let Some(tracer) = TRACER.get() else {
        return call.await;
    };
    let parent = match traceparent {
        Some(value) => {
            let carrier = HashMap::from([("traceparent".to_owned(), value.to_owned())]);
            TraceContextPropagator::new().extract_with_context(&Context::new(), &carrier)
        }
        None => Context::new(),
    };
    let span = tracer
        .span_builder("tools/call")
        .with_kind(SpanKind::Server)
        .with_attributes([KeyValue::new("mcp.tool", tool.to_owned())])
        .start_with_context(tracer, &parent);
    let context = parent.with_span(span);
    let output = call.with_context(context.clone()).await;
    if failed(&output) {
        context
            .span()
            .set_status(Status::error("the tool answered an error"));
    }
    output
}

/// A child span of the current tool call's, ended when dropped; nothing without traces or
/// outside a tool call (a sweep, a command).
pub fn child(name: impl Into<Cow<'static, str>>) -> Option<opentelemetry_sdk::trace::Span> {
    let tracer = TRACER.get()?;
    let current = Context::current();
    (current.has_active_span()).then(|| tracer.start_with_context(name, &current))
}
