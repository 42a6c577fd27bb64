//! The methods that read or change one file or collection: GET/HEAD, PUT, DELETE and MKCOL,
//! each one tool call through the pipeline (COPY and MOVE are in [`super::copy_move`]).

use std::io;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt as _;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
use tokio_util::io::{ReaderStream, StreamReader, SyncIoBridge};

use super::status::{self, Op};
use super::target::{SandboxView, Target};
use super::{Dav, Refusal};
use crate::auth::Caller;
use crate::gateway::{Failure, Transfer, Upload};
use crate::min_rate::MinRate;
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
    pub(super) fn file(&self, inside: bool) -> Result<(&InstanceId, &SandboxView), Refusal> {
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
    // The bytes the call may read: the whole file, unless a policy narrowed its `offset` or
    // `length` (what the tool reports, and the audit records).
    let allowed = |key| {
        result
            .structured
            .get(key)
            .and_then(serde_json::Value::as_u64)
    };
    let window = Window {
        start: allowed("offset").unwrap_or(0),
        len: allowed("bytes").unwrap_or(opened.size),
    };
    send(opened, headers, head_only, window).await
}

/// The part of a file a GET may send: `len` bytes from `start`.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start: u64,
    pub len: u64,
}

impl Window {
    pub fn whole(opened: &OpenedFile) -> Window {
        Window {
            start: 0,
            len: opened.size,
        }
    }

    /// Whether `len` bytes from `start` lie inside.
    fn holds(self, start: u64, len: u64) -> bool {
        start >= self.start && start.saturating_add(len) <= self.start.saturating_add(self.len)
    }
}

/// Bytes read from a file per chunk of a GET body (tokio's file reads hop to the blocking pool
/// once per chunk: 4 KiB chunks made a GET six times slower than a PUT).
const CHUNK: usize = 256 * 1024;

/// Sends an opened file: `If-Match`, `If-None-Match`, one `Range` (honoured only while
/// `If-Range` names this version), `ETag`, `Last-Modified`; the bytes stream from the
/// descriptor. What is asked must lie in `window` (403 otherwise, naming it): a part of a file
/// is never sent as if it were the whole.
pub async fn send(
    opened: OpenedFile,
    headers: &HeaderMap,
    head_only: bool,
    window: Window,
) -> Response {
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
    if !window.holds(start, len) {
        let allowed = match window.len {
            0 => "no byte".to_owned(),
            n => format!("bytes {}-{}", window.start, window.start + n - 1),
        };
        let why = format!(
            "the policies let this request read {allowed} of this file ({size} bytes): ask for them with a Range header, or ask the admin\n"
        );
        return (StatusCode::FORBIDDEN, why).into_response();
    }
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
    // A new file adds a member to its collection: asked only under a depth-0 lock there.
    if cx.dav.locks.guards_membership(cx, view) {
        let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
        let (stat, _) = cx.dav.call(&cx.caller, "stat_path", arguments, None).await;
        match stat.failure {
            _ if !stat.is_error => {}
            Failure::NoPath => {
                if let Err(locked) = cx.dav.locks.check_membership(cx, view, request.headers()) {
                    return locked.into_response();
                }
            }
            // Whether the PUT adds a member is not known: it is not made.
            _ => return status::failed(&stat, Op::Other),
        }
    }
    // Finder sends its uploads chunked, with the size in `X-Expected-Entity-Length`: without
    // one, the upload would hold all the room left under the quota while it arrives. Either
    // way the body is cut at the size announced.
    let announced = size_in(request.headers(), header::CONTENT_LENGTH.as_str())
        .or_else(|| size_in(request.headers(), "x-expected-entity-length"));
    // `If-None-Match: *` held when checked; the file must still be new when it is put in place
    // (another PUT may have made it meanwhile): 412 then, as if it had been there.
    let create_only = (request.headers().get(header::IF_NONE_MATCH))
        .is_some_and(|v| v.as_bytes().trim_ascii() == b"*");
    let stream = request
        .into_body()
        .into_data_stream()
        .map_err(io::Error::other);
    let source = SyncIoBridge::new(StreamReader::new(MinRate::new(stream)));
    let upload = Upload {
        source: Box::new(source),
        max_bytes: cx.dav.gateway.snapshot().dav().max_upload_bytes,
        announced,
        create_only,
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

/// DELETE: `delete_path` (RFC 4918 §9.6.1: a collection goes with its members). Asked first
/// without `recursive`, which deletes a file or an empty collection; only a collection with
/// members is asked again with it, so a policy sees a recursive delete only where there is
/// one (and may refuse those alone).
pub async fn delete(cx: &Cx<'_>, headers: &HeaderMap) -> Response {
    let (id, view) = match cx.writable(headers).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    if let Err(locked) = cx.dav.locks.check_membership(cx, view, headers) {
        return locked.into_response();
    }
    let arguments = |recursive: bool| json!({ "instance_id": id.as_str(), "path": view.path(), "recursive": recursive });
    let dav = &cx.dav;
    let (mut result, _) = (dav.call(&cx.caller, "delete_path", arguments(false), None)).await;
    if result.is_error && result.failure == Failure::NotEmpty {
        (result, _) = (dav.call(&cx.caller, "delete_path", arguments(true), None)).await;
    }
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
    if let Err(locked) = cx.dav.locks.check_membership(cx, view, request.headers()) {
        return locked.into_response();
    }
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

/// A size in bytes given by header `name`.
fn size_in(headers: &HeaderMap, name: &str) -> Option<u64> {
    (headers.get(name))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
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
