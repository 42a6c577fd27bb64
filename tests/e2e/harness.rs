//! Shared test support: one policy engine per test binary with a compile cache in the target
//! directory (each guest is compiled once per build, not once per test), the hostile guests
//! built by `build.rs`, and a compact way to build a chain.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use hpcgate::policy::{Call, Chain, ChainPolicy, EngineSettings, Mode, ModuleSource, PolicyEngine};
use serde_json::Value;

/// The engine shared by every test in this binary.
pub fn engine() -> &'static PolicyEngine {
    static ENGINE: OnceLock<PolicyEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("policy-cache");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cache)
            .expect("create the cache dir");
        PolicyEngine::new(EngineSettings {
            cache_dir: Some(cache),
            ..EngineSettings::default()
        })
        .expect("engine")
    })
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

    fn build(self) -> ChainPolicy {
        ChainPolicy {
            name: self.name.into(),
            module: engine()
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
