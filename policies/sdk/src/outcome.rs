//! What a policy chain decided about one call: each policy's verdict and the final decision,
//! in the shape the audit log records and `policy test` cases expect. Plain data, shared by the
//! host's policy engine (which produces it) and the audit log (which records it), beside the
//! [`Call`](crate::Call) it is about.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One policy's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny {
        reason: String,
    },
    Rewrite {
        arguments: Map<String, Value>,
        note: String,
    },
}

/// What one policy decided about one call, as recorded in the audit log.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyDecision {
    pub policy: String,
    /// `sha256:<hex>` of the module that decided.
    pub module: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// False for monitor-mode policies.
    pub enforced: bool,
    /// Set when the policy faulted; the verdict is then a deny.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// The fault's kind in one word (`timeout`, `memory`, `trap`, …), for metrics; not
    /// recorded (the `fault` text says it).
    #[serde(skip)]
    pub fault_kind: Option<&'static str>,
    pub duration_us: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
}

/// The kind of a final decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    Allow,
    Deny,
    Rewrite,
}

/// The chain's final decision, in the shape test cases `expect` and audit records store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalDecision {
    pub decision: DecisionKind,
    /// For deny: the policy that denied; for rewrite: the last policy that rewrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For rewrite: the final arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
}

/// Everything the chain decided about one call.
#[derive(Debug, Clone, Serialize)]
pub struct ChainOutcome {
    #[serde(flatten)]
    pub decision: FinalDecision,
    pub policies: Vec<PolicyDecision>,
}

impl ChainOutcome {
    pub fn is_denied(&self) -> bool {
        self.decision.decision == DecisionKind::Deny
    }
}
