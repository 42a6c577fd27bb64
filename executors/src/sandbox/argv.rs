//! [`SandboxSpec`] → bwrap argv: the one place where the hardened profile is written down.
//!
//! The argv is a vector of separate elements, never a shell string: the user's command comes
//! after `--` element by element, so `;`, `$(…)`, newlines or a leading `-` stay data.
//! The profile, in order:
//!
//! - `--unshare-all --unshare-user` (every namespace; user explicitly so that
//!   `--disable-userns` applies), `--share-net` only for [`Network::Host`];
//! - `--disable-userns --assert-userns-disabled`: no nested user namespaces;
//! - `--uid/--gid`, `--hostname`;
//! - `--new-session` (no controlling terminal: TIOCSTI is impossible), `--die-with-parent`;
//! - `--cap-drop ALL`;
//! - `--clearenv` then `--setenv` for allow-listed and explicit variables, `HOME=/tmp`;
//! - system mounts read-only, fresh `/proc`, fresh `/dev` made read-only with a `--size`d
//!   `/dev/shm`, `/tmp` tmpfs with `--size`;
//! - workspace and output read-write, extras read-only;
//! - `--remount-ro /` (the root tmpfs that holds the mount points), `--chdir /workspace`.
//!
//! Limits are not part of the argv: the runners apply them around bwrap (rlimits, cgroups).
//! This function reads the caller's environment for the allow-list (ambient input).

use std::ffi::OsString;

use super::spec::{Network, OUTPUT_MOUNT, SandboxSpec, SystemMount, WORKSPACE_MOUNT};

/// Builds the complete bwrap argv (starting with the bwrap binary) for `command`.
///
/// Keep this signature stable: the Slurm executor runs job bodies through it.
pub fn bwrap_argv(spec: &SandboxSpec, command: &[String]) -> Vec<OsString> {
    let mut a = Argv(Vec::with_capacity(64 + command.len()));
    a.push(spec.bwrap.as_os_str());

    a.push("--unshare-all");
    a.push("--unshare-user");
    if spec.network == Network::Host {
        a.push("--share-net");
    }
    a.push("--disable-userns");
    a.push("--assert-userns-disabled");
    a.push("--uid");
    a.push(spec.identity.uid.to_string());
    a.push("--gid");
    a.push(spec.identity.gid.to_string());
    a.push("--hostname");
    a.push(&spec.hostname);
    a.push("--new-session");
    a.push("--die-with-parent");
    a.push("--cap-drop");
    a.push("ALL");

    a.push("--clearenv");
    for (name, value) in resolved_env(spec) {
        a.push("--setenv");
        a.push(name);
        a.push(value);
    }

    for mount in &spec.system {
        match mount {
            SystemMount::RoBind { path, optional } => {
                a.push(if *optional {
                    "--ro-bind-try"
                } else {
                    "--ro-bind"
                });
                a.push(path.as_os_str());
                a.push(path.as_os_str());
            }
            SystemMount::Symlink { target, link } => {
                a.push("--symlink");
                a.push(target.as_os_str());
                a.push(link.as_os_str());
            }
        }
    }
    if spec.network == Network::Host {
        a.push("--ro-bind-try");
        a.push("/etc/resolv.conf");
        a.push("/etc/resolv.conf");
    }
    a.push("--proc");
    a.push("/proc");
    // bwrap's /dev is a tmpfs without a size limit: cap /dev/shm, then make /dev read-only
    // (the device nodes are separate bind mounts and stay usable).
    let tmp_bytes = (spec.tmp_size_mb.max(1) * 1024 * 1024).to_string();
    a.push("--dev");
    a.push("/dev");
    a.push("--size");
    a.push(&tmp_bytes);
    a.push("--tmpfs");
    a.push("/dev/shm");
    a.push("--remount-ro");
    a.push("/dev");
    a.push("--size");
    a.push(&tmp_bytes);
    a.push("--tmpfs");
    a.push("/tmp");

    a.push("--bind");
    a.push(spec.workspace.as_os_str());
    a.push(WORKSPACE_MOUNT);
    a.push("--bind");
    a.push(spec.output.as_os_str());
    a.push(OUTPUT_MOUNT);
    for bind in &spec.extra_ro_binds {
        a.push("--ro-bind");
        a.push(bind.source.as_os_str());
        a.push(bind.target.as_os_str());
    }
    // bwrap builds the root on a tmpfs with no size limit: make it read-only once every
    // mount point exists, or `/x` and `/etc/x` would be unbounded writable memory.
    a.push("--remount-ro");
    a.push("/");
    a.push("--chdir");
    a.push(WORKSPACE_MOUNT);

    a.push("--");
    for arg in command {
        a.push(arg);
    }
    a.0
}

