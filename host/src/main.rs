//! The `hpcgate` binary: everything lives in the library; see [`hpcgate::cli`].

/// mimalloc instead of glibc's malloc: a call allocates and frees a few hundred small blocks
/// (JSON, HTTP, the policy input) across threads, and glibc's arenas made that about a tenth
/// of the gateway's CPU per call (BENCHMARKS.md, "mimalloc"). Built without transparent huge
/// pages: with them, its eagerly committed arena added 17 MB to the idle RSS.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    hpcgate::cli::main()
}
