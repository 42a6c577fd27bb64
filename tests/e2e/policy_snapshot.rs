//! Configured snapshots: a policy whose `configure` is slow gets its fresh instances from a
//! snapshot of one configured instance. They decide exactly as configured instances do, every
//! one starts where `configure` left off (nothing an evaluation leaves behind survives it), each
//! settings gets its own, and cheap or WASI policies are configured per instance as before.

use std::time::Duration;

use hpcgate::policy::cases::{parse_cases, run_cases};
use hpcgate::policy::{Chain, SnapshotState};
use serde_json::json;

use crate::harness::{Spec, always_snapshot_engine, call, chain_in, guest, snapshot_engine};
use crate::policy_languages::{example_chain_in, generated_calls};

fn chain(specs: Vec<Spec>) -> Chain {
    chain_in(snapshot_engine(), specs)
}

/// An example policy whose instances all start from a snapshot.
fn snapshotted_example(config: &str, reuse: bool) -> Chain {
    settled(example_chain_in(always_snapshot_engine(), config, reuse))
}

/// Long enough for a debug build to compile a Cedar component twice on a loaded machine.
const SETTLE: Duration = Duration::from_secs(600);

fn settled(chain: Chain) -> Chain {
    chain.settle(SETTLE);
    chain
}

fn state(chain: &Chain) -> SnapshotState {
    chain.snapshots().remove(0).1
}

/// What `ballast` should report for `kib` KiB of the hostile guest's pattern.
fn ballast_sum(kib: usize) -> u64 {
    (0..kib * 1024).map(|i| (i % 251) as u64).sum()
}

fn reason(chain: &Chain, tenant: &str) -> String {
    let mut c = call("read_file", json!({}));
    c.tenant = tenant.into();
    chain.evaluate(&c).decision.reason.unwrap_or_default()
}

#[test]
fn cedar_instances_from_the_snapshot_decide_as_configured_ones() {
    let cedar = snapshotted_example("cedar.toml", false);
    assert_eq!(state(&cedar), SnapshotState::Ready);
    let rust = crate::policy_languages::example_chain("rust.toml");

    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies/cases.jsonl"),
    )
    .unwrap();
    let (cases, _) = parse_cases(&text).unwrap();
    let mismatches = run_cases(&cedar, &cases, None);
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    for call in generated_calls() {
        assert_eq!(
            cedar.evaluate(&call).decision.decision,
            rust.evaluate(&call).decision.decision,
            "{call:?}"
        );
    }
    // Reused instances start from the snapshot too, and decide the same.
    let reused = snapshotted_example("cedar.toml", true);
    assert_eq!(state(&reused), SnapshotState::Ready);
    for call in generated_calls() {
        assert_eq!(
            reused.evaluate(&call).decision,
            cedar.evaluate(&call).decision,
            "{call:?}"
        );
    }
}

#[test]
fn every_fresh_instance_starts_where_configure_left_off() {
    // 4 MiB of ballast: `configure` takes milliseconds, so the pool snapshots it.
    let counting = settled(chain(vec![Spec::hostile(
        "count",
        json!({"behaviour": "count", "ballast_kib": 4096}),
    )]));
    assert_eq!(state(&counting), SnapshotState::Ready);
    // Every evaluation after the snapshot is ready sees a fresh count: what an evaluation
    // changes is gone with its instance.
    for _ in 0..200 {
        assert_eq!(reason(&counting, "chem"), "count=1");
    }
    let ballast = settled(chain(vec![Spec::hostile(
        "ballast",
        json!({"behaviour": "ballast", "ballast_kib": 4096}),
    )]));
    assert_eq!(state(&ballast), SnapshotState::Ready);
    for _ in 0..20 {
        assert_eq!(
            reason(&ballast, "chem"),
            format!("ballast={}", ballast_sum(4096))
        );
    }
}

#[test]
fn each_settings_has_its_own_snapshot_and_reuse_stays_per_tenant() {
    let chains: Vec<(usize, Chain)> = [4096, 6144, 8192]
        .into_iter()
        .map(|kib| {
            let spec = Spec::hostile(
                "ballast",
                json!({"behaviour": "ballast", "ballast_kib": kib}),
            );
            (kib, chain(vec![spec]))
        })
        .collect();
    for (kib, chain) in &chains {
        chain.settle(SETTLE);
        assert_eq!(state(chain), SnapshotState::Ready, "{kib} KiB");
        assert_eq!(
            reason(chain, "chem"),
            format!("ballast={}", ballast_sum(*kib))
        );
    }
    // With reuse, a tenant's instance keeps counting from the snapshot's state, and another
    // tenant starts from the snapshot.
    let reused = settled(chain(vec![
        Spec::hostile("count", json!({"behaviour": "count", "ballast_kib": 4096})).reuse(),
    ]));
    assert_eq!(state(&reused), SnapshotState::Ready);
    for n in 1..=5 {
        assert_eq!(reason(&reused, "chem"), format!("count={n}"));
    }
    assert_eq!(reason(&reused, "bio"), "count=1");
}

#[test]
fn cheap_and_wasi_policies_are_configured_per_instance() {
    // And none at all where the engine's settings say so.
    let off = settled(crate::policy_languages::example_chain("cedar.toml"));
    assert_eq!(state(&off), SnapshotState::NotNeeded);

    let cheap = chain(vec![Spec::hostile("count", json!({"behaviour": "count"}))]);
    assert_eq!(state(&cheap), SnapshotState::NotNeeded);
    // A WASI component's state lives partly in the host (its streams): never snapshotted,
    // however slow its `configure`.
    let wasi = chain(vec![Spec::new(
        "wasi",
        guest("hostile-wasi"),
        json!({"behaviour": "count", "ballast_kib": 4096}),
    )]);
    assert_eq!(state(&wasi), SnapshotState::NotNeeded);
    for _ in 0..20 {
        assert_eq!(reason(&wasi, "chem"), "count=1");
    }
}
