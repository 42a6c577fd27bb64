//! Escaping of file names shown to an agent.
//!
//! A sandboxed job can create names containing newlines, terminal escapes, bidirectional
//! overrides or bytes that are not UTF-8. Shown raw, such a name can forge extra lines in a
//! listing or hide what a path really is. Every name in a result goes through [`escape_os`]:
//!
//! | in the name                                   | shown as          |
//! |-----------------------------------------------|-------------------|
//! | `\`                                           | `\\`              |
//! | newline, tab, carriage return                 | `\n`, `\t`, `\r`  |
//! | other control character (C0, DEL, C1)         | `\u{7f}`, `\u{85}` |
//! | bidi override / zero-width (U+200B–U+200F, U+202A–U+202E, U+2066–U+2069) | `\u{202e}` |
//! | a byte that is not part of valid UTF-8        | `\xff`            |
//!
//! The scheme is unambiguous (a literal backslash is always doubled). An escaped name cannot be
//! passed back verbatim as a path; results flag such entries with `escaped: true`. Paths given
//! to the tools are taken literally (JSON strings can carry a real newline).

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

/// True for characters that are escaped when shown (and refused in names the gateway creates).
pub fn needs_escape(c: char) -> bool {
    c == '\\'
        || c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Escapes a UTF-8 string for display (see the module table).
pub fn escape_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_escaped(&mut out, s);
    out
}

/// Escapes a host name (any bytes) for display; the flag says whether anything was escaped.
pub fn escape_os(name: &OsStr) -> (String, bool) {
    let mut out = String::with_capacity(name.len());
    for chunk in name.as_bytes().utf8_chunks() {
        push_escaped(&mut out, chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    let escaped = out.as_bytes() != name.as_bytes();
    (out, escaped)
}

fn push_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// The name an escaped one stands for (the inverse of [`escape_os`]), with each byte that is
/// not UTF-8 as U+FFFD: the path an agent would pass to reach it, as near as text can be. What
/// is not a known escape is kept as written.
pub fn unescape_lossy(shown: &str) -> String {
    let mut out = String::with_capacity(shown.len());
    let mut rest = shown;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (c, used) = match after.as_bytes().first() {
            Some(b'\\') => (Some('\\'), 1),
            Some(b'n') => (Some('\n'), 1),
            Some(b't') => (Some('\t'), 1),
            Some(b'r') => (Some('\r'), 1),
            Some(b'x') if after.len() >= 3 && after.is_char_boundary(3) => {
                let byte = u8::from_str_radix(&after[1..3], 16).ok();
                (byte.map(|_| char::REPLACEMENT_CHARACTER), 3)
            }
            Some(b'u') => match after.find('}') {
                Some(end) if after[1..].starts_with('{') => {
                    let code = u32::from_str_radix(&after[2..end], 16).ok();
                    (code.and_then(char::from_u32), end + 1)
                }
                _ => (None, 0),
            },
            _ => (None, 0),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &after[used..];
            }
            None => {
                out.push('\\');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn escape_table() {
        let rows: &[(&[u8], &str, bool)] = &[
            (b"plain.txt", "plain.txt", false),
            (b"caf\xc3\xa9", "caf\u{e9}", false),
            (b"a\nb", "a\\nb", true),
            (b"tab\there\r", "tab\\there\\r", true),
            (b"back\\slash", "back\\\\slash", true),
            (b"esc\x1b[31m", "esc\\u{1b}[31m", true),
            (b"del\x7f", "del\\u{7f}", true),
            (b"\xe2\x80\xaeevil", "\\u{202e}evil", true),
            (b"bad\xff\xfe", "bad\\xff\\xfe", true),
        ];
        for (raw, shown, escaped) in rows {
            let (s, e) = escape_os(OsStr::from_bytes(raw));
            assert_eq!((s.as_str(), e), (*shown, *escaped), "{raw:?}");
            let back = unescape_lossy(&s);
            assert_eq!(back, String::from_utf8_lossy(raw), "{raw:?}");
        }
        assert_eq!(unescape_lossy("odd\\q \\u{zz} \\"), "odd\\q \\u{zz} \\");
    }
}
