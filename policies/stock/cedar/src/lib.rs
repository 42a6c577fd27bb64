//! `stock:cedar`: a policy set written in Cedar, evaluated by the embedded `cedar-policy`
//! authorizer inside the policy sandbox.
//!
//! Each call becomes one Cedar request:
//! - principal = `Tenant::"<tenant>"`, an entity with the attribute `principal` (the caller's
//!   name within the tenant);
//! - action = `Action::"<tool>"` (the exposed tool name);
//! - resource = `Instance::"<instance>"`, or `Instance::"(none)"` for a call without one;
//! - context = `{ arguments, via, read_only, usage, phase, server, remote_tool }` (`remote_tool`
//!   only for proxied tools). JSON becomes Cedar values: objects → records, arrays → sets,
//!   integers → longs; `null` is left out (so `has` is false) and any other number becomes its
//!   decimal text. Values are built directly, never parsed as Cedar's entity-escape JSON, so an
//!   argument cannot smuggle in an entity reference.
//!
//! Cedar's rules decide: a `forbid` that applies wins; without a `permit` the call is denied
//! (default deny); the reason is the `@reason("…")` annotation of the first deciding policy when
//! it has one, else names the policies (by `@id("…")`, else Cedar's `policy0`, …). An evaluation
//! error in any policy (e.g. `context.arguments.path like …` on a missing key without `has`)
//! denies, naming the policy: a policy fault fails closed. In the list phase `arguments` is `{}`
//! and `phase` is `"list"`: a tool is listed iff the request is allowed, so a permit that needs
//! arguments should also admit `context.phase == "list"`.
//!
//! The host reads `policy_file` (and the optional `schema_file`, Cedar schema syntax) and passes
//! their text as `policy` and `schema`. Both are parsed once in `configure`; parse errors name
//! the file and line; with a schema the policies are validated (strict mode) at load.
//!
//! `configure` also does, once, the work Cedar otherwise leaves to an instance's first request:
//! it parses the three entity type names and authorizes one request made up here (building
//! Cedar's name parser and extension tables). Measured with `hpcgate policy bench`, that first
//! request cost several times a later one, and a fresh instance only ever makes a first request.
//! Nothing of the made-up request is kept but those tables, the same for every instance.
//!
//! ```toml
//! [[policies]]
//! name = "rules"
//! module = "stock:cedar"
//! [policies.config]
//! policy_file = "rules.cedar"
//! ```

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{
    Authorizer, Context, Entities, EntityId, EntityTypeName, EntityUid, PolicyId, PolicySet,
    Request, Schema, ValidationMode, Validator,
};
use cedar_policy_core as cedar_core;
use hpcgate_policy_sdk::{Call, Decision, Policy, args};
use miette::Diagnostic;
use serde::Deserialize;

mod convert;

/// The resource id of a call without an instance.
pub const NO_INSTANCE: &str = "(none)";

/// The settings the host passes (the `config` table with the files read).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    policy: Option<String>,
    policy_file: Option<String>,
    schema: Option<String>,
    schema_file: Option<String>,
}

/// A parsed (and, with a schema, validated) Cedar policy set.
pub struct Cedar {
    policies: PolicySet,
    authorizer: Authorizer,
    types: Types,
    /// What a denial says of each policy, read once: `PolicySet::annotation` parses its key with
    /// Cedar's identifier parser on every call, which builds that parser's lexer each time.
    labels: HashMap<PolicyId, Label>,
}

/// A policy as a denial names it.
#[derive(Clone)]
struct Label {
    /// Cedar's id (`policy0`, …), the order deciding policies are reported in.
    id: String,
    /// Its `@id` annotation in backquotes, else its Cedar id.
    name: String,
    /// Its `@reason` annotation.
    reason: Option<String>,
}

impl Label {
    fn of(policy: &cedar_policy::Policy) -> Label {
        let annotation = |key: &str| {
            (policy.annotations())
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_owned())
        };
        let id = policy.id().to_string();
        Label {
            name: format!("`{}`", annotation("id").as_deref().unwrap_or(&id)),
            reason: annotation("reason"),
            id,
        }
    }
}

