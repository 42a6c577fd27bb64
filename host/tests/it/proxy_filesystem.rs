//! The real `@modelcontextprotocol/server-filesystem` (npm, installed by `scripts/setup.sh`
//! into `<target>/mcp-filesystem`) behind hpcgate, inside bwrap: with a policy that allows
//! only its read tools, a client sees exactly those and reads only its instance's workspace.

use crate::support::proxy as support;

use serde_json::json;
use support::{args, caller, discovered, err, gateway, ok, raw, target_dir};

/// Its read-only tools (by the server's own `readOnlyHint`, checked below).
const READ_TOOLS: &[&str] = &[
    "read_file",
    "read_text_file",
    "read_media_file",
    "read_multiple_files",
    "list_directory",
    "list_directory_with_sizes",
    "directory_tree",
    "search_files",
    "get_file_info",
    "list_allowed_directories",
];

fn config() -> String {
    let prefix = target_dir().join("mcp-filesystem");
    let entry = prefix.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run scripts/setup.sh (it installs the npm filesystem server)",
        entry.display()
    );
    // The README's example policy, verbatim.
    let include = r#"["read_*", "list_*", "directory_tree", "search_files", "get_file_info"]"#;
    format!(
        "[proxied_mcps.fs]\ncommand = \"/usr/bin/node\"\nargs = [{:?}, \"/workspace\"]\n\
         binds = [{:?}]\nstart_timeout = 60\n\n\
         [[policies]]\nname = \"fs-read-only\"\nmodule = \"stock:proxy-filter\"\n\
         [policies.config.servers.fs]\ninclude = {}\n",
        entry.display().to_string(),
        prefix.display().to_string(),
        include
    )
}

#[test]
fn only_read_tools_and_only_the_instance_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &config());
    discovered(&gw);
    let status = gw.proxies().status();
    assert!(
        matches!(status["fs"], hpcgate::proxy::Discovery::Ready(_)),
        "{status:?}"
    );
    let alice = caller("chem");
    let mut listed: Vec<String> = gw
        .proxied_tools(&alice)
        .iter()
        .map(|t| t.exposed_name.clone())
        .collect();
    listed.sort();
    let mut expected: Vec<String> = READ_TOOLS.iter().map(|t| format!("fs__{t}")).collect();
    expected.sort();
    assert_eq!(listed, expected);
    for tool in gw.proxied_tools(&alice) {
        assert!(tool.read_only, "{} claims to write", tool.exposed_name);
    }

    for id in ["run1", "run2"] {
        ok(gw.call(&alice, "create_instance", args(json!({"instance_id": id}))));
        ok(gw.call(&alice, "write_file", args(json!({"instance_id": id, "path": "hello.txt", "content": format!("hello from {id}")}))));
    }
    let read = ok(gw.call(
        &alice,
        "fs__read_text_file",
        args(json!({"instance_id": "run1", "path": "/workspace/hello.txt"})),
    ));
    assert_eq!(raw(&read)["content"][0]["text"], "hello from run1");
    let read = ok(gw.call(
        &alice,
        "fs__read_text_file",
        args(json!({"instance_id": "run2", "path": "/workspace/hello.txt"})),
    ));
    assert_eq!(raw(&read)["content"][0]["text"], "hello from run2");

    let listing = ok(gw.call(
        &alice,
        "fs__list_directory",
        args(json!({"instance_id": "run1", "path": "/workspace"})),
    ));
    let text = raw(&listing)["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("hello.txt"), "{text}");

    // Outside the workspace: refused by the server (its only root), and nothing of the host
    // is in the sandbox anyway.
    for path in [
        "/etc/passwd",
        "/workspace/../etc/passwd",
        "/output/../etc/hostname",
    ] {
        let outside = gw.call(
            &alice,
            "fs__read_text_file",
            args(json!({"instance_id": "run1", "path": path})),
        );
        assert!(outside.is_error, "{path}: {outside:?}");
    }

    // Write tools are neither listed nor callable.
    let denied = err(gw.call(
        &alice,
        "fs__write_file",
        args(json!({"instance_id": "run1", "path": "/workspace/x", "content": "x"})),
    ));
    assert!(
        denied.contains("denied by policy `fs-read-only`"),
        "{denied}"
    );
    assert!(!dir.path().join("state").join("x").exists());
}
