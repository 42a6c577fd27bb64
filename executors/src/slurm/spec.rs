//! The typed request for one batch job, and the `sbatch` argv built from it.
//!
//! Every limit goes on the `sbatch` command line, each as a single `--option=value` element:
//! options on the command line override `#SBATCH` lines in the script and `SBATCH_*`
//! variables, and a value glued to its option cannot be read as another option.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{SlurmError, validate};
use crate::sandbox::{SandboxSpec, SupervisorCommand};

/// Slurm's own log of a supervised job (`--output` and `--error`): what Slurm and the
/// supervisor say about the job, a few lines. The job's streams are `stdout` and `stderr`
/// beside it.
pub const BATCH_LOG: &str = "slurm.log";

/// Longest accepted time limit (Slurm counts in minutes; one year is far beyond any partition).
pub const MAX_TIME_LIMIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// One batch job: what to run, where its output goes, and every limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJobSpec {
    /// `--job-name`; validated (see [`validate::name`]).
    pub job_name: String,
    /// `--partition`; `None` uses the cluster's default partition.
    pub partition: Option<String>,
    /// `--account`; `None` uses the user's default account.
    pub account: Option<String>,
    /// `--qos`; `None` uses the default qos.
    pub qos: Option<String>,
    /// `--cpus-per-task` of the single task (at least 1).
    pub cpus: u32,
    /// `--mem` in MiB (at least 1).
    pub memory_mb: u64,
    /// `--time`, rounded up to whole minutes (Slurm's granularity), at least one minute.
    pub time_limit: Duration,
    /// `--gres=gpu:N`; 0 passes `--gres=none`.
    pub gpus: u32,
    /// `--chdir`: the job's working directory on the compute node (absolute).
    pub working_dir: PathBuf,
    /// The job's host-side directory: it must exist and be private to the submitting user, and
    /// lie outside every sandbox mount, so the job cannot plant a symlink there (absolute, no
    /// `%`). The job's output lands in its `stdout` and `stderr`; a supervised job also keeps
    /// its request and final state there, and Slurm's log in [`BATCH_LOG`].
    pub output_dir: PathBuf,
    /// The program and its arguments, run exactly as given (never through a shell).
    pub command: Vec<String>,
    /// What the command runs inside on the compute node.
    pub sandbox: JobSandbox,
}

/// The wrapper around a job's command on the compute node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobSandbox {
    /// The normal case: `exec <supervisor> --batch <output_dir>` on the compute node, which
    /// runs the sandbox as a local job's supervisor does (the seccomp filter, the monitor)
    /// and stops it at its `output_bytes` and `wall_time`. Slurm enforces the job's own
    /// `cpus`, `memory_mb` and `time_limit`; the sandbox stays in the job's cgroup. The
    /// supervisor's program must be at the same path on the compute nodes. `run_as` is refused:
    /// a Slurm job runs as the user who submits it.
    Supervised {
        sandbox: Box<SandboxSpec>,
        supervisor: SupervisorCommand,
    },
    /// The command runs directly with the compute node's ambient authority: the job user's
    /// files, network and environment. Only for trusted admin work and tests.
    UnsandboxedAmbient,
}

impl SlurmJobSpec {
    /// Checks every user-supplied value and limit; [`super::SlurmRunner::submit`] calls this.
    pub fn validate(&self) -> Result<(), SlurmError> {
        validate::name("job_name", &self.job_name)?;
        for (field, value) in [
            ("partition", &self.partition),
            ("account", &self.account),
            ("qos", &self.qos),
        ] {
            if let Some(value) = value {
                validate::name(field, value)?;
            }
        }
        if self.cpus == 0 {
            return Err(limit("cpus", "must be at least 1"));
        }
        if self.memory_mb == 0 {
            return Err(limit("memory_mb", "must be at least 1"));
        }
        if self.time_limit.is_zero() || self.time_limit > MAX_TIME_LIMIT {
            return Err(limit("time_limit", "must be between 1 s and 365 days"));
        }
        validate::path("working_dir", &self.working_dir)?;
        validate::path("output_dir", &self.output_dir)?;
        if let JobSandbox::Supervised { sandbox, .. } = &self.sandbox {
            if sandbox.run_as.is_some() {
                return Err(SlurmError::RunAsUnsupported);
            }
            let mounts: Vec<&Path> = sandbox.host_sources().collect();
            validate::outside("output_dir", &self.output_dir, &mounts)?;
        }
        if self.command.is_empty() || self.command[0].is_empty() {
            return Err(SlurmError::InvalidCommand {
                problem: "the program is missing; give at least one argv element",
            });
        }
        if self.command.iter().any(|arg| arg.contains('\0')) {
            return Err(SlurmError::InvalidCommand {
                problem: "an argument contains a NUL byte, which no argv can carry",
            });
        }
        Ok(())
    }

