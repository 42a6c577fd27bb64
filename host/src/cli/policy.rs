//! `hpcgate policy check|test|bench|new`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;

use super::{out, scaffold};
use crate::config::Config;
use crate::policy::bench::{BenchOptions, bench};
use crate::policy::cases::{StreamSummary, parse_cases, run_stream};
use crate::policy::{Chain, ChainPolicy, Mode, ModuleSource, PolicyEngine};

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Load and validate a policy component and its settings; exit 1 with the reason otherwise.
    Check {
        /// A `.wasm` component (or a core module built with wit-bindgen), or `stock:<name>`.
        module: String,
        /// The policy's `config` table as JSON.
        #[arg(long, default_value = "{}")]
        settings: String,
    },
    /// Evaluate recorded calls (a cases file, an audit file or an audit directory) with a
    /// config's policies and report every decision that differs; exit 0 iff none does.
    /// Streams the input on every core; mismatches are reported in input order.
    Test {
        #[arg(long)]
        config: PathBuf,
        /// A cases file, an audit segment, or an audit directory (its segments in order; lines
        /// are then counted across them).
        #[arg(long)]
        calls: PathBuf,
        /// Print `{"total", "matched", "mismatched", "mismatches"}` as JSON.
        #[arg(long)]
        json: bool,
        /// The log's redaction key (`<state_dir>/audit/redaction.key`, or a copy, 0600), to
        /// compare replayed rewrites with the values the log recorded redacted. By default the
        /// `redaction.key` in the `--calls` audit directory (or beside the `--calls` segment),
        /// when it is there and readable.
        #[arg(long)]
        redaction_key: Option<PathBuf>,
    },
    /// Measure latency and throughput per policy and for the whole chain.
    Bench {
        #[arg(long)]
        config: PathBuf,
        /// Calls to evaluate (a cases file or audit log); a built-in mix when absent.
        #[arg(long)]
        calls: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Samples per latency run.
        #[arg(long, default_value_t = 5_000)]
        samples: usize,
        /// Arrival rate of the latency runs, calls per second.
        #[arg(long, default_value_t = 2_000.0)]
        rate: f64,
        /// Evaluations per throughput run.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
        /// Configure every fresh instance, even of a policy whose `configure` is slow enough
        /// for the gateway to start its instances from a configured snapshot (to compare).
        #[arg(long)]
        no_snapshot: bool,
    },
    /// Scaffold a policy (a Rust crate, or a JavaScript or Python project built by its
    /// componentizer) that builds to a component and passes its own test.
    New {
        /// Policy name (lowercase letters, digits and `-`).
        name: String,
        /// Directory to create the project in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The policy's language: JavaScript is built with jco (npm), Python with
        /// componentize-py (PyPI).
        #[arg(long, value_enum, default_value_t = scaffold::Lang::Rust)]
        lang: scaffold::Lang,
    },
}

