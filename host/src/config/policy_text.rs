//! The text files of the stock policies written in other languages: `policy_file` (and
//! `schema_file`) of `stock:rego` and `stock:cedar`. A policy has no filesystem, so the host
//! reads each file when it builds the chain and passes its text in the settings, as `policy`
//! (`schema`) beside the file's path (which names the file in the policy's messages). A relative
//! path is relative to the config file that set it.

use std::path::Path;

use serde_json::Value;

use super::raw::PolicyConfig;

/// The modules whose `config` names text files, and the keys: `<key>_file` → `<key>`.
const TEXT_MODULES: [&str; 2] = ["stock:rego", "stock:cedar"];
const TEXT_KEYS: [&str; 2] = ["policy", "schema"];

/// The settings JSON of `entry`: its `config` table, with each text file read.
pub(crate) fn settings_json(entry: &PolicyConfig, base: &Path) -> anyhow::Result<String> {
    let mut settings = serde_json::to_value(&entry.config)?;
    if !TEXT_MODULES.contains(&entry.module.as_str()) {
        return Ok(settings.to_string());
    }
    let Value::Object(map) = &mut settings else {
        return Ok(settings.to_string());
    };
    for key in TEXT_KEYS {
        let file_key = format!("{key}_file");
        let Some(file) = map.get(&file_key) else {
            continue;
        };
        let Some(file) = file.as_str() else {
            anyhow::bail!(
                "policy `{}`: `config.{file_key}` must be a string (a path relative to the config file)",
                entry.name
            );
        };
        if map.contains_key(key) {
            anyhow::bail!(
                "policy `{}`: `config` sets both `{file_key}` and `{key}`; keep one",
                entry.name
            );
        }
        let path = base.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!(
                "policy `{}`: cannot read `config.{file_key}` `{}`: {e} (a relative path is relative to the config file)",
                entry.name,
                path.display()
            )
        })?;
        map.insert(file_key, Value::String(path.display().to_string()));
        map.insert(key.to_owned(), Value::String(text));
    }
    Ok(settings.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn entry(toml: &str) -> PolicyConfig {
        Config::parse(toml, "x.toml").unwrap().policies.remove(0)
    }

    #[test]
    fn reads_the_policy_file_relative_to_the_base() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.rego"), "package hpcgate").unwrap();
        let rego = entry(
            "[[policies]]\nname = \"r\"\nmodule = \"stock:rego\"\n[policies.config]\npolicy_file = \"p.rego\"\n",
        );
        let settings: Value =
            serde_json::from_str(&settings_json(&rego, dir.path()).unwrap()).unwrap();
        assert_eq!(settings["policy"], "package hpcgate");
        assert_eq!(
            settings["policy_file"],
            dir.path().join("p.rego").display().to_string()
        );

        let missing = entry(
            "[[policies]]\nname = \"c\"\nmodule = \"stock:cedar\"\n[policies.config]\npolicy_file = \"p.cedar\"\nschema_file = \"none.cedarschema\"\n",
        );
        std::fs::write(dir.path().join("p.cedar"), "").unwrap();
        let why = settings_json(&missing, dir.path()).unwrap_err().to_string();
        assert!(
            why.starts_with("policy `c`: cannot read `config.schema_file`")
                && why.contains("none.cedarschema"),
            "{why}"
        );

        let both = entry(
            "[[policies]]\nname = \"r\"\nmodule = \"stock:rego\"\n[policies.config]\npolicy_file = \"p.rego\"\npolicy = \"package x\"\n",
        );
        let why = settings_json(&both, dir.path()).unwrap_err().to_string();
        assert!(why.contains("both `policy_file` and `policy`"), "{why}");
    }

    #[test]
    fn other_modules_get_their_table_unchanged() {
        let other = entry(
            "[[policies]]\nname = \"t\"\nmodule = \"stock:tool-filter\"\n[policies.config]\npolicy_file = \"nowhere\"\n",
        );
        let settings = settings_json(&other, Path::new("/nonexistent")).unwrap();
        assert_eq!(settings, r#"{"policy_file":"nowhere"}"#);
    }
}
