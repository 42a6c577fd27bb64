//! Code mode: a job's own code calls hpcgate tools, and every inner call takes the one pipeline.
//!
//! A local job submitted with `tools = true` (or `run_python`) gets a **door**: a Unix socket
//! private to that job, `<state_dir>/run/<job_id>/tools.sock`, whose directory (not the socket:
//! it can be made again after a gateway restart) is bound read-only at `/run/hpcgate` in the
//! job's sandbox, with `run_python`'s script beside the socket ([`SANDBOX_SCRIPT`]), out of
//! every other job's reach. The door serves MCP over streamable HTTP with the gateway's own
//! handler; the caller is fixed by which socket it is — the job's tenant, principal
//! `job:<job_id>`, `via = "job"` and the job id in the policy input ([`JobScope`]) — and every call goes
//! through [`Gateway::dispatch`](crate::gateway::Gateway::dispatch): judged, rate-limited,
//! audited. `[code_mode]` limits each job's calls (see [`JobScope::admit`]).
//!
//! Lifetime: a door opens before its job starts and closes when the job reaches a final state
//! (a watcher waits on the job's supervisor): the socket and its directory are removed, and a
//! call still arriving on a kept connection is refused. A gateway that starts again re-opens
//! the door of every running job whose directory is still there ([`CodeMode::reopen`]), with
//! the job's `[code_mode]` counters started again.
//!
//! Several gateways on one host may share one state directory, so a door has one owner: the
//! gateway that serves it holds an exclusive `flock(2)` on `<state_dir>/run/owners/<job_id>`
//! (out of every sandbox's reach), taken before the door's directory is made and let go after
//! it is removed. Every gateway sweeps the doors at start and every [`WATCH_STEP`]
//! ([`CodeMode::sweep`]): it leaves those another live gateway holds alone, takes over those
//! whose owner went (its lock is released with its last descriptor, however it ends), and
//! removes those of jobs that have ended.
//!
//! Inside the sandbox: `HPCGATE_TOOLS` names the socket; `hpcgate_tools` (Python, standard
//! library only) and `hpcgate-call` are written from this crate to `<state_dir>/run/support`
//! and bound read-only at `/opt/hpcgate` (on `PYTHONPATH` and `PATH`).
//!
//! The doors are served on a small runtime of their own, so code mode works whichever
//! transport the gateway serves (stdio too).
//!
//! A Slurm job runs on another machine, so its door is the gateway's own HTTP listener
//! (`[code_mode] url`) and a job-scoped bearer token stands in for the socket ([`remote`]);
//! the identity and limits are the same [`JobScope`].

mod door;
mod owners;
pub mod remote;
mod serve;

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use hpcgate_executors::sandbox::{self, Bind, SandboxSpec};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

pub use door::JobScope;
use owners::Owner;
pub use serve::DOOR_PATH;
pub use serve::JobRequestCounted;
pub(crate) use serve::count_requests;

use crate::gateway::Gateway;
use crate::state::{InstanceId, JobId, JobRecord, State, TenantName};

/// Where a job's door directory appears in its sandbox.
pub const SANDBOX_DIR: &str = "/run/hpcgate";
/// The door's socket as the job's code sees it (`HPCGATE_TOOLS`).
pub const SANDBOX_SOCKET: &str = "/run/hpcgate/tools.sock";
/// Where the Python module and `hpcgate-call` appear in the sandbox (read-only).
pub const SUPPORT_MOUNT: &str = "/opt/hpcgate";
/// A script given with the door (`run_python`'s) as the job's code sees it: in the door's
/// directory, which no job can write, so no other job of the instance can change what this
/// job's Python reads again (`multiprocessing`'s spawned children run the file anew).
pub const SANDBOX_SCRIPT: &str = "/run/hpcgate/run.py";

