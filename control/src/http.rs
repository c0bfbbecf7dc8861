//! The admin API over HTTP/JSON: routes mapped onto [`AdminRequest`]s sent
//! to the mirror coordinator as [`AdminCall`]s, its answers and errors mapped
//! onto status codes and JSON bodies, and `/metrics` in Prometheus' text
//! format.
//!
//! The server is axum on a tokio *current-thread* runtime in its own OS
//! thread. DESIGN.md names tokio-uring for the control plane; admin traffic
//! is a few requests a minute, so plain tokio (epoll) is enough here and
//! keeps io_uring out of this path.
//!
//! | route | request | success |
//! | --- | --- | --- |
//! | `POST /mirrors` (body: a [`MirrorConfig`]) | CreateMirror | 201 |
//! | `GET /mirrors` | ListMirrors | 200 |
//! | `GET /mirrors/{name}` | DescribeMirror | 200 |
//! | `DELETE /mirrors/{name}` | DeleteMirror | 200 |
//! | `POST /mirrors/{name}/topics` (body: [`TopicsBody`]) | AddTopics | 202 |
//! | `DELETE /mirrors/{name}/topics` (body: [`TopicsBody`]) | RemoveTopics | 202 |
//! | `POST /mirrors/{name}/pause`, `resume`, `stop`, `restart` (optional [`TopicsBody`]; none or empty: all topics) | Pause, Resume, Stop, Restart | 202 |
//! | `GET /status` | Status | 200 |
//! | `GET /metrics` | Metrics, rendered by [`crate::metrics::render`] | 200, `text/plain; version=0.0.4` |
//! | `GET /health` | — | 200 `ok` |
//!
//! Successful JSON bodies are the coordinator's [`AdminAnswer`] as it
//! serializes (tagged with `"answer"`). Every error is an [`ErrorBody`]
//! `{"error": kind, "message": text}`: the coordinator's [`AdminError`]s
//! with [`AdminError::http_status`]; a body that is not valid JSON of the
//! route's shape is 400 `invalid`; a coordinator that is gone (or does not
//! answer within [`REPLY_TIMEOUT`]) is 503 `unavailable`; an unknown route
//! is 404 `not_found`, a known route with another method 405
//! `method_not_allowed`.
//!
//! **Authentication.** Started with an [`AdminToken`], every request but
//! `GET /health` (liveness probes) must carry `Authorization: Bearer
//! <token>`; any other request is answered 401 `unauthorized` with
//! `WWW-Authenticate: Bearer realm="ringmirror"` before it is routed (so an
//! unknown route is 401 too, and nothing reaches the coordinator). The
//! server keeps only the token's SHA-256 and compares digests in constant
//! time; neither the token nor the `Authorization` header is ever logged
//! or echoed in an answer. Without a token the API is open, and a server
//! bound to an address other than loopback says so once, at start.

use std::io::Read as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use ringmirror_dataplane::sasl::Secret;
use serde::de::DeserializeOwned;

use crate::admin::{AdminAnswer, AdminCall, AdminError, AdminRequest, ErrorBody, TopicsBody};
use crate::mirror::MirrorConfig;

/// Where the admin API listens unless configured otherwise.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:9644";

/// How long a request waits for the coordinator: a wedged coordinator
/// answers 503 rather than holding requests (and clients) forever.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a stop waits for open requests before dropping their
/// connections (a client that sends half a request would hold a graceful
/// shutdown forever).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The `WWW-Authenticate` challenge of a request refused for its
/// credentials (RFC 6750: the bearer scheme, our realm).
pub const AUTH_CHALLENGE: &str = r#"Bearer realm="ringmirror""#;

/// The error kind of a request refused for its credentials (401).
pub const UNAUTHORIZED: &str = "unauthorized";

/// Largest token file read: a token is tens of bytes; the bound keeps a
/// wrong path (a log, a device) from being read whole.
pub const TOKEN_FILE_BYTES_MAX: u64 = 4096;

type Calls = async_channel::Sender<AdminCall>;

/// The admin API's bearer token: what the server requires and the CLI
/// sends. Visible ASCII without spaces (it travels in an HTTP header);
/// `Debug` shows `***`, so it never reaches a log line or an error message.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(Secret);

impl AdminToken {
    /// `token` without its surrounding whitespace; the reason it cannot be
    /// a token otherwise (the reason never quotes it).
    pub fn new(token: &str) -> Result<Self, &'static str> {
        let token = token.trim_ascii();
        if token.is_empty() {
            return Err("is empty");
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "holds a space or a character that is not visible ASCII, which cannot be sent \
                 in an HTTP header (make one with `openssl rand -hex 32`)",
            );
        }
        Ok(Self(Secret::new(token)))
    }

    /// Reads the token from `path` (at most [`TOKEN_FILE_BYTES_MAX`]
    /// bytes; surrounding whitespace and line breaks dropped). The error
    /// names the path, never the content.
    pub fn read_file(path: &std::path::Path) -> anyhow::Result<Self> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(TOKEN_FILE_BYTES_MAX + 1).read_to_end(&mut bytes))
            .with_context(|| format!("cannot read the admin token file {}", path.display()))?;
        anyhow::ensure!(
            bytes.len() as u64 <= TOKEN_FILE_BYTES_MAX,
            "the admin token file {} is larger than {TOKEN_FILE_BYTES_MAX} bytes: not a token file",
            path.display()
        );
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| anyhow::anyhow!("the admin token file {} holds bytes that are not ASCII", path.display()))?;
        Self::new(text).map_err(|reason| anyhow::anyhow!("the admin token file {} {reason}", path.display()))
    }

    /// The token itself: only where it is sent, never formatted.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// The `Authorization` header's value that carries it.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.expose())
    }

    fn digest(&self) -> TokenDigest {
        TokenDigest(digest(self.expose().as_bytes()))
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminToken({:?})", self.0)
    }
}

