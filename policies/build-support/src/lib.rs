//! Build-script support shared by the crates that embed policy guests (`hpcgate` embeds the stock
//! policies, `hpcgate-tests` the hostile ones).
//!
//! [`build_guests`] runs a nested `cargo build` of the named workspace packages for a wasm32
//! [`Target`] with the `policy` profile (`policy-dev` under a debug build), in a target
//! directory of its own (so the outer cargo's lock on its own directory cannot deadlock it),
//! then wraps each core module into a component with `wit-component` (for `wasm32-wasip2` the
//! linker has already made one). Nothing opaque is committed: every guest is built from source.

use std::path::{Path, PathBuf};
use std::process::Command;

#[cfg(test)]
mod sdk_bindings;

/// A built guest: the package name and the path of its component.
#[derive(Debug)]
pub struct Guest {
    pub package: String,
    pub component: PathBuf,
}

/// What a guest is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `wasm32-unknown-unknown`: the component imports nothing but the hpcgate world. Written
    /// as `<package>.wasm`.
    Bare,
    /// `wasm32-wasip2`: the component imports WASI too, as most toolchains' components do.
    /// Written as `<package>-wasi.wasm`.
    Wasip2,
}

impl Target {
    pub fn triple(self) -> &'static str {
        match self {
            Target::Bare => "wasm32-unknown-unknown",
            Target::Wasip2 => "wasm32-wasip2",
        }
    }

    fn file_name(self, package: &str) -> String {
        match self {
            Target::Bare => format!("{package}.wasm"),
            Target::Wasip2 => format!("{package}-wasi.wasm"),
        }
    }
}

/// Builds `packages` of the workspace at `workspace` for `target` and writes their components
/// into `out_dir` (named as [`Target`] says). Panics with a message saying what to do when the
/// build fails (this runs in a build script, where a panic is the error channel).
pub fn build_guests(
    workspace: &Path,
    packages: &[&str],
    target: Target,
    out_dir: &Path,
) -> Vec<Guest> {
    let target_dir = guest_target_dir(workspace, "policy-guests");
    build(workspace, &target_dir, None, packages, target, out_dir)
}

/// Builds the guest `package` whose crate at `crate_dir` is a workspace of its own (excluded
/// from the main one, so that its dependencies' features are not unified with the host's or
/// the other guests'). It shares nothing with the other guests' build (its own lock file and
/// features), so it gets a target directory of its own (`policy-guests-<package>`): a build
/// there does not wait for cargo's lock on the shared one, and can run beside it. As
/// [`build_guests`] otherwise.
pub fn build_own_workspace_guest(
    workspace: &Path,
    crate_dir: &Path,
    package: &str,
    target: Target,
    out_dir: &Path,
) -> Guest {
    let target_dir = guest_target_dir(workspace, &format!("policy-guests-{package}"));
    let mut guests = build(
        workspace,
        &target_dir,
        Some(crate_dir),
        &[package],
        target,
        out_dir,
    );
    guests.remove(0)
}

