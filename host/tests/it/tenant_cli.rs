//! `hpcgate tenant list|add|token` as an admin runs them: the real binary on a config file in a
//! temp dir, checked afterwards with `hpcgate config check` and the audit log.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest, Sha256};

struct Admin {
    home: tempfile::TempDir,
    config: PathBuf,
}

const CONFIG: &str = "# site config: keep this comment\n\
    state_dir = \"state\"\n\
    \n\
    [sandbox]\n\
    network = \"none\" # trailing comment\n";

impl Admin {
    fn new() -> Admin {
        let home = tempfile::tempdir().unwrap();
        let config = home.path().join("etc/hpcgate.toml");
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, CONFIG).unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).unwrap();
        Admin { home, config }
    }

    fn run(&self, args: &[&str]) -> Output {
        let cache = crate::support::shared::cache_home();
        Command::new(env!("CARGO_BIN_EXE_hpcgate"))
            .args(args)
            .current_dir(self.home.path())
            .env("HOME", self.home.path())
            .env("USER", "admin-alice")
            .env("XDG_CACHE_HOME", &cache)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("HPCGATE_CONFIG")
            .output()
            .expect("run hpcgate")
    }

    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    }

    fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert_ne!(output.status.code(), Some(0), "{args:?}: {output:?}");
        String::from_utf8(output.stderr).unwrap()
    }

    fn config_arg(&self) -> &str {
        self.config.to_str().unwrap()
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.config).unwrap()
    }

    fn check(&self) {
        let out = self.ok(&["config", "check", "--json", "--config", self.config_arg()]);
        let json: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(json["ok"], true, "{json}");
    }

    /// Every audit line of the configured state dir, parsed.
    fn audit(&self) -> Vec<Value> {
        audit_in(&self.home.path().join("etc/state/audit"))
    }

    fn audit_text(&self) -> String {
        self.audit()
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn audit_in(dir: &Path) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .collect()
}

fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn add_then_token_edit_the_file_in_place_and_it_still_checks() {
    let admin = Admin::new();
    let out = admin.ok(&[
        "tenant",
        "add",
        "chem",
        "--uid",
        "1001",
        "--uid",
        "1002",
        "--max-instances",
        "5",
        "--config",
        admin.config_arg(),
    ]);
    assert!(out.contains("added [tenants.chem]"), "{out}");
    let text = admin.text();
    assert!(
        text.starts_with(CONFIG),
        "comments and layout kept:\n{text}"
    );
    assert!(text.contains("[tenants.chem]"), "{text}");
    admin.check();

    let out = admin.ok(&[
        "tenant",
        "token",
        "chem",
        "--label",
        "laptop",
        "--config",
        admin.config_arg(),
    ]);
    let token = out.lines().next().unwrap().to_owned();
    assert!(token.starts_with("hpcg_") && token.len() == 5 + 64, "{out}");
    assert_eq!(out.matches(&token).count(), 1, "printed once: {out}");
    let hash = sha256_hex(&token);
    let text = admin.text();
    assert!(text.contains(&hash), "{text}");
    assert!(!text.contains(&token), "the token itself is never stored");
    assert!(text.starts_with(CONFIG), "{text}");
    assert_eq!(
        std::fs::metadata(&admin.config)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o640
    );
    admin.check();

    // A second token, then the first label again: refused, file unchanged.
    admin.ok(&[
        "tenant",
        "token",
        "chem",
        "--label",
        "ci",
        "--config",
        admin.config_arg(),
    ]);
    let before = admin.text();
    let err = admin.fails(&[
        "tenant",
        "token",
        "chem",
        "--label",
        "laptop",
        "--config",
        admin.config_arg(),
    ]);
    assert!(
        err.contains("already has a token labelled `laptop`"),
        "{err}"
    );
    assert_eq!(admin.text(), before);
    admin.check();

    // Adding the tenant again is refused; so is a token for a tenant not in the file.
    let err = admin.fails(&["tenant", "add", "chem", "--config", admin.config_arg()]);
    assert!(err.contains("tenant `chem` already exists"), "{err}");
    let err = admin.fails(&[
        "tenant",
        "token",
        "bio",
        "--label",
        "x",
        "--config",
        admin.config_arg(),
    ]);
    assert!(err.contains("has no [tenants.bio]"), "{err}");
    let err = admin.fails(&["tenant", "add", "Bad.Name", "--config", admin.config_arg()]);
    assert!(err.contains("cannot add tenant `Bad.Name`"), "{err}");
    // A uid already given to chem would make the config invalid: refused, nothing written.
    let err = admin.fails(&[
        "tenant",
        "add",
        "bio",
        "--uid",
        "1001",
        "--config",
        admin.config_arg(),
    ]);
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(err.contains("uid 1001 is already given"), "{err}");
    assert_eq!(admin.text(), before);

    // The list shows labels, uids and quotas, never hashes.
    let out = admin.ok(&["tenant", "list", "--json", "--config", admin.config_arg()]);
    assert!(!out.contains(&hash), "{out}");
    let json: Value = serde_json::from_str(out.trim()).unwrap();
    let chem = &json["tenants"][0];
    assert_eq!(chem["name"], "chem");
    assert_eq!(chem["tokens"], serde_json::json!(["laptop", "ci"]));
    assert_eq!(chem["unix_uids"], serde_json::json!([1001, 1002]));
    assert_eq!(chem["quotas"]["max_instances"], 5);
    let out = admin.ok(&["tenant", "list", "--config", admin.config_arg()]);
    assert!(
        out.contains("chem: tokens [laptop, ci], uids [1001, 1002]"),
        "{out}"
    );

    // Every command was audited, by the local user, without tokens or hashes.
    let records: Vec<Value> = admin
        .audit()
        .into_iter()
        .filter(|r| r["event"] == "tenant.admin")
        .collect();
    let actions: Vec<&str> = records
        .iter()
        .map(|r| r["detail"]["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["add", "token", "token", "list", "list"]);
    assert!(
        records
            .iter()
            .all(|r| r["principal"] == "admin-alice" && r.get("tenant").is_none())
    );
    assert_eq!(records[1]["detail"]["label"], "laptop");
    assert_eq!(records[1]["detail"]["tenant"], "chem");
    let audit = admin.audit_text();
    assert!(!audit.contains(&token) && !audit.contains(&hash));
    let verify = admin.ok(&[
        "audit",
        "verify",
        "--dir",
        admin.home.path().join("etc/state/audit").to_str().unwrap(),
    ]);
    assert!(!verify.is_empty());
}

#[test]
fn a_token_without_config_is_printed_with_the_entry_to_add() {
    let admin = Admin::new();
    let out = admin.ok(&["tenant", "token", "chem", "--label", "bob"]);
    let token = out.lines().next().unwrap().to_owned();
    assert_eq!(out.matches(&token).count(), 1, "{out}");
    let entry = format!(
        "# add to [tenants.chem] tokens: {{ label = \"bob\", sha256 = \"{}\" }}",
        sha256_hex(&token)
    );
    assert!(out.contains(&entry), "{out}");
    assert_eq!(admin.text(), CONFIG, "no file was named, none is edited");
    let records = audit_in(&admin.home.path().join(".local/share/hpcgate/audit"));
    let record = records.last().unwrap();
    assert_eq!(record["event"], "tenant.admin");
    assert_eq!(record["detail"]["action"], "token");
    assert!(record["detail"].get("config").is_none());
}

/// Run as root, as an admin runs `sudo hpcgate tenant add`, a command leaves the gateway's
/// files the gateway's: the configuration (root's) keeps its group, the gateway's, through which
/// the gateway reads it, and what the command
/// writes in the audit directory (the directory, a segment, its lock) belongs to the state
/// directory's owner, the gateway's user, which goes on writing there. Before, they were
/// root's, 0600: the gateway could no longer record any call.
#[test]
fn run_as_root_it_leaves_the_gateways_files_the_gateways() {
    use std::os::unix::fs::MetadataExt as _;
    if !crate::support::root_else_skip("acting as another user") {
        return;
    }
    let admin = Admin::new();
    let (gateway, config_group) = (4242, 4343);
    for dir in [admin.home.path(), &admin.home.path().join("etc")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let state = admin.home.path().join("etc/state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&state, Some(gateway), Some(gateway)).unwrap();
    std::os::unix::fs::chown(&admin.config, Some(0), Some(config_group)).unwrap();

    admin.ok(&["tenant", "add", "chem", "--config", admin.config_arg()]);
    admin.ok(&[
        "tenant",
        "token",
        "chem",
        "--label",
        "a",
        "--config",
        admin.config_arg(),
    ]);
    let config = std::fs::metadata(&admin.config).unwrap();
    assert_eq!(
        (config.uid(), config.gid(), config.mode() & 0o777),
        (0, config_group, 0o640)
    );
    assert!(admin.text().contains("[tenants.chem]"), "{}", admin.text());
    let audit = state.join("audit");
    let mut written = vec![audit.clone()];
    written.extend(
        std::fs::read_dir(&audit)
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    assert!(written.len() >= 3, "{written:?}");
    for path in &written {
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (gateway, gateway),
            "{}",
            path.display()
        );
    }
    assert_eq!(admin.audit().len(), 2, "{}", admin.audit_text());
}

/// A configuration reached through a link stays so: the file the link names is rewritten, and
/// the link is left as it was.
#[test]
fn a_linked_configuration_is_edited_where_it_lives() {
    let admin = Admin::new();
    let real = admin.home.path().join("etc/site.toml");
    std::fs::rename(&admin.config, &real).unwrap();
    std::os::unix::fs::symlink("site.toml", &admin.config).unwrap();
    admin.ok(&["tenant", "add", "chem", "--config", admin.config_arg()]);
    let link = std::fs::symlink_metadata(&admin.config).unwrap();
    assert!(
        link.file_type().is_symlink(),
        "the link was replaced by a file"
    );
    let text = std::fs::read_to_string(&real).unwrap();
    assert!(text.contains("[tenants.chem]"), "{text}");
}
