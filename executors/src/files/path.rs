//! Sandbox-view paths: the only path syntax the file tools accept.
//!
//! An agent sees its instance as the sandbox does: `/workspace/…` and `/output/…`, and a relative
//! path means "under `/workspace`". Parsing is purely lexical and happens before any system call,
//! so it is the first of two walls (the second is cap-std resolving beneath a `Dir`):
//!
//! - empty paths, NUL bytes and paths longer than [`MAX_PATH_BYTES`] are [`FileError::InvalidPath`];
//! - any `..` component, anywhere, is an [`FileError::EscapeAttempt`]. We do not normalise
//!   `a/../b` lexically: through a symlinked directory `..` means something else than the text
//!   says, and refusing is simpler to reason about than being clever;
//! - an absolute path whose first component is not exactly `workspace` or `output`
//!   (`/etc/passwd`, `/workspacefoo`, `/workspace2`) is an [`FileError::EscapeAttempt`];
//! - empty components (`a//b`) and `.` are dropped.

use std::path::PathBuf;

use super::error::FileError;

/// Longest path accepted, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// Which of the instance's two capability directories a path lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Root {
    /// `/workspace`: the instance's working directory.
    Workspace,
    /// `/output`: the instance's output directory.
    Output,
}

impl Root {
    /// The sandbox-view prefix of this root, e.g. `/workspace`.
    pub fn prefix(self) -> &'static str {
        match self {
            Root::Workspace => "/workspace",
            Root::Output => "/output",
        }
    }
}

/// A parsed sandbox-view path: a root plus normal components (no `..`, no `.`, no empties).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxPath {
    root: Root,
    components: Vec<String>,
}

