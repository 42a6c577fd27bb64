//! `hpcgate config import-ns-hpc`: every ns-hpc configuration its documentation shows
//! (`ns_hpc/`, see its README) converts, `hpcgate config check` passes on the result, the
//! settings land where they should and each one left behind is explained; then a gateway from
//! an imported configuration still answers to ns-hpc's tool names and `slurm_resources`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::proxy::{args, caller};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/ns_hpc")
        .join(name)
}

fn hpcgate(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(args)
        .current_dir(home)
        .env("HOME", home)
        .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("HPCGATE_CONFIG")
        .output()
        .expect("run hpcgate")
}

/// Imports `name` into `home/<name>` with `--out` and checks it; the text and its TOML.
fn import_and_check(home: &Path, name: &str) -> (String, toml::Table) {
    import_and_check_file(home, &fixture(name), name)
}

/// [`import_and_check`] of the file `source`.
fn import_and_check_file(home: &Path, source: &Path, name: &str) -> (String, toml::Table) {
    let out = home.join(name);
    let imported = hpcgate(
        home,
        &[
            "config",
            "import-ns-hpc",
            source.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(imported.status.success(), "{name}: {imported:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    let checked = hpcgate(
        home,
        &[
            "config",
            "check",
            "--json",
            "--config",
            out.to_str().unwrap(),
        ],
    );
    let report: Value = serde_json::from_slice(&checked.stdout)
        .unwrap_or_else(|e| panic!("{name}: {e}: {checked:?}"));
    assert_eq!(report["ok"], true, "{name}: {report}\n{text}");
    (text.clone(), text.parse().unwrap())
}

fn at<'a>(table: &'a toml::Table, dotted: &str) -> &'a toml::Value {
    let mut parts = dotted.split('.');
    let mut value = table
        .get(parts.next().unwrap())
        .unwrap_or_else(|| panic!("{dotted}"));
    for part in parts {
        value = value.get(part).unwrap_or_else(|| panic!("{dotted}"));
    }
    value
}

/// The `caps` policy's config.
fn caps(table: &toml::Table) -> &toml::Value {
    at(table, "policies")
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("caps"))
        .map(|p| &p["config"])
        .unwrap()
}

