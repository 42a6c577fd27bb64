//! PROPFIND (live properties from `stat_path` / `list_directory`, and `list_instances` /
//! `describe_instance` above the files) and PROPPATCH (dead properties are not stored: each is
//! refused with 403 in the multistatus, as RFC 4918 §9.2 allows).
//!
//! `Depth: infinity` (also the default when the header is absent) is refused with 403 and the
//! `propfind-finite-depth` precondition (RFC 4918 §9.1): a whole tree is walked by asking one
//! level at a time, each level a bounded `list_directory`. A listing that reaches the
//! `[files] max_list_entries` cap answers the entries it holds plus a `507` response for the
//! collection, as RFC 4918 §9.1 provides for truncated results; so does `/dav/instances/`,
//! whose instances are asked of `list_instances` a page at a time up to the same cap.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::methods::Cx;
use super::status::{self, Op};
use super::target::{SandboxView, Target};
use super::xml::{self, DAV, Element, MULTISTATUS_CLOSE, MULTISTATUS_OPEN, escape};
use crate::state::InstanceId;

/// One resource in a multistatus answer.
pub struct Resource {
    pub href: String,
    pub collection: bool,
    pub size: u64,
    pub modified_unix: i64,
    pub modified_nsec: u32,
    /// Active locks, as `<D:activelock>` elements.
    pub locks: String,
    /// The listing of this collection was cut at `[files] max_list_entries`: answered as a
    /// `507` response for it (RFC 4918 §9.1), so a client knows entries are missing.
    pub truncated: bool,
}

/// What a PROPFIND asks for.
enum Asked {
    All,
    Names,
    Some(Vec<Element>),
}

/// Reads a request body up to [`xml::MAX_BODY_BYTES`] and parses its elements.
pub async fn body_elements(body: Body) -> Result<Vec<Element>, Response> {
    Ok(body_xml(body).await?.1)
}

/// Reads a request body up to [`xml::MAX_BODY_BYTES`]: its text and its elements.
pub async fn body_xml(body: Body) -> Result<(String, Vec<Element>), Response> {
    let bytes = crate::min_rate::read_whole(body, xml::MAX_BODY_BYTES).await?;
    if bytes.is_empty() {
        return Ok((String::new(), Vec::new()));
    }
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| (StatusCode::BAD_REQUEST, "the XML body is not UTF-8").into_response())?;
    let elements =
        xml::elements(&text).map_err(|e| (StatusCode::BAD_REQUEST, e.0).into_response())?;
    Ok((text, elements))
}

pub async fn propfind(cx: &Cx<'_>, request: Request) -> Response {
    let depth = match request.headers().get("Depth").map(HeaderValue::as_bytes) {
        Some(b"0") => 0,
        Some(b"1") => 1,
        _ => {
            let body = format!(
                "{}<D:error xmlns:D=\"DAV:\"><D:propfind-finite-depth/></D:error>\n",
                "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
            );
            return (StatusCode::FORBIDDEN, xml_type(), body).into_response();
        }
    };
    let elements = match body_elements(request.into_body()).await {
        Ok(elements) => elements,
        Err(refused) => return refused,
    };
    let asked = if elements
        .iter()
        .any(|e| e.depth == 1 && e.is(DAV, "propname"))
    {
        Asked::Names
    } else if elements.iter().any(|e| e.depth == 1 && e.is(DAV, "prop")) {
        Asked::Some(distinct(
            elements.into_iter().filter(|e| e.depth == 2).collect(),
        ))
    } else {
        Asked::All
    };
    let resources = match resources(cx, depth).await {
        Ok(resources) => resources,
        Err(failed) => return failed,
    };
    let mut body = String::from(MULTISTATUS_OPEN);
    for resource in &resources {
        if body.len() > MAX_ANSWER_BYTES {
            body.push_str(&format!(
                "<D:response><D:href>{}</D:href><D:status>HTTP/1.1 507 Insufficient Storage</D:status><D:responsedescription>the answer is cut at {} MiB: ask for fewer properties</D:responsedescription></D:response>\n",
                escape(&resource.href),
                MAX_ANSWER_BYTES >> 20
            ));
            break;
        }
        render(&mut body, resource, &asked);
    }
    body.push_str(MULTISTATUS_CLOSE);
    (StatusCode::MULTI_STATUS, xml_type(), body).into_response()
}

