//! `DescribeClusterMirrors` (KIP-1279; API key 99, version 0, flexible):
//! hand-written encode and decode of the request and the response, for
//! both sides — the listener answers it, and the client asks a peer for
//! the last mirror epochs (LME) of its partitions before failing back.
//! `kafka-protocol` does not know this API yet.
//!
//! # Wire layout (our documented agent API)
//!
//! Field order and types are those of the KIP's prototype schemas
//! (`DescribeClusterMirrorsRequest.json` and
//! `DescribeClusterMirrorsResponse.json` in the forks where the KIP's
//! authors build it, `showuon/kafka` and `aiven/inkless`). The KIP is still
//! under discussion, so the layout may change. The request header is v2
//! and the response header v1, as for every flexible API. Compact arrays and
//! strings hold their length + 1 as an unsigned varint (0: null). Every
//! `_tagged_fields` section may hold tags we do not know; they are
//! skipped. Bytes a newer writer appends inside a known tag are ignored.
//!
//! ```text
//! Request (v0) =>
//!   mirror_names                   COMPACT_ARRAY of COMPACT_STRING
//!                                  (empty or null: every mirror; we write empty)
//!   include_authorized_operations  BOOLEAN
//!   _tagged_fields
//!     tag 0: cluster_id                 COMPACT_NULLABLE_STRING
//!            (the requesting cluster's id)
//!     tag 1: last_mirror_epoch_lookups  COMPACT_ARRAY of
//!              topic_id    UUID
//!              partitions  COMPACT_ARRAY of INT32
//!              _tagged_fields
//!
//! Response (v0) =>
//!   throttle_time_ms  INT32
//!   error_code        INT16
//!   error_message     COMPACT_NULLABLE_STRING
//!   mirrors           COMPACT_ARRAY of
//!     error_code             INT16
//!     mirror_name            COMPACT_STRING
//!     authorized_operations  INT32  (i32::MIN: not given)
//!     topics                 COMPACT_ARRAY of
//!       topic_name  COMPACT_STRING
//!       partitions  COMPACT_ARRAY of
//!         partition_index     INT32
//!         source_offset       INT64
//!         destination_offset  INT64
//!         lag                 INT64
//!         state               COMPACT_STRING
//!         retry_attempt       INT16
//!         error_message       COMPACT_NULLABLE_STRING
//!         last_mirror_epoch   INT32
//!         _tagged_fields
//!       _tagged_fields
//!     _tagged_fields
//!   _tagged_fields
//!     tag 0: last_mirror_epochs  COMPACT_ARRAY of
//!              topic_id    UUID
//!              partitions  COMPACT_ARRAY of
//!                partition_index    INT32
//!                last_mirror_epoch  INT32  (-1: none known)
//!                _tagged_fields
//!              _tagged_fields
//! ```
//!
//! Response tag 0 is where the lookups of request tag 1 are answered. The
//! prototype's topic entries carry no topic id, so answers keyed by topic
//! id need a place of their own. This one has the shape of the response
//! tag 0 (`LineageResults`) in one variant of the prototype (inkless). A
//! peer that does not know the tag skips it. Tagged fields are written only
//! when they hold something: a null cluster id and empty arrays are left
//! out.
//!
//! # Untrusted input
//!
//! Decoders read bytes from the network: every read is bounds-checked, and
//! every count is checked against the bytes left (an element takes at
//! least a known number of bytes) before anything is allocated. Errors name
//! the field and its byte position within the body. No input makes them
//! panic.

use bytes::BufMut;

pub use super::compact::EncodeError;
use super::compact::{MAX_STRING_LEN, write_array, write_nullable_string, write_string, write_uvarint};

