//! The epoch ticker: advances the engine's epoch every [`EPOCH_TICK`] while guest code may run,
//! which is when a run's deadline is looked at (`deadline.rs`: each look counts the run's CPU
//! time, so a late tick stretches nothing and a catch-up charges nothing).
//!
//! A gateway is idle most of the time, and a thread waking a thousand times a second costs CPU
//! and keeps the core from resting. So the ticker rests (parks) once no guest code has begun
//! and none has run for [`REST_AFTER`], and the next guest run wakes it. A deadline counts
//! ticks from the epoch at which it was set, and the epoch does not move while the ticker
//! rests. The run that wakes it notes when it began, and the ticker counts its ticks from
//! then, catching up at once on the milliseconds it took to wake (a millisecond or two on a
//! virtual machine whose idle core was halted): the epoch stays a clock of real milliseconds,
//! and that run is looked at when it would have been without the rest. A run that began while the ticker
//! was waking counts from the same clock, as does one that begins while a busy ticker is late.
//!
//! The hand-off cannot lose a wake-up: a guest run counts itself in `begun` and then looks at
//! `resting`; the ticker sets `resting` and then looks at `begun` (all sequentially
//! consistent). Whichever comes second sees the other: either the ticker does not park, or
//! the run unparks it (an unpark before the park makes the park return at once). Nor can a
//! wake-up time outlive its rest: the ticker clears it before it sets `resting`, and a run
//! that saw `resting` has noted its time before its guard exists, so before the ticker can
//! rest again.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// How often the epoch advances: the resolution of evaluation deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// How long the ticker goes on after the last guest run before it rests.
const REST_AFTER: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// Guest runs begun so far.
    begun: AtomicU64,
    /// Guest runs going on now.
    running: AtomicUsize,
    resting: AtomicBool,
    /// When the first run that found the ticker resting began.
    woken_for: Mutex<Option<Instant>>,
}

/// Owns the ticker thread; stops it when dropped.
pub(crate) struct Ticker {
    shared: Arc<Shared>,
    thread: Thread,
}

/// A guest run in progress: the ticker ticks until it is dropped.
pub(crate) struct GuestRun<'a>(&'a Shared);

impl Drop for GuestRun<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, SeqCst);
    }
}

impl Ticker {
    pub(crate) fn start(engine: Engine) -> Ticker {
        let shared = Arc::new(Shared::default());
        let ticking = shared.clone();
        let handle = std::thread::Builder::new()
            .name("hpcgate-epoch".into())
            .spawn(move || tick(&engine, &ticking))
            .expect("spawn the epoch ticker thread");
        Ticker {
            shared,
            thread: handle.thread().clone(),
        }
    }

    /// Marks guest code as running (instantiate, `configure`, `evaluate`) until the guard is
    /// dropped, waking the ticker if it rests.
    pub(crate) fn guest_run(&self) -> GuestRun<'_> {
        let shared = &*self.shared;
        shared.begun.fetch_add(1, SeqCst);
        shared.running.fetch_add(1, SeqCst);
        if shared.resting.load(SeqCst) {
            shared.woken_for().get_or_insert_with(Instant::now);
            self.thread.unpark();
        }
        GuestRun(shared)
    }

    /// Whether the ticker rests (no guest code for a while).
    pub(crate) fn resting(&self) -> bool {
        self.shared.resting.load(SeqCst)
    }
}

impl Shared {
    fn woken_for(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.woken_for
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        self.thread.unpark();
    }
}

fn tick(engine: &Engine, shared: &Shared) {
    let rest_after = (REST_AFTER.as_nanos() / EPOCH_TICK.as_nanos()) as u32;
    let (mut seen, mut idle) = (0, 0);
    // Ticks follow the wall clock, not the sum of sleeps (each oversleeps a little), and a
    // late thread catches up: the epoch counts real milliseconds.
    let mut next = Instant::now();
    while !shared.stop.load(SeqCst) {
        next += EPOCH_TICK;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        engine.increment_epoch();
        let begun = shared.begun.load(SeqCst);
        if begun != seen || shared.running.load(SeqCst) > 0 {
            (seen, idle) = (begun, 0);
            continue;
        }
        idle += 1;
        if idle < rest_after {
            continue;
        }
        *shared.woken_for() = None;
        shared.resting.store(true, SeqCst);
        if shared.begun.load(SeqCst) == seen && !shared.stop.load(SeqCst) {
            std::thread::park();
        }
        let woken_for = shared.woken_for().take();
        shared.resting.store(false, SeqCst);
        // Ticks count from when the waking run began: the loop catches up on the time since.
        idle = 0;
        next = woken_for.map_or_else(Instant::now, |began| began.min(Instant::now()));
    }
}
