//! What the coordinator shows of its mirrors and partitions: partition
//! views (`status`), mirror summaries and descriptions (with each metadata
//! sync step's last report), `/metrics` snapshots, and the reports peers
//! read through DescribeClusterMirrors.

use std::collections::BTreeMap;

use ringmirror_dataplane::partition::{LastMirrorEpoch, MirrorReport, MirrorReports, PartitionReport, TopicCover};

use super::{Core, Partition};
use crate::admin::{
    AdminError, MetricsSnapshot, MirrorDescription, MirrorMetrics, MirrorSummary, PartitionMetrics, PartitionView,
    ShardEventMetrics, ShardStorageMetrics,
};
use crate::metadata_sync::acl_sync::AclSyncReport;
use crate::metadata_sync::deletion;
use crate::metadata_sync::groups::{GroupOutcome, GroupSyncReport};
use crate::state_store::PartitionStateKey;

/// The fetch latency quantiles `/metrics` reports.
const LATENCY_QUANTILES: [f64; 3] = [0.5, 0.99, 0.999];

impl Core {
    fn view(&self, key: &PartitionStateKey, p: &Partition) -> PartitionView {
        let source = p.live.source_offset.unwrap_or(-1);
        PartitionView {
            mirror: key.mirror.clone(),
            topic: p.tp.topic.clone(),
            partition: p.tp.partition,
            topic_id: deletion::uuid_string(&key.topic_id),
            state: p.record.state.name().into(),
            source_offset: source,
            destination_offset: p.live.destination_offset,
            lag_messages: if source >= 0 {
                (source - p.live.destination_offset).max(0)
            } else {
                0
            },
            lag_seconds: p.live.behind_since.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            last_mirror_epoch: p.record.last_mirror_epoch,
            destination_leader_epoch: p.record.destination_leader_epoch,
            retry_attempt: p.record.retry_attempt,
            error: p.record.error.clone(),
        }
    }

    pub(super) fn views(&self) -> Vec<PartitionView> {
        self.partitions.iter().map(|(k, p)| self.view(k, p)).collect()
    }

    /// What peers see through DescribeClusterMirrors (last mirror epochs
    /// for their failback, and the states).
    pub(super) fn mirror_reports(&self) -> MirrorReports {
        let mut reports = MirrorReports::default();
        for (name, m) in &self.mirrors {
            reports.mirrors.insert(
                name.clone(),
                MirrorReport {
                    source_cluster_id: m.record.source_cluster_id.clone(),
                    // Its filter, for as long as the mirror exists: a
                    // mirror whose partitions all stopped still syncs
                    // metadata and takes new source topics, so a local
                    // topic of a name it covers would meet a mirrored one.
                    covers: {
                        let selection = m.selection.clone();
                        TopicCover::new(move |topic| selection.wants(topic))
                    },
                    ..MirrorReport::default()
                },
            );
        }
        for (key, p) in &self.partitions {
            let view = self.view(key, p);
            let Some(mirror) = reports.mirrors.get_mut(&key.mirror) else {
                continue;
            };
            let topic = mirror.topics.entry(p.tp.topic.clone()).or_default();
            topic.topic_id = key.topic_id;
            topic.partitions.insert(
                key.partition,
                PartitionReport {
                    source_offset: view.source_offset,
                    destination_offset: view.destination_offset,
                    lag: if view.source_offset >= 0 { view.lag_messages } else { -1 },
                    state: p.record.state,
                    retry_attempt: i16::try_from(view.retry_attempt).unwrap_or(i16::MAX),
                    error_message: view.error,
                    last_mirror_epoch: LastMirrorEpoch::new(view.last_mirror_epoch),
                },
            );
        }
        reports
    }

    pub(super) fn summary(&self, name: &str) -> MirrorSummary {
        let m = &self.mirrors[name];
        let mut states = BTreeMap::new();
        let mut partitions = 0;
        for (_, p) in self.partitions.iter().filter(|(k, _)| k.mirror == name) {
            *states.entry(p.record.state.name().to_string()).or_default() += 1;
            partitions += 1;
        }
        MirrorSummary {
            name: name.into(),
            bootstrap_servers: m.record.config.bootstrap_servers.clone(),
            source_cluster_id: m.record.source_cluster_id.clone(),
            partitions,
            states,
        }
    }

