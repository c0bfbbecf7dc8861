//! The records of Kafka's `__transaction_state` log, byte for byte:
//! `TransactionLogKey` (version 0: the transactional id) and
//! `TransactionLogValue` (version 0, and the flexible version 1 a Kafka
//! 4.3 coordinator writes once `transaction.version` is at least 1), as
//! Kafka's `TransactionLog.keyToBytes`/`valueToBytes`/`read` and the
//! generated `TransactionLogValue` class encode them (schemas
//! `TransactionLogKey.json` and `TransactionLogValue.json` of the
//! transaction-coordinator module).
//!
//! Owns the byte layout only; what a value means (states, transitions) is
//! [`super::metadata`]'s. Decoding never panics and never allocates more
//! than the bytes it was given can hold: the bytes come from disk.
//!
//! Value version 1 carries four tagged fields, each written only when it
//! differs from its default, in ascending tag order: 0
//! `PreviousProducerId` (-1), 1 `NextProducerId` (-1), 2
//! `ClientTransactionVersion` (0), 3 `NextProducerEpoch` (-1; Kafka 4.3
//! never sets it, later versions do, so it is read and kept). Unknown tags
//! are skipped, as Kafka skips them. Within a value, the order of topics
//! and of partitions is not significant (Kafka reads them into a set and
//! writes them in its hash sets' order); we write them sorted.

use super::external::{
    STRING_BYTES_MAX, TooLong, VarintError, put_string, read_unsigned, string_length, write_unsigned,
};

/// `TransactionLogKey`'s version, which is also the coordinator record
/// type of the transaction log (`CoordinatorRecordType.TRANSACTION_LOG`).
pub const KEY_VERSION: i16 = 0;
/// `TransactionLogValue` versions: 0 under `transaction.version` 0, 1
/// (flexible, with tagged fields) from `transaction.version` 1 on
/// (`TransactionVersion.transactionLogValueVersion`).
pub const VALUE_VERSION_0: i16 = 0;
pub const VALUE_VERSION_1: i16 = 1;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;
const TAG_NEXT_PRODUCER_EPOCH: u32 = 3;
/// Kafka's UNSIGNED_VARINT is at most 5 bytes.
const UVARINT_BYTES_MAX: usize = 5;

/// A decoded (or to be encoded) `TransactionLogValue`, field for field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionLogValue {
    pub producer_id: i64,
    /// Tag 0 (version 1+).
    pub previous_producer_id: i64,
    /// Tag 1 (version 1+).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// Tag 3 (version 1+).
    pub next_producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    /// A `TransactionState` id.
    pub transaction_status: i8,
    /// Null in version 0 and 1 alike when the state is Empty.
    pub transaction_partitions: Option<Vec<PartitionsSchema>>,
    pub transaction_last_update_timestamp_ms: i64,
    pub transaction_start_timestamp_ms: i64,
    /// Tag 2 (version 1+): the client's transaction version (a feature level).
    pub client_transaction_version: i16,
}

/// The partitions of one topic in a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionsSchema {
    pub topic: String,
    pub partition_ids: Vec<i32>,
}

