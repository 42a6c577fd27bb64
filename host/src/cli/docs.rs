//! `hpcgate man` and `hpcgate completions`: the manual pages and shell completions, generated
//! from the same clap definitions the command line parses with, so they cannot drift from it.
//! The packages ship both (`scripts/package.sh`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, CommandFactory as _};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Directory to write `hpcgate.1` and one page per subcommand (`hpcgate-run.1`, …) into.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

pub(crate) fn man(args: ManArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create `{}`", args.out.display()))?;
    let mut command = super::Cli::command();
    command.build();
    let written = write_pages(&command, "hpcgate", &args.out)?;
    super::out(format!("wrote {written} pages to {}", args.out.display()));
    Ok(ExitCode::SUCCESS)
}

/// The page of `command` (named `name`), then its subcommands' pages, recursively.
fn write_pages(command: &clap::Command, name: &str, dir: &Path) -> anyhow::Result<usize> {
    // clap names are `&'static str` (without its `string` feature): a few bytes per page,
    // once, in a command that exits right after.
    let static_name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let page = clap_mangen::Man::new(command.clone().name(static_name));
    let mut text = Vec::new();
    page.render(&mut text)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, text).with_context(|| format!("cannot write `{}`", path.display()))?;
    let mut written = 1;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        written += write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(written)
}

pub(crate) fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = super::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "hpcgate", &mut script);
    // A reader that stops early (`| head`) is not an error worth a message.
    match std::io::Write::write_all(&mut std::io::stdout().lock(), &script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}
