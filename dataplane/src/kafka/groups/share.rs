//! The share-group admin APIs (start offsets only; see the module
//! documentation of `crate::kafka`): ShareGroupDescribe and Describe,
//! Alter and DeleteShareGroupOffsets.

use std::collections::HashMap;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::share_group_describe_response::DescribedGroup as ShareDescribedGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, GroupId,
    ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use uuid::Uuid;

use super::{AUTHORIZED_OPERATIONS_OMITTED, group_allowed, on_coordinator, s, take_denied_topics, topic_allowed};
use crate::groups::ShareStartOffset;
use crate::groups::codes::*;
use crate::kafka::connection::ClientConnection;
use crate::kafka::response::Response;
use crate::partition::catalog::Catalog;
use crate::partition::registry::{ServedPartition, ShardAccess};
use crate::security::acls::AclOperation;
use ringmirror_protocol::request::ServedApi;
use ringmirror_protocol::wire::share_group_offsets;
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::{PartitionLog, TopicPartition};

/// Kafka's answer for a share partition without a start offset
/// (`PartitionFactory.UNINITIALIZED_START_OFFSET`, `DEFAULT_LEADER_EPOCH`).
const UNINITIALIZED_START_OFFSET: i64 = -1;
const DEFAULT_LEADER_EPOCH: i32 = 0;
/// The assignor Kafka's share groups report (`SimpleAssignor`).
const SHARE_ASSIGNOR: &str = "simple";

/// DescribeShareGroupOffsets on the connection, with its ACLs: DESCRIBE
/// on each group, and on each topic: left out of "all topics",
/// TOPIC_AUTHORIZATION_FAILED per partition when asked (Kafka's
/// `handleDescribeShareGroupOffsetsRequest`). Encoded here: v1 adds each
/// partition's lag, which the generated response type has no field for.
pub(super) async fn describe_share_group_offsets_response(
    conn: &mut ClientConnection,
    version: i16,
    id: i32,
    restricted: bool,
    r: DescribeShareGroupOffsetsRequest,
) -> Response {
    let catalog = conn.catalog.get();
    let mut r = r;
    // DESCRIBE on each group, and on each topic: left out of "all
    // topics", TOPIC_AUTHORIZATION_FAILED per partition when asked
    // (Kafka's handleDescribeShareGroupOffsetsRequest).
    let mut refused: Vec<(GroupId, i16, Vec<DescribeShareGroupOffsetsResponseTopic>)> = Vec::new();
    if restricted {
        for g in &mut r.groups {
            if !group_allowed(conn, AclOperation::Describe, &g.group_id) {
                refused.push((g.group_id.clone(), GROUP_AUTHORIZATION_FAILED, Vec::new()));
                continue;
            }
            let Some(topics) = g.topics.as_mut() else { continue };
            let (ok, no): (Vec<_>, Vec<_>) = std::mem::take(topics)
                .into_iter()
                .partition(|t| topic_allowed(conn, AclOperation::Describe, &t.topic_name));
            *topics = ok;
            let no = no
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|&p| {
                            DescribeShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(p)
                                .with_start_offset(-1)
                                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                                .with_error_message(Some(s(TOPIC_AUTHORIZATION_FAILED_MESSAGE)))
                        })
                        .collect();
                    DescribeShareGroupOffsetsResponseTopic::default()
                        .with_topic_name(t.topic_name)
                        .with_partitions(partitions)
                })
                .collect();
            refused.push((g.group_id.clone(), NONE, no));
        }
        let denied: Vec<GroupId> = refused
            .iter()
            .filter(|(_, code, _)| *code != NONE)
            .map(|(g, _, _)| g.clone())
            .collect();
        r.groups.retain(|g| !denied.contains(&g.group_id));
    }
    let all_topics: Vec<(GroupId, bool)> = r
        .groups
        .iter()
        .map(|g| (g.group_id.clone(), g.topics.is_none()))
        .collect();
    let mut body = describe_share_group_offsets(&conn.access, &catalog, r).await;
    if restricted {
        for (g, (_, all)) in body.groups.iter_mut().zip(&all_topics) {
            if *all {
                g.topics
                    .retain(|t| topic_allowed(conn, AclOperation::Describe, &t.topic_name));
            }
            if let Some((_, _, no)) = refused
                .iter_mut()
                .find(|(id, code, _)| *id == g.group_id && *code == NONE)
                && g.error_code == NONE
            {
                g.topics.append(no);
            }
        }
        body.groups.extend(
            refused
                .into_iter()
                .filter(|(_, code, _)| *code != NONE)
                .map(|(g, code, _)| {
                    DescribeShareGroupOffsetsResponseGroup::default()
                        .with_group_id(g)
                        .with_error_code(code)
                        .with_error_message(Some(s(GROUP_AUTHORIZATION_FAILED_MESSAGE)))
                }),
        );
    }
    let lags = if version >= 1 {
        share_lags(&conn.access, &catalog, &body).await
    } else {
        HashMap::new()
    };
    let lag = |topic: &str, p: &DescribeShareGroupOffsetsResponsePartition| {
        let known = (p.error_code == NONE && p.start_offset >= 0)
            .then(|| lags.get(&(topic.to_owned(), p.partition_index)))
            .flatten();
        known.map_or(share_group_offsets::LAG_UNKNOWN, |&high_watermark| {
            (high_watermark - p.start_offset).max(0)
        })
    };
    Response::encoded(ServedApi::DescribeShareGroupOffsets, version, id, |buf| {
        share_group_offsets::encode_response(&body, version, lag, buf).map_err(|e| e.to_string())
    })
}

