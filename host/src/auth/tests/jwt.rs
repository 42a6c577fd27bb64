//! JWTs: keys made at test time with `openssl`; issuer, audience, times, tenant claims,
//! algorithm confusion, JWKS and config errors.

use std::path::Path;
use std::process::Command;

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use serde_json::{Value, json};

use super::*;

struct Keys {
    dir: tempfile::TempDir,
}

impl Keys {
    /// An RSA and an EC P-256 key pair, and the HS secret, written under a temp dir.
    fn new() -> Keys {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        openssl(
            p,
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
                "rsa.key",
            ],
        );
        openssl(p, &["pkey", "-in", "rsa.key", "-pubout", "-out", "rsa.pub"]);
        openssl(
            p,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "ec.key",
            ],
        );
        openssl(p, &["pkey", "-in", "ec.key", "-pubout", "-out", "ec.pub"]);
        std::fs::write(p.join("hs.secret"), format!("{SECRET}\n")).unwrap();
        let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
        std::fs::set_permissions(p.join("hs.secret"), private).unwrap();
        Keys { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap()
    }

    fn rsa(&self) -> EncodingKey {
        EncodingKey::from_rsa_pem(&self.read("rsa.key")).unwrap()
    }

    fn ec(&self) -> EncodingKey {
        EncodingKey::from_ec_pem(&self.read("ec.key")).unwrap()
    }
}

#[allow(clippy::disallowed_methods)] // a test makes its keys with the real openssl
fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("the JWT tests make keys with `openssl` (install it: scripts/setup.sh)");
    assert!(status.success(), "openssl {args:?}");
}

fn jwt_config(algorithm: &str, key: &str, extra: &str) -> String {
    tenants(&format!(
        "[auth.jwt]\nalgorithm = \"{algorithm}\"\n{key}\nissuer = \"https://idp.example\"\n\
         audience = [\"hpcgate\"]\ntenant_claim = \"project\"\n{extra}"
    ))
}

fn claims(overrides: Value) -> Value {
    let now = get_current_timestamp();
    let mut c = json!({
        "sub": "alice@example",
        "iss": "https://idp.example",
        "aud": "hpcgate",
        "exp": now + 600,
        "iat": now,
        "project": "chem",
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

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, key).unwrap()
}

fn hs(claims: &Value) -> String {
    sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        claims,
    )
}

#[test]
fn jwts_validate_issuer_audience_times_and_the_tenant_claim() {
    let keys = Keys::new();
    let a = auth(&jwt_config(
        "HS256",
        &format!("key_file = \"{}\"", keys.path("hs.secret")),
        "leeway_s = 5\n",
    ));
    assert!(a.accepts_jwt());
    let check = |token: String| a.authenticate(&with_header(&bearer(&token)));
    assert_eq!(
        who(check(hs(&claims(json!({}))))),
        ("chem".into(), "jwt:alice@example".into())
    );
    assert_eq!(
        who(check(hs(&claims(
            json!({ "aud": ["other", "hpcgate"], "project": "bio" })
        )))),
        ("bio".into(), "jwt:alice@example".into())
    );
    let now = get_current_timestamp();
    let cases = [
        (json!({ "exp": now - 60 }), "the JWT has expired"),
        (json!({ "exp": null }), "the JWT has no `exp` claim"),
        (
            json!({ "nbf": now + 120 }),
            "the JWT is not valid yet (`nbf`)",
        ),
        (
            json!({ "iss": "https://evil.example" }),
            "the JWT's issuer is not accepted",
        ),
        (json!({ "iss": null }), "the JWT has no `iss` claim"),
        (
            json!({ "aud": "other" }),
            "the JWT's audience is not accepted",
        ),
        (json!({ "aud": null }), "the JWT has no `aud` claim"),
        (json!({ "sub": null }), "the JWT has no usable `sub` claim"),
        (
            json!({ "project": null }),
            "the JWT has no `project` claim (a string or a list of strings)",
        ),
        (
            json!({ "project": "physics" }),
            "the JWT's `project` claim names no tenant of this gateway",
        ),
        (
            json!({ "project": ["chem", "bio"] }),
            "the JWT's `project` claim names more than one tenant of this gateway",
        ),
    ];
    for (overrides, expected) in cases {
        assert_eq!(
            reason(check(hs(&claims(overrides.clone())))),
            expected,
            "{overrides}"
        );
        // A token that verifies but names no single tenant is 403, the rest 401.
        let grants_nothing = expected.contains("`project`");
        assert_eq!(
            refused_status(check(hs(&claims(overrides.clone())))),
            if grants_nothing { 403 } else { 401 },
            "{overrides}"
        );
    }
    // Within the leeway: expired 2 s ago and valid from 2 s ahead both pass.
    assert!(check(hs(&claims(json!({ "exp": now - 2, "nbf": now + 2 })))).is_ok());
    // Signed with another secret.
    let forged = sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(b"another secret that is long enough!!"),
        &claims(json!({})),
    );
    assert_eq!(reason(check(forged)), "the JWT's signature does not verify");
    // A JWT is answered with a challenge naming the problem.
    let r = check(hs(&claims(json!({ "exp": now - 60 }))))
        .unwrap_err()
        .rejection();
    assert_eq!(
        r.www_authenticate.as_deref(),
        Some(
            "Bearer realm=\"hpcgate\", error=\"invalid_token\", error_description=\"the JWT has expired\""
        )
    );
}

