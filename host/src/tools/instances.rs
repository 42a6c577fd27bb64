//! Instance tools: `create_instance`, `list_instances`, `list_archived_instances`,
//! `describe_instance`, `update_instance`, `archive_instance`. Thin over [`crate::state`],
//! which validates every id and keeps tenants apart.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::results::{InstanceList, InstanceResult, InstanceView};
use super::{Context, Output, ToolError, ToolSpec, output_schema, parse, schema, tool_family};
use crate::audit::{Entry, Event, Outcome};
use crate::state::{Instance, NewInstance, Page, PageRequest};

tool_family! {
    /// The instance tools.
    InstanceTool {
        CreateInstance => "create_instance",
        ListInstances => "list_instances",
        ListArchivedInstances => "list_archived_instances",
        DescribeInstance => "describe_instance",
        UpdateInstance => "update_instance",
        ArchiveInstance => "archive_instance",
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Create {
    /// Lowercase letters, digits, `-` and `_`, up to 63 characters; generated when absent.
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: Option<String>,
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
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Update {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    /// The new description; an empty string clears it.
    description: String,
}

pub(super) fn spec(tool: InstanceTool) -> ToolSpec {
    let spec = |description, input_schema| {
        let output_schema = match tool {
            InstanceTool::ListInstances | InstanceTool::ListArchivedInstances => {
                output_schema::<InstanceList>()
            }
            InstanceTool::CreateInstance
            | InstanceTool::DescribeInstance
            | InstanceTool::UpdateInstance
            | InstanceTool::ArchiveInstance => output_schema::<InstanceResult>(),
        };
        ToolSpec::new(tool.name(), description, input_schema, output_schema)
    };
    match tool {
        InstanceTool::CreateInstance => spec(
            "Create a sandbox instance: a private /workspace and /output where jobs run and files live. Start here.",
            schema::<Create>(),
        ),
        InstanceTool::ListInstances => {
            spec("List your live instances.", schema::<List>()).read_only()
        }
        InstanceTool::ListArchivedInstances => {
            spec("List your archived instances.", schema::<List>()).read_only()
        }
        InstanceTool::DescribeInstance => {
            spec("Describe one instance.", schema::<ById>()).read_only()
        }
        InstanceTool::UpdateInstance => {
            spec("Change an instance's description.", schema::<Update>()).idempotent()
        }
        InstanceTool::ArchiveInstance => spec(
            "Archive an instance (refused while it has running jobs); its files are kept.",
            schema::<ById>(),
        )
        .destructive()
        .idempotent(),
    }
}

pub(super) fn run(
    tool: InstanceTool,
    cx: &Context<'_>,
    arguments: Map<String, Value>,
) -> Result<Output, ToolError> {
    match tool {
        InstanceTool::CreateInstance => create_instance(cx, parse(tool.name(), arguments)?),
        InstanceTool::ListInstances | InstanceTool::ListArchivedInstances => {
            let args: List = parse(tool.name(), arguments)?;
            let page = PageRequest::new(args.limit.unwrap_or(50), args.offset.unwrap_or(0))?;
            let (page, noun) = if tool == InstanceTool::ListInstances {
                (cx.state.list(cx.tenant, page)?, "instances")
            } else {
                (
                    cx.state.list_archived(cx.tenant, page)?,
                    "archived instances",
                )
            };
            Ok(listing(page, noun))
        }
        InstanceTool::DescribeInstance => describe_instance(cx, parse(tool.name(), arguments)?),
        InstanceTool::UpdateInstance => update_instance(cx, parse(tool.name(), arguments)?),
        InstanceTool::ArchiveInstance => archive_instance(cx, parse(tool.name(), arguments)?),
    }
}

fn create_instance(cx: &Context<'_>, args: Create) -> Result<Output, ToolError> {
    let new = NewInstance {
        id: cx.instance.cloned(),
        description: args.description,
        max_instances: cx.quotas.max_instances,
    };
    let instance = cx.state.create(cx.tenant, new)?;
    cx.record(Entry::new(Event::InstanceCreated).instance(instance.id.as_str()));
    let summary = format!("created instance `{}`", instance.id);
    Ok(one(instance, summary))
}

fn describe_instance(cx: &Context<'_>, _: ById) -> Result<Output, ToolError> {
    let instance = cx.state.describe(cx.tenant, cx.instance()?)?;
    let summary = format!("instance `{}`", instance.id);
    Ok(one(instance, summary))
}

fn update_instance(cx: &Context<'_>, args: Update) -> Result<Output, ToolError> {
    let id = cx.instance()?;
    let description = Some(Some(args.description).filter(|d| !d.is_empty()));
    let instance = cx.state.update(cx.tenant, id, description)?;
    cx.record(Entry::new(Event::InstanceUpdated).instance(instance.id.as_str()));
    let summary = format!("updated instance `{}`", instance.id);
    Ok(one(instance, summary))
}

fn archive_instance(cx: &Context<'_>, _: ById) -> Result<Output, ToolError> {
    let id = cx.instance()?;
    // Each unfinished job is observed first: one that ended meanwhile no longer
    // blocks; one the executor cannot answer for stays unfinished (the safe side). Once no
    // job stands in the way, this gateway's proxied servers in the instance stop (each stop
    // audited by the proxy manager), releasing their leases; a lease still held then is
    // another gateway's or command's, and refuses the archive.
    let instance = cx.state.archive_releasing(
        cx.tenant,
        id,
        |job| cx.jobs.observe(cx.state, job),
        (cx.proxies.runs_in(cx.tenant, id.as_str()))
            .then_some(|| cx.proxies.stop_instance(cx.tenant, id.as_str())),
    )?;
    cx.record(Entry::new(Event::InstanceArchived).instance(instance.id.as_str()));
    let summary = format!("archived instance `{}`", instance.id);
    Ok(one(instance, summary))
}

fn one(instance: Instance, summary: String) -> Output {
    let result = InstanceResult {
        instance: instance.into(),
    };
    Output::new(&result, summary, Outcome::default())
}

fn listing(page: Page<Instance>, noun: &str) -> Output {
    let summary = page.summary(noun);
    let result = InstanceList {
        instances: page.items.into_iter().map(InstanceView::from).collect(),
        total: page.total,
        offset: page.offset,
    };
    Output::new(&result, summary, Outcome::default())
}
