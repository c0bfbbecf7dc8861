//! A writer for Kafka Fetch responses, versions 4–16, that never touches
//! record bytes: it encodes every other field into one buffer and leaves a
//! placeholder ([`RecordsRef`]) where each partition's records go, so the
//! caller can send the header bytes and the records straight from the
//! segment file (sendfile) one after the other. Sizes are known up front,
//! so the frame's size prefix is exact before a byte is sent.

use ringmirror_storage::log::ReadSlice;

/// First flexible (compact encodings, tagged fields) Fetch version.
const FIRST_FLEXIBLE_VERSION: i16 = 12;
/// From this version on, topics are identified by id.
const FIRST_TOPIC_ID_VERSION: i16 = 13;
/// Tagged field 0 of a partition: the diverging epoch.
const TAG_DIVERGING_EPOCH: u32 = 0;

/// One partition's answer.
#[derive(Debug, Clone, Default)]
pub struct PartitionAnswer {
    pub partition: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// (epoch, end offset) when the fetcher's last fetched epoch diverges.
    pub diverging_epoch: Option<(i32, i64)>,
    /// (producer id, first offset); `None` is sent as null (READ_UNCOMMITTED).
    pub aborted_transactions: Option<Vec<(i64, i64)>>,
    /// The records, as a file range; `None` sends an empty records field.
    pub records: Option<ReadSlice>,
}

/// How a topic is named in the response.
#[derive(Debug, Clone, Copy)]
pub enum TopicKey<'a> {
    Name(&'a str),
    Id([u8; 16]),
}

/// The encoded response: `bytes` with records spliced in at positions.
#[derive(Debug, Default)]
pub struct EncodedFetchResponse {
    /// Starts with the 4-byte size prefix.
    pub bytes: Vec<u8>,
    /// (position in `bytes` where the records go, the records), in order.
    pub records: Vec<(usize, ReadSlice)>,
}

impl EncodedFetchResponse {
    /// Total bytes on the wire, prefix included.
    pub fn wire_len(&self) -> usize {
        self.bytes.len() + self.records.iter().map(|(_, r)| r.len).sum::<usize>()
    }

    /// The whole frame in one buffer (tests, and the copying send path).
    pub fn to_vec(&self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.wire_len());
        let mut at = 0;
        for (position, records) in &self.records {
            out.extend_from_slice(&self.bytes[at..*position]);
            out.extend_from_slice(&records.to_vec()?);
            at = *position;
        }
        out.extend_from_slice(&self.bytes[at..]);
        Ok(out)
    }
}

struct Encoder {
    buf: Vec<u8>,
    flexible: bool,
}

impl Encoder {
    fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }
    /// An array (or a bytes field's) length; `None` is null.
    fn len(&mut self, n: Option<usize>) {
        match (n, self.flexible) {
            (None, true) => self.uvarint(0),
            (None, false) => self.i32(-1),
            (Some(n), true) => self.uvarint(n as u32 + 1),
            (Some(n), false) => self.i32(n as i32),
        }
    }
    fn string(&mut self, s: &str) {
        if self.flexible {
            self.uvarint(s.len() as u32 + 1);
        } else {
            self.i16(s.len() as i16);
        }
        self.buf.extend_from_slice(s.as_bytes());
    }
    fn no_tags(&mut self) {
        if self.flexible {
            self.uvarint(0);
        }
    }
}

/// Builds a Fetch response for `version` (4–16).
pub struct FetchResponseWriter {
    enc: Encoder,
    version: i16,
    records: Vec<(usize, ReadSlice)>,
}

impl FetchResponseWriter {
    /// Starts the frame: size placeholder, response header, top-level fields
    /// and the topic count.
    pub fn new(version: i16, correlation_id: i32, error_code: i16, session_id: i32, topics: usize) -> Self {
        let flexible = version >= FIRST_FLEXIBLE_VERSION;
        let mut enc = Encoder {
            buf: Vec::with_capacity(256),
            flexible,
        };
        enc.i32(0);
        enc.i32(correlation_id);
        enc.no_tags();
        enc.i32(0); // throttle_time_ms
        if version >= 7 {
            enc.i16(error_code);
            enc.i32(session_id);
        }
        enc.len(Some(topics));
        Self {
            enc,
            version,
            records: Vec::new(),
        }
    }

    /// Starts a topic with `partitions` partitions to follow.
    pub fn topic(&mut self, key: TopicKey<'_>, partitions: usize) {
        match key {
            TopicKey::Id(id) if self.version >= FIRST_TOPIC_ID_VERSION => self.enc.buf.extend_from_slice(&id),
            TopicKey::Name(name) if self.version < FIRST_TOPIC_ID_VERSION => self.enc.string(name),
            TopicKey::Id(_) => self.enc.string(""),
            TopicKey::Name(_) => self.enc.buf.extend_from_slice(&[0; 16]),
        }
        self.enc.len(Some(partitions));
    }

