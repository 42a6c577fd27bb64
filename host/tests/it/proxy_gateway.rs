//! Proxied MCP servers through the gateway's dispatch function, in process, with the real
//! `mcp-test-server` inside real bwrap sandboxes: discovery, naming and schemas, filtering and
//! path rules by the stock policies, content pass-through, the result cap, `list_changed`, and
//! a start that no server can delay. The servers' lifecycle is in `proxy_lifecycle`.

use crate::support::proxy as support;

use std::time::{Duration, Instant};

use hpcgate::audit::verify;
use hpcgate::proxy::Discovery;
use serde_json::{Value, json};
use support::{args, caller, create, discovered, err, gateway, names, ok, raw, test_proxy};

#[test]
fn discovery_names_schemas_and_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    assert!(matches!(gw.proxies().status()["t"], Discovery::Ready(_)));
    let listed = names(&gw, "chem");
    for name in [
        "t__echo",
        "t__add",
        "t__nested",
        "t__own_instance_id",
        "t__crash",
    ] {
        assert!(listed.contains(&name.to_owned()), "{name} in {listed:?}");
    }
    let tools = gw.proxied_tools(&caller("chem"));
    let tool = |name: &str| {
        let t = tools.iter().find(|t| t.exposed_name == name).unwrap();
        serde_json::to_value(&t.tool).unwrap()
    };

    let nested = tool("t__nested");
    let schema = &nested["inputSchema"];
    assert_eq!(
        schema["$defs"]["point"]["additionalProperties"], false,
        "{schema}"
    );
    assert_eq!(
        schema["$defs"]["shape"]["properties"]["points"]["items"]["$ref"],
        "#/$defs/point"
    );
    assert_eq!(schema["properties"]["shape"]["$ref"], "#/$defs/shape");
    assert_eq!(schema["properties"]["when"]["format"], "date-time");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["instance_id"]["type"], "string");
    assert_eq!(schema["required"], json!(["instance_id", "shape"]));
    assert_eq!(nested["annotations"]["destructiveHint"], false);

    let own = tool("t__own_instance_id");
    assert_eq!(
        own["inputSchema"]["properties"]["instance_id"]["type"],
        "string"
    );
    assert_eq!(
        own["inputSchema"]["properties"]["remote_instance_id"]["type"],
        "integer"
    );
    assert_eq!(
        own["inputSchema"]["required"],
        json!(["instance_id", "remote_instance_id"])
    );

    let echo = tool("t__echo");
    assert_eq!(echo["description"], "Echo `message` back.");
    assert_eq!(echo["annotations"]["readOnlyHint"], true);
    assert_eq!(echo["annotations"]["title"], "Echo");
    let add = tool("t__add");
    assert_eq!(add["outputSchema"]["required"], json!(["sum"]));
}

