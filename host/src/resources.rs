//! MCP resources: a built-in guide for agents, plus the site's own documents — regular files
//! directly inside `[mcp] context_dirs` whose names match `resource_patterns`.
//!
//! Listing and reading rescan the directories, so an admin adds a document without a
//! restart. A document is read only if it is a regular file (symlinks are not followed) of at
//! most [`MAX_RESOURCE_BYTES`]; when two directories hold the same name, the first one
//! listed in the config wins (a later one never silently replaces it).

use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use hpcgate_policy_sdk::glob::GlobSet;

/// Largest document served.
pub const MAX_RESOURCE_BYTES: u64 = 1 << 20;
const CONTEXT_PREFIX: &str = "resource://hpcgate/context/";
pub const GUIDE_URI: &str = "resource://hpcgate/guide";

const GUIDE: &str = "# Working with hpcgate

1. `create_instance` gives you a private sandbox: `/workspace` (your files) and `/output`.
2. Put files there with `write_file` (paths are sandbox paths: `data/x.csv` or
   `/workspace/data/x.csv`), read them with `read_file`, `list_directory`, `search_files`.
3. Run commands with `submit_job`: `command` is a shell line (run by `/bin/sh` inside the
   sandbox) or an argv array. `mode = \"local\"` runs on the gateway host in a sandbox without
   network; `mode = \"slurm\"` submits a batch job when the site enabled Slurm. `timeout` is how
   long to wait for the result; if the job is still running, `poll_job` continues waiting and
   `cancel_job` stops it. `resources` asks for cpus, memory_mb, time_limit_s and gpus; the
   site's policy may lower or refuse them, and the result shows what the job really got.
4. `cluster_status` shows the cluster's load; `list_jobs` your jobs.
5. Every call is checked by the site's policies and recorded. A refusal names the policy and
   the reason: change the request rather than retrying it unchanged.
6. `archive_instance` when you are done (refused while a job runs); files are kept.
";

/// One resource as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceEntry {
    pub uri: String,
    pub name: String,
    pub description: String,
    pub size: Option<u64>,
}

/// A resource's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceText {
    pub uri: String,
    pub mime_type: &'static str,
    pub text: String,
}

/// The guide, then each context document.
pub fn list(dirs: &[PathBuf], patterns: &[String]) -> Vec<ResourceEntry> {
    let mut out = vec![ResourceEntry {
        uri: GUIDE_URI.to_owned(),
        name: "hpcgate-guide".to_owned(),
        description: "How to use this gateway's tools, step by step".to_owned(),
        size: Some(GUIDE.len() as u64),
    }];
    out.extend(
        documents(dirs, patterns)
            .into_iter()
            .map(|(name, _, size)| ResourceEntry {
                uri: format!("{CONTEXT_PREFIX}{name}"),
                description: format!("Site documentation: {name}"),
                name,
                size: Some(size),
            }),
    );
    out
}

/// Reads one listed resource; the error says what to do.
pub fn read(dirs: &[PathBuf], patterns: &[String], uri: &str) -> Result<ResourceText, String> {
    if uri == GUIDE_URI {
        return Ok(ResourceText {
            uri: uri.to_owned(),
            mime_type: "text/markdown",
            text: GUIDE.to_owned(),
        });
    }
    let not_found = || format!("no resource `{uri}`; call resources/list for the available ones");
    let name = uri.strip_prefix(CONTEXT_PREFIX).ok_or_else(not_found)?;
    let (_, path, _) = documents(dirs, patterns)
        .into_iter()
        .find(|(n, _, _)| n == name)
        .ok_or_else(not_found)?;
    let text = read_regular(&path).map_err(|e| format!("resource `{uri}` cannot be read: {e}"))?;
    Ok(ResourceText {
        uri: uri.to_owned(),
        mime_type: if name.ends_with(".md") {
            "text/markdown"
        } else {
            "text/plain"
        },
        text,
    })
}

/// `(name, path, size)` of each document, sorted by name, first directory winning.
fn documents(dirs: &[PathBuf], patterns: &[String]) -> Vec<(String, PathBuf, u64)> {
    let Ok(globs) = GlobSet::new(patterns) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf, u64)> = Vec::new();
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue; // a missing directory is skipped, as documented
        };
        let mut here: Vec<(String, PathBuf, u64)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let meta = e.metadata().ok()?; // does not follow symlinks
                (meta.is_file() && meta.len() <= MAX_RESOURCE_BYTES && globs.is_match(&name))
                    .then(|| (name, e.path(), meta.len()))
            })
            .collect();
        here.retain(|(name, _, _)| !found.iter().any(|(n, _, _)| n == name));
        found.extend(here);
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Reads a regular file without following a symlink at the last component.
fn read_regular(path: &Path) -> std::io::Result<String> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_RESOURCE_BYTES).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_matched_sorted_first_dir_wins_and_links_are_skipped() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        fs::write(a.path().join("slurm.md"), "from a").unwrap();
        fs::write(b.path().join("slurm.md"), "from b").unwrap();
        fs::write(b.path().join("alpha.md"), "alpha").unwrap();
        fs::write(b.path().join("notes.txt"), "not matched").unwrap();
        fs::create_dir(b.path().join("dir.md")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", b.path().join("passwd.md")).unwrap();
        let dirs = vec![
            a.path().to_owned(),
            PathBuf::from("/nonexistent"),
            b.path().to_owned(),
        ];
        let patterns = vec!["*.md".to_owned()];
        let names: Vec<String> = list(&dirs, &patterns).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["hpcgate-guide", "alpha.md", "slurm.md"]);
        let slurm = read(&dirs, &patterns, "resource://hpcgate/context/slurm.md").unwrap();
        assert_eq!(slurm.text, "from a");
        assert_eq!(slurm.mime_type, "text/markdown");
        for uri in [
            "resource://hpcgate/context/passwd.md",
            "resource://hpcgate/context/notes.txt",
            "resource://hpcgate/context/../slurm.md",
            "file:///etc/passwd",
        ] {
            let e = read(&dirs, &patterns, uri).unwrap_err();
            assert!(e.contains("resources/list"), "{uri}: {e}");
        }
        assert!(
            read(&dirs, &patterns, GUIDE_URI)
                .unwrap()
                .text
                .contains("create_instance")
        );
    }
}
