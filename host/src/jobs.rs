//! Jobs: the bridge between job records ([`crate::state`]) and the two job executors (the
//! supervised bwrap sandbox and Slurm).
//!
//! The state layer never calls an executor and the executors know nothing of tenants; this
//! module is the one place that does both, in a fixed order:
//!
//! - **submit**: record the job (`submitting`, quota checked under the tenant lock) → start it
//!   → store the handle with the first observation, or record `start_failed`. A crash between
//!   the record and the handle leaves a `submitting` record that [`Jobs::reattach`] ends as
//!   `lost` unless the sandbox job directory shows the start happened.
//! - **observe / wait / cancel**: ask the executor, then [`State::refresh`], which keeps the
//!   first final state and says whether anything changed, so each transition is audited once.
//!
//! Everything here blocks (a Slurm client call waits up to its timeout): call it from the
//! gateway's blocking bridge. Errors shown to agents never contain a host path.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hpcgate_executors::sandbox::{self, OutputStream, SandboxSpec, SupervisorCommand};
use hpcgate_executors::slurm::{self, JobSandbox, SlurmJobSpec, SlurmRunner};

use crate::audit::{Entry, Event, Outcome};
use crate::code_mode::CodeMode;
use crate::config::{SandboxSettings, SlurmSettings};
use crate::metrics::Metrics;
use crate::state::{
    ExecutorHandle, JobId, JobMode, JobRecord, NewJob, Observation, Refreshed, State, TenantName,
};

mod batch;
mod reattach;

pub(crate) use reattach::unless_starting;

/// Why a job operation failed: a message for the agent that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JobError(pub String);

impl From<crate::state::StateError> for JobError {
    fn from(e: crate::state::StateError) -> Self {
        JobError(e.to_string())
    }
}

/// Hidden subcommand under which the gateway binary becomes a job supervisor.
pub const SUPERVISE_SUBCOMMAND: &str = "__supervise";

/// Longest single wait inside a polling loop: progress is reported at least this often.
const POLL_STEP: Duration = Duration::from_millis(1000);
/// Bytes read from the end of an output stream to find its last lines.
const TAIL_WINDOW: u64 = 1 << 20;

/// The job executors as configured.
pub struct Jobs {
    sandbox: SandboxSettings,
    slurm: Option<(SlurmRunner, SlurmSettings)>,
    supervisor: SupervisorCommand,
    metrics: Arc<Metrics>,
}

/// A job whose code calls tools: through `code_mode`'s door, with `script` (`run_python`'s)
/// placed beside a local job's door ([`crate::code_mode::SANDBOX_SCRIPT`]).
pub struct WithTools<'a> {
    pub code_mode: &'a CodeMode,
    pub script: Option<&'a [u8]>,
}

/// Where a job's output streams are, host-side.
struct JobDirs {
    /// The sandbox job directory (local) or the Slurm output directory.
    dir: PathBuf,
}

impl Jobs {
    /// Executors for these settings; Slurm batch scripts are written under `state_dir`.
    pub fn new(
        sandbox: SandboxSettings,
        slurm: Option<SlurmSettings>,
        state_dir: &Path,
        supervisor: SupervisorCommand,
        metrics: Arc<Metrics>,
    ) -> Jobs {
        let slurm = slurm.map(|settings| {
            let mut runner = SlurmRunner::new(state_dir.join("slurm-scripts"));
            runner.client = settings.client.clone();
            // A job that ended is in `scontrol` for `MinJobAge` only (5 minutes by default):
            // one polled later is found in the accounting database, where the cluster has one.
            // Asked once, at the start; a controller that does not answer then leaves it off.
            runner.accounting = runner.accounting_available().unwrap_or_else(|e| {
                crate::proxy::log(&format!(
                    "Slurm did not say whether it keeps job accounting ({e}); jobs that ended more than `MinJobAge` before they are polled will show as missing until a restart finds it"
                ));
                false
            });
            (runner, settings)
        });
        Jobs {
            sandbox,
            slurm,
            supervisor,
            metrics,
        }
    }

    /// The supervisor the gateway binary provides: itself, re-executed.
    pub fn reexec_supervisor() -> io::Result<SupervisorCommand> {
        Ok(SupervisorCommand::reexec(
            std::env::current_exe()?,
            SUPERVISE_SUBCOMMAND,
        ))
    }

