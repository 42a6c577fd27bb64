//! Call JSON → Cedar values, built directly as the values Cedar evaluates (never through
//! Cedar's JSON entity format, whose `__entity` and `__extn` escapes an argument could
//! otherwise use, nor through restricted expressions, which Cedar would then evaluate into
//! these same values: that round trip was a third of a request on a reused instance).
//!
//! Objects → records, arrays → sets, strings, booleans, integers within `i64` → longs; `null`
//! is left out of records and sets (so `has` is false for it) and any other number becomes its
//! decimal text (Cedar has no floating point).

use cedar_policy_core::ast::Value as Cedar;
use hpcgate_policy_sdk::{Map, Value};

/// A JSON object as a Cedar record.
pub fn record(object: &Map<String, Value>) -> Cedar {
    Cedar::record(
        object
            .iter()
            .filter_map(|(key, value)| Some((key.as_str(), convert(value)?))),
        None,
    )
}

fn convert(value: &Value) -> Option<Cedar> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => Cedar::from(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cedar::from(i),
            None => Cedar::from(n.to_string()),
        },
        Value::String(s) => Cedar::from(s.as_str()),
        Value::Array(items) => Cedar::set(items.iter().filter_map(convert), None),
        Value::Object(object) => record(object),
    })
}

/// A count as a Cedar long (its decimal text past `i64`, as for any JSON number).
pub fn count(n: u64) -> Cedar {
    i64::try_from(n).map_or_else(|_| Cedar::from(n.to_string()), Cedar::from)
}
