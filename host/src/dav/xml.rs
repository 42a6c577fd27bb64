//! The little XML WebDAV needs: reading the element names of a request body, and writing
//! multistatus answers.
//!
//! A request body (PROPFIND, PROPPATCH, LOCK) is read up to [`MAX_BODY_BYTES`] and scanned for
//! its elements only: names with their namespace, and depth. Text content is never needed, so
//! no entity is ever expanded; a document that declares a DTD (`<!DOCTYPE`, hence any
//! `<!ENTITY`) is refused outright, which is how billion-laughs and external-entity bodies end.
//! Namespaces are resolved from `xmlns`/`xmlns:p` declarations on the way down, which is all the
//! WebDAV bodies clients send use.

use std::collections::HashMap;

/// The largest request body parsed (PROPFIND, PROPPATCH, LOCK).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The deepest nesting accepted: WebDAV bodies nest four or five levels, and each element's
/// prefix is looked up through the open elements, so the depth bounds that work.
pub const MAX_DEPTH: usize = 32;

/// The longest element name (prefix included) and namespace URI accepted. Each element keeps its
/// namespace and a listing's answer repeats the names asked for in every entry, so a 64 KiB body
/// of long names would cost gigabytes; WebDAV's names and namespaces are tens of bytes.
pub const MAX_NAME_BYTES: usize = 128;
pub const MAX_NAMESPACE_BYTES: usize = 256;

/// The DAV: namespace.
pub const DAV: &str = "DAV:";

/// One element of a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// Nesting depth, 0 for the document element.
    pub depth: usize,
    /// Resolved namespace URI (`""` when none).
    pub ns: String,
    pub local: String,
}

impl Element {
    pub fn is(&self, ns: &str, local: &str) -> bool {
        self.ns == ns && self.local == local
    }
}

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadXml(pub String);

/// The elements of `body`, in document order.
pub fn elements(body: &str) -> Result<Vec<Element>, BadXml> {
    let bad = |why: &str| BadXml(format!("the XML body {why}"));
    let mut out = Vec::new();
    // Per open element: its name as written and the prefixes it declared.
    let mut stack: Vec<(String, HashMap<String, String>)> = Vec::new();
    let mut rest = body;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        if let Some(after) = rest.strip_prefix("!--") {
            let end = after
                .find("-->")
                .ok_or_else(|| bad("has an unclosed comment"))?;
            rest = &after[end + 3..];
            continue;
        }
        if rest.starts_with('!') {
            return Err(bad(
                "declares a DTD or CDATA, which is not accepted (no entities are expanded)",
            ));
        }
        let end = rest.find('>').ok_or_else(|| bad("has an unclosed tag"))?;
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some((open, _)) if open == name.trim() => continue,
                _ => return Err(bad("has mismatched tags")),
            }
        }
        if tag.starts_with(char::is_whitespace) {
            return Err(bad("has a tag that starts with white space"));
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let mut words = tag.split_whitespace();
        let name = words
            .next()
            .ok_or_else(|| bad("has an empty tag"))?
            .to_owned();
        if name.len() > MAX_NAME_BYTES {
            return Err(bad(&format!(
                "has an element name longer than {MAX_NAME_BYTES} bytes"
            )));
        }
        if !name
            .chars()
            .all(|c| c.is_alphanumeric() || "-_.:".contains(c))
        {
            return Err(bad(
                "has an element name with characters XML names do not have",
            ));
        }
        let mut declared = HashMap::new();
        for attribute in attributes(&tag[name.len()..]).map_err(|why| bad(&why))? {
            let declares = attribute.0 == "xmlns" || attribute.0.starts_with("xmlns:");
            if declares && !namespace_like(&attribute.1) {
                return Err(bad(&format!(
                    "declares a namespace longer than {MAX_NAMESPACE_BYTES} bytes or with characters a namespace URI does not have"
                )));
            }
            if attribute.0 == "xmlns" {
                declared.insert(String::new(), attribute.1);
            } else if let Some(prefix) = attribute.0.strip_prefix("xmlns:") {
                if attribute.1.is_empty() {
                    return Err(bad(&format!(
                        "undeclares the prefix `{prefix}`, which XML namespaces 1.0 forbid"
                    )));
                }
                declared.insert(prefix.to_owned(), attribute.1);
            }
        }
        let (prefix, local) = name.split_once(':').unwrap_or(("", &name));
        let ns = declared
            .get(prefix)
            .or_else(|| stack.iter().rev().find_map(|(_, d)| d.get(prefix)))
            .cloned();
        let ns = match ns {
            Some(ns) => ns,
            None if prefix.is_empty() => String::new(),
            None => return Err(bad(&format!("uses the undeclared prefix `{prefix}`"))),
        };
        out.push(Element {
            depth: stack.len(),
            ns,
            local: local.to_owned(),
        });
        if !self_closing {
            if stack.len() >= MAX_DEPTH {
                return Err(bad(&format!(
                    "nests elements deeper than {MAX_DEPTH} levels"
                )));
            }
            stack.push((name, declared));
        }
    }
    if !stack.is_empty() {
        return Err(bad("ends before its elements are closed"));
    }
    Ok(out)
}

