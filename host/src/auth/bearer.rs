//! Static bearer tokens: generated from the OS random source, stored as SHA-256 hashes, looked
//! up in constant time.
//!
//! The lookup hashes the presented token and compares the hash with *every* configured hash
//! with `subtle`'s constant-time equality, selecting the match without a branch, so neither
//! whether a token matched nor which tenant it belongs to shows in the time taken. Hashing
//! first also means the comparison never sees attacker-chosen lengths.

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::state::TenantName;

/// Tokens start with this, so secret scanners and humans recognise them.
pub const TOKEN_PREFIX: &str = "hpcg_";

/// One configured token: its hash, its tenant and its label.
#[derive(Debug, Clone)]
struct Entry {
    sha256: [u8; 32],
    tenant: TenantName,
    label: String,
}

/// Every configured token hash, in one flat list.
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenTable {
    entries: Vec<Entry>,
}

impl TokenTable {
    pub(crate) fn push(&mut self, sha256: [u8; 32], tenant: TenantName, label: String) {
        self.entries.push(Entry {
            sha256,
            tenant,
            label,
        });
    }

    /// The tenant and label of `token`, comparing against every entry (no early exit).
    pub(crate) fn find(&self, token: &str) -> Option<(&TenantName, &str)> {
        let presented = hash_token(token);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, entry) in self.entries.iter().enumerate() {
            let equal = entry.sha256.ct_eq(&presented);
            // Truncation is impossible: a config with 2^32 tokens cannot be loaded.
            index = u32::conditional_select(&index, &(i as u32), equal);
            found |= equal;
        }
        if bool::from(found) {
            let entry = &self.entries[index as usize];
            Some((&entry.tenant, entry.label.as_str()))
        } else {
            None
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// SHA-256 of a token as configured (`sha256 = "<hex>"`).
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A fresh token: [`TOKEN_PREFIX`] and 256 random bits from the OS, hex.
pub fn generate_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
}

/// The token of an `Authorization` header value: `Bearer <token68>` (scheme case-insensitive).
pub(crate) fn bearer_token(header: &str) -> Result<&str, &'static str> {
    let header = header.trim();
    let (scheme, token) = header
        .split_once(' ')
        .ok_or("expected `Authorization: Bearer <token>`")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("only the `Bearer` scheme is accepted");
    }
    let token = token.trim_start();
    let token68 = |b: u8| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b);
    if token.is_empty() || token.len() > 8192 || !token.bytes().all(token68) {
        return Err("the token is malformed");
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_prefixed_random_and_256_bit() {
        let a = generate_token().unwrap();
        let b = generate_token().unwrap();
        assert_ne!(a, b);
        let hex_part = a.strip_prefix(TOKEN_PREFIX).unwrap();
        assert_eq!(hex_part.len(), 64);
        assert!(hex_part.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(bearer_token(&format!("Bearer {a}")).is_ok());
    }

    #[test]
    fn lookup_scans_every_entry_and_finds_the_match_anywhere() {
        let mut table = TokenTable::default();
        for (i, tenant) in ["a", "b", "c"].iter().enumerate() {
            table.push(
                hash_token(&format!("tok{i}")),
                TenantName::parse(tenant).unwrap(),
                format!("l{i}"),
            );
        }
        for i in 0..3 {
            let (tenant, label) = table.find(&format!("tok{i}")).unwrap();
            assert_eq!(label, format!("l{i}"));
            assert_eq!(tenant.as_str(), ["a", "b", "c"][i]);
        }
        assert!(table.find("tok3").is_none());
        assert!(TokenTable::default().find("tok0").is_none());
    }

    #[test]
    fn authorization_headers_parse_strictly() {
        assert_eq!(bearer_token("Bearer abc"), Ok("abc"));
        assert_eq!(bearer_token("bearer  abc.def-_~+/="), Ok("abc.def-_~+/="));
        assert!(bearer_token("Basic dXNlcjpwYXNz").is_err());
        assert!(bearer_token("Bearer").is_err());
        assert!(bearer_token("Bearer a b").is_err());
        assert!(bearer_token("Bearer a\"b").is_err());
        assert!(bearer_token("abc").is_err());
    }
}