fn xml_type() -> [(header::HeaderName, &'static str); 1] {
    [(header::CONTENT_TYPE, "application/xml; charset=utf-8")]
}

fn collection(href: String) -> Resource {
    Resource {
        href,
        collection: true,
        size: 0,
        modified_unix: 0,
        modified_nsec: 0,
        locks: String::new(),
        truncated: false,
    }
}

/// The largest page `list_instances` gives.
const INSTANCES_PAGE: usize = 500;

/// The caller's live instances, asked a page at a time, up to `[files] max_list_entries` as
/// for a directory; true when there are more (answered as a 507 for the collection).
async fn instance_ids(cx: &Cx<'_>) -> Result<(Vec<InstanceId>, bool), Response> {
    let most = cx.dav.gateway.snapshot().file_limits().max_list_entries;
    let mut ids = Vec::new();
    let mut seen = 0;
    loop {
        if seen >= most {
            return Ok((ids, true));
        }
        let arguments = json!({ "limit": INSTANCES_PAGE.min(most - seen), "offset": seen });
        let (listed, _) = cx
            .dav
            .call(&cx.caller, "list_instances", arguments, None)
            .await;
        if listed.is_error {
            return Err(status::failed(&listed, Op::Read));
        }
        let page = listed.structured["instances"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        seen += page.len();
        let ids_on_page = page.iter().filter_map(|i| i["id"].as_str());
        ids.extend(ids_on_page.filter_map(|id| InstanceId::parse(id).ok()));
        let total = listed.structured["total"].as_u64().unwrap_or(0);
        if page.is_empty() || seen as u64 >= total {
            return Ok((ids, false));
        }
    }
}

/// The resources a PROPFIND of `depth` reports, each level asked of the pipeline.
async fn resources(cx: &Cx<'_>, depth: u8) -> Result<Vec<Resource>, Response> {
    let mut out = vec![];
    match &cx.target {
        Target::Root => {
            out.push(collection(cx.target.href(true)));
            if depth == 1 {
                out.push(collection(Target::Instances.href(true)));
                for name in super::extras::names(cx) {
                    out.push(collection(Target::Extra(name, vec![]).href(true)));
                }
            }
        }
        Target::Extra(..) => return super::extras::resources(cx, depth).await,
        Target::Instances => {
            out.push(collection(cx.target.href(true)));
            if depth == 1 {
                let (ids, cut) = instance_ids(cx).await?;
                if cut {
                    let mut cut = collection(cx.target.href(true));
                    cut.truncated = true;
                    out.push(cut);
                }
                for id in ids {
                    out.push(collection(Target::Instance(id).href(true)));
                }
            }
        }
        Target::Instance(id) => {
            let arguments = json!({ "instance_id": id.as_str() });
            let (described, _) = cx
                .dav
                .call(&cx.caller, "describe_instance", arguments, None)
                .await;
            if described.is_error {
                return Err(status::failed(&described, Op::Read));
            }
            if described.structured["instance"]["archived"] == true {
                let why = "the instance is archived; unarchive it to reach its files\n";
                return Err((StatusCode::NOT_FOUND, why).into_response());
            }
            out.push(collection(cx.target.href(true)));
            if depth == 1 {
                for area in ["workspace", "output"] {
                    let view = SandboxView {
                        area,
                        segments: vec![],
                    };
                    out.push(collection(Target::File(id.clone(), view).href(true)));
                }
            }
        }
        Target::File(id, view) => {
            let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
            let (stat, _) = cx.dav.call(&cx.caller, "stat_path", arguments, None).await;
            if stat.is_error {
                return Err(status::failed(&stat, Op::Read));
            }
            let facts = &stat.structured;
            let is_dir = facts["kind"] == "directory";
            if !is_dir && facts["kind"] != "file" {
                // As GET answers it: there, but not served.
                let why = "a symbolic link or special file, which WebDAV does not serve\n";
                return Err((StatusCode::FORBIDDEN, why).into_response());
            }
            out.push(resource(cx, id, view, facts, is_dir));
            if depth == 1 && is_dir {
                let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
                let (listed, _) = cx
                    .dav
                    .call(&cx.caller, "list_directory", arguments, None)
                    .await;
                if listed.is_error {
                    return Err(status::failed(&listed, Op::Read));
                }
                if listed.structured["truncated"] == true {
                    let mut cut = resource(cx, id, view, facts, true);
                    cut.truncated = true;
                    out.push(cut);
                }
                for entry in listed.structured["entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let Some(name) = entry["name"].as_str() else {
                        continue;
                    };
                    // An escaped name could not be addressed back; a link or special file is
                    // not served (GET refuses them), so neither is listed.
                    let kind = &entry["kind"];
                    if entry["escaped"] == true || (kind != "file" && kind != "directory") {
                        continue;
                    }
                    let mut child = view.clone();
                    child.segments.push(name.to_owned());
                    out.push(resource(cx, id, &child, entry, kind == "directory"));
                }
            }
        }
    }
    Ok(out)
}

fn resource(
    cx: &Cx<'_>,
    id: &crate::state::InstanceId,
    view: &SandboxView,
    facts: &Value,
    is_dir: bool,
) -> Resource {
    let target = Target::File(id.clone(), view.clone());
    Resource {
        href: target.href(is_dir),
        collection: is_dir,
        size: facts["size"].as_u64().unwrap_or(0),
        modified_unix: facts["modified_unix"].as_i64().unwrap_or(0),
        modified_nsec: nsec(facts),
        locks: cx.dav.locks.discovery(cx, view),
        truncated: false,
    }
}

/// The live properties of `resource`, by local name in DAV:.
fn live(resource: &Resource, local: &str) -> Option<String> {
    let file = !resource.collection;
    Some(match local {
        "resourcetype" if resource.collection => "<D:collection/>".to_owned(),
        "resourcetype" => String::new(),
        "getcontentlength" if file => resource.size.to_string(),
        "getcontenttype" if file => "application/octet-stream".to_owned(),
        "getetag" if file => escape(&etag(
            resource.size,
            resource.modified_unix,
            resource.modified_nsec,
        )),
        "getlastmodified" => http_date(resource.modified_unix),
        "displayname" => {
            let name = resource.href.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            let decoded = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
            escape(&decoded)
        }
        "supportedlock" => "<D:lockentry><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockentry><D:lockentry><D:lockscope><D:shared/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockentry>".to_owned(),
        "lockdiscovery" => resource.locks.clone(),
        _ => return None,
    })
}

/// Where a PROPFIND's answer is cut (with a 507 entry, as for a listing cut at its length): its
/// entries repeat every property asked for, up to [`MAX_ASKED`] names of up to 384 bytes.
const MAX_ANSWER_BYTES: usize = 8 << 20;

/// The most properties one PROPFIND may name: a body of 64 KiB could name one thousands of
/// times, and each is answered in every entry of a listing.
const MAX_ASKED: usize = 64;

/// The properties asked for, each once, at most [`MAX_ASKED`] of them.
fn distinct(elements: Vec<Element>) -> Vec<Element> {
    let mut seen = std::collections::HashSet::new();
    (elements.into_iter())
        .filter(|e| seen.insert((e.ns.clone(), e.local.clone())))
        .take(MAX_ASKED)
        .collect()
}

const ALL_LIVE: [&str; 8] = [
    "resourcetype",
    "getcontentlength",
    "getcontenttype",
    "getetag",
    "getlastmodified",
    "displayname",
    "supportedlock",
    "lockdiscovery",
];

fn render(out: &mut String, resource: &Resource, asked: &Asked) {
    if resource.truncated {
        out.push_str(&format!(
            "<D:response><D:href>{}</D:href><D:status>HTTP/1.1 507 Insufficient Storage</D:status><D:responsedescription>the listing is cut at [files] max_list_entries</D:responsedescription></D:response>\n",
            escape(&resource.href)
        ));
        return;
    }
    out.push_str(&format!(
        "<D:response><D:href>{}</D:href>",
        escape(&resource.href)
    ));
    let mut found = String::new();
    let mut missing = String::new();
    match asked {
        Asked::All | Asked::Names => {
            for local in ALL_LIVE {
                if let Some(value) = live(resource, local) {
                    match asked {
                        Asked::Names => found.push_str(&format!("<D:{local}/>")),
                        _ => found.push_str(&format!("<D:{local}>{value}</D:{local}>")),
                    }
                }
            }
        }
        Asked::Some(wanted) => {
            for element in wanted {
                let value = (element.ns == DAV)
                    .then(|| live(resource, &element.local))
                    .flatten();
                match value {
                    Some(value) => {
                        found.push_str(&format!("<D:{0}>{value}</D:{0}>", element.local))
                    }
                    None => missing.push_str(&empty_element(element)),
                }
            }
        }
    }
    for (props, status) in [(found, "200 OK"), (missing, "404 Not Found")] {
        if !props.is_empty() {
            out.push_str(&format!(
                "<D:propstat><D:prop>{props}</D:prop><D:status>HTTP/1.1 {status}</D:status></D:propstat>"
            ));
        }
    }
    out.push_str("</D:response>\n");
}

/// `<local xmlns="ns"/>` for a property named in a request.
fn empty_element(element: &Element) -> String {
    format!(
        "<{} xmlns=\"{}\"/>",
        escape(&element.local),
        escape(&element.ns)
    )
}

/// PROPPATCH: the resource must exist (`stat_path`); every property set or removed is refused
/// with 403, since dead properties are not stored.
pub async fn proppatch(cx: &Cx<'_>, request: Request) -> Response {
    let Target::File(id, view) = &cx.target else {
        return (StatusCode::FORBIDDEN, "properties cannot be changed here").into_response();
    };
    if let Err(unmet) = super::conditions::check(cx, view, request.headers()).await {
        return unmet.into_response();
    }
    if let Err(locked) = cx.dav.locks.check(cx, view, request.headers()) {
        return locked.into_response();
    }
    let elements = match body_elements(request.into_body()).await {
        Ok(elements) => elements,
        Err(refused) => return refused,
    };
    let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
    let (stat, _) = cx.dav.call(&cx.caller, "stat_path", arguments, None).await;
    if stat.is_error {
        return status::failed(&stat, Op::Read);
    }
    let is_dir = stat.structured["kind"] == "directory";
    let named: String = elements
        .iter()
        .filter(|e| e.depth == 3)
        .map(empty_element)
        .collect();
    let href = escape(&cx.target.href(is_dir));
    let body = format!(
        "{MULTISTATUS_OPEN}<D:response><D:href>{href}</D:href><D:propstat><D:prop>{named}</D:prop><D:status>HTTP/1.1 403 Forbidden</D:status><D:responsedescription>dead properties are not stored by hpcgate</D:responsedescription></D:propstat></D:response>\n{MULTISTATUS_CLOSE}"
    );
    (StatusCode::MULTI_STATUS, xml_type(), body).into_response()
}

/// A GET of a collection: WebDAV clients list with PROPFIND.
pub async fn collection_page(_cx: &Cx<'_>) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        "this is a collection: list it with PROPFIND (Depth: 1), or mount /dav with a WebDAV client\n",
    )
        .into_response()
}

/// A strong entity tag from size and modification time to the nanosecond. Whole seconds were
/// not enough: two writes of one size within a second shared a tag, so an `If-Match` written
/// against the first overwrote the second.
pub fn etag(size: u64, modified_unix: i64, modified_nsec: u32) -> String {
    format!("\"{size:x}-{modified_unix:x}.{modified_nsec:x}\"")
}

/// The `modified_nsec` of a file tool's facts.
pub fn nsec(facts: &Value) -> u32 {
    facts["modified_nsec"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

/// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn http_date(unix: i64) -> String {
    let secs = u64::try_from(unix).unwrap_or(0);
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}
