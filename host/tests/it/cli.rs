//! The `hpcgate policy` commands, run as a user runs them: the real binary, real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ is in the repo")
        .to_path_buf()
}

/// Runs `hpcgate` with the compile cache every test shares (in the target dir, never `$HOME`).
fn hpcgate(args: &[&str]) -> Output {
    let cache = crate::support::shared::cache_home();
    Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(args)
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run hpcgate")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn case_file(name: &str) -> String {
    repo().join("tests/cases").join(name).display().to_string()
}

#[test]
fn check_accepts_a_stock_policy_and_names_its_digest() {
    let output = hpcgate(&[
        "policy",
        "check",
        "stock:path-rules",
        "--settings",
        r#"{"deny_read": ["**/.ssh/**"]}"#,
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        stdout(&output).starts_with("ok: `stock:path-rules` (sha256:"),
        "{}",
        stdout(&output)
    );
}

/// `HPCGATE_POLICY_PERFMAP=1`: the guest's compiled functions are named for `perf`, in the map
/// file `perf` reads for the process; without it no map is written.
#[test]
fn perfmap_names_the_guest_functions_for_perf_only_when_asked() {
    let cache = crate::support::shared::cache_home();
    for asked in [true, false] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hpcgate"));
        command
            .args(["policy", "check", "stock:tool-filter"])
            .env("XDG_CACHE_HOME", &cache)
            .env_remove("HPCGATE_POLICY_PERFMAP");
        if asked {
            command.env("HPCGATE_POLICY_PERFMAP", "1");
        }
        let child = command.stdout(std::process::Stdio::null()).spawn().unwrap();
        let map = PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let text = std::fs::read_to_string(&map).unwrap_or_default();
        let _ = std::fs::remove_file(&map);
        let names = text
            .lines()
            .filter(|l| l.contains("wasm[0]::function["))
            .count();
        if asked {
            assert!(
                names > 10,
                "the guest's functions are named: {names} in {map:?}"
            );
        } else {
            assert_eq!(names, 0, "no map without the variable");
        }
    }
}

