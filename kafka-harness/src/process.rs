//! Child processes that never outlive their owner ([`ChildGuard`]), free
//! loopback ports, and the one Kafka request the harness makes itself (which
//! brokers a Metadata answer lists, to tell when a cluster is up).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// A child process that is killed (SIGKILL) and reaped when dropped, so a
/// failing test never leaves it running (see also [`ChildGuard::spawn`]).
pub struct ChildGuard {
    child: Option<std::process::Child>,
    what: String,
}

impl ChildGuard {
    /// Spawns `command` so that it is SIGKILLed when the spawning thread
    /// ends — even if this test process is killed and never runs `Drop`.
    pub fn spawn(command: &mut Command, what: impl Into<String>) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Ok(Self::new(command.spawn()?, what))
    }

    pub fn new(child: std::process::Child, what: impl Into<String>) -> Self {
        Self {
            child: Some(child),
            what: what.into(),
        }
    }

    pub fn child(&mut self) -> &mut std::process::Child {
        self.child.as_mut().expect("child not yet reaped")
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().expect("child not yet reaped").id()
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) with the pid of our own, not yet reaped child.
        let rc = unsafe { libc::kill(self.id() as libc::pid_t, signal) };
        assert_eq!(
            rc,
            0,
            "kill({}, {signal}) of {}: {}",
            self.id(),
            self.what,
            std::io::Error::last_os_error()
        );
    }

    /// Waits up to `timeout` for the child to exit; `None` if it did not.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child().try_wait().expect("wait for child") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, and reap it.
    pub fn kill(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("child not yet reaped");
        let _ = child.kill();
        child.wait().expect("reap killed child")
    }

    /// Whether the child is still running.
    pub fn is_running(&mut self) -> bool {
        self.child().try_wait().expect("wait for child").is_none()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                eprintln!("killing {} (pid {})", self.what, child.id());
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A free loopback address (the port is released for a server to bind).
pub fn free_addr() -> String {
    let probe = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    probe.local_addr().expect("its address").to_string()
}

/// The Metadata version asked for: KRaft brokers of Kafka 4.x answer it.
const METADATA_VERSION: i16 = 12;
/// Bounds the Metadata answer read.
const METADATA_RESPONSE_BYTES_MAX: usize = 1 << 20;

/// The broker ids the broker at `addr` lists in a Metadata answer (no topics).
pub(crate) fn metadata_broker_ids(addr: &str, timeout: Duration) -> std::io::Result<Vec<i32>> {
    let socket = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("no address for {addr}")))?;
    let mut stream = TcpStream::connect_timeout(&socket, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(METADATA_VERSION)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("ringmirror-kafka-harness")));
    let request = MetadataRequest::default().with_topics(Some(Vec::new()));
    let mut frame = BytesMut::from(&[0u8; 4][..]);
    header
        .encode(&mut frame, MetadataRequest::header_version(METADATA_VERSION))
        .map_err(std::io::Error::other)?;
    request
        .encode(&mut frame, METADATA_VERSION)
        .map_err(std::io::Error::other)?;
    let len = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    stream.write_all(&frame)?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > METADATA_RESPONSE_BYTES_MAX {
        return Err(std::io::Error::other(format!("Metadata answer of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    let mut body = Bytes::from(body);
    kafka_protocol::messages::ResponseHeader::decode(&mut body, MetadataResponse::header_version(METADATA_VERSION))
        .map_err(std::io::Error::other)?;
    let answer = MetadataResponse::decode(&mut body, METADATA_VERSION).map_err(std::io::Error::other)?;
    Ok(answer.brokers.iter().map(|b| b.node_id.0).collect())
}
