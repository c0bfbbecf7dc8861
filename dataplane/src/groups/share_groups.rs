//! Share groups (KIP-932) on a shard's coordinator, as Kafka's admin
//! API sees them: their start offsets (AlterShareGroupOffsets,
//! DescribeShareGroupOffsets, DeleteShareGroupOffsets) and
//! ShareGroupDescribe. Stored in [`super::share_store`].

use super::codes::*;
use super::offsets::storable_group_id;
use super::{GroupCoordinator, GroupState, ShareGroupDescription, ShareStartOffset};

impl GroupCoordinator {
    /// Whether `group_id` is a share group.
    pub fn is_share_group(&self, group_id: &str) -> bool {
        self.shares.contains(group_id)
    }

    /// AlterShareGroupOffsets of the partitions this agent serves (the
    /// caller answers the others): sets their start offsets, creating the
    /// share group if need be, flushed before this returns. As Kafka's
    /// `GroupMetadataManager.alterShareGroupOffsets`: an id of a group of
    /// another type is refused with GROUP_ID_NOT_FOUND (a share group here
    /// is always Empty, so NON_EMPTY_GROUP does not arise). Nothing to set
    /// creates nothing.
    pub fn alter_share_offsets(
        &mut self,
        group_id: &str,
        offsets: Vec<((String, i32), i64)>,
        now_ms: i64,
    ) -> Result<(), i16> {
        if !storable_group_id(group_id) {
            return Err(INVALID_GROUP_ID);
        }
        if self.groups.contains_key(group_id) || self.consumer_groups.contains_key(group_id) {
            return Err(GROUP_ID_NOT_FOUND);
        }
        if offsets.is_empty() {
            return Ok(());
        }
        self.shares.alter(group_id, offsets, now_ms).map_err(|e| {
            tracing::error!(shard = self.shard, group = group_id, error = %e, "cannot store share-group start offsets");
            COORDINATOR_NOT_AVAILABLE
        })
    }

    /// Start offsets of `group_id`: of the given partitions (`None` for a
    /// partition without one), or all of them. A group that is not a
    /// share group has none (Kafka answers such a group without an
    /// error, every start offset uninitialized).
    pub fn share_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<ShareStartOffset>)> {
        let offsets = self.shares.group(group_id).map(|g| &g.offsets);
        match partitions {
            Some(wanted) => wanted
                .iter()
                .map(|tp| (tp.clone(), offsets.and_then(|o| o.get(tp)).copied()))
                .collect(),
            None => offsets
                .into_iter()
                .flatten()
                .map(|(tp, v)| (tp.clone(), Some(*v)))
                .collect(),
        }
    }

    /// DeleteShareGroupOffsets of `topics`: the topics whose start offsets
    /// were deleted (the rest had none); the group stays. A group that is
    /// not a share group: GROUP_ID_NOT_FOUND.
    pub fn delete_share_offsets(&mut self, group_id: &str, topics: &[String]) -> Result<Vec<String>, i16> {
        if group_id.is_empty() {
            return Err(INVALID_GROUP_ID);
        }
        if !self.shares.contains(group_id) {
            return Err(GROUP_ID_NOT_FOUND);
        }
        self.shares.delete_topics(group_id, topics).map_err(|e| {
            tracing::error!(shard = self.shard, group = group_id, error = %e, "cannot delete share-group start offsets");
            COORDINATOR_NOT_AVAILABLE
        })
    }

    /// ShareGroupDescribe: the share group, or Kafka's error and message.
    pub fn describe_share_group(&self, group_id: &str) -> Result<ShareGroupDescription, (i16, String)> {
        if group_id.is_empty() {
            return Err((INVALID_GROUP_ID, "The group id must not be empty.".to_owned()));
        }
        if let Some(g) = self.shares.group(group_id) {
            return Ok(ShareGroupDescription {
                state: GroupState::Empty,
                group_epoch: g.epoch,
            });
        }
        let message = if self.groups.contains_key(group_id) || self.consumer_groups.contains_key(group_id) {
            format!("Group {group_id} is not a share group.")
        } else {
            format!("Group {group_id} not found.")
        };
        Err((GROUP_ID_NOT_FOUND, message))
    }
}
