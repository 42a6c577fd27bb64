//! Slurm jobs with tools: the job's door is the gateway's own HTTP listener (`[code_mode] url`),
//! and what proves the caller is that job is a job-scoped bearer token
//! ([`crate::auth::job_token`]).
//!
//! - **Minted** when the job is submitted: 256 random bits. The gateway keeps only its SHA-256,
//!   bound to the tenant, the job id and the instance, in `<state_dir>/job-tokens/<job_id>.json`
//!   (0600, written atomically and synced before the job is handed to Slurm), so a gateway
//!   that restarts serves the running job again.
//! - **Handed over** in a file, never on a command line or in the environment: the token is
//!   written to `<state_dir>/run/<job_id>/token` (0600 in a 0700 directory), that directory is
//!   bound read-only at `/run/hpcgate` in the job's sandbox, and the environment names only the
//!   URL and the file (`HPCGATE_TOOLS_URL`, `HPCGATE_TOOLS_TOKEN_FILE`). The batch script, `ps`
//!   on the node, `scontrol show job` and the audit log see those two names, not the token.
//!   The node must see `state_dir` (as it sees the instance's workspace).
//! - **Checked on every request**: the hash (constant-time), then the job's record — a job
//!   whose record is final, or gone, revokes its token there and then.
//! - **Revoked** when the job's end is seen, whatever ended it (completion, `scancel`, time
//!   limit, node failure): a watcher asks Slurm every [`WATCH_STEP`] (recording and auditing
//!   what changed, as a poll would) and deletes the token file, then the stored hash (a
//!   gateway stopped in between finds the hash at its next start and finishes the revocation).
//!
//! The sandbox of a Slurm job with tools shares the node's network namespace: the gateway is
//! reached over TCP, and bwrap cannot give a sandbox one destination only. Without `url` a
//! Slurm job with tools is refused, and Slurm jobs without tools keep no network.
//!
//! The per-job counters (`max_calls_per_job`, in flight) live in memory and start again after
//! a gateway restart.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hpcgate_executors::sandbox::{Network, SandboxSpec};
use serde::{Deserialize, Serialize};

use super::{CodeMode, JobScope, admin, create_private_dir, lock};
use crate::auth::job_token;
use crate::state::{InstanceId, JobId, State, TenantName};

/// How often a watcher asks Slurm whether a job with tools has ended.
pub const WATCH_STEP: Duration = Duration::from_secs(2);
/// The token file as the job's code sees it (`HPCGATE_TOOLS_TOKEN_FILE`).
pub const SANDBOX_TOKEN_FILE: &str = "/run/hpcgate/token";

const TOKEN_NAME: &str = "token";
pub(super) const TOKENS_DIR: &str = "job-tokens";

/// One Slurm job's token, as the gateway keeps it (in memory and on disk).
pub(super) struct Remote {
    pub(super) scope: Arc<JobScope>,
    sha256: [u8; 32],
}

/// The stored binding of a token: everything but the token.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Binding {
    tenant: TenantName,
    job_id: JobId,
    instance: InstanceId,
    token_sha256: String,
}

