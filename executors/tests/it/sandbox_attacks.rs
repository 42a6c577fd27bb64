//! Attack table for the bwrap sandbox: each test is one row — the attempt, and the refusal
//! or outcome we require. All rows use the real `/usr/bin/bwrap` (missing → the test fails
//! saying `apt-get install bubblewrap`).
//!
//! | attempt | expected |
//! |---|---|
//! | TIOCSTI into the gateway's terminal | no controlling terminal: new session, `/dev/tty` unopenable |
//! | list host processes | only the sandbox's own pids in `/proc` |
//! | use capabilities / gain privileges | CapEff/CapPrm 0, NoNewPrivs 1 |
//! | nested user namespace | refused |
//! | read, add or use up kernel keys (keyrings are not namespaced) | `keyctl`, `add_key` fail with `ENOSYS` |
//! | read an inherited 0600 fd | fd absent in the sandbox (run_sync and jobs) |
//! | TCP to a host listener on 127.0.0.1 / DNS | refused, listener never sees a connection |
//! | fork bomb | processes capped at `pids`, killed at wall time, host still forks |
//! | memory hog | killed, reported `oom` |
//! | run past wall time with setsid/double-forked daemons | whole tree killed, `timeout` |
//! | daemon left behind by a finished job | gone when the job ends |
//! | output flood | capped at `output_bytes` exactly, `output_cap` |
//! | symlink planted in `/output` pointing at a host secret | host reads only job output |
//! | job dir inside a bind / tampered output file | refused / tail refuses the link |
//! | forged pid identity in the job state | reported `lost`, never signalled |
//! | shell metacharacters and leading `-` in argv | passed as single argv elements |
//! | host `$HOME`, `/etc/shadow`, a big `/tmp` | invisible / absent / capped |
//! | write outside `/workspace`, `/output`, `/tmp`, `/dev/shm` (e.g. `/`, `/etc`, `/dev`); write a read-only extra | refused |
//! | fill `/tmp` or `/dev/shm` (memory) | capped at `tmp_size_mb` |
//!
//! More rows live in their own modules because they need a process of their own (this test
//! binary re-executed for one role): `sandbox_tty.rs` (TIOCSTI with a real controlling
//! terminal), `sandbox_env.rs` (a secret in the gateway's environment),
//! `sandbox_gateway_kill.rs` (gateway SIGKILLed: job survives and is re-attached, `run_sync`
//! sandbox dies).

use crate::sandbox_harness as harness;

use std::io::{ErrorKind, Write};
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use harness::{Instance, gone_within, sh, supervisor};
use hpcgate_executors::sandbox::{
    EndReason, ExitInfo, JobPhase, Network, OutputStream, SandboxError, cancel_job, job_status,
    run_sync, spawn_job, tail, wait_job,
};

fn run(inst: &Instance, script: &str) -> (String, String, hpcgate_executors::sandbox::RunResult) {
    let r = run_sync(&inst.spec, &sh(script), None).expect("sandbox runs");
    (
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
        r,
    )
}

pub(crate) fn token(tag: &str) -> String {
    // Digits only, so `sleep 1001.<token>` is a valid duration and a unique command line.
    let sum: u32 = tag.bytes().map(u32::from).sum();
    format!("{}{sum}", std::process::id() % 10_000)
}

#[test]
fn tiocsti_impossible_without_a_controlling_terminal() {
    let inst = Instance::create();
    let (out, _, _) = run(
        &inst,
        "read -r pid _ _ _ _ sid _ < /proc/self/stat; echo pid=$pid sid=$sid; \
         if (: < /dev/tty) 2>/dev/null; then echo tty-open; else echo no-tty; fi; \
         perl -e 'my $c = \"x\"; ioctl(STDIN, 0x5412, $c) ? print \"injected\\n\" : print \"refused\\n\"'",
    );
    // The session leader is inside the sandbox's pid namespace (a host session would show
    // as 0 here), and there is no controlling terminal to inject into.
    let sid = out.split_whitespace().nth(1).expect("sid");
    assert_ne!(sid, "sid=0", "{out}");
    assert!(out.contains("no-tty"), "{out}");
    assert!(
        out.contains("refused") && !out.contains("injected"),
        "{out}"
    );
}

#[test]
fn host_pids_are_invisible() {
    let inst = Instance::create();
    let (out, _, _) = run(&inst, "ls /proc | grep -c '^[0-9]'; cat /proc/1/comm");
    let mut lines = out.lines();
    let count: u32 = lines.next().expect("count").parse().expect("number");
    assert!(count <= 4, "sandbox sees {count} pids: {out}");
    assert_eq!(
        lines.next(),
        Some("bwrap"),
        "pid 1 is bwrap's reaper, not the host init"
    );
}