/// Kafka's key for `DescribeClusterMirrors`.
pub const API_KEY: i16 = 99;
/// The only version: 0.
pub const VERSION: i16 = 0;
/// The most bytes an unsigned varint of 32 bits takes.
const MAX_UVARINT_LEN: usize = 5;
/// Smallest encodings, for checking counts against the bytes left: an
/// empty compact array or string, or an empty tagged-field section, is
/// one byte; a UUID is 16.
const MIN_LOOKUP_LEN: usize = 16 + 1 + 1;
const MIN_MIRROR_LEN: usize = 2 + 1 + 4 + 1 + 1;
const MIN_TOPIC_LEN: usize = 1 + 1 + 1;
const MIN_PARTITION_LEN: usize = 4 + 8 + 8 + 8 + 1 + 2 + 1 + 4 + 1;
const MIN_EPOCH_RESULT_LEN: usize = 16 + 1 + 1;
const MIN_PARTITION_EPOCH_LEN: usize = 4 + 4 + 1;

/// The request (see the module doc for its layout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeClusterMirrorsRequest {
    /// The mirrors to describe; empty: every mirror.
    pub mirror_names: Vec<String>,
    pub include_authorized_operations: bool,
    /// Tag 0: the requesting cluster's id, for LME lookups.
    pub cluster_id: Option<String>,
    /// Tag 1: the partitions whose LME the requester wants (failback).
    pub last_mirror_epoch_lookups: Vec<LastMirrorEpochLookup>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LastMirrorEpochLookup {
    pub topic_id: [u8; 16],
    pub partitions: Vec<i32>,
}

