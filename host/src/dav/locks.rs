//! LOCK and UNLOCK: a real, in-memory lock table (write locks, exclusive or shared, depth 0 or
//! infinity, with timeouts), so that Finder, Windows Explorer and davfs2, which lock before they
//! write, can write — and so that a write to a path another client locked is refused with 423
//! unless the request's `If` header holds the lock's token.
//!
//! Taking, refreshing and giving back a lock is audited (`dav.locked`, `dav.unlocked`: who
//! blocked whose writes, where and when), with a digest of the token, not the token; a lock
//! whose record cannot be written is not taken (503). One that times out is not recorded.
//!
//! Locks are per tenant and instance: a lock never covers, reveals or blocks another tenant's
//! paths. A lock belongs to the principal that took it (RFC 4918 §6.4): another principal of
//! the tenant sees it and is blocked by it, but its token does not work for them. A lock changes no file and runs no tool; LOCK first asks the pipeline for the
//! resource (`stat_path`, recorded), and a LOCK of an unmapped URL creates an empty file
//! through `write_file` (RFC 4918 §9.10.4), recorded like any write, once the lock is granted
//! (a refused LOCK creates nothing). A depth-infinity lock covers the members beneath its
//! collection that its holder may write, as the policies judge them when another request
//! meets it: a member the holder could not change itself stays free to those who may write it.
//! The table lives in the
//! gateway's memory: a restart releases every lock (clients then re-lock), and several gateways
//! sharing a state directory do not share locks. It is bounded per resource and per tenant (see
//! `LockTable::grant`), so one tenant's locks, or several tenants' together, cannot keep
//! another from locking; in all, by the configured tenants (well under 1 MB of locks each).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Refusal;
use super::methods::Cx;
use super::status::{self, Op};
use super::target::{SandboxView, Target};
use super::xml::{DAV, escape};
use crate::audit::{Entry, Event};
use crate::auth::Caller;
use crate::gateway::{Failure, Transfer, Upload};
use crate::policy::Via;

/// The longest lock, and the timeout of one asked for without a limit.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Most locks one tenant holds at once (more are refused with 503): the table's memory is
/// bounded by the tenants, and no tenant's locks count against another's (Finder, Windows and
/// davfs2 lock before they write). Each principal of the tenant holds at most a quarter.
const MAX_TENANT_LOCKS: usize = 1_000;
/// Most locks one principal holds at once, a quarter of its tenant's: one client (or one
/// token's runaway script) cannot keep the tenant's other users from locking.
const MAX_PRINCIPAL_LOCKS: usize = MAX_TENANT_LOCKS / 4;
/// Most shared locks on one resource: clients that share take one each, not hundreds.
const MAX_SHARED_LOCKS: usize = 16;
/// Most bytes of a LOCK's `owner` text kept (clients send a name, an email or a URL): each lock
/// is held in memory for up to an hour and shown in every PROPFIND of its resource.
const MAX_OWNER_BYTES: usize = 256;
/// The most locks one resource's `lockdiscovery` shows.
const MAX_DISCOVERED: usize = 16;

/// One held lock.
#[derive(Debug, Clone)]
struct Lock {
    tenant: String,
    /// Who took it: only this principal may use its token, refresh it or unlock it.
    principal: String,
    instance: String,
    path: SandboxView,
    href: String,
    token: String,
    /// The LOCK's `owner`, as text.
    owner: Option<String>,
    exclusive: bool,
    infinite: bool,
    timeout: Duration,
    expires: Instant,
}

impl Lock {
    /// The audit record of this lock as `event` (taken, refreshed, given back).
    fn record(&self, event: Event) -> Entry {
        use sha2::Digest as _;
        let digest = hex::encode(&sha2::Sha256::digest(self.token.as_bytes())[..8]);
        Entry::new(event)
            .who(&self.tenant, &self.principal)
            .instance(&self.instance)
            .detail("path", self.path.path())
            .detail("lock", digest)
            .detail(
                "scope",
                if self.exclusive {
                    "exclusive"
                } else {
                    "shared"
                },
            )
            .detail("depth", if self.infinite { "infinity" } else { "0" })
            .detail("timeout_s", self.timeout.as_secs())
    }

