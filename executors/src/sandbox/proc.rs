//! Process identity from `/proc`, pidfds, and the process tree below a pid.
//!
//! A pid alone is not an identity: pids are reused. [`ProcessIdentity`] pairs the pid with
//! the process start time (clock ticks since boot, field 22 of `/proc/<pid>/stat`) and the
//! boot id, so a recorded supervisor or sandbox is recognised after a gateway restart and a
//! recycled pid is not. Signals go through a pidfd opened *before* the identity is checked
//! again, so the checked process is the one signalled.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A process recognised by pid, start time and boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessIdentity {
    pub pid: i32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// `/proc/sys/kernel/random/boot_id` when the identity was taken.
    pub boot_id: String,
}

impl ProcessIdentity {
    /// The identity of a live process.
    pub fn of(pid: i32) -> io::Result<ProcessIdentity> {
        let stat = read_stat(pid)?;
        Ok(ProcessIdentity {
            pid,
            start_time: stat.start_time,
            boot_id: boot_id()?,
        })
    }

    /// True while this very process exists and is not a zombie.
    pub fn is_alive(&self) -> bool {
        match (read_stat(self.pid), boot_id()) {
            (Ok(stat), Ok(boot)) => {
                boot == self.boot_id && stat.start_time == self.start_time && stat.state != 'Z'
            }
            _ => false,
        }
    }

    /// Opens a pidfd on the process, then checks the identity again: `None` if it is gone.
    pub(crate) fn pidfd(&self) -> Option<PidFd> {
        let fd = PidFd::open(self.pid).ok()?;
        self.is_alive().then_some(fd)
    }
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: i32,
    pub rss_pages: u64,
    pub start_time: u64,
}

/// Parses `/proc/<pid>/stat`; the command name may contain spaces and `)`, so fields are
/// counted after the last `)`.
pub(crate) fn read_stat(pid: i32) -> io::Result<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad stat"))
}

fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // After `)`: field 3 (state) is index 0, so field N is index N - 3.
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
        rss_pages: f.get(21)?.parse().ok()?,
    })
}

fn boot_id() -> io::Result<String> {
    Ok(fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_owned())
}

/// The system call `pid` is blocked in (`/proc/<pid>/syscall`), or `None` while it runs.
/// Reading it needs the right to trace `pid`; an error means it cannot be told.
pub(crate) fn blocked_in(pid: i32) -> io::Result<Option<libc::c_long>> {
    parse_syscall(&fs::read_to_string(format!("/proc/{pid}/syscall"))?)
}

fn parse_syscall(text: &str) -> io::Result<Option<libc::c_long>> {
    match text.split_ascii_whitespace().next() {
        Some("running") => Ok(None),
        Some(nr) => nr
            .parse()
            .map(Some)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not a system call number")),
        None => Err(io::ErrorKind::UnexpectedEof.into()),
    }
}

/// All live descendants of `root` (not `root` itself), with their stat. Walks the
/// `/proc/<pid>/task/<tid>/children` lists, so the cost follows the size of the sandbox, not
/// of the host; falls back to a scan of `/proc` on kernels without those lists.
pub(crate) fn descendants(root: i32) -> Vec<(i32, Stat)> {
    if !Path::new(&format!("/proc/{root}/task/{root}/children")).exists() {
        return descendants_by_scan(root);
    }
    let mut found: Vec<(i32, Stat)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for child in children_of(parent) {
            // Still `parent`'s child: a pid that was reused between the two reads is not.
            if let Ok(stat) = read_stat(child)
                && stat.ppid == parent
                && !found.iter().any(|(p, _)| *p == child)
            {
                found.push((child, stat));
                frontier.push(child);
            }
        }
    }
    found
}

fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

