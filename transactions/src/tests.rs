//! The coordinator's behaviour, request by request (after Kafka's
//! `TransactionCoordinatorTest` and `TransactionStateManagerTest`), its
//! records against Kafka's own, its store across crashes, and a property
//! test of random requests, ticks, failures and reloads against a small
//! model of what must hold.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use super::coordinator::{GROUP_OFFSETS_TOPIC, ListTransactionsResult};
use super::external::codes::*;
use super::external::{KeyedRecord, LiveValues, LogError, TopicPartition};
use super::record::{TransactionLogValue, decode_key};
use super::*;

const T0: i64 = 1_700_000_000_000;
const TIMEOUT_MS: i32 = 60_000;

/// The log in memory: every append kept in order; the next `fail`
/// appends fail.
#[derive(Clone, Default)]
struct MemoryLog {
    records: Rc<RefCell<Vec<KeyedRecord>>>,
    fail: Rc<Cell<usize>>,
}

impl TransactionStateLog for MemoryLog {
    fn append(&mut self, records: Vec<KeyedRecord>) -> Result<(), LogError> {
        if self.fail.get() > 0 {
            self.fail.set(self.fail.get() - 1);
            return Err(LogError::io("append to", "memory")(std::io::Error::other("injected")));
        }
        self.records.borrow_mut().extend(records);
        Ok(())
    }
}

impl MemoryLog {
    /// The live value of every key, as a reopened log would find them.
    fn live(&self) -> LiveValues {
        let mut live = LiveValues::new();
        for r in self.records.borrow().iter() {
            match &r.value {
                Some(v) => live.insert(r.key.clone(), v.clone()),
                None => live.remove(&r.key),
            };
        }
        live
    }

    fn written(&self) -> usize {
        self.records.borrow().len()
    }

    /// The last record of `id`: `Some(None)` for a tombstone.
    fn last(&self, id: &str) -> Option<Option<TransactionMetadata>> {
        self.records
            .borrow()
            .iter()
            .rev()
            .find(|r| decode_key(&r.key).unwrap() == id)
            .map(|r| {
                r.value
                    .as_ref()
                    .map(|v| TransactionMetadata::from_log_value(&TransactionLogValue::decode(v).unwrap()).unwrap())
            })
    }
}

/// Producer ids counting up from `next`.
#[derive(Clone)]
struct Counter(Rc<Cell<i64>>);

impl ProducerIdAllocator for Counter {
    fn next_producer_id(&mut self) -> std::io::Result<i64> {
        let id = self.0.get();
        self.0.set(id + 1);
        Ok(id)
    }

    fn reserve_through(&mut self, producer_id: i64) -> std::io::Result<()> {
        self.0.set(self.0.get().max(producer_id + 1));
        Ok(())
    }
}

struct Harness {
    c: TransactionCoordinator,
    log: MemoryLog,
    pids: Counter,
    config: TransactionConfig,
}

impl Harness {
    fn new(config: TransactionConfig) -> Self {
        Self::loaded(config, LiveValues::new(), 1000).0
    }

    fn loaded(config: TransactionConfig, values: LiveValues, first_pid: i64) -> (Self, Vec<MarkerRequest>) {
        let log = MemoryLog::default();
        for (key, value) in &values {
            log.records.borrow_mut().push(KeyedRecord {
                key: key.clone(),
                value: Some(value.clone()),
                timestamp_ms: None,
            });
        }
        let pids = Counter(Rc::new(Cell::new(first_pid)));
        let (c, markers) =
            TransactionCoordinator::load(0, config, Box::new(log.clone()), Box::new(pids.clone()), values, T0).unwrap();
        (Self { c, log, pids, config }, markers)
    }

    /// A restart: a new coordinator from what the log holds.
    fn reload(&mut self, now_ms: i64) -> Vec<MarkerRequest> {
        let (c, markers) = TransactionCoordinator::load(
            0,
            self.config,
            Box::new(self.log.clone()),
            Box::new(self.pids.clone()),
            self.log.live(),
            now_ms,
        )
        .unwrap();
        self.c = c;
        markers
    }

    fn init(
        &mut self,
        id: &str,
        expected: Option<(i64, i16)>,
        now_ms: i64,
    ) -> (InitProducerIdResult, Vec<MarkerRequest>) {
        self.c.init_producer_id(init_request(id, TIMEOUT_MS, expected), now_ms)
    }

    /// InitProducerId that must succeed: (producer id, epoch).
    fn producer(&mut self, id: &str, now_ms: i64) -> (i64, i16) {
        let (r, markers) = self.init(id, None, now_ms);
        assert_eq!((r.error, markers.len()), (NONE, 0), "{r:?}");
        (r.producer_id, r.producer_epoch)
    }

    fn add(&mut self, id: &str, p: (i64, i16), partitions: &[TopicPartition], now_ms: i64) -> Vec<i16> {
        let checks = partitions
            .iter()
            .map(|tp| PartitionCheck {
                partition: tp.clone(),
                refused: None,
            })
            .collect();
        self.c
            .add_partitions(id, p.0, p.1, checks, now_ms)
            .into_iter()
            .map(|(_, code)| code)
            .collect()
    }

    fn end(&mut self, id: &str, p: (i64, i16), result: TransactionResult, now_ms: i64) -> (i16, Vec<MarkerRequest>) {
        self.c.end_txn(id, p.0, p.1, result, now_ms)
    }

    /// Reports every marker of `requests` with `outcome`.
    fn ack(&mut self, requests: &[MarkerRequest], outcome: MarkerOutcome, now_ms: i64) {
        for r in requests {
            for t in &r.targets {
                self.c.marker_written(r, t, outcome, now_ms);
            }
        }
    }

    fn state(&self, id: &str) -> TransactionState {
        self.c.describe(id).unwrap().state
    }
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

/// An InitProducerId of `id` with `timeout_ms`, naming `expected` (KIP-360) if given.
fn init_request(id: &str, timeout_ms: i32, expected: Option<(i64, i16)>) -> InitProducerIdRequest<'_> {
    let (producer_id, producer_epoch) = expected.unwrap_or((-1, -1));
    InitProducerIdRequest {
        transactional_id: id,
        transaction_timeout_ms: timeout_ms,
        producer_id,
        producer_epoch,
        enable_2pc: false,
        keep_prepared_txn: false,
    }
}

fn harness() -> Harness {
    Harness::new(TransactionConfig::default())
}

/// An id with a producer and a transaction open on `partitions`.
fn ongoing(h: &mut Harness, id: &str, partitions: &[TopicPartition]) -> (i64, i16) {
    let p = h.producer(id, T0);
    assert!(h.add(id, p, partitions, T0 + 1).iter().all(|c| *c == NONE));
    p
}

#[test]
fn a_new_transactional_id_gets_a_new_producer_id_at_epoch_zero() {
    let mut h = harness();
    let (r, _) = h.init("a", None, T0);
    assert_eq!((r.error, r.producer_id, r.producer_epoch), (NONE, 1000, 0));
    let stored = h.log.last("a").unwrap().unwrap();
    assert_eq!(
        (
            stored.state,
            stored.producer_id,
            stored.producer_epoch,
            stored.txn_timeout_ms
        ),
        (TransactionState::Empty, 1000, 0, TIMEOUT_MS)
    );
    // Another id, another producer id.
    assert_eq!(h.producer("b", T0), (1001, 0));
    // The same id again: the same producer id, the next epoch (the old producer is fenced).
    assert_eq!(h.producer("a", T0 + 1), (1000, 1));
}

