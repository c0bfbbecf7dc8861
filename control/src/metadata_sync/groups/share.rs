//! Share groups' start offsets: DescribeShareGroupOffsets at the source,
//! AlterShareGroupOffsets at the destination, for groups neither active
//! there nor a consumer group of the same id.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::describe_share_group_offsets_request::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, GroupId, TopicName,
};
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_protocol::error_codes as codes;

use super::consumer::is_inactive;
use super::listing::HeldGroups;
use super::offsets::{
    ByPartition, GroupOffsets, ReadResults, Topics, Written, by_topic_with, kept_offsets, per_group, write_changed,
    written,
};
use super::{
    ALTER_SHARE_GROUP_OFFSETS_VERSIONS, CONSUMER_GROUP, DESCRIBE_SHARE_GROUP_OFFSETS_VERSIONS, GROUPS_PER_REQUEST,
    GroupOutcome, GroupSyncReport, SHARE_GROUP, SHARE_PARTITIONS_PER_REQUEST, conflict, s,
};

/// Share groups' start offsets.
pub(super) struct ShareGroups;

/// Start offsets by (topic, partition).
pub(super) type ShareOffsets = ByPartition<i64>;

/// Groups per DescribeShareGroupOffsets request when each names
/// `partitions` partitions.
pub(super) fn share_groups_per_request(partitions: usize) -> usize {
    (SHARE_PARTITIONS_PER_REQUEST / partitions.max(1)).clamp(1, GROUPS_PER_REQUEST)
}

/// DescribeShareGroupOffsets v0 of each group's partitions, by name.
pub(super) fn describe_share_request(asks: &[(String, Topics)]) -> DescribeShareGroupOffsetsRequest {
    let groups = asks
        .iter()
        .map(|(group, topics)| {
            let topics = topics
                .iter()
                .map(|(t, ps)| {
                    DescribeShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(s(t)))
                        .with_partitions(ps.clone())
                })
                .collect();
            DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(s(group)))
                .with_topics(Some(topics))
        })
        .collect();
    DescribeShareGroupOffsetsRequest::default().with_groups(groups)
}

/// The start offsets in a DescribeShareGroupOffsets answer for each group
/// asked (in order): initialized (≥ 0), without error, in `keep`. A group
/// that is not a share group (any more) has none.
pub(super) fn share_offsets_from(
    asked: &[String],
    response: &DescribeShareGroupOffsetsResponse,
    keep: &BTreeSet<(String, i32)>,
) -> ReadResults<i64> {
    per_group(
        ShareGroups::READ_API,
        asked,
        &response.groups,
        |g| g.group_id.0.as_str(),
        |g| match g.error_code {
            codes::NONE => kept_offsets::<ShareGroups>(
                keep,
                g.topics.iter().flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| (t.topic_name.0.as_str(), p.partition_index, p.error_code, p.start_offset))
                }),
            ),
            codes::GROUP_ID_NOT_FOUND => Ok(ShareOffsets::new()),
            code => Err(format!("DescribeShareGroupOffsets error code {code}")),
        },
    )
}

/// AlterShareGroupOffsets v0 of `offsets` for `group`.
pub(super) fn alter_share_request(group: &str, offsets: &ShareOffsets) -> AlterShareGroupOffsetsRequest {
    let topics = by_topic_with(offsets)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition, start)| {
                    AlterShareGroupOffsetsRequestPartition::default()
                        .with_partition_index(partition)
                        .with_start_offset(*start)
                })
                .collect();
            AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(s(topic)))
                .with_partitions(partitions)
        })
        .collect();
    AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(topics)
}

/// What an AlterShareGroupOffsets answer did to `group`: (written,
/// refused), or the group's outcome when it was refused as a whole.
pub(super) fn alter_results(response: &AlterShareGroupOffsetsResponse) -> Result<Written, GroupOutcome> {
    match response.error_code {
        codes::NONE => {}
        // Only a group of another type is "not found" by an alter (it
        // creates share groups).
        codes::GROUP_ID_NOT_FOUND => {
            return Err(GroupOutcome::TypeConflict {
                source: SHARE_GROUP.into(),
                destination: CONSUMER_GROUP.into(),
            });
        }
        codes::NON_EMPTY_GROUP => return Err(GroupOutcome::Active { state: "Stable".into() }),
        code => {
            let message = response.error_message.as_deref().unwrap_or_default();
            return Err(GroupOutcome::Failed {
                error: format!("AlterShareGroupOffsets at the destination: error code {code} {message}")
                    .trim_end()
                    .to_owned(),
            });
        }
    }
    Ok(written(response.responses.iter().flat_map(|t| {
        t.partitions
            .iter()
            .map(move |p| (t.topic_name.0.as_str(), p.partition_index, p.error_code))
    })))
}

impl GroupOffsets for ShareGroups {
    type Offset = i64;
    type Read = DescribeShareGroupOffsetsRequest;
    type Write = AlterShareGroupOffsetsRequest;
    const READ_API: &'static str = "DescribeShareGroupOffsets";
    const WRITE_API: &'static str = "AlterShareGroupOffsets";
    const READ_VERSIONS: (i16, i16) = DESCRIBE_SHARE_GROUP_OFFSETS_VERSIONS;
    const WRITE_VERSIONS: (i16, i16) = ALTER_SHARE_GROUP_OFFSETS_VERSIONS;
    const WHAT: &'static str = "start offsets";

    fn position(offset: &i64) -> i64 {
        *offset
    }

    fn groups_per_read(_version: i16, partitions: usize) -> usize {
        share_groups_per_request(partitions)
    }

    /// Always by name: Kafka 4.0 takes no null "all topics".
    fn read_request(_version: i16, asks: &[(String, Topics)], _all: bool) -> DescribeShareGroupOffsetsRequest {
        describe_share_request(asks)
    }

    fn read_answers(
        _version: i16,
        asked: &[String],
        response: &DescribeShareGroupOffsetsResponse,
        keep: &BTreeSet<(String, i32)>,
    ) -> ReadResults<i64> {
        share_offsets_from(asked, response, keep)
    }

    fn unchanged(held: &i64, source: &i64) -> bool {
        held == source
    }

    fn write_request(_version: i16, group: &str, offsets: &ShareOffsets) -> AlterShareGroupOffsetsRequest {
        alter_share_request(group, offsets)
    }

    fn written(response: &AlterShareGroupOffsetsResponse) -> Result<Written, GroupOutcome> {
        alter_results(response)
    }
}

/// Sets the source's start offsets of each share group that is neither
/// active at the destination nor a consumer group there, where they differ
/// from what the destination holds.
pub(super) async fn alter_at_destination(
    destination: &mut Connection,
    source_offsets: BTreeMap<String, ShareOffsets>,
    held: Option<&HeldGroups>,
    report: &mut GroupSyncReport,
) -> Result<(), ClientError> {
    let mut candidates = BTreeMap::new();
    for (group, offsets) in source_offsets {
        match held.and_then(|h| h.get(&group)) {
            Some(g) if !g.share => conflict(report, group, SHARE_GROUP, CONSUMER_GROUP),
            Some(g) if !g.state.is_empty() && !is_inactive(&g.state) => {
                tracing::debug!(
                    group,
                    state = g.state,
                    "share group active at the destination; start offsets not synced"
                );
                report
                    .groups
                    .insert(group, GroupOutcome::Active { state: g.state.clone() });
            }
            _ if offsets.is_empty() => {
                report.groups.insert(group, GroupOutcome::nothing_written(0));
            }
            _ => {
                candidates.insert(group, offsets);
            }
        }
    }
    write_changed::<ShareGroups>(destination, candidates, report).await
}