#[test]
fn no_capabilities_and_no_new_privileges() {
    let inst = Instance::create();
    let (out, _, _) = run(
        &inst,
        "grep -E '^(CapEff|CapPrm|CapAmb|NoNewPrivs):' /proc/self/status",
    );
    for cap in ["CapEff", "CapPrm", "CapAmb"] {
        assert!(
            out.contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {out}"
        );
    }
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
}

#[test]
fn nested_user_namespaces_are_refused() {
    let inst = Instance::create();
    let (out, err, _) = run(
        &inst,
        "unshare -U true && echo nested-ok || echo refused; unshare -Ur true && echo root-ok || echo refused",
    );
    assert_eq!(out, "refused\nrefused\n", "stderr: {err}");
}

/// Kernel keyrings are not namespaced: a sandbox could read the session keyring of whoever
/// started the gateway, leave keys for another tenant's sandbox, or use up the user's key
/// quota. The seccomp filter answers the key calls `ENOSYS`, and nothing else.
#[test]
fn keyrings_are_out_of_reach() {
    let inst = Instance::create();
    let script = format!(
        "grep '^Seccomp:' /proc/self/status; /usr/bin/python3 -c \"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [('keyctl', {keyctl}, (0, -3, 0)), ('add_key', {add_key}, (b'user', b'k', b'v', 1, -3))]:
    r = libc.syscall(nr, *args)
    print(name, r, os.strerror(ctypes.get_errno()) if r < 0 else 'ok')
print('getpid', libc.syscall({getpid}) > 0)
\"",
        keyctl = libc::SYS_keyctl,
        add_key = libc::SYS_add_key,
        getpid = libc::SYS_getpid,
    );
    let (out, err, _) = run(&inst, &script);
    assert!(
        out.contains("Seccomp:\t2"),
        "a filter is in force: {out} {err}"
    );
    for call in ["keyctl", "add_key"] {
        assert!(
            out.contains(&format!("{call} -1 Function not implemented")),
            "{call}: {out} {err}"
        );
    }
    assert!(out.contains("getpid True"), "other calls work: {out} {err}");
}

#[allow(unsafe_code)]
fn inheritable_secret_fd(inst: &Instance) -> (std::fs::File, i32) {
    use std::os::fd::AsRawFd;
    let path = inst.root.path().join("secret");
    let mut f = std::fs::File::create(&path).expect("secret");
    f.write_all(b"TOP-SECRET-FD").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let f = std::fs::File::open(&path).expect("reopen");
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on an fd we own; clearing FD_CLOEXEC makes it inheritable, the attack.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    (f, fd)
}

#[test]
fn inherited_open_fd_is_invisible_to_run_sync_and_jobs() {
    let inst = Instance::create();
    let (_file, fd) = inheritable_secret_fd(&inst);
    // Control: an ordinary child of the test really inherits the fd, so the attack is live.
    let plain = std::process::Command::new("/bin/cat")
        .arg(format!("/proc/self/fd/{fd}"))
        .output()
        .expect("cat");
    assert_eq!(plain.stdout, b"TOP-SECRET-FD");

    let script = format!(
        "ls /proc/self/fd | tr '\\n' ' '; echo; cat /proc/self/fd/{fd}; cat <&{fd}; echo end"
    );
    let (out, err, _) = run(&inst, &script);
    assert!(
        !out.contains("TOP-SECRET") && !err.contains("TOP-SECRET"),
        "{out}{err}"
    );
    // 0-2 and ls's own directory handle, nothing else.
    assert_eq!(out.lines().next(), Some("0 1 2 3 "), "{out}");

    let dir = inst.job_dir("fd");
    spawn_job(&dir, &inst.spec, &sh(&script), &supervisor()).expect("spawn");
    let s = wait_job(&dir, Duration::from_secs(10)).expect("wait");
    assert_eq!(s.reason, Some(EndReason::Exited));
    let out = tail(&dir, OutputStream::Stdout, 4096).expect("tail").data;
    let out = String::from_utf8_lossy(&out);
    assert!(!out.contains("TOP-SECRET"), "{out}");
    assert_eq!(out.lines().next(), Some("0 1 2 3 "), "{out}");
}

