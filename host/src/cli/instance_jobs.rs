//! `hpcgate instance run|status|jobs|cancel`: the job tools for the local user.
//!
//! `run` passes the command after `--` to `submit_job` as an argv array, element by element:
//! the words arrive exactly as the user's shell quoted them and are never joined into a shell
//! string (joining them with spaces would lose the quoting). A shell, if wanted, is asked
//! for explicitly: `-- /bin/sh -c 'a | b'`.
//!
//! The exit code of `run` and `status` is the job's: its exit code when it ended (1 when it
//! failed without one, e.g. cancelled or timed out), 0 while it still runs (detached).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::instance::PageArgs;
use super::local::{Local, err};
use super::out;

#[derive(Debug, Subcommand)]
pub(crate) enum JobCommand {
    /// Run a command in an instance: `hpcgate instance run ID -- PROGRAM ARGS...`.
    Run {
        id: String,
        /// Submit to Slurm instead of the local sandbox.
        #[arg(long)]
        slurm: bool,
        #[command(flatten)]
        wait: WaitArgs,
        /// A resource, `cpus`, `memory_mb`, `time_limit_s` or `gpus` = an integer (repeatable).
        #[arg(short = 'r', long = "resource", value_name = "KEY=VALUE", value_parser = parse_resource)]
        resources: Vec<(String, u64)>,
        /// The program and its arguments, after `--`; passed on exactly, never through a shell.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Show a job's state and output; `--timeout` waits for it to end.
    Status {
        id: String,
        job: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// List an instance's jobs, newest first.
    Jobs {
        id: String,
        #[command(flatten)]
        page: PageArgs,
        #[arg(long)]
        json: bool,
    },
    /// Stop a job.
    Cancel { id: String, job: String },
}

#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// Seconds to wait for the job to end (`run`: default 60; `status`: default 0).
    #[arg(long, short)]
    timeout: Option<u64>,
    /// Cancel the job if it still runs when the wait ends.
    #[arg(long)]
    no_detach: bool,
    /// Trailing lines of stdout and stderr to print (default 50).
    #[arg(long)]
    tail: Option<usize>,
    /// Print the job as JSON.
    #[arg(long)]
    json: bool,
}

impl WaitArgs {
    fn add_to(&self, mut arguments: Value) -> Value {
        if let Some(timeout) = self.timeout {
            arguments["timeout"] = json!(timeout);
        }
        if self.no_detach {
            arguments["detach"] = json!(false);
        }
        if let Some(tail) = self.tail {
            arguments["tail"] = json!(tail);
        }
        arguments
    }
}

const RESOURCES: [&str; 4] = ["cpus", "memory_mb", "time_limit_s", "gpus"];

fn parse_resource(text: &str) -> Result<(String, u64), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE, e.g. `-r cpus=4`"))?;
    if !RESOURCES.contains(&key) {
        return Err(format!(
            "unknown resource `{key}`; use {}",
            RESOURCES.join(", ")
        ));
    }
    let value = value
        .parse()
        .map_err(|_| format!("resource `{key}` must be a whole number, got `{value}`"))?;
    Ok((key.to_owned(), value))
}

pub(crate) fn run(local: &Local, command: JobCommand) -> anyhow::Result<ExitCode> {
    match command {
        JobCommand::Run {
            id,
            slurm,
            wait,
            resources,
            command,
        } => {
            let mut arguments = json!({
                "instance_id": id,
                "command": command,
                "mode": if slurm { "slurm" } else { "local" },
            });
            if !resources.is_empty() {
                let map: Map<String, Value> =
                    resources.into_iter().map(|(k, v)| (k, json!(v))).collect();
                arguments["resources"] = Value::Object(map);
            }
            let result = local.call("submit_job", wait.add_to(arguments))?;
            Ok(show_job(&result["job"], wait.json))
        }
        JobCommand::Status { id, job, wait } => {
            let arguments = wait.add_to(json!({"instance_id": id, "job_id": job}));
            let result = local.call("poll_job", arguments)?;
            Ok(show_job(&result["job"], wait.json))
        }
        JobCommand::Jobs { id, page, json } => {
            let result = local.call("list_jobs", page.into_json(json!({"instance_id": id})))?;
            list(&result, json);
            Ok(ExitCode::SUCCESS)
        }
        JobCommand::Cancel { id, job } => {
            let result = local.call("cancel_job", json!({"instance_id": id, "job_id": job}))?;
            show_job(&result["job"], false);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Prints a job (status lines and the stdout tail to stdout, the stderr tail to stderr) and
/// returns the exit code that stands for it.
fn show_job(job: &Value, json: bool) -> ExitCode {
    let code = exit_code(job);
    if json {
        out(serde_json::to_string_pretty(job).unwrap_or_default());
        return code;
    }
    let status = job["status"].as_str().unwrap_or("unknown");
    out(format!(
        "Job {}: {status}",
        job["job_id"].as_str().unwrap_or("?")
    ));
    if job["cancelled_at_end_of_wait"] == true {
        out("Note: cancelled because it still ran when the wait ended (--no-detach)");
    }
    if let Some(message) = job["message"].as_str() {
        out(format!("Note: {message}"));
    }
    if let Some(code) = job["exit_code"].as_i64() {
        out(format!("Exit code: {code}"));
    } else if let Some(signal) = job["signal"].as_i64() {
        out(format!("Signal: {signal}"));
    }
    if job["final"] != true {
        out(format!(
            "Still running; follow it with `hpcgate instance status {} {} --timeout 60`",
            job["instance_id"].as_str().unwrap_or("?"),
            job["job_id"].as_str().unwrap_or("?")
        ));
    }
    if let Some(tail) = job["stdout_tail"].as_str().filter(|t| !t.is_empty()) {
        out(tail);
    }
    if let Some(tail) = job["stderr_tail"].as_str().filter(|t| !t.is_empty()) {
        err(tail);
    }
    code
}

/// The job's exit code when it ended (1 if it did not succeed and has none), 0 while it runs.
fn exit_code(job: &Value) -> ExitCode {
    if job["final"] != true {
        return ExitCode::SUCCESS;
    }
    let completed = job["status"] == "completed";
    match job["exit_code"].as_i64() {
        Some(0) if !completed => ExitCode::from(1),
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None if completed => ExitCode::SUCCESS,
        None => ExitCode::from(1),
    }
}

fn list(result: &Value, json: bool) {
    if json {
        out(serde_json::to_string_pretty(result).unwrap_or_default());
        return;
    }
    let jobs = result["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        out("No jobs.");
        return;
    }
    for job in &jobs {
        let command: Vec<&str> = job["command"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let command: String = display_command(&command).chars().take(60).collect();
        out(format!(
            "{:<20}  {:<12}  {command}",
            job["job_id"].as_str().unwrap_or("?"),
            job["status"].as_str().unwrap_or("?")
        ));
    }
}

/// An argv for reading: a `/bin/sh -c` line as written, other words quoted when needed.
fn display_command(argv: &[&str]) -> String {
    if let ["/bin/sh", "-c", line] = argv {
        return (*line).to_owned();
    }
    let quote = |word: &&str| {
        let plain = !word.is_empty()
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
        if plain {
            (*word).to_owned()
        } else {
            format!("'{}'", word.replace('\'', r"'\''"))
        }
    };
    argv.iter().map(quote).collect::<Vec<_>>().join(" ")
}
