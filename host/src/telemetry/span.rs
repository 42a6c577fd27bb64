//! One call's span, filled in by `Gateway::dispatch` as the call goes and handed to the
//! exporter when it ends.
//!
//! Names and attributes follow the OpenTelemetry semantic conventions for MCP servers: span
//! `tools/call {tool}` of kind server, `mcp.method.name`, `gen_ai.tool.name`,
//! `gen_ai.operation.name = execute_tool`, `error.type = tool_error` when the result is an
//! error. hpcgate's own facts are `hpcgate.*`: tenant, principal, `via`, instance, job, the
//! chain's decision, and each policy's verdict as a `hpcgate.policy.decision` event.
//! Arguments are never exported — they may hold anything — nor are results; a policy's
//! reason and a tool's error are, cut at [`MAX_MESSAGE`], and may quote what was sent (the
//! stock path rules name the path).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::otlp::{Attributes, EventData, SpanData, Status, Value};
use super::{Exporter, TraceParent};
use crate::policy::{Call, ChainOutcome, DecisionKind, Verdict};

/// The longest status message exported (a denial's reason, a tool's error).
const MAX_MESSAGE: usize = 512;

/// A call's span while it runs; `None` inside when traces are off or the caller's trace is
/// not sampled, and then every method does nothing.
pub struct CallSpan<'a> {
    open: Option<(&'a Exporter, Box<SpanData>)>,
    started: Instant,
}

