//! Per shard and mirror: keeps the source's metadata, places each partition
//! on the fetcher of its leader broker (starting fetchers as needed), takes
//! back partitions that need new metadata, and places them again after a
//! jittered exponential backoff. Control logic, off the hot path.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use event_listener::Event;

use crate::client::{Connection, ConnectionOptions, jittered_backoff};
use crate::partition::{LastMirrorEpoch, Registry};

use super::append_ring::{AppendRing, RingKind};
use super::control::{Directive, Directives, MirrorCommand, MirrorInbox};
use super::divergence::{PendingCheck, VerifyOutcome, VerifySource, verify_partition};
use super::events::{ShardEventSink, StateEvent, TelemetryEvent};
use super::fetcher::{FetcherHandle, MirrorFetcher, ReturnReason, Returned, Returns};
use super::ingest::IngestMode;
use super::metadata::{SourceMetadata, fetch_source_metadata};
use super::partition::MirrorPartition;
use super::stats::FetchStats;
use ringmirror_storage::clock::now_ms;

/// The event for a partition whose mirroring just ended at `leader_epoch`;
/// `mirrored_epoch` is the destination epoch it had while mirroring.
pub(crate) fn mirror_ended(
    registry: &Registry,
    mirror: String,
    tp: ringmirror_storage::log::TopicPartition,
    ended: &ringmirror_storage::log::EndedMirroring,
    leader_epoch: i32,
    mirrored_epoch: i32,
) -> StateEvent {
    // The last source epoch mirrored: every mirrored batch is at or below
    // the destination epoch of the mirroring, every closing marker above it
    // (also those of an attempt a crash interrupted).
    let last_mirror_epoch = registry.get(&tp).map_or(LastMirrorEpoch::NONE, |served| {
        let log = served.log.borrow();
        log.epoch_cache()
            .entries()
            .iter()
            .rev()
            .find(|e| e.epoch <= mirrored_epoch)
            .map_or(LastMirrorEpoch::NONE, |e| LastMirrorEpoch::new(e.epoch))
    });
    tracing::info!(mirror, %tp, ?ended, leader_epoch, %last_mirror_epoch, "mirroring ended; the partition is writable");
    StateEvent::MirrorEnded {
        mirror,
        tp,
        log_end_offset: ended.log_end_offset,
        leader_epoch,
        last_mirror_epoch,
        aborted_transactions: ended.aborted_transactions,
    }
}

/// How often fetch statistics go to the control plane.
const STATS_INTERVAL_MS: u64 = 1000;

/// How often an idle supervisor looks for commands and returned partitions.
const IDLE_POLL_MS: u64 = 20;