/// A topic's id at this agent, or Kafka's zero UUID for one it does not have.
fn topic_id(catalog: &Catalog, topic: &str) -> Uuid {
    catalog.topic(topic).map_or(Uuid::nil(), |t| Uuid::from_bytes(t.id))
}

/// ShareGroupDescribe (v1): an Empty share group with its epoch, no
/// members; Kafka's GROUP_ID_NOT_FOUND (and message) for any other id.
pub(super) async fn share_group_describe(
    access: &ShardAccess,
    r: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    let mut groups = Vec::with_capacity(r.group_ids.len());
    for group in r.group_ids {
        let name = group.0.to_string();
        let found = on_coordinator(access, &name.clone(), move |c, _| c.describe_share_group(&name)).await;
        let out = ShareDescribedGroup::default()
            .with_group_id(group)
            .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
        groups.push(match found {
            None => out.with_error_code(COORDINATOR_NOT_AVAILABLE),
            Some(Err((code, message))) => out.with_error_code(code).with_error_message(Some(s(&message))),
            Some(Ok(d)) => out
                .with_group_state(s(d.state.name()))
                .with_group_epoch(d.group_epoch)
                .with_assignment_epoch(0)
                .with_assignor_name(s(SHARE_ASSIGNOR)),
        });
    }
    ShareGroupDescribeResponse::default().with_groups(groups)
}

/// One partition of a DescribeShareGroupOffsets answer: its start offset,
/// or Kafka's "uninitialized" (-1, epoch 0) without an error.
fn share_partition(partition: i32, v: Option<ShareStartOffset>) -> DescribeShareGroupOffsetsResponsePartition {
    let (start, epoch) = v.map_or((UNINITIALIZED_START_OFFSET, DEFAULT_LEADER_EPOCH), |v| {
        (v.start_offset, v.leader_epoch)
    });
    DescribeShareGroupOffsetsResponsePartition::default()
        .with_partition_index(partition)
        .with_start_offset(start)
        .with_leader_epoch(epoch)
}