#[test]
fn no_network_tcp_to_host_loopback_fails_and_dns_fails() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let mut inst = Instance::create();
    let script = format!(
        "bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo connected || echo refused; \
         getent hosts example.com >/dev/null && echo resolved || echo no-dns; \
         grep -c ':' /proc/net/dev"
    );
    let (out, _, _) = run(&inst, &script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["refused", "no-dns"], "{out}");
    assert_eq!(lines[2], "1", "only the loopback interface exists: {out}");
    assert_eq!(
        listener.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(ErrorKind::WouldBlock)
    );

    // Control: the same attempt with host networking reaches the listener, so the row above
    // can fail.
    inst.spec.network = Network::Host;
    let (out, _, _) = run(&inst, &script);
    assert!(out.starts_with("connected"), "{out}");
    assert!(
        listener.accept().is_ok(),
        "the host listener saw the control connection"
    );
}

#[test]
fn fork_bomb_is_contained_and_the_host_stays_usable() {
    let mut inst = Instance::create();
    let uid = inst
        .host_uid
        .expect("this row needs root: it runs the sandbox as a dedicated uid");
    inst.spec.limits.pids = 24;
    inst.spec.limits.wall_time = Duration::from_secs(3);
    let dir = inst.job_dir("bomb");
    spawn_job(
        &dir,
        &inst.spec,
        &sh("perl -e 'while (1) { fork }'"),
        &supervisor(),
    )
    .expect("spawn");
    let mut peak = 0;
    while job_status(&dir).expect("status").phase == JobPhase::Running {
        let n = processes_of(uid);
        peak = peak.max(n);
        std::thread::sleep(Duration::from_millis(25));
    }
    let s = job_status(&dir).expect("status");
    // Every process keeps forking until the wall time; forks beyond the limit fail.
    assert_eq!(s.reason, Some(EndReason::Timeout), "{s:?}");
    assert!(
        (16..=24).contains(&peak),
        "peak {peak} processes of uid {uid}"
    );
    // Killed processes may take a moment to leave /proc on a loaded machine (a fresh-clone
    // run once saw one still there as the status was read); none may stay.
    let until = Instant::now() + Duration::from_secs(2);
    while processes_of(uid) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(processes_of(uid), 0, "nothing of the bomb survives");
    let (out, _, _) = run(&Instance::create(), "echo still-fine");
    assert_eq!(out, "still-fine\n");
}

/// Live (non-zombie) processes of a host uid. A killed sandbox's init can linger a moment as
/// a zombie reparented to the host init; it holds no resources and runs nothing.
fn processes_of(uid: u32) -> usize {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .count()
}

#[test]
fn memory_hog_is_killed_and_reported_as_oom() {
    let mut inst = Instance::create();
    inst.spec.limits.memory_mb = 96;
    let hog = "perl -e 'my @a; while (1) { push @a, \"x\" x (4 << 20) }'";
    let (_, _, r) = run(&inst, hog);
    assert_eq!(r.reason, EndReason::Oom, "{r:?}");
    // The watchdog kills bwrap (a signal); a cgroup's OOM killer kills the hog inside, whose
    // status bwrap passes on as 128 + SIGKILL.
    assert!(
        [
            ExitInfo::Signal(libc::SIGKILL),
            ExitInfo::Code(128 + libc::SIGKILL)
        ]
        .contains(&r.exit),
        "{r:?}"
    );
    // Control: the same program under the limit completes.
    let (out, _, r) = run(
        &inst,
        "perl -e 'my $x = \"x\" x (16 << 20); print length($x), \"\\n\"'",
    );
    assert_eq!((r.reason, out.as_str()), (EndReason::Exited, "16777216\n"));
}

#[test]
fn wall_time_kills_the_whole_tree_including_daemons() {
    let mut inst = Instance::create();
    inst.spec.limits.wall_time = Duration::from_secs(1);
    let t = token("walltime");
    let script = format!(
        "setsid sleep 1001.{t} </dev/null >/dev/null 2>&1 & \
         (sh -c 'sleep 1002.{t} </dev/null >/dev/null 2>&1 &') ; sleep 1003.{t}"
    );
    let start = Instant::now();
    let (_, _, r) = run(&inst, &script);
    assert_eq!(r.reason, EndReason::Timeout);
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    assert!(
        gone_within(&format!(".{t}"), Duration::from_secs(2)),
        "a sleeper survived"
    );

    let dir = inst.job_dir("wall");
    spawn_job(&dir, &inst.spec, &sh(&script), &supervisor()).expect("spawn");
    let s = wait_job(&dir, Duration::from_secs(5)).expect("wait");
    assert_eq!(s.reason, Some(EndReason::Timeout), "{s:?}");
    assert!(
        gone_within(&format!(".{t}"), Duration::from_secs(2)),
        "a job sleeper survived"
    );
}

