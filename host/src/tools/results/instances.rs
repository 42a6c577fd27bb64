//! The results of the instance tools.

use schemars::JsonSchema;
use serde::Serialize;

use super::DateTime;
use crate::state::{Instance, InstanceId};
use crate::time::Timestamp;

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