#[test]
fn init_producer_id_refuses_bad_requests_as_kafka() {
    let mut h = harness();
    let req = |id, timeout, producer_id, producer_epoch| InitProducerIdRequest {
        producer_id,
        producer_epoch,
        ..init_request(id, timeout, None)
    };
    let code = |h: &mut Harness, r| h.c.init_producer_id(r, T0).0.error;
    assert_eq!(code(&mut h, req("", TIMEOUT_MS, -1, -1)), INVALID_REQUEST);
    assert_eq!(code(&mut h, req("a", 0, -1, -1)), INVALID_TRANSACTION_TIMEOUT);
    assert_eq!(code(&mut h, req("a", 900_001, -1, -1)), INVALID_TRANSACTION_TIMEOUT);
    assert_eq!(code(&mut h, req("a", TIMEOUT_MS, 5, -1)), INVALID_REQUEST);
    assert_eq!(code(&mut h, req("a", TIMEOUT_MS, -1, 5)), INVALID_REQUEST);
    let long = "x".repeat(40_000);
    assert_eq!(code(&mut h, req(&long, TIMEOUT_MS, -1, -1)), INVALID_REQUEST);
    let two_phase = InitProducerIdRequest {
        enable_2pc: true,
        ..req("a", TIMEOUT_MS, -1, -1)
    };
    assert_eq!(code(&mut h, two_phase), TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    let keep = InitProducerIdRequest {
        keep_prepared_txn: true,
        ..req("a", TIMEOUT_MS, -1, -1)
    };
    assert_eq!(code(&mut h, keep), UNSUPPORTED_VERSION);
    assert_eq!(h.log.written(), 0);
    assert_eq!(code(&mut h, req("a", 900_000, -1, -1)), NONE);
}

/// KIP-360: a producer naming its current epoch gets it bumped; a retry of
/// that gets the same answer; an older epoch or another producer id is fenced.
#[test]
fn kip_360_epoch_bumps_and_retries() {
    let mut h = harness();
    let p = h.producer("a", T0);
    let (r, _) = h.init("a", Some(p), T0 + 1);
    assert_eq!((r.error, r.producer_id, r.producer_epoch), (NONE, 1000, 1));
    let (retry, _) = h.init("a", Some(p), T0 + 2);
    assert_eq!((retry.error, retry.producer_epoch), (NONE, 1));
    assert_eq!(h.init("a", Some((1000, 7)), T0).0.error, PRODUCER_FENCED);
    assert_eq!(h.init("a", Some((999, 1)), T0).0.error, PRODUCER_FENCED);
    // A producer recovering from UNKNOWN_PRODUCER_ID on an id this
    // coordinator never saw gets a new producer id.
    let (fresh, _) = h.init("b", Some((77, 3)), T0);
    assert_eq!((fresh.error, fresh.producer_id, fresh.producer_epoch), (NONE, 1001, 0));
}

/// An exhausted epoch (i16::MAX - 1) rotates to a new producer id at epoch
/// 0; the previous id with its exhausted epoch is a retry, not a zombie.
#[test]
fn exhausted_epochs_rotate_the_producer_id() {
    let mut start = TransactionMetadata::new(3000, TIMEOUT_MS, T0);
    start.producer_epoch = i16::MAX - 2;
    start.state = TransactionState::CompleteCommit;
    start.txn_start_timestamp_ms = T0;
    let values = LiveValues::from([(
        record::encode_key("b").unwrap(),
        start.to_log_value().encode(record::VALUE_VERSION_1).unwrap(),
    )]);
    let (mut h, _) = Harness::loaded(TransactionConfig::default(), values, 10);
    assert_eq!(h.producer("b", T0 + 1), (3000, i16::MAX - 1));
    // Loading moved the allocator past every id in the log.
    let (r, _) = h.init("b", Some((3000, i16::MAX - 1)), T0 + 2);
    assert_eq!((r.error, r.producer_id, r.producer_epoch), (NONE, 3001, 0));
    let stored = h.log.last("b").unwrap().unwrap();
    assert_eq!((stored.producer_id, stored.prev_producer_id), (3001, 3000));
    // The producer retries with the old id and exhausted epoch (it never
    // heard the answer): it is recognised, not fenced, and gets the same answer.
    let (retry, _) = h.init("b", Some((3000, i16::MAX - 1)), T0 + 3);
    assert_eq!((retry.error, retry.producer_id, retry.producer_epoch), (NONE, 3001, 0));
}

/// A newer producer of the same id aborts the zombie's ongoing
/// transaction at a bumped epoch and is told to retry; the zombie is fenced.
#[test]
fn init_producer_id_fences_an_ongoing_transaction() {
    let mut h = harness();
    let zombie = ongoing(&mut h, "a", &[tp("t", 0), tp("t", 1)]);
    let (r, markers) = h.init("a", None, T0 + 5);
    assert_eq!(r.error, CONCURRENT_TRANSACTIONS);
    assert_eq!(markers.len(), 1);
    let m = &markers[0];
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.result),
        (1000, 1, TransactionResult::Abort)
    );
    assert_eq!(
        m.targets,
        [MarkerTarget::Partition(tp("t", 0)), MarkerTarget::Partition(tp("t", 1))]
    );
    assert_eq!(h.state("a"), TransactionState::PrepareAbort);
    assert_eq!(h.log.last("a").unwrap().unwrap().producer_epoch, 1);
    // While the abort is in flight, the new producer keeps hearing CONCURRENT_TRANSACTIONS.
    assert_eq!(h.init("a", None, T0 + 6).0.error, CONCURRENT_TRANSACTIONS);
    assert_eq!(h.end("a", zombie, TransactionResult::Commit, T0 + 6).0, PRODUCER_FENCED);
    h.ack(&markers, MarkerOutcome::Written, T0 + 7);
    assert_eq!(h.state("a"), TransactionState::CompleteAbort);
    // Its retry succeeds at the next epoch; the zombie stays fenced.
    assert_eq!(h.producer("a", T0 + 8), (1000, 2));
    assert_eq!(h.init("a", Some(zombie), T0 + 9).0.error, PRODUCER_FENCED);
    assert_eq!(h.add("a", zombie, &[tp("t", 0)], T0 + 9), [PRODUCER_FENCED]);
}

#[test]
fn add_partitions_checks_the_producer_and_the_state() {
    let mut h = harness();
    assert_eq!(h.add("nope", (1, 0), &[tp("t", 0)], T0), [INVALID_PRODUCER_ID_MAPPING]);
    assert_eq!(h.add("", (1, 0), &[tp("t", 0)], T0), [INVALID_REQUEST]);
    let p = h.producer("a", T0);
    assert_eq!(
        h.add("a", (p.0 + 1, p.1), &[tp("t", 0)], T0),
        [INVALID_PRODUCER_ID_MAPPING]
    );
    assert_eq!(h.add("a", (p.0, p.1 + 1), &[tp("t", 0)], T0), [PRODUCER_FENCED]);
    assert_eq!(h.add("a", p, &[tp("t", 0)], T0 + 1), [NONE]);
    let d = h.c.describe("a").unwrap();
    assert_eq!(
        (d.state, d.transaction_start_time_ms),
        (TransactionState::Ongoing, T0 + 1)
    );
    // Partitions already in: answered without a write.
    let before = h.log.written();
    assert_eq!(h.add("a", p, &[tp("t", 0)], T0 + 2), [NONE]);
    assert_eq!(h.log.written(), before);
    assert_eq!(h.add("a", p, &[tp("t", 1), tp("u", 0)], T0 + 3), [NONE, NONE]);
    assert_eq!(
        h.c.describe("a").unwrap().topics,
        [("t".into(), vec![0, 1]), ("u".into(), vec![0])]
    );
    assert_eq!(h.c.describe("a").unwrap().transaction_start_time_ms, T0 + 1);
    // While markers are written: CONCURRENT_TRANSACTIONS.
    let (code, _) = h.end("a", p, TransactionResult::Commit, T0 + 4);
    assert_eq!(code, NONE);
    assert_eq!(h.add("a", p, &[tp("t", 5)], T0 + 5), [CONCURRENT_TRANSACTIONS]);
}