/// The response (see the module doc for its layout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeClusterMirrorsResponse {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
    pub mirrors: Vec<DescribedMirror>,
    /// Tag 0: the answers to the request's LME lookups.
    pub last_mirror_epochs: Vec<TopicLastMirrorEpochs>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedMirror {
    pub error_code: i16,
    pub mirror_name: String,
    pub authorized_operations: i32,
    pub topics: Vec<DescribedTopic>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedTopic {
    pub topic_name: String,
    pub partitions: Vec<DescribedPartition>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedPartition {
    pub partition_index: i32,
    /// The source's high watermark.
    pub source_offset: i64,
    /// Our log end offset.
    pub destination_offset: i64,
    pub lag: i64,
    /// The mirror partition state's name (e.g. `MIRRORING`).
    pub state: String,
    pub retry_attempt: i16,
    pub error_message: Option<String>,
    pub last_mirror_epoch: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicLastMirrorEpochs {
    pub topic_id: [u8; 16],
    pub partitions: Vec<PartitionLastMirrorEpoch>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionLastMirrorEpoch {
    pub partition_index: i32,
    pub last_mirror_epoch: i32,
}

/// Why a body could not be decoded. Positions count from the body's
/// first byte (after the header).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{field} at byte {position} needs {needed} bytes but only {available} remain")]
    Truncated {
        field: &'static str,
        position: usize,
        needed: usize,
        available: usize,
    },
    #[error("{field} at byte {position}: count {count} needs at least {needed} bytes but only {available} remain")]
    CountTooLarge {
        field: &'static str,
        position: usize,
        count: usize,
        needed: usize,
        available: usize,
    },
    #[error("{field} at byte {position}: {reason}")]
    Invalid {
        field: &'static str,
        position: usize,
        reason: &'static str,
    },
}

impl DescribeClusterMirrorsRequest {
    pub fn encode<B: BufMut>(&self, buf: &mut B) -> Result<(), EncodeError> {
        write_array(buf, "mirror_names", &self.mirror_names, |b, name| {
            write_string(b, "mirror_names[]", name)
        })?;
        buf.put_u8(u8::from(self.include_authorized_operations));
        let mut tags = Tags::default();
        if let Some(id) = &self.cluster_id {
            tags.add(0, |b| write_nullable_string(b, "cluster_id", Some(id)))?;
        }
        if !self.last_mirror_epoch_lookups.is_empty() {
            tags.add(1, |b| {
                write_array(
                    b,
                    "last_mirror_epoch_lookups",
                    &self.last_mirror_epoch_lookups,
                    |b, l| {
                        b.put_slice(&l.topic_id);
                        write_array(b, "last_mirror_epoch_lookups[].partitions", &l.partitions, |b, &p| {
                            b.put_i32(p);
                            Ok(())
                        })?;
                        write_uvarint(b, 0);
                        Ok(())
                    },
                )
            })?;
        }
        tags.write(buf)
    }

    /// Decodes a request body. Bytes after it are ignored, as Kafka does.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        // Null is accepted too: the prototype's schema had it nullable once.
        let mirror_names = r
            .array("mirror_names", 1, |r| r.string("mirror_names[]"))?
            .unwrap_or_default();
        let include_authorized_operations = r.bool("include_authorized_operations")?;
        let mut request = Self {
            mirror_names,
            include_authorized_operations,
            ..Self::default()
        };
        r.tagged_fields("request._tagged_fields", |tag, r| {
            match tag {
                0 => request.cluster_id = r.nullable_string("cluster_id")?,
                1 => {
                    request.last_mirror_epoch_lookups = r
                        .array("last_mirror_epoch_lookups", MIN_LOOKUP_LEN, |r| {
                            let topic_id = r.uuid("last_mirror_epoch_lookups[].topic_id")?;
                            let partitions = r.required_array("last_mirror_epoch_lookups[].partitions", 4, |r| {
                                r.i32("last_mirror_epoch_lookups[].partitions[]")
                            })?;
                            r.tagged_fields("last_mirror_epoch_lookups[]._tagged_fields", |_, _| Ok(()))?;
                            Ok(LastMirrorEpochLookup { topic_id, partitions })
                        })?
                        .unwrap_or_default();
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(request)
    }
}

impl DescribeClusterMirrorsResponse {
    pub fn encode<B: BufMut>(&self, buf: &mut B) -> Result<(), EncodeError> {
        buf.put_i32(self.throttle_time_ms);
        buf.put_i16(self.error_code);
        write_nullable_string(buf, "error_message", self.error_message.as_deref())?;
        write_array(buf, "mirrors", &self.mirrors, |b, m| {
            b.put_i16(m.error_code);
            write_string(b, "mirrors[].mirror_name", &m.mirror_name)?;
            b.put_i32(m.authorized_operations);
            write_array(b, "mirrors[].topics", &m.topics, |b, t| {
                write_string(b, "topics[].topic_name", &t.topic_name)?;
                write_array(b, "topics[].partitions", &t.partitions, write_partition)?;
                write_uvarint(b, 0);
                Ok(())
            })?;
            write_uvarint(b, 0);
            Ok(())
        })?;
        let mut tags = Tags::default();
        if !self.last_mirror_epochs.is_empty() {
            tags.add(0, |b| {
                write_array(b, "last_mirror_epochs", &self.last_mirror_epochs, |b, t| {
                    b.put_slice(&t.topic_id);
                    write_array(b, "last_mirror_epochs[].partitions", &t.partitions, |b, p| {
                        b.put_i32(p.partition_index);
                        b.put_i32(p.last_mirror_epoch);
                        write_uvarint(b, 0);
                        Ok(())
                    })?;
                    write_uvarint(b, 0);
                    Ok(())
                })
            })?;
        }
        tags.write(buf)
    }

    /// Decodes a response body. Bytes after it are ignored, as Kafka's
    /// clients do.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let throttle_time_ms = r.i32("throttle_time_ms")?;
        let error_code = r.i16("error_code")?;
        let error_message = r.nullable_string("error_message")?;
        let mirrors = r.required_array("mirrors", MIN_MIRROR_LEN, |r| {
            let error_code = r.i16("mirrors[].error_code")?;
            let mirror_name = r.string("mirrors[].mirror_name")?;
            let authorized_operations = r.i32("mirrors[].authorized_operations")?;
            let topics = r.required_array("mirrors[].topics", MIN_TOPIC_LEN, |r| {
                let topic_name = r.string("topics[].topic_name")?;
                let partitions = r.required_array("topics[].partitions", MIN_PARTITION_LEN, read_partition)?;
                r.tagged_fields("topics[]._tagged_fields", |_, _| Ok(()))?;
                Ok(DescribedTopic { topic_name, partitions })
            })?;
            r.tagged_fields("mirrors[]._tagged_fields", |_, _| Ok(()))?;
            Ok(DescribedMirror {
                error_code,
                mirror_name,
                authorized_operations,
                topics,
            })
        })?;
        let mut response = Self {
            throttle_time_ms,
            error_code,
            error_message,
            mirrors,
            last_mirror_epochs: Vec::new(),
        };
        r.tagged_fields("response._tagged_fields", |tag, r| {
            if tag == 0 {
                response.last_mirror_epochs = r.required_array("last_mirror_epochs", MIN_EPOCH_RESULT_LEN, |r| {
                    let topic_id = r.uuid("last_mirror_epochs[].topic_id")?;
                    let partitions =
                        r.required_array("last_mirror_epochs[].partitions", MIN_PARTITION_EPOCH_LEN, |r| {
                            let partition_index = r.i32("last_mirror_epochs[].partitions[].partition_index")?;
                            let last_mirror_epoch = r.i32("last_mirror_epochs[].partitions[].last_mirror_epoch")?;
                            r.tagged_fields("last_mirror_epochs[].partitions[]._tagged_fields", |_, _| Ok(()))?;
                            Ok(PartitionLastMirrorEpoch {
                                partition_index,
                                last_mirror_epoch,
                            })
                        })?;
                    r.tagged_fields("last_mirror_epochs[]._tagged_fields", |_, _| Ok(()))?;
                    Ok(TopicLastMirrorEpochs { topic_id, partitions })
                })?;
            }
            Ok(())
        })?;
        Ok(response)
    }
}

fn write_partition<B: BufMut>(b: &mut B, p: &DescribedPartition) -> Result<(), EncodeError> {
    b.put_i32(p.partition_index);
    b.put_i64(p.source_offset);
    b.put_i64(p.destination_offset);
    b.put_i64(p.lag);
    write_string(b, "partitions[].state", &p.state)?;
    b.put_i16(p.retry_attempt);
    write_nullable_string(b, "partitions[].error_message", p.error_message.as_deref())?;
    b.put_i32(p.last_mirror_epoch);
    write_uvarint(b, 0);
    Ok(())
}

fn read_partition(r: &mut Reader<'_>) -> Result<DescribedPartition, DecodeError> {
    let partition = DescribedPartition {
        partition_index: r.i32("partitions[].partition_index")?,
        source_offset: r.i64("partitions[].source_offset")?,
        destination_offset: r.i64("partitions[].destination_offset")?,
        lag: r.i64("partitions[].lag")?,
        state: r.string("partitions[].state")?,
        retry_attempt: r.i16("partitions[].retry_attempt")?,
        error_message: r.nullable_string("partitions[].error_message")?,
        last_mirror_epoch: r.i32("partitions[].last_mirror_epoch")?,
    };
    r.tagged_fields("partitions[]._tagged_fields", |_, _| Ok(()))?;
    Ok(partition)
}

/// A tagged-field section being built: each field's bytes are encoded
/// first, since its size precedes them.
#[derive(Default)]
struct Tags(Vec<(u32, Vec<u8>)>);

impl Tags {
    /// Adds a field; tags must be added in increasing order.
    fn add(
        &mut self,
        tag: u32,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        debug_assert!(self.0.last().is_none_or(|&(last, _)| last < tag), "tags out of order");
        let mut bytes = Vec::new();
        write(&mut bytes)?;
        self.0.push((tag, bytes));
        Ok(())
    }

    fn write<B: BufMut>(self, buf: &mut B) -> Result<(), EncodeError> {
        // At most a few known tags: the count always fits.
        write_uvarint(buf, self.0.len() as u32);
        for (tag, bytes) in self.0 {
            write_uvarint(buf, tag);
            let len = u32::try_from(bytes.len()).map_err(|_| EncodeError {
                field: "_tagged_fields",
                len: bytes.len(),
                max: u32::MAX as usize,
            })?;
            write_uvarint(buf, len);
            buf.put_slice(&bytes);
        }
        Ok(())
    }
}

/// A bounds-checked cursor over a body (or over one tagged field of it:
/// then `buf` ends where the field does, and positions stay those of the
/// body).
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    fn left(&self) -> usize {
        self.buf.len() - self.at
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.left() {
            return Err(DecodeError::Truncated {
                field,
                position: self.at,
                needed: n,
                available: self.left(),
            });
        }
        let bytes = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn fixed<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        self.fixed(field).map(i16::from_be_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.fixed(field).map(i32::from_be_bytes)
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.fixed(field).map(i64::from_be_bytes)
    }

    /// Kafka reads any non-zero byte as true.
    fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        self.fixed::<1>(field).map(|[b]| b != 0)
    }

    fn uuid(&mut self, field: &'static str) -> Result<[u8; 16], DecodeError> {
        self.fixed(field)
    }

    fn invalid(&self, field: &'static str, position: usize, reason: &'static str) -> DecodeError {
        DecodeError::Invalid {
            field,
            position,
            reason,
        }
    }

    fn uvarint(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let start = self.at;
        let mut value: u64 = 0;
        for i in 0..MAX_UVARINT_LEN {
            let [byte] = self.fixed::<1>(field)?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return u32::try_from(value).map_err(|_| self.invalid(field, start, "varint exceeds 32 bits"));
            }
        }
        Err(self.invalid(field, start, "varint longer than 5 bytes"))
    }

    /// A compact length: `None` for null.
    fn compact_len(&mut self, field: &'static str) -> Result<Option<usize>, DecodeError> {
        Ok(self.uvarint(field)?.checked_sub(1).map(|n| n as usize))
    }

    fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        let start = self.at;
        let Some(len) = self.compact_len(field)? else {
            return Ok(None);
        };
        if len > MAX_STRING_LEN {
            return Err(self.invalid(field, start, "string longer than 32767 bytes"));
        }
        let bytes = self.take(len, field)?;
        let s = std::str::from_utf8(bytes).map_err(|_| self.invalid(field, start, "not UTF-8"))?;
        Ok(Some(s.to_owned()))
    }

    fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let start = self.at;
        self.nullable_string(field)?
            .ok_or_else(|| self.invalid(field, start, "null where a string is required"))
    }

    /// A compact array whose elements take at least `min_len` bytes each:
    /// the count is checked against the bytes left before any allocation.
    fn array<T>(
        &mut self,
        field: &'static str,
        min_len: usize,
        mut read: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<Vec<T>>, DecodeError> {
        let start = self.at;
        let Some(count) = self.compact_len(field)? else {
            return Ok(None);
        };
        let needed = count.saturating_mul(min_len);
        if needed > self.left() {
            return Err(DecodeError::CountTooLarge {
                field,
                position: start,
                count,
                needed,
                available: self.left(),
            });
        }
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(read(self)?);
        }
        Ok(Some(items))
    }

    fn required_array<T>(
        &mut self,
        field: &'static str,
        min_len: usize,
        read: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let start = self.at;
        self.array(field, min_len, read)?
            .ok_or_else(|| self.invalid(field, start, "null where an array is required"))
    }

    /// A tagged-field section: `known` gets each field's tag and a reader
    /// over its bytes alone (it need not read them all); it ignores tags it
    /// does not know, and they are skipped.
    fn tagged_fields(
        &mut self,
        field: &'static str,
        mut known: impl FnMut(u32, &mut Reader<'a>) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        let count = self.uvarint(field)?;
        for _ in 0..count {
            let tag = self.uvarint(field)?;
            let size = self.uvarint(field)? as usize;
            let start = self.at;
            self.take(size, field)?;
            let mut inner = Reader {
                buf: &self.buf[..start + size],
                at: start,
            };
            known(tag, &mut inner)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn encoded_request(r: &DescribeClusterMirrorsRequest) -> Vec<u8> {
        let mut buf = Vec::new();
        r.encode(&mut buf).unwrap();
        buf
    }

    fn encoded_response(r: &DescribeClusterMirrorsResponse) -> Vec<u8> {
        let mut buf = Vec::new();
        r.encode(&mut buf).unwrap();
        buf
    }

    fn sample_request() -> DescribeClusterMirrorsRequest {
        DescribeClusterMirrorsRequest {
            mirror_names: vec!["dr".into(), "eu".into()],
            include_authorized_operations: true,
            cluster_id: Some("cluster-a".into()),
            last_mirror_epoch_lookups: vec![LastMirrorEpochLookup {
                topic_id: [7; 16],
                partitions: vec![0, 2],
            }],
        }
    }

    fn sample_response() -> DescribeClusterMirrorsResponse {
        DescribeClusterMirrorsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            error_message: None,
            mirrors: vec![DescribedMirror {
                error_code: 0,
                mirror_name: "dr".into(),
                authorized_operations: i32::MIN,
                topics: vec![DescribedTopic {
                    topic_name: "orders".into(),
                    partitions: vec![DescribedPartition {
                        partition_index: 2,
                        source_offset: 100,
                        destination_offset: 90,
                        lag: 10,
                        state: "MIRRORING".into(),
                        retry_attempt: 0,
                        error_message: Some("slow".into()),
                        last_mirror_epoch: 12,
                    }],
                }],
            }],
            last_mirror_epochs: vec![TopicLastMirrorEpochs {
                topic_id: [7; 16],
                partitions: vec![PartitionLastMirrorEpoch {
                    partition_index: 2,
                    last_mirror_epoch: 12,
                }],
            }],
        }
    }

    #[test]
    fn request_bytes_follow_the_documented_layout() {
        let bytes = encoded_request(&sample_request());
        let mut expected = vec![3, 3, b'd', b'r', 3, b'e', b'u', 1];
        // Two tags: 0 (cluster id, 10 bytes), 1 (lookups, 1 + 16 + 1 + 8 + 1 bytes).
        expected.extend_from_slice(&[2, 0, 10, 10]);
        expected.extend_from_slice(b"cluster-a");
        expected.extend_from_slice(&[1, 27, 2]);
        expected.extend_from_slice(&[7; 16]);
        expected.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 2, 0]);
        assert_eq!(bytes, expected);
        assert_eq!(DescribeClusterMirrorsRequest::decode(&bytes).unwrap(), sample_request());
    }

    #[test]
    fn an_empty_request_leaves_its_tags_out() {
        let bytes = encoded_request(&DescribeClusterMirrorsRequest::default());
        assert_eq!(bytes, [1, 0, 0]);
        // A null array of names means every mirror too.
        let decoded = DescribeClusterMirrorsRequest::decode(&[0, 0, 0]).unwrap();
        assert_eq!(decoded, DescribeClusterMirrorsRequest::default());
    }

    #[test]
    fn responses_round_trip() {
        let response = sample_response();
        let bytes = encoded_response(&response);
        assert_eq!(DescribeClusterMirrorsResponse::decode(&bytes).unwrap(), response);
        // Without lookups: no tag at all, as the prototype writes it.
        let plain = DescribeClusterMirrorsResponse {
            last_mirror_epochs: Vec::new(),
            ..response
        };
        let bytes = encoded_response(&plain);
        assert_eq!(bytes.last(), Some(&0));
        assert_eq!(DescribeClusterMirrorsResponse::decode(&bytes).unwrap(), plain);
    }

    /// `bytes` with the empty tagged-field sections (0 bytes) at
    /// `sections_at` replaced by sections holding one unknown tag (42, of
    /// 3 bytes).
    fn with_unknown_tags(bytes: &[u8], sections_at: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut from = 0;
        for &at in sections_at {
            assert_eq!(bytes[at], 0, "an empty section at {at}");
            out.extend_from_slice(&bytes[from..at]);
            out.extend_from_slice(&[1, 42, 3, 0xde, 0xad, 0xbe]);
            from = at + 1;
        }
        out.extend_from_slice(&bytes[from..]);
        out
    }

    #[test]
    fn unknown_tags_are_skipped_everywhere() {
        let response = DescribeClusterMirrorsResponse {
            last_mirror_epochs: Vec::new(),
            ..sample_response()
        };
        let bytes = encoded_response(&response);
        // The sections: partition, topic, mirror, response (the last byte).
        let n = bytes.len();
        let with = with_unknown_tags(&bytes, &[n - 4, n - 3, n - 2, n - 1]);
        assert_eq!(DescribeClusterMirrorsResponse::decode(&with).unwrap(), response);

        let request = DescribeClusterMirrorsRequest::default();
        let with = with_unknown_tags(&encoded_request(&request), &[2]);
        assert_eq!(DescribeClusterMirrorsRequest::decode(&with).unwrap(), request);
    }

    #[test]
    fn bytes_appended_inside_a_known_tag_are_ignored() {
        // Tag 0 (cluster id "a") with two extra bytes a newer writer added.
        let bytes = [1, 0, 1, 0, 4, 2, b'a', 0xff, 0xff];
        let decoded = DescribeClusterMirrorsRequest::decode(&bytes).unwrap();
        assert_eq!(decoded.cluster_id.as_deref(), Some("a"));
        // A known tag cannot read past its declared size.
        let bytes = [1, 0, 1, 0, 1, 5, b'a', b'b', b'c', b'd'];
        assert!(matches!(
            DescribeClusterMirrorsRequest::decode(&bytes),
            Err(DecodeError::Truncated {
                field: "cluster_id",
                ..
            })
        ));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let request = encoded_request(&sample_request());
        for len in 0..request.len() {
            assert!(
                DescribeClusterMirrorsRequest::decode(&request[..len]).is_err(),
                "request cut to {len}"
            );
        }
        let response = encoded_response(&sample_response());
        for len in 0..response.len() {
            assert!(
                DescribeClusterMirrorsResponse::decode(&response[..len]).is_err(),
                "response cut to {len}"
            );
        }
    }

    #[test]
    fn lying_counts_are_refused_before_allocating() {
        // 2^32 - 2 mirrors in a 12-byte body.
        let mut bytes = vec![0, 0, 0, 0, 0, 0, 0];
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            DescribeClusterMirrorsResponse::decode(&bytes),
            Err(DecodeError::CountTooLarge { field: "mirrors", .. })
        ));
        // A varint that does not end.
        assert!(matches!(
            DescribeClusterMirrorsRequest::decode(&[0xff; 8]),
            Err(DecodeError::Invalid {
                field: "mirror_names",
                ..
            })
        ));
        // One over 32 bits.
        assert!(matches!(
            DescribeClusterMirrorsRequest::decode(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(DecodeError::Invalid {
                field: "mirror_names",
                ..
            })
        ));
    }

    #[test]
    fn nulls_and_bad_strings_where_not_allowed_are_errors() {
        // A null mirror name.
        assert!(matches!(
            DescribeClusterMirrorsRequest::decode(&[2, 0, 0, 0]),
            Err(DecodeError::Invalid {
                field: "mirror_names[]",
                ..
            })
        ));
        // A name that is not UTF-8.
        assert!(matches!(
            DescribeClusterMirrorsRequest::decode(&[2, 2, 0xc3, 0, 0]),
            Err(DecodeError::Invalid {
                field: "mirror_names[]",
                ..
            })
        ));
        // A null mirrors array.
        assert!(matches!(
            DescribeClusterMirrorsResponse::decode(&[0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(DecodeError::Invalid { field: "mirrors", .. })
        ));
    }

    #[test]
    fn what_the_protocol_cannot_carry_is_not_encoded() {
        let request = DescribeClusterMirrorsRequest {
            mirror_names: vec!["x".repeat(MAX_STRING_LEN + 1)],
            ..DescribeClusterMirrorsRequest::default()
        };
        assert_eq!(
            request.encode(&mut Vec::new()),
            Err(EncodeError {
                field: "mirror_names[]",
                len: MAX_STRING_LEN + 1,
                max: MAX_STRING_LEN,
            })
        );
    }

    fn name() -> impl Strategy<Value = String> {
        "\\PC{0,12}"
    }

    fn request() -> impl Strategy<Value = DescribeClusterMirrorsRequest> {
        let lookup = (any::<[u8; 16]>(), prop::collection::vec(any::<i32>(), 0..4))
            .prop_map(|(topic_id, partitions)| LastMirrorEpochLookup { topic_id, partitions });
        (
            prop::collection::vec(name(), 0..4),
            any::<bool>(),
            prop::option::of(name()),
            prop::collection::vec(lookup, 0..4),
        )
            .prop_map(
                |(mirror_names, include_authorized_operations, cluster_id, last_mirror_epoch_lookups)| {
                    DescribeClusterMirrorsRequest {
                        mirror_names,
                        include_authorized_operations,
                        cluster_id,
                        last_mirror_epoch_lookups,
                    }
                },
            )
    }

    fn response() -> impl Strategy<Value = DescribeClusterMirrorsResponse> {
        let partition = (
            any::<(i32, i64, i64, i64)>(),
            name(),
            any::<i16>(),
            prop::option::of(name()),
            any::<i32>(),
        )
            .prop_map(
                |(
                    (partition_index, source_offset, destination_offset, lag),
                    state,
                    retry_attempt,
                    error_message,
                    lme,
                )| {
                    DescribedPartition {
                        partition_index,
                        source_offset,
                        destination_offset,
                        lag,
                        state,
                        retry_attempt,
                        error_message,
                        last_mirror_epoch: lme,
                    }
                },
            );
        let topic = (name(), prop::collection::vec(partition, 0..3))
            .prop_map(|(topic_name, partitions)| DescribedTopic { topic_name, partitions });
        let mirror = (any::<i16>(), name(), any::<i32>(), prop::collection::vec(topic, 0..3)).prop_map(
            |(error_code, mirror_name, authorized_operations, topics)| DescribedMirror {
                error_code,
                mirror_name,
                authorized_operations,
                topics,
            },
        );
        let epoch = any::<(i32, i32)>().prop_map(|(partition_index, last_mirror_epoch)| PartitionLastMirrorEpoch {
            partition_index,
            last_mirror_epoch,
        });
        let epochs = (any::<[u8; 16]>(), prop::collection::vec(epoch, 0..3))
            .prop_map(|(topic_id, partitions)| TopicLastMirrorEpochs { topic_id, partitions });
        (
            any::<(i32, i16)>(),
            prop::option::of(name()),
            prop::collection::vec(mirror, 0..3),
            prop::collection::vec(epochs, 0..3),
        )
            .prop_map(
                |((throttle_time_ms, error_code), error_message, mirrors, last_mirror_epochs)| {
                    DescribeClusterMirrorsResponse {
                        throttle_time_ms,
                        error_code,
                        error_message,
                        mirrors,
                        last_mirror_epochs,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn requests_round_trip(r in request()) {
            prop_assert_eq!(DescribeClusterMirrorsRequest::decode(&encoded_request(&r)).unwrap(), r);
        }

        #[test]
        fn any_response_round_trips(r in response()) {
            prop_assert_eq!(DescribeClusterMirrorsResponse::decode(&encoded_response(&r)).unwrap(), r);
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = DescribeClusterMirrorsRequest::decode(&bytes);
            let _ = DescribeClusterMirrorsResponse::decode(&bytes);
        }
    }
}
