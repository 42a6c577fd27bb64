//! The policy SDK's `src/bindings.rs` is what wit-bindgen generates for the `policy` world of
//! `wit/policy.wit`, checked in. A policy's build then compiles the bindings' small runtime and
//! no generator: wit-bindgen's macro and the WebAssembly and WIT parsers under it were most of
//! the CPU of a fresh policy build, and every guest build paid it again. The test below
//! generates them again and fails when the file differs; with `HPCGATE_REGENERATE_BINDINGS=1`
//! it writes the file.

use std::path::Path;

use wit_bindgen_core::WorldGenerator as _;

/// The bindings for `world` of the WIT package in `wit_dir`, as the SDK uses them: a public
/// `export!` macro that names the SDK's module, so a policy crate exports through the SDK.
fn generate(wit_dir: &Path, world: &str) -> String {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_path(wit_dir).expect("the WIT package parses");
    let world = resolve
        .select_world(&[package], Some(world))
        .expect("the world exists");
    let opts = wit_bindgen_rust::Opts {
        format: true,
        pub_export_macro: true,
        default_bindings_module: Some("hpcgate_policy_sdk::bindings".to_owned()),
        ..Default::default()
    };
    let mut files = wit_bindgen_core::Files::default();
    opts.build()
        .generate(&mut resolve, world, &mut files)
        .expect("the bindings generate");
    let (_, source) = files.iter().next().expect("one file is generated");
    String::from_utf8(source.to_vec()).expect("generated Rust is UTF-8")
}

#[test]
fn the_checked_in_bindings_are_generated_from_the_wit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let generated = generate(&root.join("wit"), "policy");
    let path = root.join("policies/sdk/src/bindings.rs");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if current == generated {
        return;
    }
    if std::env::var("HPCGATE_REGENERATE_BINDINGS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("write src/bindings.rs");
        return;
    }
    panic!(
        "policies/sdk/src/bindings.rs is not what wit-bindgen generates from wit/policy.wit: \
         after changing the WIT, run `HPCGATE_REGENERATE_BINDINGS=1 cargo test -p \
         hpcgate-policy-build bindings` and commit the file"
    );
}
