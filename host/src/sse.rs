//! The legacy HTTP+SSE transport (MCP 2024-11-05), for clients the reference system served that
//! way (`hpcgate run --transport sse`): `GET /sse` opens a session's event stream, whose first
//! event (`endpoint`) names `/messages?session=<id>`; the client POSTs each JSON-RPC message
//! there (202), and every answer comes back as a `message` event on the stream.
//!
//! Both routes sit behind the same authentication as streamable HTTP ([`crate::http`]: `Origin`
//! allow-list, bearer token / JWT, Unix peer), and over TCP the app checks the `Host` header against the
//! same names (DNS rebinding). A session is bound to the caller that opened it: its id is 128
//! random bits, and a POST by any other caller gets the same 404 as an unknown id, so an id
//! seen in a log gives nobody else a way in. The session's [`McpServer`] has that caller fixed;
//! it ends, and its id is forgotten, when the stream is closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{SinkExt as _, Stream, StreamExt as _};
use rmcp::ServiceExt as _;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, RequestId, ServerJsonRpcMessage};
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

use crate::auth::Caller;
use crate::gateway::Gateway;
use crate::mcp::McpServer;

/// Where the event stream is opened.
pub const SSE_PATH: &str = "/sse";
/// Where a session's messages are posted.
pub const MESSAGES_PATH: &str = "/messages";

/// Messages queued per session in each direction before the sender waits.
const QUEUE: usize = 64;
/// Requests one session may have unanswered at once ([`Unanswered`]).
const UNANSWERED: usize = 16;
/// Largest message body accepted (the same bound as the job doors').
const MAX_BODY: usize = 32 * 1024 * 1024;
/// Sessions one tenant may have open at once: each holds a server, two queues and a stream,
/// so without a bound one tenant could grow the gateway's memory at will.
pub const MAX_SESSIONS_PER_TENANT: usize = 64;

/// The open sessions, by id.
#[derive(Default)]
struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

struct Session {
    owner: Caller,
    to_server: mpsc::Sender<ClientJsonRpcMessage>,
    /// The session's requests not yet answered on its stream (nor cancelled).
    unanswered: Arc<Unanswered>,
}

/// The ids of a session's requests whose answers have not reached its stream: at most
/// [`UNANSWERED`]. Each answer is built as soon as its call ends and waits in memory until the
/// client reads it, so this bounds what a session that stops reading holds (an answer can be
/// megabytes: a file read, a proxied result). A request past the bound gets 429; one whose id
/// is still unanswered, 400 (or answers could not be told apart).
#[derive(Default)]
struct Unanswered(Mutex<std::collections::HashSet<RequestId>>);

impl Unanswered {
    fn ids(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<RequestId>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets `message`'s request once its answer is on the stream.
    fn answered(&self, message: &ServerJsonRpcMessage) {
        let id = match message {
            ServerJsonRpcMessage::Response(response) => Some(&response.id),
            ServerJsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = id {
            self.ids().remove(id);
        }
    }
}

#[derive(Clone)]
struct Shared {
    /// Every session's server is this one with the session's caller: they share its places
    /// for calls in flight, so opening more sessions gives a caller no more of them.
    server: McpServer,
    sessions: Arc<Sessions>,
}

/// `GET /sse` and `POST /messages`, expecting [`crate::http`]'s authentication in front (a
/// [`Caller`] in each request's extensions).
pub(crate) fn routes(gateway: Arc<Gateway>) -> Router {
    let shared = Shared {
        server: McpServer::per_request(gateway),
        sessions: Arc::default(),
    };
    Router::new()
        .route(SSE_PATH, get(open))
        .route(MESSAGES_PATH, post(message))
        .with_state(shared)
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, format!("{message}\n")).into_response()
}

/// Opens a session: its server runs until the client closes the stream.
async fn open(State(shared): State<Shared>, request: Request) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the transport did not identify the caller",
        );
    };
    let id = match session_id() {
        Ok(id) => id,
        Err(_) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "no randomness for a session id; retry",
            );
        }
    };
    let (to_server, from_client) = mpsc::channel::<ClientJsonRpcMessage>(QUEUE);
    let (to_client, from_server) = mpsc::channel::<ServerJsonRpcMessage>(QUEUE);
    let unanswered;
    {
        let mut sessions = lock(&shared.sessions);
        let open = (sessions.values())
            .filter(|session| session.owner.tenant == caller.tenant)
            .count();
        if open >= MAX_SESSIONS_PER_TENANT {
            let why = format!(
                "tenant `{}` has {open} SSE sessions open, the most one tenant may: close one \
                 (or use the streamable HTTP transport, which keeps no session)",
                caller.tenant
            );
            return refuse(StatusCode::TOO_MANY_REQUESTS, &why);
        }
        let session = Session {
            owner: caller.clone(),
            to_server,
            unanswered: Arc::default(),
        };
        unanswered = session.unanswered.clone();
        sessions.insert(id.clone(), session);
    }
    let server = shared.server.in_session(caller);
    let sink =
        PollSender::new(to_client).sink_map_err(|_| std::io::Error::other("the stream closed"));
    let mut from_client = from_client;
    let incoming = futures_util::stream::poll_fn(move |cx| from_client.poll_recv(cx));
    let sessions = shared.sessions.clone();
    let ended = id.clone();
    tokio::spawn(async move {
        if let Ok(running) = server.serve((sink, incoming)).await {
            let _ = running.waiting().await;
        }
        lock(&sessions).remove(&ended);
    });
    let forget = Forget {
        sessions: shared.sessions.clone(),
        id: id.clone(),
    };
    let endpoint = Event::default()
        .event("endpoint")
        .data(format!("{MESSAGES_PATH}?session={id}"));
    let messages = events(from_server, forget, unanswered);
    Sse::new(futures_util::stream::once(async move { Ok(endpoint) }).chain(messages))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The server's messages as `message` events; dropping the stream (the client went away)