    pub(super) fn describe(&self, name: &str) -> Result<MirrorDescription, AdminError> {
        let m = self.mirror(name)?;
        Ok(MirrorDescription {
            // Never the password: answers show "***".
            config: m.record.config.redacted(),
            source_cluster_id: m.record.source_cluster_id.clone(),
            created_ms: m.record.created_ms,
            topics: m.topics.iter().cloned().collect(),
            partitions: self
                .partitions
                .iter()
                .filter(|(k, _)| k.mirror == name)
                .map(|(k, p)| self.view(k, p))
                .collect(),
            last_sync_ms: m.metadata.last_sync_ms,
            sync_error: m.metadata.sync_error.clone(),
            topic_configs_synced_ms: m.metadata.config_sync.as_ref().map(|(at, _)| *at),
            topic_configs: m
                .metadata
                .config_sync
                .as_ref()
                .map(|(_, t)| t.clone())
                .unwrap_or_default(),
            acls_synced_ms: m.metadata.acl_sync.as_ref().map(|(at, _)| *at),
            acls: m
                .metadata
                .acl_sync
                .as_ref()
                .map(|(_, r)| describe_acl_sync(r))
                .unwrap_or_default(),
            topic_checks: m.deletion.checks(m.record.config.deletion_policy(), |topic| {
                self.partitions
                    .iter()
                    .find(|(k, p)| k.mirror == name && p.tp.topic == topic)
                    .map(|(k, _)| k.topic_id)
            }),
            groups_synced_ms: m.metadata.group_sync.as_ref().map(|(at, _)| *at),
            groups: m
                .metadata
                .group_sync
                .as_ref()
                .map(|(_, report)| describe_group_sync(report))
                .unwrap_or_default(),
            partition_events: m.partition_events.iter().cloned().collect(),
        })
    }

    pub(super) fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            partitions: self
                .partitions
                .iter()
                .map(|(k, p)| PartitionMetrics {
                    view: self.view(k, p),
                    bytes_mirrored: p.live.bytes_before + p.live.placed_bytes,
                    batches_mirrored: p.live.batches_before + p.live.placed_batches,
                    epoch_bumps: p.live.epoch_bumps,
                    crc_failures: p.live.crc_failures,
                    truncations: p.live.truncations,
                    divergences: p.live.divergences,
                })
                .collect(),
            mirrors: self
                .mirrors
                .iter()
                .map(|(name, m)| MirrorMetrics {
                    mirror: name.clone(),
                    fetch_errors: m.fetch_stats.errors.clone(),
                    fetch_latency_us: m.fetch_stats.latency_quantiles_us(&LATENCY_QUANTILES),
                    fetches: m.fetch_stats.fetches,
                    sync_halted: m.halted,
                    topic_sync_errors: m.deletion.sync_errors(),
                    topic_deletions_pending: m.deletion.pending(),
                    topic_recreations: m.deletion.recreations_total(),
                })
                .collect(),
            shard_events: Some(ShardEventMetrics {
                telemetry_dropped: self.event_counts.telemetry_dropped(),
                state_queued: self.event_counts.state_queued() as u64,
            }),
            shard_storage: self
                .reserve_budgets
                .iter()
                .enumerate()
                .map(|(shard, budget)| ShardStorageMetrics {
                    shard,
                    reserved_ahead_bytes: budget.reserved_ahead_bytes(),
                    reserve_budget_bytes: budget.budget_bytes(),
                    reserve_released_bytes: budget.released_bytes_total(),
                })
                .collect(),
        }
    }
}

/// What `mirror describe` says of the last ACL sync.
fn describe_acl_sync(report: &AclSyncReport) -> String {
    match &report.unsupported {
        Some(why) => format!("not synced: {why}"),
        None => {
            let mut line = format!(
                "{} created, {} deleted, {} unchanged",
                report.created.len(),
                report.deleted.len(),
                report.unchanged
            );
            if !report.errors.is_empty() {
                line.push_str(&format!("; errors: {}", report.errors.join("; ")));
            }
            line
        }
    }
}

/// One line for `mirror describe` about a group's last sync.
/// A line per group for `mirror describe`: each synced group's outcome,
/// and the names the source itself lists as two group types (skipped).
fn describe_group_sync(report: &GroupSyncReport) -> BTreeMap<String, String> {
    let conflicts = report.type_conflicts.iter().map(|group| {
        let line = "skipped: the source lists it as both a consumer group and a share group".to_string();
        (group.clone(), line)
    });
    report
        .groups
        .iter()
        .map(|(group, outcome)| (group.clone(), describe_outcome(outcome)))
        .chain(conflicts)
        .collect()
}

fn describe_outcome(outcome: &GroupOutcome) -> String {
    match outcome {
        GroupOutcome::Synced {
            committed,
            unchanged,
            refused,
        } => {
            let mut line = format!("synced: {committed} committed, {unchanged} unchanged");
            if !refused.is_empty() {
                line.push_str(&format!(", {} refused", refused.len()));
            }
            line
        }
        GroupOutcome::Active { state } => format!("left alone: active here ({state})"),
        GroupOutcome::TypeConflict { source, destination } => {
            format!("skipped: type conflict: a {source} group at the source, a {destination} group here")
        }
        GroupOutcome::Skipped { reason } => format!("skipped: {reason}"),
        GroupOutcome::Failed { error } => format!("failed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_every_group_and_the_source_s_own_type_conflicts() {
        let mut report = GroupSyncReport::default();
        report.groups.insert(
            "c1".into(),
            GroupOutcome::Synced {
                committed: 2,
                unchanged: 1,
                refused: BTreeMap::new(),
            },
        );
        report.type_conflicts.insert("dual".into());
        let lines = describe_group_sync(&report);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines["c1"], "synced: 2 committed, 1 unchanged");
        assert!(
            lines["dual"].contains("both a consumer group and a share group"),
            "{lines:?}"
        );
    }
}
