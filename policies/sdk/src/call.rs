//! The call a policy judges, in the shape of the recorded-call JSON format.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Whether the gateway is listing tools or running one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// `tools/list`: a deny hides the tool; `arguments` is `{}`.
    List,
    /// A real call with arguments.
    Call,
}

/// How a call reached the gateway. Recorded calls without `via` came over MCP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// An MCP client (stdio, streamable HTTP, Unix socket).
    #[default]
    Mcp,
    /// The local `hpcgate` command line.
    Cli,
    /// A WebDAV request.
    Dav,
    /// Code running in a job; [`Call::job`] names the job.
    Job,
}

impl Via {
    /// The name used in recorded calls and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Mcp => "mcp",
            Via::Cli => "cli",
            Via::Dav => "dav",
            Via::Job => "job",
        }
    }
}

/// One tool call, exactly as recorded in the audit log and in test-case files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    pub phase: Phase,
    /// How the call came in (absent in records made before `via` existed: `mcp`).
    #[serde(default)]
    pub via: Via,
    /// The job whose code made the call, when `via` is `job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    pub tenant: String,
    #[serde(default)]
    pub principal: String,
    /// Exposed tool name, e.g. `submit_job` or `fs__read_text_file`.
    pub tool: String,
    /// `builtin`, or the proxied server's name.
    #[serde(default = "builtin")]
    pub server: String,
    /// For proxied tools, the original name on the remote server.
    #[serde(default)]
    pub remote_tool: Option<String>,
    #[serde(default)]
    pub instance: Option<String>,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    #[serde(default)]
    pub read_only: bool,
    /// The tenant's usage counters (`instances`, `running_jobs`; `workspace_bytes` and
    /// `output_bytes` of the instance for calls that can add bytes to it).
    #[serde(default)]
    pub usage: BTreeMap<String, u64>,
}

fn builtin() -> String {
    "builtin".to_owned()
}

impl Call {
    /// A call-phase call of `tool` with `arguments`, for tests.
    pub fn new(tool: &str, arguments: Value) -> Self {
        Call {
            phase: Phase::Call,
            via: Via::Mcp,
            job: None,
            tenant: "default".to_owned(),
            principal: "test".to_owned(),
            tool: tool.to_owned(),
            server: builtin(),
            remote_tool: None,
            instance: None,
            arguments: match arguments {
                Value::Object(map) => map,
                _ => Map::new(),
            },
            read_only: false,
            usage: BTreeMap::new(),
        }
    }

    /// The value of a usage counter, 0 when the host did not report it.
    pub fn usage(&self, name: &str) -> u64 {
        self.usage.get(name).copied().unwrap_or(0)
    }
}
