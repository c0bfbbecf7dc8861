//! The group APIs on a client connection: each request is turned into
//! calls on the coordinator of the group's shard (a synchronous job through
//! [`ShardAccess::on`]), and the answers into responses of the request's
//! version. A JoinGroup or SyncGroup that has to wait awaits the channel
//! the job returned, bounded by the coordinator's deadline plus a margin,
//! so a connection never waits forever and no coordinator borrow is held
//! across the wait. Also the per-shard timer task that applies session and
//! rebalance deadlines ([`run_timers`]), and the share-group admin APIs
//! (start offsets only; see the module documentation of [`super`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::share_group_describe_response::DescribedGroup as ShareDescribedGroup;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey, BrokerId, DeleteGroupsResponse,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, RequestHeader, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
    SyncGroupRequest, SyncGroupResponse, TopicName, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::groups::codes::*;
use crate::groups::{
    CommittedOffset, GroupConfig, GroupCoordinator, GroupListing, GroupState, GroupType, JoinRequest, JoinResult,
    Reply, ShareStartOffset, SyncRequest, SyncResult, group_shard, shard_coordinator,
};
use crate::kafka::listener::ClientConnection;
use crate::partition::catalog::Catalog;
use crate::partition::registry::{Registry, ServedPartition, ShardAccess};
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::request::{GroupRequest, ServedApi};
use ringmirror_protocol::wire::share_group_offsets;
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::{PartitionLog, TopicPartition};

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
/// "Authorized operations not requested" in DescribeGroups.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// Kafka's answer for a share partition without a start offset
/// (`PartitionFactory.UNINITIALIZED_START_OFFSET`, `DEFAULT_LEADER_EPOCH`).
const UNINITIALIZED_START_OFFSET: i64 = -1;
const DEFAULT_LEADER_EPOCH: i32 = 0;
/// The assignor Kafka's share groups report (`SimpleAssignor`).
const SHARE_ASSIGNOR: &str = "simple";
/// Longest sleep of the timer task when no deadline is near (it is woken
/// earlier when a deadline moves up).
const TIMER_IDLE: Duration = Duration::from_secs(10);

/// Opens this shard's coordinator and starts its timer task; without one
/// (its offsets log cannot be opened) the shard's groups answer
/// COORDINATOR_NOT_AVAILABLE.
pub fn start(registry: &Registry, config: GroupConfig) {
    match GroupCoordinator::open(registry.data_dir(), registry.shard, config) {
        Ok(coordinator) => {
            let coordinator = Rc::new(RefCell::new(coordinator));
            registry.attach(Rc::clone(&coordinator));
            glommio::spawn_local(run_timers(coordinator)).detach();
        }
        Err(e) => tracing::error!(shard = registry.shard, error = %e, "cannot open the group coordinator"),
    }
}

/// Applies the coordinator's deadlines as they come due; sleeps until the
/// next one, or until one moves earlier.
async fn run_timers(coordinator: Rc<RefCell<GroupCoordinator>>) {
    loop {
        let (changed, next) = {
            let mut c = coordinator.borrow_mut();
            let changed = c.deadlines_changed().listen();
            c.tick(Instant::now());
            (changed, c.next_deadline())
        };
        let sleep = next.map_or(TIMER_IDLE, |d| {
            d.saturating_duration_since(Instant::now()).min(TIMER_IDLE)
        });
        futures_lite::future::or(changed, glommio::timer::sleep(sleep)).await;
    }
}

pub(super) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Runs `f` on the coordinator of `group`'s shard; `None` when it is not
/// available (no coordinator there, or the shard has ended).
pub(super) async fn on_coordinator<R, F>(access: &ShardAccess, group: &str, f: F) -> Option<R>
where
    R: Send + 'static,
    F: FnOnce(&mut GroupCoordinator, Instant) -> R + Send + 'static,
{
    let shard = group_shard(group, access.links.shards());
    let mut f = Some(f);
    access
        .on(shard, move |registry| {
            let (Some(f), Some(coordinator)) = (f.take(), shard_coordinator(registry)) else {
                return Some(None);
            };
            let mut c = coordinator.try_borrow_mut().ok();
            Some(c.as_deref_mut().map(|c| f(c, Instant::now())))
        })
        .await
        .flatten()
}