#[test]
fn results_pass_through_whole_and_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(
        dir.path(),
        &test_proxy("t", "env = { TEST_MARK = \"marked\" }"),
    );
    discovered(&gw);
    create(&gw, "chem", "run1");
    let alice = caller("chem");

    let echo = ok(gw.call(
        &alice,
        "t__echo",
        args(json!({"instance_id": "run1", "message": "hi"})),
    ));
    assert_eq!(echo.text, "hi");
    assert_eq!(
        raw(&echo)["content"],
        json!([{"type": "text", "text": "hi"}])
    );

    let add = ok(gw.call(
        &alice,
        "t__add",
        args(json!({"instance_id": "run1", "a": 2, "b": 40})),
    ));
    assert_eq!(raw(&add)["structuredContent"], json!({"sum": 42}));
    assert_eq!(add.structured, json!({"sum": 42}));

    let image = ok(gw.call(&alice, "t__image", args(json!({"instance_id": "run1"}))));
    let image = raw(&image);
    let kinds: Vec<_> = image["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "text",
            "image",
            "audio",
            "resource_link",
            "resource",
            "resource"
        ]
    );
    assert_eq!(image["content"][1]["mimeType"], "image/png");
    assert_eq!(
        image["content"][1]["annotations"]["audience"],
        json!(["user"])
    );
    assert_eq!(image["content"][4]["resource"]["text"], "embedded");
    assert_eq!(image["content"][5]["resource"]["blob"], "AAEC");
    assert_eq!(image["structuredContent"]["nested"]["ok"], true);

    let failing = gw.call(&alice, "t__failing", args(json!({"instance_id": "run1"})));
    assert!(failing.is_error);
    assert_eq!(raw(&failing)["isError"], true);
    assert_eq!(
        raw(&failing)["content"][0]["text"],
        "this tool always fails"
    );

    let shape = json!({"points": [{"x": 1, "y": 2}], "label": "l"});
    let nested = ok(gw.call(
        &alice,
        "t__nested",
        args(json!({"instance_id": "run1", "shape": shape, "when": "2026-01-01T00:00:00Z"})),
    ));
    assert_eq!(
        nested.structured["received"],
        json!({"shape": shape, "when": "2026-01-01T00:00:00Z"})
    );

    let own = ok(gw.call(
        &alice,
        "t__own_instance_id",
        args(json!({"instance_id": "run1", "remote_instance_id": 7, "note": "n"})),
    ));
    assert_eq!(
        own.structured["received"],
        json!({"instance_id": 7, "note": "n"}),
        "the remote sees its own instance_id, never the gateway's"
    );

    // The sandbox: cwd /workspace, HOME /tmp, the proxy's env, nothing else of the gateway's.
    let who = ok(gw.call(&alice, "t__whoami", args(json!({"instance_id": "run1"}))));
    assert_eq!(who.structured["mark"], "marked");
    assert_eq!(who.structured["cwd"], "/workspace");
    assert_eq!(who.structured["home"], "/tmp");
    // Only the allow-list (`LANG`, `LC_ALL`, `TZ` when set), `HOME`, `PATH`, the proxy's `env`
    // and bwrap's `PWD` (= /workspace): nothing of the gateway's own environment (cargo sets
    // dozens of `CARGO_*` for this test).
    let names: Vec<&str> = who.structured["env_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for name in &names {
        assert!(
            ["HOME", "PATH", "PWD", "TEST_MARK", "LANG", "LC_ALL", "TZ"].contains(name),
            "{name} leaked into the sandbox: {names:?}"
        );
    }
    assert!(std::env::vars().any(|(k, _)| k.starts_with("CARGO")));

    // The instance's workspace is mounted: a file written by the builtin tool is readable.
    ok(gw.call(
        &alice,
        "write_file",
        args(json!({"instance_id": "run1", "path": "notes.txt", "content": "from the gateway"})),
    ));
    let read = ok(gw.call(
        &alice,
        "t__read_text",
        args(json!({"instance_id": "run1", "path": "notes.txt"})),
    ));
    assert_eq!(read.text, "from the gateway");

    // Audited like builtin tools: the decision record names the server and the remote tool.
    let audit = std::fs::read_to_string(dir.path().join("state/audit/audit-000001.jsonl")).unwrap();
    let decision = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r.pointer("/call/tool") == Some(&json!("t__add")))
        .expect("a decision record for t__add");
    assert_eq!(decision["call"]["server"], "t");
    assert_eq!(decision["call"]["remote_tool"], "add");
    assert_eq!(decision["call"]["read_only"], true);
    let failed = audit
        .lines()
        .filter(|l| l.contains("this tool always fails"))
        .count();
    assert_eq!(failed, 1, "the isError outcome is recorded");
    let report = verify(&dir.path().join("state/audit"), None).unwrap();
    assert!(report.intact, "{report:?}");
}