#[test]
fn check_refuses_bad_settings_foreign_imports_and_unknown_modules() {
    let output = hpcgate(&[
        "policy",
        "check",
        "stock:tool-filter",
        "--settings",
        r#"{"alow": ["*"]}"#,
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("rejected its config") && stdout(&output).contains("alow"),
        "{}",
        stdout(&output)
    );

    let foreign = repo().join("policies/hostile/wat/foreign-import.wat");
    let output = hpcgate(&["policy", "check", foreign.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output)
            .contains("imports `wasi:sockets/tcp@0.2.0`, which hpcgate does not provide"),
        "{}",
        stdout(&output)
    );

    let output = hpcgate(&["policy", "check", "stock:nope"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output)
            .contains("unknown stock policy `stock:nope`; the stock policies are tool-filter")
    );

    let output = hpcgate(&["policy", "check", "/nonexistent/p.wasm"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).contains("cannot read policy module `/nonexistent/p.wasm`"));
}

#[test]
fn test_reproduces_every_expected_decision_of_the_case_files() {
    for name in ["stock", "strict", "chain", "ns-hpc"] {
        let output = hpcgate(&[
            "policy",
            "test",
            "--config",
            &case_file(&format!("{name}.toml")),
            "--calls",
            &case_file(&format!("{name}.jsonl")),
            "--json",
        ]);
        let report: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("json report");
        assert_eq!(report["mismatched"], 0, "{name}: {report:#}");
        assert!(report["total"].as_u64().unwrap() >= 7, "{name}: {report}");
        assert_eq!(output.status.code(), Some(0));
    }
}

/// The example rules of `examples/policies/` in each language pass the one shared cases file
/// (the Rust example is built and checked by `tests/e2e/policy_languages.rs`).
#[test]
fn test_passes_the_example_rules_in_rego_and_cedar() {
    let examples = repo().join("examples/policies");
    let calls = examples.join("cases.jsonl").display().to_string();
    for name in EXAMPLE_CONFIGS {
        let config = examples.join(name).display().to_string();
        let output = hpcgate(&[
            "policy", "test", "--config", &config, "--calls", &calls, "--json",
        ]);
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{name}: json report, got {output:?}"));
        assert_eq!(report["mismatched"], 0, "{name}: {report:#}");
        assert!(report["total"].as_u64().unwrap() >= 15, "{name}: {report}");
        assert_eq!(output.status.code(), Some(0));
    }
}

const EXAMPLE_CONFIGS: [&str; 2] = ["rego.toml", "cedar.toml"];

/// A relative `cache_dir` is the config file's, not the working directory's: the compile cache
/// holds native code, and another user's directory must not become it by where the command
/// runs.
#[test]
fn a_relative_cache_dir_is_the_config_files() {
    let (home, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = home.path().join("p.toml");
    std::fs::write(
        &config,
        "[policy_engine]\ncache_dir = \"cache\"\n[[policies]]\nname = \"tools\"\nmodule = \"stock:tool-filter\"\n",
    )
    .unwrap();
    let calls = case_file("stock.jsonl");
    let output = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["policy", "test", "--config"])
        .arg(&config)
        .args(["--calls", &calls])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert!(output.status.code().is_some(), "{output:?}");
    assert!(home.path().join("cache").is_dir(), "{output:?}");
    assert!(!elsewhere.path().join("cache").exists());
}

#[test]
fn test_names_the_file_and_line_of_a_bad_rego_module() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.rego"),
        "package hpcgate\n\ndeny contains msg if {\n  input.tool ==\n",
    )
    .unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[[policies]]\nname = \"rules\"\nmodule = \"stock:rego\"\n[policies.config]\npolicy_file = \"bad.rego\"\n",
    )
    .unwrap();
    let calls = repo().join("examples/policies/cases.jsonl");
    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        &config.display().to_string(),
        "--calls",
        &calls.display().to_string(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("policy `rules` rejected its config: cannot parse the Rego module: `")
            && stderr.contains("bad.rego` line 5, column 1: expecting expression"),
        "{stderr}"
    );
}

#[test]
fn test_reports_mismatches_by_name_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    let call = r#"{"phase": "call", "tenant": "chem", "principal": "a", "tool": "host_exec", "server": "builtin", "remote_tool": null, "instance": null, "arguments": {"key": "x"}, "read_only": false, "usage": {}}"#;
    let lines = [
        format!(
            r#"{{"name": "host_exec is allowed (wrong)", "call": {call}, "expect": {{"decision": "allow"}}}}"#
        ),
        format!(
            r#"{{"name": "host_exec is denied by caps (wrong policy)", "call": {call}, "expect": {{"decision": "deny", "policy": "caps"}}}}"#
        ),
        format!(
            r#"{{"call": {call}, "expect": {{"decision": "deny", "policy": "tools", "reason_contains": "host_exec"}}}}"#
        ),
        // An audit decision record: compared with the decision recorded beside the call.
        format!(
            r#"{{"seq": 7, "event": "call", "call": {call}, "decision": {{"decision": "deny", "policy": "tools"}}}}"#
        ),
        // Another audit record: skipped.
        r#"{"seq": 8, "event": "instance.created", "instance": "run1"}"#.to_owned(),
    ];
    std::fs::write(&calls, lines.join("\n")).unwrap();
    let config = case_file("stock.toml");
    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        &config,
        "--calls",
        calls.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.contains(
            "MISMATCH host_exec is allowed (wrong) (line 1): expected allow, got deny by `tools`"
        ),
        "{text}"
    );
    assert!(text.contains("MISMATCH host_exec is denied by caps (wrong policy) (line 2): expected deny by `caps`, got deny by `tools`"), "{text}");
    assert!(
        text.contains("4 calls checked: 2 matched, 2 mismatched (1 lines without a call skipped)"),
        "{text}"
    );

    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        &config,
        "--calls",
        calls.to_str().unwrap(),
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            report["total"].as_u64(),
            report["matched"].as_u64(),
            report["mismatched"].as_u64()
        ),
        (Some(4), Some(2), Some(2))
    );
    assert_eq!(
        report["mismatches"][0]["name"],
        "host_exec is allowed (wrong)"
    );
    assert_eq!(report["mismatches"][1]["actual"]["policy"], "tools");
}

