//! [`TransactionCoordinator`]: one shard's transactional ids and the
//! transaction requests on them, as Kafka's `TransactionCoordinator` and
//! `TransactionStateManager` answer them for transaction version 1
//! clients, with Kafka's error codes.
//!
//! A state change is persisted before it takes effect: each request
//! computes its transition ([`super::metadata`]), appends the record to the
//! shard's log ([`TransactionStateLog`], durable when it returns) and only
//! then changes the metadata and answers. A failed write changes nothing
//! and answers COORDINATOR_NOT_AVAILABLE (retriable). EndTxn answers once
//! PrepareCommit/PrepareAbort is persisted; the coordinator then asks its
//! caller to write the markers ([`MarkerRequest`]), hears each one back
//! ([`TransactionCoordinator::marker_written`]), and persists
//! CompleteCommit/CompleteAbort when the last one is written. A load finds
//! transactions half-ended and asks for their markers again (writing a
//! marker twice is harmless: the second finds no open transaction).
//!
//! Deadlines — a transaction's timeout (`transaction.timeout.ms`, from
//! its first partition), an idle id's expiry, a marker or a write to
//! retry — are filed per id; [`TransactionCoordinator::tick`] applies those
//! due and [`TransactionCoordinator::next_deadline`] says when to call it
//! next. Every call takes the wall-clock time in milliseconds (records and
//! DescribeTransactions show it).
//!
//! Never does I/O but through its log and producer-id allocator, never
//! blocks, never touches partition logs or groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use super::TransactionConfig;
use super::external::codes::*;
use super::external::{KeyedRecord, LiveValues, LogError, STRING_BYTES_MAX, TopicPartition};
use super::metadata::{TransactionMetadata, TransitionError, TxnTransitMetadata, is_epoch_exhausted};
use super::record::{RecordError, TransactionLogValue, VALUE_VERSION_1, decode_key, encode_key};
use super::state::TransactionState;
use super::store::{TransactionStateLog, TransactionStore};

/// Kafka's group offsets topic: AddOffsetsToTxn adds its partition `n`,
/// which stands here for the groups of shard `n`.
pub const GROUP_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Kafka's internal topics (`Topic.isInternal`): clients may not add them
/// to a transaction (TOPIC_AUTHORIZATION_FAILED, as Kafka answers).
const INTERNAL_TOPICS: [&str; 2] = [GROUP_OFFSETS_TOPIC, "__transaction_state"];

/// Where new producer ids come from: the agent's allocator, whose ids are
/// unique for the life of the data directory.
pub trait ProducerIdAllocator {
    /// A producer id never handed out before.
    fn next_producer_id(&mut self) -> std::io::Result<i64>;
    /// From now on, hand out only ids above `producer_id` (one found in the
    /// transaction log, so never handed out again).
    fn reserve_through(&mut self, producer_id: i64) -> std::io::Result<()>;
}

/// How a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionResult {
    Commit,
    Abort,
}

/// Something a marker is written to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MarkerTarget {
    /// A COMMIT or ABORT control batch appended to the partition's log.
    Partition(TopicPartition),
    /// The pending transactional offsets of the producer in every group of
    /// shard `group_shard`, committed or dropped (AddOffsetsToTxn's
    /// `__consumer_offsets-<group_shard>`).
    GroupOffsets { group_shard: i32 },
}

impl MarkerTarget {
    fn of(tp: &TopicPartition) -> Self {
        if tp.topic == GROUP_OFFSETS_TOPIC {
            Self::GroupOffsets {
                group_shard: tp.partition,
            }
        } else {
            Self::Partition(tp.clone())
        }
    }

    fn partition(&self) -> TopicPartition {
        match self {
            Self::Partition(tp) => tp.clone(),
            Self::GroupOffsets { group_shard } => TopicPartition::new(GROUP_OFFSETS_TOPIC, *group_shard),
        }
    }
}

/// Markers the caller must write, then report one by one with
/// [`TransactionCoordinator::marker_written`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub result: TransactionResult,
    pub targets: Vec<MarkerTarget>,
}

/// What became of one marker (Kafka's `TransactionMarkerRequestCompletionHandler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// Appended and flushed (or the offsets committed or dropped).
    Written,
    /// The partition no longer exists: nothing to mark.
    PartitionGone,
    /// Not now (a full disk, a partition moving): asked for again later.
    Retriable,
    /// The partition holds a newer epoch of the producer (or a newer
    /// coordinator's marker): this coordinator stops sending this
    /// transaction's markers; they are sent again on the next load.
    Fenced,
}

