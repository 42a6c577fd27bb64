//! Reading values out of JSON: named arguments at any nesting depth of a call's arguments,
//! non-negative integers from a map, and a policy's settings.
//!
//! Locations are written like `files[2].path` (object keys joined by `.`, list indices in
//! brackets) so that a denial can say exactly which value it refused.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// One value found under a wanted argument name.
#[derive(Debug, Clone, PartialEq)]
pub struct Found<'a> {
    /// Where the value sits, e.g. `path`, `paths[1]` or `files[2].path`.
    pub location: String,
    pub value: &'a Value,
}

impl<'a> Found<'a> {
    /// The value as a string, or `None` when it is some other JSON type.
    pub fn as_str(&self) -> Option<&'a str> {
        self.value.as_str()
    }
}

/// Every value of an argument named in `names`, at any depth of `args` (inside nested objects
/// and lists): object keys in the map's iteration order, list elements in order.
///
/// A list under a wanted name yields each of its elements (`paths[0]`, `paths[1]`, ...); any
/// other value under a wanted name is yielded as it is, without looking inside it. Callers that
/// expect strings decide what a non-string means: the stock policies deny it (fail closed).
pub fn find_named<'a, S: AsRef<str>>(args: &'a Map<String, Value>, names: &[S]) -> Vec<Found<'a>> {
    let mut found = Vec::new();
    walk_object(args, "", names, &mut found);
    found
}

fn walk_object<'a, S: AsRef<str>>(
    map: &'a Map<String, Value>,
    at: &str,
    names: &[S],
    found: &mut Vec<Found<'a>>,
) {
    for (key, value) in map {
        let location = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        if names.iter().any(|n| n.as_ref() == key) {
            match value {
                Value::Array(items) => {
                    found.extend(items.iter().enumerate().map(|(i, value)| Found {
                        location: format!("{location}[{i}]"),
                        value,
                    }))
                }
                _ => found.push(Found { location, value }),
            }
        } else {
            walk_value(value, &location, names, found);
        }
    }
}

fn walk_value<'a, S: AsRef<str>>(
    value: &'a Value,
    at: &str,
    names: &[S],
    found: &mut Vec<Found<'a>>,
) {
    match value {
        Value::Object(map) => walk_object(map, at, names, found),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk_value(item, &format!("{at}[{i}]"), names, found);
            }
        }
        _ => {}
    }
}

/// Reads `key` of `map` as a non-negative integer.
///
/// `Ok(None)` when the key is absent or `null`; `Err(value)` when it is anything but a
/// non-negative integer written without a fraction (so `8.0`, `8.5`, `-1`, `"8"` and `true` are
/// all errors: the executor's typed request would not accept them either).
pub fn get_u64<'a>(map: &'a Map<String, Value>, key: &str) -> Result<Option<u64>, &'a Value> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or(value),
    }
}

/// A short description of what kind of JSON value `value` is, for messages: "a string",
/// "a negative number", "a decimal number", "a boolean", "a list", "an object" or "null".
pub fn describe_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "a non-negative integer",
        Value::Number(n) if n.is_i64() => "a negative number",
        Value::Number(n) if n.as_f64().is_some_and(|f| f < 0.0) => "a negative number",
        Value::Number(_) => "a decimal number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses a policy's settings (its `config` table as JSON) into `T`.
