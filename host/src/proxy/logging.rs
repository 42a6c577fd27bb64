//! The gateway's log: one line a message on stderr, whoever wrote its words.

/// The gateway's log is its stderr (stdout may be the MCP stream).
#[allow(clippy::print_stderr)]
pub(crate) fn log(message: &str) {
    eprintln!("hpcgate: {}", one_line(message));
}

/// `message` with its control characters (line ends, terminal escapes) and bidirectional
/// overrides escaped: what a proxied server says (its stderr, its errors) and is logged
/// cannot start a line of its own that reads as the gateway's, nor drive the terminal.
fn one_line(message: &str) -> String {
    let mut line = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_logged_message_stays_one_line_without_escapes() {
        let forged = "bye\nhpcgate: FORGED\r\u{1b}[2J\u{202e}txt.exe ünï";
        assert_eq!(
            super::one_line(forged),
            "bye\\nhpcgate: FORGED\\r\\u{1b}[2J\\u{202e}txt.exe ünï"
        );
    }
}
