//! Fuzzes every record-batch decoder on bytes as they come from the network
//! or disk: framing, validation, control records, record decoding (with
//! decompression). Any panic is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringmirror_storage::batch::{BatchIter, ControlRecord, Validation, decode_records, validate_batches};

fuzz_target!(|data: &[u8]| {
    let validation = Validation { next_offset: 0, max_batch_bytes: 1 << 20, fetch_epoch: Some(5), last_epoch: None };
    let range = validate_batches(data, &validation);
    assert!(range.valid_bytes <= data.len());
    for (_, batch) in BatchIter::new(data, 1 << 20).flatten() {
        let _ = decode_records(&batch, 1 << 20);
        let _ = ControlRecord::decode(&batch);
        let _ = (batch.last_offset(), batch.next_offset(), batch.last_sequence());
    }
});