/// DescribeShareGroupOffsets (v0), as Kafka's `GroupCoordinatorService`:
/// a group that is not a share group is no error, its partitions have no
/// start offset; null topics ask for every start offset the group holds
/// (of topics this agent still has); no topics, for nothing.
async fn describe_share_group_offsets(
    access: &ShardAccess,
    catalog: &Catalog,
    r: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    let mut groups = Vec::with_capacity(r.groups.len());
    for g in r.groups {
        let name = g.group_id.0.to_string();
        let out = DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id);
        let asked: Option<Vec<(String, Vec<i32>)>> = g.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.topic_name.0.to_string(), t.partitions))
                .collect()
        });
        if asked.as_ref().is_some_and(Vec::is_empty) {
            groups.push(out);
            continue;
        }
        let flat: Option<Vec<(String, i32)>> = asked.as_ref().map(|ts| {
            ts.iter()
                .flat_map(|(t, ps)| ps.iter().map(move |&p| (t.clone(), p)))
                .collect()
        });
        let found = on_coordinator(access, &name.clone(), move |c, _| {
            c.share_offsets(&name, flat.as_deref())
        })
        .await;
        let Some(found) = found else {
            groups.push(out.with_error_code(COORDINATOR_NOT_AVAILABLE));
            continue;
        };
        // By topic: in the request's order, or the group's (by name).
        let mut by_topic: Vec<(String, Vec<DescribeShareGroupOffsetsResponsePartition>)> = Vec::new();
        for ((topic, partition), v) in found {
            if asked.is_none() && catalog.topic(&topic).is_none() {
                // Kafka reports only topics its metadata still has.
                continue;
            }
            let p = share_partition(partition, v);
            match by_topic.last_mut() {
                Some((t, ps)) if *t == topic => ps.push(p),
                _ => by_topic.push((topic, vec![p])),
            }
        }
        let topics = by_topic
            .into_iter()
            .map(|(topic, partitions)| {
                DescribeShareGroupOffsetsResponseTopic::default()
                    .with_topic_id(topic_id(catalog, &topic))
                    .with_topic_name(TopicName(s(&topic)))
                    .with_partitions(partitions)
            })
            .collect();
        groups.push(out.with_topics(topics));
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

/// The high watermark of every partition a DescribeShareGroupOffsets
/// answer gives a start offset for, asked of the partitions' shards: its
/// v1 lag is the high watermark less the start offset. Kafka subtracts
/// too the records above the start offset already acknowledged or
/// archived (`SharePartition.deliveryCompleteCount`); a share group here
/// holds start offsets only (no in-flight delivery state is mirrored, and
/// no share consumer runs here), so that count is 0.
async fn share_lags(
    access: &ShardAccess,
    catalog: &Catalog,
    body: &DescribeShareGroupOffsetsResponse,
) -> HashMap<(String, i32), i64> {
    let mut items = Vec::new();
    for t in body.groups.iter().flat_map(|g| &g.topics) {
        let Some(entry) = catalog.topic(&t.topic_name.0) else {
            continue;
        };
        for p in t
            .partitions
            .iter()
            .filter(|p| p.error_code == NONE && p.start_offset >= 0)
        {
            if let Some(served) = entry.partitions.get(&p.partition_index) {
                items.push((
                    served.shard,
                    TopicPartition::new(entry.name.clone(), p.partition_index),
                    (),
                ));
            }
        }
    }
    let marks = access.query(items.clone(), high_watermark).await;
    items
        .into_iter()
        .zip(marks)
        .filter_map(|((_, tp, ()), mark)| Some(((tp.topic, tp.partition), mark?)))
        .collect()
}

fn high_watermark(_: &ServedPartition, log: &PartitionLog, _: &()) -> i64 {
    log.log_end_offset()
}