#[test]
fn test_explains_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    std::fs::write(&calls, "{\"call\": {\"phase\": \"call\"}}\n").unwrap();
    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        &case_file("stock.toml"),
        "--calls",
        calls.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("line 1: has a `call` but no `expect`"),
        "{err}"
    );

    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[[policies]]\nname = \"t\"\nmodule = \"stock:tool-filter\"\nenforce = true\n",
    )
    .unwrap();
    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        config.to_str().unwrap(),
        "--calls",
        calls.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("unknown key `policies[0].enforce`"), "{err}");
}

#[test]
fn bench_reports_latency_throughput_and_a_fresh_instance_step_by_step() {
    let output = hpcgate(&[
        "policy",
        "bench",
        "--config",
        &case_file("stock.toml"),
        "--json",
        "--samples",
        "200",
        "--iterations",
        "500",
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<_> = report["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tools", "paths", "caps", "proxy"]);
    for p in report["policies"].as_array().unwrap() {
        assert!(
            p["p50_us"].as_f64().unwrap() > 0.0
                && p["p99_us"].as_f64().unwrap() >= p["p50_us"].as_f64().unwrap()
        );
        assert!(p["evals_per_s"].as_f64().unwrap() > 0.0);
        // A fresh instance step by step, and how many samples prepared their own.
        for step in [
            "instantiate_us",
            "configure_us",
            "first_evaluate_us",
            "next_evaluate_us",
            "drop_us",
        ] {
            assert!(p["phases"][step].as_f64().unwrap() > 0.0, "{step}: {p}");
        }
        assert!(p["inline_prepares"].as_u64().unwrap() <= 200, "{p}");
    }
    assert!(report["chain"]["decisions_per_s"].as_f64().unwrap() > 0.0);
}

/// The toolchain pinned by the repo, so the scaffolded crate builds with the same one.
fn pinned_toolchain() -> String {
    let text = std::fs::read_to_string(repo().join("rust-toolchain.toml")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("channel"))
        .expect("channel in rust-toolchain.toml");
    line.split('"').nth(1).expect("quoted channel").to_owned()
}

/// One target dir for every scaffolded crate, kept under the workspace's own target dir: the
/// policy's dependencies (serde and its derive macros, wit-bindgen's runtime) compile once, not
/// once per run in a fresh temp dir.
fn scaffold_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("scaffold-target")
}

fn cargo(dir: &Path, args: &[&str]) {
    let status = Command::new("cargo")
        .args(args)
        .current_dir(dir)
        .env("RUSTUP_TOOLCHAIN", pinned_toolchain())
        .env("CARGO_TARGET_DIR", scaffold_target())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("run cargo");
    assert!(
        status.success(),
        "cargo {args:?} failed in the scaffolded crate"
    );
}

