//! The gateway: one dispatch function from a tool call to its result, usable without any
//! transport (the MCP server and the CLI both call [`Gateway::call`]).
//!
//! The order is the contract and reads top to bottom in [`Gateway::call`]: resolve the tool →
//! build the policy input (host normalisation included) → policy chain → write-ahead audit of
//! the decision (nothing runs if it cannot be recorded) → deny, or run the tool with the final
//! arguments (deserialising them is the re-validation after rewrites) → audit the outcome →
//! result. Every exit path leaves an audit record.

use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::audit::{AuditLog, Entry, Event, Outcome};
use crate::config::Settings;
use crate::policy::normalize::normalize_call;
use crate::policy::{Call, Chain, DecisionKind, Phase, PolicyEngine};
use crate::state::{State, TenantName};
use crate::tools::{Context, Output, Tool, ToolError, ToolSpec};

/// Who is calling, as the transport established it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: TenantName,
    /// Token label, JWT subject, uid or local user: recorded in every audit record.
    pub principal: String,
}

/// What goes back to the client: structured content, a one-line text, and whether it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub structured: Value,
    pub text: String,
    pub is_error: bool,
}

impl CallResult {
    fn error(message: String) -> CallResult {
        CallResult {
            structured: json!({ "error": message }),
            text: message,
            is_error: true,
        }
    }
}

/// The gateway's long-lived parts.
pub struct Gateway {
    settings: Settings,
    chain: Chain,
    audit: AuditLog,
    state: State,
    _engine: PolicyEngine,
}

impl Gateway {
    /// Loads the policies, opens the state directory and the audit log.
    pub fn open(settings: Settings) -> anyhow::Result<Gateway> {
        let engine = PolicyEngine::new(settings.engine.clone())?;
        let chain = settings.build_chain(&engine)?;
        let state = State::open(&settings.state_dir)?;
        let audit = AuditLog::open(&settings.audit_dir, settings.audit.clone())?;
        Ok(Gateway {
            settings,
            chain,
            audit,
            state,
            _engine: engine,
        })
    }

    /// The tools `caller` may see: every builtin tool the list phase of the chain allows.
    pub fn tools(&self, caller: &Caller) -> Vec<ToolSpec> {
        Tool::all()
            .map(Tool::spec)
            .filter(|spec| {
                !self
                    .chain
                    .evaluate(&self.policy_input(caller, spec, Phase::List, Map::new()))
                    .is_denied()
            })
            .collect()
    }

    /// Runs one tool call through policy, executor and audit.
    pub fn call(&self, caller: &Caller, name: &str, arguments: Map<String, Value>) -> CallResult {
        let started = Instant::now();
        let Some(tool) = Tool::from_name(name) else {
            let message =
                format!("unknown tool `{name}`; call tools/list for the tools you may use");
            let record = self.outcome_record(caller, name, None, Err(&ToolError(message.clone())));
            return self.finish(
                record.duration(started.elapsed()),
                CallResult::error(message),
            );
        };
        let mut call = self.policy_input(caller, &tool.spec(), Phase::Call, arguments);
        normalize_call(&mut call);
        let decided = self.chain.evaluate(&call);
        let receipt = match self.audit.append(Entry::call(&call, &decided)) {
            Ok(receipt) => receipt,
            Err(e) => {
                return CallResult::error(format!(
                    "refused: the audit log cannot record this call ({e})"
                ));
            }
        };
        let decision = decided.decision;
        if decision.decision == DecisionKind::Deny {
            let policy = decision.policy.unwrap_or_default();
            let reason = decision.reason.unwrap_or_default();
            return CallResult::error(format!("denied by policy `{policy}`: {reason}"));
        }
        let arguments = decision.arguments.unwrap_or(call.arguments);
        let result = tool.run(&self.context(caller), arguments);
        let record = self
            .outcome_record(caller, name, call.instance.as_deref(), result.as_ref())
            .detail("decision_seq", receipt.seq)
            .duration(started.elapsed());
        let response = match result {
            Ok(output) => CallResult {
                structured: output.structured,
                text: output.summary,
                is_error: false,
            },
            Err(e) => CallResult::error(e.0),
        };
        self.finish(record, response)
    }

    /// The policy input for a builtin tool.
    fn policy_input(
        &self,
        caller: &Caller,
        spec: &ToolSpec,
        phase: Phase,
        arguments: Map<String, Value>,
    ) -> Call {
        let mut call = Call::new(spec.name, Value::Object(arguments));
        call.phase = phase;
        call.tenant = caller.tenant.to_string();
        call.principal = caller.principal.clone();
        call.read_only = spec.read_only;
        call.instance = call
            .arguments
            .get("instance_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if phase == Phase::Call
            && let Ok(instances) = self.state.count(&caller.tenant)
        {
            call.usage.insert("instances".to_owned(), instances as u64);
        }
        call
    }

    fn context<'a>(&'a self, caller: &'a Caller) -> Context<'a> {
        let quotas = self.settings.tenants.get(&caller.tenant).map(|t| &t.quotas);
        Context {
            tenant: &caller.tenant,
            state: &self.state,
            files: &self.settings.files,
            max_instances: quotas.and_then(|q| q.max_instances),
        }
    }

    /// The record of what a call did (or why it did not run), without the policy input: that
    /// is in the decision record, which replays; this one is skipped by `policy test`.
    fn outcome_record(
        &self,
        caller: &Caller,
        name: &str,
        instance: Option<&str>,
        result: Result<&Output, &ToolError>,
    ) -> Entry {
        let outcome = match result {
            Ok(output) => output.outcome.clone(),
            Err(e) => Outcome {
                error: Some(e.0.clone()),
                ..Outcome::default()
            },
        };
        let entry = Entry::new(Event::Call)
            .who(caller.tenant.as_ref(), &caller.principal)
            .tool(name)
            .outcome(outcome);
        match instance {
            Some(instance) => entry.instance(instance),
            None => entry,
        }
    }

    /// Appends the outcome record; a result that cannot be recorded is not returned as success.
    fn finish(&self, record: Entry, response: CallResult) -> CallResult {
        match self.audit.append(record) {
            Ok(_) => response,
            Err(e) => CallResult::error(format!(
                "the call ran but its outcome could not be recorded in the audit log ({e}); check its result before retrying"
            )),
        }
    }
}
