//! The form a redacted value takes in recorded calls (audit records, `policy test` cases).
//!
//! The audit log keeps a secret or a large value as a keyed digest of it:
//! `{"redacted": true, "hmac_sha256": "<hex>", "key": "<key id>", "bytes": n}`, the HMAC-SHA256
//! under the log's redaction key, whose id (not the key) is `key`, of a string's UTF-8 bytes,
//! or of `json:` and the compact JSON text of any other value (so `"1"` and `1` differ); `bytes`
//! counts the string's bytes or the JSON text's. Whoever holds the key can check
//! that a value is the one recorded (`policy test` comparing a replayed rewrite, an auditor
//! proving which content was written); whoever reads the log without it cannot try guesses
//! against the digest, which a plain hash of a short password or token would allow.
//!
//! Logs written before keyed digests hold `{"redacted": true, "sha256": "<hex>", "bytes": n}`,
//! which is still read (and compared without a key).

use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The key a log's redacted values are digested with. Its [`RedactionKey::id`] is recorded
/// beside each digest, so a reader can tell which key it needs.
#[derive(Clone)]
pub struct RedactionKey {
    key: [u8; 32],
    id: String,
}

impl std::fmt::Debug for RedactionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedactionKey")
            .field("id", &self.id)
            .finish()
    }
}

impl RedactionKey {
    pub fn from_bytes(key: [u8; 32]) -> RedactionKey {
        let mut named = Sha256::new();
        named.update(b"hpcgate redaction key id\0");
        named.update(key);
        let id = hex::encode(&named.finalize()[..8]);
        RedactionKey { key, id }
    }

    /// 16 hex digits naming the key (a digest of it, from which the key cannot be found).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The HMAC-SHA256 of `bytes` under this key, in hex: a string's (a file's content's) digest
    /// as a record holds it.
    pub fn digest(&self, bytes: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(bytes);
        hex::encode(mac.finalize().into_bytes())
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key")
    }

    /// The keyed digest of `value` (see the module's doc) and the count of its bytes.
    pub fn digest_value(&self, value: &Value) -> (String, usize) {
        let bytes = bytes_of(value);
        let mut mac = self.mac();
        if !value.is_string() {
            mac.update(JSON_PREFIX);
        }
        mac.update(&bytes);
        (hex::encode(mac.finalize().into_bytes()), bytes.len())
    }

    /// `value` as the log records it when redacted.
    pub fn redact(&self, value: &Value) -> Value {
        let (digest, bytes) = self.digest_value(value);
        json!({
            "redacted": true,
            "hmac_sha256": digest,
            "key": self.id,
            "bytes": bytes,
        })
    }

