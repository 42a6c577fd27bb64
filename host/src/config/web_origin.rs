//! Web origins as `[http] allowed_origins` lists them and browsers send them in `Origin`:
//! `scheme://host[:port]`, compared in one normal form. The config normalises the list once;
//! the authenticator normalises each request's `Origin` the same way.

/// `scheme://host[:port]` lowercased, or `None` if `text` is not a serialised origin (a path,
/// query, user info or `null` make it none).
pub fn normalize_origin(text: &str) -> Option<String> {
    let text = text.trim().strip_suffix('/').unwrap_or(text.trim());
    let (scheme, rest) = text.split_once("://")?;
    let scheme_ok = !scheme.is_empty()
        && scheme.as_bytes()[0].is_ascii_alphabetic()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !scheme_ok || rest.is_empty() {
        return None;
    }
    let host_ok = rest
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    if !host_ok || rest.starts_with(':') {
        return None;
    }
    let (host, port) = split_port(rest)?;
    if let Some(port) = port
        && (port.is_empty() || port.parse::<u16>().is_err())
    {
        return None;
    }
    if host.is_empty() {
        return None;
    }
    Some(format!("{}://{}", scheme, rest).to_ascii_lowercase())
}

/// `host` and the optional port of `host[:port]`, with `[v6]` hosts.
pub(crate) fn split_port(rest: &str) -> Option<(&str, Option<&str>)> {
    if let Some(v6) = rest.strip_prefix('[') {
        let (addr, after) = v6.split_once(']')?;
        return match after {
            "" => Some((addr, None)),
            _ => Some((addr, Some(after.strip_prefix(':')?))),
        };
    }
    if rest.contains(['[', ']']) {
        return None;
    }
    match rest.split_once(':') {
        Some((host, port)) => Some((host, Some(port))),
        None => Some((rest, None)),
    }
}
