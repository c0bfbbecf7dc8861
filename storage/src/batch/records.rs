//! Decodes the records inside a batch, decompressing when needed.
//!
//! Off the hot path: the mirror never looks inside batches. This serves
//! `dump-log --deep`, timestamp lookups that must land on a record, and
//! tests. Decompressed output is bounded so a hostile batch cannot expand
//! without limit.

use std::io::Read;

use super::header::{Compression, RecordBatch, TimestampType};
use super::varint::{VarintError, read_varint, read_varlong};

/// One decoded record with absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<RecordHeader>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("batch at offset {offset}: {codec} decompression failed: {source}")]
    Decompress {
        offset: i64,
        codec: &'static str,
        source: std::io::Error,
    },
    #[error("batch at offset {offset}: decompressed records exceed {limit} bytes")]
    TooLarge { offset: i64, limit: usize },
    #[error("batch at offset {offset}: unknown compression codec {id}")]
    UnknownCodec { offset: i64, id: u8 },
    #[error("batch at offset {offset}: record {index} is malformed: {reason}")]
    Malformed { offset: i64, index: usize, reason: String },
}

impl From<(i64, usize, VarintError)> for RecordsError {
    fn from((offset, index, e): (i64, usize, VarintError)) -> Self {
        Self::Malformed {
            offset,
            index,
            reason: e.to_string(),
        }
    }
}

/// xerial snappy-java framing: magic, version, compatible version, then
/// blocks of (i32 length, raw snappy). Kafka's Java client writes this.
const XERIAL_MAGIC: &[u8] = &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

fn read_limited(
    mut reader: impl Read,
    limit: usize,
    offset: i64,
    codec: &'static str,
) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::new();
    (&mut reader)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|source| RecordsError::Decompress { offset, codec, source })?;
    if out.len() > limit {
        return Err(RecordsError::TooLarge { offset, limit });
    }
    Ok(out)
}

fn snappy_block(block: &[u8], offset: i64, limit: usize) -> Result<Vec<u8>, RecordsError> {
    let err = |e: snap::Error| RecordsError::Decompress {
        offset,
        codec: "snappy",
        source: std::io::Error::other(e),
    };
    let len = snap::raw::decompress_len(block).map_err(err)?;
    if len > limit {
        return Err(RecordsError::TooLarge { offset, limit });
    }
    snap::raw::Decoder::new().decompress_vec(block).map_err(err)
}

fn decompress(codec: Compression, data: &[u8], offset: i64, limit: usize) -> Result<Vec<u8>, RecordsError> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => read_limited(flate2::read::MultiGzDecoder::new(data), limit, offset, "gzip"),
        Compression::Lz4 => read_limited(lz4_flex::frame::FrameDecoder::new(data), limit, offset, "lz4"),
        Compression::Zstd => {
            let mut source = data;
            let decoder =
                ruzstd::decoding::StreamingDecoder::new(&mut source).map_err(|e| RecordsError::Decompress {
                    offset,
                    codec: "zstd",
                    source: std::io::Error::other(e.to_string()),
                })?;
            read_limited(decoder, limit, offset, "zstd")
        }
        Compression::Snappy if data.starts_with(XERIAL_MAGIC) => {
            let mut out = Vec::new();
            let mut pos = XERIAL_MAGIC.len() + 8;
            while pos < data.len() {
                let malformed = || RecordsError::Decompress {
                    offset,
                    codec: "snappy",
                    source: std::io::Error::other("truncated xerial block"),
                };
                let len = data.get(pos..pos + 4).ok_or_else(malformed)?;
                let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
                pos += 4;
                let block = data.get(pos..pos.saturating_add(len)).ok_or_else(malformed)?;
                pos += len;
                out.extend_from_slice(&snappy_block(block, offset, limit - out.len())?);
            }
            Ok(out)
        }
        Compression::Snappy => snappy_block(data, offset, limit),
        Compression::Unknown(id) => Err(RecordsError::UnknownCodec { offset, id }),
    }
}

/// Decodes every record of `batch`. `decompressed_bytes_max` bounds the
/// decompressed size of the records section.
pub fn decode_records<B: AsRef<[u8]>>(
    batch: &RecordBatch<B>,
    decompressed_bytes_max: usize,
) -> Result<Vec<Record>, RecordsError> {
    let base_offset = batch.base_offset();
    let data = decompress(
        batch.compression(),
        batch.records_bytes(),
        base_offset,
        decompressed_bytes_max,
    )?;
    let count = usize::try_from(batch.records_count()).unwrap_or(0);
    let log_append = batch.timestamp_type() == TimestampType::LogAppendTime;
    let mut records = Vec::with_capacity(count.min(data.len() / 7 + 1));
    let mut pos = 0;
    for index in 0..count {
        let malformed = |reason: &str| RecordsError::Malformed {
            offset: base_offset,
            index,
            reason: reason.to_owned(),
        };
        let v = |e| RecordsError::from((base_offset, index, e));
        let length = read_varint(&data, &mut pos).map_err(v)?;
        let end = usize::try_from(length)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&e| e <= data.len());
        let end = end.ok_or_else(|| malformed("record length out of bounds"))?;
        let body = &data[..end];
        pos += 1; // attributes, unused in v2
        let timestamp_delta = read_varlong(body, &mut pos).map_err(v)?;
        let offset_delta = read_varint(body, &mut pos).map_err(v)?;
        let key = read_field(body, &mut pos)
            .map_err(v)?
            .ok_or_else(|| malformed("key out of bounds"))?;
        let value = read_field(body, &mut pos)
            .map_err(v)?
            .ok_or_else(|| malformed("value out of bounds"))?;
        let header_count = read_varint(body, &mut pos).map_err(v)?;
        let header_count = usize::try_from(header_count).map_err(|_| malformed("negative header count"))?;
        let mut headers = Vec::with_capacity(header_count.min(body.len()));
        for _ in 0..header_count {
            let key = read_field(body, &mut pos)
                .map_err(v)?
                .ok_or_else(|| malformed("header key out of bounds"))?;
            let key = key.ok_or_else(|| malformed("null header key"))?;
            let value = read_field(body, &mut pos)
                .map_err(v)?
                .ok_or_else(|| malformed("header value out of bounds"))?;
            headers.push(RecordHeader {
                key: key.to_vec(),
                value: value.map(<[u8]>::to_vec),
            });
        }
        if pos != end {
            return Err(malformed("record length does not match its fields"));
        }
        records.push(Record {
            offset: base_offset + i64::from(offset_delta),
            timestamp: if log_append {
                batch.max_timestamp()
            } else {
                batch.base_timestamp() + timestamp_delta
            },
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers,
        });
    }
    Ok(records)
}

/// Reads a varint-length-prefixed field: `Ok(None)` when it overruns the
/// buffer, `Ok(Some(None))` for a null field.
#[allow(clippy::type_complexity)]
fn read_field<'a>(buf: &'a [u8], pos: &mut usize) -> Result<Option<Option<&'a [u8]>>, VarintError> {
    let len = read_varint(buf, pos)?;
    if len < 0 {
        return Ok(Some(None));
    }
    let Some(end) = pos.checked_add(len as usize).filter(|&e| e <= buf.len()) else {
        return Ok(None);
    };
    let field = &buf[*pos..end];
    *pos = end;
    Ok(Some(Some(field)))
}