#[test]
fn proxy_filter_hides_and_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let config = test_proxy(
        "t",
        "include = [\"echo\", \"add\", \"read_*\"]\nexclude = [\"add\"]",
    );
    let gw = gateway(dir.path(), &config);
    discovered(&gw);
    assert_eq!(names(&gw, "chem"), ["t__echo", "t__read_text"]);
    create(&gw, "chem", "run1");
    let alice = caller("chem");
    let denied = err(gw.call(
        &alice,
        "t__add",
        args(json!({"instance_id": "run1", "a": 1, "b": 2})),
    ));
    assert!(
        denied.contains("denied by policy `proxied_mcps`") && denied.contains("exclude glob `add`"),
        "{denied}"
    );
    let denied = err(gw.call(&alice, "t__crash", args(json!({"instance_id": "run1"}))));
    assert!(
        denied.contains("matches none of the include globs"),
        "{denied}"
    );
    assert_eq!(gw.proxies().starts(), 0, "nothing hidden ran");
    let unknown = err(gw.call(&alice, "t__nope", args(json!({"instance_id": "run1"}))));
    assert!(unknown.contains("unknown tool `t__nope`"), "{unknown}");
    ok(gw.call(
        &alice,
        "t__echo",
        args(json!({"instance_id": "run1", "message": "x"})),
    ));
}

/// A server's `exclude` holds for every tenant beside a filter of the admin's own, whatever
/// that filter's scope or mode: it is never merged into it.
#[test]
fn a_servers_exclude_holds_beside_an_admins_scoped_filter() {
    for scope in [
        "tenants = [\"bio\"]",
        "mode = \"monitor\"",
        "tools = [\"fs__*\"]",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "{}[[policies]]\nname = \"admins\"\nmodule = \"stock:proxy-filter\"\n{scope}\n\
             [policies.config.servers.fs]\ninclude = [\"read_*\"]\n",
            test_proxy("t", "exclude = [\"add\"]")
        );
        let gw = gateway(dir.path(), &config);
        discovered(&gw);
        assert!(
            !names(&gw, "chem").contains(&"t__add".to_owned()),
            "{scope}"
        );
        create(&gw, "chem", "run1");
        let add = args(json!({"instance_id": "run1", "a": 1, "b": 2}));
        let denied = err(gw.call(&caller("chem"), "t__add", add));
        assert!(
            denied.contains("denied by policy `proxied_mcps`"),
            "{scope}: {denied}"
        );
        assert_eq!(gw.proxies().starts(), 0, "{scope}: nothing excluded ran");
    }
}

#[test]
fn path_rules_apply_to_proxied_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}\n[[policies]]\nname = \"paths\"\nmodule = \"stock:path-rules\"\n[policies.config]\n\
         path_arguments = [\"path\"]\ndeny_read = [\"/workspace/secret/**\"]\n",
        test_proxy("t", "")
    );
    let gw = gateway(dir.path(), &config);
    discovered(&gw);
    create(&gw, "chem", "run1");
    let alice = caller("chem");
    for path in ["secret/key", "/workspace/secret/key", "a/../secret/key"] {
        let denied = err(gw.call(
            &alice,
            "t__read_text",
            args(json!({"instance_id": "run1", "path": path})),
        ));
        assert!(
            denied.contains("denied by policy `paths`"),
            "{path}: {denied}"
        );
    }
    assert_eq!(gw.proxies().starts(), 0);
    // Outside the workspace the sandbox shows nothing of the host.
    let shadow = gw.call(
        &alice,
        "t__read_text",
        args(json!({"instance_id": "run1", "path": "/etc/shadow"})),
    );
    assert!(shadow.is_error, "{shadow:?}");
}

#[test]
fn results_over_the_cap_become_errors() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", "max_result_bytes = 10000"));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let alice = caller("chem");
    ok(gw.call(
        &alice,
        "t__huge",
        args(json!({"instance_id": "run1", "bytes": 5000})),
    ));
    let capped = err(gw.call(
        &alice,
        "t__huge",
        args(json!({"instance_id": "run1", "bytes": 20000})),
    ));
    assert!(capped.contains("over the limit of 10000"), "{capped}");
}

#[test]
fn list_changed_refreshes_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    create(&gw, "chem", "run1");
    assert!(!names(&gw, "chem").contains(&"t__extra".to_owned()));
    ok(gw.call(
        &caller("chem"),
        "t__enable_extra",
        args(json!({"instance_id": "run1"})),
    ));
    let until = Instant::now() + Duration::from_secs(5);
    while !names(&gw, "chem").contains(&"t__extra".to_owned()) {
        assert!(Instant::now() < until, "t__extra never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let extra = ok(gw.call(
        &caller("chem"),
        "t__extra",
        args(json!({"instance_id": "run1"})),
    ));
    assert_eq!(extra.text, "extra works");
}

