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

use std::collections::BTreeMap;

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde::Serialize;
use serde_json::Value;

use crate::state::{Instance, InstanceId, JobId, JobMode, JobPhase, JobRecord, Resources};
use crate::time::Timestamp;
use hpcgate_executors::files as exec;
use hpcgate_executors::slurm;

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

/// The schema of a [`Timestamp`]: RFC 3339, UTC, microseconds.
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

// ---- instances -------------------------------------------------------------------------------

// create_instance, describe_instance, update_instance, archive_instance.
/// One instance.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InstanceResult {
    pub instance: InstanceView,
}

// list_instances, list_archived_instances.
/// One page of instances.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InstanceList {
    pub instances: Vec<InstanceView>,
    /// How many the whole listing has.
    pub total: usize,
    /// Where this page starts in it.
    pub offset: usize,
}

/// An instance: no host path, only the sandbox view.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InstanceView {
    #[schemars(with = "String")]
    pub id: InstanceId,
    pub description: Option<String>,
    #[schemars(with = "DateTime")]
    pub created_at: Timestamp,
    #[schemars(with = "DateTime")]
    pub updated_at: Timestamp,
    pub archived: bool,
    /// When it was archived (null for a live instance).
    #[schemars(with = "Option<DateTime>")]
    pub archived_at: Option<Timestamp>,
    /// The workspace as the sandbox sees it (`/workspace`).
    pub workspace: &'static str,
    /// The output directory as the sandbox sees it (`/output`).
    pub output: &'static str,
}

impl From<Instance> for InstanceView {
    fn from(instance: Instance) -> InstanceView {
        let Instance {
            id,
            description,
            created_at,
            updated_at,
            archived,
            archived_at,
            workspace,
            output,
        } = instance;
        InstanceView {
            id,
            description,
            created_at,
            updated_at,
            archived,
            archived_at,
            workspace,
            output,
        }
    }
}

// ---- jobs --------------------------------------------------------------------------------------

// submit_job, run_python, poll_job, cancel_job.
/// One job, with the last lines of its output.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobResult {
    pub job: Job,
}

// list_jobs.
/// One page of jobs, newest first (without their output).
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
    /// How many the whole listing has.
    pub total: usize,
    /// Where this page starts in it.
    pub offset: usize,
}

/// A job as agents see it: no host paths, no Slurm id.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Job {
    #[schemars(with = "String")]
    pub job_id: JobId,
    #[schemars(with = "String")]
    pub instance_id: InstanceId,
    pub mode: Mode,
    pub status: Status,
    /// Whether the job has ended for good: its status no longer changes.
    #[serde(rename = "final")]
    pub is_final: bool,
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// The executor's words: a Slurm reason or state, or why a local job ended.
    pub reason: Option<String>,
    /// A note for people (a start failure, a lost supervisor).
    pub message: Option<String>,
    /// The command as an argv (a shell command line is `/bin/sh -c LINE`).
    pub command: Vec<String>,
    /// The resources requested, as the policies left them.
    pub resources: JobResources,
    #[schemars(with = "DateTime")]
    pub submitted_at: Timestamp,
    #[schemars(with = "Option<DateTime>")]
    pub started_at: Option<Timestamp>,
    #[schemars(with = "Option<DateTime>")]
    pub finished_at: Option<Timestamp>,
    /// Seconds from start to end (to now while it runs).
    pub duration_s: Option<f64>,
    /// The last lines of stdout (not in a listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub stdout_tail: Option<String>,
    /// The last lines of stderr (not in a listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub stderr_tail: Option<String>,
    /// Present (true) when the job still ran at the end of the wait and `detach` was false,
    /// so it was cancelled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cancelled_at_end_of_wait: bool,
}

impl Job {
    /// The job of `record`, without output tails.
    pub fn new(record: &JobRecord) -> Job {
        let duration_s = record.started_at.map(|started| {
            let end = record.finished_at.unwrap_or_else(Timestamp::now);
            (started.until(end).as_secs_f64() * 100.0).round() / 100.0
        });
        Job {
            job_id: record.job_id.clone(),
            instance_id: record.instance.clone(),
            mode: record.mode.into(),
            status: record.status.phase.into(),
            is_final: record.is_final(),
            exit_code: record.status.exit_code,
            signal: record.status.signal,
            reason: record.status.reason.clone(),
            message: record.status.message.clone(),
            command: record.command.clone(),
            resources: record.resources.clone().into(),
            submitted_at: record.submitted_at,
            started_at: record.started_at,
            finished_at: record.finished_at,
            duration_s,
            stdout_tail: None,
            stderr_tail: None,
            cancelled_at_end_of_wait: false,
        }
    }
}