    /// Whether this lock bears on a change at `view` (of a tree, when `tree`).
    fn covers(&self, view: &SandboxView, tree: bool) -> bool {
        self.path == *view
            || (self.infinite && self.path.contains(view))
            || (tree && view.contains(&self.path))
    }

    /// Whether this lock covers `view` only by its depth: a member beneath its collection.
    fn inherited_by(&self, view: &SandboxView) -> bool {
        self.infinite && self.path != *view && self.path.contains(view)
    }

    /// Whether the policies would let this lock's holder write `view` now. A lock stops others'
    /// writes, so its depth reaches only what its holder may change: otherwise one principal
    /// could lock a folder and so keep another from the files in it that only the other may
    /// write.
    fn holder_may_write(&self, cx: &Cx<'_>, view: &SandboxView) -> bool {
        let holder = Caller {
            tenant: cx.caller.tenant.clone(),
            principal: self.principal.clone(),
        };
        let mut write = serde_json::Map::new();
        write.insert("instance_id".to_owned(), json!(self.instance));
        write.insert("path".to_owned(), json!(view.path()));
        (cx.dav.gateway).would_allow(&holder, Via::Dav, "write_file", write)
    }

    fn activelock(&self) -> String {
        let scope = if self.exclusive {
            "exclusive"
        } else {
            "shared"
        };
        let depth = if self.infinite { "infinity" } else { "0" };
        let owner = self
            .owner
            .as_deref()
            .map(|o| format!("<D:owner>{}</D:owner>", escape(o)))
            .unwrap_or_default();
        format!(
            "<D:activelock><D:locktype><D:write/></D:locktype><D:lockscope><D:{scope}/></D:lockscope><D:depth>{depth}</D:depth>{owner}<D:timeout>Second-{}</D:timeout><D:locktoken><D:href>{}</D:href></D:locktoken><D:lockroot><D:href>{}</D:href></D:lockroot></D:activelock>",
            self.timeout.as_secs(),
            escape(&self.token),
            escape(&self.href)
        )
    }
}

/// The locks held, by tenant.
#[derive(Debug, Default)]
pub struct LockTable {
    locks: Mutex<HashMap<String, Vec<Lock>>>,
}

impl LockTable {
    /// `f` on the live locks of `tenant`, after dropping expired ones.
    fn with<T>(&self, tenant: &str, f: impl FnOnce(&mut Vec<Lock>) -> T) -> T {
        let mut tables = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        let Some(locks) = tables.get_mut(tenant) else {
            let mut first = Vec::new();
            let result = f(&mut first);
            if !first.is_empty() {
                tables.insert(tenant.to_owned(), first);
            }
            return result;
        };
        let now = Instant::now();
        locks.retain(|l| l.expires > now);
        let result = f(locks);
        if locks.is_empty() {
            tables.remove(tenant);
        }
        result
    }

    /// Refuses (423) a change at `view` that a lock covers unless `If` holds its token and the
    /// caller took it.
    pub fn check(
        &self,
        cx: &Cx<'_>,
        view: &SandboxView,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        let Some(instance) = instance_of(cx) else {
            return Ok(());
        };
        let unheld = unheld_by(cx, headers);
        let covering: Vec<Lock> = self.with(cx.caller.tenant.as_ref(), |locks| {
            (locks.iter())
                .filter(|l| l.instance == instance && l.covers(view, true) && unheld(l))
                .cloned()
                .collect()
        });
        // The policies are asked outside the table's mutex, once per holder.
        let mut may_write = holders_may_write(cx, view);
        let blocked = (covering.iter()).any(|l| !l.inherited_by(view) || may_write(l));
        if blocked {
            let why = "the resource is locked; send its lock token in an If header\n";
            return Err((StatusCode::LOCKED, why.to_owned()));
        }
        Ok(())
    }

