//! Signed checkpoints, exported automatically: every `checkpoint_every` a background thread
//! signs the last durable record (`seq`, `hash`, when) with the log's ed25519 key and appends
//! it as one JSON line to a sink outside the state directory (a file, or syslog). Later,
//! `hpcgate audit verify --checkpoints <sink>` checks the log against every one of them, so a
//! record deleted and the rest re-chained with correct hashes, a truncation, or a replaced
//! segment is caught — the chain alone cannot show those.
//!
//! The key lives beside the log (`checkpoint.key`, 0600, created on first use); `hpcgate audit
//! key` prints its public half, to keep with the auditor. Someone who can read the state
//! directory can sign too, but cannot take back checkpoints already in the sink: the signature
//! proves that a checkpoint came from this gateway, the sink's being out of reach proves the
//! log's past.
//!
//! The call path pays nothing: the batch leader stores the newest receipt (one uncontended
//! mutex per batch) and the thread reads it; signing and writing happen on that thread only.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::checkpoint::Checkpoint;
use super::keyfile;
use super::record::Receipt;
use crate::time::Timestamp;

/// The key file inside the audit directory.
pub const KEY_FILE: &str = "checkpoint.key";

/// What is signed: a fixed prefix, then `seq`, `hash` and `ts`.
fn message(seq: u64, hash: &str, ts: Timestamp) -> Vec<u8> {
    format!("hpcgate-audit-checkpoint/1 {seq} {hash} {ts}").into_bytes()
}

/// One exported checkpoint, as a line of the sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedCheckpoint {
    pub seq: u64,
    pub hash: String,
    /// When it was signed.
    pub ts: Timestamp,
    /// Hex ed25519 public key.
    pub key: String,
    /// Hex ed25519 signature of `hpcgate-audit-checkpoint/1 <seq> <hash> <ts>`.
    pub sig: String,
}

impl SignedCheckpoint {
    /// Checks the signature against the key the checkpoint names.
    pub fn verify(&self) -> Result<(), String> {
        let key = parse_public_key(&self.key)?;
        let sig: [u8; 64] = hex::decode(&self.sig)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or("`sig` is not 128 hex digits")?;
        key.verify_strict(
            &message(self.seq, &self.hash, self.ts),
            &Signature::from_bytes(&sig),
        )
        .map_err(|_| {
            "the signature does not verify: the checkpoint was forged or edited".to_owned()
        })
    }
}

/// Parses a hex ed25519 public key.
pub fn parse_public_key(text: &str) -> Result<VerifyingKey, String> {
    let bytes: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("a public key is 64 hex digits, as printed by `hpcgate audit key`")?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| format!("not an ed25519 public key: {e}"))
}

/// The log's signing key.
pub struct CheckpointKey {
    signing: SigningKey,
}

impl std::fmt::Debug for CheckpointKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointKey")
            .field("public", &self.public_hex())
            .finish()
    }
}

impl CheckpointKey {
    /// Reads `dir/checkpoint.key`, creating it (0600) with a fresh key if absent.
    pub fn load_or_create(dir: &Path) -> io::Result<CheckpointKey> {
        let seed = keyfile::load_or_create(dir, KEY_FILE, "a checkpoint key")?;
        Ok(CheckpointKey {
            signing: SigningKey::from_bytes(&seed),
        })
    }

    /// Reads `dir/checkpoint.key`; refuses one others can read.
    pub fn load(dir: &Path) -> io::Result<CheckpointKey> {
        let seed = keyfile::load(&dir.join(KEY_FILE), "a checkpoint key")?;
        Ok(CheckpointKey {
            signing: SigningKey::from_bytes(&seed),
        })
    }

    pub fn public_hex(&self) -> String {
        hex::encode(self.signing.verifying_key().to_bytes())
    }

    pub fn sign(&self, checkpoint: &Checkpoint, ts: Timestamp) -> SignedCheckpoint {
        let sig = self
            .signing
            .sign(&message(checkpoint.seq, &checkpoint.hash, ts));
        SignedCheckpoint {
            seq: checkpoint.seq,
            hash: checkpoint.hash.clone(),
            ts,
            key: self.public_hex(),
            sig: hex::encode(sig.to_bytes()),
        }
    }
}

/// Where checkpoints go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointSink {
    /// Appended as JSON lines (created 0640 if absent).
    File(PathBuf),
    /// Sent to the local syslog (`/dev/log`, facility auth, severity info) as
    /// `hpcgate-audit-checkpoint {json}`.
    Syslog,
}

/// Automatic checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointOptions {
    pub every: Duration,
    pub sink: CheckpointSink,
}

impl CheckpointSink {
    /// Appends one line. A file that ends in a line torn by a crash gets its `\n` first, so
    /// the torn fragment stays a line of its own.
    pub fn write(&self, line: &str) -> io::Result<()> {
        match self {
            CheckpointSink::File(path) => {
                let mut file = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .create(true)
                    .mode(0o640)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)?;
                let len = file.metadata()?.len();
                let mut text = String::with_capacity(line.len() + 2);
                if len > 0 {
                    let mut last = [0u8];
                    file.read_exact_at(&mut last, len - 1)?;
                    if last[0] != b'\n' {
                        text.push('\n');
                    }
                }
                text.push_str(line);
                text.push('\n');
                file.write_all(text.as_bytes())?;
                file.sync_data()
            }
            CheckpointSink::Syslog => {
                let socket = std::os::unix::net::UnixDatagram::unbound()?;
                // <38>: facility auth (4), severity info (6).
                let message = format!(
                    "<38>hpcgate[{}]: hpcgate-audit-checkpoint {line}",
                    std::process::id()
                );
                socket.send_to(message.as_bytes(), "/dev/log").map(|_| ())
            }
        }
    }
}