#[test]
fn alg_none_and_algorithm_confusion_are_refused() {
    let keys = Keys::new();
    let rs = auth(&jwt_config(
        "RS256",
        &format!("key_file = \"{}\"", keys.path("rsa.pub")),
        "",
    ));
    let check = |a: &Authenticator, token: &str| a.authenticate(&with_header(&bearer(token)));
    assert_eq!(
        who(check(
            &rs,
            &sign(Algorithm::RS256, None, &keys.rsa(), &claims(json!({})))
        )),
        ("chem".into(), "jwt:alice@example".into())
    );
    // alg: none, unsigned.
    let b64 = |v: &Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let none = format!(
        "{}.{}.",
        b64(&json!({ "alg": "none", "typ": "JWT" })),
        b64(&claims(json!({})))
    );
    assert!(check(&rs, &none).is_err());
    let none_signed = format!("{}x", none);
    assert!(check(&rs, &none_signed).is_err());
    // HS256 "signed" with the RSA public key's PEM bytes as the HMAC secret (the classic
    // confusion attack) is refused: HS256 is not the configured algorithm.
    let confused = sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(&keys.read("rsa.pub")),
        &claims(json!({})),
    );
    assert_eq!(
        reason(check(&rs, &confused)),
        "the JWT's algorithm is not accepted"
    );
    // An ES256 token against an RS256 gateway, and RS384 with the right key.
    let es = sign(Algorithm::ES256, None, &keys.ec(), &claims(json!({})));
    assert_eq!(
        reason(check(&rs, &es)),
        "the JWT's algorithm is not accepted"
    );
    let rs384 = sign(Algorithm::RS384, None, &keys.rsa(), &claims(json!({})));
    assert_eq!(
        reason(check(&rs, &rs384)),
        "the JWT's algorithm is not accepted"
    );
    // An HS256 gateway never verifies RS tokens; and a PEM key is not accepted as a secret.
    let hs_gateway = auth(&jwt_config(
        "HS256",
        &format!("key_file = \"{}\"", keys.path("hs.secret")),
        "",
    ));
    let rs_token = sign(Algorithm::RS256, None, &keys.rsa(), &claims(json!({})));
    assert_eq!(
        reason(check(&hs_gateway, &rs_token)),
        "the JWT's algorithm is not accepted"
    );
    let pem_as_secret = Authenticator::from_settings(&settings(&jwt_config(
        "HS256",
        &format!("key_file = \"{}\"", keys.path("rsa.pub")),
        "",
    )))
    .unwrap_err();
    assert!(
        pem_as_secret
            .to_string()
            .contains("PEM key, not a shared secret"),
        "{pem_as_secret}"
    );
    // A secret every user may read would let anyone sign tokens.
    let readable = keys.dir.path().join("readable.secret");
    std::fs::write(&readable, format!("{SECRET}\n")).unwrap();
    let everyone = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    std::fs::set_permissions(&readable, everyone).unwrap();
    let refused = Authenticator::from_settings(&settings(&jwt_config(
        "HS256",
        &format!("key_file = \"{}\"", readable.display()),
        "",
    )))
    .unwrap_err();
    assert!(refused.to_string().contains("`chmod o-r` it"), "{refused}");
    // ES256 with its own key works; with a wrong key (RSA public key as EC) setup fails or
    // verification fails.
    let ec = auth(&jwt_config(
        "ES256",
        &format!("key_file = \"{}\"", keys.path("ec.pub")),
        "",
    ));
    assert!(check(&ec, &es).is_ok());
    let other = Keys::new();
    let es_other = sign(Algorithm::ES256, None, &other.ec(), &claims(json!({})));
    assert_eq!(
        reason(check(&ec, &es_other)),
        "the JWT's signature does not verify"
    );
    let rs_other = sign(Algorithm::RS256, None, &other.rsa(), &claims(json!({})));
    assert_eq!(
        reason(check(&rs, &rs_other)),
        "the JWT's signature does not verify"
    );
}

