//! `[code_mode]`: limits on the tool calls a job's own code makes through its job-scoped
//! socket (see [`crate::code_mode`]), raw and resolved.

use serde::Deserialize;

use super::error::ConfigError;
use super::settings::{Bad, positive};

/// `[code_mode]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeModeConfig {
    /// Tool calls one job may make in its whole life (default 1000).
    pub max_calls_per_job: Option<u64>,
    /// Tool calls of one job in flight at once (default 4).
    pub max_concurrent_calls: Option<u32>,
    /// Whether a job's code may start jobs (`submit_job`, `run_python`; default false).
    pub allow_submit: Option<bool>,
}

/// `[code_mode]`, resolved. A job keeps the values in force when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeModeSettings {
    pub max_calls_per_job: u64,
    pub max_concurrent_calls: u32,
    pub allow_submit: bool,
}

impl Default for CodeModeSettings {
    fn default() -> Self {
        CodeModeSettings {
            max_calls_per_job: 1000,
            max_concurrent_calls: 4,
            allow_submit: false,
        }
    }
}

pub(super) fn resolve_code_mode(
    raw: &CodeModeConfig,
    bad: &Bad,
) -> Result<CodeModeSettings, ConfigError> {
    let default = CodeModeSettings::default();
    Ok(CodeModeSettings {
        max_calls_per_job: positive(
            "code_mode.max_calls_per_job",
            raw.max_calls_per_job,
            default.max_calls_per_job,
            bad,
        )?,
        max_concurrent_calls: positive(
            "code_mode.max_concurrent_calls",
            raw.max_concurrent_calls,
            default.max_concurrent_calls,
            bad,
        )?,
        allow_submit: raw.allow_submit.unwrap_or(default.allow_submit),
    })
}
