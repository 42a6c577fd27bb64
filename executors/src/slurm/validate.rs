//! Validation of values that reach the `sbatch` command line: names, partitions, paths.
//!
//! Every value is passed as one argv element (`--partition=<value>`), never through a shell, so
//! validation is a second wall: it refuses anything that would mean something to Slurm or to a
//! human reading the job table (newlines, `;`, `$(`, a leading `-`, control characters, `%`
//! filename patterns) instead of trying to escape it.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::SlurmError;

/// Longest accepted job name, partition, account or qos.
pub const MAX_NAME_LEN: usize = 64;

/// Longest accepted path on the command line.
pub const MAX_PATH_LEN: usize = 1024;

/// Checks a job name, partition, account or qos: 1–64 of `[A-Za-z0-9._+-]`, not starting with `-`.
pub fn name(field: &'static str, value: &str) -> Result<(), SlurmError> {
    let problem = if value.is_empty() {
        Some("is empty")
    } else if value.len() > MAX_NAME_LEN {
        Some("is longer than 64 bytes")
    } else if value.starts_with('-') {
        Some("starts with `-` and would read as an option")
    } else if value.chars().any(char::is_control) {
        Some("contains a newline or another control character")
    } else if value.contains([';', '$', '`', '(', ')', '|', '&', '<', '>', '\'', '"', '\\']) {
        Some("contains shell syntax")
    } else if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'))
    {
        Some("contains a character outside `[A-Za-z0-9._+-]`")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(SlurmError::InvalidValue {
            field,
            value: value.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

/// Checks a host-side path given to Slurm: absolute, printable, no `%` pattern, bounded length.
pub fn path(field: &'static str, path: &Path) -> Result<(), SlurmError> {
    let bytes = path.as_os_str().as_bytes();
    let problem = if !path.is_absolute() {
        Some("is not absolute")
    } else if bytes.len() > MAX_PATH_LEN {
        Some("is longer than 1024 bytes")
    } else if bytes.iter().any(|b| b.is_ascii_control()) {
        Some("contains a newline or another control character")
    } else if bytes.contains(&b'%') {
        // Slurm expands `%j`, `%u`, … in output paths; a literal `%` would be rewritten.
        Some("contains `%`, which Slurm expands as a filename pattern")
    } else if bytes.contains(&b'\\') {
        Some("contains `\\`, which Slurm treats as an escape")
    } else if path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        Some("contains `..`")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(SlurmError::InvalidPath {
            field,
            path: path.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

/// Checks that a host-side job log is outside every directory the sandbox can see: a job must
/// not be able to plant a symlink where Slurm (running as the job user) will open its output.
pub fn outside(field: &'static str, path: &Path, mounts: &[&Path]) -> Result<(), SlurmError> {
    if mounts.iter().any(|mount| path.starts_with(mount)) {
        return Err(SlurmError::InvalidPath {
            field,
            path: path.to_owned(),
            problem: "is inside a directory the sandbox can write; keep job logs outside its mounts",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names() {
        for ok in ["debug", "chem-lab", "a.b_c+d", "x", &"n".repeat(64)] {
            assert!(name("partition", ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn refuses_hostile_names() {
        let table = [
            ("", "is empty"),
            ("debug\nrm -rf /", "control character"),
            ("a;b", "shell syntax"),
            ("$(id)", "shell syntax"),
            ("`id`", "shell syntax"),
            ("-p", "starts with `-`"),
            ("--partition=gpu", "starts with `-`"),
            ("a b", "outside"),
            ("a\u{7f}", "control character"),
            ("é", "outside"),
            ("a=b", "outside"),
        ];
        for (value, expected) in table {
            let err = name("partition", value).unwrap_err().to_string();
            assert!(err.contains(expected), "{value:?}: {err}");
        }
        assert!(name("job_name", &"n".repeat(65)).is_err());
    }

    #[test]
    fn refuses_bad_paths() {
        for bad in [
            "rel/out",
            "/tmp/a\nb",
            "/tmp/%j.out",
            "/tmp/a\\b",
            "/tmp/x/../y",
        ] {
            assert!(path("stdout", Path::new(bad)).is_err(), "{bad:?}");
        }
        assert!(path("stdout", Path::new("/tmp/job 1/out.txt")).is_ok());
    }
}
