//! The transaction coordinator on the listener: each shard's
//! [`TransactionCoordinator`] (opened at start with its store, a timer task
//! applying its deadlines), the transaction APIs on a client connection —
//! InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions — each
//! run as a synchronous job on the id's shard (as the group APIs run on the
//! group's), and the COMMIT/ABORT markers the coordinator asks for, written
//! by a job on each owning shard and reported back. The coordinator is
//! never borrowed across an await. See `crate::transactions` for the
//! semantics and "How it is wired".

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use event_listener::Event;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState as DescribedState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId, RequestHeader, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::connection::ClientConnection;
use super::response::Response;
use crate::partition::catalog::CatalogHandle;
use crate::partition::producer_ids::ProducerIds;
use crate::partition::registry::{Registry, ServedPartition, ShardAccess, ShardLinks};
use crate::partition::shard_for;
use crate::security::acls::{AclOperation, ResourceType};
use crate::transactions::{
    InitProducerIdRequest as InitRequest, ListTransactionsFilter, MarkerOutcome, MarkerRequest, MarkerTarget,
    PartitionCheck, ProducerIdAllocator, TransactionConfig, TransactionCoordinator, TransactionResult,
    transaction_shard,
};
use ringmirror_protocol::error_codes as ec;
use ringmirror_protocol::request::TransactionRequest;
use ringmirror_storage::log::{PartitionLog, ProduceError, TopicPartition};

/// A coordinator's verdict on a partition as the producer is told it (of
/// its Produce or TxnOffsetCommit), as Kafka's `AddPartitionsToTxnManager`
/// and `ReplicaManager` turn it: a fenced producer gets
/// INVALID_PRODUCER_EPOCH, a coordinator busy or away NOT_ENOUGH_REPLICAS
/// (which every client retries), a partition not in the transaction
/// TRANSACTION_ABORTABLE where the request's version knows it
/// (`abortable_known`) and INVALID_TXN_STATE before; the rest as it is.
pub fn verification_error(code: i16, abortable_known: bool) -> i16 {
    match code {
        ec::PRODUCER_FENCED => ec::INVALID_PRODUCER_EPOCH,
        ec::COORDINATOR_NOT_AVAILABLE | ec::CONCURRENT_TRANSACTIONS => ec::NOT_ENOUGH_REPLICAS,
        ec::TRANSACTION_ABORTABLE if !abortable_known => ec::INVALID_TXN_STATE,
        code => code,
    }
}

/// Longest sleep of the timer task when no deadline is near (it is woken
/// earlier when a call files a sooner one).
const TIMER_IDLE_MS: i64 = 10_000;

/// The message a transaction touching a mirror topic gets.
pub fn mirror_topic_message(topic: &str) -> String {
    format!("{topic:?} is a mirror topic: it is read-only while its mirror runs, and takes no transactions")
}

/// One shard's coordinator with what its timer and markers need.
pub struct ShardTransactions {
    coordinator: RefCell<TransactionCoordinator>,
    /// Notified when a call files a deadline sooner than the timer's.
    deadline_moved: Event,
    /// The deadline the timer task sleeps until.
    timer_deadline_ms: Cell<i64>,
    links: Arc<ShardLinks>,
    catalog: Arc<CatalogHandle>,
}

/// The agent's producer id allocator, the one idempotent producers use.
struct AgentProducerIds(Arc<ProducerIds>);

impl ProducerIdAllocator for AgentProducerIds {
    fn next_producer_id(&mut self) -> std::io::Result<i64> {
        self.0.next()
    }

    fn reserve_through(&mut self, producer_id: i64) -> std::io::Result<()> {
        self.0.reserve_through(producer_id)
    }
}