    /// Refuses (423) adding `view` to its collection or taking it out while a depth-0 lock
    /// holds that collection, unless `If` holds the lock's token and the caller took it: such
    /// a lock protects the collection's list of members, not their content (RFC 4918 §7.5).
    /// A depth-infinity lock on the collection covers `view` itself ([`LockTable::check`]).
    pub fn check_membership(
        &self,
        cx: &Cx<'_>,
        view: &SandboxView,
        headers: &HeaderMap,
    ) -> Result<(), Refusal> {
        let blocked = self.membership_locks(cx, view, unheld_by(cx, headers));
        if blocked {
            let why = "the collection is locked (its members are protected); send its lock token in an If header\n";
            return Err((StatusCode::LOCKED, why.to_owned()));
        }
        Ok(())
    }

    /// Whether a depth-0 lock holds `view`'s collection (so that creating `view` needs its
    /// token): a PUT asks whether its file exists only then.
    pub fn guards_membership(&self, cx: &Cx<'_>, view: &SandboxView) -> bool {
        self.membership_locks(cx, view, |_| true)
    }

    /// Whether a depth-0 lock on `view`'s collection meets `which`.
    fn membership_locks(
        &self,
        cx: &Cx<'_>,
        view: &SandboxView,
        which: impl Fn(&Lock) -> bool,
    ) -> bool {
        let (Some(instance), Some(parent)) = (instance_of(cx), view.parent()) else {
            return false;
        };
        self.with(cx.caller.tenant.as_ref(), |locks| {
            (locks.iter())
                .any(|l| l.instance == instance && !l.infinite && l.path == parent && which(l))
        })
    }

    /// Whether a lock the caller took, with `token`, covers `view` (an `If` condition).
    pub fn holds(&self, cx: &Cx<'_>, view: &SandboxView, token: &str) -> bool {
        let Some(instance) = instance_of(cx) else {
            return false;
        };
        self.with(cx.caller.tenant.as_ref(), |locks| {
            locks.iter().any(|l| {
                l.principal == cx.caller.principal
                    && l.instance == instance
                    && l.token == token
                    && l.covers(view, false)
            })
        })
    }

    /// The tokens of the depth-infinity locks above `view` whose holders may not write it, so
    /// that do not cover it ([`Lock::holder_may_write`]).
    fn not_reaching(&self, cx: &Cx<'_>, view: &SandboxView) -> Vec<String> {
        let Some(instance) = instance_of(cx) else {
            return Vec::new();
        };
        let above: Vec<Lock> = self.with(cx.caller.tenant.as_ref(), |locks| {
            (locks.iter())
                .filter(|l| l.instance == instance && l.inherited_by(view))
                .cloned()
                .collect()
        });
        let mut may_write = holders_may_write(cx, view);
        (above.into_iter())
            .filter(|l| !may_write(l))
            .map(|l| l.token)
            .collect()
    }

