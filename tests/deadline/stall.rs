//! A policy held off its core is not timed out: the deadline is the CPU time guest code uses,
//! not the time a loaded machine keeps its thread (or the epoch ticker's) waiting.
//!
//! The cgroup v1 freezer holds single threads of this process, as a busy login node can: the
//! evaluating thread in the middle of a guest run, and the engine's epoch ticker, which then
//! catches up on the ticks it missed all at once. Each hold is three times the deadline and
//! under its wall-clock backstop (ten deadlines).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hpcgate::policy::PolicyEngine;
use serde_json::json;

use crate::harness::{Spec, call, chain_in, engine, exclusive};

/// A cgroup of the freezer hierarchy to hold threads in, removed when dropped.
struct Freezer {
    dir: PathBuf,
    mount: PathBuf,
}

impl Freezer {
    /// None unless this is root on a machine with the cgroup v1 freezer.
    fn new() -> Option<Freezer> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = mountinfo.lines().find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let options = right.split(' ').nth(2)?;
            let is_freezer =
                right.starts_with("cgroup ") && options.split(',').any(|o| o == "freezer");
            let mount = PathBuf::from(left.split(' ').nth(4)?);
            is_freezer.then_some(mount)
        })?;
        let dir = mount.join(format!("hpcgate-test-stall-{}", std::process::id()));
        fs::create_dir(&dir).ok()?;
        Some(Freezer { dir, mount })
    }

    /// Freezes thread `tid` of this process for `time`, then puts it back where it was.
    /// Nothing is allocated while it is frozen: it may hold the allocator's lock.
    fn hold(&self, tid: u32, time: Duration) {
        let home = fs::read_to_string(format!("/proc/self/task/{tid}/cgroup"))
            .expect("read the thread's cgroups")
            .lines()
            .find_map(|l| {
                Some(
                    l.split_once(":freezer:")?
                        .1
                        .trim_start_matches('/')
                        .to_owned(),
                )
            })
            .expect("the thread's freezer cgroup");
        let held = Held {
            state: self.dir.join("freezer.state"),
            home: self.mount.join(home).join("tasks"),
            tid: tid.to_string(),
        };
        write(&self.dir.join("tasks"), held.tid.as_bytes());
        write(&held.state, b"FROZEN");
        std::thread::sleep(time);
        drop(held);
    }
}

/// A frozen thread: thawed and put back when dropped, a panic in between included.
struct Held {
    state: PathBuf,
    home: PathBuf,
    tid: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        write(&self.state, b"THAWED");
        write(&self.home, self.tid.as_bytes());
    }
}

fn write(path: &Path, what: &[u8]) {
    if let Err(e) = fs::write(path, what) {
        panic!("write {:?} to {path:?}: {e}", String::from_utf8_lossy(what))
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("freezer.state"), "THAWED");
        // A thread left here by a failed hold goes back to the hierarchy's root.
        let left = fs::read_to_string(self.dir.join("tasks")).unwrap_or_default();
        for tid in left.lines() {
            let _ = fs::write(self.mount.join("tasks"), tid);
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

/// This process's threads named `name`.
fn threads_named(name: &str) -> Vec<u32> {
    let tasks = fs::read_dir("/proc/self/task").expect("read /proc/self/task");
    tasks
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
        .filter(|tid: &u32| {
            fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .collect()
}

fn this_thread() -> u32 {
    let link = fs::read_link("/proc/thread-self").expect("read /proc/thread-self");
    let tid = link.file_name().and_then(|t| t.to_str()?.parse().ok());
    tid.expect("a thread id")
}

#[test]
fn a_policy_held_off_its_core_or_its_ticker_held_is_not_timed_out() {
    let _alone = exclusive();
    let Some(freezer) = Freezer::new() else {
        eprintln!("skipped: holding threads needs root and the cgroup v1 freezer");
        return;
    };
    // An engine of its own: holding its ticker holds no other engine's deadlines.
    let settings = engine().settings().clone();
    let before = threads_named("hpcgate-epoch");
    let own = PolicyEngine::new(settings).expect("engine");
    // A thread names itself once it runs.
    let named = Instant::now();
    let ticker = loop {
        let new = threads_named("hpcgate-epoch")
            .into_iter()
            .find(|t| !before.contains(t));
        match new {
            Some(tid) => break tid,
            None if named.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            None => panic!("the new engine's ticker thread has no name"),
        }
    };
    // About a millisecond of arithmetic per evaluation on a reused instance: the thread is in
    // guest code almost all the time, so a hold almost surely lands in a run.
    let busy = Spec::hostile("busy", json!({"behaviour": "busy", "rounds": 1_000_000}))
        .deadline_ms(100)
        .reuse();
    let chain = chain_in(&own, vec![busy]);
    let evaluating = this_thread();
    let held = Duration::from_millis(300);
    let (mut runs, mut slowest) = (0, Duration::ZERO);
    std::thread::scope(|s| {
        let holding = s.spawn(|| {
            for tid in [evaluating, ticker, evaluating, ticker, evaluating, ticker] {
                std::thread::sleep(Duration::from_millis(50));
                freezer.hold(tid, held);
            }
        });
        while !holding.is_finished() {
            let started = Instant::now();
            let outcome = chain.evaluate(&call("submit_job", json!({})));
            slowest = slowest.max(started.elapsed());
            runs += 1;
            let reason = outcome.decision.reason.unwrap_or_default();
            assert!(reason.starts_with("busy="), "evaluation {runs}: {reason}");
        }
    });
    eprintln!("{runs} evaluations through six holds of {held:?}; the slowest took {slowest:?}");
    assert!(
        slowest >= held - Duration::from_millis(50),
        "no evaluation was held: the test did not test"
    );
}
