//! The transaction coordinator's `__transaction_state` records against
//! Apache Kafka 4.3.1's own classes (no cluster: Kafka's jars only).
//!
//! - **Kafka writes the vectors the unit tests hold**: tests/kafka's
//!   `TxnLogVectors` drives Kafka's `TransactionMetadata` through the steps
//!   the coordinator's unit tests replay and prints Kafka's records; they
//!   must be the ones stored beside those tests.
//! - **Kafka's tools read our log**: DumpLogSegments with
//!   `--transaction-log-decoder` decodes every record of a store the
//!   coordinator wrote through a commit, AddOffsetsToTxn, a fence and an
//!   expiry, field for field as we decode it.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::rc::Rc;

use ringmirror_dataplane::transactions::record::{TransactionLogValue, decode_key};
use ringmirror_dataplane::transactions::{
    InitProducerIdRequest, MarkerOutcome, PartitionCheck, ProducerIdAllocator, TransactionConfig,
    TransactionCoordinator, TransactionResult,
};
use ringmirror_kafka_harness::tool;
use ringmirror_storage::batch::{BatchIter, decode_records};
use ringmirror_storage::log::TopicPartition;

const T0: i64 = 1_700_000_000_000;
const BATCH_BYTES_MAX: u32 = 1 << 20;

#[test]
fn kafka_writes_the_vectors_the_unit_tests_hold() {
    let kafka = tool("ringmirror.kafka.TxnLogVectors", &[]);
    let stored = include_str!("../transactions/src/kafka_vectors.txt");
    assert_eq!(kafka, stored, "regenerate the vectors with tests/kafka's TxnLogVectors");
}

struct Counter(Rc<Cell<i64>>);

impl ProducerIdAllocator for Counter {
    fn next_producer_id(&mut self) -> std::io::Result<i64> {
        self.0.set(self.0.get() + 1);
        Ok(self.0.get())
    }

    fn reserve_through(&mut self, producer_id: i64) -> std::io::Result<()> {
        self.0.set(self.0.get().max(producer_id));
        Ok(())
    }
}

fn init(c: &mut TransactionCoordinator, id: &str, now_ms: i64) -> (i16, (i64, i16)) {
    let (r, markers) = c.init_producer_id(
        InitProducerIdRequest {
            transactional_id: id,
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            enable_2pc: false,
            keep_prepared_txn: false,
        },
        now_ms,
    );
    for m in &markers {
        for t in &m.targets {
            c.marker_written(m, t, MarkerOutcome::Written, now_ms);
        }
    }
    (r.error, (r.producer_id, r.producer_epoch))
}

fn add(c: &mut TransactionCoordinator, id: &str, p: (i64, i16), partitions: &[(&str, i32)], now_ms: i64) {
    let checks = partitions
        .iter()
        .map(|(t, n)| PartitionCheck {
            partition: TopicPartition::new(*t, *n),
            refused: None,
        })
        .collect();
    let codes = c.add_partitions(id, p.0, p.1, checks, now_ms);
    assert!(codes.iter().all(|(_, code)| *code == 0), "{codes:?}");
}

