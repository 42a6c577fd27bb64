//! Unit tests of the cgroup v1 module: mount and path parsing from fixed text, and, on a host
//! with the v1 hierarchies as root, detection, the stale-group sweep and both kill paths
//! against the real kernel (each says when it skipped).

use super::{Controller, own_dir};
use std::path::PathBuf;

const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /process_api /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
const OWN: &str = "\
8:pids:/user.slice/x
4:memory:/process_api/abc
2:cpu,cpuacct:/
0::/
";

#[test]
fn own_directories_follow_mounts_and_co_mounts() {
    let dir = |c| own_dir(MOUNTINFO, OWN, c);
    assert_eq!(
        dir(Controller::Pids),
        Some(PathBuf::from("/sys/fs/cgroup/pids/user.slice/x"))
    );
    // The mount's root is /process_api: our path is relative to it.
    assert_eq!(
        dir(Controller::Memory),
        Some(PathBuf::from("/sys/fs/cgroup/memory/abc"))
    );
    assert_eq!(
        dir(Controller::Cpu),
        Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
    );
    assert_eq!(dir(Controller::Freezer), None, "not mounted");
    // A path outside the mount's root is not reachable through it.
    let outside = "4:memory:/other/abc\n";
    assert_eq!(own_dir(MOUNTINFO, outside, Controller::Memory), None);
    let prefix_only = "4:memory:/process_api2/abc\n";
    assert_eq!(own_dir(MOUNTINFO, prefix_only, Controller::Memory), None);
}

#[test]
fn detection_agrees_with_the_host() {
    let p = super::parents();
    for (c, d) in [
        (Controller::Pids, &p.pids),
        (Controller::Memory, &p.memory),
        (Controller::Cpu, &p.cpu),
    ] {
        if let Some(d) = d {
            assert!(d.join(c.probe_file()).exists() || d.join("cgroup.procs").exists());
            assert!(
                !d.join(format!("hpcgate-probe-{}-{}", c.name(), std::process::id()))
                    .exists()
            );
        }
    }
}

#[test]
#[allow(clippy::print_stderr)] // a skip is said, never silent
fn only_old_empty_groups_of_dead_creators_are_swept() {
    let Some(parent) = super::parents().pids.clone() else {
        eprintln!("SKIPPED only_old_empty_groups_of_dead_creators_are_swept: no v1 pids");
        return;
    };
    // Beyond pid_max: a creator that cannot be alive.
    let dead = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .expect("pid_max")
        + 1;
    let me = std::process::id();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    let make = |name: String, aged: bool| {
        let dir = parent.join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        if aged {
            std::fs::File::open(&dir)
                .and_then(|f| f.set_modified(old))
                .expect("age");
        }
        dir
    };
    let stale = make(format!("hpcgate-run-{dead}-7"), true);
    let fresh = make(format!("hpcgate-run-{dead}-8"), false);
    let alive = make(format!("hpcgate-run-{me}-9"), true);
    super::sweep_stale(&parent);
    let kept = [stale.exists(), fresh.exists(), alive.exists()];
    for d in [&stale, &fresh, &alive] {
        let _ = std::fs::remove_dir(d);
    }
    assert_eq!(kept, [false, true, true]);
}

/// Starts a shell that keeps forking inside a fresh pids group (plus a freezer group when
/// asked), kills the group the v1 way and checks it is empty and removable.
#[allow(clippy::print_stderr, clippy::disallowed_methods)] // a skip is said; a test process
fn kill_empties_the_group(with_freezer: bool) {
    use super::{V1Group, V1Parents};
    use crate::sandbox::cgroup::JobCgroup;
    use crate::sandbox::spec::Limits;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    let p = super::parents();
    if p.pids.is_none() || (with_freezer && p.freezer.is_none()) {
        eprintln!("SKIPPED kill (freezer: {with_freezer}): no usable v1 pids/freezer hierarchy");
        return;
    }
    let parents = V1Parents {
        pids: p.pids.clone(),
        freezer: if with_freezer {
            p.freezer.clone()
        } else {
            None
        },
        ..V1Parents::default()
    };
    let name = format!("hpcgate-test-kill-{}-{with_freezer}", std::process::id());
    let limits = Limits {
        pids: 32,
        ..Limits::default()
    };
    let cg = JobCgroup::V1(V1Group::create(&parents, &name, &limits).expect("create"));
    let JobCgroup::V1(group) = &cg else {
        unreachable!("built as v1")
    };
    assert_eq!(group.dirs.len(), 1 + usize::from(with_freezer));
    let joiner = cg.joiner().expect("joiner");
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", "while :; do sleep 0.01 & sleep 0.01; done"]);
    // SAFETY: the closure only opens, writes and closes prepared paths (async-signal-safe).
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || joiner.join_self());
    }
    let mut child = cmd.spawn().expect("spawn");
    let until = Instant::now() + Duration::from_secs(5);
    while group.pids_inside().len() < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = group.pids_inside().len();
    cg.kill();
    let left = group.pids_inside();
    let _ = child.kill();
    let _ = child.wait();
    cg.remove();
    let dirs_left: Vec<_> = group.dirs.iter().filter(|(_, d)| d.exists()).collect();
    assert!(
        before >= 2,
        "the shell and a child were in the group: {before}"
    );
    assert!(left.is_empty(), "still in the group after kill: {left:?}");
    assert!(dirs_left.is_empty(), "{dirs_left:?}");
}

#[test]
fn kill_through_the_freezer_empties_the_group() {
    kill_empties_the_group(true);
}

#[test]
fn kill_without_a_freezer_empties_the_group() {
    kill_empties_the_group(false);
}