/// The agent's clock ([`ringmirror_storage::clock::now_ms`]) in the
/// coordinator's signed unit, as Kafka's `Time.milliseconds()`.
fn now_ms() -> i64 {
    i64::try_from(ringmirror_storage::clock::now_ms()).unwrap_or(i64::MAX)
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Opens this shard's coordinator (its store was rebalanced for the shard
/// count before the shards started), sends the markers of transactions it
/// found half-ended, and starts its timer task; without one (its log
/// cannot be opened) the shard's transactional ids answer
/// COORDINATOR_NOT_AVAILABLE.
pub fn start(registry: &Registry, links: Arc<ShardLinks>) {
    let allocator = Box::new(AgentProducerIds(registry.shared_producer_ids()));
    let opened = TransactionCoordinator::open(
        registry.data_dir(),
        registry.shard,
        TransactionConfig::default(),
        allocator,
        now_ms(),
    );
    match opened {
        Ok((coordinator, markers)) => {
            let txns = Rc::new(ShardTransactions {
                coordinator: RefCell::new(coordinator),
                deadline_moved: Event::new(),
                timer_deadline_ms: Cell::new(i64::MAX),
                links,
                catalog: registry.catalog(),
            });
            registry.attach(Rc::clone(&txns));
            txns.send_markers(markers);
            glommio::spawn_local(run_timer(txns)).detach();
        }
        Err(e) => tracing::error!(shard = registry.shard, error = %e, "cannot open the transaction coordinator"),
    }
}

/// Applies the coordinator's deadlines as they come due (timeouts, marker
/// and write retries, expiry) and sends the markers they ask for.
async fn run_timer(txns: Rc<ShardTransactions>) {
    loop {
        let moved = txns.deadline_moved.listen();
        let (markers, next) = {
            let mut c = txns.coordinator.borrow_mut();
            (c.tick(now_ms()), c.next_deadline())
        };
        txns.send_markers(markers);
        let now = now_ms();
        let wake_ms = next.map_or(now + TIMER_IDLE_MS, |d| d.min(now + TIMER_IDLE_MS));
        txns.timer_deadline_ms.set(wake_ms);
        let sleep_ms = u64::try_from(wake_ms.saturating_sub(now)).unwrap_or(0);
        futures_lite::future::or(moved, glommio::timer::sleep(Duration::from_millis(sleep_ms))).await;
    }
}

impl ShardTransactions {
    /// Runs `f` on the coordinator, then sends the markers it asked for and
    /// wakes the timer if the next deadline moved up.
    fn call<R>(self: &Rc<Self>, f: impl FnOnce(&mut TransactionCoordinator, i64) -> (R, Vec<MarkerRequest>)) -> R {
        let (answer, markers, next) = {
            let mut c = self.coordinator.borrow_mut();
            let (answer, markers) = f(&mut c, now_ms());
            (answer, markers, c.next_deadline())
        };
        self.send_markers(markers);
        if next.is_some_and(|d| d < self.timer_deadline_ms.get()) {
            self.deadline_moved.notify(usize::MAX);
        }
        answer
    }

    /// Writes each request's markers in a task of this shard.
    fn send_markers(self: &Rc<Self>, requests: Vec<MarkerRequest>) {
        for request in requests {
            let txns = Rc::clone(self);
            glommio::spawn_local(async move { txns.write_markers(request).await }).detach();
        }
    }

    /// One job per owning shard writes the markers there; the outcomes
    /// come back to the coordinator.
    async fn write_markers(self: Rc<Self>, request: MarkerRequest) {
        let catalog = self.catalog.snapshot();
        let shards = self.links.shards();
        let mut outcomes: Vec<(MarkerTarget, MarkerOutcome)> = Vec::new();
        let mut by_shard: BTreeMap<usize, Vec<MarkerTarget>> = BTreeMap::new();
        for target in &request.targets {
            let owner = match target {
                // Not served (yet): its shard by placement, which knows
                // whether it is on disk, waiting to be opened at start.
                MarkerTarget::Partition(tp) => Some(
                    catalog
                        .owner(&tp.topic, tp.partition)
                        .unwrap_or_else(|| shard_for(tp, shards)),
                ),
                MarkerTarget::GroupOffsets { group_shard } => {
                    usize::try_from(*group_shard).ok().filter(|&shard| shard < shards)
                }
            };
            match owner {
                Some(shard) => by_shard.entry(shard).or_default().push(target.clone()),
                None => outcomes.push((target.clone(), MarkerOutcome::PartitionGone)),
            }
        }
        let marker = Marker {
            producer_id: request.producer_id,
            producer_epoch: request.producer_epoch,
            coordinator_epoch: request.coordinator_epoch,
            commit: request.result == TransactionResult::Commit,
        };
        for (shard, targets) in by_shard {
            let written = self
                .links
                .run(shard, move |registry| Some(write_on_shard(registry, marker, &targets)))
                .await;
            outcomes.extend(written.unwrap_or_default());
        }
        self.call(|c, now| {
            for (target, outcome) in &outcomes {
                c.marker_written(&request, target, *outcome, now);
            }
            ((), Vec::new())
        });
    }
}

/// A marker's fields.
#[derive(Debug, Clone, Copy)]
struct Marker {
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
}

/// Writes `marker` to each target this shard owns. A log busy right now,
/// or a write that failed, is Retriable; the rest is said per target.
fn write_on_shard(registry: &Registry, marker: Marker, targets: &[MarkerTarget]) -> Vec<(MarkerTarget, MarkerOutcome)> {
    let mut appended = false;
    let outcomes = targets
        .iter()
        .map(|target| {
            let outcome = match target {
                MarkerTarget::Partition(tp) => {
                    let outcome = write_partition_marker(registry, tp, marker);
                    appended |= outcome == MarkerOutcome::Written;
                    outcome
                }
                MarkerTarget::GroupOffsets { .. } => {
                    let completed = crate::groups::shard_coordinator(registry).and_then(|groups| {
                        let mut groups = groups.try_borrow_mut().ok()?;
                        Some(groups.complete_txn_offsets(marker.producer_id, marker.commit))
                    });
                    match completed {
                        Some(true) => MarkerOutcome::Written,
                        _ => MarkerOutcome::Retriable,
                    }
                }
            };
            (target.clone(), outcome)
        })
        .collect();
    if appended {
        // The last stable offset moved: READ_COMMITTED fetches may go on.
        registry.notify_appended();
    }
    outcomes
}

fn write_partition_marker(registry: &Registry, tp: &TopicPartition, marker: Marker) -> MarkerOutcome {
    let Some(partition) = registry.get(tp) else {
        // Opened after the listener at start: asked again until it is.
        return if registry.partition_on_disk(tp) {
            MarkerOutcome::Retriable
        } else {
            MarkerOutcome::PartitionGone
        };
    };
    if partition.mirror.is_some() {
        // Mirrored again (failback): the source's log replaces ours.
        return MarkerOutcome::PartitionGone;
    }
    let Ok(mut log) = partition.log.try_borrow_mut() else {
        return MarkerOutcome::Retriable;
    };
    let written = log.append_txn_marker(
        marker.producer_id,
        marker.producer_epoch,
        marker.commit,
        marker.coordinator_epoch,
        partition.leader_epoch.get(),
        now_ms().max(0) as u64,
    );
    tracing::debug!(partition = %tp, ?marker, ?written, "transaction marker");
    match written {
        Ok(()) => MarkerOutcome::Written,
        Err(ProduceError::InvalidProducerEpoch { .. }) => MarkerOutcome::Fenced,
        Err(e) => {
            tracing::warn!(partition = %tp, error = %e, "a transaction marker could not be written yet");
            MarkerOutcome::Retriable
        }
    }
}

/// Runs `f` on the coordinator of `transactional_id`'s shard; `None` when
/// it is not available (no coordinator there, or the shard has ended).
async fn on_coordinator<R, F>(access: &ShardAccess, transactional_id: &str, f: F) -> Option<R>
where
    R: Send + 'static,
    F: FnOnce(&mut TransactionCoordinator, i64) -> (R, Vec<MarkerRequest>) + Send + 'static,
{
    let shard = transaction_shard(transactional_id, access.links.shards());
    let mut f = Some(f);
    access
        .on(shard, move |registry| {
            let Some(txns) = registry.service::<ShardTransactions>() else {
                return Some(None);
            };
            // Never borrowed across an await: free whenever a job runs.
            let f = f.take()?;
            Some(Some(txns.call(f)))
        })
        .await
        .flatten()
}

/// Whether the connection may `operation` the transactional id.
fn id_allowed(conn: &ClientConnection, operation: AclOperation, id: &str) -> bool {
    conn.authorized(operation, ResourceType::TransactionalId, id)
}

/// InitProducerId with a transactional id (WRITE on it, Kafka's
/// `handleInitProducerIdRequest`).
pub async fn init_producer_id(conn: &ClientConnection, r: &InitProducerIdRequest) -> InitProducerIdResponse {
    let id = r.transactional_id.as_deref().map(|t| t.to_string()).unwrap_or_default();
    let refused = |code| {
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if !id_allowed(conn, AclOperation::Write, &id) {
        return refused(ec::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    let (timeout_ms, producer_id, producer_epoch) = (r.transaction_timeout_ms, r.producer_id.0, r.producer_epoch);
    let (enable_2pc, keep_prepared_txn) = (r.enable_2_pc, r.keep_prepared_txn);
    let answer = on_coordinator(&conn.access, &id.clone(), move |c, now| {
        let request = InitRequest {
            transactional_id: &id,
            transaction_timeout_ms: timeout_ms,
            producer_id,
            producer_epoch,
            enable_2pc,
            keep_prepared_txn,
        };
        c.init_producer_id(request, now)
    })
    .await;
    match answer {
        Some(a) if a.error == ec::NONE => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(a.producer_id))
            .with_producer_epoch(a.producer_epoch),
        Some(a) => refused(a.error),
        None => refused(ec::COORDINATOR_NOT_AVAILABLE),
    }
}

/// The answer to a transaction request.
pub async fn handle(conn: &mut ClientConnection, header: &RequestHeader, request: TransactionRequest) -> Response {
    let version = header.request_api_version;
    let id = header.correlation_id;
    match request {
        TransactionRequest::AddPartitionsToTxn(r) => {
            let body = add_partitions_to_txn(conn, version, r).await;
            Response::kafka(ApiKey::AddPartitionsToTxn, version, id, &body)
        }
        TransactionRequest::AddOffsetsToTxn(r) => {
            let body = AddOffsetsToTxnResponse::default().with_error_code(add_offsets_to_txn(conn, r).await);
            Response::kafka(ApiKey::AddOffsetsToTxn, version, id, &body)
        }
        TransactionRequest::EndTxn(r) => {
            let body = EndTxnResponse::default()
                .with_error_code(end_txn(conn, r).await)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            Response::kafka(ApiKey::EndTxn, version, id, &body)
        }
        TransactionRequest::DescribeTransactions(r) => {
            let body = describe_transactions(conn, r).await;
            Response::kafka(ApiKey::DescribeTransactions, version, id, &body)
        }
        TransactionRequest::ListTransactions(r) => {
            let body = list_transactions(conn, r).await;
            Response::kafka(ApiKey::ListTransactions, version, id, &body)
        }
    }
}

/// Per partition of `topics`: `Some(code)` when it may not join a
/// transaction (not authorized, not served, a mirror topic), `None` when it
/// may.
async fn partition_checks(conn: &ClientConnection, topics: &[AddPartitionsToTxnTopic]) -> Vec<PartitionCheck> {
    let catalog = conn.access.local.catalog().snapshot();
    let mut checks = Vec::new();
    let mut served = Vec::new();
    for t in topics {
        let allowed = conn.authorized(AclOperation::Write, ResourceType::Topic, &t.name.0);
        for &p in &t.partitions {
            let partition = TopicPartition::new(t.name.0.to_string(), p);
            let refused = if !allowed {
                Some(ec::TOPIC_AUTHORIZATION_FAILED)
            } else if let Some(shard) = catalog.owner(&t.name.0, p) {
                served.push((checks.len(), (shard, partition.clone(), ())));
                None
            } else {
                Some(ec::UNKNOWN_TOPIC_OR_PARTITION)
            };
            checks.push(PartitionCheck { partition, refused });
        }
    }
    let (at, items): (Vec<usize>, Vec<_>) = served.into_iter().unzip();
    let mirrored = conn.access.query(items, is_mirrored).await;
    for (i, mirrored) in at.into_iter().zip(mirrored) {
        checks[i].refused = match mirrored {
            None => Some(ec::UNKNOWN_TOPIC_OR_PARTITION),
            Some(true) => {
                tracing::info!(
                    topic = checks[i].partition.topic,
                    "refused a transaction on a mirror topic"
                );
                Some(ec::READ_ONLY_TOPIC)
            }
            Some(false) => None,
        };
    }
    checks
}

fn is_mirrored(p: &ServedPartition, _: &PartitionLog, _: &()) -> bool {
    p.mirror.is_some()
}

/// Results grouped by topic, in the order the partitions came.
fn by_topic(results: Vec<(TopicPartition, i16)>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for (tp, code) in results {
        let partition = AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(tp.partition)
            .with_partition_error_code(code);
        match out.last_mut() {
            Some(t) if *t.name.0 == *tp.topic => t.results_by_partition.push(partition),
            _ => out.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(TopicName(s(&tp.topic)))
                    .with_results_by_partition(vec![partition]),
            ),
        }
    }
    out
}

fn flat_partitions(topics: &[AddPartitionsToTxnTopic]) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|&p| TopicPartition::new(t.name.0.to_string(), p))
        })
        .collect()
}

