//! Job tools: `submit_job`, `run_python`, `poll_job`, `list_jobs`, `cancel_job`. The executors
//! are behind [`crate::jobs::Jobs`]; this file is arguments, results and audit events.
//!
//! With `tools = true` (the default of `run_python`) a local job's code can call hpcgate tools
//! through its own door ([`crate::code_mode`]): every inner call judged and audited as the job.
//!
//! `command` is a string (run as `/bin/sh -c <command>` inside the sandbox: the shell runs in
//! the sandbox, never on the host) or an argv array (run exactly). `timeout`
//! is how long to wait for the end, not a run-time limit: that is `resources.time_limit_s`.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::results::{Job, JobList, JobResult};
use super::{
    Context, Output, Progress, ToolError, ToolSpec, output_schema, parse, schema, tool_family,
};
use crate::audit::{Entry, Event, Outcome};
use crate::jobs::{job_outcome, phase_name, state_event};
use crate::state::{JobId, JobMode, JobRecord, NewJob, PageRequest, Resources};

mod python;
use python::run_python;

tool_family! {
    /// The job tools.
    JobTool {
        SubmitJob => "submit_job",
        RunPython => "run_python",
        PollJob => "poll_job",
        ListJobs => "list_jobs",
        CancelJob => "cancel_job",
    }
}

