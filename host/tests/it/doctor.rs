//! `hpcgate doctor` on this machine, for real: bwrap, a sandboxed `/bin/true`, user
//! namespaces, limits, the state dir, the policies, and Slurm only when enabled. Every path
//! (home, state, config) is a temp dir.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::proxy as proxy_support;

/// Runs `hpcgate doctor --json --config <config>` with `home` as `HOME`.
fn doctor(home: &Path, config: &str) -> (Option<i32>, Value) {
    let file = home.join("doctor.toml");
    std::fs::write(&file, config).unwrap();
    let cache = crate::support::shared::cache_home();
    let output = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["doctor", "--json", "--config"])
        .arg(&file)
        .env("HOME", home)
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("HPCGATE_CONFIG")
        .output()
        .expect("run hpcgate");
    let json = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {output:?}"));
    (output.status.code(), json)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no `{name}` check in {report}"))
}

/// Root, and the cgroup v1 `pids`, `memory` and `cpu` hierarchies mounted (read here from
/// `/proc/self/mountinfo`, not through the code under test).
fn root_with_v1_controllers() -> bool {
    let root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounted = |c: &str| {
        mountinfo.lines().any(|l| {
            l.split_once(" - ").is_some_and(|(_, post)| {
                let mut post = post.split_whitespace();
                post.next() == Some("cgroup")
                    && post.nth(1).is_some_and(|o| o.split(',').any(|x| x == c))
            })
        })
    };
    root && ["pids", "memory", "cpu"].iter().all(|c| mounted(c))
}

fn state_config(home: &Path) -> String {
    format!("state_dir = \"{}\"\n", home.join("state").display())
}

#[test]
fn a_login_node_without_slurm_passes_and_slurm_is_skipped() {
    let home = tempfile::tempdir().unwrap();
    let (code, report) = doctor(home.path(), &state_config(home.path()));
    let names: Vec<_> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bwrap",
            "sandbox",
            "user namespaces",
            "limits",
            "state dir",
            "audit dir",
            "policies",
            "slurm",
            "proxied mcps",
            "telemetry"
        ]
    );
    for name in [
        "bwrap",
        "sandbox",
        "user namespaces",
        "state dir",
        "audit dir",
        "policies",
    ] {
        assert_eq!(check(&report, name)["status"], "pass", "{report:#}");
    }
    let limits = check(&report, "limits");
    assert!(
        limits["status"] == "pass" || limits["status"] == "warn",
        "{limits}"
    );
    let detail = limits["detail"].as_str().unwrap();
    assert!(detail.contains("cgroup"), "names the mechanism: {limits}");
    // As root on a host with the cgroup v1 pids, memory and cpu controllers (and no delegated
    // v2), every limit is held by a v1 controller, pids included.
    if !detail.starts_with("cgroup v2 delegated") && root_with_v1_controllers() {
        assert_eq!(limits["status"], "pass", "{limits}");
        for mechanism in [
            "cpus by cgroup v1 cpu.cfs_quota_us",
            "memory by cgroup v1 memory.limit_in_bytes",
            "pids by cgroup v1 pids.max",
        ] {
            assert!(detail.contains(mechanism), "{mechanism}: {limits}");
        }
        assert!(!detail.contains("NOT enforced"), "{limits}");
    }
    assert_eq!(check(&report, "slurm")["status"], "skip");
    assert_eq!(check(&report, "telemetry")["status"], "skip");
    assert_eq!((code, &report["ok"]), (Some(0), &Value::Bool(true)));
}

#[test]
fn a_collector_that_is_down_is_a_warning_and_one_that_listens_passes() {
    let home = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap().port();
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (port, status) in [(up, "pass"), (down, "warn")] {
        let config = format!(
            "{}[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\n",
            state_config(home.path())
        );
        let (code, report) = doctor(home.path(), &config);
        let telemetry = check(&report, "telemetry");
        assert_eq!(telemetry["status"], status, "{telemetry}");
        assert!(
            telemetry["detail"]
                .as_str()
                .unwrap()
                .contains(&format!(":{port}/v1/traces"))
        );
        if status == "warn" {
            assert!(
                telemetry["hint"]
                    .as_str()
                    .unwrap()
                    .contains("hpcgate_trace_spans_total")
            );
        }
        assert_eq!(
            code,
            Some(0),
            "a warning does not fail the doctor: {report:#}"
        );
    }
}

#[test]
fn slurm_enabled_with_a_missing_bin_dir_fails_with_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("no-slurm-here");
    let config = format!(
        "{}[slurm]\nenabled = true\nbin_dir = \"{}\"\n",
        state_config(home.path()),
        bin.display()
    );
    let (code, report) = doctor(home.path(), &config);
    assert_eq!(code, Some(1), "{report:#}");
    let slurm = check(&report, "slurm");
    assert_eq!(slurm["status"], "fail");
    let detail = slurm["detail"].as_str().unwrap();
    assert!(
        detail.contains("sbatch") && detail.contains(&bin.display().to_string()),
        "{detail}"
    );
    assert!(
        slurm["hint"].as_str().unwrap().contains("`slurm.bin_dir`"),
        "{slurm}"
    );
    assert_eq!(
        check(&report, "sandbox")["status"],
        "pass",
        "the rest still runs"
    );
}

