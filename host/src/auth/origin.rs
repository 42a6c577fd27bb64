//! The `Origin` check (DNS-rebinding and cross-site defence for the HTTP transport).
//!
//! A request without `Origin` is a non-browser client and passes. A browser request passes only
//! from a loopback origin (`http` or `https`, `localhost`, `127.0.0.0/8`, `[::1]`, any port) or one on
//! `[http] allowed_origins`. Origins compare normalised: lowercase scheme and host, explicit
//! port kept, no trailing `/`. `Origin: null` (sandboxed frames, file URLs) never passes.

use std::net::Ipv4Addr;

use crate::config::web_origin::{normalize_origin, split_port};

/// The allow-list.
#[derive(Debug, Clone, Default)]
pub(crate) struct OriginPolicy {
    allowed: Vec<String>,
}

impl OriginPolicy {
    /// `allowed` as resolved by the config (already normalised).
    pub(crate) fn new(allowed: Vec<String>) -> OriginPolicy {
        OriginPolicy { allowed }
    }

    pub(crate) fn allows(&self, origin: &str) -> bool {
        match normalize_origin(origin) {
            Some(origin) => is_loopback(&origin) || self.allowed.contains(&origin),
            None => false,
        }
    }
}

fn is_loopback(normal: &str) -> bool {
    let Some((scheme, rest)) = normal.split_once("://") else {
        return false;
    };
    if scheme != "http" && scheme != "https" {
        return false;
    }
    let Some((host, _)) = split_port(rest) else {
        return false;
    };
    host == "localhost"
        || host == "::1"
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_allow_list_only_loopback_origins_pass() {
        let table = [
            ("http://localhost", true),
            ("http://localhost:8000", true),
            ("https://127.0.0.1:443", true),
            ("http://127.3.4.5", true),
            ("http://[::1]:8000", true),
            ("http://LOCALHOST", true),
            ("http://evil.example", false),
            ("http://localhost.evil.example", false),
            ("http://127.0.0.1.evil.example", false),
            ("http://localhost:80@evil.example", false),
            ("http://localhost:8000/path", false),
            ("http://localhost:", false),
            ("http://[::2]", false),
            ("http://[::1", false),
            ("http://10.0.0.1:8000", false),
            ("file://localhost", false),
            ("null", false),
            ("", false),
        ];
        for (origin, allowed) in table {
            assert_eq!(OriginPolicy::default().allows(origin), allowed, "{origin}");
        }
    }

    #[test]
    fn origins_normalise_or_are_refused() {
        assert_eq!(
            normalize_origin("HTTPS://Notebook.Example.org/").as_deref(),
            Some("https://notebook.example.org")
        );
        assert_eq!(
            normalize_origin("http://[::1]:8080").as_deref(),
            Some("http://[::1]:8080")
        );
        for bad in [
            "null",
            "example.org",
            "https://",
            "https://a/b",
            "https://u@a",
            "https://a:x",
            "https://a:99999",
            "https://a?q",
            "https://:80",
        ] {
            assert_eq!(normalize_origin(bad), None, "{bad}");
        }
    }

    #[test]
    fn loopback_and_listed_origins_pass_others_do_not() {
        let policy = OriginPolicy::new(vec!["https://notebook.example.org".to_owned()]);
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "http://127.0.0.1:8080",
            "http://127.1.2.3",
            "http://[::1]:9",
            "https://Notebook.Example.org",
        ] {
            assert!(policy.allows(ok), "{ok}");
        }
        for denied in [
            "https://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "https://notebook.example.org:8443",
            "http://notebook.example.org",
            "null",
            "",
        ] {
            assert!(!policy.allows(denied), "{denied}");
        }
    }
}