/// The comment lines naming each setting left behind, joined.
fn notes(text: &str) -> String {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_documented_ns_hpc_config_converts_and_passes_config_check() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();

    let (text, t) = import_and_check(home, "final-defaults.toml");
    assert_eq!(
        at(&t, "sandbox.network").as_str(),
        Some("host"),
        "--share-net"
    );
    assert_eq!(
        at(&t, "sandbox.limits.cpus").as_integer(),
        Some(4),
        "CPUQuota=400%"
    );
    assert_eq!(
        at(&t, "sandbox.limits.memory_mb").as_integer(),
        Some(8192),
        "MemoryMax=8G"
    );
    assert_eq!(at(&t, "slurm.enabled").as_bool(), Some(true));
    assert_eq!(at(&t, "slurm.partition").as_str(), Some("cpu"));
    assert_eq!(caps(&t)["action"].as_str(), Some("deny"));
    assert_eq!(caps(&t)["gpus"]["max"].as_integer(), Some(2));
    assert_eq!(caps(&t)["memory_mb"]["max"].as_integer(), Some(32768));
    assert_eq!(at(&t, "mcp.result_type").as_str(), Some("text"));
    assert_eq!(at(&t, "dav.enabled").as_bool(), Some(true));
    assert_eq!(
        at(&t, "dav.extras.datasets.path").as_str(),
        Some("/srv/datasets")
    );
    assert_eq!(
        at(&t, "proxied_mcps.filesystem.include")
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        at(&t, "host_commands.quota.argv").as_array().unwrap(),
        &vec![toml::Value::from("/usr/bin/quota"), toml::Value::from("-s")]
    );
    assert_eq!(
        at(&t, "host_commands.quota.timeout_s").as_integer(),
        Some(10)
    );
    assert!(
        t["host_commands"].get("queue").is_none(),
        "a shell string is not run"
    );
    let n = notes(&text);
    for expected in [
        "namespace.instances_dir",
        "`--ro-bind /etc /etc`",
        "namespace.shared_output_mount",
        "namespace.status_fd",
        "jobs.max_timeout",
        "jobs.local.proc_check",
        "host_commands.queue.command = \"squeue -u $USER\": a shell string",
        "host_exec is allowed",
    ] {
        assert!(
            n.contains(expected),
            "final-defaults: no note on {expected}:\n{n}"
        );
    }

    let (text, t) = import_and_check(home, "remote-rootfs.toml");
    assert_eq!(at(&t, "sandbox.bwrap").as_str(), Some("/usr/bin/bwrap"));
    assert_eq!(
        at(&t, "sandbox.extra_ro_binds").as_array().unwrap()[0]["source"].as_str(),
        Some("/opt/modules")
    );
    assert_eq!(at(&t, "slurm.partition").as_str(), Some("gpu"));
    assert_eq!(at(&t, "slurm.account").as_str(), Some("chem-lab"));
    assert_eq!(at(&t, "slurm.qos").as_str(), Some("normal"));
    assert_eq!(at(&t, "slurm.bin_dir").as_str(), Some("/opt/slurm/bin"));
    assert_eq!(caps(&t)["cpus"]["max"].as_integer(), Some(32));
    assert_eq!(caps(&t)["memory_mb"]["default"].as_integer(), Some(8192));
    let n = notes(&text);
    for expected in [
        "`--bind /srv/agent-rootfs /`",
        "`--uid 1000`",
        "`--tmpfs /run`",
        "namespace.workspace_mount = \"/home/agent\"",
        "namespace.output_mount = \"/mnt/output\"",
        "`--exclusive`",
        "jobs.slurm.limit.licenses",
        "proxied_mcps.filesystem (ns-hpc's default)",
    ] {
        assert!(
            n.contains(expected),
            "remote-rootfs: no note on {expected}:\n{n}"
        );
    }

    let (text, t) = import_and_check(home, "readme-remote-hpc.toml");
    assert_eq!(at(&t, "slurm.partition").as_str(), Some("compute"));
    assert_eq!(
        caps(&t)["memory_mb"]["default"].as_integer(),
        Some(4096),
        "\"4G\""
    );
    assert_eq!(
        caps(&t)["memory_mb"]["max"].as_integer(),
        Some(32768),
        "\"32G\""
    );
    assert_eq!(caps(&t)["cpus"]["max"].as_integer(), Some(8));
    assert_eq!(
        at(&t, "mcp.context_dirs").as_array().unwrap()[0].as_str(),
        Some("~/.local/ns-hpc/context")
    );
    assert!(notes(&text).contains("slurm.default_timeout = 3600"));

    let (_, t) = import_and_check(home, "repo-default.toml");
    assert_eq!(at(&t, "sandbox.limits.cpus").as_integer(), Some(4));
    assert_eq!(
        at(&t, "sandbox.limits.memory_mb").as_integer(),
        Some(8192),
        "\"8G\""
    );
    assert_eq!(
        at(&t, "proxied_mcps.filesystem.command").as_str(),
        Some("npx")
    );

    let (text, t) = import_and_check(home, "readme-quickstart.toml");
    assert_eq!(at(&t, "sandbox.network").as_str(), Some("host"));
    assert!(t.get("slurm").is_none(), "no Slurm in this example");
    let context = fixture("context").display().to_string();
    assert_eq!(
        at(&t, "mcp.context_dirs").as_array().unwrap()[0].as_str(),
        Some(context.as_str()),
        "relative to the ns-hpc file, as NS_HPC_CONFIG resolved it"
    );
    assert!(notes(&text).contains("resource://hpcgate/context/"));
}

