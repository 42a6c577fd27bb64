//! `hpcgate instance|bwrap|clean` as a user runs them: the real binary, a temp config and
//! state directory, real bwrap sandboxes and supervised jobs. Every command goes through the
//! gateway (or, for the few without a tool, the CLI's own audit records) with the local user
//! as principal.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A config file over a temp state directory, and the binary run against it.
struct Gate {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Gate {
    /// The embedded defaults (stock policies on) plus `extra`.
    fn new(extra: &str) -> Gate {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("gateway.toml");
        let text = format!(
            "state_dir = {:?}\n{extra}",
            dir.path().join("state").display().to_string()
        );
        std::fs::write(&config, text).unwrap();
        Gate { dir, config }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hpcgate"));
        // `--config` right after the top-level command: it is global to its subcommands.
        command
            .arg(args[0])
            .arg("--config")
            .arg(&self.config)
            .args(&args[1..])
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path().join("home"))
            .env("USER", "cli-tester")
            .env("XDG_CACHE_HOME", crate::support::shared::cache_home())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("HPCGATE_CONFIG");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("run hpcgate")
    }

    /// Runs with `input` on stdin.
    fn run_with_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run hpcgate");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Every audit record, oldest first.
    fn audit(&self) -> Vec<Value> {
        let mut files: Vec<_> = std::fs::read_dir(self.dir.path().join("state/audit"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|f| {
                std::fs::read_to_string(f)
                    .unwrap()
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect::<Vec<Value>>()
            })
            .collect()
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts the exit code, showing both streams if it differs.
#[track_caller]
fn code(output: &Output, expected: i32) {
    assert_eq!(
        output.status.code(),
        Some(expected),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

/// The job id in `Job <id>: <status>`.
fn job_id(output: &Output) -> String {
    let text = stdout(output);
    let line = text
        .lines()
        .find(|l| l.starts_with("Job "))
        .unwrap_or_else(|| panic!("no job line in {text}"));
    line["Job ".len()..].split(':').next().unwrap().to_owned()
}

#[test]
fn instances_are_created_listed_described_updated_archived_and_cleaned() {
    let gate = Gate::new("");
    let created = gate.run(&["instance", "create", "run1", "--description", "first try"]);
    code(&created, 0);
    assert!(stdout(&created).contains("Created instance `run1`."));

    let listed = gate.run(&["instance", "list"]);
    code(&listed, 0);
    assert!(stdout(&listed).starts_with("run1 "), "{}", stdout(&listed));
    assert!(stdout(&listed).contains("first try"));
    let json: Value = serde_json::from_slice(&gate.run(&["instance", "list", "--json"]).stdout)
        .expect("--json prints JSON");
    assert_eq!(json["total"], 1);
    assert_eq!(json["instances"][0]["id"], "run1");

    let updated = gate.run(&["instance", "update", "run1", "--description", "second"]);
    code(&updated, 0);
    let described = gate.run(&["instance", "describe", "run1"]);
    code(&described, 0);
    assert!(
        stdout(&described).contains("Description: second"),
        "{}",
        stdout(&described)
    );
    assert!(!stdout(&described).contains(&gate.dir.path().display().to_string()));

    let missing = gate.run(&["instance", "describe", "nope"]);
    code(&missing, 1);
    assert!(
        stderr(&missing).contains("instance `nope` not found"),
        "{}",
        stderr(&missing)
    );
    let invalid = gate.run(&["instance", "create", "../evil"]);
    code(&invalid, 1);
    assert!(stderr(&invalid).contains("invalid instance id"));

    code(&gate.run(&["instance", "archive", "run1"]), 0);
    assert!(stdout(&gate.run(&["instance", "list"])).contains("No instances found."));
    let archived = gate.run(&["instance", "list-archived"]);
    assert!(stdout(&archived).contains("run1"), "{}", stdout(&archived));
    code(&gate.run(&["instance", "unarchive", "run1"]), 0);
    assert!(stdout(&gate.run(&["instance", "list"])).starts_with("run1 "));
    code(&gate.run(&["instance", "archive", "run1"]), 0);

    // A week's grace keeps it; --dry-run deletes nothing; --days 0 deletes it.
    let kept = gate.run(&["clean", "--days", "7"]);
    code(&kept, 0);
    assert!(stdout(&kept).contains("No instances archived more than 7 days ago."));
    let dry = gate.run(&["clean", "--days", "0", "--dry-run"]);
    code(&dry, 0);
    assert!(
        stdout(&dry).contains("would delete `run1`"),
        "{}",
        stdout(&dry)
    );
    assert!(stdout(&gate.run(&["instance", "list-archived"])).contains("run1"));
    let cleaned = gate.run(&["clean", "--days", "0"]);
    code(&cleaned, 0);
    assert!(stdout(&cleaned).contains("Deleted `run1`"));
    assert!(
        stdout(&gate.run(&["instance", "list-archived"])).contains("No archived instances found.")
    );

    let events: Vec<String> = gate
        .audit()
        .iter()
        .map(|r| r["event"].as_str().unwrap().to_owned())
        .collect();
    for event in [
        "instance.created",
        "instance.updated",
        "instance.archived",
        "instance.unarchived",
        "instance.cleaned",
    ] {
        assert!(events.iter().any(|e| e == event), "{event} in {events:?}");
    }
}

#[test]
fn run_preserves_quoting_and_propagates_the_exit_code() {
    let gate = Gate::new("");
    code(&gate.run(&["instance", "create", "run1"]), 0);

    let echoed = gate.run(&[
        "instance",
        "run",
        "run1",
        "--",
        "/bin/echo",
        "a b",
        "$HOME",
        ";",
    ]);
    code(&echoed, 0);
    let text = stdout(&echoed);
    assert!(text.contains(": completed\n"), "{text}");
    assert!(text.lines().any(|l| l == "a b $HOME ;"), "{text}");

    let seven = gate.run(&["instance", "run", "run1", "--", "/bin/sh", "-c", "exit 7"]);
    code(&seven, 7);
    assert!(stdout(&seven).contains("Exit code: 7"));

    // The stdout tail goes to stdout, the stderr tail to stderr; the cwd is /workspace.
    let split = gate.run(&[
        "instance",
        "run",
        "run1",
        "--",
        "/bin/sh",
        "-c",
        "pwd; echo oops >&2; exit 3",
    ]);
    code(&split, 3);
    assert!(stdout(&split).lines().any(|l| l == "/workspace"));
    assert!(!stdout(&split).contains("oops"));
    assert!(stderr(&split).contains("oops"), "{}", stderr(&split));

    let resources = gate.run(&["instance", "run", "run1", "-r", "cpus=x", "--", "/bin/true"]);
    code(&resources, 2);
    assert!(stderr(&resources).contains("must be a whole number"));
    let with = gate.run(&[
        "instance",
        "run",
        "run1",
        "-r",
        "cpus=1",
        "--json",
        "--",
        "/bin/true",
    ]);
    code(&with, 0);
    let job: Value = serde_json::from_slice(&with.stdout).unwrap();
    assert_eq!(job["resources"]["cpus"], 1);
}

#[test]
fn jobs_are_waited_for_followed_cancelled_and_block_archive() {
    let gate = Gate::new("");
    code(&gate.run(&["instance", "create", "run1"]), 0);

    let waited = gate.run(&[
        "instance",
        "run",
        "run1",
        "--no-detach",
        "--timeout",
        "1",
        "--",
        "sleep",
        "30",
    ]);
    // The job's own exit code: `sleep` ended by the SIGTERM that stops a job first.
    code(&waited, 143);
    assert!(
        stdout(&waited).contains(": cancelled\n"),
        "{}",
        stdout(&waited)
    );

    let detached = gate.run(&[
        "instance",
        "run",
        "run1",
        "--timeout",
        "0",
        "--",
        "/bin/sleep",
        "30",
    ]);
    code(&detached, 0);
    assert!(
        stdout(&detached).contains(": running\n"),
        "{}",
        stdout(&detached)
    );
    let job = job_id(&detached);

    let refused = gate.run(&["instance", "archive", "run1"]);
    code(&refused, 1);
    assert!(
        stderr(&refused).contains("still running") && stderr(&refused).contains(&job),
        "{}",
        stderr(&refused)
    );

    let jobs = gate.run(&["instance", "jobs", "run1"]);
    code(&jobs, 0);
    let line = stdout(&jobs)
        .lines()
        .find(|l| l.starts_with(&job))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{}", stdout(&jobs)));
    assert!(
        line.contains("running") && line.contains("/bin/sleep 30"),
        "{line}"
    );

    let status = gate.run(&["instance", "status", "run1", &job]);
    code(&status, 0);
    assert!(stdout(&status).contains(&format!("Job {job}: running")));

    let cancelled = gate.run(&["instance", "cancel", "run1", &job]);
    code(&cancelled, 0);
    assert!(stdout(&cancelled).contains(&format!("Job {job}: cancelled")));
    let status = gate.run(&["instance", "status", "run1", &job]);
    code(&status, 143);
    assert!(stdout(&status).contains("cancelled"));

    let unknown = gate.run(&["instance", "status", "run1", "job-nope"]);
    code(&unknown, 1);
    assert!(
        stderr(&unknown).starts_with("error: "),
        "{}",
        stderr(&unknown)
    );

    code(&gate.run(&["instance", "archive", "run1"]), 0);
}

#[test]
fn bwrap_and_enter_run_in_the_sandbox_with_stdio_attached() {
    let gate = Gate::new("");
    code(&gate.run(&["instance", "create", "run1"]), 0);

    let pwd = gate.run(&["bwrap", "run1", "--", "/bin/pwd"]);
    code(&pwd, 0);
    assert_eq!(stdout(&pwd), "/workspace\n");

    let five = gate.run(&["bwrap", "run1", "--", "/bin/sh", "-c", "exit 5"]);
    code(&five, 5);

    let shadow = gate.run(&["bwrap", "run1", "--", "/bin/cat", "/etc/shadow"]);
    assert_ne!(shadow.status.code(), Some(0), "{}", stdout(&shadow));
    assert!(stdout(&shadow).is_empty());

    // stdin is attached; the word `$HOME` stays a word.
    let cat = gate.run_with_stdin(&["bwrap", "run1", "--", "/bin/cat"], "piped in\n");
    code(&cat, 0);
    assert_eq!(stdout(&cat), "piped in\n");
    let words = gate.run(&["bwrap", "run1", "--", "/bin/echo", "a  b", "$HOME"]);
    assert_eq!(stdout(&words), "a  b $HOME\n");

    // Files written in the sandbox are the instance's: a job sees them.
    code(
        &gate.run(&["bwrap", "run1", "--", "/bin/sh", "-c", "echo kept > f.txt"]),
        0,
    );
    let job = gate.run(&["instance", "run", "run1", "--", "/bin/cat", "f.txt"]);
    assert!(
        stdout(&job).lines().any(|l| l == "kept"),
        "{}",
        stdout(&job)
    );

    // `enter` is an interactive shell; here it reads its commands from a pipe.
    let entered = gate.run_with_stdin(&["instance", "enter", "run1"], "cat f.txt; exit 4\n");
    code(&entered, 4);
    assert!(stdout(&entered).contains("kept"), "{}", stdout(&entered));

    let missing = gate.run(&["bwrap", "nope", "--", "/bin/true"]);
    code(&missing, 1);
    assert!(stderr(&missing).contains("instance `nope` not found"));
}

/// Archive refuses an instance a shell works in (a lease, `state/in_use.rs`), and leaves it
/// as it was; once the shell ends, the archive goes through.
#[test]
fn an_instance_a_shell_works_in_is_not_archived_under_it() {
    use std::io::{BufRead as _, BufReader};

    let gate = Gate::new("");
    code(&gate.run(&["instance", "create", "run1"]), 0);
    let mut shell = gate
        .command(&["instance", "enter", "run1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run hpcgate instance enter");
    let mut input = shell.stdin.take().unwrap();
    let mut output = BufReader::new(shell.stdout.take().unwrap());
    // Once the shell answers, its sandbox runs and the lease is held. The lease's descriptor
    // is not among the shell's: `ls` sees its three streams and its own listing of the
    // directory.
    input
        .write_all(b"echo written > f.txt; echo $(ls /proc/self/fd) ready\n")
        .unwrap();
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert_eq!(line, "0 1 2 3 ready\n");

    let refused = gate.run(&["instance", "archive", "run1"]);
    code(&refused, 1);
    assert!(
        stderr(&refused).contains("cannot archive instance `run1`: it is in use"),
        "{}",
        stderr(&refused)
    );
    let listed = gate.run(&["instance", "list"]);
    assert!(stdout(&listed).contains("run1"), "{}", stdout(&listed));
    input.write_all(b"cat f.txt; exit 3\n").unwrap();
    drop(input);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut output, &mut rest).unwrap();
    assert_eq!(rest, "written\n");
    assert_eq!(shell.wait().unwrap().code(), Some(3));

    code(&gate.run(&["instance", "archive", "run1"]), 0);
    // An archived instance cannot be entered: there is nothing to lease.
    let gone = gate.run(&["bwrap", "run1", "--", "/bin/true"]);
    code(&gone, 1);
    assert!(stderr(&gone).contains("archived"), "{}", stderr(&gone));
}

#[test]
fn every_command_is_audited_with_the_local_principal() {
    let gate = Gate::new("");
    code(&gate.run(&["instance", "create", "run1"]), 0);
    code(&gate.run(&["instance", "list"]), 0);
    code(&gate.run(&["instance", "list-archived"]), 0);
    code(&gate.run(&["instance", "describe", "run1"]), 0);
    code(&gate.run(&["instance", "update", "run1", "-d", "x"]), 0);
    let ran = gate.run(&["instance", "run", "run1", "--", "/bin/true"]);
    code(&ran, 0);
    let job = job_id(&ran);
    code(&gate.run(&["instance", "status", "run1", &job]), 0);
    code(&gate.run(&["instance", "cancel", "run1", &job]), 0);
    code(&gate.run(&["instance", "jobs", "run1"]), 0);
    code(&gate.run(&["bwrap", "run1", "--", "/bin/true"]), 0);
    code(
        &gate.run_with_stdin(&["instance", "enter", "run1"], "exit 0\n"),
        0,
    );
    code(&gate.run(&["instance", "archive", "run1"]), 0);
    code(&gate.run(&["instance", "unarchive", "run1"]), 0);
    code(&gate.run(&["instance", "archive", "run1"]), 0);
    code(&gate.run(&["clean", "--days", "0"]), 0);

    let records = gate.audit();
    let tools: Vec<&str> = records
        .iter()
        .filter(|r| r["event"] == "call" && r["decision"].is_object())
        .map(|r| r["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "create_instance",
            "list_instances",
            "list_archived_instances",
            "describe_instance",
            "update_instance",
            "submit_job",
            "poll_job",
            "cancel_job",
            "list_jobs",
            "archive_instance",
            "archive_instance"
        ]
    );
    for tool in ["bwrap", "instance_enter", "unarchive_instance", "clean"] {
        assert!(
            records
                .iter()
                .any(|r| r["event"] == "call" && r["tool"] == tool),
            "{tool}"
        );
    }
    let bwrap_end = records
        .iter()
        .find(|r| r["tool"] == "bwrap" && r["outcome"].is_object())
        .expect("bwrap's outcome");
    assert_eq!(bwrap_end["outcome"]["exit_code"], 0);
    for record in records.iter().filter(|r| r["tenant"].is_string()) {
        let job_event = record["event"] == "job.state" && record["principal"] == "hpcgate";
        assert!(record["principal"] == "cli-tester" || job_event, "{record}");
    }

    let verify = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["audit", "verify", "--dir"])
        .arg(gate.dir.path().join("state/audit"))
        .output()
        .unwrap();
    code(&verify, 0);
    let query = Command::new(env!("CARGO_BIN_EXE_hpcgate"))
        .args(["audit", "query", "--principal", "cli-tester", "--dir"])
        .arg(gate.dir.path().join("state/audit"))
        .output()
        .unwrap();
    for event in ["instance.unarchived", "instance.cleaned"] {
        assert!(stdout(&query).contains(event), "{}", stdout(&query));
    }
}

#[test]
fn a_policy_denial_shows_in_the_cli() {
    let gate = Gate::new(
        "[[policies]]\nname = \"tools\"\nmodule = \"stock:tool-filter\"\n\
         [policies.config]\ndeny = [\"submit_job\"]\n",
    );
    code(&gate.run(&["instance", "create", "run1"]), 0);
    let denied = gate.run(&["instance", "run", "run1", "--", "/bin/true"]);
    code(&denied, 1);
    assert!(
        stderr(&denied).contains("denied by policy `tools`"),
        "{}",
        stderr(&denied)
    );
    let recorded = gate
        .audit()
        .into_iter()
        .find(|r| r["tool"] == "submit_job")
        .expect("the denial is audited");
    assert_eq!(recorded["decision"]["decision"], "deny");
    assert_eq!(recorded["principal"], "cli-tester");
}
