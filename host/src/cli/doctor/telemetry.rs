//! The doctor's check of `[telemetry]`: the collector's address resolves and accepts a TCP
//! connection. Traces are optional, so a collector that is down is a warning (the gateway
//! serves; its spans are dropped and counted), never a failure.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::{Check, Status, pass, warn};
use crate::config::Settings;

const NAME: &str = "telemetry";
const CONNECT: Duration = Duration::from_secs(2);

pub(super) fn telemetry(settings: &Settings) -> Check {
    let Some(telemetry) = &settings.fixed.telemetry else {
        return Check {
            name: NAME,
            status: Status::Skip,
            detail: "no traces ([telemetry] otlp_endpoint is not set)".to_owned(),
            hint: None,
        };
    };
    let url = &telemetry.traces_url;
    // Checked at load: `http://HOST[:PORT]…`.
    let authority = url
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| Some(format!("{}:{}", uri.host()?, uri.port_u16().unwrap_or(80))));
    let hint = "start the OpenTelemetry collector (or fix [telemetry] otlp_endpoint); until then the gateway drops its spans and counts them in hpcgate_trace_spans_total";
    let Some(addresses) = authority.and_then(|a| a.to_socket_addrs().ok()) else {
        return warn(
            NAME,
            format!("cannot resolve the collector's host in `{url}`"),
            hint,
        );
    };
    for address in addresses {
        if TcpStream::connect_timeout(&address, CONNECT).is_ok() {
            return pass(
                NAME,
                format!("spans go to `{url}` (the collector accepts connections)"),
            );
        }
    }
    warn(
        NAME,
        format!("the collector at `{url}` does not accept connections"),
        hint,
    )
}