/// Where a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Local,
    Slurm,
}

impl From<JobMode> for Mode {
    fn from(mode: JobMode) -> Mode {
        match mode {
            JobMode::Local => Mode::Local,
            JobMode::Slurm => Mode::Slurm,
        }
    }
}

/// A job's state: `submitting`, `pending`, `running`, `missing` (not seen by its executor right
/// now) and `unknown` are not final; the others are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Submitting,
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    Oom,
    OutputCap,
    Preempted,
    NodeFail,
    StartFailed,
    Lost,
    Missing,
    Unknown,
}

impl From<JobPhase> for Status {
    fn from(phase: JobPhase) -> Status {
        match phase {
            JobPhase::Submitting => Status::Submitting,
            JobPhase::Pending => Status::Pending,
            JobPhase::Running => Status::Running,
            JobPhase::Completed => Status::Completed,
            JobPhase::Failed => Status::Failed,
            JobPhase::Cancelled => Status::Cancelled,
            JobPhase::Timeout => Status::Timeout,
            JobPhase::Oom => Status::Oom,
            JobPhase::OutputCap => Status::OutputCap,
            JobPhase::Preempted => Status::Preempted,
            JobPhase::NodeFail => Status::NodeFail,
            JobPhase::StartFailed => Status::StartFailed,
            JobPhase::Lost => Status::Lost,
            JobPhase::Missing => Status::Missing,
            JobPhase::Unknown => Status::Unknown,
        }
    }
}

/// Requested resources (null: not asked for).
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobResources {
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    /// The job is stopped after this many seconds.
    pub time_limit_s: Option<u64>,
    pub gpus: Option<u32>,
}

impl From<Resources> for JobResources {
    fn from(resources: Resources) -> JobResources {
        let Resources {
            cpus,
            memory_mb,
            time_limit_s,
            gpus,
        } = resources;
        JobResources {
            cpus,
            memory_mb,
            time_limit_s,
            gpus,
        }
    }
}

// ---- files -------------------------------------------------------------------------------------

// read_file.
/// Bytes of a file, from an offset.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadResult {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    /// The bytes read, as UTF-8 text or base64 (the `encoding` asked for).
    pub content: String,
    /// Where the read started.
    pub offset: u64,
    /// How many bytes were read.
    pub bytes: u64,
    /// The file's size.
    pub total_size: u64,
    /// Whether the read reached the end of the file.
    pub eof: bool,
}

/// `read_file` for a door that streams the bytes itself (a WebDAV GET): what was opened. Never
/// an MCP result (MCP lends no streaming body), so no schema advertises it.
#[derive(Debug, Serialize)]
pub struct Opened {
    pub path: String,
    pub total_size: u64,
    pub offset: u64,
    pub bytes: u64,
}

// write_file.
/// A file written.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Written {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    pub bytes_written: u64,
    /// The file's size after the write.
    pub size: u64,
    /// Whether the file did not exist before.
    pub created: bool,
}

impl From<exec::WriteResult> for Written {
    fn from(written: exec::WriteResult) -> Written {
        let exec::WriteResult {
            path,
            bytes_written,
            size,
            created,
        } = written;
        Written {
            path,
            bytes_written,
            size,
            created,
        }
    }
}

// list_directory.
/// A directory's entries.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Listing {
    /// The canonical sandbox-view path of the listed directory.
    pub path: String,
    pub entries: Vec<Entry>,
    /// Whether the cap was reached and entries were left out.
    pub truncated: bool,
}

impl From<exec::ListResult> for Listing {
    fn from(listed: exec::ListResult) -> Listing {
        let exec::ListResult {
            path,
            entries,
            truncated,
        } = listed;
        Listing {
            path,
            entries: entries.into_iter().map(Entry::from).collect(),
            truncated,
        }
    }
}

// search_files.
/// The paths that match a glob.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Found {
    /// The canonical sandbox-view path of the searched directory.
    pub path: String,
    pub matches: Vec<Entry>,
    /// Whether a cap was reached before the whole tree was searched.
    pub truncated: bool,
}

