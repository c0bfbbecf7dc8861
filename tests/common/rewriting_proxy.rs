//! A TCP proxy in front of one broker that relays whole Kafka frames and
//! hands every response, with its request's API key and version, to a
//! rewrite function — to corrupt a batch, point the brokers of a Metadata
//! answer at the proxy, or change what the source says its cluster id is.
//! Real protocol bytes both ways; it lives as long as the test process.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{MetadataResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

pub const API_FETCH: i16 = 1;
pub const API_METADATA: i16 = 3;

/// Rewrites a response body (correlation id first) in place, given the
/// request's API key and version and the proxy's own address.
pub type Rewrite = Arc<dyn Fn(i16, i16, SocketAddr, &mut Vec<u8>) + Send + Sync>;

/// Largest frame read (a Fetch answer is bounded by the client's fetch.max.bytes).
const FRAME_BYTES_MAX: usize = 256 * 1024 * 1024;

/// One size-prefixed Kafka frame (at least a correlation id).
pub fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = usize::try_from(i32::from_be_bytes(len)).unwrap_or(0);
    if !(4..=FRAME_BYTES_MAX).contains(&len) {
        return Err(std::io::Error::other(format!("frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok(body)
}

pub fn write_frame(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    s.write_all(&(body.len() as i32).to_be_bytes())?;
    s.write_all(body)
}

/// Decodes a Metadata response body, lets `edit` change it and encodes it
/// again at the same version.
pub fn edit_metadata(body: &[u8], version: i16, edit: impl FnOnce(&mut MetadataResponse)) -> Vec<u8> {
    edit_response(body, version, edit)
}

/// Decodes a response body of type `R`, lets `edit` change it and encodes
/// it again at the same version.
pub fn edit_response<R: Decodable + Encodable + HeaderVersion>(
    body: &[u8],
    version: i16,
    edit: impl FnOnce(&mut R),
) -> Vec<u8> {
    let header_version = R::header_version(version);
    let mut buf = Bytes::copy_from_slice(body);
    let header = ResponseHeader::decode(&mut buf, header_version).expect("response header");
    let mut response = R::decode(&mut buf, version).expect("response body");
    edit(&mut response);
    let mut out = BytesMut::new();
    header.encode(&mut out, header_version).unwrap();
    response.encode(&mut out, version).unwrap();
    out.to_vec()
}

/// Relays one client connection to the broker, rewriting its responses.
fn relay(mut client: TcpStream, upstream: SocketAddr, proxy: SocketAddr, rewrite: Rewrite) {
    let Ok(mut server) = TcpStream::connect(upstream) else {
        return;
    };
    let inflight: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let requests = Arc::clone(&inflight);
    std::thread::spawn(move || {
        while let Ok(body) = read_frame(&mut client_in) {
            let key = i16::from_be_bytes([body[0], body[1]]);
            let version = i16::from_be_bytes([body[2], body[3]]);
            let correlation = i32::from_be_bytes(body[4..8].try_into().unwrap());
            requests.lock().unwrap().insert(correlation, (key, version));
            if write_frame(&mut server_out, &body).is_err() {
                return;
            }
        }
    });
    while let Ok(mut body) = read_frame(&mut server) {
        let correlation = i32::from_be_bytes(body[..4].try_into().unwrap());
        let request = inflight.lock().unwrap().remove(&correlation);
        if let Some((key, version)) = request {
            rewrite(key, version, proxy, &mut body);
        }
        if write_frame(&mut client, &body).is_err() {
            return;
        }
    }
}

/// Starts the proxy in front of `upstream`; returns where it listens.
pub fn start(upstream: SocketAddr, rewrite: Rewrite) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let rewrite = Arc::clone(&rewrite);
            std::thread::spawn(move || relay(client, upstream, proxy, rewrite));
        }
    });
    proxy
}
