//! `hpcgate policy new <name> [--lang rust|js|python]`: a self-contained policy project.
//!
//! Rust: the crate vendors the policy SDK with its generated bindings (embedded in this binary),
//! so it builds anywhere, inside this workspace or outside it, with nothing but crates.io; the
//! WIT contract beside it is for reading. `cargo test` runs its logic natively; `cargo build
//! --release --target wasm32-unknown-unknown` produces a core module carrying its component
//! type, which `hpcgate` loads directly.
//!
//! JavaScript and Python (templates in `scaffold/`): the source, the WIT contract, `build.sh`
//! (jco's componentizer from npm, `componentize-py` from PyPI, both with every WASI import
//! replaced by a trap, so the component imports the hpcgate world and nothing else) and
//! `test.sh` (build, `hpcgate policy check`, `hpcgate policy test` over the project's own
//! `cases.jsonl` with its `policy.toml`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ValueEnum;

/// The language of a scaffolded policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    Rust,
    Js,
    Python,
}

/// The JavaScript and Python templates; `NAME` stands for the policy's name.
mod templates {
    pub(super) const JS: [(&str, &str); 4] = [
        ("policy.js", include_str!("scaffold/js/policy.js")),
        ("build.sh", include_str!("scaffold/js/build.sh")),
        ("package.json", include_str!("scaffold/js/package.json")),
        ("README.md", include_str!("scaffold/js/README.md")),
    ];
    pub(super) const PYTHON: [(&str, &str); 4] = [
        ("app.py", include_str!("scaffold/python/app.py")),
        ("build.sh", include_str!("scaffold/python/build.sh")),
        (
            "requirements.txt",
            include_str!("scaffold/python/requirements.txt"),
        ),
        ("README.md", include_str!("scaffold/python/README.md")),
    ];
    pub(super) const TEST: &str = include_str!("scaffold/test.sh");
    pub(super) const CASES: &str = include_str!("scaffold/cases.jsonl");
    pub(super) const CONFIG: &str = include_str!("scaffold/policy.toml");
}

const SDK_FILES: [(&str, &str); 11] = [
    ("lib.rs", include_str!("../../../policies/sdk/src/lib.rs")),
    (
        "bindings.rs",
        include_str!("../../../policies/sdk/src/bindings.rs"),
    ),
    (
        "arena.rs",
        include_str!("../../../policies/sdk/src/arena.rs"),
    ),
    ("args.rs", include_str!("../../../policies/sdk/src/args.rs")),
    ("call.rs", include_str!("../../../policies/sdk/src/call.rs")),
    (
        "decision.rs",
        include_str!("../../../policies/sdk/src/decision.rs"),
    ),
    ("glob.rs", include_str!("../../../policies/sdk/src/glob.rs")),
    (
        "guest.rs",
        include_str!("../../../policies/sdk/src/guest.rs"),
    ),
    ("log.rs", include_str!("../../../policies/sdk/src/log.rs")),
    (
        "outcome.rs",
        include_str!("../../../policies/sdk/src/outcome.rs"),
    ),
    ("path.rs", include_str!("../../../policies/sdk/src/path.rs")),
];
const WIT: &str = include_str!("../../../wit/policy.wit");

/// Creates `<dir>/<name>` and returns its path. Refuses to touch an existing directory.
pub(crate) fn new_policy(name: &str, dir: &Path, lang: Lang) -> anyhow::Result<PathBuf> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    anyhow::ensure!(
        valid,
        "`{name}` is not a valid policy name; use lowercase letters, digits and `-`, starting with a letter"
    );
    let root = dir.join(name);
    anyhow::ensure!(
        !root.exists(),
        "`{}` already exists; pick another name or directory",
        root.display()
    );
    if lang != Lang::Rust {
        return new_componentized(name, &root, lang);
    }
    let crate_ident = name.replace('-', "_");
    let type_name: String = name
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    let files = [
        ("Cargo.toml", cargo_toml(name)),
        (".gitignore", "/target\n".to_owned()),
        ("README.md", readme(name, &crate_ident)),
        (
            "src/lib.rs",
            TEMPLATE_LIB.replace("TemplatePolicy", &type_name),
        ),
        ("wit/policy.wit", WIT.to_owned()),
        ("vendor/hpcgate-policy-sdk/Cargo.toml", SDK_CARGO.to_owned()),
    ];
    let sdk = SDK_FILES.iter().map(|(file, text)| {
        (
            format!("vendor/hpcgate-policy-sdk/src/{file}"),
            (*text).to_owned(),
        )
    });
    for (path, text) in files.into_iter().map(|(p, t)| (p.to_owned(), t)).chain(sdk) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("files live in a directory"))
            .with_context(|| format!("cannot create `{}`", path.display()))?;
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    Ok(root)
}

