//! The TOML configuration: the raw model that mirrors the file (every table denies unknown
//! keys, and the error names the dotted key), layering, and resolving the policy chain.
//!
//! Layers: built-in defaults → `~/.config/hpcgate/config.toml` → `--config` / `HPCGATE_CONFIG`.
//! Tables merge, lists and values replace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::policy::{Chain, ChainPolicy, EngineSettings, Mode, ModuleSource, PolicyEngine};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Tenant for stdio and local CLI use.
    pub stdio_tenant: Option<String>,
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub policy_engine: EngineConfig,
    #[serde(default)]
    pub policies: Vec<PolicyConfig>,
    #[serde(default)]
    pub proxied_mcps: BTreeMap<String, ProxyConfig>,
}

/// `[policy_engine]`: defaults for every policy and engine-wide settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Compiled-module cache; default `~/.cache/hpcgate/policies`.
    pub cache_dir: Option<PathBuf>,
    /// Per-evaluation deadline in ms (default 100).
    pub deadline_ms: Option<u64>,
    /// Per-instance memory cap in MiB (default 32).
    pub memory_limit_mb: Option<usize>,
    /// Fresh instances prepared ahead of the call per policy (default 8).
    pub prepared: Option<usize>,
}

/// One `[[policies]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    pub name: String,
    /// `stock:<name>` or a path to a `.wasm` component, relative to the config file.
    pub module: String,
    #[serde(default)]
    pub mode: Mode,
    /// Globs over tenant names; default all.
    #[serde(default = "all_tenants")]
    pub tenants: Vec<String>,
    pub deadline_ms: Option<u64>,
    pub memory_limit_mb: Option<usize>,
    /// Keep one configured instance per tenant across evaluations (state may survive between
    /// that tenant's calls). Off by default.
    #[serde(default)]
    pub reuse_instance: bool,
    /// Passed to the policy's `configure` as JSON.
    #[serde(default)]
    pub config: toml::Table,
}

/// `[proxied_mcps.<name>]`. Only `include`/`exclude` matter to the policy engine: they feed an
/// implicit `stock:proxy-filter` policy named `proxied_mcps`, so ns-hpc configs keep working.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    pub idle_timeout: Option<f64>,
    pub call_timeout: Option<f64>,
    pub network: Option<String>,
    #[serde(default)]
    pub binds: Vec<String>,
}

fn all_tenants() -> Vec<String> {
    vec!["*".to_owned()]
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file `{path}`")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{file}` is not valid TOML: {message}")]
    Syntax { file: String, message: String },
    #[error("`{file}`: unknown key `{key}`; remove it or check its spelling")]
    UnknownKey { file: String, key: String },
    #[error("`{file}`: key `{key}`: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
}