/// `name="value"` pairs of a tag; values with `&` other than the predefined entities and
/// character references are refused.
fn attributes(mut text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    loop {
        text = text.trim_start();
        if text.is_empty() {
            return Ok(out);
        }
        let eq = text.find('=').ok_or("has an attribute without a value")?;
        let name = text[..eq].trim().to_owned();
        let after = text[eq + 1..].trim_start();
        let quote = after
            .chars()
            .next()
            .ok_or("has an attribute without a value")?;
        if quote != '"' && quote != '\'' {
            return Err("has an unquoted attribute".into());
        }
        let close = after[1..].find(quote).ok_or("has an unclosed attribute")?;
        let value = &after[1..1 + close];
        if value.contains('&') && !value.split('&').skip(1).all(predefined_entity) {
            return Err("uses an entity that is not predefined".into());
        }
        out.push((name, value.to_owned()));
        text = &after[close + 2..];
    }
}

/// A namespace URI as WebDAV clients send them: short, printable, nothing to escape.
fn namespace_like(uri: &str) -> bool {
    uri.len() <= MAX_NAMESPACE_BYTES
        && uri
            .chars()
            .all(|c| !c.is_control() && !"<>&\"'".contains(c))
}

fn predefined_entity(after_amp: &str) -> bool {
    ["lt;", "gt;", "amp;", "quot;", "apos;", "#"]
        .iter()
        .any(|e| after_amp.starts_with(e))
}

/// The text inside the first element named `local` (any prefix) of a well-formed `body`,
/// markup removed: e.g. a LOCK's `owner`, kept and shown back as plain text.
pub fn inner_text(body: &str, local: &str) -> Option<String> {
    let mut from = 0;
    while let Some(at) = body[from..].find('<') {
        let start = from + at + 1;
        let end = start + body[start..].find('>')?;
        let name = body[start..end].split_whitespace().next().unwrap_or("");
        from = end + 1;
        if name.starts_with('/') || name.ends_with('/') {
            continue;
        }
        if name.rsplit(':').next() == Some(local) {
            let close = body[from..].find(&format!("</{name}>"))?;
            let inner = &body[from..from + close];
            let mut text = String::new();
            let mut in_tag = false;
            for c in inner.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => in_tag = false,
                    c if !in_tag => text.push(c),
                    _ => {}
                }
            }
            return Some(text.trim().to_owned());
        }
    }
    None
}

