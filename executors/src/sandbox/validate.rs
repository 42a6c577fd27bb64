//! Checks a [`SandboxSpec`] and a command before anything is started.
//!
//! bwrap would reject some of these itself, but with messages an agent cannot act on; others
//! (relative paths, NUL bytes, mounts over `/workspace`) it would accept and do something
//! surprising with.

use std::path::Path;

use super::error::SandboxError;
use super::spec::{OUTPUT_MOUNT, SandboxSpec, WORKSPACE_MOUNT};

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
    let l = &spec.limits;
    if l.wall_time.is_zero() || l.pids == 0 || l.memory_mb == 0 || l.cpus == 0 {
        return Err(SandboxError::ZeroLimit);
    }
    Ok(())
}

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
    }
}
