//! OpenTelemetry traces: a span per tool call, exported over OTLP/HTTP when
//! `[telemetry] otlp_endpoint` is set.
//!
//! The trace context comes from the request's `_meta` (`traceparent`, `tracestate`), as the
//! MCP semantic conventions say, so an agent's trace continues through the gateway; the
//! policies' decisions are events on the span. With no endpoint nothing is recorded and a
//! call pays one branch.

mod context;
mod export;
mod otlp;
mod span;

pub use context::TraceParent;
pub use span::CallSpan;

use std::sync::Arc;

use export::Exporter;

use crate::config::TelemetrySettings;
use crate::metrics::Metrics;

/// The gateway's tracer: off, or an exporter thread.
pub struct Telemetry {
    exporter: Option<Exporter>,
}

impl Telemetry {
    /// No traces.
    pub fn off() -> Telemetry {
        Telemetry { exporter: None }
    }

    /// Traces per `settings` (`None`: off); spans exported and dropped are counted in
    /// `metrics`.
    pub fn start(
        settings: Option<&TelemetrySettings>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Telemetry> {
        Ok(Telemetry {
            exporter: settings.map(|s| Exporter::start(s, metrics)).transpose()?,
        })
    }

    /// A span for one call by `tenant` through `via`, a child of `parent` when the caller sent
    /// one. A caller that did not sample its trace gets no span (the parent decides).
    pub fn span(
        &self,
        parent: Option<&TraceParent>,
        tenant: &str,
        via: &'static str,
    ) -> CallSpan<'_> {
        match &self.exporter {
            Some(exporter) if parent.is_none_or(|p| p.sampled) => {
                CallSpan::start(exporter, parent, tenant, via)
            }
            _ => CallSpan::off(),
        }
    }
}