    /// Takes `new` unless a lock of its tenant conflicts (423) or the resource or the tenant
    /// holds the most locks allowed (503). The locks named in `not_reaching` do not cover
    /// `new`'s resource ([`LockTable::not_reaching`]).
    fn grant(&self, new: &Lock, not_reaching: &[String]) -> Result<(), Refusal> {
        let full = |why: String| Err((StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")));
        self.with(&new.tenant, |locks| {
            let conflict = locks.iter().any(|l| {
                l.instance == new.instance
                    && (l.exclusive || new.exclusive)
                    && ((l.covers(&new.path, false) && !not_reaching.contains(&l.token))
                        || (new.infinite && new.path.contains(&l.path)))
            });
            if conflict {
                let why = "a conflicting lock is held on this resource\n";
                return Err((StatusCode::LOCKED, why.to_owned()));
            }
            let here = (locks.iter())
                .filter(|l| l.instance == new.instance && l.path == new.path)
                .count();
            if here >= MAX_SHARED_LOCKS {
                return full(format!(
                    "this resource holds {MAX_SHARED_LOCKS} shared locks, the most allowed; unlock one or wait for one to expire"
                ));
            }
            let own = locks.iter().filter(|l| l.principal == new.principal).count();
            if own >= MAX_PRINCIPAL_LOCKS {
                return full(format!(
                    "`{}` holds {MAX_PRINCIPAL_LOCKS} locks, the most one principal may; unlock some or wait for them to expire",
                    new.principal
                ));
            }
            if locks.len() >= MAX_TENANT_LOCKS {
                return full(format!(
                    "tenant `{}` holds {MAX_TENANT_LOCKS} locks, the most allowed; unlock some or wait for them to expire",
                    new.tenant
                ));
            }
            locks.push(new.clone());
            Ok(())
        })
    }

    /// Drops the locks at or beneath `view` (after it was deleted or moved away).
    pub fn forget_beneath(&self, cx: &Cx<'_>, view: &SandboxView) {
        if let Some(instance) = instance_of(cx) {
            self.forget_beneath_in(cx.caller.tenant.as_ref(), instance, view);
        }
    }

    /// [`LockTable::forget_beneath`] in `tenant`'s `instance`.
    pub fn forget_beneath_in(&self, tenant: &str, instance: &str, view: &SandboxView) {
        self.with(tenant, |locks| {
            locks.retain(|l| !(l.instance == instance && view.contains(&l.path)))
        });
    }

    /// The `<D:activelock>` elements of the locks on `view`, for PROPFIND: at most
    /// [`MAX_DISCOVERED`], its own first. Shared depth-infinity locks stacked on every folder
    /// above it would otherwise repeat in every entry of a listing.
    pub fn discovery(&self, cx: &Cx<'_>, view: &SandboxView) -> String {
        let Some(instance) = instance_of(cx) else {
            return String::new();
        };
        self.with(cx.caller.tenant.as_ref(), |locks| {
            let mut covering: Vec<&Lock> = (locks.iter())
                .filter(|l| l.instance == instance && l.covers(view, false))
                .collect();
            covering.sort_by_key(|l| l.path != *view);
            covering
                .into_iter()
                .take(MAX_DISCOVERED)
                .map(Lock::activelock)
                .collect()
        })
    }
}

/// Whether a lock's holder may write `view` ([`Lock::holder_may_write`]), asked of the
/// policies once per holder: one principal may hold many locks above one resource.
fn holders_may_write<'a>(cx: &'a Cx<'_>, view: &'a SandboxView) -> impl FnMut(&Lock) -> bool {
    let mut asked: HashMap<String, bool> = HashMap::new();
    move |lock| {
        let principal = lock.principal.clone();
        *asked
            .entry(principal)
            .or_insert_with(|| lock.holder_may_write(cx, view))
    }
}

/// Every `<…>` of the `If` header, exactly (a token must match whole, not as a substring).
fn submitted_tokens(headers: &HeaderMap) -> Vec<String> {
    let raw = headers
        .get("If")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    raw.split('<')
        .skip(1)
        .filter_map(|rest| rest.split_once('>').map(|(token, _)| token.to_owned()))
        .collect()
}

/// Whether a lock stands in the way of this request: unless `If` holds its token and the
/// caller took it.
fn unheld_by<'a>(cx: &'a Cx<'_>, headers: &HeaderMap) -> impl Fn(&Lock) -> bool + 'a {
    let submitted = submitted_tokens(headers);
    move |l| !(submitted.contains(&l.token) && l.principal == cx.caller.principal)
}

fn instance_of<'a>(cx: &'a Cx<'_>) -> Option<&'a str> {
    match &cx.target {
        Target::File(id, _) => Some(id.as_str()),
        _ => None,
    }
}

/// LOCK: a new lock (with an XML body) or a refresh (without, naming the token in `If`).
pub async fn lock(cx: &Cx<'_>, request: Request) -> Response {
    let Target::File(id, view) = &cx.target else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "only files and directories inside an instance can be locked\n",
        )
            .into_response();
    };
    let headers = request.headers().clone();
    let (body, elements) = match super::props::body_xml(request.into_body()).await {
        Ok(parsed) => parsed,
        Err(refused) => return refused,
    };
    let timeout = timeout(&headers);
    let tenant = cx.caller.tenant.as_ref().to_owned();
    if elements.is_empty() {
        let submitted = submitted_tokens(&headers);
        let refreshed = cx.dav.locks.with(&tenant, |locks| {
            let found = locks.iter_mut().find(|l| {
                l.principal == cx.caller.principal
                    && l.instance == id.as_str()
                    && l.covers(view, false)
                    && submitted.contains(&l.token)
            })?;
            let before = (found.timeout, found.expires);
            found.timeout = timeout;
            found.expires = Instant::now() + timeout;
            let record = found.record(Event::DavLocked).detail("refreshed", true);
            Some((found.activelock(), record, found.token.clone(), before))
        });
        return match refreshed {
            Some((active, record, token, before)) => match recorded(cx, record).await {
                Ok(()) => answer(StatusCode::OK, &active, None),
                // Not in the log: the lock keeps the timeout it had.
                Err(refused) => {
                    cx.dav.locks.with(&tenant, |locks| {
                        if let Some(lock) = locks.iter_mut().find(|l| l.token == token) {
                            (lock.timeout, lock.expires) = before;
                        }
                    });
                    refused
                }
            },
            None => (
                StatusCode::PRECONDITION_FAILED,
                "no lock of yours to refresh here; send its token in an If header\n",
            )
                .into_response(),
        };
    }
    let exclusive = !elements.iter().any(|e| e.is(DAV, "shared"));
    // RFC 4918 9.10.3: a LOCK's depth is 0 or infinity (the default).
    let infinite = match headers.get("Depth").map(|d| d.as_bytes().trim_ascii()) {
        None => true,
        Some(b"0") => false,
        Some(d) if d.eq_ignore_ascii_case(b"infinity") => true,
        Some(_) => {
            let why = "a LOCK's `Depth` is `0` or `infinity`\n";
            return (StatusCode::BAD_REQUEST, why).into_response();
        }
    };
    if view.is_area() {
        // A lock of the whole area would stop every other writer of the tenant.
        return (
            StatusCode::FORBIDDEN,
            "an instance's workspace or output cannot be locked whole: lock the files or directories inside it\n",
        )
            .into_response();
    }
    let arguments = json!({ "instance_id": id.as_str(), "path": view.path() });
    let (stat, _) = cx
        .dav
        .call(&cx.caller, "stat_path", arguments.clone(), None)
        .await;
    let missing = stat.is_error;
    if missing && stat.failure != Failure::NoPath {
        return status::failed(&stat, Op::Read);
    }
    // A lock stops others' writes, so only who may write the path may take one.
    let write = arguments.as_object().cloned().unwrap_or_default();
    if !(cx.dav.gateway).would_allow(&cx.caller, Via::Dav, "write_file", write) {
        return (
            StatusCode::FORBIDDEN,
            "the policies would not let you write here, so you cannot lock it\n",
        )
            .into_response();
    }
    let is_dir = stat.structured["kind"] == "directory";
    let mut token_bytes = [0u8; 16];
    if getrandom::fill(&mut token_bytes).is_err() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no randomness for a lock token; retry\n",
        )
            .into_response();
    }
    let hex = hex::encode(token_bytes);
    let token = format!(
        "opaquelocktoken:{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let new = Lock {
        tenant,
        principal: cx.caller.principal.clone(),
        instance: id.as_str().to_owned(),
        path: view.clone(),
        href: cx.target.href(is_dir),
        token: token.clone(),
        owner: super::xml::inner_text(&body, "owner").map(clipped),
        exclusive,
        infinite,
        timeout,
        expires: Instant::now() + timeout,
    };
    // The lock is taken before an unmapped URL's empty file is made (RFC 4918 §9.10.4), so a
    // LOCK that conflicts or meets a cap creates nothing; it is given back when the file
    // cannot be made. Making it adds a member to its collection.
    if missing && let Err(locked) = cx.dav.locks.check_membership(cx, view, &headers) {
        return locked.into_response();
    }
    let not_reaching = cx.dav.locks.not_reaching(cx, view);
    if let Err(refused) = cx.dav.locks.grant(&new, &not_reaching) {
        return refused.into_response();
    }
    if missing {
        let empty = Upload {
            source: Box::new(std::io::empty()),
            max_bytes: 0,
            announced: Some(0),
            // A file made since the lock found the path missing stays as it is.
            create_only: true,
        };
        let (made, _) = cx
            .dav
            .call(
                &cx.caller,
                "write_file",
                arguments,
                Some(Transfer::upload(empty)),
            )
            .await;
        if made.is_error {
            cx.dav
                .locks
                .with(&new.tenant, |locks| locks.retain(|l| l.token != new.token));
            return status::failed(&made, Op::Create);
        }
    }
    if let Err(refused) = recorded(cx, new.record(Event::DavLocked)).await {
        cx.dav
            .locks
            .with(&new.tenant, |locks| locks.retain(|l| l.token != new.token));
        return refused;
    }
    let status = if missing {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    answer(status, &new.activelock(), Some(&token))
}

