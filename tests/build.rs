//! Builds the hostile policy guests the tests load: the `hostile` crate (one component whose
//! config picks the misbehaviour), for `wasm32-unknown-unknown` and for `wasm32-wasip2`
//! (`hostile-wasi`), the hand-written core modules in `policies/hostile/wat/`, and the Rust
//! version of the example rules (`examples/policies/rules-rust`).

use std::path::PathBuf;

use hpcgate_policy_build::Target;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest
        .parent()
        .expect("tests/ lives in the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    let hostile = workspace.join("policies/hostile");
    let wit = workspace.join("wit");
    hpcgate_policy_build::rerun_if_changed(&[
        &wit,
        &workspace.join("policies/sdk"),
        &hostile,
        &workspace.join("examples/policies/rules-rust"),
    ]);

    // With the Rust version of the example rules in `examples/policies/`
    // (`policy_languages.rs`), in one build.
    hpcgate_policy_build::build_guests(
        &workspace,
        &["hostile", "example-rules"],
        Target::Bare,
        &out_dir,
    );
    hpcgate_policy_build::build_guests(&workspace, &["hostile"], Target::Wasip2, &out_dir);
    for name in ["bad-discriminant", "bad-utf8"] {
        let text =
            std::fs::read_to_string(hostile.join(format!("wat/{name}.wat"))).expect("read wat");
        let component = hpcgate_policy_build::componentize_core_wat(&text, &wit, "policy")
            .unwrap_or_else(|e| panic!("cannot build `{name}.wat` into a component: {e}"));
        std::fs::write(out_dir.join(format!("{name}.wasm")), component).expect("write component");
    }
}