/// What the server keeps of the token: its SHA-256. Comparing digests
/// makes the comparison's time independent of the token's length and of
/// where a guess first differs.
#[derive(Clone, Copy)]
struct TokenDigest([u8; 32]);

/// SHA-256 (the same digest SASL/PLAIN keeps of a password).
fn digest(bytes: &[u8]) -> [u8; 32] {
    ringmirror_dataplane::sasl::plain::password_digest(bytes)
}

impl TokenDigest {
    /// Whether `presented` is the token, in time independent of both.
    fn matches(&self, presented: &[u8]) -> bool {
        let presented = digest(presented);
        let difference = self.0.iter().zip(&presented).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        // Keeps the compiler from turning the fold into an early exit.
        std::hint::black_box(difference) == 0
    }
}

/// The running admin API server. Stops (gracefully, thread joined) on
/// [`stop`](Self::stop) or when dropped.
pub struct AdminServer {
    addr: SocketAddr,
    /// Dropping it closes the channel, which is the shutdown signal.
    stop: Option<async_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port) before returning, so a port
    /// in use fails here, and serves on a thread of its own; requests go to
    /// the coordinator over `calls`. No authentication: see
    /// [`start_with_token`](Self::start_with_token).
    pub fn start(addr: SocketAddr, calls: async_channel::Sender<AdminCall>) -> anyhow::Result<AdminServer> {
        Self::start_with_token(addr, calls, None)
    }

    /// [`start`](Self::start), requiring `token` (when given) as a bearer
    /// token on every request but `GET /health`. Without one, a server on
    /// an address other than loopback warns that the API is open.
    pub fn start_with_token(
        addr: SocketAddr,
        calls: async_channel::Sender<AdminCall>,
        token: Option<AdminToken>,
    ) -> anyhow::Result<AdminServer> {
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("admin API: bind {addr}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let auth = token.as_ref().map(AdminToken::digest);
        if open_to_network(addr, auth.is_some()) {
            tracing::warn!(
                %addr,
                "the admin API has no authentication and is open to the network: \
                 set [admin] token_file, or bind it to loopback"
            );
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name("ringmirror-admin".into())
            .spawn(move || {
                let served = runtime.block_on(serve(listener, router(calls, auth), stopped));
                if let Err(e) = served {
                    tracing::error!(%addr, "admin API server failed: {e}");
                }
                // Dropping the runtime here ends connections still open
                // after the grace period.
            })?;
        let authentication = if token.is_some() { "bearer token" } else { "none" };
        tracing::info!(%addr, authentication, "admin API listening");
        Ok(AdminServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The bound address (with the port picked when started with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets open requests finish (up to a few seconds) and
    /// joins the server thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(addr = %self.addr, "admin API server thread panicked");
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Whether a server on `addr` answers anyone who reaches the address: no
/// token, and not bound to loopback (`0.0.0.0` and `::` are every address).
fn open_to_network(addr: SocketAddr, authenticated: bool) -> bool {
    !authenticated && !addr.ip().is_loopback()
}

async fn serve(
    listener: std::net::TcpListener,
    router: Router,
    stopped: async_channel::Receiver<()>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let signal = stopped.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        // Err: the sender was dropped, which is the signal.
        let _ = signal.recv().await;
    });
    let grace_over = async {
        let _ = stopped.recv().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        served = server => served,
        () = grace_over => {
            tracing::warn!("admin API: requests still open {SHUTDOWN_GRACE:?} after stop; dropping them");
            Ok(())
        }
    }
}

/// The routes; with `auth`, behind [`authenticate`] (fallbacks included,
/// so an unknown route answers 401 rather than telling what exists).
fn router(calls: Calls, auth: Option<TokenDigest>) -> Router {
    let routes = Router::new()
        .route("/mirrors", post(create_mirror).get(list_mirrors))
        .route(
            "/mirrors/{name}",
            get(describe_mirror).put(update_mirror).delete(delete_mirror),
        )
        .route("/mirrors/{name}/topics", post(add_topics).delete(remove_topics))
        .route(
            "/mirrors/{name}/pause",
            topic_change(|mirror, topics| AdminRequest::Pause { mirror, topics }),
        )
        .route(
            "/mirrors/{name}/resume",
            topic_change(|mirror, topics| AdminRequest::Resume { mirror, topics }),
        )
        .route(
            "/mirrors/{name}/stop",
            topic_change(|mirror, topics| AdminRequest::Stop { mirror, topics }),
        )
        .route(
            "/mirrors/{name}/restart",
            topic_change(|mirror, topics| AdminRequest::Restart { mirror, topics }),
        )
        .route("/mirrors/{name}/sync", post(sync_mirror))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    let routes = match auth {
        Some(auth) => routes.layer(middleware::from_fn_with_state(auth, authenticate)),
        None => routes,
    };
    routes.with_state(calls)
}

/// Lets through `GET /health` and requests bearing the token; answers any
/// other with 401. Logs why (at debug), never what was presented.
async fn authenticate(State(auth): State<TokenDigest>, request: Request, next: Next) -> Response {
    let health = request.uri().path() == "/health" && matches!(*request.method(), Method::GET | Method::HEAD);
    if health {
        return next.run(request).await;
    }
    match check_bearer(&auth, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::debug!(
                method = %request.method(),
                path = request.uri().path(),
                "admin API: request refused: {refusal}"
            );
            ApiError {
                status: StatusCode::UNAUTHORIZED,
                body: ErrorBody {
                    error: UNAUTHORIZED.into(),
                    message: refusal.into(),
                },
            }
            .into_response()
        }
    }
}

/// Whether the request carries the token: one `Authorization` header, the
/// `Bearer` scheme (any case, RFC 7235), the token. The reason if not.
fn check_bearer(auth: &TokenDigest, headers: &HeaderMap) -> Result<(), &'static str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(if headers.contains_key(header::AUTHORIZATION) {
            "more than one Authorization header"
        } else {
            "the admin API requires a bearer token (Authorization: Bearer <token>)"
        });
    };
    let value = value.as_bytes().trim_ascii();
    let scheme_end = value.iter().position(|&b| b == b' ').unwrap_or(value.len());
    let (scheme, credentials) = value.split_at(scheme_end);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err("the admin API takes only bearer tokens (Authorization: Bearer <token>)");
    }
    if !auth.matches(credentials.trim_ascii()) {
        return Err("the bearer token is not the admin API's");
    }
    Ok(())
}

