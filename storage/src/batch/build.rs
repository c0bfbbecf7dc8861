//! Builds uncompressed v2 record batches: the control markers the agent
//! writes itself (ABORT on failover, MIRROR_PID_RESET) and test data.
//! Mirrored data is never rebuilt: it is stored exactly as received.

use super::control::ControlType;
use super::header::{BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, NO_PRODUCER_ID, OFF_ATTRIBUTES, OFF_CRC};
use super::varint::{write_varint, write_varlong};

/// One record to put in a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BuildRecord {
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Header fields of a batch to build. Records get consecutive offset deltas
/// unless `offset_deltas` says otherwise (as after compaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchBuilder {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
    pub control: bool,
    pub log_append_time: bool,
    pub records: Vec<BuildRecord>,
    /// Explicit offset delta per record (must increase), for compacted batches.
    pub offset_deltas: Option<Vec<i32>>,
    /// Explicit last offset delta, for batches whose trailing records were compacted away.
    pub last_offset_delta: Option<i32>,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self {
            base_offset: 0,
            partition_leader_epoch: 0,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            log_append_time: false,
            records: Vec::new(),
            offset_deltas: None,
            last_offset_delta: None,
        }
    }
}

impl BatchBuilder {
    /// A control batch (one record) with the given type and value.
    pub fn control_marker(
        base_offset: i64,
        partition_leader_epoch: i32,
        producer_id: i64,
        producer_epoch: i16,
        control_type: ControlType,
        value: Vec<u8>,
        timestamp: i64,
    ) -> Self {
        let mut key = Vec::with_capacity(4);
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&control_type.id().to_be_bytes());
        Self {
            base_offset,
            partition_leader_epoch,
            producer_id,
            producer_epoch,
            transactional: producer_id != NO_PRODUCER_ID,
            control: true,
            records: vec![BuildRecord {
                timestamp,
                key: Some(key),
                value: Some(value),
                headers: Vec::new(),
            }],
            ..Self::default()
        }
    }

    /// The value of an ABORT/COMMIT marker: version 0, coordinator epoch.
    pub fn end_txn_marker_value(coordinator_epoch: i32) -> Vec<u8> {
        let mut v = Vec::with_capacity(6);
        v.extend_from_slice(&0i16.to_be_bytes());
        v.extend_from_slice(&coordinator_epoch.to_be_bytes());
        v
    }

    pub fn build(&self) -> Vec<u8> {
        let base_timestamp = self.records.iter().map(|r| r.timestamp).min().unwrap_or(-1);
        let max_timestamp = self.records.iter().map(|r| r.timestamp).max().unwrap_or(-1);
        let deltas: Vec<i32> = self
            .offset_deltas
            .clone()
            .unwrap_or_else(|| (0..self.records.len() as i32).collect());
        assert_eq!(deltas.len(), self.records.len(), "one offset delta per record");
        let last_offset_delta = self.last_offset_delta.unwrap_or(deltas.last().copied().unwrap_or(0));

        let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + 64 * self.records.len());
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // batch length, patched below
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(2);
        out.extend_from_slice(&0u32.to_be_bytes()); // crc, patched below
        let attributes: i16 = (if self.log_append_time { 0x08 } else { 0 })
            | (if self.transactional { 0x10 } else { 0 })
            | (if self.control { 0x20 } else { 0 });
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&last_offset_delta.to_be_bytes());
        out.extend_from_slice(&base_timestamp.to_be_bytes());
        out.extend_from_slice(&max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&(self.records.len() as i32).to_be_bytes());
        debug_assert_eq!(out.len(), BATCH_HEADER_BYTES);

        let mut body = Vec::new();
        for (record, delta) in self.records.iter().zip(deltas) {
            body.clear();
            body.push(0); // record attributes
            write_varlong(&mut body, record.timestamp - base_timestamp);
            write_varint(&mut body, delta);
            write_bytes(&mut body, record.key.as_deref());
            write_bytes(&mut body, record.value.as_deref());
            write_varint(&mut body, record.headers.len() as i32);
            for (key, value) in &record.headers {
                write_bytes(&mut body, Some(key.as_bytes()));
                write_bytes(&mut body, value.as_deref());
            }
            write_varint(&mut out, body.len() as i32);
            out.extend_from_slice(&body);
        }
        let length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
        out[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&out[OFF_ATTRIBUTES..]);
        out[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

fn write_bytes(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        None => write_varint(out, -1),
        Some(bytes) => {
            write_varint(out, bytes.len() as i32);
            out.extend_from_slice(bytes);
        }
    }
}
