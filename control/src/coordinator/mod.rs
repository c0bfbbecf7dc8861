//! The mirror coordinator: owns every mirror and mirrored partition of this
//! agent, moves each partition through the state machine ([`crate::state`]),
//! writes every state change to `__mirror_state` ([`MirrorStateStore`])
//! before acting on it, and drives the shards through their command
//! channels. It reads the source's metadata (topic selection, new
//! partitions, the cluster id, periodic epoch checks), asks the source for
//! last mirror epochs when a partition starts (PREPARING), answers operator
//! requests ([`AdminCall`]) at once and lets states move as the work
//! completes, and learns what happened from the shards' events.
//!
//! One agent owns every state partition (the embedded default of
//! DESIGN.md); a scale-out owner would load and drop them by lease.
//!
//! Control logic on its own glommio executor thread (our Kafka client is
//! glommio's); nothing here is on the data path.
//!
//! * [`lifecycle`] — state changes (written first), placement, PREPARING
//!   and LME truncation, epoch bumps, FAILED retries, stopping.
//! * [`sync_round`] — each mirror's metadata round and its sync steps.
//! * [`events`] — what the shards' state and telemetry events do.
//! * [`requests`] — the operator's requests.
//! * [`reports`] — views, descriptions, metrics, DescribeClusterMirrors.
//! * [`connections`] — connections to the sources and our own listener.
//! * [`verification`] — divergence checks and `mirror verify` on request.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder};
use ringmirror_dataplane::client::{Connection, TlsClientConfig};
use ringmirror_dataplane::fetch::{FetchStats, ShardEvent, ShardEventCounts, ShardEventReceiver};
use ringmirror_dataplane::partition::{CatalogHandle, MirrorReportsHandle};
use ringmirror_dataplane::shard::ShardCommand;
use ringmirror_protocol::sasl::SaslClientConfig;
use ringmirror_storage::log::{ReserveBudget, TopicPartition};

use crate::admin::{AdminCall, AdminError, PartitionEvent, VerifyJob};
use crate::metadata_sync::deletion::DeletionChecks;
use crate::metadata_sync::groups::GroupFilter;
use crate::mirror::{MirrorConfig, TopicSelection};
use crate::state::MirrorPartitionState as State;
use crate::state_store::{MirrorRecord, MirrorStateStore, PartitionRecord, PartitionStateKey};
use ringmirror_storage::clock::now_ms;

mod connections;
mod events;
mod lifecycle;
mod reports;
mod requests;
mod sync_round;
mod verification;

pub use lifecycle::FAILED_RETRY_ATTEMPTS_MAX;
use sync_round::MirrorMetadataManager;

/// How often the loop wakes without a call or an event (stop flag, timers).
const TICK: Duration = Duration::from_millis(50);
/// After a wake for measurements alone, events are taken in again only
/// this much later, all at once: each wake of this executor costs more
/// than handling an event (its reactor, a cross-core barrier), and caught-up
/// partitions send progress after every Fetch response (thousands a second
/// at a steady rate). State events wait at most this long too.
const TELEMETRY_COALESCE: Duration = Duration::from_millis(10);
/// Measurements alone (offsets, counters) are republished at most this
/// often: a caught-up partition reports progress after every Fetch
/// response, and rebuilding every mirror's report for each cost a core's
/// tenth on its own at a few thousand responses a second. State changes
/// are published at once.
const TELEMETRY_REPUBLISH: Duration = Duration::from_millis(100);
/// Retry backoff after a failed metadata round, doubling up to the refresh interval.
const SYNC_RETRY_MIN: Duration = Duration::from_millis(200);
/// Doublings of the metadata round's retry backoff at most: keeps the
/// shift inside the integer; the refresh interval caps it first.
const BACKOFF_DOUBLINGS_MAX: u32 = 10;
/// How long a source may take to answer the control plane: short, since
/// operator requests wait behind it.
const CONTROL_IO_TIMEOUT: Duration = Duration::from_secs(10);
const CONTROL_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a failover (`mirror stop`) waits for its last group offset sync
/// before it goes on without it: what a dead source can delay it by.
const FINAL_GROUP_SYNC_MAX: Duration = Duration::from_secs(5);

