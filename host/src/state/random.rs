//! Random identifiers: bytes from the kernel (`/dev/urandom`), written as lowercase base32.
//!
//! Reading the device directly keeps the state layer free of a randomness dependency; the
//! gateway only runs on Linux (bwrap), where the device always exists.

use std::fs::File;
use std::io::Read;

use super::error::StateError;

const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// `len` characters of lowercase base32 (5 random bits each).
pub(crate) fn random_base32(len: usize) -> Result<String, StateError> {
    let mut bytes = vec![0u8; len];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(StateError::io("read random bytes"))?;
    Ok(bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(b & 31)]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_and_alphabet() {
        let s = random_base32(16).unwrap();
        assert_eq!(s.len(), 16);
        assert!(s.bytes().all(|b| ALPHABET.contains(&b)));
        assert_ne!(s, random_base32(16).unwrap());
    }
}
