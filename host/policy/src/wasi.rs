//! WASI for policies built for a WASI target (Rust `wasm32-wasip2`, the componentizers of other
//! languages). Such a component imports WASI's cli, io, clocks, random and filesystem interfaces
//! even when the policy never uses them. They are linked from wasmtime-wasi with a context that
//! gives nothing away and keeps decisions deterministic, so offline replay stays exact:
//!
//! - no preopened directory, environment variable or argument; stdin is at end of file, and the
//!   first lines written to stdout and stderr during an evaluation become its log lines (a Rust
//!   guest's panic message among them), the rest is dropped;
//! - no network: a component importing `wasi:sockets` is refused at load (see `module.rs`);
//! - both clocks stand still at zero (the wall clock at 1970-01-01T00:00:00Z), and a clock's
//!   pollable is ready at once: a sleep returns immediately instead of holding the evaluating
//!   thread, where the evaluation deadline (which interrupts only WebAssembly) could not reach it;
//! - randomness comes from generators seeded with constants: a fresh instance draws the same
//!   numbers every time;
//! - at most [`MAX_RESOURCES`] live resources (streams, pollables) and [`MAX_RANDOM_BYTES`] per
//!   request for random bytes, so a guest cannot grow host memory outside its memory cap.
//!
//! JavaScript and Python policies (`hpcgate policy new --lang js|python`,
//! `scripts/componentize.sh`) are built with their componentizer's option that stubs WASI out
//! (jco's QuickJS backend with `--backend-qjs-stub-wasi`, `componentize-py --stub-wasi`): every
//! WASI import becomes a trap inside the component, which then imports only the hpcgate world.
//! That is defence in depth and a smaller component, not the guarantee: the host cannot know how
//! a `.wasm` was built, so this context is what holds for any component that does import WASI
//! (a JS build without the stubs gets clocks at zero and no files), and one that imports more
//! (componentize-py without `--stub-wasi` imports `wasi:sockets`, jco's SpiderMonkey backend
//! `wasi:http`) is refused at load, before it is compiled, naming the option (`module.rs`).
//!
//! The linked functions are wasmtime-wasi's synchronous ones, which block on a Tokio runtime
//! for their I/O: they may run on any thread except one that drives an async runtime (see
//! [`Chain::imports_wasi`](super::Chain::imports_wasi)).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, OutputStream, Pollable, StreamResult, subscribe};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView};

use super::instance::GuestState;

/// The WASI packages a policy may import, as import-name prefixes.
pub(crate) const PROVIDED: [&str; 5] = [
    "wasi:cli/",
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:filesystem/",
];

/// Live resources (streams, pollables, descriptors) one instance may hold at once.
pub(crate) const MAX_RESOURCES: usize = 256;

/// The most random bytes one call may ask for (each is made in host memory first).
pub(crate) const MAX_RANDOM_BYTES: u64 = 64 << 10;

/// The seeds of the two random generators (any constants would do).
const SECURE_SEED: u64 = 0x6870_6367_6174_6531;
const INSECURE_SEED: u64 = 0x6870_6367_6174_6532;

/// Bytes of stdout and of stderr kept per evaluation.
const MAX_OUTPUT: usize = 4096;

/// What a WASI policy's store carries besides [`GuestState`]'s own fields.
pub(crate) struct WasiState {
    ctx: WasiCtx,
    table: ResourceTable,
    stdout: Captured,
    stderr: Captured,
}

impl WasiState {
    pub(crate) fn new() -> WasiState {
        let (stdout, stderr) = (Captured::default(), Captured::default());
        let ctx = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(StoppedClock)
            .monotonic_clock(StoppedClock)
            .secure_random(StdRng::seed_from_u64(SECURE_SEED))
            .insecure_random(StdRng::seed_from_u64(INSECURE_SEED))
            .insecure_random_seed(u128::from(INSECURE_SEED))
            .max_random_size(MAX_RANDOM_BYTES)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        WasiState {
            ctx,
            table,
            stdout,
            stderr,
        }
    }

    /// The lines written to stdout and stderr since the last call, as `stdout: …` and
    /// `stderr: …`.
    pub(crate) fn take_output(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        for (name, captured) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = std::mem::take(&mut *captured.lock());
            let text = String::from_utf8_lossy(&bytes);
            lines.extend(
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| format!("{name}: {l}")),
            );
        }
        lines
    }

    pub(crate) fn view(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// Links WASI into a policy's linker: wasmtime-wasi's synchronous functions, with the monotonic
/// clock replaced by one whose pollables are ready at once.
pub(crate) fn add_to_linker(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    linker.allow_shadowing(true);
    let linked = monotonic_clock::add_to_linker::<GuestState, Stopped>(linker, |state| {
        StoppedView(&mut state.wasi().table)
    });
    linker.allow_shadowing(false);
    linked
}

/// An output stream that keeps the first [`MAX_OUTPUT`] bytes written and drops the rest; it
/// never blocks and never fails.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        // WASIp3 streams, which hpcgate does not link.
        Box::new(tokio::io::sink())
    }
}

impl OutputStream for Captured {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut kept = self.lock();
        let room = MAX_OUTPUT.saturating_sub(kept.len());
        kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_OUTPUT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Captured {
    async fn ready(&mut self) {}
}

/// A clock that reads zero forever.
struct StoppedClock;

impl HostWallClock for StoppedClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for StoppedClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        0
    }
}

/// `wasi:clocks/monotonic-clock` for policies: stopped at zero, every subscription ready now.
struct Stopped;

impl HasData for Stopped {
    type Data<'a> = StoppedView<'a>;
}

struct StoppedView<'a>(&'a mut ResourceTable);

impl StoppedView<'_> {
    fn ready_now(&mut self) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = self.0.push(ReadyNow)?;
        subscribe(self.0, ready)
    }
}

impl monotonic_clock::Host for StoppedView<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(HostMonotonicClock::now(&StoppedClock))
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(HostMonotonicClock::resolution(&StoppedClock))
    }

    fn subscribe_instant(
        &mut self,
        _when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.ready_now()
    }

    fn subscribe_duration(
        &mut self,
        _duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.ready_now()
    }
}

/// A pollable that is always ready.
struct ReadyNow;

#[wasmtime_wasi::async_trait]
impl Pollable for ReadyNow {
    async fn ready(&mut self) {}
}
