//! Fuzzes the `__transaction_state` record decoders: a transaction
//! coordinator reads every record of its log when it loads, and a damaged
//! or foreign log must be refused record by record, never panic, never
//! allocate more than the input justifies. Whatever decodes encodes again
//! (in its own version) to bytes that decode to the same value, and turns
//! into coordinator metadata or is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringmirror_transactions::TransactionMetadata;
use ringmirror_transactions::record::{TransactionLogValue, decode_key, encode_key};

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = decode_key(data) {
        assert_eq!(decode_key(&encode_key(&id).expect("a decoded id encodes")), Ok(id));
    }
    if let Ok(value) = TransactionLogValue::decode(data) {
        let version = i16::from_be_bytes([data[0], data[1]]);
        let again = value.encode(version).expect("a decoded value encodes");
        assert_eq!(TransactionLogValue::decode(&again), Ok(value.clone()));
        if let Ok(metadata) = TransactionMetadata::from_log_value(&value) {
            let _ = metadata.to_log_value().encode(1);
        }
    }
});
