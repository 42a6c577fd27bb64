//! The listen checks: loopback only without tenants, and no TCP listener beside sandboxes
//! that have the host's network.

use super::*;

fn bare_identity(multi_tenant: bool) -> Identity {
    Identity {
        stdio_tenant: TenantName::parse("default").unwrap(),
        multi_tenant,
        foreign_unix_uids: false,
        host_network: Vec::new(),
        connections: crate::config::ConnectionLimits {
            max: 1,
            per_peer: 1,
            idle: std::time::Duration::from_secs(1),
        },
        allowed_hosts: Vec::new(),
    }
}

#[test]
fn single_tenant_tcp_listens_only_on_loopback() {
    let identity = bare_identity(false);
    for host in ["127.0.0.1", "::1", "localhost"] {
        assert!(check_tcp_host(host, &identity).is_ok(), "{host}");
    }
    for host in ["0.0.0.0", "10.1.2.3", "login1.cluster"] {
        let error = check_tcp_host(host, &identity).unwrap_err().to_string();
        assert!(error.contains("not a loopback address"), "{error}");
    }
}

#[test]
fn with_tenants_tcp_may_listen_anywhere_since_every_request_authenticates() {
    let identity = bare_identity(true);
    for host in ["127.0.0.1", "0.0.0.0", "login1.cluster"] {
        assert!(check_tcp_host(host, &identity).is_ok(), "{host}");
    }
}

fn identity(config: &str) -> Identity {
    let config = crate::config::Config::parse(config, "t.toml").unwrap();
    let env = crate::config::Environment {
        home: Some("/home/u".into()),
        ..crate::config::Environment::default()
    };
    let origins = crate::config::Origins::single("t.toml");
    Identity::from_settings(&Settings::resolve(&config, &env, &origins).unwrap())
}

/// A sandbox's processes run as the gateway's uid, which a single-tenant TCP listener trusts:
/// with the host's network, a job or a proxied server could call it as the tenant.
#[test]
fn single_tenant_tcp_is_refused_beside_sandboxes_on_the_hosts_network() {
    let jobs = identity("[sandbox]\nnetwork = \"host\"\n");
    let error = check_tcp_host("127.0.0.1", &jobs).unwrap_err().to_string();
    assert!(
        error.contains("`[sandbox] network = \"host\"`") && error.contains("--uds"),
        "{error}"
    );
    let proxy = identity("[proxied_mcps.web]\ncommand = \"/usr/bin/env\"\nnetwork = \"host\"\n");
    let error = check_tcp_host("127.0.0.1", &proxy).unwrap_err().to_string();
    assert!(error.contains("`[proxied_mcps.web] network"), "{error}");
    assert!(check_tcp_host("127.0.0.1", &identity("")).is_ok());
    let tenants = identity("[sandbox]\nnetwork = \"host\"\n[tenants.chem]\nunix_uids = [1000]\n");
    assert!(
        check_tcp_host("127.0.0.1", &tenants).is_ok(),
        "with tenants every TCP request carries a token"
    );
}

/// A socket in a directory others may write (and that is not sticky) could be replaced by
/// them: refused. Owner-only and sticky directories are fine.
#[tokio::test]
async fn a_socket_is_not_made_where_others_could_replace_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    for (mode, ok) in [
        (0o700, true),
        (0o1777, true),
        (0o777, false),
        (0o770, false),
    ] {
        let sub = dir.path().join(format!("{mode:o}"));
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(mode)).unwrap();
        let bound = super::unix_socket::bind_unix(&sub.join("s"), 0o600);
        assert_eq!(bound.is_ok(), ok, "{mode:o}: {:?}", bound.err());
        if let Err(e) = bound {
            assert!(e.to_string().contains("may be written by others"), "{e}");
        }
    }
}
