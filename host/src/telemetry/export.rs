//! The exporter: one thread that batches finished spans and posts them to the collector.
//!
//! The call path only does a `try_send` into a bounded queue: a slow or absent collector
//! never slows a call, it costs dropped spans (counted in `hpcgate_trace_spans_total`, and
//! said on stderr at most once a minute). A batch goes out when it holds [`MAX_BATCH`] spans
//! or when the oldest has waited `export_interval_ms`; a failed batch is dropped, not retried
//! (a collector that is down for minutes would otherwise hold the queue full of old spans).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::otlp::{self, Attributes, SpanData, Value};
use crate::config::TelemetrySettings;
use crate::metrics::Metrics;

/// Spans waiting for the exporter; beyond this the call path drops them.
const QUEUE: usize = 8192;
/// Spans per request to the collector.
const MAX_BATCH: usize = 512;
/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a gateway that shuts down waits for the last spans to go out.
const FLUSH_ON_DROP: Duration = Duration::from_secs(3);
/// Failures are said at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The running exporter; dropping it flushes what is queued (bounded by [`FLUSH_ON_DROP`]).
pub struct Exporter {
    queue: Option<mpsc::Sender<SpanData>>,
    finished: crossbeam_channel::Receiver<()>,
    metrics: Arc<Metrics>,
}

impl Exporter {
    pub fn start(settings: &TelemetrySettings, metrics: Arc<Metrics>) -> std::io::Result<Exporter> {
        let (queue, spans) = mpsc::channel(QUEUE);
        let (done, finished) = crossbeam_channel::bounded(1);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let post = Post::new(settings, metrics.clone())?;
        let interval = Duration::from_millis(settings.export_interval_ms);
        std::thread::Builder::new()
            .name("hpcgate-otlp".into())
            .spawn(move || {
                runtime.block_on(post.run(spans, interval));
                let _ = done.send(());
            })?;
        Ok(Exporter {
            queue: Some(queue),
            finished,
            metrics,
        })
    }

    /// Queues a finished span, or drops and counts it when the queue is full.
    pub(super) fn send(&self, span: SpanData) {
        let Some(queue) = &self.queue else { return };
        if queue.try_send(span).is_err() {
            self.metrics.spans(false, 1);
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // The exporter sends what it holds once the queue closes.
        self.queue = None;
        let _ = self.finished.recv_timeout(FLUSH_ON_DROP);
    }
}

/// What the exporter thread owns.
struct Post {
    client: reqwest::Client,
    url: String,
    headers: Vec<(String, String)>,
    resource: Attributes,
    metrics: Arc<Metrics>,
    warned: Option<Instant>,
    dropped_since_warning: u64,
}

impl Post {
    fn new(settings: &TelemetrySettings, metrics: Arc<Metrics>) -> std::io::Result<Post> {
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(std::io::Error::other)?;
        let mut resource = vec![
            ("service.name", Value::Str(settings.service_name.clone())),
            (
                "service.version",
                Value::Str(env!("CARGO_PKG_VERSION").into()),
            ),
            ("telemetry.sdk.name", Value::Str("hpcgate".into())),
            ("telemetry.sdk.language", Value::Str("rust".into())),
        ];
        if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            resource.push(("host.name", Value::Str(host.trim().to_owned())));
        }
        Ok(Post {
            client,
            url: settings.traces_url.clone(),
            headers: settings.headers.clone(),
            resource,
            metrics,
            warned: None,
            dropped_since_warning: 0,
        })
    }

    async fn run(mut self, mut spans: mpsc::Receiver<SpanData>, interval: Duration) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        loop {
            // Wait for a first span, then at most `interval` for the rest of its batch.
            match spans.recv().await {
                Some(span) => batch.push(span),
                None => return,
            }
            let deadline = tokio::time::Instant::now() + interval;
            let mut closed = false;
            while batch.len() < MAX_BATCH {
                match tokio::time::timeout_at(deadline, spans.recv()).await {
                    Ok(Some(span)) => batch.push(span),
                    Ok(None) => {
                        closed = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.export(&mut batch).await;
            if closed {
                return;
            }
        }
    }

    async fn export(&mut self, batch: &mut Vec<SpanData>) {
        let count = batch.len() as u64;
        let body = otlp::encode(&self.resource, env!("CARGO_PKG_VERSION"), batch);
        batch.clear();
        let mut request = self
            .client
            .post(&self.url)
            .header("content-type", "application/x-protobuf")
            .body(body);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let failure = match request.send().await {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("the collector answered {}", response.status())),
            Err(e) if e.is_timeout() => Some("the collector did not answer in time".to_owned()),
            Err(e) if e.is_connect() => Some("the collector refused the connection".to_owned()),
            Err(e) => Some(e.to_string()),
        };
        let Some(failure) = failure else {
            self.metrics.spans(true, count);
            return;
        };
        self.metrics.spans(false, count);
        self.dropped_since_warning += count;
        if self.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            warn(&format!(
                "traces: dropped {} span(s) bound for {}: {failure} (check [telemetry] otlp_endpoint and that the collector runs; calls are not affected)",
                self.dropped_since_warning, self.url
            ));
            self.warned = Some(Instant::now());
            self.dropped_since_warning = 0;
        }
    }
}

/// The gateway's log is its stderr (stdout may be the MCP stream).
#[allow(clippy::print_stderr)]
fn warn(message: &str) {
    eprintln!("hpcgate: {message}");
}
