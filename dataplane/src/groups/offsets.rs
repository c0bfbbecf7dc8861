//! Committed offsets on a shard's coordinator: OffsetCommit (classic,
//! simple and KIP-848 consumers), OffsetFetch, and the failover step that
//! moves offsets back to the log end. Transactional commits are in
//! [`super::txn_offsets`]; the log they live in is [`super::store`].

use std::time::Instant;

use super::classic::Group;
use super::codes::*;
use super::store::{self, CommittedOffset};
use super::{GroupCoordinator, GroupState, share_store};

/// A group id whose offsets can be stored: not empty, and within a Kafka
/// STRING (the records' keys hold it with an i16 length). A flexible
/// request's compact string may carry a longer one.
pub(super) fn storable_group_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= ringmirror_storage::limits::STRING_BYTES_MAX
}

/// Writes `offsets` with `write`, all but those whose metadata is over
/// Kafka's `offset.metadata.max.bytes` (OFFSET_METADATA_TOO_LARGE): an
/// error code per partition, in order; a failed write is
/// COORDINATOR_NOT_AVAILABLE (retriable) for each it held.
pub(super) fn store_offsets(
    shard: usize,
    group_id: &str,
    offsets: Vec<((String, i32), CommittedOffset)>,
    write: impl FnOnce(Vec<((String, i32), CommittedOffset)>) -> store::StoreResult<()>,
) -> Vec<i16> {
    let mut codes = Vec::with_capacity(offsets.len());
    let mut accepted = Vec::with_capacity(offsets.len());
    for (tp, v) in offsets {
        if v.metadata.len() > store::METADATA_MAX_BYTES {
            codes.push(OFFSET_METADATA_TOO_LARGE);
        } else {
            codes.push(NONE);
            accepted.push((tp, v));
        }
    }
    if let Err(e) = write(accepted) {
        tracing::error!(shard, group = group_id, error = %e, "cannot store offsets");
        for c in codes.iter_mut().filter(|c| **c == NONE) {
            *c = COORDINATOR_NOT_AVAILABLE;
        }
    }
    codes
}

impl GroupCoordinator {
    /// Why an offset commit (OffsetCommit or TxnOffsetCommit) to `group_id`
    /// is refused before its offsets are looked at, if it is: an id that
    /// cannot be stored, a share group's id (Kafka: "Group … is not a
    /// consumer group."), or, in a KIP-848 group, a member or epoch that is
    /// not current (the member's epoch, not a generation —
    /// Kafka's `ConsumerGroup.validateOffsetCommit`).
    pub(super) fn commit_refusal(&self, group_id: &str, generation: i32, member_id: &str) -> Option<i16> {
        if !storable_group_id(group_id) {
            return Some(INVALID_GROUP_ID);
        }
        if self.shares.contains(group_id) {
            return Some(GROUP_ID_NOT_FOUND);
        }
        let code = self
            .consumer_groups
            .get(group_id)
            .map_or(NONE, |consumer| consumer.commit_error(member_id, generation));
        (code != NONE).then_some(code)
    }

    /// OffsetCommit: an error per partition, in order. Offsets are flushed
    /// to the log before this returns.
    pub fn commit(
        &mut self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<((String, i32), CommittedOffset)>,
        now: Instant,
    ) -> Vec<i16> {
        let all = |code: i16| vec![code; offsets.len()];
        if let Some(code) = self.commit_refusal(group_id, generation, member_id) {
            return all(code);
        }
        let created = match self.groups.get_mut(group_id) {
            _ if self.consumer_groups.contains_key(group_id) => false,
            // Simple (standalone) consumers commit without a generation.
            None if generation < 0 => {
                self.groups.insert(group_id.to_owned(), Group::new());
                true
            }
            None => return all(ILLEGAL_GENERATION),
            Some(g) if generation < 0 && g.state == GroupState::Empty => false,
            Some(g) => {
                let state = g.state;
                let group_generation = g.generation;
                let Some(member) = g.member_mut(member_id) else {
                    return all(UNKNOWN_MEMBER_ID);
                };
                if generation != group_generation {
                    return all(ILLEGAL_GENERATION);
                }
                if state == GroupState::CompletingRebalance {
                    return all(REBALANCE_IN_PROGRESS);
                }
                member.keep_alive(now);
                false
            }
        };
        let codes = store_offsets(self.shard, group_id, offsets, |accepted| {
            self.store.commit(group_id, accepted)
        });
        if created {
            self.forget_if_unused(group_id);
        }
        codes
    }

    /// Failover, before a partition becomes writable: a committed offset or
    /// share-group start offset past `log_end` — synced from a source that
    /// had records this mirror never received — is moved back to
    /// `log_end` (leader epoch unknown, metadata kept), flushed before this
    /// returns. Left as it was, a consumer resuming after failover would
    /// skip whatever producers write here between `log_end` and that
    /// offset. Idempotent. Returns how many offsets were moved.
    pub fn clamp_offsets_to_log_end(
        &mut self,
        topic: &str,
        partition: i32,
        log_end: i64,
        now_ms: i64,
    ) -> store::StoreResult<usize> {
        let tp = (topic.to_owned(), partition);
        let committed: Vec<(String, CommittedOffset)> = self
            .store
            .groups()
            .filter_map(|group| {
                let v = self.store.offsets(group)?.get(&tp)?;
                (v.offset > log_end).then(|| {
                    let clamped = CommittedOffset {
                        offset: log_end,
                        leader_epoch: share_store::NO_LEADER_EPOCH,
                        metadata: v.metadata.clone(),
                        commit_timestamp: now_ms,
                    };
                    (group.clone(), clamped)
                })
            })
            .collect();
        let share_groups: Vec<String> = self
            .shares
            .groups()
            .filter(|(_, g)| g.offsets.get(&tp).is_some_and(|v| v.start_offset > log_end))
            .map(|(group, _)| group.clone())
            .collect();
        let moved = committed.len() + share_groups.len();
        for (group, clamped) in committed {
            self.store.commit(&group, vec![(tp.clone(), clamped)])?;
        }
        for group in share_groups {
            self.shares.alter(&group, vec![(tp.clone(), log_end)], now_ms)?;
        }
        Ok(moved)
    }

    /// Committed offsets of `group_id`: of the given partitions (`None` for
    /// a partition without one), or all of them.
    pub fn committed(
        &self,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<CommittedOffset>)> {
        let offsets = self.store.offsets(group_id);
        match partitions {
            Some(wanted) => wanted
                .iter()
                .map(|tp| (tp.clone(), offsets.and_then(|o| o.get(tp)).cloned()))
                .collect(),
            None => offsets
                .into_iter()
                .flatten()
                .map(|(tp, v)| (tp.clone(), Some(v.clone())))
                .collect(),
        }
    }
}