/// Runs `work` (the metadata rounds) while taking in the operator's calls
/// into `received`; a `mirror stop` among them abandons `work` (`None`):
/// the failover goes first, the rounds run again after it.
async fn until_stop_called<T>(
    calls: &async_channel::Receiver<AdminCall>,
    received: &RefCell<VecDeque<AdminCall>>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    futures_lite::future::or(async { Some(work.await) }, async {
        loop {
            let Ok(call) = calls.recv().await else {
                return futures_lite::future::pending().await;
            };
            let stop = matches!(call.request, crate::admin::AdminRequest::Stop { .. });
            received.borrow_mut().push_back(call);
            if stop {
                return None;
            }
        }
    })
    .await
}

/// What the coordinator is started with.
pub struct CoordinatorSetup {
    pub store: MirrorStateStore,
    /// Mirrors from the configuration file, created on first start.
    pub configured_mirrors: Vec<MirrorConfig>,
    pub shards: Vec<async_channel::Sender<ShardCommand>>,
    /// The shards' events (state events never dropped), and what their
    /// queues count (for `/metrics`).
    pub events: ShardEventReceiver,
    pub event_counts: ShardEventCounts,
    /// Each shard's budget of disk reserved ahead of its logs' data, in
    /// shard order (read for `/metrics`; only its shard changes it).
    pub reserve_budgets: Vec<Arc<ReserveBudget>>,
    pub calls: async_channel::Receiver<AdminCall>,
    /// Our cluster id (sent with last-mirror-epoch lookups).
    pub local_cluster_id: String,
    /// Our Kafka listener, where source group offsets are committed
    /// (without one there are no consumers here, and nothing to sync).
    pub listener_addr: Option<String>,
    /// How we authenticate to our own listener when it takes SASL only.
    pub listener_sasl: Option<SaslClientConfig>,
    /// How the agent's connections to its own listener set up TLS (`None`:
    /// the listener is in clear).
    pub listener_tls: Option<TlsClientConfig>,
    /// Where the partitions' states and last mirror epochs are published
    /// for peers (DescribeClusterMirrors on our listener).
    pub reports: Arc<MirrorReportsHandle>,
    /// The listener's catalog, where synced topic configs are published
    /// (DescribeConfigs).
    pub catalog: Arc<CatalogHandle>,
    pub io_memory_bytes: usize,
}

/// KIP-1279's MirrorCoordinator: the thread that runs the coordinator until
/// stopped.
pub struct MirrorCoordinator {
    stop: Arc<AtomicBool>,
    join: ExecutorJoinHandle<()>,
}

impl MirrorCoordinator {
    /// Loads the mirrors and partition states, places every partition as
    /// its state says, and runs; `first_round` hears once every mirror's
    /// first metadata round is done (or failed).
    pub fn start(setup: CoordinatorSetup, first_round: std::sync::mpsc::Sender<()>) -> Result<Self, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let io_memory = setup.io_memory_bytes;
        let join = LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name("coordinator")
            .io_memory(io_memory)
            .spawn(move || async move {
                let CoordinatorSetup {
                    store,
                    configured_mirrors,
                    shards,
                    events,
                    event_counts,
                    reserve_budgets,
                    calls,
                    local_cluster_id,
                    listener_addr,
                    listener_sasl,
                    listener_tls,
                    reports,
                    catalog,
                    ..
                } = setup;
                let mut core = Core {
                    store,
                    shards,
                    mirrors: BTreeMap::new(),
                    partitions: BTreeMap::new(),
                    by_tp: HashMap::new(),
                    local_cluster_id,
                    listener_addr,
                    listener_sasl,
                    listener_tls,
                    listener_conn: None,
                    reports,
                    catalog,
                    reports_dirty: true,
                    telemetry_dirty: false,
                    published_at: Instant::now(),
                    event_counts,
                    reserve_budgets,
                    placed: Vec::new(),
                };
                core.load(configured_mirrors);
                core.run(events, calls, stop_flag, first_round).await;
            })
            .map_err(|e| format!("start the coordinator: {e}"))?;
        Ok(Self { stop, join })
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        if let Err(e) = self.join.join() {
            tracing::error!(error = %e, "coordinator failed");
        }
    }
}

