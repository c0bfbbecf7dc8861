//! Fetch: each partition is read on its owning shard (a file range of whole
//! batches, plus the offsets, epochs and aborted transactions around it),
//! the request long-polls until `min_bytes` are there or `max_wait_ms` has
//! passed (woken by appends on the owning shards), and the response goes
//! out with the records sent straight from the segment files.
//!
//! Fetch sessions (KIP-227): we answer with session id 0, which tells a
//! client that asked for a session to keep sending full requests; a request
//! naming a session we never created gets FETCH_SESSION_ID_NOT_FOUND.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_lite::future;
use kafka_protocol::messages::FetchRequest;

use super::handlers::{READ_COMMITTED, check_leader_epoch};
use super::listener::ClientConnection;
use super::registry::ServedPartition;
use crate::client::error_codes as ec;
use crate::log::{LogError, PartitionLog, TopicPartition};
use crate::wire::{FetchResponseWriter, PartitionAnswer, TopicKey};

/// From this version on, requests name topics by id.
const FIRST_TOPIC_ID_VERSION: i16 = 13;
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
                let aborted = log.aborted_transactions(q.fetch_offset, slice.end_offset);
                answer.aborted_transactions = Some(aborted.iter().map(|t| (t.producer_id, t.first_offset)).collect());
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

/// One requested partition: where it is, what to ask.
struct Wanted {
    topic: usize,
    partition: i32,
    owner: Option<(usize, TopicPartition)>,
    query: PartitionQuery,
}

pub async fn handle_fetch(
    conn: &mut ClientConnection,
    version: i16,
    correlation_id: i32,
    request: FetchRequest,
) -> std::io::Result<()> {
    let catalog = conn.catalog.get();
    // Sessionless (epoch -1) and "new session" (id 0, epoch 0) requests are
    // answered in full without a session; anything else names a session
    // we do not have.
    let session_error = if request.session_id != 0 {
        ec::FETCH_SESSION_ID_NOT_FOUND
    } else if request.session_epoch > 0 {
        ec::INVALID_FETCH_SESSION_EPOCH
    } else {
        ec::NONE
    };
    if session_error != ec::NONE {
        let w = FetchResponseWriter::new(version, correlation_id, session_error, 0, 0);
        return conn.send_fetch_response(w.finish()).await;
    }
    let by_id = version >= FIRST_TOPIC_ID_VERSION;
    let mut topic_keys: Vec<(Option<String>, [u8; 16])> = Vec::with_capacity(request.topics.len());
    let mut wanted = Vec::new();
    for t in &request.topics {
        let entry = if by_id {
            catalog.topic_by_id(t.topic_id.as_bytes())
        } else {
            catalog.topic(&t.topic.0)
        };
        let name = if by_id {
            entry.map(|e| e.name.clone())
        } else {
            Some(t.topic.0.to_string())
        };
        for p in &t.partitions {
            let owner = entry.and_then(|e| e.partitions.get(&p.partition)).map(|pe| {
                (
                    pe.shard,
                    TopicPartition::new(entry.map_or("", |e| &e.name), p.partition),
                )
            });
            wanted.push(Wanted {
                topic: topic_keys.len(),
                partition: p.partition,
                owner,
                query: PartitionQuery {
                    fetch_offset: p.fetch_offset,
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: if version >= FIRST_DIVERGING_EPOCH_VERSION {
                        p.last_fetched_epoch
                    } else {
                        -1
                    },
                    max_bytes: usize::try_from(p.partition_max_bytes.max(0)).unwrap_or(0),
                    read_committed: request.isolation_level == READ_COMMITTED,
                },
            });
        }
        topic_keys.push((name, *t.topic_id.as_bytes()));
    }
    let max_bytes = usize::try_from(request.max_bytes.max(0)).unwrap_or(0);
    let min_bytes = usize::try_from(request.min_bytes.max(0)).unwrap_or(0);
    let max_wait = Duration::from_millis(u64::try_from(request.max_wait_ms.max(0)).unwrap_or(0)).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + max_wait;
    let mut shards: Vec<usize> = wanted.iter().filter_map(|w| w.owner.as_ref().map(|o| o.0)).collect();
    shards.sort_unstable();
    shards.dedup();
    let answers = loop {
        // Listen before reading, so an append in between wakes us.
        let listeners: Vec<_> = shards.iter().map(|&s| conn.access.links.listen(s)).collect();
        let items = wanted
            .iter()
            .filter_map(|w| w.owner.clone().map(|(shard, tp)| (shard, tp, w.query.clone())))
            .collect();
        let mut answers = conn.access.query(items, read_partition).await.into_iter();
        let answers: Vec<PartitionAnswer> = wanted
            .iter()
            .map(|w| {
                let answer = if w.owner.is_some() {
                    answers.next().flatten()
                } else {
                    None
                };
                let mut answer = answer.unwrap_or_else(|| PartitionAnswer {
                    error_code: if by_id {
                        ec::UNKNOWN_TOPIC_ID
                    } else {
                        ec::UNKNOWN_TOPIC_OR_PARTITION
                    },
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    ..PartitionAnswer::default()
                });
                answer.partition = w.partition;
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
        let mut listeners = listeners;
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
    let mut answers = answers;
    apply_response_limit(&mut answers, max_bytes);
    let mut w = FetchResponseWriter::new(version, correlation_id, ec::NONE, 0, topic_keys.len());
    let mut answers = answers.into_iter().zip(wanted.iter().map(|w| w.topic)).peekable();
    for (i, (name, id)) in topic_keys.iter().enumerate() {
        let partitions: Vec<PartitionAnswer> =
            std::iter::from_fn(|| answers.next_if(|(_, t)| *t == i).map(|(a, _)| a)).collect();
        let key = if by_id {
            TopicKey::Id(*id)
        } else {
            TopicKey::Name(name.as_deref().unwrap_or(""))
        };
        w.topic(key, partitions.len());
        for p in partitions {
            w.partition(p);
        }
        w.end_topic();
    }
    conn.send_fetch_response(w.finish()).await
}