impl CodeMode {
    /// The URL Slurm jobs with tools reach the gateway at (`[code_mode] url`).
    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// Mints `job_id`'s token, stores its hash durably, writes the token file and adds to
    /// `spec` what the job needs to call: the token directory at [`super::SANDBOX_DIR`], the
    /// support files, the environment and the node's network. Call
    /// [`CodeMode::watch_remote`] once Slurm took the job, [`CodeMode::revoke`] if it did not.
    pub fn open_remote(
        &self,
        tenant: &TenantName,
        job_id: &JobId,
        instance: &InstanceId,
        spec: &mut SandboxSpec,
    ) -> Result<(), String> {
        let url = self.url.clone().ok_or_else(no_url)?;
        let support = self.support()?;
        let (token, sha256) = job_token::mint(job_id)
            .map_err(|e| admin(&format!("cannot draw a random token ({e})")))?;
        let binding = Binding {
            tenant: tenant.clone(),
            job_id: job_id.clone(),
            instance: instance.clone(),
            token_sha256: hex::encode(sha256),
        };
        let dir = self.base.join(job_id.as_str());
        // The hash first: a token file whose hash is not stored opens nothing.
        self.store(&binding)
            .and_then(|()| write_token(&self.base, &dir, &token))
            .map_err(|e| {
                self.forget(job_id);
                admin(&format!("cannot store the job's token ({e})"))
            })?;
        let scope = Arc::new(JobScope::new(
            tenant.clone(),
            job_id.clone(),
            instance.clone(),
        ));
        lock(&self.remote).insert(job_id.clone(), Remote { scope, sha256 });
        super::equip(
            spec,
            dir,
            support,
            [
                ("HPCGATE_TOOLS_URL", url.as_str()),
                ("HPCGATE_TOOLS_TOKEN_FILE", SANDBOX_TOKEN_FILE),
            ],
        );
        spec.network = Network::Host;
        Ok(())
    }

    /// Revokes `job_id`'s token once a watcher sees the job end (see the module doc).
    pub fn watch_remote(&self, job_id: &JobId) {
        let Ok(runtime) = self.runtime() else {
            return;
        };
        let Some(scope) = lock(&self.remote).get(job_id).map(|r| r.scope.clone()) else {
            return;
        };
        let (gateway, remote, tokens, base) = (
            self.gateway.get().cloned(),
            self.remote.clone(),
            self.tokens.clone(),
            self.base.clone(),
        );
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(WATCH_STEP).await;
                if scope.is_closed() {
                    return;
                }
                let Some(gateway) = gateway.as_ref().and_then(std::sync::Weak::upgrade) else {
                    return;
                };
                let s = scope.clone();
                let observed = tokio::task::spawn_blocking(move || {
                    gateway.observe_job(&s.tenant, &s.instance, &s.job_id)
                })
                .await;
                match observed {
                    Ok(Some(record)) if !record.is_final() => {}
                    // The gateway is stopping: the next start watches again.
                    Err(_) => return,
                    Ok(_) => break,
                }
            }
            revoke(&remote, &tokens, &base, &scope.job_id);
        });
    }

    /// Ends `job_id`'s token now: later requests with it are refused, its hash and file are
    /// deleted.
    pub fn revoke(&self, job_id: &JobId) {
        revoke(&self.remote, &self.tokens, &self.base, job_id);
    }

    /// Whether `job_id` has a live token.
    pub fn has_token(&self, job_id: &JobId) -> bool {
        lock(&self.remote).contains_key(job_id)
    }

    /// The door a job token opens: the job's fixed identity and limits, if the token is the
    /// one stored for its job and that job's record is not final. `Err` says why not, for a
    /// 401 (it never contains the token).
    pub fn authenticate(&self, token: &str) -> Result<Arc<JobScope>, String> {
        let job_id = job_token::claimed_job(token)
            .ok_or("the job token is malformed; use the token file the job was given")?;
        let unknown = "the job token is not valid: its job has ended, or it is not the job's";
        let (scope, sha256) = match self.remote_of(&job_id) {
            Some(found) => found,
            None => return Err(unknown.to_owned()),
        };
        if !job_token::matches(token, &sha256) {
            return Err(unknown.to_owned());
        }
        let gateway = (self.gateway.get())
            .and_then(std::sync::Weak::upgrade)
            .ok_or("the gateway is stopping")?;
        let running = gateway
            .job_record(&scope.tenant, &scope.instance, &job_id)
            .is_some_and(|record| !record.is_final());
        if !running || scope.is_closed() {
            self.revoke(&job_id);
            return Err(format!(
                "job `{job_id}` has ended; its token served only while the job ran"
            ));
        }
        Ok(scope)
    }

    /// At start: takes back the tokens of running Slurm jobs (watching them again) and deletes
    /// those of jobs that ended meanwhile.
    pub(super) fn reopen_remote(&self, state: &State) {
        let Ok(entries) = std::fs::read_dir(&self.tokens) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(job_id) = (name.to_str())
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| JobId::parse(n).ok())
            else {
                continue;
            };
            let running = self.load(&job_id).is_some_and(|(binding, _)| {
                state
                    .job(&binding.tenant, &binding.instance, &job_id)
                    .is_ok_and(|record| !record.is_final())
            });
            if running {
                self.watch_remote(&job_id);
            } else {
                self.revoke(&job_id);
            }
        }
    }

    /// The job's token in memory, else (another start of the gateway stored it) from disk.
    fn remote_of(&self, job_id: &JobId) -> Option<(Arc<JobScope>, [u8; 32])> {
        if let Some(remote) = lock(&self.remote).get(job_id) {
            return Some((remote.scope.clone(), remote.sha256));
        }
        let (_, sha256) = self.load(job_id)?;
        let scope = lock(&self.remote).get(job_id)?.scope.clone();
        self.watch_remote(job_id);
        Some((scope, sha256))
    }

    /// Reads `job_id`'s stored binding into memory (unless it is there already).
    fn load(&self, job_id: &JobId) -> Option<(Binding, [u8; 32])> {
        let text = std::fs::read(self.tokens.join(format!("{job_id}.json"))).ok()?;
        let binding: Binding = serde_json::from_slice(&text).ok()?;
        let sha256: [u8; 32] = hex::decode(&binding.token_sha256).ok()?.try_into().ok()?;
        if &binding.job_id != job_id {
            return None;
        }
        let scope = Arc::new(JobScope::new(
            binding.tenant.clone(),
            job_id.clone(),
            binding.instance.clone(),
        ));
        lock(&self.remote)
            .entry(job_id.clone())
            .or_insert(Remote { scope, sha256 });
        Some((binding, sha256))
    }

    /// `binding` in its own file: written to a temporary name, synced, renamed, dir synced.
    fn store(&self, binding: &Binding) -> io::Result<()> {
        create_private_dir(&self.tokens)?;
        let mut temp = tempfile::NamedTempFile::new_in(&self.tokens)?;
        temp.write_all(&serde_json::to_vec(binding).map_err(io::Error::other)?)?;
        temp.as_file().sync_all()?;
        temp.persist(self.tokens.join(format!("{}.json", binding.job_id)))
            .map_err(|e| e.error)?;
        std::fs::File::open(&self.tokens)?.sync_all()
    }

    fn forget(&self, job_id: &JobId) {
        revoke(&self.remote, &self.tokens, &self.base, job_id);
    }
}