/// AlterShareGroupOffsets (v0): partitions this agent does not serve get
/// UNKNOWN_TOPIC_OR_PARTITION (as Kafka, for a topic it does not have or
/// a partition past its count); the rest are set by the coordinator,
/// which creates the share group, or refuses the whole request (an id of
/// a consumer group: GROUP_ID_NOT_FOUND) with a top-level error.
pub(super) async fn alter_share_group_offsets(
    access: &ShardAccess,
    catalog: &Catalog,
    r: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let group = r.group_id.0.to_string();
    if group.is_empty() {
        return share_alter_error(INVALID_GROUP_ID);
    }
    let mut offsets = Vec::new();
    let mut topics = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let topic = t.topic_name.0.to_string();
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                let code = if catalog.owner(&topic, p.partition_index).is_some() {
                    offsets.push(((topic.clone(), p.partition_index), p.start_offset));
                    NONE
                } else {
                    UNKNOWN_TOPIC_OR_PARTITION
                };
                let out = AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code);
                if code == NONE {
                    out
                } else {
                    out.with_error_message(Some(s(UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)))
                }
            })
            .collect();
        topics.push(
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name.clone())
                .with_topic_id(topic_id(catalog, &topic))
                .with_partitions(partitions),
        );
    }
    let now = now_ms() as i64;
    let id = group.clone();
    let result = on_coordinator(access, &group, move |c, _| c.alter_share_offsets(&id, offsets, now))
        .await
        .unwrap_or(Err(COORDINATOR_NOT_AVAILABLE));
    match result {
        Ok(()) => AlterShareGroupOffsetsResponse::default().with_responses(topics),
        // Only a group of another type is not found by an alter.
        Err(GROUP_ID_NOT_FOUND) => AlterShareGroupOffsetsResponse::default()
            .with_error_code(GROUP_ID_NOT_FOUND)
            .with_error_message(Some(s(&format!("Group {group} is not a share group.")))),
        Err(code) => share_alter_error(code),
    }
}

/// Kafka's messages for the errors the share-group APIs answer with.
pub(super) const GROUP_AUTHORIZATION_FAILED_MESSAGE: &str = "Group authorization failed.";
pub(super) const TOPIC_AUTHORIZATION_FAILED_MESSAGE: &str = "Topic authorization failed.";
const UNKNOWN_TOPIC_OR_PARTITION_MESSAGE: &str = "This server does not host this topic-partition.";
const NO_OFFSETS_TO_DELETE_MESSAGE: &str = "There is no offset information to delete.";

fn error_message(code: i16) -> &'static str {
    match code {
        INVALID_GROUP_ID => "The group id is invalid.",
        GROUP_ID_NOT_FOUND => "The group id does not exist.",
        COORDINATOR_NOT_AVAILABLE => "The coordinator is not available.",
        UNKNOWN_TOPIC_OR_PARTITION => UNKNOWN_TOPIC_OR_PARTITION_MESSAGE,
        _ => "",
    }
}

fn share_alter_error(code: i16) -> AlterShareGroupOffsetsResponse {
    AlterShareGroupOffsetsResponse::default()
        .with_error_code(code)
        .with_error_message(Some(s(error_message(code))))
}