/// An error answer: a status and an [`ErrorBody`].
struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        Self {
            status: StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body: ErrorBody::from(&e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 7235: a 401 names the scheme that would be accepted.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static(AUTH_CHALLENGE),
            );
        }
        response
    }
}

type Answer = Result<Response, ApiError>;

fn json(status: StatusCode, answer: AdminAnswer) -> Answer {
    Ok((status, axum::Json(answer)).into_response())
}

/// Sends one request to the coordinator and waits for its answer.
async fn call(calls: &Calls, request: AdminRequest) -> Result<AdminAnswer, ApiError> {
    let (reply, answer) = async_channel::bounded(1);
    let exchange = async {
        calls.send(AdminCall { request, reply }).await.ok()?;
        answer.recv().await.ok()
    };
    match tokio::time::timeout(REPLY_TIMEOUT, exchange).await {
        Ok(Some(result)) => Ok(result?),
        // The channel is closed, or the coordinator dropped the reply.
        Ok(None) => Err(AdminError::Unavailable("the mirror coordinator is not running".into()).into()),
        Err(_) => Err(AdminError::Unavailable(format!(
            "the mirror coordinator did not answer within {} s",
            REPLY_TIMEOUT.as_secs()
        ))
        .into()),
    }
}

/// Parses a JSON body; `what` names the expected shape in the error.
fn parse<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    if body.trim_ascii().is_empty() {
        return Err(AdminError::Invalid(format!("expected a JSON body: {what}")).into());
    }
    serde_json::from_slice(body).map_err(|e| AdminError::Invalid(format!("body is not {what}: {e}")).into())
}

/// The topics of a topic route's body; `required`: the body must name at
/// least one (adding or removing nothing is a mistake, while an action on
/// no named topics means all of them).
fn topics(body: &[u8], required: bool) -> Result<Vec<String>, ApiError> {
    const SHAPE: &str = r#"{"topics": ["name", ...]}"#;
    if !required && body.trim_ascii().is_empty() {
        return Ok(Vec::new());
    }
    let TopicsBody { topics } = parse(body, SHAPE)?;
    if required && topics.is_empty() {
        return Err(AdminError::Invalid(format!("the body names no topics: expected {SHAPE}")).into());
    }
    Ok(topics)
}

async fn create_mirror(State(calls): State<Calls>, body: Bytes) -> Answer {
    let mut config: MirrorConfig = parse(&body, "a mirror definition (JSON)")?;
    // Accept what the TOML file accepts: "h1:9092,h2:9092" entries.
    config.normalize();
    json(
        StatusCode::CREATED,
        call(&calls, AdminRequest::CreateMirror { config }).await?,
    )
}

async fn update_mirror(State(calls): State<Calls>, Path(mirror): Path<String>, body: Bytes) -> Answer {
    let mut config: MirrorConfig = parse(&body, "a mirror definition (JSON)")?;
    if config.name != mirror {
        return Err(AdminError::Invalid(format!(
            "the definition names mirror {:?}, the route {mirror:?}",
            config.name
        ))
        .into());
    }
    config.normalize();
    json(
        StatusCode::ACCEPTED,
        call(&calls, AdminRequest::UpdateMirror { config }).await?,
    )
}

async fn sync_mirror(State(calls): State<Calls>, Path(mirror): Path<String>) -> Answer {
    json(StatusCode::ACCEPTED, call(&calls, AdminRequest::Sync { mirror }).await?)
}

async fn list_mirrors(State(calls): State<Calls>) -> Answer {
    json(StatusCode::OK, call(&calls, AdminRequest::ListMirrors).await?)
}

async fn describe_mirror(State(calls): State<Calls>, Path(mirror): Path<String>) -> Answer {
    json(
        StatusCode::OK,
        call(&calls, AdminRequest::DescribeMirror { mirror }).await?,
    )
}

async fn delete_mirror(State(calls): State<Calls>, Path(mirror): Path<String>) -> Answer {
    json(
        StatusCode::OK,
        call(&calls, AdminRequest::DeleteMirror { mirror }).await?,
    )
}

