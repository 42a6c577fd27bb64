//! `[auth.oauth]`: the metadata document and challenges against RFC 9728's own examples,
//! required scopes (403 `insufficient_scope`), scopes mapped to tenants, and config errors.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use serde_json::{Value, json};

use super::*;
use crate::config::WELL_KNOWN;

/// A gateway with an HS256 `[auth.jwt]` (secret in `dir`) whose issuer and audience are
/// `issuer` and `resource`, and `oauth` as the `[auth.oauth]` body.
fn oauth_config(dir: &std::path::Path, issuer: &str, resource: &str, oauth: &str) -> String {
    let secret = dir.join("hs.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(&secret, private).unwrap();
    tenants(&format!(
        "[auth.jwt]\nalgorithm = \"HS256\"\nkey_file = {:?}\nissuer = \"{issuer}\"\n\
         audience = [\"{resource}\"]\ntenant_claim = \"scope\"\n\
         tenant_map = {{ \"hpc:chem\" = \"chem\", \"hpc:bio\" = \"bio\" }}\n\
         [auth.oauth]\nresource = \"{resource}\"\n{oauth}",
        secret.display().to_string()
    ))
}

fn token(issuer: &str, resource: &str, scope: &str) -> String {
    let now = get_current_timestamp();
    let claims = json!({
        "sub": "alice", "iss": issuer, "aud": resource, "exp": now + 600, "scope": scope,
    });
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

#[test]
fn metadata_and_challenge_match_the_rfc_9728_examples() {
    let dir = tempfile::tempdir().unwrap();
    // RFC 9728 §3.2's example, issued by its first authorization server.
    let a = auth(&oauth_config(
        dir.path(),
        "https://as1.example.com",
        "https://resource.example.com",
        "authorization_servers = [\"https://as1.example.com\", \"https://as2.example.net\"]\n\
         scopes_supported = [\"profile\", \"email\", \"phone\"]\n\
         resource_documentation = \"https://resource.example.com/resource_documentation.html\"\n",
    ));
    // The example's document, except that only the header carries tokens here (a token in a
    // body could be logged with it), and with the resource's name.
    let expected: Value = json!({
        "resource": "https://resource.example.com",
        "authorization_servers": ["https://as1.example.com", "https://as2.example.net"],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["profile", "email", "phone"],
        "resource_documentation": "https://resource.example.com/resource_documentation.html",
        "resource_name": "hpcgate",
    });
    assert_eq!(a.resource_metadata(WELL_KNOWN), Some(&expected));
    assert_eq!(
        a.resource_metadata("/.well-known/oauth-protected-resource/x"),
        None
    );
    // §5.1's challenge, with this gateway's realm.
    let missing = a.authenticate(&AuthRequest::default()).unwrap_err();
    assert_eq!(
        a.rejection(&missing).www_authenticate.as_deref(),
        Some(
            "Bearer realm=\"hpcgate\", resource_metadata=\"https://resource.example.com/.well-known/oauth-protected-resource\""
        )
    );

    // §3.1's path-suffixed example: `/resource1` follows the well-known path.
    let a = auth(&oauth_config(
        dir.path(),
        "https://as1.example.com",
        "https://resource.example.com/resource1",
        "authorization_servers = [\"https://as1.example.com\"]\n",
    ));
    let document = a
        .resource_metadata("/.well-known/oauth-protected-resource/resource1")
        .unwrap();
    assert_eq!(
        document["resource"],
        "https://resource.example.com/resource1"
    );
    assert_eq!(a.resource_metadata(WELL_KNOWN), Some(document));
    assert!(document.get("scopes_supported").is_none());
    let bad = a
        .authenticate(&with_header("Bearer not-a-token"))
        .unwrap_err();
    assert_eq!(
        a.rejection(&bad).www_authenticate.as_deref(),
        Some(
            "Bearer realm=\"hpcgate\", resource_metadata=\"https://resource.example.com/.well-known/oauth-protected-resource/resource1\", error=\"invalid_token\", error_description=\"the token is not known to this gateway\""
        )
    );
}

#[test]
fn required_scopes_and_scope_mapped_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let (issuer, resource) = ("https://idp.example.org", "https://gw.example.org/mcp");
    let a = auth(&oauth_config(
        dir.path(),
        issuer,
        resource,
        "authorization_servers = [\"https://idp.example.org\"]\nrequired_scopes = [\"mcp\", \"jobs\"]\n",
    ));
    let check =
        |scope: &str| a.authenticate(&with_header(&bearer(&token(issuer, resource, scope))));
    assert_eq!(
        who(check("openid mcp hpc:bio jobs")),
        ("bio".into(), "jwt:alice".into())
    );
    assert_eq!(
        who(check("jobs  hpc:chem\tmcp")),
        ("chem".into(), "jwt:alice".into())
    );
    let cases = [
        ("hpc:chem jobs", "the token lacks the scope `mcp`"),
        ("hpc:chem", "the token lacks the scope `mcp`, `jobs`"),
        (
            "mcpjobs hpc:chem",
            "the token lacks the scope `mcp`, `jobs`",
        ),
        (
            "mcp jobs",
            "the JWT's `scope` claim names no tenant of this gateway",
        ),
        (
            "mcp jobs chem",
            "the JWT's `scope` claim names no tenant of this gateway",
        ),
        (
            "mcp jobs hpc:chem hpc:bio",
            "the JWT's `scope` claim names more than one tenant of this gateway",
        ),
    ];
    for (scope, expected) in cases {
        let error = check(scope).unwrap_err();
        assert_eq!(reason(Err(error.clone())), expected, "{scope}");
        let r = a.rejection(&error);
        assert_eq!(r.status, 403, "{scope}");
        assert_eq!(
            r.www_authenticate.as_deref(),
            Some(format!(
                "Bearer realm=\"hpcgate\", resource_metadata=\"https://gw.example.org/.well-known/oauth-protected-resource/mcp\", error=\"insufficient_scope\", error_description=\"{expected}\", scope=\"mcp jobs\""
            ).as_str()),
            "{scope}"
        );
    }
    // Wrong audience (a token for another resource) stays 401.
    let other = token(issuer, "https://other.example.org/mcp", "mcp jobs hpc:chem");
    assert_eq!(
        refused_status(a.authenticate(&with_header(&bearer(&other)))),
        401
    );
}

#[test]
fn oauth_config_errors_name_the_dotted_key() {
    let dir = tempfile::tempdir().unwrap();
    let (issuer, resource) = ("https://idp.example.org", "https://gw.example.org/mcp");
    let servers = "authorization_servers = [\"https://idp.example.org\"]\n";
    let config = |resource_in_config: &str, oauth: &str| {
        oauth_config(dir.path(), issuer, resource, oauth).replace(
            &format!("resource = \"{resource}\""),
            &format!("resource = \"{resource_in_config}\""),
        )
    };
    let cases = [
        (
            tenants("[auth.oauth]\nresource = \"https://gw.example.org/mcp\"\n"),
            "auth.oauth",
            "needs `[auth.jwt]`",
        ),
        (
            config(resource, ""),
            "auth.oauth.authorization_servers",
            "is required",
        ),
        (
            config(
                resource,
                "authorization_servers = [\"https://other.example.org\"]\n",
            ),
            "auth.oauth.authorization_servers",
            "does not list `auth.jwt.issuer`",
        ),
        (
            config("https://gw.example.org/other", servers),
            "auth.oauth.resource",
            "is not in `auth.jwt.audience`",
        ),
        (
            config("http://gw.example.org/mcp", servers),
            "auth.oauth.resource",
            "is not an `https://` URL",
        ),
        (
            config("https://gw.example.org/mcp?x=1", servers),
            "auth.oauth.resource",
            "no query or fragment",
        ),
        (
            config(resource, &format!("{servers}required_scopes = [\"a b\"]\n")),
            "auth.oauth.required_scopes",
            "is not a scope token",
        ),
    ];
    for (text, key, message) in cases {
        let config = Config::parse(&text, "t.toml").unwrap();
        let env = Environment {
            home: Some("/home/u".into()),
            ..Environment::default()
        };
        let err = Settings::resolve(&config, &env, &Origins::single("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("`t.toml`: key `{key}`: ")) && err.contains(message),
            "{key}: {err}"
        );
    }
    // http:// is fine for a loopback resource (local testing).
    let loopback = "http://127.0.0.1:8080/mcp";
    let a = auth(&oauth_config(dir.path(), issuer, loopback, servers));
    assert!(
        a.resource_metadata("/.well-known/oauth-protected-resource/mcp")
            .is_some()
    );
}
