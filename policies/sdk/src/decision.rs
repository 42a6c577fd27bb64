//! What a policy answers.

use serde_json::{Map, Value};

/// A policy's answer to one call. A denial is a value, not an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Allow,
    /// The reason is shown to the agent: say what was refused and what to do instead.
    Deny {
        reason: String,
    },
    /// Replace the arguments seen by later policies and by the executor.
    Rewrite {
        arguments: Map<String, Value>,
        note: String,
    },
}

impl Decision {
    pub fn allow() -> Self {
        Decision::Allow
    }

    pub fn deny(reason: impl Into<String>) -> Self {
        Decision::Deny {
            reason: reason.into(),
        }
    }

    pub fn rewrite(arguments: Map<String, Value>, note: impl Into<String>) -> Self {
        Decision::Rewrite {
            arguments,
            note: note.into(),
        }
    }

    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow)
    }

    pub fn is_deny(&self) -> bool {
        matches!(self, Decision::Deny { .. })
    }
}