impl From<exec::SearchResult> for Found {
    fn from(found: exec::SearchResult) -> Found {
        let exec::SearchResult {
            path,
            matches,
            truncated,
        } = found;
        Found {
            path,
            matches: matches.into_iter().map(Entry::from).collect(),
            truncated,
        }
    }
}

/// One entry of a listing or a search.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Entry {
    /// The sandbox-view path, escaped.
    pub path: String,
    /// The final name, escaped.
    pub name: String,
    /// Whether `path` contains escapes (and cannot be passed back verbatim).
    pub escaped: bool,
    #[serde(flatten)]
    pub facts: Facts,
}

impl From<exec::ListEntry> for Entry {
    fn from(entry: exec::ListEntry) -> Entry {
        let exec::ListEntry {
            path,
            name,
            escaped,
            facts,
        } = entry;
        Entry {
            path,
            name,
            escaped,
            facts: facts.into(),
        }
    }
}

/// What a path is, without following a final symlink.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Facts {
    pub kind: Kind,
    /// Size in bytes (for a symlink: the length of its target).
    pub size: u64,
    /// Last modification, seconds since the Unix epoch.
    pub modified_unix: i64,
    /// Permission bits (`0o7777` mask), as a number.
    pub mode: u32,
    pub hard_links: u64,
}

impl From<exec::EntryFacts> for Facts {
    fn from(facts: exec::EntryFacts) -> Facts {
        let exec::EntryFacts {
            kind,
            size,
            modified_unix,
            mode,
            hard_links,
        } = facts;
        Facts {
            kind: kind.into(),
            size,
            modified_unix,
            mode,
            hard_links,
        }
    }
}

/// The kind of a file-system entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    BlockDevice,
    CharDevice,
    Other,
}

impl From<exec::EntryKind> for Kind {
    fn from(kind: exec::EntryKind) -> Kind {
        match kind {
            exec::EntryKind::File => Kind::File,
            exec::EntryKind::Directory => Kind::Directory,
            exec::EntryKind::Symlink => Kind::Symlink,
            exec::EntryKind::Fifo => Kind::Fifo,
            exec::EntryKind::Socket => Kind::Socket,
            exec::EntryKind::BlockDevice => Kind::BlockDevice,
            exec::EntryKind::CharDevice => Kind::CharDevice,
            exec::EntryKind::Other => Kind::Other,
        }
    }
}

// stat_path.
/// What a path is, without following a final symlink.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PathStat {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    #[serde(flatten)]
    pub facts: Facts,
    /// For a symlink: the text it contains, escaped (not followed; it may point anywhere).
    pub link_target: Option<String>,
}

impl From<exec::StatResult> for PathStat {
    fn from(stat: exec::StatResult) -> PathStat {
        let exec::StatResult {
            path,
            facts,
            link_target,
        } = stat;
        PathStat {
            path,
            facts: facts.into(),
            link_target,
        }
    }
}

// make_directory.
/// A directory made (or found there).
#[derive(Debug, Serialize, JsonSchema)]
pub struct MadeDirectory {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    /// False if it existed already (only with `parents`).
    pub created: bool,
}

impl From<exec::MakeDirectoryResult> for MadeDirectory {
    fn from(made: exec::MakeDirectoryResult) -> MadeDirectory {
        let exec::MakeDirectoryResult { path, created } = made;
        MadeDirectory { path, created }
    }
}

// move_path.
/// A file or directory moved.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Moved {
    /// The canonical sandbox-view source, escaped.
    pub from: String,
    /// The canonical sandbox-view destination, escaped.
    pub to: String,
    pub kind: Kind,
}

impl From<exec::MoveResult> for Moved {
    fn from(moved: exec::MoveResult) -> Moved {
        let exec::MoveResult { from, to, kind } = moved;
        Moved {
            from,
            to,
            kind: kind.into(),
        }
    }
}

// copy_path.
/// A file or directory tree copied.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Copied {
    /// The canonical sandbox-view source, escaped.
    pub from: String,
    /// The canonical sandbox-view destination, escaped.
    pub to: String,
    pub kind: Kind,
    /// Regular files copied.
    pub files: u64,
    /// Directories created (the top one included).
    pub directories: u64,
    /// Bytes copied.
    pub bytes: u64,
}

