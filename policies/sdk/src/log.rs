//! Diagnostics from inside a policy. The host keeps a bounded number of lines per evaluation
//! beside the decision; natively (in unit tests) they are discarded.

/// Logs a debug line.
pub fn debug(message: &str) {
    emit(0, message);
}

/// Logs an informational line.
pub fn info(message: &str) {
    emit(1, message);
}

/// Logs a warning.
pub fn warn(message: &str) {
    emit(2, message);
}

#[cfg(target_arch = "wasm32")]
fn emit(level: u8, message: &str) {
    use crate::bindings::hpcgate::policy::log::{Level, log};
    let level = match level {
        0 => Level::Debug,
        1 => Level::Info,
        _ => Level::Warn,
    };
    log(level, message);
}

#[cfg(not(target_arch = "wasm32"))]
fn emit(_level: u8, _message: &str) {}
