//! A JSON message's values counted before anything parses it.
//!
//! rmcp (and the SSE transport) parse a request body whole into a tree of JSON values before
//! any of the gateway's limits apply. A tree costs 32 bytes a value or more, so a body of small
//! values (`[0,0,0,…]`: two bytes a value) parses into sixteen times its size: a 4 MiB body into
//! 64 MiB, a job door's 32 MiB into half a gigabyte, once per request in flight. A tool call's
//! arguments are a few values, or one long string (a file's content); so a body is refused
//! unread when it holds more than [`MAX_VALUES`] values, counted by one pass over its bytes.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The most JSON values one message may hold: a few megabytes of parsed tree.
pub const MAX_VALUES: usize = 1 << 18;

/// Counts the values of the JSON text `bytes` (each `[`, `{`, `,` and `:` outside strings
/// starts one: a member's key costs as much as a value), refusing more than `max` with a
/// message that says what to do. The text is not
/// otherwise checked: the parser that follows does that.
pub fn check_values(bytes: &[u8], max: usize) -> Result<(), String> {
    let (mut values, mut in_string, mut escaped) = (1usize, false, false);
    for &byte in bytes {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'[' | b'{' | b',' | b':' => {
                    values += 1;
                    if values > max {
                        return Err(format!(
                            "the message holds more than {max} JSON values; send large data as \
                             one string (a file's content) or in several calls"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Middleware for a route whose handler parses the body as JSON: reads a POST's body up to
/// `max_bytes` (413 beyond) and refuses one with too many values (413), before the handler
/// sees it. Place it inside the authentication, so only a caller's body is read.
pub async fn bounded(State(max_bytes): State<usize>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match crate::min_rate::read_whole(body, max_bytes).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    if let Err(why) = check_values(&bytes, MAX_VALUES) {
        return (StatusCode::PAYLOAD_TOO_LARGE, why).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_values_outside_strings_only() {
        let ok = |text: &str, max| check_values(text.as_bytes(), max).is_ok();
        assert!(ok("[0,0,0]", 4));
        assert!(!ok("[0,0,0]", 3), "four values: the array and three zeros");
        assert!(ok(r#"{"a":1,"b":[2,3]}"#, 7), "keys count too");
        assert!(!ok(r#"{"a":1,"b":[2,3]}"#, 6));
        // Brackets and commas inside a string, escaped quotes included, are text.
        assert!(ok(r#"{"content":"[,{,\",[,,,]"}"#, 3));
        assert!(
            ok(r#"["a\\",1]"#, 3),
            "an escaped backslash ends before the quote"
        );
        assert!(!ok(r#"["a\\",1,2]"#, 3));
    }

    #[test]
    fn a_file_sized_string_passes_and_a_tree_of_small_values_does_not() {
        let long = format!(r#"{{"content":"{}"}}"#, "QUJD,[{".repeat(1 << 20));
        assert!(check_values(long.as_bytes(), MAX_VALUES).is_ok());
        let zeros = format!("[{}0]", "0,".repeat(MAX_VALUES));
        let refused = check_values(zeros.as_bytes(), MAX_VALUES).unwrap_err();
        assert!(refused.contains("one string"), "{refused}");
    }
}
