//! The methods that read or change files: GET/HEAD, PUT, DELETE, MKCOL, COPY and MOVE, each one
//! tool call through the pipeline (a COPY/MOVE first finds its source and destination with
//! `stat_path`; one that replaces a collection also moves it aside and deletes it after: each
//! call decided and recorded on its own).

use std::io;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
use tokio_util::io::{ReaderStream, StreamReader, SyncIoBridge};

use super::min_rate::MinRate;
use super::status::{self, Op};
use super::target::{SandboxView, Target};
use super::{Dav, Refusal, Steps};
use crate::auth::Caller;
use crate::gateway::{CallResult, Failure, Transfer, Upload};
use crate::state::InstanceId;
use hpcgate_executors::files::OpenedFile;

/// One request's caller and target.
pub struct Cx<'a> {
    pub dav: &'a Dav,
    pub caller: Caller,
    pub target: Target,
}

impl Cx<'_> {
    /// The instance and path of a request that must name something inside an area; other
    /// targets (the tree above the files, an area itself when `inside`) answer 405.
    fn file(&self, inside: bool) -> Result<(&InstanceId, &SandboxView), Refusal> {
        match &self.target {
            Target::File(id, view) if !(inside && view.is_area()) => Ok((id, view)),
            _ => Err((
                StatusCode::METHOD_NOT_ALLOWED,
                "not allowed here: only paths inside /dav/instances/<id>/workspace/ or output/ can be changed\n".to_owned(),
            )),
        }
    }

    /// The instance and path a changing request names, once its `If`, `If-Match` and
    /// `If-None-Match` conditions hold and no lock whose token it lacks covers the path: how
    /// PUT, DELETE and MKCOL begin.
    async fn writable(&self, headers: &HeaderMap) -> Result<(&InstanceId, &SandboxView), Response> {
        let (id, view) = self.file(true).map_err(IntoResponse::into_response)?;
        (super::conditions::check(self, view, headers).await)
            .map_err(IntoResponse::into_response)?;
        (super::conditions::check_match(self, view, headers).await)
            .map_err(IntoResponse::into_response)?;
        (self.dav.locks.check(self, view, headers)).map_err(IntoResponse::into_response)?;
        Ok((id, view))
    }
}

/// GET and HEAD: `read_file` with a download slot, then the opened file is sent (ranges too).
pub async fn get(cx: &Cx<'_>, headers: &HeaderMap, head_only: bool) -> Response {
    if !matches!(cx.target, Target::File(..)) {
        return super::props::collection_page(cx).await;
    }
    let (id, view) = match cx.file(false) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
    let (result, transfer) = (cx.dav)
        .call(
            &cx.caller,
            "read_file",
            arguments,
            Some(Transfer::download()),
        )
        .await;
    if result.is_error {
        return status::failed(&result, Op::Read);
    }
    let Some(opened) = transfer.and_then(|t| t.take_download()) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the file was not opened").into_response();
    };
    send(opened, headers, head_only).await
}

/// Bytes read from a file per chunk of a GET body (tokio's file reads hop to the blocking pool
/// once per chunk: 4 KiB chunks made a GET six times slower than a PUT).
const CHUNK: usize = 256 * 1024;