/// Longest wait one call may ask for, seconds.
pub const MAX_WAIT_S: u64 = 3600;
const DEFAULT_SUBMIT_WAIT_S: u64 = 60;
/// The wait when the client takes a task instead (its `timeout` left out): it follows the job
/// with `tasks/get`, and an answer within common client request timeouts (the TypeScript SDK's
/// is 60 s) keeps a client that gives up on a long call from losing the task, and resubmitting.
const DEFAULT_TASK_WAIT_S: u64 = 5;
const DEFAULT_TAIL_LINES: usize = 50;
const MAX_TAIL_LINES: usize = 1000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
enum Command {
    /// Run by `/bin/sh -c` inside the sandbox.
    Shell(String),
    /// A program and its arguments, run exactly as given.
    Argv(Vec<String>),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Local,
    Slurm,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ResourceArgs {
    cpus: Option<u32>,
    memory_mb: Option<u64>,
    /// The job is stopped after this many seconds.
    time_limit_s: Option<u64>,
    gpus: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Submit {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    /// A shell command line (run by /bin/sh inside the sandbox) or an argv array.
    command: Command,
    /// `local` (a sandbox on the gateway host, default) or `slurm` (a batch job).
    mode: Option<Mode>,
    /// Seconds to wait for the job to end before returning (default 60, or 5 for a client
    /// that takes a task unless `detach` is false; at most 3600; 0 returns at once). Not a run-time limit: see `resources.time_limit_s`.
    timeout: Option<u64>,
    /// If the job still runs when the wait ends: keep it running (true, default) or cancel it.
    detach: Option<bool>,
    /// Trailing lines of stdout and stderr to return (default 50, at most 1000).
    tail: Option<usize>,
    /// Resources for the job; site policy may lower or refuse them.
    resources: Option<ResourceArgs>,
    /// Let the job's code call hpcgate tools (`import hpcgate_tools`, `hpcgate-call`), each
    /// call checked by policy and audited as this job (default false; a Slurm job needs the
    /// admin's `[code_mode] url`).
    tools: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunPython {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    /// Python 3 source, run by `python3` in the instance's sandbox (working directory
    /// /workspace). With tools, `import hpcgate_tools as t` gives one function per tool
    /// (`t.read_file(path="x")` returns the structured result; a refusal raises `ToolError`).
    code: String,
    /// Seconds to wait for the run to end before returning (default 60, or 5 for a client
    /// that takes a task unless `detach` is false; at most 3600; 0 returns at once). Not a run-time limit: see `resources.time_limit_s`.
    timeout: Option<u64>,
    /// Let the code call hpcgate tools (default true).
    tools: Option<bool>,
    /// If the run still goes on when the wait ends: keep it running (true, default) or cancel it.
    detach: Option<bool>,
    /// Trailing lines of stdout and stderr to return (default 50, at most 1000).
    tail: Option<usize>,
    /// Resources for the run; site policy may lower or refuse them.
    resources: Option<ResourceArgs>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Poll {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    job_id: String,
    /// Seconds to wait for the job to end (default 0: look and return).
    timeout: Option<u64>,
    /// If the job still runs when the wait ends: keep it (true, default) or cancel it.
    detach: Option<bool>,
    /// Trailing lines of stdout and stderr to return (default 50, at most 1000).
    tail: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct List {
    /// Only this instance's jobs (live or archived); all of yours when absent.
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: Option<String>,
    /// At most this many (default 15, at most 500).
    limit: Option<usize>,
    offset: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Cancel {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    job_id: String,
    /// Trailing lines of stdout and stderr to return (default 50, at most 1000).
    tail: Option<usize>,
}

pub(super) fn spec(tool: JobTool) -> ToolSpec {
    let spec = |description, input_schema| {
        let output_schema = match tool {
            JobTool::ListJobs => output_schema::<JobList>(),
            JobTool::SubmitJob | JobTool::RunPython | JobTool::PollJob | JobTool::CancelJob => {
                output_schema::<JobResult>()
            }
        };
        ToolSpec::new(tool.name(), description, input_schema, output_schema)
    };
    match tool {
        JobTool::SubmitJob => spec(
            "Run a command in an instance: locally in a sandbox or as a Slurm batch job. Waits up to `timeout` seconds and returns the state with the last lines of output; poll_job continues.",
            schema::<Submit>(),
        ),
        JobTool::RunPython => spec(
            "Run Python code in an instance's sandbox as a local job; with `tools` (default) the code can call these tools itself (`import hpcgate_tools as t`), each call checked by policy and audited. Waits up to `timeout` seconds and returns the state with the last lines of output; poll_job continues.",
            schema::<RunPython>(),
        ),
        JobTool::PollJob => spec(
            "The state and latest output of a job; waits up to `timeout` seconds for it to end.",
            schema::<Poll>(),
        )
        .idempotent(),
        JobTool::ListJobs => spec("List your jobs, newest first.", schema::<List>()).read_only(),
        JobTool::CancelJob => spec(
            "Stop a job: its processes get SIGTERM and a grace to save their work before the kill, so it may come back still running (poll it); cancelling it again kills it at once. A finished job is left as it is.",
            schema::<Cancel>(),
        )
        .destructive(),
    }
}

pub(super) fn run(
    tool: JobTool,
    cx: &Context<'_>,
    arguments: Map<String, Value>,
) -> Result<Output, ToolError> {
    match tool {
        JobTool::SubmitJob => submit_job(cx, parse(tool.name(), arguments)?),
        JobTool::RunPython => run_python(cx, parse(tool.name(), arguments)?),
        JobTool::PollJob => poll_job(cx, parse(tool.name(), arguments)?),
        JobTool::ListJobs => list_jobs(cx, parse(tool.name(), arguments)?),
        JobTool::CancelJob => cancel_job(cx, parse(tool.name(), arguments)?),
    }
}

fn submit_job(cx: &Context<'_>, args: Submit) -> Result<Output, ToolError> {
    let instance = cx.instance()?.clone();
    let command = match args.command {
        Command::Shell(line) if line.trim().is_empty() => {
            return Err(ToolError::new(
                "`command` is empty; give a shell command line or an argv array".to_owned(),
            ));
        }
        Command::Shell(line) => vec!["/bin/sh".to_owned(), "-c".to_owned(), line],
        Command::Argv(argv) => argv,
    };
    let mode = match args.mode {
        Some(Mode::Slurm) => JobMode::Slurm,
        Some(Mode::Local) | None => JobMode::Local,
    };
    let new = new_job(cx, instance, mode, command, args.resources);
    let wait = Wait::new(
        args.timeout.unwrap_or(default_wait(cx, args.detach)),
        args.detach,
        args.tail,
    )?;
    start(cx, new, &wait, args.tools.unwrap_or(false), None)
}

/// How long `submit_job` and `run_python` wait when their `timeout` is left out: shorter for
/// a client that takes a task, when the job may outlive the wait (`detach: false` cancels it
/// at the end, and then no task is made).
fn default_wait(cx: &Context<'_>, detach: Option<bool>) -> u64 {
    if cx.accepts_task && detach != Some(false) {
        DEFAULT_TASK_WAIT_S
    } else {
        DEFAULT_SUBMIT_WAIT_S
    }
}

fn new_job(
    cx: &Context<'_>,
    instance: crate::state::InstanceId,
    mode: JobMode,
    command: Vec<String>,
    resources: Option<ResourceArgs>,
) -> NewJob {
    let r = resources.unwrap_or_default();
    NewJob {
        instance,
        mode,
        command,
        resources: Resources {
            cpus: r.cpus,
            memory_mb: r.memory_mb,
            time_limit_s: r.time_limit_s,
            gpus: r.gpus,
        },
        max_running_jobs: cx.quotas.max_running_jobs,
    }
}

/// Checks the space quotas, starts the job (with its door when `tools`, and `script` beside
/// it), records it, waits.
fn start(
    cx: &Context<'_>,
    new: NewJob,
    wait: &Wait,
    tools: bool,
    script: Option<&[u8]>,
) -> Result<Output, ToolError> {
    // A running job cannot be stopped from filling its areas; an area already past
    // its quota refuses new jobs.
    super::check_space(cx, &new.instance, super::Area::Workspace, 0)?;
    super::check_space(cx, &new.instance, super::Area::Output, 0)?;
    let door = tools.then_some(crate::jobs::WithTools {
        code_mode: cx.code_mode,
        script,
    });
    let submitted = cx.jobs.submit(cx.state, cx.tenant, new, door)?;
    let record = submitted.record;
    let submitted_event = Entry::new(Event::JobSubmitted)
        .instance(record.instance.as_str())
        .outcome(job_outcome(&record))
        .detail("mode", mode_name(record.mode))
        .detail("command", record.command.clone());
    cx.record(if tools {
        submitted_event.detail("tools", true)
    } else {
        submitted_event
    });
    if submitted.changed {
        cx.record(state_event(&record));
    }
    // The job runs from here on: its record must not wait for the end of the wait.
    if !wait.timeout.is_zero() {
        cx.record_now();
    }
    finish(cx, record, wait, "submitted")
}

fn poll_job(cx: &Context<'_>, args: Poll) -> Result<Output, ToolError> {
    let record = lookup(cx, &args.job_id)?;
    let wait = Wait::new(args.timeout.unwrap_or(0), args.detach, args.tail)?;
    finish(cx, record, &wait, "job")
}

fn list_jobs(cx: &Context<'_>, args: List) -> Result<Output, ToolError> {
    let page = PageRequest::new(
        args.limit.unwrap_or(crate::state::DEFAULT_LIMIT),
        args.offset.unwrap_or(0),
    )?;
    let mut page = cx.state.list_jobs(cx.tenant, cx.instance, page)?;
    for record in &mut page.items {
        let refreshed = cx.jobs.refresh(cx.state, record.clone())?;
        if refreshed.changed {
            cx.record(state_event(&refreshed.record));
        }
        *record = refreshed.record;
    }
    let mut summary = page.summary("jobs");
    for r in &page.items {
        summary.push_str(&format!("\n{}", one_line(r)));
    }
    let result = JobList {
        jobs: page.items.iter().map(Job::new).collect(),
        total: page.total,
        offset: page.offset,
    };
    Ok(Output::new(&result, summary, Outcome::default()))
}

fn cancel_job(cx: &Context<'_>, args: Cancel) -> Result<Output, ToolError> {
    let record = lookup(cx, &args.job_id)?;
    let was_final = record.is_final();
    let cancelled = cx.jobs.cancel(cx.state, record)?;
    if cancelled.changed {
        cx.record(state_event(&cancelled.record));
    }
    let wait = Wait::new(0, None, args.tail)?;
    let verb = if was_final {
        "already finished"
    } else {
        "cancel requested"
    };
    finish(cx, cancelled.record, &wait, verb)
}

/// How long to wait, what to do if the job still runs, how much output to return.
struct Wait {
    timeout: Duration,
    detach: bool,
    tail: usize,
}

impl Wait {
    fn new(timeout_s: u64, detach: Option<bool>, tail: Option<usize>) -> Result<Wait, ToolError> {
        if timeout_s > MAX_WAIT_S {
            return Err(ToolError::new(format!(
                "`timeout` is at most {MAX_WAIT_S} seconds; wait in several poll_job calls"
            )));
        }
        let tail = tail.unwrap_or(DEFAULT_TAIL_LINES);
        if tail > MAX_TAIL_LINES {
            return Err(ToolError::new(format!(
                "`tail` is at most {MAX_TAIL_LINES} lines; read the rest from /output"
            )));
        }
        Ok(Wait {
            timeout: Duration::from_secs(timeout_s),
            detach: detach.unwrap_or(true),
            tail,
        })
    }
}

/// Beyond a stopped job's grace, for its supervisor to kill it and record its end.
const STOP_SLACK: Duration = Duration::from_secs(5);

/// Waits as asked (reporting progress), cancels if asked, and builds the result.
fn finish(
    cx: &Context<'_>,
    record: JobRecord,
    wait: &Wait,
    verb: &str,
) -> Result<Output, ToolError> {
    let total = wait.timeout.as_secs_f64();
    let tick = |elapsed: Duration, r: &JobRecord| {
        (cx.progress)(Progress {
            progress: elapsed.as_secs_f64(),
            total: Some(total),
            message: format!("job `{}` {}", r.job_id, phase_name(r)),
        });
    };
    let cancelled = || cx.cancelled();
    let (mut record, transitions) =
        (cx.jobs).wait(cx.state, record, wait.timeout, &tick, &cancelled)?;
    for r in &transitions {
        cx.record(state_event(r));
    }
    let mut cancelled_at_end = false;
    if !record.is_final() && !wait.detach {
        // The call leaves no job behind: stopped, waited for through its grace, then killed.
        let stop = |record| -> Result<JobRecord, ToolError> {
            let stopped = cx.jobs.cancel(cx.state, record)?;
            if stopped.changed {
                cx.record(state_event(&stopped.record));
            }
            Ok(stopped.record)
        };
        record = stop(record)?;
        if !record.is_final() {
            // Progress goes on (at the end of the wait asked for) while the job stops.
            let stopping = |_: Duration, r: &JobRecord| {
                (cx.progress)(Progress {
                    progress: total,
                    total: Some(total),
                    message: format!("job `{}` stopping, within its grace", r.job_id),
                });
            };
            let grace = cx.jobs.stop_grace() + STOP_SLACK;
            let (waited, transitions) =
                (cx.jobs).wait(cx.state, record, grace, &stopping, &cancelled)?;
            for r in &transitions {
                cx.record(state_event(r));
            }
            record = waited;
            // A client that gave up leaves the job to its supervisor, which kills it when its
            // grace is over: killed here, it would have had no grace.
            if !record.is_final() && !cancelled() {
                record = stop(record)?;
            }
        }
        cancelled_at_end = true;
    }
    let (stdout, stderr) = cx.jobs.tails(cx.state, &record, wait.tail);
    let job = Job {
        stdout_tail: Some(stdout),
        stderr_tail: Some(stderr),
        cancelled_at_end_of_wait: cancelled_at_end,
        ..Job::new(&record)
    };
    Ok(Output::new(
        &JobResult { job },
        format!("{verb}: {}", one_line(&record)),
        job_outcome(&record),
    ))
}

/// The call's instance's job `job_id`.
fn lookup(cx: &Context<'_>, job_id: &str) -> Result<JobRecord, ToolError> {
    let job = JobId::parse(job_id)?;
    Ok(cx.state.job(cx.tenant, cx.instance()?, &job)?)
}

fn mode_name(mode: JobMode) -> &'static str {
    match mode {
        JobMode::Local => "local",
        JobMode::Slurm => "slurm",
    }
}

/// `job `id` [local] completed (exit 0) — make test`.
fn one_line(record: &JobRecord) -> String {
    let mut line = format!(
        "job `{}` [{}] {}",
        record.job_id,
        mode_name(record.mode),
        phase_name(record)
    );
    if let Some(code) = record.status.exit_code {
        line.push_str(&format!(" (exit {code})"));
    } else if let Some(signal) = record.status.signal {
        line.push_str(&format!(" (signal {signal})"));
    }
    if let Some(message) = &record.status.message {
        line.push_str(&format!(": {message}"));
    }
    let command = match record.command.as_slice() {
        [sh, c, line] if sh == "/bin/sh" && c == "-c" => line.clone(),
        argv => argv.join(" "),
    };
    let command: String = command.chars().take(80).collect();
    line.push_str(&format!(" — {command}"));
    line
}
