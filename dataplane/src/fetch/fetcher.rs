//! One fetcher per (shard, source broker, mirror): owns a connection to the
//! broker and the partitions it leads, and runs the fetch loop — the hot
//! path. Each Fetch response is parsed as a stream: small fields from the
//! connection's buffer, each partition's records received straight into
//! that partition's log tail, validated in place, committed as whole
//! batches. Nothing in a batch is rewritten, nothing is decoded past the
//! batch header, and no lock is taken.
//!
//! A partition that needs new metadata (leader moved, fenced epoch, broker
//! unreachable) is handed back to the supervisor with the reason.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use event_listener::Event;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::{ClientError, Connection, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, end_offset_for_epoch, list_offset};
use ringmirror_protocol::error_codes;
use ringmirror_protocol::wire::{FetchResponseReader, FetchStep, TopicRef};
use ringmirror_storage::batch::{BatchErrorKind, BatchIter, Validation, validate_batches};
use ringmirror_storage::log::TopicPartition;

use super::append_ring::{AppendRing, RingKind};
use super::control::{Directive, Directives};
use super::divergence::{self, CheckOutcome, DIVERGENCE_ATTEMPTS_MAX, DIVERGENCE_RETRY_INTERVAL_MS, PendingCheck};
use super::events::{ShardEventSink, StateEvent, StopReason, TelemetryEvent};
use super::ingest::{AlignedBuffer, IngestMode};
use super::partition::MirrorPartition;
use super::stats::FetchStats;
use super::supervisor::{LiveSettings, MirrorSettings};
use crate::partition::destination_epoch;
use ringmirror_storage::clock::now_ms;

/// Fetch versions we speak: 4 (leader epochs in batches, LSO) to 16.
const FETCH_VERSION_MIN: i16 = 4;
const FETCH_VERSION_MAX: i16 = 16;
/// Before v13, topics are named; from v13 on, identified by topic id.
const FETCH_VERSION_TOPIC_IDS: i16 = 13;
/// Consecutive connection failures before the partitions go back for new metadata.
const CONNECT_ATTEMPTS_MAX: u32 = 3;
/// Consecutive errors of one partition (error codes of Fetch or
/// OffsetForLeaderEpoch, and refused batches, which count toward it)
/// before it goes back to the supervisor for new metadata and a backoff.
const PARTITION_ERRORS_MAX: u32 = 3;
/// Progress events per partition at most this often.
const PROGRESS_INTERVAL_MS: u64 = 1000;

/// Bytes of whole batches at the front of `received` that lie entirely
/// below `log_end`, and the base offset of a batch that straddles it.
fn leading_batches_below(received: &[u8], log_end: i64, max_batch_bytes: u32) -> (usize, Option<i64>) {
    let mut skip = 0;
    for (position, batch) in BatchIter::new(received, max_batch_bytes).map_while(Result::ok) {
        if batch.last_offset() < log_end {
            skip = position + batch.size_bytes();
            continue;
        }
        if batch.base_offset() < log_end {
            return (skip, Some(batch.base_offset()));
        }
        break;
    }
    (skip, None)
}

/// Fetch sessions (KIP-227) exist from this version on.
const FETCH_VERSION_SESSIONS: i16 = 7;
/// Session epochs: 0 asks for a new session, -1 means none.
const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

/// What was last sent for a partition in the current fetch session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SentPartition {
    fetch_offset: i64,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
    topic_id: [u8; 16],
    /// Resent when `mirror update` changes it.
    partition_max_bytes: i32,
}

/// A partition's place in a fetch session, kept in the partition itself
/// ([`MirrorPartition::session_sent`]) so that building a request compares
/// each partition's fetch state without a lookup: with 1 000 partitions a
/// map keyed by topic-partition cost a sixth of the shard's time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionSent {
    /// The [`ClientSession::generation`] it was sent in.
    generation: u64,
    sent: SentPartition,
}

/// Our side of an incremental fetch session with one broker (KIP-227):
/// after a full request that the broker answers with a session id, each
/// request carries only partitions whose fetch state changed, and names
/// the ones that left. A session error or a reconnect starts a new one.
#[derive(Debug, Default)]
struct ClientSession {
    /// 0: no session (the next request is a full one asking for one).
    id: i32,
    /// Epoch of the next incremental request.
    epoch: i32,
    /// Which session the partitions' [`SessionSent`] belong to: new (unique
    /// in the process) with every full request, so what a partition
    /// recorded for an earlier session, or another fetcher's, never counts.
    generation: u64,
    /// The partitions in the session and their topic ids: to name those
    /// that left this fetcher in `forgotten_topics_data`.
    members: HashMap<TopicPartition, [u8; 16]>,
}

/// Source of [`ClientSession::generation`]s; 0 is never handed out.
static SESSION_GENERATIONS: AtomicU64 = AtomicU64::new(1);

impl ClientSession {
    /// Takes in the response to a request sent with `sent_epoch`.
    fn answered(&mut self, sent_epoch: i32, session_id: i32) {
        match sent_epoch {
            INITIAL_EPOCH if session_id != 0 => {
                self.id = session_id;
                self.epoch = 1;
            }
            // The broker keeps no session: full requests go on.
            INITIAL_EPOCH | FINAL_EPOCH => self.id = 0,
            epoch => self.epoch = if epoch == i32::MAX { 1 } else { epoch + 1 },
        }
    }
}

