//! Every builtin tool's result against the `outputSchema` it advertises, called for real (bwrap
//! jobs, a Slurm job and the cluster's status, a host command, the file tools on a real
//! instance) by two clients: the rmcp client over stdio, each structured result checked by a
//! JSON Schema 2020-12 validator (`boon`) against the schema from `tools/list` and against the
//! same schema closed (no property it does not declare); and the official Python SDK over
//! streamable HTTP, which validates every result against the schema itself. The tools covered
//! must be exactly the builtin tools listed, so a new tool without a schema or a call here
//! fails. Error results carry their message as text and no structured content. Proxied tools
//! keep what their server advertised.

use std::collections::{BTreeMap, BTreeSet};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use crate::support::proxy::test_server;
use crate::support::served::{self, Served};
use crate::support::slurm;

/// Every tool allowed (the default chain hides `host_exec`), one host command.
const CONFIG: &str = r#"
[host_commands.hello]
argv = ["/bin/echo", "hello from the host"]
description = "Say hello"

[[policies]]
name = "tools"
module = "stock:tool-filter"
[policies.config]
allow = ["*"]
"#;

/// One call: its tool, its arguments, and (`job_from`) the earlier call whose job it takes.
fn call(tool: &str, arguments: Value) -> Value {
    json!({ "tool": tool, "arguments": arguments })
}

fn on_job_of(mut call: Value, index: usize) -> Value {
    call["job_from"] = json!(index);
    call
}

/// Calls that cover every builtin tool, and the shapes one tool can give: a job that completed,
/// failed, still runs, was cancelled, was cancelled at the end of its wait; a listing with and
/// without output tails; a symlink's and a directory's facts; a host command's list and run.
/// `slurm`: one Slurm job too (its mode and states).
fn calls(slurm: bool) -> Vec<Value> {
    let i = |rest: Value| {
        let mut arguments = json!({ "instance_id": "s1" });
        arguments
            .as_object_mut()
            .unwrap()
            .extend(rest.as_object().unwrap().clone());
        arguments
    };
    let mut calls = vec![
        call("create_instance", i(json!({"description": "schemas"}))),
        call("list_instances", json!({})),
        call("describe_instance", i(json!({}))),
        call("update_instance", i(json!({"description": ""}))),
        call(
            "write_file",
            i(json!({"path": "dir/a.txt", "content": "hello\n", "create_dirs": true})),
        ),
        call(
            "write_file",
            i(json!({"path": "dir/a.txt", "content": "again\n", "append": true})),
        ),
        call("read_file", i(json!({"path": "dir/a.txt"}))),
        call(
            "read_file",
            i(json!({"path": "dir/a.txt", "offset": 2, "length": 3, "encoding": "base64"})),
        ),
        call(
            "make_directory",
            i(json!({"path": "/output/out", "parents": true})),
        ),
        call(
            "copy_path",
            i(json!({"source": "dir", "destination": "/output/out/copy"})),
        ),
        call(
            "move_path",
            i(json!({"source": "dir/a.txt", "destination": "dir/b.txt"})),
        ),
        // 11: completed, with both tails; it leaves a symlink for stat_path.
        call(
            "submit_job",
            i(json!({"command": "ln -s b.txt dir/link; echo out; echo err >&2", "timeout": 60})),
        ),
        call("stat_path", i(json!({"path": "dir/link"}))),
        call("stat_path", i(json!({"path": "/output/out"}))),
        call(
            "list_directory",
            i(json!({"path": "/workspace", "recursive": true})),
        ),
        call("list_directory", i(json!({"max_entries": 1}))),
        call("search_files", i(json!({"pattern": "**/*.txt"}))),
        call(
            "submit_job",
            i(json!({"command": ["/bin/sh", "-c", "exit 3"], "resources": {"time_limit_s": 60}})),
        ),
        // 18: still running when the call returns.
        call(
            "submit_job",
            i(json!({"command": "sleep 60", "timeout": 0})),
        ),
        on_job_of(call("poll_job", i(json!({"tail": 5}))), 18),
        on_job_of(call("cancel_job", i(json!({}))), 18),
        call(
            "submit_job",
            i(json!({"command": "sleep 60", "timeout": 1, "detach": false})),
        ),
        call(
            "run_python",
            i(json!({"code": "print(6 * 7)", "timeout": 60})),
        ),
        call("list_jobs", json!({})),
        call("list_jobs", i(json!({"limit": 2, "offset": 1}))),
        call("delete_path", i(json!({"path": "dir", "recursive": true}))),
        call("cluster_status", json!({})),
        call("host_exec", json!({})),
        call("host_exec", json!({"command": "hello"})),
    ];
    if slurm {
        let at = calls.len();
        calls.push(call(
            "submit_job",
            i(json!({"command": "sleep 60", "mode": "slurm", "timeout": 0})),
        ));
        calls.push(on_job_of(call("cancel_job", i(json!({}))), at));
        // scancel is asynchronous: wait for Slurm to report the end (archiving waits for it).
        calls.push(on_job_of(call("poll_job", i(json!({"timeout": 60}))), at));
    }
    calls.push(call("archive_instance", i(json!({}))));
    calls.push(call("list_archived_instances", json!({})));
    calls
}

