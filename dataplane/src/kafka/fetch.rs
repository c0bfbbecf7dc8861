//! Fetch: each partition is read on its owning shard (a file range of whole
//! batches, plus the offsets, epochs and aborted transactions around it),
//! the request long-polls until `min_bytes` are there or `max_wait_ms` has
//! passed (woken by appends on the owning shards), and the response goes
//! out with the records sent straight from the segment files.
//!
//! Incremental fetch sessions (KIP-227): a request with session epoch 0
//! creates one (kept with the connection); later requests send only the
//! partitions whose fetch state changed and name the ones to forget, and
//! the answer carries only the partitions that have records, an error, or
//! new watermarks. Epoch -1 fetches without a session.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_lite::future;
use kafka_protocol::messages::{FetchRequest, TopicName};

use super::connection::ClientConnection;
use super::log_offsets::{READ_COMMITTED, check_leader_epoch};
use crate::partition::registry::ServedPartition;
use ringmirror_protocol::error_codes as ec;
use ringmirror_protocol::wire::{EncodedFetchResponse, FetchResponseWriter, PartitionAnswer, TopicKey};
use ringmirror_storage::log::{AbortedTxn, LogError, PartitionLog, TopicPartition};

/// From this version on, requests name topics by id.
const FIRST_TOPIC_ID_VERSION: i16 = 13;
/// Fetch sessions exist from this version on.
const FIRST_SESSION_VERSION: i16 = 7;
/// Session epochs: 0 asks for a new session, -1 closes one (or uses none).
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;
/// From this version on, a partition may carry a diverging epoch.
const FIRST_DIVERGING_EPOCH_VERSION: i16 = 12;
/// Longest long-poll we honour, whatever a client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct PartitionQuery {
    fetch_offset: i64,
    current_leader_epoch: i32,
    /// -1 unless the client can take a diverging epoch.
    last_fetched_epoch: i32,
    max_bytes: usize,
    read_committed: bool,
}

/// Reads one partition for a Fetch on its owning shard.
fn read_partition(p: &ServedPartition, log: &PartitionLog, q: &PartitionQuery) -> PartitionAnswer {
    let mut answer = PartitionAnswer {
        high_watermark: log.log_end_offset(),
        last_stable_offset: log.last_stable_offset(),
        log_start_offset: log.log_start_offset(),
        ..PartitionAnswer::default()
    };
    answer.error_code = check_leader_epoch(p, q.current_leader_epoch);
    if answer.error_code != ec::NONE {
        return answer;
    }
    if q.last_fetched_epoch >= 0 && !log.epoch_cache().entries().is_empty() {
        let (epoch, end) = log.end_offset_for_epoch(q.last_fetched_epoch);
        if end < q.fetch_offset || epoch < q.last_fetched_epoch {
            answer.diverging_epoch = Some((epoch, end));
            return answer;
        }
    }
    let upper = if q.read_committed {
        answer.last_stable_offset
    } else {
        i64::MAX
    };
    match log.read_below(q.fetch_offset, q.max_bytes, upper) {
        Ok(slice) => {
            if q.read_committed {
                answer.aborted_transactions = Some(aborted_in_first_offset_order(
                    &log.aborted_transactions(q.fetch_offset, slice.end_offset),
                ));
            }
            answer.records = Some(slice);
        }
        Err(LogError::OffsetOutOfRange { .. }) => answer.error_code = ec::OFFSET_OUT_OF_RANGE,
        Err(e) => {
            tracing::error!(dir = %log.dir().display(), offset = q.fetch_offset, error = %e, "read failed");
            answer.error_code = ec::KAFKA_STORAGE_ERROR;
        }
    }
    answer
}

/// Keeps the response within the request's `max_bytes`: partitions past
/// the limit send no records this time, except that the first partition
/// with records always keeps them (a batch larger than the limit must still
/// get through, as in Kafka).
fn apply_response_limit(answers: &mut [PartitionAnswer], max_bytes: usize) {
    let mut total = 0usize;
    for a in answers.iter_mut() {
        let Some(len) = a.records.as_ref().map(|r| r.len).filter(|&len| len > 0) else {
            continue;
        };
        if total > 0 && total + len > max_bytes {
            a.records = None;
            a.aborted_transactions = a.aborted_transactions.take().map(|_| Vec::new());
        } else {
            total += len;
        }
    }
}