/// One refused partition keeps the whole request out of the transaction
/// (KafkaApis answers the others OPERATION_NOT_ATTEMPTED); internal topics
/// are refused as Kafka refuses them.
#[test]
fn a_refused_partition_adds_none() {
    let mut h = harness();
    let p = h.producer("a", T0);
    let written = h.log.written();
    let checks = vec![
        PartitionCheck {
            partition: tp("t", 0),
            refused: None,
        },
        PartitionCheck {
            partition: tp("mirror", 0),
            refused: Some(READ_ONLY_TOPIC),
        },
        PartitionCheck {
            partition: tp(GROUP_OFFSETS_TOPIC, 0),
            refused: None,
        },
    ];
    let answer = h.c.add_partitions("a", p.0, p.1, checks, T0);
    assert_eq!(
        answer,
        [
            (tp("t", 0), OPERATION_NOT_ATTEMPTED),
            (tp("mirror", 0), READ_ONLY_TOPIC),
            (tp(GROUP_OFFSETS_TOPIC, 0), TOPIC_AUTHORIZATION_FAILED),
        ]
    );
    assert_eq!((h.log.written(), h.state("a")), (written, TransactionState::Empty));
}

/// KIP-890 part 1: the partition leader's check before a transactional append.
#[test]
fn verify_partitions_answers_whether_each_is_in_the_transaction() {
    let mut h = harness();
    assert_eq!(
        h.c.verify_partitions("a", 1, 0, &[tp("t", 0)]),
        [(tp("t", 0), INVALID_PRODUCER_ID_MAPPING)]
    );
    let p = ongoing(&mut h, "a", &[tp("t", 0)]);
    assert_eq!(
        h.c.verify_partitions("a", p.0, p.1, &[tp("t", 0), tp("t", 1)]),
        [(tp("t", 0), NONE), (tp("t", 1), TRANSACTION_ABORTABLE)]
    );
    assert_eq!(
        h.c.verify_partitions("a", p.0, p.1 - 1, &[tp("t", 0)]),
        [(tp("t", 0), PRODUCER_FENCED)]
    );
    assert_eq!(
        h.c.verify_partitions("a", p.0 + 1, p.1, &[tp("t", 0)]),
        [(tp("t", 0), INVALID_PRODUCER_ID_MAPPING)]
    );
    assert_eq!(
        h.c.verify_partitions("", p.0, p.1, &[tp("t", 0)]),
        [(tp("t", 0), INVALID_REQUEST)]
    );
    h.end("a", p, TransactionResult::Abort, T0 + 2);
    assert_eq!(
        h.c.verify_partitions("a", p.0, p.1, &[tp("t", 0)]),
        [(tp("t", 0), CONCURRENT_TRANSACTIONS)]
    );
}

#[test]
fn commit_persists_prepare_then_writes_markers_then_completes() {
    let mut h = harness();
    let p = ongoing(&mut h, "a", &[tp("t", 0), tp("u", 2)]);
    assert_eq!(h.c.add_offsets("a", p.0, p.1, 3, T0 + 2), NONE);
    let (code, markers) = h.end("a", p, TransactionResult::Commit, T0 + 3);
    assert_eq!(code, NONE);
    // Persisted before the markers are asked for.
    assert_eq!(h.log.last("a").unwrap().unwrap().state, TransactionState::PrepareCommit);
    let m = &markers[..];
    assert_eq!(m.len(), 1);
    assert_eq!(
        (
            m[0].producer_id,
            m[0].producer_epoch,
            m[0].coordinator_epoch,
            m[0].result
        ),
        (p.0, p.1, 0, TransactionResult::Commit)
    );
    assert_eq!(
        m[0].targets,
        [
            MarkerTarget::GroupOffsets { group_shard: 3 },
            MarkerTarget::Partition(tp("t", 0)),
            MarkerTarget::Partition(tp("u", 2)),
        ]
    );
    // A retried EndTxn while the markers are written.
    assert_eq!(
        h.end("a", p, TransactionResult::Commit, T0 + 4).0,
        CONCURRENT_TRANSACTIONS
    );
    assert_eq!(h.end("a", p, TransactionResult::Abort, T0 + 4).0, INVALID_TXN_STATE);
    // DescribeTransactions shows the partitions still without a marker.
    h.c.marker_written(&m[0], &m[0].targets[1], MarkerOutcome::Written, T0 + 5);
    let d = h.c.describe("a").unwrap();
    assert_eq!(
        (d.state, d.topics),
        (
            TransactionState::PrepareCommit,
            vec![(GROUP_OFFSETS_TOPIC.into(), vec![3]), ("u".into(), vec![2])]
        )
    );
    // A deleted partition needs no marker.
    h.c.marker_written(&m[0], &m[0].targets[2], MarkerOutcome::PartitionGone, T0 + 6);
    assert_eq!(h.state("a"), TransactionState::PrepareCommit);
    h.c.marker_written(&m[0], &m[0].targets[0], MarkerOutcome::Written, T0 + 7);
    let done = h.log.last("a").unwrap().unwrap();
    assert_eq!(
        (done.state, done.partitions.len(), done.txn_last_update_timestamp_ms),
        (TransactionState::CompleteCommit, 0, T0 + 7)
    );
    // A retry after success; then the next transaction.
    assert_eq!(h.end("a", p, TransactionResult::Commit, T0 + 8).0, NONE);
    assert_eq!(h.end("a", p, TransactionResult::Abort, T0 + 8).0, INVALID_TXN_STATE);
    assert_eq!(h.add("a", p, &[tp("t", 9)], T0 + 9), [NONE]);
    assert_eq!(h.c.describe("a").unwrap().transaction_start_time_ms, T0 + 9);
}

#[test]
fn end_txn_refusals_follow_kafka() {
    let mut h = harness();
    assert_eq!(h.end("", (1, 0), TransactionResult::Commit, T0).0, INVALID_REQUEST);
    assert_eq!(
        h.end("a", (1, 0), TransactionResult::Commit, T0).0,
        INVALID_PRODUCER_ID_MAPPING
    );
    let p = h.producer("a", T0);
    // Nothing open.
    assert_eq!(h.end("a", p, TransactionResult::Commit, T0).0, INVALID_TXN_STATE);
    assert_eq!(h.end("a", p, TransactionResult::Abort, T0).0, INVALID_TXN_STATE);
    assert_eq!(
        h.end("a", (p.0 + 1, p.1), TransactionResult::Abort, T0).0,
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        h.end("a", (p.0, p.1 + 1), TransactionResult::Abort, T0).0,
        PRODUCER_FENCED
    );
    // An abort completes as a commit does; the retried abort is fine, a commit is not.
    assert_eq!(h.add("a", p, &[tp("t", 0)], T0), [NONE]);
    let (code, markers) = h.end("a", p, TransactionResult::Abort, T0 + 1);
    assert_eq!(code, NONE);
    assert_eq!(h.end("a", p, TransactionResult::Commit, T0 + 1).0, INVALID_TXN_STATE);
    h.ack(&markers, MarkerOutcome::Written, T0 + 2);
    assert_eq!(h.state("a"), TransactionState::CompleteAbort);
    assert_eq!(h.end("a", p, TransactionResult::Abort, T0 + 3).0, NONE);
    assert_eq!(h.end("a", p, TransactionResult::Commit, T0 + 3).0, INVALID_TXN_STATE);
}

