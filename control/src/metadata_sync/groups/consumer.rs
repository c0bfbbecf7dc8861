//! Consumer groups' committed offsets: OffsetFetch at the source, the
//! destination's group states (DescribeGroups, and ConsumerGroupDescribe
//! for KIP-848 groups, which DescribeGroups does not know: only an inactive
//! group takes an admin commit), and the admin commit (OffsetCommit,
//! generation -1).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, DescribeGroupsRequest, GroupId, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_protocol::error_codes as codes;

use super::listing::HeldGroups;
use super::offsets::{
    ByPartition, GroupOffsets, ReadResults, Topics, Written, by_topic_with, kept_offsets, per_group, write_changed,
    written,
};
use super::{
    ADMIN_GENERATION, CONSUMER_GROUP, CONSUMER_GROUP_DESCRIBE_VERSIONS, DESCRIBE_GROUPS_VERSIONS, GROUPS_PER_REQUEST,
    GroupOutcome, GroupSyncReport, OFFSET_COMMIT_VERSIONS, OFFSET_FETCH_VERSIONS, SHARE_GROUP, conflict, fail, s,
};

/// A committed offset as OffsetFetch answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Committed {
    pub(super) offset: i64,
    pub(super) leader_epoch: i32,
    pub(super) metadata: Option<String>,
}

impl Committed {
    /// The same commit, whether the metadata is null or empty (brokers
    /// store one as the other).
    pub(super) fn same_as(&self, other: &Committed) -> bool {
        self.offset == other.offset
            && self.leader_epoch == other.leader_epoch
            && self.metadata.as_deref().unwrap_or_default() == other.metadata.as_deref().unwrap_or_default()
    }
}

pub(super) type Offsets = ByPartition<Committed>;

/// Consumer groups' committed offsets.
pub(super) struct ConsumerGroups;

/// The OffsetFetch request of `version` for `groups` (one below v8): all
/// of each group's offsets when `all` (v7+ only), else `topics`.
pub(super) fn offset_fetch_request(version: i16, groups: &[(String, Topics)], all: bool) -> OffsetFetchRequest {
    let all = all && version >= 7;
    let request = OffsetFetchRequest::default();
    let request = if version >= 7 {
        request.with_require_stable(false)
    } else {
        request
    };
    if version >= 8 {
        let groups = groups
            .iter()
            .map(|(group, topics)| {
                let topics = (!all).then(|| {
                    topics
                        .iter()
                        .map(|(t, ps)| {
                            OffsetFetchRequestTopics::default()
                                .with_name(TopicName(s(t)))
                                .with_partition_indexes(ps.clone())
                        })
                        .collect()
                });
                let g = OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(group)))
                    .with_topics(topics);
                if version >= 9 {
                    g.with_member_id(None).with_member_epoch(-1)
                } else {
                    g
                }
            })
            .collect();
        return request.with_groups(groups);
    }
    let (group, topics) = &groups[0];
    let topics = (!all).then(|| {
        topics
            .iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s(t)))
                    .with_partition_indexes(ps.clone())
            })
            .collect()
    });
    request.with_group_id(GroupId(s(group))).with_topics(topics)
}