/// How a request names a topic: by name before Fetch v13, by id after.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum TopicKeyOwned {
    Name(String),
    Id([u8; 16]),
}

impl TopicKeyOwned {
    fn of(by_id: bool, name: &TopicName, id: &uuid::Uuid) -> Self {
        if by_id {
            Self::Id(*id.as_bytes())
        } else {
            Self::Name(name.0.to_string())
        }
    }
}

/// One partition a Fetch (or a fetch session) asks for.
#[derive(Clone)]
struct FetchTarget {
    topic: TopicKeyOwned,
    partition: i32,
    query: PartitionQuery,
}

/// What a partition's last answer in a session said, to tell whether the
/// next incremental response must include it.
type Watermarks = (i64, i64, i64);

/// An incremental fetch session (KIP-227), kept with its connection: the
/// partitions it fetches (as last sent by the client) and what each was
/// last answered. A client that reconnects gets FETCH_SESSION_ID_NOT_FOUND
/// and starts a new one, as the protocol provides.
pub struct FetchSession {
    id: i32,
    next_epoch: i32,
    targets: Vec<FetchTarget>,
    last_sent: HashMap<(TopicKeyOwned, i32), Watermarks>,
}

/// Session ids: unique per process, never 0 (0 means "no session").
static NEXT_SESSION_ID: AtomicI32 = AtomicI32::new(1);

fn new_session_id() -> i32 {
    loop {
        let id = NEXT_SESSION_ID.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        if id != 0 {
            return id;
        }
    }
}

/// The partitions of a request, in request order.
fn request_targets(request: &FetchRequest, version: i16) -> Vec<FetchTarget> {
    let by_id = version >= FIRST_TOPIC_ID_VERSION;
    let mut out = Vec::new();
    for t in &request.topics {
        let topic = TopicKeyOwned::of(by_id, &t.topic, &t.topic_id);
        for p in &t.partitions {
            out.push(FetchTarget {
                topic: topic.clone(),
                partition: p.partition,
                query: PartitionQuery {
                    fetch_offset: p.fetch_offset,
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: if version >= FIRST_DIVERGING_EPOCH_VERSION {
                        p.last_fetched_epoch
                    } else {
                        -1
                    },
                    max_bytes: usize::try_from(p.partition_max_bytes.max(0)).unwrap_or(0),
                    read_committed: false,
                },
            });
        }
    }
    out
}

/// The request's forgotten partitions (incremental requests only).
fn forgotten(request: &FetchRequest, version: i16) -> Vec<(TopicKeyOwned, i32)> {
    let by_id = version >= FIRST_TOPIC_ID_VERSION;
    let mut out = Vec::new();
    for t in &request.forgotten_topics_data {
        let topic = TopicKeyOwned::of(by_id, &t.topic, &t.topic_id);
        out.extend(t.partitions.iter().map(|&p| (topic.clone(), p)));
    }
    out
}

/// How this request relates to a fetch session.
enum SessionMode {
    /// Answer in full, no session (epoch -1).
    Sessionless,
    /// A new session was created: answer in full with its id.
    Created(i32),
    /// An incremental request in the connection's session.
    Incremental(i32),
}

