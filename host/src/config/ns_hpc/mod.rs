//! `hpcgate config import-ns-hpc FILE`: an ns-hpc `config.toml` (the reference system's final
//! model, and the historical keys its README still shows) turned into an hpcgate configuration
//! layer, with a comment for every setting that could not be carried over and why.
//!
//! The input is read as plain TOML, not through hpcgate's model: every key is taken out of the
//! table as it is handled, so whatever is left at the end is reported too ("unknown to ns-hpc",
//! which ns-hpc itself ignored with a warning). Nothing is guessed silently: a value that is
//! carried over changes meaning only where a note says so (e.g. resource caps now apply to
//! local jobs as well as Slurm jobs).
//!
//! What maps where:
//! - `namespace.bwrap_command` (or `namespace_defaults.flags` / `bind_ro`): `--share-net` →
//!   `[sandbox] network = "host"`; `--ro-bind` of anything but the system directories hpcgate
//!   binds itself → `extra_ro_binds`; the rest has no counterpart (hpcgate builds its own argv);
//! - `jobs.local.cgroups_command`'s `CPUQuota=` / `MemoryMax=` (or `resources.cpus.limit`,
//!   `resources.memory.limit`) → `[sandbox.limits]`;
//! - `jobs.slurm.sbatch_command`'s `--partition` / `--account` / `--qos` (or `slurm.partition`)
//!   → `[slurm]`, enabled; `jobs.slurm.limit.*` (or `slurm.resources.*`) → the `caps` policy
//!   (`stock:resource-caps`, `action = "deny"` like ns-hpc, which rejects a value over `max`);
//! - `resource.*` (or `resource_defaults.*`) → `[mcp] context_dirs` / `resource_patterns`;
//! - `dav.*`, `mcp.result_type`, `proxied_mcps.*` → the same keys;
//! - `host_commands.<k>.command` → `argv` when it is one plain command with an absolute path
//!   (hpcgate runs no shell strings); `host_exec` is then allowed by the `tools` policy.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

mod jobs;
mod sandbox;
mod services;

/// The result: the hpcgate configuration text and each setting left behind.
#[derive(Debug)]
pub struct Imported {
    pub text: String,
    pub notes: Vec<Note>,
}

/// A setting of the input that could not be carried over (or changes meaning), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The dotted key in the ns-hpc file, with its value.
    pub setting: String,
    pub why: String,
}

/// Why the input could not be imported at all.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("`{path}` is not TOML: {message}")]
    NotToml { path: PathBuf, message: String },
    #[error("`{path}`: key `{key}` {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
}

/// System directories hpcgate's sandbox provides itself (`/etc` only in part: see the note).
const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];

/// bwrap options and how many arguments each takes.
const BWRAP_ARITY: &[(&str, usize)] = &[
    ("--ro-bind", 2),
    ("--ro-bind-try", 2),
    ("--bind", 2),
    ("--bind-try", 2),
    ("--dev-bind", 2),
    ("--dev-bind-try", 2),
    ("--bind-data", 2),
    ("--ro-bind-data", 2),
    ("--file", 2),
    ("--symlink", 2),
    ("--setenv", 2),
    ("--tmpfs", 1),
    ("--proc", 1),
    ("--dev", 1),
    ("--mqueue", 1),
    ("--dir", 1),
    ("--chdir", 1),
    ("--unsetenv", 1),
    ("--uid", 1),
    ("--gid", 1),
    ("--hostname", 1),
    ("--remount-ro", 1),
    ("--perms", 1),
    ("--size", 1),
    ("--chmod", 2),
    ("--cap-add", 1),
    ("--cap-drop", 1),
    ("--seccomp", 1),
    ("--add-seccomp-fd", 1),
    ("--json-status-fd", 1),
    ("--info-fd", 1),
    ("--lock-file", 1),
    ("--sync-fd", 1),
    ("--block-fd", 1),
    ("--userns-block-fd", 1),
    ("--userns", 1),
    ("--userns2", 1),
    ("--pidns", 1),
    ("--exec-label", 1),
    ("--file-label", 1),
    ("--argv0", 1),
];