#[test]
fn import_refuses_to_overwrite_and_explains_bad_input() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let out = home.join("out.toml");
    std::fs::write(&out, "# mine\n").unwrap();
    let source = fixture("readme-quickstart.toml");
    let refused = hpcgate(
        home,
        &[
            "config",
            "import-ns-hpc",
            source.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("does not exist yet"),
        "{refused:?}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "# mine\n");
    assert_eq!(
        std::fs::read_dir(home).unwrap().count(),
        1,
        "no temporary file left behind"
    );

    let cases = [
        (
            "[jobs.slurm.limit]\ncpus = { default = 1, max = \"many\" }\n",
            "jobs.slurm.limit.cpus.max",
        ),
        ("[mcp]\nresult_type = \"json\"\n", "mcp.result_type"),
        ("[namespace\n", "is not TOML"),
        (
            "[resources.memory]\nlimit = \"8X\"\n",
            "resources.memory.limit",
        ),
    ];
    for (text, expected) in cases {
        let bad = home.join("bad.toml");
        std::fs::write(&bad, text).unwrap();
        let output = hpcgate(home, &["config", "import-ns-hpc", bad.to_str().unwrap()]);
        assert!(!output.status.success(), "{text}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{text}: {stderr}");
        assert!(
            output.stdout.is_empty(),
            "nothing printed for a refused file"
        );
    }
    // Keys ns-hpc never had are reported, not dropped silently.
    let odd = home.join("odd.toml");
    std::fs::write(&odd, "[jobs]\nmax_timeout = 600\nmax_jobs = 3\n").unwrap();
    let output = hpcgate(home, &["config", "import-ns-hpc", odd.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout)
            .contains("# - jobs.max_jobs = 3: unknown to ns-hpc"),
        "{output:?}"
    );
}

#[test]
fn an_imported_gateway_answers_to_ns_hpc_tool_names_and_slurm_resources() {
    let home = tempfile::tempdir().unwrap();
    let (text, _) = import_and_check(home.path(), "final-defaults.toml");
    // The proxied `npx` server and Slurm need what this machine may lack; the builtin tool
    // surface is what is checked here, so they are dropped from the imported text.
    let mut table: toml::Table = text.parse().unwrap();
    table.remove("proxied_mcps");
    table.remove("slurm");
    table.remove("dav");
    table["sandbox"]
        .as_table_mut()
        .unwrap()
        .insert("network".to_owned(), "none".into());
    let dir = tempfile::tempdir().unwrap();
    let gw = crate::support::gateway::open(dir.path(), &toml::to_string(&table).unwrap());
    let me = caller("default");
    let names: Vec<&str> = gw.tools(&me).iter().map(|t| t.name).collect();
    for name in [
        "create_instance",
        "list_instances",
        "list_archived_instances",
        "archive_instance",
        "update_instance",
        "submit_job",
        "poll_job",
        "list_jobs",
        "cancel_job",
        "host_exec",
    ] {
        assert!(
            names.contains(&name),
            "ns-hpc's `{name}` is missing: {names:?}"
        );
    }
    let created = gw.call(&me, "create_instance", args(json!({"instance_id": "run1"})));
    assert!(!created.is_error, "{}", created.text);
    // ns-hpc's `slurm_resources` (memory in MB) reaches the job as its resources.
    let submitted = gw.call(
        &me,
        "submit_job",
        args(json!({
            "instance_id": "run1",
            "command": "echo hi",
            "timeout": 30,
            "slurm_resources": {"cpus": 2, "memory": 1024},
        })),
    );
    assert!(!submitted.is_error, "{}", submitted.text);
    let job = &submitted.structured["job"];
    assert_eq!(
        job["status"],
        "completed",
        "{job}\n{}",
        crate::support::served::audit_text(&dir.path().join("state/audit"))
    );
    assert_eq!(job["resources"]["cpus"], 2);
    assert_eq!(job["resources"]["memory_mb"], 1024);
    // Above ns-hpc's max: refused, as ns-hpc refused it (not lowered).
    let refused = gw.call(
        &me,
        "submit_job",
        args(json!({
            "instance_id": "run1",
            "command": "echo hi",
            "slurm_resources": {"cpus": 64},
        })),
    );
    assert!(refused.is_error, "{}", refused.text);
    assert!(refused.text.contains("caps"), "{}", refused.text);
    let polled = gw.call(
        &me,
        "poll_job",
        args(json!({"instance_id": "run1", "job_id": job["job_id"]})),
    );
    assert!(!polled.is_error, "{}", polled.text);
    let listed = gw.call(&me, "list_jobs", args(json!({"instance_id": "run1"})));
    assert_eq!(listed.structured["total"], 1, "{}", listed.text);
    // host_exec runs the converted argv (`/usr/bin/quota` may be absent: then it says so).
    let host = gw.call(&me, "host_exec", args(json!({})));
    assert!(!host.is_error, "{}", host.text);
    assert!(host.text.contains("quota") || host.structured.to_string().contains("quota"));
}

/// A limit ns-hpc gives only half of (a default above the stock max, a max below the stock
/// default) still makes a caps policy the gateway takes: the stock half moves to fit. Before,
/// `cpus = { default = 16 }` became `{ default = 16, max = 8 }`, which the policy refuses.
#[test]
fn half_given_limits_convert_to_caps_that_hold() {
    let home = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("final-defaults.toml")).unwrap();
    let text = text.replace(
        "cpus = { default = 1, max = 8 }\nmemory = { default = 4096, max = 32768 }",
        "cpus = { default = 16 }\nmemory = { max = 2048 }",
    );
    assert!(
        text.contains("cpus = { default = 16 }"),
        "the fixture changed"
    );
    let source = home.path().join("half.toml");
    std::fs::write(&source, text).unwrap();
    let (_, table) = import_and_check_file(home.path(), &source, "half-out.toml");
    let caps = caps(&table);
    assert_eq!(caps["cpus"]["default"].as_integer(), Some(16));
    assert_eq!(caps["cpus"]["max"].as_integer(), Some(16));
    assert_eq!(caps["memory_mb"]["default"].as_integer(), Some(2048));
    assert_eq!(caps["memory_mb"]["max"].as_integer(), Some(2048));
}
