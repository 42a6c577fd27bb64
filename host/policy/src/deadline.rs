//! How long guest code may run: a policy's deadline is CPU time, the time the run's thread
//! spends computing, not the time the wall clock shows.
//!
//! Guest code (instantiating, `configure`, `evaluate`, a snapshot's accessors) runs
//! synchronously on one thread, and a guest can wait for nothing (WASI's clocks are ready at
//! once, its stdin at end of file), so the time it takes is CPU time plus whatever the machine
//! does not give it. A loaded login node (a build on every core, a `CPUQuota=` on the gateway's
//! unit) can hold a thread off its core for a hundred milliseconds; the epoch ticker, a thread
//! too, can be held off just the same and then catch up at once. By the wall clock either would
//! make an evaluation of a few microseconds a timeout, and a denied call. By the thread's CPU
//! clock it is not.
//!
//! Reading a thread's CPU clock is a system call (about a microsecond), more than a reused
//! instance's whole evaluation, so a run with a deadline of [`FIRST_LOOK`] or more does not
//! read it when it starts. Its epoch deadline first fires after [`FIRST_LOOK`] (between 2 and
//! 3 ms): most runs are over by then. A run still going is looked at: it is counted to have
//! used the wall time up to then, but no more than [`FIRST_LOOK`] and a tick (with the ticker
//! on time it cannot have computed longer; if the run was held, it did not compute that long
//! either), and the CPU clock read then is where the rest is counted from. A shorter deadline
//! reads the CPU clock when the run starts, so it is never charged time it did not compute.
//! Every look adds the CPU time since, and gives the run the ticks its deadline has left; a
//! run whose CPU time reaches the deadline is interrupted. Whatever it used, a run that has held
//! its thread for [`WALL_LIMIT`] deadlines by the wall clock, and at least [`WALL_FLOOR`], is
//! interrupted too: a backstop for a thread the machine starves for a long time, so a call
//! cannot hang on it.
//!
//! What this cannot see is a ticker held off while the guest computes: the epoch stands still
//! and nothing is looked at, as before; the first look then comes late and counts only its
//! [`FIRST_LOOK`] and a tick.

use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use super::instance::GuestState;
use super::ticker::EPOCH_TICK;

/// When a run is first looked at (a shorter deadline reads the CPU clock at its start).
const FIRST_LOOK: Duration = Duration::from_millis(2);

/// A run is interrupted after this many deadlines by the wall clock, whatever CPU it used…
const WALL_LIMIT: u32 = 10;
/// …but not before this long.
const WALL_FLOOR: Duration = Duration::from_secs(1);

/// The clock of the guest run in progress on a store.
#[derive(Debug)]
pub(crate) struct RunClock {
    deadline: Duration,
    began: Instant,
    /// Once read: the thread's CPU time then, and what the run had used by then.
    counted_from: Option<(Duration, Duration)>,
}

impl RunClock {
    pub(crate) fn new() -> RunClock {
        RunClock::started(Duration::ZERO, None)
    }

    /// A run beginning now with `deadline`, its CPU counted from `counted_from` if read.
    fn started(deadline: Duration, counted_from: Option<(Duration, Duration)>) -> RunClock {
        RunClock {
            deadline,
            began: Instant::now(),
            counted_from,
        }
    }

    /// What to do when the epoch deadline fires: interrupt the run, or give it the ticks its
    /// deadline has left.
    fn look(&mut self) -> UpdateDeadline {
        self.decide(self.began.elapsed(), thread_cpu_time())
    }

    /// [`look`](Self::look) at `wall` since the run began, with the thread's CPU clock at `cpu`.
    fn decide(&mut self, wall: Duration, cpu: Duration) -> UpdateDeadline {
        let (cpu_then, used_then) = *self
            .counted_from
            .get_or_insert_with(|| (cpu, wall.min(FIRST_LOOK + EPOCH_TICK)));
        let used = used_then + cpu.saturating_sub(cpu_then);
        let wall_limit = self.deadline.saturating_mul(WALL_LIMIT).max(WALL_FLOOR);
        if used >= self.deadline || wall >= wall_limit {
            return UpdateDeadline::Interrupt;
        }
        UpdateDeadline::Continue(ticks(self.deadline - used).min(ticks(wall_limit - wall)))
    }
}

/// Makes the store look at its runs' clocks when their epoch deadline fires.
pub(crate) fn watch(store: &mut Store<GuestState>) {
    store.epoch_deadline_callback(|mut store| Ok(store.data_mut().clock.look()));
}

