//! `hpcgate instance …`: the instance and job tools for the local user, from a terminal.
//! Each subcommand is one tool call through [`crate::gateway::Gateway::dispatch`] (policy
//! → audit → tool → audit), except `unarchive`, which has no tool (see [`unarchive`]), and
//! `enter` ([`super::sandbox`]).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::instance_jobs::{self, JobCommand};
use super::local::{ConfigArg, Failed, Local, exit};
use super::out;
use crate::audit::{Event, Outcome};
use crate::state::InstanceId;

#[derive(Debug, Args)]
pub(crate) struct InstanceArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(subcommand)]
    command: InstanceCommand,
}

#[derive(Debug, Subcommand)]
enum InstanceCommand {
    /// Create an instance (an id is generated when none is given).
    Create {
        id: Option<String>,
        #[arg(long, short)]
        description: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List live instances.
    List {
        #[command(flatten)]
        page: PageArgs,
        #[arg(long)]
        json: bool,
    },
    /// List archived instances.
    ListArchived {
        #[command(flatten)]
        page: PageArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show one instance.
    Describe {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Set an instance's description (an empty one clears it).
    Update {
        id: String,
        #[arg(long, short)]
        description: String,
    },
    /// Archive an instance (refused while it has running jobs); its files are kept.
    Archive { id: String },
    /// Bring an archived instance back.
    Unarchive { id: String },
    /// Open an interactive shell in the instance's sandbox.
    Enter { id: String },
    #[command(flatten)]
    Job(JobCommand),
}

#[derive(Debug, Args)]
pub(crate) struct PageArgs {
    /// At most this many.
    #[arg(long)]
    limit: Option<usize>,
    /// Skip this many.
    #[arg(long)]
    offset: Option<usize>,
}

impl PageArgs {
    /// The pagination arguments of a list tool.
    pub(crate) fn into_json(self, mut arguments: Value) -> Value {
        if let Some(limit) = self.limit {
            arguments["limit"] = json!(limit);
        }
        if let Some(offset) = self.offset {
            arguments["offset"] = json!(offset);
        }
        arguments
    }
}

pub(crate) fn run(args: InstanceArgs) -> anyhow::Result<ExitCode> {
    exit(dispatch(args))
}

fn dispatch(args: InstanceArgs) -> anyhow::Result<ExitCode> {
    let local = Local::open(&args.config)?;
    match args.command {
        InstanceCommand::Create {
            id,
            description,
            json,
        } => {
            let result = local.call(
                "create_instance",
                json!({"instance_id": id, "description": description}),
            )?;
            show_instance(&result, json, "Created");
        }
        InstanceCommand::List { page, json } => {
            let result = local.call("list_instances", page.into_json(json!({})))?;
            list(&result, json, false);
        }
        InstanceCommand::ListArchived { page, json } => {
            let result = local.call("list_archived_instances", page.into_json(json!({})))?;
            list(&result, json, true);
        }
        InstanceCommand::Describe { id, json } => {
            let result = local.call("describe_instance", json!({"instance_id": id}))?;
            show_instance(&result, json, "");
        }
        InstanceCommand::Update { id, description } => {
            let result = local.call(
                "update_instance",
                json!({"instance_id": id, "description": description}),
            )?;
            show_instance(&result, false, "Updated");
        }
        InstanceCommand::Archive { id } => {
            local.call("archive_instance", json!({"instance_id": id}))?;
            out(format!("Archived instance `{id}`."));
        }
        InstanceCommand::Unarchive { id } => unarchive(&local, &id)?,
        InstanceCommand::Enter { id } => return super::sandbox::enter(&local, &id),
        InstanceCommand::Job(command) => return instance_jobs::run(&local, command),
    }
    Ok(ExitCode::SUCCESS)
}

/// The one instance command without a tool: agents cannot unarchive (an archived instance is
/// out of their reach by design), so there is no `unarchive_instance` to call through the
/// gateway. The local user's unarchive goes to the state layer directly, with the same quota
/// as `create_instance`, and is audited like a call: a record before, then
/// `instance.unarchived` or the error.
fn unarchive(local: &Local, id: &str) -> anyhow::Result<()> {
    const ACTION: &str = "unarchive_instance";
    let started = local.begin(ACTION, Some(id), None)?;
    let max_instances = local
        .settings
        .tenants
        .get(&local.caller.tenant)
        .and_then(|t| t.quotas.max_instances);
    let result = InstanceId::parse(id).and_then(|parsed| {
        local
            .state()?
            .unarchive(&local.caller.tenant, &parsed, max_instances)
    });
    let error = result.as_ref().err().map(ToString::to_string);
    local.end(
        ACTION,
        Some(id),
        &started,
        Outcome {
            error: error.clone(),
            ..Outcome::default()
        },
    )?;
    if let Some(error) = error {
        return Err(Failed(error).into());
    }
    local.event(Event::InstanceUnarchived, ACTION, id)?;
    out(format!("Unarchived instance `{id}`."));
    Ok(())
}

fn show_instance(result: &Value, json: bool, verb: &str) {
    let instance = &result["instance"];
    if json {
        out(serde_json::to_string_pretty(instance).unwrap_or_default());
        return;
    }
    let text = |key: &str| instance[key].as_str().unwrap_or("-").to_owned();
    if !verb.is_empty() {
        out(format!("{verb} instance `{}`.", text("id")));
    }
    out(format!("ID:          {}", text("id")));
    out(format!("Description: {}", text("description")));
    out(format!("Created at:  {}", text("created_at")));
    out(format!("Updated at:  {}", text("updated_at")));
    if instance["archived"] == true {
        out(format!("Archived at: {}", text("archived_at")));
    }
    out(format!(
        "Workspace:   {} (in the sandbox; outputs in {})",
        text("workspace"),
        text("output")
    ));
}

fn list(result: &Value, json: bool, archived: bool) {
    if json {
        out(serde_json::to_string_pretty(result).unwrap_or_default());
        return;
    }
    let instances = result["instances"].as_array().cloned().unwrap_or_default();
    if instances.is_empty() {
        out(if archived {
            "No archived instances found."
        } else {
            "No instances found."
        });
        return;
    }
    for i in &instances {
        let text = |key: &str| i[key].as_str().unwrap_or("-").to_owned();
        let mut line = format!("{:<20}  created: {}", text("id"), text("created_at"));
        if archived {
            line.push_str(&format!("  archived: {}", text("archived_at")));
        }
        if let Some(d) = i["description"].as_str() {
            line.push_str(&format!("  {d}"));
        }
        out(line);
    }
    let total = result["total"].as_u64().unwrap_or(0);
    let offset = result["offset"].as_u64().unwrap_or(0);
    if total > offset + instances.len() as u64 {
        out(format!(
            "({} of {total}; see more with --offset {})",
            instances.len(),
            offset + instances.len() as u64
        ));
    }
}