/// Why a partition left its fetcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReturnReason {
    /// Leader or epoch may have changed: refresh metadata and place again.
    Metadata,
    /// The broker could not be reached.
    BrokerUnreachable,
    /// The shard is stopping.
    Stopping,
    /// The control plane removed it.
    Removed,
    /// The control plane ended its mirroring (failover).
    Ended,
    /// The control plane resumed it: place it again with fresh metadata.
    Resumed,
}

pub(crate) struct Returned {
    pub partition: MirrorPartition,
    pub reason: ReturnReason,
}

/// Partitions handed back to the supervisor (same shard, same thread).
pub(crate) type Returns = Rc<RefCell<Vec<Returned>>>;

/// What the supervisor holds of a running fetcher.
pub(crate) struct FetcherHandle {
    /// Partitions placed on this fetcher, picked up before its next fetch.
    pub inbox: Rc<RefCell<Vec<MirrorPartition>>>,
    /// False once the fetcher has returned everything and ended.
    pub alive: Rc<Cell<bool>>,
}

/// KIP-1279's MirrorFetcher: the fetch loop of one mirror from one source
/// broker on one shard (see the module doc).
pub(crate) struct MirrorFetcher {
    pub broker_id: i32,
    pub addr: String,
    pub settings: LiveSettings,
    pub inbox: Rc<RefCell<Vec<MirrorPartition>>>,
    pub alive: Rc<Cell<bool>>,
    pub returns: Returns,
    pub events: ShardEventSink,
    pub stop: Rc<Cell<bool>>,
    pub directives: Directives,
    /// Announces appends to long-polling readers on any shard.
    pub appended: Arc<Event>,
    /// Shared by the mirror's fetchers on this shard; drained by the supervisor.
    pub stats: Rc<RefCell<FetchStats>>,
    /// The shard's io_uring ring, when appends go through it.
    pub append_ring: Option<Rc<AppendRing>>,
    /// Notified when a directive is left or the shard stops: a round in
    /// progress is abandoned for it (see `unless_interrupted`).
    pub interrupt: Rc<Event>,
    /// The partitions this fetcher holds (taken from `inbox`, not given back).
    pub held: RefCell<HashSet<TopicPartition>>,
}

/// What the response said that must be acted on after it is fully read.
#[derive(Default)]
struct AfterResponse {
    out_of_range: Vec<usize>,
    give_back: Vec<usize>,
}

impl MirrorFetcher {
    fn give_back(&self, mut partition: MirrorPartition, reason: ReturnReason) {
        self.held.borrow_mut().remove(&partition.key.tp);
        // Its session stays here; should it come back, it is sent afresh.
        partition.session_sent = None;
        // Whoever takes it next (or closes it) finds its writes all in.
        self.settle_writes(&partition);
        self.returns.borrow_mut().push(Returned { partition, reason });
    }

    /// Completes the partition's segment writes in flight: before anything
    /// but an append touches its log (a cut, a divergence check, a close).
    fn settle_writes(&self, p: &MirrorPartition) {
        if let Some(ring) = &self.append_ring {
            ring.drain(&p.served);
        }
    }

    pub(crate) async fn run(self) {
        let mut partitions: Vec<MirrorPartition> = Vec::new();
        let mut conn: Option<Connection> = None;
        let mut connect_failures = 0u32;
        // Receive buffer for IngestMode::AlignedCopy (stays empty otherwise).
        let mut scratch = AlignedBuffer::default();
        let mut session = ClientSession::default();
        loop {
            // Read afresh each round: `mirror update` may have replaced them.
            let settings = self.settings.get();
            for p in self.inbox.borrow_mut().drain(..) {
                self.held.borrow_mut().insert(p.key.tp.clone());
                partitions.push(p);
            }
            self.apply_directives(&mut partitions);
            if self.stop.get() || partitions.is_empty() {
                // No await between this check and `alive = false`, so the
                // supervisor never places a partition on an ending fetcher.
                self.alive.set(false);
                for p in partitions.drain(..) {
                    self.give_back(p, ReturnReason::Stopping);
                }
                return;
            }
            let round = self.round(
                &settings,
                &mut conn,
                &mut connect_failures,
                &mut partitions,
                &mut scratch,
                &mut session,
            );
            if self.unless_interrupted(round).await.is_none() {
                // A request the source has not answered is abandoned with
                // its connection (a new session after it): the directive is
                // carried out at the top of the loop.
                conn = None;
            }
        }
    }

