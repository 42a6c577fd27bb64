//! The example rules of `examples/policies/` in Rust, Rego, Cedar, JavaScript and Python,
//! loaded from their configs as `hpcgate policy test` loads them: each passes the one shared
//! cases file, and the five agree on every call of a larger generated set (replay parity: a
//! recorded log replayed through any of them decides as the Rust version does).

use std::path::PathBuf;

use hpcgate::config::Config;
use hpcgate::policy::cases::{parse_cases, run_cases};
use hpcgate::policy::{Call, Chain, DecisionKind, Phase, PolicyEngine};
use serde_json::{Value, json};

use crate::harness::{componentized, engine, guest};

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/policies")
}

/// The chain of `examples/policies/<config>`; the Rust config's module is the guest this test
/// binary's build script built from `rules-rust/`, the JavaScript and Python configs' are built
/// from `rules.js` and `rules.py` by `scripts/componentize.sh`.
pub(crate) fn example_chain(config: &str) -> Chain {
    example_chain_with(config, false)
}

/// As [`example_chain`], with `reuse_instance` set as given.
pub(crate) fn example_chain_with(config: &str, reuse: bool) -> Chain {
    example_chain_in(engine(), config, reuse)
}

/// As [`example_chain_with`], with the policy loaded by `engine`.
pub(crate) fn example_chain_in(engine: &PolicyEngine, config: &str, reuse: bool) -> Chain {
    let (mut config_file, base) = Config::load(&examples().join(config)).expect("example config");
    let module = match config {
        "rust.toml" => Some(guest("example-rules")),
        "js.toml" => Some(componentized("js", "examples/policies/rules.js", false)),
        "python.toml" => Some(componentized("python", "examples/policies/rules.py", false)),
        _ => None,
    };
    if let Some(module) = module {
        config_file.policies[0].module = module.to_string();
    }
    config_file.policies[0].reuse_instance = reuse;
    // Generous, as in the harness: these tests are about decisions, and a loaded CI machine
    // (the Python tests beside them take whole cores) must not turn a slow fresh instance into
    // a timeout. The deadline is the deadline tests' business (`tests/deadline`).
    config_file.policies[0].deadline_ms = Some(2_000);
    let policies = config_file
        .chain_policies(engine, &base)
        .unwrap_or_else(|e| panic!("{config}: {e}"));
    Chain::new(policies).unwrap_or_else(|e| panic!("{config}: {e}"))
}

const LANGUAGES: [&str; 5] = [
    "rust.toml",
    "rego.toml",
    "cedar.toml",
    "js.toml",
    "python.toml",
];

#[test]
fn every_language_passes_the_shared_cases() {
    let text = std::fs::read_to_string(examples().join("cases.jsonl")).unwrap();
    let (cases, skipped) = parse_cases(&text).unwrap();
    assert_eq!(skipped, 0);
    assert!(cases.len() >= 15);
    for config in LANGUAGES {
        let mismatches = run_cases(&example_chain(config), &cases, None);
        assert!(mismatches.is_empty(), "{config}: {mismatches:#?}");
    }
}

/// Calls across the rules' edges: tenants × tools × paths × commands × GPU counts × phases.
pub(crate) fn generated_calls() -> Vec<Call> {
    let mut calls = Vec::new();
    let paths = [
        "/workspace/inputs",
        "/workspace/inputs/a.csv",
        "/workspace/inputs2/a",
        "inputs",
        "inputs/deep/x",
        "input/x",
        "/workspace/out/inputs/x",
        "/scratch/x",
    ];
    let commands = [
        "make",
        "rm -rf build",
        "rm -r build",
        "echo 'rm -rf'",
        "rm  -rf x",
    ];
    for tenant in ["chem", "bio"] {
        for (tool, read_only) in [
            ("write_file", false),
            ("read_file", true),
            ("delete_path", false),
            ("stat_path", true),
        ] {
            for path in paths {
                calls.push(call(
                    tenant,
                    tool,
                    read_only,
                    json!({"instance_id": "run1", "path": path}),
                ));
            }
        }
        for command in commands {
            for gpus in [None, Some(0), Some(4), Some(5), Some(64)] {
                let mut arguments = json!({"instance_id": "run1", "command": command});
                if let Some(gpus) = gpus {
                    arguments["resources"] = json!({"cpus": 2, "gpus": gpus});
                }
                calls.push(call(tenant, "submit_job", false, arguments));
            }
        }
        for tool in ["submit_job", "write_file", "host_exec"] {
            let mut list = call(tenant, tool, false, json!({}));
            list.phase = Phase::List;
            list.instance = None;
            calls.push(list);
        }
    }
    calls
}

fn call(tenant: &str, tool: &str, read_only: bool, arguments: Value) -> Call {
    let mut call = Call::new(tool, arguments);
    call.tenant = tenant.to_owned();
    call.principal = "alice".to_owned();
    call.instance = Some("run1".to_owned());
    call.read_only = read_only;
    call
}

#[test]
fn every_language_decides_as_the_rust_policy_on_replay() {
    let chains: Vec<(&str, Chain)> = LANGUAGES.iter().map(|c| (*c, example_chain(c))).collect();
    let calls = generated_calls();
    let mut denied = 0;
    for call in &calls {
        let decisions: Vec<(DecisionKind, Option<String>)> = chains
            .iter()
            .map(|(_, chain)| {
                let decision = chain.evaluate(call).decision;
                (decision.decision, decision.policy)
            })
            .collect();
        for ((config, _), decision) in chains.iter().zip(&decisions).skip(1) {
            assert_eq!(
                decision, &decisions[0],
                "{config} differs from rust.toml on {call:?}"
            );
        }
        denied += usize::from(decisions[0].0 == DecisionKind::Deny);
    }
    // Both outcomes are well represented, so agreement is not agreement on "allow".
    assert!(
        denied >= 40 && calls.len() - denied >= 40,
        "{denied} of {}",
        calls.len()
    );
}

#[test]
fn reused_instances_decide_as_fresh_ones() {
    let calls = generated_calls();
    for config in ["rego.toml", "cedar.toml", "js.toml", "python.toml"] {
        let (fresh, reused) = (example_chain(config), example_chain_with(config, true));
        // Twice over: the second pass runs on instances that already judged every call.
        for call in calls.iter().chain(&calls) {
            assert_eq!(
                reused.evaluate(call).decision,
                fresh.evaluate(call).decision,
                "{config}: {call:?}"
            );
        }
    }
}
