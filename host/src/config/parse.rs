//! From TOML to the raw [`Config`]: one file, or a merged table whose keys remember their file.
//! Every error names the file and the dotted key (through `serde_path_to_error`).

use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::origins::Origins;
use super::raw::Config;

/// TOML text as a table; `file` names it in the error.
pub(super) fn toml_table(text: &str, file: &str) -> Result<toml::Table, ConfigError> {
    text.parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            file: file.to_owned(),
            message: e.message().to_owned(),
        })
}

impl Config {
    /// Reads one file, without layering (what `hpcgate policy test --config` uses). Returns the
    /// config and the file's directory, against which relative module paths resolve. Paths
    /// (`state_dir`, `cache_dir`, …) and `~` are made absolute against that directory and
    /// `HOME`, as the layers' are, not left to the working directory.
    pub fn load(path: &Path) -> Result<(Config, PathBuf), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let file = path.display().to_string();
        let mut table = toml_table(&text, &file)?;
        let base = std::path::absolute(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let env = super::Environment::from_process(None);
        super::layers::absolutize(&mut table, Some(&base), env.home());
        Ok((Config::from_table(table, &file)?, base))
    }

    /// Parses TOML text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        Config::from_table(toml_table(text, file)?, file)
    }

    /// Builds the config from one file's table.
    pub fn from_table(table: toml::Table, file: &str) -> Result<Config, ConfigError> {
        Config::from_merged(table, &Origins::single(file))
    }

    /// Builds the config from merged layers; errors name the file that set the key.
    pub fn from_merged(table: toml::Table, origins: &Origins) -> Result<Config, ConfigError> {
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
                        file: origins.file_of(&key).to_owned(),
                        key,
                    }
                }
                None => ConfigError::Invalid {
                    file: origins.file_of(&path).to_owned(),
                    key: path,
                    message,
                },
            }
        })
    }
}
