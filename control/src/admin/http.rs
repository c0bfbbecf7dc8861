//! The admin API over HTTP/JSON: routes mapped onto [`AdminRequest`]s sent
//! to the mirror coordinator as [`AdminCall`]s, its answers and errors mapped
//! onto status codes and JSON bodies, and `/metrics` in Prometheus' text
//! format.
//!
//! The server is axum on a tokio *current-thread* runtime in its own OS
//! thread. DESIGN.md names tokio-uring for the control plane; admin traffic
//! is a few requests a minute, so plain tokio (epoll) is enough here and
//! keeps io_uring out of this path. With a certificate it speaks HTTPS
//! only ([`crate::admin::tls`]).
//!
//! | route | request | ClusterMirror operation | success |
//! | --- | --- | --- | --- |
//! | `POST /mirrors` (body: a [`MirrorConfig`]) | CreateMirror | CREATE | 201 |
//! | `GET /mirrors` | ListMirrors | DESCRIBE (listing filtered) | 200 |
//! | `GET /mirrors/{name}` | DescribeMirror | DESCRIBE | 200 |
//! | `PUT /mirrors/{name}` (body: a [`MirrorConfig`]) | UpdateMirror | ALTER | 202 |
//! | `DELETE /mirrors/{name}` | DeleteMirror | ALTER | 200 |
//! | `POST /mirrors/{name}/topics` (body: [`TopicsBody`]) | AddTopics | ALTER | 202 |
//! | `DELETE /mirrors/{name}/topics` (body: [`TopicsBody`]) | RemoveTopics | ALTER | 202 |
//! | `POST /mirrors/{name}/pause`, `resume`, `stop`, `restart` (optional [`TopicsBody`]; none or empty: all topics) | Pause, Resume, Stop, Restart | ALTER | 202 |
//! | `POST /mirrors/{name}/sync` | Sync | ALTER | 202 |
//! | `POST /mirrors/{name}/check` (optional [`TopicsBody`]) | CheckDivergence | ALTER | 202 |
//! | `POST /mirrors/{name}/verify` (optional [`VerifyBody`]) | StartVerify | ALTER | 202 |
//! | `GET /mirrors/{name}/verify` | VerifyStatus | DESCRIBE | 200 |
//! | `GET /status` | Status | DESCRIBE (filtered) | 200 |
//! | `GET /metrics` | Metrics, rendered by [`crate::admin::metrics::render`] | DESCRIBE (filtered) | 200, `text/plain; version=0.0.4` |
//! | `GET /acls`, `POST /acls`, `DELETE /acls` (body: [`AclsBody`]) | — (the ACL store) | the admin token only | 200, 201, 200 |
//! | `GET /health` | — | — | 200 `ok` |
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
//! **Authentication and authorization** ([`crate::admin::auth`]). With an
//! admin token or principals, every request but `GET /health` (liveness
//! probes) must carry `Authorization: Bearer <token>`; any other request
//! is answered 401 `unauthorized` with `WWW-Authenticate: Bearer
//! realm="ringmirror"` before it is routed (so an unknown route is 401
//! too, and nothing reaches the coordinator). A principal's request is
//! then checked against the ClusterMirror ACLs for the operation in the
//! table, on the mirror the route names (a new mirror's own name for
//! CREATE) — 403 `CLUSTER_MIRROR_AUTHORIZATION_FAILED` before it reaches
//! the coordinator — and listings keep only the mirrors it may describe.
//! Without a token the API is open, and a server bound to an address
//! other than loopback says so once, at start; one with tokens in clear
//! off loopback warns that they travel in clear.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRef, Path, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, get, on, post};
use ringmirror_dataplane::security::AclStore;
use ringmirror_dataplane::security::acls::{AclBinding, AclBindingFilter, AclOperation};
use serde::de::DeserializeOwned;