    /// The files of `output_dir` Slurm writes the batch script's stdout and stderr to.
    fn slurm_output(&self) -> (&'static str, &'static str) {
        match self.sandbox {
            JobSandbox::Supervised { .. } => (BATCH_LOG, BATCH_LOG),
            JobSandbox::UnsandboxedAmbient => ("stdout", "stderr"),
        }
    }

    /// Time limit in whole minutes, rounded up, as Slurm counts it.
    pub fn time_limit_minutes(&self) -> u64 {
        self.time_limit.as_secs().div_ceil(60).max(1)
    }

    /// The `sbatch` arguments (after the program name) for this spec and a script path.
    ///
    /// Call [`Self::validate`] first; this only formats.
    pub fn sbatch_args(&self, script: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--parsable".into(),
            "--export=NONE".into(),
            "--no-requeue".into(),
            "--nodes=1".into(),
            "--ntasks=1".into(),
            format!("--job-name={}", self.job_name).into(),
            format!("--cpus-per-task={}", self.cpus).into(),
            format!("--mem={}M", self.memory_mb).into(),
            format!("--time={}", self.time_limit_minutes()).into(),
            if self.gpus == 0 {
                "--gres=none".into()
            } else {
                format!("--gres=gpu:{}", self.gpus).into()
            },
            path_arg("--chdir=", &self.working_dir),
            path_arg("--output=", &self.output_dir.join(self.slurm_output().0)),
            path_arg("--error=", &self.output_dir.join(self.slurm_output().1)),
            "--input=/dev/null".into(),
        ];
        for (option, value) in [
            ("--partition=", &self.partition),
            ("--account=", &self.account),
            ("--qos=", &self.qos),
        ] {
            if let Some(value) = value {
                args.push(format!("{option}{value}").into());
            }
        }
        // `--` ends sbatch's options: the script path can never be read as one.
        args.push("--".into());
        args.push(script.as_os_str().to_owned());
        args
    }
}

fn limit(field: &'static str, problem: &str) -> SlurmError {
    SlurmError::InvalidLimit {
        field,
        problem: problem.to_owned(),
    }
}

fn path_arg(option: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(option);
    arg.push(path.as_os_str());
    arg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SlurmJobSpec {
        SlurmJobSpec {
            job_name: "run1".to_owned(),
            partition: Some("gpu".to_owned()),
            account: None,
            qos: Some("short".to_owned()),
            cpus: 4,
            memory_mb: 8192,
            time_limit: Duration::from_secs(61),
            gpus: 1,
            working_dir: PathBuf::from("/srv/ws"),
            output_dir: PathBuf::from("/srv/jobs/1"),
            command: vec!["make".to_owned()],
            sandbox: JobSandbox::UnsandboxedAmbient,
        }
    }

    #[test]
    fn every_limit_is_one_argv_element() {
        let args = spec().sbatch_args(Path::new("/srv/scripts/a.sh"));
        let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--parsable",
                "--export=NONE",
                "--no-requeue",
                "--nodes=1",
                "--ntasks=1",
                "--job-name=run1",
                "--cpus-per-task=4",
                "--mem=8192M",
                "--time=2",
                "--gres=gpu:1",
                "--chdir=/srv/ws",
                "--output=/srv/jobs/1/stdout",
                "--error=/srv/jobs/1/stderr",
                "--input=/dev/null",
                "--partition=gpu",
                "--qos=short",
                "--",
                "/srv/scripts/a.sh",
            ]
        );
    }

    #[test]
    fn limits_are_checked() {
        let mut s = spec();
        s.gpus = 0;
        assert!(
            s.sbatch_args(Path::new("/s"))
                .contains(&"--gres=none".into())
        );
        for broken in [
            SlurmJobSpec { cpus: 0, ..spec() },
            SlurmJobSpec {
                memory_mb: 0,
                ..spec()
            },
            SlurmJobSpec {
                time_limit: Duration::ZERO,
                ..spec()
            },
            SlurmJobSpec {
                command: vec![],
                ..spec()
            },
            SlurmJobSpec {
                command: vec!["a\0b".into()],
                ..spec()
            },
        ] {
            assert!(broken.validate().is_err(), "{broken:?}");
        }
        assert!(spec().validate().is_ok());
    }

    #[test]
    fn a_supervised_job_gives_slurm_only_its_log() {
        let supervised = SlurmJobSpec {
            sandbox: JobSandbox::Supervised {
                sandbox: Box::new(SandboxSpec::new("/srv/ws", "/srv/out")),
                supervisor: SupervisorCommand::helper("/usr/libexec/hpcgate-supervisor"),
            },
            ..spec()
        };
        let args = supervised.sbatch_args(Path::new("/s"));
        assert!(args.contains(&"--output=/srv/jobs/1/slurm.log".into()));
        assert!(args.contains(&"--error=/srv/jobs/1/slurm.log".into()));
        let inside = SlurmJobSpec {
            output_dir: PathBuf::from("/srv/ws/logs"),
            ..supervised
        };
        assert!(matches!(
            inside.validate(),
            Err(SlurmError::InvalidPath {
                field: "output_dir",
                ..
            })
        ));
    }
}