/// Starts a guest run on `store` with `deadline` of CPU time; the caller runs it on this thread.
pub(crate) fn start(store: &mut Store<GuestState>, deadline: Duration) {
    let short = deadline < FIRST_LOOK;
    let counted_from = short.then(|| (thread_cpu_time(), Duration::ZERO));
    store.data_mut().clock = RunClock::started(deadline, counted_from);
    store.set_epoch_deadline(if short {
        ticks(deadline)
    } else {
        FIRST_LOOK_TICKS
    });
}

const FIRST_LOOK_TICKS: u64 = (FIRST_LOOK.as_millis() / EPOCH_TICK.as_millis()) as u64 + 1;

/// The ticks after which at least `time` has passed: the next tick may be a moment away, so
/// one more tick makes `N` ms fire between `N` and `N + 1` ms.
fn ticks(time: Duration) -> u64 {
    let whole = time.as_nanos() / EPOCH_TICK.as_nanos();
    u64::try_from(whole).unwrap_or(u64::MAX / 2) + 1
}

/// The CPU time the calling thread has used (zero if the clock cannot be read, which Linux
/// never refuses: a run then counts only its first look's time, and the wall-clock backstop).
pub(crate) fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the valid pointer it is given.
    #[allow(unsafe_code)]
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    match read {
        0 => Duration::new(now.tv_sec as u64, now.tv_nsec as u32),
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn left(update: UpdateDeadline) -> Option<u64> {
        match update {
            UpdateDeadline::Continue(ticks) => Some(ticks),
            _ => None,
        }
    }

    #[test]
    fn a_run_held_off_its_core_is_charged_only_what_it_computed() {
        // Held for 300 ms before its first look, having computed 1 ms: charged the first look's
        // 3 ms at most, then only the CPU it uses.
        let mut run = RunClock::started(100 * MS, None);
        assert_eq!(left(run.decide(300 * MS, 50 * MS)), Some(98));
        // Held again for 500 ms, 1 ms more of CPU.
        assert_eq!(left(run.decide(800 * MS, 51 * MS)), Some(97));
        // It computes the rest of its deadline: interrupted.
        assert_eq!(left(run.decide(900 * MS, 148 * MS)), None);
    }

    #[test]
    fn a_run_that_computes_its_deadline_is_interrupted_when_the_ticks_run_out() {
        let mut run = RunClock::started(20 * MS, None);
        assert_eq!(left(run.decide(2 * MS, 7 * MS)), Some(19));
        assert_eq!(left(run.decide(12 * MS, 17 * MS)), Some(9));
        assert_eq!(left(run.decide(21 * MS, 26 * MS)), None);
    }

    #[test]
    fn a_short_deadline_is_counted_from_the_start_and_not_charged_a_first_look() {
        // 1 ms, its CPU read at the start (10 ms): held for 50 ms having computed 0.5 ms.
        let mut run = RunClock::started(MS, Some((10 * MS, Duration::ZERO)));
        assert_eq!(left(run.decide(50 * MS, 10 * MS + MS / 2)), Some(1));
        assert_eq!(left(run.decide(60 * MS, 11 * MS)), None);
    }

    #[test]
    fn a_run_held_for_ten_deadlines_and_a_second_is_interrupted() {
        let mut run = RunClock::started(200 * MS, None);
        assert_eq!(left(run.decide(MS, Duration::ZERO)), Some(200));
        // Whatever it computed, the ticks never go past the wall-clock limit.
        assert_eq!(left(run.decide(1_995 * MS, MS)), Some(6));
        assert_eq!(left(run.decide(2_000 * MS, MS)), None);
        let mut short = RunClock::started(5 * MS, None);
        assert_eq!(left(short.decide(999 * MS, Duration::ZERO)), Some(2));
        assert_eq!(left(short.decide(1_000 * MS, Duration::ZERO)), None);
    }

    #[test]
    fn a_huge_deadline_neither_overflows_nor_panics() {
        let mut run = RunClock::started(Duration::MAX, None);
        assert!(left(run.decide(MS, MS)).is_some_and(|t| t > 1 << 40));
        assert_eq!(ticks(Duration::MAX), u64::MAX / 2 + 1);
    }

    #[test]
    fn the_cpu_clock_counts_this_threads_computing_not_its_sleeping() {
        let before = thread_cpu_time();
        std::thread::sleep(20 * MS);
        let slept = thread_cpu_time() - before;
        assert!(slept < 10 * MS, "sleeping counted {slept:?}");
        let (before, started) = (thread_cpu_time(), Instant::now());
        while thread_cpu_time() < before + 5 * MS && started.elapsed() < Duration::from_secs(10) {
            std::hint::spin_loop();
        }
        assert!(
            thread_cpu_time() >= before + 5 * MS,
            "computing was not counted"
        );
    }
}
