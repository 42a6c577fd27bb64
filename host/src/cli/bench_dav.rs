//! `hpcgate bench dav`: the WebDAV file plane as a client on loopback sees it — `hpcgate run`
//! over streamable HTTP with `[dav] enabled`, the embedded default policies, fsync'd audit.
//!
//! Measured: PUT then GET of one large file (`--size-mb`, default 1 GiB) in MB/s, the
//! gateway's peak RSS growth over the transfers (`VmHWM` before and after: a whole-file buffer
//! anywhere would show), and PROPFIND Depth 1 of a directory of `--entries` files (p50 of
//! several). With `--wsgidav PATH` (the reference system's server, PyPI `wsgidav` + `cheroot`;
//! `scripts/bench-dav.sh` installs it), the same requests against wsgidav serving the same
//! kind of tree, and the ratios.

use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value, json};

use super::bench::{Endpoint, Scratch, print_report, stop};
use super::bench_figures::{percentiles, round, status_kb};
use super::bench_load::call;

/// What the WebDAV door must reach: a 1 GiB transfer's throughput, how far the gateway's RSS
/// may grow during it, and a `PROPFIND` p50 (BENCHMARKS.md, "WebDAV").
const MIN_MB_PER_S: f64 = 400.0;
const MAX_RSS_GROWTH_KB: u64 = 32 * 1024;
const PROPFIND_P50_MS: f64 = 300.0;

#[derive(Debug, Args)]
pub(crate) struct DavArgs {
    /// Size of the file transferred, in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mb: usize,
    /// Files in the directory listed by PROPFIND.
    #[arg(long, default_value_t = 10_000)]
    entries: usize,
    /// PROPFIND runs (the p50 is reported).
    #[arg(long, default_value_t = 5)]
    propfinds: usize,
    /// The `wsgidav` executable, to measure the reference system's server side by side.
    #[arg(long)]
    wsgidav: Option<PathBuf>,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// Keep the temporary directory (its path goes to stderr).
    #[arg(long)]
    keep: bool,
}

pub(crate) fn run(args: DavArgs) -> anyhow::Result<ExitCode> {
    if args.size_mb == 0 || args.entries == 0 || args.propfinds == 0 {
        bail!("`--size-mb`, `--entries` and `--propfinds` must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(bench(&args))?;
    print_report(&report, args.json)
}

/// What one server did.
struct Figures {
    put_mb_s: f64,
    get_mb_s: f64,
    rss_growth_kb: u64,
    propfind_p50_ms: f64,
}

impl Figures {
    fn to_json(&self) -> Value {
        json!({
            "put_mb_s": round(self.put_mb_s),
            "get_mb_s": round(self.get_mb_s),
            "rss_growth_kb": self.rss_growth_kb,
            "propfind_p50_ms": round(self.propfind_p50_ms),
        })
    }
}

async fn bench(args: &DavArgs) -> anyhow::Result<Value> {
    let dir = tempfile::Builder::new()
        .prefix("hpcgate-bench-dav-")
        .tempdir()
        .context("cannot create a temporary directory for the benchmark")?;
    let dir = Scratch(Some(dir), args.keep);
    let state = dir.path().join("state");
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {}\n[dav]\nenabled = true\n[files]\nmax_list_entries = {}\n",
            toml::Value::String(state.display().to_string()),
            args.entries + 10
        ),
    )?;
    let data = pattern(args.size_mb << 20);
    let http = reqwest::Client::builder()
        .build()
        .context("cannot build the HTTP client")?;

    let endpoint = Endpoint::start(dir.path(), &config, Vec::new(), None).await?;
    let client = endpoint.connect(0).await?;
    call(&client, "create_instance", json!({"instance_id": "bench"})).await?;
    drop(client);
    let workspace = state.join("tenants/default/instances/bench/workspace");
    let base = format!("{}/dav/instances/bench/workspace", endpoint.origin());
    let ours = measure(&http, &base, endpoint.pid(), &workspace, &data, args).await;
    stop(endpoint.gateway).await;
    let ours = ours?;

    let mut checks = vec![
        check_rate("PUT (hpcgate)", ours.put_mb_s),
        check_rate("GET (hpcgate)", ours.get_mb_s),
        json!({
            "name": "gateway peak RSS growth over the transfers",
            "value": format!("{} KiB", ours.rss_growth_kb),
            "target": format!("≤ {} KiB", MAX_RSS_GROWTH_KB),
            "pass": ours.rss_growth_kb <= MAX_RSS_GROWTH_KB,
        }),
        json!({
            "name": format!("PROPFIND Depth 1 of {} entries p50", args.entries),
            "value": format!("{:.1} ms", ours.propfind_p50_ms),
            "target": format!("≤ {PROPFIND_P50_MS:.0} ms"),
            "pass": ours.propfind_p50_ms <= PROPFIND_P50_MS,
        }),
    ];
    let mut report = json!({
        "size_mb": args.size_mb,
        "entries": args.entries,
        "hpcgate": ours.to_json(),
    });
    if let Some(wsgidav) = &args.wsgidav {
        let root = dir.path().join("wsgidav-root");
        std::fs::create_dir_all(&root)?;
        let (mut server, origin) = start_wsgidav(wsgidav, &root).await?;
        let pid = server.id().context("wsgidav exited at once")?;
        let theirs = measure(&http, &origin, pid, &root, &data, args).await;
        let _ = server.kill().await;
        let theirs = theirs?;
        for (name, ours, theirs) in [
            ("PUT", ours.put_mb_s, theirs.put_mb_s),
            ("GET", ours.get_mb_s, theirs.get_mb_s),
            // Time, not rate: the ratio is theirs over ours.
            ("PROPFIND", theirs.propfind_p50_ms, ours.propfind_p50_ms),
        ] {
            let ratio = ours / theirs;
            checks.push(json!({
                "name": format!("{name}: hpcgate against wsgidav"),
                "value": format!("{ratio:.2}× as fast"),
                "target": "faster (> 1×)",
                "pass": ratio > 1.0,
            }));
        }
        report["wsgidav"] = theirs.to_json();
    }
    report["checks"] = Value::Array(checks);
    Ok(report)
}