#[test]
fn background_daemon_is_gone_when_the_job_ends() {
    let inst = Instance::create();
    let t = token("daemon");
    let dir = inst.job_dir("daemon");
    let script = format!("setsid sleep 1004.{t} </dev/null >/dev/null 2>&1 & echo started");
    spawn_job(&dir, &inst.spec, &sh(&script), &supervisor()).expect("spawn");
    let s = wait_job(&dir, Duration::from_secs(10)).expect("wait");
    assert_eq!(
        (s.reason, s.exit),
        (Some(EndReason::Exited), Some(ExitInfo::Code(0)))
    );
    assert!(gone_within(&format!("1004.{t}"), Duration::from_secs(2)));
}

#[test]
fn output_flood_is_capped() {
    let mut inst = Instance::create();
    inst.spec.limits.output_bytes = 100_000;
    let (out, _, r) = run(&inst, "yes flood");
    assert_eq!(
        (r.reason, out.len(), r.stdout_truncated),
        (EndReason::OutputCap, 100_000, true)
    );

    let dir = inst.job_dir("flood");
    spawn_job(
        &dir,
        &inst.spec,
        &sh("yes flood & yes flood >&2"),
        &supervisor(),
    )
    .expect("spawn");
    let s = wait_job(&dir, Duration::from_secs(10)).expect("wait");
    assert_eq!(s.reason, Some(EndReason::OutputCap), "{s:?}");
    assert_eq!(s.stdout_bytes + s.stderr_bytes, 100_000);
    let on_disk = std::fs::metadata(dir.join("stdout")).expect("stdout").len()
        + std::fs::metadata(dir.join("stderr")).expect("stderr").len();
    assert_eq!(on_disk, 100_000);
}

#[test]
fn symlink_planted_by_the_job_is_never_followed_by_the_host() {
    let inst = Instance::create();
    let secret = inst.root.path().join("host-secret");
    std::fs::write(&secret, "HOST-SECRET").expect("secret");
    let script = format!(
        "ln -s {s} /output/stdout; ln -s {s} /output/x; ln -s /etc/shadow /output/shadow; \
         ls / | tr '\\n' ' '; echo; echo real",
        s = secret.display()
    );
    let dir = inst.job_dir("plant");
    spawn_job(&dir, &inst.spec, &sh(&script), &supervisor()).expect("spawn");
    wait_job(&dir, Duration::from_secs(10)).expect("wait");
    let out = String::from_utf8(tail(&dir, OutputStream::Stdout, 4096).expect("tail").data)
        .expect("utf8");
    assert!(
        out.ends_with("real\n") && !out.contains("HOST-SECRET"),
        "{out}"
    );
    assert!(
        !out.contains("jobs"),
        "the job directory is not mounted: {out}"
    );

    // A job directory inside a bind is refused before anything runs.
    let inside = inst.output().join("job");
    let err = spawn_job(&inside, &inst.spec, &sh("true"), &supervisor()).expect_err("refused");
    assert!(
        matches!(err, SandboxError::JobDirInsideSandbox { .. }),
        "{err}"
    );

    // Even a tampered job directory does not make tail follow a link.
    std::fs::remove_file(dir.join("stderr")).expect("rm");
    std::os::unix::fs::symlink(&secret, dir.join("stderr")).expect("plant");
    let err = tail(&dir, OutputStream::Stderr, 4096).expect_err("refused");
    assert!(
        matches!(err, SandboxError::OutputNotRegular { .. }),
        "{err}"
    );
}