impl<'a> CallSpan<'a> {
    pub(super) fn off() -> CallSpan<'a> {
        CallSpan {
            open: None,
            started: Instant::now(),
        }
    }

    pub(super) fn start(
        exporter: &'a Exporter,
        parent: Option<&TraceParent>,
        tenant: &str,
        via: &'static str,
    ) -> CallSpan<'a> {
        let (trace_id, parent_span_id, trace_state, span_id) = match parent {
            Some(parent) => {
                let span_id = random_span_id();
                let state = parent.state.clone();
                (parent.trace_id, Some(parent.span_id), state, span_id)
            }
            None => {
                let mut ids = [0u8; 24];
                fill_random(&mut ids);
                let (trace, span) = ids.split_at(16);
                let trace: [u8; 16] = trace.try_into().unwrap_or([1; 16]);
                (trace, None, String::new(), nonzero(span))
            }
        };
        let span = SpanData {
            trace_id,
            span_id,
            parent_span_id,
            trace_state,
            name: "tools/call".to_owned(),
            start_unix_nano: unix_nanos(SystemTime::now()),
            end_unix_nano: 0,
            attributes: vec![
                ("mcp.method.name", Value::Str("tools/call".into())),
                ("gen_ai.operation.name", Value::Str("execute_tool".into())),
                ("hpcgate.tenant", Value::Str(tenant.to_owned())),
                ("hpcgate.via", Value::Str(via.to_owned())),
            ],
            events: Vec::new(),
            status: Status::Unset,
        };
        CallSpan {
            open: Some((exporter, Box::new(span))),
            started: Instant::now(),
        }
    }

    /// The call's target is known (a tool that exists): the span is named after it.
    pub fn prepared(&mut self, input: &Call) {
        let Some((_, span)) = &mut self.open else {
            return;
        };
        span.name = format!("tools/call {}", input.tool);
        let attributes = &mut span.attributes;
        attributes.push(("gen_ai.tool.name", Value::Str(input.tool.clone())));
        attributes.push(("hpcgate.principal", Value::Str(input.principal.clone())));
        if let Some(instance) = &input.instance {
            attributes.push(("hpcgate.instance", Value::Str(instance.clone())));
        }
        if let Some(job) = &input.job {
            attributes.push(("hpcgate.job", Value::Str(job.clone())));
        }
        if input.server != "builtin" {
            (attributes).push(("hpcgate.proxied_server", Value::Str(input.server.clone())));
        }
    }

    /// The chain decided: the final decision, and one event per policy that judged the call.
    pub fn decided(&mut self, outcome: &ChainOutcome) {
        let Some((_, span)) = &mut self.open else {
            return;
        };
        let now = unix_nanos(SystemTime::now());
        let decision = decision_name(outcome.decision.decision);
        span.attributes
            .push(("hpcgate.decision", Value::Str(decision.into())));
        if let Some(policy) = &outcome.decision.policy {
            (span.attributes).push(("hpcgate.decision.policy", Value::Str(policy.clone())));
        }
        for policy in &outcome.policies {
            let (verdict, reason) = match &policy.verdict {
                Verdict::Allow => ("allow", None),
                Verdict::Deny { reason } => ("deny", Some(reason)),
                Verdict::Rewrite { note, .. } => ("rewrite", Some(note)),
            };
            let mut attributes: Attributes = vec![
                ("hpcgate.policy.name", Value::Str(policy.policy.clone())),
                ("hpcgate.policy.verdict", Value::Str(verdict.into())),
                ("hpcgate.policy.enforced", Value::Bool(policy.enforced)),
                (
                    "hpcgate.policy.duration_us",
                    Value::Double(policy.duration_us),
                ),
                ("hpcgate.policy.module", Value::Str(policy.module.clone())),
            ];
            if let Some(reason) = reason.filter(|r| !r.is_empty()) {
                attributes.push(("hpcgate.policy.reason", Value::Str(cut(reason))));
            }
            if let Some(fault) = policy.fault_kind {
                attributes.push(("hpcgate.policy.fault", Value::Str(fault.into())));
            }
            span.events.push(EventData {
                time_unix_nano: now,
                name: "hpcgate.policy.decision",
                attributes,
            });
        }
    }

    /// This span as the parent of what the call causes (a proxied server's work): a W3C
    /// `traceparent`, sampled; `None` when the call is not traced.
    pub fn traceparent(&self) -> Option<String> {
        let (_, span) = self.open.as_ref()?;
        let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        Some(format!(
            "00-{}-{}-01",
            hex(&span.trace_id),
            hex(&span.span_id)
        ))
    }

    /// The call ended with `failed` (its message when it is an error): the span goes to the
    /// exporter, which never blocks the call (a full queue drops the span and counts it).
    pub fn end(self, failed: Option<&str>) {
        let Some((exporter, mut span)) = self.open else {
            return;
        };
        let elapsed = self.started.elapsed().as_nanos() as u64;
        span.end_unix_nano = span.start_unix_nano.saturating_add(elapsed);
        if let Some(message) = failed {
            span.attributes
                .push(("error.type", Value::Str("tool_error".into())));
            span.status = Status::Error(cut(message));
        }
        exporter.send(*span);
    }
}

fn decision_name(kind: DecisionKind) -> &'static str {
    match kind {
        DecisionKind::Allow => "allow",
        DecisionKind::Deny => "deny",
        DecisionKind::Rewrite => "rewrite",
    }
}

fn cut(text: &str) -> String {
    if text.len() <= MAX_MESSAGE {
        return text.to_owned();
    }
    let mut end = MAX_MESSAGE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn unix_nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn random_span_id() -> [u8; 8] {
    let mut id = [0u8; 8];
    fill_random(&mut id);
    nonzero(&id)
}

/// Ids from the OS; should it ever fail, the time keeps ids distinct enough to export (an
/// id is not a secret, and all zeros is invalid).
fn fill_random(bytes: &mut [u8]) {
    if getrandom::fill(bytes).is_err() {
        let nanos = unix_nanos(SystemTime::now()).to_le_bytes();
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = nanos[i % 8] ^ (i as u8);
        }
    }
}

fn nonzero(id: &[u8]) -> [u8; 8] {
    let mut out: [u8; 8] = id.try_into().unwrap_or([1; 8]);
    if out == [0; 8] {
        out[7] = 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(400);
        let cut = cut(&long);
        assert!(cut.len() <= super::MAX_MESSAGE + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(super::cut("short"), "short");
    }
}
