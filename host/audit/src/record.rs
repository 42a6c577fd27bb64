//! The audit record: what the gateway hands to the log ([`Entry`]) and what a line holds
//! ([`Record`] = `seq`, `ts`, `prev`, the entry's fields, `hash`).
//!
//! A `call` record carries `call` (the recorded-call object, redacted) and `decision` (a
//! [`FinalDecision`]) at top level, exactly what `hpcgate policy test --calls` replays, so an
//! audit file is itself a policy test input. [`Entry::call`] is the only way to build one, so a
//! call record always has both.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::time::Timestamp;
use hpcgate_policy_sdk::Call;
use hpcgate_policy_sdk::outcome::{
    ChainOutcome, DecisionKind, FinalDecision, PolicyDecision, Verdict,
};

/// What happened. Serialised as its dotted name (`call`, `instance.created`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// A tool call, allowed, rewritten, denied or failed.
    Call,
    InstanceCreated,
    InstanceArchived,
    InstanceUnarchived,
    InstanceUpdated,
    InstanceCleaned,
    JobSubmitted,
    /// A job changed state (once per change, not once per poll).
    JobState,
    /// An admin-defined host command ran.
    HostExec,
    PoliciesReloaded,
    GatewayStarted,
    GatewayStopped,
    /// `AuditLog::open` truncated a torn last line; `detail` says what was removed.
    AuditRepaired,
    /// `hpcgate audit prune` removed old segments; `detail` says which and the new anchor.
    AuditPruned,
    /// `hpcgate tenant add|token|list` ran; `detail.action` says which (never a token or hash).
    TenantAdmin,
    /// A proxied server started for a tenant's instance; `detail.proxy`, `detail.server`.
    ProxyStarted,
    /// A proxied server was stopped; `detail.reason` = idle | archive | shutdown | overflow.
    ProxyStopped,
    /// A proxied server ended on its own; the outcome has its exit code and when.
    ProxyCrashed,
    /// A proxy's discovery failed (its tools are not offered); the outcome says why.
    ProxyDiscoveryFailed,
    /// A job call that outlived its wait became an MCP task; `detail.task_id`, `detail.job_id`.
    TaskCreated,
    /// A tenant's calls that did not run, refused over its `[audit] refusals_per_minute`
    /// and not recorded one by one; `detail` says how many, between when, by whom and why.
    RefusalsSummarised,
    /// A WebDAV lock was taken or refreshed (`detail.refreshed`): it blocks others' writes.
    /// `detail` has the path, scope, depth, timeout and a digest of its token.
    DavLocked,
    /// A WebDAV lock was given back by its holder (UNLOCK); `detail` as for `dav.locked`.
    DavUnlocked,
}

