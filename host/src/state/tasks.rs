//! MCP tasks (`io.modelcontextprotocol/tasks`): a task is a handle on a job, kept on disk as
//! `tasks/<task-id>.json` beside the tenant's jobs, so tasks outlive the gateway exactly as
//! long as the jobs they follow (the job record holds the state; the task holds only which
//! job, and how its result was asked for).
//!
//! A task id is 160 random bits: it cannot be guessed or enumerated. It is not a credential on
//! its own: lookups take the caller's tenant and read only that tenant's directory, so another
//! tenant's id is "not found", exactly like an id nobody issued. A malformed id is not found
//! either (never an error that echoes it or tells it apart).

use std::fs;
use std::io;

use serde::{Deserialize, Serialize};

use super::State;
use super::error::StateError;
use super::fsops::{ensure_dir_private, is_real_dir, read_json, sync_dir, write_json_atomic};
use super::id::{InstanceId, JobId, TenantName};
use super::layout::TenantPaths;
use super::random::random_base32;
use crate::time::Timestamp;

/// Format version of a task file.
const TASK_VERSION: u32 = 1;
const TASK_PREFIX: &str = "t-";
/// 32 characters of base32: 160 random bits.
const TASK_RANDOM_LEN: usize = 32;

/// A task id: `t-` + 32 characters of `[a-z2-7]`, made by [`State::new_task`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

impl TaskId {
    /// `None` unless `raw` has exactly the generated form (so it is a safe file name).
    pub fn parse(raw: &str) -> Option<TaskId> {
        let random = raw.strip_prefix(TASK_PREFIX)?;
        let ok = random.len() == TASK_RANDOM_LEN
            && random
                .bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b));
        ok.then(|| TaskId(raw.to_owned()))
    }

    fn generate() -> Result<TaskId, StateError> {
        Ok(TaskId(format!(
            "{TASK_PREFIX}{}",
            random_base32(TASK_RANDOM_LEN)?
        )))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TaskId {
    type Error = String;
    fn try_from(raw: String) -> Result<Self, String> {
        TaskId::parse(&raw).ok_or_else(|| "not a task id".to_owned())
    }
}

impl From<TaskId> for String {
    fn from(value: TaskId) -> String {
        value.0
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One task: the job it follows and how the call that made it asked for output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub version: u32,
    pub task_id: TaskId,
    pub tenant: TenantName,
    pub job_id: JobId,
    pub instance: InstanceId,
    /// The tool whose call the task stands for (`submit_job`, `run_python`).
    pub tool: String,
    /// Trailing lines of output the call asked for (`None`: the default), for the result.
    pub tail: Option<usize>,
    pub created_at: Timestamp,
}

impl State {
    /// Makes a task for `job` of `tenant`, durable before it returns (the spec: a returned
    /// task id must resolve at once, also after a crash).
    pub fn new_task(
        &self,
        tenant: &TenantName,
        instance: &InstanceId,
        job: &JobId,
        tool: &str,
        tail: Option<usize>,
    ) -> Result<TaskRecord, StateError> {
        let dir = self.tenant(tenant).tasks();
        ensure_dir_private(&dir).map_err(StateError::io("create a task"))?;
        let record = TaskRecord {
            version: TASK_VERSION,
            task_id: TaskId::generate()?,
            tenant: tenant.clone(),
            job_id: job.clone(),
            instance: instance.clone(),
            tool: tool.to_owned(),
            tail,
            created_at: Timestamp::now(),
        };
        let name = format!("{}.json", record.task_id);
        write_json_atomic(&dir, &name, &record).map_err(StateError::io("create a task"))?;
        Ok(record)
    }

    /// The tenant's task `raw`; `None` if the tenant has no such task (whoever else may).
    pub fn task(&self, tenant: &TenantName, raw: &str) -> Result<Option<TaskRecord>, StateError> {
        let Some(id) = TaskId::parse(raw) else {
            return Ok(None);
        };
        let path = self.tenant(tenant).tasks().join(format!("{id}.json"));
        let record: Option<TaskRecord> = match read_json(&path) {
            Ok(record) => record,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => None,
            Err(e) => return Err(StateError::io("read a task")(e)),
        };
        // A newer hpcgate's task is not this one's to answer.
        Ok(record.filter(|r| r.task_id == id && &r.tenant == tenant && r.version <= TASK_VERSION))
    }
}

/// Removes the tenant's tasks whose job is gone (pruned, or deleted with its archived instance
/// by `clean`): such a task can never resolve again. Called with the tenant lock held, after
/// the jobs were removed; a crash between the two leaves tasks that the next prune or clean
/// removes (until then `tasks/get` finds their job missing and answers "not found"). Only
/// task files are looked at, not one being written (`.<id>.json.tmp`); an unreadable one is
/// left for an administrator, as `clean` leaves unreadable instance metadata. Returns how many
/// were removed.
pub(crate) fn sweep_orphan_tasks(
    paths: &TenantPaths,
    tenant: &TenantName,
) -> Result<usize, StateError> {
    let dir = paths.tasks();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(StateError::io("sweep tasks")(e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(StateError::io("sweep tasks"))?;
        let name = entry.file_name();
        let Some(id) = (name.to_str())
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(TaskId::parse)
        else {
            continue;
        };
        let Ok(Some(task)) = read_json::<TaskRecord>(&entry.path()) else {
            continue;
        };
        if task.task_id != id || &task.tenant != tenant {
            continue;
        }
        if is_real_dir(&paths.job(&task.job_id)).map_err(StateError::io("sweep tasks"))? {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StateError::io("sweep tasks")(e)),
        }
    }
    if removed > 0 {
        sync_dir(&dir).map_err(StateError::io("sweep tasks"))?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_long_random_and_strictly_parsed() {
        let a = TaskId::generate().unwrap();
        assert_eq!(a.as_str().len(), 2 + TASK_RANDOM_LEN);
        assert_eq!(TaskId::parse(a.as_str()), Some(a.clone()));
        assert_ne!(a, TaskId::generate().unwrap());
        let bad = [
            "",
            "t-",
            "t-../../jobs/x",
            &a.as_str()[..a.as_str().len() - 1],
            &format!("{a}a"),
            &a.as_str().to_uppercase(),
            &a.as_str().replace("t-", "j-"),
        ];
        for raw in bad {
            assert_eq!(TaskId::parse(raw), None, "{raw}");
        }
    }
}