pub(crate) fn run(command: PolicyCommand) -> anyhow::Result<ExitCode> {
    match command {
        PolicyCommand::Check { module, settings } => check(&module, &settings),
        PolicyCommand::Test {
            config,
            calls,
            json,
            redaction_key,
        } => test(&config, &calls, json, redaction_key.as_deref()),
        PolicyCommand::Bench {
            config,
            calls,
            json,
            samples,
            rate,
            iterations,
            no_snapshot,
        } => {
            anyhow::ensure!(
                rate > 0.0 && samples > 0 && iterations > 0,
                "`--rate`, `--samples` and `--iterations` must be positive"
            );
            run_bench(
                &config,
                calls.as_deref(),
                json,
                &BenchOptions {
                    samples,
                    rate,
                    iterations,
                    snapshots: !no_snapshot,
                },
            )
        }
        PolicyCommand::New { name, dir, lang } => {
            let path = scaffold::new_policy(&name, &dir, lang)?;
            out(format!("created `{}`", path.display()));
            let install = match lang {
                scaffold::Lang::Js => "npm install",
                scaffold::Lang::Python => {
                    "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"
                }
                scaffold::Lang::Rust => "",
            };
            if lang != scaffold::Lang::Rust {
                out(format!(
                    "next: cd {} && {install} && ./test.sh (builds policy.wasm, checks it and runs cases.jsonl)",
                    path.display()
                ));
                return Ok(ExitCode::SUCCESS);
            }
            out(format!(
                "next: cd {} && cargo test && cargo build --release --target wasm32-unknown-unknown \
                 && hpcgate policy check target/wasm32-unknown-unknown/release/{}.wasm",
                path.display(),
                name.replace('-', "_")
            ));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// How long `policy check` lets the policy configure itself. It checks that the policy loads
/// and accepts its settings, not how fast: a componentized Python policy's fresh interpreter
/// took more than a chain's default 100 ms on a loaded 2-core machine, and was called
/// invalid. A configure that never returns is still refused, after this long.
const CHECK_DEADLINE: Duration = Duration::from_secs(2);

fn check(module: &str, settings: &str) -> anyhow::Result<ExitCode> {
    let settings: serde_json::Value = serde_json::from_str(settings)
        .context("`--settings` is not JSON; pass the policy's config table as a JSON object")?;
    anyhow::ensure!(
        settings.is_object(),
        "`--settings` must be a JSON object, like the policy's `config` table"
    );
    let engine = PolicyEngine::new(crate::policy::EngineSettings::default())?;
    let source: ModuleSource = module.parse().unwrap_or_else(|never| match never {});
    let loaded = match engine.load(&source) {
        Ok(loaded) => loaded,
        Err(e) => {
            out(format!("invalid: {}", chain_text(&anyhow::Error::from(e))));
            return Ok(ExitCode::from(1));
        }
    };
    let digest = loaded.digest().to_owned();
    let imports = match loaded.imports_wasi() {
        true => "the hpcgate world and WASI (linked with no files, network, time or entropy)",
        false => "only the hpcgate world",
    };
    let policy = ChainPolicy {
        name: source.to_string(),
        module: loaded,
        settings: settings.to_string(),
        mode: Mode::Enforce,
        tenants: vec!["*".to_owned()],
        tools: vec!["*".to_owned()],
        deadline: CHECK_DEADLINE,
        memory_bytes: 64 << 20,
        reuse: true,
        prepared: 0,
    };
    if let Err(e) = Chain::new(vec![policy]) {
        out(format!("invalid: {e}"));
        return Ok(ExitCode::from(1));
    }
    out(format!(
        "ok: `{source}` ({digest}) loads, imports {imports} and accepts its settings"
    ));
    Ok(ExitCode::SUCCESS)
}

/// Whether `path` is named as an audit segment (`audit-000001.jsonl`, compressed or not).
fn is_segment(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with("audit-") && (name.ends_with(".jsonl") || name.ends_with(".jsonl.zst"))
}

fn load_chain_policies(config: &Path) -> anyhow::Result<Vec<ChainPolicy>> {
    let (config, base) = Config::load(config)?;
    let engine = PolicyEngine::new(config.engine_settings())?;
    config.chain_policies(&engine, &base)
}

fn test(
    config: &Path,
    calls: &Path,
    json: bool,
    redaction_key: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    use std::io::{ErrorKind, Write as _};
    let chain = Chain::new(load_chain_policies(config)?)?;
    let key = match redaction_key {
        Some(path) => Some(
            crate::audit::load_redaction_key(path)
                .with_context(|| format!("cannot read the redaction key `{}`", path.display()))?,
        ),
        // The log's own key, beside the audit directory's segments, where whoever replays it may
        // read it (its owner, root); never beside a cases file, which may be anywhere.
        None if calls.is_dir() || is_segment(calls) => {
            let dir = if calls.is_dir() {
                Some(calls)
            } else {
                calls.parent()
            };
            let path = dir
                .unwrap_or(Path::new("."))
                .join(crate::audit::REDACTION_KEY_FILE);
            match crate::audit::load_redaction_key(&path) {
                Ok(key) => Some(key),
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied) => {
                    None
                }
                Err(e) => return Err(e).context(format!("`{}`", path.display())),
            }
        }
        None => None,
    };
    // An audit directory's chain is verified beside the replay: a log that does not verify
    // holds calls that may not be the ones recorded, which the report says.
    let verifying = calls.is_dir().then(|| {
        let dir = calls.to_owned();
        std::thread::spawn(move || crate::audit::verify(&dir, None))
    });
    let input: Box<dyn std::io::BufRead + Send> = if calls.is_dir() {
        Box::new(
            crate::audit::replay_reader(calls)
                .with_context(|| format!("cannot read the audit log in `{}`", calls.display()))?,
        )
    } else {
        use std::io::Read as _;
        let cannot = || format!("cannot read calls file `{}`", calls.display());
        let file = std::fs::File::open(calls).with_context(cannot)?;
        // A live audit segment may end in zeros allocated ahead of its records; a pipe is read
        // to its end.
        let len = if file.metadata().with_context(cannot)?.is_file() {
            crate::audit::data_len(&file).with_context(cannot)?
        } else {
            u64::MAX
        };
        Box::new(std::io::BufReader::with_capacity(
            256 * 1024,
            file.take(len),
        ))
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stdout = std::io::stdout();
    let mut sink = std::io::BufWriter::new(stdout.lock());
    let mut first = true;
    if json {
        let _ = write!(sink, "{{\"mismatches\": [");
    }
    let result = run_stream(&chain, input, workers, key.as_ref(), |m| {
        let _ = if json {
            let sep = if std::mem::take(&mut first) { "" } else { ", " };
            write!(
                sink,
                "{sep}{}",
                serde_json::to_string(&m).expect("a mismatch serialises")
            )
        } else {
            writeln!(sink, "MISMATCH {} (line {}): {}", m.name, m.line, m.problem)
        };
    });
    let summary = match result {
        Ok(summary) => summary,
        Err(e) => {
            let _ = if json { writeln!(sink, "]}}") } else { Ok(()) };
            let _ = sink.flush();
            return Err(e).with_context(|| format!("`{}`", calls.display()));
        }
    };
    let StreamSummary {
        total,
        skipped,
        mismatched,
    } = summary;
    let matched = total - mismatched;
    let broken = match verifying.map(std::thread::JoinHandle::join) {
        None => None,
        Some(Ok(Ok(report))) => report.first_broken.map(|b| {
            format!(
                "`{}` line {}: {}",
                calls.join(&b.file).display(),
                b.line,
                b.problem
            )
        }),
        Some(Ok(Err(e))) => Some(e.to_string()),
        Some(Err(_)) => Some("its verification failed".to_owned()),
    };
    if let Some(problem) = &broken {
        let _ = writeln!(
            std::io::stderr().lock(),
            "warning: the audit log in `{}` does not verify ({problem}): the calls replayed are what it holds now, which may not be what was recorded; `hpcgate audit verify --dir {}` says more",
            calls.display(),
            calls.display()
        );
    }
    if json {
        let log = match (calls.is_dir(), &broken) {
            (false, _) => String::new(),
            (true, None) => ", \"log\": {\"intact\": true}".to_owned(),
            (true, Some(problem)) => format!(
                ", \"log\": {{\"intact\": false, \"problem\": {}}}",
                serde_json::Value::String(problem.clone())
            ),
        };
        let _ = writeln!(
            sink,
            "], \"total\": {total}, \"matched\": {matched}, \"mismatched\": {mismatched}{log}}}"
        );
    } else {
        let skipped = if skipped > 0 {
            format!(" ({skipped} lines without a call skipped)")
        } else {
            String::new()
        };
        let _ = writeln!(
            sink,
            "{total} calls checked: {matched} matched, {mismatched} mismatched{skipped}"
        );
    }
    sink.flush().context("cannot write the report")?;
    Ok(if mismatched == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The mix `bench` evaluates without `--calls`: one call aimed at each stock policy, plus a
/// listing.
const DEFAULT_CALLS: &str = include_str!("bench_calls.jsonl");

fn run_bench(
    config: &Path,
    calls: Option<&Path>,
    json: bool,
    options: &BenchOptions,
) -> anyhow::Result<ExitCode> {
    let policies = load_chain_policies(config)?;
    anyhow::ensure!(
        !policies.is_empty(),
        "`{}` configures no policies; add a `[[policies]]` entry",
        config.display()
    );
    let text = match calls {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read calls file `{}`", path.display()))?,
        None => DEFAULT_CALLS.to_owned(),
    };
    let (cases, _) = parse_cases(&text)?;
    anyhow::ensure!(!cases.is_empty(), "the calls file holds no calls");
    let calls: Vec<_> = cases.into_iter().map(|c| c.call).collect();
    let report = bench(policies, &calls, options)?;
    if json {
        out(serde_json::to_string_pretty(&report)?);
    } else {
        out(format!(
            "latency at {} calls/s; throughput flat out, one caller",
            options.rate
        ));
        out(format!(
            "{:<24} {:>10} {:>10} {:>14}",
            "policy", "p50 µs", "p99 µs", "evals/s"
        ));
        for p in &report.policies {
            out(format!(
                "{:<24} {:>10.2} {:>10.2} {:>14.0}",
                p.name, p.p50_us, p.p99_us, p.evals_per_s
            ));
        }
        let c = &report.chain;
        out(format!(
            "{:<24} {:>10.2} {:>10.2} {:>14.0}",
            "(whole chain)", c.p50_us, c.p99_us, c.decisions_per_s
        ));
        out(String::new());
        out("a fresh instance, step by step (medians, µs, one thread):".to_owned());
        out(format!(
            "{:<24} {:>11} {:>10} {:>10} {:>10} {:>8} {:>8}",
            "policy", "instantiate", "configure", "1st eval", "2nd eval", "drop", "inline"
        ));
        for p in &report.policies {
            let Some(s) = &p.phases else {
                out(format!("{:<24} (faulted)", p.name));
                continue;
            };
            out(format!(
                "{:<24} {:>11.2} {:>10.2} {:>10.2} {:>10.2} {:>8.2} {:>8}",
                p.name,
                s.instantiate_us,
                s.configure_us,
                s.first_evaluate_us,
                s.next_evaluate_us,
                s.drop_us,
                p.inline_prepares
            ));
            if let Some(s) = &p.snapshot_phases {
                out(format!(
                    "{:<24} {:>11.2} {:>10} {:>10.2} {:>10.2} {:>8.2}",
                    "  (configured snapshot)",
                    s.instantiate_us,
                    "-",
                    s.first_evaluate_us,
                    s.next_evaluate_us,
                    s.drop_us,
                ));
            }
        }
        out(
            "(inline: latency samples that found no prepared instance and prepared their own)"
                .to_owned(),
        );
        for p in &report.policies {
            out(format!("{}: configured snapshot {}", p.name, p.snapshot));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn chain_text(error: &anyhow::Error) -> String {
    error
        .chain()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