impl Config {
    /// Reads one file (no layering).
    pub fn load(path: &Path) -> Result<(Config, PathBuf), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok((Config::parse(&text, &path.display().to_string())?, base))
    }

    /// Parses TOML text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    file: file.to_owned(),
                    message: e.message().to_owned(),
                })?;
        Config::from_table(table, file)
    }

    /// Builds the config from merged layers.
    pub fn from_table(table: toml::Table, file: &str) -> Result<Config, ConfigError> {
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let path = e.path().to_string();
            let message = e.inner().to_string();
            match message
                .strip_prefix("unknown field `")
                .and_then(|rest| rest.split('`').next())
            {
                Some(field) => {
                    // Some deserializers already put the unknown field at the end of the path.
                    let key = if path == "." || path == field {
                        field.to_owned()
                    } else if path.ends_with(&format!(".{field}")) {
                        path
                    } else {
                        format!("{path}.{field}")
                    };
                    ConfigError::UnknownKey {
                        file: file.to_owned(),
                        key,
                    }
                }
                None => ConfigError::Invalid {
                    file: file.to_owned(),
                    key: path,
                    message,
                },
            }
        })
    }

    /// The policy chain this config describes, with modules loaded through `engine`. Relative
    /// module paths are resolved against `base` (the config file's directory).
    pub fn build_chain(&self, engine: &PolicyEngine, base: &Path) -> anyhow::Result<Chain> {
        Ok(Chain::new(self.chain_policies(engine, base)?)?)
    }

    /// The chain's policies, loaded but not yet configured.
    pub fn chain_policies(
        &self,
        engine: &PolicyEngine,
        base: &Path,
    ) -> anyhow::Result<Vec<ChainPolicy>> {
        let defaults = &self.policy_engine;
        let entries = self.policies_with_proxy_filters();
        let mut chain = Vec::with_capacity(entries.len());
        for entry in entries {
            let source = match entry.module.parse::<ModuleSource>() {
                Ok(ModuleSource::Path(path)) if path.is_relative() => {
                    ModuleSource::Path(base.join(path))
                }
                Ok(source) => source,
                Err(never) => match never {},
            };
            let module = engine
                .load(&source)
                .map_err(|e| anyhow::anyhow!("policy `{}`: {e}", entry.name))?;
            let settings = serde_json::to_string(&entry.config)?;
            chain.push(ChainPolicy {
                name: entry.name,
                module,
                settings,
                mode: entry.mode,
                tenants: entry.tenants,
                deadline: Duration::from_millis(
                    entry.deadline_ms.or(defaults.deadline_ms).unwrap_or(100),
                ),
                memory_bytes: entry
                    .memory_limit_mb
                    .or(defaults.memory_limit_mb)
                    .unwrap_or(32)
                    << 20,
                reuse: entry.reuse_instance,
                prepared: defaults.prepared.unwrap_or(8),
            });
        }
        Ok(chain)
    }

    /// Engine settings from `[policy_engine]`.
    pub fn engine_settings(&self) -> EngineSettings {
        let mut settings = EngineSettings::default();
        if let Some(dir) = &self.policy_engine.cache_dir {
            settings.cache_dir = Some(dir.clone());
        }
        settings
    }

    /// The configured policies, with `proxied_mcps.<name>.include/exclude` fed into the proxy
    /// filter: merged into the `servers` of the one `stock:proxy-filter` policy when there is
    /// exactly one (its own entry for a server wins), else appended as an implicit policy named
    /// `proxied_mcps`.
    fn policies_with_proxy_filters(&self) -> Vec<PolicyConfig> {
        let mut entries = self.policies.clone();
        let filters: Vec<(String, Value)> = self
            .proxied_mcps
            .iter()
            .filter(|(_, p)| !p.include.is_empty() || !p.exclude.is_empty())
            .map(|(name, p)| {
                (
                    name.clone(),
                    json!({ "include": p.include, "exclude": p.exclude }),
                )
            })
            .collect();
        if filters.is_empty() {
            return entries;
        }
        let mut stock = entries
            .iter_mut()
            .filter(|e| e.module == "stock:proxy-filter");
        if let (Some(only), None) = (stock.next(), stock.next()) {
            let servers = only
                .config
                .entry("servers")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(servers) = servers {
                for (name, filter) in filters {
                    if let Ok(filter) = toml::Value::try_from(filter) {
                        servers.entry(name).or_insert(filter);
                    }
                }
            }
            return entries;
        }
        let servers: Map<String, Value> = filters.into_iter().collect();
        if let Ok(config) = toml::Table::try_from(json!({ "servers": servers })) {
            entries.push(PolicyConfig {
                name: "proxied_mcps".to_owned(),
                module: "stock:proxy-filter".to_owned(),
                mode: Mode::Enforce,
                tenants: all_tenants(),
                deadline_ms: None,
                memory_limit_mb: None,
                reuse_instance: false,
                config,
            });
        }
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named_with_their_dotted_path() {
        let err = Config::parse("[policy_engine]\ndeadline = 3\n", "x.toml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`x.toml`: unknown key `policy_engine.deadline`; remove it or check its spelling"
        );
        let err = Config::parse(
            "[[policies]]\nname = \"a\"\nmodule = \"stock:tool-filter\"\nmdoe = \"monitor\"\n",
            "x.toml",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("unknown key `policies[0].mdoe`"),
            "{err}"
        );
        let err = Config::parse("bogus = 1\n", "x.toml").unwrap_err();
        assert!(err.to_string().contains("unknown key `bogus`"), "{err}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let err = Config::parse(
            "[[policies]]\nname = \"a\"\nmodule = \"stock:x\"\nmode = \"loud\"\n",
            "x.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("policies[0].mode"), "{err}");
    }

    #[test]
    fn proxied_mcps_include_exclude_feed_the_proxy_filter() {
        let ns_hpc = "[proxied_mcps.fs]\ncommand = \"npx\"\ninclude = [\"read_*\"]\nexclude = [\"*_dangerous\"]\n";
        let config = Config::parse(ns_hpc, "x.toml").unwrap();
        let policies = config.policies_with_proxy_filters();
        assert_eq!(policies.len(), 1);
        assert_eq!(
            (policies[0].name.as_str(), policies[0].module.as_str()),
            ("proxied_mcps", "stock:proxy-filter")
        );
        let json = serde_json::to_value(&policies[0].config).unwrap();
        assert_eq!(
            json,
            json!({"servers": {"fs": {"include": ["read_*"], "exclude": ["*_dangerous"]}}})
        );

        let both = format!(
            "{ns_hpc}[proxied_mcps.web]\ncommand = \"w\"\nexclude = [\"*\"]\n\
             [[policies]]\nname = \"proxy\"\nmodule = \"stock:proxy-filter\"\n\
             [policies.config.servers.fs]\ninclude = [\"list_*\"]\n"
        );
        let policies = Config::parse(&both, "x.toml")
            .unwrap()
            .policies_with_proxy_filters();
        assert_eq!(policies.len(), 1, "merged into the one proxy filter");
        let json = serde_json::to_value(&policies[0].config).unwrap();
        assert_eq!(
            json,
            json!({"servers": {"fs": {"include": ["list_*"]}, "web": {"include": [], "exclude": ["*"]}}})
        );
    }
}
