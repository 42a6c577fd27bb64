//! The `hpcgate` command line. Commands return an exit code; errors are printed once, with
//! their causes, by [`main`].

mod audit;
mod bench;
mod config;
mod doctor;
mod policy;
mod run;
mod scaffold;

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
    /// Benchmark the gateway end to end (`bench gateway`).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Policy(command) => policy::run(command),
        Command::Audit(command) => audit::run(command),
        Command::Config(command) => config::run(command),
        Command::Doctor(args) => doctor::run(args),
        Command::Bench(command) => bench::run(command),
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