/// An InitProducerId with a transactional id (the request's fields).
#[derive(Debug, Clone, Copy)]
pub struct InitProducerIdRequest<'a> {
    pub transactional_id: &'a str,
    pub transaction_timeout_ms: i32,
    /// v3+: the producer's id and epoch when it retries after an error
    /// (KIP-360); -1 and -1 otherwise.
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// v6+ (KIP-939).
    pub enable_2pc: bool,
    pub keep_prepared_txn: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitProducerIdResult {
    pub error: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl InitProducerIdResult {
    fn error(error: i16) -> Self {
        Self {
            error,
            producer_id: -1,
            producer_epoch: -1,
        }
    }
}

/// One partition of an AddPartitionsToTxn (v0–v3) with the caller's
/// verdict on it: `Some(code)` when it may not join (not authorized,
/// unknown, a read-only mirror topic), `None` when it may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCheck {
    pub partition: TopicPartition,
    pub refused: Option<i16>,
}

/// A transaction as DescribeTransactions shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub state: TransactionState,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    pub transaction_start_time_ms: i64,
    /// By topic, partitions ascending; while markers are written, only the
    /// partitions still without one.
    pub topics: Vec<(String, Vec<i32>)>,
}

/// A transaction as ListTransactions shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTransaction {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: TransactionState,
}

/// ListTransactions' filters (v0 states and producer ids, v1 KIP-994's
/// duration, v2 KIP-1152's transactional id pattern).
#[derive(Debug, Clone)]
pub struct ListTransactionsFilter {
    /// State names; empty for all. Unknown names are answered back and
    /// match nothing.
    pub states: Vec<String>,
    /// Empty for all.
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this; negative for all.
    pub duration_ms: i64,
    pattern: Option<regex::Regex>,
}

impl ListTransactionsFilter {
    /// The filters; a pattern (matched against the whole id, as Kafka's
    /// RE2/J `matches`) that does not compile is refused with
    /// INVALID_REGULAR_EXPRESSION and Kafka's message.
    pub fn new(
        states: Vec<String>,
        producer_ids: Vec<i64>,
        duration_ms: i64,
        transactional_id_pattern: Option<&str>,
    ) -> Result<Self, (i16, String)> {
        let pattern = match transactional_id_pattern.filter(|p| !p.is_empty()) {
            None => None,
            Some(p) => Some(regex::Regex::new(&format!("^(?:{p})$")).map_err(|e| {
                (
                    INVALID_REGULAR_EXPRESSION,
                    format!("Transaction ID pattern `{p}` is not a valid regular expression: {e}."),
                )
            })?),
        };
        Ok(Self {
            states,
            producer_ids,
            duration_ms,
            pattern,
        })
    }
}

/// ListTransactions' answer from one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTransactionsResult {
    pub unknown_state_filters: Vec<String>,
    pub transactions: Vec<ListedTransaction>,
}

/// Why a coordinator could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("the transaction log: {0}")]
    Log(#[from] LogError),
    /// The allocator could not be moved past the producer ids in the log:
    /// starting would risk handing one out again.
    #[error("reserving producer ids through {producer_id}: {source}")]
    ProducerIds { producer_id: i64, source: std::io::Error },
}

/// Where a marker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkerWait {
    /// Asked for; its outcome is awaited.
    Requested,
    /// To be asked for again at this time.
    RetryAt(i64),
}

/// The markers of a transaction in PrepareCommit or PrepareAbort.
#[derive(Debug)]
struct Completion {
    result: TransactionResult,
    outstanding: BTreeMap<TopicPartition, MarkerWait>,
    /// A partition reported [`MarkerOutcome::Fenced`]: nothing more is sent.
    abandoned: bool,
}

/// One transactional id.
#[derive(Debug)]
struct Entry {
    metadata: TransactionMetadata,
    completion: Option<Completion>,
    /// A write for this id failed (a completion, an expiry, a timed-out
    /// transaction's abort): not tried again before this time.
    write_retry_at: Option<i64>,
    /// The deadline this id is filed under in `deadlines`.
    filed: Option<i64>,
}

/// One shard's transaction coordinator (see the module doc).
pub struct TransactionCoordinator {
    shard: usize,
    config: TransactionConfig,
    log: Box<dyn TransactionStateLog>,
    producer_ids: Box<dyn ProducerIdAllocator>,
    txns: HashMap<String, Entry>,
    /// (deadline, id) of every id that has one.
    deadlines: BTreeSet<(i64, String)>,
}

fn transition_error(id: &str, e: TransitionError) -> i16 {
    match e {
        TransitionError::ProducerFenced => PRODUCER_FENCED,
        TransitionError::Illegal { .. } => {
            tracing::error!(transactional_id = id, error = %e, "refusing an illegal transaction transition");
            UNKNOWN_SERVER_ERROR
        }
    }
}