/// The refusal of a Slurm job with tools on a gateway without `[code_mode] url`.
pub fn no_url() -> String {
    "`tools = true` on a Slurm job needs the gateway's HTTP address as compute nodes reach it, and none is configured; ask the admin to set `[code_mode] url` (e.g. `http://login1:8000/mcp`), or submit with mode `local`".to_owned()
}

fn revoke(
    remote: &std::sync::Mutex<std::collections::HashMap<JobId, Remote>>,
    tokens: &Path,
    base: &Path,
    job_id: &JobId,
) {
    if let Some(gone) = lock(remote).remove(job_id) {
        gone.scope.close();
    }
    // The token file goes before the stored binding: a gateway stopped in between still finds
    // the binding at its next start, sees the job ended and finishes the revocation.
    let dir = base.join(job_id.as_str());
    let _ = std::fs::remove_file(dir.join(TOKEN_NAME));
    let _ = std::fs::remove_dir(&dir);
    let _ = std::fs::remove_file(tokens.join(format!("{job_id}.json")));
}

/// `dir/token`, 0600 in a 0700 directory, synced.
fn write_token(base: &Path, dir: &Path, token: &str) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    create_private_dir(base)?;
    create_private_dir(dir)?;
    let path: PathBuf = dir.join(TOKEN_NAME);
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    file.write_all(token.as_bytes())?;
    file.sync_all()
}
