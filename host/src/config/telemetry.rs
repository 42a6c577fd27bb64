//! `[telemetry]`: OpenTelemetry traces exported over OTLP/HTTP (protobuf) to a collector.
//!
//! Only `http://` endpoints: the gateway carries no TLS client, and a collector on the login
//! node (or a sidecar) is how sites forward traces anyway — it batches, retries and speaks TLS
//! to the backend. Restart-only, like every other thread the gateway starts.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::ConfigError;

/// `[telemetry]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); `/v1/traces` is appended
    /// unless the path already ends with it. Unset: no traces.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported resource (default `hpcgate`).
    pub service_name: Option<String>,
    /// Extra request headers for the collector (a tenant header, an API key).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Longest a finished span waits before it is sent, in milliseconds (default 1000).
    pub export_interval_ms: Option<u64>,
}

/// `[telemetry]`, resolved: `None` when no endpoint is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// `http://host:port/…/v1/traces`.
    pub traces_url: String,
    pub service_name: String,
    pub headers: Vec<(String, String)>,
    pub export_interval_ms: u64,
}

pub(crate) fn resolve_telemetry(
    raw: &TelemetryConfig,
    bad: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Option<TelemetrySettings>, ConfigError> {
    let Some(endpoint) = &raw.otlp_endpoint else {
        if !raw.headers.is_empty() {
            return Err(bad(
                "telemetry.headers",
                "is set but `telemetry.otlp_endpoint` is not; set the collector's URL (e.g. `http://127.0.0.1:4318`) or remove the headers".to_owned(),
            ));
        }
        return Ok(None);
    };
    let traces_url = traces_url(endpoint)
        .map_err(|message| bad("telemetry.otlp_endpoint", message.to_owned()))?;
    let mut headers = Vec::with_capacity(raw.headers.len());
    for (name, value) in &raw.headers {
        let valid_name = http::HeaderName::from_bytes(name.as_bytes()).is_ok();
        if !valid_name || http::HeaderValue::from_str(value).is_err() {
            return Err(bad(
                &format!("telemetry.headers.{name}"),
                "is not a valid HTTP header (a token name, a value of visible ASCII)".to_owned(),
            ));
        }
        headers.push((name.to_ascii_lowercase(), value.clone()));
    }
    let service_name = raw.service_name.clone().unwrap_or_else(|| "hpcgate".into());
    if service_name.is_empty() {
        return Err(bad(
            "telemetry.service_name",
            "must not be empty".to_owned(),
        ));
    }
    let export_interval_ms = match raw.export_interval_ms {
        None => 1000,
        Some(ms @ 10..=60_000) => ms,
        Some(_) => {
            return Err(bad(
                "telemetry.export_interval_ms",
                "must be between 10 and 60000".to_owned(),
            ));
        }
    };
    Ok(Some(TelemetrySettings {
        traces_url,
        service_name,
        headers,
        export_interval_ms,
    }))
}

/// The traces URL for an OTLP/HTTP base endpoint (the `OTEL_EXPORTER_OTLP_ENDPOINT` rule).
fn traces_url(endpoint: &str) -> Result<String, &'static str> {
    let uri: http::Uri = endpoint.parse().map_err(
        |_| "is not a URL; write the collector's OTLP/HTTP address, e.g. `http://127.0.0.1:4318`",
    )?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "must be `http://`: the built-in exporter speaks no TLS; run an OpenTelemetry Collector on this host (`http://127.0.0.1:4318`) and let it forward over TLS",
            );
        }
        _ => return Err("must start with `http://`, e.g. `http://127.0.0.1:4318`"),
    }
    if uri.host().is_none_or(str::is_empty) || uri.query().is_some() {
        return Err("must be `http://HOST[:PORT][/PATH]` without a query");
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    })
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn endpoints_become_traces_urls() {
        let ok = [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            ("http://c:4318/otlp", "http://c:4318/otlp/v1/traces"),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
        ];
        for (endpoint, url) in ok {
            assert_eq!(traces_url(endpoint).as_deref(), Ok(url), "{endpoint}");
        }
        for bad in [
            "https://c:4318",
            "grpc://c:4317",
            "127.0.0.1:4318",
            "http://",
            "http://c:4318/?x=1",
            "not a url",
        ] {
            assert!(traces_url(bad).is_err(), "{bad} accepted");
        }
    }
}