/// The reply, once it is there; `late` if it does not come in time.
async fn settle<T>(reply: Reply<T>, late: T) -> T {
    match reply {
        Reply::Now(t) => t,
        Reply::Wait(rx, wait) => {
            let answer = async { rx.recv().await.ok() };
            let timeout = async {
                glommio::timer::sleep(wait).await;
                None
            };
            futures_lite::future::or(answer, timeout).await.unwrap_or(late)
        }
    }
}

/// Whether the connection may do `operation` on the group.
fn group_allowed(conn: &ClientConnection, operation: AclOperation, group: &str) -> bool {
    conn.authorized(operation, ResourceType::Group, group)
}

fn topic_allowed(conn: &ClientConnection, operation: AclOperation, topic: &str) -> bool {
    conn.authorized(operation, ResourceType::Topic, topic)
}

/// Takes the topics the principal may not `operation` out of `topics`
/// (when the connection is restricted at all) and returns them, to be
/// answered TOPIC_AUTHORIZATION_FAILED.
fn take_denied_topics<T>(
    conn: &ClientConnection,
    restricted: bool,
    operation: AclOperation,
    topics: &mut Vec<T>,
    name: impl Fn(&T) -> &str,
) -> Vec<T> {
    if !restricted {
        return Vec::new();
    }
    let (ok, denied): (Vec<T>, Vec<T>) = std::mem::take(topics)
        .into_iter()
        .partition(|t| topic_allowed(conn, operation, name(t)));
    *topics = ok;
    denied
}

/// The answer to a group request the connection's principal may not make
/// (as Kafka's `KafkaApis` and `AuthHelper`), or the request back when it
/// may (possibly with some of its parts answered later, see `handle`).
async fn refuse_unauthorized(
    conn: &mut ClientConnection,
    version: i16,
    id: i32,
    request: GroupRequest,
) -> std::io::Result<Option<GroupRequest>> {
    use AclOperation::{Describe, Read};
    let denied = GROUP_AUTHORIZATION_FAILED;
    match request {
        GroupRequest::JoinGroup(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = JoinGroupResponse::default()
                .with_error_code(denied)
                .with_generation_id(-1)
                .with_member_id(r.member_id);
            conn.respond(ApiKey::JoinGroup, version, id, &body).await?;
        }
        GroupRequest::SyncGroup(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = SyncGroupResponse::default().with_error_code(denied);
            conn.respond(ApiKey::SyncGroup, version, id, &body).await?;
        }
        GroupRequest::Heartbeat(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = HeartbeatResponse::default().with_error_code(denied);
            conn.respond(ApiKey::Heartbeat, version, id, &body).await?;
        }
        GroupRequest::LeaveGroup(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = LeaveGroupResponse::default().with_error_code(denied);
            conn.respond(ApiKey::LeaveGroup, version, id, &body).await?;
        }
        GroupRequest::OffsetCommit(r) if !group_allowed(conn, Read, &r.group_id) => {
            let topics = r
                .topics
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(denied)
                        })
                        .collect();
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(partitions)
                })
                .collect();
            let body = OffsetCommitResponse::default().with_topics(topics);
            conn.respond(ApiKey::OffsetCommit, version, id, &body).await?;
        }
        GroupRequest::OffsetFetch(r) if version < 8 && !group_allowed(conn, Describe, &r.group_id) => {
            // v2+: the group's error; v0-1: per asked partition.
            let mut body = OffsetFetchResponse::default();
            if version >= 2 {
                body = body.with_error_code(denied);
            } else {
                let topics = r
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|t| {
                        let partitions = t
                            .partition_indexes
                            .iter()
                            .map(|&p| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(-1)
                                    .with_error_code(denied)
                            })
                            .collect();
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(partitions)
                    })
                    .collect();
                body = body.with_topics(topics);
            }
            conn.respond(ApiKey::OffsetFetch, version, id, &body).await?;
        }
        GroupRequest::FindCoordinator(r)
            if r.key_type == KEY_TYPE_GROUP && version < 4 && !group_allowed(conn, Describe, &r.key) =>
        {
            let body = FindCoordinatorResponse::default()
                .with_error_code(denied)
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            conn.respond(ApiKey::FindCoordinator, version, id, &body).await?;
        }
        GroupRequest::AlterShareGroupOffsets(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = AlterShareGroupOffsetsResponse::default()
                .with_error_code(denied)
                .with_error_message(Some(s(GROUP_AUTHORIZATION_FAILED_MESSAGE)));
            conn.respond(ApiKey::AlterShareGroupOffsets, version, id, &body).await?;
        }
        GroupRequest::DeleteShareGroupOffsets(r) if !group_allowed(conn, AclOperation::Delete, &r.group_id) => {
            let body = DeleteShareGroupOffsetsResponse::default()
                .with_error_code(denied)
                .with_error_message(Some(s(GROUP_AUTHORIZATION_FAILED_MESSAGE)));
            conn.respond(ApiKey::DeleteShareGroupOffsets, version, id, &body)
                .await?;
        }
        request => return Ok(Some(request)),
    }
    Ok(None)
}

