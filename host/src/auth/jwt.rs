//! JWT bearer tokens (`[auth.jwt]`): one issuer, one algorithm, keys fixed at load.
//!
//! Algorithm confusion is impossible by construction: the configured algorithm is the only one
//! in the `Validation`, every key is loaded for that algorithm's family (an HS secret is never
//! built from a public key, a JWKS `oct` key or a key for another algorithm is skipped), and
//! `jsonwebtoken` refuses a header `alg` outside the list before it builds a verifier
//! (`alg: none` does not even parse). `exp`, `iss` and `aud` are required, `nbf` is checked when
//! present, both with the configured leeway.
//!
//! A token that verifies but grants nothing here (a scope of `[auth.oauth] required_scopes`
//! missing, or no single tenant named by the tenant claim) is [`AuthError::InsufficientScope`]
//! (403), not 401: the client authenticated, and another token of the same issuer may work
//! (MCP authorization, "Error handling"). `scope` and `scp` claims are space-delimited lists
//! (RFC 8693 §4.2), so `tenant_claim = "scope"` maps scopes to tenants through `tenant_map`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::error::{AuthError, AuthSetupError};
use crate::config::{JwtAlgorithm, JwtKeySource, JwtSettings};
use crate::state::TenantName;

/// The shortest HS256 secret accepted (RFC 7518 §3.2: at least the hash size).
const MIN_SECRET_BYTES: usize = 32;

enum Keys {
    One(DecodingKey),
    ByKid(HashMap<String, DecodingKey>),
}

/// A loaded `[auth.jwt]`.
pub(crate) struct JwtVerifier {
    keys: Keys,
    validation: Validation,
    claim: String,
    map: BTreeMap<String, TenantName>,
    tenants: BTreeSet<TenantName>,
    /// `[auth.oauth] required_scopes`: every one must be in the token's `scope` claim.
    required_scopes: Vec<String>,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("claim", &self.claim)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// Reads the key (or JWKS) file and fixes the validation rules.
    pub(crate) fn load(
        settings: &JwtSettings,
        tenants: BTreeSet<TenantName>,
        required_scopes: Vec<String>,
    ) -> Result<JwtVerifier, AuthSetupError> {
        let algorithm = match settings.algorithm {
            JwtAlgorithm::Hs256 => Algorithm::HS256,
            JwtAlgorithm::Rs256 => Algorithm::RS256,
            JwtAlgorithm::Es256 => Algorithm::ES256,
        };
        let keys = match &settings.key {
            JwtKeySource::KeyFile(path) => {
                let key = "auth.jwt.key_file";
                let bytes = std::fs::read(path).map_err(|source| AuthSetupError::Read {
                    key,
                    path: path.clone(),
                    source,
                })?;
                let unusable = |message: String| AuthSetupError::Unusable {
                    key,
                    path: path.clone(),
                    message,
                };
                Keys::One(match settings.algorithm {
                    JwtAlgorithm::Hs256 => {
                        let secret = bytes.trim_ascii_end();
                        if secret.len() < MIN_SECRET_BYTES {
                            return Err(unusable(format!(
                                "an HS256 secret must be at least {MIN_SECRET_BYTES} bytes; generate one with `openssl rand -base64 48`"
                            )));
                        }
                        if secret.starts_with(b"-----BEGIN") {
                            return Err(unusable(
                                "this is a PEM key, not a shared secret; use `algorithm = \"RS256\"` or `\"ES256\"` for public keys".to_owned(),
                            ));
                        }
                        // Whoever reads the secret can sign tokens for any tenant.
                        use std::os::unix::fs::PermissionsExt;
                        let mode = std::fs::metadata(path).map_or(0, |m| m.permissions().mode());
                        if mode & 0o004 != 0 {
                            return Err(unusable(
                                "an HS256 secret that every user may read lets anyone sign tokens: `chmod o-r` it (600 is best)".to_owned(),
                            ));
                        }
                        DecodingKey::from_secret(secret)
                    }
                    JwtAlgorithm::Rs256 => DecodingKey::from_rsa_pem(&bytes)
                        .map_err(|e| unusable(format!("not an RSA public key in PEM ({e})")))?,
                    JwtAlgorithm::Es256 => DecodingKey::from_ec_pem(&bytes).map_err(|e| {
                        unusable(format!("not an EC P-256 public key in PEM ({e})"))
                    })?,
                })
            }
            JwtKeySource::Jwks(path) => Keys::ByKid(load_jwks(path, settings.algorithm)?),
        };
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[&settings.issuer]);
        validation.set_audience(settings.audience.as_slice());
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.leeway = settings.leeway.as_secs();
        Ok(JwtVerifier {
            keys,
            validation,
            claim: settings.tenant_claim.clone(),
            map: settings.tenant_map.clone(),
            tenants,
            required_scopes,
        })
    }

    /// Verifies `token` and returns its tenant and `jwt:<sub>`.
    pub(crate) fn verify(&self, token: &str) -> Result<(TenantName, String), AuthError> {
        let key = match &self.keys {
            Keys::One(key) => key,
            Keys::ByKid(keys) => {
                let header = jsonwebtoken::decode_header(token)
                    .map_err(|e| AuthError::invalid(describe(e.kind())))?;
                let kid = header
                    .kid
                    .ok_or_else(|| AuthError::invalid("the JWT has no `kid` header"))?;
                keys.get(&kid).ok_or_else(|| {
                    AuthError::invalid("the JWT's `kid` names no key this gateway trusts")
                })?
            }
        };
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, key, &self.validation)
            .map_err(|e| AuthError::invalid(describe(e.kind())))?;
        let claims = data.claims;
        let sub = match claims.get("sub") {
            Some(Value::String(sub)) if !sub.is_empty() && sub.len() <= 256 => sub,
            _ => return Err(AuthError::invalid("the JWT has no usable `sub` claim")),
        };
        self.check_scopes(claims.get("scope"))?;
        let tenant = self.tenant_of(claims.get(&self.claim))?;
        Ok((tenant, format!("jwt:{sub}")))
    }

    /// Every required scope in the token's space-delimited `scope` claim, or 403.
    fn check_scopes(&self, scope: Option<&Value>) -> Result<(), AuthError> {
        if self.required_scopes.is_empty() {
            return Ok(());
        }
        let granted: BTreeSet<&str> = match scope {
            Some(Value::String(s)) => s.split_ascii_whitespace().collect(),
            _ => BTreeSet::new(),
        };
        let missing: Vec<&str> = self
            .required_scopes
            .iter()
            .map(String::as_str)
            .filter(|s| !granted.contains(s))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(AuthError::InsufficientScope {
            reason: format!(
                "the token lacks the scope {}",
                missing
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            scope: Some(self.required_scopes.join(" ")),
        })
    }

    fn forbidden(&self, reason: String) -> AuthError {
        AuthError::InsufficientScope {
            reason,
            scope: (!self.required_scopes.is_empty()).then(|| self.required_scopes.join(" ")),
        }
    }

    fn tenant_of(&self, value: Option<&Value>) -> Result<TenantName, AuthError> {
        let claim = &self.claim;
        let values: Vec<&str> = match value {
            Some(Value::String(s)) if matches!(claim.as_str(), "scope" | "scp") => {
                s.split_ascii_whitespace().collect()
            }
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            _ => {
                return Err(self.forbidden(format!(
                    "the JWT has no `{claim}` claim (a string or a list of strings)"
                )));
            }
        };
        let found: BTreeSet<TenantName> = values
            .into_iter()
            .filter_map(|v| {
                if self.map.is_empty() {
                    TenantName::parse(v)
                        .ok()
                        .filter(|t| self.tenants.contains(t))
                } else {
                    self.map.get(v).cloned()
                }
            })
            .collect();
        let mut found = found.into_iter();
        match (found.next(), found.next()) {
            (Some(tenant), None) => Ok(tenant),
            (None, _) => Err(self.forbidden(format!(
                "the JWT's `{claim}` claim names no tenant of this gateway"
            ))),
            (Some(_), Some(_)) => Err(self.forbidden(format!(
                "the JWT's `{claim}` claim names more than one tenant of this gateway"
            ))),
        }
    }
}