/// A mirror as the coordinator runs it.
struct Mirror {
    record: MirrorRecord,
    selection: TopicSelection,
    conn: Option<Connection>,
    /// Its metadata round's schedule and reports.
    metadata: MirrorMetadataManager,
    /// Named topics already reported missing, and topics reported held by
    /// another mirror (so the log is not flooded).
    reported_missing: BTreeSet<String>,
    reported_conflicts: BTreeSet<String>,
    /// Sync is halted: the source's cluster id is not the recorded one.
    halted: bool,
    /// Partitions found by the last round that wait for their last mirror
    /// epoch (PREPARING).
    to_prepare: Vec<PartitionStateKey>,
    /// Source topics the last round saw covered.
    topics: BTreeSet<String>,
    /// Every shard's fetch statistics for this mirror, since start.
    fetch_stats: FetchStats,
    group_filter: GroupFilter,
    /// The latest divergences of its partitions (`mirror describe`).
    partition_events: VecDeque<PartitionEvent>,
    /// The latest `mirror verify`, and how many ran since start.
    verify: Option<VerifyJob>,
    verifications: u64,
    /// Mirrored topics absent at the source, waiting for confirmation,
    /// and topics the source refuses to describe.
    deletion: DeletionChecks,
    /// Which source broker the next deletion probe asks (they take turns).
    probe_turn: usize,
}

/// What the shards' events say about a partition (not persisted).
#[derive(Debug, Default)]
struct Live {
    source_offset: Option<i64>,
    destination_offset: i64,
    behind_since: Option<Instant>,
    /// Counted by the shard since the last placement, and before it.
    placed_bytes: u64,
    placed_batches: u64,
    bytes_before: u64,
    batches_before: u64,
    epoch_bumps: u64,
    crc_failures: u64,
    truncations: u64,
    divergences: u64,
}

struct Partition {
    tp: TopicPartition,
    record: PartitionRecord,
    /// Sent to its shard (commands after it find it there), and not
    /// removed, ended or refused since.
    placed: bool,
    /// Placed paused (a new partition of a paused topic): PAUSED once the
    /// shard has it.
    placed_paused: bool,
    /// The source epoch from the last metadata round (periodic check).
    source_epoch: i32,
    next_retry: Option<Instant>,
    live: Live,
}

impl Partition {
    /// A partition not yet sent to its shard, as loaded or just discovered.
    fn unplaced(tp: TopicPartition, record: PartitionRecord, source_epoch: i32) -> Self {
        Self {
            tp,
            record,
            placed: false,
            placed_paused: false,
            source_epoch,
            next_retry: None,
            live: Live::default(),
        }
    }
}

struct Core {
    store: MirrorStateStore,
    shards: Vec<async_channel::Sender<ShardCommand>>,
    mirrors: BTreeMap<String, Mirror>,
    partitions: BTreeMap<PartitionStateKey, Partition>,
    by_tp: HashMap<(String, TopicPartition), PartitionStateKey>,
    local_cluster_id: String,
    listener_addr: Option<String>,
    listener_sasl: Option<SaslClientConfig>,
    listener_tls: Option<TlsClientConfig>,
    /// To our own listener, for group offset sync.
    listener_conn: Option<Connection>,
    reports: Arc<MirrorReportsHandle>,
    catalog: Arc<CatalogHandle>,
    /// A state changed since the reports were last published.
    reports_dirty: bool,
    /// Only measurements changed since (published within [`TELEMETRY_REPUBLISH`]).
    telemetry_dirty: bool,
    published_at: Instant,
    event_counts: ShardEventCounts,
    reserve_budgets: Vec<Arc<ReserveBudget>>,
    /// Partitions their shard placed while PREPARING, to be recorded
    /// MIRRORING together once the events at hand are handled
    /// ([`Core::record_placed`]).
    placed: Vec<PartitionStateKey>,
}

