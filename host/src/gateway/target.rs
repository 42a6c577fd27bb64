//! What a call runs, derived once from its tool name: a builtin tool or a proxied server's
//! tool, and the policy input that names it.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Caller, Gateway};
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

impl Gateway {
    /// Whether the policies would let `caller` make this call now: asked of the chain alone,
    /// nothing run or recorded, and without the usage counters (read as none). For a door
    /// that must not start what a later step of the same request would be refused (a WebDAV
    /// overwrite, which ends by deleting what it set aside); the step itself is still decided.
    pub fn would_allow(
        &self,
        caller: &Caller,
        via: Via,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> bool {
        let live = self.snapshot();
        let instance = arguments.get("instance_id").and_then(Value::as_str);
        let instance = instance.map(str::to_owned);
        let Some(target) = self.target(caller, instance.as_deref(), tool, None) else {
            return false;
        };
        let mut input = target.input(caller, via, Phase::Call, arguments);
        input.instance = instance;
        let judge = || !live.chain.evaluate(&input).is_denied();
        // A WASI policy's functions block on a Tokio runtime, which panics on a thread that
        // drives one (WebDAV asks from its handlers): such a chain judges on a thread of its
        // own there. A policy that panics the thread allows nothing.
        if live.chain.imports_wasi() && tokio::runtime::Handle::try_current().is_ok() {
            return std::thread::scope(|s| s.spawn(judge).join()).unwrap_or(false);
        }
        judge()
    }
}