/// AddPartitionsToTxn with no partition opens an empty transaction, which
/// ends without markers.
#[test]
fn a_transaction_without_partitions_completes_at_once() {
    let mut h = harness();
    let p = h.producer("a", T0);
    assert_eq!(h.add("a", p, &[], T0 + 1), Vec::<i16>::new());
    assert_eq!(h.state("a"), TransactionState::Ongoing);
    let (code, markers) = h.end("a", p, TransactionResult::Commit, T0 + 2);
    assert_eq!((code, markers.len()), (NONE, 0));
    assert_eq!(
        h.log.last("a").unwrap().unwrap().state,
        TransactionState::CompleteCommit
    );
}

#[test]
fn markers_that_cannot_be_written_yet_are_asked_again_after_a_backoff() {
    let mut h = harness();
    let p = ongoing(&mut h, "a", &[tp("t", 0), tp("t", 1)]);
    let (_, markers) = h.end("a", p, TransactionResult::Commit, T0 + 2);
    let m = &markers[0];
    h.c.marker_written(m, &m.targets[0], MarkerOutcome::Written, T0 + 3);
    h.c.marker_written(m, &m.targets[1], MarkerOutcome::Retriable, T0 + 3);
    let backoff = h.config.marker_retry_backoff_ms;
    assert_eq!(h.c.next_deadline(), Some(T0 + 3 + backoff));
    assert!(h.c.tick(T0 + 3 + backoff - 1).is_empty());
    let again = h.c.tick(T0 + 3 + backoff);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].targets, [MarkerTarget::Partition(tp("t", 1))]);
    // A second outcome for a marker already written, and outcomes for
    // another epoch or result, change nothing.
    h.c.marker_written(m, &m.targets[0], MarkerOutcome::Retriable, T0 + 4);
    let stale = MarkerRequest {
        producer_epoch: p.1 - 1,
        ..again[0].clone()
    };
    h.c.marker_written(&stale, &again[0].targets[0], MarkerOutcome::Written, T0 + 4);
    let other = MarkerRequest {
        result: TransactionResult::Abort,
        ..again[0].clone()
    };
    h.c.marker_written(&other, &again[0].targets[0], MarkerOutcome::Written, T0 + 4);
    assert_eq!(h.state("a"), TransactionState::PrepareCommit);
    h.ack(&again, MarkerOutcome::Written, T0 + 5);
    assert_eq!(h.state("a"), TransactionState::CompleteCommit);
}

/// A fenced marker stops this coordinator's sending (as Kafka's); the next
/// load sends the transaction's markers again.
#[test]
fn a_fenced_marker_waits_for_the_next_load() {
    let mut h = harness();
    let p = ongoing(&mut h, "a", &[tp("t", 0)]);
    let (_, markers) = h.end("a", p, TransactionResult::Commit, T0 + 2);
    h.ack(&markers, MarkerOutcome::Fenced, T0 + 3);
    assert!(h.c.tick(T0 + 3_600_000).is_empty());
    assert_eq!(h.state("a"), TransactionState::PrepareCommit);
    let resent = h.reload(T0 + 4);
    assert_eq!(resent.len(), 1);
    assert_eq!(
        (resent[0].producer_epoch, resent[0].result, &resent[0].targets),
        (p.1, TransactionResult::Commit, &markers[0].targets)
    );
    h.ack(&resent, MarkerOutcome::Written, T0 + 5);
    assert_eq!(h.state("a"), TransactionState::CompleteCommit);
}

/// A failed write changes nothing: the answer is retriable and the state
/// is what was persisted last.
#[test]
fn a_failed_write_changes_nothing() {
    let mut h = harness();
    h.log.fail.set(1);
    let (r, _) = h.init("a", None, T0);
    assert_eq!(r.error, COORDINATOR_NOT_AVAILABLE);
    // Kafka keeps the id (not persisted); a retry reuses its producer id.
    assert_eq!(h.c.describe("a").unwrap().producer_epoch, -1);
    assert_eq!(h.producer("a", T0 + 1), (1000, 0));
    h.log.fail.set(1);
    assert_eq!(
        h.add("a", (1000, 0), &[tp("t", 0)], T0 + 2),
        [COORDINATOR_NOT_AVAILABLE]
    );
    assert_eq!(h.state("a"), TransactionState::Empty);
    assert_eq!(h.add("a", (1000, 0), &[tp("t", 0)], T0 + 3), [NONE]);
    h.log.fail.set(1);
    assert_eq!(
        h.end("a", (1000, 0), TransactionResult::Commit, T0 + 4),
        (COORDINATOR_NOT_AVAILABLE, Vec::new())
    );
    assert_eq!(h.state("a"), TransactionState::Ongoing);
    // The fence of an InitProducerId: not written, so not done, and the
    // epoch it would have used is not used up.
    h.log.fail.set(1);
    assert_eq!(h.init("a", None, T0 + 5).0.error, COORDINATOR_NOT_AVAILABLE);
    assert_eq!(h.c.describe("a").unwrap().producer_epoch, 0);
    let (code, markers) = h.end("a", (1000, 0), TransactionResult::Commit, T0 + 6);
    assert_eq!(code, NONE);
    // The completion's write fails: it is tried again after the backoff.
    h.log.fail.set(1);
    h.ack(&markers, MarkerOutcome::Written, T0 + 7);
    assert_eq!(h.state("a"), TransactionState::PrepareCommit);
    let retry_at = T0 + 7 + h.config.write_retry_backoff_ms;
    assert_eq!(h.c.next_deadline(), Some(retry_at));
    assert!(h.c.tick(retry_at).is_empty());
    assert_eq!(
        h.log.last("a").unwrap().unwrap().state,
        TransactionState::CompleteCommit
    );
}

/// `transaction.timeout.ms` from the first partition: the transaction is
/// aborted (its producer fenced) by the first tick after it.
#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let mut h = harness();
    let p = ongoing(&mut h, "a", &[tp("t", 0)]);
    let deadline = T0 + 1 + i64::from(TIMEOUT_MS) + 1;
    assert_eq!(h.c.next_deadline(), Some(deadline));
    assert!(h.c.tick(deadline - 1).is_empty());
    assert_eq!(h.state("a"), TransactionState::Ongoing);
    let markers = h.c.tick(deadline);
    assert_eq!(markers.len(), 1);
    assert_eq!(
        (markers[0].producer_epoch, markers[0].result),
        (p.1 + 1, TransactionResult::Abort)
    );
    assert_eq!(h.log.last("a").unwrap().unwrap().state, TransactionState::PrepareAbort);
    h.ack(&markers, MarkerOutcome::Written, deadline + 1);
    assert_eq!(h.state("a"), TransactionState::CompleteAbort);
    assert_eq!(
        h.end("a", p, TransactionResult::Commit, deadline + 2).0,
        PRODUCER_FENCED
    );
    // A timeout whose abort cannot be written is tried again later.
    let q = h.producer("b", deadline);
    assert_eq!(h.add("b", q, &[tp("t", 1)], deadline), [NONE]);
    let b_deadline = deadline + i64::from(TIMEOUT_MS) + 1;
    h.log.fail.set(1);
    assert!(h.c.tick(b_deadline).is_empty());
    assert_eq!(h.state("b"), TransactionState::Ongoing);
    let retry = b_deadline + h.config.write_retry_backoff_ms;
    assert_eq!(h.c.tick(retry).len(), 1);
    assert_eq!(h.state("b"), TransactionState::PrepareAbort);
}

