//! The write path for local topics: CreateTopics makes a topic at this
//! agent (writable, unlike mirror topics) with the configs it is given
//! (checked as Kafka checks them, kept in each partition's marker and
//! published in the catalog), CreatePartitions grows one
//! (a mirror topic's partitions follow its source and are refused with
//! READ_ONLY_TOPIC), InitProducerId hands out
//! producer ids for idempotent producers, and Produce appends to local
//! topics on the owning shard — offsets assigned, the destination leader
//! epoch stamped, retries recognised by producer id and sequence. Produce to
//! a mirror topic is refused with READ_ONLY_TOPIC on every partition.
//! A transactional batch is appended once its transaction's coordinator
//! says the partition is in the transaction (KIP-890 part 1; see
//! `transactions.rs`).

use std::collections::HashMap;
use std::ops::Range;

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopicConfig;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::connection::ClientConnection;
use super::handlers::{str, take_unauthorized};
use super::transactions::{mirror_topic_message, verification_error};
use crate::partition::catalog::random_bytes;
use crate::partition::registry::{Registry, ServedPartition, UNCLAIMED_MIRROR};
use crate::partition::shard_for;
use crate::security::acls::AclOperation;
use ringmirror_protocol::error_codes as ec;
use ringmirror_storage::batch::RecordBatch;
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::{PartitionLog, ProduceError, TopicPartition};
use ringmirror_storage::topic_config::{self, TopicConfigMap};

/// Produce, with its checks before the write: `acks` (INVALID_REQUIRED_ACKS
/// unless -1, 0 or 1) and WRITE on each topic (Kafka's
/// `handleProduceRequest`; a transactional batch is verified with its
/// coordinator in [`produce`]). `None` for acks=0: no answer at all.
pub(super) async fn handle_produce(
    conn: &mut ClientConnection,
    version: i16,
    mut r: ProduceRequest,
) -> Option<ProduceResponse> {
    let acks = r.acks;
    if !matches!(acks, -1..=1) {
        return Some(refuse_produce(&r, version, ec::INVALID_REQUIRED_ACKS));
    }
    let denied = take_unauthorized(conn, &mut r.topic_data, AclOperation::Write, |t| &t.name.0);
    let mut body = produce(conn, version, r).await;
    if !denied.is_empty() {
        let refused = ProduceRequest::default().with_topic_data(denied);
        let refused = refuse_produce(&refused, version, ec::TOPIC_AUTHORIZATION_FAILED);
        body.responses.extend(refused.responses);
    }
    (acks != 0).then_some(body)
}

/// CreateTopics; CREATE on the cluster or on each topic (Kafka's
/// `handleCreateTopicsRequest`).
pub(super) async fn handle_create_topics(
    conn: &mut ClientConnection,
    version: i16,
    mut r: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let denied = if conn.authorized_cluster(AclOperation::Create) {
        Vec::new()
    } else {
        take_unauthorized(conn, &mut r.topics, AclOperation::Create, |t| &t.name.0)
    };
    let mut body = create_topics(conn, version, r).await;
    body.topics.extend(denied.into_iter().map(|t| {
        CreatableTopicResult::default()
            .with_name(t.name)
            .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
            .with_error_message(Some(str("Authorization failed.")))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
    }));
    body
}

/// CreatePartitions; ALTER on each topic (Kafka's
/// `handleCreatePartitionsRequest`).
pub(super) async fn handle_create_partitions(
    conn: &mut ClientConnection,
    mut r: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let denied = take_unauthorized(conn, &mut r.topics, AclOperation::Alter, |t| &t.name.0);
    let mut body = create_partitions(conn, r).await;
    body.results.extend(denied.into_iter().map(|t| {
        CreatePartitionsTopicResult::default()
            .with_name(t.name)
            .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
            .with_error_message(Some(str("Authorization failed.")))
    }));
    body
}

/// InitProducerId: idempotent producers need IDEMPOTENT_WRITE on the
/// cluster or WRITE on some topic (Kafka's `handleInitProducerIdRequest`);
/// transactional ones go to their id's coordinator.
pub(super) async fn handle_init_producer_id(
    conn: &mut ClientConnection,
    r: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    if r.transactional_id.is_some() {
        super::transactions::init_producer_id(conn, r).await
    } else if !conn.authorized_idempotent_write() {
        InitProducerIdResponse::default()
            .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    } else {
        init_producer_id(conn, r)
    }
}

/// Names reserved for the agent's own state.
pub(super) const RESERVED_PREFIX: &str = "__ringmirror";