#[test]
fn a_state_dir_others_can_read_fails_and_says_chmod() {
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, report) = doctor(home.path(), &state_config(home.path()));
    assert_eq!(code, Some(1));
    let check = check(&report, "state dir");
    assert_eq!(check["status"], "fail");
    assert!(
        check["hint"]
            .as_str()
            .unwrap()
            .contains(&format!("chmod 700 {}", state.display())),
        "{check}"
    );

    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, report) = doctor(home.path(), &state_config(home.path()));
    assert_eq!(code, Some(0), "{report:#}");
}

/// The audit log's key files, which the gateway refuses to start with when others can read
/// them or they are damaged: the doctor says which and what to do.
#[test]
fn an_audit_key_others_can_read_or_a_damaged_one_fails() {
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("state");
    let audit = state.join("audit");
    std::fs::create_dir_all(&audit).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    drop(hpcgate::audit::AuditLog::open(&audit, hpcgate::audit::AuditOptions::default()).unwrap());
    let key = audit.join(hpcgate::audit::REDACTION_KEY_FILE);
    let (code, report) = doctor(home.path(), &state_config(home.path()));
    assert_eq!(code, Some(0), "{report:#}");

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, report) = doctor(home.path(), &state_config(home.path()));
    assert_eq!(code, Some(1));
    let failed = check(&report, "audit dir");
    assert_eq!(failed["status"], "fail");
    assert!(
        failed.to_string().contains("readable by others")
            && failed["hint"].to_string().contains("chmod 600"),
        "{failed}"
    );

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&key, "half a ke").unwrap();
    let (code, report) = doctor(home.path(), &state_config(home.path()));
    assert_eq!(code, Some(1));
    let failed = check(&report, "audit dir");
    assert!(
        failed.to_string().contains("is not a redaction key")
            && failed["hint"].to_string().contains("backup"),
        "{failed}"
    );
}

#[test]
fn a_missing_bwrap_and_a_bad_policy_fail_by_name() {
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[sandbox]\nbwrap = \"/nonexistent/bwrap\"\n[[policies]]\nname = \"strict\"\nmodule = \"stock:tool-filter\"\n[policies.config]\nallwo = [\"*\"]\n",
        state_config(home.path())
    );
    let (code, report) = doctor(home.path(), &config);
    assert_eq!(code, Some(1));
    let bwrap = check(&report, "bwrap");
    assert_eq!(bwrap["status"], "fail");
    assert!(
        bwrap["hint"].as_str().unwrap().contains("`sandbox.bwrap`"),
        "{bwrap}"
    );
    assert_eq!(check(&report, "sandbox")["status"], "fail");
    let policies = check(&report, "policies");
    assert_eq!(policies["status"], "fail");
    assert!(
        policies["detail"]
            .as_str()
            .unwrap()
            .contains("policy `strict`"),
        "{policies}"
    );
}

#[test]
fn an_invalid_config_is_one_failed_check() {
    let home = tempfile::tempdir().unwrap();
    let (code, report) = doctor(home.path(), "[slurm]\nenabeld = true\n");
    assert_eq!(code, Some(1));
    let config = check(&report, "config");
    assert!(
        config["detail"]
            .as_str()
            .unwrap()
            .contains("unknown key `slurm.enabeld`"),
        "{config}"
    );
}

#[test]
fn proxied_mcps_are_started_and_a_broken_one_fails_by_name() {
    let home = tempfile::tempdir().unwrap();
    let config = format!(
        "{}{}",
        state_config(home.path()),
        proxy_support::test_proxy("t", "")
    );
    let (code, report) = doctor(home.path(), &config);
    let proxies = check(&report, "proxied mcps");
    assert_eq!(proxies["status"], "pass", "{proxies}");
    assert!(
        proxies["detail"]
            .as_str()
            .unwrap()
            .contains("`t` (16 tools)"),
        "{proxies}"
    );
    assert_eq!(code, Some(0), "{report}");

    let broken = format!("{config}[proxied_mcps.gone]\ncommand = \"/nonexistent/server\"\n");
    let (code, report) = doctor(home.path(), &broken);
    let proxies = check(&report, "proxied mcps");
    assert_eq!(proxies["status"], "fail", "{proxies}");
    let detail = proxies["detail"].as_str().unwrap();
    assert!(
        detail.contains("`gone`: proxied server `gone` could not start"),
        "{detail}"
    );
    assert_eq!(code, Some(1));
}
