//! Cluster tools: `cluster_status` (Slurm partitions and queue, plus this gateway's local
//! executor) and `host_exec` (an admin-defined host command, chosen by key — never a command
//! line from the agent).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::results::{
    ClusterStatus, HostCommandInfo, HostCommands, HostExecResult, HostRan, YourJobs,
};
use super::{Context, Output, ToolError, ToolSpec, output_schema, parse, schema, tool_family};
use crate::audit::{Entry, Event, Outcome};
use hpcgate_executors::host;

tool_family! {
    /// The cluster tools.
    ClusterTool {
        ClusterStatus => "cluster_status",
        HostExec => "host_exec",
    }
}

/// Most bytes of a host command's stdout or stderr returned (the rest is counted, not kept).
const MAX_HOST_OUTPUT: usize = 64 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Status {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HostExec {
    /// The key of an admin-defined command; omit it to list the keys.
    command: Option<String>,
}

pub(super) fn spec(tool: ClusterTool) -> ToolSpec {
    let spec = |description, input_schema| {
        let output_schema = match tool {
            ClusterTool::ClusterStatus => output_schema::<ClusterStatus>(),
            ClusterTool::HostExec => output_schema::<HostExecResult>(),
        };
        ToolSpec::new(tool.name(), description, input_schema, output_schema)
    };
    match tool {
        ClusterTool::ClusterStatus => spec(
            "Cluster load: Slurm partitions with idle/allocated CPUs and GPUs and the queue depth, and your running jobs.",
            schema::<Status>(),
        )
        .read_only(),
        ClusterTool::HostExec => spec(
            "Run an admin-defined host command by key (no arguments); without `command`, list the keys.",
            schema::<HostExec>(),
        ),
    }
}

pub(super) fn run(
    tool: ClusterTool,
    cx: &Context<'_>,
    arguments: Map<String, Value>,
) -> Result<Output, ToolError> {
    match tool {
        ClusterTool::ClusterStatus => cluster_status(cx, parse(tool.name(), arguments)?),
        ClusterTool::HostExec => host_exec(cx, parse(tool.name(), arguments)?),
    }
}

fn cluster_status(cx: &Context<'_>, _: Status) -> Result<Output, ToolError> {
    let mine = cx.state.running_jobs(cx.tenant, None)?;
    let local = mine
        .iter()
        .filter(|r| r.mode == crate::state::JobMode::Local)
        .count();
    let (slurm, line) = match cx.jobs.slurm() {
        None => (None, "Slurm is not enabled; local jobs only".to_owned()),
        Some(runner) => match runner.cluster_status() {
            Ok(status) => {
                let idle: u32 = status.partitions.iter().map(|p| p.cpus.idle).sum();
                let total: u32 = status.partitions.iter().map(|p| p.cpus.total).sum();
                let line = format!(
                    "Slurm: {} partition(s), {idle}/{total} CPUs idle, {} running and {} pending jobs",
                    status.partitions.len(),
                    status.running_jobs,
                    status.pending_jobs
                );
                (Some(status.into()), line)
            }
            Err(e) => {
                return Err(ToolError::new(format!(
                    "cannot read the Slurm cluster's state: {e}"
                )));
            }
        },
    };
    let result = ClusterStatus {
        slurm,
        yours: YourJobs {
            unfinished_jobs: mine.len(),
            unfinished_local_jobs: local,
        },
    };
    let summary = format!("{line}; you have {} unfinished job(s)", mine.len());
    Ok(Output::new(&result, summary, Outcome::default()))
}

fn host_exec(cx: &Context<'_>, args: HostExec) -> Result<Output, ToolError> {
    let Some(key) = args.command else {
        let commands = cx
            .host_commands
            .iter()
            .map(|(k, c)| {
                let description = c.description.clone();
                (k.clone(), HostCommandInfo { description })
            })
            .collect();
        let result = HostExecResult::Commands(HostCommands { commands });
        let summary = if cx.host_commands.is_empty() {
            "no host commands are configured".to_owned()
        } else {
            let keys: Vec<&str> = cx.host_commands.keys().map(String::as_str).collect();
            format!("host commands: {}", keys.join(", "))
        };
        return Ok(Output::new(&result, summary, Outcome::default()));
    };
    let Some(command) = cx.host_commands.get(&key) else {
        let keys: Vec<&str> = cx.host_commands.keys().map(String::as_str).collect();
        let available = if keys.is_empty() {
            "none are configured".to_owned()
        } else {
            format!("available: {}", keys.join(", "))
        };
        return Err(ToolError::new(format!(
            "unknown host command `{key}`; {available}"
        )));
    };
    let spec = host::HostCommand {
        argv: command.argv.clone(),
        timeout: command.timeout,
        max_output: MAX_HOST_OUTPUT,
    };
    let ran = host::run_ambient(&spec)
        .map_err(|e| ToolError::new(format!("host command `{key}` could not run: {e}")))?;
    let outcome = Outcome {
        exit_code: ran.exit_code,
        bytes: Some(ran.stdout_bytes),
        ..Outcome::default()
    };
    cx.record(
        Entry::new(Event::HostExec)
            .outcome(outcome.clone())
            .detail("key", key.clone())
            .detail("argv", command.argv.clone())
            .detail("timed_out", ran.timed_out),
    );
    let status = match (ran.timed_out, ran.exit_code) {
        (true, _) => format!(
            "timed out after {} s and was killed",
            command.timeout.as_secs()
        ),
        (false, Some(code)) => format!("exit {code}"),
        (false, None) => "killed by a signal".to_owned(),
    };
    let elapsed = (ran.elapsed.as_secs_f64() * 100.0).round() / 100.0;
    let summary = format!("host:{key} {status} in {elapsed} s");
    let result = HostExecResult::Ran(HostRan {
        command: key,
        exit_code: ran.exit_code,
        timed_out: ran.timed_out,
        elapsed_s: elapsed,
        stdout: ran.stdout,
        stderr: ran.stderr,
        stdout_truncated: ran.stdout_bytes as usize > MAX_HOST_OUTPUT,
    });
    Ok(Output::new(&result, summary, outcome))
}
