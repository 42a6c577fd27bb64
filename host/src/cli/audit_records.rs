//! How the audit commands print records: one line for people or the record's JSON, and
//! `audit tail --follow`.

use std::path::Path;
use std::process::ExitCode;

use super::out;
use crate::audit::{self, Filter, Record, Scope};

/// `audit tail --follow`: the `n` newest matching records oldest first, then every matching
/// record written after them. Each look reads from where the last one ended (`since` the time
/// of the last record read, matching or not, past its `seq`), so it costs what was written
/// since. Ends when the output is closed.
pub(super) fn follow(
    dir: &Path,
    scope: Scope,
    filter: Filter,
    n: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    anyhow::ensure!(
        filter.until.is_none(),
        "`--follow` prints records as they are written: leave out `--until`"
    );
    // Where the first look ends: the log's newest record before the matching ones are read
    // (a record written in between is shown or read again), or the last of those if newer.
    let newest = audit::tail(dir, &Scope::AllTenants, &Filter::default(), 1)?;
    let mut shown = audit::tail(dir, &scope, &filter, n)?;
    shown.reverse();
    let mut last = (newest.first().into_iter())
        .chain(shown.last())
        .map(|r| (r.seq, r.ts))
        .max();
    let stdout = std::io::stdout();
    let mut printed = shown;
    loop {
        let mut sink = stdout.lock();
        for record in printed.drain(..) {
            let line = record_line(&record, json);
            if writeln!(sink, "{line}").is_err() {
                return Ok(ExitCode::SUCCESS);
            }
        }
        if sink.flush().is_err() {
            return Ok(ExitCode::SUCCESS);
        }
        drop(sink);
        std::thread::sleep(std::time::Duration::from_millis(250));
        let look = Filter {
            since: last.map(|(_, ts)| ts),
            ..Filter::default()
        };
        for record in audit::records(dir, Scope::AllTenants, look)? {
            let record = record?;
            if last.is_some_and(|(seq, _)| record.seq <= seq) {
                continue;
            }
            last = Some((record.seq, record.ts));
            if scope.allows(&record) && filter.matches(&record) {
                printed.push(record);
            }
        }
    }
}

pub(super) fn print_record(record: &Record, json: bool) {
    out(record_line(record, json));
}

/// A record as `tail` and `query` print it: its JSON, or one line for people.
fn record_line(record: &Record, json: bool) -> String {
    if json {
        return serde_json::to_string(record).expect("a record serialises");
    }
    let e = &record.entry;
    let mut line = format!("{:>6} {} {}", record.seq, record.ts, e.event);
    if let Some(tenant) = &e.tenant {
        line.push_str(&format!(
            " {}/{}",
            text(tenant),
            text(e.principal.as_deref().unwrap_or("-"))
        ));
    }
    if let Some(tool) = &e.tool {
        line.push_str(&format!(" {}", text(tool)));
    }
    if let Some(instance) = &e.instance {
        line.push_str(&format!(" [{}]", text(instance)));
    }
    if let Some(d) = &e.decision {
        let kind = serde_json::to_value(d.decision).expect("a decision kind serialises");
        line.push_str(&format!(" {}", kind.as_str().unwrap_or("?")));
        if let Some(policy) = &d.policy {
            line.push_str(&format!(" by `{}`", text(policy)));
        }
        if let Some(reason) = &d.reason {
            line.push_str(&format!(": {}", text(reason)));
        }
    }
    if let Some(o) = &e.outcome {
        line.push_str(&format!(
            " {}",
            json_text(&serde_json::to_string(o).expect("an outcome"))
        ));
    }
    if let Some(ms) = e.duration_ms {
        line.push_str(&format!(" {ms:.3}ms"));
    }
    if let Some(detail) = &e.detail {
        line.push_str(&format!(
            " {}",
            json_text(&serde_json::Value::Object(detail.clone()).to_string())
        ));
    }
    line
}

/// A free-text field of a record (a tool name as the client sent it, a principal, a policy's
/// reason) as one line shows it: as it is, or quoted and escaped if it holds anything a terminal
/// would act on or hide — a line break, an escape sequence, a bidirectional override — so that
/// no caller can make one record print as two, or recolour or rewrite what the admin sees.
fn text(field: &str) -> std::borrow::Cow<'_, str> {
    if field.chars().all(plain) {
        std::borrow::Cow::Borrowed(field)
    } else {
        std::borrow::Cow::Owned(format!("\"{}\"", field.escape_debug()))
    }
}

/// JSON text as one line shows it: what JSON leaves raw but a terminal acts on or hides (a
/// bidirectional override, a line separator) written as `\uXXXX` escapes, still valid JSON.
fn json_text(json: &str) -> String {
    let mut shown = String::with_capacity(json.len());
    for c in json.chars() {
        if plain(c) {
            shown.push(c);
        } else {
            for unit in c.encode_utf16(&mut [0; 2]) {
                shown.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    shown
}

/// A character a terminal shows as itself (quotes and backslashes included).
fn plain(c: char) -> bool {
    matches!(c, '"' | '\'' | '\\') || c.escape_debug().len() == 1
}
