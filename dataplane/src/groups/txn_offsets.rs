//! Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447): offsets
//! a transactional producer commits for a group are pending until its
//! transaction ends, then committed or dropped by the transaction
//! coordinator's marker for this shard's groups (Kafka's
//! `GroupMetadataManager.handleTxnCompletion`). While pending, an
//! OffsetFetch with `require_stable` is answered UNSTABLE_OFFSET_COMMIT for
//! the partition.
//!
//! Pending offsets are persisted in the shard's offset store before
//! TxnOffsetCommit is answered, and their end (committed values and the
//! pending keys' tombstones) in one batch before the marker is
//! acknowledged ([`super::store`] says why that order survives a crash).
//! A restart loads them back pending; the transaction coordinator, whose
//! log is crash-safe too, re-sends the markers of transactions that were
//! ending and times out those still open, so each is decided as it would
//! have been without the restart: a Kafka Streams `exactly_once_v2`
//! application's input offsets commit with its output records.

use super::codes::*;
use super::{CommittedOffset, GroupCoordinator, store_offsets};

/// Producer ids with pending offsets on one shard: a new one beyond this
/// is refused (COORDINATOR_NOT_AVAILABLE, retriable) until some end.
pub const PENDING_PRODUCERS_MAX: usize = 100_000;

impl GroupCoordinator {
    /// TxnOffsetCommit (its transaction already verified): an error per
    /// partition, in order. The member and generation, when given, are
    /// checked as Kafka's `GroupCoordinator.doTxnCommitOffsets` checks them;
    /// in a KIP-848 group, the member's epoch as an OffsetCommit's.
    pub fn txn_commit(
        &mut self,
        group_id: &str,
        producer_id: i64,
        generation: i32,
        member_id: &str,
        offsets: Vec<((String, i32), CommittedOffset)>,
    ) -> Vec<i16> {
        let all = |code: i16| vec![code; offsets.len()];
        if let Some(code) = self.commit_refusal(group_id, generation, member_id) {
            return all(code);
        }
        if let Some(group) = self.groups.get(group_id) {
            if !member_id.is_empty() && group.member(member_id).is_none() {
                return all(UNKNOWN_MEMBER_ID);
            }
            if generation >= 0 && generation != group.generation {
                return all(ILLEGAL_GENERATION);
            }
        }
        if !self.store.has_pending_txn(producer_id) && self.store.pending_txn_producers() >= PENDING_PRODUCERS_MAX {
            tracing::warn!(
                shard = self.shard,
                "refusing transactional offsets: too many open transactions"
            );
            return all(COORDINATOR_NOT_AVAILABLE);
        }
        store_offsets(self.shard, group_id, offsets, |accepted| {
            self.store.stage_txn_offsets(group_id, producer_id, accepted)
        })
    }

    /// The end of `producer_id`'s transaction for this shard's groups: its
    /// pending offsets are committed (`commit`) or dropped (Kafka's
    /// `OffsetMetadataManager.replayEndTransactionMarker`). False when that
    /// could not be stored (they stay pending; the marker is tried again).
    pub fn complete_txn_offsets(&mut self, producer_id: i64, commit: bool) -> bool {
        match self.store.end_txn_offsets(producer_id, commit) {
            Ok(committed_groups) => {
                for group in committed_groups {
                    self.groups.entry(group).or_insert_with(super::Group::new);
                }
                true
            }
            Err(e) => {
                tracing::error!(shard = self.shard, producer_id, error = %e, "cannot store the end of transactional offsets");
                false
            }
        }
    }

    /// Whether some open transaction holds an offset of `group_id` for the partition.
    pub fn has_pending_txn_offset(&self, group_id: &str, partition: &(String, i32)) -> bool {
        self.store.has_pending_txn_offset(group_id, partition)
    }
}
