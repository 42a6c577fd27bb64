//! Why a configuration could not be used. Every error names the file the offending key came
//! from (after layering, the layer that set it) and the dotted key, and says what to do.

use std::path::PathBuf;

/// A configuration that could not be read, parsed, merged or resolved.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file `{path}`")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file `{}` {why}", path.display())]
    Untrusted { path: PathBuf, why: String },
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
    #[error(
        "cannot find the home directory (`HOME` is unset or not absolute); set `HOME` or give `state_dir` as an absolute path"
    )]
    NoHome,
}
