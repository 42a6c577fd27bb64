//! Shared harness of the Slurm tests: the local cluster (started once per test binary by
//! `scripts/slurm-local.sh start`), per-job temporary directories, and polling helpers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use hpcgate_executors::sandbox::SandboxSpec;
use hpcgate_executors::slurm::{JobPhase, JobSandbox, JobStatus, SlurmJobSpec, SlurmRunner};

/// `SLURM_CONF` of the local cluster, started once per test binary.
pub fn slurm_conf() -> &'static Path {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    CONF.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/slurm-local.sh");
        let out = Command::new(&script)
            .arg("start")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the local Slurm cluster did not start (needs root or slurm-wlm + munge installed):\n{}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export SLURM_CONF="))
            .expect("slurm-local.sh start prints `export SLURM_CONF=…`");
        PathBuf::from(conf.trim_matches('\''))
    })
}

/// A job's private directories: script dir, workspace, output, host-side logs.
pub struct JobDirs {
    root: tempfile::TempDir,
}

impl JobDirs {
    pub fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("hpcgate-slurm-test")
            .tempdir()
            .unwrap();
        for dir in ["scripts", "workspace", "output", "logs"] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
        }
        JobDirs { root }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }
    pub fn runner(&self) -> SlurmRunner {
        let mut runner = SlurmRunner::new(self.path("scripts"));
        runner.client.slurm_conf = Some(slurm_conf().to_owned());
        runner
    }
    /// A small sandboxed job running `command`.
    pub fn spec(&self, command: &[&str]) -> SlurmJobSpec {
        SlurmJobSpec {
            job_name: NAME.to_owned(),
            partition: None,
            account: None,
            qos: None,
            cpus: 1,
            memory_mb: 200,
            time_limit: Duration::from_secs(120),
            gpus: 0,
            working_dir: self.path("workspace"),
            output_dir: self.path("logs"),
            command: command.iter().map(|s| s.to_string()).collect(),
            sandbox: JobSandbox::Supervised {
                sandbox: Box::new(SandboxSpec::new(
                    self.path("workspace"),
                    self.path("output"),
                )),
                supervisor: crate::sandbox_harness::supervisor(),
            },
        }
    }
    /// The sandbox of a supervised [`Self::spec`].
    pub fn sandbox(spec: &mut SlurmJobSpec) -> &mut SandboxSpec {
        match &mut spec.sandbox {
            JobSandbox::Supervised { sandbox, .. } => sandbox,
            JobSandbox::UnsandboxedAmbient => panic!("not a supervised job"),
        }
    }
    /// What Slurm itself and the supervisor wrote about the job (`--output`, `--error`).
    pub fn slurm_log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.path("logs/slurm.log")).unwrap_or_default())
            .into_owned()
    }
    pub fn stdout(&self) -> Vec<u8> {
        std::fs::read(self.path("logs/stdout")).unwrap_or_default()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.path("logs/stderr")).unwrap_or_default())
            .into_owned()
    }
}

/// The name every test job is submitted as.
pub const NAME: &str = "hpcgate-test";

/// Polls until the job reaches a final phase (or `limit` passes, which fails the test).
pub fn wait_final(runner: &SlurmRunner, job: u64, limit: Duration) -> JobStatus {
    let deadline = Instant::now() + limit;
    loop {
        let status = runner.status(job, NAME).unwrap();
        if status.phase.is_final() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} not final after {limit:?}: {status:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

pub fn wait_running(runner: &SlurmRunner, job: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while runner.status(job, NAME).unwrap().phase != JobPhase::Running {
        assert!(Instant::now() < deadline, "job {job} never ran");
        thread::sleep(Duration::from_millis(100));
    }
}

/// `scontrol -o show job` as text, for checks on what Slurm recorded.
pub fn scontrol_record(job: u64) -> String {
    let out = Command::new("scontrol")
        .args(["-o", "show", "job", &job.to_string()])
        .env("SLURM_CONF", slurm_conf())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the local cluster enforces `--mem` with cgroups (`TaskPlugin=task/cgroup`), so a
/// memory hog ends as OUT_OF_MEMORY rather than as a polled kill.
pub fn memory_enforced_by_cgroup() -> bool {
    std::fs::read_to_string(slurm_conf())
        .unwrap()
        .lines()
        .any(|l| l.trim() == "TaskPlugin=task/cgroup")
}
