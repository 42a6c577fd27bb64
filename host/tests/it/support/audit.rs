//! Helpers shared by the audit log's test modules: write a numbered log, name its files,
//! read a file's lines, build a configuration's chain as `policy test` does.

use std::path::{Path, PathBuf};

use hpcgate::audit::{AuditLog, AuditOptions, Checkpoint, Entry};
use hpcgate::config::Config;
use hpcgate::policy::{Chain, EngineSettings, PolicyEngine};

/// Runs the `hpcgate` binary with `args`, its policy cache shared with the other tests'.
pub fn hpcgate(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(args)
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .output()
        .expect("run hpcgate")
}

/// The chain of the policies in the configuration file `config`, as `policy test` builds it
/// (compiled modules cached with the other tests').
pub fn chain_of(config: &Path) -> Chain {
    let (config, base) = Config::load(config).unwrap();
    let engine = PolicyEngine::new(EngineSettings {
        cache_dir: Some(crate::support::shared::policy_cache()),
        ..config.engine_settings()
    })
    .unwrap();
    Chain::new(config.chain_policies(&engine, &base).unwrap()).unwrap()
}

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

/// `verify` of the log in `dir`, taken again (for up to 10 s) while its only fault is a torn
/// last line: a gateway still running may be midway through writing a batch.
pub fn verified(dir: &Path) -> hpcgate::audit::VerifyReport {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let report = hpcgate::audit::verify(dir, None).unwrap();
        let torn = (report.first_broken.as_ref())
            .is_some_and(|b| matches!(b.problem, hpcgate::audit::Problem::TornLine { .. }));
        if !torn || std::time::Instant::now() >= deadline {
            return report;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