const SOCKET_NAME: &str = "tools.sock";
const SCRIPT_NAME: &str = "run.py";
const SUPPORT_DIR: &str = "support";
/// Beside the door directories: one lock file per open door, held by the gateway serving it.
const OWNERS_DIR: &str = "owners";
const TOOLS_MODULE: &str = include_str!("python/hpcgate_tools.py");
const CALL_COMMAND: &str = include_str!("python/hpcgate-call");
/// `sun_path` holds 108 bytes with the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;
/// How long the watcher sleeps between looks when it cannot wait on the supervisor, and how
/// often a gateway looks whether a door another gateway served is left without its owner.
const WATCH_STEP: Duration = Duration::from_secs(5);

/// The doors of the running jobs with tools.
pub struct CodeMode {
    /// `<state_dir>/run`: one directory per door, and the support files.
    base: PathBuf,
    /// Set once the gateway is shared ([`Gateway::shared`]); a door serves through it.
    gateway: OnceLock<Weak<Gateway>>,
    runtime: OnceLock<Result<tokio::runtime::Runtime, String>>,
    support: OnceLock<Result<PathBuf, String>>,
    doors: Arc<Mutex<HashMap<JobId, Door>>>,
    /// The doors whose lock this gateway holds (or is taking): open, being made or swept.
    held: Arc<Mutex<HashSet<JobId>>>,
    /// Uids a door serves (`SO_PEERCRED`): those the sandboxes run as, the gateway's own here.
    peers: Arc<[u32]>,
    /// `[code_mode] url`: where Slurm jobs with tools reach the gateway.
    url: Option<String>,
    /// The tokens of running Slurm jobs with tools, by job ([`remote`]).
    remote: Arc<Mutex<HashMap<JobId, remote::Remote>>>,
    /// `<state_dir>/job-tokens`: the stored hashes of those tokens.
    tokens: PathBuf,
    /// The doors' servers and their calls, waited for at a stop ([`CodeMode::stop_serving`]).
    serving: tokio_util::task::TaskTracker,
}

struct Door {
    scope: Arc<JobScope>,
    stop: CancellationToken,
    dir: PathBuf,
    owner: Owner,
}

impl CodeMode {
    /// No door is open and nothing is written until a job with tools starts; `url` is
    /// `[code_mode] url`, for Slurm jobs.
    pub fn new(state_dir: &Path, url: Option<String>) -> CodeMode {
        CodeMode {
            base: state_dir.join("run"),
            url,
            remote: Arc::new(Mutex::new(HashMap::new())),
            tokens: state_dir.join(remote::TOKENS_DIR),
            gateway: OnceLock::new(),
            runtime: OnceLock::new(),
            support: OnceLock::new(),
            doors: Arc::new(Mutex::new(HashMap::new())),
            held: Arc::new(Mutex::new(HashSet::new())),
            peers: Arc::from([rustix::process::geteuid().as_raw()]),
            serving: tokio_util::task::TaskTracker::new(),
        }
    }

    /// Held while a door's call runs: [`CodeMode::stop_serving`] waits for it.
    pub(crate) fn holding_a_call(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.serving.token()
    }

    /// At a stop: every door stops taking requests, its calls in flight are cancelled, and
    /// this waits (until `until` at the latest) for them to end and be recorded, before the
    /// gateway's last record. The doors' directories stay: the next start serves the running
    /// jobs again.
    pub async fn stop_serving(&self, until: tokio::time::Instant) {
        for door in lock(&self.doors).values() {
            door.stop.cancel();
        }
        self.serving.close();
        let _ = tokio::time::timeout_at(until, self.serving.wait()).await;
    }

    /// Lets doors serve through `gateway` (called once, when the gateway is shared).
    pub(crate) fn attach(&self, gateway: Weak<Gateway>) {
        let _ = self.gateway.set(gateway);
    }

