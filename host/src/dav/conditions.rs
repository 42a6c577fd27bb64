//! The `If` header (RFC 4918 §10.4): a request that sends one runs only when one of its lists
//! holds, else 412. A list holds when each of its conditions does: a lock token is true when a
//! lock of the caller's with that token covers the resource, an entity tag when it is the
//! resource's current one (asked of the pipeline with `stat_path`, only when a tag is sent);
//! `Not` negates. Tagged lists (`<url> (…)`) are judged against the resource the tag names when
//! it is in the same instance, else they cannot hold.
//!
//! A changing request also honours `If-Match` and `If-None-Match` (RFC 9110 §13.1.1–2): 412
//! unless they hold against the resource's current entity tag, so `If-None-Match: *` creates
//! only and a stale `If-Match` does not overwrite a file changed since it was read.

use axum::http::{HeaderMap, StatusCode, header};
use serde_json::json;

use super::Refusal;
use super::methods::Cx;
use super::target::{SandboxView, Target};

/// Most resources whose entity tags one `If` header may ask about: each is a `stat_path` call,
/// decided and recorded.
const MAX_TAGGED: usize = 16;

/// One condition of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    Token(String),
    Etag(String),
}

/// One list, with the resource its tag names (`None`: the request's).
#[derive(Debug, Clone, PartialEq, Eq)]
struct List {
    tag: Option<String>,
    conditions: Vec<(bool, Condition)>,
}

/// Parses an `If` header; `None` when it is malformed.
fn parse(header: &str) -> Option<Vec<List>> {
    let mut lists = Vec::new();
    let mut tag = None;
    let mut chars = header.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            ' ' | '\t' => {}
            '<' => {
                let end = header[i..].find('>')? + i;
                tag = Some(header[i + 1..end].to_owned());
                while chars.peek().is_some_and(|(j, _)| *j <= end) {
                    chars.next();
                }
            }
            '(' => {
                let end = header[i..].find(')')? + i;
                lists.push(List {
                    tag: tag.clone(),
                    conditions: conditions(&header[i + 1..end])?,
                });
                while chars.peek().is_some_and(|(j, _)| *j <= end) {
                    chars.next();
                }
            }
            _ => return None,
        }
    }
    (!lists.is_empty()).then_some(lists)
}

fn conditions(mut text: &str) -> Option<Vec<(bool, Condition)>> {
    let mut out = Vec::new();
    loop {
        text = text.trim_start();
        if text.is_empty() {
            return (!out.is_empty()).then_some(out);
        }
        let negated = text.starts_with("Not") || text.starts_with("not");
        if negated {
            text = text[3..].trim_start();
        }
        let (close, make): (char, fn(&str) -> Condition) = match text.chars().next()? {
            '<' => ('>', |t| Condition::Token(t.to_owned())),
            '[' => (']', |t| Condition::Etag(t.to_owned())),
            _ => return None,
        };
        let end = text.find(close)?;
        out.push((negated, make(&text[1..end])));
        text = &text[end + 1..];
    }
}

/// Refuses (412) a request whose `If` header sends no list that holds; passes one without.
pub async fn check(cx: &Cx<'_>, view: &SandboxView, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(raw) = headers.get("If").and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let Some(lists) = parse(raw) else {
        return Err((
            StatusCode::BAD_REQUEST,
            "the If header is malformed\n".to_owned(),
        ));
    };
    let Target::File(id, _) = &cx.target else {
        return Err(unmet());
    };
    // Each resource's entity tag, asked for once (lists may name several resources).
    let mut etags: Vec<(SandboxView, Option<String>)> = Vec::new();
    for list in &lists {
        let resource = match &list.tag {
            None => Some(view.clone()),
            Some(url) => tagged(url, id),
        };
        let Some(resource) = resource else { continue };
        let mut holds = true;
        for (negated, condition) in &list.conditions {
            let truth = match condition {
                Condition::Token(token) => cx.dav.locks.holds(cx, &resource, token),
                Condition::Etag(tag) => {
                    let known = etags.iter().find(|(at, _)| *at == resource);
                    let current = match known {
                        Some((_, current)) => current.clone(),
                        None if etags.len() >= MAX_TAGGED => {
                            let why = format!(
                                "the If header asks about the entity tags of more than {MAX_TAGGED} resources; ask about fewer\n"
                            );
                            return Err((StatusCode::BAD_REQUEST, why));
                        }
                        None => {
                            let current = current_etag(cx, id, &resource).await;
                            etags.push((resource.clone(), current.clone()));
                            current
                        }
                    };
                    current.as_deref() == Some(tag.as_str())
                }
            };
            holds &= truth != *negated;
        }
        if holds {
            return Ok(());
        }
    }
    Err(unmet())
}

