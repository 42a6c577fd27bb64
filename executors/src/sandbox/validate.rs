//! Checks a [`SandboxSpec`] and a command before anything is started.
//!
//! bwrap would reject some of these itself, but with messages an agent cannot act on; others
//! (relative paths, NUL bytes, mounts over `/workspace`) it would accept and do something
//! surprising with.

use std::path::Path;

use super::error::SandboxError;
use super::spec::{Limits, OUTPUT_MOUNT, SandboxSpec, WORKSPACE_MOUNT};

/// Validates the spec and the command; the runners call this before every launch.
pub fn validate(spec: &SandboxSpec, command: &[String]) -> Result<(), SandboxError> {
    if command.is_empty() {
        return Err(SandboxError::EmptyCommand);
    }
    if let Some(arg) = command.iter().find(|a| a.contains('\0')) {
        return Err(SandboxError::NulInArgument {
            argument: arg.replace('\0', "\\0"),
        });
    }
    for path in [&spec.bwrap, &spec.workspace, &spec.output] {
        absolute(path)?;
    }
    for bind in &spec.extra_ro_binds {
        absolute(&bind.source)?;
        absolute(&bind.target)?;
        let t = bind.target.as_path();
        if t == Path::new("/")
            || t.starts_with(WORKSPACE_MOUNT)
            || t.starts_with(OUTPUT_MOUNT)
            || t.starts_with("/proc")
            || t.starts_with("/dev")
        {
            return Err(SandboxError::ReservedMountTarget {
                target: bind.target.clone(),
            });
        }
    }
    for (name, value) in &spec.env.set {
        if !env_name_ok(name) || value.contains('\0') {
            return Err(SandboxError::InvalidEnvName { name: name.clone() });
        }
    }
    if let Some(name) = spec.env.allow.iter().find(|n| !env_name_ok(n)) {
        return Err(SandboxError::InvalidEnvName { name: name.clone() });
    }
    validate_limits(&spec.limits)
}

/// Checks the limits alone (what a job's caller asked for), as [`validate`] does.
pub fn validate_limits(l: &Limits) -> Result<(), SandboxError> {
    if l.wall_time.is_zero() || l.pids == 0 || l.memory_mb == 0 || l.cpus == 0 {
        return Err(SandboxError::ZeroLimit);
    }
    // Past these, a limit is no limit: the kernel refuses a `cpu.max` quota over about 2^44
    // µs (and the cgroup with it, leaving only the rlimit fallback), a deadline past the
    // clock's range cannot be kept.
    for (what, value, max) in [
        ("cpus", u64::from(l.cpus), MAX_CPUS),
        ("time_limit_s", l.wall_time.as_secs(), MAX_WALL_TIME_S),
        ("memory_mb", l.memory_mb, MAX_MEMORY_MB),
        ("stop_grace_s", l.stop_grace.as_secs(), MAX_STOP_GRACE_S),
    ] {
        if value > max {
            return Err(SandboxError::LimitTooLarge { what, value, max });
        }
    }
    Ok(())
}

/// The most CPUs a sandbox is given (a `cpu.max` quota of 6.5 · 10^9 µs per period).
pub const MAX_CPUS: u64 = 65_536;
/// The longest wall time of a sandbox: a year.
pub const MAX_WALL_TIME_S: u64 = 366 * 86_400;
/// The longest grace between `SIGTERM` and the kill of a stopped sandbox: ten minutes.
pub const MAX_STOP_GRACE_S: u64 = 600;
/// The most memory of a sandbox: 1 PiB.
pub const MAX_MEMORY_MB: u64 = 1 << 30;

fn absolute(path: &Path) -> Result<(), SandboxError> {
    if path.is_absolute() && !path.as_os_str().as_encoded_bytes().contains(&0) {
        Ok(())
    } else {
        Err(SandboxError::RelativePath {
            path: path.to_owned(),
        })
    }
}

/// A portable environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn env_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::spec::Bind;

    fn cmd() -> Vec<String> {
        vec!["true".to_owned()]
    }

    #[test]
    fn refusal_table() {
        let ok = SandboxSpec::new("/w", "/o");
        assert!(validate(&ok, &cmd()).is_ok());
        assert!(matches!(
            validate(&ok, &[]),
            Err(SandboxError::EmptyCommand)
        ));
        assert!(matches!(
            validate(&ok, &["a\0b".to_owned()]),
            Err(SandboxError::NulInArgument { .. })
        ));
        let mut s = ok.clone();
        s.workspace = "rel".into();
        assert!(matches!(
            validate(&s, &cmd()),
            Err(SandboxError::RelativePath { .. })
        ));
        for target in ["/", "/workspace/x", "/output", "/proc/self", "/dev"] {
            let mut s = ok.clone();
            s.extra_ro_binds.push(Bind {
                source: "/data".into(),
                target: target.into(),
            });
            assert!(
                matches!(
                    validate(&s, &cmd()),
                    Err(SandboxError::ReservedMountTarget { .. })
                ),
                "{target}"
            );
        }
        for name in ["", "1A", "A-B", "A=B", "A B"] {
            let mut s = ok.clone();
            s.env.set.push((name.into(), "v".into()));
            assert!(
                matches!(
                    validate(&s, &cmd()),
                    Err(SandboxError::InvalidEnvName { .. })
                ),
                "{name:?}"
            );
        }
        let mut s = ok.clone();
        s.limits.pids = 0;
        assert!(matches!(validate(&s, &cmd()), Err(SandboxError::ZeroLimit)));
        // A limit too large to be one: refused, naming the argument.
        for set in [
            |s: &mut SandboxSpec| s.limits.cpus = u32::MAX,
            |s: &mut SandboxSpec| s.limits.wall_time = std::time::Duration::from_secs(u64::MAX),
            |s: &mut SandboxSpec| s.limits.memory_mb = u64::MAX,
        ] {
            let mut s = ok.clone();
            set(&mut s);
            let e = validate(&s, &cmd()).unwrap_err();
            assert!(matches!(e, SandboxError::LimitTooLarge { .. }), "{e}");
        }
        let mut s = ok.clone();
        s.limits.cpus = MAX_CPUS as u32;
        assert!(validate(&s, &cmd()).is_ok(), "the most is allowed");
    }
}
