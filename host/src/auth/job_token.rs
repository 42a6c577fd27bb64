//! Job-scoped bearer tokens: how a Slurm job's code proves, over the gateway's HTTP listener,
//! that it is that job (see [`crate::code_mode`]).
//!
//! A token is `hpcgj_<job_id>_<64 hex digits>`: 256 random bits from the OS behind the job id
//! it is for. The job id only says which job's stored hash to compare with (one comparison,
//! constant-time, of SHA-256 hashes, so the time taken says nothing about the secret); it
//! proves nothing. The gateway keeps only the hash; the token itself exists in the job's
//! private token file and in the job's memory.
//!
//! A job token is not a tenant token: [`crate::auth::Authenticator`] never accepts one (it
//! would otherwise become an ordinary caller, without the job's limits). The HTTP transport
//! hands it to code mode, which answers with the job's fixed identity, and refuses it on every
//! route but MCP.

use subtle::ConstantTimeEq as _;

use super::bearer::{bearer_token, hash_token};
use crate::state::JobId;

/// Job tokens start with this (tenant tokens with [`super::bearer::TOKEN_PREFIX`]).
pub const JOB_TOKEN_PREFIX: &str = "hpcgj_";

/// A fresh token for `job_id` and its SHA-256 hash (all the gateway keeps).
pub fn mint(job_id: &JobId) -> Result<(String, [u8; 32]), getrandom::Error> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)?;
    let token = format!("{JOB_TOKEN_PREFIX}{job_id}_{}", hex::encode(secret));
    let hash = hash_token(&token);
    Ok((token, hash))
}

/// The job a presented token claims to be for, if it has a job token's form.
pub fn claimed_job(token: &str) -> Option<JobId> {
    let (job, secret) = token.strip_prefix(JOB_TOKEN_PREFIX)?.rsplit_once('_')?;
    let well_formed = secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit());
    well_formed.then(|| JobId::parse(job).ok()).flatten()
}

/// The bearer token of an `Authorization` header value, if it is a job token's (by prefix:
/// a malformed one is still refused as a job token, never tried as a tenant's).
pub fn job_token_of(authorization: &str) -> Option<&str> {
    bearer_token(authorization)
        .ok()
        .filter(|token| token.starts_with(JOB_TOKEN_PREFIX))
}

/// Whether `token` hashes to `stored` (constant-time).
pub fn matches(token: &str, stored: &[u8; 32]) -> bool {
    bool::from(hash_token(token).ct_eq(stored))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_names_its_job_and_matches_only_its_hash() {
        let job = JobId::parse("j-aaaaaaaaaaaaaaaa").unwrap();
        let (token, hash) = mint(&job).unwrap();
        let (other, _) = mint(&job).unwrap();
        assert_ne!(token, other, "256 random bits each");
        assert_eq!(claimed_job(&token), Some(job));
        assert!(matches(&token, &hash));
        assert!(!matches(&other, &hash));
        let mut flipped = token.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        assert!(!matches(std::str::from_utf8(&flipped).unwrap(), &hash));
        assert_eq!(
            job_token_of(&format!("Bearer {token}")),
            Some(token.as_str())
        );
        assert_eq!(job_token_of("Bearer hpcg_abc"), None);
    }

    #[test]
    fn malformed_job_tokens_claim_no_job() {
        for bad in [
            "hpcgj_",
            "hpcgj_j-aaaaaaaaaaaaaaaa",
            "hpcgj_j-aaaaaaaaaaaaaaaa_abc",
            "hpcgj_../../x_0000000000000000000000000000000000000000000000000000000000000000",
            "hpcg_j-aaaaaaaaaaaaaaaa_0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(claimed_job(bad), None, "{bad}");
        }
    }
}
