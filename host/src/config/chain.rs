//! From the configured `[[policies]]` (plus `proxied_mcps.<name>.include/exclude`) to the
//! policy chain's [`ChainPolicy`] entries, loaded through a [`PolicyEngine`].

use std::path::Path;
use std::time::Duration;

use super::raw::{Config, EngineConfig, PolicyConfig, all_tenants};
use crate::policy::{Chain, ChainPolicy, EngineSettings, Mode, ModuleSource, PolicyEngine};

impl Config {
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
        load_policies(
            &self.policy_engine,
            self.policies_with_proxy_filters(),
            engine,
            base,
        )
    }

    /// Engine settings from `[policy_engine]`.
    pub fn engine_settings(&self) -> EngineSettings {
        let mut settings = EngineSettings::default();
        if let Some(dir) = &self.policy_engine.cache_dir {
            settings.cache_dir = Some(dir.clone());
        }
        if let Some(snapshots) = self.policy_engine.configured_snapshots {
            settings.snapshots = snapshots;
        }
        settings
    }

    /// The configured policies, with `proxied_mcps.<name>.include/exclude` as an implicit
    /// `stock:proxy-filter` policy of their own, named `proxied_mcps`, appended: enforced for
    /// every tenant and scoped to its servers' tools. It is never merged into a filter the
    /// admin configured, whose `tenants`, `tools` or `mode` would then decide where a server's
    /// `exclude` holds.
    pub fn policies_with_proxy_filters(&self) -> Vec<PolicyConfig> {
        let mut entries = self.policies.clone();
        let globs =
            |globs: &[String]| toml::Value::Array(globs.iter().cloned().map(Into::into).collect());
        let servers: toml::Table = (self.proxied_mcps.iter())
            .filter(|(_, p)| !p.include.is_empty() || !p.exclude.is_empty())
            .map(|(name, p)| {
                let filter = toml::Table::from_iter([
                    ("include".to_owned(), globs(&p.include)),
                    ("exclude".to_owned(), globs(&p.exclude)),
                ]);
                (name.clone(), toml::Value::Table(filter))
            })
            .collect();
        if servers.is_empty() {
            return entries;
        }
        entries.push(PolicyConfig {
            name: "proxied_mcps".to_owned(),
            module: "stock:proxy-filter".to_owned(),
            mode: Mode::Enforce,
            tenants: all_tenants(),
            // A proxied tool is exposed as `<server>__<tool>`; the filter judges only calls to
            // the servers it has entries for.
            tools: servers.keys().map(|name| format!("{name}__*")).collect(),
            deadline_ms: None,
            memory_limit_mb: None,
            // Stateless like every stock policy (see `default-config.toml`).
            reuse_instance: true,
            config: toml::Table::from_iter([("servers".to_owned(), toml::Value::Table(servers))]),
        });
        entries
    }
}

/// Loads each entry's module and applies the `[policy_engine]` defaults.
pub(crate) fn load_policies(
    defaults: &EngineConfig,
    entries: Vec<PolicyConfig>,
    engine: &PolicyEngine,
    base: &Path,
) -> anyhow::Result<Vec<ChainPolicy>> {
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
        let settings = super::policy_text::settings_json(&entry, base)?;
        chain.push(ChainPolicy {
            name: entry.name,
            module,
            settings,
            mode: entry.mode,
            tenants: entry.tenants,
            tools: entry.tools,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

        // Beside a filter of the admin's own, scoped or not, never merged into it.
        let both = format!(
            "{ns_hpc}[proxied_mcps.web]\ncommand = \"w\"\nexclude = [\"*\"]\n\
             [[policies]]\nname = \"proxy\"\nmodule = \"stock:proxy-filter\"\n\
             tenants = [\"bio\"]\nmode = \"monitor\"\n\
             [policies.config.servers.fs]\ninclude = [\"list_*\"]\n"
        );
        let policies = Config::parse(&both, "x.toml")
            .unwrap()
            .policies_with_proxy_filters();
        let names: Vec<_> = policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["proxy", "proxied_mcps"]);
        let json = serde_json::to_value(&policies[0].config).unwrap();
        assert_eq!(json, json!({"servers": {"fs": {"include": ["list_*"]}}}));
        let implicit = &policies[1];
        assert_eq!(implicit.mode, Mode::Enforce);
        assert_eq!(implicit.tenants, all_tenants());
        assert_eq!(implicit.tools, ["fs__*", "web__*"]);
        let json = serde_json::to_value(&implicit.config).unwrap();
        assert_eq!(
            json,
            json!({"servers": {
                "fs": {"include": ["read_*"], "exclude": ["*_dangerous"]},
                "web": {"include": [], "exclude": ["*"]},
            }})
        );
    }
}