fn unmet() -> Refusal {
    (
        StatusCode::PRECONDITION_FAILED,
        "no list of the If header holds (a lock token or entity tag that does not match)\n"
            .to_owned(),
    )
}

/// The path a tagged list names, if it is in instance `id`.
fn tagged(url: &str, id: &crate::state::InstanceId) -> Option<SandboxView> {
    let path = match url.split_once("://") {
        Some((_, rest)) => &rest[rest.find('/')?..],
        None => url,
    };
    match Target::parse(path) {
        Ok(Target::File(tag_id, view)) if &tag_id == id => Some(view),
        _ => None,
    }
}

/// Refuses (412) a change whose `If-Match` or `If-None-Match` does not hold; passes one
/// without either (the resource is asked for only when one is sent).
pub async fn check_match(
    cx: &Cx<'_>,
    view: &SandboxView,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let (if_match, if_none_match) = (text(header::IF_MATCH), text(header::IF_NONE_MATCH));
    if if_match.is_none() && if_none_match.is_none() {
        return Ok(());
    }
    let Target::File(id, _) = &cx.target else {
        return Err(unmet());
    };
    let current = current(cx, id, view).await;
    let listed = |list: &str, tag: &str, weak: bool| {
        list.split(',').map(str::trim).any(|t| {
            let t = if weak { t.trim_start_matches("W/") } else { t };
            t == tag
        })
    };
    let refuse = |why: &str| Err((StatusCode::PRECONDITION_FAILED, format!("{why}\n")));
    if let Some(list) = if_match {
        let holds = current.as_ref().is_some_and(|tag| {
            list.trim() == "*" || tag.as_deref().is_some_and(|t| listed(list, t, false))
        });
        if !holds {
            return refuse("If-Match does not hold: the resource is gone or has changed");
        }
    }
    if let Some(list) = if_none_match {
        let fails = current.as_ref().is_some_and(|tag| {
            list.trim() == "*" || tag.as_deref().is_some_and(|t| listed(list, t, true))
        });
        if fails {
            return refuse("If-None-Match does not hold: the resource exists with that tag");
        }
    }
    Ok(())
}

/// Whether the resource exists (`None`: it does not, or cannot be seen), and its entity tag
/// when it is a file.
async fn current(
    cx: &Cx<'_>,
    id: &crate::state::InstanceId,
    view: &SandboxView,
) -> Option<Option<String>> {
    let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
    let (stat, _) = cx.dav.call(&cx.caller, "stat_path", arguments, None).await;
    let facts = &stat.structured;
    (!stat.is_error).then(|| {
        (facts["kind"] == "file").then(|| {
            super::props::etag(
                facts["size"].as_u64().unwrap_or(0),
                facts["modified_unix"].as_i64().unwrap_or(0),
                super::props::nsec(facts),
            )
        })
    })
}

/// The resource's entity tag, `None` when it does not exist (or is not a file).
async fn current_etag(
    cx: &Cx<'_>,
    id: &crate::state::InstanceId,
    view: &SandboxView,
) -> Option<String> {
    current(cx, id, view).await.flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_headers_parse() {
        let lists = parse("(<opaquelocktoken:a> [\"e1\"]) (Not <DAV:no-lock> [\"e2\"])").unwrap();
        assert_eq!(lists.len(), 2);
        assert_eq!(
            lists[1].conditions,
            [
                (true, Condition::Token("DAV:no-lock".into())),
                (false, Condition::Etag("\"e2\"".into()))
            ]
        );
        let tagged = parse("<http://h/dav/instances/r/workspace/a> (<t>)").unwrap();
        assert_eq!(
            tagged[0].tag.as_deref(),
            Some("http://h/dav/instances/r/workspace/a")
        );
        for bad in ["", "x", "(", "(<a>", "([a)", "()"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
