//! Call JSON → Cedar values, built directly (never through Cedar's JSON entity format, whose
//! `__entity` and `__extn` escapes an argument could otherwise use).
//!
//! Objects → records, arrays → sets, strings, booleans, integers within `i64` → longs; `null`
//! is left out of records and sets (so `has` is false for it) and any other number becomes its
//! decimal text (Cedar has no floating point).

use cedar_policy::RestrictedExpression;
use hpcgate_policy_sdk::{Map, Value};

/// A JSON object as a Cedar record.
pub fn record(object: &Map<String, Value>) -> Result<RestrictedExpression, String> {
    let mut fields = Vec::with_capacity(object.len());
    for (key, value) in object {
        if let Some(value) = convert(value)? {
            fields.push((key.clone(), value));
        }
    }
    RestrictedExpression::new_record(fields).map_err(|e| e.to_string())
}

fn convert(value: &Value) -> Result<Option<RestrictedExpression>, String> {
    Ok(Some(match value {
        Value::Null => return Ok(None),
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RestrictedExpression::new_long(i),
            None => RestrictedExpression::new_string(n.to_string()),
        },
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Array(items) => {
            let mut set = Vec::with_capacity(items.len());
            for item in items {
                if let Some(item) = convert(item)? {
                    set.push(item);
                }
            }
            RestrictedExpression::new_set(set)
        }
        Value::Object(object) => record(object)?,
    }))
}