/// What the exporter thread shares with the log.
#[derive(Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The newest durable record this process knows of.
    head: Option<Receipt>,
    stop: bool,
}

impl Shared {
    /// Called by the batch leader after a batch is durable.
    pub(crate) fn committed(&self, head: &Receipt) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.head.as_ref().is_none_or(|h| h.seq < head.seq) {
            state.head = Some(head.clone());
        }
    }

    pub(crate) fn stop(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop = true;
        self.wake.notify_all();
    }
}

/// Starts the exporter thread: every `options.every`, if the head moved, one signed checkpoint
/// to the sink; one more when stopped. A sink that fails is retried at the next interval (and
/// said on stderr); it never affects the log.
pub(crate) fn start(
    shared: Arc<Shared>,
    key: CheckpointKey,
    options: CheckpointOptions,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("audit-checkpoint".to_owned())
        .spawn(move || {
            let mut exported: Option<u64> = None;
            let mut next = Instant::now() + options.every;
            loop {
                let (head, stop) = {
                    let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
                    while !state.stop && Instant::now() < next {
                        let wait = next.saturating_duration_since(Instant::now());
                        state = shared
                            .wake
                            .wait_timeout(state, wait)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                    (state.head.clone(), state.stop)
                };
                next = Instant::now() + options.every;
                if let Some(head) = head.filter(|h| exported != Some(h.seq)) {
                    let signed = key.sign(&Checkpoint::from(head.clone()), Timestamp::now());
                    let line = serde_json::to_string(&signed).expect("a checkpoint serialises");
                    match options.sink.write(&line) {
                        Ok(()) => exported = Some(head.seq),
                        Err(e) => {
                            let _ = writeln!(
                                io::stderr().lock(),
                                "hpcgate: cannot write an audit checkpoint to {:?}: {e}; retrying in {:?}",
                                options.sink,
                                options.every
                            );
                        }
                    }
                }
                if stop {
                    break;
                }
            }
        })
}

/// The checkpoints of a sink file (or a syslog excerpt), read for `verify --checkpoints`.
#[derive(Debug, Clone, Default)]
pub struct CheckpointSet {
    pub checkpoints: Vec<Checkpoint>,
    pub signed: usize,
    pub unsigned: usize,
    /// The public key the signed ones carry (all the same).
    pub key: Option<String>,
    /// Lines that hold no checkpoint (a line torn by a crash, other syslog messages):
    /// `(line, why)`. They add nothing and hide nothing.
    pub ignored: Vec<(usize, String)>,
}

/// A checkpoint file that cannot be trusted as a whole.
#[derive(Debug, thiserror::Error)]
#[error("line {line} of the checkpoints: {message}")]
pub struct CheckpointSetError {
    pub line: usize,
    pub message: String,
}

/// Reads every checkpoint of `text`: lines `{"seq","hash","ts","key","sig"}` as the exporter
/// writes them (with anything before the `{`, such as a syslog prefix), or unsigned
/// `{"seq","hash"}` as `hpcgate audit checkpoint` prints them. With `key`, every checkpoint
/// must be signed by it; without, all signed ones must carry one key. A bad signature, another
/// key, or two checkpoints of one `seq` that disagree is an error: a forgery.
pub fn read_checkpoints(
    text: &str,
    key: Option<&VerifyingKey>,
) -> Result<CheckpointSet, CheckpointSetError> {
    let mut set = CheckpointSet::default();
    let mut by_seq = std::collections::BTreeMap::<u64, String>::new();
    let expected_key = key.map(|k| hex::encode(k.to_bytes()));
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let err = |message: String| CheckpointSetError { line, message };
        let Some(start) = raw.find('{') else {
            if !raw.trim().is_empty() {
                set.ignored
                    .push((line, "no checkpoint on this line".to_owned()));
            }
            continue;
        };
        let json = raw[start..].trim();
        let value: serde_json::Value = match serde_json::from_str(json) {
            Ok(value) => value,
            Err(e) => {
                set.ignored
                    .push((line, format!("not JSON ({e}); torn by a crash?")));
                continue;
            }
        };
        let checkpoint = if value.get("sig").is_some() {
            let signed: SignedCheckpoint = serde_json::from_value(value)
                .map_err(|e| err(format!("not a signed checkpoint: {e}")))?;
            signed.verify().map_err(err)?;
            match (&expected_key, &set.key) {
                (Some(want), _) if *want != signed.key => {
                    return Err(err(format!(
                        "signed by key {} but `--key` is {want}",
                        signed.key
                    )));
                }
                (None, Some(seen)) if *seen != signed.key => {
                    return Err(err(format!(
                        "signed by key {} but earlier checkpoints by {seen}; pass `--key` with the gateway's key",
                        signed.key
                    )));
                }
                _ => set.key = Some(signed.key.clone()),
            }
            set.signed += 1;
            Checkpoint {
                seq: signed.seq,
                hash: signed.hash,
            }
        } else {
            if expected_key.is_some() {
                return Err(err(
                    "an unsigned checkpoint, but `--key` asks for signed ones only".to_owned(),
                ));
            }
            let checkpoint = Checkpoint::from_json(json).map_err(|e| err(e.to_string()))?;
            set.unsigned += 1;
            checkpoint
        };
        match by_seq.get(&checkpoint.seq) {
            Some(hash) if *hash != checkpoint.hash => {
                return Err(err(format!(
                    "two checkpoints of seq {} disagree ({hash} and {}): one of them was forged",
                    checkpoint.seq, checkpoint.hash
                )));
            }
            Some(_) => {}
            None => {
                by_seq.insert(checkpoint.seq, checkpoint.hash.clone());
                set.checkpoints.push(checkpoint);
            }
        }
    }
    Ok(set)
}