/// One mirror's settings as the data plane needs them.
#[derive(Debug, Clone)]
pub struct MirrorSettings {
    pub name: String,
    pub bootstrap_servers: Vec<String>,
    /// `fetch.max.bytes`
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes`
    pub fetch_partition_max_bytes: i32,
    /// `fetch.wait.max.ms`
    pub fetch_max_wait_ms: u64,
    /// `fetch.min.bytes`
    pub fetch_min_bytes: i32,
    /// `mirror.metadata.refresh.interval.ms`
    pub metadata_refresh_ms: u64,
    pub retry_backoff_ms: u64,
    pub retry_backoff_max_ms: u64,
    pub connection: ConnectionOptions,
    /// How record bytes get from the socket into the log.
    pub ingest: IngestMode,
}

impl Default for MirrorSettings {
    fn default() -> Self {
        Self {
            name: "mirror".into(),
            bootstrap_servers: Vec::new(),
            fetch_max_bytes: 50 * 1024 * 1024,
            fetch_partition_max_bytes: 1024 * 1024,
            fetch_max_wait_ms: 500,
            fetch_min_bytes: 1,
            metadata_refresh_ms: 30_000,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 10_000,
            connection: ConnectionOptions::default(),
            ingest: IngestMode::default(),
        }
    }
}

impl MirrorSettings {
    /// The backoff before the `attempt`-th retry, from this mirror's
    /// `retry_backoff_ms` up to its `retry_backoff_max_ms`.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        jittered_backoff(
            Duration::from_millis(self.retry_backoff_ms),
            Duration::from_millis(self.retry_backoff_max_ms),
            attempt,
        )
    }
}

/// A mirror's settings as its supervisor and fetchers on one shard share
/// them: replaced whole by `mirror update`, read afresh for every request
/// (connection options at the next connect).
#[derive(Clone)]
pub(crate) struct LiveSettings(Rc<RefCell<Rc<MirrorSettings>>>);

impl LiveSettings {
    fn new(settings: MirrorSettings) -> Self {
        Self(Rc::new(RefCell::new(Rc::new(settings))))
    }

    pub(crate) fn get(&self) -> Rc<MirrorSettings> {
        Rc::clone(&self.0.borrow())
    }

    /// Puts `settings` in place; returns the ones they replace.
    fn replace(&self, settings: MirrorSettings) -> Rc<MirrorSettings> {
        self.0.replace(Rc::new(settings))
    }
}

struct Pending {
    partition: MirrorPartition,
    retry_at_ms: u64,
}

/// One mirror on one shard: its partitions, wherever they are.
struct Supervisor {
    settings: LiveSettings,
    /// Set when the source's servers changed: the metadata connection goes.
    reconnect_metadata: bool,
    events: ShardEventSink,
    topics: BTreeSet<String>,
    pending: Vec<Pending>,
    fetchers: HashMap<i32, FetcherHandle>,
    returns: Returns,
    directives: Directives,
    /// Tells fetchers to hand everything back.
    stop: Rc<Cell<bool>>,
    /// Wakes fetchers to a new directive or the stop, mid-round.
    interrupt: Rc<Event>,
    metadata: Option<SourceMetadata>,
    appended: Arc<Event>,
    registry: Rc<Registry>,
    /// The source's cluster id, from its metadata (for MIRROR_PID_RESET).
    source_cluster_id: Option<String>,
    /// The fetchers' statistics since they were last reported.
    stats: Rc<RefCell<FetchStats>>,
    last_stats_ms: u64,
}

/// Runs one mirror's partitions on this shard until a [`MirrorCommand::Stop`]
/// arrives in `inbox`, then returns every partition (with its log) for closing.
pub async fn run_mirror(
    settings: MirrorSettings,
    partitions: Vec<MirrorPartition>,
    events: ShardEventSink,
    inbox: MirrorInbox,
    registry: Rc<Registry>,
) -> Vec<MirrorPartition> {
    let mut s = Supervisor {
        settings: LiveSettings::new(settings),
        reconnect_metadata: false,
        events,
        topics: partitions.iter().map(|p| p.key.tp.topic.clone()).collect(),
        pending: partitions
            .into_iter()
            .map(|partition| Pending {
                partition,
                retry_at_ms: 0,
            })
            .collect(),
        fetchers: HashMap::new(),
        returns: Rc::new(RefCell::new(Vec::new())),
        directives: Rc::new(RefCell::new(HashMap::new())),
        stop: Rc::new(Cell::new(false)),
        interrupt: Rc::new(Event::new()),
        metadata: None,
        appended: Arc::clone(registry.appended()),
        registry,
        source_cluster_id: None,
        stats: Rc::default(),
        last_stats_ms: 0,
    };
    let mut meta_conn: Option<Connection> = None;
    let mut last_refresh_ms = 0u64;
    let mut metadata_failures = 0u32;
    loop {
        s.take_returns();
        if s.handle_commands(&inbox) {
            return s.collect_on_stop().await;
        }
        if std::mem::take(&mut s.reconnect_metadata) {
            meta_conn = None;
            s.metadata = None;
        }
        let settings = s.settings.get();
        let now = now_ms();
        let due = s.pending.iter().any(|p| p.retry_at_ms <= now);
        if (due && s.metadata.is_none()) || now.saturating_sub(last_refresh_ms) >= settings.metadata_refresh_ms {
            let topics: Vec<String> = s.topics.iter().cloned().collect();
            let Some(refreshed) = s
                .unless_commanded(&inbox, refresh(&settings, &mut meta_conn, &topics))
                .await
            else {
                // A command or a returned partition first (a failover must
                // not wait for a source that stopped answering); the
                // refresh starts over after it.
                meta_conn = None;
                continue;
            };
            let refreshed = refreshed.map_err(|e| e.to_string()).and_then(|m| s.same_cluster(m));
            match refreshed {
                Ok(m) => {
                    metadata_failures = 0;
                    last_refresh_ms = now_ms();
                    if m.cluster_id.is_some() {
                        s.source_cluster_id.clone_from(&m.cluster_id);
                    }
                    s.metadata = Some(m);
                }
                Err(e) => {
                    metadata_failures += 1;
                    tracing::warn!(mirror = settings.name, error = %e, "cannot refresh source metadata");
                    meta_conn = None;
                    s.wait(&inbox, settings.backoff(metadata_failures)).await;
                    continue;
                }
            }
        }
        s.place_due();
        s.report_stats();
        let next_due = s.pending.iter().map(|p| p.retry_at_ms).min();
        let until_refresh = (last_refresh_ms + settings.metadata_refresh_ms).saturating_sub(now_ms());
        let sleep_ms = next_due
            .map_or(until_refresh, |d| d.saturating_sub(now_ms()).min(until_refresh))
            .clamp(10, STATS_INTERVAL_MS);
        s.wait(&inbox, Duration::from_millis(sleep_ms)).await;
    }
}

impl Supervisor {
    /// Metadata from another cluster than the one mirrored so far (the
    /// mirror's servers were changed to another cluster's) is not acted on:
    /// no partition moves to its brokers. The control plane halts the
    /// mirror's sync for the same reason.
    fn same_cluster(&self, metadata: SourceMetadata) -> Result<SourceMetadata, String> {
        match (&self.source_cluster_id, &metadata.cluster_id) {
            (Some(known), Some(now)) if known != now => Err(format!(
                "the source servers answer for cluster {now}, not {known} that this mirror follows; \
                 not acting on its metadata"
            )),
            _ => Ok(metadata),
        }
    }

    fn event(&self, event: StateEvent) {
        self.events.state(event);
    }

    /// Runs `work` unless a command arrives, or a fetcher hands a partition
    /// back (one whose mirroring ends is ended at once), first.
    async fn unless_commanded<T>(&self, inbox: &MirrorInbox, work: impl std::future::Future<Output = T>) -> Option<T> {
        futures_lite::future::or(async { Some(work.await) }, async {
            loop {
                glommio::timer::sleep(Duration::from_millis(IDLE_POLL_MS)).await;
                if !inbox.borrow().is_empty() || !self.returns.borrow().is_empty() {
                    return None;
                }
            }
        })
        .await
    }

    /// Applies queued commands; returns true on Stop.
    fn handle_commands(&mut self, inbox: &MirrorInbox) -> bool {
        loop {
            let Some(command) = inbox.borrow_mut().pop_front() else {
                return false;
            };
            match command {
                MirrorCommand::Stop => return true,
                MirrorCommand::UpdateSettings(settings) => {
                    let old = self.settings.replace(*settings);
                    let new = self.settings.get();
                    if old.bootstrap_servers != new.bootstrap_servers {
                        self.reconnect_metadata = true;
                    }
                    tracing::info!(mirror = new.name, "mirror settings updated");
                }
                MirrorCommand::Add(partition) => {
                    self.topics.insert(partition.key.tp.topic.clone());
                    self.metadata = None;
                    self.pending.push(Pending {
                        partition: *partition,
                        retry_at_ms: 0,
                    });
                }
                MirrorCommand::Remove(tp) => match self.take_pending(&tp) {
                    Some(p) => self.close_removed(p),
                    None => self.direct(tp, Directive::Remove),
                },
                MirrorCommand::End(tp) => match self.take_pending(&tp) {
                    Some(p) => self.end_mirroring(p),
                    None => self.direct(tp, Directive::End),
                },
                MirrorCommand::Pause(tp) => match self.pending.iter_mut().find(|p| p.partition.key.tp == tp) {
                    Some(p) => {
                        p.partition.paused = true;
                        self.event(StateEvent::Paused {
                            mirror: self.settings.get().name.clone(),
                            tp,
                        });
                    }
                    None => self.direct(tp, Directive::Pause),
                },
                MirrorCommand::CheckDivergence(tp) => {
                    match self.pending.iter_mut().find(|p| p.partition.key.tp == tp) {
                        Some(p) => p.partition.divergence_check = Some(PendingCheck::NOW),
                        None => self.direct(tp, Directive::CheckDivergence),
                    }
                }
                MirrorCommand::Verify {
                    tp,
                    from_offset,
                    bytes_per_s,
                } => self.start_verify(tp, from_offset, bytes_per_s),
                MirrorCommand::Resume(tp) => match self.pending.iter_mut().find(|p| p.partition.key.tp == tp) {
                    Some(p) => {
                        p.partition.paused = false;
                        p.partition.stopped = false;
                        p.retry_at_ms = 0;
                    }
                    None => self.direct(tp, Directive::Resume),
                },
            }
        }
    }

    /// Starts a `mirror verify` of `tp` against its source leader in a
    /// task of its own (the fetchers go on); `Verified` reports the end.
    fn start_verify(&self, tp: ringmirror_storage::log::TopicPartition, from_offset: i64, bytes_per_s: u64) {
        let settings = self.settings.get();
        let mirror = settings.name.clone();
        let source = self.metadata.as_ref().and_then(|m| {
            let p = m.partitions.get(&tp)?;
            Some(VerifySource {
                addr: m.brokers.get(&p.leader)?.clone(),
                options: settings.connection.clone(),
                leader_epoch: p.leader_epoch,
            })
        });
        let (Some(source), Some(served)) = (source, self.registry.get(&tp)) else {
            self.event(StateEvent::Verified {
                mirror,
                tp,
                outcome: VerifyOutcome::Incomplete {
                    error: "no source leader known for the partition yet".into(),
                },
            });
            return;
        };
        let events = self.events.clone();
        glommio::spawn_local(async move {
            let outcome = verify_partition(source, served, tp.clone(), from_offset, bytes_per_s).await;
            events.state(StateEvent::Verified { mirror, tp, outcome });
        })
        .detach();
    }

    fn take_pending(&mut self, tp: &ringmirror_storage::log::TopicPartition) -> Option<MirrorPartition> {
        let i = self.pending.iter().position(|p| &p.partition.key.tp == tp)?;
        Some(self.pending.swap_remove(i).partition)
    }

    /// Leaves a directive for the fetcher holding `tp`, if any does.
    fn direct(&mut self, tp: ringmirror_storage::log::TopicPartition, directive: Directive) {
        if self.fetchers.values().any(|f| f.alive.get()) {
            let mut directives = self.directives.borrow_mut();
            if directive == Directive::CheckDivergence {
                // A check waits behind what is already asked (a removal, a pause).
                directives.entry(tp).or_insert(directive);
            } else {
                directives.insert(tp, directive);
            }
            drop(directives);
            self.interrupt.notify(usize::MAX);
        } else {
            let error = format!("{directive:?}: partition is not mirrored here");
            self.event(StateEvent::CommandFailed {
                mirror: self.settings.get().name.clone(),
                tp,
                error,
            });
        }
    }

    fn close_removed(&self, partition: MirrorPartition) {
        let (mirror, tp) = (partition.key.mirror.clone(), partition.key.tp.clone());
        drop(partition);
        match self.registry.close(&tp) {
            Ok((recovery_point, log_start_offset)) => self.event(StateEvent::Removed {
                mirror,
                tp,
                recovery_point,
                log_start_offset,
            }),
            Err(e) => self.event(StateEvent::CommandFailed {
                mirror,
                tp,
                error: format!("close: {e}"),
            }),
        }
    }

    /// Ends mirroring of a partition no fetcher holds any more.
    /// Ends mirroring of a partition its fetcher has let go, in a task of
    /// its own (the other partitions go on): group offsets synced past the
    /// log end are moved back to it on every shard, then the log's end
    /// steps run and the partition becomes writable (`Registry::end_mirroring`).
    /// A crash in between repeats the whole, which is idempotent.
    fn end_mirroring(&self, partition: MirrorPartition) {
        let (mirror, tp) = (partition.key.mirror.clone(), partition.key.tp.clone());
        drop(partition);
        let cluster_id = self.source_cluster_id.clone().unwrap_or_default();
        let registry = Rc::clone(&self.registry);
        let events = self.events.clone();
        glommio::spawn_local(async move {
            let served = registry.get(&tp);
            let mirrored_epoch = served.as_ref().map_or(-1, |s| s.leader_epoch.get());
            let log_end = served.map(|s| s.log.borrow().log_end_offset());
            let clamped = match log_end {
                Some(log_end) => crate::groups::clamp_offsets_on_every_shard(&registry, &tp, log_end).await,
                None => Err("not open on this shard".to_owned()),
            };
            let ended = clamped.and_then(|moved| {
                if moved > 0 {
                    tracing::info!(%tp, moved, "group offsets past the mirrored log end moved back to it");
                }
                registry.end_mirroring(&tp, &cluster_id)
            });
            events.state(match ended {
                Ok((ended, leader_epoch)) => mirror_ended(&registry, mirror, tp, &ended, leader_epoch, mirrored_epoch),
                Err(error) => StateEvent::CommandFailed {
                    mirror,
                    tp,
                    error: format!("end mirroring: {error}"),
                },
            });
        })
        .detach();
    }

    fn take_returns(&mut self) {
        let returned: Vec<Returned> = self.returns.borrow_mut().drain(..).collect();
        for Returned { mut partition, reason } in returned {
            // A directive its fetcher let it go before seeing (the broker
            // unreachable, new metadata needed) is carried out here: an End
            // must not wait for a source that may never answer again.
            let left = match reason {
                ReturnReason::Removed | ReturnReason::Ended | ReturnReason::Resumed => None,
                _ => self.directives.borrow_mut().remove(&partition.key.tp),
            };
            match left {
                Some(Directive::End) => {
                    self.end_mirroring(partition);
                    continue;
                }
                Some(Directive::Remove) => {
                    self.close_removed(partition);
                    continue;
                }
                Some(Directive::Pause) => {
                    partition.paused = true;
                    self.event(StateEvent::Paused {
                        mirror: partition.key.mirror.clone(),
                        tp: partition.key.tp.clone(),
                    });
                }
                Some(Directive::Resume) => {
                    partition.paused = false;
                    partition.stopped = false;
                }
                Some(Directive::CheckDivergence) => partition.divergence_check = Some(PendingCheck::NOW),
                None => {}
            }
            let retry_at_ms = match reason {
                ReturnReason::Removed => {
                    self.close_removed(partition);
                    continue;
                }
                ReturnReason::Ended => {
                    self.end_mirroring(partition);
                    continue;
                }
                ReturnReason::Resumed => {
                    partition.paused = false;
                    partition.stopped = false;
                    self.metadata = None;
                    0
                }
                ReturnReason::Stopping => 0,
                ReturnReason::Metadata | ReturnReason::BrokerUnreachable => {
                    partition.failures += 1;
                    self.metadata = None;
                    now_ms() + self.settings.get().backoff(partition.failures).as_millis() as u64
                }
            };
            self.pending.push(Pending { partition, retry_at_ms });
        }
    }

    /// Sleeps up to `max`, waking early for a command, a returned partition
    /// or stop.
    async fn wait(&self, inbox: &MirrorInbox, max: Duration) {
        let deadline = std::time::Instant::now() + max;
        while std::time::Instant::now() < deadline && self.returns.borrow().is_empty() && inbox.borrow().is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            glommio::timer::sleep(left.min(Duration::from_millis(IDLE_POLL_MS))).await;
        }
    }

    /// Places every due pending partition on its leader's fetcher.
    fn place_due(&mut self) {
        let Some(metadata) = &self.metadata else { return };
        let now = now_ms();
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].retry_at_ms > now {
                i += 1;
                continue;
            }
            let p = &self.pending[i].partition;
            let Some(source) = metadata.partitions.get(&p.key.tp) else {
                tracing::warn!(partition = %p.key, "partition not in source metadata; will look again");
                self.pending[i].retry_at_ms = now + self.settings.get().backoff(p.failures.max(1)).as_millis() as u64;
                i += 1;
                continue;
            };
            if source.topic_id != p.key.topic_id && source.topic_id != [0; 16] && p.key.topic_id != [0; 16] {
                tracing::error!(partition = %p.key, "source topic id changed (topic recreated?); not mirroring it");
                self.pending[i].retry_at_ms = u64::MAX;
                i += 1;
                continue;
            }
            let Some(addr) = (source.leader >= 0)
                .then(|| metadata.brokers.get(&source.leader))
                .flatten()
            else {
                self.pending[i].retry_at_ms = now + self.settings.get().backoff(p.failures.max(1)).as_millis() as u64;
                i += 1;
                continue;
            };
            let mut partition = self.pending.swap_remove(i).partition;
            if partition.fetch_epoch != source.leader_epoch {
                partition.divergence_check = Some(PendingCheck::NOW);
            }
            partition.fetch_epoch = source.leader_epoch;
            partition.needs_truncation_check = true;
            match self.fetchers.get(&source.leader).filter(|f| f.alive.get()) {
                Some(f) => f.inbox.borrow_mut().push(partition),
                None => {
                    let handle = FetcherHandle {
                        inbox: Rc::new(RefCell::new(vec![partition])),
                        alive: Rc::new(Cell::new(true)),
                    };
                    let fetcher = MirrorFetcher {
                        broker_id: source.leader,
                        addr: addr.clone(),
                        settings: self.settings.clone(),
                        inbox: Rc::clone(&handle.inbox),
                        alive: Rc::clone(&handle.alive),
                        returns: Rc::clone(&self.returns),
                        events: self.events.clone(),
                        stop: Rc::clone(&self.stop),
                        directives: Rc::clone(&self.directives),
                        appended: Arc::clone(&self.appended),
                        stats: Rc::clone(&self.stats),
                        append_ring: RingKind::of(self.settings.get().ingest)
                            .and_then(|kind| AppendRing::for_this_shard(kind, &self.appended)),
                        interrupt: Rc::clone(&self.interrupt),
                        held: RefCell::default(),
                    };
                    glommio::spawn_local(fetcher.run()).detach();
                    self.fetchers.insert(source.leader, handle);
                }
            }
        }
    }

    /// Hands the fetchers' statistics to the control plane once an interval.
    fn report_stats(&mut self) {
        let now = now_ms();
        if now.saturating_sub(self.last_stats_ms) < STATS_INTERVAL_MS || self.stats.borrow().is_empty() {
            return;
        }
        self.last_stats_ms = now;
        let stats = std::mem::take(&mut *self.stats.borrow_mut());
        let report = TelemetryEvent::FetchStats {
            mirror: self.settings.get().name.clone(),
            stats: Box::new(stats),
        };
        // Not lost when the queue is full: kept for the next report.
        if let Err(TelemetryEvent::FetchStats { stats, .. }) = self.events.telemetry(report) {
            self.stats.borrow_mut().merge(&stats);
        }
    }

    async fn collect_on_stop(self) -> Vec<MirrorPartition> {
        self.stop.set(true);
        self.interrupt.notify(usize::MAX);
        // Fetchers abandon their round (a source that stopped answering
        // must not hold the shard's stop), then hand everything back.
        while self.fetchers.values().any(|f| f.alive.get()) {
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        let mut out: Vec<MirrorPartition> = self.pending.into_iter().map(|p| p.partition).collect();
        out.extend(self.returns.borrow_mut().drain(..).map(|r| r.partition));
        for f in self.fetchers.values() {
            out.append(&mut f.inbox.borrow_mut());
        }
        out
    }
}

async fn refresh(
    settings: &MirrorSettings,
    conn: &mut Option<Connection>,
    topics: &[String],
) -> Result<SourceMetadata, crate::client::ClientError> {
    if conn.is_none() {
        let mut last = None;
        for addr in &settings.bootstrap_servers {
            match Connection::connect(addr, settings.connection.clone()).await {
                Ok(c) => {
                    *conn = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if conn.is_none() {
            return Err(last.unwrap_or(crate::client::ClientError::Resolve {
                addr: "no bootstrap servers".into(),
            }));
        }
    }
    fetch_source_metadata(conn.as_mut().expect("connected"), Some(topics)).await
}