/// Sends an opened file: `If-Match`, `If-None-Match`, one `Range` (honoured only while
/// `If-Range` names this version), `ETag`, `Last-Modified`; the bytes stream from the
/// descriptor.
pub async fn send(opened: OpenedFile, headers: &HeaderMap, head_only: bool) -> Response {
    let etag = super::props::etag(opened.size, opened.modified_unix, opened.modified_nsec);
    let size = opened.size;
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    // If-Match compares strongly, If-None-Match weakly (RFC 9110 §13.1.1–2).
    let strong = |t: &str| t == etag || t == "*";
    let weak = |t: &str| strong(t.strip_prefix("W/").unwrap_or(t));
    let names_this = |v: &str, same: &dyn Fn(&str) -> bool| v.split(',').any(|t| same(t.trim()));
    if text(header::IF_MATCH).is_some_and(|v| !names_this(v, &strong)) {
        return StatusCode::PRECONDITION_FAILED.into_response();
    }
    let modified = super::props::http_date(opened.modified_unix);
    if text(header::IF_NONE_MATCH).is_some_and(|v| names_this(v, &weak)) {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        insert(&mut response, header::ETAG, &etag);
        insert(&mut response, header::LAST_MODIFIED, &modified);
        return response;
    }
    // If-Range: a range only of the version its entity tag names, compared strongly; a date
    // (a weak validator: another write may share its second) gets the whole file, so that a
    // client resuming the download of a file changed meanwhile never splices two versions.
    let range =
        text(header::RANGE).filter(|_| (text(header::IF_RANGE)).is_none_or(|v| v.trim() == etag));
    let (start, len, partial) = match range.map(|r| parse_range(r, size)) {
        None | Some(Range::Ignored) => (0, size, false),
        Some(Range::Bytes(start, len)) => (start, len, true),
        Some(Range::Unsatisfiable) => {
            let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            insert(
                &mut response,
                header::CONTENT_RANGE,
                &format!("bytes */{size}"),
            );
            return response;
        }
    };
    let body = if head_only {
        Body::empty()
    } else {
        let mut file = tokio::fs::File::from_std(opened.file);
        if let Err(e) = file.seek(io::SeekFrom::Start(start)).await {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot seek ({})", e.kind()),
            )
                .into_response();
        }
        Body::from_stream(ReaderStream::with_capacity(file.take(len), CHUNK))
    };
    let status = if partial {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    let mut response = (status, body).into_response();
    insert(&mut response, header::CONTENT_LENGTH, &len.to_string());
    insert(
        &mut response,
        header::CONTENT_TYPE,
        "application/octet-stream",
    );
    insert(&mut response, header::ACCEPT_RANGES, "bytes");
    insert(&mut response, header::ETAG, &etag);
    insert(&mut response, header::LAST_MODIFIED, &modified);
    if partial {
        let last = start + len.saturating_sub(1);
        insert(
            &mut response,
            header::CONTENT_RANGE,
            &format!("bytes {start}-{last}/{size}"),
        );
    }
    response
}

fn insert(response: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, value);
    }
}

/// A `Range` header against a file of `size` bytes (one range; several are answered whole).
#[derive(Debug, PartialEq, Eq)]
enum Range {
    Ignored,
    /// Start and length.
    Bytes(u64, u64),
    Unsatisfiable,
}

fn parse_range(header: &str, size: u64) -> Range {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Range::Ignored;
    };
    if spec.contains(',') {
        return Range::Ignored;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return Range::Ignored;
    };
    let (first, last) = (first.trim(), last.trim());
    let parsed = match (first.parse::<u64>(), last.parse::<u64>()) {
        (Ok(a), Ok(b)) if a <= b => Some((a, b.min(size.saturating_sub(1)))),
        (Ok(a), Err(_)) if last.is_empty() => Some((a, size.saturating_sub(1))),
        (Err(_), Ok(n)) if first.is_empty() && n > 0 => {
            Some((size.saturating_sub(n), size.saturating_sub(1)))
        }
        _ => return Range::Ignored,
    };
    match parsed {
        Some((a, b)) if a < size && a <= b => Range::Bytes(a, b - a + 1),
        _ => Range::Unsatisfiable,
    }
}