fn internal(e: impl std::fmt::Display) -> AdminError {
    AdminError::Internal(e.to_string())
}

fn new_mirror(record: MirrorRecord) -> Result<Mirror, AdminError> {
    let selection = TopicSelection::new(&record.config).map_err(|e| AdminError::Invalid(e.to_string()))?;
    Ok(Mirror {
        group_filter: record
            .config
            .group_filter()
            .map_err(|e| AdminError::Invalid(e.to_string()))?,
        partition_events: VecDeque::new(),
        verify: None,
        verifications: 0,
        deletion: DeletionChecks::default(),
        probe_turn: 0,
        record,
        selection,
        conn: None,
        metadata: MirrorMetadataManager::new(),
        reported_missing: BTreeSet::new(),
        reported_conflicts: BTreeSet::new(),
        halted: false,
        to_prepare: Vec::new(),
        topics: BTreeSet::new(),
        fetch_stats: FetchStats::default(),
    })
}

impl Core {
    /// Loads the stored mirrors and partitions, creates the configured
    /// mirrors the store does not know, and places every partition as its
    /// stored state says.
    fn load(&mut self, configured: Vec<MirrorConfig>) {
        for config in configured {
            match self.store.mirrors().get(&config.name) {
                None => {
                    let record = MirrorRecord {
                        config,
                        source_cluster_id: None,
                        created_ms: now_ms(),
                    };
                    if let Err(e) = self.store.put_mirror(&record) {
                        tracing::error!(mirror = record.config.name, error = %e, "cannot record the configured mirror");
                    }
                }
                Some(stored) if stored.config != config => tracing::warn!(
                    mirror = config.name,
                    "the configuration file's definition differs from the stored one; the stored one (changed through the admin API) is used"
                ),
                Some(_) => {}
            }
        }
        for record in self.store.mirrors().values() {
            match new_mirror(record.clone()) {
                Ok(m) => {
                    self.mirrors.insert(record.config.name.clone(), m);
                }
                Err(e) => tracing::error!(mirror = record.config.name, error = %e, "stored mirror is invalid; skipped"),
            }
        }
        for (key, record) in self.store.topic_configs() {
            if self.mirrors.contains_key(&key.mirror) {
                self.catalog.publish_topic_configs(&key.topic, record.configs.clone());
            }
        }
        let stored: Vec<(PartitionStateKey, PartitionRecord)> = self
            .store
            .partitions()
            .iter()
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        for (key, record) in stored {
            if !self.mirrors.contains_key(&key.mirror) {
                continue;
            }
            let tp = TopicPartition {
                topic: record.topic.clone(),
                partition: key.partition,
            };
            self.by_tp.insert((key.mirror.clone(), tp.clone()), key.clone());
            self.partitions.insert(key.clone(), Partition::unplaced(tp, record, -1));
            self.resume_after_restart(&key);
        }
    }

    /// Carries on from a stored state after a restart.
    fn resume_after_restart(&mut self, key: &PartitionStateKey) {
        let state = self.partitions[key].record.state;
        match state {
            State::Unknown | State::Preparing => {
                if let Some(m) = self.mirrors.get_mut(&key.mirror) {
                    m.to_prepare.push(key.clone());
                }
            }
            State::Mirroring => self.place(key, None, false),
            State::EpochFencing => {
                // The bumped epoch was stored before it was applied.
                self.place(key, None, false);
                self.set_state_logged(key, State::Mirroring, |_| {});
            }
            State::Pausing | State::Paused => {
                self.place(key, None, true);
                if state == State::Pausing {
                    self.set_state_logged(key, State::Paused, |_| {});
                }
            }
            State::Stopping => self.end_unplaced(key),
            State::Stopped => {}
            State::Failed => self.schedule_retry(key),
        }
    }

