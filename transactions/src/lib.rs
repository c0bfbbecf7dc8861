//! The transaction coordinator: Kafka's transactions (KIP-98) for producers
//! writing the agent's writable topics — a mirror's topics after failover,
//! and local topics — with Kafka's semantics, so that Kafka Streams
//! `exactly_once_v2`, transactional producers and Kafka Connect work
//! against the agent as they do against Kafka 4.3.
//!
//! This crate is the coordinator's core: synchronous, sans-IO but for the
//! store it writes through, taking the time as an argument. It depends on
//! `storage` and `protocol` only (no async runtime, no TLS), so the fuzz
//! target of its records builds without the data plane.
//!
//! * [`record`]: the `__transaction_state` records, byte for byte.
//! * [`state`]: [`TransactionState`], Kafka's states and their legal
//!   predecessors.
//! * [`metadata`]: [`TransactionMetadata`], one transactional id and its
//!   transitions (producer epochs, KIP-360 bumps, fencing, exhaustion).
//! * [`coordinator`]: [`TransactionCoordinator`], one shard's ids and the
//!   requests (InitProducerId, AddPartitionsToTxn in both forms,
//!   AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions),
//!   markers, timeouts and expiry.
//! * [`store`]: [`TransactionStore`], the shard's `__transaction_state` log.
//!
//! It must never do I/O other than through its store and producer-id
//! allocator, block on anything, or reach partition logs or groups itself:
//! it asks its caller to ([`MarkerRequest`]).
//!
//! # Transaction version 1
//!
//! We answer as a Kafka 4.3 cluster whose `transaction.version` feature is
//! finalized at 1: the listener advertises no `transaction.version` 2 in
//! ApiVersions, so Kafka 4 clients keep to the version 1 protocol (EndTxn
//! up to v4, AddPartitionsToTxn up to v3 from clients, AddOffsetsToTxn and
//! TxnOffsetCommit up to v4), librdkafka, KafkaJS and older Java clients
//! speak nothing else, and the records are value version 1 with client
//! transaction version 0 — exactly what Kafka writes in that setting. KIP-890
//! part 1 (the partition leader verifying, before appending a transactional
//! batch, that its partition is in the transaction: AddPartitionsToTxn v4+
//! with `VerifyOnly`) is part of version 1 and is here
//! ([`TransactionCoordinator::verify_partitions`]). Version 2 (KIP-890 part
//! 2) would add: an epoch bump at every EndTxn (markers at the bumped
//! epoch, a new producer id through `NextProducerId` when the epochs run
//! out), EndTxn answering the new producer id and epoch, an abort allowed
//! from Empty/CompleteCommit/CompleteAbort and the retry table of Kafka's
//! `endTransaction`, partitions added implicitly by the partition leader on
//! a transactional Produce (AddPartitionsToTxn v4+ without `VerifyOnly`)
//! and offsets by TxnOffsetCommit v5, and WriteTxnMarkers' transaction
//! version (KIP-1228). Version 1 first: every client speaks it, and it is
//! what the log and the Produce path already track (ongoing transactions,
//! the LSO, `.txnindex`); version 2 can follow without a change of record
//! format. Two-phase commit (KIP-939) is off, as in Kafka by default.
//!
//! # How it is wired (the next step, after issue 15's restructure)
//!
//! * **Placement.** Transactional id `id` belongs to shard
//!   [`transaction_shard`]`(id, shards)`, as a group to its shard. That
//!   shard holds the [`TransactionCoordinator`], opened at start with its
//!   [`TransactionStore`] (after [`TransactionStore::rebalance`] for the
//!   shard count) and a timer task that calls [`TransactionCoordinator::tick`]
//!   and sleeps until [`TransactionCoordinator::next_deadline`], woken
//!   early when a call returns a sooner deadline. FindCoordinator key type 1
//!   answers this agent (every shard shares the listener port); a request
//!   on any shard's connection runs as a synchronous job on the id's shard,
//!   as the group APIs do, and never holds the coordinator across an
//!   await. Producer ids come from the agent's allocator (the one
//!   idempotent producers use, behind [`ProducerIdAllocator`]), so an id is
//!   never handed out twice, whatever the shard. ListTransactions asks every
//!   shard and merges; DescribeTransactions asks each id's shard.
//! * **Markers.** A [`MarkerRequest`] (from EndTxn, InitProducerId fencing
//!   an ongoing transaction, a timeout, or a load that found a transaction
//!   half-ended) names its targets. The coordinator's shard sends one job
//!   per owning shard of the target partitions (the catalog knows it): the
//!   job appends a COMMIT or ABORT control batch per partition at the
//!   partition's leader epoch (`BatchBuilder::control_marker` with
//!   `end_txn_marker_value(coordinator_epoch)`, as `end_mirroring` writes
//!   its ABORTs; the log's producer state then completes the transaction,
//!   moves the LSO and fills `.txnindex`), flushes, and answers a
//!   [`MarkerOutcome`] per partition, which comes back as
//!   [`TransactionCoordinator::marker_written`]. The partition's producer
//!   state checks a marker as Kafka's `ProducerStateManager` does (an epoch
//!   older than the producer's is `Fenced`); a deleted partition is
//!   `PartitionGone`; a full disk or a moving partition is `Retriable`.
//! * **Offsets.** AddOffsetsToTxn adds `__consumer_offsets-<group shard>`
//!   ([`MarkerTarget::GroupOffsets`]). TxnOffsetCommit goes to the group
//!   coordinator on the group's shard, which first verifies that partition
//!   with the transaction's shard ([`TransactionCoordinator::verify_partitions`]),
//!   then keeps the offsets pending for the producer id (persisted in its
//!   offsets log as Kafka's transactional offset commits). The marker for
//!   that target is a job on the group shard that commits or drops every
//!   pending offset of the producer id there (Kafka's
//!   `GroupMetadataManager.handleTxnCompletion`).
//! * **Produce.** A transactional batch to a writable topic is verified on
//!   the partition's shard with the transaction's shard before it is
//!   appended (KIP-890 part 1); the log already keeps it open until its
//!   marker. A mirror topic is read-only: AddPartitionsToTxn refuses it
//!   through its per-partition check ([`PartitionCheck`]) and Produce with
//!   READ_ONLY_TOPIC and a message saying the topic is a mirror.
//! * **Coordinator epoch.** Markers carry
//!   [`TransactionConfig::coordinator_epoch`]: 0 while one agent owns every
//!   id; agents sharing ids (scale-out) pass the epoch of their lease.