/// `transactional.id.expiration.ms`: an idle id is removed (a tombstone);
/// one with a transaction open never is.
#[test]
fn idle_transactional_ids_expire() {
    let config = TransactionConfig {
        transactional_id_expiration_ms: 10_000,
        ..TransactionConfig::default()
    };
    let mut h = Harness::new(config);
    h.producer("idle", T0);
    // A transaction open for longer than the expiry (its timeout is longer).
    let (busy, _) = h.c.init_producer_id(init_request("busy", 900_000, None), T0);
    assert_eq!(busy.error, NONE);
    let p = (busy.producer_id, busy.producer_epoch);
    assert_eq!(h.add("busy", p, &[tp("t", 0)], T0), [NONE]);
    assert_eq!(h.c.next_deadline(), Some(T0 + 10_000));
    // A tombstone that cannot be written is tried again after the backoff.
    h.log.fail.set(1);
    assert!(h.c.tick(T0 + 10_000).is_empty());
    assert!(h.c.describe("idle").is_ok());
    assert!(h.c.tick(T0 + 10_000 + h.config.write_retry_backoff_ms).is_empty());
    assert_eq!(h.c.describe("idle"), Err(TRANSACTIONAL_ID_NOT_FOUND));
    assert_eq!(h.log.last("idle"), Some(None));
    assert_eq!(h.state("busy"), TransactionState::Ongoing);
    // Gone after a reload too; a new InitProducerId starts it afresh.
    h.reload(T0 + 20_000);
    assert_eq!(h.c.describe("idle"), Err(TRANSACTIONAL_ID_NOT_FOUND));
    assert_eq!(h.producer("idle", T0 + 20_000).1, 0);
}

#[test]
fn describe_and_list_show_kafkas_names_and_apply_the_filters() {
    let mut h = harness();
    assert_eq!(h.c.describe(""), Err(INVALID_REQUEST));
    assert_eq!(h.c.describe("nope"), Err(TRANSACTIONAL_ID_NOT_FOUND));
    let a = ongoing(&mut h, "app-a", &[tp("t", 0)]);
    h.producer("app-b", T0);
    let c = ongoing(&mut h, "other", &[tp("t", 1)]);
    h.end("other", c, TransactionResult::Abort, T0 + 2);
    let d = h.c.describe("app-a").unwrap();
    assert_eq!(
        (
            d.state.name(),
            d.producer_id,
            d.producer_epoch,
            d.transaction_timeout_ms,
            d.transaction_start_time_ms
        ),
        ("Ongoing", a.0, a.1, TIMEOUT_MS, T0 + 1)
    );
    let list = |states: &[&str], pids: Vec<i64>, duration_ms: i64, pattern: Option<&str>, now_ms: i64| {
        let filter = ListTransactionsFilter::new(
            states.iter().map(|s| s.to_string()).collect(),
            pids,
            duration_ms,
            pattern,
        )
        .unwrap();
        h.c.list(&filter, now_ms)
    };
    let ids = |r: &ListTransactionsResult| -> Vec<String> {
        r.transactions.iter().map(|t| t.transactional_id.clone()).collect()
    };
    assert_eq!(ids(&list(&[], vec![], -1, None, T0)), ["app-a", "app-b", "other"]);
    assert_eq!(
        ids(&list(&["Ongoing", "PrepareAbort"], vec![], -1, None, T0)),
        ["app-a", "other"]
    );
    let unknown = list(&["Ongoing", "Running"], vec![], -1, None, T0);
    assert_eq!(
        (ids(&unknown), unknown.unknown_state_filters),
        (vec!["app-a".to_owned()], vec!["Running".to_owned()])
    );
    assert!(list(&["Running"], vec![], -1, None, T0).transactions.is_empty());
    assert_eq!(ids(&list(&[], vec![a.0], -1, None, T0)), ["app-a"]);
    assert_eq!(ids(&list(&[], vec![], -1, Some("app-.*"), T0)), ["app-a", "app-b"]);
    assert_eq!(ids(&list(&[], vec![], -1, Some("app"), T0)), Vec::<String>::new());
    assert_eq!(ids(&list(&[], vec![], -1, Some(""), T0)).len(), 3);
    // KIP-994: running longer than the duration (an idle id's start is -1).
    assert_eq!(
        ids(&list(&["Ongoing"], vec![], 5_000, None, T0 + 5_001)),
        Vec::<String>::new()
    );
    assert_eq!(ids(&list(&["Ongoing"], vec![], 5_000, None, T0 + 5_002)), ["app-a"]);
    let refused = ListTransactionsFilter::new(vec![], vec![], -1, Some("(")).unwrap_err();
    assert_eq!(refused.0, INVALID_REGULAR_EXPRESSION);
    assert!(
        refused
            .1
            .starts_with("Transaction ID pattern `(` is not a valid regular expression"),
        "{}",
        refused.1
    );
}

/// The bounds: ids per shard, and a record's size (`message.max.bytes`).
#[test]
fn limits_are_enforced_before_anything_is_written() {
    let config = TransactionConfig {
        transactional_ids_max: 2,
        record_bytes_max: 2048,
        ..TransactionConfig::default()
    };
    let mut h = Harness::new(config);
    h.producer("a", T0);
    h.producer("b", T0);
    assert_eq!(h.init("c", None, T0).0.error, COORDINATOR_NOT_AVAILABLE);
    assert_eq!(h.producer("a", T0 + 1).1, 1);
    let many: Vec<TopicPartition> = (0..1000).map(|p| tp("t", p)).collect();
    let written = h.log.written();
    assert_eq!(h.add("a", (1000, 1), &many, T0 + 2), vec![UNKNOWN_SERVER_ERROR; 1000]);
    assert_eq!((h.log.written(), h.state("a")), (written, TransactionState::Empty));
}

/// A load finds transactions where the last acknowledged record left
/// them: half-ended ones get their markers again, open ones keep their
/// deadline, unreadable records are skipped.
#[test]
fn a_load_resends_markers_and_keeps_deadlines() {
    let mut h = harness();
    let p = ongoing(&mut h, "committing", &[tp("t", 0)]);
    let (_, lost) = h.end("committing", p, TransactionResult::Commit, T0 + 2);
    ongoing(&mut h, "open", &[tp("t", 1)]);
    let mut values = h.log.live();
    values.insert(vec![0, 9, 1], vec![0, 1]);
    values.insert(record::encode_key("garbage").unwrap(), vec![0, 1, 2]);
    let (mut again, resent) = Harness::loaded(TransactionConfig::default(), values, 0);
    assert_eq!(resent, lost);
    assert_eq!(again.c.next_deadline(), Some(T0 + 1 + i64::from(TIMEOUT_MS) + 1));
    assert_eq!(again.c.describe("garbage"), Err(TRANSACTIONAL_ID_NOT_FOUND));
    // The allocator moved past the producer ids of the log.
    assert_eq!(again.producer("new", T0 + 3).0, 1002);
    again.ack(&resent, MarkerOutcome::Written, T0 + 4);
    assert_eq!(again.state("committing"), TransactionState::CompleteCommit);
}

