//! A scripted Kafka broker for the control plane's unit tests: it reads
//! request frames on a glommio listener and answers each with whatever the
//! test's [`Answer`] encodes, so sync rounds can be driven against exact
//! protocol answers (errors, old versions, batched replies).

use std::cell::RefCell;
use std::rc::Rc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpListener;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

/// What a scripted broker answers: the response body for one request
/// (`buf` is positioned after the request header).
pub trait Answer {
    fn answer(&mut self, api: ApiKey, version: i16, buf: &mut &[u8]) -> Vec<u8>;
}

/// Serves `fake` on `listener`, one task per connection, until the
/// listener fails.
pub async fn serve<A: Answer + 'static>(listener: TcpListener, fake: Rc<RefCell<A>>) {
    while let Ok(mut stream) = listener.accept().await {
        let fake = Rc::clone(&fake);
        glommio::spawn_local(async move {
            loop {
                let mut len = [0u8; 4];
                if stream.read_exact(&mut len).await.is_err() {
                    return;
                }
                let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
                stream.read_exact(&mut frame).await.unwrap();
                let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let mut buf = frame.as_slice();
                let header = RequestHeader::decode(&mut buf, api.request_header_version(version)).unwrap();
                let body = fake.borrow_mut().answer(api, version, &mut buf);
                let mut out = vec![0u8; 4];
                ResponseHeader::default()
                    .with_correlation_id(header.correlation_id)
                    .encode(&mut out, api.response_header_version(version))
                    .unwrap();
                out.extend_from_slice(&body);
                let n = (out.len() - 4) as i32;
                out[..4].copy_from_slice(&n.to_be_bytes());
                stream.write_all(&out).await.unwrap();
            }
        })
        .detach();
    }
}
