//! `resource.*`, `dav.*`, `mcp.*`, `proxied_mcps.*` and `host_commands.*`: the keys that carry
//! over nearly as they are.

use toml::{Table, Value};

use super::*;

impl Importer {
    pub(super) fn resources(&mut self, input: &mut Table) {
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

    pub(super) fn dav(&mut self, input: &mut Table) {
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

    pub(super) fn mcp(
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

    pub(super) fn proxies(
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

    pub(super) fn host_commands(&mut self, input: &mut Table) {
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
}
