//! The `hpcgate` command line. Commands return an exit code; errors are printed once, with
//! their causes, by [`main`].

mod audit;
mod audit_records;
mod audit_scale;
mod bench;
mod bench_code;
mod bench_dav;
mod bench_figures;
mod bench_load;
mod bench_metrics;
mod bench_proxy;
mod bench_tasks;
mod clean;
mod config;
mod docs;
mod doctor;
mod instance;
mod instance_jobs;
mod local;
mod owner;
mod policy;
mod run;
mod sandbox;
mod scaffold;
mod tenant;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// MCP gateway that lets AI agents use an HPC cluster under WebAssembly policy.
#[derive(Debug, Parser)]
#[command(name = "hpcgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway as an MCP server (stdio, streamable HTTP or a Unix socket).
    Run(run::RunArgs),
    /// Check, test, benchmark and scaffold policies.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Verify, checkpoint and read the audit log.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Validate the layered configuration, or print it merged.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Check that this host can run the gateway with this configuration.
    Doctor(doctor::DoctorArgs),
    /// List tenants, add one, or create a bearer token (audited).
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Manage instances and their jobs as the local user (policy-checked and audited).
    Instance(instance::InstanceArgs),
    /// Run a command in an instance's sandbox with the terminal attached: `bwrap ID -- CMD…`.
    Bwrap(sandbox::BwrapArgs),
    /// Delete instances archived more than `--days` days ago.
    Clean(clean::CleanArgs),
    /// Measure the gateway.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Write the manual pages (`hpcgate.1` and one per subcommand) into a directory.
    Man(docs::ManArgs),
    /// Print a shell's completion script for `hpcgate`.
    Completions(docs::CompletionsArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Measure the gateway end to end: `stat_path` latency, throughput and idle memory.
    Gateway(bench::GatewayArgs),
    /// Latency a proxied call gains through hpcgate, against the same server called directly.
    Proxy(bench_proxy::BenchProxyArgs),
    /// What one scrape of `/metrics` costs with many jobs recorded.
    Metrics(bench_metrics::BenchMetricsArgs),
    /// Code mode: `run_python` end to end, and tool calls from Python inside a job.
    Code(bench_code::CodeArgs),
    /// WebDAV: PUT and GET of a large file, PROPFIND of a large directory (against wsgidav
    /// with `--wsgidav`).
    Dav(bench_dav::DavArgs),
    /// MCP tasks: `tasks/get` latency, and the gateway memory many open tasks cost.
    Tasks(bench_tasks::TasksArgs),
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    // `hpcgate __supervise [--batch] <job_dir>`: this process becomes a job's supervisor.
    // Dispatched before anything else runs (no threads, no runtime), as it requires.
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() == Some(std::ffi::OsStr::new(crate::jobs::SUPERVISE_SUBCOMMAND)) {
        let rest: Vec<std::ffi::OsString> = args.collect();
        let code = hpcgate_executors::sandbox::supervisor_cli(&rest);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Policy(command) => policy::run(command),
        Command::Audit(command) => audit::run(command),
        Command::Config(command) => config::run(command),
        Command::Doctor(args) => doctor::run(args),
        Command::Tenant(command) => tenant::run(command),
        Command::Instance(args) => instance::run(args),
        Command::Bwrap(args) => sandbox::bwrap(args),
        Command::Clean(args) => clean::run(args),
        Command::Bench(BenchCommand::Proxy(args)) => bench_proxy::run(args),
        Command::Bench(BenchCommand::Gateway(args)) => bench::run(args),
        Command::Bench(BenchCommand::Metrics(args)) => bench_metrics::run(args),
        Command::Man(args) => docs::man(args),
        Command::Completions(args) => docs::completions(args),
        Command::Bench(BenchCommand::Code(args)) => bench_code::run(args),
        Command::Bench(BenchCommand::Dav(args)) => bench_dav::run(args),
        Command::Bench(BenchCommand::Tasks(args)) => bench_tasks::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(std::io::stderr().lock(), "error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Writes one line to stdout. The CLI's only way to print: a stray `println!` in the gateway
/// would corrupt the stdio MCP stream, so the lint forbids it everywhere else.
pub(crate) fn out(line: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}