/// A JavaScript or Python project: the template with `NAME` replaced, the contract, the shared
/// test script, cases and config.
fn new_componentized(name: &str, root: &Path, lang: Lang) -> anyhow::Result<PathBuf> {
    let (sources, ignore, memory): (&[(&str, &str)], &str, &str) = match lang {
        Lang::Js => (&templates::JS, "/node_modules\n/policy.wasm\n", ""),
        // CPython needs more than the default 32 MiB, and more than the default 100 ms to
        // prepare a fresh instance on a loaded machine (the deadline bounds that too).
        Lang::Python => (
            &templates::PYTHON,
            "/.venv\n/policy.wasm\n__pycache__/\n",
            "memory_limit_mb = 64\ndeadline_ms = 500\n",
        ),
        Lang::Rust => unreachable!("Rust crates are made by new_policy"),
    };
    let config = templates::CONFIG.replace("MEMORY\n", memory);
    let files = sources
        .iter()
        .map(|(path, text)| (*path, text.replace("NAME", name)))
        .chain([
            ("test.sh", templates::TEST.to_owned()),
            ("cases.jsonl", templates::CASES.replace("NAME", name)),
            ("policy.toml", config.replace("NAME", name)),
            ("wit/policy.wit", WIT.to_owned()),
            (".gitignore", ignore.to_owned()),
        ]);
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("files live in a directory"))
            .with_context(|| format!("cannot create `{}`", path.display()))?;
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
        if path.extension().is_some_and(|e| e == "sh") {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("cannot make `{}` executable", path.display()))?;
        }
    }
    Ok(root.to_path_buf())
}

fn cargo_toml(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
hpcgate-policy-sdk = {{ path = "vendor/hpcgate-policy-sdk" }}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"

# A crate of its own, wherever it is created.
[workspace]

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
panic = "abort"
strip = true
"#
    )
}

const SDK_CARGO: &str = r#"[package]
name = "hpcgate-policy-sdk"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
serde = { version = "1", features = ["derive"] }
serde_json = "1"

[target.'cfg(target_arch = "wasm32")'.dependencies]
wit-bindgen = { version = "0.63", default-features = false, features = ["realloc", "std"] }
"#;

fn readme(name: &str, ident: &str) -> String {
    format!(
        "# {name}\n\nAn hpcgate policy.\n\n```sh\ncargo test                                              # the logic, natively\n\
         cargo build --release --target wasm32-unknown-unknown   # the component\n\
         hpcgate policy check target/wasm32-unknown-unknown/release/{ident}.wasm --settings '{{\"forbidden\": [\"rm -rf\"]}}'\n```\n\n\
         Use it in the gateway config:\n\n```toml\n[[policies]]\nname = \"{name}\"\nmodule = \"path/to/{ident}.wasm\"\n\
         [policies.config]\nforbidden = [\"rm -rf\"]\n```\n\n`vendor/` holds the policy SDK and `wit/` the contract, copied by `hpcgate policy new`.\n"
    )
}

const TEMPLATE_LIB: &str = r##"//! An hpcgate policy: refuses `submit_job` calls whose command contains a forbidden fragment.
//!
//! Config: `forbidden` (list of strings). Replace the logic with your own; keep it a pure
//! function of the config and the call.

use hpcgate_policy_sdk::{Call, Decision, Phase, Policy};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplatePolicy {
    #[serde(default)]
    forbidden: Vec<String>,
}

impl Policy for TemplatePolicy {
    fn configure(settings: &str) -> Result<Self, String> {
        serde_json::from_str(settings).map_err(|e| format!("invalid config: {e}; expected {{\"forbidden\": [\"...\"]}}"))
    }

    fn evaluate(&self, call: &Call) -> Decision {
        if call.phase == Phase::List || call.tool != "submit_job" {
            return Decision::allow();
        }
        let command = call.arguments.get("command").and_then(|c| c.as_str()).unwrap_or("");
        match self.forbidden.iter().find(|f| command.contains(f.as_str())) {
            Some(fragment) => Decision::deny(format!("commands containing `{fragment}` are not allowed here; remove it and submit again")),
            None => Decision::allow(),
        }
    }
}

hpcgate_policy_sdk::export_policy!(TemplatePolicy);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> TemplatePolicy {
        TemplatePolicy::configure(r#"{"forbidden": ["rm -rf"]}"#).unwrap()
    }

    #[test]
    fn forbidden_commands_are_denied() {
        let call = Call::new("submit_job", json!({"instance_id": "a", "command": "rm -rf /scratch"}));
        assert!(policy().evaluate(&call).is_deny());
    }

    #[test]
    fn other_commands_and_tools_are_allowed() {
        assert!(policy().evaluate(&Call::new("submit_job", json!({"command": "make"}))).is_allow());
        assert!(policy().evaluate(&Call::new("read_file", json!({"path": "rm -rf"}))).is_allow());
    }

    #[test]
    fn unknown_config_keys_are_rejected() {
        assert!(TemplatePolicy::configure(r#"{"forbiden": []}"#).is_err());
    }
}
"##;