/// PUT: `write_file` whose content streams from the request body. A `Content-Range` (a
/// partial PUT, which this server does not do) is refused with 400 (RFC 9110 §14.4), else the
/// part would replace the whole file.
pub async fn put(cx: &Cx<'_>, request: Request) -> Response {
    if request.headers().contains_key(header::CONTENT_RANGE) {
        let why =
            "a PUT with Content-Range (a partial write) is not supported; send the whole file\n";
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    let (id, view) = match cx.writable(request.headers()).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    // Finder sends its uploads chunked, with the size in `X-Expected-Entity-Length`: without
    // one, the upload would hold all the room left under the quota while it arrives. Either
    // way the body is cut at the size announced.
    let announced = size_in(request.headers(), header::CONTENT_LENGTH.as_str())
        .or_else(|| size_in(request.headers(), "x-expected-entity-length"));
    let stream = request
        .into_body()
        .into_data_stream()
        .map_err(io::Error::other);
    let source = SyncIoBridge::new(StreamReader::new(MinRate::new(stream)));
    let upload = Upload {
        source: Box::new(source),
        max_bytes: cx.dav.gateway.snapshot().dav().max_upload_bytes,
        announced,
    };
    let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
    let (result, _) = (cx.dav)
        .call(
            &cx.caller,
            "write_file",
            arguments,
            Some(Transfer::upload(upload)),
        )
        .await;
    if result.is_error {
        return status::failed(&result, Op::Create);
    }
    if result.structured["created"] == true {
        StatusCode::CREATED.into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    }
}

/// DELETE: `delete_path`, recursive (RFC 4918 §9.6.1: a collection goes with its members).
pub async fn delete(cx: &Cx<'_>, headers: &HeaderMap) -> Response {
    let (id, view) = match cx.writable(headers).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let arguments = json!({ "instance_id": id.as_str(), "path": view.path(), "recursive": true });
    let (result, _) = cx
        .dav
        .call(&cx.caller, "delete_path", arguments, None)
        .await;
    if result.is_error {
        return status::failed(&result, Op::Other);
    }
    cx.dav.locks.forget_beneath(cx, view);
    StatusCode::NO_CONTENT.into_response()
}

/// MKCOL: `make_directory` (without parents; an existing name is 405).
pub async fn mkcol(cx: &Cx<'_>, request: Request) -> Response {
    let (id, view) = match cx.writable(request.headers()).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let has_body = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    if has_body {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, "MKCOL takes no body").into_response();
    }
    let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
    let (result, _) = cx
        .dav
        .call(&cx.caller, "make_directory", arguments, None)
        .await;
    if result.is_error {
        if result.failure == Failure::Exists {
            return (StatusCode::METHOD_NOT_ALLOWED, format!("{}\n", result.text)).into_response();
        }
        return status::failed(&result, Op::Create);
    }
    if result.structured["created"] == false {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "the collection already exists\n",
        )
            .into_response();
    }
    StatusCode::CREATED.into_response()
}

/// COPY and MOVE within one instance: `copy_path` / `move_path` once the source is found
/// (`stat_path`). An existing destination (`Overwrite` allowing) is given up only to a copy or
/// move the pipeline let through: a file is replaced by the tool itself (`overwrite`, one
/// call and one decision); a collection, or a destination of the other kind, which the tools do
/// not replace, is first moved aside, put back when the copy or move fails, and deleted once it
/// succeeded. A COPY of a collection with `Depth: 0` makes the collection alone
/// (`make_directory`).
pub async fn copy_or_move(cx: &Cx<'_>, headers: &HeaderMap, moving: bool) -> Response {
    let (id, view) = match cx.file(true) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    let destination = match destination(headers, id) {
        Ok(destination) => destination,
        Err(refused) => return refused.into_response(),
    };
    if destination.is_area() {
        return (
            StatusCode::FORBIDDEN,
            "the destination cannot be an area itself",
        )
            .into_response();
    }
    if view.contains(&destination) || destination.contains(view) {
        return (
            StatusCode::FORBIDDEN,
            "the destination is the source or inside it",
        )
            .into_response();
    }
    let overwrite = headers
        .get("Overwrite")
        .is_none_or(|v| v.as_bytes() != b"F");
    if let Err(unmet) = super::conditions::check(cx, view, headers).await {
        return unmet.into_response();
    }
    if let Err(unmet) = super::conditions::check_match(cx, view, headers).await {
        return unmet.into_response();
    }
    if moving && let Err(locked) = cx.dav.locks.check(cx, view, headers) {
        return locked.into_response();
    }
    if let Err(locked) = cx.dav.locks.check(cx, &destination, headers) {
        return locked.into_response();
    }
    let steps = match cx.dav.steps(&cx.caller).await {
        Ok(steps) => steps,
        Err(busy) => return status::failed(&busy, Op::Other),
    };
    let at = |path: String| json!({ "instance_id": id.as_str(), "path": path });
    let source = steps.call("stat_path", at(view.path())).await;
    if source.is_error {
        return status::failed(&source, Op::Read);
    }
    let stat = steps.call("stat_path", at(destination.path())).await;
    // Only a destination that is not there is absent: a stat refused or failed says nothing.
    let existed = match stat.failure {
        _ if !stat.is_error => true,
        Failure::NoPath => false,
        _ => return status::failed(&stat, Op::Other),
    };
    if existed && !overwrite {
        return (
            StatusCode::PRECONDITION_FAILED,
            "the destination exists and Overwrite is F\n",
        )
            .into_response();
    }
    let is_dir = |stat: &CallResult| stat.structured["kind"] == "directory";
    let members = match with_members(headers, moving) {
        Ok(members) => members,
        Err(refused) if is_dir(&source) => return refused.into_response(),
        Err(_) => true,
    };
    let plan = Plan {
        id: id.clone(),
        source: view.clone(),
        destination,
        moving,
        members,
        source_is_dir: is_dir(&source),
        replaces: existed.then_some(is_dir(&stat)),
    };
    // Once the destination is set aside, the request must end with it put back or deleted,
    // even if the client goes away: its own task finishes it.
    let done = tokio::spawn(plan.run(steps)).await;
    let Ok((response, succeeded)) = done else {
        let why = "the COPY or MOVE stopped unexpectedly; check the destination\n";
        return (StatusCode::INTERNAL_SERVER_ERROR, why).into_response();
    };
    if succeeded && moving {
        cx.dav.locks.forget_beneath(cx, view);
    }
    response
}

