//! The Slurm rows of the attack table: hostile names and paths are refused before anything is
//! submitted, hostile argv arrives as exact elements, and `SBATCH_*` variables or secrets in
//! the gateway's environment change nothing.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use hpcgate_executors::sandbox::HostUser;
use hpcgate_executors::slurm::{JobPhase, JobSandbox, SlurmError, SlurmJobSpec};

use super::harness::{JobDirs, scontrol_record, wait_final};
use crate::reexec;

#[test]
fn hostile_names_are_refused_before_anything_is_submitted() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let hostile = [
        "debug\n#SBATCH --partition=batch",
        "a;touch /tmp/pwned",
        "$(touch /tmp/pwned)",
        "`id`",
        "-p",
        "--wrap=id",
        "a b",
        "",
        "x\u{1b}[2J",
    ];
    type Setter = fn(&mut SlurmJobSpec, String);
    let fields: [(&str, Setter); 4] = [
        ("job_name", |s, v| s.job_name = v),
        ("partition", |s, v| s.partition = Some(v)),
        ("account", |s, v| s.account = Some(v)),
        ("qos", |s, v| s.qos = Some(v)),
    ];
    for (field, set) in fields {
        for value in hostile {
            let mut spec = dirs.spec(&["/bin/true"]);
            set(&mut spec, value.to_owned());
            match runner.submit(&spec) {
                Err(SlurmError::InvalidValue { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}={value:?} was not refused: {other:?}"),
            }
        }
    }
    let in_workspace = dirs.path("workspace/logs");
    let in_output = dirs.path("output");
    let hostile_paths = [
        PathBuf::from("/tmp/%u"),
        PathBuf::from("/tmp/a\nb"),
        PathBuf::from("relative/logs"),
        PathBuf::from("/tmp/../etc/passwd"),
        // A job could plant a symlink there before Slurm opens it.
        in_workspace,
        in_output,
    ];
    for path in hostile_paths {
        let mut spec = dirs.spec(&["/bin/true"]);
        spec.output_dir = path.clone();
        assert!(
            matches!(runner.submit(&spec), Err(SlurmError::InvalidPath { .. })),
            "{path:?}"
        );
    }
    let mut spec = dirs.spec(&["/bin/true"]);
    JobDirs::sandbox(&mut spec).run_as = Some(HostUser { uid: 0, gid: 0 });
    assert!(matches!(
        runner.submit(&spec),
        Err(SlurmError::RunAsUnsupported)
    ));
    assert!(
        std::fs::read_dir(dirs.path("scripts"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[test]
fn hostile_argv_arrives_as_exact_elements() {
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    let marker = dirs.path("output/pwned");
    let touch = format!("$(touch {})", marker.display());
    let args: Vec<String> = [
        "it's",
        &touch,
        "a;b",
        "line1\nline2",
        "`touch /output/pwned`",
        "x\n#SBATCH --partition=batch\n#SBATCH --time=999",
        "-n",
        "--",
        "\\",
        "\"",
        "*",
        "",
        "$HOME ${PATH}",
        "é\t",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut command = vec!["/usr/bin/printf".to_owned(), "%s\\0".to_owned()];
    command.extend(args.iter().cloned());
    let mut spec = dirs.spec(&[]);
    spec.command = command;
    let job = runner.submit(&spec).unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(
        status.phase,
        JobPhase::Completed,
        "{status:?} {}",
        dirs.stderr()
    );
    let stdout = dirs.stdout();
    let received: Vec<String> = stdout
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(received[..received.len() - 1], args[..]);
    assert!(!marker.exists(), "a command substitution ran");
    let record = scontrol_record(job.id);
    assert!(
        record.contains("Partition=debug ") && record.contains("TimeLimit=00:02:00"),
        "{record}"
    );
}

/// Runs [`probe_gateway_environment`] in a child test process whose environment is hostile:
/// `SBATCH_*` variables that would change the job, and a secret.
#[test]
fn gateway_environment_has_no_effect() {
    let dirs = JobDirs::new();
    let done = dirs.path("probe-ran");
    let out = reexec("slurm::attacks::probe_gateway_environment")
        .arg("--test-threads=1")
        .env("HPCGATE_ENV_PROBE_DONE", &done)
        .env("HPCGATE_SECRET", "x-secret-x")
        .env("SBATCH_PARTITION", "batch")
        .env("SBATCH_TIMELIMIT", "7")
        .env("SBATCH_JOB_NAME", "evil")
        .env("SBATCH_MEM_PER_NODE", "1")
        .env("SBATCH_EXPORT", "ALL")
        .env("SBATCH_GRES", "gpu:2")
        .output()
        .unwrap();
    assert!(
        out.status.success() && done.exists(),
        "probe failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Only does something when started by [`gateway_environment_has_no_effect`].
#[test]
#[ignore = "a probe, run in a hostile environment by gateway_environment_has_no_effect"]
fn probe_gateway_environment() {
    let Some(done) = std::env::var_os("HPCGATE_ENV_PROBE_DONE") else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped: the probe of gateway_environment_has_no_effect, which sets HPCGATE_ENV_PROBE_DONE"
        );
        return;
    };
    let dirs = JobDirs::new();
    let runner = dirs.runner();
    // Unsandboxed on purpose: what Slurm itself hands the job must already be clean.
    let mut spec = dirs.spec(&["/usr/bin/env"]);
    spec.sandbox = JobSandbox::UnsandboxedAmbient;
    let job = runner.submit(&spec).unwrap();
    let status = wait_final(&runner, job.id, Duration::from_secs(60));
    assert_eq!(status.phase, JobPhase::Completed, "{status:?}");
    let env = String::from_utf8_lossy(&dirs.stdout()).into_owned();
    assert!(env.contains("SLURM_JOB_ID="), "not the job's env: {env}");
    assert!(
        !env.contains("x-secret-x") && !env.contains("HPCGATE_"),
        "{env}"
    );
    assert!(!env.contains("SBATCH_"), "{env}");
    let record = scontrol_record(job.id);
    for expected in [
        "JobName=hpcgate-test ",
        "Partition=debug ",
        "TimeLimit=00:02:00 ",
        "MinMemoryNode=200M ",
    ] {
        assert!(record.contains(expected), "{expected}: {record}");
    }
    assert!(!record.contains("gres/gpu"), "{record}");
    std::fs::write(done, b"ok").unwrap();
}