#[test]
fn forged_identity_is_reported_lost_and_never_signalled() {
    let inst = Instance::create();
    let dir = inst.job_dir("forged");
    spawn_job(&dir, &inst.spec, &sh("echo done"), &supervisor()).expect("spawn");
    wait_job(&dir, Duration::from_secs(10)).expect("wait");
    // Rewrite the state as if a running job's supervisor had our (live) pid but another
    // start time: a recycled pid. The recorded start times are the job's, later than ours but
    // possibly in the same clock tick (a test run alone starts its job within 10 ms): moved on
    // by 10,000 s, they cannot be ours.
    let path = dir.join("state.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    v["phase"] = "running".into();
    for process in ["supervisor", "sandbox"] {
        let started = v[process]["start_time"].as_u64().expect("a start time");
        v[process]["pid"] = std::process::id().into();
        v[process]["start_time"] = (started + 1_000_000).into();
    }
    std::fs::write(&path, serde_json::to_vec(&v).expect("json")).expect("write");
    let s = cancel_job(&dir).expect("cancel");
    assert_eq!(s.reason, Some(EndReason::Lost), "{s:?}");
    // We are still alive: nothing signalled us.
}

#[test]
fn metacharacters_and_leading_dashes_stay_single_arguments() {
    let inst = Instance::create();
    let args: Vec<String> = [
        "/usr/bin/printf",
        "[%s]",
        "; touch /workspace/p1",
        "$(touch /workspace/p2)",
        "`touch /workspace/p3`",
        "a\nb",
        "-n",
        "--help",
        "' \" \\",
    ]
    .map(str::to_owned)
    .to_vec();
    let r = run_sync(&inst.spec, &args, None).expect("runs");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "[; touch /workspace/p1][$(touch /workspace/p2)][`touch /workspace/p3`][a\nb][-n][--help][' \" \\]"
    );
    assert_eq!(
        std::fs::read_dir(&inst.spec.workspace).expect("ws").count(),
        0,
        "nothing ran"
    );
    // A leading `-` as the program is a program name, never a bwrap option.
    let r = run_sync(
        &inst.spec,
        &["--bind".to_owned(), "/".to_owned(), "/x".to_owned()],
        None,
    )
    .expect("runs");
    assert_eq!(r.reason, EndReason::Exited);
    assert_ne!(r.exit, ExitInfo::Code(0));
}

#[test]
fn host_home_shadow_and_unbounded_tmp_are_unavailable() {
    let mut inst = Instance::create();
    inst.spec.tmp_size_mb = 4;
    let (out, _, _) = run(
        &inst,
        "echo HOME=$HOME; ls /root /home 2>/dev/null | wc -l; test -e /etc/shadow && echo shadow || echo no-shadow; \
         head -c 1048576 /dev/zero > /tmp/small && echo -n small-ok-; \
         head -c 8388608 /dev/zero > /tmp/big 2>/dev/null && echo tmp-unbounded || echo tmp-full; \
         head -c 8388608 /dev/zero > /dev/shm/big 2>/dev/null && echo shm-unbounded || echo shm-full",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "HOME=/tmp",
            "0",
            "no-shadow",
            "small-ok-tmp-full",
            "shm-full"
        ],
        "{out}"
    );
}

#[test]
fn killed_supervisor_means_lost_and_its_sandbox_dies() {
    let inst = Instance::create();
    let t = token("lost");
    let dir = inst.job_dir("lost");
    let h = spawn_job(
        &dir,
        &inst.spec,
        &sh(&format!("sleep 1006.{t}")),
        &supervisor(),
    )
    .expect("spawn");
    assert_eq!(
        std::process::Command::new("kill")
            .args(["-9", &h.state.supervisor.pid.to_string()])
            .status()
            .expect("kill")
            .code(),
        Some(0)
    );
    assert!(
        gone_within(&format!("1006.{t}"), Duration::from_secs(2)),
        "sandbox died with its supervisor"
    );
    let s = job_status(&dir).expect("status");
    assert_eq!(
        (s.phase, s.reason),
        (JobPhase::Finished, Some(EndReason::Lost)),
        "{s:?}"
    );
}

#[test]
fn writes_outside_workspace_output_and_tmp_fail_and_extras_are_read_only() {
    let mut inst = Instance::create();
    let extra = inst.root.path().join("dataset");
    std::fs::create_dir(&extra).expect("dataset");
    std::fs::write(extra.join("ro.txt"), "data").expect("file");
    inst.spec
        .extra_ro_binds
        .push(hpcgate_executors::sandbox::Bind {
            source: extra.clone(),
            target: "/data".into(),
        });
    let (out, _, _) = run(
        &inst,
        "for p in /x /usr/x /etc/x /bin/x /proc/x /dev/x /data/x /data/ro.txt /workspace/ok /output/ok /tmp/ok /dev/shm/ok /dev/null; do \
           if (echo hi > $p) 2>/dev/null; then echo \"$p written\"; else echo \"$p refused\"; fi; done; cat /data/ro.txt",
    );
    let expected = "/x refused\n/usr/x refused\n/etc/x refused\n/bin/x refused\n/proc/x refused\n\
        /dev/x refused\n/data/x refused\n/data/ro.txt refused\n/workspace/ok written\n\
        /output/ok written\n/tmp/ok written\n/dev/shm/ok written\n/dev/null written\ndata";
    assert_eq!(out, expected);
    assert_eq!(
        std::fs::read_to_string(extra.join("ro.txt")).expect("ro"),
        "data"
    );
}
