//! `run_python`: the code written as a script, checked as it is read, run as a local job.

use sha2::Digest as _;

use super::{Context, JobMode, Output, RunPython, ToolError, Wait, default_wait, new_job, start};
use crate::code_mode::SANDBOX_SCRIPT;
use crate::tools::{Area, hold_room};

/// How `run_python` starts its script (`python3 -c RUN_SCRIPT PATH SHA256`): as `python3 PATH`
/// would, with two differences.
///
/// - Nothing of the workspace is on the import path. Python puts a script's own directory
///   (or, for `-c`, the working directory) first on `sys.path`, and the working directory is
///   the workspace, which any job of the instance may write: a job run without tools could
///   leave a `json.py` there that every later `run_python`, with tools, would import. So the
///   path is cleaned before anything is imported but `sys` (built in): even the check's
///   `hashlib`.
/// - The file is read once and run from memory only if its SHA-256 is the one written. The
///   file is the code and a last line of its own, `# hpcgate run_python <random>`: the digest,
///   which the job's command (and so the audit log) shows, is of that, so it says nothing of
///   the code to whoever reads the log and might guess it (an admin who redacts `code` keeps
///   it private). A job that reads the random line first still cannot write other code that
///   passes.
///
/// With tools, the script is not in the workspace at all but beside the job's door
/// ([`SANDBOX_SCRIPT`]), which no job can write: another job of the instance could otherwise
/// replace it, between its write and Python's read or before `multiprocessing` runs it again
/// in a spawned child, and run its own code with this job's tools. Without tools it is
/// written to `/workspace/.hpcgate/run-<random>.py`, where such a swap gains nothing.
///
/// (The interpreters the script starts itself are Python's as usual: `sys.executable -c` puts
/// the working directory first.)
const RUN_SCRIPT: &str = r#"def _hpcgate_run():
    import sys
    sys.path[:] = [p for p in sys.path if p not in ('', '.')]
    import hashlib
    path, digest = sys.argv[1:3]
    with open(path, 'rb') as script:
        source = script.read()
    if hashlib.sha256(source).hexdigest() != digest:
        sys.exit('hpcgate: ' + path + ' changed after run_python wrote it (another job of the instance?): not run')
    sys.argv = [path]
    main = sys.modules['__main__']
    del main._hpcgate_run
    main.__file__ = path
    exec(compile(source, path, 'exec'), main.__dict__)
_hpcgate_run()"#;

/// The script `run_python` writes: the code, then a comment line of its own with a random part
/// (see [`RUN_SCRIPT`]). Last, so the code's line numbers and tracebacks are its own.
fn salted(code: &str) -> Result<Vec<u8>, ToolError> {
    let salt = random_hex::<16>("salt the script's digest")?;
    let ending = if code.ends_with('\n') { "" } else { "\n" };
    Ok(format!("{code}{ending}# hpcgate run_python {salt}\n").into_bytes())
}

/// `N` random bytes as hex, or an error saying what they were for.
fn random_hex<const N: usize>(what: &str) -> Result<String, ToolError> {
    let mut random = [0u8; N];
    getrandom::fill(&mut random)
        .map_err(|e| ToolError::new(format!("cannot {what} ({e}); retry")))?;
    Ok(hex::encode(random))
}

/// Runs the code with [`RUN_SCRIPT`] as a local job. With tools (the default) the script is
/// placed beside the job's door, within `[files] max_write_bytes`; without, it is written to
/// the workspace through the files executor (size caps and the workspace quota apply).
pub(super) fn run_python(cx: &Context<'_>, args: RunPython) -> Result<Output, ToolError> {
    use hpcgate_executors::files::{
        self as exec, FileError, InstanceRoots, WriteMode, WriteRequest,
    };
    let instance = cx.instance()?.clone();
    if args.code.trim().is_empty() {
        return Err(ToolError::new(
            "`code` is empty; give the Python source to run".to_owned(),
        ));
    }
    let wait = Wait::new(
        args.timeout.unwrap_or(default_wait(cx, args.detach)),
        args.detach,
        args.tail,
    )?;
    let script = salted(&args.code)?;
    let digest = hex::encode(sha2::Sha256::digest(&script));
    let command = |path: &str| {
        ["python3", "-c", RUN_SCRIPT, path, &digest]
            .map(str::to_owned)
            .to_vec()
    };
    if args.tools.unwrap_or(true) {
        let size = script.len() as u64;
        if size > cx.files.max_write_bytes {
            return Err(FileError::TooLarge {
                path: SANDBOX_SCRIPT.to_owned(),
                size,
                limit: cx.files.max_write_bytes,
                hint: "the limit is `[files] max_write_bytes`; write the code to files with write_file and run them with submit_job",
            }
            .into());
        }
        let new = new_job(
            cx,
            instance,
            JobMode::Local,
            command(SANDBOX_SCRIPT),
            args.resources,
        );
        return start(cx, new, &wait, true, Some(&script));
    }
    let name = random_hex::<8>("name the script")?;
    let path = format!("/workspace/.hpcgate/run-{name}.py");
    // Held until the script is in place, like any write's.
    let hold = hold_room(
        cx,
        &instance,
        Area::Workspace,
        Some(script.len() as u64),
        u64::MAX,
    )?;
    let paths = cx.state.instance_paths_ambient(cx.tenant, &instance)?;
    let roots = InstanceRoots::ambient(&paths.workspace, &paths.output);
    let request = WriteRequest {
        path: path.clone(),
        data: script,
        mode: WriteMode::Replace,
        create_dirs: true,
    };
    exec::write_file(&roots, cx.files, &request)?;
    drop(hold);
    let new = new_job(cx, instance, JobMode::Local, command(&path), args.resources);
    start(cx, new, &wait, false, None)
}