async fn add_topics(State(calls): State<Calls>, Path(mirror): Path<String>, body: Bytes) -> Answer {
    let topics = topics(&body, true)?;
    json(
        StatusCode::ACCEPTED,
        call(&calls, AdminRequest::AddTopics { mirror, topics }).await?,
    )
}

async fn remove_topics(State(calls): State<Calls>, Path(mirror): Path<String>, body: Bytes) -> Answer {
    let topics = topics(&body, true)?;
    json(
        StatusCode::ACCEPTED,
        call(&calls, AdminRequest::RemoveTopics { mirror, topics }).await?,
    )
}

/// `POST /mirrors/{name}/<action>` with an optional topics body.
fn topic_change(request: fn(String, Vec<String>) -> AdminRequest) -> MethodRouter<Calls> {
    post(
        move |State(calls): State<Calls>, Path(mirror): Path<String>, body: Bytes| async move {
            let topics = topics(&body, false)?;
            json(StatusCode::ACCEPTED, call(&calls, request(mirror, topics)).await?)
        },
    )
}

async fn status(State(calls): State<Calls>) -> Answer {
    json(StatusCode::OK, call(&calls, AdminRequest::Status).await?)
}

async fn metrics(State(calls): State<Calls>) -> Answer {
    match call(&calls, AdminRequest::Metrics).await? {
        AdminAnswer::Metrics { metrics } => Ok((
            [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
            crate::metrics::render(&metrics),
        )
            .into_response()),
        other => Err(unexpected("metrics", &other)),
    }
}

/// The coordinator answered with the wrong kind of answer: a bug there,
/// reported rather than rendered as something it is not.
fn unexpected(asked: &str, answer: &AdminAnswer) -> ApiError {
    let kind = serde_json::to_value(answer)
        .ok()
        .and_then(|v| v.get("answer").and_then(|a| a.as_str()).map(str::to_owned))
        .unwrap_or_default();
    AdminError::Internal(format!("asked for {asked}, the coordinator answered {kind:?}")).into()
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        body: ErrorBody {
            error: "not_found".into(),
            message: format!("no route for {method} {}", uri.path()),
        },
    }
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        body: ErrorBody {
            error: "method_not_allowed".into(),
            message: format!("{} does not take {method}", uri.path()),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};

    use super::*;
    use crate::admin::{MetricsSnapshot, MirrorMetrics, MirrorSummary, PartitionView, TopicPartitionName};

    type Script = Box<dyn Fn(&AdminRequest) -> Result<AdminAnswer, AdminError> + Send>;

    /// An AdminServer in front of a scripted coordinator that records what
    /// it was asked.
    struct Fixture {
        server: AdminServer,
        seen: Arc<Mutex<Vec<AdminRequest>>>,
        http: ureq::Agent,
    }

    struct Reply {
        status: u16,
        content_type: String,
        www_authenticate: Option<String>,
        body: String,
    }

    impl Reply {
        fn json(&self) -> Value {
            serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
        }
    }

    fn fixture(script: Script) -> Fixture {
        fixture_with_token(script, None)
    }

    fn fixture_with_token(script: Script, token: Option<AdminToken>) -> Fixture {
        let (calls, incoming) = async_channel::unbounded::<AdminCall>();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            while let Ok(AdminCall { request, reply }) = incoming.recv_blocking() {
                let answer = script(&request);
                log.lock().unwrap().push(request);
                let _ = reply.send_blocking(answer);
            }
        });
        let server = AdminServer::start_with_token("127.0.0.1:0".parse().unwrap(), calls, token).unwrap();
        let http = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        Fixture { server, seen, http }
    }

    impl Fixture {
        fn send(&self, method: &str, path: &str, body: Option<&str>) -> Reply {
            self.send_as(method, path, body, &[])
        }

        /// [`send`](Self::send) with these `Authorization` header values.
        fn send_as(&self, method: &str, path: &str, body: Option<&str>, authorization: &[&str]) -> Reply {
            let mut request = ureq::http::Request::builder()
                .method(method)
                .uri(format!("http://{}{path}", self.server.addr()));
            for value in authorization {
                request = request.header("authorization", *value);
            }
            let request = request.body(body.unwrap_or("").to_owned()).unwrap();
            let mut response = self.http.run(request).unwrap();
            let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
            Reply {
                status: response.status().as_u16(),
                content_type: header("content-type").unwrap_or_default(),
                www_authenticate: header("www-authenticate"),
                body: response.body_mut().read_to_string().unwrap(),
            }
        }

        fn seen(&self) -> Vec<AdminRequest> {
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    fn view(topic: &str, partition: i32) -> PartitionView {
        PartitionView {
            mirror: "dr".into(),
            topic: topic.into(),
            partition,
            topic_id: "00000000-0000-0000-0000-000000000007".into(),
            state: "MIRRORING".into(),
            source_offset: 10,
            destination_offset: 8,
            lag_messages: 2,
            lag_seconds: 0.25,
            last_mirror_epoch: -1,
            destination_leader_epoch: 11,
            retry_attempt: 0,
            error: None,
        }
    }

    fn config_json() -> Value {
        json!({"name": "dr", "bootstrap_servers": ["a:1,b:2"], "topics": ["orders"]})
    }

    /// Answers every request the way a healthy coordinator would.
    fn healthy(request: &AdminRequest) -> Result<AdminAnswer, AdminError> {
        let accepted = |mirror: &str| AdminAnswer::Accepted {
            mirror: mirror.into(),
            partitions: vec![TopicPartitionName {
                topic: "orders".into(),
                partition: 0,
            }],
        };
        Ok(match request {
            AdminRequest::CreateMirror { config } | AdminRequest::UpdateMirror { config } => accepted(&config.name),
            AdminRequest::Sync { mirror } => accepted(mirror),
            AdminRequest::ListMirrors => AdminAnswer::Mirrors {
                mirrors: vec![MirrorSummary {
                    name: "dr".into(),
                    bootstrap_servers: vec!["a:1".into()],
                    source_cluster_id: Some("src".into()),
                    partitions: 1,
                    states: BTreeMap::from([("MIRRORING".into(), 1)]),
                }],
            },
            AdminRequest::DescribeMirror { mirror } if mirror == "dr" => AdminAnswer::Status {
                partitions: vec![view("orders", 0)],
            },
            AdminRequest::DescribeMirror { mirror } => {
                return Err(AdminError::UnknownMirror { mirror: mirror.clone() });
            }
            AdminRequest::DeleteMirror { mirror }
            | AdminRequest::AddTopics { mirror, .. }
            | AdminRequest::RemoveTopics { mirror, .. }
            | AdminRequest::Pause { mirror, .. }
            | AdminRequest::Resume { mirror, .. }
            | AdminRequest::Stop { mirror, .. }
            | AdminRequest::Restart { mirror, .. } => accepted(mirror),
            AdminRequest::Status => AdminAnswer::Status {
                partitions: vec![view("orders", 0), view("orders", 1)],
            },
            AdminRequest::Metrics => AdminAnswer::Metrics {
                metrics: MetricsSnapshot {
                    partitions: vec![],
                    mirrors: vec![MirrorMetrics {
                        mirror: "dr".into(),
                        fetch_errors: BTreeMap::new(),
                        fetch_latency_us: vec![(0.5, 2000)],
                        fetches: 5,
                        sync_halted: false,
                        topic_sync_errors: 0,
                        topic_deletions_pending: 0,
                        topic_recreations: 0,
                    }],
                },
            },
        })
    }

    #[test]
    fn every_route_maps_to_its_request_status_and_answer() {
        let f = fixture(Box::new(healthy));
        let accepted =
            json!({"answer": "accepted", "mirror": "dr", "partitions": [{"topic": "orders", "partition": 0}]});
        let topics = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = Vec::<String>::new;

        let r = f.send("POST", "/mirrors", Some(&config_json().to_string()));
        assert_eq!((r.status, r.json()), (201, accepted.clone()));
        assert!(r.content_type.starts_with("application/json"), "{}", r.content_type);
        let [AdminRequest::CreateMirror { config }] = &f.seen()[..] else {
            panic!("not a CreateMirror");
        };
        // Comma-separated bootstrap entries are split, and defaults applied.
        assert_eq!(
            (config.bootstrap_servers.clone(), config.fetch_max_wait_ms),
            (topics(&["a:1", "b:2"]), 500)
        );

        let r = f.send("GET", "/mirrors", None);
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["answer"], "mirrors");
        assert_eq!(r.json()["mirrors"][0]["states"]["MIRRORING"], 1);
        assert_eq!(f.seen(), [AdminRequest::ListMirrors]);

        let r = f.send("GET", "/mirrors/dr", None);
        assert_eq!(
            (r.status, r.json()["partitions"][0]["lag_seconds"].clone()),
            (200, json!(0.25))
        );
        assert_eq!(f.seen(), [AdminRequest::DescribeMirror { mirror: "dr".into() }]);

        let r = f.send("DELETE", "/mirrors/dr", None);
        assert_eq!((r.status, r.json()), (200, accepted.clone()));
        assert_eq!(f.seen(), [AdminRequest::DeleteMirror { mirror: "dr".into() }]);

        // PUT replaces the definition; its name must be the route's.
        let r = f.send("PUT", "/mirrors/dr", Some(&config_json().to_string()));
        assert_eq!((r.status, r.json()), (202, accepted.clone()));
        let [AdminRequest::UpdateMirror { config }] = &f.seen()[..] else {
            panic!("not an UpdateMirror");
        };
        assert_eq!(config.bootstrap_servers, topics(&["a:1", "b:2"]));
        let r = f.send("POST", "/mirrors/dr/sync", None);
        assert_eq!((r.status, r.json()), (202, accepted.clone()));
        assert_eq!(f.seen(), [AdminRequest::Sync { mirror: "dr".into() }]);
        let r = f.send("PUT", "/mirrors/other", Some(&config_json().to_string()));
        assert_eq!((r.status, r.json()["error"].clone()), (400, json!("invalid")));
        assert!(f.seen().is_empty(), "refused before the coordinator");

        let r = f.send("POST", "/mirrors/dr/topics", Some(r#"{"topics": ["a", "b"]}"#));
        assert_eq!((r.status, r.json()), (202, accepted.clone()));
        let r = f.send("DELETE", "/mirrors/dr/topics", Some(r#"{"topics": ["a"]}"#));
        assert_eq!((r.status, r.json()), (202, accepted.clone()));
        assert_eq!(
            f.seen(),
            [
                AdminRequest::AddTopics {
                    mirror: "dr".into(),
                    topics: topics(&["a", "b"])
                },
                AdminRequest::RemoveTopics {
                    mirror: "dr".into(),
                    topics: topics(&["a"])
                }
            ]
        );

        // Actions: no body, an empty list and a named topic.
        for (action, body) in [
            ("pause", None),
            ("resume", Some(r#"{"topics": []}"#)),
            ("stop", Some(r#"{"topics": ["orders"]}"#)),
            ("restart", Some("{}")),
        ] {
            let r = f.send("POST", &format!("/mirrors/dr/{action}"), body);
            assert_eq!((r.status, r.json()), (202, accepted.clone()), "{action}");
        }
        let mirror = || "dr".to_owned();
        assert_eq!(
            f.seen(),
            [
                AdminRequest::Pause {
                    mirror: mirror(),
                    topics: all()
                },
                AdminRequest::Resume {
                    mirror: mirror(),
                    topics: all()
                },
                AdminRequest::Stop {
                    mirror: mirror(),
                    topics: topics(&["orders"])
                },
                AdminRequest::Restart {
                    mirror: mirror(),
                    topics: all()
                },
            ]
        );

        let r = f.send("GET", "/status", None);
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["answer"], "status");
        assert_eq!(r.json()["partitions"].as_array().unwrap().len(), 2);

        let r = f.send("GET", "/metrics", None);
        assert_eq!(
            (r.status, r.content_type.as_str()),
            (200, "text/plain; version=0.0.4; charset=utf-8")
        );
        assert!(
            r.body
                .contains("ringmirror_mirror_fetch_latency_seconds{mirror=\"dr\",quantile=\"0.5\"} 0.002\n"),
            "{}",
            r.body
        );
        assert!(r.body.contains("ringmirror_mirror_fetches_total{mirror=\"dr\"} 5\n"));
        assert_eq!(f.seen(), [AdminRequest::Status, AdminRequest::Metrics]);

        let r = f.send("GET", "/health", None);
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        assert!(f.seen().is_empty(), "health does not ask the coordinator");
        f.server.stop();
    }

    #[test]
    fn coordinator_errors_map_to_their_status_and_kind() {
        let f = fixture(Box::new(|request| match request {
            AdminRequest::DescribeMirror { mirror } => Err(AdminError::UnknownMirror { mirror: mirror.clone() }),
            AdminRequest::CreateMirror { config } => Err(AdminError::MirrorExists {
                mirror: config.name.clone(),
            }),
            AdminRequest::Pause { mirror, .. } => Err(AdminError::AlreadyPaused {
                mirror: mirror.clone(),
                topic: "orders".into(),
            }),
            AdminRequest::AddTopics { .. } => Err(AdminError::Invalid("bad topic name".into())),
            AdminRequest::Status => Err(AdminError::Internal("boom".into())),
            // The wrong kind of answer for /metrics.
            _ => Ok(AdminAnswer::Status { partitions: vec![] }),
        }));
        let cases = [
            (
                "GET",
                "/mirrors/nope",
                None,
                404,
                "unknown_mirror",
                r#"unknown mirror "nope""#,
            ),
            (
                "POST",
                "/mirrors",
                Some(config_json().to_string()),
                409,
                "mirror_exists",
                r#"mirror "dr" exists"#,
            ),
            (
                "POST",
                "/mirrors/dr/pause",
                None,
                409,
                "already_paused",
                r#""dr": "orders" is already paused"#,
            ),
            (
                "POST",
                "/mirrors/dr/topics",
                Some(r#"{"topics":["x"]}"#.into()),
                400,
                "invalid",
                "invalid request: bad topic name",
            ),
            ("GET", "/status", None, 500, "internal", "internal error: boom"),
            (
                "GET",
                "/metrics",
                None,
                500,
                "internal",
                r#"internal error: asked for metrics, the coordinator answered "status""#,
            ),
        ];
        for (method, path, body, status, kind, message) in cases {
            let r = f.send(method, path, body.as_deref());
            assert_eq!(
                (r.status, r.json()),
                (status, json!({"error": kind, "message": message})),
                "{method} {path}"
            );
            assert!(r.content_type.starts_with("application/json"));
        }
    }

    #[test]
    fn malformed_bodies_are_400_and_never_reach_the_coordinator() {
        let f = fixture(Box::new(healthy));
        let cases = [
            (
                "POST",
                "/mirrors",
                "{",
                "body is not a mirror definition (JSON): EOF while parsing",
            ),
            (
                "POST",
                "/mirrors",
                "",
                "expected a JSON body: a mirror definition (JSON)",
            ),
            (
                "POST",
                "/mirrors",
                r#"{"name": "dr"}"#,
                "missing field `bootstrap_servers`",
            ),
            (
                "POST",
                "/mirrors",
                r#"{"name": "dr", "bootstrap_servers": [], "bogus": 1}"#,
                "unknown field `bogus`",
            ),
            ("POST", "/mirrors/dr/topics", "", "expected a JSON body"),
            (
                "POST",
                "/mirrors/dr/topics",
                r#"{"topics": []}"#,
                "the body names no topics",
            ),
            (
                "DELETE",
                "/mirrors/dr/topics",
                r#"{"topics": "orders"}"#,
                "invalid type: string",
            ),
            ("POST", "/mirrors/dr/stop", "[1,", "body is not {\"topics\""),
            (
                "POST",
                "/mirrors/dr/pause",
                r#"{"topic": ["x"]}"#,
                "unknown field `topic`",
            ),
        ];
        for (method, path, body, needle) in cases {
            let r = f.send(method, path, Some(body));
            assert_eq!(r.status, 400, "{method} {path} {body:?}: {}", r.body);
            assert_eq!(r.json()["error"], "invalid");
            let message = r.json()["message"].as_str().unwrap().to_owned();
            assert!(message.contains(needle), "{method} {path} {body:?}: {message}");
        }
        assert!(f.seen().is_empty());
    }

    #[test]
    fn unknown_routes_are_404_and_wrong_methods_405() {
        let f = fixture(Box::new(healthy));
        for (method, path, status, kind, message) in [
            ("GET", "/nope", 404, "not_found", "no route for GET /nope"),
            (
                "POST",
                "/mirrors/dr/explode",
                404,
                "not_found",
                "no route for POST /mirrors/dr/explode",
            ),
            (
                "PUT",
                "/mirrors",
                405,
                "method_not_allowed",
                "/mirrors does not take PUT",
            ),
            (
                "GET",
                "/mirrors/dr/pause",
                405,
                "method_not_allowed",
                "/mirrors/dr/pause does not take GET",
            ),
        ] {
            let r = f.send(method, path, None);
            assert_eq!(
                (r.status, r.json()),
                (status, json!({"error": kind, "message": message})),
                "{method} {path}"
            );
        }
        assert!(f.seen().is_empty());
    }

    #[test]
    fn a_gone_coordinator_is_503() {
        // Closed channel: nobody receives calls.
        let (calls, incoming) = async_channel::unbounded::<AdminCall>();
        drop(incoming);
        let server = AdminServer::start("127.0.0.1:0".parse().unwrap(), calls).unwrap();
        let f = Fixture {
            server,
            seen: Arc::default(),
            http: ureq::Agent::config_builder().http_status_as_error(false).build().into(),
        };
        let r = f.send("GET", "/status", None);
        assert_eq!(
            (r.status, r.json()),
            (
                503,
                json!({"error": "unavailable", "message": "unavailable: the mirror coordinator is not running"})
            )
        );

        // A coordinator that drops the reply without answering.
        let (calls, incoming) = async_channel::unbounded::<AdminCall>();
        std::thread::spawn(move || {
            while let Ok(call) = incoming.recv_blocking() {
                drop(call);
            }
        });
        let f = Fixture {
            server: AdminServer::start("127.0.0.1:0".parse().unwrap(), calls).unwrap(),
            ..f
        };
        let r = f.send("POST", "/mirrors/dr/pause", None);
        assert_eq!((r.status, r.json()["error"].clone()), (503, json!("unavailable")));
    }

    #[test]
    fn start_binds_up_front_and_stop_is_prompt_with_idle_connections() {
        let f = fixture(Box::new(healthy));
        let taken = f.server.addr();
        let (calls, _incoming) = async_channel::unbounded();
        let err = AdminServer::start(taken, calls).err().expect("the port is taken");
        assert!(
            format!("{err:#}").contains(&format!("admin API: bind {taken}")),
            "{err:#}"
        );

        // A keep-alive connection left idle after a request does not hold
        // the stop up; nor does one that never sent anything.
        let mut idle = std::net::TcpStream::connect(taken).unwrap();
        idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut buf = [0u8; 512];
        let n = idle.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        let _silent = std::net::TcpStream::connect(taken).unwrap();
        let started = std::time::Instant::now();
        f.server.stop();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "stop took {:?}",
            started.elapsed()
        );
        assert!(
            std::net::TcpStream::connect(taken).is_err(),
            "still accepting after stop"
        );
    }
    #[test]
    fn a_token_guards_every_route_but_health() {
        const TOKEN: &str = "s3cr3t-Token_0123456789";
        let token = AdminToken::new(&format!("  {TOKEN}\n")).unwrap();
        let f = fixture_with_token(Box::new(healthy), Some(token));
        let bearer = format!("Bearer {TOKEN}");
        let refused = |r: &Reply, message: &str, what: &str| {
            assert_eq!(
                (r.status, r.json()),
                (401, json!({"error": "unauthorized", "message": message})),
                "{what}"
            );
            assert_eq!(
                r.www_authenticate.as_deref(),
                Some(r#"Bearer realm="ringmirror""#),
                "{what}"
            );
            assert!(r.content_type.starts_with("application/json"), "{what}");
            assert!(!r.body.contains(TOKEN), "{what}: {}", r.body);
        };
        let missing = "the admin API requires a bearer token (Authorization: Bearer <token>)";
        let wrong = "the bearer token is not the admin API's";
        let scheme = "the admin API takes only bearer tokens (Authorization: Bearer <token>)";
        let routes = [
            ("GET", "/mirrors", None),
            ("POST", "/mirrors", Some(config_json().to_string())),
            ("GET", "/mirrors/dr", None),
            ("PUT", "/mirrors/dr", Some(config_json().to_string())),
            ("DELETE", "/mirrors/dr", None),
            ("POST", "/mirrors/dr/topics", Some(r#"{"topics": ["a"]}"#.to_owned())),
            ("POST", "/mirrors/dr/stop", None),
            ("POST", "/mirrors/dr/sync", None),
            ("GET", "/status", None),
            ("GET", "/metrics", None),
            // Unknown routes and wrong methods do not tell what exists.
            ("GET", "/nope", None),
            ("PUT", "/mirrors", None),
            ("POST", "/health", None),
        ];
        let prefix_of_token = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
        let longer_token = format!("Bearer {TOKEN}x");
        let basic = "Basic YWRtaW46czNjcjN0";
        for (method, path, body) in &routes {
            let what = format!("{method} {path}");
            refused(&f.send(method, path, body.as_deref()), missing, &what);
            refused(&f.send_as(method, path, body.as_deref(), &[""]), scheme, &what);
            refused(&f.send_as(method, path, body.as_deref(), &["Bearer"]), wrong, &what);
            refused(
                &f.send_as(method, path, body.as_deref(), &["Bearer wrong"]),
                wrong,
                &what,
            );
            refused(
                &f.send_as(method, path, body.as_deref(), &[&prefix_of_token]),
                wrong,
                &what,
            );
            refused(
                &f.send_as(method, path, body.as_deref(), &[&longer_token]),
                wrong,
                &what,
            );
            refused(&f.send_as(method, path, body.as_deref(), &[basic]), scheme, &what);
            // The token under another scheme is no better.
            refused(
                &f.send_as(method, path, body.as_deref(), &[&format!("Token {TOKEN}")]),
                scheme,
                &what,
            );
            refused(
                &f.send_as(method, path, body.as_deref(), &[&bearer, &bearer]),
                "more than one Authorization header",
                &what,
            );
        }
        assert!(f.seen().is_empty(), "nothing refused reached the coordinator");

        // The token: each route answers as without authentication. The
        // scheme is case-insensitive (RFC 7235).
        let lower = format!("bearer {TOKEN}");
        let expected = [200, 201, 200, 202, 200, 202, 202, 202, 200, 200, 404, 405, 405];
        for ((method, path, body), status) in routes.iter().zip(expected) {
            for authorization in [bearer.as_str(), lower.as_str()] {
                let r = f.send_as(method, path, body.as_deref(), &[authorization]);
                assert_eq!(r.status, status, "{method} {path} ({authorization:?}): {}", r.body);
                assert_eq!(r.www_authenticate, None);
            }
        }
        assert_eq!(
            f.seen().len(),
            2 * 10,
            "every known route reached the coordinator twice"
        );

        // Liveness probes need no token, with or without a wrong one.
        for authorization in [&[][..], &["Bearer wrong"]] {
            let r = f.send_as("GET", "/health", None, authorization);
            assert_eq!((r.status, r.body.as_str()), (200, "ok"));
        }
        f.server.stop();
    }

    #[test]
    fn tokens_are_trimmed_visible_ascii_and_never_formatted() {
        let token = AdminToken::new(" \t abc-DEF_123.~+/=\r\n").unwrap();
        assert_eq!(token.expose(), "abc-DEF_123.~+/=");
        assert_eq!(token.authorization(), "Bearer abc-DEF_123.~+/=");
        assert_eq!(format!("{token:?}"), "AdminToken(***)");
        for bad in ["", " \n\t ", "two words", "tab\tinside", "caf\u{e9}", "nul\0"] {
            let err = AdminToken::new(bad).unwrap_err();
            assert!(!err.contains(bad.trim()) || bad.trim().is_empty(), "{err}");
        }
        assert_eq!(AdminToken::new("\n").unwrap_err(), "is empty");
        assert!(AdminToken::new("two words").unwrap_err().contains("visible ASCII"));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "  hunter2-token \n").unwrap();
        assert_eq!(AdminToken::read_file(&file).unwrap().expose(), "hunter2-token");
        let err = |content: &[u8]| {
            std::fs::write(&file, content).unwrap();
            let e = format!("{:#}", AdminToken::read_file(&file).unwrap_err());
            assert!(e.contains(&file.display().to_string()), "{e}");
            e
        };
        assert!(err(b"").ends_with("is empty"));
        assert!(err(b"\n\n").ends_with("is empty"));
        let e = err(b"hunter2 token\n");
        assert!(e.contains("visible ASCII") && !e.contains("hunter2"), "{e}");
        let e = err(b"hunter2\xff");
        assert!(e.contains("not ASCII") && !e.contains("hunter2"), "{e}");
        let e = err(&vec![b'a'; TOKEN_FILE_BYTES_MAX as usize + 1]);
        assert!(e.contains("larger than 4096 bytes"), "{e}");
        std::fs::write(&file, vec![b'a'; TOKEN_FILE_BYTES_MAX as usize]).unwrap();
        assert_eq!(AdminToken::read_file(&file).unwrap().expose().len(), 4096);
        let missing = dir.path().join("missing");
        let e = format!("{:#}", AdminToken::read_file(&missing).unwrap_err());
        assert!(
            e.starts_with(&format!("cannot read the admin token file {}: ", missing.display())),
            "{e}"
        );
        let e = format!("{:#}", AdminToken::read_file(dir.path()).unwrap_err());
        assert!(e.contains("cannot read the admin token file"), "{e}");
    }

    #[test]
    fn only_an_unauthenticated_server_off_loopback_is_open_to_the_network() {
        let open = |addr: &str, authenticated| open_to_network(addr.parse().unwrap(), authenticated);
        for addr in ["127.0.0.1:9644", "127.0.0.2:1", "[::1]:9644"] {
            assert!(!open(addr, false), "{addr}");
        }
        for addr in ["0.0.0.0:9644", "[::]:9644", "10.1.2.3:9644", "[fd00::1]:1"] {
            assert!(open(addr, false), "{addr}");
            assert!(!open(addr, true), "{addr}");
        }
    }

    #[test]
    fn digests_match_only_the_token() {
        let d = AdminToken::new("token").unwrap().digest();
        assert!(d.matches(b"token"));
        for other in [&b""[..], b"toke", b"token ", b"tokem", b"Token", b"tokentoken"] {
            assert!(!d.matches(other), "{other:?}");
        }
    }
}
