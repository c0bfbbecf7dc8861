//! Helpers shared by the storage crate's integration tests.

use ringmirror_storage::batch::{BatchBuilder, BuildRecord};

/// A one-record batch at `base_offset`, its value `value_bytes` of the
/// offset's low byte, timestamped `t0_ms + base_offset`.
pub fn one_record_batch(base_offset: i64, t0_ms: u64, value_bytes: usize) -> Vec<u8> {
    BatchBuilder {
        base_offset,
        records: vec![BuildRecord {
            timestamp: t0_ms as i64 + base_offset,
            value: Some(vec![base_offset as u8; value_bytes]),
            ..Default::default()
        }],
        ..Default::default()
    }
    .build()
}