    /// Opens job `job_id`'s door and adds to `spec` what its sandbox needs to use it: the door
    /// directory at [`SANDBOX_DIR`], the support files at [`SUPPORT_MOUNT`] and the environment;
    /// `script`, if any, is placed in the door directory, at [`SANDBOX_SCRIPT`] in the sandbox.
    /// Call [`CodeMode::watch`] once the job started, [`CodeMode::close`] if it did not.
    pub fn open(
        &self,
        tenant: &TenantName,
        job_id: &JobId,
        instance: &InstanceId,
        spec: &mut SandboxSpec,
        script: Option<&[u8]>,
    ) -> Result<(), String> {
        let support = self.support()?;
        let owner = match self.own(job_id) {
            Ok(Some(owner)) => owner,
            Ok(None) => return Err(admin("another gateway serves this job's door")),
            Err(e) => return Err(admin(&format!("cannot lock the job's door ({e})"))),
        };
        let dir = self.open_door(tenant, job_id, instance, owner)?;
        let mut env = vec![("HPCGATE_TOOLS", SANDBOX_SOCKET)];
        if let Some(script) = script {
            if let Err(e) = write_private(&dir.join(SCRIPT_NAME), script) {
                self.close(job_id);
                return Err(admin(&format!("cannot write the job's script ({e})")));
            }
            // No interpreter of the job (Python ≥ 3.11) puts its working directory, the
            // workspace, on its import path: `multiprocessing` starts its children with
            // `python3 -c`, which would import a module another job of the instance left
            // there, with this job's tools.
            env.push(("PYTHONSAFEPATH", "1"));
        }
        equip(spec, dir, support, env);
        Ok(())
    }

    /// Closes the door of `job_id` when its job (supervised in `job_dir`) reaches a final state.
    pub fn watch(&self, job_id: &JobId, job_dir: PathBuf) {
        let Ok(runtime) = self.runtime() else {
            self.close(job_id);
            return;
        };
        let (doors, job_id) = (self.doors.clone(), job_id.clone());
        // A task, not a thread: any number of running jobs cost no thread of a pool other
        // calls need.
        runtime.spawn(async move {
            let open = || lock(&doors).contains_key(&job_id);
            until_ended(job_dir, &open).await;
            close_door(&doors, &job_id);
        });
    }

    /// Closes `job_id`'s door now: its socket is removed and later calls are refused.
    pub fn close(&self, job_id: &JobId) {
        close_door(&self.doors, job_id);
    }

    /// Whether `job_id`'s door is open.
    pub fn is_open(&self, job_id: &JobId) -> bool {
        lock(&self.doors).contains_key(job_id)
    }