/// Why bytes are not a transaction log record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("unknown transaction log key version {0}")]
    UnknownKeyVersion(i16),
    #[error("unknown transaction log value version {0}")]
    UnknownValueVersion(i16),
    #[error("the record ends inside {0}")]
    Truncated(&'static str),
    #[error("{0} is malformed")]
    Malformed(&'static str),
    #[error(transparent)]
    TooLong(#[from] TooLong),
}

type Result<T> = std::result::Result<T, RecordError>;

/// `TransactionLog.keyToBytes`: version 0, the transactional id as a
/// STRING. An id longer than a STRING holds is refused, never wrapped.
pub fn encode_key(transactional_id: &str) -> std::result::Result<Vec<u8>, TooLong> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    put_string(&mut out, "transactional id", transactional_id)?;
    Ok(out)
}

/// The transactional id of a key (`TransactionLog.readTxnRecordKey`).
pub fn decode_key(key: &[u8]) -> Result<String> {
    let mut c = Cursor::new(key, false);
    let version = c.i16("key version")?;
    if version != KEY_VERSION {
        return Err(RecordError::UnknownKeyVersion(version));
    }
    c.string("transactional id")
}

impl TransactionLogValue {
    /// The value in `version` (0 or 1), as `MessageUtil.toVersionPrefixedBytes`
    /// writes it: the version, then the fields.
    pub fn encode(&self, version: i16) -> Result<Vec<u8>> {
        let flexible = match version {
            VALUE_VERSION_0 => false,
            VALUE_VERSION_1 => true,
            other => return Err(RecordError::UnknownValueVersion(other)),
        };
        let mut w = Writer {
            out: Vec::with_capacity(64),
            flexible,
        };
        w.out.extend_from_slice(&version.to_be_bytes());
        w.out.extend_from_slice(&self.producer_id.to_be_bytes());
        w.out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        w.out.extend_from_slice(&self.transaction_timeout_ms.to_be_bytes());
        w.out.extend_from_slice(&self.transaction_status.to_be_bytes());
        match &self.transaction_partitions {
            None => w.array_len(None)?,
            Some(topics) => {
                w.array_len(Some(topics.len()))?;
                for t in topics {
                    w.string("topic name", &t.topic)?;
                    w.array_len(Some(t.partition_ids.len()))?;
                    for p in &t.partition_ids {
                        w.out.extend_from_slice(&p.to_be_bytes());
                    }
                    w.no_tags();
                }
            }
        }
        w.out
            .extend_from_slice(&self.transaction_last_update_timestamp_ms.to_be_bytes());
        w.out
            .extend_from_slice(&self.transaction_start_timestamp_ms.to_be_bytes());
        if flexible {
            let mut tags: Vec<(u32, Vec<u8>)> = Vec::with_capacity(4);
            if self.previous_producer_id != -1 {
                tags.push((
                    TAG_PREVIOUS_PRODUCER_ID,
                    self.previous_producer_id.to_be_bytes().to_vec(),
                ));
            }
            if self.next_producer_id != -1 {
                tags.push((TAG_NEXT_PRODUCER_ID, self.next_producer_id.to_be_bytes().to_vec()));
            }
            if self.client_transaction_version != 0 {
                tags.push((
                    TAG_CLIENT_TRANSACTION_VERSION,
                    self.client_transaction_version.to_be_bytes().to_vec(),
                ));
            }
            if self.next_producer_epoch != -1 {
                tags.push((TAG_NEXT_PRODUCER_EPOCH, self.next_producer_epoch.to_be_bytes().to_vec()));
            }
            write_unsigned(&mut w.out, tags.len() as u64);
            for (tag, data) in tags {
                write_unsigned(&mut w.out, u64::from(tag));
                write_unsigned(&mut w.out, data.len() as u64);
                w.out.extend_from_slice(&data);
            }
        }
        Ok(w.out)
    }

    /// A value of version 0 or 1 (`new TransactionLogValue(accessor, version)`).
    /// Bytes after the last field are ignored, as Kafka ignores them.
    pub fn decode(value: &[u8]) -> Result<Self> {
        let mut c = Cursor::new(value, false);
        let version = c.i16("value version")?;
        c.flexible = match version {
            VALUE_VERSION_0 => false,
            VALUE_VERSION_1 => true,
            other => return Err(RecordError::UnknownValueVersion(other)),
        };
        let producer_id = c.i64("producer id")?;
        let producer_epoch = c.i16("producer epoch")?;
        let transaction_timeout_ms = c.i32("transaction timeout")?;
        let transaction_status = i8::from_be_bytes(c.array("transaction status")?);
        let transaction_partitions = match c.array_len("transaction partitions", 2)? {
            None => None,
            Some(topics) => {
                let mut out = Vec::with_capacity(topics);
                for _ in 0..topics {
                    let topic = c.string("topic name")?;
                    let count = c
                        .array_len("partition ids", 4)?
                        .ok_or(RecordError::Malformed("partition ids"))?;
                    let mut partition_ids = Vec::with_capacity(count);
                    for _ in 0..count {
                        partition_ids.push(c.i32("partition id")?);
                    }
                    c.skip_tags()?;
                    out.push(PartitionsSchema { topic, partition_ids });
                }
                Some(out)
            }
        };
        let mut decoded = Self {
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch,
            next_producer_epoch: -1,
            transaction_timeout_ms,
            transaction_status,
            transaction_partitions,
            transaction_last_update_timestamp_ms: c.i64("last update timestamp")?,
            transaction_start_timestamp_ms: c.i64("start timestamp")?,
            client_transaction_version: 0,
        };
        if c.flexible {
            let count = c.uvarint("tagged field count")?;
            for _ in 0..count {
                let tag = c.uvarint("tag")?;
                let size = c.uvarint("tag size")? as usize;
                let data = c.take(size, "tagged field")?;
                let malformed = |_| RecordError::Malformed("tagged field");
                match tag {
                    TAG_PREVIOUS_PRODUCER_ID => {
                        decoded.previous_producer_id = i64::from_be_bytes(data.try_into().map_err(malformed)?);
                    }
                    TAG_NEXT_PRODUCER_ID => {
                        decoded.next_producer_id = i64::from_be_bytes(data.try_into().map_err(malformed)?);
                    }
                    TAG_CLIENT_TRANSACTION_VERSION => {
                        decoded.client_transaction_version = i16::from_be_bytes(data.try_into().map_err(malformed)?);
                    }
                    TAG_NEXT_PRODUCER_EPOCH => {
                        decoded.next_producer_epoch = i16::from_be_bytes(data.try_into().map_err(malformed)?);
                    }
                    _ => {}
                }
            }
        }
        Ok(decoded)
    }
}

/// Writes the two encodings' strings and arrays: STRING and ARRAY (i16
/// and i32 lengths) in version 0, compact ones (unsigned varint length + 1,
/// 0 for null) in flexible versions.
struct Writer {
    out: Vec<u8>,
    flexible: bool,
}

impl Writer {
    fn array_len(&mut self, len: Option<usize>) -> Result<()> {
        match (self.flexible, len) {
            (true, None) => self.out.push(0),
            (true, Some(n)) => write_unsigned(&mut self.out, n as u64 + 1),
            (false, None) => self.out.extend_from_slice(&(-1i32).to_be_bytes()),
            (false, Some(n)) => {
                let n = i32::try_from(n).map_err(|_| RecordError::Malformed("array length"))?;
                self.out.extend_from_slice(&n.to_be_bytes());
            }
        }
        Ok(())
    }

    fn string(&mut self, field: &'static str, s: &str) -> Result<()> {
        if self.flexible {
            // Kafka bounds compact strings by a STRING's length too.
            string_length(field, s)?;
            write_unsigned(&mut self.out, s.len() as u64 + 1);
            self.out.extend_from_slice(s.as_bytes());
        } else {
            put_string(&mut self.out, field, s)?;
        }
        Ok(())
    }

    /// An empty tagged-field section (flexible versions only).
    fn no_tags(&mut self) {
        if self.flexible {
            self.out.push(0);
        }
    }
}

/// A bounds-checked reader over a key or value.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    flexible: bool,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], flexible: bool) -> Self {
        Self {
            bytes,
            pos: 0,
            flexible,
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(RecordError::Truncated(field));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        Ok(self.take(N, field)?.try_into().expect("took N bytes"))
    }

    fn i16(&mut self, field: &'static str) -> Result<i16> {
        self.array(field).map(i16::from_be_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32> {
        self.array(field).map(i32::from_be_bytes)
    }

    fn i64(&mut self, field: &'static str) -> Result<i64> {
        self.array(field).map(i64::from_be_bytes)
    }

    fn uvarint(&mut self, field: &'static str) -> Result<u32> {
        let truncated = |_: VarintError| RecordError::Truncated(field);
        let v = read_unsigned(self.bytes, &mut self.pos, UVARINT_BYTES_MAX).map_err(truncated)?;
        u32::try_from(v).map_err(|_| RecordError::Malformed(field))
    }

    /// A length of `field`: `None` for null. Refused when the rest of the
    /// bytes cannot hold that many elements of `element_bytes_min` each,
    /// so a lying length never allocates.
    fn array_len(&mut self, field: &'static str, element_bytes_min: usize) -> Result<Option<usize>> {
        let len = if self.flexible {
            match self.uvarint(field)? {
                0 => None,
                n => Some(n as usize - 1),
            }
        } else {
            match self.i32(field)? {
                -1 => None,
                n => Some(usize::try_from(n).map_err(|_| RecordError::Malformed(field))?),
            }
        };
        match len {
            Some(n) if n.saturating_mul(element_bytes_min) > self.remaining() => Err(RecordError::Truncated(field)),
            len => Ok(len),
        }
    }

    /// A non-null string, which must be UTF-8 and, compact or not, within
    /// a STRING's length (Kafka's readers refuse a longer one).
    fn string(&mut self, field: &'static str) -> Result<String> {
        let len = if self.flexible {
            match self.uvarint(field)? {
                0 => return Err(RecordError::Malformed(field)),
                n => n as usize - 1,
            }
        } else {
            usize::try_from(self.i16(field)?).map_err(|_| RecordError::Malformed(field))?
        };
        if len > STRING_BYTES_MAX {
            return Err(RecordError::Malformed(field));
        }
        let bytes = self.take(len, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordError::Malformed(field))
    }

    /// A tagged-field section whose tags are all unknown to us.
    fn skip_tags(&mut self) -> Result<()> {
        if !self.flexible {
            return Ok(());
        }
        for _ in 0..self.uvarint("tagged field count")? {
            self.uvarint("tag")?;
            let size = self.uvarint("tag size")? as usize;
            self.take(size, "tagged field")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const T0: i64 = 1_700_000_000_000;

    /// Records written by Kafka 4.3.1's own `TransactionLog.valueToBytes`
    /// (tests/kafka's `TxnLogVectors`; `tests/kafka_transaction_log.rs`
    /// compares the whole run with Kafka's classes).
    const KAFKA_INIT: &str =
        "000100000000000003e800000000ea6000000000018bcfe56801ffffffffffffffff01000800000000000003e8";
    const KAFKA_ADD_ONE: &str = "000100000000000003e800000000ea600102076f72646572730200000000000000018bcfe568020000018bcfe5680201000800000000000003e8";
    const KAFKA_V0_ONGOING: &str =
        "00000000000000000fa000070000ea60010000000100017400000001000000030000018bcfe568000000018bcfe56800";
    const KAFKA_V0_EMPTY: &str = "00000000000000000fa000070000ea6000ffffffff0000018bcfe56800ffffffffffffffff";
    const KAFKA_ALL_TAGS: &str = "0001000000000000138800030000ea60020202740200000009000000018bcfe568280000018bcfe568270400080000000000001387010800000000000013890202000203020004";

    fn value(status: i8, partitions: Option<Vec<(&str, Vec<i32>)>>) -> TransactionLogValue {
        TransactionLogValue {
            producer_id: 1000,
            previous_producer_id: 1000,
            next_producer_id: -1,
            producer_epoch: 0,
            next_producer_epoch: -1,
            transaction_timeout_ms: 60_000,
            transaction_status: status,
            transaction_partitions: partitions.map(|ts| {
                ts.into_iter()
                    .map(|(topic, partition_ids)| PartitionsSchema {
                        topic: topic.to_owned(),
                        partition_ids,
                    })
                    .collect()
            }),
            transaction_last_update_timestamp_ms: T0 + 1,
            transaction_start_timestamp_ms: -1,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn key_is_version_zero_and_a_string() {
        assert_eq!(encode_key("txn-a").unwrap(), unhex("0000000574786e2d61"));
        assert_eq!(decode_key(&unhex("0000000574786e2d61")).unwrap(), "txn-a");
        assert_eq!(decode_key(&[0, 1, 0, 0]), Err(RecordError::UnknownKeyVersion(1)));
        assert_eq!(
            decode_key(&[0, 0, 0, 9, b'x']),
            Err(RecordError::Truncated("transactional id"))
        );
        let refused = encode_key(&"x".repeat(40_000)).unwrap_err();
        assert_eq!((refused.field, refused.bytes), ("transactional id", 40_000));
    }

    #[test]
    fn values_encode_byte_for_byte_as_kafka_writes_them() {
        let init = value(0, None);
        assert_eq!(init.encode(VALUE_VERSION_1).unwrap(), unhex(KAFKA_INIT));
        assert_eq!(TransactionLogValue::decode(&unhex(KAFKA_INIT)).unwrap(), init);
        let add = TransactionLogValue {
            transaction_status: 1,
            transaction_last_update_timestamp_ms: T0 + 2,
            transaction_start_timestamp_ms: T0 + 2,
            ..value(1, Some(vec![("orders", vec![0])]))
        };
        assert_eq!(add.encode(VALUE_VERSION_1).unwrap(), unhex(KAFKA_ADD_ONE));
        assert_eq!(TransactionLogValue::decode(&unhex(KAFKA_ADD_ONE)).unwrap(), add);
    }

    #[test]
    fn version_zero_has_no_tags_and_an_i32_null_array() {
        let ongoing = TransactionLogValue {
            producer_id: 4000,
            previous_producer_id: -1,
            producer_epoch: 7,
            transaction_last_update_timestamp_ms: T0,
            transaction_start_timestamp_ms: T0,
            ..value(1, Some(vec![("t", vec![3])]))
        };
        assert_eq!(ongoing.encode(VALUE_VERSION_0).unwrap(), unhex(KAFKA_V0_ONGOING));
        assert_eq!(TransactionLogValue::decode(&unhex(KAFKA_V0_ONGOING)).unwrap(), ongoing);
        let empty = TransactionLogValue::decode(&unhex(KAFKA_V0_EMPTY)).unwrap();
        assert_eq!((empty.transaction_partitions, empty.producer_epoch), (None, 7));
        // Version 0 cannot carry the tagged fields: they are dropped.
        let tagged = value(0, None);
        assert_eq!(
            TransactionLogValue::decode(&tagged.encode(VALUE_VERSION_0).unwrap())
                .unwrap()
                .previous_producer_id,
            -1
        );
    }

    #[test]
    fn every_tag_is_read_and_written_in_tag_order() {
        let v = TransactionLogValue::decode(&unhex(KAFKA_ALL_TAGS)).unwrap();
        assert_eq!(
            (
                v.previous_producer_id,
                v.next_producer_id,
                v.client_transaction_version,
                v.next_producer_epoch
            ),
            (4999, 5001, 2, 4)
        );
        assert_eq!(v.encode(VALUE_VERSION_1).unwrap(), unhex(KAFKA_ALL_TAGS));
    }

    #[test]
    fn unknown_tags_are_skipped_and_bad_versions_refused() {
        let mut bytes = value(0, None).encode(VALUE_VERSION_1).unwrap();
        // One more tag (9, two bytes) after the known one.
        let tags_at = bytes.len() - 11;
        assert_eq!(bytes[tags_at], 1);
        bytes[tags_at] = 2;
        bytes.extend_from_slice(&[9, 2, 0xab, 0xcd]);
        assert_eq!(TransactionLogValue::decode(&bytes).unwrap(), value(0, None));
        assert_eq!(
            TransactionLogValue::decode(&[0, 2, 0]),
            Err(RecordError::UnknownValueVersion(2))
        );
        assert_eq!(value(0, None).encode(5), Err(RecordError::UnknownValueVersion(5)));
        // A tag of the wrong size is malformed, not misread.
        let mut wrong = value(0, None).encode(VALUE_VERSION_1).unwrap();
        let size_at = wrong.len() - 9;
        assert_eq!(wrong[size_at], 8);
        wrong[size_at] = 7;
        wrong.pop();
        assert_eq!(
            TransactionLogValue::decode(&wrong),
            Err(RecordError::Malformed("tagged field"))
        );
    }

    #[test]
    fn lying_lengths_are_refused_before_allocating() {
        let mut v0 = value(1, Some(vec![("t", vec![1])])).encode(VALUE_VERSION_0).unwrap();
        // The topic count (after version, id, epoch, timeout, status).
        v0[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(
            TransactionLogValue::decode(&v0),
            Err(RecordError::Truncated("transaction partitions"))
        );
        let mut v1 = value(1, Some(vec![("t", vec![1])])).encode(VALUE_VERSION_1).unwrap();
        v1.truncate(17);
        v1.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(
            TransactionLogValue::decode(&v1),
            Err(RecordError::Truncated("transaction partitions"))
        );
    }

    fn arb_value() -> impl Strategy<Value = TransactionLogValue> {
        let partitions = prop::option::of(prop::collection::vec(
            ("[a-z._-]{1,12}", prop::collection::vec(0..64i32, 0..5)),
            0..4,
        ));
        (
            (any::<i64>(), any::<i64>(), any::<i64>(), any::<i16>(), any::<i16>()),
            (any::<i32>(), any::<i8>(), partitions),
            (any::<i64>(), any::<i64>(), any::<i16>()),
        )
            .prop_map(
                |((pid, prev, next, epoch, next_epoch), (timeout, status, parts), (last, start, tv))| {
                    TransactionLogValue {
                        producer_id: pid,
                        previous_producer_id: prev,
                        next_producer_id: next,
                        producer_epoch: epoch,
                        next_producer_epoch: next_epoch,
                        transaction_timeout_ms: timeout,
                        transaction_status: status,
                        transaction_partitions: parts.map(|ts| {
                            ts.into_iter()
                                .map(|(topic, partition_ids)| PartitionsSchema { topic, partition_ids })
                                .collect()
                        }),
                        transaction_last_update_timestamp_ms: last,
                        transaction_start_timestamp_ms: start,
                        client_transaction_version: tv,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn values_round_trip_in_version_one(v in arb_value()) {
            let bytes = v.encode(VALUE_VERSION_1).unwrap();
            prop_assert_eq!(TransactionLogValue::decode(&bytes).unwrap(), v);
        }

        #[test]
        fn values_round_trip_in_version_zero_without_tags(v in arb_value()) {
            let bytes = v.encode(VALUE_VERSION_0).unwrap();
            let untagged = TransactionLogValue {
                previous_producer_id: -1,
                next_producer_id: -1,
                next_producer_epoch: -1,
                client_transaction_version: 0,
                ..v
            };
            prop_assert_eq!(TransactionLogValue::decode(&bytes).unwrap(), untagged);
        }

        #[test]
        fn keys_round_trip(id in "\\PC{0,40}") {
            prop_assert_eq!(decode_key(&encode_key(&id).unwrap()).unwrap(), id);
        }

        #[test]
        fn decoding_random_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_key(&bytes);
            let _ = TransactionLogValue::decode(&bytes);
        }

        #[test]
        fn decoding_mutated_values_never_panics(
            v in arb_value(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = v.encode(VALUE_VERSION_1).unwrap();
            for (at, byte) in flips {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            let _ = TransactionLogValue::decode(&bytes);
            bytes.truncate(cut.index(bytes.len() + 1));
            let _ = TransactionLogValue::decode(&bytes);
        }
    }
}
