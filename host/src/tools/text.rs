//! The text block of a builtin tool's result: the one-line summary first, then what the
//! structured content carries, readable by a model that sees only `content` (many clients show
//! it nothing else, and MCP says a tool returning structured content SHOULD return it as text
//! too).
//!
//! One rendering for every tool, driven by the shape of the structured value, so a new tool
//! or field cannot be forgotten: scalars as `key: value`; multi-line or long strings (a job's
//! output tails, a file's content, a host command's output) verbatim in a Markdown fence longer
//! than any backtick run inside, so the text is never indented or escaped; lists of records one
//! line each (a listing); nested records indented. Nulls and empty values are left out: they
//! carry nothing. Keys come in the structured value's order (sorted), so the text is
//! deterministic.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// Strings longer than this (or with a line break) are shown as a block.
const INLINE_MAX: usize = 160;

/// `summary`, then the details of `structured`.
pub fn render(summary: &str, structured: &Value) -> String {
    let mut out = String::from(summary);
    if let Value::Object(map) = structured {
        object(map, 0, &mut out);
    }
    out
}

fn object(map: &Map<String, Value>, indent: usize, out: &mut String) {
    for (key, value) in map {
        if is_empty(value) {
            continue;
        }
        field(key, value, indent, out);
    }
}

fn field(key: &str, value: &Value, indent: usize, out: &mut String) {
    out.push('\n');
    pad(indent, out);
    out.push_str(key);
    match value {
        Value::String(s) if s.contains('\n') || s.len() > INLINE_MAX => {
            out.push_str(":\n");
            fenced(s, out);
        }
        Value::Object(inner) => {
            out.push(':');
            object(inner, indent + 2, out);
        }
        Value::Array(items) if items.iter().any(|i| i.is_object()) => {
            let _ = write!(out, " ({}):", items.len());
            for item in items {
                out.push('\n');
                pad(indent, out);
                out.push_str("- ");
                one_line(item, out);
            }
        }
        _ => {
            out.push_str(": ");
            scalar(value, out);
        }
    }
}

fn pad(indent: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A record on one line: `key=value` pairs, nested values as compact JSON.
fn one_line(item: &Value, out: &mut String) {
    let Value::Object(map) = item else {
        return scalar(item, out);
    };
    let mut first = true;
    for (k, v) in map.iter().filter(|(_, v)| !is_empty(v)) {
        if !std::mem::take(&mut first) {
            out.push(' ');
        }
        out.push_str(k);
        out.push('=');
        scalar(v, out);
    }
}

fn scalar(value: &Value, out: &mut String) {
    match value {
        Value::String(s) if !s.contains('\n') => out.push_str(s),
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// `text` in a fence of backticks longer than any run inside it (CommonMark), on lines of
/// its own.
fn fenced(text: &str, out: &mut String) {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    out.push_str(&fence);
    out.push('\n');
    out.push_str(text);
    if !text.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&fence);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_shows_its_output_and_reason_after_the_summary() {
        let text = render(
            "submitted: job `j-1` [local] completed (exit 0) — echo hi",
            &json!({"job": {
                "job_id": "j-1", "status": "completed", "exit_code": 0, "signal": null,
                "reason": null, "message": null, "stdout_tail": "hi", "stderr_tail": "",
                "command": ["/bin/sh", "-c", "echo hi"],
            }}),
        );
        assert_eq!(
            text,
            "submitted: job `j-1` [local] completed (exit 0) — echo hi\n\
             job:\n  command: [\"/bin/sh\",\"-c\",\"echo hi\"]\n  exit_code: 0\n  job_id: j-1\n  \
             status: completed\n  stdout_tail: hi"
        );
        let failed = render(
            "s",
            &json!({"job": {"reason": "oom", "stderr_tail": "a\nb ``` c"}}),
        );
        assert_eq!(
            failed,
            "s\njob:\n  reason: oom\n  stderr_tail:\n````\na\nb ``` c\n````"
        );
    }

    #[test]
    fn file_content_is_verbatim_and_listings_are_one_line_each() {
        let read = render(
            "read 12 bytes of `a.txt`",
            &json!({"path": "a.txt", "content": "line 1\n  line 2\n", "eof": true}),
        );
        assert_eq!(
            read,
            "read 12 bytes of `a.txt`\ncontent:\n```\nline 1\n  line 2\n```\neof: true\npath: a.txt"
        );
        let listed = render(
            "2 entries in `.`",
            &json!({"path": ".", "entries": [
                {"name": "a", "kind": "file", "size": 3, "target": null},
                {"name": "d", "kind": "directory", "size": 0, "meta": {"x": 1}},
            ]}),
        );
        assert_eq!(
            listed,
            "2 entries in `.`\nentries (2):\n- kind=file name=a size=3\n- kind=directory meta={\"x\":1} name=d size=0\npath: ."
        );
        assert_eq!(render("ok", &Value::Null), "ok");
    }
}