    /// At start: serves the running Slurm jobs' tokens again, then sweeps the doors
    /// ([`CodeMode::sweep`]) now and every [`WATCH_STEP`] for as long as the gateway runs.
    pub fn reopen(&self, state: &State) {
        self.reopen_remote(state);
        self.sweep(state);
        let (Ok(runtime), Some(gateway)) = (self.runtime(), self.gateway.get().cloned()) else {
            return;
        };
        let state = state.clone();
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(WATCH_STEP).await;
                let Some(gateway) = gateway.upgrade() else {
                    return;
                };
                let state = state.clone();
                // It reads the state directory: off the runtime's threads.
                let swept = tokio::task::spawn_blocking(move || gateway.code_mode().sweep(&state));
                let _ = swept.await;
            }
        });
    }

    /// Opens again the door of `record`'s running job, held by `owner`, and watches the job;
    /// false if its directory is gone (the door was closed, not left by a gateway that went).
    fn reopen_door(&self, state: &State, record: &JobRecord, owner: Owner) -> bool {
        if !self.base.join(record.job_id.as_str()).is_dir() {
            let _ = std::fs::remove_file(&owner.path);
            return false;
        }
        let Ok(job_dir) = state.job_dir_ambient(&record.tenant, &record.job_id) else {
            return false;
        };
        let opened = self.open_door(&record.tenant, &record.job_id, &record.instance, owner);
        if opened.is_ok() {
            self.watch(&record.job_id, job_dir);
        }
        opened.is_ok()
    }

    /// Makes the door directory and socket and starts serving them; returns the directory.
    fn open_door(
        &self,
        tenant: &TenantName,
        job_id: &JobId,
        instance: &InstanceId,
        owner: Owner,
    ) -> Result<PathBuf, String> {
        let gateway = (self.gateway.get().cloned()).ok_or_else(|| {
            "code mode needs the gateway to serve MCP (`hpcgate run`); submit without `tools`"
                .to_owned()
        })?;
        let runtime = self.runtime()?;
        let dir = self.base.join(job_id.as_str());
        let socket = dir.join(SOCKET_NAME);
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(admin(&format!(
                "the state directory's path is too long for a Unix socket ({} bytes, at most {MAX_SOCKET_PATH}): choose a shorter `state_dir`",
                socket.as_os_str().len()
            )));
        }
        create_private_dir(&self.base)
            .and_then(|()| create_private_dir(&dir))
            .map_err(|e| admin(&format!("cannot create the job's tools directory ({e})")))?;
        match std::fs::remove_file(&socket) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(admin(&format!("cannot replace the job's old socket ({e})")));
            }
            _ => {}
        }
        let listener = std::os::unix::net::UnixListener::bind(&socket)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| admin(&format!("cannot listen on the job's tools socket ({e})")))?;
        let scope = Arc::new(JobScope::new(
            tenant.clone(),
            job_id.clone(),
            instance.clone(),
        ));
        let stop = CancellationToken::new();
        let peers = self.peers.clone();
        runtime.spawn(self.serving.track_future(serve::serve(
            listener,
            gateway,
            scope.clone(),
            peers,
            stop.clone(),
        )));
        let door = Door {
            scope,
            stop,
            dir: dir.clone(),
            owner,
        };
        if let Some(old) = lock(&self.doors).insert(job_id.clone(), door) {
            old.scope.close();
            old.stop.cancel();
        }
        Ok(dir)
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, String> {
        let runtime = self.runtime.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("hpcgate-code-mode")
                .enable_all()
                .build()
                .map_err(|e| admin(&format!("cannot start the code-mode runtime ({e})")))
        });
        runtime.as_ref().map_err(Clone::clone)
    }

    /// Writes the Python module and `hpcgate-call` once per gateway start; returns their dir.
    fn support(&self) -> Result<PathBuf, String> {
        let written = self.support.get_or_init(|| {
            let dir = self.base.join(SUPPORT_DIR);
            write_support(&self.base, &dir)
                .map(|()| dir)
                .map_err(|e| admin(&format!("cannot write the code-mode support files ({e})")))
        });
        written.clone()
    }
}