/// The entity types of a request, parsed once.
struct Types {
    tenant: EntityTypeName,
    action: EntityTypeName,
    instance: EntityTypeName,
}

impl Types {
    fn new() -> Result<Types, String> {
        let parse = |name: &str| EntityTypeName::from_str(name).map_err(|e| e.to_string());
        Ok(Types {
            tenant: parse("Tenant")?,
            action: parse("Action")?,
            instance: parse("Instance")?,
        })
    }
}

impl Policy for Cedar {
    fn configure(settings: &str) -> Result<Self, String> {
        let settings: Settings = args::parse_settings(settings)?;
        let Some(text) = settings.policy else {
            return Err(
                "stock:cedar needs `policy_file` (the Cedar policies, relative to the config file)"
                    .to_owned(),
            );
        };
        let file = settings.policy_file.as_deref().unwrap_or("policy");
        let policies = PolicySet::from_str(&text).map_err(|e| {
            format!(
                "cannot parse the Cedar policies: {}",
                located(file, &text, &e)
            )
        })?;
        if let Some(schema) = settings.schema {
            let schema_file = settings.schema_file.as_deref().unwrap_or("schema");
            let (schema, _warnings) = Schema::from_cedarschema_str(&schema).map_err(|e| {
                format!(
                    "cannot parse the Cedar schema: {}",
                    located(schema_file, &schema, &e)
                )
            })?;
            let result = Validator::new(schema).validate(&policies, ValidationMode::Strict);
            if let Some(error) = result.validation_errors().next() {
                return Err(format!(
                    "the Cedar policies do not match the schema `{schema_file}`: {}",
                    located(file, &text, error)
                ));
            }
        }
        let labels = (policies.policies())
            .map(|policy| (policy.id().clone(), Label::of(policy)))
            .collect();
        let cedar = Cedar {
            policies,
            authorizer: Authorizer::new(),
            types: Types::new()?,
            labels,
        };
        cedar.warm_up();
        Ok(cedar)
    }

    fn evaluate(&self, call: &Call) -> Decision {
        let (request, entities) = match request(&self.types, call) {
            Ok(request) => request,
            Err(why) => return Decision::deny(format!("cannot build the Cedar request: {why}")),
        };
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, &entities);
        if let Some(cedar_policy::AuthorizationError::PolicyEvaluationError(error)) =
            response.diagnostics().errors().next()
        {
            return Decision::deny(format!(
                "Cedar policy {} could not be evaluated: {}",
                self.label(error.policy_id()).name,
                error.inner()
            ));
        }
        match response.decision() {
            cedar_policy::Decision::Allow => Decision::allow(),
            cedar_policy::Decision::Deny => {
                let mut deciding: Vec<Cow<'_, Label>> = (response.diagnostics().reason())
                    .map(|id| self.label(id))
                    .collect();
                if deciding.is_empty() {
                    return Decision::deny(format!(
                        "no Cedar policy permits `{}` for tenant `{}`",
                        call.tool, call.tenant
                    ));
                }
                deciding.sort_by(|a, b| a.id.cmp(&b.id));
                Decision::deny(match deciding.iter().find_map(|l| l.reason.as_ref()) {
                    Some(reason) => reason.clone(),
                    None => {
                        let names: Vec<&str> = deciding.iter().map(|l| l.name.as_str()).collect();
                        format!("forbidden by Cedar policy {}", names.join(", "))
                    }
                })
            }
        }
    }
}

impl Cedar {
    /// Authorizes one made-up request and forgets the answer: what Cedar builds lazily on the
    /// first request (its extension functions' tables) is then built in `configure`, before the
    /// instance judges any call.
    fn warm_up(&self) {
        let mut call = Call::new("warm_up", serde_json::json!({"path": "", "n": 0}));
        call.usage.insert("instances".to_owned(), 0);
        if let Ok((request, entities)) = request(&self.types, &call) {
            std::hint::black_box(self.authorizer.is_authorized(
                &request,
                &self.policies,
                &entities,
            ));
        }
    }