pub async fn handle(conn: &mut ClientConnection, header: &RequestHeader, request: GroupRequest) -> std::io::Result<()> {
    let version = header.request_api_version;
    let id = header.correlation_id;
    let request = if conn.authz_restricted() {
        match refuse_unauthorized(conn, version, id, request).await {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(()),
            Err(e) => {
                tracing::warn!(principal = conn.auth.principal(), error = %e, "closing client connection");
                return Err(e);
            }
        }
    } else {
        request
    };
    let restricted = conn.authz_restricted();
    match request {
        GroupRequest::FindCoordinator(r) => {
            let mut body = find_coordinator(&conn.catalog.get(), version, &r);
            // DESCRIBE on each group (Kafka's handleFindCoordinatorRequest).
            // DESCRIBE on each transactional id (the same).
            if restricted && r.key_type == KEY_TYPE_TRANSACTION {
                for c in &mut body.coordinators {
                    if !conn.authorized(AclOperation::Describe, ResourceType::TransactionalId, &c.key) {
                        c.error_code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
                        c.error_message = Some(s("Transactional Id authorization failed."));
                        c.node_id = BrokerId(-1);
                        c.host = StrBytes::default();
                        c.port = -1;
                    }
                }
            }
            if restricted && r.key_type == KEY_TYPE_GROUP {
                for c in &mut body.coordinators {
                    if !group_allowed(conn, AclOperation::Describe, &c.key) {
                        c.error_code = GROUP_AUTHORIZATION_FAILED;
                        c.error_message = Some(s("Group authorization failed."));
                        c.node_id = BrokerId(-1);
                        c.host = StrBytes::default();
                        c.port = -1;
                    }
                }
            }
            conn.respond(ApiKey::FindCoordinator, version, id, &body).await
        }
        GroupRequest::JoinGroup(r) => {
            let client_id = header.client_id.as_deref().unwrap_or_default().to_owned();
            let body = join_group(&conn.access, version, (client_id, conn.peer_host()), r).await;
            conn.respond(ApiKey::JoinGroup, version, id, &body).await
        }
        GroupRequest::SyncGroup(r) => {
            let body = sync_group(&conn.access, version, r).await;
            conn.respond(ApiKey::SyncGroup, version, id, &body).await
        }
        GroupRequest::Heartbeat(r) => {
            let group = r.group_id.0.to_string();
            let (member, generation) = (r.member_id.to_string(), r.generation_id);
            let code = on_coordinator(&conn.access, &group.clone(), move |c, now| {
                c.heartbeat(&group, &member, generation, now)
            })
            .await
            .unwrap_or(COORDINATOR_NOT_AVAILABLE);
            conn.respond(
                ApiKey::Heartbeat,
                version,
                id,
                &HeartbeatResponse::default().with_error_code(code),
            )
            .await
        }
        GroupRequest::LeaveGroup(r) => {
            let body = leave_group(&conn.access, version, r).await;
            conn.respond(ApiKey::LeaveGroup, version, id, &body).await
        }
        GroupRequest::OffsetCommit(r) => {
            let catalog = conn.catalog.get();
            let mut r = r;
            // READ on each topic (Kafka's handleOffsetCommitRequest).
            let denied_topics = take_denied_topics(conn, restricted, AclOperation::Read, &mut r.topics, |t| &t.name);
            let mut body = offset_commit(&conn.access, &catalog, r).await;
            body.topics.extend(denied_topics.into_iter().map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(TOPIC_AUTHORIZATION_FAILED)
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            }));
            conn.respond(ApiKey::OffsetCommit, version, id, &body).await
        }
        GroupRequest::TxnOffsetCommit(r) => {
            let body = txn_offset_commit(conn, version, r).await;
            conn.respond(ApiKey::TxnOffsetCommit, version, id, &body).await
        }
        GroupRequest::OffsetFetch(mut r) => {
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
            conn.respond(ApiKey::OffsetFetch, version, id, &body).await
        }
        GroupRequest::ListGroups(r) => {
            let mut body = list_groups(&conn.access, version, &r).await;
            // Groups the principal may DESCRIBE, unless it may DESCRIBE the
            // cluster (Kafka's handleListGroupsRequest).
            if restricted && !conn.authorized_cluster(AclOperation::Describe) {
                body.groups
                    .retain(|g| group_allowed(conn, AclOperation::Describe, &g.group_id));
            }
            conn.respond(ApiKey::ListGroups, version, id, &body).await
        }
        GroupRequest::DescribeGroups(r) => {
            // DESCRIBE on each group (Kafka's handleDescribeGroupsRequest).
            let mut r = r;
            let mut denied = Vec::new();
            if restricted {
                let (ok, no): (Vec<_>, Vec<_>) = std::mem::take(&mut r.groups)
                    .into_iter()
                    .partition(|g| group_allowed(conn, AclOperation::Describe, g));
                r.groups = ok;
                denied = no;
            }
            let mut body = describe_groups(&conn.access, version, r).await;
            body.groups.extend(denied.into_iter().map(|g| {
                DescribedGroup::default()
                    .with_group_id(g)
                    .with_error_code(GROUP_AUTHORIZATION_FAILED)
                    .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
            }));
            conn.respond(ApiKey::DescribeGroups, version, id, &body).await
        }
        GroupRequest::DeleteGroups(r) => {
            let mut results = Vec::with_capacity(r.groups_names.len());
            for group in r.groups_names {
                let name = group.0.to_string();
                // DELETE on each group (Kafka's handleDeleteGroupsRequest).
                if !group_allowed(conn, AclOperation::Delete, &name) {
                    results.push(
                        DeletableGroupResult::default()
                            .with_group_id(group)
                            .with_error_code(GROUP_AUTHORIZATION_FAILED),
                    );
                    continue;
                }
                let code = on_coordinator(&conn.access, &name.clone(), move |c, _| c.delete(&name))
                    .await
                    .unwrap_or(COORDINATOR_NOT_AVAILABLE);
                results.push(
                    DeletableGroupResult::default()
                        .with_group_id(group)
                        .with_error_code(code),
                );
            }
            let body = DeleteGroupsResponse::default().with_results(results);
            conn.respond(ApiKey::DeleteGroups, version, id, &body).await
        }
        GroupRequest::ConsumerGroupHeartbeat(r) => super::consumer_groups::heartbeat(conn, header, r).await,
        GroupRequest::ConsumerGroupDescribe(r) => super::consumer_groups::describe(conn, header, r).await,
        GroupRequest::ShareGroupDescribe(mut r) => {
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
            conn.respond(ApiKey::ShareGroupDescribe, version, id, &body).await
        }
        GroupRequest::DescribeShareGroupOffsets(r) => {
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
            conn.respond_encoded(ServedApi::DescribeShareGroupOffsets, version, id, |buf| {
                share_group_offsets::encode_response(&body, version, lag, buf).map_err(|e| e.to_string())
            })
            .await
        }
        GroupRequest::AlterShareGroupOffsets(r) => {
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
            conn.respond(ApiKey::AlterShareGroupOffsets, version, id, &body).await
        }
        GroupRequest::DeleteShareGroupOffsets(r) => {
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
            conn.respond(ApiKey::DeleteShareGroupOffsets, version, id, &body).await
        }
    }
}

