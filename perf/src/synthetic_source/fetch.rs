//! The synthetic source's Fetch: which batches each partition can give
//! (`plan_fetch`, within `partition_max_bytes` and `max_bytes`, at least
//! one batch as KIP-74 says), the long poll until the next batch becomes
//! available, and the response written with `writev` straight from the
//! dataset's buffers (the framing encoded by hand here, the record bytes
//! never copied in user space).

use std::io::{IoSlice, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use kafka_protocol::messages::FetchRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::protocol::StrBytes;

use super::{
    FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, NONE, OFFSET_OUT_OF_RANGE, POLL, Shared,
    UNKNOWN_TOPIC_OR_PARTITION,
};

/// Session epochs (KIP-227): 0 opens a session, -1 asks for none.
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

/// A connection's incremental fetch session (KIP-227), as Kafka's
/// `FetchSession` keeps it: each partition's last fetch offset and limit;
/// an incremental request names only the partitions that changed (and
/// those that leave), and its answer only the partitions with something
/// to say (records or an error).
pub(crate) struct FetchSession {
    id: i32,
    /// The epoch the next incremental request must carry.
    epoch: i32,
    partitions: BTreeMap<(StrBytes, i32), FetchPartition>,
}

impl FetchSession {
    /// The full request the session stands for.
    fn request(&self, template: &FetchRequest) -> FetchRequest {
        let mut request = template.clone();
        request.topics.clear();
        request.forgotten_topics_data.clear();
        for ((topic, _), p) in &self.partitions {
            if request.topics.last().is_none_or(|t| t.topic.0 != *topic) {
                let mut t = FetchTopic::default();
                t.topic = topic.clone().into();
                request.topics.push(t);
            }
            request.topics.last_mut().expect("pushed").partitions.push(p.clone());
        }
        request
    }

    fn update(&mut self, request: &FetchRequest) {
        for t in &request.forgotten_topics_data {
            for p in &t.partitions {
                self.partitions.remove(&(t.topic.0.clone(), *p));
            }
        }
        for t in &request.topics {
            for p in &t.partitions {
                self.partitions.insert((t.topic.0.clone(), p.partition), p.clone());
            }
        }
    }
}

/// Resolves a request against the connection's session: the full request
/// to plan, the session id to answer, whether the answer is incremental,
/// or the session error to answer with.
pub(super) fn resolve_session(
    shared: &Shared,
    version: i16,
    request: &FetchRequest,
    session: &mut Option<FetchSession>,
) -> Result<(Option<FetchRequest>, i32, bool), i16> {
    if !shared.options.fetch_sessions || version < 7 || request.session_epoch == FINAL_EPOCH {
        return Ok((None, 0, false));
    }
    if request.session_epoch == INITIAL_EPOCH {
        let id = session.as_ref().map_or(1, |s| s.id.wrapping_add(1).max(1));
        let mut new = FetchSession {
            id,
            epoch: 1,
            partitions: BTreeMap::new(),
        };
        new.update(request);
        *session = Some(new);
        return Ok((None, id, false));
    }
    let Some(s) = session.as_mut().filter(|s| s.id == request.session_id) else {
        return Err(FETCH_SESSION_ID_NOT_FOUND);
    };
    if s.epoch != request.session_epoch {
        return Err(INVALID_FETCH_SESSION_EPOCH);
    }
    s.epoch = s.epoch.wrapping_add(1).max(1);
    s.update(request);
    Ok((Some(s.request(request)), s.id, true))
}

/// What one partition's answer holds.
pub(super) struct PartPlan {
    pub(super) partition: i32,
    /// Index into the dataset (None: unknown partition).
    pub(super) index: Option<usize>,
    pub(super) error: i16,
    pub(super) high_watermark: i64,
    /// Byte range of the partition's buffer to send.
    pub(super) range: (usize, usize),
}

/// What one topic's answer holds.
pub(super) struct TopicPlan {
    pub(super) name: StrBytes,
    pub(super) parts: Vec<PartPlan>,
}

/// Chooses what to send; returns the plan and its record bytes.
pub(super) fn plan_fetch(shared: &Shared, request: &FetchRequest, now: Instant) -> (Vec<TopicPlan>, usize) {
    let mut total = 0usize;
    let max_bytes = request.max_bytes.max(0) as usize;
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let mut plan = PartPlan {
                partition: p.partition,
                index: None,
                error: NONE,
                high_watermark: -1,
                range: (0, 0),
            };
            let Some(i) = shared.partition_index(&t.topic.0, p.partition) else {
                plan.error = UNKNOWN_TOPIC_OR_PARTITION;
                parts.push(plan);
                continue;
            };
            plan.index = Some(i);
            let data = &shared.dataset.partitions[i];
            let available = shared.available(i, now);
            plan.high_watermark = match available {
                0 => 0,
                n => data.batches[n - 1].next_offset,
            };
            if p.fetch_offset < 0 || p.fetch_offset > plan.high_watermark {
                plan.error = OFFSET_OUT_OF_RANGE;
                parts.push(plan);
                continue;
            }
            let first = data.batch_index(p.fetch_offset);
            let limit = (p.partition_max_bytes.max(0) as usize).min(max_bytes.saturating_sub(total));
            let mut end = first;
            let mut bytes = 0usize;
            while end < available {
                let len = data.batches[end].len;
                // At least one batch when nothing was sent yet (KIP-74).
                if bytes + len > limit && !(bytes == 0 && total == 0) {
                    break;
                }
                bytes += len;
                end += 1;
            }
            if end > first {
                plan.range = (data.batches[first].pos, data.batches[end - 1].end_pos());
            }
            total += bytes;
            parts.push(plan);
        }
        topics.push(TopicPlan {
            name: t.topic.0.clone(),
            parts,
        });
    }
    (topics, total)
}