fn build(
    workspace: &Path,
    target_dir: &Path,
    own_workspace: Option<&Path>,
    packages: &[&str],
    target: Target,
    out_dir: &Path,
) -> Vec<Guest> {
    let triple = target.triple();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    #[allow(clippy::disallowed_methods)] // build time: the nested cargo that builds the guests
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .args(["build", "--profile", profile(), "--target", triple])
        .arg("--target-dir")
        .arg(target_dir);
    if let Some(crate_dir) = own_workspace {
        cmd.arg("--manifest-path").arg(crate_dir.join("Cargo.toml"));
    }
    for package in packages {
        cmd.args(["-p", package]);
    }
    // The outer build's wrappers (clippy-driver, coverage) and flags are for the host target;
    // the guests are built plainly, but for one lint: some guests are built only here (a
    // workspace of its own, or a member built only for wasm32, as `stock:rego`), so when the
    // outer build lints its members (clippy's driver as the workspace wrapper, as
    // `scripts/test.sh` builds), this build lints the guests' crates the same way. Their
    // dependencies are built plainly, as there.
    let lints = outer_build_lints();
    for var in [
        "RUSTC_WRAPPER",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MANIFEST_DIR",
    ] {
        cmd.env_remove(var);
    }
    if !lints {
        cmd.env_remove("RUSTC_WORKSPACE_WRAPPER");
    }
    // A small stack (64 KiB instead of 1 MiB) keeps every fresh instance's memory small: fewer
    // pages to map, touch and reset per evaluation.
    cmd.env(
        format!(
            "CARGO_TARGET_{}_RUSTFLAGS",
            triple.to_uppercase().replace('-', "_")
        ),
        "-C link-arg=-zstack-size=65536",
    );
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build policy guests: {e}"));
    assert!(
        status.success(),
        "building policy guests {packages:?} for {triple} failed; \
         if the target is missing run `rustup target add {triple}`"
    );

    let wasm_dir = target_dir.join(triple).join(profile());
    packages
        .iter()
        .map(|package| {
            let built = wasm_dir.join(format!("{}.wasm", package.replace('-', "_")));
            let bytes = std::fs::read(&built)
                .unwrap_or_else(|e| panic!("cannot read built guest `{}`: {e}", built.display()));
            let component = match target {
                Target::Bare => componentize(&bytes)
                    .unwrap_or_else(|e| panic!("cannot turn `{package}` into a component: {e}")),
                Target::Wasip2 => bytes,
            };
            let out = out_dir.join(target.file_name(package));
            std::fs::write(&out, component)
                .unwrap_or_else(|e| panic!("cannot write `{}`: {e}", out.display()));
            Guest {
                package: (*package).to_owned(),
                component: out,
            }
        })
        .collect()
}

/// Wraps a core module that carries its component type (as `wit-bindgen` emits it) into a
/// component.
pub fn componentize(core: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .module(core)
        .and_then(|encoder| encoder.validate(true).encode())
        .map_err(|e| format!("{e:#}"))
}

/// Turns a hand-written core module (WebAssembly text) into a component of `world` from the WIT
/// package in `wit_dir`, by embedding the world's type information the way wit-bindgen does.
/// Used for hostile guests that return what no generated binding can.
pub fn componentize_core_wat(wat: &str, wit_dir: &Path, world: &str) -> Result<Vec<u8>, String> {
    let mut module = wat::parse_str(wat).map_err(|e| e.to_string())?;
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_path(wit_dir).map_err(|e| format!("{e:#}"))?;
    let world = resolve
        .select_world(&[package], Some(world))
        .map_err(|e| format!("{e:#}"))?;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
        false,
    )
    .map_err(|e| format!("{e:#}"))?;
    componentize(&module)
}

/// Prints `cargo:rerun-if-changed` lines for the guest sources, and asks for a rerun when the
/// outer build starts or stops linting (see [`outer_build_lints`]).
#[allow(clippy::print_stdout)] // build-script directives go to stdout by definition
pub fn rerun_if_changed(paths: &[&Path]) {
    for path in paths {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rerun-if-env-changed=RUSTC_WORKSPACE_WRAPPER");
    println!("cargo:rerun-if-env-changed=CLIPPY_ARGS");
}

/// Whether the outer build compiles its workspace's crates with clippy's driver (which reads
/// its arguments, such as `-D warnings`, from `CLIPPY_ARGS`).
fn outer_build_lints() -> bool {
    std::env::var_os("RUSTC_WORKSPACE_WRAPPER")
        .map(PathBuf::from)
        .and_then(|wrapper| wrapper.file_name().map(|name| name.to_owned()))
        .is_some_and(|name| name == "clippy-driver")
}

/// The cargo profile the guests are built with: `policy` when the outer build is a release
/// build (the host that ships them), `policy-dev` for a debug build (the tests'). The two differ
/// only where a guest's manifest says so: `stock:cedar`, optimised for speed when it ships, is
/// optimised for size in a debug build, which takes a quarter less CPU (144 s instead of 193 s
/// here, a fresh build's longest guest) for the same code, evaluating the example rules in
/// 30 µs instead of 24.
///
/// A build script learns the outer build's profile from cargo; a test that builds a guest of
/// its own at run time goes by how it was built itself, so that it finds the guests' shared
/// dependencies already built by the build scripts.
fn profile() -> &'static str {
    let debug = match std::env::var("PROFILE") {
        Ok(profile) => profile == "debug",
        Err(_) => cfg!(debug_assertions),
    };
    if debug { "policy-dev" } else { "policy" }
}

/// `name` in the outer build's target directory.
fn guest_target_dir(workspace: &Path, name: &str) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => workspace.join("target").join(name),
    }
}
