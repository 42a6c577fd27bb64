//! Checkpoints: `{"seq", "hash"}` of a record, exported (printed, stored elsewhere, signed,
//! mailed to an auditor) so that a later `verify` can prove nothing up to that record was
//! deleted or rewritten — the one thing a hash chain alone cannot show.

use serde::{Deserialize, Serialize};

use super::canonical::GENESIS;
use super::record::Receipt;

/// A record's place and hash in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub seq: u64,
    pub hash: String,
}

/// A checkpoint file that is not a checkpoint.
#[derive(Debug, thiserror::Error)]
#[error(
    "not a checkpoint; expected JSON like {{\"seq\": 42, \"hash\": \"<64 hex>\"}} as printed by `hpcgate audit checkpoint`"
)]
pub struct CheckpointError(#[source] Option<serde_json::Error>);

impl Checkpoint {
    /// The empty log's checkpoint.
    pub fn genesis() -> Checkpoint {
        Checkpoint {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a checkpoint serialises")
    }

    pub fn from_json(text: &str) -> Result<Checkpoint, CheckpointError> {
        let checkpoint: Checkpoint =
            serde_json::from_str(text.trim()).map_err(|e| CheckpointError(Some(e)))?;
        let hex = checkpoint.hash.len() == 64
            && checkpoint
                .hash
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !hex {
            return Err(CheckpointError(None));
        }
        Ok(checkpoint)
    }
}

impl From<Receipt> for Checkpoint {
    fn from(r: Receipt) -> Checkpoint {
        Checkpoint {
            seq: r.seq,
            hash: r.hash,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_reject_what_is_not_one() {
        let cp = Checkpoint {
            seq: 42,
            hash: "ab".repeat(32),
        };
        assert_eq!(Checkpoint::from_json(&cp.to_json()).unwrap(), cp);
        assert_eq!(
            Checkpoint::from_json(&format!("  {}\n", cp.to_json())).unwrap(),
            cp
        );
        for bad in [
            r#"{"seq": 1}"#,
            r#"{"seq": 1, "hash": "xyz"}"#,
            &format!(r#"{{"seq": 1, "hash": "{}", "extra": 1}}"#, "ab".repeat(32)),
            &format!(r#"{{"seq": 1, "hash": "{}"}}"#, "AB".repeat(32)),
        ] {
            assert!(Checkpoint::from_json(bad).is_err(), "{bad}");
        }
    }
}