impl SandboxPath {
    /// Parses a sandbox-view path, refusing anything that could name a place outside the roots.
    pub fn parse(raw: &str) -> Result<Self, FileError> {
        let shown = || super::names::escape_str(truncate_for_message(raw));
        if raw.is_empty() {
            return Err(FileError::InvalidPath {
                path: String::new(),
                reason: "the path is empty".into(),
            });
        }
        if raw.len() > MAX_PATH_BYTES {
            return Err(FileError::InvalidPath {
                path: shown(),
                reason: format!("the path is longer than {MAX_PATH_BYTES} bytes"),
            });
        }
        if raw.contains('\0') {
            return Err(FileError::InvalidPath {
                path: shown(),
                reason: "the path contains a NUL byte".into(),
            });
        }
        let (root, rest) = match raw.strip_prefix('/') {
            None => (Root::Workspace, raw),
            Some(abs) => {
                let (first, rest) = abs.split_once('/').unwrap_or((abs, ""));
                match first {
                    "workspace" => (Root::Workspace, rest),
                    "output" => (Root::Output, rest),
                    _ => return Err(FileError::EscapeAttempt { path: shown() }),
                }
            }
        };
        let mut components = Vec::new();
        for part in rest.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err(FileError::EscapeAttempt { path: shown() }),
                temporary if temporary.starts_with(super::atomic::TEMP_PREFIX) => {
                    return Err(FileError::InvalidPath {
                        path: shown(),
                        reason: format!(
                            "names starting with `{}` are the gateway's own temporary files (a \
                             write or an upload in progress): they cannot be read, changed or \
                             made; choose another name",
                            super::atomic::TEMP_PREFIX
                        ),
                    });
                }
                normal => components.push(normal.to_owned()),
            }
        }
        Ok(Self { root, components })
    }

    /// The root this path lives in.
    pub fn root(&self) -> Root {
        self.root
    }

    /// True for `/workspace` or `/output` itself.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The path relative to its root's `Dir` (`.` for the root itself).
    pub fn relative(&self) -> PathBuf {
        if self.components.is_empty() {
            PathBuf::from(".")
        } else {
            self.components.iter().collect()
        }
    }

    /// The parent's path relative to the root (`.` at the top) and the final name, or `None`
    /// for a root.
    pub fn split_last(&self) -> Option<(PathBuf, &str)> {
        let (last, parents) = self.components.split_last()?;
        let parent = if parents.is_empty() {
            PathBuf::from(".")
        } else {
            parents.iter().collect()
        };
        Some((parent, last.as_str()))
    }

    /// The path's names below its root.
    pub(crate) fn components(&self) -> &[String] {
        &self.components
    }

    /// The path of the first `depth` names (the root for 0).
    pub(crate) fn ancestor(&self, depth: usize) -> SandboxPath {
        SandboxPath {
            root: self.root,
            components: self.components[..depth.min(self.components.len())].to_vec(),
        }
    }

    /// Refuses names that the gateway must never create: anything [`super::names`] would escape
    /// (control characters, backslashes, bidi overrides; such names could not be passed back as
    /// listed) and names over 255 bytes. Names of its own temporary files are refused by
    /// [`SandboxPath::parse`] already (the usage walk deletes one left behind).
    pub fn check_creatable(&self) -> Result<(), FileError> {
        for name in &self.components {
            if name.chars().any(super::names::needs_escape) {
                return Err(FileError::InvalidPath {
                    path: self.to_string(),
                    reason:
                        "new names may not contain control characters, backslashes or bidirectional overrides"
                            .into(),
                });
            }
            if name.len() > 255 {
                return Err(FileError::InvalidPath {
                    path: self.to_string(),
                    reason: "a path component is longer than 255 bytes".into(),
                });
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for SandboxPath {
    /// The canonical sandbox view (`/workspace/a/b`), control characters escaped.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.root.prefix())?;
        for c in &self.components {
            f.write_str("/")?;
            f.write_str(&super::names::escape_str(c))?;
        }
        Ok(())
    }
}

/// Keeps error messages short when someone sends a megabyte of path.
fn truncate_for_message(raw: &str) -> &str {
    const KEEP: usize = 120;
    if raw.len() <= KEEP {
        return raw;
    }
    let mut end = KEEP;
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    &raw[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_paths_map_onto_roots() {
        let rows: &[(&str, Root, &str)] = &[
            ("a.txt", Root::Workspace, "a.txt"),
            ("./a//b/", Root::Workspace, "a/b"),
            ("/workspace", Root::Workspace, "."),
            ("/workspace/", Root::Workspace, "."),
            ("/workspace/x/y", Root::Workspace, "x/y"),
            ("/output", Root::Output, "."),
            ("/output/./r.csv", Root::Output, "r.csv"),
            ("...", Root::Workspace, "..."),
            ("..a/b..", Root::Workspace, "..a/b.."),
        ];
        for (raw, root, rel) in rows {
            let p = SandboxPath::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
            assert_eq!(p.root(), *root, "{raw}");
            assert_eq!(p.relative(), PathBuf::from(rel), "{raw}");
        }
    }

    #[test]
    fn display_is_canonical_and_escaped() {
        let p = SandboxPath::parse("//workspace//a\nb/./c").unwrap_err();
        assert!(matches!(p, FileError::EscapeAttempt { .. }), "{p}");
        let p = SandboxPath::parse("/output//a\nb/./c").unwrap();
        assert_eq!(p.to_string(), "/output/a\\nb/c");
    }

    /// Randomized paths (a deterministic xorshift, so failures reproduce): an accepted path
    /// never yields a `..`, absolute or prefix component, and a path is refused exactly when a
    /// simple independent oracle says it should be.
    #[test]
    fn randomized_paths_never_escape_and_refusals_match_the_oracle() {
        use std::path::Component;
        let atoms = [
            "..",
            ".",
            "/",
            "//",
            "workspace",
            "output",
            "/workspace",
            "/output",
            "a",
            "\\",
            "\0",
            "..\\",
            "\u{2026}",
            " ",
            "\n",
            "~",
            "-",
            "workspace2",
            "/workspacefoo",
            "\u{202e}",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let n = (next() % 7) as usize;
            let raw: String = (0..n)
                .map(|_| atoms[(next() % atoms.len() as u64) as usize])
                .collect();
            let oracle_ok = !raw.is_empty()
                && !raw.contains('\0')
                && !raw.split('/').any(|c| c == "..")
                && (!raw.starts_with('/')
                    || ["workspace", "output"].contains(&raw[1..].split('/').next().unwrap_or("")));
            match SandboxPath::parse(&raw) {
                Ok(p) => {
                    assert!(oracle_ok, "accepted {raw:?}");
                    let rel = p.relative();
                    for c in rel.components() {
                        assert!(
                            matches!(c, Component::Normal(_) | Component::CurDir),
                            "{raw:?}: {c:?}"
                        );
                    }
                    assert!(rel.is_relative(), "{raw:?}");
                }
                Err(e) => assert!(!oracle_ok, "refused {raw:?}: {e}"),
            }
        }
    }
}
