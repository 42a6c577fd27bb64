//! What a call runs, derived once from its tool name: a builtin tool or a proxied server's
//! tool, and the policy input that names it.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::Caller;
use crate::policy::{Call, Phase, Via};
use crate::proxy::ProxiedTool;
use crate::tools::Tool;

/// What a call runs: a builtin tool or a proxied server's tool.
pub(super) enum Target {
    Builtin(Tool),
    Proxied(Arc<ProxiedTool>),
}

impl Target {
    fn name(&self) -> &str {
        match self {
            Target::Builtin(tool) => tool.name(),
            Target::Proxied(tool) => &tool.exposed_name,
        }
    }

    /// A proxied tool's `read_only` is the remote `readOnlyHint`: the server's own claim,
    /// trusted as far as whoever configured the server.
    fn read_only(&self) -> bool {
        match self {
            Target::Builtin(tool) => tool.spec().read_only,
            Target::Proxied(tool) => tool.read_only,
        }
    }

    /// Whether a call can add file bytes to its instance.
    pub(super) fn adds_bytes(&self) -> bool {
        match self {
            Target::Builtin(tool) => tool.adds_bytes(),
            Target::Proxied(tool) => !tool.read_only,
        }
    }

    /// The policy input for this target: who, how, which tool; no usage yet.
    pub(super) fn input(
        &self,
        caller: &Caller,
        via: Via,
        phase: Phase,
        arguments: Map<String, Value>,
    ) -> Call {
        let mut call = Call::new(self.name(), Value::Null);
        if let Target::Proxied(tool) = self {
            call.server = tool.server.clone();
            call.remote_tool = Some(tool.remote_name.clone());
        }
        call.phase = phase;
        call.via = via;
        call.tenant = caller.tenant.to_string();
        call.principal = caller.principal.clone();
        call.read_only = self.read_only();
        call.arguments = arguments;
        call
    }
}