/// Kafka 4.3.1's own records for the same steps (tests/kafka's
/// `TxnLogVectors`: name, key, value): the coordinator writes the same
/// bytes (the same fields where Kafka's hash-set order of partitions differs).
const KAFKA_VECTORS: &str = include_str!("kafka_vectors.txt");

fn kafka_vectors() -> BTreeMap<String, (Vec<u8>, Option<TransactionLogValue>)> {
    let unhex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    KAFKA_VECTORS
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut parts = line.split(' ');
            let name = parts.next().unwrap().to_owned();
            let key = unhex(parts.next().unwrap());
            let value = match parts.next().unwrap() {
                "null" => None,
                v => Some(TransactionLogValue::decode(&unhex(v)).unwrap()),
            };
            (name, (key, value))
        })
        .collect()
}

/// The last record written, as (key, value).
fn last_written(h: &Harness) -> (Vec<u8>, Option<TransactionLogValue>) {
    let records = h.log.records.borrow();
    let r = records.last().unwrap();
    (
        r.key.clone(),
        r.value.as_ref().map(|v| TransactionLogValue::decode(v).unwrap()),
    )
}

fn sorted(mut v: (Vec<u8>, Option<TransactionLogValue>)) -> (Vec<u8>, Option<TransactionLogValue>) {
    if let Some(topics) = v.1.as_mut().and_then(|v| v.transaction_partitions.as_mut()) {
        for t in topics.iter_mut() {
            t.partition_ids.sort_unstable();
        }
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
    }
    v
}

