//! `jobs.local` / `jobs.slurm` (and the historical `slurm.*`, `resources.*` limits): sandbox
//! limits, the `[slurm]` section and the `caps` policy.

use toml::{Table, Value};

use super::*;

impl Importer {
    pub(super) fn jobs(
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
    pub(super) fn historical_limits(
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
}
