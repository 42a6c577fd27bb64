//! The local user as a gateway caller: what the CLI's instance, `bwrap` and `clean` commands
//! share with `hpcgate run` (stdio).
//!
//! The caller is the gateway's local caller ([`Gateway::local_caller`]), exactly as for stdio
//! MCP calls, and every command that maps to a tool goes through [`Gateway::dispatch`] with
//! `via = cli`, so it is policy-checked and audited like an agent's call. The few commands without a tool
//! (`unarchive`, `clean`, `enter`, `bwrap`) are audited here instead ([`Local::begin`] before
//! they act, [`Local::end`] after): they are not policy-checked, because the local user
//! already has a shell on this host and owns the state directory — a policy could not stop
//! them, the audit trail is what counts.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value};

use crate::audit::{Entry, Event, Outcome, Receipt};
use crate::config::{Environment, Settings, load_settings};
use crate::gateway::{Caller, Gateway, Request};
use crate::policy::Via;
use crate::state::{State, StateError};

/// `--config`, shared by the local commands.
#[derive(Debug, Args)]
pub(crate) struct ConfigArg {
    /// A config file layered over the defaults and `~/.config/hpcgate/config.toml`.
    #[arg(long, env = "HPCGATE_CONFIG", global = true)]
    pub config: Option<PathBuf>,
}

/// The gateway opened for the local user.
pub(crate) struct Local {
    pub settings: Settings,
    pub gateway: Gateway,
    pub caller: Caller,
}

/// A tool's or an audit step's refusal: the message is complete (says what to do).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Failed(pub String);

impl Local {
    pub fn open(config: &ConfigArg) -> anyhow::Result<Local> {
        let settings = load_settings(&Environment::from_process(config.config.clone()))?;
        let gateway = Gateway::open(settings.clone())?;
        let caller = gateway.local_caller();
        Ok(Local {
            settings,
            gateway,
            caller,
        })
    }

    /// A tool call through the one dispatch function; `Err` is the tool's error message
    /// (a policy denial reads `denied by policy …`).
    pub fn call(&self, tool: &str, arguments: Value) -> Result<Value, Failed> {
        let arguments = match arguments {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let request = Request::new(self.caller.clone(), Via::Cli, tool, arguments);
        let result = self.gateway.dispatch(&self.gateway.snapshot(), request);
        if result.is_error {
            return Err(Failed(result.text));
        }
        Ok(result.structured)
    }

    /// The state directory, for the commands without a tool.
    pub fn state(&self) -> Result<State, StateError> {
        State::open(&self.settings.fixed.state_dir)
    }

    /// Records that the local user is about to run `action` (a command without a tool);
    /// nothing may happen if this fails.
    pub fn begin(
        &self,
        action: &str,
        instance: Option<&str>,
        detail: Option<(&str, Value)>,
    ) -> Result<Receipt, Failed> {
        let mut entry = self
            .entry(Event::Call, action, instance)
            .detail("via", "cli");
        if let Some((key, value)) = detail {
            entry = entry.detail(key, value);
        }
        self.gateway.audit().append(entry).map_err(|e| {
            Failed(format!(
                "refused: the audit log cannot record `{action}` ({e}); check the state directory's disk and permissions"
            ))
        })
    }

    /// Records how `action` ended (after [`Local::begin`] returned `started`).
    pub fn end(
        &self,
        action: &str,
        instance: Option<&str>,
        started: &Receipt,
        outcome: Outcome,
    ) -> Result<(), Failed> {
        let entry = self
            .entry(Event::Call, action, instance)
            .outcome(outcome)
            .detail("decision_seq", started.seq);
        self.record(entry)
    }

    /// An event record (`instance.unarchived`, `instance.cleaned`) with the local principal.
    pub fn event(&self, event: Event, action: &str, instance: &str) -> Result<(), Failed> {
        self.record(self.entry(event, action, Some(instance)))
    }

    fn entry(&self, event: Event, action: &str, instance: Option<&str>) -> Entry {
        let entry = Entry::new(event)
            .who(self.caller.tenant.as_ref(), &self.caller.principal)
            .tool(action);
        match instance {
            Some(instance) => entry.instance(instance),
            None => entry,
        }
    }

    fn record(&self, entry: Entry) -> Result<(), Failed> {
        self.gateway.audit().append(entry).map(|_| ()).map_err(|e| {
            Failed(format!(
                "it ran but the audit log could not record it ({e}); check the state directory's disk and permissions"
            ))
        })
    }
}

/// Writes one line to stderr.
pub(crate) fn err(line: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// A command's result as an exit code: a failure is printed once, to stderr, and exits 1.
pub(crate) fn exit(result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    Ok(result.unwrap_or_else(|e| {
        err(format!("error: {e:#}"));
        ExitCode::from(1)
    }))
}
