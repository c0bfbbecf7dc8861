//! Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447): offsets
//! a transactional producer commits for a group are pending until its
//! transaction ends, then committed or dropped by the transaction
//! coordinator's marker for this shard's groups (Kafka's
//! `GroupMetadataManager.handleTxnCompletion`). While pending, an
//! OffsetFetch with `require_stable` is answered UNSTABLE_OFFSET_COMMIT for
//! the partition.
//!
//! Pending offsets are kept in memory: a restart of the agent drops them,
//! and the transaction's commit, if it comes after the restart, commits the
//! partitions' records without these offsets (its consumers re-read from
//! the offsets committed before).

use std::collections::{BTreeMap, HashMap};

use super::codes::*;
use super::{CommittedOffset, GroupCoordinator, storable_group_id, store};

/// Producer ids with pending offsets on one shard: a new one beyond this
/// is refused (COORDINATOR_NOT_AVAILABLE, retriable) until some end.
pub const PENDING_PRODUCERS_MAX: usize = 100_000;

/// Per producer id, per group, the offsets it committed in its open transaction.
pub type PendingTxnOffsets = HashMap<i64, BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>>;

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
        if !storable_group_id(group_id) {
            return all(INVALID_GROUP_ID);
        }
        if self.shares.contains(group_id) {
            return all(GROUP_ID_NOT_FOUND);
        }
        if let Some(consumer) = self.consumer_groups.get(group_id) {
            // Kafka's `ConsumerGroup.validateOffsetCommit`, transactional.
            let code = consumer.commit_error(member_id, generation);
            if code != NONE {
                return all(code);
            }
        }
        if let Some(group) = self.groups.get(group_id) {
            if !member_id.is_empty() && group.member(member_id).is_none() {
                return all(UNKNOWN_MEMBER_ID);
            }
            if generation >= 0 && generation != group.generation {
                return all(ILLEGAL_GENERATION);
            }
        }
        if !self.txn_offsets.contains_key(&producer_id) && self.txn_offsets.len() >= PENDING_PRODUCERS_MAX {
            tracing::warn!(
                shard = self.shard,
                "refusing transactional offsets: too many open transactions"
            );
            return all(COORDINATOR_NOT_AVAILABLE);
        }
        let pending = self
            .txn_offsets
            .entry(producer_id)
            .or_default()
            .entry(group_id.to_owned())
            .or_default();
        offsets
            .into_iter()
            .map(|(tp, v)| {
                if v.metadata.len() > store::METADATA_MAX_BYTES {
                    OFFSET_METADATA_TOO_LARGE
                } else {
                    pending.insert(tp, v);
                    NONE
                }
            })
            .collect()
    }

    /// The end of `producer_id`'s transaction for this shard's groups: its
    /// pending offsets are committed (`commit`) or dropped. False when they
    /// could not be stored (they stay pending; the marker is tried again).
    pub fn complete_txn_offsets(&mut self, producer_id: i64, commit: bool) -> bool {
        let Some(groups) = self.txn_offsets.remove(&producer_id) else {
            return true;
        };
        if !commit {
            return true;
        }
        let mut groups = groups.into_iter();
        while let Some((group, offsets)) = groups.next() {
            let offsets: Vec<_> = offsets.into_iter().collect();
            if let Err(e) = self.store.commit(&group, offsets.clone()) {
                tracing::error!(shard = self.shard, group, error = %e, "cannot store transactional offsets");
                let mut left: BTreeMap<_, _> = groups.collect();
                left.insert(group, offsets.into_iter().collect());
                self.txn_offsets.insert(producer_id, left);
                return false;
            }
            self.groups.entry(group).or_insert_with(super::Group::new);
        }
        true
    }

    /// Whether some open transaction holds an offset of `group_id` for the partition.
    pub fn has_pending_txn_offset(&self, group_id: &str, partition: &(String, i32)) -> bool {
        self.txn_offsets
            .values()
            .any(|groups| groups.get(group_id).is_some_and(|o| o.contains_key(partition)))
    }
}