impl Drop for CodeMode {
    fn drop(&mut self) {
        for (_, door) in lock(&self.doors).drain() {
            door.scope.close();
            door.stop.cancel();
        }
        // The stored tokens stay: the next start serves the running Slurm jobs again.
        for (_, remote) in lock(&self.remote).drain() {
            remote.scope.close();
        }
        // Never block in drop: the gateway may be dropped on an async thread.
        if let Some(Ok(runtime)) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Adds to a job's sandbox what its code needs to call tools: `dir` (its socket's or token's
/// directory) read-only at [`SANDBOX_DIR`], the support files at [`SUPPORT_MOUNT`], their
/// places on `PATH` and `PYTHONPATH`, and `env`.
fn equip<'a>(
    spec: &mut SandboxSpec,
    dir: PathBuf,
    support: PathBuf,
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    // Read-only: connecting to a socket or reading a token writes nothing, and the job's code
    // can neither replace them nor store files outside its quotas; the gateway (re)creates
    // them host-side, and the bind shows it.
    spec.extra_ro_binds.push(Bind {
        source: dir,
        target: PathBuf::from(SANDBOX_DIR),
    });
    spec.extra_ro_binds.push(Bind {
        source: support,
        target: PathBuf::from(SUPPORT_MOUNT),
    });
    let path = spec
        .env
        .set
        .iter()
        .find(|(name, _)| name == "PATH")
        .map_or_else(|| "/usr/bin:/bin".to_owned(), |(_, v)| v.clone());
    spec.env.set.retain(|(name, _)| name != "PATH");
    spec.env.set.extend([
        ("PATH".to_owned(), format!("{SUPPORT_MOUNT}/bin:{path}")),
        ("PYTHONPATH".to_owned(), SUPPORT_MOUNT.to_owned()),
    ]);
    (spec.env.set).extend(env.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
}

fn close_door(doors: &Mutex<HashMap<JobId, Door>>, job_id: &JobId) {
    let Some(door) = lock(doors).remove(job_id) else {
        return;
    };
    door.scope.close();
    door.stop.cancel();
    let _ = std::fs::remove_file(door.dir.join(SOCKET_NAME));
    let _ = std::fs::remove_file(door.dir.join(SCRIPT_NAME));
    let _ = std::fs::remove_dir(&door.dir);
    // After the directory and while still locked: a gateway waiting to take the door over
    // either fails to lock this file or, holding a new one, finds the directory gone.
    let _ = std::fs::remove_file(&door.owner.path);
}

/// Returns once the job supervised in `job_dir` has ended (its state reconciled: what is left
/// of a sandbox whose supervisor died is killed), or `open()` is false. It waits on the
/// supervisor's pidfd in the runtime's epoll; where it cannot (no descriptor left, say), it
/// looks every [`WATCH_STEP`].
async fn until_ended(job_dir: PathBuf, open: &(dyn Fn() -> bool + Sync)) {
    let status = |dir: PathBuf| tokio::task::spawn_blocking(move || sandbox::job_status(&dir));
    let dir = job_dir.clone();
    let pidfd = tokio::task::spawn_blocking(move || sandbox::supervisor_pidfd(&dir)).await;
    match pidfd {
        Ok(Ok(None)) => return,
        Ok(Ok(Some(pidfd))) => {
            if let Ok(exit) = watch_fd(pidfd) {
                while tokio::time::timeout(WATCH_STEP, exit.readable())
                    .await
                    .is_err()
                    && open()
                {}
                let _ = status(job_dir).await;
                return;
            }
        }
        _ => {}
    }
    while open() {
        tokio::time::sleep(WATCH_STEP).await;
        let ended = match status(job_dir.clone()).await {
            Ok(Ok(state)) => state.phase == sandbox::JobPhase::Finished,
            // No longer a job: its directory is gone.
            Ok(Err(sandbox::SandboxError::NotAJob { .. })) => true,
            // A look that failed is taken again.
            _ => false,
        };
        if ended {
            return;
        }
    }
}

/// `fd` in the runtime's epoll, readable when it is (a pidfd: when its process has exited).
#[allow(unsafe_code)]
fn watch_fd(
    fd: std::os::fd::OwnedFd,
) -> Result<
    AsyncFd<std::os::fd::OwnedFd>,
    tokio::io::unix::AsyncFdRegisterError<std::os::fd::OwnedFd>,
> {
    // SAFETY: an `OwnedFd` owns its descriptor until it is dropped, and its `as_raw_fd` is
    // that descriptor for as long: what `register_with_interest` asks of its `inner`.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A failure only the admin can fix, as an agent reads it.
fn admin(what: &str) -> String {
    format!("code mode is unavailable: {what}; ask the admin to run `hpcgate doctor`")
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// `bytes` in a new file at `path`, readable only by the gateway's uid (the sandbox's).
fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(path)?;
    file.write_all(bytes)
}

/// `dir/hpcgate_tools.py` and `dir/bin/hpcgate-call`, each replaced atomically (a running job
/// may be reading them).
fn write_support(base: &Path, dir: &Path) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    create_private_dir(base)?;
    std::fs::create_dir_all(dir.join("bin"))?;
    // Readable inside the sandbox (its uid maps onto the gateway's, so 0755 is only ours here).
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for (name, text, mode) in [
        ("hpcgate_tools.py", TOOLS_MODULE, 0o444),
        ("bin/hpcgate-call", CALL_COMMAND, 0o555),
    ] {
        let path = dir.join(name);
        let mut temp = tempfile::NamedTempFile::new_in(path.parent().unwrap_or(dir))?;
        temp.write_all(text.as_bytes())?;
        temp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
        temp.persist(&path).map_err(|e| e.error)?;
    }
    Ok(())
}
