//! The doctor's checks of the host itself: bwrap's version, a real run of `/bin/true` in the
//! hardened sandbox, user namespaces, and which mechanism enforces the sandbox's limits.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::Duration;

use hpcgate_executors::sandbox::{EndReason, ExitInfo, LimitMechanism, RunResult, run_sync};

use super::{Check, fail, pass, warn};
use crate::config::Settings;

pub(super) fn bwrap_version(bwrap: &Path) -> Check {
    const NAME: &str = "bwrap";
    let install = format!(
        "install bubblewrap ≥ 0.8 (e.g. `apt install bubblewrap`) or set `sandbox.bwrap` to its absolute path (now `{}`)",
        bwrap.display()
    );
    // The doctor's one process outside the executors: a version query, argv only.
    #[allow(clippy::disallowed_methods)]
    let output = match std::process::Command::new(bwrap).arg("--version").output() {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            return fail(
                NAME,
                format!(
                    "`{} --version` failed: {}",
                    bwrap.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
                install,
            );
        }
        Err(e) => {
            return fail(
                NAME,
                format!("cannot run `{}`: {e}", bwrap.display()),
                install,
            );
        }
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.split_whitespace().last().unwrap_or("").to_owned();
    let parts: Vec<u32> = version.split('.').map_while(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [major, minor, ..] if (*major, *minor) >= (0, 8) => pass(
            NAME,
            format!("`{}` is bubblewrap {version}", bwrap.display()),
        ),
        [_, _, ..] => fail(
            NAME,
            format!("bubblewrap {version} is older than 0.8"),
            install,
        ),
        _ => fail(
            NAME,
            format!("cannot read a version from `{}`", text.trim()),
            install,
        ),
    }
}

pub(super) fn sandbox_run(settings: &Settings) -> Result<RunResult, Check> {
    const NAME: &str = "sandbox";
    let hint = "bwrap cannot build the hardened sandbox here: check the user-namespace line below, and that no AppArmor/SELinux rule blocks bwrap";
    // A fresh private directory (`create`, not `create_dir_all`: a name planted in the shared
    // temporary directory, e.g. a symlink, makes this fail instead of being followed).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let scratch =
        std::env::temp_dir().join(format!("hpcgate-doctor-{}-{nanos}", std::process::id()));
    let (workspace, output) = (scratch.join("workspace"), scratch.join("output"));
    let mut private = std::fs::DirBuilder::new();
    private.mode(0o700);
    let made = private
        .create(&scratch)
        .and_then(|()| private.create(&workspace))
        .and_then(|()| private.create(&output));
    if let Err(e) = made {
        return Err(fail(
            NAME,
            format!("cannot create `{}`: {e}", scratch.display()),
            "make the temporary directory writable (`TMPDIR`)",
        ));
    }
    let mut spec = settings.fixed.sandbox.spec(&workspace, &output);
    spec.limits.wall_time = Duration::from_secs(20);
    let result = run_sync(&spec, &["/bin/true".to_owned()], None);
    let _ = std::fs::remove_dir_all(&scratch);
    match result {
        Ok(r) if r.reason == EndReason::Exited && r.exit == ExitInfo::Code(0) => Ok(r),
        Ok(r) => Err(fail(
            NAME,
            format!(
                "`/bin/true` ended with {:?} ({:?}): {}",
                r.exit,
                r.reason,
                String::from_utf8_lossy(&r.stderr).trim()
            ),
            hint,
        )),
        Err(e) => Err(fail(NAME, format!("cannot start the sandbox: {e}"), hint)),
    }
}

pub(super) fn user_namespaces() -> Check {
    const NAME: &str = "user namespaces";
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    match read("/proc/sys/user/max_user_namespaces") {
        Some(0) => {
            return fail(
                NAME,
                "`user.max_user_namespaces` is 0",
                "enable them: `sysctl -w user.max_user_namespaces=15000` (and in /etc/sysctl.d)",
            );
        }
        None => {
            return fail(
                NAME,
                "cannot read `/proc/sys/user/max_user_namespaces`",
                "run on Linux with user namespaces (CONFIG_USER_NS)",
            );
        }
        Some(_) => {}
    }
    let root = rustix::process::geteuid().is_root();
    if !root && read("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return fail(
            NAME,
            "unprivileged user namespaces are disabled",
            "`sysctl -w kernel.unprivileged_userns_clone=1`, or install bwrap setuid",
        );
    }
    if !root && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return warn(
            NAME,
            "AppArmor restricts unprivileged user namespaces",
            "give bwrap an AppArmor profile that allows `userns` (Ubuntu ≥ 23.10 ships one)",
        );
    }
    pass(
        NAME,
        if root {
            "available (running as root)"
        } else {
            "available to unprivileged users"
        },
    )
}

pub(super) fn limits(result: Option<&RunResult>) -> Check {
    const NAME: &str = "limits";
    // The same test the executor makes: a mount of type cgroup2, wherever it is.
    let v2 = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines().any(|l| {
            l.split_once(" - ")
                .is_some_and(|(_, post)| post.starts_with("cgroup2 "))
        })
    });
    let Some(result) = result else {
        return warn(
            NAME,
            "unknown: the sandbox did not run",
            "fix the sandbox check first",
        );
    };
    let l = &result.limits;
    if l.memory.mechanism == LimitMechanism::CgroupV2 {
        return pass(
            NAME,
            format!(
                "cgroup v2 delegated: cpus, memory and pids enforced per sandbox ({})",
                l.memory.detail
            ),
        );
    }
    let no_v2 = if v2 {
        "no delegated cgroup v2: it is mounted, but our cgroup does not delegate cpu, memory and pids"
    } else {
        "no delegated cgroup v2: no cgroup v2 hierarchy is mounted"
    };
    // Each limit on its own: cgroup v1 where its controller is usable, the fallback otherwise.
    let cpus = match l.cpus.mechanism {
        LimitMechanism::CgroupV1 => "cpus by cgroup v1 cpu.cfs_quota_us",
        _ => "CPU time by RLIMIT_CPU (parallelism not limited)",
    };
    let memory = match l.memory.mechanism {
        LimitMechanism::CgroupV1 if l.memory.detail.contains("memory.memsw") => {
            "memory by cgroup v1 memory.limit_in_bytes and memory.memsw.limit_in_bytes"
        }
        LimitMechanism::CgroupV1 => {
            "memory by cgroup v1 memory.limit_in_bytes (no swap accounting: swap not limited)"
        }
        _ => "memory by a watchdog and RLIMIT_AS",
    };
    let pids = match l.pids.mechanism {
        LimitMechanism::CgroupV1 => "pids by cgroup v1 pids.max",
        LimitMechanism::NotEnforced => "pids NOT enforced",
        _ => "pids by RLIMIT_NPROC",
    };
    let v1 = [&l.cpus, &l.memory, &l.pids]
        .iter()
        .filter(|x| x.mechanism == LimitMechanism::CgroupV1)
        .count();
    let detail = format!("{cpus}, {memory}, {pids} ({no_v2})");
    if v1 == 3 {
        return pass(NAME, format!("cgroup v1 per sandbox: {detail}"));
    }
    warn(
        NAME,
        detail,
        "to enforce CPUs, memory and pids per sandbox, run the gateway in a delegated cgroup, e.g. `systemd-run --user -p Delegate=yes --scope hpcgate run`, or as root where the cgroup v1 cpu, memory and pids controllers are mounted",
    )
}