impl Event {
    pub const ALL: [Event; 23] = [
        Event::Call,
        Event::InstanceCreated,
        Event::InstanceArchived,
        Event::InstanceUnarchived,
        Event::InstanceUpdated,
        Event::InstanceCleaned,
        Event::JobSubmitted,
        Event::JobState,
        Event::HostExec,
        Event::PoliciesReloaded,
        Event::GatewayStarted,
        Event::GatewayStopped,
        Event::AuditRepaired,
        Event::AuditPruned,
        Event::TenantAdmin,
        Event::ProxyStarted,
        Event::ProxyStopped,
        Event::ProxyCrashed,
        Event::ProxyDiscoveryFailed,
        Event::TaskCreated,
        Event::RefusalsSummarised,
        Event::DavLocked,
        Event::DavUnlocked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::Call => "call",
            Event::InstanceCreated => "instance.created",
            Event::InstanceArchived => "instance.archived",
            Event::InstanceUnarchived => "instance.unarchived",
            Event::InstanceUpdated => "instance.updated",
            Event::InstanceCleaned => "instance.cleaned",
            Event::JobSubmitted => "job.submitted",
            Event::JobState => "job.state",
            Event::HostExec => "host_exec",
            Event::PoliciesReloaded => "policies.reloaded",
            Event::GatewayStarted => "gateway.started",
            Event::GatewayStopped => "gateway.stopped",
            Event::AuditRepaired => "audit.repaired",
            Event::AuditPruned => "audit.pruned",
            Event::TenantAdmin => "tenant.admin",
            Event::ProxyStarted => "proxy.started",
            Event::ProxyStopped => "proxy.stopped",
            Event::ProxyCrashed => "proxy.crashed",
            Event::ProxyDiscoveryFailed => "proxy.discovery_failed",
            Event::TaskCreated => "task.created",
            Event::RefusalsSummarised => "refusals.summarised",
            Event::DavLocked => "dav.locked",
            Event::DavUnlocked => "dav.unlocked",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown event name.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown event `{name}`; events are {}", Event::ALL.map(Event::as_str).join(", "))]
pub struct UnknownEvent {
    pub name: String,
}

impl FromStr for Event {
    type Err = UnknownEvent;

    fn from_str(name: &str) -> Result<Event, UnknownEvent> {
        Event::ALL
            .into_iter()
            .find(|e| e.as_str() == name)
            .ok_or_else(|| UnknownEvent {
                name: name.to_owned(),
            })
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Event, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// What running the call (or the event) produced. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// A job's state, for `job.state` and `job.submitted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Bytes read, written or returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Why the call failed after the policies allowed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One policy's decision as recorded: [`PolicyDecision`] in a shape that also reads back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRecord {
    pub policy: String,
    /// `sha256:<hex>` of the module that decided.
    pub module: String,
    pub decision: DecisionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For rewrite: the arguments this policy produced (redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// False for monitor-mode policies.
    pub enforced: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    pub duration_us: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
}

impl From<&PolicyDecision> for PolicyRecord {
    fn from(d: &PolicyDecision) -> PolicyRecord {
        let (decision, reason, arguments, note) = match &d.verdict {
            Verdict::Allow => (DecisionKind::Allow, None, None, None),
            Verdict::Deny { reason } => (DecisionKind::Deny, Some(reason.clone()), None, None),
            Verdict::Rewrite { arguments, note } => (
                DecisionKind::Rewrite,
                None,
                Some(arguments.clone()),
                Some(note.clone()),
            ),
        };
        PolicyRecord {
            policy: d.policy.clone(),
            module: d.module.clone(),
            decision,
            reason,
            arguments,
            note,
            enforced: d.enforced,
            fault: d.fault.clone(),
            duration_us: d.duration_us,
            logs: d.logs.clone(),
        }
    }
}

/// What the gateway appends; the log adds `seq`, `ts`, `prev` and `hash`. Field order here is
/// the order on disk (it is part of the canonical bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub event: Event,
    /// Absent for gateway-wide events; a tenant-scoped query never returns those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The recorded call (arguments redacted), for `call` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Call>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<FinalDecision>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// Event-specific facts (e.g. what `audit.repaired` removed, what `instance.updated` changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Map<String, Value>>,
}

impl Entry {
    /// A record of any event; add who and what with the builder methods.
    pub fn new(event: Event) -> Entry {
        Entry {
            event,
            tenant: None,
            principal: None,
            instance: None,
            tool: None,
            call: None,
            decision: None,
            policies: Vec::new(),
            outcome: None,
            duration_ms: None,
            detail: None,
        }
    }

    /// A `call` record: the call as the policies saw it and what the chain decided. Tenant,
    /// principal, instance and tool come from the call.
    pub fn call(call: &Call, chain: &ChainOutcome) -> Entry {
        Entry {
            tenant: Some(call.tenant.clone()),
            principal: Some(call.principal.clone()),
            instance: call.instance.clone(),
            tool: Some(call.tool.clone()),
            call: Some(call.clone()),
            decision: Some(chain.decision.clone()),
            policies: chain.policies.iter().map(PolicyRecord::from).collect(),
            ..Entry::new(Event::Call)
        }
    }

    pub fn who(mut self, tenant: &str, principal: &str) -> Entry {
        self.tenant = Some(tenant.to_owned());
        self.principal = Some(principal.to_owned());
        self
    }

    pub fn instance(mut self, instance: &str) -> Entry {
        self.instance = Some(instance.to_owned());
        self
    }

    pub fn tool(mut self, tool: &str) -> Entry {
        self.tool = Some(tool.to_owned());
        self
    }

    pub fn outcome(mut self, outcome: Outcome) -> Entry {
        self.outcome = Some(outcome);
        self
    }

    pub fn duration(mut self, duration: Duration) -> Entry {
        self.duration_ms = Some(duration.as_secs_f64() * 1000.0);
        self
    }

    pub fn detail(mut self, key: &str, value: impl Into<Value>) -> Entry {
        self.detail
            .get_or_insert_with(Map::new)
            .insert(key.to_owned(), value.into());
        self
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// 1 for the first record of the chain, then +1, with no gaps, across files.
    pub seq: u64,
    pub ts: Timestamp,
    /// The previous record's `hash`; [`super::GENESIS`] for the first.
    pub prev: String,
    #[serde(flatten)]
    pub entry: Entry,
    /// Hex sha256 of this record's canonical bytes (see [`super::canonical`]).
    pub hash: String,
}

/// Proof that a record is durable: its place and hash in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub seq: u64,
    pub hash: String,
}