/// When the next batch not yet available of any requested partition becomes available.
fn next_availability(shared: &Shared, request: &FetchRequest, now: Instant) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    for t in &request.topics {
        for p in &t.partitions {
            let Some(i) = shared.partition_index(&t.topic.0, p.partition) else {
                continue;
            };
            let index = shared.dataset.partitions[i]
                .batch_index(p.fetch_offset.max(0))
                .max(shared.available(i, now));
            if let Some(at) = shared.available_at(i, index) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
    }
    next
}

pub(super) fn fetch(
    shared: &Shared,
    stream: &mut TcpStream,
    (version, correlation_id): (i16, i32),
    request: &FetchRequest,
    meta: &mut Vec<u8>,
    session: &mut Option<FetchSession>,
) -> anyhow::Result<()> {
    let (full, session_id, incremental) = match resolve_session(shared, version, request, session) {
        Ok(resolved) => resolved,
        Err(error) => {
            let header = ResponseHead { session_id: 0, error };
            write_fetch_response(shared, stream, (version, correlation_id), header, &[], 0, meta)?;
            return Ok(());
        }
    };
    let request = full.as_ref().unwrap_or(request);
    let arrived = Instant::now();
    shared.first_fetch.get_or_init(|| arrived);
    if shared.options.rate_bytes_per_s.is_some() {
        shared.t0.get_or_init(|| arrived);
    }
    shared.fetch_requests.fetch_add(1, Ordering::Relaxed);
    for t in &request.topics {
        for p in &t.partitions {
            if let Some(i) = shared.partition_index(&t.topic.0, p.partition) {
                shared.fetched_to[i].fetch_max(p.fetch_offset, Ordering::Relaxed);
            }
        }
    }
    if shared.caught_up.get().is_none() {
        let all = shared
            .fetched_to
            .iter()
            .zip(&shared.dataset.partitions)
            .all(|(f, p)| f.load(Ordering::Relaxed) >= p.end_offset());
        if all {
            shared.caught_up.get_or_init(|| arrived);
        }
    }
    let (mut plan, mut total) = plan_fetch(shared, request, arrived);
    let has_error = plan.iter().flat_map(|t| &t.parts).any(|p| p.error != NONE);
    let min_bytes = request.min_bytes.max(1) as usize;
    if total < min_bytes && !has_error && request.max_wait_ms > 0 {
        let deadline = arrived + Duration::from_millis(request.max_wait_ms as u64);
        loop {
            let now = Instant::now();
            if now >= deadline || shared.stop.load(Ordering::Acquire) {
                break;
            }
            // A batch due now (or already) is picked up by planning again right away.
            let wake = next_availability(shared, request, now)
                .unwrap_or(deadline)
                .min(deadline)
                .min(now + POLL);
            if wake > now {
                std::thread::sleep(wake - now);
            }
            (plan, total) = plan_fetch(shared, request, Instant::now());
            if total >= min_bytes {
                break;
            }
        }
    }
    if incremental {
        // Only the partitions with something to say.
        for t in &mut plan {
            t.parts.retain(|p| p.error != NONE || p.range.1 > p.range.0);
        }
        plan.retain(|t| !t.parts.is_empty());
    }
    let header = ResponseHead {
        session_id,
        error: NONE,
    };
    write_fetch_response(shared, stream, (version, correlation_id), header, &plan, total, meta)?;
    shared.record_bytes_sent.fetch_add(total as u64, Ordering::Relaxed);
    Ok(())
}