/// What a COPY or MOVE does once its checks passed.
struct Plan {
    id: InstanceId,
    source: SandboxView,
    destination: SandboxView,
    moving: bool,
    /// A collection's COPY takes its members (not `Depth: 0`).
    members: bool,
    source_is_dir: bool,
    /// The destination exists: whether it is a collection.
    replaces: Option<bool>,
}

impl Plan {
    /// Runs the calls: the answer, and whether the copy or move took place.
    async fn run(self, steps: Steps) -> (Response, bool) {
        let Plan {
            id,
            source,
            destination,
            ..
        } = &self;
        let aside = match self.replaces {
            Some(dir) if dir || self.source_is_dir => {
                match set_aside(&steps, id, destination).await {
                    Ok(aside) => Some(aside),
                    Err(refused) => return (refused, false),
                }
            }
            _ => None,
        };
        let (tool, arguments) = if !self.members && self.source_is_dir {
            let arguments = json!({ "instance_id": id.as_str(), "path": destination.path() });
            ("make_directory", arguments)
        } else {
            let tool = if self.moving {
                "move_path"
            } else {
                "copy_path"
            };
            let arguments = json!({
                "instance_id": id.as_str(),
                "source": source.path(),
                "destination": destination.path(),
                "overwrite": self.replaces.is_some() && aside.is_none(),
            });
            (tool, arguments)
        };
        let result = steps.call(tool, arguments).await;
        if result.is_error {
            // The source was just found: a path missing now is the destination's parent.
            let op = if result.failure == Failure::NoPath {
                Op::Create
            } else {
                Op::Other
            };
            if let Some(aside) = &aside
                && let Err(kept) = put_back(&steps, id, aside, destination).await
            {
                let why = format!(
                    "{}; what `{}` held could not be put back and is kept as `{}`: {}\n",
                    result.text,
                    destination.path(),
                    aside.path(),
                    kept.text
                );
                return (status::with_body(result.failure, op, why), false);
            }
            return (status::failed(&result, op), false);
        }
        if let Some(aside) = &aside {
            let arguments = json!({
                "instance_id": id.as_str(),
                "path": aside.path(),
                "recursive": true,
            });
            let deleted = steps.finish("delete_path", arguments).await;
            if deleted.is_error {
                let why = format!(
                    "`{}` was replaced, but what it held could not be deleted and is kept as `{}`: {}\n",
                    destination.path(),
                    aside.path(),
                    deleted.text
                );
                return (status::with_body(deleted.failure, Op::Other, why), true);
            }
        }
        let status = match self.replaces {
            Some(_) => StatusCode::NO_CONTENT,
            None => StatusCode::CREATED,
        };
        (status.into_response(), true)
    }
}

/// Whether a COPY or MOVE of a collection takes its members: COPY's `Depth` is `infinity` (the
/// default) or `0`, for the collection alone; MOVE's only `infinity` (RFC 4918 §9.8.3, §9.9.2).
/// A file's COPY or MOVE has no use for `Depth`, and ignores it.
fn with_members(headers: &HeaderMap, moving: bool) -> Result<bool, Refusal> {
    match headers.get("Depth").map(|v| v.as_bytes()) {
        None | Some(b"infinity") => Ok(true),
        Some(b"0") if !moving => Ok(false),
        Some(_) if moving => Err((
            StatusCode::BAD_REQUEST,
            "MOVE takes no Depth but infinity: leave the header out\n".to_owned(),
        )),
        Some(_) => Err((
            StatusCode::BAD_REQUEST,
            "COPY takes Depth: infinity (the default: the collection and its members) or 0 (the collection alone)\n".to_owned(),
        )),
    }
}

