//! hpcgate as an OAuth 2.1 resource server (`[auth.oauth]` over `[auth.jwt]` with a JWKS file),
//! through the real `hpcgate run` on TCP: a test issuer whose RSA keys `openssl` makes here
//! signs the tokens. Raw HTTP for what a client does not do (bad tokens, the metadata
//! documents, the challenges), the rmcp client for the tenant matrix, and the test MCP server
//! as a proxied server that reports its whole environment and the request it received, so a
//! token that leaked to it would show.

use std::path::Path;
use std::process::Command;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::matrix;
use crate::support::proxy::test_proxy;
use crate::support::served::{self, INITIALIZE, Served};

const ISSUER: &str = "https://idp.example.org";
const RESOURCE: &str = "https://gw.example.org/mcp";
const METADATA_URL: &str = "https://gw.example.org/.well-known/oauth-protected-resource/mcp";

/// The test issuer: an RSA key pair (and a second, untrusted one) made with `openssl`.
struct Issuer {
    dir: tempfile::TempDir,
}

impl Issuer {
    fn new() -> Issuer {
        let dir = tempfile::tempdir().unwrap();
        for name in ["issuer", "stranger"] {
            openssl(
                dir.path(),
                &[
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                    "-out",
                    &format!("{name}.key"),
                ],
            );
        }
        openssl(
            dir.path(),
            &["pkey", "-in", "issuer.key", "-pubout", "-out", "issuer.pub"],
        );
        Issuer { dir }
    }

    fn key(&self, name: &str) -> EncodingKey {
        EncodingKey::from_rsa_pem(&std::fs::read(self.dir.path().join(name)).unwrap()).unwrap()
    }

    /// The JWKS file the gateway trusts: the issuer's public key as `kid` `k1`.
    fn jwks(&self) -> String {
        let jwk = Jwk::from_encoding_key(&self.key("issuer.key"), Algorithm::RS256).unwrap();
        let mut jwk = serde_json::to_value(jwk).unwrap();
        jwk["kid"] = json!("k1");
        let path = self.dir.path().join("jwks.json");
        std::fs::write(&path, json!({ "keys": [jwk] }).to_string()).unwrap();
        path.display().to_string()
    }

    fn sign(&self, claims: &Value) -> String {
        sign(
            Algorithm::RS256,
            Some("k1"),
            &self.key("issuer.key"),
            claims,
        )
    }
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, key).unwrap()
}

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("the OAuth tests make keys with `openssl` (install it: scripts/setup.sh)");
    assert!(status.success(), "openssl {args:?}");
}