/// This agent coordinates every group and every transactional id (each
/// on its shard, behind the one listener port).
fn find_coordinator(catalog: &Catalog, version: i16, r: &FindCoordinatorRequest) -> FindCoordinatorResponse {
    let me = &catalog.identity;
    let answer = |key_type: i8| -> (i16, Option<&'static str>) {
        match key_type {
            KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION => (NONE, None),
            _ => (INVALID_REQUEST, Some("unknown coordinator key type")),
        }
    };
    let (code, message) = answer(r.key_type);
    let (node, host, port) = if code == NONE {
        (me.node_id, s(&me.host), i32::from(me.port))
    } else {
        (-1, StrBytes::default(), -1)
    };
    if version >= 4 {
        let coordinators = r
            .coordinator_keys
            .iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(node))
                    .with_host(host.clone())
                    .with_port(port)
                    .with_error_code(code)
                    .with_error_message(message.map(s))
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    FindCoordinatorResponse::default()
        .with_error_code(code)
        .with_error_message(if version >= 1 { message.map(s) } else { None })
        .with_node_id(BrokerId(node))
        .with_host(host)
        .with_port(port)
}

async fn join_group(
    access: &ShardAccess,
    version: i16,
    (client_id, client_host): (String, String),
    r: JoinGroupRequest,
) -> JoinGroupResponse {
    let group = r.group_id.0.to_string();
    let request = JoinRequest {
        group_id: group.clone(),
        member_id: r.member_id.to_string(),
        client_id,
        client_host,
        session_timeout_ms: r.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout serves.
        rebalance_timeout_ms: if version >= 1 { r.rebalance_timeout_ms } else { -1 },
        protocol_type: r.protocol_type.to_string(),
        protocols: r
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let member_id = request.member_id.clone();
    let reply = on_coordinator(access, &group, move |c, now| c.join(request, now)).await;
    let result = match reply {
        Some(reply) => settle(reply, JoinResult::error(REBALANCE_IN_PROGRESS, &member_id)).await,
        None => JoinResult::error(COORDINATOR_NOT_AVAILABLE, &member_id),
    };
    let members = result
        .members
        .into_iter()
        .map(|(id, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(s(&id))
                .with_metadata(metadata)
        })
        .collect();
    let flexible_names = version >= 7;
    JoinGroupResponse::default()
        .with_error_code(result.error)
        .with_generation_id(result.generation)
        .with_protocol_type(if flexible_names {
            result.protocol_type.as_deref().map(s)
        } else {
            None
        })
        .with_protocol_name(if flexible_names {
            result.protocol_name.as_deref().map(s)
        } else {
            Some(s(result.protocol_name.as_deref().unwrap_or_default()))
        })
        .with_leader(s(&result.leader))
        .with_member_id(s(&result.member_id))
        .with_members(members)
}

async fn sync_group(access: &ShardAccess, version: i16, r: SyncGroupRequest) -> SyncGroupResponse {
    let group = r.group_id.0.to_string();
    let request = SyncRequest {
        group_id: group.clone(),
        generation: r.generation_id,
        member_id: r.member_id.to_string(),
        protocol_type: r.protocol_type.as_deref().map(str::to_owned),
        protocol_name: r.protocol_name.as_deref().map(str::to_owned),
        assignments: r
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let reply = on_coordinator(access, &group, move |c, now| c.sync(request, now)).await;
    let result = match reply {
        Some(reply) => settle(reply, SyncResult::error(REBALANCE_IN_PROGRESS)).await,
        None => SyncResult::error(COORDINATOR_NOT_AVAILABLE),
    };
    let mut body = SyncGroupResponse::default()
        .with_error_code(result.error)
        .with_assignment(result.assignment);
    if version >= 5 {
        body = body
            .with_protocol_type(result.protocol_type.as_deref().map(s))
            .with_protocol_name(result.protocol_name.as_deref().map(s));
    }
    body
}

async fn leave_group(access: &ShardAccess, version: i16, r: LeaveGroupRequest) -> LeaveGroupResponse {
    let group = r.group_id.0.to_string();
    // v3+ leaves a batch of members; before, the one member of the request.
    let leaving: Vec<(StrBytes, Option<StrBytes>)> = if version >= 3 {
        r.members
            .into_iter()
            .map(|m| (m.member_id, m.group_instance_id))
            .collect()
    } else {
        vec![(r.member_id, None)]
    };
    let ids: Vec<String> = leaving.iter().map(|(id, _)| id.to_string()).collect();
    let count = ids.len();
    let codes = on_coordinator(access, &group.clone(), move |c, now| c.leave(&group, &ids, now))
        .await
        .unwrap_or_else(|| vec![COORDINATOR_NOT_AVAILABLE; count]);
    if version < 3 {
        return LeaveGroupResponse::default().with_error_code(codes.first().copied().unwrap_or(NONE));
    }
    let members = leaving
        .into_iter()
        .zip(codes)
        .map(|((member_id, instance), code)| {
            MemberResponse::default()
                .with_member_id(member_id)
                .with_group_instance_id(instance)
                .with_error_code(code)
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}

async fn offset_commit(access: &ShardAccess, catalog: &Catalog, r: OffsetCommitRequest) -> OffsetCommitResponse {
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
        .map(|(t, topic_codes)| {
            let partitions = t
                .partitions
                .iter()
                .zip(topic_codes)
                .map(|(p, code)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
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
async fn txn_offset_commit(
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

async fn offset_fetch(access: &ShardAccess, version: i16, r: OffsetFetchRequest) -> OffsetFetchResponse {
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

/// Every shard's groups, filtered by state (v4+) and type (v5+). As
/// Kafka's `GroupMetadataManager.listGroups`: no types filter (every
/// version below 5) lists groups of every type, share groups with their
/// protocol type "share", KIP-848 ones with "consumer"; a filter lists the
/// named types (matched without case; unknown types name none of ours).
async fn list_groups(access: &ShardAccess, version: i16, r: &ListGroupsRequest) -> ListGroupsResponse {
    let mut error = NONE;
    let mut groups = BTreeMap::new();
    for shard in 0..access.links.shards() {
        let listed = access
            .on(shard, |registry| {
                Some(shard_coordinator(registry).and_then(|c| c.try_borrow().ok().map(|c| c.list())))
            })
            .await
            .flatten();
        match listed {
            Some(listed) => groups.extend(listed.into_iter().map(|g| (g.group_id.clone(), g))),
            None => error = COORDINATOR_NOT_AVAILABLE,
        }
    }
    list_groups_response(version, r, groups.into_values()).with_error_code(error)
}

/// The ListGroups answer of `version` to `r` from every group listed.
pub(crate) fn list_groups_response(
    version: i16,
    r: &ListGroupsRequest,
    groups: impl IntoIterator<Item = GroupListing>,
) -> ListGroupsResponse {
    let states: Vec<String> = r.states_filter.iter().map(|x| x.trim().to_lowercase()).collect();
    let types: Vec<String> = r.types_filter.iter().map(|x| x.trim().to_lowercase()).collect();
    let wanted = |t: GroupType| types.is_empty() || types.iter().any(|x| x == t.name());
    let groups = groups
        .into_iter()
        .filter(|g| wanted(g.group_type))
        .filter(|g| states.is_empty() || states.iter().any(|st| *st == g.state.to_lowercase()))
        .map(|g| {
            let mut listed = ListedGroup::default()
                .with_group_id(GroupId(s(&g.group_id)))
                .with_protocol_type(s(&g.protocol_type));
            if version >= 4 {
                listed = listed.with_group_state(s(g.state));
            }
            if version >= 5 {
                listed = listed.with_group_type(s(g.group_type.name()));
            }
            listed
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

async fn describe_groups(access: &ShardAccess, version: i16, r: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let mut described = Vec::with_capacity(r.groups.len());
    for group in r.groups {
        let name = group.0.to_string();
        let found = on_coordinator(access, &name.clone(), move |c, _| c.describe(&name)).await;
        let out = DescribedGroup::default()
            .with_group_id(group)
            .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
        described.push(match found {
            None => out.with_error_code(COORDINATOR_NOT_AVAILABLE),
            // v6 says "not found"; before, a missing group is described as Dead.
            Some(None) if version >= 6 => out
                .with_error_code(GROUP_ID_NOT_FOUND)
                .with_error_message(Some(s("group not found")))
                .with_group_state(s(GroupState::Dead.name())),
            Some(None) => out.with_group_state(s(GroupState::Dead.name())),
            Some(Some(d)) => {
                let members = d
                    .members
                    .into_iter()
                    .map(|m| {
                        DescribedGroupMember::default()
                            .with_member_id(s(&m.member_id))
                            .with_client_id(s(&m.client_id))
                            .with_client_host(s(&m.client_host))
                            .with_member_metadata(m.metadata)
                            .with_member_assignment(m.assignment)
                    })
                    .collect();
                out.with_group_state(s(d.state.name()))
                    .with_protocol_type(s(&d.protocol_type))
                    .with_protocol_data(s(&d.protocol_name))
                    .with_members(members)
            }
        });
    }
    DescribeGroupsResponse::default().with_groups(described)
}

// ---- share groups (start offsets only) ----

/// A topic's id at this agent, or Kafka's zero UUID for one it does not have.
fn topic_id(catalog: &Catalog, topic: &str) -> Uuid {
    catalog.topic(topic).map_or(Uuid::nil(), |t| Uuid::from_bytes(t.id))
}

/// ShareGroupDescribe (v1): an Empty share group with its epoch, no
/// members; Kafka's GROUP_ID_NOT_FOUND (and message) for any other id.
async fn share_group_describe(access: &ShardAccess, r: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse {
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
async fn alter_share_group_offsets(
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
const GROUP_AUTHORIZATION_FAILED_MESSAGE: &str = "Group authorization failed.";
const TOPIC_AUTHORIZATION_FAILED_MESSAGE: &str = "Topic authorization failed.";
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
async fn delete_share_group_offsets(
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
