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

    fn namespace(&mut self, input: &mut Table) {
        for section in ["namespace", "namespace_defaults"] {
            let Some(mut table) = take_table(input, section) else {
                continue;
            };
            if let Some(value) = table.remove("instances_dir") {
                self.note_value(
                    &format!("{section}.instances_dir"),
                    &value,
                    "hpcgate keeps instances, jobs and the audit log in its own layout under `state_dir` (default ~/.local/share/hpcgate); existing instances are not moved: create them again and copy their files in (WebDAV or write_file)",
                );
            }
            if let Some(value) = table.remove("bwrap_command") {
                match string_list(&value) {
                    Some(words) if !words.is_empty() => {
                        self.bwrap_binary(&format!("{section}.bwrap_command"), &words[0]);
                        self.bwrap_flags(&format!("{section}.bwrap_command"), &words[1..]);
                    }
                    _ => self.note_value(
                        &format!("{section}.bwrap_command"),
                        &value,
                        "not a list of strings",
                    ),
                }
            }
            if let Some(value) = table.remove("flags") {
                match string_list(&value) {
                    Some(words) => self.bwrap_flags(&format!("{section}.flags"), &words),
                    None => self.note_value(
                        &format!("{section}.flags"),
                        &value,
                        "not a list of strings",
                    ),
                }
            }
            if let Some(value) = table.remove("bind_ro") {
                match string_list(&value) {
                    Some(paths) => {
                        for path in paths {
                            self.ro_bind(&format!("{section}.bind_ro"), &path, &path);
                        }
                    }
                    None => self.note_value(
                        &format!("{section}.bind_ro"),
                        &value,
                        "not a list of strings",
                    ),
                }
            }
            for (key, default, hpcgate) in [
                ("workspace_mount", "/workspace", "/workspace"),
                ("output_mount", "/output", "/output"),
            ] {
                if let Some(value) = table.remove(key)
                    && value.as_str() != Some(default)
                {
                    self.note_value(
                        &format!("{section}.{key}"),
                        &value,
                        &format!("hpcgate's sandbox always mounts it at `{hpcgate}`; commands and tools that name the old path must change"),
                    );
                }
            }
            if let Some(value) = table.remove("shared_output_mount") {
                self.note_value(
                    &format!("{section}.shared_output_mount"),
                    &value,
                    "hpcgate shows no instance another instance's output (isolation); copy what must be shared into the instance, or use `[sandbox] extra_ro_binds` for a read-only data set",
                );
            }
            if let Some(value) = table.remove("status_fd") {
                self.note_value(
                    &format!("{section}.status_fd"),
                    &value,
                    "internal to ns-hpc's job launch; hpcgate supervises its jobs itself",
                );
            }
            put_back(input, section, table);
        }
    }

    fn bwrap_binary(&mut self, key: &str, binary: &str) {
        if binary.starts_with('/') && binary.ends_with("/bwrap") {
            self.set("sandbox.bwrap", Value::String(binary.to_owned()));
        } else if binary != "bwrap" {
            self.note(
                format!("{key}[0] = {}", inline(&Value::String(binary.to_owned()))),
                "not bwrap; hpcgate runs bwrap itself (`[sandbox] bwrap`, default /usr/bin/bwrap)",
            );
        }
    }

    fn bwrap_flags(&mut self, key: &str, words: &[String]) {
        let mut network_host = false;
        let mut i = 0;
        while i < words.len() {
            let flag = words[i].as_str();
            let arity = BWRAP_ARITY
                .iter()
                .find(|(name, _)| *name == flag)
                .map_or(0, |(_, n)| *n);
            let args: Vec<&str> = words[i + 1..]
                .iter()
                .take(arity)
                .map(String::as_str)
                .collect();
            i += 1 + arity;
            match (flag, args.as_slice()) {
                ("--share-net", _) => network_host = true,
                ("--ro-bind" | "--ro-bind-try", [source, target]) => {
                    self.ro_bind(key, source, target)
                }
                ("--proc", ["/proc"]) | ("--dev", ["/dev"]) | ("--tmpfs", ["/tmp"]) => {}
                _ if BWRAP_ALWAYS.contains(&flag) => {}
                _ => {
                    let shown = std::iter::once(flag)
                        .chain(args.iter().copied())
                        .collect::<Vec<_>>()
                        .join(" ");
                    let why = match flag {
                        "--bind" | "--bind-try" | "--dev-bind" | "--dev-bind-try" => {
                            "hpcgate's sandbox binds nothing writable but the instance's workspace and output; a read-only bind goes in `[sandbox] extra_ro_binds`"
                        }
                        "--uid" | "--gid" => {
                            "hpcgate runs sandboxes as the gateway's user and does not map ids"
                        }
                        _ => {
                            "no counterpart: hpcgate builds its own bwrap arguments from `[sandbox]`"
                        }
                    };
                    self.note(format!("{key}: `{shown}`"), why);
                }
            }
        }
        if network_host {
            self.set("sandbox.network", Value::String("host".to_owned()));
        } else {
            self.set("sandbox.network", Value::String("none".to_owned()));
        }
    }

    fn ro_bind(&mut self, key: &str, source: &str, target: &str) {
        if source == target && SYSTEM_DIRS.contains(&source) {
            return;
        }
        if source == "/etc" && target == "/etc" {
            self.note(
                format!("{key}: `--ro-bind /etc /etc`"),
                "hpcgate binds only the /etc files programs need (loader cache, users, locale, time zone, TLS roots), never shadow or ssh keys; add a file the jobs need with `[sandbox] extra_ro_binds`",
            );
            return;
        }
        let mut bind = Table::new();
        bind.insert("source".to_owned(), Value::String(source.to_owned()));
        if target != source {
            bind.insert("target".to_owned(), Value::String(target.to_owned()));
        }
        let binds = self
            .out
            .entry("sandbox".to_owned())
            .or_insert_with(|| Value::Table(Table::new()))
            .as_table_mut()
            .expect("a table")
            .entry("extra_ro_binds".to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(binds) = binds
            && !binds.contains(&Value::Table(bind.clone()))
        {
            binds.push(Value::Table(bind));
        }
    }

    fn jobs(
        &mut self,
        input: &mut Table,
        invalid: &dyn Fn(&str, &str) -> ImportError,
    ) -> Result<(), ImportError> {
        let Some(mut jobs) = take_table(input, "jobs") else {
            return Ok(());
        };
        if let Some(value) = jobs.remove("max_timeout") {
            self.note_value(
                "jobs.max_timeout",
                &value,
                "hpcgate waits at most 3600 s in one submit_job/poll_job call and refuses a longer `timeout` (it does not shorten it silently); agents wait again with poll_job. The run time itself is `resources.time_limit_s` (the `caps` policy)",
            );
        }
        if let Some(mut local) = take_table(&mut jobs, "local") {
            let use_cgroups = local.remove("use_cgroups");
            let command = local.remove("cgroups_command");
            if use_cgroups.as_ref().and_then(Value::as_bool) != Some(false)
                && let Some(command) = &command
            {
                self.cgroups_command(command, invalid)?;
            }
            if let Some(value) = use_cgroups {
                self.note_value(
                    "jobs.local.use_cgroups",
                    &value,
                    "hpcgate always limits a sandbox's pids, memory and CPUs (`[sandbox.limits]`): by a delegated cgroup v2, cgroup v1 controllers or rlimits, whichever the host offers; `hpcgate doctor` says which",
                );
            }
            if let Some(value) = local.remove("proc_check") {
                self.note_value(
                    "jobs.local.proc_check",
                    &value,
                    "hpcgate always re-attaches running jobs at start, by their supervisor, not by pid",
                );
            }
            put_back(&mut jobs, "local", local);
        }
        if let Some(mut slurm) = take_table(&mut jobs, "slurm") {
            if let Some(value) = slurm.remove("sbatch_command") {
                let Some(words) = string_list(&value) else {
                    return Err(invalid(
                        "jobs.slurm.sbatch_command",
                        "is not a list of strings",
                    ));
                };
                self.sbatch_command(&words);
            }
            if let Some(Value::Table(limits)) = slurm.remove("limit") {
                for (name, limit) in limits {
                    let key = format!("jobs.slurm.limit.{name}");
                    let (default, max) = match &limit {
                        Value::Table(t) => (t.get("default").cloned(), t.get("max").cloned()),
                        _ => return Err(invalid(&key, "is not a table `{ default, max }`")),
                    };
                    let as_int =
                        |v: Option<Value>, what: &str| -> Result<Option<u64>, ImportError> {
                            match v {
                                None => Ok(None),
                                Some(Value::Integer(n)) if n >= 0 => Ok(Some(n as u64)),
                                Some(_) => Err(invalid(
                                    &format!("{key}.{what}"),
                                    "is not a non-negative integer",
                                )),
                            }
                        };
                    let (default, max) = (as_int(default, "default")?, as_int(max, "max")?);
                    self.cap(&key, &name, default, max, &limit);
                }
            }
            self.set("slurm.enabled", Value::Boolean(true));
            put_back(&mut jobs, "slurm", slurm);
        }
        put_back(input, "jobs", jobs);
        Ok(())
    }

    /// `systemd-run … -p CPUQuota=400% -p MemoryMax=8G --`: the quota and the memory cap.
    fn cgroups_command(
        &mut self,
        command: &Value,
        invalid: &dyn Fn(&str, &str) -> ImportError,
    ) -> Result<(), ImportError> {
        let key = "jobs.local.cgroups_command";
        let Some(words) = string_list(command) else {
            return Err(invalid(key, "is not a list of strings"));
        };
        let mut rest = Vec::new();
        for word in &words {
            if let Some(quota) = word.strip_prefix("CPUQuota=") {
                match quota.strip_suffix('%').and_then(|n| n.parse::<u64>().ok()) {
                    Some(percent) if percent > 0 => {
                        let cpus = percent.div_ceil(100);
                        self.set("sandbox.limits.cpus", Value::Integer(cpus as i64));
                    }
                    _ => rest.push(word.clone()),
                }
            } else if let Some(memory) = word.strip_prefix("MemoryMax=") {
                match size_bytes(memory) {
                    Some(bytes) => self.set(
                        "sandbox.limits.memory_mb",
                        Value::Integer((bytes / (1024 * 1024)) as i64),
                    ),
                    None => rest.push(word.clone()),
                }
            } else if !matches!(
                word.as_str(),
                "systemd-run" | "--user" | "--scope" | "-p" | "--" | "--quiet" | "-q"
            ) && !word.ends_with("/systemd-run")
            {
                rest.push(word.clone());
            }
        }
        if !rest.is_empty() {
            self.note(
                format!("{key}: `{}`", rest.join(" ")),
                "hpcgate does not wrap jobs in a command; only `CPUQuota=` and `MemoryMax=` carry over (as `[sandbox.limits] cpus` and `memory_mb`)",
            );
        }
        Ok(())
    }

    fn sbatch_command(&mut self, words: &[String]) {
        let key = "jobs.slurm.sbatch_command";
        let mut i = usize::from(!words.is_empty() && !words[0].starts_with('-'));
        if i == 1
            && words[0].starts_with('/')
            && let Some(dir) = Path::new(&words[0]).parent()
        {
            self.set("slurm.bin_dir", Value::String(dir.display().to_string()));
        }
        while i < words.len() {
            let word = &words[i];
            let (flag, inline_value) = match word.split_once('=') {
                Some((flag, value)) if flag.starts_with('-') => (flag, Some(value.to_owned())),
                _ => (word.as_str(), None),
            };
            let target = match flag {
                "--partition" | "-p" => Some("slurm.partition"),
                "--account" | "-A" => Some("slurm.account"),
                "--qos" | "-q" => Some("slurm.qos"),
                _ => None,
            };
            match target {
                Some(target) => {
                    let value = match inline_value {
                        Some(value) => value,
                        None => {
                            i += 1;
                            words.get(i).cloned().unwrap_or_default()
                        }
                    };
                    self.set(target, Value::String(value));
                }
                // hpcgate passes the job's resources to sbatch itself.
                None if word.contains("{cpus}") || word.contains("{memory}") || word.contains("{gpus}") => {}
                None => self.note(
                    format!("{key}: `{word}`"),
                    "hpcgate builds the sbatch arguments itself (partition, account, qos from `[slurm]`, resources from the call); other options have no counterpart",
                ),
            }
            i += 1;
        }
    }

    /// One resource limit into the `caps` policy; `name` is ns-hpc's (`memory` in MB).
    fn cap(&mut self, key: &str, name: &str, default: Option<u64>, max: Option<u64>, raw: &Value) {
        let target = match name {
            "cpus" => "cpus",
            "memory" | "memory_mb" => "memory_mb",
            "gpus" => "gpus",
            "time" | "time_limit_s" => "time_limit_s",
            _ => {
                self.note_value(
                    key,
                    raw,
                    "hpcgate's resource caps know `cpus`, `memory` (memory_mb), `gpus` and `time_limit_s`; a job cannot ask for this resource",
                );
                return;
            }
        };
        let mut limit = Table::new();
        if let Some(default) = default {
            limit.insert("default".to_owned(), Value::Integer(default as i64));
        }
        if let Some(max) = max {
            limit.insert("max".to_owned(), Value::Integer(max as i64));
        }
        match self.caps.get_mut(target) {
            Some(Value::Table(existing)) => existing.extend(limit),
            _ => {
                self.caps.insert(target.to_owned(), Value::Table(limit));
            }
        }
    }

    /// The historical `[resources.*]` and `[slurm]` tables of ns-hpc's README.
    fn historical_limits(
        &mut self,
        input: &mut Table,
        invalid: &dyn Fn(&str, &str) -> ImportError,
    ) -> Result<(), ImportError> {
        if let Some(mut resources) = take_table(input, "resources") {
            if let Some(mut cpus) = take_table(&mut resources, "cpus") {
                if let Some(limit) = cpus.remove("limit") {
                    match limit.as_integer() {
                        Some(n) if n > 0 => self.set("sandbox.limits.cpus", Value::Integer(n)),
                        _ => {
                            return Err(invalid(
                                "resources.cpus.limit",
                                "is not a positive integer",
                            ));
                        }
                    }
                }
                put_back(&mut resources, "cpus", cpus);
            }
            if let Some(mut memory) = take_table(&mut resources, "memory") {
                if let Some(limit) = memory.remove("limit") {
                    match memory_mb(&limit, false) {
                        Some(mb) => self.set("sandbox.limits.memory_mb", Value::Integer(mb as i64)),
                        None => {
                            return Err(invalid(
                                "resources.memory.limit",
                                "is not a size (e.g. \"8G\")",
                            ));
                        }
                    }
                }
                put_back(&mut resources, "memory", memory);
            }
            if let Some(value) = resources.remove("use_systemd") {
                self.note_value(
                    "resources.use_systemd",
                    &value,
                    "hpcgate always limits a sandbox (cgroup v2, v1 or rlimits), without systemd-run",
                );
            }
            put_back(input, "resources", resources);
        }
        let Some(mut slurm) = take_table(input, "slurm") else {
            return Ok(());
        };
        if let Some(partition) = slurm.remove("partition") {
            self.set("slurm.partition", partition);
        }
        if let Some(value) = slurm.remove("default_cpus") {
            let n = value
                .as_integer()
                .filter(|n| *n >= 0)
                .ok_or_else(|| invalid("slurm.default_cpus", "is not an integer"))?;
            self.cap("slurm.default_cpus", "cpus", Some(n as u64), None, &value);
        }
        if let Some(value) = slurm.remove("default_memory_gb") {
            let n = value
                .as_integer()
                .filter(|n| *n >= 0)
                .ok_or_else(|| invalid("slurm.default_memory_gb", "is not an integer"))?;
            self.cap(
                "slurm.default_memory_gb",
                "memory",
                Some(n as u64 * 1024),
                None,
                &value,
            );
        }
        if let Some(value) = slurm.remove("default_timeout") {
            self.note_value(
                "slurm.default_timeout",
                &value,
                "a wait in ns-hpc's old model; hpcgate waits `timeout` seconds per call (default 60, at most 3600) and limits run time by `resources.time_limit_s`",
            );
        }
        if let Some(Value::Table(resources)) = slurm.remove("resources") {
            for (name, spec) in resources {
                let key = format!("slurm.resources.{name}");
                let Value::Table(spec) = &spec else {
                    return Err(invalid(
                        &key,
                        "is not a table `{ parameter, default, max }`",
                    ));
                };
                let memory = name == "memory";
                let read = |what: &str| -> Result<Option<u64>, ImportError> {
                    match spec.get(what) {
                        None => Ok(None),
                        Some(v) if memory => memory_mb(v, true).map(Some).ok_or_else(|| {
                            invalid(
                                &format!("{key}.{what}"),
                                "is not a size (e.g. \"4G\" or MB)",
                            )
                        }),
                        Some(Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
                        Some(_) => Err(invalid(
                            &format!("{key}.{what}"),
                            "is not a non-negative integer",
                        )),
                    }
                };
                let (default, max) = (read("default")?, read("max")?);
                if let Some(parameter) = spec.get("parameter").and_then(Value::as_str) {
                    let standard = matches!(
                        (name.as_str(), parameter),
                        ("cpus", "--cpus-per-task={}")
                            | ("memory", "--mem={}")
                            | ("gpus", "--gpus={}")
                            | ("gpus", "--gres=gpu:{}")
                    );
                    if !standard {
                        self.note(
                            format!("{key}.parameter = {}", inline(&Value::String(parameter.to_owned()))),
                            "hpcgate passes cpus, memory and gpus to sbatch in its own options; a custom option has no counterpart",
                        );
                    }
                }
                self.cap(&key, &name, default, max, &Value::Table(spec.clone()));
            }
        }
        self.set("slurm.enabled", Value::Boolean(true));
        put_back(input, "slurm", slurm);
        for section in ["job", "resource_limits"] {
            if let Some(table) = take_table(input, section) {
                for (key, value) in leaves(section, &table) {
                    self.note_value(
                        &key,
                        &value,
                        "from ns-hpc's old model, which its final loader ignored too; hpcgate re-attaches jobs itself and limits run time by `resources.time_limit_s`",
                    );
                }
            }
        }
        Ok(())
    }

    fn resources(&mut self, input: &mut Table) {
        for section in ["resource", "resource_defaults"] {
            let Some(mut table) = take_table(input, section) else {
                continue;
            };
            if let Some(value) = table.remove("context_dirs") {
                match string_list(&value) {
                    Some(dirs) => {
                        let dirs = dirs
                            .into_iter()
                            .map(|d| {
                                if d.starts_with('/') || d.starts_with('~') {
                                    Value::String(d)
                                } else {
                                    Value::String(self.base.join(d).display().to_string())
                                }
                            })
                            .collect();
                        self.set("mcp.context_dirs", Value::Array(dirs));
                        self.note_value(
                            &format!("{section}.context_dirs"),
                            &value,
                            "carried over (relative directories made absolute against the ns-hpc file's directory); resources are now `resource://hpcgate/context/<name>` instead of `resource://ns-hpc/context/<name>`",
                        );
                    }
                    None => self.note_value(
                        &format!("{section}.context_dirs"),
                        &value,
                        "not a list of strings",
                    ),
                }
            }
            if let Some(value) = table.remove("resource_patterns") {
                self.set("mcp.resource_patterns", value);
            }
            put_back(input, section, table);
        }
    }

    fn dav(&mut self, input: &mut Table) {
        let Some(mut dav) = take_table(input, "dav") else {
            return;
        };
        if let Some(enabled) = dav.remove("enabled") {
            self.set("dav.enabled", enabled);
        }
        if let Some(Value::Table(extras)) = dav.remove("extras") {
            for (name, extra) in extras {
                let key = format!("dav.extras.{name}");
                let Value::Table(mut extra) = extra else {
                    self.note_value(&key, &extra, "not a table `{ path, ro }`");
                    continue;
                };
                let Some(path) = extra
                    .remove("path")
                    .and_then(|p| p.as_str().map(str::to_owned))
                else {
                    self.note(key, "has no `path`: ns-hpc refused it too");
                    continue;
                };
                let path = if let Some(rest) = path.strip_prefix("~/") {
                    match std::env::var_os("HOME") {
                        Some(home) => Path::new(&home).join(rest).display().to_string(),
                        None => path,
                    }
                } else if path.starts_with('/') {
                    path
                } else {
                    self.base.join(&path).display().to_string()
                };
                if extra.remove("ro").and_then(|v| v.as_bool()) == Some(false) {
                    self.note(
                        format!("{key}.ro = false"),
                        "hpcgate serves extra directories read-only; it is carried over read-only (files are written in an instance's workspace or output)",
                    );
                }
                self.set(&format!("{key}.path"), Value::String(path));
                for (k, v) in extra {
                    self.note_value(&format!("{key}.{k}"), &v, "unknown to ns-hpc");
                }
            }
        }
        put_back(input, "dav", dav);
    }

    fn mcp(
        &mut self,
        input: &mut Table,
        invalid: &dyn Fn(&str, &str) -> ImportError,
    ) -> Result<(), ImportError> {
        let Some(mut mcp) = take_table(input, "mcp") else {
            return Ok(());
        };
        if let Some(value) = mcp.remove("result_type") {
            match value.as_str() {
                Some("text" | "structured" | "both") => self.set("mcp.result_type", value),
                _ => {
                    return Err(invalid(
                        "mcp.result_type",
                        "must be \"text\", \"structured\" or \"both\"",
                    ));
                }
            }
        }
        put_back(input, "mcp", mcp);
        Ok(())
    }

    fn proxies(
        &mut self,
        input: &mut Table,
        invalid: &dyn Fn(&str, &str) -> ImportError,
    ) -> Result<(), ImportError> {
        let proxies = take_table(input, "proxied_mcps").unwrap_or_default();
        if !proxies.contains_key("filesystem") {
            self.note(
                "proxied_mcps.filesystem (ns-hpc's default)",
                "not added: hpcgate's builtin file tools (read_file, write_file, list_directory, …) replace it; add `[proxied_mcps.filesystem]` to keep the `filesystem__*` tool names",
            );
        }
        for (name, proxy) in proxies {
            let key = format!("proxied_mcps.{name}");
            let Value::Table(mut proxy) = proxy else {
                return Err(invalid(&key, "is not a table"));
            };
            let Some(command) = proxy.remove("command") else {
                return Err(invalid(&format!("{key}.command"), "is required"));
            };
            let mut out = Table::new();
            if let Some(program) = command.as_str()
                && program.starts_with('/')
                && !SYSTEM_DIRS
                    .iter()
                    .any(|d| program.starts_with(&format!("{d}/")))
                && let Some(dir) = Path::new(program).parent()
            {
                // ns-hpc's sandbox saw what `bwrap_command` bound; hpcgate binds the server's
                // own directory so that it can start.
                out.insert(
                    "binds".to_owned(),
                    Value::Array(vec![Value::String(dir.display().to_string())]),
                );
            }
            out.insert("command".to_owned(), command);
            for field in ["args", "include", "exclude", "idle_timeout"] {
                if let Some(value) = proxy.remove(field) {
                    out.insert(field.to_owned(), value);
                }
            }
            if let Some(env) = proxy.remove("env") {
                self.note_value(
                    &format!("{key}.env"),
                    &env,
                    "carried over; but ns-hpc then also passed the whole host environment, and hpcgate passes only `[sandbox] env_allow` plus these",
                );
                out.insert("env".to_owned(), env);
            }
            for (k, v) in proxy {
                self.note_value(&format!("{key}.{k}"), &v, "unknown to ns-hpc");
            }
            self.set(&key, Value::Table(out));
        }
        Ok(())
    }

    fn host_commands(&mut self, input: &mut Table) {
        let commands = take_table(input, "host_commands").unwrap_or_default();
        for (name, command) in commands {
            let key = format!("host_commands.{name}");
            let Value::Table(mut command) = command else {
                self.note_value(&key, &command, "not a table");
                continue;
            };
            let line = command
                .remove("command")
                .and_then(|c| c.as_str().map(str::to_owned))
                .unwrap_or_default();
            let argv = plain_argv(&line);
            let Some(argv) = argv else {
                self.note(
                    format!("{key}.command = {}", inline(&Value::String(line))),
                    "a shell string: hpcgate runs host commands as an argv with an absolute program, never through a shell; write `argv = [\"/usr/bin/…\", …]` under this key",
                );
                continue;
            };
            let mut out = Table::new();
            out.insert(
                "argv".to_owned(),
                Value::Array(argv.into_iter().map(Value::String).collect()),
            );
            if let Some(description) = command.remove("description") {
                out.insert("description".to_owned(), description);
            }
            if let Some(timeout) = command.remove("timeout") {
                let seconds = timeout
                    .as_float()
                    .or_else(|| timeout.as_integer().map(|n| n as f64))
                    .unwrap_or(30.0);
                out.insert(
                    "timeout_s".to_owned(),
                    Value::Integer(seconds.ceil().max(1.0) as i64),
                );
            }
            for (k, v) in command {
                self.note_value(&format!("{key}.{k}"), &v, "unknown to ns-hpc");
            }
            self.set(&key, Value::Table(out));
            self.host_exec = true;
        }
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
            let mut limit = Table::new();
            limit.insert("default".to_owned(), Value::Integer(default));
            limit.insert("max".to_owned(), Value::Integer(max));
            if let Some(Value::Table(given)) = self.caps.remove(name) {
                limit.extend(given);
            }
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