use crate::admin::auth::{Access, AdminAuth, Forbidden};
pub use crate::admin::auth::{AdminPrincipals, AdminToken, TOKEN_FILE_BYTES_MAX, UNAUTHORIZED};
use crate::admin::tls::{AdminListener, Peer};
use crate::admin::{
    AclsBody, AdminAnswer, AdminCall, AdminError, AdminRequest, ErrorBody, MirrorAcl, TopicsBody, VerifyBody,
};
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

type Calls = async_channel::Sender<AdminCall>;

/// How the admin API is guarded (see [`AdminServer::start_with`]); the
/// default is an open API in clear.
#[derive(Default)]
pub struct AdminSecurity {
    /// The admin token: its bearer may do everything.
    pub token: Option<AdminToken>,
    /// Tokens of principals, whom the ClusterMirror ACLs authorize.
    pub principals: Option<AdminPrincipals>,
    /// The agent's ACLs: the principals' ClusterMirror ACLs, and `/acls`.
    pub acls: Option<Arc<AclStore>>,
    /// The certificate and key of HTTPS; `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// What the handlers share: the coordinator's channel and the
/// authentication (with the ACL store).
#[derive(Clone)]
struct Api {
    calls: Calls,
    auth: Arc<AdminAuth>,
}

impl FromRef<Api> for Calls {
    fn from_ref(api: &Api) -> Self {
        api.calls.clone()
    }
}

impl FromRef<Api> for Arc<AdminAuth> {
    fn from_ref(api: &Api) -> Self {
        Arc::clone(&api.auth)
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
    /// [`start_with`](Self::start_with).
    pub fn start(addr: SocketAddr, calls: async_channel::Sender<AdminCall>) -> anyhow::Result<AdminServer> {
        Self::start_with(addr, calls, AdminSecurity::default())
    }

    /// [`start`](Self::start), requiring `token` (when given) as a bearer
    /// token on every request but `GET /health`.
    pub fn start_with_token(
        addr: SocketAddr,
        calls: async_channel::Sender<AdminCall>,
        token: Option<AdminToken>,
    ) -> anyhow::Result<AdminServer> {
        Self::start_with(
            addr,
            calls,
            AdminSecurity {
                token,
                ..AdminSecurity::default()
            },
        )
    }

    /// [`start`](Self::start), guarded by `security`: a token or principals
    /// required on every request but `GET /health`, HTTPS with a
    /// certificate. Warns at start when the API is open to the network, or
    /// takes tokens in clear off loopback.
    pub fn start_with(
        addr: SocketAddr,
        calls: async_channel::Sender<AdminCall>,
        security: AdminSecurity,
    ) -> anyhow::Result<AdminServer> {
        let AdminSecurity {
            token,
            principals,
            acls,
            tls,
        } = security;
        let auth = Arc::new(AdminAuth::new(token.as_ref(), principals, acls)?);
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("admin API: bind {addr}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        if open_to_network(addr, auth.required()) {
            tracing::warn!(
                %addr,
                "the admin API has no authentication and is open to the network: \
                 set [admin] token_file, or bind it to loopback"
            );
        }
        if tokens_in_clear(addr, auth.required(), tls.is_some()) {
            tracing::warn!(
                %addr,
                "the admin API's bearer tokens travel in clear off loopback: set [admin] \
                 ssl_certificate_location and ssl_key_location, or bind it to loopback"
            );
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stop, stopped) = async_channel::bounded::<()>(1);
        let authentication = auth.mode();
        let router = router(Api { calls, auth });
        let thread = std::thread::Builder::new()
            .name("ringmirror-admin".into())
            .spawn(move || {
                let served = runtime.block_on(serve(listener, tls, router, stopped));
                if let Err(e) = served {
                    tracing::error!(%addr, "admin API server failed: {e}");
                }
                // Dropping the runtime here ends connections still open
                // after the grace period.
            })?;
        tracing::info!(%addr, scheme, authentication, "admin API listening");
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

/// Whether bearer tokens cross a network in clear: required, no TLS, and
/// not bound to loopback.
fn tokens_in_clear(addr: SocketAddr, authenticated: bool, tls: bool) -> bool {
    authenticated && !tls && !addr.ip().is_loopback()
}

async fn serve(
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    stopped: async_channel::Receiver<()>,
) -> std::io::Result<()> {
    let listener = AdminListener::new(tokio::net::TcpListener::from_std(listener)?, tls);
    let signal = stopped.clone();
    let server = axum::serve(listener, router.into_make_service_with_connect_info::<Peer>()).with_graceful_shutdown(
        async move {
            // Err: the sender was dropped, which is the signal.
            let _ = signal.recv().await;
        },
    );
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

/// The routes, behind [`authenticate`] (fallbacks included, so an unknown
/// route answers 401 rather than telling what exists).
fn router(api: Api) -> Router {
    Router::new()
        .route("/mirrors", post(create_mirror).get(list_mirrors))
        .route(
            "/mirrors/{name}",
            on_mirror(MethodFilter::GET, AclOperation::Describe, StatusCode::OK, |mirror| {
                AdminRequest::DescribeMirror { mirror }
            })
            .put(update_mirror)
            .merge(on_mirror(
                MethodFilter::DELETE,
                AclOperation::Alter,
                StatusCode::OK,
                |mirror| AdminRequest::DeleteMirror { mirror },
            )),
        )
        .route(
            "/mirrors/{name}/topics",
            topic_change(MethodFilter::POST, true, |mirror, topics| AdminRequest::AddTopics {
                mirror,
                topics,
            })
            .merge(topic_change(MethodFilter::DELETE, true, |mirror, topics| {
                AdminRequest::RemoveTopics { mirror, topics }
            })),
        )
        .route(
            "/mirrors/{name}/pause",
            topic_change(MethodFilter::POST, false, |mirror, topics| AdminRequest::Pause {
                mirror,
                topics,
            }),
        )
        .route(
            "/mirrors/{name}/resume",
            topic_change(MethodFilter::POST, false, |mirror, topics| AdminRequest::Resume {
                mirror,
                topics,
            }),
        )
        .route(
            "/mirrors/{name}/stop",
            topic_change(MethodFilter::POST, false, |mirror, topics| AdminRequest::Stop {
                mirror,
                topics,
            }),
        )
        .route(
            "/mirrors/{name}/restart",
            topic_change(MethodFilter::POST, false, |mirror, topics| AdminRequest::Restart {
                mirror,
                topics,
            }),
        )
        .route(
            "/mirrors/{name}/check",
            topic_change(MethodFilter::POST, false, |mirror, topics| {
                AdminRequest::CheckDivergence { mirror, topics }
            }),
        )
        .route(
            "/mirrors/{name}/verify",
            post(start_verify).merge(on_mirror(
                MethodFilter::GET,
                AclOperation::Describe,
                StatusCode::OK,
                |mirror| AdminRequest::VerifyStatus { mirror },
            )),
        )
        .route(
            "/mirrors/{name}/sync",
            on_mirror(
                MethodFilter::POST,
                AclOperation::Alter,
                StatusCode::ACCEPTED,
                |mirror| AdminRequest::Sync { mirror },
            ),
        )
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/acls", get(list_acls).post(create_acls).delete(delete_acls))
        .route("/health", get(|| async { "ok" }))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(Arc::clone(&api.auth), authenticate))
        .with_state(api)
}

/// Lets through `GET /health`, and requests of a known caller with what
/// it may do ([`Access`]) attached; answers any other with 401. Logs why
/// (at debug), never what was presented.
async fn authenticate(
    State(auth): State<Arc<AdminAuth>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    mut request: Request,
    next: Next,
) -> Response {
    let health = request.uri().path() == "/health" && matches!(*request.method(), Method::GET | Method::HEAD);
    if health {
        return next.run(request).await;
    }
    match auth.authenticate(request.headers()) {
        Ok(caller) => {
            let access = auth.access(caller, peer.ip().to_string());
            request.extensions_mut().insert(access);
            next.run(request).await
        }
        Err(refusal) => {
            tracing::debug!(
                method = %request.method(),
                path = request.uri().path(),
                %peer,
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

impl From<Forbidden> for ApiError {
    fn from(f: Forbidden) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            body: ErrorBody {
                error: f.error.into(),
                message: f.message,
            },
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

/// `POST /mirrors/{name}/verify`: starts a verification (ALTER: it reads
/// the source at up to the body's rate).
async fn start_verify(
    State(calls): State<Calls>,
    Extension(access): Extension<Access>,
    Path(mirror): Path<String>,
    body: Bytes,
) -> Answer {
    access.check(AclOperation::Alter, &mirror)?;
    let body = if body.trim_ascii().is_empty() {
        VerifyBody {
            topics: Vec::new(),
            from_offset: 0,
            bytes_per_s: VerifyBody::BYTES_PER_S_DEFAULT,
        }
    } else {
        parse(&body, r#"{"topics": [...], "from_offset": N, "bytes_per_s": N}"#)?
    };
    let request = AdminRequest::StartVerify {
        mirror,
        topics: body.topics,
        from_offset: body.from_offset,
        bytes_per_s: body.bytes_per_s,
    };
    json(StatusCode::ACCEPTED, call(&calls, request).await?)
}

async fn create_mirror(State(calls): State<Calls>, Extension(access): Extension<Access>, body: Bytes) -> Answer {
    let mut config: MirrorConfig = parse(&body, "a mirror definition (JSON)")?;
    access.check(AclOperation::Create, &config.name)?;
    // Accept what the TOML file accepts: "h1:9092,h2:9092" entries.
    config.normalize();
    json(
        StatusCode::CREATED,
        call(&calls, AdminRequest::CreateMirror { config }).await?,
    )
}

async fn update_mirror(
    State(calls): State<Calls>,
    Extension(access): Extension<Access>,
    Path(mirror): Path<String>,
    body: Bytes,
) -> Answer {
    access.check(AclOperation::Alter, &mirror)?;
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

async fn list_mirrors(State(calls): State<Calls>, Extension(access): Extension<Access>) -> Answer {
    let answer = call(&calls, AdminRequest::ListMirrors).await?;
    json(StatusCode::OK, access.filter(answer))
}

/// A route of one mirror without a body: `operation` on the mirror, then
/// `request` answered with `status`.
fn on_mirror(
    method: MethodFilter,
    operation: AclOperation,
    status: StatusCode,
    request: fn(String) -> AdminRequest,
) -> MethodRouter<Api> {
    on(
        method,
        move |State(calls): State<Calls>, Extension(access): Extension<Access>, Path(mirror): Path<String>| async move {
            access.check(operation, &mirror)?;
            json(status, call(&calls, request(mirror)).await?)
        },
    )
}

/// A route of one mirror with a topics body (ALTER, 202): `required`, it
/// must name topics (add, remove); else none means all of the mirror's
/// (pause, resume, stop, restart).
fn topic_change(
    method: MethodFilter,
    required: bool,
    request: fn(String, Vec<String>) -> AdminRequest,
) -> MethodRouter<Api> {
    on(
        method,
        move |State(calls): State<Calls>,
              Extension(access): Extension<Access>,
              Path(mirror): Path<String>,
              body: Bytes| async move {
            access.check(AclOperation::Alter, &mirror)?;
            let topics = topics(&body, required)?;
            json(StatusCode::ACCEPTED, call(&calls, request(mirror, topics)).await?)
        },
    )
}

async fn status(State(calls): State<Calls>, Extension(access): Extension<Access>) -> Answer {
    let answer = call(&calls, AdminRequest::Status).await?;
    json(StatusCode::OK, access.filter(answer))
}

async fn metrics(State(calls): State<Calls>, Extension(access): Extension<Access>) -> Answer {
    match access.filter(call(&calls, AdminRequest::Metrics).await?) {
        AdminAnswer::Metrics { metrics } => Ok((
            [(header::CONTENT_TYPE, crate::admin::metrics::CONTENT_TYPE)],
            crate::admin::metrics::render(&metrics),
        )
            .into_response()),
        other => Err(unexpected("metrics", &other)),
    }
}

/// The ACL store, or 503 when this server was started without one.
fn acl_store(auth: &AdminAuth) -> Result<&Arc<AclStore>, ApiError> {
    auth.acls()
        .ok_or_else(|| AdminError::Unavailable("this admin API has no ACL store".into()).into())
}

/// The ClusterMirror ACLs of `bindings`, as the API shows them.
fn mirror_acls(bindings: &[AclBinding]) -> AdminAnswer {
    AdminAnswer::Acls {
        acls: bindings.iter().filter_map(MirrorAcl::from_binding).collect(),
    }
}

/// The ACLs of an `/acls` body, each valid; the bindings to store.
fn acls_body(body: &[u8]) -> Result<Vec<AclBinding>, ApiError> {
    let AclsBody { acls } = parse(
        body,
        r#"{"acls": [{"principal": ..., "operation": ..., "mirror": ...}]}"#,
    )?;
    if acls.is_empty() {
        return Err(AdminError::Invalid("the body names no ACLs".into()).into());
    }
    acls.iter()
        .map(|acl| {
            acl.validate()
                .map(|()| acl.binding())
                .map_err(|e| AdminError::Invalid(format!("{}: {e}", acl.binding())).into())
        })
        .collect()
}

async fn list_acls(State(auth): State<Arc<AdminAuth>>, Extension(access): Extension<Access>) -> Answer {
    access.check_acl_admin()?;
    let filter = AclBindingFilter {
        resource_type: ringmirror_dataplane::security::acls::ResourceType::ClusterMirror,
        ..AclBindingFilter::any()
    };
    json(StatusCode::OK, mirror_acls(&acl_store(&auth)?.describe(&filter)))
}

/// `POST /acls`: creates the body's ACLs; answers those that were new.
async fn create_acls(State(auth): State<Arc<AdminAuth>>, Extension(access): Extension<Access>, body: Bytes) -> Answer {
    access.check_acl_admin()?;
    let bindings = acls_body(&body)?;
    let store = acl_store(&auth)?;
    let held = store.snapshot().1;
    let mut new: Vec<AclBinding> = bindings.into_iter().filter(|b| !held.contains(b)).collect();
    new.sort();
    new.dedup();
    store
        .create(&new)
        .map_err(|e| AdminError::Internal(format!("cannot store the ACLs: {e}")))?;
    tracing::info!(acls = new.len(), "admin API: ClusterMirror ACLs created");
    json(StatusCode::CREATED, mirror_acls(&new))
}

/// `DELETE /acls`: deletes exactly the body's ACLs; answers those that
/// were there.
async fn delete_acls(State(auth): State<Arc<AdminAuth>>, Extension(access): Extension<Access>, body: Bytes) -> Answer {
    access.check_acl_admin()?;
    let filters: Vec<AclBindingFilter> = acls_body(&body)?.iter().map(AclBindingFilter::exact).collect();
    let deleted = acl_store(&auth)?
        .delete(&filters)
        .map_err(|e| AdminError::Internal(format!("cannot store the deletion: {e}")))?;
    let deleted: Vec<AclBinding> = deleted.into_iter().flatten().collect();
    tracing::info!(acls = deleted.len(), "admin API: ClusterMirror ACLs deleted");
    json(StatusCode::OK, mirror_acls(&deleted))
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
mod tests;
