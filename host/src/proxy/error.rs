//! Why a proxied call produced no result. Messages are shown to the agent: they say what
//! happened and what to do, and never contain a host path.

use std::time::Duration;

/// A failed proxied call (a remote `isError` result is not an error: it passes through).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProxyError {
    #[error(
        "proxied server `{proxy}` could not start: {reason}; retry later, or ask the admin to run `hpcgate doctor`"
    )]
    Start { proxy: String, reason: String },
    #[error(
        "`{tool}` did not answer within {}s and was cancelled; retry with less work, or ask the admin to raise `proxied_mcps.{proxy}.call_timeout`",
        after.as_secs_f64()
    )]
    Timeout {
        proxy: String,
        tool: String,
        after: Duration,
    },
    #[error(
        "proxied server `{proxy}` stopped while running `{tool}` ({how}); the call's effects are unknown, and the next call restarts the server"
    )]
    Crashed {
        proxy: String,
        tool: String,
        how: String,
    },
    #[error(
        "tenant `{tenant}` already runs {limit} proxied servers, each busy with a call; retry when one of them ends"
    )]
    Busy { tenant: String, limit: usize },
    #[error("proxied server `{proxy}` rejected `{tool}`: {message}")]
    Remote {
        proxy: String,
        tool: String,
        message: String,
    },
    #[error(
        "the result of `{tool}` is {bytes} bytes, over the limit of {limit}; ask for less (e.g. a smaller range or fewer entries), or ask the admin to raise `proxied_mcps.{proxy}.max_result_bytes`"
    )]
    TooLarge {
        proxy: String,
        tool: String,
        bytes: u64,
        limit: u64,
    },
    #[error(
        "the reply to `{tool}` grew over the limit of {limit} bytes and was cut off unread; proxied server `{proxy}` was stopped and the next call restarts it; ask for less (e.g. a smaller range or fewer entries), or ask the admin to raise `proxied_mcps.{proxy}.max_result_bytes`"
    )]
    Overflow {
        proxy: String,
        tool: String,
        limit: u64,
    },
    #[error(
        "`{tool}` asked for interaction or a long-running task, which hpcgate does not relay yet"
    )]
    Unsupported { tool: String },
    #[error(
        "the client cancelled `{tool}` while it was on its way to or at proxied server `{proxy}`; the server is told to stop it (`notifications/cancelled`), and what it did before is unknown"
    )]
    Cancelled { proxy: String, tool: String },
    #[error(
        "the client cancelled `{tool}` before it was sent to proxied server `{proxy}`; nothing ran"
    )]
    CancelledUnsent { proxy: String, tool: String },
    #[error("the gateway is shutting down; retry once it is back")]
    ShuttingDown,
}
