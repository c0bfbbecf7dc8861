//! A TCP proxy in front of every broker of a cluster that a test can cut
//! off at once, as a disaster cuts a destination off its source: one
//! loopback port per broker, Metadata and FindCoordinator answers pointed at
//! those ports (so whoever bootstraps through it reaches the cluster only
//! through it), and two ways to lose the cluster: [`CutProxy::cut`] shuts
//! every relayed connection down both ways and closes the ports, so new
//! connections are refused (the cluster is gone, its hosts answer);
//! [`CutProxy::silence`] keeps every connection open and accepts new ones
//! but relays nothing more (a network partition: nothing answers, nothing
//! is refused). The cluster itself stays up: the test can still read its
//! true state.
//!
//! Plain threads, one per direction of a connection; each ends with its
//! connection, and the accept loops end at the cut (or with the process).
//! Real protocol bytes both ways; only those two answers are re-encoded.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, FindCoordinatorResponse, MetadataResponse};
use kafka_protocol::protocol::StrBytes;

use super::rewriting_proxy::{edit_response, read_frame, write_frame};

/// How often an accept loop looks at the cut flag.
const ACCEPT_POLL: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Shared {
    cut: AtomicBool,
    silent: AtomicBool,
    /// Requests, or their answers, not relayed since the silence, by API key.
    swallowed: Mutex<HashMap<i16, usize>>,
    /// Both sockets of every relayed connection, for the cut.
    sockets: Mutex<Vec<TcpStream>>,
    /// Broker "host:port" → the proxy's port for it.
    ports: HashMap<String, SocketAddr>,
}

pub struct CutProxy {
    /// The proxy's ports, as a bootstrap list.
    pub bootstrap: String,
    shared: Arc<Shared>,
}

impl CutProxy {
    /// Listens on one loopback port per broker address in `brokers`.
    pub fn start(brokers: &[String]) -> Self {
        let listeners: Vec<(String, TcpListener)> = brokers
            .iter()
            .map(|b| (b.clone(), TcpListener::bind("127.0.0.1:0").expect("bind a proxy port")))
            .collect();
        let shared = Arc::new(Shared {
            ports: listeners
                .iter()
                .map(|(b, l)| (b.clone(), l.local_addr().unwrap()))
                .collect(),
            ..Shared::default()
        });
        let bootstrap = listeners
            .iter()
            .map(|(_, l)| l.local_addr().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(",");
        for (upstream, listener) in listeners {
            let shared = Arc::clone(&shared);
            listener.set_nonblocking(true).unwrap();
            std::thread::spawn(move || accept_until_cut(listener, upstream, shared));
        }
        Self { bootstrap, shared }
    }

    /// Relays nothing more from now on, either way; connections stay open
    /// and new ones are accepted, and held without an answer.
    pub fn silence(&self) {
        self.shared.silent.store(true, Ordering::SeqCst);
    }

    /// How many requests with `api_key` (or their answers) the silence has
    /// swallowed.
    pub fn swallowed(&self, api_key: i16) -> usize {
        self.shared
            .swallowed
            .lock()
            .unwrap()
            .get(&api_key)
            .copied()
            .unwrap_or(0)
    }

    /// Drops every connection (both ways, mid-frame or not) and refuses
    /// new ones from now on.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        for s in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Accepts until the cut, then closes the port (connections are refused).
fn accept_until_cut(listener: TcpListener, upstream: String, shared: Arc<Shared>) {
    while !shared.cut.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) if shared.silent.load(Ordering::SeqCst) => {
                // Held open, never answered, until the cut.
                shared.sockets.lock().unwrap().push(client);
            }
            Ok((client, _)) => {
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let mut sockets = shared.sockets.lock().unwrap();
                // Checked under the lock the cut drains: none slips past it.
                if shared.cut.load(Ordering::SeqCst) {
                    break;
                }
                sockets.push(client.try_clone().unwrap());
                sockets.push(server.try_clone().unwrap());
                drop(sockets);
                relay(client, server, Arc::clone(&shared));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Relays one connection: requests as they are, answers with the brokers'
/// addresses pointed at the proxy.
fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let asked: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let requests = Arc::clone(&asked);
    let to_server = Arc::clone(&shared);
    std::thread::spawn(move || {
        while let Ok(frame) = read_frame(&mut client_in) {
            let key = i16::from_be_bytes([frame[0], frame[1]]);
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            let correlation = i32::from_be_bytes(frame[4..8].try_into().unwrap());
            requests.lock().unwrap().insert(correlation, (key, version));
            if to_server.silent.load(Ordering::SeqCst) {
                *to_server.swallowed.lock().unwrap().entry(key).or_default() += 1;
                continue;
            }
            if write_frame(&mut server_out, &frame).is_err() {
                break;
            }
        }
        let _ = server_out.shutdown(std::net::Shutdown::Both);
    });
    let (mut client_out, mut server_in) = (client, server);
    std::thread::spawn(move || {
        while let Ok(mut body) = read_frame(&mut server_in) {
            let correlation = i32::from_be_bytes(body[..4].try_into().unwrap());
            let request = asked.lock().unwrap().remove(&correlation);
            if shared.silent.load(Ordering::SeqCst) {
                if let Some((key, _)) = request {
                    *shared.swallowed.lock().unwrap().entry(key).or_default() += 1;
                }
                continue;
            }
            if let Some((key, version)) = request {
                body = point_at_proxy(key, version, body, &shared.ports);
            }
            if write_frame(&mut client_out, &body).is_err() {
                break;
            }
        }
        let _ = client_out.shutdown(std::net::Shutdown::Both);
    });
}

/// Metadata's brokers and FindCoordinator's coordinators, at the proxy.
fn point_at_proxy(key: i16, version: i16, body: Vec<u8>, ports: &HashMap<String, SocketAddr>) -> Vec<u8> {
    let moved = |host: &mut StrBytes, port: &mut i32| {
        if let Some(to) = ports.get(&format!("{host}:{port}")) {
            *host = StrBytes::from_string(to.ip().to_string());
            *port = i32::from(to.port());
        }
    };
    if key == ApiKey::Metadata as i16 {
        edit_response::<MetadataResponse>(&body, version, |r| {
            for b in &mut r.brokers {
                moved(&mut b.host, &mut b.port);
            }
        })
    } else if key == ApiKey::FindCoordinator as i16 {
        edit_response::<FindCoordinatorResponse>(&body, version, |r| {
            moved(&mut r.host, &mut r.port);
            for c in &mut r.coordinators {
                moved(&mut c.host, &mut c.port);
            }
        })
    } else {
        body
    }
}
