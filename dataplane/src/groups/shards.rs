//! Each shard's group coordinator as its registry carries it: attached when
//! the shard starts, found by the jobs that run on the shard, and visited on
//! every shard when a mirror's partition fails over.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::GroupCoordinator;
use crate::partition::{Registry, ShardAccess};
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::TopicPartition;

/// The coordinator of the groups placed on `registry`'s shard, if it opened.
pub fn shard_coordinator(registry: &Registry) -> Option<Rc<RefCell<GroupCoordinator>>> {
    registry.service()
}

/// Failover: moves every group's offsets of `tp` past `log_end` back to it
/// on every shard's group coordinator
/// ([`GroupCoordinator::clamp_offsets_to_log_end`]), before the partition
/// becomes writable. Without a listener there are no groups. Returns how
/// many offsets moved.
pub async fn clamp_offsets_on_every_shard(
    registry: &Rc<Registry>,
    tp: &TopicPartition,
    log_end: i64,
) -> Result<usize, String> {
    let Some(links) = registry.links() else {
        return Ok(0);
    };
    let access = ShardAccess {
        local: Rc::clone(registry),
        links: Arc::clone(links),
    };
    let mut moved = 0;
    for shard in 0..links.shards() {
        let (topic, partition) = (tp.topic.clone(), tp.partition);
        let clamped = access
            .on(shard, move |registry| {
                let Some(groups) = shard_coordinator(registry) else {
                    return Some(Ok(0));
                };
                let mut groups = groups.try_borrow_mut().ok()?;
                let now = i64::try_from(now_ms()).unwrap_or(i64::MAX);
                Some(
                    groups
                        .clamp_offsets_to_log_end(&topic, partition, log_end, now)
                        .map_err(|e| format!("shard {shard}'s group offsets: {e}")),
                )
            })
            .await
            .ok_or_else(|| format!("shard {shard} has ended"))?;
        moved += clamped?;
    }
    Ok(moved)
}