fn put_uvarint(buf: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn put_len(buf: &mut Vec<u8>, len: usize, flexible: bool) {
    if flexible {
        put_uvarint(buf, len as u32 + 1);
    } else {
        buf.extend_from_slice(&(len as i32).to_be_bytes());
    }
}

fn put_string(buf: &mut Vec<u8>, s: &str, flexible: bool) {
    if flexible {
        put_uvarint(buf, s.len() as u32 + 1);
    } else {
        buf.extend_from_slice(&(s.len() as i16).to_be_bytes());
    }
    buf.extend_from_slice(s.as_bytes());
}

/// A piece of the response: framing bytes from `meta`, or record bytes of a partition.
enum Piece {
    Meta(usize, usize),
    Records(usize, usize, usize),
}

/// A Fetch response's top-level error and session id (v7+).
pub(super) struct ResponseHead {
    pub(super) session_id: i32,
    pub(super) error: i16,
}

/// Encodes a Fetch response (v4–12) by hand and writes it with `writev`:
/// framing bytes from one small buffer, record bytes straight from the dataset.
pub(super) fn write_fetch_response(
    shared: &Shared,
    stream: &mut TcpStream,
    (version, correlation_id): (i16, i32),
    head: ResponseHead,
    topics: &[TopicPlan],
    record_bytes: usize,
    meta: &mut Vec<u8>,
) -> std::io::Result<()> {
    let flexible = version >= 12;
    meta.clear();
    let mut pieces = Vec::with_capacity(2 + 2 * topics.iter().map(|t| t.parts.len()).sum::<usize>());
    let mut piece_start = 0;
    meta.extend_from_slice(&[0; 4]); // frame size, patched below
    meta.extend_from_slice(&correlation_id.to_be_bytes());
    if flexible {
        put_uvarint(meta, 0); // response header tagged fields
    }
    meta.extend_from_slice(&0i32.to_be_bytes()); // throttle_time_ms
    if version >= 7 {
        meta.extend_from_slice(&head.error.to_be_bytes()); // error_code
        meta.extend_from_slice(&head.session_id.to_be_bytes()); // session_id
    }
    put_len(meta, topics.len(), flexible);
    for t in topics {
        put_string(meta, &t.name, flexible);
        put_len(meta, t.parts.len(), flexible);
        for p in &t.parts {
            meta.extend_from_slice(&p.partition.to_be_bytes());
            meta.extend_from_slice(&p.error.to_be_bytes());
            meta.extend_from_slice(&p.high_watermark.to_be_bytes());
            meta.extend_from_slice(&p.high_watermark.to_be_bytes()); // last_stable_offset
            if version >= 5 {
                let log_start: i64 = if p.index.is_some() { 0 } else { -1 };
                meta.extend_from_slice(&log_start.to_be_bytes());
            }
            // aborted_transactions: null
            if flexible {
                put_uvarint(meta, 0);
            } else {
                meta.extend_from_slice(&(-1i32).to_be_bytes());
            }
            if version >= 11 {
                meta.extend_from_slice(&(-1i32).to_be_bytes()); // preferred_read_replica
            }
            let (from, to) = p.range;
            put_len(meta, to - from, flexible);
            if to > from {
                pieces.push(Piece::Meta(piece_start, meta.len()));
                pieces.push(Piece::Records(p.index.expect("records of a known partition"), from, to));
                piece_start = meta.len();
            }
            if flexible {
                put_uvarint(meta, 0); // partition tagged fields
            }
        }
        if flexible {
            put_uvarint(meta, 0); // topic tagged fields
        }
    }
    if flexible {
        put_uvarint(meta, 0); // response tagged fields
    }
    pieces.push(Piece::Meta(piece_start, meta.len()));
    let frame = meta.len() - 4 + record_bytes;
    meta[..4].copy_from_slice(&(frame as i32).to_be_bytes());
    let meta = &meta[..];
    let mut slices: Vec<IoSlice<'_>> = pieces
        .iter()
        .map(|piece| match *piece {
            Piece::Meta(a, b) => IoSlice::new(&meta[a..b]),
            Piece::Records(i, a, b) => IoSlice::new(&shared.dataset.partitions[i].bytes[a..b]),
        })
        .filter(|s| !s.is_empty())
        .collect();
    write_all_vectored(stream, &mut slices)
}

fn write_all_vectored(stream: &mut TcpStream, slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    let mut bufs = slices;
    while !bufs.is_empty() {
        match stream.write_vectored(bufs) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
