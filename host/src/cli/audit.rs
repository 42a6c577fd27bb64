//! `hpcgate audit verify|checkpoint|key|prune|compress|tail|query`: admin commands over the audit directory
//! (default `$HPCGATE_STATE_DIR/audit`, else `~/.local/share/hpcgate/audit`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::audit_records::{self, print_record};
use super::out;
use crate::audit::{self, Checkpoint, Event, Filter, Scope, Timestamp, VerifyReport, bench::bench};
use crate::policy::DecisionKind;

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify the hash chain (against checkpoints, if given); exit 0 iff intact.
    Verify {
        #[arg(long)]
        dir: Option<PathBuf>,
        /// A checkpoint printed earlier by `hpcgate audit checkpoint`.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// A checkpoint sink (`[audit] checkpoint_sink`, or lines of syslog): the log must
        /// match every checkpoint in it, each signature must verify.
        #[arg(long)]
        checkpoints: Option<PathBuf>,
        /// The gateway's public key (hex, or a file holding it) as printed by `hpcgate audit
        /// key`: every checkpoint must be signed by it.
        #[arg(long, requires = "checkpoints")]
        key: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Verify the log, then print its last record as a JSON checkpoint; keep it somewhere the
    /// gateway cannot write, and pass it to `verify --checkpoint` later.
    Checkpoint {
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Print the public key that signs the automatic checkpoints (`[audit] checkpoint_every`);
    /// keep it with the checkpoints, and pass it to `verify --key`.
    Key {
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Print the redacted form each file's content takes in this log (`write_file`'s `content`,
    /// any redacted text): `{"redacted", "hmac_sha256", "key", "bytes"}` under the log's
    /// `redaction.key`, one line per file, to find or compare in its records.
    Digest {
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Digest the file's standard base64 text (padded, no line breaks), as a `write_file`
        /// with `encoding = "base64"` sent and recorded it.
        #[arg(long)]
        base64: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Remove whole segments whose records are all older than `--before` (never the newest
    /// segment), leaving an anchor so the rest still verifies, and record that in the log.
    Prune {
        #[arg(long)]
        dir: Option<PathBuf>,
        /// RFC 3339, a date, or an age like `90d`.
        #[arg(long)]
        before: String,
        #[arg(long)]
        json: bool,
    },
    /// Compress the closed segments (all but the newest) with zstd now, as `[audit] compress =
    /// "zstd"` does after each rotation; every audit command reads them as before.
    Compress {
        #[arg(long)]
        dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Print the newest matching records, newest first; with `--follow`, oldest first and then
    /// each new matching record as it is written.
    Tail {
        #[arg(long)]
        dir: Option<PathBuf>,
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print each record as its JSON line.
        #[arg(long)]
        json: bool,
        /// Keep printing matching records as they are written (a look every 250 ms), across
        /// rotations, until interrupted or the output is closed.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Print every matching record, oldest first.
    Query {
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long)]
        json: bool,
    },
    /// Measure append throughput and latency with fsync (in fresh directories under `--dir`);
    /// with `--records N`, instead generate an N-record log and time tail, query, verify and
    /// `policy test` on it (and with `--compress`, again once its closed segments are
    /// compressed).
    #[command(hide = true)]
    Bench {
        /// Generate a log of this many records and time the read-side commands on it.
        #[arg(long)]
        records: Option<u64>,
        /// Runs per command with `--records` (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// With `--records`: then compress the closed segments and time the commands again.
        #[arg(long, requires = "records")]
        compress: bool,
        /// Parent of the scratch logs; default the system temp directory.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Concurrent writers, one run per value.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 16])]
        writers: Vec<usize>,
        /// Appends per writer.
        #[arg(long, default_value_t = 2_000)]
        appends: usize,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct FilterArgs {
    /// Only this tenant's records (gateway-wide records have none).
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    instance: Option<String>,
    /// Glob over tool names, e.g. `fs__*`.
    #[arg(long)]
    tool: Option<String>,
    #[arg(long)]
    principal: Option<String>,
    /// allow, deny or rewrite.
    #[arg(long, value_parser = parse_decision)]
    decision: Option<DecisionKind>,
    /// call, instance.created, job.state, audit.repaired, ...
    #[arg(long)]
    event: Option<Event>,
    /// From this time (RFC 3339, a date, or an age like `2h`).
    #[arg(long)]
    since: Option<String>,
    /// Before this time.
    #[arg(long)]
    until: Option<String>,
}

fn parse_decision(text: &str) -> Result<DecisionKind, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| format!("`{text}` is not a decision; use allow, deny or rewrite"))
}

impl FilterArgs {
    fn resolve(self) -> anyhow::Result<(Scope, Filter)> {
        let now = Timestamp::now();
        let time = |t: Option<String>| -> anyhow::Result<Option<Timestamp>> {
            Ok(t.map(|t| Timestamp::parse_bound(&t, now)).transpose()?)
        };
        let tool = self
            .tool
            .map(|t| hpcgate_policy_sdk::glob::Glob::new(&t))
            .transpose()
            .map_err(|e| anyhow::anyhow!("`--tool`: {e}"))?;
        let filter = Filter {
            instance: self.instance,
            tool,
            decision: self.decision,
            event: self.event,
            principal: self.principal,
            since: time(self.since)?,
            until: time(self.until)?,
        };
        let scope = self.tenant.map_or(Scope::AllTenants, Scope::Tenant);
        Ok((scope, filter))
    }
}

pub(crate) fn run(command: AuditCommand) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Verify {
            dir,
            checkpoint,
            checkpoints,
            key,
            json,
        } => verify(
            &resolve_dir(dir)?,
            checkpoint.as_deref(),
            checkpoints.as_deref(),
            key.as_deref(),
            json,
        ),
        AuditCommand::Prune { dir, before, json } => {
            let dir = resolve_dir(dir)?;
            let _owner = super::owner::as_owner_of(&dir)?;
            let before = Timestamp::parse_bound(&before, Timestamp::now())
                .map_err(|e| anyhow::anyhow!("`--before`: {e}"))?;
            let report = audit::prune(&dir, before)?;
            if json {
                out(serde_json::to_string_pretty(&report)?);
            } else if report.removed_segments == 0 {
                out(format!(
                    "nothing to prune: no closed segment ends before {before}"
                ));
            } else {
                let anchor = report.anchor.as_ref().expect("an anchor after pruning");
                out(format!(
                    "removed {} segments ({} records) older than {before}; the log now starts at seq {} in `{}`",
                    report.removed_segments,
                    report.removed_records,
                    anchor.next_seq,
                    format_args!("audit-{:06}.jsonl", anchor.first_segment)
                ));
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Compress { dir, json } => {
            let dir = resolve_dir(dir)?;
            let _owner = super::owner::as_owner_of(&dir)?;
            compress(&dir, json)
        }
        AuditCommand::Key { dir } => {
            let dir = resolve_dir(dir)?;
            let key = audit::CheckpointKey::load(&dir).with_context(|| {
                format!(
                    "no checkpoint key in `{}`: the gateway creates it when it starts with `[audit] checkpoint_every` set",
                    dir.display()
                )
            })?;
            out(key.public_hex());
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Digest { dir, base64, files } => {
            let dir = resolve_dir(dir)?;
            let path = dir.join(audit::REDACTION_KEY_FILE);
            let key = audit::load_redaction_key(&path).with_context(|| {
                format!(
                    "cannot read the log's redaction key `{}` (its owner and root can)",
                    path.display()
                )
            })?;
            for file in files {
                let mut content = std::fs::read(&file)
                    .with_context(|| format!("cannot read `{}`", file.display()))?;
                // A file's content is recorded as the text it was sent as.
                if base64 {
                    use base64::Engine as _;
                    content = base64::engine::general_purpose::STANDARD
                        .encode(&content)
                        .into_bytes();
                }
                let form = serde_json::json!({
                    "redacted": true,
                    "hmac_sha256": key.digest(&content),
                    "key": key.id(),
                    "bytes": content.len(),
                });
                out(form.to_string());
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Checkpoint { dir } => {
            let dir = resolve_dir(dir)?;
            let _owner = super::owner::as_owner_of(&dir)?;
            checkpoint(&dir)
        }
        AuditCommand::Tail {
            dir,
            n,
            filter,
            json,
            follow,
        } => {
            let (scope, filter) = filter.resolve()?;
            let dir = resolve_dir(dir)?;
            if follow {
                return audit_records::follow(&dir, scope, filter, n, json);
            }
            let records = audit::tail(&dir, &scope, &filter, n)?;
            records.iter().for_each(|r| print_record(r, json));
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Query { dir, filter, json } => {
            let (scope, filter) = filter.resolve()?;
            let mut records = audit::records(&resolve_dir(dir)?, scope, filter)?;
            if json {
                // Each record's line as it is on disk (its canonical JSON), checked.
                use std::io::Write as _;
                let stdout = std::io::stdout();
                let mut sink = std::io::BufWriter::new(stdout.lock());
                while let Some(line) = records.next_line() {
                    let mut line = line?;
                    line.push(b'\n');
                    if sink.write_all(&line).is_err() {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                let _ = sink.flush();
            } else {
                for record in records {
                    print_record(&record?, json);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Bench {
            records: Some(records),
            runs,
            dir,
            json,
            compress,
            ..
        } => {
            let parent = dir.unwrap_or_else(std::env::temp_dir);
            let report = super::audit_scale::run(&parent, records, runs, compress)?;
            if json {
                out(serde_json::to_string_pretty(&report)?);
                return Ok(ExitCode::SUCCESS);
            }
            out(format!(
                "{} records in {} segments ({} MB), last hour {} records; load before: {}",
                report["records"],
                report["segments"],
                report["bytes"].as_u64().unwrap_or(0) >> 20,
                report["records_in_last_hour"],
                report["load_before"].as_str().unwrap_or("?")
            ));
            print_scale_rows(&report["commands"]);
            let compressed = &report["compressed"];
            if !compressed.is_null() {
                out(format!(
                    "compressed {} closed segments in {} s: {} MB into {} MB; last hour {} records; load before: {}",
                    compressed["segments"],
                    compressed["compress_s"],
                    compressed["plain_bytes"].as_u64().unwrap_or(0) >> 20,
                    compressed["compressed_bytes"].as_u64().unwrap_or(0) >> 20,
                    compressed["records_in_last_hour"],
                    compressed["load_before"].as_str().unwrap_or("?")
                ));
                print_scale_rows(&compressed["commands"]);
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Bench {
            dir,
            writers,
            appends,
            json,
            records: None,
            ..
        } => run_bench(dir, &writers, appends, json),
    }
}

fn compress(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let report = audit::compress_closed(dir)?;
    if json {
        out(serde_json::to_string_pretty(&report)?);
    } else if report.segments == 0 {
        out("nothing to compress: every closed segment is compressed already".to_owned());
    } else {
        out(format!(
            "compressed {} closed segments: {:.1} MB into {:.1} MB",
            report.segments,
            report.plain_bytes as f64 / 1e6,
            report.compressed_bytes as f64 / 1e6
        ));
    }
    if report.skipped.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    if !json {
        for skipped in &report.skipped {
            out(format!("left plain: {skipped}"));
        }
        out("run `hpcgate audit verify` to see what is wrong with them".to_owned());
    }
    Ok(ExitCode::from(1))
}

/// The rows of `audit bench --records`.
fn print_scale_rows(rows: &serde_json::Value) {
    for row in rows.as_array().into_iter().flatten() {
        out(format!(
            "{:<42} {:>9.1} ms (≤ {} ms, {:.1} s CPU)  {:>7.1} MB RSS{}  {}",
            row["command"].as_str().unwrap_or("?"),
            row["ms"].as_f64().unwrap_or(0.0),
            row["target_ms"],
            row["cpu_s"].as_f64().unwrap_or(0.0),
            row["rss_mb"].as_f64().unwrap_or(0.0),
            row["target_rss_mb"]
                .as_f64()
                .map_or(String::new(), |t| format!(" (≤ {t} MB)")),
            if row["pass"] == true { "pass" } else { "FAIL" }
        ));
    }
}

/// `--dir`, else `$HPCGATE_STATE_DIR/audit`, else `~/.local/share/hpcgate/audit`.
fn resolve_dir(dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match dir {
        Some(dir) => dir,
        None => match std::env::var_os("HPCGATE_STATE_DIR").filter(|s| !s.is_empty()) {
            Some(state) => PathBuf::from(state).join("audit"),
            None => {
                let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).context(
                    "neither `--dir`, `HPCGATE_STATE_DIR` nor `HOME` is set; pass `--dir`",
                )?;
                PathBuf::from(home).join(".local/share/hpcgate/audit")
            }
        },
    };
    // A mistyped directory must not read as an intact, empty log.
    anyhow::ensure!(
        dir.is_dir(),
        "no audit directory at `{}`; pass `--dir` or set `HPCGATE_STATE_DIR`",
        dir.display()
    );
    Ok(dir)
}

fn verify(
    dir: &Path,
    checkpoint: Option<&Path>,
    checkpoints: Option<&Path>,
    key: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let checkpoint = checkpoint
        .map(|path| -> anyhow::Result<Checkpoint> {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read checkpoint `{}`", path.display()))?;
            Checkpoint::from_json(&text).with_context(|| format!("`{}`", path.display()))
        })
        .transpose()?;
    let key = key
        .map(|text| {
            let text = match std::fs::read_to_string(text) {
                Ok(contents) => contents,
                Err(_) => text.to_owned(),
            };
            audit::parse_public_key(&text).map_err(|e| anyhow::anyhow!("`--key`: {e}"))
        })
        .transpose()?;
    let mut all: Vec<Checkpoint> = checkpoint.iter().cloned().collect();
    let mut notes = Vec::new();
    if let Some(path) = checkpoints {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read checkpoints `{}`", path.display()))?;
        let set = audit::read_checkpoints(&text, key.as_ref())
            .with_context(|| format!("`{}` cannot be trusted", path.display()))?;
        for (line, why) in &set.ignored {
            notes.push(format!(
                "note: `{}` line {line} ignored: {why}",
                path.display()
            ));
        }
        notes.push(format!(
            "{} checkpoints from `{}` ({} signed{}, {} unsigned)",
            set.checkpoints.len(),
            path.display(),
            set.signed,
            set.key
                .as_ref()
                .map_or(String::new(), |k| format!(" by {k}")),
            set.unsigned
        ));
        all.extend(set.checkpoints);
    }
    let report = audit::verify_against(dir, &all)?;
    if json {
        out(serde_json::to_string_pretty(&report)?);
    } else {
        notes.iter().for_each(out);
        out(describe(dir, &report, all.iter().max_by_key(|c| c.seq)));
    }
    Ok(if report.intact {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn describe(dir: &Path, report: &VerifyReport, checkpoint: Option<&Checkpoint>) -> String {
    let last = report.last.as_ref().map_or("no records".to_owned(), |c| {
        format!("last seq {} hash {}", c.seq, c.hash)
    });
    match &report.first_broken {
        None => {
            let against = match checkpoint {
                None => String::new(),
                // Its record was pruned: only the anchor's own record is still checked.
                Some(c) if c.seq + 1 < report.first_seq => format!(
                    "; checkpoint at seq {} is of a pruned record (the log starts at seq {}) and was not checked",
                    c.seq, report.first_seq
                ),
                Some(c) => format!("; checkpoint at seq {} matched", c.seq),
            };
            format!(
                "intact: {} records in {} files under `{}`, {last}{against}",
                report.records,
                report.files,
                dir.display()
            )
        }
        Some(b) => format!(
            "BROKEN at `{}` line {}{}: {}\n{} records verified before it ({last})",
            dir.join(&b.file).display(),
            b.line,
            b.seq.map_or(String::new(), |s| format!(" (seq {s})")),
            b.problem,
            report.records
        ),
    }
}

fn checkpoint(dir: &Path) -> anyhow::Result<ExitCode> {
    let report = audit::verify(dir, None)?;
    if !report.intact {
        out(describe(dir, &report, None));
        out("no checkpoint printed: the log is broken");
        return Ok(ExitCode::from(1));
    }
    out(report.last.unwrap_or_else(Checkpoint::genesis).to_json());
    Ok(ExitCode::SUCCESS)
}

fn run_bench(
    dir: Option<PathBuf>,
    writers: &[usize],
    appends: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let parent = dir.unwrap_or_else(std::env::temp_dir);
    let mut reports = Vec::new();
    for &n in writers {
        let scratch = parent.join(format!("hpcgate-audit-bench-{}-{n}", std::process::id()));
        let report = bench(&scratch, n, appends);
        let _ = std::fs::remove_dir_all(&scratch);
        let report = report?;
        if !json {
            out(format!(
                "{:>3} writers: {:>8} appends in {:.2}s = {:>9.0} appends/s; p50 {:>8.1} µs, p99 {:>8.1} µs; {:.1} records per fsync",
                report.writers,
                report.appends,
                report.seconds,
                report.appends_per_s,
                report.p50_us,
                report.p99_us,
                report.appends as f64 / report.batches.max(1) as f64
            ));
        }
        reports.push(report);
    }
    if json {
        out(serde_json::to_string_pretty(&reports)?);
    }
    Ok(ExitCode::SUCCESS)
}
