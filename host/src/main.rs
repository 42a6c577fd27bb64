//! The `hpcgate` binary: everything lives in the library; see [`hpcgate::cli`].

fn main() -> std::process::ExitCode {
    hpcgate::cli::main()
}
