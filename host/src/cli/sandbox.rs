//! `hpcgate bwrap ID -- COMMAND…` and `hpcgate instance enter ID`: a command, or an
//! interactive shell, in an instance's sandbox with the terminal attached.
//!
//! The sandbox is the jobs' hardened spec (`[sandbox]` settings, the instance's workspace and
//! output), run by the executors' [`run_attached`]: bwrap with the caller's stdin, stdout and
//! stderr, the spec's wall time and memory limits, no controlling terminal (see there), and
//! gone when this process ends. The command is an argv, never a shell string.
//!
//! Neither is a tool, so neither goes through `Gateway::call`: both are audited as the local
//! user (a record with the command before it starts, one with the exit code after; see
//! [`super::local`] for why they are not policy-checked).

use std::process::ExitCode;

use clap::Args;
use hpcgate_executors::sandbox::{EndReason, ExitInfo, run_attached};
use serde_json::json;

use super::local::{ConfigArg, Failed, Local, exit};
use crate::audit::Outcome;
use crate::state::InstanceId;

#[derive(Debug, Args)]
pub(crate) struct BwrapArgs {
    #[command(flatten)]
    config: ConfigArg,
    id: String,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Interactive shells tried in order (the first that exists in the sandbox).
const SHELLS: [&str; 2] = ["/bin/bash", "/bin/sh"];

pub(crate) fn bwrap(args: BwrapArgs) -> anyhow::Result<ExitCode> {
    exit(
        Local::open(&args.config)
            .and_then(|local| attached(&local, "bwrap", &args.id, args.command)),
    )
}

pub(crate) fn enter(local: &Local, id: &str) -> anyhow::Result<ExitCode> {
    // The system directories are bound read-only at the same paths, so the host's shells are
    // the sandbox's.
    let shell = SHELLS
        .iter()
        .find(|s| std::path::Path::new(s).is_file())
        .ok_or_else(|| Failed("no shell (/bin/bash or /bin/sh) on this host".to_owned()))?;
    survive_ctrl_c();
    attached(
        local,
        "instance_enter",
        id,
        vec![(*shell).to_owned(), "-i".to_owned()],
    )
}

/// Ctrl-C at the terminal signals only this process: the sandbox has its own session and no
/// controlling terminal, so nothing inside can be interrupted from the keyboard. Left at its
/// default, SIGINT would end the whole `enter` session (and skip its closing audit record); a
/// handler that does nothing keeps the session (leave it with `exit` or Ctrl-D). A handler,
/// unlike an ignored disposition, is reset by `exec`, so nothing in the sandbox inherits it.
#[allow(unsafe_code)]
fn survive_ctrl_c() {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: installs an async-signal-safe handler (it does nothing and touches no memory);
    // the blocking calls it may interrupt (poll, wait) are retried by the sandbox monitor.
    unsafe {
        libc::signal(libc::SIGINT, nothing as *const () as libc::sighandler_t);
    }
}

/// Runs `command` in instance `id`'s sandbox, audited as `action`; exits with its code.
fn attached(
    local: &Local,
    action: &str,
    id: &str,
    command: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let started = local.begin(action, Some(id), Some(("command", json!(command))))?;
    let paths = InstanceId::parse(id).and_then(|parsed| {
        local
            .state()?
            .instance_paths_ambient(&local.caller.tenant, &parsed)
    });
    // The lease keeps the instance from being archived while the command runs.
    let leased = paths.and_then(|paths| Ok((paths.hold()?, paths)));
    let result = match leased {
        Ok((_lease, paths)) => {
            let spec = local
                .settings
                .fixed
                .sandbox
                .spec(paths.workspace, paths.output);
            run_attached(&spec, &command).map_err(|e| format!("{:#}", anyhow::Error::new(e)))
        }
        Err(e) => Err(e.to_string()),
    };
    let (code, outcome) = match &result {
        Ok(ended) => {
            let code = match ended.exit {
                ExitInfo::Code(code) => code,
                ExitInfo::Signal(signal) => 128 + signal,
            };
            let outcome = Outcome {
                exit_code: Some(code),
                state: (ended.reason != EndReason::Exited).then(|| reason_name(ended.reason)),
                ..Outcome::default()
            };
            (code, outcome)
        }
        Err(message) => (
            1,
            Outcome {
                error: Some(message.clone()),
                ..Outcome::default()
            },
        ),
    };
    local.end(action, Some(id), &started, outcome)?;
    match result {
        Ok(ended) if ended.reason != EndReason::Exited => Err(Failed(format!(
            "the sandbox was stopped: {} (the `[sandbox]` limits apply here as to jobs)",
            reason_name(ended.reason)
        ))
        .into()),
        Ok(_) => Ok(ExitCode::from(u8::try_from(code).unwrap_or(1))),
        Err(message) => Err(Failed(message).into()),
    }
}

fn reason_name(reason: EndReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