/// A token for `scope` with `overrides` applied (`null` removes a claim).
fn claims(scope: &str, overrides: Value) -> Value {
    let now = get_current_timestamp();
    let mut c = json!({
        "sub": "alice@example.org",
        "iss": ISSUER,
        "aud": RESOURCE,
        "exp": now + 600,
        "iat": now,
        "scope": scope,
        "client_id": "inspector",
    });
    for (k, v) in overrides.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn gateway_config(dir: &Path, issuer: &Issuer, extra: &str) -> std::path::PathBuf {
    served::config(
        dir,
        &format!(
            "policies = []\n[tenants.chem]\n[tenants.bio]\n\
             [auth.jwt]\nalgorithm = \"RS256\"\njwks_file = {:?}\nissuer = \"{ISSUER}\"\n\
             audience = [\"{RESOURCE}\"]\ntenant_claim = \"scope\"\n\
             tenant_map = {{ \"hpc:chem\" = \"chem\", \"hpc:bio\" = \"bio\" }}\n\
             [auth.oauth]\nresource = \"{RESOURCE}\"\nauthorization_servers = [\"{ISSUER}\"]\n\
             scopes_supported = [\"mcp\", \"hpc:chem\", \"hpc:bio\"]\nrequired_scopes = [\"mcp\"]\n\
             {extra}",
            issuer.jwks(),
        ),
    )
}

/// One HTTP/1.1 exchange: status, the `WWW-Authenticate` values, body.
async fn http(
    authority: &str,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> (u16, Vec<String>, String) {
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let body = if method == "POST" { INITIALIZE } else { "" };
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    if let Some(value) = authorization {
        request.push_str(&format!("Authorization: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let challenges = head
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("www-authenticate")
                .then(|| value.trim().to_owned())
        })
        .collect();
    (status, challenges, body.to_owned())
}

#[test]
fn tokens_are_checked_as_a_resource_server_and_refusals_point_at_the_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = Issuer::new();
    let config = gateway_config(dir.path(), &issuer, "");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(Served::http(dir.path(), &config));
    let authority = served.authority();
    let post = |token: Option<String>| {
        runtime.block_on(http(
            &authority,
            "POST",
            "/mcp",
            token.map(|t| format!("Bearer {t}")).as_deref(),
        ))
    };

    // A good token: scope `mcp` plus the tenant's scope.
    let (status, _, body) = post(Some(issuer.sign(&claims("mcp hpc:chem", json!({})))));
    assert_eq!(status, 200, "{body}");

    // No token: 401 naming the metadata, no error attribute (RFC 6750 §3.1, RFC 9728 §5.1).
    let (status, challenges, _) = post(None);
    assert_eq!(status, 401);
    assert_eq!(
        challenges,
        [format!(
            "Bearer realm=\"hpcgate\", resource_metadata=\"{METADATA_URL}\""
        )]
    );

    // Tokens that do not authenticate: 401 invalid_token, each with the metadata URL.
    let now = get_current_timestamp();
    let good = claims("mcp hpc:chem", json!({}));
    let b64 = |v: &Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let public_pem = std::fs::read(issuer.dir.path().join("issuer.pub")).unwrap();
    let invalid = [
        (
            "wrong audience (a token for another resource)",
            issuer.sign(&claims(
                "mcp hpc:chem",
                json!({ "aud": "https://other.example.org/mcp" }),
            )),
            "audience",
        ),
        (
            "no audience",
            issuer.sign(&claims("mcp hpc:chem", json!({ "aud": null }))),
            "`aud`",
        ),
        (
            "wrong issuer",
            issuer.sign(&claims(
                "mcp hpc:chem",
                json!({ "iss": "https://evil.example.org" }),
            )),
            "issuer",
        ),
        (
            "expired",
            issuer.sign(&claims("mcp hpc:chem", json!({ "exp": now - 3600 }))),
            "expired",
        ),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(&json!({ "alg": "none", "typ": "JWT", "kid": "k1" })),
                b64(&good)
            ),
            "",
        ),
        (
            "unknown kid",
            sign(
                Algorithm::RS256,
                Some("k2"),
                &issuer.key("issuer.key"),
                &good,
            ),
            "`kid`",
        ),
        (
            "HS256 with the public key as the secret",
            sign(
                Algorithm::HS256,
                Some("k1"),
                &EncodingKey::from_secret(&public_pem),
                &good,
            ),
            "algorithm",
        ),
        (
            "signed by another key under the trusted kid",
            sign(
                Algorithm::RS256,
                Some("k1"),
                &issuer.key("stranger.key"),
                &good,
            ),
            "signature",
        ),
    ];
    for (case, token, reason) in invalid {
        let (status, challenges, body) = post(Some(token));
        assert_eq!(status, 401, "{case}: {body}");
        assert_eq!(challenges.len(), 1, "{case}");
        let challenge = &challenges[0];
        assert!(
            challenge.starts_with(&format!(
                "Bearer realm=\"hpcgate\", resource_metadata=\"{METADATA_URL}\", error=\"invalid_token\""
            )),
            "{case}: {challenge}"
        );
        assert!(challenge.contains(reason), "{case}: {challenge}");
    }

    // Valid tokens that grant nothing here: 403 insufficient_scope, with the scope needed.
    let forbidden = [
        ("no `mcp` scope", "hpc:chem"),
        ("no scope at all", ""),
        ("no tenant scope", "mcp"),
        ("a tenant scope no tenant maps", "mcp hpc:physics"),
        ("two tenants", "mcp hpc:chem hpc:bio"),
    ];
    for (case, scope) in forbidden {
        let (status, challenges, body) = post(Some(issuer.sign(&claims(scope, json!({})))));
        assert_eq!(status, 403, "{case}: {body}");
        assert_eq!(challenges.len(), 1, "{case}");
        assert!(
            challenges[0].starts_with(&format!(
                "Bearer realm=\"hpcgate\", resource_metadata=\"{METADATA_URL}\", error=\"insufficient_scope\""
            )) && challenges[0].ends_with("scope=\"mcp\""),
            "{case}: {}",
            challenges[0]
        );
    }

    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
}

