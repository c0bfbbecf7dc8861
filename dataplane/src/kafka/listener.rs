//! The Kafka-protocol listener: every shard accepts on the same port
//! (SO_REUSEPORT, so the kernel spreads connections over shards), reads
//! size-prefixed request frames up to a limit, answers them in order, and
//! closes a connection whose request it cannot take — with a log line, never
//! a crash and never a hang. Responses are written in one piece, except
//! Fetch responses, whose record bytes go from the segment file to the
//! socket with sendfile (or, configured so, through a buffer).

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{AcceptedTcpStream, TcpListener, TcpStream};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;

use super::auto_create::TopicCreation;
use super::fetch::FetchSession;
use super::handlers;
use super::sasl::{ConnectionAuth, MAX_UNAUTHENTICATED_REQUEST_BYTES};
use crate::groups::GroupConfig;
use crate::partition::catalog::CatalogView;
use crate::partition::mirror_reports::MirrorReportsHandle;
use crate::partition::registry::{ShardAccess, ShardLinks};
use crate::security::acls::{AclOperation, AclStore, ResourceType};
use crate::security::authorizer::{AuthorizerSettings, ShardAuthorizer};
use crate::transport::Transport;
use ringmirror_protocol::request::{REQUEST_HEADER_BYTES_MIN, RequestError, ServedApi, decode_request};
use ringmirror_protocol::sasl::SaslServerConfig;
use ringmirror_protocol::wire::EncodedFetchResponse;

/// Kafka's `socket.request.max.bytes` default.
pub const MAX_REQUEST_BYTES_DEFAULT: usize = 100 * 1024 * 1024;
/// Kafka's `connections.max.idle.ms` default.
pub const CONNECTIONS_MAX_IDLE_DEFAULT: Duration = Duration::from_secs(600);
/// Pause after a failed accept (e.g. out of file descriptors).
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// Largest piece of a file copied per write on the copying path.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// How connections reach shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AcceptMode {
    /// Every shard accepts on the port (SO_REUSEPORT): the kernel picks a
    /// shard per connection by hashing its addresses.
    #[default]
    EachShard,
    /// Shard 0 accepts every connection and hands them to the shards in
    /// turn: even spread, one more hop per connection.
    OneAcceptor,
}

#[derive(Debug, Clone)]
pub struct ListenerSettings {
    pub addr: SocketAddr,
    /// Requests larger than this close the connection.
    pub max_request_bytes: usize,
    /// Send records with sendfile (true) or copy them through a buffer.
    pub zero_copy: bool,
    /// A connection that sends nothing for this long is closed (Kafka's
    /// `connections.max.idle.ms`), so stalled clients do not hold sockets.
    pub connections_max_idle: Duration,
    pub accept: AcceptMode,
    /// SASL authentication of every connection (`None`: none).
    pub sasl: Option<Arc<SaslServerConfig>>,
    /// TLS on every connection (`None`: in clear); records are then copied
    /// through a buffer, not sent with sendfile.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// ACL enforcement (off by default).
    pub authorizer: AuthorizerSettings,
    /// The settings of each shard's group coordinator (groups are reached
    /// only through the listener).
    pub groups: GroupConfig,
    /// Topics the agent creates by itself (Metadata's auto-creation) and
    /// the partition count CreateTopics leaves to it.
    pub topic_creation: TopicCreation,
}

impl ListenerSettings {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            max_request_bytes: MAX_REQUEST_BYTES_DEFAULT,
            zero_copy: true,
            connections_max_idle: CONNECTIONS_MAX_IDLE_DEFAULT,
            accept: AcceptMode::EachShard,
            sasl: None,
            tls: None,
            authorizer: AuthorizerSettings::default(),
            groups: GroupConfig::default(),
            topic_creation: TopicCreation::default(),
        }
    }
}

/// The serving tasks of one shard (its accept loop and every client
/// connection), so that a stopping shard closes its listening socket and
/// its connections instead of leaving them to the executor's end.
#[derive(Default)]
pub struct ServeTasks {
    next_id: std::cell::Cell<u64>,
    tasks: std::cell::RefCell<std::collections::HashMap<u64, glommio::task::JoinHandle<()>>>,
}

impl ServeTasks {
    /// Runs `task` on this shard until it ends or [`ServeTasks::close_all`].
    pub fn spawn(self: &Rc<Self>, task: impl std::future::Future<Output = ()> + 'static) {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let tasks = Rc::clone(self);
        let handle = glommio::spawn_local(async move {
            task.await;
            tasks.tasks.borrow_mut().remove(&id);
        })
        .detach();
        self.tasks.borrow_mut().insert(id, handle);
    }