    /// Whether `object` is a value this key redacted, in form (a caller's object that looks like
    /// another key's digest, or an older log's plain one, is not: it is a value like any other,
    /// redacted again where it is secret).
    pub fn redacted_here(&self, object: &Map<String, Value>) -> bool {
        matches!(Recorded::parse(object), Some(Recorded::Keyed { hmac_sha256, key, .. })
            if key == self.id
                && hmac_sha256.len() == 64
                && hmac_sha256.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    }
}

/// What the digest of a value that is not a string starts with.
const JSON_PREFIX: &[u8] = b"json:";

/// A redacted value as a record holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded<'a> {
    /// HMAC-SHA256 under the key named `key`.
    Keyed {
        hmac_sha256: &'a str,
        key: &'a str,
        bytes: u64,
    },
    /// A plain SHA-256 (logs written before keyed digests).
    Plain { sha256: &'a str, bytes: u64 },
}

impl<'a> Recorded<'a> {
    /// The redacted form `object` is, if it is one (exactly its fields, nothing else).
    pub fn parse(object: &'a Map<String, Value>) -> Option<Recorded<'a>> {
        if object.get("redacted") != Some(&Value::Bool(true)) {
            return None;
        }
        let text = |field: &str| object.get(field).and_then(Value::as_str);
        let bytes = object.get("bytes").and_then(Value::as_u64)?;
        match object.len() {
            4 => Some(Recorded::Keyed {
                hmac_sha256: text("hmac_sha256")?,
                key: text("key")?,
                bytes,
            }),
            3 => Some(Recorded::Plain {
                sha256: text("sha256")?,
                bytes,
            }),
            _ => None,
        }
    }

    /// Whether `value` is what was recorded: `Some(true|false)`, or `None` when the record is
    /// keyed and `key` is not its key (or absent), so nothing can be said.
    pub fn matches(&self, value: &Value, key: Option<&RedactionKey>) -> Option<bool> {
        match *self {
            Recorded::Plain { sha256, bytes: n } => {
                let bytes = bytes_of(value);
                Some(n == bytes.len() as u64 && sha256 == hex::encode(Sha256::digest(&bytes)))
            }
            Recorded::Keyed {
                hmac_sha256,
                key: id,
                bytes: n,
            } => {
                let key = key.filter(|k| k.id() == id)?;
                let (digest, bytes) = key.digest_value(value);
                Some(n == bytes as u64 && hmac_sha256 == digest)
            }
        }
    }
}

/// A string's UTF-8 bytes, the compact JSON text of anything else (what `bytes` counts).
pub fn bytes_of(value: &Value) -> Vec<u8> {
    match value {
        Value::String(s) => s.as_bytes().to_vec(),
        other => serde_json::to_vec(other).expect("a JSON value serialises"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_digest_matches_only_its_value_under_its_key() {
        let key = RedactionKey::from_bytes([7; 32]);
        let other = RedactionKey::from_bytes([8; 32]);
        assert_ne!(key.id(), other.id());
        let form = key.redact(&json!("s3cret"));
        let Value::Object(object) = &form else {
            panic!("{form}")
        };
        let recorded = Recorded::parse(object).expect("a redacted form");
        assert_eq!(recorded.matches(&json!("s3cret"), Some(&key)), Some(true));
        assert_eq!(recorded.matches(&json!("s3cres"), Some(&key)), Some(false));
        assert_eq!(recorded.matches(&json!("s3cret"), Some(&other)), None);
        assert_eq!(recorded.matches(&json!("s3cret"), None), None);
        assert!(key.redacted_here(object) && !other.redacted_here(object));
        // A number and the string of its digits are different values.
        let one = key.redact(&json!(1));
        let one = Recorded::parse(one.as_object().unwrap()).unwrap();
        assert_eq!(one.matches(&json!(1), Some(&key)), Some(true));
        assert_eq!(one.matches(&json!("1"), Some(&key)), Some(false));
        // A caller's object shaped like a digest is not one this key made.
        let forged =
            json!({"redacted": true, "hmac_sha256": "not hex", "key": key.id(), "bytes": 1});
        assert!(!key.redacted_here(forged.as_object().unwrap()));
        // Not the plain digest a reader without the key could try guesses against.
        let plain = hex::encode(Sha256::digest(b"s3cret"));
        assert!(!form.to_string().contains(&plain), "{form}");
        assert!(!form.to_string().contains(&hex::encode([7u8; 32])));
        // RFC 4231, test case 2: HMAC-SHA256 as everyone computes it.
        let mut jefe = [0u8; 32];
        jefe[..4].copy_from_slice(b"Jefe");
        // (a 4-byte key is zero-padded to the block by HMAC itself, so padding it to 32 here
        // gives the same MAC)
        assert_eq!(
            RedactionKey::from_bytes(jefe).digest(b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn old_plain_digests_are_still_read_and_compared() {
        let plain =
            json!({"redacted": true, "sha256": hex::encode(Sha256::digest(b"hello")), "bytes": 5});
        let recorded = Recorded::parse(plain.as_object().unwrap()).unwrap();
        assert_eq!(recorded.matches(&json!("hello"), None), Some(true));
        assert_eq!(recorded.matches(&json!("hellp"), None), Some(false));
        let extra = json!({"redacted": true, "sha256": "00", "bytes": 5, "note": "x"});
        assert_eq!(Recorded::parse(extra.as_object().unwrap()), None);
        let unredacted = json!({"redacted": false, "sha256": "00", "bytes": 5});
        assert_eq!(Recorded::parse(unredacted.as_object().unwrap()), None);
    }
}