    /// How a denial names the policy `id` (every policy of the set has a label).
    fn label(&self, id: &PolicyId) -> Cow<'_, Label> {
        match self.labels.get(id) {
            Some(label) => Cow::Borrowed(label),
            None => Cow::Owned(Label {
                id: id.to_string(),
                name: format!("`{id}`"),
                reason: None,
            }),
        }
    }
}

/// The Cedar request and entities of `call`.
fn request(types: &Types, call: &Call) -> Result<(Request, Entities), String> {
    let uid = |kind: &EntityTypeName, id: &str| {
        EntityUid::from_type_name_and_id(kind.clone(), EntityId::new(id))
    };
    let principal = uid(&types.tenant, &call.tenant);
    let action = uid(&types.action, &call.tool);
    let resource = uid(
        &types.instance,
        call.instance.as_deref().unwrap_or(NO_INSTANCE),
    );
    let entities = tenant(principal.clone(), &call.principal)?;
    let request = Request::new(principal, action, resource, context(call), None)
        .map_err(|e| e.to_string())?;
    Ok((request, entities))
}

/// The request's one entity: the tenant, with the caller's name as its `principal`. Built as
/// Cedar's values (see `convert`); it has no parents, so its transitive closure is itself.
fn tenant(uid: EntityUid, principal: &str) -> Result<Entities, String> {
    let tenant = cedar_core::ast::Entity::new_with_attr_partial_value(
        uid.into(),
        [(
            "principal".into(),
            cedar_core::ast::Value::from(principal).into(),
        )],
        HashSet::new(),
        HashSet::new(),
        [],
    );
    let entities = cedar_core::entities::Entities::from_entities(
        [tenant],
        None::<&cedar_core::entities::NoEntitiesSchema>,
        cedar_core::entities::TCComputation::AssumeAlreadyComputed,
        cedar_core::extensions::Extensions::all_available(),
    )
    .map_err(|e| e.to_string())?;
    Ok(Entities::from(entities))
}

/// The context record: `{ arguments, via, read_only, usage, phase, server, remote_tool }`.
fn context(call: &Call) -> Context {
    let text = |s: &str| cedar_core::ast::Value::from(s);
    let mut fields = vec![
        ("arguments", convert::record(&call.arguments)),
        ("via", text(call.via.as_str())),
        ("read_only", cedar_core::ast::Value::from(call.read_only)),
        (
            "usage",
            cedar_core::ast::Value::record(
                (call.usage.iter()).map(|(name, count)| (name.as_str(), convert::count(*count))),
                None,
            ),
        ),
        (
            "phase",
            text(match call.phase {
                hpcgate_policy_sdk::Phase::List => "list",
                hpcgate_policy_sdk::Phase::Call => "call",
            }),
        ),
        ("server", text(&call.server)),
    ];
    if let Some(remote) = &call.remote_tool {
        fields.push(("remote_tool", text(remote)));
    }
    let record = fields.into_iter().map(|(key, value)| (key.into(), value));
    Context::from(cedar_core::ast::Context::Value(Arc::new(record.collect())))
}

/// One line for a Cedar diagnostic: `` `file` line L: message (help) ``, the line taken from
/// the first labelled span in `text`.
fn located(file: &str, text: &str, error: &dyn Diagnostic) -> String {
    let line = error
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| {
            let offset = label.offset().min(text.len());
            text.as_bytes()[..offset]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1
        });
    let mut message = error.to_string();
    if let Some(help) = error.help() {
        message = format!("{message} ({help})");
    }
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match line {
        Some(line) => format!("`{file}` line {line}: {message}"),
        None => format!("`{file}`: {message}"),
    }
}

hpcgate_policy_sdk::export_policy!(Cedar);
