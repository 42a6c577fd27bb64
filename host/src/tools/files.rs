//! File tools: `read_file`, `write_file`, `list_directory`, `stat_path`, `make_directory`,
//! `move_path`, `copy_path`, `delete_path`, `search_files`. Paths are in the
//! sandbox view (`/workspace/…`, `/output/…`, relative → workspace); every operation runs
//! beneath the instance's directories through the cap-std executor, which refuses escapes.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::results::{
    Copied, Deleted, Found, Listing, MadeDirectory, Moved, Opened, PathStat, ReadResult, Written,
};
use super::{
    Area, Context, Output, ToolError, ToolSpec, output_schema, parse, schema, tool_family,
};
use crate::audit::Outcome;
use crate::gateway::Failure;
use hpcgate_executors::files::{
    self as exec, CopyRequest, DeleteRequest, Encoding, InstanceRoots, ListRequest,
    MakeDirectoryRequest, MoveRequest, ReadRequest, SearchRequest, StatRequest, WriteMode,
    WriteRequest,
};

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Enc {
    #[default]
    Utf8,
    Base64,
}

impl From<Enc> for Encoding {
    fn from(e: Enc) -> Encoding {
        match e {
            Enc::Utf8 => Encoding::Utf8,
            Enc::Base64 => Encoding::Base64,
        }
    }
}