fn descendants_by_scan(root: i32) -> Vec<(i32, Stat)> {
    let mut all: Vec<(i32, Stat)> = Vec::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if let Ok(stat) = read_stat(pid) {
                all.push((pid, stat));
            }
        }
    }
    let mut found: Vec<(i32, Stat)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, stat) in &all {
            if stat.ppid == parent && !found.iter().any(|(p, _)| p == pid) {
                found.push((*pid, *stat));
                frontier.push(*pid);
            }
        }
    }
    found
}

/// Page size in bytes.
#[allow(unsafe_code)]
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant; it has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// A pidfd: a handle on one process that cannot be confused with a later holder of its pid.
#[derive(Debug)]
pub(crate) struct PidFd(OwnedFd);

impl PidFd {
    #[allow(unsafe_code)]
    pub(crate) fn open(pid: i32) -> io::Result<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no pointers.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this fd to us; nobody else owns it.
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Sends `signal`; a process that already exited is not an error.
    #[allow(unsafe_code)]
    pub(crate) fn signal(&self, signal: i32) -> io::Result<()> {
        // SAFETY: pidfd_send_signal with a valid pidfd, a null siginfo and no flags.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ESRCH) {
                return Err(err);
            }
        }
        Ok(())
    }

    pub(crate) fn as_raw(&self) -> i32 {
        self.0.as_raw_fd()
    }

    /// The fd itself: readable (to `poll`, `epoll`) once the process has exited.
    pub(crate) fn into_fd(self) -> OwnedFd {
        self.0
    }

    /// Waits until the process exits; false on timeout.
    pub(crate) fn wait_exit(&self, timeout: Duration) -> bool {
        crate::sandbox::monitor::poll_readable(self.0.as_raw_fd(), timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_parens_in_name_parses() {
        let line = "42 (a) b) (c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1 99 18446744073709551615";
        let stat = parse_stat(line).expect("parses");
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 7);
        assert_eq!(stat.start_time, 123456);
        assert_eq!(stat.rss_pages, 99);
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a test makes a process tree to look at
    fn descendants_are_found_through_children_lists() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .expect("sh");
        // Only this test's own tree is compared: the other tests of this binary start and end
        // children of the same process meanwhile.
        let me = std::process::id() as i32;
        let sh = child.id() as i32;
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut found = descendants(sh);
        while found.is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
            found = descendants(sh);
        }
        let scanned = descendants_by_scan(sh);
        let mine = descendants(me);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            mine.iter().any(|(p, _)| *p == sh),
            "sh under the test: {mine:?}"
        );
        assert!(!found.is_empty(), "sh's sleep: {found:?}");
        let pids = |list: &[(i32, _)]| list.iter().map(|(p, _)| *p).collect::<Vec<_>>();
        let scanned = pids(&scanned);
        assert!(
            pids(&found).iter().all(|p| scanned.contains(p)),
            "{found:?} ⊄ {scanned:?}"
        );
    }

    #[test]
    fn syscall_lines_parse() {
        assert_eq!(parse_syscall("running\n").expect("running"), None);
        assert_eq!(
            parse_syscall("61 0xffffffffffffffff 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f\n")
                .expect("nr"),
            Some(61)
        );
        assert!(parse_syscall("").is_err());
        assert!(parse_syscall("x 0x0").is_err());
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a test makes a process that waits for its child
    fn a_shell_waiting_for_its_child_is_blocked_in_wait4() {
        // A foreground command: the shell blocks in `wait4` (its `wait` builtin would suspend
        // for SIGCHLD instead).
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 5; true"])
            .spawn()
            .expect("sh");
        let sh = child.id() as i32;
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut seen = blocked_in(sh).expect("own child's syscall file");
        while seen != Some(libc::SYS_wait4) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
            seen = blocked_in(sh).expect("own child's syscall file");
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(seen, Some(libc::SYS_wait4));
    }

    #[test]
    fn own_identity_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcessIdentity::of(std::process::id() as i32).expect("own stat");
        assert!(me.is_alive());
        let other = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!other.is_alive());
    }
}
