//! The Kafka-protocol listener: every shard accepts on the same port
//! (SO_REUSEPORT, so the kernel spreads connections over shards), and each
//! connection's [`Session`] reads size-prefixed request frames up to a
//! limit, has each answered (`handlers`, which return a [`Response`] and
//! never write), writes the answers in request order, and closes a
//! connection whose request it cannot take — with a log line, never a crash
//! and never a hang. The session is the only writer of a client's socket.
//! Responses are written in one piece, except Fetch responses, whose record
//! bytes go from the segment file to the socket with sendfile (or,
//! configured so, through a buffer).

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{AcceptedTcpStream, TcpListener, TcpStream};

use super::auto_create::TopicCreation;
use super::connection::ClientConnection;
use super::handlers;
use super::response::Response;
use super::sasl::MAX_UNAUTHENTICATED_REQUEST_BYTES;
use crate::groups::GroupConfig;
use crate::partition::mirror_reports::MirrorReportsHandle;
use crate::partition::registry::{ShardAccess, ShardLinks};
use crate::security::acls::AclStore;
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
                let session = Session::new(
                    stream,
                    Rc::clone(&settings),
                    access.clone(),
                    Arc::clone(&mirror_reports),
                    Arc::clone(&acls),
                    Rc::clone(&authz),
                );
                tasks.spawn(session.serve());
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
        let session = Session::new(
            stream.bind_to_executor(),
            Rc::clone(&settings),
            access.clone(),
            Arc::clone(&mirror_reports),
            Arc::clone(&acls),
            Rc::clone(&authz),
        );
        tasks.spawn(session.serve());
    }
}

/// A connection's session: the socket, and the connection state its
/// handlers see. It reads each request, has it answered, and writes the
/// answer before it reads the next one — the only place that writes to
/// the socket, so responses go out in request order.
struct Session {
    stream: Transport,
    conn: ClientConnection,
    copy_buffer: Vec<u8>,
}

impl Session {
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
        Self {
            stream: Transport::Plain(stream),
            conn: ClientConnection::new(peer, settings, access, mirror_reports, acls, authz),
            copy_buffer: Vec::new(),
        }
    }

    async fn serve(self) {
        tracing::debug!(
            peer = self.conn.peer,
            shard = self.conn.access.local.shard,
            "client connected"
        );
        if let Some(session) = self.secured().await {
            session.serve_requests().await;
        }
    }

    /// With TLS on the listener, the session after its handshake
    /// (`None`: it failed, the connection is closed); else as it is.
    async fn secured(self) -> Option<Self> {
        let (Some(config), Transport::Plain(_)) = (self.conn.settings.tls.clone(), &self.stream) else {
            return Some(self);
        };
        let Transport::Plain(tcp) = self.stream else {
            unreachable!("matched above");
        };
        match super::tls::accept(&config, tcp).await {
            Ok(stream) => Some(Self { stream, ..self }),
            Err(e) => {
                tracing::info!(peer = self.conn.peer, error = %e, "closing client connection: TLS handshake failed");
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
                    tracing::warn!(peer = self.conn.peer, reason, "closing client connection");
                    return;
                }
            };
            if !self.conn.auth.is_open() {
                let (response, next) = super::sasl::before_authentication(&mut self.conn, frame).await;
                let sent = self.send(response).await.map_err(|e| format!("send: {e}"));
                if let Err(reason) = sent.and(next) {
                    tracing::info!(
                        peer = self.conn.peer,
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
            let response = match decode_request(frame) {
                Ok((header, request)) => handlers::handle(&mut self.conn, header, request).await,
                Err(RequestError::UnsupportedVersion {
                    api: ServedApi::ApiVersions,
                    correlation_id,
                    ..
                }) => handlers::unsupported_api_versions(correlation_id),
                Err(e) => {
                    tracing::warn!(peer = self.conn.peer, error = %e, "closing client connection after a request we cannot take");
                    return;
                }
            };
            if let Err(e) = self.send(response).await {
                tracing::debug!(peer = self.conn.peer, error = %e, "client connection ended");
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
        let max_request_bytes = self.conn.settings.max_request_bytes;
        let (min, max) = match (self.conn.auth.is_open(), self.conn.auth.expects_raw_token()) {
            (true, _) => (REQUEST_HEADER_BYTES_MIN, max_request_bytes),
            (false, raw) => (
                if raw { 0 } else { REQUEST_HEADER_BYTES_MIN },
                MAX_UNAUTHENTICATED_REQUEST_BYTES.min(max_request_bytes),
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

    /// Writes a handler's answer.
    async fn send(&mut self, response: Response) -> std::io::Result<()> {
        match response {
            Response::Frame(frame) => {
                self.stream.write_all(&frame).await?;
                self.stream.flush().await
            }
            Response::Fetch(response) => self.send_fetch_response(response).await,
            Response::RawToken(token) => {
                let mut frame = Vec::with_capacity(4 + token.len());
                frame.extend_from_slice(&(token.len() as i32).to_be_bytes());
                frame.extend_from_slice(&token);
                self.stream.write_all(&frame).await?;
                self.stream.flush().await
            }
            Response::None => Ok(()),
            Response::Unencodable(e) => Err(std::io::Error::other(e)),
        }
    }

    /// Sends a Fetch response: its encoded fields, and the records from
    /// their segment files.
    async fn send_fetch_response(&mut self, response: EncodedFetchResponse) -> std::io::Result<()> {
        let mut at = 0;
        for (position, records) in &response.records {
            self.stream.write_all(&response.bytes[at..*position]).await?;
            if self.conn.settings.zero_copy && self.stream.plain().is_some() {
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
