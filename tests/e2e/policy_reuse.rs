//! Instance reuse (`reuse_instance`): a tenant's calls reuse configured instances, concurrent
//! calls each get their own, tenants never share one, kept instances stay within the engine's
//! budget, and the stock chain — which reuses by default — decides exactly as on fresh instances.

use std::collections::BTreeMap;
use std::path::Path;

use hpcgate::config::{Config, DEFAULT_CONFIG};
use hpcgate::policy::{Call, Chain, ChainPolicy, EngineSettings, Phase, PolicyEngine};
use serde_json::json;

use crate::harness::{Spec, call, chain, engine, exclusive, guest};

/// `count=N` → N.
fn count(chain: &Chain, call: &Call) -> u32 {
    let reason = chain.evaluate(call).decision.reason.unwrap_or_default();
    let n = reason.strip_prefix("count=");
    n.and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a count: {reason}"))
}

/// For each count seen, how often: an instance used only by one tenant shows that tenant 1, 2,
/// 3, … in turn, so no count can be seen more often than the one before it.
fn assert_each_instance_counts_up(tenant: &str, counts: &[u32]) -> BTreeMap<u32, usize> {
    let mut seen = BTreeMap::new();
    for n in counts {
        *seen.entry(*n).or_insert(0) += 1;
    }
    for (n, times) in &seen {
        let before = if *n == 1 {
            usize::MAX
        } else {
            seen.get(&(n - 1)).copied().unwrap_or(0)
        };
        assert!(
            *times <= before,
            "{tenant}: count={n} seen {times} times but count={} {before} times: an instance \
             came from elsewhere ({seen:?})",
            n - 1
        );
    }
    seen
}