#[test]
fn new_scaffolds_a_policy_that_tests_builds_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    let output = hpcgate(&[
        "policy",
        "new",
        "no-rm",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let root = dir.path().join("no-rm");
    cargo(&root, &["test", "--quiet"]);
    cargo(
        &root,
        &[
            "build",
            "--quiet",
            "--release",
            "--target",
            "wasm32-unknown-unknown",
        ],
    );
    let module = scaffold_target().join("wasm32-unknown-unknown/release/no_rm.wasm");
    let output = hpcgate(&[
        "policy",
        "check",
        module.to_str().unwrap(),
        "--settings",
        r#"{"forbidden": ["rm -rf"]}"#,
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));

    // And it decides as its source says, through the engine.
    let config = root.join("policy.toml");
    std::fs::write(&config, format!("[[policies]]\nname = \"no-rm\"\nmodule = {:?}\n[policies.config]\nforbidden = [\"rm -rf\"]\n", module.display())).unwrap();
    let calls = root.join("calls.jsonl");
    std::fs::write(&calls, concat!(
        r#"{"call": {"phase": "call", "tenant": "t", "tool": "submit_job", "arguments": {"command": "rm -rf /"}}, "expect": {"decision": "deny", "policy": "no-rm"}}"#, "\n",
        r#"{"call": {"phase": "call", "tenant": "t", "tool": "submit_job", "arguments": {"command": "make"}}, "expect": {"decision": "allow"}}"#, "\n",
    )).unwrap();
    let output = hpcgate(&[
        "policy",
        "test",
        "--config",
        config.to_str().unwrap(),
        "--calls",
        calls.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));

    let again = hpcgate(&[
        "policy",
        "new",
        "no-rm",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(
        again.status.code(),
        Some(2),
        "an existing crate is never overwritten"
    );
    let bad = hpcgate(&[
        "policy",
        "new",
        "../escape",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
}

/// Scaffolds a JavaScript or Python policy, then runs its own `./test.sh` (build with the
/// pinned componentizer `scripts/setup.sh` installed, `policy check`, `policy test` over its
/// cases) as its README says; returns the project directory (kept by `dir`).
fn scaffold_and_test(lang: &str, dir: &Path) -> PathBuf {
    let output = hpcgate(&[
        "policy",
        "new",
        "no-rm",
        "--lang",
        lang,
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).contains("./test.sh"), "{}", stdout(&output));
    let root = dir.join("no-rm");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
        .to_path_buf();
    let cache = crate::support::shared::cache_home();
    let output = Command::new(root.join("test.sh"))
        .env("HPCGATE", env!("CARGO_BIN_EXE_hpcgate"))
        .env("JCO", target.join("policy-js/node_modules/.bin/jco"))
        .env(
            "COMPONENTIZE_PY",
            target.join("policy-py/bin/componentize-py"),
        )
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("run the scaffold's test.sh");
    assert!(
        output.status.success(),
        "{lang} scaffold: ./test.sh failed (scripts/setup.sh installs the componentizers):\n{}\n{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    let report = stdout(&output);
    assert!(
        report.contains("imports only the hpcgate world"),
        "{report}"
    );
    assert!(
        report.contains("4 calls checked: 4 matched, 0 mismatched"),
        "{report}"
    );
    root
}

/// The scaffold's test fails when the policy decides otherwise than its cases say: a test that
/// can fail.
fn break_and_retest(root: &Path, file: &str, from: &str, to: &str) {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{file} has no `{from}`");
    std::fs::write(&path, text.replace(from, to)).unwrap();
    let output = Command::new(root.join("test.sh"))
        .env("HPCGATE", env!("CARGO_BIN_EXE_hpcgate"))
        .env(
            "JCO",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("../policy-js/node_modules/.bin/jco"),
        )
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stdout(&output).contains("1 mismatched"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn new_scaffolds_a_javascript_policy_that_builds_passes_its_cases_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    let root = scaffold_and_test("js", dir.path());
    for file in [
        "policy.js",
        "package.json",
        "README.md",
        "wit/policy.wit",
        "cases.jsonl",
    ] {
        assert!(root.join(file).is_file(), "{file}");
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("./test.sh") && readme.contains("./build.sh"));
    break_and_retest(
        &root,
        "policy.js",
        "command.includes(f)",
        "command.includes(f + \"!\")",
    );
}

#[test]
fn new_scaffolds_a_python_policy_that_builds_passes_its_cases_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    let root = scaffold_and_test("python", dir.path());
    for file in ["app.py", "requirements.txt", "README.md", "wit/policy.wit"] {
        assert!(root.join(file).is_file(), "{file}");
    }
    let config = std::fs::read_to_string(root.join("policy.toml")).unwrap();
    assert!(config.contains("memory_limit_mb = 64"), "{config}");
}

#[test]
fn new_refuses_an_unknown_language() {
    let dir = tempfile::tempdir().unwrap();
    let output = hpcgate(&[
        "policy",
        "new",
        "x",
        "--lang",
        "cobol",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(!dir.path().join("x").exists());
}
