//! Canonical bytes and the hash chain.
//!
//! **Canonical bytes** of a record: its compact `serde_json` serialisation with the fields in
//! the order of [`Record`](super::Record) — `seq`, `ts`, `prev`, then the [`Entry`] fields
//! (absent options omitted) — and without `hash`. `hash` is the lowercase hex sha256 of those
//! bytes; the line on disk is the canonical bytes with `,"hash":"<hex>"` inserted before the
//! closing `}`, then `\n`. `prev` is the previous record's `hash`, [`GENESIS`] for the first.
//!
//! Verification never re-serialises: it strips the trailing `,"hash":"<64 hex>"` member from
//! the bytes on disk and hashes what remains, so the chain does not depend on how a JSON
//! library prints floats or orders keys. Any byte changed anywhere in a line changes its hash.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::record::{Entry, Record};
use crate::time::Timestamp;

/// `prev` of the first record: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const HASH_KEY: &[u8] = br#","hash":""#;
/// `,"hash":"` + 64 hex + `"}`.
const SUFFIX_LEN: usize = HASH_KEY.len() + 64 + 2;

/// The most bytes a line adds to its body: the header (`seq`, `ts`, `prev`), the hash member
/// and the newline. A batch's lines are its bodies plus this for each, which is what bounds
/// how much of a segment's end one unfinished batch can be (and a crash's repair looks at).
pub(crate) const LINE_OVERHEAD: usize = 256;

#[derive(Serialize)]
struct Header<'a> {
    seq: u64,
    ts: Timestamp,
    prev: &'a str,
}

/// The entry's JSON object, serialised once on the caller's thread.
pub(crate) fn encode_body(entry: &Entry) -> Vec<u8> {
    serde_json::to_vec(entry).expect("an entry (strings, JSON values, finite numbers) serialises")
}

/// Builds one line (with `\n`) from a body made by [`encode_body`]; returns it and its hash.
pub(crate) fn encode_line(seq: u64, ts: Timestamp, prev: &str, body: &[u8]) -> (Vec<u8>, String) {
    debug_assert!(body.len() > 2 && body[0] == b'{' && body[body.len() - 1] == b'}');
    let header = serde_json::to_vec(&Header { seq, ts, prev }).expect("a header serialises");
    let mut line = Vec::with_capacity(header.len() + body.len() + SUFFIX_LEN + 1);
    line.extend_from_slice(&header[..header.len() - 1]);
    line.push(b',');
    line.extend_from_slice(&body[1..]);
    let hash = hex::encode(Sha256::digest(&line));
    line.truncate(line.len() - 1);
    line.extend_from_slice(HASH_KEY);
    line.extend_from_slice(hash.as_bytes());
    line.extend_from_slice(b"\"}\n");
    (line, hash)
}

/// What is wrong with one line on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineProblem {
    Unparsable(String),
    BadHash { recorded: String, computed: String },
}

impl std::fmt::Display for LineProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineProblem::Unparsable(message) => write!(f, "not an audit record: {message}"),
            LineProblem::BadHash { recorded, computed } => write!(
                f,
                "hash mismatch: the line says {recorded} but its bytes hash to {computed}"
            ),
        }
    }
}

/// Checks a line (without `\n`) against its own hash and parses it.
pub(crate) fn check_line(line: &[u8]) -> Result<Record, LineProblem> {
    let computed = hash_line(line)?;
    let record: Record =
        serde_json::from_slice(line).map_err(|e| LineProblem::Unparsable(e.to_string()))?;
    matches_recorded(line, computed)?;
    Ok(record)
}

/// What `verify` needs of a record: its place in the chain.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct Head {
    pub seq: u64,
    pub ts: Timestamp,
    pub prev: String,
    pub hash: String,
}

/// Checks a line against its own hash and reads only its place in the chain (the rest of the
/// record is skipped, not built): what `verify` needs, several times cheaper than a `Record`.
pub(crate) fn check_line_head(line: &[u8]) -> Result<Head, LineProblem> {
    let computed = hash_line(line)?;
    let head: Head =
        serde_json::from_slice(line).map_err(|e| LineProblem::Unparsable(e.to_string()))?;
    matches_recorded(line, computed)?;
    Ok(head)
}

/// Checks a line against its own hash only (for lines passed on as they are).
pub(crate) fn check_hash(line: &[u8]) -> Result<(), LineProblem> {
    let computed = hash_line(line)?;
    matches_recorded(line, computed)
}