/// Makes `record` durable; a 503 to answer if it cannot be.
async fn recorded(cx: &Cx<'_>, record: Entry) -> Result<(), Response> {
    match cx.dav.gateway.audit().submit(vec![record]).await {
        Ok(_) => Ok(()),
        Err(e) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the lock could not be recorded in the audit log ({e}); retry\n"),
        )
            .into_response()),
    }
}

/// `owner` cut to [`MAX_OWNER_BYTES`] (at a character boundary).
fn clipped(mut owner: String) -> String {
    let mut end = MAX_OWNER_BYTES.min(owner.len());
    while !owner.is_char_boundary(end) {
        end -= 1;
    }
    owner.truncate(end);
    owner
}

/// `Timeout: Second-N` (capped), `Infinite` or absent → the cap.
fn timeout(headers: &HeaderMap) -> Duration {
    let asked = headers
        .get("Timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',')
                .find_map(|t| t.trim().strip_prefix("Second-")?.parse::<u64>().ok())
        });
    asked.map_or(MAX_TIMEOUT, |s| {
        Duration::from_secs(s.max(1)).min(MAX_TIMEOUT)
    })
}

fn answer(status: StatusCode, active: &str, token: Option<&str>) -> Response {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:prop xmlns:D=\"DAV:\"><D:lockdiscovery>{active}</D:lockdiscovery></D:prop>\n"
    );
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/xml; charset=utf-8")],
        body,
    )
        .into_response();
    if let Some(token) = token
        && let Ok(value) = HeaderValue::from_str(&format!("<{token}>"))
    {
        response.headers_mut().insert("Lock-Token", value);
    }
    response
}

