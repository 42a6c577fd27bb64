//! Finished spans as an OTLP `ExportTraceServiceRequest`, protobuf-encoded by hand.
//!
//! The few messages a span needs (`opentelemetry/proto/trace/v1/trace.proto`, `common/v1`,
//! `resource/v1`) take a hundred lines to write; the generated crates would bring a protobuf
//! runtime and a gRPC stack into the gateway for them. The test suite decodes what this writes
//! with the official generated classes (PyPI `opentelemetry-proto`), so a wrong field number
//! fails a test rather than a collector.

/// A span attribute's value (`AnyValue`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Bool(bool),
    Double(f64),
}

pub type Attributes = Vec<(&'static str, Value)>;

/// One finished span.
#[derive(Debug, Clone)]
pub struct SpanData {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub trace_state: String,
    pub name: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Attributes,
    pub events: Vec<EventData>,
    pub status: Status,
}

/// A timed event on a span.
#[derive(Debug, Clone)]
pub struct EventData {
    pub time_unix_nano: u64,
    pub name: &'static str,
    pub attributes: Attributes,
}

/// `Status`: unset, or an error with its message (a span is never marked OK by the server).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Status {
    #[default]
    Unset,
    Error(String),
}

/// `Span.SpanKind.SPAN_KIND_SERVER`.
const KIND_SERVER: u64 = 2;
/// `Status.StatusCode.STATUS_CODE_ERROR`.
const STATUS_ERROR: u64 = 2;

/// The request body for `POST /v1/traces`: one resource (this gateway), one scope, `spans`.
pub fn encode(resource: &Attributes, scope_version: &str, spans: &[SpanData]) -> Vec<u8> {
    let mut out = Pb::default();
    // ExportTraceServiceRequest.resource_spans = 1
    out.message(1, |rs| {
        // ResourceSpans.resource = 1 { Resource.attributes = 1 }
        rs.message(1, |r| attributes(r, 1, resource));
        // ResourceSpans.scope_spans = 2
        rs.message(2, |ss| {
            // ScopeSpans.scope = 1 { name = 1, version = 2 }
            ss.message(1, |scope| {
                scope.string(1, "hpcgate");
                scope.string(2, scope_version);
            });
            for span in spans {
                // ScopeSpans.spans = 2
                ss.message(2, |s| encode_span(s, span));
            }
        });
    });
    out.0
}

fn encode_span(s: &mut Pb, span: &SpanData) {
    s.bytes(1, &span.trace_id);
    s.bytes(2, &span.span_id);
    s.string(3, &span.trace_state);
    if let Some(parent) = &span.parent_span_id {
        s.bytes(4, parent);
    }
    s.string(5, &span.name);
    s.varint_field(6, KIND_SERVER);
    s.fixed64(7, span.start_unix_nano);
    s.fixed64(8, span.end_unix_nano);
    attributes(s, 9, &span.attributes);
    for event in &span.events {
        // Span.events = 11 { time_unix_nano = 1, name = 2, attributes = 3 }
        s.message(11, |e| {
            e.fixed64(1, event.time_unix_nano);
            e.string(2, event.name);
            attributes(e, 3, &event.attributes);
        });
    }
    if let Status::Error(message) = &span.status {
        // Span.status = 15 { message = 2, code = 3 }
        s.message(15, |st| {
            st.string(2, message);
            st.varint_field(3, STATUS_ERROR);
        });
    }
}

/// Repeated `KeyValue { key = 1, value = 2: AnyValue }` in `field`.
fn attributes(out: &mut Pb, field: u32, attributes: &Attributes) {
    for (key, value) in attributes {
        out.message(field, |kv| {
            kv.string(1, key);
            kv.message(2, |any| match value {
                Value::Str(text) => any.string_always(1, text),
                Value::Bool(b) => any.varint_always(2, u64::from(*b)),
                Value::Double(d) => {
                    any.key(4, WIRE_FIXED64);
                    any.0.extend_from_slice(&d.to_le_bytes());
                }
            });
        });
    }
}

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;

/// A protobuf writer for the wire types a span uses.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint(u64::from(field) << 3 | u64::from(wire));
    }

    /// A scalar field; zero is the default and is left out, as proto3 writers do.
    fn varint_field(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.varint_always(field, v);
        }
    }

    /// A member of a `oneof`: written even when zero (presence is its meaning).
    fn varint_always(&mut self, field: u32, v: u64) {
        self.key(field, WIRE_VARINT);
        self.varint(v);
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, WIRE_FIXED64);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.key(field, WIRE_LEN);
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    fn string(&mut self, field: u32, text: &str) {
        if !text.is_empty() {
            self.bytes(field, text.as_bytes());
        }
    }

    fn string_always(&mut self, field: u32, text: &str) {
        self.bytes(field, text.as_bytes());
    }

    fn message(&mut self, field: u32, build: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        build(&mut inner);
        self.bytes(field, &inner.0);
    }
}

#[cfg(test)]
mod tests {
    use super::Pb;

    #[test]
    fn varints_and_keys_match_the_encoding_guide() {
        // The guide's examples: 150 as field 1 is `08 96 01`; 300 is `ac 02`.
        let mut pb = Pb::default();
        pb.varint_field(1, 150);
        assert_eq!(pb.0, [0x08, 0x96, 0x01]);
        let mut pb = Pb::default();
        pb.varint(300);
        assert_eq!(pb.0, [0xac, 0x02]);
        // "testing" as field 2.
        let mut pb = Pb::default();
        pb.string(2, "testing");
        assert_eq!(pb.0[..2], [0x12, 0x07]);
        // A negative int64 takes ten bytes.
        let mut pb = Pb::default();
        pb.varint_always(3, -1i64 as u64);
        assert_eq!(pb.0.len(), 11);
    }
}
