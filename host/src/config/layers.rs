//! Layering: built-in defaults → the user's file → `--config` / `HPCGATE_CONFIG`.
//!
//! Tables merge key by key; lists and values replace. A higher layer removes an entry of a
//! keyed table (`proxied_mcps`, `host_commands`, `tenants`) with `<name> = false`; `[[policies]]`
//! is a list, so a layer that sets it replaces the whole chain (`policies = []` empties it).
//! Before merging, each layer's paths are made absolute against its own file's directory and
//! `~` is expanded, so a path means what it meant in the file that wrote it.
//!
//! Where the home and config directories are comes from an [`Environment`] value, never from
//! the process inside this module: tests pass temporary directories and so never read the
//! developer's real `~/.config`.

use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::origins::{Origins, join};
use super::raw::Config;

/// The built-in defaults, the lowest layer.
pub const DEFAULT_CONFIG: &str = include_str!("../default-config.toml");
/// How the built-in layer is named in messages.
pub const DEFAULTS_LABEL: &str = "(built-in defaults)";
/// Keyed tables whose entries a higher layer may remove with `<name> = false`.
pub const REMOVABLE_TABLES: &[&str] = &["proxied_mcps", "host_commands", "tenants"];

/// Where the layers and the default state directory are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME` (ignored unless absolute, per the XDG spec).
    pub config_home: Option<PathBuf>,
    /// `$XDG_DATA_HOME` (ignored unless absolute).
    pub data_home: Option<PathBuf>,
    /// The top layer: `--config FILE`, else `$HPCGATE_CONFIG`. It must exist.
    pub explicit: Option<PathBuf>,
}

impl Environment {
    /// From this process: `HOME`, `XDG_CONFIG_HOME`, `XDG_DATA_HOME`, and `cli_config` or else
    /// `HPCGATE_CONFIG`.
    pub fn from_process(cli_config: Option<PathBuf>) -> Environment {
        let var = |name| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Environment {
            home: var("HOME"),
            config_home: var("XDG_CONFIG_HOME"),
            data_home: var("XDG_DATA_HOME"),
            explicit: cli_config.or_else(|| var("HPCGATE_CONFIG")),
        }
    }

    pub(super) fn home(&self) -> Option<&Path> {
        self.home.as_deref().filter(|h| h.is_absolute())
    }

    /// `$XDG_CONFIG_HOME/hpcgate/config.toml`, else `~/.config/hpcgate/config.toml`.
    pub fn user_config_file(&self) -> Option<PathBuf> {
        let base = match self.config_home.as_deref().filter(|p| p.is_absolute()) {
            Some(dir) => dir.to_owned(),
            None => self.home()?.join(".config"),
        };
        Some(base.join("hpcgate").join("config.toml"))
    }

    /// The default state directory: `$XDG_DATA_HOME/hpcgate`, else `~/.local/share/hpcgate`.
    pub fn default_state_dir(&self) -> Option<PathBuf> {
        let base = match self.data_home.as_deref().filter(|p| p.is_absolute()) {
            Some(dir) => dir.to_owned(),
            None => self.home()?.join(".local").join("share"),
        };
        Some(base.join("hpcgate"))
    }
}

/// One layer as it was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The file, or `None` for the built-in defaults.
    pub path: Option<PathBuf>,
    /// Whether it was found and read (an absent user file is skipped).
    pub read: bool,
}

impl Layer {
    /// The file's path, or [`DEFAULTS_LABEL`].
    pub fn label(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| DEFAULTS_LABEL.to_owned(), |p| p.display().to_string())
    }
}

/// The configuration of all layers, merged and parsed (not yet resolved).
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    /// Every layer looked for, lowest first.
    pub layers: Vec<Layer>,
    /// The merged TOML (what `hpcgate config show` prints).
    pub merged: toml::Table,
    /// Which file each key came from.
    pub origins: Origins,
    pub env: Environment,
}