/// UNLOCK: removes the lock named by `Lock-Token` if the caller took it and it covers the path.
pub async fn unlock(cx: &Cx<'_>, headers: &HeaderMap) -> Response {
    let Target::File(id, view) = &cx.target else {
        return (StatusCode::CONFLICT, "nothing is locked here\n").into_response();
    };
    let Some(token) = headers
        .get("Lock-Token")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        })
    else {
        return (StatusCode::BAD_REQUEST, "a Lock-Token header is required\n").into_response();
    };
    let tenant = cx.caller.tenant.as_ref();
    let found = cx.dav.locks.with(tenant, |locks| {
        let at = locks
            .iter()
            .position(|l| l.instance == id.as_str() && l.token == token && l.covers(view, false))?;
        Some((locks[at].principal == cx.caller.principal).then(|| locks.remove(at)))
    });
    match found {
        // Given back, then recorded (a client that leaves meanwhile does not stop the record);
        // a lock whose giving back cannot be recorded is put back.
        Some(Some(lock)) => match recorded(cx, lock.record(Event::DavUnlocked)).await {
            Ok(()) => StatusCode::NO_CONTENT.into_response(),
            Err(refused) => {
                cx.dav.locks.with(tenant, |locks| locks.push(lock));
                refused
            }
        },
        Some(None) => (
            StatusCode::FORBIDDEN,
            "the lock was taken by another principal; only its owner may unlock it\n",
        )
            .into_response(),
        None => (StatusCode::CONFLICT, "no such lock on this resource\n").into_response(),
    }
}

#[cfg(test)]
mod tests;
