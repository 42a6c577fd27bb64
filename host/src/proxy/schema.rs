//! A remote tool's input schema as hpcgate exposes it, and the arguments mapped back.
//!
//! The remote schema is kept whole — `$defs`, `$ref`, `additionalProperties`, `format`,
//! `title`, everything — and gets one more property: the required string `instance_id` that
//! picks the sandbox the call runs in. (A schema rebuilt from `properties` and `required`
//! alone would drop every other keyword and break schemas that use `$ref`.)
//!
//! **Collision rule.** When the remote schema has its own property called `instance_id`, the
//! gateway's keeps that name (every hpcgate tool takes `instance_id`, and policies read it) and
//! the remote one is exposed as `remote_instance_id` (or `remote_instance_id_2`, `_3`, … if that
//! name is taken too), in `properties` and in `required`. [`to_remote`] undoes the rename: the
//! server receives its `instance_id` and never sees the gateway's.

use serde_json::{Map, Value, json};

/// The gateway's argument.
pub const INSTANCE_ID: &str = "instance_id";

/// The exposed schema, and the name the remote `instance_id` got if it had one.
pub fn wrap(remote: &Map<String, Value>) -> (Map<String, Value>, Option<String>) {
    let mut schema = remote.clone();
    schema.insert("type".to_owned(), json!("object"));
    let properties = match schema.remove("properties") {
        Some(Value::Object(p)) => p,
        _ => Map::new(),
    };
    let renamed = properties.contains_key(INSTANCE_ID).then(|| {
        let mut name = "remote_instance_id".to_owned();
        let mut n = 1;
        while properties.contains_key(&name) {
            n += 1;
            name = format!("remote_instance_id_{n}");
        }
        name
    });
    let mut exposed = Map::new();
    exposed.insert(
        INSTANCE_ID.to_owned(),
        json!({
            "type": "string",
            "description": "The hpcgate instance (sandbox) this call runs in; see `list_instances`"
        }),
    );
    for (name, property) in properties {
        match &renamed {
            Some(new) if name == INSTANCE_ID => exposed.insert(new.clone(), property),
            _ => exposed.insert(name, property),
        };
    }
    schema.insert("properties".to_owned(), Value::Object(exposed));
    let mut required = vec![json!(INSTANCE_ID)];
    if let Some(Value::Array(remote_required)) = schema.remove("required") {
        for name in remote_required {
            let name = match (&renamed, name.as_str()) {
                (Some(new), Some(INSTANCE_ID)) => json!(new),
                _ => name,
            };
            if !required.contains(&name) {
                required.push(name);
            }
        }
    }
    schema.insert("required".to_owned(), Value::Array(required));
    (schema, renamed)
}

/// The arguments the remote server receives: the gateway's `instance_id` removed, a renamed
/// remote `instance_id` given back its name.
pub fn to_remote(mut arguments: Map<String, Value>, renamed: Option<&str>) -> Map<String, Value> {
    arguments.remove(INSTANCE_ID);
    if let Some(renamed) = renamed
        && let Some(value) = arguments.remove(renamed)
    {
        arguments.insert(INSTANCE_ID.to_owned(), value);
    }
    arguments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn keeps_every_keyword_and_adds_instance_id_first() {
        let remote = obj(json!({
            "type": "object",
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
            "properties": {"at": {"$ref": "#/$defs/point"}, "when": {"type": "string", "format": "date-time"}},
            "required": ["at"],
            "additionalProperties": false
        }));
        let (schema, renamed) = wrap(&remote);
        assert_eq!(renamed, None);
        assert_eq!(schema["$defs"], remote["$defs"]);
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["when"]["format"], "date-time");
        assert_eq!(schema["properties"]["at"]["$ref"], "#/$defs/point");
        assert_eq!(schema["properties"]["instance_id"]["type"], "string");
        assert_eq!(schema["required"], json!(["instance_id", "at"]));
    }

    #[test]
    fn a_remote_instance_id_is_renamed_and_mapped_back() {
        let remote = obj(json!({
            "type": "object",
            "properties": {"instance_id": {"type": "integer"}, "remote_instance_id": {"type": "string"}},
            "required": ["instance_id"]
        }));
        let (schema, renamed) = wrap(&remote);
        assert_eq!(renamed.as_deref(), Some("remote_instance_id_2"));
        assert_eq!(schema["properties"]["instance_id"]["type"], "string");
        assert_eq!(
            schema["properties"]["remote_instance_id_2"]["type"],
            "integer"
        );
        assert_eq!(
            schema["required"],
            json!(["instance_id", "remote_instance_id_2"])
        );
        let back = to_remote(
            obj(
                json!({"instance_id": "run1", "remote_instance_id_2": 7, "remote_instance_id": "x"}),
            ),
            renamed.as_deref(),
        );
        assert_eq!(
            Value::Object(back),
            json!({"instance_id": 7, "remote_instance_id": "x"})
        );
    }

    #[test]
    fn a_schema_without_properties_still_takes_instance_id() {
        let (schema, _) = wrap(&Map::new());
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["instance_id"]));
    }
}
