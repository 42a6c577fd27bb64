//! Shared test support: one policy engine per test binary with the compile cache every test
//! binary shares (each guest is compiled once per build, not once per test), the hostile guests
//! built by `build.rs`, and a compact way to build a chain.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use hpcgate::policy::{
    Call, Chain, ChainPolicy, DecisionKind, EngineSettings, Mode, ModuleSource, PolicyEngine,
};
use serde_json::{Value, json};

#[path = "../shared.rs"]
pub mod shared;

/// The engine shared by every test in this binary.
pub fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        PolicyEngine::new(EngineSettings {
            cache_dir: Some(shared::policy_cache()),
            // Configured snapshots compile a component twice in the background: the tests of
            // them (`policy_snapshot.rs`) use `snapshot_engine`, the rest configure every
            // instance and keep the machine's cores for what they measure.
            snapshots: false,
            ..EngineSettings::default()
        })
        .expect("engine")
    })
}

/// An engine like [`engine`] that starts a slow-to-configure policy's instances from a
/// configured snapshot, as a gateway does.
pub fn snapshot_engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    // An unoptimised host spends 130–210 µs of its own on every `configure` call, near the
    // default threshold; the slow configures these tests snapshot fill 4 MiB and more of
    // ballast (4–16 ms, the guest's own code, whatever the host's build).
    ENGINE.get_or_init(|| snapshot_engine_from(Duration::from_millis(1)))
}

/// An engine that snapshots every policy it can, however cheap its `configure`: for tests of
/// what a snapshot decides, whatever this machine's speed.
pub fn always_snapshot_engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| snapshot_engine_from(Duration::ZERO))
}

fn snapshot_engine_from(threshold: Duration) -> PolicyEngine {
    PolicyEngine::new(EngineSettings {
        snapshots: true,
        snapshot_threshold: threshold,
        ..engine().settings().clone()
    })
    .expect("engine")
}

/// A guest built by the build script: `hostile`, `bad-discriminant`, `bad-utf8`.
pub fn guest(name: &str) -> ModuleSource {
    ModuleSource::Path(PathBuf::from(env!("OUT_DIR")).join(format!("{name}.wasm")))
}

/// A file under `policies/hostile/wat/`.
pub fn wat(name: &str) -> ModuleSource {
    ModuleSource::Path(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../policies/hostile/wat/{name}.wat")),
    )
}

/// One policy of a chain under construction.
pub struct Spec {
    pub name: &'static str,
    pub module: ModuleSource,
    pub config: Value,
    pub mode: Mode,
    pub tenants: Vec<String>,
    pub tools: Vec<String>,
    pub deadline: Duration,
    pub memory_mb: usize,
    pub reuse: bool,
}

impl Spec {
    pub fn new(name: &'static str, module: ModuleSource, config: Value) -> Spec {
        Spec {
            name,
            module,
            config,
            mode: Mode::Enforce,
            tenants: vec!["*".into()],
            tools: vec!["*".into()],
            // Generous: only the tests about deadlines set a tight one, so a loaded CI machine
            // cannot turn a slow evaluation into a spurious timeout.
            deadline: Duration::from_millis(2_000),
            memory_mb: 16,
            reuse: false,
        }
    }

    pub fn stock(name: &'static str, stock: &str, config: Value) -> Spec {
        Spec::new(name, ModuleSource::Stock(stock.into()), config)
    }

    pub fn hostile(name: &'static str, config: Value) -> Spec {
        Spec::new(name, guest("hostile"), config)
    }

    pub fn monitor(mut self) -> Spec {
        self.mode = Mode::Monitor;
        self
    }

    pub fn tenants(mut self, tenants: &[&str]) -> Spec {
        self.tenants = tenants.iter().map(|t| t.to_string()).collect();
        self
    }

    pub fn tools(mut self, tools: &[&str]) -> Spec {
        self.tools = tools.iter().map(|t| t.to_string()).collect();
        self
    }

    pub fn reuse(mut self) -> Spec {
        self.reuse = true;
        self
    }

    pub fn deadline_ms(mut self, ms: u64) -> Spec {
        self.deadline = Duration::from_millis(ms);
        self
    }

    pub fn build(self) -> ChainPolicy {
        self.build_in(engine())
    }

    fn build_in(self, engine: &PolicyEngine) -> ChainPolicy {
        ChainPolicy {
            name: self.name.into(),
            module: engine
                .load(&self.module)
                .unwrap_or_else(|e| panic!("load `{}`: {e}", self.module)),
            settings: self.config.to_string(),
            mode: self.mode,
            tenants: self.tenants,
            tools: self.tools,
            deadline: self.deadline,
            memory_bytes: self.memory_mb << 20,
            reuse: self.reuse,
            prepared: 4,
        }
    }
}

/// Builds a chain, panicking with the reason if it does not build.
pub fn chain(specs: Vec<Spec>) -> Chain {
    Chain::new(specs.into_iter().map(Spec::build).collect())
        .unwrap_or_else(|e| panic!("chain: {e}"))
}

/// As [`chain`], with the policies loaded by `engine`.
pub fn chain_in(engine: &PolicyEngine, specs: Vec<Spec>) -> Chain {
    Chain::new(specs.into_iter().map(|s| s.build_in(engine)).collect())
        .unwrap_or_else(|e| panic!("chain: {e}"))
}

/// Builds a chain and returns the error.
pub fn chain_error(specs: Vec<Spec>) -> String {
    match Chain::new(specs.into_iter().map(Spec::build).collect()) {
        Ok(_) => panic!("the chain was expected to be refused"),
        Err(e) => e.to_string(),
    }
}

/// A call-phase call of `tool` by tenant `chem`.
pub fn call(tool: &str, arguments: Value) -> Call {
    let mut call = Call::new(tool, arguments);
    call.tenant = "chem".into();
    call
}

/// `tenant` submitting `command` with `gpus` GPUs in instance `run1`: the call the example
/// rules (`examples/policies/`) judge.
pub fn submit(tenant: &str, command: &str, gpus: u64) -> Call {
    let mut call = Call::new(
        "submit_job",
        json!({"instance_id": "run1", "command": command, "resources": {"gpus": gpus}}),
    );
    call.tenant = tenant.to_owned();
    call.instance = Some("run1".to_owned());
    call
}

/// Why `chain` denies `call` (it must deny it).
pub fn denial(chain: &Chain, call: &Call) -> String {
    let decision = chain.evaluate(call).decision;
    assert_eq!(decision.decision, DecisionKind::Deny, "{decision:?}");
    decision.reason.expect("a denial says why")
}

/// Serialises the tests that measure time or memory, so they do not disturb each other.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Resident set size of this process, in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// A JavaScript or Python policy built by `scripts/componentize.sh`, once for every test
/// binary ([`shared::componentized`]).
pub fn componentized(lang: &str, source: &str, keep_wasi: bool) -> ModuleSource {
    ModuleSource::Path(shared::componentized(lang, source, keep_wasi))
}
