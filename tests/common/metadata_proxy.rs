//! A TCP proxy in front of one broker that forwards Kafka frames as they
//! are and rewrites the Metadata answers the control plane gets (client id
//! ending in `-control`) as a script says, per topic: [`Rule::Deleted`]
//! (absent by name and by id, left out of listings — what a lagging or
//! just-restarted broker says), [`Rule::Denied`] (TOPIC_AUTHORIZATION_FAILED
//! by name and by id, left out of listings — a revoked DESCRIBE ACL) or
//! [`Rule::Unlisted`] (only left out of all-topics listings). Every Metadata
//! answer, anyone's, points its brokers at the proxy, so the agent reaches
//! the broker only through it. Real protocol bytes both ways: requests are
//! decoded to learn what was asked, answers decoded, edited and encoded
//! with `kafka-protocol`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const UNKNOWN_TOPIC_ID: i16 = 100;

/// What the control plane is told about a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Deleted,
    Denied,
    Unlisted,
}

#[derive(Default)]
struct Script {
    rules: HashMap<String, Rule>,
    /// Topic ids seen in answers (by-id answers name no topic when denied).
    names: HashMap<[u8; 16], String>,
    /// Control-plane answers the rules changed, and when the first was.
    rewritten: usize,
    first_rewrite: Option<Instant>,
}

/// What one Metadata request asked for.
#[derive(Clone)]
struct Asked {
    version: i16,
    control: bool,
    /// All topics (a listing), else by name or by id.
    all: bool,
    by_id: bool,
}

pub struct MetadataProxy {
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    /// Where new connections go (a restarted broker may listen elsewhere).
    upstream: Arc<Mutex<SocketAddr>>,
}

impl MetadataProxy {
    /// Listens on a loopback port in front of `upstream` (one broker); lives
    /// as long as the test process.
    pub fn start(upstream: &str) -> Self {
        let upstream = Arc::new(Mutex::new(upstream.parse().expect("upstream host:port")));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let script: Arc<Mutex<Script>> = Arc::default();
        let (shared, target) = (Arc::clone(&script), Arc::clone(&upstream));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let script = Arc::clone(&shared);
                let upstream = *target.lock().unwrap();
                std::thread::spawn(move || relay(client, upstream, addr, script));
            }
        });
        Self { addr, script, upstream }
    }

    /// Sends new connections to `upstream` from now on.
    pub fn set_upstream(&self, upstream: &str) {
        *self.upstream.lock().unwrap() = upstream.parse().expect("upstream host:port");
    }

    /// Sets (or with `None` clears) what the control plane is told of `topic`.
    pub fn set(&self, topic: &str, rule: Option<Rule>) {
        let mut script = self.script.lock().unwrap();
        match rule {
            Some(rule) => script.rules.insert(topic.to_owned(), rule),
            None => script.rules.remove(topic),
        };
        script.rewritten = 0;
        script.first_rewrite = None;
    }

    /// Control-plane answers rewritten since the last [`set`](Self::set),
    /// and when the first of them was.
    pub fn rewritten(&self) -> (usize, Option<Instant>) {
        let script = self.script.lock().unwrap();
        (script.rewritten, script.first_rewrite)
    }
}

fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

fn write_frame(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    s.write_all(&(body.len() as i32).to_be_bytes())?;
    s.write_all(body)
}

/// Decodes a Metadata request frame (header included).
fn asked(frame: &[u8], version: i16) -> Option<Asked> {
    let mut buf = Bytes::copy_from_slice(frame);
    let header = RequestHeader::decode(&mut buf, ApiKey::Metadata.request_header_version(version)).ok()?;
    let request = MetadataRequest::decode(&mut buf, version).ok()?;
    let control = header
        .client_id
        .as_ref()
        .is_some_and(|id| id.to_string().ends_with("-control"));
    Some(Asked {
        version,
        control,
        all: request.topics.is_none(),
        by_id: request
            .topics
            .as_ref()
            .is_some_and(|ts| ts.iter().any(|t| t.name.is_none())),
    })
}

