//! The glue between the WIT exports and a [`Policy`](crate::Policy) type. Used by
//! [`export_policy!`](crate::export_policy); not part of the authoring API.

#[cfg(target_arch = "wasm32")]
mod wasm {
    use std::sync::Mutex;

    use crate::bindings::hpcgate::policy::types as wit;
    use crate::{Call, Decision, Phase, Policy, Via};

    pub fn configure<P: Policy>(slot: &Mutex<Option<P>>, settings: &str) -> Result<(), String> {
        let policy = P::configure(settings)?;
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(policy);
        Ok(())
    }

    pub fn evaluate<P: Policy>(slot: &Mutex<Option<P>>, call: wit::Call) -> wit::Decision {
        let guard = slot.lock().unwrap_or_else(|e| e.into_inner());
        let Some(policy) = guard.as_ref() else {
            return wit::Decision::Deny("policy was evaluated before it was configured".into());
        };
        let wit::Call {
            phase,
            via,
            job,
            tenant,
            principal,
            tool,
            server,
            remote_tool,
            instance,
            arguments,
            read_only,
            usage,
        } = call;
        let mut call = Call {
            phase: match phase {
                wit::Phase::List => Phase::List,
                wit::Phase::Call => Phase::Call,
            },
            via: match via {
                wit::Via::Mcp => Via::Mcp,
                wit::Via::Cli => Via::Cli,
                wit::Via::Dav => Via::Dav,
                wit::Via::Job => Via::Job,
            },
            job,
            tenant,
            principal,
            tool,
            server,
            remote_tool,
            instance,
            arguments: serde_json::Map::new(),
            read_only,
            usage: usage.into_iter().map(|c| (c.name, c.value)).collect(),
        };
        if policy.needs_arguments(&call) {
            match serde_json::from_str::<serde_json::Value>(&arguments) {
                Ok(serde_json::Value::Object(map)) => call.arguments = map,
                _ => return wit::Decision::Deny("call arguments are not a JSON object".into()),
            }
        }
        match policy.evaluate(&call) {
            Decision::Allow => wit::Decision::Allow,
            Decision::Deny { reason } => wit::Decision::Deny(reason),
            Decision::Rewrite { arguments, note } => wit::Decision::Rewrite(wit::Rewrite {
                arguments: serde_json::Value::Object(arguments).to_string(),
                note,
            }),
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use wasm::{configure, evaluate};
