//! The `hpcgate` binary.
fn main() {}
