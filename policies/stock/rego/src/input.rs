//! The Rego `input`: the recorded-call object, built as a `regorus` value directly.
//!
//! The obvious way, `regorus::Value::from(serde_json::to_value(call))`, builds a JSON tree and
//! then deserialises it into a second one: about a sixth of an evaluation on a reused instance.
//! This builds the one tree `regorus` needs. It must stay exactly that value (the recorded-call
//! format), which the tests check against the obvious way; `Call` is destructured whole, so a
//! new field cannot be left out unnoticed.

use std::collections::BTreeMap;

use hpcgate_policy_sdk::{Call, Phase, Value};
use regorus::Value as Rego;

/// The object keys, made once per instance: an evaluation clones them (a reference count)
/// instead of allocating each key again.
pub struct Keys {
    arguments: Rego,
    instance: Rego,
    job: Rego,
    phase: Rego,
    principal: Rego,
    read_only: Rego,
    remote_tool: Rego,
    server: Rego,
    tenant: Rego,
    tool: Rego,
    usage: Rego,
    via: Rego,
    list: Rego,
    call: Rego,
}

impl Keys {
    pub fn new() -> Keys {
        Keys {
            arguments: Rego::from("arguments"),
            instance: Rego::from("instance"),
            job: Rego::from("job"),
            phase: Rego::from("phase"),
            principal: Rego::from("principal"),
            read_only: Rego::from("read_only"),
            remote_tool: Rego::from("remote_tool"),
            server: Rego::from("server"),
            tenant: Rego::from("tenant"),
            tool: Rego::from("tool"),
            usage: Rego::from("usage"),
            via: Rego::from("via"),
            list: Rego::from("list"),
            call: Rego::from("call"),
        }
    }

    /// `call` as its recorded-call object.
    pub fn input(&self, call: &Call) -> Rego {
        let Call {
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
        let text = |value: &Option<String>| value.as_deref().map_or(Rego::Null, Rego::from);
        let mut fields = vec![
            (self.arguments.clone(), object(arguments)),
            (self.instance.clone(), text(instance)),
            (
                self.phase.clone(),
                match phase {
                    Phase::List => self.list.clone(),
                    Phase::Call => self.call.clone(),
                },
            ),
            (self.principal.clone(), Rego::from(principal.as_str())),
            (self.read_only.clone(), Rego::Bool(*read_only)),
            (self.remote_tool.clone(), text(remote_tool)),
            (self.server.clone(), Rego::from(server.as_str())),
            (self.tenant.clone(), Rego::from(tenant.as_str())),
            (self.tool.clone(), Rego::from(tool.as_str())),
            (
                self.usage.clone(),
                Rego::from(
                    usage
                        .iter()
                        .map(|(name, count)| (Rego::from(name.as_str()), Rego::from(*count)))
                        .collect::<BTreeMap<_, _>>(),
                ),
            ),
            (self.via.clone(), Rego::from(via.as_str())),
        ];
        // Serialised only when present, as in a recorded call.
        if let Some(job) = job {
            fields.push((self.job.clone(), Rego::from(job.as_str())));
        }
        Rego::from(fields.into_iter().collect::<BTreeMap<_, _>>())
    }
}

/// A JSON object as a Rego object.
fn object(map: &hpcgate_policy_sdk::Map<String, Value>) -> Rego {
    Rego::from(
        map.iter()
            .map(|(key, value)| (Rego::from(key.as_str()), value_of(value)))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// A JSON value as a Rego value, as `regorus` deserialises one: an integer stays an integer.
fn value_of(value: &Value) -> Rego {
    match value {
        Value::Null => Rego::Null,
        Value::Bool(b) => Rego::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Rego::from(u),
            (None, Some(i)) => Rego::from(i),
            // JSON numbers are finite: `as_f64` always answers.
            (None, None) => n.as_f64().map_or(Rego::Undefined, Rego::from),
        },
        Value::String(s) => Rego::from(s.as_str()),
        Value::Array(items) => Rego::from(items.iter().map(value_of).collect::<Vec<_>>()),
        Value::Object(map) => object(map),
    }
}