fn check_rate(name: &str, mb_s: f64) -> Value {
    json!({
        "name": name,
        "value": format!("{mb_s:.0} MB/s"),
        "target": format!("≥ {MIN_MB_PER_S:.0} MB/s"),
        "pass": mb_s >= MIN_MB_PER_S,
    })
}

/// PUT and GET of `data` as `<base>/big.bin`, peak RSS of `pid` around them, then PROPFIND
/// of `<base>/many/` after writing `--entries` files into `dir/many` (the served directory).
async fn measure(
    http: &reqwest::Client,
    base: &str,
    pid: u32,
    dir: &Path,
    data: &[u8],
    args: &DavArgs,
) -> anyhow::Result<Figures> {
    let url = format!("{base}/big.bin");
    let mb = data.len() as f64 / 1e6;
    // A small request first, so that nothing lazy is counted.
    let warm = http
        .put(format!("{base}/warm.txt"))
        .body("warm")
        .send()
        .await?;
    ensure_ok("PUT warm.txt", warm.status())?;
    let before = status_kb(pid, "VmHWM")?;

    // The body is copied before the clock starts.
    let body = reqwest::Body::from(data.to_vec());
    let started = Instant::now();
    let put = http.put(&url).body(body).send().await?;
    ensure_ok("PUT", put.status())?;
    let put_mb_s = mb / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut get = http.get(&url).send().await?;
    ensure_ok("GET", get.status())?;
    let mut received = 0usize;
    let mut same = true;
    while let Some(chunk) = get.chunk().await? {
        same &= data.get(received..received + chunk.len()) == Some(&chunk[..]);
        received += chunk.len();
    }
    let get_mb_s = mb / started.elapsed().as_secs_f64();
    if received != data.len() || !same {
        bail!("GET returned {received} bytes, not the {} put", data.len());
    }
    let rss_growth_kb = status_kb(pid, "VmHWM")?.saturating_sub(before);

    let many = dir.join("many");
    std::fs::create_dir_all(&many)?;
    for i in 0..args.entries {
        std::fs::write(many.join(format!("file-{i:06}.txt")), b"x")?;
    }
    let mut samples = Vec::with_capacity(args.propfinds);
    let propfind = reqwest::Method::from_bytes(b"PROPFIND").expect("a valid method");
    for _ in 0..args.propfinds {
        let started = Instant::now();
        let response = http
            .request(propfind.clone(), format!("{base}/many/"))
            .header("depth", "1")
            .send()
            .await?;
        ensure_ok("PROPFIND", response.status())?;
        let body = response.text().await?;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
        let listed = body.matches("response>").count() / 2;
        if listed != args.entries + 1 {
            bail!(
                "PROPFIND listed {listed} resources, not {}",
                args.entries + 1
            );
        }
    }
    let (propfind_p50_ms, _) = percentiles(&mut samples);
    Ok(Figures {
        put_mb_s,
        get_mb_s,
        rss_growth_kb,
        propfind_p50_ms,
    })
}

fn ensure_ok(what: &str, status: reqwest::StatusCode) -> anyhow::Result<()> {
    if !status.is_success() {
        bail!("{what} answered {status}");
    }
    Ok(())
}

/// Bytes that no layer can compress or deduplicate away.
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// wsgidav serving `root` read-write, anonymously, on a free loopback port, once it answers.
async fn start_wsgidav(
    wsgidav: &Path,
    root: &Path,
) -> anyhow::Result<(tokio::process::Child, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = tokio::process::Command::new(wsgidav)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--auth",
            "anonymous",
        ])
        .args(["--no-config", "-q", "--root"])
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start `{}`", wsgidav.display()))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("wsgidav did not listen on port {port} within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((child, format!("http://127.0.0.1:{port}")))
}
