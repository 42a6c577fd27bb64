//! Attack row: TIOCSTI into the gateway's terminal. The "gateway" (this binary re-executed
//! for its `#[ignore]`d role test, with `HPCGATE_SANDBOX_TTY_ROLE`) gets a real controlling terminal (a pty); an ordinary
//! child can open `/dev/tty` (the control: the attack surface is real), the sandboxed command
//! cannot, and its TIOCSTI attempt fails.

use crate::sandbox_harness as harness;

use std::io::Write;
use std::process::{Command, Stdio};

use harness::{Instance, sh};
use hpcgate_executors::sandbox::{SandboxSpec, run_sync};

use crate::reexec;

const ROLE: &str = "HPCGATE_SANDBOX_TTY_ROLE";
const PROBE: &str = "if (: < /dev/tty) 2>/dev/null; then echo tty-open; else echo no-tty; fi; \
    perl -e 'open(my $t, \"+<\", \"/dev/tty\") or do { print \"refused\\n\"; exit }; \
    my $c = \"x\"; print ioctl($t, 0x5412, $c) ? \"injected\\n\" : \"refused\\n\"'";

/// Makes this process a session leader with a fresh pty as its controlling terminal.
#[allow(unsafe_code)]
fn acquire_controlling_tty() -> std::fs::File {
    // SAFETY: plain libc calls on fds we own; ptsname's static buffer is copied at once and
    // no other thread calls it.
    unsafe {
        assert!(libc::setsid() > 0, "setsid");
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0 && libc::grantpt(master) == 0 && libc::unlockpt(master) == 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(master)).to_owned();
        // Opened without O_NOCTTY by a session leader: it becomes the controlling terminal.
        let slave = libc::open(name.as_ptr(), libc::O_RDWR);
        assert!(slave >= 0, "open slave");
        libc::close(slave);
        std::os::fd::FromRawFd::from_raw_fd(master)
    }
}

#[test]
#[ignore = "the gateway's role, run in a process of its own by tiocsti_into_the_gateway_terminal_is_impossible"]
fn terminal_role_when_reexecuted() {
    let Some(spec) = std::env::var_os(ROLE) else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: the role of tiocsti_into_the_gateway_terminal_is_impossible, which sets {ROLE}"
        );
        return;
    };
    let spec: SandboxSpec = serde_json::from_str(spec.to_str().expect("utf8")).expect("spec");
    let _master = acquire_controlling_tty();
    let control = Command::new("/bin/sh")
        .args(["-c", PROBE])
        .stdin(Stdio::null())
        .output()
        .expect("control");
    let sandboxed = run_sync(&spec, &sh(PROBE), None).expect("sandbox");
    let mut out = std::io::stdout();
    out.write_all(b"control:").expect("stdout");
    out.write_all(&control.stdout).expect("stdout");
    out.write_all(b"sandbox:").expect("stdout");
    out.write_all(&sandboxed.stdout).expect("stdout");
}

#[test]
fn tiocsti_into_the_gateway_terminal_is_impossible() {
    let inst = Instance::create();
    let out = reexec("sandbox_tty::terminal_role_when_reexecuted")
        .arg("--nocapture")
        .env(ROLE, serde_json::to_string(&inst.spec).expect("json"))
        .stdin(Stdio::null())
        .output()
        .expect("role");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("control:tty-open\n"),
        "the control must reach the terminal, else this row proves nothing: {text}"
    );
    // Kernels with dev.tty.legacy_tiocsti = 0 refuse TIOCSTI to everyone.
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti");
    if legacy.map_or(true, |v| v.trim() != "0") {
        assert!(text.contains("control:tty-open\ninjected\n"), "{text}");
    }
    assert!(text.contains("sandbox:no-tty\nrefused\n"), "{text}");
}