    /// Cancels every task (their sockets close as their futures drop) and
    /// lets the executor drop them.
    pub async fn close_all(&self) {
        let tasks: Vec<_> = self.tasks.borrow_mut().drain().map(|(_, t)| t).collect();
        for task in &tasks {
            task.cancel();
        }
        // Cancelled tasks are dropped when the executor next runs them.
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
}

/// Accepts connections on this shard's `listener` (bound to the shared
/// port) until the shard closes its serving tasks.
pub async fn run_listener(
    listener: TcpListener,
    settings: ListenerSettings,
    access: ShardAccess,
    mirror_reports: Arc<MirrorReportsHandle>,
    acls: Arc<AclStore>,
    tasks: Rc<ServeTasks>,
) {
    let authz = Rc::new(ShardAuthorizer::new(settings.authorizer.clone(), Arc::clone(&acls)));
    let settings = Rc::new(settings);
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let conn = ClientConnection::new(
                    stream,
                    Rc::clone(&settings),
                    access.clone(),
                    Arc::clone(&mirror_reports),
                    Arc::clone(&acls),
                    Rc::clone(&authz),
                );
                tasks.spawn(conn.serve());
            }
            Err(e) => {
                tracing::warn!(shard = access.local.shard, error = %e, "accept failed");
                glommio::timer::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
}

/// The one-acceptor mode: accepts every connection on `listener` and hands
/// them to the shards in turn, until the executor ends.
pub async fn run_acceptor(listener: TcpListener, links: Arc<ShardLinks>) {
    let mut next = 0;
    loop {
        match listener.shared_accept().await {
            Ok(stream) => {
                if !links.hand_off(next % links.shards(), stream).await {
                    tracing::warn!(shard = next % links.shards(), "shard has ended; connection dropped");
                }
                next += 1;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
}

/// Serves the connections handed to this shard (the one-acceptor mode).
pub async fn serve_handed_off(
    handed: async_channel::Receiver<AcceptedTcpStream>,
    settings: ListenerSettings,
    access: ShardAccess,
    mirror_reports: Arc<MirrorReportsHandle>,
    acls: Arc<AclStore>,
    tasks: Rc<ServeTasks>,
) {
    let authz = Rc::new(ShardAuthorizer::new(settings.authorizer.clone(), Arc::clone(&acls)));
    let settings = Rc::new(settings);
    while let Ok(stream) = handed.recv().await {
        let conn = ClientConnection::new(
            stream.bind_to_executor(),
            Rc::clone(&settings),
            access.clone(),
            Arc::clone(&mirror_reports),
            Arc::clone(&acls),
            Rc::clone(&authz),
        );
        tasks.spawn(conn.serve());
    }
}

/// A response frame: the size prefix, the header at `header_version`, and
/// the body `encode` writes.
fn response_frame(
    header_version: i16,
    correlation_id: i32,
    encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
) -> Result<BytesMut, String> {
    let mut buf = BytesMut::with_capacity(128);
    buf.extend_from_slice(&[0; 4]);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, header_version)
        .map_err(|e| e.to_string())?;
    encode(&mut buf)?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}

/// One client connection and what its handlers need.
pub struct ClientConnection {
    stream: Transport,
    peer: String,
    pub settings: Rc<ListenerSettings>,
    pub access: ShardAccess,
    pub catalog: CatalogView,
    /// What the control plane reports of each mirror (DescribeClusterMirrors).
    pub mirror_reports: Arc<MirrorReportsHandle>,
    /// The agent's ACLs (DescribeAcls, CreateAcls, DeleteAcls).
    pub acls: Arc<AclStore>,
    /// This shard's authorizer.
    pub authz: Rc<ShardAuthorizer>,
    /// This connection's incremental fetch session, if the client made one.
    pub fetch_session: Option<FetchSession>,
    /// Its SASL state and principal (`User:ANONYMOUS` without SASL).
    pub auth: ConnectionAuth,
    copy_buffer: Vec<u8>,
}

impl ClientConnection {
    fn new(
        stream: TcpStream,
        settings: Rc<ListenerSettings>,
        access: ShardAccess,
        mirror_reports: Arc<MirrorReportsHandle>,
        acls: Arc<AclStore>,
        authz: Rc<ShardAuthorizer>,
    ) -> Self {
        let peer = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
        // Responses are written whole; Nagle would only delay them.
        let _ = stream.set_nodelay(true);
        // Reads (the next request, or the rest of one) give up after the
        // idle limit; a read timeout ends the connection.
        let _ = stream.set_read_timeout(Some(settings.connections_max_idle));
        let catalog = CatalogView::new(access.local.catalog());
        let auth = ConnectionAuth::new(settings.sasl.as_ref());
        Self {
            stream: Transport::Plain(stream),
            peer,
            settings,
            access,
            catalog,
            mirror_reports,
            acls,
            authz,
            fetch_session: None,
            auth,
            copy_buffer: Vec::new(),
        }
    }

    /// The client's address, as Kafka shows it (`/ip` in DescribeGroups).
    pub fn peer_host(&self) -> String {
        match self.peer.rsplit_once(':') {
            Some((host, _)) => format!("/{}", host.trim_start_matches('[').trim_end_matches(']')),
            None => self.peer.clone(),
        }
    }

    /// The client's IP address, as ACL hosts name it.
    pub fn peer_ip(&self) -> &str {
        match self.peer.rsplit_once(':') {
            Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
            None => &self.peer,
        }
    }

    /// Whether ACLs are enforced against this connection's principal (an
    /// authorizer is on and the principal is not a super user).
    pub fn authz_restricted(&self) -> bool {
        !self.authz.is_super(self.auth.principal())
    }

    /// Whether this connection's principal may do `operation` on the
    /// resource (always, without an authorizer).
    pub fn authorized(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.authz
            .authorize(self.auth.principal(), self.peer_ip(), operation, resource_type, name)
    }

    /// [`Self::authorized`] on the cluster resource.
    pub fn authorized_cluster(&self, operation: AclOperation) -> bool {
        self.authorized(
            operation,
            ResourceType::Cluster,
            crate::security::acls::CLUSTER_RESOURCE_NAME,
        )
    }

    /// Whether an idempotent producer may get a producer id: IDEMPOTENT_WRITE
    /// on the cluster, or WRITE on some topic (Kafka's
    /// `handleInitProducerIdRequest`, `authorizeByResourceType`).
    pub fn authorized_idempotent_write(&self) -> bool {
        self.authorized_cluster(AclOperation::IdempotentWrite)
            || self.authz.authorize_any(
                self.auth.principal(),
                self.peer_ip(),
                AclOperation::Write,
                ResourceType::Topic,
            )
    }

    async fn serve(self) {
        tracing::debug!(peer = self.peer, shard = self.access.local.shard, "client connected");
        if let Some(conn) = self.secured().await {
            conn.serve_requests().await;
        }
    }

    /// With TLS on the listener, the connection after its handshake
    /// (`None`: it failed, the connection is closed); else as it is.
    async fn secured(self) -> Option<Self> {
        let (Some(config), Transport::Plain(_)) = (self.settings.tls.clone(), &self.stream) else {
            return Some(self);
        };
        let Transport::Plain(tcp) = self.stream else {
            unreachable!("matched above");
        };
        match super::tls::accept(&config, tcp).await {
            Ok(stream) => Some(Self { stream, ..self }),
            Err(e) => {
                tracing::info!(peer = self.peer, error = %e, "closing client connection: TLS handshake failed");
                None
            }
        }
    }

    async fn serve_requests(mut self) {
        loop {
            let frame = match self.read_frame().await {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(reason) => {
                    tracing::warn!(peer = self.peer, reason, "closing client connection");
                    return;
                }
            };
            if !self.auth.is_open() {
                if let Err(reason) = super::sasl::before_authentication(&mut self, frame).await {
                    tracing::info!(
                        peer = self.peer,
                        reason,
                        "closing client connection before authentication"
                    );
                    // As Kafka (connection.failed.authentication.delay.ms):
                    // the client reads the answer before the close.
                    glommio::timer::sleep(super::sasl::FAILED_AUTHENTICATION_CLOSE_DELAY).await;
                    return;
                }
                continue;
            }
            let result = match decode_request(frame) {
                Ok((header, request)) => handlers::handle(&mut self, header, request).await,
                Err(RequestError::UnsupportedVersion {
                    api: ServedApi::ApiVersions,
                    correlation_id,
                    ..
                }) => handlers::unsupported_api_versions(&mut self, correlation_id).await,
                Err(e) => {
                    tracing::warn!(peer = self.peer, error = %e, "closing client connection after a request we cannot take");
                    return;
                }
            };
            if let Err(e) = result {
                tracing::debug!(peer = self.peer, error = %e, "client connection ended");
                return;
            }
        }
    }

    /// The next request frame; `None` at a clean end of stream.
    async fn read_frame(&mut self) -> Result<Option<Bytes>, String> {
        let mut size = [0u8; 4];
        match self.stream.read(&mut size[..1]).await {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
        self.stream
            .read_exact(&mut size[1..])
            .await
            .map_err(|e| format!("read request size: {e}"))?;
        let size = i32::from_be_bytes(size);
        // Before authentication frames are small (Kafka's
        // sasl.server.max.receive.size), and a raw SASL token may be empty.
        let (min, max) = match (self.auth.is_open(), self.auth.expects_raw_token()) {
            (true, _) => (REQUEST_HEADER_BYTES_MIN, self.settings.max_request_bytes),
            (false, raw) => (
                if raw { 0 } else { REQUEST_HEADER_BYTES_MIN },
                MAX_UNAUTHENTICATED_REQUEST_BYTES.min(self.settings.max_request_bytes),
            ),
        };
        if size < min as i32 || size as usize > max {
            return Err(format!("request size {size} is outside [{min}, {max}]"));
        }
        let mut frame = BytesMut::zeroed(size as usize);
        self.stream
            .read_exact(&mut frame)
            .await
            .map_err(|e| format!("read request of {size} bytes: {e}"))?;
        Ok(Some(frame.freeze()))
    }

    /// Sends a raw SASL token (after a v0 SaslHandshake): its size, then
    /// its bytes.
    pub(super) async fn send_raw_token(&mut self, token: &[u8]) -> std::io::Result<()> {
        let mut frame = Vec::with_capacity(4 + token.len());
        frame.extend_from_slice(&(token.len() as i32).to_be_bytes());
        frame.extend_from_slice(token);
        self.stream.write_all(&frame).await?;
        self.stream.flush().await
    }

    /// Sends a response encoded by kafka-protocol.
    pub async fn respond<T: Encodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        body: &T,
    ) -> std::io::Result<()> {
        let frame = response_frame(api.response_header_version(version), correlation_id, |buf| {
            body.encode(buf, version).map_err(|e| e.to_string())
        });
        self.send_response(frame, &api, version).await
    }

    /// Sends a response whose body `encode` writes: for the APIs
    /// kafka-protocol does not know, encoded by hand (see `ringmirror_protocol::wire`).
    pub async fn respond_encoded(
        &mut self,
        api: ServedApi,
        version: i16,
        correlation_id: i32,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> std::io::Result<()> {
        let frame = response_frame(api.response_header_version(version), correlation_id, encode);
        self.send_response(frame, &api, version).await
    }

    async fn send_response(
        &mut self,
        frame: Result<BytesMut, String>,
        api: &dyn std::fmt::Debug,
        version: i16,
    ) -> std::io::Result<()> {
        match frame {
            Ok(frame) => {
                self.stream.write_all(&frame).await?;
                self.stream.flush().await
            }
            Err(e) => {
                // Our own response failed to encode: a bug, reported, and
                // the client is disconnected rather than sent a broken frame.
                tracing::error!(?api, version, error = %e, "cannot encode response");
                Err(std::io::Error::other(e))
            }
        }
    }

    /// Sends a Fetch response: its encoded fields, and the records from
    /// their segment files.
    pub async fn send_fetch_response(&mut self, response: EncodedFetchResponse) -> std::io::Result<()> {
        let mut at = 0;
        for (position, records) in &response.records {
            self.stream.write_all(&response.bytes[at..*position]).await?;
            if self.settings.zero_copy && self.stream.plain().is_some() {
                self.send_file(&records.file, records.position, records.len).await?;
            } else {
                self.copy_file(&records.file, records.position, records.len).await?;
            }
            at = *position;
        }
        self.stream.write_all(&response.bytes[at..]).await?;
        self.stream.flush().await
    }

    /// sendfile(2) from the segment to the socket. The socket is
    /// non-blocking: when its buffer is full, one byte goes through the
    /// executor's write path, which waits until the socket can take more.
    async fn send_file(&mut self, file: &File, mut position: u64, len: usize) -> std::io::Result<()> {
        let end = position + len as u64;
        while position < end {
            let mut offset = position as libc::off_t;
            let left = (end - position) as usize;
            // SAFETY: both descriptors are open for the duration of the call.
            let socket = self.stream.plain().expect("sendfile only in clear").as_raw_fd();
            let sent = unsafe { libc::sendfile(socket, file.as_raw_fd(), &mut offset, left) };
            if sent > 0 {
                position += sent as u64;
                continue;
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                _ if sent == 0 => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "segment file shorter than its index says",
                    ));
                }
                Some(libc::EAGAIN) => {
                    let mut byte = [0u8; 1];
                    std::os::unix::fs::FileExt::read_exact_at(file, &mut byte, position)?;
                    self.stream.write_all(&byte).await?;
                    position += 1;
                }
                Some(libc::EINTR) => {}
                _ => return Err(err),
            }
        }
        Ok(())
    }

    /// The copying path: pread into a buffer, then write.
    async fn copy_file(&mut self, file: &File, mut position: u64, len: usize) -> std::io::Result<()> {
        let end = position + len as u64;
        let mut buffer = std::mem::take(&mut self.copy_buffer);
        while position < end {
            let n = ((end - position) as usize).min(COPY_CHUNK_BYTES);
            buffer.resize(n, 0);
            std::os::unix::fs::FileExt::read_exact_at(file, &mut buffer, position)?;
            self.stream.write_all(&buffer).await?;
            position += n as u64;
        }
        self.copy_buffer = buffer;
        Ok(())
    }
}