/// AddPartitionsToTxn: v0–v3 from clients (one transaction), v4+ batched
/// as brokers send it, `VerifyOnly` for KIP-890 verification
/// (`KafkaApis.handleAddPartitionsToTxnRequest`).
async fn add_partitions_to_txn(
    conn: &ClientConnection,
    version: i16,
    r: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    if version < 4 {
        let id = r.v3_and_below_transactional_id.0.to_string();
        let results = add_one_transaction(
            conn,
            id,
            r.v3_and_below_producer_id.0,
            r.v3_and_below_producer_epoch,
            false,
            &r.v3_and_below_topics,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(by_topic(results));
    }
    // Sent by brokers only: CLUSTER_ACTION on the cluster.
    if !conn.authorized_cluster(AclOperation::ClusterAction) {
        return AddPartitionsToTxnResponse::default().with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED);
    }
    let mut results = Vec::with_capacity(r.transactions.len());
    for t in r.transactions {
        let id = t.transactional_id.0.to_string();
        let answer = add_one_transaction(conn, id, t.producer_id.0, t.producer_epoch, t.verify_only, &t.topics).await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id)
                .with_topic_results(by_topic(answer)),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

async fn add_one_transaction(
    conn: &ClientConnection,
    id: String,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<(TopicPartition, i16)> {
    let partitions = flat_partitions(topics);
    let all = |code| partitions.iter().map(|tp| (tp.clone(), code)).collect();
    if !id_allowed(conn, AclOperation::Write, &id) {
        return all(ec::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    let answer = if verify_only {
        let asked = partitions.clone();
        on_coordinator(&conn.access, &id.clone(), move |c, _| {
            (
                c.verify_partitions(&id, producer_id, producer_epoch, &asked),
                Vec::new(),
            )
        })
        .await
    } else {
        let checks = partition_checks(conn, topics).await;
        on_coordinator(&conn.access, &id.clone(), move |c, now| {
            (
                c.add_partitions(&id, producer_id, producer_epoch, checks, now),
                Vec::new(),
            )
        })
        .await
    };
    answer.unwrap_or_else(|| all(ec::COORDINATOR_NOT_AVAILABLE))
}

/// AddOffsetsToTxn: the group's offsets (its shard's) join the transaction
/// (WRITE on the id and READ on the group, Kafka's `handleAddOffsetsToTxnRequest`).
async fn add_offsets_to_txn(conn: &ClientConnection, r: AddOffsetsToTxnRequest) -> i16 {
    let id = r.transactional_id.0.to_string();
    if !id_allowed(conn, AclOperation::Write, &id) {
        return ec::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
    }
    if !conn.authorized(AclOperation::Read, ResourceType::Group, &r.group_id.0) {
        return ec::GROUP_AUTHORIZATION_FAILED;
    }
    let group_shard = crate::groups::group_shard(&r.group_id.0, conn.access.links.shards());
    let (producer_id, producer_epoch) = (r.producer_id.0, r.producer_epoch);
    on_coordinator(&conn.access, &id.clone(), move |c, now| {
        (
            c.add_offsets(&id, producer_id, producer_epoch, group_shard, now),
            Vec::new(),
        )
    })
    .await
    .unwrap_or(ec::COORDINATOR_NOT_AVAILABLE)
}

/// EndTxn (WRITE on the id): answered once PrepareCommit/PrepareAbort is
/// persisted; the markers follow.
async fn end_txn(conn: &ClientConnection, r: EndTxnRequest) -> i16 {
    let id = r.transactional_id.0.to_string();
    if !id_allowed(conn, AclOperation::Write, &id) {
        return ec::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
    }
    let result = if r.committed {
        TransactionResult::Commit
    } else {
        TransactionResult::Abort
    };
    let (producer_id, producer_epoch) = (r.producer_id.0, r.producer_epoch);
    on_coordinator(&conn.access, &id.clone(), move |c, now| {
        c.end_txn(&id, producer_id, producer_epoch, result, now)
    })
    .await
    .unwrap_or(ec::COORDINATOR_NOT_AVAILABLE)
}

/// DescribeTransactions: each id asked on its shard (DESCRIBE on the id).
async fn describe_transactions(
    conn: &ClientConnection,
    r: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut states = Vec::with_capacity(r.transactional_ids.len());
    for id in r.transactional_ids {
        let name = id.0.to_string();
        let state = DescribedState::default()
            .with_transactional_id(id)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_timeout_ms(-1)
            .with_transaction_start_time_ms(-1)
            .with_transaction_state(s(""));
        if !id_allowed(conn, AclOperation::Describe, &name) {
            states.push(state.with_error_code(ec::TRANSACTIONAL_ID_AUTHORIZATION_FAILED));
            continue;
        }
        let described = on_coordinator(&conn.access, &name.clone(), move |c, _| (c.describe(&name), Vec::new()))
            .await
            .unwrap_or(Err(ec::COORDINATOR_NOT_AVAILABLE));
        states.push(match described {
            Ok(d) => state
                .with_transaction_state(s(d.state.name()))
                .with_producer_id(ProducerId(d.producer_id))
                .with_producer_epoch(d.producer_epoch)
                .with_transaction_timeout_ms(d.transaction_timeout_ms)
                .with_transaction_start_time_ms(d.transaction_start_time_ms)
                .with_topics(
                    d.topics
                        .into_iter()
                        .map(|(topic, partitions)| {
                            TopicData::default()
                                .with_topic(TopicName(StrBytes::from_string(topic)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                ),
            Err(code) => state.with_error_code(code),
        });
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// ListTransactions: every shard asked and the answers merged, ids the
/// connection may not describe left out (Kafka's `handleListTransactionsRequest`).
async fn list_transactions(conn: &ClientConnection, r: ListTransactionsRequest) -> ListTransactionsResponse {
    let states: Vec<String> = r.state_filters.iter().map(|f| f.to_string()).collect();
    let producer_ids: Vec<i64> = r.producer_id_filters.iter().map(|p| p.0).collect();
    let pattern = r.transactional_id_pattern.as_deref().map(|p| p.to_string());
    let filter = match ListTransactionsFilter::new(states, producer_ids, r.duration_filter, pattern.as_deref()) {
        Ok(filter) => filter,
        Err((code, message)) => {
            tracing::debug!(message, "ListTransactions refused");
            return ListTransactionsResponse::default().with_error_code(code);
        }
    };
    let mut unknown_state_filters: Vec<String> = Vec::new();
    let mut listed = Vec::new();
    for shard in 0..conn.access.links.shards() {
        let filter = filter.clone();
        let answer = conn
            .access
            .on(shard, move |registry| {
                let Some(txns) = registry.service::<ShardTransactions>() else {
                    return Some(None);
                };
                let c = txns.coordinator.try_borrow().ok()?;
                Some(Some(c.list(&filter, now_ms())))
            })
            .await
            .flatten();
        let Some(answer) = answer else {
            return ListTransactionsResponse::default().with_error_code(ec::COORDINATOR_NOT_AVAILABLE);
        };
        unknown_state_filters = answer.unknown_state_filters;
        listed.extend(answer.transactions);
    }
    listed.retain(|t| id_allowed(conn, AclOperation::Describe, &t.transactional_id));
    listed.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown_state_filters.iter().map(|f| s(f)).collect())
        .with_transaction_states(
            listed
                .into_iter()
                .map(|t| {
                    ListedState::default()
                        .with_transactional_id(TransactionalId(StrBytes::from_string(t.transactional_id)))
                        .with_producer_id(ProducerId(t.producer_id))
                        .with_transaction_state(s(t.state.name()))
                })
                .collect(),
        )
}

/// KIP-890 part 1 for a transactional Produce or TxnOffsetCommit: per
/// partition, the coordinator's verdict that it is in the producer's open
/// transaction (NONE) or not, asked on the id's shard in one job (see
/// [`verification_error`] for what the client is told).
pub async fn verify_partitions(
    access: &ShardAccess,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: Vec<TopicPartition>,
) -> Vec<(TopicPartition, i16)> {
    let all = |code| partitions.iter().map(|tp| (tp.clone(), code)).collect::<Vec<_>>();
    let id = transactional_id.to_owned();
    let asked = partitions.clone();
    on_coordinator(access, transactional_id, move |c, _| {
        (
            c.verify_partitions(&id, producer_id, producer_epoch, &asked),
            Vec::new(),
        )
    })
    .await
    .unwrap_or_else(|| all(ec::COORDINATOR_NOT_AVAILABLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_told_as_a_kafka_partition_leader_tells_them() {
        let told = |code, abortable_known| verification_error(code, abortable_known);
        assert_eq!(told(ec::NONE, false), ec::NONE);
        assert_eq!(told(ec::TRANSACTION_ABORTABLE, true), ec::TRANSACTION_ABORTABLE);
        assert_eq!(told(ec::TRANSACTION_ABORTABLE, false), ec::INVALID_TXN_STATE);
        assert_eq!(told(ec::PRODUCER_FENCED, true), ec::INVALID_PRODUCER_EPOCH);
        assert_eq!(told(ec::COORDINATOR_NOT_AVAILABLE, false), ec::NOT_ENOUGH_REPLICAS);
        assert_eq!(told(ec::CONCURRENT_TRANSACTIONS, true), ec::NOT_ENOUGH_REPLICAS);
        assert_eq!(
            told(ec::INVALID_PRODUCER_ID_MAPPING, true),
            ec::INVALID_PRODUCER_ID_MAPPING
        );
    }
}
