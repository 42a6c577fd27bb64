//! `hpcgate-supervisor [--batch] <job-dir>`: the process that owns one sandboxed job.
//!
//! Started by `hpcgate_executors::sandbox::spawn_job` (detached), or by a Slurm batch script
//! (`--batch`), never by hand. All logic lives in
//! [`hpcgate_executors::sandbox::supervisor_cli`]; this binary only passes its arguments.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(hpcgate_executors::sandbox::supervisor_cli(&args));
}