    async fn run(
        &mut self,
        events: ShardEventReceiver,
        calls: async_channel::Receiver<AdminCall>,
        stop: Arc<AtomicBool>,
        first_round: std::sync::mpsc::Sender<()>,
    ) {
        // One at a time, moved at once: a large call costs nothing here.
        #[allow(clippy::large_enum_variant)]
        enum Wake {
            Call(AdminCall),
            Event(ShardEvent),
            Tick,
        }
        let mut first = Some(first_round);
        // The mirrors' topic filters reach the listener before the first
        // metadata round (which may wait on a source): it must not
        // auto-create a topic a mirror covers.
        self.reports.publish(Arc::new(self.mirror_reports()));
        // Calls taken in while a round ran, answered before any new one.
        let received: RefCell<VecDeque<AdminCall>> = RefCell::default();
        // Set after a wake that brought only telemetry (TELEMETRY_COALESCE).
        let mut events_quiet_until: Option<Instant> = None;
        while !stop.load(Ordering::Acquire) {
            // A source that stopped answering holds a round for its I/O
            // timeouts; a failover must not wait behind that.
            let rounds = async {
                self.sync_due_mirrors().await;
                self.prepare_waiting().await;
            };
            if until_stop_called(&calls, &received, rounds).await.is_none() {
                tracing::warn!("a metadata round was abandoned for a mirror stop");
                self.forget_connections();
            }
            if let Some(done) = first.take() {
                let _ = done.send(());
            }
            self.retry_failed();
            if self.reports_dirty || (self.telemetry_dirty && self.published_at.elapsed() >= TELEMETRY_REPUBLISH) {
                self.reports.publish(Arc::new(self.mirror_reports()));
                self.reports_dirty = false;
                self.telemetry_dirty = false;
                self.published_at = Instant::now();
            }
            let queued = received.borrow_mut().pop_front();
            let wake = futures_lite::future::or(
                async {
                    if let Some(call) = queued {
                        return Wake::Call(call);
                    }
                    match calls.recv().await {
                        Ok(call) => Wake::Call(call),
                        // No admin channel any more: only events and timers.
                        Err(_) => futures_lite::future::pending().await,
                    }
                },
                futures_lite::future::or(
                    async {
                        if let Some(until) = events_quiet_until.take() {
                            glommio::timer::sleep(until.saturating_duration_since(Instant::now())).await;
                        }
                        match events.recv().await {
                            Some(event) => Wake::Event(event),
                            None => futures_lite::future::pending().await,
                        }
                    },
                    async {
                        glommio::timer::sleep(TICK).await;
                        Wake::Tick
                    },
                ),
            )
            .await;
            match wake {
                Wake::Call(call) => {
                    if let crate::admin::AdminRequest::Stop { mirror, .. } = &call.request {
                        self.final_group_sync(mirror).await;
                    }
                    let answer = self.handle(call.request);
                    let _ = call.reply.try_send(answer);
                    // Calls win the race above: a steady stream of them
                    // (an operator polling status while rounds run back to
                    // back) must not starve the shards' events (a
                    // partition left STOPPING although its mirroring ended).
                    while let Some(event) = events.try_recv() {
                        self.on_event(event);
                    }
                    self.record_placed();
                    self.reports_dirty = true;
                }
                Wake::Event(event) => {
                    let mut state_changed = self.on_event(event);
                    while let Some(event) = events.try_recv() {
                        state_changed |= self.on_event(event);
                    }
                    self.record_placed();
                    if state_changed {
                        self.reports_dirty = true;
                    } else {
                        self.telemetry_dirty = true;
                        events_quiet_until = Some(Instant::now() + TELEMETRY_COALESCE);
                    }
                }
                Wake::Tick => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