/// Escapes text for element content and attribute values. A character XML 1.0 does not allow
/// at all (controls but tab and line ends, U+FFFE, U+FFFF: not even as a character reference)
/// becomes U+FFFD: a lock's owner or a file's name holding one would otherwise make the whole
/// answer unreadable to every client listing that collection.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            '\0'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The start of a multistatus answer.
pub const MULTISTATUS_OPEN: &str =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n";
/// Its end.
pub const MULTISTATUS_CLOSE: &str = "</D:multistatus>\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_text_holds_only_characters_xml_allows() {
        assert_eq!(escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
        assert_eq!(escape("tab\tline\nend\r"), "tab\tline\nend\r");
        assert_eq!(
            escape("\u{1}owner\u{0}\u{1f}x\u{fffe}\u{ffff}"),
            "\u{fffd}owner\u{fffd}\u{fffd}x\u{fffd}\u{fffd}"
        );
        assert_eq!(escape("élan 名前 \u{fffd}"), "élan 名前 \u{fffd}");
    }

    #[test]
    fn names_resolve_through_prefixes() {
        let body = r#"<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop xmlns:z="urn:z"><D:getetag/><z:colour/><plain/></D:prop></D:propfind>"#;
        let names: Vec<_> = elements(body)
            .unwrap()
            .into_iter()
            .map(|e| (e.depth, e.ns, e.local))
            .collect();
        assert_eq!(
            names,
            [
                (0, "DAV:".into(), "propfind".into()),
                (1, "DAV:".into(), "prop".into()),
                (2, "DAV:".into(), "getetag".into()),
                (2, "urn:z".into(), "colour".into()),
                (2, String::new(), "plain".into()),
            ]
        );
    }

    #[test]
    fn dtds_entities_and_broken_bodies_are_refused() {
        let laughs = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]><D:propfind xmlns:D="DAV:">&lol2;</D:propfind>"#;
        for body in [
            laughs,
            "<D:propfind xmlns:D=\"DAV:\"><![CDATA[x]]></D:propfind>",
            "<D:propfind>",
            "<D:a xmlns:D=\"DAV:\"></D:b>",
            "<x:a/>",
            "<a b=\"&ext;\"/>",
            "<D:propfind xmlns:D=\"DAV:\">< a\u{e9}/></D:propfind>",
            "< \u{e9}\u{e9} x=\"1\"/>",
            "<\u{3000}a/>",
        ] {
            assert!(elements(body).is_err(), "{body}");
        }
    }

    #[test]
    fn nesting_is_capped() {
        let nested = |levels: usize| {
            format!(
                "<D:a xmlns:D=\"DAV:\">{}{}</D:a>",
                "<D:a>".repeat(levels - 1),
                "</D:a>".repeat(levels - 1)
            )
        };
        assert_eq!(elements(&nested(MAX_DEPTH)).unwrap().len(), MAX_DEPTH);
        let refused = elements(&nested(MAX_DEPTH + 1)).unwrap_err().0;
        assert!(refused.contains("deeper than 32 levels"), "{refused}");
        // A body of nothing but open tags is refused at the cap, not scanned to its end.
        let open = "<D:a xmlns:D=\"DAV:\">".to_owned() + &"<D:a>".repeat(13_000);
        assert!(elements(&open).unwrap_err().0.contains("deeper than"));
    }

    /// Long names and namespaces are refused (a listing answers each name in every entry), and
    /// so are namespaces that would need escaping; the lengths WebDAV clients use pass.
    #[test]
    fn names_and_namespaces_are_bounded() {
        let ns = |uri: &str| {
            format!(
                "<D:propfind xmlns:D=\"DAV:\"><D:prop xmlns:z=\"{uri}\"><z:p/></D:prop></D:propfind>"
            )
        };
        let longest = "u".repeat(MAX_NAMESPACE_BYTES);
        assert_eq!(elements(&ns(&longest)).unwrap()[2].ns, longest);
        assert!(elements(&ns("http://apache.org/dav/props/")).is_ok());
        for uri in [
            "u".repeat(MAX_NAMESPACE_BYTES + 1),
            "'".repeat(100),
            "a&amp;b".into(),
            "a\u{1}".into(),
        ] {
            let refused = elements(&ns(&uri)).unwrap_err().0;
            assert!(refused.contains("namespace"), "{refused}");
        }
        let named = |name: &str| {
            format!("<D:propfind xmlns:D=\"DAV:\"><D:prop><{name}/></D:prop></D:propfind>")
        };
        let longest = "n".repeat(MAX_NAME_BYTES);
        assert_eq!(elements(&named(&longest)).unwrap()[2].local, longest);
        assert!(elements(&named("D:quota-used-bytes")).is_ok());
        for name in ["n".repeat(MAX_NAME_BYTES + 1), "a'b".into(), "a\"b".into()] {
            let refused = elements(&named(&name)).unwrap_err().0;
            assert!(refused.contains("element name"), "{refused}");
        }
    }
}
