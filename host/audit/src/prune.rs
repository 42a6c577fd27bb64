//! Retention: `prune` removes whole old segments and leaves an anchor (`audit-anchor.json`):
//! where the remaining chain starts (`first_segment`, `next_seq`) and the hash it links to
//! (`prev`, the last removed record's). `verify` starts from the anchor instead of the genesis,
//! so the remaining chain still verifies; checkpoints older than it cannot be checked any more
//! (they are ignored), except one of the anchor's own record, which must match `prev`. The
//! pruning itself is then recorded in the chain (`audit.pruned`), so it is never silent.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::{AuditError, arc};
use super::index;
use super::log::{AuditLog, AuditOptions};
use super::record::{Entry, Event};
use super::segment::{self, LOCK_FILE, Segment};
use super::tail::read_tail;
use super::verify::{Problem, verify};
use crate::time::Timestamp;

pub(crate) const ANCHOR_FILE: &str = "audit-anchor.json";

/// Where the chain starts after a prune.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    /// The oldest segment kept; older ones are gone (any left by a crash are ignored).
    pub first_segment: u64,
    /// The `seq` of the first record kept.
    pub next_seq: u64,
    /// The hash of the last record removed: the first kept record's `prev`.
    pub prev: String,
    /// The time of the last record removed.
    pub prev_ts: Timestamp,
}

/// Reads the anchor of the log in `dir`, if it was pruned. An anchor that cannot be read is an
/// error (guessing would make verify start from the wrong place).
pub(crate) fn read_anchor(dir: &Path) -> Result<Option<Anchor>, AuditError> {
    let path = dir.join(ANCHOR_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(AuditError::Read {
                path,
                source: arc(source),
            });
        }
    };
    let unreadable = |problem: String| AuditError::Unreadable {
        path: path.clone(),
        at: "the anchor".to_owned(),
        problem,
    };
    let anchor: Anchor = serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
    // No prune writes these (the chain starts at seq 1 in segment 1); verify counts back from
    // `next_seq`.
    if anchor.next_seq == 0 || anchor.first_segment == 0 {
        return Err(unreadable(
            "`next_seq` and `first_segment` start at 1; the anchor was not written by a prune"
                .to_owned(),
        ));
    }
    Ok(Some(anchor))
}

/// What [`prune`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PruneReport {
    pub removed_segments: u64,
    pub removed_records: u64,
    /// The anchor now in force (unchanged when nothing was removed).
    pub anchor: Option<Anchor>,
}

/// Removes the segments whose every record is older than `before` (never the newest one),
/// after checking that the log verifies (pruning a broken log would destroy the evidence).
///
/// The prune records itself (`audit.pruned`, naming the anchor it will write) before it writes
/// the anchor, so no anchor this version leaves is one the chain does not name: a prune cut
/// short after its record leaves every segment in place (the record names an anchor that is
/// not there, which verify ignores), and the next prune does the work. An anchor no record
/// names was left by an earlier version's prune cut short, or written by hand: one older than
/// `before` is recorded now; one hiding records newer than that is refused.
pub fn prune(dir: &Path, before: Timestamp) -> Result<PruneReport, AuditError> {
    let report = verify(dir, None)?;
    let unrecorded = (report.first_broken.as_ref())
        .is_some_and(|b| matches!(b.problem, Problem::UnrecordedAnchor { .. }));
    if let Some(broken) = &report.first_broken
        && !unrecorded
    {
        return Err(AuditError::Unreadable {
            path: dir.join(&broken.file),
            at: format!("line {}", broken.line),
            problem: format!(
                "{}; the log does not verify, and pruning it would destroy the evidence",
                broken.problem
            ),
        });
    }
    if unrecorded
        && let Some(anchor) = read_anchor(dir)?
        && anchor.prev_ts >= before
    {
        return Err(AuditError::Unreadable {
            path: dir.join(ANCHOR_FILE),
            at: format!("first_segment {}", anchor.first_segment),
            problem: format!(
                "its anchor, which no `audit.pruned` record names, hides records up to {}, not older than {before}: a prune cut short with this --before cannot have left it, so find out where it came from first (an earlier hpcgate's prune with a later --before cut short, or segments removed by hand); `--before` a time after it records it",
                anchor.prev_ts
            ),
        });
    }
    // No compression under way: it would bring back a compressed copy of a removed segment.
    let compressing = super::compress::lock(dir, true)?.expect("a waiting lock is taken");
    let result = prune_recorded(dir, before, unrecorded);
    let _ = compressing.unlock();
    result
}