/// A storm of `list_changed` from a server whose every `tools/list` page names another is
/// listed one listing at a time (one running, one wanted), each cut off after a bounded number
/// of pages: the listings stop, having asked the server a bounded number of times, and calls
/// go on. (Before: a listing per notification, each without end.)
#[test]
fn a_storm_of_list_changed_makes_few_bounded_listings() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &test_proxy("t", ""));
    discovered(&gw);
    create(&gw, "chem", "run1");
    let chem = caller("chem");
    let lists = || {
        let whoami = ok(gw.call(&chem, "t__whoami", args(json!({"instance_id": "run1"}))));
        whoami.structured["lists"].as_u64().expect("a count")
    };
    let storm = args(json!({"instance_id": "run1", "count": 1000}));
    ok(gw.call(&chem, "t__list_storm", storm));
    let until = Instant::now() + Duration::from_secs(30);
    let mut seen = lists();
    loop {
        // Longer than the pause between two listings of one server (1 s).
        std::thread::sleep(Duration::from_millis(1500));
        let now = lists();
        if now == seen {
            break;
        }
        assert!(Instant::now() < until, "the listings never stop: {now}");
        seen = now;
    }
    // Each listing was cut at 64 pages, and they ran one after another, each for the
    // notifications that came while the one before ran: a few, not one per notification.
    assert_eq!(seen % 64, 0, "{seen} pages: every listing cut at 64");
    assert!(
        seen <= 20 * 64,
        "{seen} pages of tools/list for 1,000 notifications"
    );
    ok(gw.call(
        &chem,
        "t__echo",
        args(json!({"instance_id": "run1", "message": "x"})),
    ));
}

/// The start and the first builtin call do not wait for discovery: `stalls` (a server that
/// never answers, with a 10-minute `start_timeout`) is still pending after both; then only the
/// other servers' discovery is awaited.
#[test]
fn slow_or_broken_servers_never_delay_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[proxied_mcps.broken]\ncommand = \"/nonexistent/server\"\n\
         [proxied_mcps.hangs]\ncommand = \"/usr/bin/sleep\"\nargs = [\"30\"]\nstart_timeout = 1\n\
         [proxied_mcps.stalls]\ncommand = \"/usr/bin/sleep\"\nargs = [\"600\"]\nstart_timeout = 600\n",
        test_proxy("t", "")
    );
    let gw = gateway(dir.path(), &config);
    create(&gw, "chem", "run1");
    assert!(
        matches!(gw.proxies().status()["stalls"], Discovery::Pending),
        "the start or the call waited for discovery: {:?}",
        gw.proxies().status()
    );
    let until = Instant::now() + Duration::from_secs(30);
    while ["t", "broken", "hangs"]
        .iter()
        .any(|name| matches!(gw.proxies().status()[*name], Discovery::Pending))
    {
        assert!(Instant::now() < until, "discovery did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = gw.proxies().status();
    assert!(matches!(status["stalls"], Discovery::Pending));
    let failed = |name: &str| match &status[name] {
        Discovery::Failed(reason) => reason.clone(),
        other => panic!("{name}: {other:?}"),
    };
    assert!(
        failed("hangs").contains("no MCP handshake within 1s"),
        "{}",
        failed("hangs")
    );
    assert!(
        failed("broken").contains("could not start"),
        "{}",
        failed("broken")
    );
    assert!(!failed("broken").contains(dir.path().to_str().unwrap()));
    assert!(matches!(status["t"], Discovery::Ready(_)));
    let listed = names(&gw, "chem");
    assert!(listed.iter().all(|n| n.starts_with("t__")), "{listed:?}");
    let unavailable = err(gw.call(
        &caller("chem"),
        "broken__anything",
        args(json!({"instance_id": "run1"})),
    ));
    assert!(
        unavailable.contains("proxied server `broken` could not be started")
            && unavailable.contains("hpcgate doctor")
            && !unavailable.contains("/nonexistent"),
        "{unavailable}"
    );
}
