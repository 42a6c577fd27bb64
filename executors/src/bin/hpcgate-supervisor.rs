//! `hpcgate-supervisor <job-dir>`: the detached process that owns one sandboxed job.
//!
//! Started by `hpcgate_executors::sandbox::spawn_job`, never by hand. All logic lives in
//! [`hpcgate_executors::sandbox::supervisor_main`]; this binary only passes the job directory.

fn main() {
    let mut args = std::env::args_os().skip(1);
    let code = match (args.next(), args.next()) {
        (Some(job_dir), None) => {
            hpcgate_executors::sandbox::supervisor_main(std::path::Path::new(&job_dir))
        }
        _ => 2,
    };
    std::process::exit(code);
}
