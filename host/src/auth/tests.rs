//! The authenticator as a table of requests: tokens, Unix peers, origins, single-tenant mode,
//! reload; JWTs are in `tests/jwt.rs`.

use super::bearer::hash_token;
use super::*;
use crate::config::{Config, Environment, Origins};

const SECRET: &str = "0123456789abcdef0123456789abcdef-test-only";

fn settings(text: &str) -> Settings {
    let config = Config::parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let env = Environment {
        home: Some("/home/u".into()),
        ..Environment::default()
    };
    Settings::resolve(&config, &env, &Origins::single("t.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn tenants(extra: &str) -> String {
    format!(
        "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}, {{ label = \"ci\", sha256 = \"{}\" }}]\n\
         unix_uids = [1001]\n\
         [tenants.bio]\ntokens = [{{ label = \"bob\", sha256 = \"{}\" }}]\nunix_uids = [1002]\n{extra}",
        hex::encode(hash_token("chem-token")),
        hex::encode(hash_token("chem-ci")),
        hex::encode(hash_token("bio-token")),
    )
}

fn auth(text: &str) -> Authenticator {
    Authenticator::from_settings(&settings(text)).unwrap_or_else(|e| panic!("{e}"))
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn with_header(header: &str) -> AuthRequest<'_> {
    AuthRequest {
        authorization: Some(header),
        ..AuthRequest::default()
    }
}

fn who(result: Result<Caller, AuthError>) -> (String, String) {
    let caller = result.unwrap_or_else(|e| panic!("{e}"));
    (caller.tenant.to_string(), caller.principal)
}

/// The reason of a refused token: 401 `invalid_token`, or 403 `insufficient_scope` for a
/// valid token that grants nothing here (`refused_status` tells them apart).
fn reason(result: Result<Caller, AuthError>) -> String {
    match result {
        Err(AuthError::InvalidToken { reason }) => reason,
        Err(AuthError::InsufficientScope { reason, .. }) => reason,
        other => panic!("expected a refused token, got {other:?}"),
    }
}

fn refused_status(result: Result<Caller, AuthError>) -> u16 {
    result.unwrap_err().rejection().status
}

#[test]
fn configured_tokens_authenticate_with_their_label() {
    let a = auth(&tenants(""));
    assert_eq!(
        who(a.authenticate(&with_header(&bearer("chem-token")))),
        ("chem".into(), "token:alice".into())
    );
    assert_eq!(
        who(a.authenticate(&with_header(&bearer("chem-ci")))),
        ("chem".into(), "token:ci".into())
    );
    assert_eq!(
        who(a.authenticate(&with_header("bearer bio-token"))),
        ("bio".into(), "token:bob".into())
    );
    assert_eq!(a.token_count(), 3);
}

#[test]
fn missing_malformed_and_wrong_tokens_are_401_with_the_right_challenge() {
    let a = auth(&tenants(""));
    let missing = a.authenticate(&AuthRequest::default()).unwrap_err();
    assert_eq!(missing, AuthError::MissingCredentials);
    let r = missing.rejection();
    assert_eq!(r.status, 401);
    assert_eq!(
        r.www_authenticate.as_deref(),
        Some("Bearer realm=\"hpcgate\"")
    );

    for header in ["Basic Y2hlbTp4", "Bearer", "Bearer a b", "chem-token"] {
        let err = a.authenticate(&with_header(header)).unwrap_err();
        assert!(matches!(err, AuthError::InvalidToken { .. }), "{header}");
    }
    let wrong = a
        .authenticate(&with_header(&bearer("chem-tokeN")))
        .unwrap_err();
    let r = wrong.rejection();
    assert_eq!(r.status, 401);
    assert_eq!(
        r.www_authenticate.as_deref(),
        Some(
            "Bearer realm=\"hpcgate\", error=\"invalid_token\", error_description=\"the token is not known to this gateway\""
        )
    );
    // Nothing about tenants or hashes in what goes back.
    assert!(
        !r.message.contains("chem") && !r.message.contains("bio"),
        "{}",
        r.message
    );
}

#[test]
fn a_token_removed_from_the_config_fails_after_reload() {
    let before = auth(&tenants(""));
    assert!(
        before
            .authenticate(&with_header(&bearer("chem-ci")))
            .is_ok()
    );
    let without_ci = format!(
        "[tenants.chem]\ntokens = [{{ label = \"alice\", sha256 = \"{}\" }}]\n",
        hex::encode(hash_token("chem-token"))
    );
    let after = auth(&without_ci);
    assert!(
        after
            .authenticate(&with_header(&bearer("chem-ci")))
            .is_err()
    );
    assert!(
        after
            .authenticate(&with_header(&bearer("chem-token")))
            .is_ok()
    );
}

#[test]
fn unix_peers_map_by_uid_and_unknown_uids_are_refused() {
    let a = auth(&tenants(""));
    let peer = |uid| AuthRequest {
        peer: Some(PeerCredentials { uid, gid: 100 }),
        ..AuthRequest::default()
    };
    assert_eq!(
        who(a.authenticate(&peer(1001))),
        ("chem".into(), "uid:1001".into())
    );
    assert_eq!(
        who(a.authenticate(&peer(1002))),
        ("bio".into(), "uid:1002".into())
    );
    let err = a.authenticate(&peer(4242)).unwrap_err();
    assert_eq!(err, AuthError::UnknownPeer { uid: 4242 });
    assert_eq!(err.rejection().status, 403);
    // A token on a Unix socket names the caller (it is more specific than the uid).
    let both = AuthRequest {
        authorization: Some("Bearer bio-token"),
        peer: Some(PeerCredentials {
            uid: 1001,
            gid: 100,
        }),
        ..AuthRequest::default()
    };
    assert_eq!(
        who(a.authenticate(&both)),
        ("bio".into(), "token:bob".into())
    );
}

#[test]
fn origins_loopback_and_listed_pass_others_are_403_and_absent_is_fine() {
    let a = auth(&tenants(
        "[http]\nallowed_origins = [\"https://Notebook.example.org/\"]\n",
    ));
    let header = bearer("chem-token");
    let with_origin = |origin| AuthRequest {
        authorization: Some(&header),
        origin: Some(origin),
        ..AuthRequest::default()
    };
    for ok in [
        "https://notebook.example.org",
        "http://localhost:6274",
        "http://127.0.0.1",
    ] {
        assert!(a.authenticate(&with_origin(ok)).is_ok(), "{ok}");
    }
    for denied in [
        "https://evil.example",
        "null",
        "http://localhost.evil.example",
    ] {
        let err = a.authenticate(&with_origin(denied)).unwrap_err();
        assert!(matches!(err, AuthError::OriginDenied { .. }), "{denied}");
        let r = err.rejection();
        assert_eq!((r.status, r.www_authenticate), (403, None));
    }
    assert!(a.authenticate(&with_header(&header)).is_ok());
    // The origin is checked before credentials: a bad origin is 403 even without a token.
    let err = a
        .authenticate(&AuthRequest {
            origin: Some("https://evil.example"),
            ..AuthRequest::default()
        })
        .unwrap_err();
    assert_eq!(err.rejection().status, 403);
}

#[test]
fn single_tenant_gateways_make_every_caller_the_stdio_tenant() {
    let a = auth("stdio_tenant = \"me\"\n");
    assert_eq!(
        who(a.authenticate(&AuthRequest::default())),
        ("me".into(), "anonymous".into())
    );
    assert_eq!(
        who(a.authenticate(&with_header("Bearer whatever"))),
        ("me".into(), "anonymous".into())
    );
    let own = rustix::process::geteuid().as_raw();
    let peer = |uid| AuthRequest {
        peer: Some(PeerCredentials { uid, gid: 0 }),
        ..AuthRequest::default()
    };
    assert_eq!(
        who(a.authenticate(&peer(own))),
        ("me".into(), format!("uid:{own}"))
    );
    let stranger = if own == 4242 { 4243 } else { 4242 };
    if own != 0 {
        assert!(a.authenticate(&peer(stranger)).is_err());
    }
    // Origin still applies.
    assert!(
        a.authenticate(&AuthRequest {
            origin: Some("https://evil.example"),
            ..AuthRequest::default()
        })
        .is_err()
    );
}

#[test]
fn single_tenant_over_tcp_serves_only_the_owner_of_the_gateway_and_root() {
    let a = auth("stdio_tenant = \"me\"\n");
    let own = rustix::process::geteuid().as_raw();
    let stranger = if own == 4242 { 4243 } else { 4242 };
    let tcp = |owner| AuthRequest {
        tcp_owner: Some(owner),
        ..AuthRequest::default()
    };
    for uid in [own, 0] {
        assert_eq!(
            who(a.authenticate(&tcp(SocketOwner::Uid(uid)))),
            ("me".into(), "anonymous".into()),
            "uid {uid}"
        );
    }
    let foreign = a
        .authenticate(&tcp(SocketOwner::Uid(stranger)))
        .unwrap_err();
    assert_eq!(foreign, AuthError::ForeignTcpPeer { uid: stranger });
    assert_eq!(foreign.rejection().status, 403);
    assert!(
        foreign.to_string().contains("`[tenants]`") && foreign.to_string().contains("--uds"),
        "{foreign}"
    );
    let gone = a.authenticate(&tcp(SocketOwner::NotFound)).unwrap_err();
    assert_eq!(gone, AuthError::UnknownTcpPeer);
    assert_eq!(gone.rejection().status, 403);
    // With tenants the token decides; the owner of the socket plays no part.
    let multi = auth(&tenants(""));
    let with_token = AuthRequest {
        authorization: Some("Bearer chem-token"),
        tcp_owner: Some(SocketOwner::Uid(stranger)),
        ..AuthRequest::default()
    };
    assert_eq!(
        who(multi.authenticate(&with_token)),
        ("chem".into(), "token:alice".into())
    );
}

#[test]
fn the_local_caller_is_the_stdio_tenant_or_the_tenant_of_our_own_uid() {
    let own = rustix::process::geteuid().as_raw();
    assert_eq!(
        auth("stdio_tenant = \"me\"\n")
            .local_caller()
            .tenant
            .as_str(),
        "me"
    );
    let configured = auth("stdio_tenant = \"bio\"\n[tenants.chem]\n[tenants.bio]\n");
    assert_eq!(configured.local_caller().tenant.as_str(), "bio");
    let by_uid = auth(&format!(
        "[tenants.chem]\nunix_uids = [{own}]\n[tenants.bio]\n"
    ));
    assert_eq!(by_uid.local_caller().tenant.as_str(), "chem");
    assert_eq!(by_uid.local_caller().principal, local_principal());
}

#[test]
fn a_configuration_serves_its_tenants_and_the_local_callers_only() {
    let name = |n: &str| TenantName::parse(n).unwrap();
    let single = auth("stdio_tenant = \"me\"\n");
    assert!(single.serves(&name("me")));
    assert!(!single.serves(&name("chem")));
    let many = auth(&tenants(""));
    assert!(many.serves(&name("chem")) && many.serves(&name("bio")));
    assert!(many.serves(&name("default")), "the local caller's tenant");
    assert!(!many.serves(&name("gone")));
}

mod jwt;
mod oauth;

#[test]
fn a_job_token_is_never_a_tenant_caller_here() {
    // Code mode takes job tokens on the MCP path; anywhere the authenticator sees one (WebDAV's
    // Basic password, the SSE transport), it is refused, even a well-formed one whose hash
    // happened to be configured as a tenant token.
    let job = crate::state::JobId::parse("j-aaaaaaaaaaaaaaaa").unwrap();
    let (token, hash) = job_token::mint(&job).unwrap();
    let configured = format!(
        "[tenants.chem]\ntokens = [{{ label = \"odd\", sha256 = \"{}\" }}]\n",
        hex::encode(hash)
    );
    let a = auth(&configured);
    let header = bearer(&token);
    let refused = reason(a.authenticate(&with_header(&header)));
    assert!(refused.contains("only for MCP requests"), "{refused}");
}
