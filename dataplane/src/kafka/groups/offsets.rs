//! The offsets APIs of groups: OffsetCommit, TxnOffsetCommit and
//! OffsetFetch, each turned into calls on the coordinator of the group's
//! shard; partitions this agent does not serve are answered here.

use kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};

use kafka_protocol::protocol::StrBytes;

use super::{group_allowed, on_coordinator, s, take_denied_topics, topic_allowed};
use crate::groups::codes::*;
use crate::groups::{CommittedOffset, group_shard};
use crate::kafka::connection::ClientConnection;
use crate::partition::catalog::Catalog;
use crate::partition::registry::ShardAccess;
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::TopicPartition;

pub(super) async fn offset_commit(
    access: &ShardAccess,
    catalog: &Catalog,
    r: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group = r.group_id.0.to_string();
    let timestamp = now_ms() as i64;
    // A code per partition: decided here for partitions we do not serve,
    // by the coordinator for the rest (in order).
    let mut codes: Vec<Vec<Option<i16>>> = Vec::with_capacity(r.topics.len());
    let mut offsets = Vec::new();
    for t in &r.topics {
        let mut topic_codes = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            if catalog.owner(&t.name.0, p.partition_index).is_some() {
                let value = CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_deref().unwrap_or_default().to_owned(),
                    commit_timestamp: timestamp,
                };
                offsets.push(((t.name.0.to_string(), p.partition_index), value));
                topic_codes.push(None);
            } else {
                topic_codes.push(Some(UNKNOWN_TOPIC_OR_PARTITION));
            }
        }
        codes.push(topic_codes);
    }
    let count = offsets.len();
    let (generation, member) = (r.generation_id_or_member_epoch, r.member_id.to_string());
    let decided = if count == 0 {
        Vec::new()
    } else {
        on_coordinator(access, &group.clone(), move |c, now| {
            c.commit(&group, generation, &member, offsets, now)
        })
        .await
        .unwrap_or_else(|| vec![COORDINATOR_NOT_AVAILABLE; count])
    };
    let topics = r
        .topics
        .into_iter()
        .zip(merged_codes(codes, decided))
        .map(|(t, topic_codes)| commit_topic(t, topic_codes))
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// Each partition's code, per topic: the one decided before the
/// coordinator was asked, else the coordinator's next (they come in order).
fn merged_codes(early: Vec<Vec<Option<i16>>>, decided: Vec<i16>) -> Vec<Vec<i16>> {
    let mut decided = decided.into_iter();
    early
        .into_iter()
        .map(|topic| {
            topic
                .into_iter()
                .map(|code| code.or_else(|| decided.next()).unwrap_or(COORDINATOR_NOT_AVAILABLE))
                .collect()
        })
        .collect()
}