/// A value as Kafka's decoder prints it (JSON), in our decoder's terms.
fn from_kafka_json(payload: &serde_json::Value) -> TransactionLogValue {
    let d = &payload["data"];
    let int = |name: &str, default: i64| d.get(name).map_or(default, |v| v.as_i64().unwrap());
    TransactionLogValue {
        producer_id: int("producerId", -2),
        previous_producer_id: int("previousProducerId", -1),
        next_producer_id: int("nextProducerId", -1),
        producer_epoch: int("producerEpoch", -2) as i16,
        next_producer_epoch: int("nextProducerEpoch", -1) as i16,
        transaction_timeout_ms: int("transactionTimeoutMs", -2) as i32,
        transaction_status: int("transactionStatus", -2) as i8,
        transaction_partitions: d["transactionPartitions"].as_array().map(|topics| {
            topics
                .iter()
                .map(|t| ringmirror_dataplane::transactions::record::PartitionsSchema {
                    topic: t["topic"].as_str().unwrap().to_owned(),
                    partition_ids: t["partitionIds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| p.as_i64().unwrap() as i32)
                        .collect(),
                })
                .collect()
        }),
        transaction_last_update_timestamp_ms: int("transactionLastUpdateTimestampMs", -2),
        transaction_start_timestamp_ms: int("transactionStartTimestampMs", -2),
        client_transaction_version: int("clientTransactionVersion", 0) as i16,
    }
}

#[test]
fn kafka_dump_log_segments_decodes_our_transaction_log() {
    let dir = tempfile::tempdir().unwrap();
    let config = TransactionConfig {
        transactional_id_expiration_ms: 3_600_000,
        ..TransactionConfig::default()
    };
    let pids = Box::new(Counter(Rc::new(Cell::new(999))));
    let (mut c, _) = TransactionCoordinator::open(dir.path(), 0, config, pids, T0).unwrap();
    // A commit over two topics and a group's offsets.
    let (code, p) = init(&mut c, "app", T0 + 1);
    assert_eq!(code, 0);
    add(
        &mut c,
        "app",
        p,
        &[("orders", 0), ("orders", 3), ("payments", 1)],
        T0 + 2,
    );
    assert_eq!(c.add_offsets("app", p.0, p.1, 1, T0 + 3), 0);
    let (code, markers) = c.end_txn("app", p.0, p.1, TransactionResult::Commit, T0 + 4);
    assert_eq!(code, 0);
    for t in &markers[0].targets {
        c.marker_written(&markers[0], t, MarkerOutcome::Written, T0 + 5);
    }
    // A newer producer fences an open transaction, then retries.
    add(&mut c, "app", p, &[("orders", 1)], T0 + 6);
    assert_eq!(init(&mut c, "app", T0 + 7).0, 51);
    assert_eq!(init(&mut c, "app", T0 + 8), (0, (p.0, p.1 + 2)));
    // Another id; an hour later both expire.
    init(&mut c, "short-lived", T0 + 9);
    assert!(c.tick(T0 + 9 + 3_600_000).is_empty());
    drop(c);

    // The log's whole batches (the segment file is preallocated past them).
    let segment = dir
        .path()
        .join("__ringmirror/transaction-state-0/00000000000000000000.log");
    let bytes = std::fs::read(&segment).unwrap();
    let mut ours = Vec::new();
    let mut end = 0;
    for (at, batch) in BatchIter::new(&bytes, BATCH_BYTES_MAX).map_while(Result::ok) {
        end = at + batch.size_bytes();
        for r in decode_records(&batch, BATCH_BYTES_MAX as usize).unwrap() {
            let id = decode_key(r.key.as_deref().unwrap()).unwrap();
            ours.push((id, r.value.map(|v| TransactionLogValue::decode(&v).unwrap())));
        }
    }
    let copy = dir.path().join("00000000000000000000.log");
    std::fs::write(&copy, &bytes[..end]).unwrap();
    let printed = tool(
        "org.apache.kafka.tools.DumpLogSegments",
        &[
            "--files",
            copy.to_str().unwrap(),
            "--transaction-log-decoder",
            "--print-data-log",
        ],
    );
    let mut theirs = Vec::new();
    for line in printed.lines().filter(|l| l.starts_with("| offset:")) {
        let key_at = line.find(" key: ").expect("a decoded key") + " key: ".len();
        let payload_at = line.find(" payload: ").expect("a decoded payload");
        let key: serde_json::Value = serde_json::from_str(&line[key_at..payload_at]).unwrap();
        let payload = &line[payload_at + " payload: ".len()..];
        let value = (payload != "<DELETE>").then(|| from_kafka_json(&serde_json::from_str(payload).unwrap()));
        let id = key["data"]["transactionalId"].as_str().unwrap().to_owned();
        theirs.push((id, value));
    }
    assert_eq!(theirs.len(), ours.len(), "{printed}");
    let set = |v: &Option<TransactionLogValue>| -> Option<BTreeSet<(String, i32)>> {
        v.as_ref()?.transaction_partitions.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|t| t.partition_ids.iter().map(|p| (t.topic.clone(), *p)))
                .collect()
        })
    };
    for (i, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(ours.0, theirs.0, "record {i}");
        assert_eq!(set(&ours.1), set(&theirs.1), "record {i}");
        let fields = |v: &Option<TransactionLogValue>| {
            v.clone().map(|v| TransactionLogValue {
                transaction_partitions: None,
                ..v
            })
        };
        assert_eq!(fields(&ours.1), fields(&theirs.1), "record {i}");
    }
    // What the steps wrote: states 0 1 1 2 4 1 3 5 0, another id's Empty,
    // then both ids expired (tombstones).
    let states: Vec<Option<i8>> = theirs
        .iter()
        .map(|(_, v)| v.as_ref().map(|v| v.transaction_status))
        .collect();
    assert_eq!(
        states,
        [
            Some(0),
            Some(1),
            Some(1),
            Some(2),
            Some(4),
            Some(1),
            Some(3),
            Some(5),
            Some(0),
            Some(0),
            None,
            None
        ]
    );
    assert_eq!(
        set(&theirs[3].1).unwrap(),
        BTreeSet::from([
            ("__consumer_offsets".to_owned(), 1),
            ("orders".to_owned(), 0),
            ("orders".to_owned(), 3),
            ("payments".to_owned(), 1)
        ])
    );
}