/// DeleteShareGroupOffsets (v0): the start offsets of the named topics go
/// (the group stays, Empty); per topic UNKNOWN_TOPIC_OR_PARTITION for a
/// topic this agent does not have or the group holds nothing of, as
/// Kafka; GROUP_ID_NOT_FOUND at the top for an id that is not a share
/// group.
pub(super) async fn delete_share_group_offsets(
    access: &ShardAccess,
    catalog: &Catalog,
    r: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let group = r.group_id.0.to_string();
    let error = |code: i16| {
        DeleteShareGroupOffsetsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(s(error_message(code))))
    };
    if group.is_empty() {
        return error(INVALID_GROUP_ID);
    }
    let asked: Vec<String> = r.topics.iter().map(|t| t.topic_name.0.to_string()).collect();
    let known: Vec<String> = asked.iter().filter(|t| catalog.topic(t).is_some()).cloned().collect();
    let result = on_coordinator(access, &group.clone(), move |c, _| {
        c.delete_share_offsets(&group, &known)
    })
    .await
    .unwrap_or(Err(COORDINATOR_NOT_AVAILABLE));
    let deleted = match result {
        Ok(deleted) => deleted,
        Err(code) => return error(code),
    };
    let topics = asked
        .iter()
        .map(|topic| {
            let out = DeleteShareGroupOffsetsResponseTopic::default().with_topic_name(TopicName(s(topic)));
            if catalog.topic(topic).is_none() {
                out.with_error_code(UNKNOWN_TOPIC_OR_PARTITION)
                    .with_error_message(Some(s(UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)))
            } else if deleted.contains(topic) {
                out.with_topic_id(topic_id(catalog, topic))
            } else {
                out.with_error_code(UNKNOWN_TOPIC_OR_PARTITION)
                    .with_error_message(Some(s(NO_OFFSETS_TO_DELETE_MESSAGE)))
            }
        })
        .collect();
    DeleteShareGroupOffsetsResponse::default().with_responses(topics)
}

/// ShareGroupDescribe, with the ACL checks Kafka makes for it.
pub(super) async fn handle_share_group_describe(
    conn: &mut ClientConnection,
    restricted: bool,
    mut r: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    // DESCRIBE on each group (Kafka's handleShareGroupDescribe):
    // the refused first, then the others.
    let mut denied = Vec::new();
    if restricted {
        let (ok, no): (Vec<_>, Vec<_>) = std::mem::take(&mut r.group_ids)
            .into_iter()
            .partition(|g| group_allowed(conn, AclOperation::Describe, g));
        r.group_ids = ok;
        denied = no;
    }
    let mut body = share_group_describe(&conn.access, r).await;
    let refused = denied.into_iter().map(|g| {
        ShareDescribedGroup::default()
            .with_group_id(g)
            .with_error_code(GROUP_AUTHORIZATION_FAILED)
            .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
    });
    body.groups = refused.chain(std::mem::take(&mut body.groups)).collect();
    body
}

/// AlterShareGroupOffsets, with the ACL checks Kafka makes for it.
pub(super) async fn handle_alter_share_group_offsets(
    conn: &mut ClientConnection,
    restricted: bool,
    r: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let catalog = conn.catalog.get();
    let mut r = r;
    // READ on each topic (the group's READ is checked above;
    // Kafka's handleAlterShareGroupOffsetsRequest).
    let denied = take_denied_topics(conn, restricted, AclOperation::Read, &mut r.topics, |t| &t.topic_name);
    let mut body = alter_share_group_offsets(&conn.access, &catalog, r).await;
    if body.error_code == NONE {
        body.responses.extend(denied.into_iter().map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    AlterShareGroupOffsetsResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                        .with_error_message(Some(s(TOPIC_AUTHORIZATION_FAILED_MESSAGE)))
                })
                .collect();
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name)
                .with_partitions(partitions)
        }));
    }
    body
}

/// DeleteShareGroupOffsets, with the ACL checks Kafka makes for it.
pub(super) async fn handle_delete_share_group_offsets(
    conn: &mut ClientConnection,
    restricted: bool,
    r: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let catalog = conn.catalog.get();
    let mut r = r;
    // READ on each topic (the group's DELETE is checked above;
    // Kafka's handleDeleteShareGroupOffsetsRequest).
    let denied = take_denied_topics(conn, restricted, AclOperation::Read, &mut r.topics, |t| &t.topic_name);
    let mut body = delete_share_group_offsets(&conn.access, &catalog, r).await;
    if body.error_code == NONE {
        body.responses.extend(denied.into_iter().map(|t| {
            DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name)
                .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                .with_error_message(Some(s(TOPIC_AUTHORIZATION_FAILED_MESSAGE)))
        }));
    }
    body
}