/// The committed offsets in an OffsetFetch answer of `version` for each
/// group asked (`asked`, in order), those in `keep` only.
pub(super) fn offsets_from(
    version: i16,
    asked: &[String],
    response: &OffsetFetchResponse,
    keep: &BTreeSet<(String, i32)>,
) -> ReadResults<Committed> {
    let group_error = |code: i16| match code {
        // Not there (any more): nothing committed.
        codes::NONE | codes::GROUP_ID_NOT_FOUND => Ok(()),
        code => Err(format!("OffsetFetch error code {code}")),
    };
    let committed = |offset, leader_epoch, metadata: &Option<StrBytes>| Committed {
        offset,
        leader_epoch,
        metadata: metadata.as_ref().map(|m| m.to_string()),
    };
    if version >= 8 {
        return per_group(
            ConsumerGroups::READ_API,
            asked,
            &response.groups,
            |g| g.group_id.0.as_str(),
            |g| {
                group_error(g.error_code)?;
                kept_offsets::<ConsumerGroups>(
                    keep,
                    g.topics.iter().flat_map(|t| {
                        t.partitions.iter().map(|p| {
                            let c = committed(p.committed_offset, p.committed_leader_epoch, &p.metadata);
                            (t.name.0.as_str(), p.partition_index, p.error_code, c)
                        })
                    }),
                )
            },
        );
    }
    let group = asked[0].clone();
    if version >= 2
        && let Err(e) = group_error(response.error_code)
    {
        return vec![(group, Err(e))];
    }
    let kept = kept_offsets::<ConsumerGroups>(
        keep,
        response.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| {
                let c = committed(p.committed_offset, p.committed_leader_epoch, &p.metadata);
                (t.name.0.as_str(), p.partition_index, p.error_code, c)
            })
        }),
    );
    vec![(group, kept)]
}

/// Whether a group in `state` (DescribeGroups) may take an admin commit.
pub(super) fn is_inactive(state: &str) -> bool {
    state.eq_ignore_ascii_case("Empty") || state.eq_ignore_ascii_case("Dead")
}

/// Each group's state at the destination ("Dead" when unknown there), or
/// the error it was described with.
pub(super) async fn destination_states(
    destination: &mut Connection,
    groups: &[String],
) -> Result<BTreeMap<String, Result<String, String>>, ClientError> {
    let (min, max) = DESCRIBE_GROUPS_VERSIONS;
    let version = destination.version_for::<DescribeGroupsRequest>(min, max)?;
    let mut out = BTreeMap::new();
    for batch in groups.chunks(GROUPS_PER_REQUEST) {
        let request = DescribeGroupsRequest::default().with_groups(batch.iter().map(|g| GroupId(s(g))).collect());
        let response = destination.request(&request, version).await?;
        for group in batch {
            let state = match response.groups.iter().find(|d| d.group_id.0.as_str() == group.as_str()) {
                None => Err("DescribeGroups did not answer for the group".to_owned()),
                Some(d) => match d.error_code {
                    codes::NONE => Ok(d.group_state.to_string()),
                    codes::GROUP_ID_NOT_FOUND => Ok("Dead".to_owned()),
                    code => Err(format!("DescribeGroups error code {code}")),
                },
            };
            out.insert(group.clone(), state);
        }
    }
    // A KIP-848 group is Dead to DescribeGroups: its state is
    // ConsumerGroupDescribe's, where the destination serves it.
    if !destination.advertises(ApiKey::ConsumerGroupDescribe as i16) {
        return Ok(out);
    }
    let (min, max) = CONSUMER_GROUP_DESCRIBE_VERSIONS;
    let version = destination.version_for::<ConsumerGroupDescribeRequest>(min, max)?;
    let unknown: Vec<String> = out
        .iter()
        .filter(|(_, state)| state.as_deref().is_ok_and(|st| st.eq_ignore_ascii_case("Dead")))
        .map(|(group, _)| group.clone())
        .collect();
    for batch in unknown.chunks(GROUPS_PER_REQUEST) {
        let request =
            ConsumerGroupDescribeRequest::default().with_group_ids(batch.iter().map(|g| GroupId(s(g))).collect());
        let response = destination.request(&request, version).await?;
        for described in response.groups.iter().filter(|d| d.error_code == codes::NONE) {
            out.insert(described.group_id.0.to_string(), Ok(described.group_state.to_string()));
        }
    }
    Ok(out)
}

/// The admin commit of `offsets` to `group`, at `version`.
pub(super) fn offset_commit_request(version: i16, group: &str, offsets: &Offsets) -> OffsetCommitRequest {
    let topics = by_topic_with(offsets)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition, c)| {
                    let p = OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(c.offset)
                        .with_committed_metadata(c.metadata.as_deref().map(s));
                    if version >= 6 {
                        p.with_committed_leader_epoch(c.leader_epoch)
                    } else {
                        p
                    }
                })
                .collect();
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(partitions)
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(ADMIN_GENERATION)
        .with_member_id(StrBytes::default())
        .with_topics(topics);
    if version <= 4 {
        // "Keep for the broker's default retention."
        request.with_retention_time_ms(-1)
    } else {
        request
    }
}

