//! The wasmtime engine shared by every policy: its settings, the epoch ticker that gives
//! evaluations a millisecond deadline, and loading modules through the compile cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::cache::{CompileCache, FunctionCache};
use super::module::{LoadError, ModuleSource, PolicyModule};
use super::pool::Maintainer;
use super::ticker::Ticker;

/// Engine-wide settings (`[policy_engine]` in the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    /// Where compiled modules are cached; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// Instance slots in the pooling allocator: prepared, in-flight and dropping instances
    /// of all policies together.
    pub instance_slots: u32,
    /// The largest memory cap any policy may be given, in bytes.
    pub max_memory_bytes: usize,
    /// Whether a policy whose `configure` is slow gets its fresh instances from a configured
    /// snapshot (`snapshot.rs`) instead of configuring each.
    pub snapshots: bool,
    /// How much CPU time `configure` must take (the less of two) for a snapshot to be worth
    /// building: 250 µs by default (`stock:cedar`'s example rules take about a millisecond in a
    /// release build, the stock Rust policies a few microseconds).
    pub snapshot_threshold: Duration,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            cache_dir: default_cache_dir(),
            instance_slots: 1024,
            max_memory_bytes: 256 << 20,
            snapshots: true,
            snapshot_threshold: Duration::from_micros(250),
        }
    }
}

/// Why the engine could not start, when the process has an address-space limit: the pooling
/// allocator reserves every instance slot's address space up front (terabytes, none of it
/// used until a policy runs), which a limit of any usual size refuses with nothing but a byte
/// count in hex.
fn address_space_limited(error: wasmtime::Error, settings: &EngineSettings) -> anyhow::Error {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through the valid pointer it is given.
    #[allow(unsafe_code)]
    let read = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    if read != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return error.into();
    }
    anyhow::anyhow!(
        "the policy engine cannot reserve address space for its {} instance slots: this process \
         may map only {:.1} GiB (RLIMIT_AS, set by `ulimit -v` or systemd's `LimitAS=`). The \
         slots are reserved up front and use no memory until a policy runs; start the gateway \
         without an address-space limit, e.g. `ulimit -v unlimited` ({error:#})",
        settings.instance_slots,
        limit.rlim_cur as f64 / f64::from(1u32 << 30),
    )
}

/// `$XDG_CACHE_HOME/hpcgate/policies`, or `~/.cache/hpcgate/policies`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            (std::env::var_os("HOME").map(PathBuf::from))
                .filter(|h| h.is_absolute())
                .map(|h| h.join(".cache"))
        })?;
    Some(base.join("hpcgate").join("policies"))
}

/// The policy engine: one wasmtime engine, its epoch ticker and the compile cache.
#[derive(Clone)]
pub struct PolicyEngine {
    pub(crate) engine: Engine,
    pub(crate) settings: Arc<EngineSettings>,
    pub(crate) cache: Option<CompileCache>,
    /// Tops up instance pools and drops used instances, off the call path.
    pub(crate) maintainer: Arc<Maintainer>,
    /// Advances the epoch while guest code may run.
    pub(crate) ticker: Arc<Ticker>,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("settings", &self.settings)
            .finish()
    }
}

impl PolicyEngine {
    pub fn new(settings: EngineSettings) -> anyhow::Result<Self> {
        let mut pooling = PoolingAllocationConfig::default();
        pooling
            .total_component_instances(settings.instance_slots)
            .total_core_instances(settings.instance_slots)
            .total_memories(settings.instance_slots)
            .total_tables(settings.instance_slots)
            .max_memory_size(settings.max_memory_bytes)
            // Reset the first pages of a returned slot with memset instead of madvise, so the
            // next instance does not take page faults on the memory every policy touches.
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(64 << 10)
            // On Linux 6.7+ only the pages an instance dirtied are reset, and they stay
            // resident: the next instance in the slot takes no page faults on them.
            .pagemap_scan(Enabled::Auto);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .table_lazy_init(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
        // For profiling policies with `perf`: the guest code's symbols in /tmp/perf-<pid>.map.
        if std::env::var_os("HPCGATE_POLICY_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        // Compiled functions are cached one by one beside the compiled modules.
        if let Some(functions) = (settings.cache_dir.as_deref()).and_then(FunctionCache::open) {
            config.enable_incremental_compilation(Arc::new(functions))?;
        }
        let engine = Engine::new(&config).map_err(|e| address_space_limited(e, &settings))?;
        let cache = settings
            .cache_dir
            .as_ref()
            .map(|dir| CompileCache::new(dir.clone(), &engine));
        let ticker = Arc::new(Ticker::start(engine.clone()));
        // Kept instances may take an eighth of the slots: a component instance takes one slot per
        // core instance in it (two or three for a typical policy), and fresh, in-flight and
        // retiring instances need the rest.
        let maintainer = Maintainer::start(settings.instance_slots as usize / 8);
        Ok(PolicyEngine {
            engine,
            settings: Arc::new(settings),
            cache,
            maintainer,
            ticker,
        })
    }

    /// The settings the engine was made with.
    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    /// Loads, validates and compiles a policy component (through the cache).
    pub fn load(&self, source: &ModuleSource) -> Result<PolicyModule, LoadError> {
        PolicyModule::load(self, self.cache.as_ref(), source)
    }

    /// Whether the epoch ticker rests: no guest code has run for a while, so no thread wakes
    /// every millisecond. The next evaluation wakes it with its whole deadline.
    pub fn epoch_resting(&self) -> bool {
        self.ticker.resting()
    }
}