fn relay(mut client: TcpStream, upstream: SocketAddr, proxy: SocketAddr, script: Arc<Mutex<Script>>) {
    let Ok(mut server) = TcpStream::connect(upstream) else {
        return;
    };
    let inflight: Arc<Mutex<HashMap<i32, Asked>>> = Arc::default();
    let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let requests = Arc::clone(&inflight);
    std::thread::spawn(move || {
        while let Ok(frame) = read_frame(&mut client_in) {
            let key = i16::from_be_bytes([frame[0], frame[1]]);
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            let correlation = i32::from_be_bytes(frame[4..8].try_into().unwrap());
            if key == ApiKey::Metadata as i16
                && let Some(asked) = asked(&frame, version)
            {
                requests.lock().unwrap().insert(correlation, asked);
            }
            if write_frame(&mut server_out, &frame).is_err() {
                break;
            }
        }
        let _ = server_out.shutdown(std::net::Shutdown::Both);
    });
    while let Ok(mut body) = read_frame(&mut server) {
        let correlation = i32::from_be_bytes(body[..4].try_into().unwrap());
        let asked = inflight.lock().unwrap().remove(&correlation);
        if let Some(asked) = asked {
            body = rewrite(body, &asked, proxy, &script);
        }
        if write_frame(&mut client, &body).is_err() {
            break;
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
}

/// Points the brokers at the proxy and, for the control plane, applies the
/// script.
fn rewrite(body: Vec<u8>, asked: &Asked, proxy: SocketAddr, script: &Mutex<Script>) -> Vec<u8> {
    let header_version = MetadataResponse::header_version(asked.version);
    let mut buf = Bytes::from(body);
    let header = ResponseHeader::decode(&mut buf, header_version).expect("metadata header");
    let mut response = MetadataResponse::decode(&mut buf, asked.version).expect("metadata body");
    for broker in &mut response.brokers {
        broker.host = StrBytes::from_string(proxy.ip().to_string());
        broker.port = i32::from(proxy.port());
    }
    let mut script = script.lock().unwrap();
    for t in &response.topics {
        if let Some(name) = &t.name
            && !t.topic_id.is_nil()
        {
            script.names.insert(*t.topic_id.as_bytes(), name.to_string());
        }
    }
    if asked.control && !script.rules.is_empty() {
        let before = response.topics.len();
        let mut changed = false;
        let rule_of = |t: &kafka_protocol::messages::metadata_response::MetadataResponseTopic| {
            let name = t
                .name
                .as_ref()
                .map(|n| n.to_string())
                .or_else(|| script.names.get(t.topic_id.as_bytes()).cloned())?;
            script.rules.get(&name).copied()
        };
        if asked.all {
            response.topics.retain(|t| rule_of(t).is_none());
            changed = response.topics.len() != before;
        } else {
            for t in &mut response.topics {
                let code = match rule_of(t) {
                    Some(Rule::Deleted) if asked.by_id => UNKNOWN_TOPIC_ID,
                    Some(Rule::Deleted) => UNKNOWN_TOPIC_OR_PARTITION,
                    Some(Rule::Denied) => TOPIC_AUTHORIZATION_FAILED,
                    Some(Rule::Unlisted) | None => continue,
                };
                t.error_code = code;
                t.partitions.clear();
                if asked.by_id {
                    t.name = None;
                } else {
                    t.topic_id = Default::default();
                }
                changed = true;
            }
        }
        if changed {
            script.rewritten += 1;
            script.first_rewrite.get_or_insert_with(Instant::now);
        }
    }
    let mut out = BytesMut::new();
    header.encode(&mut out, header_version).unwrap();
    response.encode(&mut out, asked.version).unwrap();
    out.to_vec()
}