/// (committed, refused) from an OffsetCommit answer.
pub(super) fn commit_results(response: &OffsetCommitResponse) -> Written {
    written(response.topics.iter().flat_map(|t| {
        t.partitions
            .iter()
            .map(move |p| (t.name.0.as_str(), p.partition_index, p.error_code))
    }))
}

impl GroupOffsets for ConsumerGroups {
    type Offset = Committed;
    type Read = OffsetFetchRequest;
    type Write = OffsetCommitRequest;
    const READ_API: &'static str = "OffsetFetch";
    const WRITE_API: &'static str = "OffsetCommit";
    const READ_VERSIONS: (i16, i16) = OFFSET_FETCH_VERSIONS;
    const WRITE_VERSIONS: (i16, i16) = OFFSET_COMMIT_VERSIONS;
    const WHAT: &'static str = "committed offsets";

    fn position(offset: &Committed) -> i64 {
        offset.offset
    }

    fn groups_per_read(version: i16, _partitions: usize) -> usize {
        if version >= 8 { GROUPS_PER_REQUEST } else { 1 }
    }

    fn read_request(version: i16, asks: &[(String, Topics)], all: bool) -> OffsetFetchRequest {
        offset_fetch_request(version, asks, all)
    }

    fn read_answers(
        version: i16,
        asked: &[String],
        response: &OffsetFetchResponse,
        keep: &BTreeSet<(String, i32)>,
    ) -> ReadResults<Committed> {
        offsets_from(version, asked, response, keep)
    }

    fn unchanged(held: &Committed, source: &Committed) -> bool {
        held.same_as(source)
    }

    fn write_request(version: i16, group: &str, offsets: &Offsets) -> OffsetCommitRequest {
        offset_commit_request(version, group, offsets)
    }

    fn written(response: &OffsetCommitResponse) -> Result<Written, GroupOutcome> {
        Ok(commit_results(response))
    }
}

/// Commits the source's offsets of each group that is not active at the
/// destination, nor a share group there (`held`: what the destination
/// lists, where it may hold share groups), where they differ from what the
/// destination holds.
pub(super) async fn commit_at_destination(
    destination: &mut Connection,
    source_offsets: BTreeMap<String, Offsets>,
    held: Option<&HeldGroups>,
    report: &mut GroupSyncReport,
) -> Result<(), ClientError> {
    let mut candidates = BTreeMap::new();
    for (group, offsets) in source_offsets {
        // A group named but not listed (a source that cannot list) may not
        // exist there: only one with offsets is in conflict.
        let exists = report.listed || !offsets.is_empty();
        if exists && held.and_then(|h| h.get(&group)).is_some_and(|g| g.share) {
            conflict(report, group, CONSUMER_GROUP, SHARE_GROUP);
        } else if offsets.is_empty() {
            report.groups.insert(group, GroupOutcome::nothing_written(0));
        } else {
            candidates.insert(group, offsets);
        }
    }
    if candidates.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = candidates.keys().cloned().collect();
    let states = destination_states(destination, &names).await?;
    let mut inactive = BTreeMap::new();
    for (group, offsets) in candidates {
        match states.get(&group) {
            Some(Ok(state)) if is_inactive(state) => {
                inactive.insert(group, offsets);
            }
            Some(Ok(state)) => {
                tracing::debug!(group, state, "group active at the destination; offsets not synced");
                report
                    .groups
                    .insert(group, GroupOutcome::Active { state: state.clone() });
            }
            Some(Err(error)) => fail(report, group, format!("at the destination: {error}")),
            None => fail(report, group, "not described at the destination".into()),
        }
    }
    write_changed::<ConsumerGroups>(destination, inactive, report).await
}
