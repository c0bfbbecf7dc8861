//! The group APIs on a client connection: each request is turned into
//! calls on the coordinator of the group's shard (a synchronous job through
//! [`ShardAccess::on`]), and the answers into responses of the request's
//! version. A JoinGroup or SyncGroup that has to wait awaits the channel
//! the job returned, bounded by the coordinator's deadline plus a margin,
//! so a connection never waits forever and no coordinator borrow is held
//! across the wait. Also the per-shard timer task that applies session and
//! rebalance deadlines ([`run_timers`]). The classic group APIs are here;
//! the offsets APIs in [`offsets`], the share-group admin APIs in
//! [`share`].

mod offsets;
mod share;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_fetch_response::{OffsetFetchResponsePartition, OffsetFetchResponseTopic};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsResponse, ApiKey, BrokerId, DeleteGroupsRequest, DeleteGroupsResponse,
    DeleteShareGroupOffsetsResponse, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitResponse, OffsetFetchResponse,
    RequestHeader, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use self::offsets::txn_offset_commit;
use self::share::GROUP_AUTHORIZATION_FAILED_MESSAGE;
use crate::groups::codes::*;
use crate::groups::{
    GroupConfig, GroupCoordinator, GroupListing, GroupState, GroupType, JoinRequest, JoinResult, Reply, SyncRequest,
    SyncResult, group_shard, shard_coordinator,
};
use crate::kafka::connection::ClientConnection;
use crate::kafka::response::Response;
use crate::partition::catalog::Catalog;
use crate::partition::registry::{Registry, ShardAccess};
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::request::GroupRequest;

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
/// "Authorized operations not requested" in DescribeGroups.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
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
fn refuse_unauthorized(
    conn: &ClientConnection,
    version: i16,
    id: i32,
    request: GroupRequest,
) -> Result<GroupRequest, Response> {
    use AclOperation::{Describe, Read};
    let denied = GROUP_AUTHORIZATION_FAILED;
    match request {
        GroupRequest::JoinGroup(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = JoinGroupResponse::default()
                .with_error_code(denied)
                .with_generation_id(-1)
                .with_member_id(r.member_id);
            Err(Response::kafka(ApiKey::JoinGroup, version, id, &body))
        }
        GroupRequest::SyncGroup(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = SyncGroupResponse::default().with_error_code(denied);
            Err(Response::kafka(ApiKey::SyncGroup, version, id, &body))
        }
        GroupRequest::Heartbeat(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = HeartbeatResponse::default().with_error_code(denied);
            Err(Response::kafka(ApiKey::Heartbeat, version, id, &body))
        }
        GroupRequest::LeaveGroup(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = LeaveGroupResponse::default().with_error_code(denied);
            Err(Response::kafka(ApiKey::LeaveGroup, version, id, &body))
        }
        GroupRequest::OffsetCommit(r) if !group_allowed(conn, Read, &r.group_id) => {
            let topics = r
                .topics
                .into_iter()
                .map(|t| offsets::refused_commit_topic(t, denied))
                .collect();
            let body = OffsetCommitResponse::default().with_topics(topics);
            Err(Response::kafka(ApiKey::OffsetCommit, version, id, &body))
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
            Err(Response::kafka(ApiKey::OffsetFetch, version, id, &body))
        }
        GroupRequest::FindCoordinator(r)
            if r.key_type == KEY_TYPE_GROUP && version < 4 && !group_allowed(conn, Describe, &r.key) =>
        {
            let body = FindCoordinatorResponse::default()
                .with_error_code(denied)
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            Err(Response::kafka(ApiKey::FindCoordinator, version, id, &body))
        }
        GroupRequest::AlterShareGroupOffsets(r) if !group_allowed(conn, Read, &r.group_id) => {
            let body = AlterShareGroupOffsetsResponse::default()
                .with_error_code(denied)
                .with_error_message(Some(s(GROUP_AUTHORIZATION_FAILED_MESSAGE)));
            Err(Response::kafka(ApiKey::AlterShareGroupOffsets, version, id, &body))
        }
        GroupRequest::DeleteShareGroupOffsets(r) if !group_allowed(conn, AclOperation::Delete, &r.group_id) => {
            let body = DeleteShareGroupOffsetsResponse::default()
                .with_error_code(denied)
                .with_error_message(Some(s(GROUP_AUTHORIZATION_FAILED_MESSAGE)));
            Err(Response::kafka(ApiKey::DeleteShareGroupOffsets, version, id, &body))
        }
        request => Ok(request),
    }
}