impl Environment {
    /// The layers this environment names, lowest first, and whether each file exists now.
    pub fn layers(&self) -> Vec<Layer> {
        let mut layers = vec![Layer {
            path: None,
            read: true,
        }];
        for path in self
            .user_config_file()
            .into_iter()
            .chain(self.explicit.clone())
        {
            let read = path.is_file();
            layers.push(Layer {
                path: Some(path),
                read,
            });
        }
        layers
    }
}

/// Loads, merges and parses every layer.
pub fn load(env: &Environment) -> Result<LoadedConfig, ConfigError> {
    let mut texts = vec![(None, DEFAULT_CONFIG.to_owned())];
    let mut layers = vec![Layer {
        path: None,
        read: true,
    }];
    if let Some(user) = env.user_config_file() {
        match read_layer(&user) {
            Ok(text) => texts.push((Some(user.clone()), text)),
            Err(ConfigError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        layers.push(Layer {
            read: texts.len() == 2,
            path: Some(user),
        });
    }
    if let Some(path) = &env.explicit {
        // Relative to the working directory, like any command-line path.
        let path = &std::path::absolute(path).unwrap_or_else(|_| path.clone());
        let text = read_layer(path)?;
        texts.push((Some(path.clone()), text));
        layers.push(Layer {
            path: Some(path.clone()),
            read: true,
        });
    }
    let (merged, origins) = merge_texts(&texts, env)?;
    let config = Config::from_merged(merged.clone(), &origins)?;
    Ok(LoadedConfig {
        config,
        layers,
        merged,
        origins,
        env: env.clone(),
    })
}

/// Reads a layer, refusing one another user could have written: a layer is code in effect
/// (`[sandbox] bwrap`, `host_commands`, a proxied server's `command`), so the file, as
/// resolved, must be this user's or root's and not writable by everyone, in a directory
/// everyone may write only if it is sticky.
fn read_layer(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let read = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let untrusted = |why: String| ConfigError::Untrusted {
        path: path.to_owned(),
        why,
    };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let meta = file.metadata().map_err(read)?;
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(untrusted(format!(
            "belongs to uid {}, neither this user ({euid}) nor root: a config is code in effect; copy it, or have root own it",
            meta.uid()
        )));
    }
    if meta.mode() & 0o002 != 0 {
        return Err(untrusted(
            "may be written by anyone: `chmod o-w` it".to_owned(),
        ));
    }
    let resolved = path.canonicalize().map_err(read)?;
    if let Some(dir) = resolved.parent() {
        let dir_meta = std::fs::metadata(dir).map_err(read)?;
        if dir_meta.mode() & 0o002 != 0 && dir_meta.mode() & 0o1000 == 0 {
            return Err(untrusted(format!(
                "is in `{}`, which anyone may write and which is not sticky: move it",
                dir.display()
            )));
        }
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(read)?;
    Ok(text)
}

/// Parses and merges layer texts, lowest first (`None` path: the built-in layer).
pub fn merge_texts(
    texts: &[(Option<PathBuf>, String)],
    env: &Environment,
) -> Result<(toml::Table, Origins), ConfigError> {
    let mut merged = toml::Table::new();
    let mut origins = Origins::default();
    for (path, text) in texts {
        let label = path
            .as_ref()
            .map_or_else(|| DEFAULTS_LABEL.to_owned(), |p| p.display().to_string());
        let mut table = super::parse::toml_table(text, &label)?;
        let dir = path.as_deref().and_then(Path::parent);
        absolutize(&mut table, dir, env.home());
        merge(&mut merged, table, "", &label, &mut origins);
        origins.set_fallback(&label);
    }
    Ok((merged, origins))
}

/// Merges `layer` into `into`: tables recursively, everything else replaced; `false` removes
/// an entry of a [`REMOVABLE_TABLES`] table.
fn merge(into: &mut toml::Table, layer: toml::Table, prefix: &str, file: &str, o: &mut Origins) {
    let removable = REMOVABLE_TABLES.contains(&prefix);
    for (key, value) in layer {
        let path = join(prefix, &key);
        match value {
            toml::Value::Boolean(false) if removable => {
                into.remove(&key);
                o.forget(&path);
            }
            toml::Value::Table(upper) => {
                if !matches!(into.get(&key), Some(toml::Value::Table(_))) {
                    o.forget(&path);
                    into.insert(key.clone(), toml::Value::Table(toml::Table::new()));
                }
                o.record_if_absent(&path, file);
                if let Some(toml::Value::Table(lower)) = into.get_mut(&key) {
                    merge(lower, upper, &path, file, o);
                }
            }
            value => {
                o.forget(&path);
                o.record(&path, file);
                into.insert(key, value);
            }
        }
    }
}

/// Expands `~` and joins relative paths to `dir` (the layer file's directory), for every key
/// that holds a host path.
pub(super) fn absolutize(table: &mut toml::Table, dir: Option<&Path>, home: Option<&Path>) {
    let fix = |value: &mut toml::Value| {
        if let toml::Value::String(s) = value
            && let Some(fixed) = absolute(s, dir, home)
        {
            *s = fixed;
        }
    };
    if let Some(v) = table.get_mut("state_dir") {
        fix(v);
    }
    for (section, keys) in [
        ("policy_engine", &["cache_dir"][..]),
        ("sandbox", &["bwrap"][..]),
        ("slurm", &["bin_dir", "slurm_conf"][..]),
    ] {
        if let Some(toml::Value::Table(t)) = table.get_mut(section) {
            for key in keys {
                if let Some(v) = t.get_mut(*key) {
                    fix(v);
                }
            }
        }
    }
    if let Some(toml::Value::Table(auth)) = table.get_mut("auth")
        && let Some(toml::Value::Table(jwt)) = auth.get_mut("jwt")
    {
        for key in ["key_file", "jwks_file"] {
            if let Some(v) = jwt.get_mut(key) {
                fix(v);
            }
        }
    }
    let each =
        |table: &mut toml::Table, outer: &str, inner: &str, key: &str, skip: Option<&str>| {
            let list = match outer {
                "" => table.get_mut(inner),
                _ => match table.get_mut(outer) {
                    Some(toml::Value::Table(t)) => t.get_mut(inner),
                    _ => None,
                },
            };
            if let Some(toml::Value::Array(items)) = list {
                for item in items {
                    if let toml::Value::Table(entry) = item
                        && let Some(v) = entry.get_mut(key)
                        && !skip.is_some_and(|skip| v.as_str().is_some_and(|s| s.starts_with(skip)))
                    {
                        fix(v);
                    }
                }
            }
        };
    if let Some(toml::Value::Table(mcp)) = table.get_mut("mcp")
        && let Some(toml::Value::Array(dirs)) = mcp.get_mut("context_dirs")
    {
        dirs.iter_mut().for_each(fix);
    }
    each(table, "", "policies", "module", Some("stock:"));
    // The text files of `stock:rego` and `stock:cedar` (`config/policy_text.rs`).
    if let Some(toml::Value::Array(items)) = table.get_mut("policies") {
        for item in items {
            if let toml::Value::Table(entry) = item
                && entry
                    .get("module")
                    .and_then(toml::Value::as_str)
                    .is_some_and(|m| m == "stock:rego" || m == "stock:cedar")
                && let Some(toml::Value::Table(config)) = entry.get_mut("config")
            {
                for key in ["policy_file", "schema_file"] {
                    if let Some(v) = config.get_mut(key) {
                        fix(v);
                    }
                }
            }
        }
    }
    each(table, "sandbox", "extra_ro_binds", "source", None);
}

fn absolute(path: &str, dir: Option<&Path>, home: Option<&Path>) -> Option<String> {
    let fixed = if path == "~" {
        home?.to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home?.join(rest)
    } else if Path::new(path).is_relative() && !path.is_empty() {
        dir?.join(path)
    } else {
        return None;
    };
    Some(fixed.display().to_string())
}
