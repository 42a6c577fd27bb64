//! `namespace.*`: the sandbox's network, binds and what has no counterpart.

use toml::{Table, Value};

use super::*;

impl Importer {
    pub(super) fn namespace(&mut self, input: &mut Table) {
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
}