/// The builtin tools of a `tools/list` (proxied ones are `<proxy>__<tool>`), by name with their
/// `outputSchema`; every one must have one.
fn builtin_schemas(tools: &[rmcp::model::Tool]) -> BTreeMap<String, Value> {
    let builtin: BTreeMap<String, Value> = tools
        .iter()
        .filter(|t| !t.name.contains("__"))
        .map(|t| {
            let schema = t.output_schema.as_ref().unwrap_or_else(|| {
                panic!("`{}` has no outputSchema", t.name);
            });
            (t.name.to_string(), Value::Object((**schema).clone()))
        })
        .collect();
    let every: BTreeSet<&str> = hpcgate::tools::Tool::all().map(|t| t.name()).collect();
    assert_eq!(
        builtin.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        every,
        "every builtin tool is listed"
    );
    for (name, schema) in &builtin {
        assert_eq!(schema["type"], "object", "{name}: the root is an object");
        assert!(
            !schema.to_string().contains("\"$ref\""),
            "{name}: inlined: {schema}"
        );
    }
    builtin
}

/// `schema` with every object that declares properties closed to others.
fn closed(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut map: serde_json::Map<String, Value> =
                map.iter().map(|(k, v)| (k.clone(), closed(v))).collect();
            if map.contains_key("properties") {
                map.entry("additionalProperties").or_insert(json!(false));
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.iter().map(closed).collect()),
        other => other.clone(),
    }
}

/// Errors of `instance` against `schema` (2020-12, formats asserted as the TypeScript SDK does),
/// or `None` if it conforms.
fn violations(schema: &Value, instance: &Value) -> Option<String> {
    let mut compiler = boon::Compiler::new();
    compiler.enable_format_assertions();
    let mut schemas = boon::Schemas::new();
    compiler
        .add_resource("urn:hpcgate:output", schema.clone())
        .unwrap();
    let index = compiler
        .compile("urn:hpcgate:output", &mut schemas)
        .unwrap_or_else(|e| panic!("not a valid JSON Schema: {e:#}\n{schema}"));
    schemas
        .validate(instance, index)
        .err()
        .map(|e| format!("{e:#}"))
}

#[test]
fn the_validator_refuses_what_does_not_conform() {
    // The check below must be able to fail: a missing field, a wrong type, an undeclared
    // field (closed), a wrong enum value, a time that is none.
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "kind": {"type": "string", "enum": ["file"]},
            "at": {"type": "string", "format": "date-time"},
        },
        "required": ["n"],
    });
    let at = hpcgate::state::Timestamp::now().to_string();
    assert_eq!(
        violations(&schema, &json!({"n": 1, "kind": "file", "at": at})),
        None
    );
    assert!(violations(&schema, &json!({"n": 1, "at": "yesterday"})).is_some());
    assert!(violations(&schema, &json!({"kind": "file"})).is_some());
    assert!(violations(&schema, &json!({"n": "1"})).is_some());
    assert!(violations(&schema, &json!({"n": 1, "kind": "dir"})).is_some());
    assert_eq!(violations(&schema, &json!({"n": 1, "extra": 2})), None);
    assert!(violations(&closed(&schema), &json!({"n": 1, "extra": 2})).is_some());
}

