//! Instance tools: `create_instance`, `list_instances`, `list_archived_instances`,
//! `describe_instance`, `update_instance`, `archive_instance`. Thin over [`crate::state`],
//! which validates every id and keeps tenants apart.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Context, Output, Tool, ToolError, ToolSpec, parse, schema};
use crate::audit::Outcome;
use crate::state::{Instance, InstanceId, NewInstance, Page, PageRequest};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Create {
    /// Lowercase letters, digits, `-` and `_`, up to 63 characters; generated when absent.
    instance_id: Option<String>,
    description: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct List {
    /// At most this many (default 50).
    limit: Option<usize>,
    offset: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ById {
    instance_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Update {
    instance_id: String,
    /// The new description; an empty string clears it.
    description: String,
}

pub(super) fn spec(tool: Tool) -> ToolSpec {
    let (description, input_schema, read_only, destructive, idempotent) = match tool {
        Tool::CreateInstance => (
            "Create a sandbox instance: a private /workspace and /output where jobs run and files live. Start here.",
            schema::<Create>(),
            false,
            false,
            false,
        ),
        Tool::ListInstances => (
            "List your live instances.",
            schema::<List>(),
            true,
            false,
            true,
        ),
        Tool::ListArchivedInstances => (
            "List your archived instances.",
            schema::<List>(),
            true,
            false,
            true,
        ),
        Tool::DescribeInstance => (
            "Describe one instance.",
            schema::<ById>(),
            true,
            false,
            true,
        ),
        Tool::UpdateInstance => (
            "Change an instance's description.",
            schema::<Update>(),
            false,
            false,
            true,
        ),
        Tool::ArchiveInstance => (
            "Archive an instance (refused while it has running jobs); its files are kept.",
            schema::<ById>(),
            false,
            true,
            true,
        ),
        Tool::ReadFile
        | Tool::WriteFile
        | Tool::ListDirectory
        | Tool::StatPath
        | Tool::MakeDirectory
        | Tool::MovePath
        | Tool::DeletePath
        | Tool::SearchFiles => unreachable!("`{}` is not an instance tool", tool.name()),
    };
    ToolSpec {
        name: tool.name(),
        description,
        input_schema,
        read_only,
        destructive,
        idempotent,
    }
}

pub(super) fn run(
    tool: Tool,
    cx: &Context<'_>,
    arguments: Map<String, Value>,
) -> Result<Output, ToolError> {
    match tool {
        Tool::CreateInstance => {
            let args: Create = parse(tool, arguments)?;
            let id = args
                .instance_id
                .as_deref()
                .map(InstanceId::parse)
                .transpose()?;
            let new = NewInstance {
                id,
                description: args.description,
                max_instances: cx.max_instances,
            };
            let instance = cx.state.create(cx.tenant, new)?;
            Ok(one(
                &instance,
                format!("created instance `{}`", instance.id),
            ))
        }
        Tool::ListInstances | Tool::ListArchivedInstances => {
            let args: List = parse(tool, arguments)?;
            let page = PageRequest::new(args.limit.unwrap_or(50), args.offset.unwrap_or(0))?;
            let (page, noun) = if tool == Tool::ListInstances {
                (cx.state.list(cx.tenant, page)?, "instances")
            } else {
                (
                    cx.state.list_archived(cx.tenant, page)?,
                    "archived instances",
                )
            };
            Ok(listing(&page, noun))
        }
        Tool::DescribeInstance => {
            let args: ById = parse(tool, arguments)?;
            let instance = cx
                .state
                .describe(cx.tenant, &InstanceId::parse(&args.instance_id)?)?;
            Ok(one(&instance, format!("instance `{}`", instance.id)))
        }
        Tool::UpdateInstance => {
            let args: Update = parse(tool, arguments)?;
            let id = InstanceId::parse(&args.instance_id)?;
            let description = Some(Some(args.description).filter(|d| !d.is_empty()));
            let instance = cx.state.update(cx.tenant, &id, description)?;
            Ok(one(
                &instance,
                format!("updated instance `{}`", instance.id),
            ))
        }
        Tool::ArchiveInstance => {
            let args: ById = parse(tool, arguments)?;
            let id = InstanceId::parse(&args.instance_id)?;
            // Local jobs are not wired to the gateway yet: a recorded job that is not final
            // is treated as running, which refuses the archive (the safe side).
            let instance = cx.state.archive(cx.tenant, &id, |_| None)?;
            Ok(one(
                &instance,
                format!("archived instance `{}`", instance.id),
            ))
        }
        Tool::ReadFile
        | Tool::WriteFile
        | Tool::ListDirectory
        | Tool::StatPath
        | Tool::MakeDirectory
        | Tool::MovePath
        | Tool::DeletePath
        | Tool::SearchFiles => unreachable!("`{}` is not an instance tool", tool.name()),
    }
}

fn one(instance: &Instance, summary: String) -> Output {
    Output {
        structured: json!({ "instance": instance }),
        summary,
        outcome: Outcome::default(),
    }
}

fn listing(page: &Page<Instance>, noun: &str) -> Output {
    Output {
        structured: json!({ "instances": page.items, "total": page.total, "offset": page.offset }),
        summary: page.summary(noun),
        outcome: Outcome::default(),
    }
}
