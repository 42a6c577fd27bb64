//! The policy chain: the contract's semantics in one loop.
//!
//! Policies run in configured order, each only for tenants matching its `tenants` globs and
//! tools matching its `tools` globs (a policy that cannot apply to a call costs nothing). The
//! first enforced deny stops the chain; an enforced rewrite replaces the arguments seen by the
//! next policy and by the executor; a monitor-mode policy is evaluated and recorded but never
//! stops the chain or changes the arguments. In the list phase the arguments are `{}` and a
//! rewrite counts as allow. A fault is a deny that names the policy and the fault.

use std::time::{Duration, Instant};

use hpcgate_policy_sdk::glob::GlobSet;
use hpcgate_policy_sdk::outcome::{
    ChainOutcome, DecisionKind, FinalDecision, PolicyDecision, Verdict,
};
use hpcgate_policy_sdk::{Call, Phase, Via};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::bindings::{Counter, WitCall, WitPhase, WitVia};
use super::instance::{Fault, Limits};
use super::module::PolicyModule;
use super::pool::{InstancePool, SnapshotState};

/// Whether a policy's decisions are enforced or only recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enforce,
    Monitor,
}

/// How to run one policy in a chain (built from a `[[policies]]` entry).
#[derive(Debug, Clone)]
pub struct ChainPolicy {
    pub name: String,
    pub module: PolicyModule,
    /// The policy's `config` table as JSON.
    pub settings: String,
    pub mode: Mode,
    pub tenants: Vec<String>,
    /// Globs over exposed tool names.
    pub tools: Vec<String>,
    pub deadline: Duration,
    pub memory_bytes: usize,
    /// Reuse configured instances per tenant instead of a fresh one per evaluation.
    pub reuse: bool,
    /// Instances prepared ahead of the call.
    pub prepared: usize,
}

/// Why a chain could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("policy `{policy}` rejected its config: {message}")]
    Configure { policy: String, message: String },
    #[error("policy `{policy}` {fault}")]
    Fault { policy: String, fault: Fault },
    #[error("policy `{policy}`: invalid `{key}` glob: {message}")]
    Glob {
        policy: String,
        key: &'static str,
        message: String,
    },
    #[error("two policies are named `{0}`; names must be unique")]
    DuplicateName(String),
}

struct Link {
    name: String,
    mode: Mode,
    digest: String,
    tenants: GlobSet,
    tools: GlobSet,
    pool: InstancePool,
}

/// A loaded, configured policy chain.
pub struct Chain {
    links: Vec<Link>,
    /// A policy is built for a WASI target (see [`Chain::imports_wasi`]).
    imports_wasi: bool,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.links.iter().map(|l| &l.name))
            .finish()
    }
}

impl Chain {
    /// Configures every policy (a settings error names the policy) and starts preparing their
    /// instances; from configured snapshots where the engine's settings allow it.
    pub fn new(policies: Vec<ChainPolicy>) -> Result<Chain, ChainError> {
        Chain::build(policies, true)
    }

    /// As [`Chain::new`]; without `snapshots` every instance is configured, whatever the
    /// engine's settings (the benchmark's comparison).
    pub(crate) fn build(policies: Vec<ChainPolicy>, snapshots: bool) -> Result<Chain, ChainError> {
        let imports_wasi = policies.iter().any(|p| p.module.imports_wasi());
        let mut links: Vec<Link> = Vec::with_capacity(policies.len());
        for p in policies {
            if links.iter().any(|l| l.name == p.name) {
                return Err(ChainError::DuplicateName(p.name));
            }
            let globs = |key, globs: &[String]| {
                GlobSet::new(globs).map_err(|e| ChainError::Glob {
                    policy: p.name.clone(),
                    key,
                    message: e.to_string(),
                })
            };
            let (tenants, tools) = (globs("tenants", &p.tenants)?, globs("tools", &p.tools)?);
            let memory_bytes = p
                .memory_bytes
                .min(p.module.inner.engine.settings.max_memory_bytes);
            let limits = Limits {
                deadline: p.deadline,
                memory_bytes,
            };
            let digest = p.module.digest().to_owned();
            let snapshots = snapshots && p.module.inner.engine.settings.snapshots;
            let pool =
                InstancePool::new(p.module, p.settings, limits, p.prepared, p.reuse, snapshots)
                    .map_err(|fault| match fault {
                        Fault::Configure(message) => ChainError::Configure {
                            policy: p.name.clone(),
                            message,
                        },
                        fault => ChainError::Fault {
                            policy: p.name.clone(),
                            fault,
                        },
                    })?;
            links.push(Link {
                name: p.name,
                mode: p.mode,
                digest,
                tenants,
                tools,
                pool,
            });
        }
        Ok(Chain {
            links,
            imports_wasi,
        })
    }

    /// Whether an enforced policy of the chain judges `tool` for `tenant`: if none does, every
    /// call of it is allowed as it is, and need not be asked about.
    pub fn judges(&self, tenant: &str, tool: &str) -> bool {
        (self.links.iter()).any(|l| {
            l.mode == Mode::Enforce && l.tenants.is_match(tenant) && l.tools.is_match(tool)
        })
    }

