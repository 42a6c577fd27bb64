//! COPY and MOVE within one instance: `stat_path` finds the source and the destination, then
//! one `copy_path` or `move_path` (or `make_directory` for a collection's `Depth: 0` COPY). One
//! that replaces a collection also moves it aside first and deletes it after, each call
//! decided and recorded on its own, all of them finished even if the client goes away.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::methods::Cx;
use super::status::{self, Op};
use super::target::{SandboxView, Target};
use super::{Refusal, Steps};
use crate::gateway::{CallResult, Failure};
use crate::state::InstanceId;

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
    // RFC 4918: `T` or `F` (case-insensitive, as every header token), `T` when absent; a
    // value it does not define is refused rather than read as "replace".
    let overwrite = match headers.get("Overwrite").map(|v| v.as_bytes().trim_ascii()) {
        None => true,
        Some(b"T" | b"t") => true,
        Some(b"F" | b"f") => false,
        Some(_) => {
            let why = "`Overwrite` is `T` or `F`";
            return (StatusCode::BAD_REQUEST, why).into_response();
        }
    };
    if let Err(unmet) = super::conditions::check(cx, view, headers).await {
        return unmet.into_response();
    }
    if let Err(unmet) = super::conditions::check_match(cx, view, headers).await {
        return unmet.into_response();
    }
    if moving && let Err(locked) = cx.dav.locks.check(cx, view, headers) {
        return locked.into_response();
    }
    if moving && let Err(locked) = cx.dav.locks.check_membership(cx, view, headers) {
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
    if !existed && let Err(locked) = cx.dav.locks.check_membership(cx, &destination, headers) {
        return locked.into_response();
    }
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
    // even if the client goes away or the gateway is told to stop: the gateway finishes it.
    let done = cx.dav.gateway.finish(plan.run(steps)).await;
    done.unwrap_or_else(|_| {
        let why = "the COPY or MOVE stopped unexpectedly; check the destination\n";
        (StatusCode::INTERNAL_SERVER_ERROR, why).into_response()
    })
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
    /// Runs the calls; the answer.
    async fn run(self, steps: Steps) -> Response {
        let (response, moved) = self.calls(&steps).await;
        if moved && self.moving {
            steps.forget_locks_beneath(&self.id, &self.source);
        }
        response
    }

    /// The calls: the answer, and whether the copy or move took place.
    async fn calls(&self, steps: &Steps) -> (Response, bool) {
        let Plan {
            id,
            source,
            destination,
            ..
        } = &self;
        let aside = match self.replaces {
            Some(dir) if dir || self.source_is_dir => {
                // The request ends by deleting what it sets aside: refused now if that would
                // be, rather than replacing and then failing to delete.
                let delete = json!({
                    "instance_id": id.as_str(),
                    "path": destination.path(),
                    "recursive": true,
                });
                if !steps.would_allow("delete_path", delete) {
                    let why = format!(
                        "the policies would not let `{}` be deleted, which replacing it does\n",
                        destination.path()
                    );
                    return ((StatusCode::FORBIDDEN, why).into_response(), false);
                }
                match set_aside(steps, id, destination).await {
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
        // It ran, but is not recorded: what it did stands, and nothing is put back over it.
        if result.failure == Failure::Unrecorded {
            return (status::failed(&result, Op::Other), false);
        }
        if result.is_error {
            // The source was just found: a path missing now is the destination's parent.
            let op = if result.failure == Failure::NoPath {
                Op::Create
            } else {
                Op::Other
            };
            if let Some(aside) = &aside
                && let Err(kept) = put_back(steps, id, aside, destination).await
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