/// TxnOffsetCommit: WRITE on the transactional id, READ on the group and
/// on each topic (Kafka's `handleTxnOffsetCommitRequest`); the group's
/// offsets partition verified with the transaction's coordinator (KIP-890
/// part 1: added by AddOffsetsToTxn), then the offsets kept pending on the
/// group's shard until the transaction ends.
pub(super) async fn txn_offset_commit(
    conn: &ClientConnection,
    version: i16,
    r: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let catalog = conn.access.local.catalog().snapshot();
    let id = r.transactional_id.0.to_string();
    let group = r.group_id.0.to_string();
    let denied = if !conn.authorized(AclOperation::Write, ResourceType::TransactionalId, &id) {
        Some(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else if !group_allowed(conn, AclOperation::Read, &group) {
        Some(GROUP_AUTHORIZATION_FAILED)
    } else {
        None
    };
    let timestamp = now_ms() as i64;
    let mut codes: Vec<Vec<Option<i16>>> = Vec::with_capacity(r.topics.len());
    let mut offsets = Vec::new();
    for t in &r.topics {
        let topic_denied = !topic_allowed(conn, AclOperation::Read, &t.name);
        let topic_codes = t
            .partitions
            .iter()
            .map(|p| {
                if let Some(code) = denied {
                    Some(code)
                } else if topic_denied {
                    Some(TOPIC_AUTHORIZATION_FAILED)
                } else if catalog.owner(&t.name.0, p.partition_index).is_none() {
                    Some(UNKNOWN_TOPIC_OR_PARTITION)
                } else {
                    let value = CommittedOffset {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_deref().unwrap_or_default().to_owned(),
                        commit_timestamp: timestamp,
                    };
                    offsets.push(((t.name.0.to_string(), p.partition_index), value));
                    None
                }
            })
            .collect();
        codes.push(topic_codes);
    }
    let count = offsets.len();
    let decided = if count == 0 {
        Vec::new()
    } else {
        let shards = conn.access.links.shards();
        let offsets_partition = crate::transactions::coordinator::GROUP_OFFSETS_TOPIC;
        let group_shard = i32::try_from(group_shard(&group, shards)).unwrap_or(i32::MAX);
        let (producer_id, epoch) = (r.producer_id.0, r.producer_epoch);
        let verdict = crate::kafka::transactions::verify_partitions(
            &conn.access,
            &id,
            producer_id,
            epoch,
            vec![TopicPartition::new(offsets_partition, group_shard)],
        )
        .await
        .first()
        .map_or(COORDINATOR_NOT_AVAILABLE, |(_, code)| *code);
        // TRANSACTION_ABORTABLE from v4 (KIP-890), as Kafka's
        // `txnOffsetCommitRequestVersionToTransactionSupportedOperation`.
        let verdict = crate::kafka::transactions::verification_error(verdict, version >= 4);
        if verdict != NONE {
            vec![verdict; count]
        } else {
            let (generation, member) = (r.generation_id, r.member_id.to_string());
            on_coordinator(&conn.access, &group.clone(), move |c, _| {
                c.txn_commit(&group, producer_id, generation, &member, offsets)
            })
            .await
            .unwrap_or_else(|| vec![COORDINATOR_NOT_AVAILABLE; count])
        }
    };
    let topics = r
        .topics
        .into_iter()
        .zip(merged_codes(codes, decided))
        .map(|(t, topic_codes)| {
            let partitions = t
                .partitions
                .iter()
                .zip(topic_codes)
                .map(|(p, code)| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Partitions asked about per topic, in request order; `None`: all.
type Wanted = Option<Vec<(String, Vec<i32>)>>;
/// Committed offsets per topic, in order, each with its partition's error
/// (UNSTABLE_OFFSET_COMMIT while a transaction holds one, when asked).
type ByTopic = Vec<(String, Vec<(i32, Option<CommittedOffset>, i16)>)>;
/// The member id and epoch an OffsetFetch v9+ names; (None, -1) before.
type FetchingMember = (Option<String>, i32);

/// `None` when the group's coordinator is not available; the group's
/// error (GROUP_ID_NOT_FOUND for a share group, as Kafka's "Group … is not
/// a consumer group"; a consumer-protocol member's UNKNOWN_MEMBER_ID or
/// STALE_MEMBER_EPOCH) otherwise.
/// With `require_stable`, a partition an open transaction holds an offset
/// of is answered UNSTABLE_OFFSET_COMMIT and no offset (Kafka's
/// `GroupMetadataManager.getOffsets`).
async fn committed(
    access: &ShardAccess,
    group: String,
    member: FetchingMember,
    wanted: Wanted,
    require_stable: bool,
) -> Option<Result<ByTopic, i16>> {
    on_coordinator(access, &group.clone(), move |c, _| {
        if c.is_share_group(&group) {
            return Err(GROUP_ID_NOT_FOUND);
        }
        let code = c.consumer_fetch_error(&group, member.0.as_deref(), member.1);
        if code != NONE {
            return Err(code);
        }
        let flat: Option<Vec<(String, i32)>> = wanted.as_ref().map(|topics| {
            topics
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |&p| (t.clone(), p)))
                .collect()
        });
        let found = c.committed(&group, flat.as_deref());
        // Regrouped by topic, keeping the request's order.
        let mut out: ByTopic = Vec::new();
        for ((topic, partition), v) in found {
            let tp = (topic, partition);
            let (v, code) = if require_stable && c.has_pending_txn_offset(&group, &tp) {
                (None, UNSTABLE_OFFSET_COMMIT)
            } else {
                (v, NONE)
            };
            let (topic, partition) = tp;
            match out.last_mut() {
                Some((t, ps)) if *t == topic => ps.push((partition, v, code)),
                _ => out.push((topic, vec![(partition, v, code)])),
            }
        }
        Ok(out)
    })
    .await
}

/// (offset, leader epoch, metadata) of a committed offset, or Kafka's
/// "nothing committed" (-1, -1, "").
fn committed_fields(v: Option<CommittedOffset>) -> (i64, i32, String) {
    v.map_or((-1, -1, String::new()), |v| (v.offset, v.leader_epoch, v.metadata))
}

pub(super) async fn offset_fetch(access: &ShardAccess, version: i16, r: OffsetFetchRequest) -> OffsetFetchResponse {
    let wanted = |topics: Option<Vec<(TopicName, Vec<i32>)>>| -> Wanted {
        topics.map(|ts| ts.into_iter().map(|(n, ps)| (n.0.to_string(), ps)).collect())
    };
    if version >= 8 {
        let mut groups = Vec::with_capacity(r.groups.len());
        for g in r.groups {
            let topics = g
                .topics
                .map(|ts| ts.into_iter().map(|t| (t.name, t.partition_indexes)).collect());
            let member = (g.member_id.map(|m| m.to_string()), g.member_epoch);
            let found = committed(
                access,
                g.group_id.0.to_string(),
                member,
                wanted(topics),
                r.require_stable,
            )
            .await;
            let group = OffsetFetchResponseGroup::default().with_group_id(g.group_id);
            let found = match found {
                Some(Ok(found)) => found,
                Some(Err(code)) => {
                    groups.push(group.with_error_code(code));
                    continue;
                }
                None => {
                    groups.push(group.with_error_code(COORDINATOR_NOT_AVAILABLE));
                    continue;
                }
            };
            let topics = found
                .into_iter()
                .map(|(topic, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|(p, v, code)| {
                            let (offset, epoch, metadata) = committed_fields(v);
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(s(&metadata)))
                                .with_error_code(code)
                        })
                        .collect();
                    OffsetFetchResponseTopics::default()
                        .with_name(TopicName(s(&topic)))
                        .with_partitions(partitions)
                })
                .collect();
            groups.push(group.with_topics(topics));
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let topics = r
        .topics
        .map(|ts| ts.into_iter().map(|t| (t.name, t.partition_indexes)).collect());
    let asked: Vec<(String, Vec<i32>)> = wanted(topics.clone()).unwrap_or_default();
    let found = committed(
        access,
        r.group_id.0.to_string(),
        (None, -1),
        wanted(topics),
        r.require_stable,
    )
    .await;
    // v1 has no top-level error: a group's error is said per partition.
    let group_error = match found {
        Some(Ok(found)) => Ok(found),
        Some(Err(code)) => Err(code),
        None => Err(COORDINATOR_NOT_AVAILABLE),
    };
    let (found, partition_error) = match group_error {
        Ok(found) => (found, NONE),
        Err(code) if version < 2 => (
            asked
                .into_iter()
                .map(|(t, ps)| (t, ps.into_iter().map(|p| (p, None, NONE)).collect()))
                .collect(),
            code,
        ),
        Err(code) => return OffsetFetchResponse::default().with_error_code(code),
    };
    let topics = found
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(p, v, code)| {
                    let (offset, epoch, metadata) = committed_fields(v);
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(s(&metadata)))
                        .with_error_code(if code == NONE { partition_error } else { code })
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(s(&topic)))
                .with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

/// OffsetCommit, with the ACL checks Kafka makes for it.
pub(super) async fn handle_offset_commit(
    conn: &mut ClientConnection,
    restricted: bool,
    r: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let catalog = conn.catalog.get();
    let mut r = r;
    // READ on each topic (Kafka's handleOffsetCommitRequest).
    let denied_topics = take_denied_topics(conn, restricted, AclOperation::Read, &mut r.topics, |t| &t.name);
    let mut body = offset_commit(&conn.access, &catalog, r).await;
    body.topics.extend(
        denied_topics
            .into_iter()
            .map(|t| refused_commit_topic(t, TOPIC_AUTHORIZATION_FAILED)),
    );
    body
}

/// A topic of an OffsetCommit answered `code` on each of its partitions.
pub(super) fn refused_commit_topic(t: OffsetCommitRequestTopic, code: i16) -> OffsetCommitResponseTopic {
    commit_topic(t, std::iter::repeat(code))
}

/// A topic of an OffsetCommit answered with `codes`, one per partition
/// in request order.
fn commit_topic(t: OffsetCommitRequestTopic, codes: impl IntoIterator<Item = i16>) -> OffsetCommitResponseTopic {
    let partitions = t
        .partitions
        .iter()
        .zip(codes)
        .map(|(p, code)| {
            OffsetCommitResponsePartition::default()
                .with_partition_index(p.partition_index)
                .with_error_code(code)
        })
        .collect();
    OffsetCommitResponseTopic::default()
        .with_name(t.name)
        .with_partitions(partitions)
}

/// OffsetFetch, with the ACL checks Kafka makes for it.
pub(super) async fn handle_offset_fetch(
    conn: &mut ClientConnection,
    version: i16,
    restricted: bool,
    mut r: OffsetFetchRequest,
) -> OffsetFetchResponse {
    // DESCRIBE on each group (v8+ here; before, above) and on each
    // topic: left out of "all topics", TOPIC_AUTHORIZATION_FAILED
    // when asked by name (Kafka's handleOffsetFetchRequest).
    let mut denied_groups = Vec::new();
    if restricted && version >= 8 {
        let (ok, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups)
            .into_iter()
            .partition(|g| group_allowed(conn, AclOperation::Describe, &g.group_id));
        r.groups = ok;
        denied_groups = denied;
    }
    let all_topics_v8: Vec<bool> = r.groups.iter().map(|g| g.topics.is_none()).collect();
    let all_topics = r.topics.is_none();
    let mut body = offset_fetch(&conn.access, version, r).await;
    if restricted {
        let allowed = |t: &TopicName| topic_allowed(conn, AclOperation::Describe, t);
        // The same rule for both layouts (topics before v8, groups'
        // topics from v8; other types, the same fields): a topic
        // the client may not describe is left out of an "all
        // topics" answer, and answered TOPIC_AUTHORIZATION_FAILED
        // where it was named.
        macro_rules! hide_denied {
            ($topics:expr, $all:expr) => {
                if $all {
                    $topics.retain(|t| allowed(&t.name));
                } else {
                    for t in $topics.iter_mut().filter(|t| !allowed(&t.name)) {
                        for p in &mut t.partitions {
                            p.committed_offset = -1;
                            p.committed_leader_epoch = -1;
                            p.metadata = Some(StrBytes::default());
                            p.error_code = TOPIC_AUTHORIZATION_FAILED;
                        }
                    }
                }
            };
        }
        hide_denied!(body.topics, all_topics);
        for (g, all) in body.groups.iter_mut().zip(all_topics_v8) {
            hide_denied!(g.topics, all);
        }
    }
    body.groups.extend(denied_groups.into_iter().map(|g| {
        OffsetFetchResponseGroup::default()
            .with_group_id(g.group_id)
            .with_error_code(GROUP_AUTHORIZATION_FAILED)
    }));
    body
}