impl TransactionCoordinator {
    /// Opens shard `shard`'s store under `data_dir` and loads it (see [`Self::load`]).
    pub fn open(
        data_dir: &Path,
        shard: usize,
        config: TransactionConfig,
        producer_ids: Box<dyn ProducerIdAllocator>,
        now_ms: i64,
    ) -> Result<(Self, Vec<MarkerRequest>), OpenError> {
        let (store, values) = TransactionStore::open(data_dir, shard, config.compact_min_bytes)?;
        Self::load(shard, config, Box::new(store), producer_ids, values, now_ms)
    }

    /// A coordinator holding the live `values` of its log, with the markers
    /// of every transaction found half-ended (PrepareCommit, PrepareAbort),
    /// to be written again. Ongoing transactions keep their deadline.
    /// Records that cannot be read are skipped (and logged). The allocator
    /// is told the highest producer id found, so none is handed out again.
    pub fn load(
        shard: usize,
        config: TransactionConfig,
        log: Box<dyn TransactionStateLog>,
        mut producer_ids: Box<dyn ProducerIdAllocator>,
        values: LiveValues,
        now_ms: i64,
    ) -> Result<(Self, Vec<MarkerRequest>), OpenError> {
        let mut txns = HashMap::with_capacity(values.len());
        let mut highest_producer_id = -1;
        for (key, value) in values {
            let loaded = decode_key(&key).and_then(|id| Ok((id, TransactionLogValue::decode(&value)?)));
            let (id, value) = match loaded {
                Ok(loaded) => loaded,
                Err(RecordError::UnknownKeyVersion(version)) => {
                    tracing::warn!(shard, version, "skipping a record of an unknown key version");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(shard, error = %e, "skipping an undecodable transaction record");
                    continue;
                }
            };
            let metadata = match TransactionMetadata::from_log_value(&value) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(shard, transactional_id = id, error = %e, "skipping a transaction record");
                    continue;
                }
            };
            highest_producer_id = highest_producer_id
                .max(metadata.producer_id)
                .max(metadata.prev_producer_id)
                .max(metadata.next_producer_id);
            txns.insert(
                id,
                Entry {
                    metadata,
                    completion: None,
                    write_retry_at: None,
                    filed: None,
                },
            );
        }
        if highest_producer_id >= 0 {
            producer_ids
                .reserve_through(highest_producer_id)
                .map_err(|source| OpenError::ProducerIds {
                    producer_id: highest_producer_id,
                    source,
                })?;
        }
        let mut this = Self {
            shard,
            config,
            log,
            producer_ids,
            txns,
            deadlines: BTreeSet::new(),
        };
        let ids: Vec<String> = this.txns.keys().cloned().collect();
        let mut markers = Vec::new();
        for id in ids {
            let state = this.txns[&id].metadata.state;
            if state.is_completing() {
                let result = if state == TransactionState::PrepareCommit {
                    TransactionResult::Commit
                } else {
                    TransactionResult::Abort
                };
                markers.extend(this.start_completion(&id, result, now_ms));
            }
            this.refile(&id);
        }
        tracing::info!(
            shard,
            transactional_ids = this.txns.len(),
            resent = markers.len(),
            "loaded transactions"
        );
        Ok((this, markers))
    }

    /// InitProducerId with a transactional id: a new producer id or a
    /// bumped epoch, fencing the previous producer of the id. An ongoing
    /// transaction is aborted first (its markers returned) and the producer
    /// told CONCURRENT_TRANSACTIONS, so that it retries once the abort is
    /// complete (`TransactionCoordinator.handleInitProducerId`).
    pub fn init_producer_id(
        &mut self,
        req: InitProducerIdRequest<'_>,
        now_ms: i64,
    ) -> (InitProducerIdResult, Vec<MarkerRequest>) {
        let fail = |code| (InitProducerIdResult::error(code), Vec::new());
        let id = req.transactional_id;
        let expected = match (req.producer_id, req.producer_epoch) {
            (-1, -1) => None,
            (-1, _) | (_, -1) => return fail(INVALID_REQUEST),
            (producer_id, epoch) => Some((producer_id, epoch)),
        };
        if id.is_empty() || id.len() > STRING_BYTES_MAX {
            return fail(INVALID_REQUEST);
        }
        if req.enable_2pc {
            // `transaction.two.phase.commit.enable` is off.
            return fail(TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
        }
        if req.keep_prepared_txn {
            return fail(UNSUPPORTED_VERSION);
        }
        let timeout_ms = req.transaction_timeout_ms;
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return fail(INVALID_TRANSACTION_TIMEOUT);
        }
        if !self.txns.contains_key(id) {
            if self.txns.len() >= self.config.transactional_ids_max {
                tracing::warn!(
                    shard = self.shard,
                    limit = self.config.transactional_ids_max,
                    "refusing a new transactional id"
                );
                return fail(COORDINATOR_NOT_AVAILABLE);
            }
            let producer_id = match self.new_producer_id() {
                Ok(p) => p,
                Err(code) => return fail(code),
            };
            // Kept even if its first record cannot be written, as Kafka
            // keeps it: a retry reuses the producer id.
            self.txns.insert(
                id.to_owned(),
                Entry {
                    metadata: TransactionMetadata::new(producer_id, timeout_ms, now_ms),
                    completion: None,
                    write_retry_at: None,
                    filed: None,
                },
            );
            self.refile(id);
        }
        let m = &self.txns[id].metadata;
        // A producer naming an id and epoch is fenced unless the id was just
        // created, names the current producer id, or names the previous one
        // with an exhausted epoch (a retry of a rotation it never heard of).
        let known = |(producer_id, epoch): (i64, i16)| {
            m.producer_epoch == -1
                || producer_id == m.producer_id
                || (producer_id == m.prev_producer_id && is_epoch_exhausted(epoch))
        };
        if expected.is_some_and(|e| !known(e)) {
            return fail(PRODUCER_FENCED);
        }
        match m.state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => fail(CONCURRENT_TRANSACTIONS),
            TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort => {
                let rotate = m.is_producer_epoch_exhausted() && expected.is_none_or(|(_, e)| e == m.producer_epoch);
                let transit = if rotate {
                    match self.new_producer_id() {
                        Ok(new_id) => {
                            let m = &self.txns[id].metadata;
                            m.prepare_producer_id_rotation(new_id, timeout_ms, now_ms, expected.is_some())
                        }
                        Err(code) => return fail(code),
                    }
                } else {
                    m.prepare_increment_producer_epoch(timeout_ms, expected.map(|(_, e)| e), now_ms)
                };
                let transit = match transit {
                    Ok(t) => t,
                    Err(e) => return fail(transition_error(id, e)),
                };
                let (producer_id, producer_epoch) = (transit.target().producer_id, transit.target().producer_epoch);
                match self.transition(id, transit, now_ms) {
                    Ok(()) => {
                        tracing::info!(
                            shard = self.shard,
                            transactional_id = id,
                            producer_id,
                            producer_epoch,
                            "initialized a transactional producer"
                        );
                        (
                            InitProducerIdResult {
                                error: NONE,
                                producer_id,
                                producer_epoch,
                            },
                            Vec::new(),
                        )
                    }
                    Err(code) => fail(code),
                }
            }
            TransactionState::Ongoing => match self.fence_and_abort(id, now_ms) {
                Ok(markers) => (InitProducerIdResult::error(CONCURRENT_TRANSACTIONS), markers),
                Err(code) => fail(code),
            },
            TransactionState::Dead | TransactionState::PrepareEpochFence => fail(self.transient_state(id)),
        }
    }

    /// AddPartitionsToTxn v0–v3: the partitions the caller let through join
    /// the transaction; if any was refused (by the caller, or as an
    /// internal topic) none joins, and the rest are answered
    /// OPERATION_NOT_ATTEMPTED (`KafkaApis.handleAddPartitionsToTxnRequest`).
    /// One error per partition, in order.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        checks: Vec<PartitionCheck>,
        now_ms: i64,
    ) -> Vec<(TopicPartition, i16)> {
        let verdicts: Vec<(TopicPartition, Option<i16>)> = checks
            .into_iter()
            .map(|c| {
                let refused = if INTERNAL_TOPICS.contains(&c.partition.topic.as_str()) {
                    Some(TOPIC_AUTHORIZATION_FAILED)
                } else {
                    c.refused
                };
                (c.partition, refused)
            })
            .collect();
        if verdicts.iter().any(|(_, refused)| refused.is_some()) {
            return verdicts
                .into_iter()
                .map(|(tp, refused)| (tp, refused.unwrap_or(OPERATION_NOT_ATTEMPTED)))
                .collect();
        }
        let partitions: BTreeSet<TopicPartition> = verdicts.iter().map(|(tp, _)| tp.clone()).collect();
        let code = self.add_to_transaction(transactional_id, producer_id, producer_epoch, &partitions, now_ms);
        verdicts.into_iter().map(|(tp, _)| (tp, code)).collect()
    }

    /// AddOffsetsToTxn: the offsets of groups on shard `group_shard` (the
    /// group's) join the transaction.
    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_shard: usize,
        now_ms: i64,
    ) -> i16 {
        let Ok(partition) = i32::try_from(group_shard) else {
            return INVALID_REQUEST;
        };
        let offsets = BTreeSet::from([TopicPartition::new(GROUP_OFFSETS_TOPIC, partition)]);
        self.add_to_transaction(transactional_id, producer_id, producer_epoch, &offsets, now_ms)
    }

    /// `handleAddPartitionsToTransaction`: the checks of the producer and
    /// the state, then the partitions added (nothing written when they are
    /// all in already).
    fn add_to_transaction(
        &mut self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> i16 {
        if id.is_empty() {
            return INVALID_REQUEST;
        }
        let Some(entry) = self.txns.get(id) else {
            return INVALID_PRODUCER_ID_MAPPING;
        };
        let m = &entry.metadata;
        if m.producer_id != producer_id {
            return INVALID_PRODUCER_ID_MAPPING;
        }
        if m.producer_epoch != producer_epoch {
            return PRODUCER_FENCED;
        }
        if m.state.is_completing() {
            return CONCURRENT_TRANSACTIONS;
        }
        if m.state == TransactionState::Ongoing && partitions.is_subset(&m.partitions) {
            return NONE;
        }
        match m.prepare_add_partitions(partitions, now_ms) {
            Ok(transit) => self.transition(id, transit, now_ms).err().unwrap_or(NONE),
            Err(e) => transition_error(id, e),
        }
    }

    /// AddPartitionsToTxn v4+ with `VerifyOnly` (KIP-890 part 1), which a
    /// partition leader sends before appending a transactional batch: per
    /// partition, NONE when it is in the producer's open transaction,
    /// TRANSACTION_ABORTABLE when not (`handleVerifyPartitionsInTransaction`).
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Vec<(TopicPartition, i16)> {
        let all = |code| partitions.iter().map(|tp| (tp.clone(), code)).collect();
        if transactional_id.is_empty() {
            return all(INVALID_REQUEST);
        }
        let Some(entry) = self.txns.get(transactional_id) else {
            return all(INVALID_PRODUCER_ID_MAPPING);
        };
        let m = &entry.metadata;
        if m.producer_id != producer_id {
            return all(INVALID_PRODUCER_ID_MAPPING);
        }
        if m.producer_epoch != producer_epoch {
            return all(PRODUCER_FENCED);
        }
        if m.state.is_completing() {
            return all(CONCURRENT_TRANSACTIONS);
        }
        partitions
            .iter()
            .map(|tp| {
                let code = if m.partitions.contains(tp) {
                    NONE
                } else {
                    TRANSACTION_ABORTABLE
                };
                (tp.clone(), code)
            })
            .collect()
    }

    /// EndTxn (versions up to 4): commit or abort the open transaction. The
    /// answer comes once PrepareCommit/PrepareAbort is persisted; the
    /// markers follow (`endTransactionWithTV1`). A retry after success is
    /// answered NONE, one while markers are written CONCURRENT_TRANSACTIONS.
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        result: TransactionResult,
        now_ms: i64,
    ) -> (i16, Vec<MarkerRequest>) {
        let id = transactional_id;
        if id.is_empty() {
            return (INVALID_REQUEST, Vec::new());
        }
        let Some(entry) = self.txns.get(id) else {
            return (INVALID_PRODUCER_ID_MAPPING, Vec::new());
        };
        let m = &entry.metadata;
        if m.producer_id != producer_id {
            return (INVALID_PRODUCER_ID_MAPPING, Vec::new());
        }
        if m.producer_epoch != producer_epoch {
            return (PRODUCER_FENCED, Vec::new());
        }
        let invalid = || {
            tracing::warn!(
                transactional_id = id,
                state = m.state.name(),
                ?result,
                "an EndTxn the state does not allow"
            );
            (INVALID_TXN_STATE, Vec::new())
        };
        use TransactionResult::{Abort, Commit};
        match (m.state, result) {
            (TransactionState::Ongoing, _) => {
                let next = match result {
                    Commit => TransactionState::PrepareCommit,
                    Abort => TransactionState::PrepareAbort,
                };
                let transit = match m.prepare_abort_or_commit(next, now_ms) {
                    Ok(t) => t,
                    Err(e) => return (transition_error(id, e), Vec::new()),
                };
                match self.transition(id, transit, now_ms) {
                    Ok(()) => (NONE, self.start_completion(id, result, now_ms)),
                    Err(code) => (code, Vec::new()),
                }
            }
            (TransactionState::CompleteCommit, Commit) | (TransactionState::CompleteAbort, Abort) => (NONE, Vec::new()),
            (TransactionState::PrepareCommit, Commit) | (TransactionState::PrepareAbort, Abort) => {
                (CONCURRENT_TRANSACTIONS, Vec::new())
            }
            (
                TransactionState::Empty
                | TransactionState::CompleteCommit
                | TransactionState::CompleteAbort
                | TransactionState::PrepareCommit
                | TransactionState::PrepareAbort,
                _,
            ) => invalid(),
            (TransactionState::Dead | TransactionState::PrepareEpochFence, _) => (self.transient_state(id), Vec::new()),
        }
    }

    /// One marker's outcome. When the transaction's last marker is written
    /// its completion is persisted (or tried again later); an outcome for
    /// another producer, epoch or result, or already heard, is ignored.
    pub fn marker_written(
        &mut self,
        request: &MarkerRequest,
        target: &MarkerTarget,
        outcome: MarkerOutcome,
        now_ms: i64,
    ) {
        let id = request.transactional_id.as_str();
        let backoff_ms = self.config.marker_retry_backoff_ms;
        let Some(entry) = self.txns.get_mut(id) else {
            return;
        };
        let m = &mut entry.metadata;
        let current = m.producer_id == request.producer_id && m.producer_epoch == request.producer_epoch;
        let Some(completion) = entry
            .completion
            .as_mut()
            .filter(|c| current && c.result == request.result)
        else {
            return;
        };
        let partition = target.partition();
        if completion.outstanding.get(&partition) != Some(&MarkerWait::Requested) {
            return;
        }
        match outcome {
            MarkerOutcome::Written | MarkerOutcome::PartitionGone => {
                completion.outstanding.remove(&partition);
                m.partitions.remove(&partition);
            }
            MarkerOutcome::Retriable => {
                completion
                    .outstanding
                    .insert(partition, MarkerWait::RetryAt(now_ms.saturating_add(backoff_ms)));
            }
            MarkerOutcome::Fenced => {
                tracing::error!(
                    transactional_id = id,
                    producer_id = m.producer_id,
                    ?target,
                    "a marker was fenced; this transaction's markers wait for the next load"
                );
                completion.abandoned = true;
            }
        }
        if completion.outstanding.is_empty() {
            self.try_complete(id, now_ms);
        }
        self.refile(id);
    }

    /// DescribeTransactions of one id: its state, or INVALID_REQUEST (an
    /// empty id) or TRANSACTIONAL_ID_NOT_FOUND.
    pub fn describe(&self, transactional_id: &str) -> Result<TransactionDescription, i16> {
        if transactional_id.is_empty() {
            return Err(INVALID_REQUEST);
        }
        let m = &self
            .txns
            .get(transactional_id)
            .ok_or(TRANSACTIONAL_ID_NOT_FOUND)?
            .metadata;
        let mut topics: Vec<(String, Vec<i32>)> = Vec::new();
        for tp in &m.partitions {
            match topics.last_mut() {
                Some((topic, partitions)) if *topic == tp.topic => partitions.push(tp.partition),
                _ => topics.push((tp.topic.clone(), vec![tp.partition])),
            }
        }
        Ok(TransactionDescription {
            state: m.state,
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            transaction_timeout_ms: m.txn_timeout_ms,
            transaction_start_time_ms: m.txn_start_timestamp_ms,
            topics,
        })
    }

    /// ListTransactions on this shard (`TransactionStateManager.listTransactionStates`),
    /// ordered by transactional id.
    pub fn list(&self, filter: &ListTransactionsFilter, now_ms: i64) -> ListTransactionsResult {
        let mut out = ListTransactionsResult::default();
        let mut states = BTreeSet::new();
        for name in &filter.states {
            match TransactionState::from_name(name) {
                Some(s) => {
                    states.insert(s);
                }
                None => out.unknown_state_filters.push(name.clone()),
            }
        }
        let included = |id: &str, m: &TransactionMetadata| {
            m.state != TransactionState::Dead
                && (filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id))
                && (filter.states.is_empty() || states.contains(&m.state))
                && (filter.duration_ms < 0 || now_ms.saturating_sub(m.txn_start_timestamp_ms) > filter.duration_ms)
                && filter.pattern.as_ref().is_none_or(|p| p.is_match(id))
        };
        out.transactions = self
            .txns
            .iter()
            .filter(|(id, e)| included(id, &e.metadata))
            .map(|(id, e)| ListedTransaction {
                transactional_id: id.clone(),
                producer_id: e.metadata.producer_id,
                state: e.metadata.state,
            })
            .collect();
        out.transactions
            .sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// Applies the deadlines due at `now_ms`: ongoing transactions past
    /// their timeout are aborted (their producer fenced), markers and
    /// failed writes are tried again, idle ids past their expiry are
    /// removed (tombstones). Returns the markers to write.
    pub fn tick(&mut self, now_ms: i64) -> Vec<MarkerRequest> {
        let due: Vec<String> = self
            .deadlines
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .map(|(_, id)| id.clone())
            .collect();
        let mut markers = Vec::new();
        let mut expired = Vec::new();
        for id in due {
            let entry = &self.txns[&id];
            let m = &entry.metadata;
            match m.state {
                TransactionState::Ongoing
                    if m.txn_start_timestamp_ms.saturating_add(i64::from(m.txn_timeout_ms)) < now_ms =>
                {
                    tracing::info!(
                        shard = self.shard,
                        transactional_id = id,
                        producer_id = m.producer_id,
                        "aborting a transaction past its timeout"
                    );
                    match self.fence_and_abort(&id, now_ms) {
                        Ok(requested) => markers.extend(requested),
                        Err(_) => self.retry_write_later(&id, now_ms),
                    }
                }
                TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                    if entry.completion.as_ref().is_some_and(|c| c.outstanding.is_empty()) {
                        self.try_complete(&id, now_ms);
                    } else {
                        markers.extend(self.retry_markers(&id, now_ms));
                    }
                }
                TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort => {
                    expired.push(id.clone());
                }
                _ => {}
            }
            self.refile(&id);
        }
        for chunk in expired.chunks(self.config.expired_ids_per_write_max.max(1)) {
            self.expire(chunk, now_ms);
        }
        markers
    }

    /// When [`Self::tick`] is next needed (wall-clock milliseconds).
    pub fn next_deadline(&self) -> Option<i64> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    fn new_producer_id(&mut self) -> Result<i64, i16> {
        self.producer_ids.next_producer_id().map_err(|e| {
            tracing::error!(shard = self.shard, error = %e, "cannot allocate a producer id");
            COORDINATOR_NOT_AVAILABLE
        })
    }

    /// Dead and PrepareEpochFence never last beyond a call here.
    fn transient_state(&self, id: &str) -> i16 {
        tracing::error!(
            shard = self.shard,
            transactional_id = id,
            "a transactional id found in a transient state"
        );
        UNKNOWN_SERVER_ERROR
    }

    /// Persists `transit` for `id`, then applies it.
    fn transition(&mut self, id: &str, transit: TxnTransitMetadata, now_ms: i64) -> Result<(), i16> {
        self.persist(vec![(id, Some(transit.target()))], now_ms)?;
        let entry = self.txns.get_mut(id).expect("transitions are of known ids");
        entry.metadata.complete_transition(transit);
        entry.write_retry_at = None;
        self.refile(id);
        Ok(())
    }

    /// Writes one record per (id, metadata) — a tombstone for `None` — as
    /// one durable batch.
    fn persist(&mut self, records: Vec<(&str, Option<&TransactionMetadata>)>, now_ms: i64) -> Result<(), i16> {
        let mut batch = Vec::with_capacity(records.len());
        for (id, metadata) in records {
            let key = encode_key(id).map_err(|_| INVALID_REQUEST)?;
            let value = match metadata {
                None => None,
                Some(m) => {
                    let value = m.to_log_value().encode(VALUE_VERSION_1).map_err(|e| {
                        tracing::error!(transactional_id = id, error = %e, "cannot encode a transaction record");
                        UNKNOWN_SERVER_ERROR
                    })?;
                    if key.len() + value.len() > self.config.record_bytes_max {
                        tracing::warn!(
                            transactional_id = id,
                            bytes = value.len(),
                            "a transaction record above the record size limit"
                        );
                        return Err(UNKNOWN_SERVER_ERROR);
                    }
                    Some(value)
                }
            };
            batch.push(KeyedRecord {
                key,
                value,
                timestamp_ms: Some(now_ms),
            });
        }
        self.log.append(batch).map_err(|e| {
            tracing::error!(shard = self.shard, error = %e, "cannot write the transaction log");
            COORDINATOR_NOT_AVAILABLE
        })
    }

    /// The fence of an ongoing transaction's producer and its abort, in
    /// one persisted transition (InitProducerId, or a timeout).
    fn fence_and_abort(&mut self, id: &str, now_ms: i64) -> Result<Vec<MarkerRequest>, i16> {
        let m = &self.txns[id].metadata;
        let abort = m
            .prepare_fence_producer_epoch()
            .and_then(|fence| m.prepare_abort_after_fence(&fence, now_ms))
            .map_err(|e| transition_error(id, e))?;
        self.transition(id, abort, now_ms)?;
        Ok(self.start_completion(id, TransactionResult::Abort, now_ms))
    }

    /// Starts writing the markers of `id`'s transaction (just persisted in
    /// PrepareCommit or PrepareAbort, or loaded so): one request for all
    /// its partitions, or the completion at once when it has none.
    fn start_completion(&mut self, id: &str, result: TransactionResult, now_ms: i64) -> Vec<MarkerRequest> {
        let entry = self.txns.get_mut(id).expect("completions are of known ids");
        let outstanding = entry
            .metadata
            .partitions
            .iter()
            .map(|tp| (tp.clone(), MarkerWait::Requested))
            .collect();
        entry.completion = Some(Completion {
            result,
            outstanding,
            abandoned: false,
        });
        let targets: Vec<MarkerTarget> = entry.metadata.partitions.iter().map(MarkerTarget::of).collect();
        if targets.is_empty() {
            self.try_complete(id, now_ms);
            self.refile(id);
            return Vec::new();
        }
        let request = self.marker_request(id, result, targets);
        self.refile(id);
        vec![request]
    }

    fn marker_request(&self, id: &str, result: TransactionResult, targets: Vec<MarkerTarget>) -> MarkerRequest {
        let m = &self.txns[id].metadata;
        MarkerRequest {
            transactional_id: id.to_owned(),
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: self.config.coordinator_epoch,
            result,
            targets,
        }
    }

    /// Asks again for the markers of `id` whose retry time has come.
    fn retry_markers(&mut self, id: &str, now_ms: i64) -> Option<MarkerRequest> {
        let completion = self.txns.get_mut(id)?.completion.as_mut()?;
        if completion.abandoned {
            return None;
        }
        let result = completion.result;
        let mut targets = Vec::new();
        for (tp, wait) in completion.outstanding.iter_mut() {
            if matches!(*wait, MarkerWait::RetryAt(at) if at <= now_ms) {
                *wait = MarkerWait::Requested;
                targets.push(MarkerTarget::of(tp));
            }
        }
        (!targets.is_empty()).then(|| self.marker_request(id, result, targets))
    }

    /// Every marker of `id` is written: CompleteCommit or CompleteAbort is
    /// persisted (or tried again after a backoff).
    fn try_complete(&mut self, id: &str, now_ms: i64) {
        let entry = self.txns.get_mut(id).expect("completions are of known ids");
        let transit = match entry.metadata.prepare_complete(now_ms) {
            Ok(t) => t,
            Err(e) => {
                transition_error(id, e);
                return;
            }
        };
        match self.transition(id, transit, now_ms) {
            Ok(()) => {
                let entry = self.txns.get_mut(id).expect("just completed");
                entry.completion = None;
                tracing::debug!(
                    transactional_id = id,
                    state = entry.metadata.state.name(),
                    "completed a transaction"
                );
            }
            Err(_) => self.retry_write_later(id, now_ms),
        }
    }

    fn retry_write_later(&mut self, id: &str, now_ms: i64) {
        if let Some(entry) = self.txns.get_mut(id) {
            entry.write_retry_at = Some(now_ms.saturating_add(self.config.write_retry_backoff_ms));
        }
        self.refile(id);
    }

    /// Writes the tombstones of the idle `ids` that are still expired, then
    /// forgets them (`removeExpiredTransactionalIds`).
    fn expire(&mut self, ids: &[String], now_ms: i64) {
        let expiration_ms = self.config.transactional_id_expiration_ms;
        let expired: Vec<&String> = ids
            .iter()
            .filter(|id| {
                self.txns.get(*id).is_some_and(|e| {
                    e.metadata.state.expiration_allowed()
                        && e.metadata.txn_last_update_timestamp_ms <= now_ms.saturating_sub(expiration_ms)
                        && e.metadata.prepare_dead().is_ok()
                })
            })
            .collect();
        if expired.is_empty() {
            return;
        }
        let records = expired.iter().map(|id| (id.as_str(), None)).collect();
        match self.persist(records, now_ms) {
            Ok(()) => {
                for id in expired {
                    let entry = self.txns.remove(id).expect("listed above");
                    if let Some(filed) = entry.filed {
                        self.deadlines.remove(&(filed, id.clone()));
                    }
                    tracing::info!(shard = self.shard, transactional_id = %id, "expired an idle transactional id");
                }
            }
            Err(_) => {
                let ids: Vec<String> = expired.into_iter().cloned().collect();
                for id in ids {
                    self.retry_write_later(&id, now_ms);
                }
            }
        }
    }

    /// When `entry` next needs a tick.
    fn deadline(&self, entry: &Entry) -> Option<i64> {
        let m = &entry.metadata;
        let natural = match m.state {
            TransactionState::Ongoing => Some(
                m.txn_start_timestamp_ms
                    .saturating_add(i64::from(m.txn_timeout_ms))
                    .saturating_add(1),
            ),
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                entry.completion.as_ref().and_then(|c| {
                    if c.abandoned {
                        None
                    } else if c.outstanding.is_empty() {
                        entry.write_retry_at
                    } else {
                        c.outstanding
                            .values()
                            .filter_map(|w| match w {
                                MarkerWait::RetryAt(at) => Some(*at),
                                MarkerWait::Requested => None,
                            })
                            .min()
                    }
                })
            }
            TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort => Some(
                m.txn_last_update_timestamp_ms
                    .saturating_add(self.config.transactional_id_expiration_ms),
            ),
            TransactionState::Dead | TransactionState::PrepareEpochFence => None,
        };
        match (natural, entry.write_retry_at) {
            (Some(at), Some(retry)) => Some(at.max(retry)),
            (natural, _) => natural,
        }
    }

    /// Files `id` under its current deadline.
    fn refile(&mut self, id: &str) {
        let Some(entry) = self.txns.get(id) else {
            return;
        };
        let deadline = self.deadline(entry);
        let old = entry.filed;
        if old == deadline {
            return;
        }
        if let Some(old) = old {
            self.deadlines.remove(&(old, id.to_owned()));
        }
        if let Some(deadline) = deadline {
            self.deadlines.insert((deadline, id.to_owned()));
        }
        self.txns.get_mut(id).expect("found above").filed = deadline;
    }
}
