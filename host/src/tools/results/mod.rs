//! What every builtin tool returns: the types of its structured content, whose JSON schemas
//! `tools/list` advertises as the tool's `outputSchema` (MCP: a tool that declares one must
//! return structured content that conforms to it).
//!
//! These types are the public contract, so they live here rather than in the executors or the
//! state layer: each is built from the inner type by destructuring it whole, so a field added
//! there is a compile error here (a decision about the contract), never a silent change of a
//! result's shape. Field names and shapes are those agents already rely on.
//!
//! Schemas are generated for serialisation (a field is required unless it may be left out,
//! and `null` is allowed where it may be null), with every subschema inlined (no `$ref`, for
//! clients that resolve none), and stay open (`additionalProperties` unset) so that a field
//! added later does not break a client that validates.

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::Value;

/// The `outputSchema` of a result type: JSON Schema 2020-12, for serialisation, inlined. The
/// root is an object, as MCP requires (an untagged union of objects gets `"type": "object"`
/// beside its `anyOf`).
pub(super) fn output_schema<T: JsonSchema>() -> Value {
    let generator = SchemaGenerator::new(
        SchemaSettings::draft2020_12()
            .for_serialize()
            .with(|s| s.inline_subschemas = true),
    );
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    drop_number_formats(&mut schema);
    if let Value::Object(root) = &mut schema {
        root.entry("type").or_insert_with(|| "object".into());
    }
    schema
}

/// Removes the `format` of numbers: schemars names their Rust width there (`uint64`, `int32`,
/// `double`), which is no JSON Schema format, and validators that check formats (the
/// TypeScript SDK's) warn about each one they do not know. `minimum: 0` still says unsigned.
fn drop_number_formats(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let numeric = |t: &Value| t == "integer" || t == "number";
            let is_number = match map.get("type") {
                Some(Value::Array(types)) => types.iter().any(numeric),
                Some(one) => numeric(one),
                None => false,
            };
            if is_number {
                map.remove("format");
            }
            map.values_mut().for_each(drop_number_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_number_formats),
        _ => {}
    }
}

/// The schema of a [`Timestamp`](crate::time::Timestamp): RFC 3339, UTC, microseconds.
struct DateTime;

impl JsonSchema for DateTime {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DateTime".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "date-time" })
    }
}

mod cluster;
mod files;
mod instances;
mod jobs;

pub use cluster::*;
pub use files::*;
pub use instances::*;
pub use jobs::*;
