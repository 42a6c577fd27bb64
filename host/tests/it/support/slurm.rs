//! The local one-machine Slurm cluster for tests: `scripts/slurm-local.sh start` (idempotent);
//! if it cannot start, the test fails with its message.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// `SLURM_CONF` of the local cluster, started if needed. One start at a time: the Slurm tests
/// of every module share this process, and the script is idempotent, not concurrency-safe.
pub fn slurm_conf() -> PathBuf {
    static STARTING: Mutex<()> = Mutex::new(());
    let _one = STARTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/slurm-local.sh");
    let out = Command::new(&script).arg("start").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the local Slurm cluster did not start:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conf = stdout
        .lines()
        .find_map(|l| l.strip_prefix("export SLURM_CONF="))
        .expect("slurm-local.sh start prints `export SLURM_CONF=…`");
    PathBuf::from(conf.trim_matches('\''))
}

/// A Slurm client's output (`SLURM_CONF` of the local cluster).
pub fn slurm_client(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
