//! `hpcgate config check|show` as a user runs them: the real binary, layered files in temp
//! dirs. `HOME` and the XDG variables always point into a temp dir, so these tests never read
//! the developer's own `~/.config`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `hpcgate` with `home` as `HOME`, no XDG overrides (unless given) and no
/// `HPCGATE_CONFIG` (unless given), and a compile cache in the target dir.
fn hpcgate(home: &Path, envs: &[(&str, &Path)], args: &[&str]) -> Output {
    let cache = crate::support::shared::cache_home();
    let mut command = Command::new(env!("CARGO_BIN_EXE_hpcgate"));
    command
        .args(args)
        .current_dir(home)
        .env("HOME", home)
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("HPCGATE_CONFIG");
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("run hpcgate")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_owned()
}

fn check_json(home: &Path, envs: &[(&str, &Path)], extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["config", "check", "--json"];
    args.extend_from_slice(extra);
    let output = hpcgate(home, envs, &args);
    let json =
        serde_json::from_str(stdout(&output).trim()).unwrap_or_else(|e| panic!("{e}: {output:?}"));
    (output.status.code(), json)
}

#[test]
fn defaults_alone_check_and_name_every_layer_looked_for() {
    let home = tempfile::tempdir().unwrap();
    let output = hpcgate(home.path(), &[], &["config", "check"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    let user = home.path().join(".config/hpcgate/config.toml");
    assert!(text.contains("read (built-in defaults)\n"), "{text}");
    assert!(
        text.contains(&format!("skipped {} (not found)\n", user.display())),
        "{text}"
    );
    let state = home.path().join(".local/share/hpcgate");
    assert!(
        text.contains(&format!(
            "ok: 3 policies (tools, paths, caps), state dir `{}`, single-tenant (`default`)",
            state.display()
        )),
        "{text}"
    );
}

#[test]
fn user_and_explicit_layers_merge_and_the_explicit_one_wins() {
    let home = tempfile::tempdir().unwrap();
    write(
        &home.path().join(".config/hpcgate/config.toml"),
        "state_dir = \"~/state\"\n[host_commands.quota]\nargv = [\"/usr/bin/quota\"]\n\
         [tenants.chem]\nunix_uids = [1001]\n",
    );
    let top = write(
        &home.path().join("etc/top.toml"),
        "host_commands.quota = false\n[[policies]]\nname = \"tools\"\nmodule = \"stock:tool-filter\"\n",
    );
    let (code, json) = check_json(home.path(), &[], &["--config", top.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{json}");
    let files: Vec<_> = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["read"].as_bool().unwrap())
        .collect();
    assert_eq!(files, [true, true, true]);
    let summary = &json["summary"];
    assert_eq!(summary["policies"], serde_json::json!(["tools"]));
    assert_eq!(
        summary["state_dir"],
        home.path().join("state").display().to_string()
    );
    assert_eq!(summary["tenants"], serde_json::json!(["chem"]));
    assert_eq!(
        summary["host_commands"],
        serde_json::json!([]),
        "removed by the top layer"
    );
}

#[test]
fn xdg_config_home_and_hpcgate_config_are_honoured() {
    let home = tempfile::tempdir().unwrap();
    let xdg = home.path().join("xdg");
    write(
        &xdg.join("hpcgate/config.toml"),
        "stdio_tenant = \"from-xdg\"\n",
    );
    let env_file = write(
        &home.path().join("env.toml"),
        "[mcp]\nresult_type = \"text\"\n",
    );
    let cli_file = write(
        &home.path().join("cli.toml"),
        "[mcp]\nresult_type = \"structured\"\n",
    );
    let envs = [
        ("XDG_CONFIG_HOME", xdg.as_path()),
        ("HPCGATE_CONFIG", env_file.as_path()),
    ];
    let (code, json) = check_json(home.path(), &envs, &[]);
    assert_eq!(code, Some(0), "{json}");
    assert_eq!(json["summary"]["stdio_tenant"], "from-xdg");
    assert_eq!(json["summary"]["result_type"], "text");
    let (_, json) = check_json(
        home.path(),
        &envs,
        &["--config", cli_file.to_str().unwrap()],
    );
    assert_eq!(
        json["summary"]["result_type"], "structured",
        "--config beats HPCGATE_CONFIG"
    );
}

#[test]
fn an_unknown_key_names_the_file_it_came_from_and_the_dotted_key() {
    let home = tempfile::tempdir().unwrap();
    let user = write(
        &home.path().join(".config/hpcgate/config.toml"),
        "[sandbox]\nnetwrok = \"host\"\n",
    );
    let top = write(
        &home.path().join("top.toml"),
        "[sandbox.limits]\ncpus = 2\n",
    );
    let output = hpcgate(
        home.path(),
        &[],
        &["config", "check", "--config", top.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stdout(&output).contains(&format!(
            "invalid: `{}`: unknown key `sandbox.netwrok`; remove it or check its spelling",
            user.display()
        )),
        "{}",
        stdout(&output)
    );
}

/// A config layer is code in effect (`[sandbox] bwrap`, host commands, proxied servers): one
/// everybody may write, or one in a directory everybody may write that is not sticky, is
/// refused by name, not read.
#[test]
fn a_config_others_could_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let set = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let planted = "[sandbox]\nbwrap = \"/bin/true\"\n";
    let open = write(&home.path().join("open.toml"), planted);
    set(&open, 0o666);
    let output = hpcgate(
        home.path(),
        &[],
        &["config", "check", "--config", open.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stdout(&output).contains("may be written by anyone: `chmod o-w` it"),
        "{output:?}"
    );

    let shared = home.path().join("shared");
    let inside = write(&shared.join("config.toml"), planted);
    set(&shared, 0o777);
    let output = hpcgate(
        home.path(),
        &[],
        &["config", "check", "--config", inside.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stdout(&output).contains("which anyone may write and which is not sticky"),
        "{output:?}"
    );

    set(&open, 0o644);
    let output = hpcgate(
        home.path(),
        &[],
        &["config", "check", "--config", open.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

#[test]
fn a_bad_policy_or_a_missing_file_is_reported_by_name() {
    let home = tempfile::tempdir().unwrap();
    let top = write(
        &home.path().join("top.toml"),
        "[[policies]]\nname = \"strict\"\nmodule = \"stock:tool-filter\"\n[policies.config]\nallwo = [\"*\"]\n",
    );
    let (code, json) = check_json(home.path(), &[], &["--config", top.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let error = json["error"].as_str().unwrap();
    assert!(error.contains("policy `strict`"), "{error}");

    let top = write(
        &home.path().join("top2.toml"),
        "[[policies]]\nname = \"mine\"\nmodule = \"mine.wasm\"\n",
    );
    let (code, json) = check_json(home.path(), &[], &["--config", top.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    let error = json["error"].as_str().unwrap();
    assert!(error.contains("policy `mine`"), "{error}");
    assert!(
        error.contains(&home.path().join("mine.wasm").display().to_string()),
        "relative to its file: {error}"
    );

    let missing = home.path().join("nope.toml");
    let (code, json) = check_json(home.path(), &[], &["--config", missing.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        json["error"]
            .as_str()
            .unwrap()
            .contains(&format!("cannot read config file `{}`", missing.display())),
        "{json}"
    );
}

#[test]
fn show_prints_the_merged_configuration_as_toml() {
    let home = tempfile::tempdir().unwrap();
    let top = write(
        &home.path().join("top.toml"),
        "[proxied_mcps.fs]\ncommand = \"npx\"\n[sandbox.limits]\ncpus = 3\n",
    );
    let output = hpcgate(
        home.path(),
        &[],
        &["config", "show", "--config", top.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let text = stdout(&output);
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let merged: toml::Table = body.parse().unwrap();
    assert_eq!(merged["sandbox"]["limits"]["cpus"].as_integer(), Some(3));
    assert_eq!(merged["sandbox"]["limits"]["pids"].as_integer(), Some(256));
    assert_eq!(
        merged["proxied_mcps"]["fs"]["command"].as_str(),
        Some("npx")
    );
    assert_eq!(merged["policies"].as_array().unwrap().len(), 3);
}