/// Applies the request's session fields (KIP-227) to the connection's
/// session; returns the mode and the partitions to answer, or an error code.
fn apply_session(
    conn: &mut ClientConnection,
    request: &FetchRequest,
    version: i16,
) -> Result<(SessionMode, Vec<FetchTarget>), i16> {
    let mut targets = request_targets(request, version);
    let read_committed = request.isolation_level == READ_COMMITTED;
    for t in &mut targets {
        t.query.read_committed = read_committed;
    }
    match (request.session_id, request.session_epoch) {
        (id, FINAL_EPOCH) => {
            if conn.fetch_session.as_ref().is_some_and(|s| s.id == id) {
                conn.fetch_session = None;
            }
            Ok((SessionMode::Sessionless, targets))
        }
        (_, INITIAL_EPOCH) if version >= FIRST_SESSION_VERSION => {
            let id = new_session_id();
            conn.fetch_session = Some(FetchSession {
                id,
                next_epoch: 1,
                targets: targets.clone(),
                last_sent: HashMap::new(),
            });
            Ok((SessionMode::Created(id), targets))
        }
        (_, INITIAL_EPOCH) | (0, _) => Err(ec::INVALID_FETCH_SESSION_EPOCH),
        (id, epoch) => {
            let Some(session) = conn.fetch_session.as_mut().filter(|s| s.id == id) else {
                return Err(ec::FETCH_SESSION_ID_NOT_FOUND);
            };
            if epoch != session.next_epoch {
                return Err(ec::INVALID_FETCH_SESSION_EPOCH);
            }
            session.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
            for (topic, partition) in forgotten(request, version) {
                session
                    .targets
                    .retain(|t| !(t.topic == topic && t.partition == partition));
                session.last_sent.remove(&(topic, partition));
            }
            for update in targets {
                match session
                    .targets
                    .iter_mut()
                    .find(|t| t.topic == update.topic && t.partition == update.partition)
                {
                    Some(t) => *t = update,
                    None => session.targets.push(update),
                }
            }
            for t in &mut session.targets {
                t.query.read_committed = read_committed;
            }
            Ok((SessionMode::Incremental(id), session.targets.clone()))
        }
    }
}

