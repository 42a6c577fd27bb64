//! One job's door into the gateway: who its calls are (fixed by which socket they came in on)
//! and the per-job limits, checked by [`Gateway::dispatch`](crate::gateway::Gateway) before
//! anything else so that every refusal is recorded like any other.
//!
//! Nothing a job's code sends can change its identity: the tenant, the principal
//! `job:<job_id>` and `via = "job"` come from the door, and `instance_id` defaults to, and
//! must equal, the job's own instance.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use serde_json::{Map, Value};

use crate::auth::Caller;
use crate::config::CodeModeSettings;
use crate::state::{InstanceId, JobId, TenantName};
use crate::tools::Tool;

/// The tools that start jobs: refused to a job's code unless `[code_mode] allow_submit`.
const SUBMITTING_TOOLS: [&str; 2] = ["submit_job", "run_python"];

/// The identity and counters of one job's door.
#[derive(Debug)]
pub struct JobScope {
    pub tenant: TenantName,
    pub job_id: JobId,
    pub instance: InstanceId,
    /// Calls admitted so far (every attempt counts, refused by policy or not).
    calls: AtomicU64,
    in_flight: AtomicU32,
    /// Set when the job has ended: a call still arriving (a kept connection) is refused.
    closed: AtomicBool,
}

impl JobScope {
    pub fn new(tenant: TenantName, job_id: JobId, instance: InstanceId) -> JobScope {
        JobScope {
            tenant,
            job_id,
            instance,
            calls: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// The caller every request on this door is: the job's tenant, principal `job:<id>`.
    pub fn caller(&self) -> Caller {
        Caller {
            tenant: self.tenant.clone(),
            principal: format!("job:{}", self.job_id),
        }
    }

    /// Marks the job ended: every later call is refused.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Refuses every request once the job has ended.
    fn check_open(&self) -> Result<(), String> {
        if self.is_closed() {
            return Err(format!(
                "refused: job `{}` has ended; its tools socket serves only while the job runs",
                self.job_id
            ));
        }
        Ok(())
    }

    /// Counts one request of the job's code against `max_calls_per_job`: a tool call, or any
    /// other request (a listing asks the policies about every tool, so it is not free).
    pub fn count(&self, limits: &CodeModeSettings) -> Result<(), String> {
        self.check_open()?;
        let made = self.calls.fetch_add(1, Ordering::SeqCst);
        if made >= limits.max_calls_per_job {
            return Err(format!(
                "refused: job `{}` has made {} requests, the most `[code_mode] max_calls_per_job` allows; batch the work into fewer calls or ask the admin to raise `max_calls_per_job`",
                self.job_id, limits.max_calls_per_job
            ));
        }
        Ok(())
    }

    /// Admits one call of `tool` under `limits`, filling in the job's `instance_id` when the
    /// call has none, and counts it in flight until [`JobScope::release`]. `counted` is how
    /// the door counted the request (`None`: not counted yet, it is counted here). `Err` is
    /// the refusal message for the caller (and the audit log); nothing is then counted in
    /// flight.
    pub fn admit(
        &self,
        limits: &CodeModeSettings,
        tool: &str,
        arguments: &mut Map<String, Value>,
        counted: Option<Result<(), String>>,
    ) -> Result<(), String> {
        match counted {
            Some(counted) => self.check_open().and(counted)?,
            None => self.count(limits)?,
        }
        if SUBMITTING_TOOLS.contains(&tool) && !limits.allow_submit {
            return Err(format!(
                "refused: a job's code may not start jobs (`{tool}`) unless the admin sets `[code_mode] allow_submit = true`; return the work to the agent, which can submit it"
            ));
        }
        // A job a job's code starts gets no tools of its own: jobs with tools do not nest, so
        // its calls stay within this job's `max_calls_per_job`.
        if SUBMITTING_TOOLS.contains(&tool) {
            match arguments.get("tools") {
                None | Some(Value::Null) => {
                    arguments.insert("tools".to_owned(), Value::Bool(false));
                }
                Some(Value::Bool(false)) => {}
                Some(_) => {
                    return Err(format!(
                        "refused: a job started by a job's code cannot call tools itself (`{tool}` with `tools`); leave `tools` out or set it to false, and make the calls from this job"
                    ));
                }
            }
        }
        match arguments.get("instance_id") {
            // A tool without `instance_id` (`list_instances`, `cluster_status`) gets none.
            None | Some(Value::Null) if !takes_instance(tool) => {}
            None | Some(Value::Null) => {
                let own = Value::String(self.instance.as_str().to_owned());
                arguments.insert("instance_id".to_owned(), own);
            }
            Some(Value::String(id)) if id == self.instance.as_str() => {}
            Some(_) => {
                return Err(format!(
                    "refused: a job's code may only use its own instance `{}`; leave `instance_id` out or give that one",
                    self.instance
                ));
            }
        }
        let before = self.in_flight.fetch_add(1, Ordering::SeqCst);
        if before >= limits.max_concurrent_calls {
            self.release();
            return Err(format!(
                "refused: job `{}` already has {} tool calls in flight, the most `[code_mode] max_concurrent_calls` allows; wait for one to finish or ask the admin to raise `max_concurrent_calls`",
                self.job_id, limits.max_concurrent_calls
            ));
        }
        Ok(())
    }

    /// Ends one admitted call's place in flight.
    pub fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl JobScope {
    /// What the policies see of this job in a listing's input, as in the call's
    /// ([`JobScope::admit`] fills in the instance): its id, and its instance when the tool
    /// takes one. So a policy keyed on either hides from a job's listing what it would refuse.
    pub fn mark_listing(&self, input: &mut crate::policy::Call) {
        input.job = Some(self.job_id.to_string());
        if takes_instance(&input.tool) {
            input.instance = Some(self.instance.to_string());
        }
    }
}

/// Whether `tool` has an `instance_id` argument: every proxied tool does, and the builtin
/// ones whose schema declares it.
fn takes_instance(tool: &str) -> bool {
    Tool::from_name(tool).is_none_or(|tool| {
        tool.spec()
            .input_schema
            .get("properties")
            .is_some_and(|p| p.get("instance_id").is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope() -> JobScope {
        JobScope::new(
            TenantName::parse("chem").unwrap(),
            JobId::parse("j-aaaaaaaaaaaaaaaa").unwrap(),
            InstanceId::parse("run1").unwrap(),
        )
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn instance_defaults_to_the_jobs_and_must_equal_it() {
        let s = scope();
        let limits = CodeModeSettings::default();
        let mut a = args(json!({"path": "x"}));
        s.admit(&limits, "read_file", &mut a, None).unwrap();
        s.release();
        assert_eq!(a["instance_id"], json!(s.instance.as_str()));
        let mut same = args(json!({"instance_id": s.instance.as_str()}));
        assert!(s.admit(&limits, "read_file", &mut same, None).is_ok());
        let mut none = Map::new();
        s.admit(&limits, "list_instances", &mut none, None).unwrap();
        s.release();
        assert!(none.is_empty(), "a tool without `instance_id` gets none");
        for forged in [json!("run2"), json!(7), json!(["x"])] {
            let mut a = args(json!({ "instance_id": forged }));
            let e = s.admit(&limits, "read_file", &mut a, None).unwrap_err();
            assert!(e.contains("its own instance"), "{e}");
        }
    }

    #[test]
    fn limits_name_the_key_to_raise() {
        let s = scope();
        let limits = CodeModeSettings {
            max_calls_per_job: 2,
            max_concurrent_calls: 1,
            allow_submit: false,
        };
        s.admit(&limits, "stat_path", &mut Map::new(), None)
            .unwrap();
        let e = s
            .admit(&limits, "stat_path", &mut Map::new(), None)
            .unwrap_err();
        assert!(e.contains("max_concurrent_calls"), "{e}");
        s.release();
        let e = s
            .admit(&limits, "stat_path", &mut Map::new(), None)
            .unwrap_err();
        assert!(e.contains("max_calls_per_job"), "{e}");
        let fresh = scope();
        let e = fresh
            .admit(&limits, "submit_job", &mut Map::new(), None)
            .unwrap_err();
        assert!(e.contains("allow_submit"), "{e}");
        let nesting = CodeModeSettings {
            allow_submit: true,
            ..CodeModeSettings::default()
        };
        let mut run = args(json!({"code": "print(1)"}));
        fresh.admit(&nesting, "run_python", &mut run, None).unwrap();
        fresh.release();
        assert_eq!(run["tools"], json!(false), "a child gets no tools");
        let mut with_tools = args(json!({"command": "true", "tools": true}));
        let e = fresh
            .admit(&nesting, "submit_job", &mut with_tools, None)
            .unwrap_err();
        assert!(e.contains("cannot call tools itself"), "{e}");
        fresh.close();
        let e = fresh
            .admit(&limits, "stat_path", &mut Map::new(), None)
            .unwrap_err();
        assert!(e.contains("has ended"), "{e}");
    }
}