/// bwrap options hpcgate's sandbox always applies in its own way: nothing to carry.
const BWRAP_ALWAYS: &[&str] = &[
    "--unshare-all",
    "--unshare-user",
    "--unshare-user-try",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
    "--as-pid-1",
    "--clearenv",
];

struct Importer {
    /// The input file's directory: ns-hpc resolved relative paths against it (`NS_HPC_CONFIG`).
    base: PathBuf,
    out: Table,
    notes: Vec<Note>,
    /// `[policies.config]` of the `caps` policy.
    caps: Table,
    host_exec: bool,
}

/// Converts the ns-hpc configuration `text` (read from `path`).
pub fn import_ns_hpc(text: &str, path: &Path) -> Result<Imported, ImportError> {
    let mut input: Table = text
        .parse()
        .map_err(|e: toml::de::Error| ImportError::NotToml {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
    let base = path
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_else(|| PathBuf::from("."));
    let mut importer = Importer {
        base,
        out: Table::new(),
        notes: Vec::new(),
        caps: Table::new(),
        host_exec: false,
    };
    let invalid = |key: &str, message: &str| ImportError::Invalid {
        path: path.to_owned(),
        key: key.to_owned(),
        message: message.to_owned(),
    };
    importer.namespace(&mut input);
    importer.jobs(&mut input, &invalid)?;
    importer.historical_limits(&mut input, &invalid)?;
    importer.resources(&mut input);
    importer.dav(&mut input);
    importer.mcp(&mut input, &invalid)?;
    importer.proxies(&mut input, &invalid)?;
    importer.host_commands(&mut input);
    for (key, value) in leaves("", &input) {
        importer.note_value(
            &key,
            &value,
            "unknown to ns-hpc (it ignored the key with a warning), so nothing to carry over",
        );
    }
    Ok(importer.finish(path))
}

impl Importer {
    fn note(&mut self, setting: impl Into<String>, why: impl Into<String>) {
        self.notes.push(Note {
            setting: setting.into(),
            why: why.into(),
        });
    }

    fn note_value(&mut self, key: &str, value: &Value, why: &str) {
        self.note(format!("{key} = {}", inline(value)), why);
    }

    fn set(&mut self, dotted: &str, value: Value) {
        let mut table = &mut self.out;
        let mut parts: Vec<&str> = dotted.split('.').collect();
        let last = parts.pop().expect("a key");
        for part in parts {
            table = table
                .entry(part.to_owned())
                .or_insert_with(|| Value::Table(Table::new()))
                .as_table_mut()
                .expect("only tables on the way");
        }
        table.insert(last.to_owned(), value);
    }

    /// The text: a header, the notes as comments, the settings, the policy chain.
    fn finish(mut self, path: &Path) -> Imported {
        let network_set = self
            .out
            .get("sandbox")
            .and_then(|s| s.get("network"))
            .is_some();
        if !network_set {
            self.note(
                "namespace.bwrap_command (ns-hpc's default, with `--share-net`)",
                "ns-hpc's sandboxes shared the host's network by default; hpcgate's have none (`[sandbox] network = \"none\"`): set it to \"host\" if jobs must reach the network",
            );
        }
        let mut text = format!(
            "# hpcgate configuration imported from the ns-hpc configuration `{}`\n\
             # by `hpcgate config import-ns-hpc`. Check it with `hpcgate config check --config FILE`.\n\
             #\n\
             # The tool names stay (create_instance, submit_job, poll_job, list_jobs, cancel_job, …),\n\
             # and `slurm_resources` (memory in MB) is still accepted by submit_job.\n",
            path.display()
        );
        // The stock chain, as the defaults have it, with ns-hpc's limits in `caps`.
        let mut caps = Table::new();
        caps.insert("action".to_owned(), Value::String("deny".to_owned()));
        let defaults: [(&str, i64, i64); 4] = [
            ("cpus", 1, 8),
            ("memory_mb", 4096, 32768),
            ("time_limit_s", 3600, 86400),
            ("gpus", 0, 0),
        ];
        for (name, default, max) in defaults {
            let given = match self.caps.remove(name) {
                Some(Value::Table(given)) => given,
                _ => Table::new(),
            };
            let said = |key: &str| given.get(key).and_then(Value::as_integer);
            // What ns-hpc said wins; the stock half is moved to fit it (a default above its
            // max is a configuration the caps policy refuses).
            let (default, max) = match (said("default"), said("max")) {
                (Some(d), Some(m)) => (d, m),
                (Some(d), None) => (d, max.max(d)),
                (None, Some(m)) => (default.min(m), m),
                (None, None) => (default, max),
            };
            if default > max {
                self.note(
                    format!("{name}: default {default}, max {max}"),
                    "the default is above the max, which the caps policy refuses: lower the default",
                );
            }
            let mut limit = given;
            limit.insert("default".to_owned(), Value::Integer(default));
            limit.insert("max".to_owned(), Value::Integer(max));
            caps.insert(name.to_owned(), Value::Table(limit));
        }
        self.out.insert(
            "policies".to_owned(),
            Value::Array(vec![
                policy(
                    "tools",
                    "stock:tool-filter",
                    None,
                    toml_table(if self.host_exec {
                        "allow = [\"*\"]\ndeny = []"
                    } else {
                        "allow = [\"*\"]\ndeny = [\"host_exec\"]"
                    }),
                ),
                policy(
                    "paths",
                    "stock:path-rules",
                    None,
                    toml_table(
                        "path_arguments = [\"path\", \"paths\", \"source\", \"destination\"]\n\
                         deny_read = [\"**/.ssh/**\"]\ndeny_write = [\"**/.git/**\"]",
                    ),
                ),
                policy(
                    "caps",
                    "stock:resource-caps",
                    Some(&["submit_job", "run_python"]),
                    caps,
                ),
            ]),
        );
        text.push_str(
            "#\n# Changes in meaning:\n\
             # - resource caps (`caps` policy) apply to local jobs as well as Slurm jobs; a value above\n\
             #   `max` is refused as in ns-hpc (`action = \"deny\"`; \"clamp\" lowers it instead);\n",
        );
        if self.host_exec {
            text.push_str(
                "# - host_exec is allowed (the `tools` policy's default denies it): ns-hpc offered it\n\
                 #   whenever host commands were configured;\n",
            );
        }
        text.push_str(
            "# - every call is judged by the policies and recorded in hpcgate's audit log.\n",
        );
        let mut seen = BTreeSet::new();
        self.notes
            .retain(|n| seen.insert((n.setting.clone(), n.why.clone())));
        if self.notes.is_empty() {
            text.push_str("#\n# Every setting was carried over.\n");
        } else {
            text.push_str(&format!(
                "#\n# Not carried over, or carried over with a change ({}):\n",
                self.notes.len()
            ));
            for note in &self.notes {
                text.push_str(&comment(&format!("- {}: {}", note.setting, note.why)));
            }
        }
        text.push('\n');
        text.push_str(&toml::to_string(&self.out).expect("a table serialises"));
        Imported {
            text,
            notes: self.notes,
        }
    }
}

fn policy(name: &str, module: &str, tools: Option<&[&str]>, config: Table) -> Value {
    let mut p = Table::new();
    p.insert("name".to_owned(), Value::String(name.to_owned()));
    p.insert("module".to_owned(), Value::String(module.to_owned()));
    p.insert("reuse_instance".to_owned(), Value::Boolean(true));
    if let Some(tools) = tools {
        p.insert(
            "tools".to_owned(),
            Value::Array(
                tools
                    .iter()
                    .map(|t| Value::String((*t).to_owned()))
                    .collect(),
            ),
        );
    }
    p.insert("config".to_owned(), Value::Table(config));
    Value::Table(p)
}

fn toml_table(text: &str) -> Table {
    text.parse().expect("a fixed table")
}

/// `text` as `# ` lines of at most about 96 columns.
fn comment(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split(' ') {
        if line.len() + word.len() > 96 && line.len() > 4 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

fn take_table(table: &mut Table, key: &str) -> Option<Table> {
    match table.remove(key) {
        Some(Value::Table(t)) => Some(t),
        Some(other) => {
            // Not a table: leave it for the "unknown" report.
            table.insert(key.to_owned(), other);
            None
        }
        None => None,
    }
}

/// Puts back what is left of a section, for the "unknown" report.
fn put_back(table: &mut Table, key: &str, rest: Table) {
    if !rest.is_empty() {
        table.insert(key.to_owned(), Value::Table(rest));
    }
}

/// Every leaf of `table` with its dotted key.
fn leaves(prefix: &str, table: &Table) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (key, value) in table {
        let dotted = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Table(inner) if !inner.is_empty() => out.extend(leaves(&dotted, inner)),
            _ => out.push((dotted, value.clone())),
        }
    }
    out
}

fn string_list(value: &Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// A value as inline TOML, for a comment.
fn inline(value: &Value) -> String {
    let text = value.to_string();
    let text = text.replace('\n', " ");
    if text.len() > 160 {
        format!("{}…", text.chars().take(160).collect::<String>())
    } else {
        text
    }
}

/// `8G`, `512Mi`, `1T`, `1048576` (bytes) → bytes; 1024-based as ns-hpc parsed them.
fn size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let n: u64 = digits.trim().parse().ok()?;
    let shift = match unit
        .trim_end_matches(['i', 'B'])
        .to_ascii_uppercase()
        .as_str()
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// A memory value in MB: a size string, or an integer (MB when `int_is_mb`, else bytes).
fn memory_mb(value: &Value, int_is_mb: bool) -> Option<u64> {
    match value {
        Value::Integer(n) if *n >= 0 => Some(if int_is_mb {
            *n as u64
        } else {
            *n as u64 / (1024 * 1024)
        }),
        Value::String(s) => size_bytes(s).map(|b| b / (1024 * 1024)),
        _ => None,
    }
}

/// The argv of `line` when it is one plain command with an absolute program: words split on
/// spaces, no shell syntax at all (quotes, variables, globs, redirections, pipes, `;`, `&`).
fn plain_argv(line: &str) -> Option<Vec<String>> {
    if line.is_empty()
        || line
            .chars()
            .any(|c| "\"'`$\\|&;<>()*?[]{}~#\n\r\t".contains(c))
    {
        return None;
    }
    let argv: Vec<String> = line
        .split(' ')
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    argv.first().filter(|p| p.starts_with('/'))?;
    Some(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_argv() {
        assert_eq!(size_bytes("8G"), Some(8 << 30));
        assert_eq!(size_bytes("512Mi"), Some(512 << 20));
        assert_eq!(size_bytes("4096"), Some(4096));
        assert_eq!(size_bytes("8X"), None);
        assert_eq!(memory_mb(&Value::String("32G".into()), true), Some(32768));
        assert_eq!(memory_mb(&Value::Integer(4096), true), Some(4096));
        assert_eq!(
            plain_argv("/usr/bin/quota -s"),
            Some(vec!["/usr/bin/quota".to_owned(), "-s".to_owned()])
        );
        for shell in [
            "quota -s",
            "/usr/bin/squeue -u $USER",
            "/bin/df -h | tail -1",
            "/bin/ls *.txt",
            "",
        ] {
            assert_eq!(plain_argv(shell), None, "{shell}");
        }
    }
}