tool_family! {
    /// The file tools.
    FileTool {
        ReadFile => "read_file",
        WriteFile => "write_file",
        ListDirectory => "list_directory",
        StatPath => "stat_path",
        MakeDirectory => "make_directory",
        MovePath => "move_path",
        CopyPath => "copy_path",
        DeletePath => "delete_path",
        SearchFiles => "search_files",
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Read {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    /// `/workspace/…`, `/output/…`, or relative to `/workspace`.
    path: String,
    #[serde(default)]
    offset: u64,
    /// Bytes to read (capped by the gateway).
    length: Option<u64>,
    /// `utf8` (default) or `base64` for binary files.
    #[serde(default)]
    encoding: Enc,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Write {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    path: String,
    // Required in the schema; absent only in a call that streams its body beside the
    // arguments (a WebDAV PUT), which must not give it (serde takes a missing `Option` as
    // `None`; `write_file` refuses that without a streamed body).
    #[schemars(with = "String")]
    content: Option<String>,
    #[serde(default)]
    encoding: Enc,
    /// Append instead of replacing the file atomically.
    #[serde(default)]
    append: bool,
    /// Create missing parent directories.
    #[serde(default)]
    create_dirs: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct List {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    #[serde(default = "workspace")]
    path: String,
    #[serde(default)]
    recursive: bool,
    max_entries: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Stat {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MakeDirectory {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    path: String,
    /// Create missing parents too.
    #[serde(default)]
    parents: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Move {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    source: String,
    destination: String,
    /// Replace an existing destination.
    #[serde(default)]
    overwrite: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Copy {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    /// A regular file or a directory (copied with everything beneath it).
    source: String,
    /// The copy's path (not a directory to copy into).
    destination: String,
    /// Replace an existing destination (a file, or an empty directory).
    #[serde(default)]
    overwrite: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Delete {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    path: String,
    /// Required to delete a non-empty directory.
    #[serde(default)]
    recursive: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Search {
    // Validated once by the gateway; the tool takes it from `Context::instance`.
    #[serde(rename = "instance_id")]
    _instance_id: String,
    /// Glob over paths relative to `path`: `*` stays within a directory, `**` crosses them.
    pattern: String,
    #[serde(default = "workspace")]
    path: String,
    max_results: Option<usize>,
}

fn workspace() -> String {
    "/workspace".to_owned()
}

pub(super) fn spec(tool: FileTool) -> ToolSpec {
    let spec = |description, input_schema| {
        let output_schema = match tool {
            FileTool::ReadFile => output_schema::<ReadResult>(),
            FileTool::WriteFile => output_schema::<Written>(),
            FileTool::ListDirectory => output_schema::<Listing>(),
            FileTool::StatPath => output_schema::<PathStat>(),
            FileTool::MakeDirectory => output_schema::<MadeDirectory>(),
            FileTool::MovePath => output_schema::<Moved>(),
            FileTool::CopyPath => output_schema::<Copied>(),
            FileTool::DeletePath => output_schema::<Deleted>(),
            FileTool::SearchFiles => output_schema::<Found>(),
        };
        ToolSpec::new(tool.name(), description, input_schema, output_schema)
    };
    match tool {
        FileTool::ReadFile => spec("Read a file of an instance (utf8 text or base64), from an offset; says whether the end was reached.", schema::<Read>()).read_only(),
        FileTool::WriteFile => spec("Write a file of an instance atomically (or append).", schema::<Write>()).destructive(),
        FileTool::ListDirectory => spec("List a directory of an instance, optionally recursively.", schema::<List>()).read_only(),
        FileTool::StatPath => spec("Describe a path of an instance without following a final symlink.", schema::<Stat>()).read_only(),
        FileTool::MakeDirectory => spec("Create a directory in an instance.", schema::<MakeDirectory>()).idempotent(),
        FileTool::MovePath => spec("Move or rename a file or directory within an instance (across /workspace and /output too).", schema::<Move>()).destructive(),
        FileTool::CopyPath => spec("Copy a file or a directory tree within an instance (across /workspace and /output too); symlinks and special files are refused, the copy appears only once complete.", schema::<Copy>()).destructive(),
        FileTool::DeletePath => spec("Delete a file, a symlink (never its target) or, with recursive, a directory tree.", schema::<Delete>()).destructive().idempotent(),
        FileTool::SearchFiles => spec("Find paths in an instance matching a glob.", schema::<Search>()).read_only(),
    }
}

pub(super) fn run(
    tool: FileTool,
    cx: &Context<'_>,
    arguments: Map<String, Value>,
) -> Result<Output, ToolError> {
    match tool {
        FileTool::ReadFile => read_file(cx, parse(tool.name(), arguments)?),
        FileTool::WriteFile => write_file(cx, parse(tool.name(), arguments)?),
        FileTool::ListDirectory => list_directory(cx, parse(tool.name(), arguments)?),
        FileTool::StatPath => stat_path(cx, parse(tool.name(), arguments)?),
        FileTool::MakeDirectory => make_directory(cx, parse(tool.name(), arguments)?),
        FileTool::MovePath => move_path(cx, parse(tool.name(), arguments)?),
        FileTool::CopyPath => copy_path(cx, parse(tool.name(), arguments)?),
        FileTool::DeletePath => delete_path(cx, parse(tool.name(), arguments)?),
        FileTool::SearchFiles => search_files(cx, parse(tool.name(), arguments)?),
    }
}

/// The call's instance's workspace and output for the cap-std executor (each opened when a
/// path first names it).
fn roots(cx: &Context<'_>) -> Result<InstanceRoots, ToolError> {
    let paths = cx.state.instance_paths_ambient(cx.tenant, cx.instance()?)?;
    Ok(InstanceRoots::ambient(&paths.workspace, &paths.output))
}

fn read_file(cx: &Context<'_>, args: Read) -> Result<Output, ToolError> {
    if let Some(transfer) = cx.transfer.filter(|t| t.wants_download()) {
        return open_for_download(cx, transfer, args);
    }
    let request = ReadRequest {
        path: args.path,
        offset: args.offset,
        length: args.length,
    };
    let read = exec::read_file(&roots(cx)?, cx.files, &request)?;
    let content = exec::encode(&read.path, &read.data, args.encoding.into())?;
    let bytes = read.data.len() as u64;
    let summary = format!(
        "read {bytes} of {} bytes from `{}`",
        read.total_size, read.path
    );
    let result = ReadResult {
        path: read.path,
        content,
        offset: read.offset,
        bytes,
        total_size: read.total_size,
        eof: read.eof,
    };
    let outcome = Outcome {
        bytes: Some(bytes),
        ..Outcome::default()
    };
    Ok(Output::new(&result, summary, outcome))
}

/// `read_file` for a door that streams (a WebDAV GET): the file is opened beneath the root and
/// handed over in the transfer; the door sends the bytes `offset`..`offset + length` of it.
fn open_for_download(
    cx: &Context<'_>,
    transfer: &crate::gateway::Transfer,
    args: Read,
) -> Result<Output, ToolError> {
    let opened = exec::open_file(&roots(cx)?, cx.files, &args.path)?;
    let (path, size) = (opened.path.clone(), opened.size);
    let bytes = args
        .length
        .unwrap_or(size)
        .min(size.saturating_sub(args.offset));
    transfer.deliver(opened);
    let summary = format!("opened `{path}` ({size} bytes) to send {bytes} bytes");
    let result = Opened {
        path,
        total_size: size,
        offset: args.offset,
        bytes,
    };
    let outcome = Outcome {
        bytes: Some(bytes),
        ..Outcome::default()
    };
    Ok(Output::new(&result, summary, outcome))
}

fn write_file(cx: &Context<'_>, args: Write) -> Result<Output, ToolError> {
    let upload = cx.transfer.and_then(|t| t.take_upload());
    let area = area(&args.path);
    let data = match (upload, &args.content) {
        (Some(upload), None) if !args.append => return write_upload(cx, upload, args, area),
        (Some(_), _) => {
            return Err(ToolError::new(
                "a streamed body replaces the file whole: give neither `content` nor `append`"
                    .to_owned(),
            ));
        }
        (None, None) => {
            return Err(ToolError::new(
                "invalid arguments for `write_file`: `content` is required".to_owned(),
            ));
        }
        (None, Some(content)) => exec::decode(&args.path, content, args.encoding.into())?,
    };
    let mode = if args.append {
        WriteMode::Append
    } else {
        WriteMode::Replace
    };
    // Held until the file is in place, so that writes in flight together cannot pass the quota.
    let _hold = super::hold_room(cx, cx.instance()?, area, Some(data.len() as u64), u64::MAX)?;
    let request = WriteRequest {
        path: args.path,
        data,
        mode,
        create_dirs: args.create_dirs,
    };
    let written = exec::write_file(&roots(cx)?, cx.files, &request)?;
    Ok(written_output(written))
}

/// `write_file` from a streamed body: refused before reading when the announced size is over
/// the door's cap or the quota's room, cut while streaming when the body passes either.
fn write_upload(
    cx: &Context<'_>,
    mut upload: crate::gateway::Upload,
    args: Write,
    area: Area,
) -> Result<Output, ToolError> {
    let instance = cx.instance()?;
    if let Some(announced) = upload.announced
        && announced > upload.max_bytes
    {
        return Err(ToolError::of(
            Failure::TooLarge,
            format!(
                "`{}` is too large: {announced} bytes exceeds the limit of {} bytes for one upload; send a smaller file or ask the admin to raise `[dav] max_upload_bytes`",
                args.path, upload.max_bytes
            ),
        ));
    }
    // The room it may fill, held until it is in place (or failed), so that uploads in flight
    // together cannot pass the quota.
    let hold = super::hold_room(cx, instance, area, upload.announced, upload.max_bytes)?;
    let room = hold.as_ref().map(|hold| hold.bytes());
    let request = exec::StreamWriteRequest {
        path: args.path,
        // Cut at the size it announced too, quota or not.
        max_bytes: room
            .map_or(upload.max_bytes, |room| room.min(upload.max_bytes))
            .min(upload.announced.unwrap_or(u64::MAX)),
        create_dirs: args.create_dirs,
        create_new: upload.create_only,
    };
    let announced = upload.announced;
    let written = match exec::write_stream(&roots(cx)?, &request, &mut upload.source) {
        Err(exec::FileError::TooLarge { path, size, .. })
            if announced.is_some_and(|said| size > said) =>
        {
            return Err(ToolError::of(
                Failure::TooLarge,
                format!(
                    "`{path}` is too large: the body is longer than the {} bytes its request announced; send the size it has",
                    announced.unwrap_or_default()
                ),
            ));
        }
        // Past the quota's room, when that room (not the upload cap) was the limit.
        Err(exec::FileError::TooLarge { size, .. })
            if room.is_some_and(|r| size > r && r < upload.max_bytes) =>
        {
            drop(hold);
            super::check_space(cx, instance, area, size)?;
            return Err(ToolError::of(
                Failure::NoRoom,
                format!("the upload passed the quota's room ({size} bytes)"),
            ));
        }
        other => other?,
    };
    Ok(written_output(written))
}

fn written_output(written: exec::WriteResult) -> Output {
    let summary = format!(
        "wrote {} bytes to `{}`",
        written.bytes_written, written.path
    );
    let outcome = Outcome {
        bytes: Some(written.bytes_written),
        ..Outcome::default()
    };
    Output::new(&Written::from(written), summary, outcome)
}

fn list_directory(cx: &Context<'_>, args: List) -> Result<Output, ToolError> {
    let request = ListRequest {
        path: args.path,
        recursive: args.recursive,
        max_entries: args.max_entries,
    };
    let mut listed = exec::list_directory(&roots(cx)?, cx.files, &request)?;
    let hidden = super::visible::keep_visible(cx, &listed.path, &mut listed.entries);
    let more = if listed.truncated { " (truncated)" } else { "" };
    let summary = format!(
        "{} entries in `{}`{more}{hidden}",
        listed.entries.len(),
        listed.path
    );
    Ok(output(Listing::from(listed), summary))
}

fn stat_path(cx: &Context<'_>, args: Stat) -> Result<Output, ToolError> {
    let stat = exec::stat_path(&roots(cx)?, &StatRequest { path: args.path })?;
    let summary = format!(
        "`{}`: {:?}, {} bytes",
        stat.path, stat.facts.kind, stat.facts.size
    );
    Ok(output(PathStat::from(stat), summary))
}

fn make_directory(cx: &Context<'_>, args: MakeDirectory) -> Result<Output, ToolError> {
    let request = MakeDirectoryRequest {
        path: args.path,
        parents: args.parents,
    };
    let made = exec::make_directory(&roots(cx)?, &request)?;
    let verb = if made.created {
        "created"
    } else {
        "already there:"
    };
    let summary = format!("{verb} `{}`", made.path);
    Ok(output(MadeDirectory::from(made), summary))
}

fn move_path(cx: &Context<'_>, args: Move) -> Result<Output, ToolError> {
    // Within an area a move adds no bytes; between areas it adds the source's to the
    // destination's, which must have the room under its quota.
    let (instance, from, area) = (cx.instance()?, area(&args.source), area(&args.destination));
    // The room the source takes is held until the move is done, so that calls in flight
    // together cannot pass the quota.
    let hold = if from == area {
        None
    } else {
        hold_for(cx, instance, area, &args.source)?
    };
    let room = hold.as_ref().map(|hold| hold.bytes());
    let request = MoveRequest {
        from: args.source,
        to: args.destination,
        overwrite: args.overwrite,
        max_bytes: room,
    };
    let moved = match exec::move_path(&roots(cx)?, cx.files, &request) {
        // The only byte cap of a move is the quota's room: say so in the quota's words.
        Err(exec::FileError::TooLarge { size, .. }) if room.is_some() => {
            drop(hold);
            super::check_space(cx, instance, area, size)?;
            return Err(ToolError::of(
                Failure::Busy,
                format!("the move needs {size} bytes; retry"),
            ));
        }
        other => other?,
    };
    let summary = format!("moved `{}` to `{}`", moved.from, moved.to);
    Ok(output(Moved::from(moved), summary))
}

fn copy_path(cx: &Context<'_>, args: Copy) -> Result<Output, ToolError> {
    let (instance, area) = (cx.instance()?, area(&args.destination));
    // The room the source takes is held until the copy is in place (see `move_path`).
    let hold = hold_for(cx, instance, area, &args.source)?;
    let room = hold.as_ref().map(|hold| hold.bytes());
    let request = CopyRequest {
        from: args.source,
        to: args.destination,
        overwrite: args.overwrite,
        max_bytes: room,
    };
    let copied = match exec::copy_path(&roots(cx)?, cx.files, &request) {
        // The only byte cap of a copy is the quota's room: say so in the quota's words.
        Err(exec::FileError::TooLarge { size, .. }) if room.is_some() => {
            drop(hold);
            super::check_space(cx, instance, area, size)?;
            return Err(ToolError::of(
                Failure::Busy,
                format!("the copy needs {size} bytes; retry"),
            ));
        }
        other => other?,
    };
    let summary = format!(
        "copied `{}` to `{}` ({} files, {} bytes)",
        copied.from, copied.to, copied.files, copied.bytes
    );
    let outcome = Outcome {
        bytes: Some(copied.bytes),
        ..Outcome::default()
    };
    Ok(Output::new(&Copied::from(copied), summary, outcome))
}

/// Which quota area a sandbox-view path falls in.
/// Holds in `area` the room the bytes at `source` take, when the area has a quota (measured
/// only then). The copy or move is then capped at that: a source that grew since is refused.
fn hold_for(
    cx: &Context<'_>,
    instance: &crate::state::InstanceId,
    area: Area,
    source: &str,
) -> Result<Option<super::room::Hold>, ToolError> {
    if !super::has_quota(cx, area) {
        return Ok(None);
    }
    let size = exec::bytes_at(&roots(cx)?, cx.files, source)?;
    super::hold_room(cx, instance, area, Some(size), u64::MAX)
}

fn area(path: &str) -> Area {
    if hpcgate_policy_sdk::path::normalize(path).starts_with("/output") {
        Area::Output
    } else {
        Area::Workspace
    }
}

fn delete_path(cx: &Context<'_>, args: Delete) -> Result<Output, ToolError> {
    let request = DeleteRequest {
        path: args.path,
        recursive: args.recursive,
    };
    let deleted = exec::delete_path(&roots(cx)?, cx.files, &request)?;
    let summary = format!("deleted `{}`", deleted.path);
    Ok(output(Deleted::from(deleted), summary))
}

fn search_files(cx: &Context<'_>, args: Search) -> Result<Output, ToolError> {
    let request = SearchRequest {
        path: args.path,
        pattern: args.pattern,
        max_results: args.max_results,
    };
    let mut found = exec::search_files(&roots(cx)?, cx.files, &request)?;
    let hidden = super::visible::keep_visible(cx, &found.path, &mut found.matches);
    let more = if found.truncated { " (truncated)" } else { "" };
    let summary = format!(
        "{} matches in `{}`{more}{hidden}",
        found.matches.len(),
        found.path
    );
    Ok(output(Found::from(found), summary))
}

fn output(result: impl serde::Serialize, summary: String) -> Output {
    Output::new(&result, summary, Outcome::default())
}