/// The Fetch response, its records left in their segment files (the
/// session sends them from there).
pub async fn handle_fetch(
    conn: &mut ClientConnection,
    version: i16,
    correlation_id: i32,
    request: FetchRequest,
) -> EncodedFetchResponse {
    let (mode, targets) = match apply_session(conn, &request, version) {
        Ok(applied) => applied,
        Err(code) => {
            let w = FetchResponseWriter::new(version, correlation_id, code, 0, 0);
            return w.finish();
        }
    };
    let catalog = conn.catalog.get();
    // READ on each topic (Kafka's KafkaApis.handleFetch): a topic named
    // and not readable is TOPIC_AUTHORIZATION_FAILED whether it exists or
    // not; one asked by id is UNKNOWN_TOPIC_ID unless it exists.
    let denied: Vec<bool> = targets
        .iter()
        .map(|t| {
            use crate::security::acls::{AclOperation, ResourceType};
            let name = match &t.topic {
                TopicKeyOwned::Name(name) => Some(name.as_str()),
                TopicKeyOwned::Id(id) => catalog.topic_by_id(id).map(|e| e.name.as_str()),
            };
            name.is_some_and(|n| !conn.authorized(AclOperation::Read, ResourceType::Topic, n))
        })
        .collect();
    let owners: Vec<Option<(usize, TopicPartition)>> = targets
        .iter()
        .zip(&denied)
        .map(|(t, &denied)| {
            if denied {
                return None;
            }
            let entry = match &t.topic {
                TopicKeyOwned::Name(name) => catalog.topic(name),
                TopicKeyOwned::Id(id) => catalog.topic_by_id(id),
            }?;
            let shard = entry.partitions.get(&t.partition)?.shard;
            Some((shard, TopicPartition::new(entry.name.clone(), t.partition)))
        })
        .collect();
    let unknown = if version >= FIRST_TOPIC_ID_VERSION {
        ec::UNKNOWN_TOPIC_ID
    } else {
        ec::UNKNOWN_TOPIC_OR_PARTITION
    };
    let max_bytes = usize::try_from(request.max_bytes.max(0)).unwrap_or(0);
    let min_bytes = usize::try_from(request.min_bytes.max(0)).unwrap_or(0);
    let max_wait = Duration::from_millis(u64::try_from(request.max_wait_ms.max(0)).unwrap_or(0)).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + max_wait;
    let mut shards: Vec<usize> = owners.iter().flatten().map(|o| o.0).collect();
    shards.sort_unstable();
    shards.dedup();
    let mut answers = loop {
        // Listen before reading, so an append in between wakes us.
        let mut listeners: Vec<_> = shards.iter().map(|&s| conn.access.links.listen(s)).collect();
        let items = targets
            .iter()
            .zip(&owners)
            .filter_map(|(t, o)| o.clone().map(|(shard, tp)| (shard, tp, t.query.clone())))
            .collect();
        let mut read = conn.access.query(items, read_partition).await.into_iter();
        let answers: Vec<PartitionAnswer> = targets
            .iter()
            .zip(&owners)
            .zip(&denied)
            .map(|((t, o), &denied)| {
                let answer = o.as_ref().and_then(|_| read.next().flatten());
                let mut answer = answer.unwrap_or_else(|| PartitionAnswer {
                    error_code: if denied {
                        ec::TOPIC_AUTHORIZATION_FAILED
                    } else {
                        unknown
                    },
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    ..PartitionAnswer::default()
                });
                answer.partition = t.partition;
                answer
            })
            .collect();
        let bytes: usize = answers.iter().filter_map(|a| a.records.as_ref()).map(|r| r.len).sum();
        let errors = answers
            .iter()
            .any(|a| a.error_code != ec::NONE || a.diverging_epoch.is_some());
        let now = Instant::now();
        if bytes >= min_bytes || errors || now >= deadline || shards.is_empty() {
            break answers;
        }
        let any_append = future::poll_fn(|cx| {
            for l in &mut listeners {
                if Pin::new(l).poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        });
        future::or(any_append, async {
            glommio::timer::sleep(deadline - now).await;
        })
        .await;
    };
    apply_response_limit(&mut answers, max_bytes);
    let session_id = match mode {
        SessionMode::Sessionless => 0,
        SessionMode::Created(id) | SessionMode::Incremental(id) => id,
    };
    // Which answers go out: all, or in a session only what changed.
    let mut include = vec![true; answers.len()];
    if let Some(session) = conn.fetch_session.as_mut().filter(|s| s.id == session_id) {
        for ((t, a), include) in targets.iter().zip(&answers).zip(&mut include) {
            let marks = (a.high_watermark, a.last_stable_offset, a.log_start_offset);
            let key = (t.topic.clone(), t.partition);
            let changed = a.error_code != ec::NONE
                || a.diverging_epoch.is_some()
                || a.records.as_ref().is_some_and(|r| r.len > 0)
                || session.last_sent.get(&key) != Some(&marks);
            if matches!(mode, SessionMode::Incremental(_)) {
                *include = changed;
            }
            if *include {
                session.last_sent.insert(key, marks);
            }
        }
    }
    // Group the answers by topic, topics in order of first appearance.
    let mut topics: Vec<(&TopicKeyOwned, Vec<PartitionAnswer>)> = Vec::new();
    for ((t, a), include) in targets.iter().zip(answers).zip(include) {
        if !include {
            continue;
        }
        match topics.iter_mut().find(|(key, _)| *key == &t.topic) {
            Some((_, partitions)) => partitions.push(a),
            None => topics.push((&t.topic, vec![a])),
        }
    }
    let mut w = FetchResponseWriter::new(version, correlation_id, ec::NONE, session_id, topics.len());
    for (key, partitions) in topics {
        let key = match key {
            TopicKeyOwned::Name(name) => TopicKey::Name(name),
            TopicKeyOwned::Id(id) => TopicKey::Id(*id),
        };
        w.topic(key, partitions.len());
        for p in partitions {
            w.partition(p);
        }
        w.end_topic();
    }
    w.finish()
}

/// A Fetch answer's aborted transactions, (producer id, first offset), in
/// first-offset order. `.txnindex` (ours and Kafka's, which answers in that
/// order) keeps them by marker, so transactions that overlap and end in the
/// other order come out of order; Java's consumer and librdkafka sort them
/// themselves, but KafkaJS walks them as they come and then delivers aborted
/// records (tests/kafka_source.rs, `kafkajs_reads_interleaved_…`). Sorted,
/// every client reads them right.
fn aborted_in_first_offset_order(aborted: &[AbortedTxn]) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = aborted.iter().map(|t| (t.producer_id, t.first_offset)).collect();
    out.sort_by_key(|&(producer_id, first_offset)| (first_offset, producer_id));
    out
}
