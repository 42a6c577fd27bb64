//! Errors of the sandbox executor: each variant names one failure and says what to do.
//!
//! A sandboxed command that fails, times out or is killed is *not* an error: that is a
//! [`super::EndReason`] inside an `Ok` result. Errors are for what prevented a run or a
//! job operation.

use std::io;
use std::path::PathBuf;

/// Why a sandbox run or a job operation could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the command is empty: give at least the program to run")]
    EmptyCommand,
    #[error("argument `{argument}` contains a NUL byte: remove it")]
    NulInArgument { argument: String },
    #[error("path `{}` must be absolute", path.display())]
    RelativePath { path: PathBuf },
    #[error("mount target `{}` is reserved by the sandbox: choose another target", target.display())]
    ReservedMountTarget { target: PathBuf },
    #[error("environment variable name `{name}` is invalid: use letters, digits and `_`")]
    InvalidEnvName { name: String },
    #[error("wall time, cpus, memory and pids limits must be greater than zero")]
    ZeroLimit,
    #[error("`{what}` is {value}, more than a sandbox takes (at most {max}); ask for less")]
    LimitTooLarge {
        what: &'static str,
        value: u64,
        max: u64,
    },
    #[error("bubblewrap not found at `{}`: install it with `apt-get install bubblewrap`", path.display())]
    BwrapMissing { path: PathBuf },
    #[error(
        "`run_as` needs the gateway to run as root: drop `run_as` or start the gateway as root"
    )]
    RunAsNeedsRoot,
    #[error("could not start the sandbox")]
    Spawn(#[source] io::Error),
    #[error("could not supervise the sandbox")]
    Monitor(#[source] io::Error),
    #[error("job directory `{}` already exists: use a fresh directory per job", path.display())]
    JobDirExists { path: PathBuf },
    #[error("job directory `{}` is visible inside the sandbox: keep job directories outside every bind", path.display())]
    JobDirInsideSandbox { path: PathBuf },
    #[error("`{}` is not a job directory (no state file): check the job id", path.display())]
    NotAJob { path: PathBuf },
    #[error("job state `{}` is unreadable: the job directory was damaged", path.display())]
    StateCorrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the job supervisor did not start: {message}")]
    SupervisorStart { message: String },
    #[error("job output `{}` is not a regular file: refusing to follow it", path.display())]
    OutputNotRegular { path: PathBuf },
    #[error("i/o on `{}` failed", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl SandboxError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> SandboxError {
        let path = path.into();
        move |source| SandboxError::Io { path, source }
    }
}