    pub fn slurm(&self) -> Option<&SlurmRunner> {
        self.slurm.as_ref().map(|(runner, _)| runner)
    }

    /// How long a job stopped at its wall time or by a cancel has before it is killed.
    pub fn stop_grace(&self) -> Duration {
        self.sandbox.limits.stop_grace
    }

    /// The sandbox for one instance, with `new`'s resources as its limits.
    fn instance_spec(
        &self,
        state: &State,
        tenant: &TenantName,
        new: &NewJob,
    ) -> Result<SandboxSpec, JobError> {
        let paths = state.instance_paths_ambient(tenant, &new.instance)?;
        let mut spec = self.sandbox.spec(paths.workspace, paths.output);
        let r = &new.resources;
        if let Some(cpus) = r.cpus {
            spec.limits.cpus = cpus;
        }
        if let Some(memory_mb) = r.memory_mb {
            spec.limits.memory_mb = memory_mb;
        }
        if let Some(time_limit_s) = r.time_limit_s {
            spec.limits.wall_time = Duration::from_secs(time_limit_s);
        }
        // Refused before anything is recorded.
        sandbox::validate_limits(&spec.limits).map_err(|e| JobError(sandbox_message(&e)))?;
        Ok(spec)
    }

    /// Records and starts a job; with `tools`, a job whose code can call tools through its
    /// own door (opened before the job starts, closed when it ends): a socket for a local job,
    /// a job-scoped token for the gateway's HTTP listener for a Slurm job (`[code_mode] url`,
    /// else refused before anything is recorded). The returned record
    /// is final (`start_failed`) if the executor refused it; an error means nothing was started.
    pub fn submit(
        &self,
        state: &State,
        tenant: &TenantName,
        new: NewJob,
        tools: Option<WithTools<'_>>,
    ) -> Result<Refreshed, JobError> {
        if let Some(tools) = &tools
            && new.mode == JobMode::Slurm
        {
            if tools.code_mode.url().is_none() {
                return Err(JobError(crate::code_mode::remote::no_url()));
            }
            if tools.script.is_some() {
                return Err(JobError(
                    "a script beside the door is for local jobs only".to_owned(),
                ));
            }
        }
        if new.mode == JobMode::Slurm && self.slurm.is_none() {
            return Err(JobError(
                "Slurm is not enabled on this gateway; submit with mode `local`, or ask the admin to set `[slurm] enabled = true`".to_owned(),
            ));
        }
        if new.mode == JobMode::Local && new.resources.gpus.is_some_and(|g| g > 0) {
            return Err(JobError(
                "local jobs have no GPUs; submit with mode `slurm` to get GPUs".to_owned(),
            ));
        }
        let mut spec = self.instance_spec(state, tenant, &new)?;
        // The lease keeps another process's start-up from taking this start for a crashed
        // one until the executor's answer is recorded.
        let (record, _starting) = state.new_job_starting(tenant, new)?;
        let dir = state.job_dir_ambient(tenant, &record.job_id)?;
        // Local: a socket of its own; Slurm: a token for the gateway's HTTP listener.
        let door = match (tools, record.mode) {
            (Some(WithTools { code_mode, script }), JobMode::Local) => code_mode
                .open(tenant, &record.job_id, &record.instance, &mut spec, script)
                .map(|()| Some(code_mode)),
            (Some(WithTools { code_mode, .. }), JobMode::Slurm) => code_mode
                .open_remote(tenant, &record.job_id, &record.instance, &mut spec)
                .map(|()| Some(code_mode)),
            (None, _) => Ok(None),
        };
        let clock = Instant::now();
        let started = match (door, record.mode) {
            (Err(message), _) => Err(message),
            (Ok(door), JobMode::Local) => {
                let spawned = sandbox::spawn_job(&dir, &spec, &record.command, &self.supervisor);
                match (spawned, door) {
                    (Ok(handle), door) => {
                        self.metrics.sandbox_started(clock.elapsed());
                        if let Some(code_mode) = door {
                            code_mode.watch(&record.job_id, dir.clone());
                        }
                        Ok((ExecutorHandle::Local, Observation::from(&handle.state)))
                    }
                    (Err(e), door) => {
                        if let Some(code_mode) = door {
                            code_mode.close(&record.job_id);
                        }
                        Err(sandbox_message(&e))
                    }
                }
            }
            (Ok(door), JobMode::Slurm) => {
                let submitted = self.submit_slurm(&dir, spec, &record);
                if let Some(code_mode) = door {
                    match submitted {
                        Ok(_) => code_mode.watch_remote(&record.job_id),
                        Err(_) => code_mode.revoke(&record.job_id),
                    }
                }
                submitted
            }
        };
        let refreshed = match started {
            Ok((handle, observation)) => {
                match state.set_handle(tenant, &record.job_id, handle.clone(), observation) {
                    Ok(refreshed) => refreshed,
                    // Ended meanwhile (reconciled by a process that could not see the lease):
                    // what was started must not run untracked.
                    Err(e) => {
                        let started = JobRecord {
                            handle: Some(handle),
                            status: crate::state::JobStatus::new(crate::state::JobPhase::Running),
                            finished_at: None,
                            ..record
                        };
                        let _ = self.stop_started(state, &started);
                        return Err(e.into());
                    }
                }
            }
            Err(message) => {
                state.refresh(tenant, &record.job_id, Observation::start_failed(message))?
            }
        };
        Ok(refreshed)
    }