/// The hash of a line's canonical bytes (the line without its `hash` member).
fn hash_line(line: &[u8]) -> Result<String, LineProblem> {
    let unparsable = |m: &str| LineProblem::Unparsable(m.to_owned());
    if line.len() <= SUFFIX_LEN + 1 || !line.ends_with(b"\"}") {
        return Err(unparsable("no trailing `hash` member"));
    }
    let cut = line.len() - SUFFIX_LEN;
    if &line[cut..cut + HASH_KEY.len()] != HASH_KEY {
        return Err(unparsable("no trailing `hash` member"));
    }
    let recorded = &line[cut + HASH_KEY.len()..line.len() - 2];
    if !recorded
        .iter()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(unparsable("`hash` is not 64 lowercase hex digits"));
    }
    let mut hasher = Sha256::new();
    hasher.update(&line[..cut]);
    hasher.update(b"}");
    Ok(hex::encode(hasher.finalize()))
}

fn matches_recorded(line: &[u8], computed: String) -> Result<(), LineProblem> {
    let recorded = &line[line.len() - 66..line.len() - 2];
    if computed.as_bytes() != recorded {
        return Err(LineProblem::BadHash {
            recorded: String::from_utf8_lossy(recorded).into_owned(),
            computed,
        });
    }
    Ok(())
}

/// The `seq` and `ts` at the start of a line, read cheaply without checking the line (for
/// skipping by time; the records returned are still checked).
pub(crate) fn peek_seq_ts(line: &[u8]) -> Option<(u64, Timestamp)> {
    let seq = peek_seq(line)?;
    let digits = seq.to_string().len();
    let rest = line.get(7 + digits..)?.strip_prefix(br#","ts":""#)?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let ts = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((seq, ts))
}

/// The `seq` of a line, read cheaply without checking it (for telling a reorder from a gap).
pub(crate) fn peek_seq(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(br#"{"seq":"#)?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Event;

    #[test]
    fn a_line_adds_at_most_its_overhead_to_its_body() {
        let body = encode_body(&Entry::new(Event::GatewayStarted));
        for (seq, micros) in [(1, 0), (u64::MAX, i64::MAX), (u64::MAX, i64::MIN)] {
            let ts = Timestamp::from_unix_micros(micros);
            let (line, _) = encode_line(seq, ts, GENESIS, &body);
            assert!(
                line.len() - body.len() <= LINE_OVERHEAD,
                "{} bytes over the body: {}",
                line.len() - body.len(),
                String::from_utf8_lossy(&line)
            );
        }
    }

    #[test]
    fn a_line_is_the_canonical_serialisation_plus_its_hash() {
        let entry = Entry::new(Event::GatewayStarted)
            .who("chem", "alice")
            .detail("k", 1.5);
        let ts = Timestamp::from_unix_micros(1_000_000);
        let (line, hash) = encode_line(7, ts, GENESIS, &encode_body(&entry));
        let record = check_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(record.seq, 7);
        assert_eq!(record.hash, hash);
        assert_eq!(record.entry, entry);
        // The canonical bytes are exactly serde_json of the record without `hash`.
        let mut value = serde_json::to_value(&record).unwrap();
        value.as_object_mut().unwrap().remove("hash");
        let canonical = serde_json::to_string(&record).unwrap();
        let without = canonical.replace(&format!(r#","hash":"{hash}""#), "");
        assert_eq!(hex::encode(Sha256::digest(without.as_bytes())), hash);
        assert_eq!(peek_seq(&line), Some(7));

        let mut edited = line[..line.len() - 1].to_vec();
        let at = edited.windows(4).position(|w| w == b"chem").unwrap();
        edited[at] = b'C';
        assert!(matches!(
            check_line(&edited),
            Err(LineProblem::BadHash { .. })
        ));
        assert!(matches!(
            check_line(b"{\"seq\":1}"),
            Err(LineProblem::Unparsable(_))
        ));
    }

    #[test]
    fn a_record_reads_back_in_any_key_order() {
        let entry = Entry::new(Event::GatewayStarted).who("chem", "alice");
        let (line, _) = encode_line(
            1,
            Timestamp::from_unix_micros(0),
            GENESIS,
            &encode_body(&entry),
        );
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        let sorted = serde_json::to_string(&value).unwrap();
        let record: Record = serde_json::from_str(&sorted).unwrap();
        assert_eq!(record.entry, entry);
    }
}