/// [`prune`] once the log verified: plan, record, then write the anchor and remove.
fn prune_recorded(
    dir: &Path,
    before: Timestamp,
    unrecorded: bool,
) -> Result<PruneReport, AuditError> {
    let (old, planned) = writers_locked(dir, || plan(dir, before))?;
    let Some(planned) = planned else {
        if let Some(anchor) = old.as_ref().filter(|_| unrecorded) {
            record(dir, before, anchor, (0, 0))?;
        }
        return Ok(PruneReport {
            removed_segments: 0,
            removed_records: 0,
            anchor: old,
        });
    };
    let removed = (planned.removable.len() as u64, planned.removed_records);
    record(dir, before, &planned.anchor, removed)?;
    writers_locked(dir, || {
        if read_anchor(dir)? != old {
            return Err(AuditError::Unreadable {
                path: dir.join(ANCHOR_FILE),
                at: "the anchor".to_owned(),
                problem: "another prune changed it meanwhile; run this one again".to_owned(),
            });
        }
        apply(dir, &planned)
    })?;
    Ok(PruneReport {
        removed_segments: removed.0,
        removed_records: removed.1,
        anchor: Some(planned.anchor),
    })
}

/// Runs `work` holding the writers' lock of the log in `dir`.
fn writers_locked<T>(
    dir: &Path,
    work: impl FnOnce() -> Result<T, AuditError>,
) -> Result<T, AuditError> {
    let lock_path = dir.join(LOCK_FILE);
    let lock = segment::open_append(&lock_path, false)?;
    lock.lock().map_err(|source| AuditError::Lock {
        path: lock_path.clone(),
        source: arc(source),
    })?;
    let result = work();
    let _ = lock.unlock();
    result
}

/// Appends the `audit.pruned` record of a prune before `before` that leaves `anchor`, having
/// removed (`segments`, `records`).
fn record(
    dir: &Path,
    before: Timestamp,
    anchor: &Anchor,
    (segments, records): (u64, u64),
) -> Result<(), AuditError> {
    // No rotation from here: a file this process created could belong to another user.
    let log = AuditLog::open(
        dir,
        AuditOptions {
            max_file_bytes: u64::MAX,
            ..AuditOptions::default()
        },
    )?;
    log.append(
        Entry::new(Event::AuditPruned)
            .detail("before", before.to_string())
            .detail("removed_segments", segments)
            .detail("removed_records", records)
            .detail("first_segment", anchor.first_segment)
            .detail("first_seq", anchor.next_seq)
            .detail("prev", anchor.prev.clone()),
    )?;
    Ok(())
}

/// What a prune removes, and the anchor it leaves.
struct Plan {
    anchor: Anchor,
    removable: Vec<Segment>,
    removed_records: u64,
}

/// The anchor in force, and what a prune before `before` would remove (none when nothing).
fn plan(dir: &Path, before: Timestamp) -> Result<(Option<Anchor>, Option<Plan>), AuditError> {
    let old = read_anchor(dir)?;
    let first = old.as_ref().map_or(1, |a| a.first_segment);
    let segments: Vec<_> = segment::list(dir)?
        .into_iter()
        .filter(|s| s.number >= first)
        .collect();
    let mut removable = Vec::new();
    let mut last = None;
    for segment in segments.iter().take(segments.len().saturating_sub(1)) {
        let len = segment::plain_len(segment)?;
        let end = match index::read_for(segment, len) {
            Some(i) => (i.last_seq, i.last_hash, i.last_ts),
            None => {
                let last = if segment.compressed {
                    super::compress::last_record(segment)?
                } else {
                    read_tail(segment, &segment::open_read(&segment.path)?)?.last
                };
                match last {
                    Some(r) => (r.seq, r.hash, r.ts),
                    None => break,
                }
            }
        };
        if end.2 >= before {
            break;
        }
        removable.push(segment.clone());
        last = Some(end);
    }
    let Some((last_seq, last_hash, last_ts)) = last else {
        return Ok((old, None));
    };
    let anchor = Anchor {
        first_segment: removable.last().expect("removable").number + 1,
        next_seq: last_seq + 1,
        prev: last_hash,
        prev_ts: last_ts,
    };
    let removed_before = old.as_ref().map_or(0, |a| a.next_seq - 1);
    let removed_records = last_seq - removed_before;
    let planned = Plan {
        anchor,
        removable,
        removed_records,
    };
    Ok((old, Some(planned)))
}