    pub fn partition(&mut self, p: PartitionAnswer) {
        let e = &mut self.enc;
        e.i32(p.partition);
        e.i16(p.error_code);
        e.i64(p.high_watermark);
        e.i64(p.last_stable_offset);
        if self.version >= 5 {
            e.i64(p.log_start_offset);
        }
        e.len(p.aborted_transactions.as_ref().map(Vec::len));
        for &(producer_id, first_offset) in p.aborted_transactions.iter().flatten() {
            e.i64(producer_id);
            e.i64(first_offset);
            e.no_tags();
        }
        if self.version >= 11 {
            e.i32(-1); // preferred_read_replica
        }
        let records_len = p.records.as_ref().map_or(0, |r| r.len);
        e.len(Some(records_len));
        if let Some(records) = p.records.filter(|r| r.len > 0) {
            self.records.push((e.buf.len(), records));
        }
        let diverging = p.diverging_epoch.filter(|_| e.flexible);
        if e.flexible {
            e.uvarint(u32::from(diverging.is_some()));
        }
        if let Some((epoch, end_offset)) = diverging {
            e.uvarint(TAG_DIVERGING_EPOCH);
            e.uvarint(4 + 8 + 1);
            e.i32(epoch);
            e.i64(end_offset);
            e.uvarint(0);
        }
    }

    /// Ends a topic (its tagged fields).
    pub fn end_topic(&mut self) {
        self.enc.no_tags();
    }

    /// Ends the response and fixes the size prefix.
    pub fn finish(mut self) -> EncodedFetchResponse {
        self.enc.no_tags();
        let records: usize = self.records.iter().map(|(_, r)| r.len).sum();
        let size = self.enc.buf.len() - 4 + records;
        self.enc.buf[..4].copy_from_slice(&(size as i32).to_be_bytes());
        EncodedFetchResponse {
            bytes: self.enc.buf,
            records: self.records,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use bytes::Bytes;
    use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;

    use super::*;

    fn slice(content: &[u8]) -> ReadSlice {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"xx").unwrap();
        file.write_all(content).unwrap();
        ReadSlice {
            file: Arc::new(file),
            position: 2,
            len: content.len(),
            first_offset: 0,
            end_offset: 1,
        }
    }

    /// Our encoding, decoded by the kafka-protocol crate (an independent
    /// implementation of the schema), for every version we serve.
    #[test]
    fn kafka_protocol_reads_what_we_write() {
        for version in 4..=16 {
            let mut w = FetchResponseWriter::new(version, 99, 0, 0, 2);
            w.topic(TopicKey::Name("alpha"), 2);
            w.partition(PartitionAnswer {
                partition: 0,
                high_watermark: 10,
                last_stable_offset: 8,
                log_start_offset: 2,
                aborted_transactions: Some(vec![(7, 3)]),
                records: Some(slice(b"RECORDS-A")),
                diverging_epoch: Some((4, 6)),
                ..Default::default()
            });
            w.partition(PartitionAnswer {
                partition: 1,
                error_code: 1,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                ..Default::default()
            });
            w.end_topic();
            w.topic(TopicKey::Id([5; 16]), 1);
            w.partition(PartitionAnswer {
                partition: 3,
                records: Some(slice(b"B")),
                ..Default::default()
            });
            w.end_topic();
            let encoded = w.finish();
            let wire = encoded.to_vec().unwrap();
            assert_eq!(wire.len(), encoded.wire_len());
            assert_eq!(
                i32::from_be_bytes(wire[..4].try_into().unwrap()) as usize,
                wire.len() - 4
            );
            let mut body = Bytes::from(wire[4..].to_vec());
            let header = ResponseHeader::decode(&mut body, ApiKey::Fetch.response_header_version(version)).unwrap();
            assert_eq!(header.correlation_id, 99);
            let r = FetchResponse::decode(&mut body, version).unwrap();
            assert!(body.is_empty(), "v{version}: trailing bytes");
            assert_eq!(r.responses.len(), 2);
            let t = &r.responses[0];
            if version < 13 {
                assert_eq!(&*t.topic.0, "alpha");
            } else {
                assert_eq!(r.responses[1].topic_id.as_bytes(), &[5; 16]);
            }
            let p = &t.partitions[0];
            assert_eq!((p.high_watermark, p.last_stable_offset), (10, 8));
            if version >= 5 {
                assert_eq!(p.log_start_offset, 2);
            }
            let aborted = p.aborted_transactions.as_ref().unwrap();
            assert_eq!((aborted[0].producer_id.0, aborted[0].first_offset), (7, 3));
            assert_eq!(p.records.as_deref(), Some(&b"RECORDS-A"[..]));
            if version >= 12 {
                assert_eq!((p.diverging_epoch.epoch, p.diverging_epoch.end_offset), (4, 6));
            }
            assert_eq!(t.partitions[1].error_code, 1);
            assert!(t.partitions[1].aborted_transactions.is_none());
            assert_eq!(r.responses[1].partitions[0].records.as_deref(), Some(&b"B"[..]));
        }
    }
}