    fn submit_slurm(
        &self,
        dir: &Path,
        mut spec: SandboxSpec,
        record: &JobRecord,
    ) -> Result<(ExecutorHandle, Observation), String> {
        let Some((runner, settings)) = &self.slurm else {
            return Err("Slurm is not enabled".to_owned());
        };
        create_private_dir(dir).map_err(|e| format!("cannot prepare the job's output ({e})"))?;
        match create_private_dir(&runner.script_dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(format!("cannot prepare the batch script directory ({e})"));
            }
            _ => {}
        }
        let r = &record.resources;
        let limit_s = r.time_limit_s.unwrap_or(spec.limits.wall_time.as_secs());
        spec.limits.wall_time = Duration::from_secs(batch::wall_time_s(
            limit_s,
            spec.limits.stop_grace.as_secs(),
        ));
        let job = SlurmJobSpec {
            job_name: job_name(&record.job_id),
            partition: settings.partition.clone(),
            account: settings.account.clone(),
            qos: settings.qos.clone(),
            cpus: r.cpus.unwrap_or(1).max(1),
            memory_mb: r.memory_mb.unwrap_or(spec.limits.memory_mb).max(1),
            time_limit: Duration::from_secs(limit_s),
            gpus: r.gpus.unwrap_or(0),
            working_dir: spec.workspace.clone(),
            output_dir: dir.to_owned(),
            command: record.command.clone(),
            sandbox: JobSandbox::Supervised {
                sandbox: Box::new(spec),
                supervisor: self.supervisor.clone(),
            },
        };
        let id = runner.submit(&job).map_err(|e| slurm_message(&e))?;
        let handle = ExecutorHandle::Slurm {
            slurm_job_id: id.id,
            cluster: id.cluster.clone(),
        };
        // The first observation is "pending": the queue answers on the next poll.
        let status = crate::state::JobStatus::new(crate::state::JobPhase::Pending);
        Ok((handle, Observation::new(status)))
    }

    /// What the executor says about the job now (`None`: nothing to ask, e.g. no handle yet).
    pub fn observe(&self, state: &State, record: &JobRecord) -> Option<Observation> {
        match &record.handle {
            None => None,
            Some(ExecutorHandle::Local) => {
                let dir = state.job_dir_ambient(&record.tenant, &record.job_id).ok()?;
                match sandbox::job_status(&dir) {
                    Ok(job) => Some(Observation::from(&job)),
                    Err(sandbox::SandboxError::NotAJob { .. }) => Some(Observation::lost(
                        "the job's supervisor state is gone; its outcome is unknown",
                    )),
                    Err(_) => None,
                }
            }
            Some(ExecutorHandle::Slurm { slurm_job_id, .. }) => {
                let (runner, _) = self.slurm.as_ref()?;
                let status = runner
                    .status(*slurm_job_id, &job_name(&record.job_id))
                    .ok()?;
                let dir = state.job_dir_ambient(&record.tenant, &record.job_id).ok();
                Some(batch::observation(&status, dir.as_deref()))
            }
        }
    }

    /// Observes the job and records what changed.
    pub fn refresh(&self, state: &State, record: JobRecord) -> Result<Refreshed, JobError> {
        if record.is_final() {
            return Ok(unchanged(record));
        }
        match self.observe(state, &record) {
            Some(observation) => Ok(state.refresh(&record.tenant, &record.job_id, observation)?),
            None => Ok(unchanged(record)),
        }
    }

    /// Waits up to `timeout` for the job to end, calling `tick(elapsed)` at least once a
    /// second, and no longer once `given_up()` (asked as often). Returns the last refresh and
    /// every transition seen on the way.
    pub fn wait(
        &self,
        state: &State,
        record: JobRecord,
        timeout: Duration,
        tick: &dyn Fn(Duration, &JobRecord),
        given_up: &dyn Fn() -> bool,
    ) -> Result<(JobRecord, Vec<JobRecord>), JobError> {
        let started = Instant::now();
        let mut transitions = Vec::new();
        let mut current = self.refresh(state, record)?;
        loop {
            if current.changed {
                transitions.push(current.record.clone());
            }
            let elapsed = started.elapsed();
            if current.record.is_final() || elapsed >= timeout || given_up() {
                return Ok((current.record, transitions));
            }
            tick(elapsed, &current.record);
            let step = (timeout - elapsed).min(POLL_STEP);
            match (
                &current.record.handle,
                state.job_dir_ambient(&current.record.tenant, &current.record.job_id),
            ) {
                (Some(ExecutorHandle::Local), Ok(dir)) => {
                    // Wakes as soon as the supervisor publishes the end.
                    let _ = sandbox::wait_job(&dir, step);
                }
                _ => std::thread::sleep(step),
            }
            current = self.refresh(state, current.record)?;
        }
    }

    /// Asks the executor to stop a job this process started whose record could not take it.
    fn stop_started(&self, state: &State, record: &JobRecord) -> Result<(), JobError> {
        match &record.handle {
            Some(ExecutorHandle::Local) => {
                // Untracked, it gets no grace: a second cancel kills at once.
                let dir = state.job_dir_ambient(&record.tenant, &record.job_id)?;
                for _ in 0..2 {
                    sandbox::cancel_job(&dir).map_err(|e| JobError(sandbox_message(&e)))?;
                }
            }
            Some(ExecutorHandle::Slurm { slurm_job_id, .. }) => {
                if let Some((runner, _)) = &self.slurm {
                    (runner.cancel(*slurm_job_id, &job_name(&record.job_id)))
                        .map_err(|e| JobError(slurm_message(&e)))?;
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Asks the executor to stop the job, then records what it says.
    pub fn cancel(&self, state: &State, record: JobRecord) -> Result<Refreshed, JobError> {
        if record.is_final() {
            return Ok(unchanged(record));
        }
        match &record.handle {
            None => {
                return Err(JobError(format!(
                    "job `{}` is still being submitted; cancel it again in a moment",
                    record.job_id
                )));
            }
            Some(ExecutorHandle::Local) => {
                let dir = state.job_dir_ambient(&record.tenant, &record.job_id)?;
                let job = sandbox::cancel_job(&dir).map_err(|e| JobError(sandbox_message(&e)))?;
                return Ok(state.refresh(
                    &record.tenant,
                    &record.job_id,
                    Observation::from(&job),
                )?);
            }
            Some(ExecutorHandle::Slurm { slurm_job_id, .. }) => {
                let Some((runner, _)) = &self.slurm else {
                    return Err(JobError(
                        "this job ran on Slurm, which is no longer enabled on this gateway"
                            .to_owned(),
                    ));
                };
                let name = job_name(&record.job_id);
                // A running supervisor is asked to stop its sandbox with its grace, once; a
                // pending job, or a second cancel, is cancelled at once.
                let dir = state.job_dir_ambient(&record.tenant, &record.job_id)?;
                let running =
                    sandbox::batch_state(&dir).is_ok_and(|s| s.phase == sandbox::JobPhase::Running);
                let asked = running
                    && sandbox::request_cancel(&dir).unwrap_or(false)
                    && runner.ask_to_stop(*slurm_job_id, &name).is_ok();
                if !asked {
                    runner
                        .cancel(*slurm_job_id, &name)
                        .map_err(|e| JobError(slurm_message(&e)))?;
                }
            }
        }
        self.refresh(state, record)
    }

    /// The last `lines` lines of a job's stdout and stderr (lossy UTF-8), or empty strings
    /// when there is no output yet.
    pub fn tails(&self, state: &State, record: &JobRecord, lines: usize) -> (String, String) {
        if lines == 0 {
            return (String::new(), String::new());
        }
        let Ok(dir) = state.job_dir_ambient(&record.tenant, &record.job_id) else {
            return (String::new(), String::new());
        };
        let dirs = JobDirs { dir };
        (
            dirs.tail(OutputStream::Stdout, lines),
            dirs.tail(OutputStream::Stderr, lines),
        )
    }
}

impl JobDirs {
    fn tail(&self, stream: OutputStream, lines: usize) -> String {
        match sandbox::tail(&self.dir, stream, TAIL_WINDOW) {
            Ok(tail) => last_lines(&String::from_utf8_lossy(&tail.data), lines),
            Err(_) => String::new(),
        }
    }
}

fn unchanged(record: JobRecord) -> Refreshed {
    Refreshed {
        record,
        changed: false,
        became_final: false,
    }
}

/// The last `n` lines of `text` (a trailing newline does not count as an empty line).
pub fn last_lines(text: &str, n: usize) -> String {
    let trimmed = text.strip_suffix('\n').unwrap_or(text);
    let start = trimmed
        .rmatch_indices('\n')
        .nth(n.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    if n == 0 {
        return String::new();
    }
    trimmed[start..].to_owned()
}

/// The Slurm job name of a job: its own id, so that the cluster's jobs say whose they are and a
/// cancel can name the job it means.
fn job_name(job_id: &JobId) -> String {
    format!("hpcgate-{job_id}")
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// A sandbox error for an agent: what went wrong, without host paths.
fn sandbox_message(e: &sandbox::SandboxError) -> String {
    use sandbox::SandboxError as E;
    match e {
        E::EmptyCommand => "the command is empty; give a program and its arguments".to_owned(),
        E::NulInArgument { .. } => "the command contains a NUL byte".to_owned(),
        E::BwrapMissing { .. } => {
            "the sandbox (bubblewrap) is not installed on the gateway host; ask the admin to run `hpcgate doctor`".to_owned()
        }
        E::ZeroLimit => "a resource limit is zero; ask for at least 1".to_owned(),
        E::LimitTooLarge { .. } => e.to_string(),
        E::Spawn(_) | E::SupervisorStart { .. } => {
            "the sandbox could not be started; ask the admin to run `hpcgate doctor`".to_owned()
        }
        _ => "the local executor failed; ask the admin to check `hpcgate doctor` and the gateway log".to_owned(),
    }
}

/// A Slurm error for an agent: Slurm's own words are kept (they name partitions and limits,
/// not host paths); the batch script path is not.
fn slurm_message(e: &slurm::SlurmError) -> String {
    use slurm::SlurmError as E;
    match e {
        E::InvalidPath { .. } | E::ScriptWrite { .. } | E::InvalidSandbox { .. } => {
            "the gateway could not prepare the batch job; ask the admin to check `hpcgate doctor`"
                .to_owned()
        }
        E::Spawn { .. } | E::CommandTimedOut { .. } => {
            "Slurm could not be reached from the gateway; retry later, or ask the admin to check `hpcgate doctor`"
                .to_owned()
        }
        _ => e.to_string(),
    }
}

/// The audit record of a job's state change.
pub fn state_event(record: &JobRecord) -> Entry {
    let mut entry = Entry::new(Event::JobState)
        .instance(record.instance.as_str())
        .outcome(job_outcome(record));
    if let Some(reason) = &record.status.reason {
        entry = entry.detail("reason", reason.clone());
    }
    if let Some(message) = &record.status.message {
        entry = entry.detail("message", message.clone());
    }
    entry
}

/// What the audit log records of a job: its id, state and exit code.
pub fn job_outcome(record: &JobRecord) -> Outcome {
    Outcome {
        exit_code: record.status.exit_code,
        job_id: Some(record.job_id.to_string()),
        state: Some(phase_name(record)),
        ..Outcome::default()
    }
}

/// A job's phase as its JSON name (`running`, `completed`, …).
pub fn phase_name(record: &JobRecord) -> String {
    serde_json::to_value(record.status.phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn last_lines_counts_lines_not_newlines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a\nb\nc\n", 10), "a\nb\nc");
        assert_eq!(last_lines("a\nb\n", 0), "");
        assert_eq!(last_lines("", 3), "");
        assert_eq!(last_lines("only", 1), "only");
    }
}