/// The answer to a group request.
pub async fn handle(conn: &mut ClientConnection, header: &RequestHeader, request: GroupRequest) -> Response {
    let version = header.request_api_version;
    let id = header.correlation_id;
    let request = if conn.authz_restricted() {
        match refuse_unauthorized(conn, version, id, request) {
            Ok(request) => request,
            Err(refused) => return refused,
        }
    } else {
        request
    };
    let restricted = conn.authz_restricted();
    match request {
        GroupRequest::FindCoordinator(r) => {
            let body = handle_find_coordinator(conn, version, restricted, r);
            Response::kafka(ApiKey::FindCoordinator, version, id, &body)
        }
        GroupRequest::JoinGroup(r) => {
            let client_id = header.client_id.as_deref().unwrap_or_default().to_owned();
            let body = join_group(&conn.access, version, (client_id, conn.peer_host()), r).await;
            Response::kafka(ApiKey::JoinGroup, version, id, &body)
        }
        GroupRequest::SyncGroup(r) => {
            let body = sync_group(&conn.access, version, r).await;
            Response::kafka(ApiKey::SyncGroup, version, id, &body)
        }
        GroupRequest::Heartbeat(r) => {
            let group = r.group_id.0.to_string();
            let (member, generation) = (r.member_id.to_string(), r.generation_id);
            let code = on_coordinator(&conn.access, &group.clone(), move |c, now| {
                c.heartbeat(&group, &member, generation, now)
            })
            .await
            .unwrap_or(COORDINATOR_NOT_AVAILABLE);
            Response::kafka(
                ApiKey::Heartbeat,
                version,
                id,
                &HeartbeatResponse::default().with_error_code(code),
            )
        }
        GroupRequest::LeaveGroup(r) => {
            let body = leave_group(&conn.access, version, r).await;
            Response::kafka(ApiKey::LeaveGroup, version, id, &body)
        }
        GroupRequest::OffsetCommit(r) => {
            let body = offsets::handle_offset_commit(conn, restricted, r).await;
            Response::kafka(ApiKey::OffsetCommit, version, id, &body)
        }
        GroupRequest::TxnOffsetCommit(r) => {
            let body = txn_offset_commit(conn, version, r).await;
            Response::kafka(ApiKey::TxnOffsetCommit, version, id, &body)
        }
        GroupRequest::OffsetFetch(r) => {
            let body = offsets::handle_offset_fetch(conn, version, restricted, r).await;
            Response::kafka(ApiKey::OffsetFetch, version, id, &body)
        }
        GroupRequest::ListGroups(r) => {
            let body = handle_list_groups(conn, version, restricted, r).await;
            Response::kafka(ApiKey::ListGroups, version, id, &body)
        }
        GroupRequest::DescribeGroups(r) => {
            let body = handle_describe_groups(conn, version, restricted, r).await;
            Response::kafka(ApiKey::DescribeGroups, version, id, &body)
        }
        GroupRequest::DeleteGroups(r) => {
            let body = handle_delete_groups(conn, r).await;
            Response::kafka(ApiKey::DeleteGroups, version, id, &body)
        }
        GroupRequest::ConsumerGroupHeartbeat(r) => super::consumer_groups::heartbeat(conn, header, r).await,
        GroupRequest::ConsumerGroupDescribe(r) => super::consumer_groups::describe(conn, header, r).await,
        GroupRequest::ShareGroupDescribe(r) => {
            let body = share::handle_share_group_describe(conn, restricted, r).await;
            Response::kafka(ApiKey::ShareGroupDescribe, version, id, &body)
        }
        GroupRequest::DescribeShareGroupOffsets(r) => {
            share::describe_share_group_offsets_response(conn, version, id, restricted, r).await
        }
        GroupRequest::AlterShareGroupOffsets(r) => {
            let body = share::handle_alter_share_group_offsets(conn, restricted, r).await;
            Response::kafka(ApiKey::AlterShareGroupOffsets, version, id, &body)
        }
        GroupRequest::DeleteShareGroupOffsets(r) => {
            let body = share::handle_delete_share_group_offsets(conn, restricted, r).await;
            Response::kafka(ApiKey::DeleteShareGroupOffsets, version, id, &body)
        }
    }
}

/// FindCoordinator, with the ACL checks Kafka makes for it.
fn handle_find_coordinator(
    conn: &mut ClientConnection,
    version: i16,
    restricted: bool,
    r: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
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
    body
}

/// ListGroups, with the ACL checks Kafka makes for it.
async fn handle_list_groups(
    conn: &mut ClientConnection,
    version: i16,
    restricted: bool,
    r: ListGroupsRequest,
) -> ListGroupsResponse {
    let mut body = list_groups(&conn.access, version, &r).await;
    // Groups the principal may DESCRIBE, unless it may DESCRIBE the
    // cluster (Kafka's handleListGroupsRequest).
    if restricted && !conn.authorized_cluster(AclOperation::Describe) {
        body.groups
            .retain(|g| group_allowed(conn, AclOperation::Describe, &g.group_id));
    }
    body
}

/// DescribeGroups, with the ACL checks Kafka makes for it.
async fn handle_describe_groups(
    conn: &mut ClientConnection,
    version: i16,
    restricted: bool,
    r: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
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
    body
}

/// DeleteGroups, with the ACL checks Kafka makes for it.
async fn handle_delete_groups(conn: &mut ClientConnection, r: DeleteGroupsRequest) -> DeleteGroupsResponse {
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
    DeleteGroupsResponse::default().with_results(results)
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