/// The sandbox environment: allow-listed variables from the caller, then explicit ones
/// (explicit wins), then `HOME=/tmp` unless set explicitly. Invalid names are dropped here
/// and rejected by [`SandboxSpec`] validation before any run.
pub(crate) fn resolved_env(spec: &SandboxSpec) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = Vec::new();
    let mut set = |name: &str, value: OsString| {
        if !super::validate::env_name_ok(name) {
            return;
        }
        env.retain(|(n, _)| n != name);
        env.push((name.to_owned(), value));
    };
    for name in &spec.env.allow {
        if let Some(value) = std::env::var_os(name) {
            set(name, value);
        }
    }
    set("HOME", OsString::from("/tmp"));
    for (name, value) in &spec.env.set {
        set(name, OsString::from(value));
    }
    env
}

struct Argv(Vec<OsString>);

impl Argv {
    fn push(&mut self, s: impl Into<OsString>) {
        self.0.push(s.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::{Bind, SandboxSpec};

    fn strings(spec: &SandboxSpec, cmd: &[&str]) -> Vec<String> {
        let cmd: Vec<String> = cmd.iter().map(|s| (*s).to_owned()).collect();
        bwrap_argv(spec, &cmd)
            .into_iter()
            .map(|s| s.into_string().expect("utf8"))
            .collect()
    }

    #[test]
    fn hardened_profile_is_complete_and_the_command_follows_the_separator() {
        let spec = SandboxSpec::new("/w", "/o");
        let argv = strings(&spec, &["--bind", "/", "/x"]);
        assert_eq!(argv[0], "/usr/bin/bwrap");
        for flag in [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--assert-userns-disabled",
            "--new-session",
            "--die-with-parent",
            "--clearenv",
        ] {
            assert!(argv.iter().any(|a| a == flag), "missing {flag}");
        }
        assert!(!argv.iter().any(|a| a == "--share-net"));
        let has = |w: &[&str]| argv.windows(w.len()).any(|x| x == w);
        assert!(has(&["--cap-drop", "ALL"]));
        assert!(has(&["--size", "67108864", "--tmpfs", "/tmp"]));
        assert!(has(&["--proc", "/proc"]) && has(&["--dev", "/dev"]));
        assert!(has(&[
            "--size",
            "67108864",
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev"
        ]));
        assert!(has(&["--bind", "/w", "/workspace"]) && has(&["--bind", "/o", "/output"]));
        assert!(has(&["--setenv", "HOME", "/tmp"]));
        assert!(has(&["--remount-ro", "/", "--chdir", "/workspace", "--"]));
        assert!(
            !argv
                .iter()
                .any(|a| a == "/etc" || a == "/home" || a == "/root")
        );
        let sep = argv.iter().position(|a| a == "--").expect("separator");
        assert_eq!(argv[sep + 1..], ["--bind", "/", "/x"]);
    }

    #[test]
    fn host_network_shares_the_namespace_and_resolv_conf() {
        let mut spec = SandboxSpec::new("/w", "/o");
        spec.network = Network::Host;
        spec.extra_ro_binds.push(Bind {
            source: "/data".into(),
            target: "/data".into(),
        });
        let argv = strings(&spec, &["true"]);
        let has = |w: &[&str]| argv.windows(w.len()).any(|x| x == w);
        assert!(has(&["--share-net"]));
        assert!(has(&[
            "--ro-bind-try",
            "/etc/resolv.conf",
            "/etc/resolv.conf"
        ]));
        assert!(has(&["--ro-bind", "/data", "/data"]));
    }

    #[test]
    fn explicit_env_wins_and_invalid_names_are_dropped() {
        let mut spec = SandboxSpec::new("/w", "/o");
        spec.env.allow.clear();
        spec.env.set = vec![
            ("HOME".into(), "/workspace".into()),
            ("BAD=NAME".into(), "x".into()),
        ];
        let argv = strings(&spec, &["true"]);
        let homes: Vec<_> = argv.windows(2).filter(|w| w[0] == "HOME").collect();
        assert_eq!(homes.len(), 1);
        assert_eq!(homes[0][1], "/workspace");
        assert!(!argv.iter().any(|a| a.contains("BAD")));
    }
}
