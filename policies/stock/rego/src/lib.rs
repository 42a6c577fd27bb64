//! `stock:rego`: a policy written in Rego (OPA's language), evaluated by the embedded `regorus`
//! interpreter inside the policy sandbox.
//!
//! Convention: the module is `package hpcgate`; `input` is the recorded-call object (`phase`,
//! `via`, `tenant`, `principal`, `tool`, `server`, `remote_tool`, `instance`, `arguments`,
//! `read_only`, `usage`), exactly as in cases files and audit records; `data` is the optional
//! `data` table of the config.
//!
//! - `deny`, a set of messages: non-empty denies, with the first message in sorted order as the
//!   reason (sorted, so the reason does not depend on evaluation order);
//! - `rewrite`, an object: the new arguments (a rewrite equal to the arguments is an allow);
//! - otherwise allow. At least one of the two rules must be declared.
//!
//! The host reads `policy_file` (relative to the config file) and passes its text as `policy`;
//! the guest has no filesystem. The module is parsed and analysed once, in `configure`: a parse
//! error stops the load naming the file and line. An evaluation error (a conflict in a complete
//! rule, a builtin's error) denies, naming it: a policy fault fails closed.
//!
//! ```toml
//! [[policies]]
//! name = "rules"
//! module = "stock:rego"
//! [policies.config]
//! policy_file = "rules.rego"
//! data = { max_gpus = 4 }
//! ```

use std::sync::Mutex;

use hpcgate_policy_sdk::{Call, Decision, Map, Policy, Value, args};
use regorus::Engine;
use serde::Deserialize;

mod input;

/// The package every `stock:rego` module declares.
const PACKAGE: &str = "data.hpcgate";
const DENY: &str = "data.hpcgate.deny";
const REWRITE: &str = "data.hpcgate.rewrite";

/// The settings the host passes (the `config` table with `policy_file` read into `policy`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    /// The module's text.
    policy: Option<String>,
    /// The file it came from, as written in the config; names it in messages.
    policy_file: Option<String>,
    /// The `data` document.
    #[serde(default)]
    data: Option<Value>,
}

/// A configured Rego module.
pub struct Rego {
    /// `regorus` evaluates through `&mut Engine`; a policy instance judges one call at a time.
    engine: Mutex<Engine>,
    file: String,
    deny: bool,
    rewrite: bool,
    keys: input::Keys,
}

impl Policy for Rego {
    fn configure(settings: &str) -> Result<Self, String> {
        let settings: Settings = args::parse_settings(settings)?;
        let Some(text) = settings.policy else {
            return Err(missing_policy());
        };
        let file = settings.policy_file.unwrap_or_else(|| "policy".to_owned());
        let mut engine = Engine::new();
        // Rego v1 syntax (`if`, `contains`), as OPA 1.x writes it.
        engine.set_rego_v0(false);
        let package = engine
            .add_policy(file.clone(), text)
            .map_err(|e| format!("cannot parse the Rego module: {}", one_line(&e.to_string())))?;
        if package != PACKAGE {
            return Err(format!(
                "`{file}` declares `package {}`; stock:rego evaluates `package hpcgate` \
                 (its `deny` and `rewrite` rules)",
                package.trim_start_matches("data.")
            ));
        }
        if let Some(data) = settings.data {
            if !data.is_object() {
                return Err("`data` must be a table".to_owned());
            }
            engine
                .add_data(regorus::Value::from(data))
                .map_err(|e| format!("cannot load `data`: {e}"))?;
        }
        let declared = |rule: &str| {
            engine
                .has_declared_rule_rooted_at(&file, rule)
                .map_err(|e| format!("cannot inspect `{file}`: {e}"))
        };
        let (deny, rewrite) = (declared("deny")?, declared("rewrite")?);
        if !deny && !rewrite {
            return Err(format!(
                "`{file}` declares neither `deny` nor `rewrite`; stock:rego needs at least one \
                 (e.g. `deny contains msg if {{ ... }}`)"
            ));
        }
        // Analyse the module now (the first evaluation schedules every rule), so that a call
        // pays only for its own evaluation, and a semantic error stops the load.
        engine.set_input(regorus::Value::new_object());
        for (declared, rule) in [(deny, DENY), (rewrite, REWRITE)] {
            if declared {
                engine.eval_rule(rule.to_owned()).map_err(|e| {
                    format!(
                        "cannot compile the Rego module: {}",
                        one_line(&e.to_string())
                    )
                })?;
            }
        }
        Ok(Rego {
            engine: Mutex::new(engine),
            file,
            deny,
            rewrite,
            keys: input::Keys::new(),
        })
    }