/// The Kafka error code for a refused batch.
fn produce_error_code(e: &ProduceError) -> i16 {
    match e {
        ProduceError::InvalidRecord(_) => ec::INVALID_RECORD,
        ProduceError::CorruptMessage => ec::CORRUPT_MESSAGE,
        ProduceError::MessageTooLarge { .. } => ec::MESSAGE_TOO_LARGE,
        ProduceError::OutOfOrderSequence { .. } => ec::OUT_OF_ORDER_SEQUENCE_NUMBER,
        ProduceError::InvalidProducerEpoch { .. } => ec::INVALID_PRODUCER_EPOCH,
        ProduceError::TransactionalWithoutProducerId => ec::INVALID_RECORD,
        ProduceError::CoordinatorFenced { .. } => ec::TRANSACTION_COORDINATOR_FENCED,
        ProduceError::Log(e) if e.is_disk_full() => ec::KAFKA_STORAGE_ERROR,
        ProduceError::Log(_) => ec::KAFKA_STORAGE_ERROR,
    }
}

/// One partition's answer: (error, base offset, log start offset, message).
type Appended = (i16, i64, i64, Option<String>);

/// The same error for every partition of a Produce.
pub fn refuse_produce(request: &ProduceRequest, version: i16, code: i16) -> ProduceResponse {
    let answers = request
        .topic_data
        .iter()
        .map(|t| vec![(code, -1, -1, None); t.partition_data.len()])
        .collect();
    produce_response(request, version, answers)
}

