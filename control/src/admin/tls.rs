//! The admin API's listener: accepted TCP connections handed to axum in
//! clear, or after a TLS handshake (rustls through tokio-rustls, with the
//! `[admin]` certificate and key, TLS 1.2/1.3) — so that bearer tokens
//! never travel in clear.
//!
//! Handshakes run in tasks of their own, off the accept path: a client
//! that stalls its handshake delays no other. Each is bounded by
//! [`TLS_HANDSHAKE_TIMEOUT`], and at most [`TLS_HANDSHAKES_IN_FLIGHT_MAX`]
//! run at once (more connections are closed at once). A failed handshake
//! (a client in clear, an unknown CA) closes the connection, logged at
//! debug.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to complete its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes under way (or done and not yet taken by axum) at most.
pub const TLS_HANDSHAKES_IN_FLIGHT_MAX: usize = 64;

/// The pause after an accept error other than a connection's own (out of
/// file descriptors, say), as axum's own listener makes.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// A connection as axum reads and writes it, in clear or TLS.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// The client's address of a connection: what the admin API authorizes
/// a principal's host with.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, AdminListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, AdminListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

type Handshaken = (TlsStream<TcpStream>, SocketAddr);

/// The TLS side of an [`AdminListener`].
struct Tls {
    acceptor: TlsAcceptor,
    done: async_channel::Sender<Handshaken>,
    handshaken: async_channel::Receiver<Handshaken>,
    in_flight: Arc<AtomicUsize>,
}

/// The admin API's listener (see the module documentation).
pub struct AdminListener {
    tcp: TcpListener,
    tls: Option<Tls>,
}

impl AdminListener {
    /// Connections of `tcp`, through TLS with `tls` when given.
    pub fn new(tcp: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let tls = tls.map(|config| {
            // Room for every handshake in flight: a finished one never waits to be queued.
            let (done, handshaken) = async_channel::bounded(TLS_HANDSHAKES_IN_FLIGHT_MAX);
            Tls {
                acceptor: TlsAcceptor::from(config),
                done,
                handshaken,
                in_flight: Arc::default(),
            }
        });
        Self { tcp, tls }
    }

    async fn accept_tcp(&self) -> (TcpStream, SocketAddr) {
        loop {
            match self.tcp.accept().await {
                Ok(accepted) => return accepted,
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    tracing::warn!("admin API: accept failed: {e}");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            }
        }
    }
}

impl Tls {
    /// Starts the handshake of `stream` in a task of its own, or closes
    /// it when [`TLS_HANDSHAKES_IN_FLIGHT_MAX`] are under way.
    fn start_handshake(&self, stream: TcpStream, peer: SocketAddr) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= TLS_HANDSHAKES_IN_FLIGHT_MAX {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(%peer, "admin API: too many TLS handshakes under way; connection closed");
            return;
        }
        let (acceptor, done, in_flight) = (self.acceptor.clone(), self.done.clone(), Arc::clone(&self.in_flight));
        tokio::spawn(async move {
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                // Err: the server is stopping.
                Ok(Ok(tls)) => drop(done.send((tls, peer)).await),
                Ok(Err(e)) => tracing::debug!(%peer, "admin API: TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "admin API: no TLS handshake within {TLS_HANDSHAKE_TIMEOUT:?}"),
            }
            in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

impl axum::serve::Listener for AdminListener {
    type Io = Box<dyn Stream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let Some(tls) = &self.tls else {
            let (stream, peer) = self.accept_tcp().await;
            return (Box::new(stream), peer);
        };
        loop {
            tokio::select! {
                (stream, peer) = self.accept_tcp() => tls.start_handshake(stream, peer),
                Ok((stream, peer)) = tls.handshaken.recv() => return (Box::new(stream), peer),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// Errors of one connection (it went away before it was accepted), not
/// of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}
