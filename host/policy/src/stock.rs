//! The stock policies, compiled from `policies/stock/` by the build script and embedded in the
//! binary, addressed as `stock:<name>`.

include!(concat!(env!("OUT_DIR"), "/stock.rs"));

/// The component bytes of a stock policy.
pub fn bytes(name: &str) -> Option<&'static [u8]> {
    STOCK.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// The names of every stock policy.
pub fn names() -> Vec<&'static str> {
    STOCK.iter().map(|(n, _)| *n).collect()
}
