//! W3C trace context, as an MCP client sends it in a request's `params._meta`
//! (`traceparent`, `tracestate`).
//!
//! Parsed strictly (trace-context level 1): anything malformed is ignored and the call starts a
//! trace of its own, as the recommendation says a receiver must — a bad header never fails a
//! call.

/// The caller's span: the parent of the gateway's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The caller sampled this trace (flag bit 0); when not, the gateway records no span.
    pub sampled: bool,
    /// `tracestate`, passed on as it came (empty when absent or not plausible).
    pub state: String,
}

/// The longest `tracestate` carried on (the recommendation's limit of 32 members fits).
const MAX_STATE: usize = 512;

impl TraceParent {
    /// `traceparent` and `tracestate` as they appear in `_meta`; `None` when the parent is
    /// missing or malformed.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceParent> {
        let bytes = traceparent.as_bytes();
        // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
        if bytes.len() < 55 || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let version = hex::<1>(&bytes[0..2])?[0];
        // Version 00 is exactly 55 characters; a later version may append fields after a '-';
        // ff is invalid.
        let exact = bytes.len() == 55;
        if version == 0xff || (version == 0 && !exact) || (!exact && bytes[55] != b'-') {
            return None;
        }
        let trace_id = hex::<16>(&bytes[3..35])?;
        let span_id = hex::<8>(&bytes[36..52])?;
        let flags = hex::<1>(&bytes[53..55])?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        let state = tracestate
            .filter(|s| s.len() <= MAX_STATE && s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .unwrap_or_default()
            .to_owned();
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
            state,
        })
    }
}

/// Lowercase hex only, as the recommendation requires.
fn hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::TraceParent;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_recommendations_example_parses() {
        let parent = TraceParent::parse(GOOD, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(parent.trace_id[..4], [0x4b, 0xf9, 0x2f, 0x35]);
        assert_eq!(parent.span_id[7], 0xb7);
        assert!(parent.sampled);
        assert_eq!(parent.state, "rojo=00f067aa0ba902b7");
        let unsampled = GOOD.replace("-01", "-00");
        assert!(!TraceParent::parse(&unsampled, None).unwrap().sampled);
        // A later version may carry more fields.
        let later = format!("{}-extra", GOOD.replacen("00-", "01-", 1));
        assert!(TraceParent::parse(&later, None).is_some());
    }

    #[test]
    fn malformed_parents_are_ignored() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for text in bad {
            assert_eq!(TraceParent::parse(text, None), None, "{text:?} accepted");
        }
    }

    #[test]
    fn an_implausible_tracestate_is_dropped_not_the_parent() {
        for state in ["a=1\nb=2", &"k=v,".repeat(200)] {
            let parent = TraceParent::parse(GOOD, Some(state)).unwrap();
            assert_eq!(parent.state, "");
        }
    }
}
