//! `hpcgate bench gateway` runs end to end (both transports, a real gateway child, and the
//! multi-tenant authenticated HTTP run) and prints its figures as JSON, the gateway's CPU per
//! call included. No timing is asserted:
//! the figures belong in BENCHMARKS.md.

use std::process::Command;

#[test]
fn the_gateway_bench_prints_its_figures_as_json() {
    let cache = crate::support::shared::cache_home();
    let output = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args([
            "bench",
            "gateway",
            "--calls",
            "50",
            "--clients",
            "4",
            "--tenants",
            "3",
            "--json",
        ])
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("HPCGATE_CONFIG")
        .output()
        .expect("run hpcgate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    assert_eq!(
        (report["calls"].as_u64(), report["clients"].as_u64()),
        (Some(50), Some(4))
    );
    for key in ["p50_us", "p99_us", "calls_per_s", "idle_rss_kb"] {
        assert!(
            report["http"][key].as_f64().is_some_and(|v| v > 0.0),
            "http.{key}: {report}"
        );
    }
    for key in ["p50_us", "p99_us", "calls_per_s", "idle_rss_kb"] {
        assert!(
            report["http_tenants"][key]
                .as_f64()
                .is_some_and(|v| v > 0.0),
            "http_tenants.{key}: {report}"
        );
    }
    for key in ["stdio_ping_p50_us", "append_fdatasync_p50_us"] {
        assert!(
            report["floors"][key].as_f64().is_some_and(|v| v > 0.0),
            "floors.{key}: {report}"
        );
    }
    for key in ["p50_us", "p99_us", "idle_rss_kb", "ping_p50_us"] {
        assert!(
            report["stdio"][key].as_f64().is_some_and(|v| v > 0.0),
            "stdio.{key}: {report}"
        );
    }
    // The gateway's CPU per call, from its /proc/<pid>/stat (clock ticks: 0 over so few calls
    // is possible, absent or negative is not).
    for run in ["http", "http_tenants", "stdio"] {
        assert!(
            report[run]["cpu_us_per_call"]
                .as_f64()
                .is_some_and(|v| v >= 0.0),
            "{run}.cpu_us_per_call: {report}"
        );
    }
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 8, "{report}");
    assert!(
        checks
            .iter()
            .all(|c| c["pass"].is_boolean() && c["target"].is_string())
    );
}

/// `--gateway-cpus` confines the gateway (and only it: the append floor still runs on every CPU
/// the bench may use, one at a time); a list that is not one is refused before anything runs.
#[test]
fn the_gateway_bench_confines_the_gateway_to_the_cpus_asked() {
    let allowed = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|line| Some(line.strip_prefix("Cpus_allowed_list:")?.trim().to_owned()))
        .unwrap();
    // The highest CPU this test may use: not CPU 0 unless it is the only one.
    let cpus: Vec<usize> = (allowed.split(','))
        .flat_map(|item| match item.split_once('-') {
            Some((from, to)) => (from.parse().unwrap()..=to.parse().unwrap()).collect(),
            None => vec![item.parse().unwrap()],
        })
        .collect();
    let last = cpus.last().unwrap().to_string();
    let bench = |cpus: &str| {
        Command::new(env!("CARGO_BIN_EXE_hpcgate"))
            .args(["bench", "gateway", "--transport", "stdio", "--calls", "20"])
            .args(["--json", "--gateway-cpus", cpus])
            .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
            .env_remove("HPCGATE_CONFIG")
            .output()
            .expect("run hpcgate")
    };
    let output = bench(&last);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["stdio"]["cpus_allowed"], last.as_str(), "{report}");
    let per_cpu = report["floors"]["append_fdatasync_p50_us_per_cpu"]
        .as_object()
        .unwrap();
    let probed: Vec<usize> = per_cpu.keys().map(|cpu| cpu.parse().unwrap()).collect();
    assert_eq!(probed.len(), cpus.len().min(8), "{report}");
    assert!(probed.iter().all(|cpu| cpus.contains(cpu)), "{report}");
    assert!(
        per_cpu
            .values()
            .all(|us| us.as_f64().is_some_and(|us| us > 0.0))
    );

    for bad in ["1;id", "", "0-", "x", "1,,2", "$(id)"] {
        let output = bench(bad);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(stderr.contains("is not a CPU list"), "{bad:?}: {stderr}");
    }
}
