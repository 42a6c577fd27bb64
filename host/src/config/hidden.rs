//! What no sandbox may see, checked when the configuration is loaded.

use std::path::{Component, Path, PathBuf};

use hpcgate_executors::sandbox::SystemMount;

use super::auth::{JwtAlgorithm, JwtKeySource, JwtSettings};
use super::error::ConfigError;
use super::settings::{Bad, FixedSettings};

/// What no sandbox may see: the state directory (every tenant's instances, job records, jobs'
/// door sockets, the audit log, and the in-use files whose locks keep instances from the
/// archive), and an HS256 secret (it would let a job sign tokens for any tenant). Each must
/// lie outside the system directories every sandbox sees, and no configured read-only bind
/// may hold one or lie inside one. Paths are compared as the filesystem resolves them where
/// they exist, since a bind follows symbolic links.
pub(super) fn check_sandboxes_cannot_see(
    fixed: &FixedSettings,
    jwt: Option<&JwtSettings>,
    bad: &Bad,
) -> Result<(), ConfigError> {
    let mut hidden = vec![(
        "state_dir",
        "the gateway's state directory (all tenants' instances, job records and audit log)",
        &fixed.state_dir,
    )];
    if let Some(JwtSettings {
        algorithm: JwtAlgorithm::Hs256,
        key: JwtKeySource::KeyFile(secret),
        ..
    }) = jwt
    {
        hidden.push((
            "auth.jwt.key_file",
            "the HS256 secret that signs tenants' tokens",
            secret,
        ));
    }
    let hidden: Vec<_> = (hidden.into_iter())
        .map(|(key, what, path)| (key, what, path, resolved(path)))
        .collect();
    for mount in SystemMount::debian_defaults() {
        let SystemMount::RoBind { path: system, .. } = mount else {
            continue;
        };
        let seen = resolved(&system);
        if let Some((key, what, path, _)) = hidden.iter().find(|h| h.3.starts_with(&seen)) {
            return Err(bad(
                key,
                format!(
                    "`{}` lies in `{}`, which every sandbox sees read-only; keep {what} elsewhere",
                    path.display(),
                    system.display()
                ),
            ));
        }
    }
    let sandbox = (fixed.sandbox.extra_ro_binds.iter().enumerate())
        .map(|(i, b)| (format!("sandbox.extra_ro_binds[{i}].source"), &b.source));
    let proxies = fixed.proxied_mcps.iter().flat_map(|(name, p)| {
        (p.binds.iter().enumerate())
            .map(move |(i, b)| (format!("proxied_mcps.{name}.binds[{i}]"), &b.source))
    });
    for (key, source) in sandbox.chain(proxies) {
        let shown = resolved(source);
        let overlaps = |h: &&(_, _, _, PathBuf)| h.3.starts_with(&shown) || shown.starts_with(&h.3);
        if let Some((_, what, path, _)) = hidden.iter().find(overlaps) {
            return Err(bad(
                &key,
                format!(
                    "`{}` would show every sandbox {what} (`{}`); bind a directory that neither holds it nor lies inside it",
                    source.display(),
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// `path` with its symbolic links resolved as far as it exists, the rest as written with `.`
/// and `..` taken away.
fn resolved(path: &Path) -> PathBuf {
    for ancestor in path.ancestors() {
        if let Ok(mut real) = std::fs::canonicalize(ancestor) {
            for part in path
                .strip_prefix(ancestor)
                .unwrap_or(Path::new(""))
                .components()
            {
                match part {
                    Component::ParentDir => {
                        real.pop();
                    }
                    Component::Normal(name) => real.push(name),
                    _ => {}
                }
            }
            return real;
        }
    }
    path.to_path_buf()
}

#[cfg(test)]
mod tests;