/// forgets the session, which ends its server.
fn events(
    mut from_server: mpsc::Receiver<ServerJsonRpcMessage>,
    forget: Forget,
    unanswered: Arc<Unanswered>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::poll_fn(move |cx| {
        let _keep = &forget;
        from_server.poll_recv(cx)
    })
    .filter_map(move |message| {
        unanswered.answered(&message);
        async move {
            let json = serde_json::to_string(&message).ok()?;
            Some(Ok(Event::default().event("message").data(json)))
        }
    })
}

/// Removes a session when its stream is dropped: the session's sender goes with it, so its
/// server sees the end of its input and stops.
struct Forget {
    sessions: Arc<Sessions>,
    id: String,
}

impl Drop for Forget {
    fn drop(&mut self) {
        lock(&self.sessions).remove(&self.id);
    }
}

/// `session=<id>` of the query (`session_id=` too: the Python SDK's own server names it so,
/// for clients that build the URL themselves). Ids are hex: nothing to percent-decode.
fn session_of(request: &Request) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "session" || key == "session_id").then(|| value.to_owned())
    })
}

/// One client message into its session.
async fn message(State(shared): State<Shared>, request: Request) -> Response {
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the transport did not identify the caller",
        );
    };
    let unknown = || {
        refuse(
            StatusCode::NOT_FOUND,
            "no such session: open one with `GET /sse` and post to the endpoint it names",
        )
    };
    let Some(id) = session_of(&request) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "`session` is missing: post to the endpoint `GET /sse` named",
        );
    };
    let (to_server, unanswered) = {
        let sessions = lock(&shared.sessions);
        match sessions.get(&id) {
            Some(session)
                if session.owner.tenant == caller.tenant
                    && session.owner.principal == caller.principal =>
            {
                (session.to_server.clone(), session.unanswered.clone())
            }
            _ => return unknown(),
        }
    };
    // At the door's minimum rate: a body promised and never sent would hold its connection.
    let body = match crate::min_rate::read_whole(request.into_body(), MAX_BODY).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    if let Err(why) = crate::bounded_json::check_values(&body, crate::bounded_json::MAX_VALUES) {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, &why);
    }
    let message: ClientJsonRpcMessage = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!("not a JSON-RPC message: {e}"),
            );
        }
    };
    // A request makes an answer; notifications and replies do not, and may always come. A
    // cancelled request may get no answer: its id is forgotten.
    match &message {
        ClientJsonRpcMessage::Request(request) => {
            let mut ids = unanswered.ids();
            if ids.contains(&request.id) {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "a request of this session with this id is still unanswered: give each \
                     request an id of its own",
                );
            }
            if ids.len() >= UNANSWERED {
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(axum::http::header::RETRY_AFTER, "1")],
                    format!(
                        "this session has {UNANSWERED} requests unanswered: read its event \
                         stream before sending more\n"
                    ),
                )
                    .into_response();
            }
            ids.insert(request.id.clone());
        }
        ClientJsonRpcMessage::Notification(notification) => {
            if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                && let Some(id) = &cancelled.params.request_id
            {
                unanswered.ids().remove(id);
            }
        }
        _ => {}
    }
    match to_server.send(message).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(_) => unknown(),
    }
}

/// 128 random bits, hex.
fn session_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

fn lock(sessions: &Sessions) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
    sessions.map.lock().unwrap_or_else(|e| e.into_inner())
}