/// Moves the destination of an overwriting COPY or MOVE to a fresh hidden name beside it (a
/// `move_path` of its own, decided and recorded like any): the name it is kept under until the
/// copy or move succeeded.
async fn set_aside(
    steps: &Steps,
    id: &InstanceId,
    destination: &SandboxView,
) -> Result<SandboxView, Response> {
    let mut random = [0u8; 8];
    if getrandom::fill(&mut random).is_err() {
        let why = "no randomness for a temporary name; retry\n";
        return Err((StatusCode::SERVICE_UNAVAILABLE, why).into_response());
    }
    let mut aside = destination.clone();
    if let Some(last) = aside.segments.last_mut() {
        *last = format!(".hpcgate-replaced-{}", hex::encode(random));
    }
    let arguments = moving(id, destination, &aside);
    let moved = steps.call("move_path", arguments).await;
    if moved.is_error {
        return Err(status::failed(&moved, Op::Other));
    }
    Ok(aside)
}

/// Puts what [`set_aside`] moved back in place after the copy or move failed: the failed
/// call's result when it cannot.
async fn put_back(
    steps: &Steps,
    id: &InstanceId,
    from: &SandboxView,
    to: &SandboxView,
) -> Result<(), CallResult> {
    let moved = steps.finish("move_path", moving(id, from, to)).await;
    if moved.is_error {
        return Err(moved);
    }
    Ok(())
}

/// `move_path`'s arguments from `from` to the free name `to`.
fn moving(id: &InstanceId, from: &SandboxView, to: &SandboxView) -> Value {
    json!({
        "instance_id": id.as_str(),
        "source": from.path(),
        "destination": to.path(),
    })
}

/// A size in bytes given by header `name`.
fn size_in(headers: &HeaderMap, name: &str) -> Option<u64> {
    (headers.get(name))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

fn forwarded_host() -> header::HeaderName {
    header::HeaderName::from_static("x-forwarded-host")
}

/// The `Destination` header, which must name a path in the same instance (of the same
/// tenant: the tree is the caller's own) on this server.
fn destination(headers: &HeaderMap, id: &InstanceId) -> Result<SandboxView, Refusal> {
    let refuse = |status: StatusCode, why: &str| Err((status, format!("{why}\n")));
    let Some(raw) = headers.get("Destination").and_then(|v| v.to_str().ok()) else {
        return refuse(StatusCode::BAD_REQUEST, "a Destination header is required");
    };
    let path = match raw.split_once("://") {
        None if raw.starts_with('/') => raw,
        None => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "Destination must be an absolute URL or path",
            );
        }
        Some((scheme, rest)) => {
            if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
                return refuse(StatusCode::BAD_GATEWAY, "Destination names another server");
            }
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            // This server by the name the request came with, or by the one a reverse proxy
            // says the client used (it rewrites `Host` to reach the gateway on loopback, and
            // the client's Destination keeps the public name).
            let named = |name: header::HeaderName| {
                (headers.get_all(name).iter())
                    .filter_map(|v| v.to_str().ok())
                    .flat_map(|v| v.split(','))
                    .any(|h| h.trim().eq_ignore_ascii_case(authority))
            };
            let host_known = headers.contains_key(header::HOST);
            if host_known && !named(header::HOST) && !named(forwarded_host()) {
                return refuse(StatusCode::BAD_GATEWAY, "Destination names another server");
            }
            path
        }
    };
    let path = path.split(['?', '#']).next().unwrap_or_default();
    match Target::parse(path) {
        Ok(Target::File(dest_id, view)) if &dest_id == id => Ok(view),
        Ok(_) | Err(super::target::BadTarget::NotFound) => refuse(
            StatusCode::FORBIDDEN,
            "Destination must stay inside the same instance's workspace or output",
        ),
        Err(super::target::BadTarget::Refused(why)) => refuse(
            StatusCode::BAD_REQUEST,
            &format!("refused Destination: {why}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{Range, parse_range};

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Range::Bytes(0, 10));
        assert_eq!(parse_range("bytes=90-", 100), Range::Bytes(90, 10));
        assert_eq!(parse_range("bytes=-10", 100), Range::Bytes(90, 10));
        assert_eq!(parse_range("bytes=95-200", 100), Range::Bytes(95, 5));
        assert_eq!(parse_range("bytes=100-", 100), Range::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Range::Ignored);
        assert_eq!(parse_range("items=0-1", 100), Range::Ignored);
        assert_eq!(parse_range("bytes=5-1", 100), Range::Ignored);
    }
}