///
/// Empty settings and `null` mean "no config table" and parse as `{}`, so every default applies.
/// The error is the message the gateway shows when it refuses to load the policy: with
/// `#[serde(deny_unknown_fields)]` on `T` it names an unknown key and lists the expected ones.
pub fn parse_settings<T: DeserializeOwned>(settings: &str) -> Result<T, String> {
    let trimmed = settings.trim();
    let text = if trimmed.is_empty() || trimmed == "null" {
        "{}"
    } else {
        trimmed
    };
    serde_json::from_str(text).map_err(|e| {
        // The position is in JSON the host generated from the admin's TOML: meaningless to them.
        let message = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        format!(
            "invalid config: {}",
            message.strip_suffix(&position).unwrap_or(&message)
        )
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    fn locations(args: &Value, names: &[&str]) -> Vec<(String, Value)> {
        let args = object(args.clone());
        find_named(&args, names)
            .into_iter()
            .map(|f| (f.location, f.value.clone()))
            .collect()
    }

    #[test]
    fn finds_top_level_and_list_values() {
        let args = json!({"path": "a", "paths": ["b", "c"], "other": "d"});
        assert_eq!(
            locations(&args, &["path", "paths"]),
            vec![
                ("path".into(), json!("a")),
                ("paths[0]".into(), json!("b")),
                ("paths[1]".into(), json!("c")),
            ]
        );
    }

    #[test]
    fn finds_values_at_any_depth() {
        let args = json!({
            "files": [{"path": "x"}, {"mode": 1}, {"path": "y", "meta": {"source": "z"}}],
            "copy": {"source": ["s1"], "destination": "d"}
        });
        let found = locations(&args, &["path", "source", "destination"]);
        let mut found: Vec<&str> = found.iter().map(|(l, _)| l.as_str()).collect();
        // Sorted: the order of object keys depends on serde_json's `preserve_order` feature.
        found.sort_unstable();
        assert_eq!(
            found,
            [
                "copy.destination",
                "copy.source[0]",
                "files[0].path",
                "files[2].meta.source",
                "files[2].path"
            ]
        );
    }

    #[test]
    fn yields_non_strings_for_the_caller_to_judge() {
        let args =
            json!({"path": 5, "paths": ["ok", {"nested": "x"}, null], "source": {"path": "p"}});
        let mut found = locations(&args, &["path", "paths", "source"]);
        found.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            found,
            vec![
                ("path".into(), json!(5)),
                ("paths[0]".into(), json!("ok")),
                ("paths[1]".into(), json!({"nested": "x"})),
                ("paths[2]".into(), json!(null)),
                ("source".into(), json!({"path": "p"})),
            ]
        );
        let args = object(json!({"path": "s"}));
        assert_eq!(find_named(&args, &["path"])[0].as_str(), Some("s"));
    }

    #[test]
    fn nothing_found_in_empty_arguments() {
        assert!(locations(&json!({}), &["path"]).is_empty());
        assert!(locations(&json!({"a": [[{"b": 1}]]}), &["path"]).is_empty());
        assert_eq!(
            locations(&json!({"a": [[{"path": "q"}]]}), &["path"])[0].0,
            "a[0][0].path"
        );
    }

    #[test]
    fn reads_non_negative_integers() {
        let map = object(json!({
            "n": 8, "zero": 0, "null": null, "neg": -1, "frac": 8.5, "whole_float": 8.0,
            "text": "8", "flag": true, "big": 1e30
        }));
        assert_eq!(get_u64(&map, "n"), Ok(Some(8)));
        assert_eq!(get_u64(&map, "zero"), Ok(Some(0)));
        assert_eq!(get_u64(&map, "missing"), Ok(None));
        assert_eq!(get_u64(&map, "null"), Ok(None));
        for key in ["neg", "frac", "whole_float", "text", "flag", "big"] {
            assert_eq!(get_u64(&map, key), Err(&map[key]), "{key}");
        }
    }

    #[test]
    fn describes_kinds() {
        let cases = [
            (json!(null), "null"),
            (json!(true), "a boolean"),
            (json!(3), "a non-negative integer"),
            (json!(-3), "a negative number"),
            (json!(-3.5), "a negative number"),
            (json!(3.5), "a decimal number"),
            (json!("x"), "a string"),
            (json!([]), "a list"),
            (json!({}), "an object"),
        ];
        for (value, kind) in cases {
            assert_eq!(describe_kind(&value), kind, "{value}");
        }
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        #[serde(default)]
        allow: Vec<String>,
    }

    #[test]
    fn parses_settings() {
        let empty = Settings { allow: vec![] };
        assert_eq!(parse_settings::<Settings>(""), Ok(empty));
        assert!(parse_settings::<Settings>("null").is_ok());
        assert!(parse_settings::<Settings>(" {} ").is_ok());
        let parsed: Settings = parse_settings(r#"{"allow": ["a"]}"#).unwrap();
        assert_eq!(parsed.allow, ["a"]);
        let err = parse_settings::<Settings>(r#"{"alow": []}"#).unwrap_err();
        assert!(
            err.contains("unknown field `alow`") && err.contains("`allow`"),
            "{err}"
        );
        assert!(!err.contains("line 1"), "{err}");
    }
}