    fn evaluate(&self, call: &Call) -> Decision {
        let mut engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        engine.set_input(self.keys.input(call));
        if self.deny {
            match engine.eval_rule(DENY.to_owned()) {
                Ok(value) => match first_message(&value) {
                    Ok(None) => {}
                    Ok(Some(message)) => return Decision::deny(message),
                    Err(why) => return Decision::deny(format!("`{}`: {why}", self.file)),
                },
                Err(e) => return self.fault("deny", &e),
            }
        }
        if self.rewrite {
            match engine.eval_rule(REWRITE.to_owned()) {
                Ok(regorus::Value::Undefined) => {}
                Ok(value) => match serde_json::to_value(&value) {
                    Ok(Value::Object(arguments)) if arguments == call.arguments => {}
                    Ok(Value::Object(arguments)) => return rewrite(arguments, &self.file),
                    _ => {
                        return Decision::deny(format!(
                            "`{}`: `rewrite` must be an object (the new arguments), got {value}",
                            self.file
                        ));
                    }
                },
                Err(e) => return self.fault("rewrite", &e),
            }
        }
        Decision::allow()
    }
}

impl Rego {
    fn fault(&self, rule: &str, error: &dyn std::fmt::Display) -> Decision {
        Decision::deny(format!(
            "evaluating `{rule}` of `{}` failed: {}",
            self.file,
            one_line(&error.to_string())
        ))
    }
}

fn rewrite(arguments: Map<String, Value>, file: &str) -> Decision {
    Decision::rewrite(arguments, format!("rewritten by `{file}`"))
}

/// The first message of a `deny` set in sorted order, `None` when it is empty or undefined.
fn first_message(value: &regorus::Value) -> Result<Option<String>, String> {
    let first = match value {
        regorus::Value::Undefined => return Ok(None),
        regorus::Value::Set(set) => set.iter().next(),
        regorus::Value::Array(items) => items.iter().min(),
        other => return Err(format!("`deny` must be a set of messages, got {other}")),
    };
    Ok(first.map(|message| match message {
        regorus::Value::String(text) => text.to_string(),
        other => other.to_string(),
    }))
}

/// `regorus` messages span several lines (`--> file:line:col`, the source line, a caret, then
/// `error: what`); a reason is one line: `` `file` line L, column C: what ``.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message.lines().map(str::trim).collect();
    let place = lines.iter().find_map(|l| l.strip_prefix("--> "));
    let what = lines.iter().find_map(|l| l.strip_prefix("error: "));
    match (place.and_then(location), what) {
        (Some((file, line, column)), Some(what)) => {
            format!("`{file}` line {line}, column {column}: {what}")
        }
        _ => lines
            .into_iter()
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// `file:line:col` → its parts.
fn location(place: &str) -> Option<(&str, &str, &str)> {
    let mut parts = place.rsplitn(3, ':');
    let column = parts.next()?;
    let line = parts.next()?;
    let file = parts.next()?;
    Some((file, line, column))
}

fn missing_policy() -> String {
    "stock:rego needs `policy_file` (the Rego module, relative to the config file)".to_owned()
}

hpcgate_policy_sdk::export_policy!(Rego);
