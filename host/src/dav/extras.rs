//! `[dav.extras.<name>]`: a host directory served read-only at `/dav/<name>/` to the tenants
//! its `tenants` globs name (others get 404, as for a name that does not exist).
//!
//! An extra is not an instance, so no tool serves it and its reads are not calls of the
//! pipeline; they go through the same cap-std executor all the same: the directory is opened as
//! a capability per request (the one ambient step, from the admin's configuration) and every
//! path is resolved beneath it, so `..`, absolute paths and links that leave it are refused by
//! the kernel (links inside it are followed: no path rule judges an extra's paths), FIFOs and
//! devices are never opened, and hard-linked files are refused as in an instance.
//! Only GET, HEAD, PROPFIND and OPTIONS are served; every method that would change something is
//! 403. (Writable extras are refused by the configuration until their writes can be calls.)

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use hpcgate_executors::files::{self as exec, FileLimits, InstanceRoots, ListRequest, StatRequest};

use super::methods::Cx;
use super::props::Resource;
use super::status::{self, Op};
use super::target::Target;
use crate::config::DavExtra;
use crate::gateway::Failure;

/// Serves one request to an extra.
pub async fn handle(cx: &Cx<'_>, request: Request) -> Response {
    let Some((extra, _, _)) = visible(cx) else {
        return (StatusCode::NOT_FOUND, "no such WebDAV path\n").into_response();
    };
    let method = request.method().clone();
    if method == Method::OPTIONS {
        return super::options();
    }
    if method == Method::GET || method == Method::HEAD {
        let path = sandbox_path(cx);
        let limits = cx.dav.gateway.snapshot().file_limits();
        let opened = cx
            .dav
            .blocking(&cx.caller, move || {
                exec::open_file(&roots(&extra), &limits, &path)
            })
            .await;
        return match opened {
            Some(Ok(opened)) => {
                let window = super::methods::Window::whole(&opened);
                let head_only = method == Method::HEAD;
                super::methods::send(opened, request.headers(), head_only, window).await
            }
            Some(Err(e)) => status::with_body(Failure::from(&e), Op::Read, format!("{e}\n")),
            None => (StatusCode::SERVICE_UNAVAILABLE, "retry\n").into_response(),
        };
    }
    if method.as_str() == "PROPFIND" {
        return super::props::propfind(cx, request).await;
    }
    (
        StatusCode::FORBIDDEN,
        "this directory is served read-only ([dav.extras]); only GET, HEAD, PROPFIND and OPTIONS are allowed\n",
    )
        .into_response()
}

/// The extra the request names, if the caller's tenant sees it, with its name and segments.
fn visible<'a>(cx: &'a Cx<'_>) -> Option<(DavExtra, &'a str, &'a [String])> {
    let Target::Extra(name, segments) = &cx.target else {
        return None;
    };
    let live = cx.dav.gateway.snapshot();
    let extra = live.dav().extras.get(name)?;
    extra
        .visible_to(&cx.caller.tenant)
        .then(|| (extra.clone(), name.as_str(), segments.as_slice()))
}

/// The extra's names visible to the caller, for a PROPFIND of `/dav/`.
pub fn names(cx: &Cx<'_>) -> Vec<String> {
    let live = cx.dav.gateway.snapshot();
    let extras = &live.dav().extras;
    extras
        .iter()
        .filter(|(_, e)| e.visible_to(&cx.caller.tenant))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The extra as the executor's roots (both views are the extra's directory; only `/workspace`
/// is used).
fn roots(extra: &DavExtra) -> InstanceRoots {
    // An admin's read-only tree, judged by no path rule: its inner links (`latest -> v38`)
    // are followed; one that leaves it is refused by the kernel.
    InstanceRoots::ambient(&extra.path, &extra.path).following_links()
}

/// The request's path inside the extra, in the executor's view (`/workspace/…`).
fn sandbox_path(cx: &Cx<'_>) -> String {
    let mut path = "/workspace".to_owned();
    if let Target::Extra(_, segments) = &cx.target {
        for segment in segments {
            path.push('/');
            path.push_str(segment);
        }
    }
    path
}

/// The resources a PROPFIND of `depth` reports in an extra.
pub async fn resources(cx: &Cx<'_>, depth: u8) -> Result<Vec<Resource>, Response> {
    let Some((extra, name, segments)) = visible(cx) else {
        return Err((StatusCode::NOT_FOUND, "no such WebDAV path\n").into_response());
    };
    let path = sandbox_path(cx);
    let limits: FileLimits = cx.dav.gateway.snapshot().file_limits();
    let found = cx
        .dav
        .blocking(&cx.caller, move || {
            let roots = roots(&extra);
            let stat = exec::stat_path(&roots, &StatRequest { path: path.clone() })?;
            let listed = if depth == 1 && stat.facts.kind == exec::EntryKind::Directory {
                let request = ListRequest {
                    path,
                    recursive: false,
                    max_entries: None,
                };
                Some(exec::list_directory(&roots, &limits, &request)?)
            } else {
                None
            };
            Ok::<_, exec::FileError>((stat, listed))
        })
        .await;
    let (stat, listed) = match found {
        Some(Ok(found)) => found,
        Some(Err(e)) => {
            return Err(status::with_body(
                Failure::from(&e),
                Op::Read,
                format!("{e}\n"),
            ));
        }
        None => return Err((StatusCode::SERVICE_UNAVAILABLE, "retry\n").into_response()),
    };
    let resource = |segments: Vec<String>, facts: &exec::EntryFacts| {
        let collection = facts.kind == exec::EntryKind::Directory;
        Resource {
            href: Target::Extra(name.to_owned(), segments).href(collection),
            collection,
            size: facts.size,
            modified_unix: facts.modified_unix,
            modified_nsec: facts.modified_nsec,
            locks: String::new(),
            truncated: false,
        }
    };
    let served =
        |kind: exec::EntryKind| matches!(kind, exec::EntryKind::File | exec::EntryKind::Directory);
    if !served(stat.facts.kind) {
        return Err((
            StatusCode::FORBIDDEN,
            "a symbolic link or special file, which WebDAV does not serve\n",
        )
            .into_response());
    }
    let mut out = vec![resource(segments.to_vec(), &stat.facts)];
    if listed.as_ref().is_some_and(|l| l.truncated) {
        let mut cut = resource(segments.to_vec(), &stat.facts);
        cut.truncated = true;
        out.push(cut);
    }
    for entry in listed.iter().flat_map(|l| &l.entries) {
        if entry.escaped || !served(entry.facts.kind) {
            continue;
        }
        let mut child = segments.to_vec();
        child.push(entry.name.clone());
        out.push(resource(child, &entry.facts));
    }
    Ok(out)
}