/// The keys of a JWKS file usable with `algorithm`, by `kid`. Keys for other algorithms (and
/// every symmetric `oct` key) are skipped; a file with no usable key is an error.
fn load_jwks(
    path: &std::path::Path,
    algorithm: JwtAlgorithm,
) -> Result<HashMap<String, DecodingKey>, AuthSetupError> {
    let key = "auth.jwt.jwks_file";
    let text = std::fs::read_to_string(path).map_err(|source| AuthSetupError::Read {
        key,
        path: path.to_owned(),
        source,
    })?;
    let unusable = |message: String| AuthSetupError::Unusable {
        key,
        path: path.to_owned(),
        message,
    };
    let set: JwkSet = serde_json::from_str(&text)
        .map_err(|e| unusable(format!("not a JWKS (`{{\"keys\": [...]}}`): {e}")))?;
    let wanted = match algorithm {
        JwtAlgorithm::Rs256 => KeyAlgorithm::RS256,
        JwtAlgorithm::Es256 => KeyAlgorithm::ES256,
        JwtAlgorithm::Hs256 => return Err(unusable("HS256 takes `key_file`".to_owned())),
    };
    let mut keys = HashMap::new();
    for jwk in &set.keys {
        let Some(kid) = &jwk.common.key_id else {
            continue;
        };
        if jwk.common.key_algorithm.is_some_and(|a| a != wanted) {
            continue;
        }
        let fits = match (&jwk.algorithm, algorithm) {
            (AlgorithmParameters::RSA(_), JwtAlgorithm::Rs256) => true,
            (AlgorithmParameters::EllipticCurve(ec), JwtAlgorithm::Es256) => {
                ec.curve == EllipticCurve::P256
            }
            _ => false,
        };
        if !fits {
            continue;
        }
        let decoding = DecodingKey::from_jwk(jwk)
            .map_err(|e| unusable(format!("key `{kid}` cannot be used ({e})")))?;
        if keys.insert(kid.clone(), decoding).is_some() {
            return Err(unusable(format!(
                "two keys have `kid` `{kid}`; a kid must name one key"
            )));
        }
    }
    if keys.is_empty() {
        return Err(unusable(format!(
            "no key with a `kid` for {} in the file",
            algorithm.as_str()
        )));
    }
    Ok(keys)
}

/// A reason safe to send back (no key material, no claim values).
fn describe(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::ExpiredSignature => "the JWT has expired".to_owned(),
        ErrorKind::ImmatureSignature => "the JWT is not valid yet (`nbf`)".to_owned(),
        ErrorKind::InvalidIssuer => "the JWT's issuer is not accepted".to_owned(),
        ErrorKind::InvalidAudience => "the JWT's audience is not accepted".to_owned(),
        ErrorKind::InvalidSignature => "the JWT's signature does not verify".to_owned(),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            "the JWT's algorithm is not accepted".to_owned()
        }
        ErrorKind::MissingRequiredClaim(claim) => format!("the JWT has no `{claim}` claim"),
        ErrorKind::InvalidClaimFormat(claim) => format!("the JWT's `{claim}` claim is malformed"),
        _ => "the token is neither a known token nor a well-formed JWT".to_owned(),
    }
}
