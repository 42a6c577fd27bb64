//! Helpers shared by the audit log's test modules: write a numbered log, name its files,
//! read a file's lines.

use std::path::{Path, PathBuf};

use hpcgate::audit::{AuditLog, AuditOptions, Checkpoint, Entry};

/// Writes records `entry(1..=n)`, rotating at `max_file_bytes`; returns their receipts as
/// checkpoints.
pub fn write(
    dir: &Path,
    n: u64,
    max_file_bytes: u64,
    entry: impl Fn(u64) -> Entry,
) -> Vec<Checkpoint> {
    let options = AuditOptions {
        max_file_bytes,
        ..AuditOptions::default()
    };
    let log = AuditLog::open(dir, options).unwrap();
    (1..=n)
        .map(|i| log.append(entry(i)).unwrap().into())
        .collect()
}

/// The `number`th file of the log in `dir`.
pub fn file(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("audit-{number:06}.jsonl"))
}

pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}