#[test]
fn records_match_kafkas_for_the_same_steps() {
    let kafka = kafka_vectors();
    let expect = |h: &Harness, name: &str| {
        assert_eq!(sorted(last_written(h)), sorted(kafka[name].clone()), "{name}");
    };
    let mut h = harness();
    h.producer("txn-a", T0 + 1);
    expect(&h, "init");
    let p = (1000, 0);
    h.add("txn-a", p, &[tp("orders", 0)], T0 + 2);
    expect(&h, "add-one");
    h.add("txn-a", p, &[tp("orders", 1), tp("payments", 0)], T0 + 3);
    expect(&h, "add-more");
    let (_, markers) = h.end("txn-a", p, TransactionResult::Commit, T0 + 4);
    expect(&h, "prepare-commit");
    h.ack(&markers, MarkerOutcome::Written, T0 + 5);
    expect(&h, "complete-commit");
    h.add("txn-a", p, &[tp("orders", 2)], T0 + 6);
    expect(&h, "add-again");
    let (_, markers) = h.init("txn-a", None, T0 + 7);
    expect(&h, "fence-prepare-abort");
    h.ack(&markers, MarkerOutcome::Written, T0 + 8);
    expect(&h, "complete-abort");
    h.producer("txn-a", T0 + 9);
    expect(&h, "init-after-fence");
    h.init("txn-a", Some((1000, 2)), T0 + 10);
    expect(&h, "init-kip360-bump");
    h.init("txn-a", Some((1000, 2)), T0 + 11);
    expect(&h, "init-kip360-retry");
    h.c.tick(T0 + 11 + h.config.transactional_id_expiration_ms);
    expect(&h, "tombstone");

    // Single-partition records are the same bytes, not only the same fields.
    for name in ["add-one", "add-again", "fence-prepare-abort", "init-kip360-retry"] {
        let (key, value) = &kafka[name];
        let ours = value.as_ref().unwrap().encode(record::VALUE_VERSION_1).unwrap();
        let theirs = KAFKA_VECTORS
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap();
        assert!(theirs.ends_with(&format!(" {}", hex(&ours))), "{name}");
        assert_eq!(decode_key(key).unwrap(), "txn-a");
    }

    let (key, start) = kafka["b-start"].clone();
    let values = LiveValues::from([(key, start.unwrap().encode(record::VALUE_VERSION_1).unwrap())]);
    let (mut b, _) = Harness::loaded(TransactionConfig::default(), values, 0);
    b.producer("txn-b", T0 + 20);
    expect(&b, "b-init-last-epoch");
    b.producer("txn-b", T0 + 21);
    expect(&b, "b-init-rotate");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The store on disk, torn at every acknowledged record's end and in the
/// middle of the next: a reload finds the last whole record's state, and
/// redoes what it implies (markers of a half-ended transaction).
#[test]
fn a_torn_store_reloads_the_last_acknowledged_state() {
    let dir = tempfile::tempdir().unwrap();
    let segment = dir
        .path()
        .join("__ringmirror/transaction-state-0/00000000000000000000.log");
    let config = TransactionConfig::default();
    let pids = || Box::new(Counter(Rc::new(Cell::new(1000))));
    let (mut c, _) = TransactionCoordinator::open(dir.path(), 0, config, pids(), T0).unwrap();
    let mut states = vec![None];
    let mut step = |c: &mut TransactionCoordinator| states.push(Some(c.describe("a").unwrap().state));
    let init = c.init_producer_id(init_request("a", TIMEOUT_MS, None), T0);
    assert_eq!(init.0.error, NONE);
    step(&mut c);
    let check = vec![PartitionCheck {
        partition: tp("t", 0),
        refused: None,
    }];
    c.add_partitions("a", 1000, 0, check, T0 + 1);
    step(&mut c);
    let (_, markers) = c.end_txn("a", 1000, 0, TransactionResult::Commit, T0 + 2);
    step(&mut c);
    c.marker_written(&markers[0], &markers[0].targets[0], MarkerOutcome::Written, T0 + 3);
    step(&mut c);
    drop(c);
    let full = std::fs::read(&segment).unwrap();
    // The end of each batch (one per acknowledged write); the file itself
    // is preallocated beyond them.
    let mut sizes = vec![0u64];
    while let Some(length) = full.get(sizes[sizes.len() - 1] as usize + 8..).and_then(|b| b.get(..4)) {
        let length = u32::from_be_bytes(length.try_into().unwrap());
        if length == 0 {
            break;
        }
        sizes.push(sizes[sizes.len() - 1] + 12 + u64::from(length));
    }
    assert_eq!(sizes.len(), states.len());
    for i in 0..sizes.len() {
        let mut cuts = vec![sizes[i]];
        if i + 1 < sizes.len() {
            cuts.push((sizes[i] + sizes[i + 1]) / 2);
        }
        for cut in cuts {
            std::fs::write(&segment, &full[..cut as usize]).unwrap();
            let (c, resent) = TransactionCoordinator::open(dir.path(), 0, config, pids(), T0 + 10).unwrap();
            let state = c.describe("a").ok().map(|d| d.state);
            assert_eq!(state, states[i], "cut at {cut}");
            let half_ended = state == Some(TransactionState::PrepareCommit);
            assert_eq!(resent.len(), usize::from(half_ended), "cut at {cut}");
        }
    }
}

mod model {
    //! Random requests, marker outcomes, ticks, write failures and reloads
    //! on three transactional ids, checked after every step against what
    //! must hold whatever the order: every state is the last persisted one;
    //! per producer id, persisted epochs never go down, and a new producer
    //! id is one never seen before, at epoch 0; a transactional id has at
    //! most one transaction open; every transaction that was opened ends
    //! exactly once, commit or abort as prepared, at the prepared epoch;
    //! markers are asked for exactly the partitions the transaction held
    //! when it was prepared; and the replies a well-behaved producer gets
    //! on a working log are the ones Kafka gives.

    use std::collections::{BTreeSet, HashMap};

    use proptest::prelude::*;

    use super::*;

    const IDS: [&str; 3] = ["a", "b", "c"];
    const TIMEOUT_MS: i32 = 5_000;

    #[derive(Debug, Clone)]
    enum Op {
        Init {
            id: usize,
            resume: bool,
        },
        Add {
            id: usize,
            partitions: Vec<i32>,
            stale: bool,
        },
        AddOffsets {
            id: usize,
            group_shard: usize,
        },
        End {
            id: usize,
            commit: bool,
        },
        /// The producer an InitProducerId replaced tries to commit.
        Zombie {
            id: usize,
        },
        Marker {
            which: usize,
            outcome: MarkerOutcome,
        },
        Tick {
            advance_ms: i64,
        },
        FailNextWrite,
        Reload,
    }

    fn op() -> impl Strategy<Value = Op> {
        let id = 0..IDS.len();
        let outcome = prop_oneof![
            6 => Just(MarkerOutcome::Written),
            1 => Just(MarkerOutcome::PartitionGone),
            2 => Just(MarkerOutcome::Retriable),
            1 => Just(MarkerOutcome::Fenced),
        ];
        prop_oneof![
            3 => (id.clone(), any::<bool>()).prop_map(|(id, resume)| Op::Init { id, resume }),
            4 => (id.clone(), prop::collection::vec(0..4i32, 0..3), prop::bool::weighted(0.1))
                .prop_map(|(id, partitions, stale)| Op::Add { id, partitions, stale }),
            1 => (id.clone(), 0..2usize).prop_map(|(id, group_shard)| Op::AddOffsets { id, group_shard }),
            3 => (id.clone(), any::<bool>()).prop_map(|(id, commit)| Op::End { id, commit }),
            1 => id.clone().prop_map(|id| Op::Zombie { id }),
            6 => (0..8usize, outcome).prop_map(|(which, outcome)| Op::Marker { which, outcome }),
            2 => prop_oneof![0..200i64, 1_000..8_000i64, 50_000..70_000i64].prop_map(|advance_ms| Op::Tick { advance_ms }),
            1 => Just(Op::FailNextWrite),
            1 => Just(Op::Reload),
        ]
    }

    /// A transaction as the persisted records tell it.
    #[derive(Debug, Clone)]
    struct Txn {
        producer: (i64, i16),
        partitions: BTreeSet<TopicPartition>,
        /// Set when PrepareCommit (true) or PrepareAbort (false) was persisted.
        prepared: Option<bool>,
        /// Targets whose marker was reported written or gone.
        marked: BTreeSet<TopicPartition>,
        ended: usize,
    }

    #[derive(Default)]
    struct Model {
        /// Per id, the producer the client holds (from its last successful InitProducerId).
        client: HashMap<&'static str, (i64, i16)>,
        /// Per id, the producers a later InitProducerId replaced.
        zombies: HashMap<&'static str, Vec<(i64, i16)>>,
        /// Per id, its transactions in order; the last may be open.
        txns: HashMap<&'static str, Vec<Txn>>,
        /// Records of the log already checked.
        seen_records: usize,
        /// Per producer id, the highest epoch persisted.
        epochs: HashMap<i64, i16>,
        /// Marker requests awaiting outcomes: (request, target).
        outstanding: Vec<(MarkerRequest, MarkerTarget)>,
    }

    impl Model {
        /// Checks the records written since the last call, in order;
        /// `fencing` when the call could fence a producer (InitProducerId,
        /// a timeout), whose abort must come at a bumped epoch.
        fn check_records(&mut self, h: &Harness, fencing: bool) {
            let records: Vec<KeyedRecord> = h.log.records.borrow()[self.seen_records..].to_vec();
            self.seen_records += records.len();
            for r in records {
                let id = decode_key(&r.key).unwrap();
                let id = IDS.into_iter().find(|i| *i == id).unwrap();
                let Some(value) = r.value else {
                    let open = self.txns.get(id).and_then(|t| t.last()).is_some_and(|t| t.ended == 0);
                    assert!(!open, "{id} expired with a transaction open");
                    continue;
                };
                let m = TransactionMetadata::from_log_value(&TransactionLogValue::decode(&value).unwrap()).unwrap();
                match self.epochs.get(&m.producer_id) {
                    Some(&e) => assert!(m.producer_epoch >= e, "{id}: epoch {} after {e}", m.producer_epoch),
                    None => {
                        let other_id_used = self.txns.values().flatten().any(|t| t.producer.0 == m.producer_id);
                        assert!(!other_id_used, "producer id {} reused", m.producer_id);
                        assert!(
                            m.producer_epoch == 0 || m.prev_producer_id == m.producer_id,
                            "a new producer id starts at epoch 0: {m:?}"
                        );
                    }
                }
                self.epochs.insert(m.producer_id, m.producer_epoch);
                let history = self.txns.entry(id).or_default();
                let open = history.last_mut().filter(|t| t.ended == 0);
                let producer = (m.producer_id, m.producer_epoch);
                match (m.state, open) {
                    (TransactionState::Ongoing, None) => history.push(Txn {
                        producer,
                        partitions: m.partitions.clone(),
                        prepared: None,
                        marked: BTreeSet::new(),
                        ended: 0,
                    }),
                    (TransactionState::Ongoing, Some(t)) => {
                        assert!(t.prepared.is_none() && t.producer == producer, "{id}: {t:?} then {m:?}");
                        assert!(m.partitions.is_superset(&t.partitions));
                        t.partitions = m.partitions.clone();
                    }
                    (TransactionState::PrepareCommit | TransactionState::PrepareAbort, Some(t)) => {
                        assert!(t.prepared.is_none(), "{id}: prepared twice");
                        assert_eq!(m.partitions, t.partitions, "{id}");
                        // A fence bumps the epoch into the abort; nothing else does.
                        let expected = if fencing {
                            (t.producer.0, t.producer.1 + 1)
                        } else {
                            t.producer
                        };
                        assert_eq!(producer, expected, "{id}: {t:?} prepared as {m:?}");
                        assert!(!fencing || m.state == TransactionState::PrepareAbort, "{id}");
                        t.producer = producer;
                        t.prepared = Some(m.state == TransactionState::PrepareCommit);
                    }
                    (TransactionState::CompleteCommit | TransactionState::CompleteAbort, Some(t)) => {
                        let commit = m.state == TransactionState::CompleteCommit;
                        assert_eq!(t.prepared, Some(commit), "{id}: ended as it was not prepared");
                        assert_eq!(t.producer, producer, "{id}");
                        assert_eq!(t.marked, t.partitions, "{id}: completed before every marker");
                        t.ended += 1;
                    }
                    (TransactionState::Empty, None) => {}
                    (state, open) => panic!("{id}: {state:?} persisted with {open:?}"),
                }
            }
        }

        /// Every marker asked for belongs to the prepared transaction of
        /// its id, at its epoch and result, and to one of its partitions.
        fn check_requests(&mut self, requests: Vec<MarkerRequest>) {
            for r in requests {
                let id = IDS.into_iter().find(|i| *i == r.transactional_id).unwrap();
                let t = self.txns[id].last().unwrap();
                assert_eq!(t.ended, 0, "{id}: markers for an ended transaction");
                assert_eq!(Some(r.result == TransactionResult::Commit), t.prepared, "{id}");
                assert_eq!((r.producer_id, r.producer_epoch), t.producer, "{id}");
                for target in &r.targets {
                    let partition = match target {
                        MarkerTarget::Partition(tp) => tp.clone(),
                        MarkerTarget::GroupOffsets { group_shard } => tp(GROUP_OFFSETS_TOPIC, *group_shard),
                    };
                    assert!(t.partitions.contains(&partition), "{id}: marker for {partition:?}");
                    self.outstanding.push((r.clone(), target.clone()));
                }
            }
        }

        fn note_marker(&mut self, r: &MarkerRequest, target: &MarkerTarget, outcome: MarkerOutcome) {
            if !matches!(outcome, MarkerOutcome::Written | MarkerOutcome::PartitionGone) {
                return;
            }
            let id = IDS.into_iter().find(|i| *i == r.transactional_id).unwrap();
            let t = self.txns.get_mut(id).unwrap().last_mut().unwrap();
            if t.ended == 0 && t.producer == (r.producer_id, r.producer_epoch) {
                let partition = match target {
                    MarkerTarget::Partition(tp) => tp.clone(),
                    MarkerTarget::GroupOffsets { group_shard } => tp(GROUP_OFFSETS_TOPIC, *group_shard),
                };
                t.marked.insert(partition);
            }
        }

        /// What each id's state must be: the last persisted record's.
        fn check_state(&self, h: &Harness) {
            for id in IDS {
                let described = h.c.describe(id).ok();
                match h.log.last(id) {
                    Some(Some(m)) => {
                        let d = described.unwrap_or_else(|| panic!("{id} persisted but unknown"));
                        assert_eq!(
                            (d.state, d.producer_id, d.producer_epoch),
                            (m.state, m.producer_id, m.producer_epoch),
                            "{id}"
                        );
                    }
                    // Never persisted (a first write failed), or expired.
                    _ => assert!(
                        described.as_ref().is_none_or(|d| d.producer_epoch == -1),
                        "{id}: {described:?}"
                    ),
                }
            }
        }
    }

    fn config() -> TransactionConfig {
        TransactionConfig {
            transactional_id_expiration_ms: 60_000,
            ..TransactionConfig::default()
        }
    }

    fn run(ops: Vec<Op>) {
        let mut h = Harness::new(config());
        let mut model = Model::default();
        let mut now = T0;
        for op in ops {
            let failing = h.log.fail.get() > 0;
            match op {
                Op::Init { id, resume } => {
                    let name = IDS[id];
                    let expected = if resume { model.client.get(name).copied() } else { None };
                    let (r, markers) = h.c.init_producer_id(init_request(name, TIMEOUT_MS, expected), now);
                    if r.error == NONE {
                        let new = (r.producer_id, r.producer_epoch);
                        if let Some(old) = model.client.insert(name, new).filter(|old| *old != new) {
                            model.zombies.entry(name).or_default().push(old);
                        }
                    }
                    model.check_records(&h, true);
                    model.check_requests(markers);
                }
                Op::Add { id, partitions, stale } => {
                    let name = IDS[id];
                    let Some(&p) = model.client.get(name) else { continue };
                    let p = if stale { (p.0, p.1 - 1) } else { p };
                    let wanted: Vec<TopicPartition> = partitions.iter().map(|&i| tp("t", i)).collect();
                    let state =
                        h.c.describe(name)
                            .ok()
                            .map(|d| (d.state, (d.producer_id, d.producer_epoch)));
                    let codes = h.add(name, p, &wanted, now);
                    let current = state.is_some_and(|(_, producer)| producer == p);
                    let idle_or_open = state.is_some_and(|(s, _)| {
                        matches!(
                            s,
                            TransactionState::Empty
                                | TransactionState::Ongoing
                                | TransactionState::CompleteCommit
                                | TransactionState::CompleteAbort
                        )
                    });
                    if current && idle_or_open && !failing {
                        assert!(codes.iter().all(|c| *c == NONE), "{codes:?}");
                    }
                    if stale {
                        assert!(
                            codes
                                .iter()
                                .all(|c| *c == PRODUCER_FENCED || *c == INVALID_PRODUCER_ID_MAPPING)
                        );
                    }
                    model.check_records(&h, false);
                }
                Op::AddOffsets { id, group_shard } => {
                    let name = IDS[id];
                    let Some(&p) = model.client.get(name) else { continue };
                    h.c.add_offsets(name, p.0, p.1, group_shard, now);
                    model.check_records(&h, false);
                }
                Op::End { id, commit } => {
                    let name = IDS[id];
                    let Some(&p) = model.client.get(name) else { continue };
                    let state =
                        h.c.describe(name)
                            .ok()
                            .map(|d| (d.state, (d.producer_id, d.producer_epoch)));
                    let result = if commit {
                        TransactionResult::Commit
                    } else {
                        TransactionResult::Abort
                    };
                    let (code, markers) = h.end(name, p, result, now);
                    if state == Some((TransactionState::Ongoing, p)) && !failing {
                        assert_eq!(code, NONE);
                    }
                    model.check_records(&h, false);
                    model.check_requests(markers);
                }
                Op::Zombie { id } => {
                    let name = IDS[id];
                    let Some(&zombie) = model.zombies.get(name).and_then(|z| z.last()) else {
                        continue;
                    };
                    let written = h.log.written();
                    let (code, markers) = h.end(name, zombie, TransactionResult::Commit, now);
                    assert!(
                        code == PRODUCER_FENCED || code == INVALID_PRODUCER_ID_MAPPING,
                        "{name}: zombie got {code}"
                    );
                    assert_eq!((h.log.written(), markers.len()), (written, 0));
                }
                Op::Marker { which, outcome } => {
                    if model.outstanding.is_empty() {
                        continue;
                    }
                    let (r, target) = model.outstanding.remove(which % model.outstanding.len());
                    h.c.marker_written(&r, &target, outcome, now);
                    model.note_marker(&r, &target, outcome);
                    model.check_records(&h, false);
                }
                Op::Tick { advance_ms } => {
                    now += advance_ms;
                    let markers = h.c.tick(now);
                    model.check_records(&h, true);
                    model.check_requests(markers);
                }
                Op::FailNextWrite => h.log.fail.set(1),
                Op::Reload => {
                    h.log.fail.set(0);
                    let markers = h.reload(now);
                    model.outstanding.clear();
                    model.check_requests(markers);
                }
            }
            model.check_state(&h);
        }
        // Drain: no more failures; every marker written, every timeout and
        // retry applied, until nothing is left to do.
        h.log.fail.set(0);
        let markers = h.reload(now);
        model.outstanding.clear();
        model.check_requests(markers);
        for _ in 0..20 {
            while let Some((r, target)) = model.outstanding.pop() {
                h.c.marker_written(&r, &target, MarkerOutcome::Written, now);
                model.note_marker(&r, &target, MarkerOutcome::Written);
                model.check_records(&h, false);
            }
            now += 10_000;
            let markers = h.c.tick(now);
            model.check_records(&h, true);
            model.check_requests(markers);
        }
        model.check_state(&h);
        for (id, history) in &model.txns {
            for t in history {
                assert_eq!(t.ended, 1, "{id}: {t:?} did not end exactly once");
                assert_eq!(t.marked, t.partitions, "{id}: markers for exactly the partitions added");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn random_requests_keep_kafkas_transaction_invariants(ops in prop::collection::vec(op(), 1..60)) {
            run(ops);
        }
    }
}