#[tokio::test]
async fn every_builtin_result_conforms_to_its_output_schema() {
    let dir = tempfile::tempdir().unwrap();
    let server = test_server().display().to_string();
    let extra = format!(
        "{CONFIG}\n[slurm]\nenabled = true\nslurm_conf = {:?}\n\
         [proxied_mcps.t]\ncommand = {server:?}\nbinds = [{server:?}]\n",
        slurm::slurm_conf().display().to_string()
    );
    let config = served::config(dir.path(), &extra);
    let command = served::command(dir.path(), &config, &[]);
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let schemas = builtin_schemas(&tools);

    // Proxied tools keep what their server advertised: `add` its own outputSchema, `echo` none.
    let proxied = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
    assert_eq!(proxied("t__echo").output_schema, None);
    assert_eq!(
        proxied("t__add").output_schema.as_deref().map(|s| json!(s)),
        Some(json!({
            "type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]
        }))
    );

    let mut results: Vec<Value> = Vec::new();
    let mut covered = BTreeSet::new();
    for mut call in calls(true) {
        if let Some(from) = call["job_from"].as_u64() {
            call["arguments"]["job_id"] = results[from as usize]["job"]["job_id"].clone();
        }
        let tool = call["tool"].as_str().unwrap().to_owned();
        let arguments = call["arguments"].as_object().unwrap().clone();
        let result = client
            .call_tool(CallToolRequestParams::new(tool.clone()).with_arguments(arguments))
            .await
            .unwrap();
        assert_ne!(result.is_error, Some(true), "{tool} {call}: {result:?}");
        let structured = result.structured_content.clone().unwrap_or_else(|| {
            panic!("{tool}: a success result carries structured content: {result:?}")
        });
        let schema = &schemas[&tool];
        if let Some(errors) = violations(schema, &structured) {
            panic!("{tool}: the result does not conform:\n{errors}\n{structured:#}");
        }
        if let Some(errors) = violations(&closed(schema), &structured) {
            panic!(
                "{tool}: the result has fields its schema does not declare:\n{errors}\n{structured:#}"
            );
        }
        covered.insert(tool);
        results.push(structured);
    }
    // An error says why in its text and carries no structured content (which no tool's schema
    // describes, and which the TypeScript SDK 1.x would check against it all the same).
    let missing = json!({"instance_id": "nope"}).as_object().unwrap().clone();
    let refused = client
        .call_tool(CallToolRequestParams::new("describe_instance").with_arguments(missing))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(refused.structured_content, None, "{refused:?}");
    let text = refused.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("nope"), "{text}");
    client.cancel().await.unwrap();

    // The calls reached the shapes they were written for.
    let status = |i: usize| results[i]["job"]["status"].as_str().unwrap().to_owned();
    assert_eq!(status(11), "completed");
    assert_eq!(results[11]["job"]["stdout_tail"], "out");
    assert_eq!(results[12]["kind"], "symlink");
    assert_eq!(results[12]["link_target"], "b.txt");
    assert_eq!(status(17), "failed");
    assert_eq!(results[18]["job"]["final"], false);
    assert_eq!(status(20), "cancelled");
    assert_eq!(results[21]["job"]["cancelled_at_end_of_wait"], true);
    assert_eq!(results[22]["job"]["stdout_tail"], "42");
    assert!(results[23]["jobs"][0].get("stdout_tail").is_none());
    assert!(results[26]["slurm"]["partitions"][0]["nodes"].is_array());
    assert_eq!(results[27]["commands"]["hello"]["description"], "Say hello");
    assert_eq!(results[28]["stdout"], "hello from the host\n");
    assert_eq!(results[29]["job"]["mode"], "slurm");
    assert_eq!(status(31), "cancelled");

    assert_eq!(
        covered,
        schemas.keys().cloned().collect::<BTreeSet<_>>(),
        "every listed builtin tool was called and checked"
    );
}

/// The official Python SDK validates each result against the tool's `outputSchema` itself
/// (`ClientSession.call_tool`): every builtin tool, over streamable HTTP.
#[tokio::test]
async fn the_python_sdk_validates_every_builtin_result() {
    let dir = tempfile::tempdir().unwrap();
    let config = served::config(dir.path(), CONFIG);
    let served = Served::http(dir.path(), &config).await;
    let report: Value =
        crate::code_mode::drive_script(&served, "schemas_client.py", &json!(calls(false))).await;
    let (status, stderr) = served.stop().await;
    assert!(status.success(), "{status:?}: {stderr}");

    let with_schema: BTreeSet<&str> = report["output_schemas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let every: BTreeSet<&str> = hpcgate::tools::Tool::all().map(|t| t.name()).collect();
    assert_eq!(
        with_schema, every,
        "the SDK saw an outputSchema for every tool"
    );
    let mut validated = BTreeSet::new();
    for result in report["results"].as_array().unwrap() {
        let tool = result["tool"].as_str().unwrap();
        assert_eq!(result["invalid"], Value::Null, "{tool}: {result}");
        assert_eq!(result["is_error"], false, "{tool}: {result}");
        assert_eq!(result["validated"], true, "{tool}: {result}");
        validated.insert(tool);
    }
    assert_eq!(validated, every, "every tool was called and validated");
}

/// With `[mcp] result_type = "text"` results carry no structured content, so no tool may
/// declare an `outputSchema` (MCP: a tool that does must return conforming structured content);
/// with `structured` every builtin tool declares one.
#[tokio::test]
async fn output_schemas_only_when_results_carry_structured_content() {
    for (result_type, declared) in [("text", false), ("structured", true)] {
        let dir = tempfile::tempdir().unwrap();
        let extra = format!("{CONFIG}\n[mcp]\nresult_type = {result_type:?}\n");
        let config = served::config(dir.path(), &extra);
        let command = served::command(dir.path(), &config, &[]);
        let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
        let tools = client.list_all_tools().await.unwrap();
        assert!(!tools.is_empty());
        for tool in &tools {
            assert_eq!(
                tool.output_schema.is_some(),
                declared,
                "{result_type}: {}",
                tool.name
            );
        }
        if declared {
            builtin_schemas(&tools);
        } else {
            let arguments = json!({"instance_id": "t1"}).as_object().unwrap().clone();
            let created = client
                .call_tool(CallToolRequestParams::new("create_instance").with_arguments(arguments))
                .await
                .unwrap();
            assert_eq!(created.structured_content, None, "{created:?}");
        }
        client.cancel().await.unwrap();
    }
}