#![forbid(unsafe_code)]

pub mod coordinator;
pub mod metadata;
pub mod record;
pub mod state;
pub mod store;

pub use coordinator::{
    InitProducerIdRequest, InitProducerIdResult, ListTransactionsFilter, ListedTransaction, MarkerOutcome,
    MarkerRequest, MarkerTarget, OpenError, PartitionCheck, ProducerIdAllocator, TransactionCoordinator,
    TransactionDescription, TransactionResult,
};
pub use metadata::TransactionMetadata;
pub use state::TransactionState;
pub use store::{TransactionStateLog, TransactionStore};

/// What this crate takes from the crates below it, in one place: the
/// storage (compacted log, topic partitions, placement), batch varints,
/// string limits, and the error codes.
mod external {
    pub(crate) use ringmirror_protocol::error_codes as codes;
    pub(crate) use ringmirror_storage::batch::varint::{VarintError, read_unsigned, write_unsigned};
    pub(crate) use ringmirror_storage::limits::{STRING_BYTES_MAX, TooLong, put_string, string_length};
    pub(crate) use ringmirror_storage::log::compacted::LiveValues;
    pub(crate) use ringmirror_storage::log::{CompactedLog, KeyedRecord, LogError, TopicPartition};
    pub(crate) use ringmirror_storage::placement::shard_for_key;
}

/// The shard that owns transactional id `id` (FNV-1a, stable across runs,
/// as the placement of groups and partitions).
pub fn transaction_shard(id: &str, shards: usize) -> usize {
    external::shard_for_key(id, shards)
}

/// Settings, named after Kafka's broker configs where Kafka has them.
#[derive(Debug, Clone, Copy)]
pub struct TransactionConfig {
    /// `transaction.max.timeout.ms`: a longer `transaction.timeout.ms` is
    /// refused (INVALID_TRANSACTION_TIMEOUT).
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle id (Empty, CompleteCommit,
    /// CompleteAbort) not updated for this long is removed.
    pub transactional_id_expiration_ms: i64,
    /// The coordinator epoch written in markers (see the module doc).
    pub coordinator_epoch: i32,
    /// How long a marker a partition could not take yet waits before it is
    /// asked for again.
    pub marker_retry_backoff_ms: i64,
    /// How long after a failed write of the log (a completion, an expiry, a
    /// timed-out transaction's abort) it is tried again.
    pub write_retry_backoff_ms: i64,
    /// Transactional ids one shard holds; a new id beyond this is refused
    /// (COORDINATOR_NOT_AVAILABLE, retriable) until some expire.
    pub transactional_ids_max: usize,
    /// Kafka's `message.max.bytes` for a record of the log: a transaction
    /// whose record would be larger is refused as Kafka refuses it
    /// (UNKNOWN_SERVER_ERROR).
    pub record_bytes_max: usize,
    /// Tombstones written in one batch when ids expire.
    pub expired_ids_per_write_max: usize,
    /// The store is compacted once larger than this (and more than twice
    /// its live records).
    pub compact_min_bytes: u64,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        Self {
            max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            coordinator_epoch: 0,
            marker_retry_backoff_ms: 100,
            write_retry_backoff_ms: 1000,
            transactional_ids_max: 1_000_000,
            record_bytes_max: 1_048_588,
            expired_ids_per_write_max: 1000,
            compact_min_bytes: 16 << 20,
        }
    }
}

#[cfg(test)]
mod tests;
