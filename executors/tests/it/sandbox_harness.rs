//! Shared set-up for the sandbox tests: real bwrap, a temporary instance, a dedicated uid.
//!
//! Used by the sandbox test modules (`sandbox_*.rs`).

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hpcgate_executors::sandbox::{DEFAULT_BWRAP, HostUser, Limits, SandboxSpec, SupervisorCommand};

/// Fails (never skips) when bubblewrap is missing.
pub fn require_bwrap() {
    assert!(
        Path::new(DEFAULT_BWRAP).is_file(),
        "bubblewrap is missing at {DEFAULT_BWRAP}: install it with `apt-get install bubblewrap`"
    );
}

pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// A temporary instance: workspace, output and a jobs directory outside both.
pub struct Instance {
    pub root: tempfile::TempDir,
    pub spec: SandboxSpec,
    pub host_uid: Option<u32>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Instance {
    /// A fresh instance with short default limits. As root, the sandbox runs as a dedicated
    /// uid (unique per test), so `RLIMIT_NPROC` counts only this sandbox's processes.
    pub fn create() -> Instance {
        require_bwrap();
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let ws = root.path().join("workspace");
        let out = root.path().join("output");
        std::fs::create_dir(&ws).expect("workspace");
        std::fs::create_dir(&out).expect("output");
        std::fs::create_dir(root.path().join("jobs")).expect("jobs");
        let mut spec = SandboxSpec::new(&ws, &out);
        spec.limits = Limits {
            wall_time: Duration::from_secs(20),
            stop_grace: Duration::from_secs(2),
            output_bytes: 1 << 20,
            cpus: 1,
            memory_mb: 512,
            pids: 64,
        };
        let mut host_uid = None;
        if is_root() {
            let uid = 200_000
                + (std::process::id() % 20_000) * 64
                + NEXT.fetch_add(1, Ordering::Relaxed) % 64;
            for d in [&ws, &out] {
                chown(d, Some(uid), Some(uid)).expect("chown");
            }
            spec.run_as = Some(HostUser { uid, gid: uid });
            host_uid = Some(uid);
        }
        Instance {
            root,
            spec,
            host_uid,
        }
    }

    pub fn job_dir(&self, name: &str) -> PathBuf {
        self.root.path().join("jobs").join(name)
    }

    pub fn output(&self) -> PathBuf {
        self.root.path().join("output")
    }
}

pub fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".to_owned(), "-c".to_owned(), script.to_owned()]
}

pub fn supervisor() -> SupervisorCommand {
    SupervisorCommand::helper(env!("CARGO_BIN_EXE_hpcgate-supervisor"))
}

/// Pids of host processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid as u32 == std::process::id() {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(needle)
        {
            found.push(pid);
        }
    }
    found
}

/// Pids of host processes named `comm` whose command line contains `needle` (so a bwrap
/// whose argv mentions the command does not count as the command running).
pub fn running(comm: &str, needle: &str) -> Vec<i32> {
    processes_with(needle)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm)
        })
        .collect()
}

/// Waits (bounded) until no process has `needle` on its command line.
pub fn gone_within(needle: &str, limit: Duration) -> bool {
    let until = std::time::Instant::now() + limit;
    loop {
        if processes_with(needle).is_empty() {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