/// Writes `planned`'s anchor, then removes its segments.
fn apply(dir: &Path, planned: &Plan) -> Result<(), AuditError> {
    // The anchor first: a crash before the files are gone leaves them ignored, not a chain that
    // starts in the wrong place.
    write_anchor(dir, &planned.anchor)?;
    for segment in &planned.removable {
        let _ = std::fs::remove_file(index::path(segment));
        // Both forms: a compression interrupted between its rename and its removal leaves two.
        let other = if segment.compressed {
            Segment::new(dir, segment.number)
        } else {
            Segment::compressed(dir, segment.number)
        };
        let _ = std::fs::remove_file(&other.path);
        std::fs::remove_file(&segment.path).map_err(|source| AuditError::Write(arc(source)))?;
    }
    segment::sync_dir(dir).map_err(|e| AuditError::Write(arc(e)))
}

/// A prune that writes no record, as an earlier version's cut short after its anchor left
/// one, or as segments removed by hand: for tests of how such an anchor is caught.
#[cfg(test)]
pub(crate) fn prune_unrecorded(dir: &Path, before: Timestamp) -> Result<PruneReport, AuditError> {
    let (old, planned) = plan(dir, before)?;
    let Some(planned) = planned else {
        return Ok(PruneReport {
            removed_segments: 0,
            removed_records: 0,
            anchor: old,
        });
    };
    apply(dir, &planned)?;
    Ok(PruneReport {
        removed_segments: planned.removable.len() as u64,
        removed_records: planned.removed_records,
        anchor: Some(planned.anchor),
    })
}

/// A prune cut short after its record, before its anchor.
#[cfg(test)]
pub(crate) fn prune_cut_short_after_its_record(
    dir: &Path,
    before: Timestamp,
) -> Result<Anchor, AuditError> {
    let (_, planned) = plan(dir, before)?;
    let planned = planned.expect("something to prune");
    let removed = (planned.removable.len() as u64, planned.removed_records);
    record(dir, before, &planned.anchor, removed)?;
    Ok(planned.anchor)
}

/// Where an `audit.pruned` record says the chain starts: (`first_segment`, `first_seq`,
/// `prev`).
pub(crate) type Anchored = (u64, u64, String);

/// The anchor an `audit.pruned` record names (a verified line): what [`prune`] writes in its
/// `detail`, read back by `verify`. `event` follows the header
/// (`seq`, `ts`, `prev`), well within a line's first 256 bytes: only those are searched.
pub(crate) fn pruned(line: &[u8]) -> Option<Anchored> {
    const EVENT: &[u8] = br#""event":"audit.pruned""#;
    let head = &line[..line.len().min(256)];
    if !head.windows(EVENT.len()).any(|w| w == EVENT) {
        return None;
    }
    let record: serde_json::Value = serde_json::from_slice(line).ok()?;
    let detail = &record["detail"];
    Some((
        detail["first_segment"].as_u64()?,
        detail["first_seq"].as_u64()?,
        detail["prev"].as_str()?.to_owned(),
    ))
}

fn write_anchor(dir: &Path, anchor: &Anchor) -> Result<(), AuditError> {
    let fail = |source| AuditError::Write(arc(source));
    let temp = dir.join(format!("{ANCHOR_FILE}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)
        .map_err(fail)?;
    file.write_all(&serde_json::to_vec(anchor).expect("an anchor serialises"))
        .map_err(fail)?;
    file.sync_all().map_err(fail)?;
    std::fs::rename(&temp, dir.join(ANCHOR_FILE)).map_err(fail)?;
    segment::sync_dir(dir).map_err(fail)
}