#[test]
fn metadata_is_served_at_both_well_known_urls_without_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = Issuer::new();
    let config = gateway_config(
        dir.path(),
        &issuer,
        "resource_documentation = \"https://gw.example.org/docs\"\n",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = runtime.block_on(Served::http(dir.path(), &config));
    let authority = served.authority();
    let expected = json!({
        "resource": RESOURCE,
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["mcp", "hpc:chem", "hpc:bio"],
        "resource_name": "hpcgate",
        "resource_documentation": "https://gw.example.org/docs",
    });
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let (status, _, body) = runtime.block_on(http(&authority, "GET", path, None));
        assert_eq!(status, 200, "{path}: {body}");
        let document: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(document, expected, "{path}");
    }
    // Another resource's suffix is not this gateway's.
    let (status, _, _) = runtime.block_on(http(
        &authority,
        "GET",
        "/.well-known/oauth-protected-resource/other",
        None,
    ));
    assert_eq!(status, 404);
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");

    // Without `[auth.oauth]` there is no metadata and challenges stay plain.
    let plain = tempfile::tempdir().unwrap();
    let config = served::config(plain.path(), "policies = []\n[tenants.chem]\n");
    let served = runtime.block_on(Served::http(plain.path(), &config));
    let authority = served.authority();
    let (status, _, _) = runtime.block_on(http(
        &authority,
        "GET",
        "/.well-known/oauth-protected-resource",
        None,
    ));
    assert_eq!(status, 404);
    let (status, challenges, _) = runtime.block_on(http(&authority, "POST", "/mcp", None));
    assert_eq!(
        (status, challenges),
        (401, vec!["Bearer realm=\"hpcgate\"".to_owned()])
    );
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
}

#[test]
fn oauth_tenants_see_nothing_of_each_other_and_no_token_reaches_a_proxied_server() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = Issuer::new();
    let config = gateway_config(dir.path(), &issuer, &test_proxy("t", ""));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _inside = runtime.enter();
    let served = runtime.block_on(Served::http(dir.path(), &config));
    let chem_token = issuer.sign(&claims("mcp hpc:chem", json!({ "sub": "alice" })));
    let bio_token = issuer.sign(&claims("mcp hpc:bio", json!({ "sub": "bob" })));
    let connect = |token: &str| {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(served.address.as_str())
                .auth_header(token.to_owned()),
        );
        runtime.block_on(().serve(transport)).unwrap()
    };
    let chem = connect(&chem_token);
    let job = matrix::chem_setup(&mut |tool, arguments| {
        matrix::mcp_call(&runtime, &chem, tool, arguments)
    });
    let bio = connect(&bio_token);
    matrix::bio_attack(
        &mut |tool, arguments| matrix::mcp_call(&runtime, &bio, tool, arguments),
        &job,
    );
    matrix::chem_check(
        &mut |tool, arguments| matrix::mcp_call(&runtime, &chem, tool, arguments),
        &job,
    );

    // The proxied server reports its environment and the request it got: no trace of the
    // token, of any of its three parts, or of an Authorization header.
    let who = matrix::mcp_call(
        &runtime,
        &chem,
        "t__whoami",
        json!({ "instance_id": matrix::SECRET_INSTANCE }),
    );
    assert!(!who.is_error, "{}", who.text);
    assert!(
        who.structured["environ"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
    assert!(
        who.structured["request"]["name"] == "whoami",
        "{}",
        who.structured
    );
    let seen = format!("{}{}", who.structured, who.text);
    for part in chem_token.split('.').chain([chem_token.as_str()]) {
        assert!(
            !seen.contains(part),
            "a token part reached the proxied server"
        );
    }
    let lower = seen.to_ascii_lowercase();
    assert!(
        !lower.contains("bearer") && !lower.contains("authorization"),
        "{seen}"
    );

    runtime.block_on(bio.cancel()).unwrap();
    runtime.block_on(chem.cancel()).unwrap();
    let (status, stderr) = runtime.block_on(served.stop());
    assert!(status.success(), "{status:?}: {stderr}");
    let audit = served::audit_text(&dir.path().join("state/audit"));
    assert!(
        audit.contains("\"jwt:bob\""),
        "bio's calls name its subject"
    );
    assert!(!audit.contains(&chem_token) && !audit.contains(&bio_token));
}