    /// The names of the policies, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.links.iter().map(|l| l.name.as_str())
    }

    /// Whether a policy of the chain is built for a WASI target. Its WASI functions block on a
    /// Tokio runtime (wasmtime-wasi's synchronous bindings), which panics on a thread that
    /// drives an async runtime: evaluate such a chain on a plain or blocking thread.
    pub fn imports_wasi(&self) -> bool {
        self.imports_wasi
    }

    /// Where each policy's fresh instances come from, in order.
    pub fn snapshots(&self) -> Vec<(&str, SnapshotState)> {
        (self.links.iter())
            .map(|l| (l.name.as_str(), l.pool.snapshot_state()))
            .collect()
    }

    /// Each policy's configured snapshot, when it has one ready (for the benchmark).
    pub(crate) fn configured_modules(&self) -> Vec<Option<PolicyModule>> {
        (self.links.iter())
            .map(|l| l.pool.configured_module())
            .collect()
    }

    /// Waits up to `limit` for the configured snapshots being built.
    pub fn settle(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while Instant::now() < until
            && (self.links.iter()).any(|l| l.pool.snapshot_state() == SnapshotState::Building)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// How many evaluations so far found no prepared instance and prepared their own.
    pub(crate) fn inline_prepares(&self) -> usize {
        self.links.iter().map(|l| l.pool.inline_prepares()).sum()
    }

    /// Judges one call.
    pub fn evaluate(&self, call: &Call) -> ChainOutcome {
        let listing = call.phase == Phase::List;
        let empty = Map::new();
        let mut wit = to_wit(call, if listing { &empty } else { &call.arguments });
        let mut arguments: Option<Map<String, Value>> = None;
        let mut policies = Vec::new();
        let mut rewriter: Option<&str> = None;
        for link in self
            .links
            .iter()
            .filter(|l| l.tenants.is_match(&call.tenant) && l.tools.is_match(&call.tool))
        {
            let started = Instant::now();
            let (result, logs) = link.pool.evaluate(&call.tenant, &wit);
            let duration_us = started.elapsed().as_nanos() as f64 / 1000.0;
            let (verdict, fault, fault_kind) = match result {
                Ok(verdict) => (verdict, None, None),
                Err(fault) => {
                    let reason = format!(
                        "policy `{}` {fault}; the call is refused (policies fail closed)",
                        link.name
                    );
                    let kind = fault.kind();
                    (
                        Verdict::Deny { reason },
                        Some(fault.to_string()),
                        Some(kind),
                    )
                }
            };
            let enforced = link.mode == Mode::Enforce;
            policies.push(PolicyDecision {
                policy: link.name.clone(),
                module: link.digest.clone(),
                verdict: verdict.clone(),
                enforced,
                fault,
                fault_kind,
                duration_us,
                logs,
            });
            if !enforced {
                continue;
            }
            match verdict {
                Verdict::Deny { reason } => {
                    let decision = FinalDecision {
                        decision: DecisionKind::Deny,
                        policy: Some(link.name.clone()),
                        reason: Some(reason),
                        arguments: None,
                    };
                    return ChainOutcome { decision, policies };
                }
                Verdict::Rewrite { arguments: new, .. } if !listing => {
                    wit.arguments = json_text(&new);
                    arguments = Some(new);
                    rewriter = Some(&link.name);
                }
                _ => {}
            }
        }
        let decision = match rewriter {
            Some(policy) => FinalDecision {
                decision: DecisionKind::Rewrite,
                policy: Some(policy.to_owned()),
                reason: None,
                arguments,
            },
            None => FinalDecision {
                decision: DecisionKind::Allow,
                policy: None,
                reason: None,
                arguments: None,
            },
        };
        ChainOutcome { decision, policies }
    }
}

fn json_text(arguments: &Map<String, Value>) -> String {
    serde_json::to_string(arguments).expect("a JSON map always serialises")
}

pub(crate) fn to_wit(call: &Call, arguments: &Map<String, Value>) -> WitCall {
    WitCall {
        phase: match call.phase {
            Phase::List => WitPhase::List,
            Phase::Call => WitPhase::Call,
        },
        via: match call.via {
            Via::Mcp => WitVia::Mcp,
            Via::Cli => WitVia::Cli,
            Via::Dav => WitVia::Dav,
            Via::Job => WitVia::Job,
        },
        job: call.job.clone(),
        tenant: call.tenant.clone(),
        principal: call.principal.clone(),
        tool: call.tool.clone(),
        server: call.server.clone(),
        remote_tool: call.remote_tool.clone(),
        instance: call.instance.clone(),
        arguments: json_text(arguments),
        read_only: call.read_only,
        usage: call
            .usage
            .iter()
            .map(|(name, value)| Counter {
                name: name.clone(),
                value: *value,
            })
            .collect(),
    }
}