impl From<exec::CopyResult> for Copied {
    fn from(copied: exec::CopyResult) -> Copied {
        let exec::CopyResult {
            from,
            to,
            kind,
            files,
            directories,
            bytes,
        } = copied;
        Copied {
            from,
            to,
            kind: kind.into(),
            files,
            directories,
            bytes,
        }
    }
}

// delete_path.
/// A path deleted.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Deleted {
    /// The canonical sandbox-view path, escaped.
    pub path: String,
    /// What the path was.
    pub kind: Kind,
}

impl From<exec::DeleteResult> for Deleted {
    fn from(deleted: exec::DeleteResult) -> Deleted {
        let exec::DeleteResult { path, kind } = deleted;
        Deleted {
            path,
            kind: kind.into(),
        }
    }
}

// ---- cluster -----------------------------------------------------------------------------------

// cluster_status.
/// The cluster's load and your unfinished jobs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClusterStatus {
    /// The Slurm cluster (null when Slurm is not enabled: local jobs only).
    pub slurm: Option<SlurmStatus>,
    pub yours: YourJobs,
}

/// The caller's unfinished jobs.
#[derive(Debug, Serialize, JsonSchema)]
pub struct YourJobs {
    pub unfinished_jobs: usize,
    pub unfinished_local_jobs: usize,
}

/// The Slurm cluster: partitions and the queue (all users).
#[derive(Debug, Serialize, JsonSchema)]
pub struct SlurmStatus {
    pub partitions: Vec<Partition>,
    /// Jobs waiting in the queue (all users).
    pub pending_jobs: u32,
    /// Jobs running or completing (all users).
    pub running_jobs: u32,
}

impl From<slurm::ClusterStatus> for SlurmStatus {
    fn from(status: slurm::ClusterStatus) -> SlurmStatus {
        let slurm::ClusterStatus {
            partitions,
            pending_jobs,
            running_jobs,
        } = status;
        SlurmStatus {
            partitions: partitions.into_iter().map(Partition::from).collect(),
            pending_jobs,
            running_jobs,
        }
    }
}

/// One partition, summed over its nodes.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Partition {
    pub name: String,
    /// The partition jobs go to when none is named.
    pub default: bool,
    /// Whether the partition accepts jobs.
    pub available: bool,
    pub cpus: Cpus,
    pub gpus_total: u32,
    pub gpus_used: u32,
    pub nodes: Vec<Node>,
}

impl From<slurm::PartitionStatus> for Partition {
    fn from(partition: slurm::PartitionStatus) -> Partition {
        let slurm::PartitionStatus {
            name,
            default,
            available,
            cpus,
            gpus_total,
            gpus_used,
            nodes,
        } = partition;
        let slurm::CpuCounts {
            allocated,
            idle,
            other,
            total,
        } = cpus;
        Partition {
            name,
            default,
            available,
            cpus: Cpus {
                allocated,
                idle,
                other,
                total,
            },
            gpus_total,
            gpus_used,
            nodes: nodes
                .into_iter()
                .map(|slurm::NodeStatus { name, state }| Node { name, state })
                .collect(),
        }
    }
}

/// CPUs as Slurm counts them.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Cpus {
    pub allocated: u32,
    pub idle: u32,
    /// Down, drained or otherwise unusable.
    pub other: u32,
    pub total: u32,
}

/// One node of a partition.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Node {
    pub name: String,
    /// Slurm's long state (`idle`, `mixed`, `allocated`, `drained`, `down*`, …), verbatim.
    pub state: String,
}

// host_exec.
/// The host commands (when called without `command`), or how one ran.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum HostExecResult {
    Commands(HostCommands),
    Ran(HostRan),
}

/// The admin-defined host commands, by key.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HostCommands {
    pub commands: BTreeMap<String, HostCommandInfo>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct HostCommandInfo {
    pub description: String,
}

/// How a host command ran.
#[derive(Debug, Serialize, JsonSchema)]
pub struct HostRan {
    /// The key it was run by.
    pub command: String,
    /// Null when a signal ended it (the timeout included).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub elapsed_s: f64,
    /// The first 64 KiB of stdout.
    pub stdout: String,
    /// The first 64 KiB of stderr.
    pub stderr: String,
    /// Whether stdout was longer than what is returned.
    pub stdout_truncated: bool,
}