    /// Runs `work` unless the shard stops or an operator's directive for a
    /// partition held here (end, remove, pause) comes first: a source that
    /// stopped answering (a network partition, not a refused connection)
    /// would otherwise hold a failover for the I/O timeout.
    async fn unless_interrupted<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        futures_lite::future::or(async { Some(work.await) }, async {
            loop {
                let listener = self.interrupt.listen();
                if self.interrupted() {
                    return None;
                }
                listener.await;
            }
        })
        .await
    }

    fn interrupted(&self) -> bool {
        if self.stop.get() {
            return true;
        }
        let directives = self.directives.borrow();
        !directives.is_empty() && {
            let held = self.held.borrow();
            directives
                .iter()
                .any(|(tp, d)| matches!(d, Directive::End | Directive::Remove | Directive::Pause) && held.contains(tp))
        }
    }

    /// One round with the broker: connect if need be, converge and check
    /// the partitions that need it, fetch once and act on the answer.
    async fn round(
        &self,
        settings: &MirrorSettings,
        conn: &mut Option<Connection>,
        connect_failures: &mut u32,
        partitions: &mut Vec<MirrorPartition>,
        scratch: &mut AlignedBuffer,
        session: &mut ClientSession,
    ) {
        let c = match conn {
            Some(c) => c,
            None => match Connection::connect(&self.addr, settings.connection.clone()).await {
                Ok(c) => {
                    *connect_failures = 0;
                    // A session lives with its connection.
                    *session = ClientSession::default();
                    conn.insert(c)
                }
                Err(e) => {
                    *connect_failures += 1;
                    tracing::warn!(broker = self.broker_id, addr = self.addr, error = %e, "cannot connect to source broker");
                    if *connect_failures >= CONNECT_ATTEMPTS_MAX {
                        for p in partitions.drain(..) {
                            self.give_back(p, ReturnReason::BrokerUnreachable);
                        }
                        return;
                    }
                    glommio::timer::sleep(settings.backoff(*connect_failures)).await;
                    return;
                }
            },
        };
        for p in partitions
            .iter()
            .filter(|p| p.needs_truncation_check || p.divergence_check.is_some())
        {
            self.settle_writes(p);
        }
        if let Err(e) = self.converge_new_partitions(c, partitions).await {
            tracing::warn!(broker = self.broker_id, error = %e, "truncation check failed; reconnecting");
            *conn = None;
            return;
        }
        if let Err(e) = self.check_divergences(c, partitions).await {
            tracing::warn!(broker = self.broker_id, error = %e, "divergence check failed; reconnecting");
            *conn = None;
            return;
        }
        if !partitions.iter().any(MirrorPartition::fetchable) {
            // Nothing to fetch until told to go on; wait without spinning.
            glommio::timer::sleep(Duration::from_millis(settings.fetch_max_wait_ms)).await;
            return;
        }
        match self.fetch_once(c, partitions, scratch, session).await {
            Ok(after) => {
                if let Err(e) = self.act_after_response(c, partitions, after).await {
                    tracing::warn!(broker = self.broker_id, error = %e, "follow-up request failed; reconnecting");
                    *conn = None;
                }
            }
            Err(e) => {
                tracing::warn!(broker = self.broker_id, addr = self.addr, error = %e, "fetch failed; reconnecting");
                *conn = None;
                *connect_failures += 1;
                glommio::timer::sleep(settings.backoff(*connect_failures)).await;
            }
        }
    }

    /// Carries out what the supervisor asked for the partitions held here.
    fn apply_directives(&self, partitions: &mut Vec<MirrorPartition>) {
        let mut directives = self.directives.borrow_mut();
        if directives.is_empty() {
            return;
        }
        let mut i = 0;
        while i < partitions.len() {
            match directives.remove(partitions[i].tp()) {
                None => i += 1,
                Some(Directive::Pause) => {
                    partitions[i].paused = true;
                    self.events.state(StateEvent::Paused {
                        mirror: partitions[i].key.mirror.clone(),
                        tp: partitions[i].key.tp.clone(),
                    });
                    i += 1;
                }
                Some(Directive::CheckDivergence) => {
                    partitions[i].divergence_check = Some(PendingCheck::NOW);
                    i += 1;
                }
                Some(Directive::Resume) => {
                    let p = partitions.swap_remove(i);
                    self.give_back(p, ReturnReason::Resumed);
                }
                Some(Directive::Remove) => {
                    let p = partitions.swap_remove(i);
                    self.give_back(p, ReturnReason::Removed);
                }
                Some(Directive::End) => {
                    let p = partitions.swap_remove(i);
                    self.give_back(p, ReturnReason::Ended);
                }
            }
        }
    }

    /// Replication truncation for partitions just placed here: ask the
    /// source where our latest epoch ends and cut anything past it.
    async fn converge_new_partitions(
        &self,
        c: &mut Connection,
        partitions: &mut Vec<MirrorPartition>,
    ) -> Result<(), ClientError> {
        let mut i = 0;
        while i < partitions.len() {
            let p = &mut partitions[i];
            if !p.needs_truncation_check {
                i += 1;
                continue;
            }
            let Some(latest) = p.log().epoch_cache().latest() else {
                p.needs_truncation_check = false;
                i += 1;
                continue;
            };
            let answer = match end_offset_for_epoch(c, p.tp(), p.fetch_epoch, latest.epoch).await {
                Err(ClientError::NoCommonVersion { .. }) => {
                    tracing::info!(partition = %p.key, "source does not answer OffsetForLeaderEpoch; skipping the truncation check");
                    Ok((-1, -1))
                }
                other => other?,
            };
            match answer {
                Ok((epoch, end_offset)) => {
                    p.needs_truncation_check = false;
                    if epoch >= 0 && end_offset >= 0 {
                        let (_, ours) = p.log().end_offset_for_epoch(epoch);
                        let target = end_offset.min(if ours >= 0 { ours } else { end_offset });
                        self.truncate_diverged(p, target, "source epoch ends earlier");
                    }
                    i += 1;
                }
                Err(code) if error_codes::needs_metadata(code) => {
                    let p = partitions.swap_remove(i);
                    self.give_back(p, ReturnReason::Metadata);
                }
                Err(code) => {
                    // Not fetched until converged; after a few tries, back
                    // to the supervisor for fresh metadata and a backoff.
                    p.failures += 1;
                    tracing::warn!(partition = %p.key, code, failures = p.failures, "OffsetForLeaderEpoch failed; will retry");
                    if p.failures >= PARTITION_ERRORS_MAX {
                        let p = partitions.swap_remove(i);
                        self.give_back(p, ReturnReason::Metadata);
                    } else {
                        i += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Cuts the log to `target` to converge with the source; the bytes of
    /// batches cut (0 when nothing was).
    fn truncate(&self, p: &mut MirrorPartition, target: i64, reason: &'static str) -> u64 {
        self.settle_writes(p);
        if target >= p.log().log_end_offset() {
            return 0;
        }
        tracing::info!(partition = %p.key, from = p.log().log_end_offset(), to = target, reason, "truncating to converge with the source");
        let size_before = p.log().size_bytes();
        let result = p.log_mut().truncate_to(target);
        match result {
            Ok(()) => {
                // The log refills to ends it reported before: report them again.
                p.last_progress_offset = -1;
                self.events.state(StateEvent::Truncated {
                    mirror: p.key.mirror.clone(),
                    tp: p.key.tp.clone(),
                    to_offset: p.log().log_end_offset(),
                    reason,
                });
                size_before.saturating_sub(p.log().size_bytes())
            }
            Err(e) => {
                self.stop_partition(p, StopReason::LogFailed { error: e.to_string() });
                0
            }
        }
    }

    /// Truncates at a source's answer that it no longer holds what we
    /// copied from `first_differing_offset` on. Everything we hold was
    /// below the source's high watermark when fetched (committed there: a
    /// consumer Fetch reads with `FetchIsolation.HIGH_WATERMARK`, see
    /// `kafka.server.ReplicaManager#readFromLog`), so a cut is a divergence
    /// of histories, reported loudly.
    fn truncate_diverged(&self, p: &mut MirrorPartition, first_differing_offset: i64, reason: &'static str) {
        let from = p.log().log_end_offset();
        let bytes_lost = self.truncate(p, first_differing_offset, reason);
        if bytes_lost == 0 {
            return;
        }
        let truncated_to = p.log().log_end_offset();
        tracing::warn!(
            partition = %p.key,
            first_differing_offset,
            truncated_to,
            log_end_offset_before = from,
            bytes_lost,
            reason,
            "the source rewrote history we had mirrored; mirroring its new history"
        );
        self.events.state(StateEvent::Diverged {
            mirror: p.key.mirror.clone(),
            tp: p.key.tp.clone(),
            first_differing_offset,
            truncated_to,
            bytes_lost,
        });
    }

    fn stop_partition(&self, p: &mut MirrorPartition, reason: StopReason) {
        tracing::error!(partition = %p.key, ?reason, "partition stops appending");
        p.stopped = true;
        self.events.state(StateEvent::Stopped {
            mirror: p.key.mirror.clone(),
            tp: p.key.tp.clone(),
            reason,
        });
    }

    /// Runs the divergence checks that are due (see [`super::divergence`]).
    async fn check_divergences(
        &self,
        c: &mut Connection,
        partitions: &mut Vec<MirrorPartition>,
    ) -> Result<(), ClientError> {
        let mut i = 0;
        while i < partitions.len() {
            let now = now_ms();
            let p = &mut partitions[i];
            let Some(pending) = p
                .divergence_check
                .filter(|c| c.next_attempt_ms <= now && !p.needs_truncation_check)
            else {
                i += 1;
                continue;
            };
            let outcome = match divergence::check_partition(c, p).await {
                Ok(outcome) => outcome,
                Err(e) => {
                    p.divergence_check = (pending.attempts + 1 < DIVERGENCE_ATTEMPTS_MAX).then_some(PendingCheck {
                        attempts: pending.attempts + 1,
                        next_attempt_ms: now + DIVERGENCE_RETRY_INTERVAL_MS,
                    });
                    return Err(e);
                }
            };
            match outcome {
                CheckOutcome::NoDifference => p.divergence_check = None,
                CheckOutcome::Diverged { first_differing_offset } => {
                    p.divergence_check = None;
                    self.truncate_diverged(p, first_differing_offset, "batches differ from the source's");
                }
                CheckOutcome::NeedsMetadata => {
                    let p = partitions.swap_remove(i);
                    self.give_back(p, ReturnReason::Metadata);
                    continue;
                }
                CheckOutcome::Transient(reason) if pending.attempts + 1 >= DIVERGENCE_ATTEMPTS_MAX => {
                    tracing::warn!(partition = %p.key, reason, attempts = pending.attempts + 1, "divergence check given up; nothing truncated");
                    p.divergence_check = None;
                }
                CheckOutcome::Transient(reason) => {
                    tracing::debug!(partition = %p.key, reason, "divergence check could not complete; will retry");
                    p.divergence_check = Some(PendingCheck {
                        attempts: pending.attempts + 1,
                        next_attempt_ms: now + DIVERGENCE_RETRY_INTERVAL_MS,
                    });
                }
            }
            i += 1;
        }
        Ok(())
    }

    fn build_request(
        &self,
        version: i16,
        partitions: &mut [MirrorPartition],
        session: &mut ClientSession,
    ) -> FetchRequest {
        let s = self.settings.get();
        let mut request = FetchRequest::default();
        request.replica_id = (-1).into();
        request.max_wait_ms = s.fetch_max_wait_ms as i32;
        request.min_bytes = s.fetch_min_bytes;
        request.max_bytes = s.fetch_max_bytes;
        request.isolation_level = 0;
        let sessions = version >= FETCH_VERSION_SESSIONS;
        let incremental = sessions && session.id != 0;
        request.session_id = if incremental { session.id } else { 0 };
        request.session_epoch = match (sessions, incremental) {
            (false, _) => FINAL_EPOCH,
            (true, false) => INITIAL_EPOCH,
            (true, true) => session.epoch,
        };
        if !incremental {
            session.members.clear();
            session.generation = SESSION_GENERATIONS.fetch_add(1, Ordering::Relaxed);
        }
        let generation = session.generation;
        let by_id = version >= FETCH_VERSION_TOPIC_IDS;
        let topic_of = |topics: &mut Vec<FetchTopic>, tp: &TopicPartition, topic_id: [u8; 16]| -> usize {
            let same = |t: &FetchTopic| {
                if by_id {
                    *t.topic_id.as_bytes() == topic_id
                } else {
                    t.topic.0.as_str() == tp.topic
                }
            };
            if let Some(i) = topics.iter().position(same) {
                return i;
            }
            let mut t = FetchTopic::default();
            t.topic = TopicName(StrBytes::from_string(tp.topic.clone()));
            t.topic_id = uuid::Uuid::from_bytes(topic_id);
            topics.push(t);
            topics.len() - 1
        };
        let forget = |forgotten: &mut Vec<ForgottenTopic>, tp: &TopicPartition, topic_id: [u8; 16]| {
            let same = |t: &ForgottenTopic| {
                if by_id {
                    *t.topic_id.as_bytes() == topic_id
                } else {
                    t.topic.0.as_str() == tp.topic
                }
            };
            let i = match forgotten.iter().position(same) {
                Some(i) => i,
                None => {
                    let mut t = ForgottenTopic::default();
                    t.topic = TopicName(StrBytes::from_string(tp.topic.clone()));
                    t.topic_id = uuid::Uuid::from_bytes(topic_id);
                    forgotten.push(t);
                    forgotten.len() - 1
                }
            };
            forgotten[i].partitions.push(tp.partition);
        };
        // Members of the session still held here and fetchable.
        let mut staying = 0usize;
        for p in partitions.iter_mut() {
            let member = p.session_sent.filter(|s| s.generation == generation);
            if !p.fetchable() {
                // Paused or stopped: leaves the session until fetched again.
                if member.is_some() {
                    p.session_sent = None;
                    session.members.remove(&p.key.tp);
                    forget(&mut request.forgotten_topics_data, &p.key.tp, p.key.topic_id);
                }
                continue;
            }
            let sent = SentPartition {
                fetch_offset: p.log().append_end_offset(),
                current_leader_epoch: p.fetch_epoch,
                last_fetched_epoch: p.log().append_last_epoch().unwrap_or(-1),
                topic_id: p.key.topic_id,
                partition_max_bytes: s.fetch_partition_max_bytes,
            };
            staying += 1;
            // In a session only what changed is sent; the source keeps the rest.
            match member {
                Some(last) if last.sent == sent => continue,
                Some(_) => {}
                None => {
                    session.members.insert(p.key.tp.clone(), p.key.topic_id);
                }
            }
            p.session_sent = Some(SessionSent { generation, sent });
            let mut fp = FetchPartition::default();
            fp.partition = p.key.tp.partition;
            fp.current_leader_epoch = sent.current_leader_epoch;
            fp.fetch_offset = sent.fetch_offset;
            fp.last_fetched_epoch = sent.last_fetched_epoch;
            fp.log_start_offset = -1;
            fp.partition_max_bytes = sent.partition_max_bytes;
            let i = topic_of(&mut request.topics, &p.key.tp, p.key.topic_id);
            request.topics[i].partitions.push(fp);
        }
        if staying < session.members.len() {
            // Some members were handed back to the supervisor: they leave too.
            let here: HashSet<&TopicPartition> = partitions
                .iter()
                .filter(|p| p.session_sent.is_some_and(|s| s.generation == generation))
                .map(|p| &p.key.tp)
                .collect();
            let forgotten = &mut request.forgotten_topics_data;
            session.members.retain(|tp, topic_id| {
                let stays = here.contains(tp);
                if !stays {
                    forget(forgotten, tp, *topic_id);
                }
                stays
            });
        }
        request
    }

    /// One Fetch round trip, ingesting as the response streams in.
    async fn fetch_once(
        &self,
        c: &mut Connection,
        partitions: &mut [MirrorPartition],
        scratch: &mut AlignedBuffer,
        session: &mut ClientSession,
    ) -> Result<AfterResponse, ClientError> {
        let mut version = c.version_for::<FetchRequest>(FETCH_VERSION_MIN, FETCH_VERSION_MAX)?;
        if partitions.iter().any(|p| p.key.topic_id == [0; 16]) {
            version = version.min(FETCH_VERSION_TOPIC_IDS - 1);
        }
        let request = self.build_request(version, partitions, session);
        let sent_at = std::time::Instant::now();
        let correlation_id = c.send(&request, version).await?;
        let frame_len = c.read_frame_len().await?;
        let decode = |reason: String| ClientError::Decode {
            addr: self.addr.clone(),
            api: "Fetch",
            version,
            reason,
        };
        let mut reader = FetchResponseReader::new(version, frame_len).map_err(|e| decode(e.to_string()))?;
        let mut after = AfterResponse::default();
        let mut current: Option<usize> = None;
        loop {
            let (consumed, step) = reader.advance(c.buffered()).map_err(|e| decode(e.to_string()))?;
            c.consume(consumed);
            match step {
                FetchStep::NeedMore => {
                    let unread = reader.remaining().saturating_sub(c.buffered().len());
                    if unread == 0 {
                        return Err(decode("response ended early".into()));
                    }
                    c.fill(unread).await?;
                }
                FetchStep::Header => {
                    let h = reader.header();
                    if h.correlation_id != correlation_id {
                        return Err(ClientError::CorrelationMismatch {
                            addr: self.addr.clone(),
                            expected: correlation_id,
                            got: h.correlation_id,
                        });
                    }
                    if h.error_code != error_codes::NONE {
                        self.stats.borrow_mut().record_error(h.error_code);
                        // Session errors included: the reconnect starts afresh.
                        return Err(ClientError::ErrorCode {
                            addr: self.addr.clone(),
                            api: "Fetch",
                            code: h.error_code,
                        });
                    }
                    session.answered(request.session_epoch, h.session_id);
                }
                FetchStep::Topic => {}
                FetchStep::Records { records_len } => {
                    let fields = reader.partition();
                    let index = {
                        let topic = reader.topic();
                        partitions.iter().position(|p| {
                            p.key.tp.partition == fields.partition_index
                                && match topic {
                                    TopicRef::Name(name) => p.key.tp.topic == name,
                                    TopicRef::Id(id) => p.key.topic_id == id,
                                }
                        })
                    };
                    current = index;
                    match index {
                        Some(i)
                            if fields.error_code == error_codes::NONE
                                && partitions[i].fetchable()
                                && records_len > 0 =>
                        {
                            self.ingest(c, &mut partitions[i], records_len, scratch).await?;
                        }
                        _ => c.skip(records_len).await?,
                    }
                    reader.records_consumed();
                }
                FetchStep::PartitionEnd => {
                    if let Some(i) = current.take() {
                        self.on_partition_end(&reader, &mut partitions[i], i, &mut after);
                    }
                }
                FetchStep::Done => {
                    self.stats.borrow_mut().record_fetch(sent_at.elapsed());
                    return Ok(after);
                }
            }
        }
    }

    /// Receives `len` record bytes into the partition's log tail, validates
    /// them in place and commits the whole, valid batches.
    // In mmap mode the log stays borrowed while its tail fills: a reader's
    // job finds it busy and runs again shortly (see partition::registry).
    #[allow(clippy::await_holding_refcell_ref)]
    async fn ingest(
        &self,
        c: &mut Connection,
        p: &mut MirrorPartition,
        len: usize,
        scratch: &mut AlignedBuffer,
    ) -> Result<(), ClientError> {
        let now = now_ms();
        self.check_destination_epoch(p);
        let ingest = self.settings.get().ingest;
        // A ring of another kind than `mirror update` asked for stays unused
        // until the fetcher is made anew.
        let ring = self
            .append_ring
            .as_deref()
            .filter(|r| RingKind::of(ingest) == Some(r.kind()));
        if ring.is_none() {
            // `mirror update` may have switched away from the ring.
            self.settle_writes(p);
        }
        match ingest {
            IngestMode::Mmap => {
                let mut log = p.log_mut();
                let tail = match log.tail_mut(len, now) {
                    Ok(tail) => tail,
                    Err(e) => {
                        drop(log);
                        c.skip(len).await?;
                        self.stop_partition(p, StopReason::LogFailed { error: e.to_string() });
                        return Ok(());
                    }
                };
                c.read_exact_into(tail).await?;
            }
            IngestMode::AlignedCopy | IngestMode::Uring | IngestMode::UringSqpoll => {
                c.read_exact_into(scratch.get_mut(len)).await?
            }
        }
        // The batches go after the writes in flight, if any.
        let (log_end, max_batch_bytes, last_epoch, empty) = {
            let log = p.log();
            (
                log.append_end_offset(),
                log.config().max_batch_bytes,
                log.append_last_epoch(),
                log.log_start_offset() == log.append_end_offset(),
            )
        };
        let in_place = ingest == IngestMode::Mmap;
        let mut mmap_log = in_place.then(|| p.log_mut());
        let received: &mut [u8] = match &mut mmap_log {
            Some(log) => log.tail_mut(len, now).expect("the region just received into"),
            None => scratch.get_mut(len),
        };
        // A batch may start below the fetch offset: drop whole batches
        // below it. One that straddles it (the source's log start inside a
        // batch) starts an empty log at its base; on a non-empty log it
        // means the logs may have diverged.
        let (skip, straddling_base) = leading_batches_below(received, log_end, max_batch_bytes);
        // Nothing above the destination epoch is appended: readers are told
        // that epoch, and it must stay above every batch they may read.
        let destination_epoch = p.served.leader_epoch.get();
        let epoch_limit = if p.fetch_epoch >= 0 {
            p.fetch_epoch.min(destination_epoch)
        } else {
            destination_epoch
        };
        let validation = |next_offset| Validation {
            next_offset,
            max_batch_bytes,
            fetch_epoch: (epoch_limit >= 0).then_some(epoch_limit),
            last_epoch,
        };
        let (range, committed) = match straddling_base {
            None => {
                let range = validate_batches(&received[skip..len], &validation(log_end));
                if skip > 0 && in_place {
                    received.copy_within(skip..skip + range.valid_bytes, 0);
                }
                let committed = match &mut mmap_log {
                    Some(log) => log.commit_tail(range.valid_bytes, len, now).map(drop),
                    None => match ring {
                        Some(ring) => ring.append(&p.served, scratch, skip..skip + range.valid_bytes, now),
                        None => p
                            .log_mut()
                            .append(&scratch.get_mut(len)[skip..skip + range.valid_bytes], now)
                            .map(drop),
                    },
                };
                drop(mmap_log);
                (range, committed)
            }
            Some(base) if empty => {
                // Rare: the bytes move out of the tail before the log restarts.
                let batches = received[skip..len].to_vec();
                if let Some(log) = &mut mmap_log {
                    log.commit_tail(0, len, now).ok();
                }
                drop(mmap_log);
                tracing::info!(partition = %p.key, from = log_end, to = base, "first batch starts below the fetch offset; starting the log at its base");
                let range = validate_batches(&batches, &validation(base));
                let mut log = p.log_mut();
                let committed = log
                    .truncate_fully_and_start_at(base)
                    .and_then(|()| log.append(&batches[..range.valid_bytes], now))
                    .map(drop);
                (range, committed)
            }
            Some(base) => {
                if let Some(log) = &mut mmap_log {
                    log.commit_tail(0, len, now).ok();
                }
                drop(mmap_log);
                tracing::warn!(partition = %p.key, base, log_end, "batch straddles our log end; checking for divergence");
                p.needs_truncation_check = true;
                return Ok(());
            }
        };
        if let Err(e) = committed {
            self.stop_partition(p, StopReason::LogFailed { error: e.to_string() });
            return Ok(());
        }
        if range.batches > 0 {
            p.appended_bytes += range.valid_bytes as u64;
            p.appended_batches += range.batches as u64;
            p.failures = 0;
            self.appended.notify(usize::MAX);
        }
        if let Some(error) = range.error {
            match error.kind {
                BatchErrorKind::EpochAboveFetchEpoch { epoch, fetch_epoch } => self.stop_partition(
                    p,
                    StopReason::EpochExceeded {
                        batch_epoch: epoch,
                        fetch_epoch,
                    },
                ),
                BatchErrorKind::EpochDecreased { .. } => {
                    tracing::warn!(partition = %p.key, %error, "source epochs went backwards; checking for divergence");
                    p.needs_truncation_check = true;
                }
                _ => {
                    // A corrupt batch is never appended; the next fetch asks
                    // for the same offset again.
                    p.failures += 1;
                    tracing::warn!(partition = %p.key, %error, failures = p.failures, "refusing a bad batch from the source; will fetch it again");
                    // Telemetry: counted where it arrives, and in the log here.
                    let _ = self.events.telemetry(TelemetryEvent::BadBatch {
                        mirror: p.key.mirror.clone(),
                        tp: p.key.tp.clone(),
                        offset: p.log().log_end_offset(),
                        error: error.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The proactive epoch trigger: once the source's epoch (from metadata
    /// or the batches appended) comes within the threshold of the
    /// destination epoch, the control plane is told once per destination
    /// epoch; appends go on meanwhile.
    fn check_destination_epoch(&self, p: &mut MirrorPartition) {
        let destination_epoch = p.served.leader_epoch.get();
        let latest = p.log().epoch_cache().latest().map_or(-1, |e| e.epoch);
        let source_epoch = p.fetch_epoch.max(latest);
        if destination_epoch::bump_needed(source_epoch, destination_epoch).is_some()
            && p.epoch_bump_reported_at != destination_epoch
        {
            p.epoch_bump_reported_at = destination_epoch;
            self.events.state(StateEvent::EpochBumpDue {
                mirror: p.key.mirror.clone(),
                tp: p.key.tp.clone(),
                source_epoch,
                destination_epoch,
            });
        }
    }

    /// Reports progress at most once per interval, and always when the
    /// partition has just caught up with the source. Both reports are
    /// latest values: one dropped (a full telemetry queue) is sent again
    /// after the next response.
    fn report_progress(&self, p: &mut MirrorPartition) {
        let checkpoint = (p.log().recovery_point(), p.log().log_start_offset());
        if checkpoint != p.last_checkpoint {
            let sent = self.events.telemetry(TelemetryEvent::Checkpoint {
                mirror: p.key.mirror.clone(),
                tp: p.key.tp.clone(),
                recovery_point: checkpoint.0,
                log_start_offset: checkpoint.1,
            });
            if sent.is_ok() {
                p.last_checkpoint = checkpoint;
            }
        }
        let now = now_ms();
        let end = p.log().log_end_offset();
        let caught_up = end >= p.high_watermark && end != p.last_progress_offset;
        if caught_up
            || (end != p.last_progress_offset && now.saturating_sub(p.last_progress_ms) >= PROGRESS_INTERVAL_MS)
        {
            let sent = self.events.telemetry(TelemetryEvent::Progress {
                mirror: p.key.mirror.clone(),
                tp: p.key.tp.clone(),
                log_end_offset: end,
                high_watermark: p.high_watermark,
                appended_bytes: p.appended_bytes,
                appended_batches: p.appended_batches,
            });
            if sent.is_ok() {
                p.last_progress_ms = now;
                p.last_progress_offset = end;
            }
        }
    }

    /// Acts on a partition's response fields once its records are in.
    fn on_partition_end(
        &self,
        reader: &FetchResponseReader,
        p: &mut MirrorPartition,
        index: usize,
        after: &mut AfterResponse,
    ) {
        let fields = reader.partition();
        if fields.error_code != error_codes::NONE {
            self.stats.borrow_mut().record_error(fields.error_code);
        }
        match fields.error_code {
            error_codes::NONE => {
                p.high_watermark = fields.high_watermark;
                if fields.log_start_offset > p.log().log_start_offset() {
                    // Retention at the source: follow its log start.
                    self.settle_writes(p);
                    let result = p.log_mut().advance_log_start(fields.log_start_offset);
                    if let Err(e) = result {
                        self.stop_partition(p, StopReason::LogFailed { error: e.to_string() });
                    }
                }
                if let Some((epoch, end_offset)) = fields.diverging_epoch {
                    let (_, ours) = p.log().end_offset_for_epoch(epoch);
                    let target = if ours >= 0 { end_offset.min(ours) } else { end_offset };
                    self.truncate_diverged(p, target, "source reported a diverging epoch");
                }
                // Caught up: nothing more to receive that a write could
                // overlap with, so make the end visible (and reported) now.
                if p.log().writes_in_flight() > 0 && p.log().append_end_offset() >= p.high_watermark {
                    self.settle_writes(p);
                }
                self.report_progress(p);
            }
            error_codes::OFFSET_OUT_OF_RANGE => after.out_of_range.push(index),
            code if error_codes::needs_metadata(code) => {
                tracing::info!(partition = %p.key, code, "source says leader or epoch changed");
                after.give_back.push(index);
            }
            code => {
                p.failures += 1;
                tracing::warn!(partition = %p.key, code, failures = p.failures, "fetch error for partition");
                if p.failures >= PARTITION_ERRORS_MAX {
                    after.give_back.push(index);
                }
            }
        }
    }

    /// Handles what needs more requests: out-of-range partitions (retention
    /// passed us, or the source was truncated below us), then partitions
    /// that go back for metadata.
    async fn act_after_response(
        &self,
        c: &mut Connection,
        partitions: &mut Vec<MirrorPartition>,
        after: AfterResponse,
    ) -> Result<(), ClientError> {
        let mut give_back = after.give_back;
        for &i in &after.out_of_range {
            let p = &mut partitions[i];
            self.settle_writes(p);
            let earliest = list_offset(c, p.tp(), p.fetch_epoch, EARLIEST_TIMESTAMP).await?;
            let latest = list_offset(c, p.tp(), p.fetch_epoch, LATEST_TIMESTAMP).await?;
            match (earliest, latest) {
                (Ok(start), Ok(end)) => {
                    let ours = p.log().log_end_offset();
                    if ours < start {
                        tracing::info!(partition = %p.key, ours, source_start = start, "behind the source's log start; restarting there");
                        let result = p.log_mut().truncate_fully_and_start_at(start);
                        match result {
                            Ok(()) => self.events.state(StateEvent::Truncated {
                                mirror: p.key.mirror.clone(),
                                tp: p.key.tp.clone(),
                                to_offset: start,
                                reason: "behind the source's log start",
                            }),
                            Err(e) => self.stop_partition(p, StopReason::LogFailed { error: e.to_string() }),
                        }
                    } else if ours > end {
                        self.truncate_diverged(p, end, "ahead of the source's log end");
                    }
                }
                (earliest, latest) => {
                    let code = earliest.err().or(latest.err()).unwrap_or(error_codes::NONE);
                    if error_codes::needs_metadata(code) {
                        give_back.push(i);
                    } else {
                        tracing::warn!(partition = %p.key, code, "ListOffsets failed after OFFSET_OUT_OF_RANGE");
                    }
                }
            }
        }
        give_back.sort_unstable();
        give_back.dedup();
        for i in give_back.into_iter().rev() {
            let p = partitions.swap_remove(i);
            self.give_back(p, ReturnReason::Metadata);
        }
        Ok(())
    }
}