/// The answer, with each field only where `version` has it.
fn produce_response(request: &ProduceRequest, version: i16, answers: Vec<Vec<Appended>>) -> ProduceResponse {
    let responses = request
        .topic_data
        .iter()
        .zip(answers)
        .map(|(t, answers)| {
            let partitions = t
                .partition_data
                .iter()
                .zip(answers)
                .map(|(p, (code, base_offset, log_start_offset, message))| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code)
                        .with_base_offset(base_offset)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(if version >= 5 { log_start_offset } else { -1 })
                        .with_error_message(message.filter(|_| version >= 8).map(StrBytes::from_string))
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_partition_responses(partitions)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

/// A Produce's batches per owning shard: (topic index, partition index in
/// the request, partition, batch, the transaction's verdict on it).
type ProduceWork = HashMap<usize, Vec<(usize, usize, TopicPartition, Bytes, i16)>>;

/// Produce: appends each partition's batch on its owning shard.
pub async fn produce(conn: &mut ClientConnection, version: i16, request: ProduceRequest) -> ProduceResponse {
    let catalog = conn.catalog.get();
    let mut work = ProduceWork::new();
    let mut answers: Vec<Vec<Appended>> = request
        .topic_data
        .iter()
        .map(|t| vec![(ec::UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None); t.partition_data.len()])
        .collect();
    for (ti, t) in request.topic_data.iter().enumerate() {
        let entry = catalog.topic(&t.name.0);
        // Whether a partition is writable is decided on its shard (a mirror
        // partition becomes writable when its mirroring ends).
        for (pi, p) in t.partition_data.iter().enumerate() {
            if let Some((e, owner)) = entry.and_then(|e| Some((e, e.partitions.get(&p.index)?))) {
                let tp = TopicPartition::new(e.name.clone(), p.index);
                let batch = p.records.clone().unwrap_or_default();
                work.entry(owner.shard).or_default().push((ti, pi, tp, batch, ec::NONE));
            }
        }
    }
    if let Some(id) = &request.transactional_id {
        verify_transaction(conn, version, &id.0, &mut work).await;
    }
    for (shard, batches) in work {
        let done = conn
            .access
            .on(shard, move |registry| {
                let mut out = Vec::with_capacity(batches.len());
                let mut appended = false;
                for (ti, pi, tp, batch, verdict) in &batches {
                    let Some(partition) = registry.get(tp) else {
                        out.push((*ti, *pi, (ec::UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None)));
                        continue;
                    };
                    if partition.mirror.is_some() {
                        let why = Some(mirror_topic_message(&tp.topic));
                        out.push((*ti, *pi, (ec::READ_ONLY_TOPIC, -1, -1, why)));
                        continue;
                    }
                    if *verdict != ec::NONE {
                        let not_added = matches!(*verdict, ec::INVALID_TXN_STATE | ec::TRANSACTION_ABORTABLE);
                        let why = not_added.then(|| "Partition was not added to the transaction".to_string());
                        out.push((*ti, *pi, (*verdict, -1, -1, why)));
                        continue;
                    }
                    let Ok(mut log) = partition.log.try_borrow_mut() else {
                        return None;
                    };
                    // The request frame is shared and immutable: the batch is
                    // copied once to stamp its offset and epoch.
                    let mut bytes = batch.to_vec();
                    let epoch = partition.leader_epoch.get();
                    let answer = match log.append_produced(&mut bytes, epoch, now_ms()) {
                        Ok(produced) => {
                            appended |= !produced.duplicate;
                            (ec::NONE, produced.base_offset, log.log_start_offset(), None)
                        }
                        Err(e) => {
                            tracing::debug!(partition = %tp, error = %e, "produce refused");
                            (produce_error_code(&e), -1, -1, Some(e.to_string()))
                        }
                    };
                    out.push((*ti, *pi, answer));
                }
                if appended {
                    registry.notify_appended();
                }
                Some(out)
            })
            .await;
        for (ti, pi, answer) in done.into_iter().flatten() {
            answers[ti][pi] = answer;
        }
    }
    produce_response(&request, version, answers)
}

/// The first Produce version whose client knows TRANSACTION_ABORTABLE
/// (KIP-890); older ones are told INVALID_TXN_STATE.
const PRODUCE_TRANSACTION_ABORTABLE_VERSION: i16 = 11;

/// KIP-890 part 1: each transactional batch's partition checked with the
/// transaction's coordinator before it is appended (Kafka's
/// `ReplicaManager.appendRecords` with `AddPartitionsToTxnManager`); the
/// verdict goes with the batch. A batch that is not transactional, or whose
/// header cannot be read (refused at append), is left as it is.
async fn verify_transaction(conn: &ClientConnection, version: i16, transactional_id: &str, work: &mut ProduceWork) {
    // Per (producer id, epoch): the partitions to verify.
    let mut asked: HashMap<(i64, i16), Vec<TopicPartition>> = HashMap::new();
    for (_, _, tp, batch, _) in work.values().flatten() {
        if let Ok(view) = RecordBatch::new(&batch[..])
            && view.is_transactional()
        {
            asked
                .entry((view.producer_id(), view.producer_epoch()))
                .or_default()
                .push(tp.clone());
        }
    }
    let mut verdicts: HashMap<(i64, i16, TopicPartition), i16> = HashMap::new();
    for ((producer_id, epoch), partitions) in asked {
        let answers =
            super::transactions::verify_partitions(&conn.access, transactional_id, producer_id, epoch, partitions)
                .await;
        verdicts.extend(answers.into_iter().map(|(tp, code)| ((producer_id, epoch, tp), code)));
    }
    for (_, _, tp, batch, verdict) in work.values_mut().flatten() {
        if let Ok(view) = RecordBatch::new(&batch[..])
            && view.is_transactional()
        {
            let key = (view.producer_id(), view.producer_epoch(), tp.clone());
            let code = verdicts.get(&key).copied().unwrap_or(ec::COORDINATOR_NOT_AVAILABLE);
            *verdict = verification_error(code, version >= PRODUCE_TRANSACTION_ABORTABLE_VERSION);
        }
    }
}

/// Kafka's rule for topic names, and ours for the agent's own state.
fn valid_topic_name(name: &str) -> Result<(), String> {
    ringmirror_storage::limits::check_topic_name(name)?;
    if name.starts_with(RESERVED_PREFIX) {
        return Err(format!("names starting with {RESERVED_PREFIX} are reserved"));
    }
    Ok(())
}

/// A random (version 4) topic id.
fn new_topic_id() -> std::io::Result<[u8; 16]> {
    let mut id: [u8; 16] = random_bytes()?;
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    Ok(id)
}

/// A refused or failed topic change: (error code, message), logged.
type Refusal = (i16, String);

/// Logs a refusal and turns it into a response's (error code, message).
fn refused(action: &str, topic: &str, (code, message): Refusal) -> (i16, Option<StrBytes>) {
    if code == ec::KAFKA_STORAGE_ERROR {
        tracing::error!(topic, code, message, "{action} failed");
    } else {
        tracing::info!(topic, code, message, "{action} refused");
    }
    (code, Some(StrBytes::from_string(message)))
}

/// CreateTopics: local topics, one replica (this agent), partitions placed
/// on their shards. Mirror topics are created by their mirrors.
pub async fn create_topics(
    conn: &mut ClientConnection,
    version: i16,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let name = t.name.0.to_string();
        let mut result = CreatableTopicResult::default().with_name(t.name.clone());
        // -1: the broker's `num.partitions`.
        let partitions = if t.num_partitions == -1 {
            conn.settings.topic_creation.num_partitions
        } else {
            t.num_partitions
        };
        let check = if let Err(message) = valid_topic_name(&name) {
            Err((ec::INVALID_TOPIC_EXCEPTION, message))
        } else if partitions < 1 || !t.assignments.is_empty() && t.assignments.len() != partitions as usize {
            Err((ec::INVALID_PARTITIONS, format!("{partitions} partitions")))
        } else if !matches!(t.replication_factor, -1 | 1) {
            Err((
                ec::INVALID_REPLICATION_FACTOR,
                format!(
                    "replication factor {}: this agent is the only replica",
                    t.replication_factor
                ),
            ))
        } else {
            topic_configs(&t.configs)
        };
        let configs = match check {
            Ok(configs) => configs,
            Err(refusal) => {
                let (code, message) = refused("create topic", &name, refusal);
                results.push(result.with_error_code(code).with_error_message(message));
                continue;
            }
        };
        let handle = conn.access.local.catalog();
        if !handle.try_reserve_topic(&name) {
            let refusal = (ec::TOPIC_ALREADY_EXISTS, format!("topic {name:?} already exists"));
            let (code, message) = refused("create topic", &name, refusal);
            results.push(result.with_error_code(code).with_error_message(message));
            continue;
        }
        let outcome = if request.validate_only {
            Ok([0; 16])
        } else {
            match new_topic_id() {
                Ok(id) => create_local_partitions(conn, &name, id, &configs, 0..partitions)
                    .await
                    .map(|()| id),
                Err(e) => Err((ec::KAFKA_STORAGE_ERROR, format!("topic id: {e}"))),
            }
        };
        handle.release_topic(&name);
        if version >= 5 {
            result = result.with_num_partitions(partitions).with_replication_factor(1);
        }
        results.push(match outcome {
            Ok(id) => {
                if !request.validate_only {
                    // DescribeConfigs answers them as the topic's own; the
                    // shard's cleaner and retention follow them.
                    handle.publish_topic_configs(&name, configs.clone());
                }
                tracing::info!(topic = name, partitions, ?configs, "created local topic");
                result.with_topic_id(Uuid::from_bytes(if version >= 7 { id } else { [0; 16] }))
            }
            Err(refusal) => {
                let (code, message) = refused("create topic", &name, refusal);
                result.with_error_code(code).with_error_message(message)
            }
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

/// A CreateTopics request's configs for one topic, each checked as Kafka
/// checks it (see [`topic_config::validate`]); INVALID_CONFIG with Kafka's
/// message for the first that is not valid.
fn topic_configs(configs: &[CreatableTopicConfig]) -> Result<TopicConfigMap, Refusal> {
    configs
        .iter()
        .map(|c| {
            let value = c.value.as_ref().map(|v| v.as_str());
            topic_config::validate(c.name.as_str(), value).map_err(|message| (ec::INVALID_CONFIG, message))?;
            Ok((c.name.to_string(), value.unwrap_or_default().to_owned()))
        })
        .collect()
}

/// Creates `partitions` of the local topic `topic` (id `id`, `configs`),
/// each on its owning shard with [`Registry::create_local`], in order: a
/// crash between two leaves a topic with fewer partitions, which
/// CreatePartitions grows.
async fn create_local_partitions(
    conn: &mut ClientConnection,
    topic: &str,
    id: [u8; 16],
    configs: &TopicConfigMap,
    partitions: Range<i32>,
) -> Result<(), Refusal> {
    let shards = conn.access.links.shards();
    for partition in partitions {
        let tp = TopicPartition::new(topic, partition);
        let shard = shard_for(&tp, shards);
        let configs = configs.clone();
        conn.access
            .on(shard, move |registry| {
                create_local_partition(registry, &tp, id, &configs)
            })
            .await
            .ok_or((ec::KAFKA_STORAGE_ERROR, "shard has stopped".to_string()))??;
    }
    Ok(())
}

/// One new partition, on its shard (`None`: its log is busy, run again).
/// A crash inside `create_local` (log opened, local marker not yet
/// written) leaves a partition that the next start serves as unclaimed
/// mirrored data: one that is unclaimed, empty, and has no topic id or
/// this one is such a leftover, and its creation is completed here.
fn create_local_partition(
    registry: &Registry,
    tp: &TopicPartition,
    id: [u8; 16],
    configs: &TopicConfigMap,
) -> Option<Result<(), Refusal>> {
    let storage_error = |message: String| (ec::KAFKA_STORAGE_ERROR, message);
    if let Some(existing) = registry.get(tp) {
        let leftover = {
            let log = existing.log.try_borrow().ok()?;
            existing.mirror.as_deref() == Some(UNCLAIMED_MIRROR)
                && log.log_end_offset() == 0
                && log.topic_id().is_none_or(|found| found == id)
        };
        drop(existing);
        if !leftover {
            return Some(Err((ec::INVALID_PARTITIONS, format!("{tp} exists already"))));
        }
        tracing::info!(partition = %tp, "completing a partition whose creation was interrupted");
        if let Err(e) = registry.close(tp) {
            return Some(Err(storage_error(format!("close {tp}: {e}"))));
        }
    }
    Some(registry.create_local(tp, id, configs).map_err(storage_error))
}

/// How an existing partition stands for CreatePartitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Local (writable here), with its topic id.
    Local(Option<[u8; 16]>),
    /// Mirrored data no mirror has claimed (yet), or a partition whose
    /// creation a crash interrupted (see [`create_local_partition`]).
    Unclaimed,
    /// Written by a mirror.
    Mirrored,
}

fn standing(p: &ServedPartition, log: &PartitionLog, _: &()) -> Standing {
    match p.mirror.as_deref() {
        None => Standing::Local(log.topic_id()),
        Some(UNCLAIMED_MIRROR) => Standing::Unclaimed,
        Some(_) => Standing::Mirrored,
    }
}

/// CreatePartitions: grows local topics, new partitions made as
/// CreateTopics makes them (the topic's id, each on its owning shard).
/// Assignments are accepted and ignored (this agent is the only replica).
/// A topic that a mirror writes (or that holds only unclaimed mirrored
/// data) is refused with READ_ONLY_TOPIC: KIP-1279 gives mirror topics
/// that code for every change clients attempt, its partitions follow the
/// source's (metadata sync).
pub async fn create_partitions(
    conn: &mut ClientConnection,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let name = t.name.0.to_string();
        let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        results.push(match grow_topic(conn, &name, t.count, request.validate_only).await {
            Ok(()) => {
                let validated = if request.validate_only { " (validate only)" } else { "" };
                tracing::info!(topic = name, partitions = t.count, "grew local topic{validated}");
                result
            }
            Err(refusal) => {
                let (code, message) = refused("create partitions", &name, refusal);
                result.with_error_code(code).with_error_message(message)
            }
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// Grows `topic` to `count` partitions (checks only, if `validate_only`).
async fn grow_topic(conn: &mut ClientConnection, topic: &str, count: i32, validate_only: bool) -> Result<(), Refusal> {
    let catalog = conn.catalog.get();
    let entry = catalog
        .topic(topic)
        .ok_or_else(|| (ec::UNKNOWN_TOPIC_OR_PARTITION, format!("unknown topic {topic:?}")))?;
    let items = entry
        .partitions
        .iter()
        .map(|(&partition, p)| (p.shard, TopicPartition::new(topic, partition), ()))
        .collect();
    let standings = conn.access.query(items, standing).await;
    let read_only = || {
        let message = format!("{topic:?} is a mirror topic: its partitions follow its source");
        (ec::READ_ONLY_TOPIC, message)
    };
    if standings.contains(&Some(Standing::Mirrored)) {
        return Err(read_only());
    }
    let ids: Vec<Option<[u8; 16]>> = standings
        .iter()
        .filter_map(|s| match s {
            Some(Standing::Local(id)) => Some(*id),
            _ => None,
        })
        .collect();
    let Some(&id) = ids.first() else {
        return Err(read_only());
    };
    let current = ids.len() as i32;
    if count <= current {
        let message = format!("topic {topic:?} has {current} partitions: {count} would add none");
        return Err((ec::INVALID_PARTITIONS, message));
    }
    if validate_only {
        return Ok(());
    }
    // The new partitions' markers keep the topic's configs too.
    let configs = catalog.topic_configs(topic).cloned().unwrap_or_default();
    create_local_partitions(conn, topic, id.unwrap_or(entry.id), &configs, current..count).await
}

/// InitProducerId for idempotent producers (no transactional id; the
/// transactional ones are `transactions::init_producer_id`'s): a new
/// producer id, or the same id with the next epoch when the producer asks
/// to bump its own (v3+).
pub fn init_producer_id(conn: &ClientConnection, request: &InitProducerIdRequest) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default();
    let (id, epoch) = (request.producer_id.0, request.producer_epoch);
    if id >= 0 && (0..i16::MAX - 1).contains(&epoch) {
        return response.with_producer_id(ProducerId(id)).with_producer_epoch(epoch + 1);
    }
    match conn.access.local.producer_ids().next() {
        Ok(id) => response.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %e, "cannot reserve producer ids");
            response
                .with_error_code(ec::KAFKA_STORAGE_ERROR)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        }
    }
}
