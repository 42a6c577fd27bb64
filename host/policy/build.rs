//! Builds the stock policies from `policies/stock/` for wasm32, turns them into components, and
//! generates `stock.rs`, which embeds them in the binary as `stock:<name>`.

use std::path::PathBuf;

const STOCK: [&str; 5] = [
    "tool-filter",
    "path-rules",
    "resource-caps",
    "proxy-filter",
    "rego",
];

/// Stock policies that are workspaces of their own (see `policies/stock/cedar/Cargo.toml`),
/// each built by a nested build of its own.
const OWN_WORKSPACE: [&str; 1] = ["cedar"];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest
        .ancestors()
        .nth(2)
        .expect("host/policy/ lives in the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    hpcgate_policy_build::rerun_if_changed(&[
        &workspace.join("wit"),
        &workspace.join("policies/sdk"),
        &workspace.join("policies/stock"),
    ]);

    // The guests that are workspaces of their own build beside the others, each in a target
    // directory of its own (nothing to share, no lock to wait for): on a fresh machine the
    // guest builds are most of a first check's or build's time.
    let guests = std::thread::scope(|scope| {
        let (workspace, out_dir) = (&workspace, &out_dir);
        let own: Vec<_> = (OWN_WORKSPACE.iter())
            .map(|name| {
                scope.spawn(move || {
                    hpcgate_policy_build::build_own_workspace_guest(
                        workspace,
                        &workspace.join("policies/stock").join(name),
                        name,
                        hpcgate_policy_build::Target::Bare,
                        out_dir,
                    )
                })
            })
            .collect();
        let mut guests = hpcgate_policy_build::build_guests(
            workspace,
            &STOCK,
            hpcgate_policy_build::Target::Bare,
            out_dir,
        );
        for build in own {
            match build.join() {
                Ok(guest) => guests.push(guest),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        guests
    });
    let mut table = String::from(
        "/// The stock policies, built from `policies/stock/`.\npub const STOCK: &[(&str, &[u8])] = &[\n",
    );
    for guest in guests {
        table.push_str(&format!(
            "    ({:?}, include_bytes!({:?})),\n",
            guest.package,
            guest.component.display().to_string()
        ));
    }
    table.push_str("];\n");
    std::fs::write(out_dir.join("stock.rs"), table).expect("write stock.rs");
}