#[test]
fn jwks_keys_are_chosen_by_kid_and_mapped_claims_pick_the_tenant() {
    let keys = Keys::new();
    let rsa_jwk = |kid: &str| {
        let jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&keys.rsa(), Algorithm::RS256).unwrap();
        let mut v = serde_json::to_value(jwk).unwrap();
        v["kid"] = json!(kid);
        v
    };
    let jwks = json!({ "keys": [
        rsa_jwk("k1"),
        { "kty": "oct", "kid": "sym", "k": "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "alg": "HS256" },
    ]});
    let path = keys.dir.path().join("jwks.json");
    std::fs::write(&path, jwks.to_string()).unwrap();
    let a = auth(
        &(jwt_config(
            "RS256",
            &format!("jwks_file = \"{}\"", path.display()),
            "tenant_claim = \"groups\"\n",
        )
        .replace("tenant_claim = \"project\"\n", "")
            + "tenant_map = { \"hpc-chem\" = \"chem\", \"hpc-bio\" = \"bio\" }\n"),
    );
    let check = |token: &str| a.authenticate(&with_header(&bearer(token)));
    let grouped = claims(json!({ "groups": ["staff", "hpc-chem"], "project": null }));
    assert_eq!(
        who(check(&sign(
            Algorithm::RS256,
            Some("k1"),
            &keys.rsa(),
            &grouped
        ))),
        ("chem".into(), "jwt:alice@example".into())
    );
    assert_eq!(
        reason(check(&sign(
            Algorithm::RS256,
            Some("k2"),
            &keys.rsa(),
            &grouped
        ))),
        "the JWT's `kid` names no key this gateway trusts"
    );
    assert_eq!(
        reason(check(&sign(Algorithm::RS256, None, &keys.rsa(), &grouped))),
        "the JWT has no `kid` header"
    );
    // The symmetric key in the JWKS is never used, whatever the header says.
    let sym = sign(
        Algorithm::HS256,
        Some("sym"),
        &EncodingKey::from_secret(b"secretsecretsecretsecretsecret"),
        &grouped,
    );
    assert!(check(&sym).is_err());
    // Unmapped values do not count, even when they name a tenant directly.
    let unmapped = claims(json!({ "groups": ["chem", "staff"], "project": null }));
    assert_eq!(
        reason(check(&sign(
            Algorithm::RS256,
            Some("k1"),
            &keys.rsa(),
            &unmapped
        ))),
        "the JWT's `groups` claim names no tenant of this gateway"
    );
}

#[test]
fn jwt_config_errors_name_the_dotted_key() {
    let keys = Keys::new();
    let key_file = format!("key_file = \"{}\"", keys.path("hs.secret"));
    let cases = [
        (jwt_config("HS512", &key_file, ""), "auth.jwt.algorithm"),
        (jwt_config("HS256", "", ""), "auth.jwt.key_file"),
        (
            jwt_config("HS256", &format!("{key_file}\njwks_file = \"/x\""), ""),
            "auth.jwt.jwks_file",
        ),
        (
            jwt_config("HS256", &key_file, "tenant_map = { x = \"physics\" }\n"),
            "auth.jwt.tenant_map.\"x\"",
        ),
        (jwt_config("HS256", &key_file, "leeway_s = 3600\n"), "auth.jwt.leeway_s"),
        (
            jwt_config("HS256", &key_file, "").replace("audience = [\"hpcgate\"]", "audience = []"),
            "auth.jwt.audience",
        ),
        (
            "[auth.jwt]\nalgorithm = \"HS256\"\nkey_file = \"/k\"\nissuer = \"i\"\naudience = [\"a\"]\ntenant_claim = \"p\"\n".to_owned(),
            "auth.jwt",
        ),
        (
            tenants("[http]\nallowed_origins = [\"https://a/b\"]\n"),
            "http.allowed_origins[0]",
        ),
    ];
    for (text, key) in cases {
        let config = Config::parse(&text, "t.toml").unwrap();
        let env = Environment {
            home: Some("/home/u".into()),
            ..Environment::default()
        };
        let err = Settings::resolve(&config, &env, &Origins::single("t.toml")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("`t.toml`: key `{key}`: ")),
            "{key}: {err}"
        );
    }
    let err = Config::parse(
        "[auth.jwt]\nalgorithm = \"HS256\"\nissuer_url = \"x\"\n",
        "t.toml",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown key `auth.jwt.issuer_url`"),
        "{err}"
    );
    // A missing or short key file fails when the authenticator is built, naming the key.
    std::fs::write(keys.dir.path().join("short"), "short").unwrap();
    for (file, expected) in [
        ("missing", "cannot read `auth.jwt.key_file` file"),
        ("short", "at least 32 bytes"),
    ] {
        let err = Authenticator::from_settings(&settings(&jwt_config(
            "HS256",
            &format!("key_file = \"{}\"", keys.path(file)),
            "",
        )))
        .unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }
}