#[test]
fn concurrent_calls_of_a_tenant_each_reuse_their_own_instance_and_tenants_never_share() {
    // Eight busy threads: not beside the tests that measure time or memory.
    let _exclusive = exclusive();
    // The harness prepares 4 instances ahead, so a tenant may keep 4.
    let reused = chain(vec![
        Spec::hostile("count", json!({"behaviour": "count"})).reuse(),
    ]);
    let per_thread = 100;
    let counts: Vec<(String, Vec<u32>)> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let tenant = if i % 2 == 0 { "chem" } else { "bio" };
                let reused = &reused;
                s.spawn(move || {
                    let mut c = call("read_file", json!({}));
                    c.tenant = tenant.into();
                    let counts = (0..per_thread).map(|_| count(reused, &c)).collect();
                    (tenant.to_owned(), counts)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for tenant in ["chem", "bio"] {
        let all: Vec<u32> = (counts.iter())
            .filter(|(t, _)| t == tenant)
            .flat_map(|(_, c)| c.clone())
            .collect();
        assert_eq!(all.len(), 4 * per_thread);
        let seen = assert_each_instance_counts_up(tenant, &all);
        // Four threads of the tenant never hold more than four instances, and each of them is
        // kept: a fresh one (count=1) at most four times, not once per call.
        let fresh = seen.get(&1).copied().unwrap_or(0);
        assert!(
            (1..=4).contains(&fresh),
            "{tenant}: {fresh} fresh instances: {seen:?}"
        );
    }
}

/// The `count` guest as a reusing policy, loaded into `engine`.
fn counting(engine: &PolicyEngine) -> Chain {
    let module = engine
        .load(&guest("hostile"))
        .expect("load the hostile guest");
    Chain::new(vec![ChainPolicy {
        name: "count".into(),
        module,
        settings: json!({"behaviour": "count"}).to_string(),
        mode: Default::default(),
        tenants: vec!["*".into()],
        tools: vec!["*".into()],
        deadline: std::time::Duration::from_millis(100),
        memory_bytes: 16 << 20,
        reuse: true,
        prepared: 2,
    }])
    .expect("chain")
}

#[test]
fn kept_instances_stay_within_an_eighth_of_the_engine_slots_and_a_dropped_chain_returns_them() {
    let engine = PolicyEngine::new(EngineSettings {
        cache_dir: Some(crate::harness::shared::policy_cache()),
        instance_slots: 128,
        ..EngineSettings::default()
    })
    .expect("engine");
    let tenant_call = |n: usize| {
        let mut c = call("read_file", json!({}));
        c.tenant = format!("t{n}");
        c
    };
    let second_counts = |chain: &Chain, tenants: usize| -> Vec<u32> {
        (0..tenants)
            .map(|n| {
                assert_eq!(count(chain, &tenant_call(n)), 1, "t{n} starts fresh");
                count(chain, &tenant_call(n))
            })
            .collect()
    };
    let first = counting(&engine);
    let seconds = second_counts(&first, 24);
    // 128 slots: 16 instances may be kept. The first 16 tenants keep theirs; the rest run
    // fresh every time (slower, and still correct).
    assert_eq!(seconds[..16], [2; 16]);
    assert_eq!(seconds[16..], [1; 8]);
    drop(first);
    let second = counting(&engine);
    let again = second_counts(&second, 24);
    assert_eq!(again[..16], [2; 16], "the budget came back");
}

/// Calls that each stock policy of the default chain allows, denies or rewrites.
fn stock_calls() -> Vec<Call> {
    let arguments = [
        ("stat_path", json!({"instance_id": "a", "path": "data.txt"})),
        (
            "read_file",
            json!({"instance_id": "a", "path": "home/.ssh/id_rsa"}),
        ),
        (
            "write_file",
            json!({"instance_id": "a", "path": "src/.git/config", "content": "x"}),
        ),
        (
            "write_file",
            json!({"instance_id": "a", "path": "notes.md", "content": "x"}),
        ),
        (
            "move_path",
            json!({"instance_id": "a", "source": "a", "destination": ".git/x"}),
        ),
        ("host_exec", json!({"key": "quota"})),
        ("submit_job", json!({"instance_id": "a", "command": "make"})),
        (
            "submit_job",
            json!({"instance_id": "a", "command": "make", "resources": {"cpus": 64, "gpus": 2}}),
        ),
        (
            "submit_job",
            json!({"instance_id": "a", "command": "make", "resources": {"cpus": 2}}),
        ),
        ("list_instances", json!({})),
    ];
    let mut calls = Vec::new();
    for tenant in ["chem", "bio"] {
        for (tool, args) in &arguments {
            let mut c = call(tool, args.clone());
            c.tenant = tenant.into();
            calls.push(c.clone());
            c.phase = Phase::List;
            c.arguments = serde_json::Map::new();
            calls.push(c);
        }
    }
    calls
}

#[test]
fn the_default_chain_reuses_instances_and_decides_exactly_as_on_fresh_ones() {
    let config = Config::parse(DEFAULT_CONFIG, "defaults").expect("the defaults parse");
    let policies = config
        .chain_policies(engine(), Path::new("."))
        .expect("the stock policies load");
    assert!(policies.len() >= 3);
    assert!(
        policies.iter().all(|p| p.reuse),
        "every stock policy reuses"
    );
    let fresh = Chain::new(
        (policies.iter().cloned())
            .map(|p| ChainPolicy { reuse: false, ..p })
            .collect(),
    )
    .expect("fresh chain");
    let reused = Chain::new(policies).expect("reusing chain");
    let calls = stock_calls();
    let expected: Vec<_> = calls.iter().map(|c| fresh.evaluate(c).decision).collect();
    let kinds: std::collections::BTreeSet<String> = expected
        .iter()
        .map(|d| format!("{:?}", d.decision))
        .collect();
    assert_eq!(
        kinds.len(),
        3,
        "allow, deny and rewrite are all exercised: {kinds:?}"
    );
    // Forwards, backwards and interleaved, many times: a kept instance has seen every other call
    // of its tenant before it decides.
    for round in 0..20 {
        let order: Vec<usize> = match round % 3 {
            0 => (0..calls.len()).collect(),
            1 => (0..calls.len()).rev().collect(),
            _ => (0..calls.len())
                .map(|i| (i * 7 + round) % calls.len())
                .collect(),
        };
        for i in order {
            let decided = reused.evaluate(&calls[i]).decision;
            assert_eq!(decided, expected[i], "round {round}, call {i}");
        }
    }
}
