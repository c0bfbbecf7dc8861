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

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder};
use ringmirror_dataplane::client::mirror_epochs::last_mirror_epochs;
use ringmirror_dataplane::client::{ClientError, Connection, ConnectionOptions, TlsClientConfig};
use ringmirror_dataplane::failpoint::crash_point;
use ringmirror_dataplane::fetch::{
    FetchStats, PartitionKey, ShardEvent, ShardEventCounts, ShardEventReceiver, SourceMetadata, StateEvent, StopReason,
    TelemetryEvent, VerifyOutcome, fetch_source_metadata,
};
use ringmirror_dataplane::log::{MirrorSource, TopicPartition};
use ringmirror_dataplane::sasl::SaslClientConfig;
use ringmirror_dataplane::serve::{CatalogHandle, MirrorReport, MirrorReports, MirrorReportsHandle, PartitionReport};
use ringmirror_dataplane::shard::{PartitionStart, ShardCommand};

use crate::acl_sync::{AclSyncReport, sync_acls};
use crate::admin::{
    AdminAnswer, AdminCall, AdminError, AdminRequest, MetricsSnapshot, MirrorDescription, MirrorMetrics, MirrorSummary,
    PartitionEvent, PartitionMetrics, PartitionVerify, PartitionView, ShardEventMetrics, TopicPartitionName, VerifyJob,
};
use crate::deletion::{self, DeletionChecks, NO_TOPIC_ID, Round, Sighting};
use crate::epochs;
use crate::group_sync::{GroupFilter, GroupOutcome, GroupSyncReport, sync_group_offsets};
use crate::mirror::{MirrorConfig, TopicSelection};
use crate::state::MirrorPartitionState as State;
use crate::state_store::{
    MirrorRecord, MirrorStateStore, PartitionRecord, PartitionStateKey, TopicConfigKey, TopicConfigRecord,
};
use crate::topic_config_sync::{diff, fetch_topic_configs_report};

/// The fetch latency quantiles `/metrics` reports.
/// Divergence events a mirror keeps for `mirror describe`.
const PARTITION_EVENTS_KEPT_MAX: usize = 32;

const LATENCY_QUANTILES: [f64; 3] = [0.5, 0.99, 0.999];
/// How often the loop wakes without a call or an event (stop flag, timers).
const TICK: Duration = Duration::from_millis(50);
/// Retry backoff after a failed metadata round, doubling up to the refresh interval.
const SYNC_RETRY_MIN: Duration = Duration::from_millis(200);
/// FAILED partitions are retried after 1 s, doubling to 5 min, at most this often.
const FAILED_RETRY_MIN: Duration = Duration::from_secs(1);
const FAILED_RETRY_MAX: Duration = Duration::from_secs(300);
pub const FAILED_RETRY_ATTEMPTS_MAX: u32 = 100;
/// How long a source may take to answer the control plane: short, since
/// operator requests wait behind it.
const CONTROL_IO_TIMEOUT: Duration = Duration::from_secs(10);
const CONTROL_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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

pub struct Coordinator {
    stop: Arc<AtomicBool>,
    join: ExecutorJoinHandle<()>,
}

impl Coordinator {
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
                    event_counts,
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
    next_sync: Instant,
    sync_failures: u32,
    last_sync_ms: Option<u64>,
    sync_error: Option<String>,
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
    /// The last consumer group offset sync: when, and what it did.
    group_sync: Option<(u64, GroupSyncReport)>,
    /// The last topic config sync: when, and per topic what changed (or
    /// why the source did not describe it).
    config_sync: Option<(u64, BTreeMap<String, String>)>,
    /// The last ACL sync: when, and what it did.
    acl_sync: Option<(u64, AclSyncReport)>,
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
    reports_dirty: bool,
    event_counts: ShardEventCounts,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
        group_sync: None,
        config_sync: None,
        acl_sync: None,
        partition_events: VecDeque::new(),
        verify: None,
        verifications: 0,
        deletion: DeletionChecks::default(),
        probe_turn: 0,
        record,
        selection,
        conn: None,
        next_sync: Instant::now(),
        sync_failures: 0,
        last_sync_ms: None,
        sync_error: None,
        reported_missing: BTreeSet::new(),
        reported_conflicts: BTreeSet::new(),
        halted: false,
        to_prepare: Vec::new(),
        topics: BTreeSet::new(),
        fetch_stats: FetchStats::default(),
    })
}

/// Jittered exponential backoff for the `attempt`-th FAILED retry.
fn failed_backoff(attempt: u32) -> Duration {
    let base = FAILED_RETRY_MIN
        .saturating_mul(1 << attempt.min(10))
        .min(FAILED_RETRY_MAX);
    let jitter = (now_ms().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33) % 1000;
    base / 2 + base.mul_f64(jitter as f64 / 2000.0)
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
            self.partitions.insert(
                key.clone(),
                Partition {
                    tp,
                    record,
                    placed: false,
                    placed_paused: false,
                    source_epoch: -1,
                    next_retry: None,
                    live: Live::default(),
                },
            );
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
        while !stop.load(Ordering::Acquire) {
            self.sync_due_mirrors().await;
            self.prepare_waiting().await;
            if let Some(done) = first.take() {
                let _ = done.send(());
            }
            self.retry_failed();
            if self.reports_dirty {
                self.reports.publish(Arc::new(self.mirror_reports()));
                self.reports_dirty = false;
            }
            let wake = futures_lite::future::or(
                async {
                    match calls.recv().await {
                        Ok(call) => Wake::Call(call),
                        // No admin channel any more: only events and timers.
                        Err(_) => futures_lite::future::pending().await,
                    }
                },
                futures_lite::future::or(
                    async {
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
                    let answer = self.handle(call.request);
                    let _ = call.reply.try_send(answer);
                    // Calls win the race above: a steady stream of them
                    // (an operator polling status while rounds run back to
                    // back) must not starve the shards' events (a
                    // partition left STOPPING although its mirroring ended).
                    while let Some(event) = events.try_recv() {
                        self.on_event(event);
                    }
                    self.reports_dirty = true;
                }
                Wake::Event(event) => {
                    self.on_event(event);
                    while let Some(event) = events.try_recv() {
                        self.on_event(event);
                    }
                    self.reports_dirty = true;
                }
                Wake::Tick => {}
            }
        }
    }

    // ---- state changes, written before they take effect ----

    /// Moves a partition to `to` (a valid transition) and writes the new
    /// record, flushed, before returning.
    fn set_state(
        &mut self,
        key: &PartitionStateKey,
        to: State,
        edit: impl FnOnce(&mut PartitionRecord),
    ) -> Result<(), AdminError> {
        let p = self
            .partitions
            .get_mut(key)
            .ok_or_else(|| internal("unknown partition"))?;
        let mut record = p.record.clone();
        if record.state != to {
            record.state = record.state.transition(to)?;
        }
        edit(&mut record);
        record.updated_ms = now_ms();
        self.store
            .put_partition(key.clone(), record.clone())
            .map_err(internal)?;
        tracing::info!(mirror = key.mirror, partition = %p.tp, from = %p.record.state, to = %record.state, "partition state");
        p.record = record;
        self.reports_dirty = true;
        Ok(())
    }

    /// [`Core::set_state`] where the caller cannot answer an error: logged.
    fn set_state_logged(&mut self, key: &PartitionStateKey, to: State, edit: impl FnOnce(&mut PartitionRecord)) {
        if let Err(e) = self.set_state(key, to, edit) {
            tracing::error!(mirror = key.mirror, partition = key.partition, error = %e, "cannot change partition state");
        }
    }

    fn fail(&mut self, key: &PartitionStateKey, error: String) {
        tracing::error!(
            mirror = key.mirror,
            partition = key.partition,
            error,
            "partition FAILED"
        );
        self.set_state_logged(key, State::Failed, |r| r.error = Some(error));
        self.schedule_retry(key);
    }

    fn schedule_retry(&mut self, key: &PartitionStateKey) {
        if let Some(p) = self.partitions.get_mut(key) {
            p.next_retry = (p.record.retry_attempt < FAILED_RETRY_ATTEMPTS_MAX)
                .then(|| Instant::now() + failed_backoff(p.record.retry_attempt));
        }
    }

    /// FAILED partitions whose backoff ran out go through PREPARING again.
    fn retry_failed(&mut self) {
        let now = Instant::now();
        let due: Vec<PartitionStateKey> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.record.state == State::Failed && p.next_retry.is_some_and(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.partitions.get_mut(&key).expect("listed").next_retry = None;
            self.restart_partition(&key, true);
        }
    }

    /// FAILED → PREPARING: the partition is placed again with LME truncation.
    fn restart_partition(&mut self, key: &PartitionStateKey, automatic: bool) {
        let result = self.set_state(key, State::Preparing, |r| {
            if automatic {
                r.retry_attempt += 1;
            } else {
                r.retry_attempt = 0;
            }
            r.error = None;
        });
        match result {
            Ok(()) => {
                if let Some(m) = self.mirrors.get_mut(&key.mirror) {
                    m.to_prepare.push(key.clone());
                    m.next_sync = Instant::now();
                }
            }
            Err(e) => tracing::error!(mirror = key.mirror, partition = key.partition, error = %e, "cannot retry"),
        }
    }

    // ---- shard commands ----

    fn shard_of(&self, key: &PartitionStateKey, tp: &TopicPartition) -> usize {
        PartitionKey {
            mirror: key.mirror.clone(),
            topic_id: key.topic_id,
            tp: tp.clone(),
        }
        .shard(self.shards.len())
    }

    fn send(&self, key: &PartitionStateKey, command: ShardCommand) {
        let Some(p) = self.partitions.get(key) else {
            return;
        };
        let shard = self.shard_of(key, &p.tp);
        if let Err(e) = self.shards[shard].try_send(command) {
            tracing::error!(mirror = key.mirror, partition = %p.tp, error = %e, "shard did not take a command");
        }
    }

    /// Places a partition on its shard: mirroring (or paused), at its
    /// destination epoch, after LME truncation when `last_mirror_epoch` is
    /// given. The shard is told the source (cluster id, source topic id):
    /// a log holding only its batches, with nothing written here, is not cut.
    fn place(&mut self, key: &PartitionStateKey, last_mirror_epoch: Option<i32>, paused: bool) {
        let Some(m) = self.mirrors.get(&key.mirror) else {
            return;
        };
        let Some(p) = self.partitions.get(key) else {
            return;
        };
        let command = ShardCommand::AddPartition {
            settings: m.record.config.settings(),
            key: PartitionKey {
                mirror: key.mirror.clone(),
                topic_id: key.topic_id,
                tp: p.tp.clone(),
            },
            start: PartitionStart {
                destination_epoch: p.record.destination_leader_epoch,
                truncate_above_epoch: last_mirror_epoch,
                source: m
                    .record
                    .source_cluster_id
                    .as_deref()
                    .and_then(|cluster_id| MirrorSource::new(cluster_id, key.topic_id)),
                paused,
                // Only a topic the operator named may take over a local
                // topic (failback); a discovered one never does.
                claim_local: m.selection.named().contains(&p.tp.topic),
            },
        };
        self.send(key, command);
        if let Some(p) = self.partitions.get_mut(key) {
            p.placed = true;
            p.placed_paused = paused;
        }
    }

    fn end_unplaced(&self, key: &PartitionStateKey) {
        let Some(p) = self.partitions.get(key) else {
            return;
        };
        let source_cluster_id = self
            .mirrors
            .get(&key.mirror)
            .and_then(|m| m.record.source_cluster_id.clone())
            .unwrap_or_default();
        self.send(
            key,
            ShardCommand::EndMirroringUnplaced {
                mirror: key.mirror.clone(),
                tp: p.tp.clone(),
                source_cluster_id,
                destination_epoch: p.record.destination_leader_epoch,
            },
        );
    }

    /// Bumps a partition's destination epoch above `source_epoch` (the
    /// epoch rules), through EPOCH_FENCING; `resume` for the reactive case,
    /// where appending stopped until the bump lands.
    fn bump_epoch(&mut self, key: &PartitionStateKey, source_epoch: i32, resume: bool) {
        let Some(p) = self.partitions.get(key) else {
            return;
        };
        let current = p.record.destination_leader_epoch;
        let Some((trigger, min)) = epochs::bump_needed(source_epoch, current) else {
            if resume {
                self.send(
                    key,
                    ShardCommand::Resume {
                        mirror: key.mirror.clone(),
                        tp: p.tp.clone(),
                    },
                );
            }
            return;
        };
        if !matches!(p.record.state, State::Mirroring | State::EpochFencing) {
            return;
        }
        let tp = p.tp.clone();
        let epoch = epochs::bumped(current, min);
        tracing::info!(mirror = key.mirror, partition = %tp, ?trigger, source_epoch, from = current, to = epoch, "bumping the destination leader epoch");
        if let Err(e) = self.set_state(key, State::EpochFencing, |r| r.destination_leader_epoch = epoch) {
            tracing::error!(mirror = key.mirror, partition = %tp, error = %e, "cannot record the epoch bump");
            return;
        }
        crash_point("epoch:fencing-written");
        self.send(key, ShardCommand::SetLeaderEpoch { tp: tp.clone(), epoch });
        if resume {
            self.send(
                key,
                ShardCommand::Resume {
                    mirror: key.mirror.clone(),
                    tp,
                },
            );
        }
        // Shard commands run in order: the bump is in place before any
        // later command, so the partition is mirroring again.
        self.set_state_logged(key, State::Mirroring, |_| {});
        if let Some(p) = self.partitions.get_mut(key) {
            p.live.epoch_bumps += 1;
        }
    }

    // ---- source metadata ----

    async fn sync_due_mirrors(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .mirrors
            .iter()
            .filter(|(_, m)| m.next_sync <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.sync_mirror(&name).await;
        }
    }

    async fn sync_mirror(&mut self, name: &str) {
        let Some(m) = self.mirrors.get_mut(name) else {
            return;
        };
        let refresh = Duration::from_millis(m.record.config.metadata_refresh_interval_ms);
        match source_metadata(m).await {
            Ok(metadata) => {
                m.sync_failures = 0;
                m.next_sync = Instant::now() + refresh;
                m.last_sync_ms = Some(now_ms());
                self.apply_metadata(name, &metadata);
                self.check_deletions(name, &metadata).await;
                self.sync_topic_configs(name).await;
                self.sync_groups(name).await;
                self.sync_acls(name).await;
            }
            Err(e) => {
                m.sync_failures += 1;
                m.conn = None;
                let backoff = SYNC_RETRY_MIN.saturating_mul(1 << m.sync_failures.min(10)).min(refresh);
                tracing::warn!(mirror = name, error = %e, retry_in = ?backoff, "cannot read source metadata");
                m.sync_error = Some(e.to_string());
                m.next_sync = Instant::now() + backoff;
            }
        }
    }

    fn apply_metadata(&mut self, name: &str, metadata: &SourceMetadata) {
        let m = self.mirrors.get_mut(name).expect("synced mirror exists");
        // The cluster id is recorded on the first round; a different one
        // later means the bootstrap servers now reach another cluster.
        match (&m.record.source_cluster_id, &metadata.cluster_id) {
            (Some(recorded), Some(seen)) if recorded != seen => {
                if !m.halted {
                    tracing::error!(
                        mirror = name,
                        recorded,
                        seen,
                        "the source's cluster id changed: sync halted, no partition is touched"
                    );
                }
                m.halted = true;
                m.sync_error = Some(format!("source cluster id is {seen}, not the recorded {recorded}"));
                return;
            }
            (None, Some(seen)) => {
                let mut record = m.record.clone();
                record.source_cluster_id = Some(seen.clone());
                match self.store.put_mirror(&record) {
                    Ok(()) => m.record = record,
                    Err(e) => tracing::error!(mirror = name, error = %e, "cannot record the source cluster id"),
                }
            }
            _ => {}
        }
        m.halted = false;
        m.sync_error = None;
        for topic in m.selection.named() {
            if !metadata.topics.contains_key(topic) {
                if m.reported_missing.insert(topic.clone()) {
                    tracing::warn!(
                        mirror = name,
                        topic,
                        "topic not (yet) available at the source; will look again"
                    );
                }
            } else {
                m.reported_missing.remove(topic);
            }
        }
        m.topics = metadata
            .topics
            .keys()
            .filter(|t| m.selection.wants(t))
            .cloned()
            .collect();
        let mut found = Vec::new();
        let mut bumps = Vec::new();
        for (tp, source) in &metadata.partitions {
            if !m.selection.wants(&tp.topic) {
                continue;
            }
            let key = PartitionStateKey {
                mirror: name.to_owned(),
                topic_id: source.topic_id,
                partition: tp.partition,
            };
            match self.partitions.get_mut(&key) {
                Some(p) => {
                    p.source_epoch = source.leader_epoch;
                    if p.record.state == State::Mirroring
                        && epochs::bump_needed(source.leader_epoch, p.record.destination_leader_epoch).is_some()
                    {
                        bumps.push((key, source.leader_epoch));
                    }
                }
                None => found.push((key, tp.clone(), source.leader_epoch)),
            }
        }
        for (key, sle) in bumps {
            // The periodic trigger.
            self.bump_epoch(&key, sle, false);
        }
        self.stop_excluded_topics(name);
        let mirror_paused = self.mirror_paused(name);
        let mut added = 0;
        for (key, tp, sle) in found {
            // A paused mirror takes no new topics (no metadata sync); a new
            // partition of a paused topic is added, and placed PAUSED.
            if mirror_paused && !self.by_tp.keys().any(|(m, t)| m == name && t.topic == tp.topic) {
                continue;
            }
            // Decided per topic, so that a topic never mixes partitions of
            // two sources: another mirror holding any partition of it (a
            // stopped one is local now and may be claimed), or this mirror
            // holding it under another topic id (recreated at the source).
            let holder = self.partitions.iter().find(|(k, p)| {
                p.tp.topic == tp.topic
                    && ((k.mirror != name && p.record.state != State::Stopped)
                        || (k.mirror == name && k.topic_id != key.topic_id))
            });
            if let Some((other, _)) = holder {
                let m = self.mirrors.get_mut(name).expect("exists");
                if m.reported_conflicts.insert(tp.topic.clone()) {
                    if other.mirror == name {
                        tracing::error!(
                            mirror = name,
                            topic = tp.topic,
                            "source topic id changed (topic recreated?); not mirroring the new one"
                        );
                    } else {
                        tracing::error!(
                            mirror = name,
                            other = other.mirror,
                            topic = tp.topic,
                            "topic is already mirrored by another mirror; each destination topic has one source"
                        );
                    }
                }
                continue;
            }
            let record = PartitionRecord {
                topic: tp.topic.clone(),
                state: State::Preparing,
                last_mirror_epoch: -1,
                destination_leader_epoch: epochs::bumped(-1, sle.max(0).saturating_add(epochs::INCREMENT - 1)),
                retry_attempt: 0,
                error: None,
                updated_ms: now_ms(),
            };
            if let Err(e) = self.store.put_partition(key.clone(), record.clone()) {
                tracing::error!(mirror = name, %tp, error = %e, "cannot record a new partition");
                continue;
            }
            self.by_tp.insert((name.to_owned(), tp.clone()), key.clone());
            self.partitions.insert(
                key.clone(),
                Partition {
                    tp,
                    record,
                    placed: false,
                    placed_paused: false,
                    source_epoch: sle,
                    next_retry: None,
                    live: Live::default(),
                },
            );
            self.mirrors.get_mut(name).expect("exists").to_prepare.push(key);
            added += 1;
        }
        if added > 0 {
            tracing::info!(mirror = name, added, "new partitions to mirror");
            self.reports_dirty = true;
            crash_point("prepare:preparing-written");
        }
    }

    /// Commits the source's consumer group offsets for the partitions this
    /// mirror is mirroring at our listener, for groups not active here.
    async fn sync_groups(&mut self, name: &str) {
        let mirrored: BTreeSet<(String, i32)> = self
            .partitions
            .iter()
            .filter(|(k, p)| k.mirror == name && matches!(p.record.state, State::Mirroring | State::EpochFencing))
            .map(|(_, p)| (p.tp.topic.clone(), p.tp.partition))
            .collect();
        if mirrored.is_empty()
            || self.mirrors.get(name).is_none_or(|m| m.halted)
            || self.listener_connection(name).await.is_none()
        {
            return;
        }
        let m = self.mirrors.get_mut(name).expect("checked");
        let destination = self.listener_conn.as_mut().expect("connected");
        let filter = m.group_filter.clone();
        let source = match connection(m).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "cannot reach the source for group offsets");
                m.conn = None;
                return;
            }
        };
        let result = sync_group_offsets(source, destination, &mirrored, &filter).await;
        match result {
            Ok(report) => {
                let committed = report.committed();
                if committed > 0 {
                    tracing::info!(mirror = name, committed, "group offsets synced from the source");
                }
                m.group_sync = Some((now_ms(), report));
            }
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "group offset sync failed; next round tries again");
                m.conn = None;
                self.listener_conn = None;
            }
        }
    }

    /// Our own listener (for group offsets and ACLs), connected if need be.
    async fn listener_connection(&mut self, name: &str) -> Option<&mut Connection> {
        let addr = self.listener_addr.clone()?;
        if self.listener_conn.is_none() {
            let options = ConnectionOptions {
                sasl: self.listener_sasl.clone(),
                tls: self.listener_tls.clone(),
                ..control_options("sync")
            };
            match Connection::connect(&addr, options).await {
                Ok(c) => self.listener_conn = Some(c),
                Err(e) => {
                    tracing::warn!(mirror = name, error = %e, "cannot reach our own listener");
                    return None;
                }
            }
        }
        self.listener_conn.as_mut()
    }

    /// Creates the source's ACLs (those the mirror's `acls_include`
    /// selects) at our listener and deletes the ones the source lost.
    /// ACLs are the mirror's, not a topic's: a paused mirror (every topic
    /// paused) syncs none.
    async fn sync_acls(&mut self, name: &str) {
        if self.mirrors.get(name).is_none_or(|m| m.halted)
            || self.mirror_paused(name)
            || self.listener_connection(name).await.is_none()
        {
            return;
        }
        let m = self.mirrors.get_mut(name).expect("checked");
        let destination = self.listener_conn.as_mut().expect("connected");
        let include = m.record.config.acls_include.clone();
        let source = match connection(m).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "cannot reach the source for ACLs");
                m.conn = None;
                return;
            }
        };
        let result = sync_acls(source, destination, &include).await;
        match result {
            Ok(report) => {
                if report.changed() {
                    tracing::info!(
                        mirror = name,
                        created = report.created.len(),
                        deleted = report.deleted.len(),
                        "ACLs synced from the source"
                    );
                }
                for e in &report.errors {
                    tracing::warn!(mirror = name, error = e, "ACL sync");
                }
                m.acl_sync = Some((now_ms(), report));
            }
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "ACL sync failed; next round tries again");
                m.conn = None;
                self.listener_conn = None;
            }
        }
    }

    /// Copies the source's topic-level config overrides of the topics this
    /// mirror is mirroring: written to `__mirror_state` when they change,
    /// then served by the listener (DescribeConfigs).
    async fn sync_topic_configs(&mut self, name: &str) {
        let topics: Vec<String> = self
            .partitions
            .iter()
            .filter(|(k, p)| {
                k.mirror == name
                    && matches!(
                        p.record.state,
                        State::Preparing | State::Mirroring | State::EpochFencing
                    )
            })
            .map(|(_, p)| p.tp.topic.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            // A paused topic's new partition (PREPARING) does not bring
            // its configs back into the sync.
            .filter(|t| !self.topic_paused(name, t))
            .collect();
        let Some(m) = self.mirrors.get_mut(name) else {
            return;
        };
        if m.halted || topics.is_empty() {
            return;
        }
        let source = match connection(m).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "cannot reach the source for topic configs");
                m.conn = None;
                return;
            }
        };
        let report = match fetch_topic_configs_report(source, &topics).await {
            Ok(report) => report,
            Err(e @ ClientError::NoCommonVersion { .. }) => {
                // Such as librdkafka's mock: the connection is fine.
                tracing::debug!(mirror = name, error = %e, "the source serves no DescribeConfigs; topic configs not synced");
                return;
            }
            Err(e) => {
                tracing::warn!(mirror = name, error = %e, "topic config sync failed; next round tries again");
                m.conn = None;
                return;
            }
        };
        let mut outcome: BTreeMap<String, String> = report
            .errors
            .into_iter()
            .map(|(topic, error)| (topic, format!("not described: {error}")))
            .collect();
        let none = BTreeMap::new();
        for (topic, synced) in report.topics {
            let key = TopicConfigKey {
                mirror: name.to_owned(),
                topic: topic.clone(),
            };
            let held = self.store.topic_configs().get(&key);
            let first = held.is_none();
            let change = diff(held.map_or(&none, |r| &r.configs), &synced.configs);
            if first || !change.is_empty() {
                let record = TopicConfigRecord {
                    configs: synced.configs.clone(),
                    updated_ms: now_ms(),
                };
                if let Err(e) = self.store.put_topic_configs(key, record) {
                    tracing::error!(mirror = name, topic, error = %e, "cannot record a topic's configs");
                    continue;
                }
                if !change.is_empty() {
                    tracing::info!(mirror = name, topic, %change, "topic configs synced from the source");
                }
            }
            outcome.insert(
                topic.clone(),
                format!("{} override(s); last round: {change}", synced.configs.len()),
            );
            self.catalog.publish_topic_configs(&topic, synced.configs);
        }
        if let Some(m) = self.mirrors.get_mut(name) {
            m.config_sync = Some((now_ms(), outcome));
        }
    }

    /// Partitions the mirror's exclude pattern now covers stop mirroring
    /// at once (the operator asked for it; failover, STOPPED): their data
    /// stays, writable. A paused one too: exclusion is not source metadata.
    fn stop_excluded_topics(&mut self, name: &str) {
        let m = &self.mirrors[name];
        let excluded: Vec<PartitionStateKey> = self
            .partitions
            .iter()
            .filter(|(k, p)| {
                k.mirror == name && p.record.state.can_move_to(State::Stopping) && !m.selection.wants(&p.tp.topic)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in excluded {
            self.stop_for(&key, "excluded by the mirror");
        }
    }

    /// Deletion checks, after a metadata round: a mirrored topic the
    /// round's answer does not show with its topic id is asked for by name
    /// and by id at one broker (another each round); [`DeletionChecks`]
    /// counts the answers, and a confirmed deletion (or recreation under a
    /// new id) stops the topic's partitions (STOPPED, data kept, writable).
    /// Paused topics are not checked (no metadata sync while paused).
    async fn check_deletions(&mut self, name: &str, metadata: &SourceMetadata) {
        let Some(m) = self.mirrors.get(name) else { return };
        if m.halted {
            return;
        }
        let watched: BTreeMap<String, [u8; 16]> = self
            .partitions
            .iter()
            .filter(|(k, p)| {
                k.mirror == name
                    && p.record.state.can_move_to(State::Stopping)
                    && !matches!(p.record.state, State::Pausing | State::Paused)
            })
            .map(|(k, p)| (p.tp.topic.clone(), k.topic_id))
            .collect();
        let m = self.mirrors.get_mut(name).expect("checked");
        m.deletion.retain(|t| watched.contains_key(t));
        let round = Round {
            policy: m.record.config.deletion_policy(),
            brokers_known: metadata.brokers.len(),
            now: Instant::now(),
            now_ms: now_ms(),
        };
        let mut candidates = Vec::new();
        for (topic, id) in watched {
            match metadata.topics.get(&topic) {
                Some((seen, _)) if *seen == id || *seen == NO_TOPIC_ID || id == NO_TOPIC_ID => {
                    m.deletion.observe(&topic, id, Sighting::Present, round);
                }
                _ => candidates.push((topic, id)),
            }
        }
        if candidates.is_empty() {
            return;
        }
        let mut brokers: Vec<(i32, String)> = metadata.brokers.iter().map(|(id, a)| (*id, a.clone())).collect();
        brokers.sort();
        if brokers.is_empty() {
            return;
        }
        let (broker, addr) = brokers[m.probe_turn % brokers.len()].clone();
        m.probe_turn = m.probe_turn.wrapping_add(1);
        let answer = match Connection::connect(&addr, source_options(m)).await {
            Ok(mut conn) => deletion::probe(&mut conn, broker, &candidates).await,
            Err(e) => Err(e),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                // A failed probe is no evidence either way.
                tracing::warn!(mirror = name, broker, addr, error = %e, "cannot ask the source about topics missing from its metadata; next round tries again");
                return;
            }
        };
        let mut confirmed = Vec::new();
        for (topic, id) in candidates {
            let sighting = answer.sighting(&topic, id, m.record.source_cluster_id.as_deref());
            let denied_before = m.deletion.sync_error(&topic).is_some();
            let observed = m.deletion.observe(&topic, id, sighting, round);
            if let Some(new_id) = observed.new_recreation {
                tracing::warn!(
                    mirror = name,
                    topic,
                    mirrored_id = deletion::uuid_string(&id),
                    new_id = deletion::uuid_string(&new_id),
                    "topic recreated at the source under another topic id; the mirrored one is stopped once its id is confirmed absent"
                );
            }
            match sighting {
                Sighting::Denied { code } if !denied_before => tracing::warn!(
                    mirror = name,
                    topic,
                    error = deletion::error_name(code),
                    "the source refuses to describe a mirrored topic; it is not stopped for that (grant DESCRIBE)"
                ),
                Sighting::Absent { .. } if !observed.confirmed => tracing::info!(
                    mirror = name,
                    topic,
                    broker,
                    "mirrored topic absent at the source; stopped once confirmed"
                ),
                _ => {}
            }
            if observed.confirmed {
                let reason = match sighting {
                    Sighting::Absent {
                        recreated_as: Some(_), ..
                    } => "recreated at the source (confirmed)",
                    _ => "deleted at the source (confirmed)",
                };
                confirmed.push((topic, reason));
            }
        }
        for (topic, reason) in confirmed {
            if let Some(m) = self.mirrors.get_mut(name) {
                m.deletion.forget(&topic);
            }
            let keys: Vec<PartitionStateKey> = self
                .partitions
                .iter()
                .filter(|(k, p)| {
                    k.mirror == name
                        && p.tp.topic == topic
                        && p.record.state.can_move_to(State::Stopping)
                        && !matches!(p.record.state, State::Pausing | State::Paused)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for key in keys {
                self.stop_for(&key, reason);
            }
        }
    }

    /// Stops one partition for `reason` (logged).
    fn stop_for(&mut self, key: &PartitionStateKey, reason: &str) {
        tracing::warn!(mirror = key.mirror, partition = key.partition, topic = %self.partitions[key].tp.topic, reason, "stopping the partition (its data stays, writable)");
        if let Err(e) = self.stop_partition(key) {
            tracing::error!(mirror = key.mirror, partition = key.partition, error = %e, "cannot stop the partition");
        }
    }

    /// Whether `topic` of mirror `name` is paused: some partition of it is
    /// PAUSING or PAUSED and none is fetching. New partitions of a paused
    /// topic start PAUSED, and it has no metadata sync.
    fn topic_paused(&self, name: &str, topic: &str) -> bool {
        paused_among(
            self.partitions
                .iter()
                .filter(|(k, p)| k.mirror == name && p.tp.topic == topic)
                .map(|(_, p)| p.record.state),
        )
    }

    /// Whether the whole mirror is paused (as [`Core::topic_paused`], over
    /// all its partitions): no new topics, no ACL sync.
    fn mirror_paused(&self, name: &str) -> bool {
        paused_among(
            self.partitions
                .iter()
                .filter(|(k, _)| k.mirror == name)
                .map(|(_, p)| p.record.state),
        )
    }

    /// STOPPING: the shard ends mirroring (markers, writable) and reports it.
    fn stop_partition(&mut self, key: &PartitionStateKey) -> Result<(), AdminError> {
        if self.partitions[key].record.state != State::Stopping {
            self.set_state(key, State::Stopping, |_| {})?;
        }
        let p = &self.partitions[key];
        let (placed, tp) = (p.placed, p.tp.clone());
        if placed {
            self.send(
                key,
                ShardCommand::EndMirroring {
                    mirror: key.mirror.clone(),
                    tp,
                },
            );
        } else {
            self.end_unplaced(key);
        }
        Ok(())
    }

    /// PREPARING: asks each mirror's source for the last mirror epochs of
    /// the partitions waiting, then places them with LME truncation.
    async fn prepare_waiting(&mut self) {
        let names: Vec<String> = self
            .mirrors
            .iter()
            .filter(|(_, m)| !m.to_prepare.is_empty() && !m.halted)
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            let m = self.mirrors.get_mut(&name).expect("listed");
            let keys: Vec<PartitionStateKey> = m
                .to_prepare
                .iter()
                .filter(|k| {
                    self.partitions
                        .get(k)
                        .is_some_and(|p| p.record.state == State::Preparing)
                })
                .cloned()
                .collect();
            if keys.is_empty() {
                m.to_prepare.clear();
                continue;
            }
            let mut lookups: BTreeMap<[u8; 16], Vec<i32>> = BTreeMap::new();
            for k in &keys {
                lookups.entry(k.topic_id).or_default().push(k.partition);
            }
            let lookups: Vec<([u8; 16], Vec<i32>)> = lookups.into_iter().collect();
            let answer = match connection(m).await {
                Ok(conn) => last_mirror_epochs(conn, &self.local_cluster_id, &lookups).await,
                Err(e) => Err(e),
            };
            let lmes = match answer {
                Ok(lmes) => lmes,
                Err(e) => {
                    // Waits for the next round; the partitions stay PREPARING.
                    tracing::warn!(mirror = name, error = %e, "cannot look up last mirror epochs; will try again");
                    m.conn = None;
                    m.next_sync = m.next_sync.min(Instant::now() + SYNC_RETRY_MIN);
                    continue;
                }
            };
            m.to_prepare.clear();
            for key in keys {
                let lme = lmes.get(&(key.topic_id, key.partition)).copied().unwrap_or(-1);
                let topic = self.partitions[&key].tp.topic.clone();
                // A new (or retried) partition of a paused topic starts
                // PAUSED: PAUSING is written before it is placed.
                let paused = self.topic_paused(&name, &topic);
                if paused && self.set_state(&key, State::Pausing, |_| {}).is_err() {
                    continue;
                }
                self.place(&key, Some(lme), paused);
            }
        }
    }

    // ---- shard events ----

    fn key_of(&self, mirror: &str, tp: &TopicPartition) -> Option<PartitionStateKey> {
        self.by_tp.get(&(mirror.to_owned(), tp.clone())).cloned()
    }

    fn on_event(&mut self, event: ShardEvent) {
        match event {
            ShardEvent::State(event) => self.on_state_event(event),
            ShardEvent::Telemetry(event) => self.on_telemetry(event),
        }
    }

    /// What moves a partition's state, or records what was done to its log.
    fn on_state_event(&mut self, event: StateEvent) {
        match event {
            StateEvent::Placed {
                mirror,
                tp,
                log_end_offset,
                truncated_to,
            } => {
                let Some(key) = self.key_of(&mirror, &tp) else { return };
                let p = self.partitions.get_mut(&key).expect("indexed");
                p.live.destination_offset = log_end_offset;
                if truncated_to.is_some() {
                    p.live.truncations += 1;
                }
                if p.record.state == State::Preparing {
                    self.set_state_logged(&key, State::Mirroring, |r| r.error = None);
                } else if p.record.state == State::Pausing && p.placed_paused {
                    // Placed paused: no fetch ever includes it.
                    self.set_state_logged(&key, State::Paused, |r| r.error = None);
                }
            }
            StateEvent::Paused { mirror, tp } => {
                if let Some(key) = self.key_of(&mirror, &tp)
                    && self.partitions[&key].record.state == State::Pausing
                {
                    self.set_state_logged(&key, State::Paused, |_| {});
                }
            }
            StateEvent::EpochBumpDue {
                mirror,
                tp,
                source_epoch,
                ..
            } => {
                if let Some(key) = self.key_of(&mirror, &tp) {
                    self.bump_epoch(&key, source_epoch, false);
                }
            }
            StateEvent::Stopped { mirror, tp, reason } => {
                let Some(key) = self.key_of(&mirror, &tp) else { return };
                match reason {
                    StopReason::EpochExceeded { batch_epoch, .. } => self.bump_epoch(&key, batch_epoch, true),
                    StopReason::LogFailed { error } => self.fail(&key, format!("log: {error}")),
                }
            }
            StateEvent::Truncated {
                mirror, tp, to_offset, ..
            } => {
                if let Some(key) = self.key_of(&mirror, &tp) {
                    let live = &mut self.partitions.get_mut(&key).expect("indexed").live;
                    live.destination_offset = to_offset;
                    live.truncations += 1;
                }
            }
            StateEvent::Diverged {
                mirror,
                tp,
                first_differing_offset,
                truncated_to,
                bytes_lost,
            } => {
                tracing::warn!(mirror, %tp, first_differing_offset, truncated_to, bytes_lost, "mirror partition diverged from the source; its new history is mirrored");
                if let Some(key) = self.key_of(&mirror, &tp) {
                    self.partitions.get_mut(&key).expect("indexed").live.divergences += 1;
                }
                if let Some(m) = self.mirrors.get_mut(&mirror) {
                    if m.partition_events.len() == PARTITION_EVENTS_KEPT_MAX {
                        m.partition_events.pop_front();
                    }
                    m.partition_events.push_back(PartitionEvent {
                        at_ms: now_ms(),
                        topic: tp.topic,
                        partition: tp.partition,
                        first_differing_offset,
                        truncated_to,
                        bytes_lost,
                    });
                }
            }
            StateEvent::Verified { mirror, tp, outcome } => self.on_verified(&mirror, &tp, outcome),
            StateEvent::Removed { mirror, tp, .. } => {
                if let Some(key) = self.key_of(&mirror, &tp)
                    && let Some(p) = self.partitions.get_mut(&key)
                {
                    p.placed = false;
                }
                // A forgotten partition keeps its data, served read-only.
                if !self.by_tp.contains_key(&(mirror, tp.clone())) {
                    let shard = ringmirror_dataplane::fetch::shard_for(&tp, self.shards.len());
                    let _ = self.shards[shard].try_send(ShardCommand::ServePartition { tp });
                }
            }
            StateEvent::MirrorEnded {
                mirror,
                tp,
                log_end_offset,
                leader_epoch,
                last_mirror_epoch,
                ..
            } => {
                let Some(key) = self.key_of(&mirror, &tp) else { return };
                let p = self.partitions.get_mut(&key).expect("indexed");
                p.placed = false;
                p.live.destination_offset = log_end_offset;
                if p.record.state == State::Stopping {
                    crash_point("stop:ended");
                    self.set_state_logged(&key, State::Stopped, |r| {
                        r.last_mirror_epoch = last_mirror_epoch;
                        r.destination_leader_epoch = r.destination_leader_epoch.max(leader_epoch);
                        r.error = None;
                    });
                }
            }
            StateEvent::CommandFailed { mirror, tp, error } => {
                let Some(key) = self.key_of(&mirror, &tp) else {
                    tracing::warn!(mirror, %tp, error, "shard command failed");
                    return;
                };
                let p = self.partitions.get_mut(&key).expect("indexed");
                let state = p.record.state;
                if state == State::Preparing {
                    // Refused placement: not on the shard.
                    p.placed = false;
                }
                if matches!(state, State::Preparing | State::Stopping) {
                    self.fail(&key, error);
                } else {
                    tracing::warn!(mirror, %tp, %state, error, "shard command failed");
                }
            }
        }
    }

    /// Measurements: offsets and lag, counters, fetch statistics.
    fn on_telemetry(&mut self, event: TelemetryEvent) {
        match event {
            TelemetryEvent::Progress {
                mirror,
                tp,
                log_end_offset,
                high_watermark,
                appended_bytes,
                appended_batches,
            } => {
                let Some(key) = self.key_of(&mirror, &tp) else { return };
                let live = &mut self.partitions.get_mut(&key).expect("indexed").live;
                // The shard counts from its placement; keep totals monotonic.
                if appended_bytes < live.placed_bytes {
                    live.bytes_before += live.placed_bytes;
                    live.batches_before += live.placed_batches;
                }
                live.placed_bytes = appended_bytes;
                live.placed_batches = appended_batches;
                live.destination_offset = log_end_offset;
                live.source_offset = Some(high_watermark);
                if log_end_offset >= high_watermark {
                    live.behind_since = None;
                } else if live.behind_since.is_none() {
                    live.behind_since = Some(Instant::now());
                }
            }
            TelemetryEvent::BadBatch { mirror, tp, .. } => {
                if let Some(key) = self.key_of(&mirror, &tp) {
                    self.partitions.get_mut(&key).expect("indexed").live.crc_failures += 1;
                }
            }
            TelemetryEvent::FetchStats { mirror, stats } => {
                if let Some(m) = self.mirrors.get_mut(&mirror) {
                    m.fetch_stats.merge(&stats);
                }
            }
            TelemetryEvent::Checkpoint { .. } => {}
        }
    }

    // ---- operator requests ----

    fn handle(&mut self, request: AdminRequest) -> Result<AdminAnswer, AdminError> {
        match request {
            AdminRequest::CreateMirror { mut config } => self.create_mirror(&mut config),
            AdminRequest::UpdateMirror { mut config } => {
                config.normalize();
                let name = config.name.clone();
                self.update_config(&name, |c| {
                    config.keep_password_of(c);
                    *c = config;
                })?;
                let m = self.mirrors.get_mut(&name).expect("updated");
                m.group_filter = m
                    .record
                    .config
                    .group_filter()
                    .map_err(|e| AdminError::Invalid(e.to_string()))?;
                m.reported_missing.clear();
                m.reported_conflicts.clear();
                let settings = m.record.config.settings();
                for shard in &self.shards {
                    let command = ShardCommand::UpdateMirror {
                        settings: settings.clone(),
                    };
                    if let Err(e) = shard.try_send(command) {
                        tracing::error!(mirror = name, error = %e, "shard did not take the updated settings");
                    }
                }
                tracing::info!(mirror = name, "mirror definition updated");
                Ok(AdminAnswer::Accepted {
                    mirror: name,
                    partitions: Vec::new(),
                })
            }
            AdminRequest::ListMirrors => Ok(AdminAnswer::Mirrors {
                mirrors: self.mirrors.keys().map(|n| self.summary(n)).collect(),
            }),
            AdminRequest::DescribeMirror { mirror } => Ok(AdminAnswer::Mirror {
                mirror: self.describe(&mirror)?,
            }),
            AdminRequest::DeleteMirror { mirror } => self.delete_mirror(&mirror),
            AdminRequest::AddTopics { mirror, topics } => self.add_topics(&mirror, topics),
            AdminRequest::RemoveTopics { mirror, topics } => self.remove_topics(&mirror, &topics),
            AdminRequest::Pause { mirror, topics } => self.change(&mirror, &topics, Change::Pause),
            AdminRequest::Resume { mirror, topics } => self.change(&mirror, &topics, Change::Resume),
            AdminRequest::Stop { mirror, topics } => self.change(&mirror, &topics, Change::Stop),
            AdminRequest::Restart { mirror, topics } => self.change(&mirror, &topics, Change::Restart),
            AdminRequest::Sync { mirror } => {
                let m = self
                    .mirrors
                    .get_mut(&mirror)
                    .ok_or_else(|| AdminError::UnknownMirror { mirror: mirror.clone() })?;
                m.next_sync = Instant::now();
                Ok(AdminAnswer::Accepted {
                    mirror,
                    partitions: Vec::new(),
                })
            }
            AdminRequest::CheckDivergence { mirror, topics } => self.check_divergence(&mirror, &topics),
            AdminRequest::StartVerify {
                mirror,
                topics,
                from_offset,
                bytes_per_s,
            } => self.start_verify(&mirror, &topics, from_offset, bytes_per_s),
            AdminRequest::VerifyStatus { mirror } => match &self.mirror(&mirror)?.verify {
                Some(job) => Ok(AdminAnswer::Verify { job: job.clone() }),
                None => Err(AdminError::Invalid(format!("no verification of {mirror:?} has run"))),
            },
            AdminRequest::Status => Ok(AdminAnswer::Status {
                partitions: self.views(),
            }),
            AdminRequest::Metrics => Ok(AdminAnswer::Metrics {
                metrics: self.metrics(),
            }),
        }
    }

    fn create_mirror(&mut self, config: &mut MirrorConfig) -> Result<AdminAnswer, AdminError> {
        config.normalize();
        config.validate().map_err(|e| AdminError::Invalid(e.to_string()))?;
        if self.mirrors.contains_key(&config.name) {
            return Err(AdminError::MirrorExists {
                mirror: config.name.clone(),
            });
        }
        let record = MirrorRecord {
            config: config.clone(),
            source_cluster_id: None,
            created_ms: now_ms(),
        };
        let mirror = new_mirror(record.clone())?;
        self.store.put_mirror(&record).map_err(internal)?;
        tracing::info!(mirror = config.name, "mirror created");
        self.mirrors.insert(config.name.clone(), mirror);
        Ok(AdminAnswer::Accepted {
            mirror: config.name.clone(),
            partitions: Vec::new(),
        })
    }

    fn mirror(&self, name: &str) -> Result<&Mirror, AdminError> {
        self.mirrors
            .get(name)
            .ok_or_else(|| AdminError::UnknownMirror { mirror: name.into() })
    }

    fn keys_of_mirror(&self, name: &str) -> Vec<PartitionStateKey> {
        self.partitions.keys().filter(|k| k.mirror == name).cloned().collect()
    }

    /// Stops fetching a partition and forgets it; its data stays, served
    /// read-only (with the source's topic configs no more).
    fn forget_partition(&mut self, key: &PartitionStateKey) -> Result<(), AdminError> {
        let p = self
            .partitions
            .remove(key)
            .ok_or_else(|| internal("unknown partition"))?;
        self.store.remove_partition(key).map_err(internal)?;
        self.by_tp.remove(&(key.mirror.clone(), p.tp.clone()));
        let topic_left = !self
            .partitions
            .iter()
            .any(|(k, q)| k.mirror == key.mirror && q.tp.topic == p.tp.topic);
        let config_key = TopicConfigKey {
            mirror: key.mirror.clone(),
            topic: p.tp.topic.clone(),
        };
        if topic_left && self.store.topic_configs().contains_key(&config_key) {
            self.store.remove_topic_configs(&config_key).map_err(internal)?;
            self.catalog.publish_topic_configs(&p.tp.topic, BTreeMap::new());
        }
        if p.placed {
            let shard = self.shard_of(key, &p.tp);
            let _ = self.shards[shard].try_send(ShardCommand::RemovePartition {
                mirror: key.mirror.clone(),
                tp: p.tp,
            });
        }
        Ok(())
    }

    fn delete_mirror(&mut self, name: &str) -> Result<AdminAnswer, AdminError> {
        self.mirror(name)?;
        let keys = self.keys_of_mirror(name);
        let mut moved = Vec::new();
        for key in &keys {
            let p = &self.partitions[key];
            moved.push(TopicPartitionName {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition,
            });
            self.forget_partition(key)?;
        }
        self.store.delete_mirror(name).map_err(internal)?;
        self.mirrors.remove(name);
        tracing::info!(
            mirror = name,
            partitions = moved.len(),
            "mirror deleted; its data stays, read-only"
        );
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: moved,
        })
    }

    fn update_config(&mut self, name: &str, edit: impl FnOnce(&mut MirrorConfig)) -> Result<(), AdminError> {
        let m = self.mirror(name)?;
        let mut record = m.record.clone();
        edit(&mut record.config);
        record
            .config
            .validate()
            .map_err(|e| AdminError::Invalid(e.to_string()))?;
        let selection = TopicSelection::new(&record.config).map_err(|e| AdminError::Invalid(e.to_string()))?;
        self.store.put_mirror(&record).map_err(internal)?;
        let m = self.mirrors.get_mut(name).expect("checked");
        if m.record.config.bootstrap_servers != record.config.bootstrap_servers
            || m.record.config.sasl_client() != record.config.sasl_client()
            || m.record.config.tls_client() != record.config.tls_client()
        {
            // The next round reaches the new servers (and checks their
            // cluster id against the recorded one).
            m.conn = None;
        }
        m.record = record;
        m.selection = selection;
        m.next_sync = Instant::now();
        Ok(())
    }

    fn add_topics(&mut self, name: &str, topics: Vec<String>) -> Result<AdminAnswer, AdminError> {
        if topics.is_empty() {
            return Err(AdminError::Invalid("no topics given".into()));
        }
        self.update_config(name, |c| {
            for t in topics {
                if !c.topics.contains(&t) {
                    c.topics.push(t);
                }
            }
        })?;
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: Vec::new(),
        })
    }

    fn remove_topics(&mut self, name: &str, topics: &[String]) -> Result<AdminAnswer, AdminError> {
        let m = self.mirror(name)?;
        for t in topics {
            if !m.record.config.topics.contains(t) {
                let covered = self
                    .partitions
                    .iter()
                    .any(|(k, p)| k.mirror == name && &p.tp.topic == t);
                return Err(if covered {
                    AdminError::Invalid(format!(
                        "{t:?} is mirrored through topics_include; change topics_exclude to stop covering it"
                    ))
                } else {
                    AdminError::TopicNotInMirror {
                        mirror: name.into(),
                        topic: t.clone(),
                    }
                });
            }
        }
        self.update_config(name, |c| c.topics.retain(|t| !topics.contains(t)))?;
        let selection = self.mirrors[name].selection.clone();
        let keys: Vec<PartitionStateKey> = self
            .partitions
            .iter()
            .filter(|(k, p)| k.mirror == name && topics.contains(&p.tp.topic) && !selection.wants(&p.tp.topic))
            .map(|(k, _)| k.clone())
            .collect();
        let mut moved = Vec::new();
        for key in keys {
            let p = &self.partitions[&key];
            moved.push(TopicPartitionName {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition,
            });
            self.forget_partition(&key)?;
        }
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: moved,
        })
    }

    /// Pause, resume, stop or restart the partitions of some topics (all
    /// when none are named). Each named topic must be in the mirror and
    /// have at least one partition the change applies to.
    /// The mirror's placed, mirroring partitions of `topics` (none: all).
    fn mirroring_partitions(
        &self,
        name: &str,
        topics: &[String],
    ) -> Result<Vec<(PartitionStateKey, TopicPartition)>, AdminError> {
        self.mirror(name)?;
        if let Some(topic) = topics.iter().find(|t| {
            !self
                .partitions
                .iter()
                .any(|(k, p)| k.mirror == name && &p.tp.topic == *t)
        }) {
            return Err(AdminError::TopicNotInMirror {
                mirror: name.into(),
                topic: topic.clone(),
            });
        }
        Ok(self
            .partitions
            .iter()
            .filter(|(k, p)| {
                k.mirror == name
                    && p.placed
                    && p.record.state == State::Mirroring
                    && (topics.is_empty() || topics.contains(&p.tp.topic))
            })
            .map(|(k, p)| (k.clone(), p.tp.clone()))
            .collect())
    }

    /// Asks the shards for a divergence check of the mirror's mirroring
    /// partitions of `topics` (none: all).
    fn check_divergence(&self, name: &str, topics: &[String]) -> Result<AdminAnswer, AdminError> {
        let mut checked = Vec::new();
        for (key, tp) in self.mirroring_partitions(name, topics)? {
            checked.push(TopicPartitionName {
                topic: tp.topic.clone(),
                partition: tp.partition,
            });
            self.send(
                &key,
                ShardCommand::CheckDivergence {
                    mirror: name.into(),
                    tp,
                },
            );
        }
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: checked,
        })
    }

    /// Starts a verification of the mirror's mirroring partitions of
    /// `topics` (none: all) on their shards; their `Verified` events fill it in.
    fn start_verify(
        &mut self,
        name: &str,
        topics: &[String],
        from_offset: i64,
        bytes_per_s: u64,
    ) -> Result<AdminAnswer, AdminError> {
        if bytes_per_s == 0 {
            return Err(AdminError::Invalid("bytes_per_s must be above 0".into()));
        }
        let targets = self.mirroring_partitions(name, topics)?;
        let m = self.mirrors.get_mut(name).expect("checked");
        m.verifications += 1;
        let job = VerifyJob {
            mirror: name.into(),
            id: m.verifications,
            started_ms: now_ms(),
            from_offset,
            bytes_per_s,
            done: targets.is_empty(),
            partitions: targets
                .iter()
                .map(|(_, tp)| PartitionVerify {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    result: "running".into(),
                    first_differing_offset: None,
                    batches_compared: 0,
                    bytes_compared: 0,
                    error: None,
                })
                .collect(),
        };
        m.verify = Some(job.clone());
        for (key, tp) in targets {
            self.send(
                &key,
                ShardCommand::Verify {
                    mirror: name.into(),
                    tp,
                    from_offset,
                    bytes_per_s,
                },
            );
        }
        Ok(AdminAnswer::Verify { job })
    }

    /// A partition's verification ended: record it in the mirror's job.
    fn on_verified(&mut self, mirror: &str, tp: &TopicPartition, outcome: VerifyOutcome) {
        let Some(job) = self.mirrors.get_mut(mirror).and_then(|m| m.verify.as_mut()) else {
            return;
        };
        let Some(p) = job
            .partitions
            .iter_mut()
            .find(|p| p.topic == tp.topic && p.partition == tp.partition && p.result == "running")
        else {
            return;
        };
        match outcome {
            VerifyOutcome::Identical {
                batches_compared,
                bytes_compared,
            } => {
                p.result = "identical".into();
                p.batches_compared = batches_compared;
                p.bytes_compared = bytes_compared;
            }
            VerifyOutcome::Differs { first_differing_offset } => {
                tracing::warn!(mirror, %tp, first_differing_offset, "mirror verify: our batch differs from the source's");
                p.result = "differs".into();
                p.first_differing_offset = Some(first_differing_offset);
            }
            VerifyOutcome::Incomplete { error } => {
                p.result = "incomplete".into();
                p.error = Some(error);
            }
        }
        job.done = job.partitions.iter().all(|p| p.result != "running");
    }

    fn change(&mut self, name: &str, topics: &[String], change: Change) -> Result<AdminAnswer, AdminError> {
        self.mirror(name)?;
        let mut by_topic: BTreeMap<String, Vec<PartitionStateKey>> = BTreeMap::new();
        for (k, p) in self.partitions.iter().filter(|(k, _)| k.mirror == name) {
            by_topic.entry(p.tp.topic.clone()).or_default().push(k.clone());
        }
        let chosen: Vec<String> = if topics.is_empty() {
            by_topic.keys().cloned().collect()
        } else {
            topics.to_vec()
        };
        let mut targets = Vec::new();
        let mut first_refusal = None;
        for topic in &chosen {
            let keys = by_topic.get(topic).ok_or_else(|| AdminError::TopicNotInMirror {
                mirror: name.into(),
                topic: topic.clone(),
            })?;
            let states: Vec<State> = keys.iter().map(|k| self.partitions[k].record.state).collect();
            let applicable: Vec<&PartitionStateKey> = keys
                .iter()
                .zip(&states)
                .filter(|(k, s)| change.applies_to(**s, self.partitions[*k].placed))
                .map(|(k, _)| k)
                .collect();
            if applicable.is_empty() {
                let refusal = change.refusal(name, topic, &states);
                if !topics.is_empty() {
                    return Err(refusal);
                }
                first_refusal.get_or_insert(refusal);
            }
            targets.extend(applicable.into_iter().cloned());
        }
        // The whole mirror asked, and none of it can take the change.
        if targets.is_empty()
            && let Some(refusal) = first_refusal
        {
            return Err(refusal);
        }
        if change == Change::Stop {
            // Every partition's STOPPING is written before any is acted
            // on: a crash in between leaves the whole request to finish.
            for key in &targets {
                self.set_state(key, State::Stopping, |_| {})?;
            }
            crash_point("stop:stopping-written");
        }
        let mut moved = Vec::new();
        for key in targets {
            let tp = self.partitions[&key].tp.clone();
            match change {
                Change::Pause => {
                    // PAUSED once the shard says no fetch will include it.
                    self.set_state(&key, State::Pausing, |_| {})?;
                    crash_point("pause:pausing-written");
                    self.send(
                        &key,
                        ShardCommand::Pause {
                            mirror: name.into(),
                            tp: tp.clone(),
                        },
                    );
                }
                Change::Resume => {
                    self.set_state(&key, State::Mirroring, |_| {})?;
                    // What the pause held back (configs, groups, ACLs, new
                    // topics) is synced at once.
                    if let Some(m) = self.mirrors.get_mut(name) {
                        m.next_sync = Instant::now();
                    }
                    self.send(
                        &key,
                        ShardCommand::Resume {
                            mirror: name.into(),
                            tp: tp.clone(),
                        },
                    );
                }
                Change::Stop => self.stop_partition(&key)?,
                Change::Restart => self.restart_partition(&key, false),
            }
            moved.push(TopicPartitionName {
                topic: tp.topic,
                partition: tp.partition,
            });
        }
        Ok(AdminAnswer::Accepted {
            mirror: name.into(),
            partitions: moved,
        })
    }

    // ---- views ----

    fn view(&self, key: &PartitionStateKey, p: &Partition) -> PartitionView {
        let source = p.live.source_offset.unwrap_or(-1);
        PartitionView {
            mirror: key.mirror.clone(),
            topic: p.tp.topic.clone(),
            partition: p.tp.partition,
            topic_id: deletion::uuid_string(&key.topic_id),
            state: p.record.state.name().into(),
            source_offset: source,
            destination_offset: p.live.destination_offset,
            lag_messages: if source >= 0 {
                (source - p.live.destination_offset).max(0)
            } else {
                0
            },
            lag_seconds: p.live.behind_since.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            last_mirror_epoch: p.record.last_mirror_epoch,
            destination_leader_epoch: p.record.destination_leader_epoch,
            retry_attempt: p.record.retry_attempt,
            error: p.record.error.clone(),
        }
    }

    fn views(&self) -> Vec<PartitionView> {
        self.partitions.iter().map(|(k, p)| self.view(k, p)).collect()
    }

    /// What peers see through DescribeClusterMirrors (last mirror epochs
    /// for their failback, and the states).
    fn mirror_reports(&self) -> MirrorReports {
        let mut reports = MirrorReports::default();
        for (name, m) in &self.mirrors {
            reports.mirrors.insert(
                name.clone(),
                MirrorReport {
                    source_cluster_id: m.record.source_cluster_id.clone(),
                    ..MirrorReport::default()
                },
            );
        }
        for (key, p) in &self.partitions {
            let view = self.view(key, p);
            let Some(mirror) = reports.mirrors.get_mut(&key.mirror) else {
                continue;
            };
            let topic = mirror.topics.entry(p.tp.topic.clone()).or_default();
            topic.topic_id = key.topic_id;
            topic.partitions.insert(
                key.partition,
                PartitionReport {
                    source_offset: view.source_offset,
                    destination_offset: view.destination_offset,
                    lag: if view.source_offset >= 0 { view.lag_messages } else { -1 },
                    state: view.state,
                    retry_attempt: i16::try_from(view.retry_attempt).unwrap_or(i16::MAX),
                    error_message: view.error,
                    last_mirror_epoch: view.last_mirror_epoch,
                },
            );
        }
        reports
    }

    fn summary(&self, name: &str) -> MirrorSummary {
        let m = &self.mirrors[name];
        let mut states = BTreeMap::new();
        let mut partitions = 0;
        for (_, p) in self.partitions.iter().filter(|(k, _)| k.mirror == name) {
            *states.entry(p.record.state.name().to_string()).or_default() += 1;
            partitions += 1;
        }
        MirrorSummary {
            name: name.into(),
            bootstrap_servers: m.record.config.bootstrap_servers.clone(),
            source_cluster_id: m.record.source_cluster_id.clone(),
            partitions,
            states,
        }
    }

    fn describe(&self, name: &str) -> Result<MirrorDescription, AdminError> {
        let m = self.mirror(name)?;
        Ok(MirrorDescription {
            // Never the password: answers show "***".
            config: m.record.config.redacted(),
            source_cluster_id: m.record.source_cluster_id.clone(),
            created_ms: m.record.created_ms,
            topics: m.topics.iter().cloned().collect(),
            partitions: self
                .partitions
                .iter()
                .filter(|(k, _)| k.mirror == name)
                .map(|(k, p)| self.view(k, p))
                .collect(),
            last_sync_ms: m.last_sync_ms,
            sync_error: m.sync_error.clone(),
            topic_configs_synced_ms: m.config_sync.as_ref().map(|(at, _)| *at),
            topic_configs: m.config_sync.as_ref().map(|(_, t)| t.clone()).unwrap_or_default(),
            acls_synced_ms: m.acl_sync.as_ref().map(|(at, _)| *at),
            acls: m
                .acl_sync
                .as_ref()
                .map(|(_, r)| describe_acl_sync(r))
                .unwrap_or_default(),
            topic_checks: m.deletion.checks(m.record.config.deletion_policy(), |topic| {
                self.partitions
                    .iter()
                    .find(|(k, p)| k.mirror == name && p.tp.topic == topic)
                    .map(|(k, _)| k.topic_id)
            }),
            groups_synced_ms: m.group_sync.as_ref().map(|(at, _)| *at),
            groups: m
                .group_sync
                .as_ref()
                .map(|(_, report)| describe_group_sync(report))
                .unwrap_or_default(),
            partition_events: m.partition_events.iter().cloned().collect(),
        })
    }

    fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            partitions: self
                .partitions
                .iter()
                .map(|(k, p)| PartitionMetrics {
                    view: self.view(k, p),
                    bytes_mirrored: p.live.bytes_before + p.live.placed_bytes,
                    batches_mirrored: p.live.batches_before + p.live.placed_batches,
                    epoch_bumps: p.live.epoch_bumps,
                    crc_failures: p.live.crc_failures,
                    truncations: p.live.truncations,
                    divergences: p.live.divergences,
                })
                .collect(),
            mirrors: self
                .mirrors
                .iter()
                .map(|(name, m)| MirrorMetrics {
                    mirror: name.clone(),
                    fetch_errors: m.fetch_stats.errors.clone(),
                    fetch_latency_us: m.fetch_stats.latency_quantiles_us(&LATENCY_QUANTILES),
                    fetches: m.fetch_stats.fetches,
                    sync_halted: m.halted,
                    topic_sync_errors: m.deletion.sync_errors(),
                    topic_deletions_pending: m.deletion.pending(),
                    topic_recreations: m.deletion.recreations_total(),
                })
                .collect(),
            shard_events: Some(ShardEventMetrics {
                telemetry_dropped: self.event_counts.telemetry_dropped(),
                state_queued: self.event_counts.state_queued() as u64,
            }),
        }
    }
}

/// Whether partitions in `states` (one topic's, or one mirror's) are
/// paused: some PAUSING or PAUSED, none fetching (a PREPARING one is
/// placed paused when its topic is).
fn paused_among(states: impl Iterator<Item = State>) -> bool {
    let mut paused = false;
    for state in states {
        match state {
            State::Mirroring | State::EpochFencing => return false,
            State::Pausing | State::Paused => paused = true,
            _ => {}
        }
    }
    paused
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Pause,
    Resume,
    Stop,
    Restart,
}

impl Change {
    /// Whether a partition in `state` (on its shard or not) takes the change.
    fn applies_to(self, state: State, placed: bool) -> bool {
        match self {
            // A partition still waiting for its last mirror epoch is not on
            // a shard yet: it is paused once it is.
            Self::Pause => {
                matches!(state, State::Mirroring | State::EpochFencing) || (state == State::Preparing && placed)
            }
            Self::Resume => state == State::Paused,
            Self::Stop => state.can_move_to(State::Stopping),
            Self::Restart => state == State::Failed,
        }
    }

    /// Why nothing of `topic` could take the change.
    fn refusal(self, mirror: &str, topic: &str, states: &[State]) -> AdminError {
        let (mirror, topic) = (mirror.to_owned(), topic.to_owned());
        let stopping = states.iter().any(|s| matches!(s, State::Stopping | State::Stopped));
        let preparing = states.contains(&State::Preparing);
        match self {
            _ if stopping => AdminError::BeingStopped { mirror, topic },
            Self::Pause if preparing => AdminError::InvalidTransition(format!(
                "{mirror:?}: {topic:?} is still PREPARING; pause it once it is mirroring"
            )),
            Self::Pause => AdminError::AlreadyPaused { mirror, topic },
            Self::Resume => AdminError::NotPaused { mirror, topic },
            Self::Restart => AdminError::NotFailed { mirror, topic },
            Self::Stop => AdminError::BeingStopped { mirror, topic },
        }
    }
}

/// What `mirror describe` says of the last ACL sync.
fn describe_acl_sync(report: &AclSyncReport) -> String {
    match &report.unsupported {
        Some(why) => format!("not synced: {why}"),
        None => {
            let mut line = format!(
                "{} created, {} deleted, {} unchanged",
                report.created.len(),
                report.deleted.len(),
                report.unchanged
            );
            if !report.errors.is_empty() {
                line.push_str(&format!("; errors: {}", report.errors.join("; ")));
            }
            line
        }
    }
}

/// One line for `mirror describe` about a group's last sync.
/// A line per group for `mirror describe`: each synced group's outcome,
/// and the names the source itself lists as two group types (skipped).
fn describe_group_sync(report: &GroupSyncReport) -> BTreeMap<String, String> {
    let conflicts = report.type_conflicts.iter().map(|group| {
        let line = "skipped: the source lists it as both a consumer group and a share group".to_string();
        (group.clone(), line)
    });
    report
        .groups
        .iter()
        .map(|(group, outcome)| (group.clone(), describe_outcome(outcome)))
        .chain(conflicts)
        .collect()
}

fn describe_outcome(outcome: &GroupOutcome) -> String {
    match outcome {
        GroupOutcome::Synced {
            committed,
            unchanged,
            refused,
        } => {
            let mut line = format!("synced: {committed} committed, {unchanged} unchanged");
            if !refused.is_empty() {
                line.push_str(&format!(", {} refused", refused.len()));
            }
            line
        }
        GroupOutcome::Active { state } => format!("left alone: active here ({state})"),
        GroupOutcome::TypeConflict { source, destination } => {
            format!("skipped: type conflict: a {source} group at the source, a {destination} group here")
        }
        GroupOutcome::Skipped { reason } => format!("skipped: {reason}"),
        GroupOutcome::Failed { error } => format!("failed: {error}"),
    }
}

/// Connection settings for the control plane's requests.
fn control_options(what: &str) -> ConnectionOptions {
    ConnectionOptions {
        client_id: format!("ringmirror-{what}"),
        connect_timeout: CONTROL_CONNECT_TIMEOUT,
        io_timeout: CONTROL_IO_TIMEOUT,
        ..ConnectionOptions::default()
    }
}

/// How the control plane connects to a mirror's source.
fn source_options(m: &Mirror) -> ConnectionOptions {
    ConnectionOptions {
        sasl: m.record.config.sasl_client(),
        tls: m.record.config.tls_client(),
        ..control_options(&format!("{}-control", m.record.config.name))
    }
}

async fn connection(m: &mut Mirror) -> Result<&mut Connection, ClientError> {
    if m.conn.is_none() {
        let options = source_options(m);
        let mut last = None;
        for addr in &m.record.config.bootstrap_servers {
            match Connection::connect(addr, options.clone()).await {
                Ok(c) => {
                    m.conn = Some(c);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if m.conn.is_none() {
            return Err(last.unwrap_or(ClientError::Resolve {
                addr: "no bootstrap servers".into(),
            }));
        }
    }
    Ok(m.conn.as_mut().expect("connected"))
}

async fn source_metadata(m: &mut Mirror) -> Result<SourceMetadata, ClientError> {
    let topics = m.selection.request_topics();
    let conn = connection(m).await?;
    fetch_source_metadata(conn, topics.as_deref()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_every_group_and_the_source_s_own_type_conflicts() {
        let mut report = GroupSyncReport::default();
        report.groups.insert(
            "c1".into(),
            GroupOutcome::Synced {
                committed: 2,
                unchanged: 1,
                refused: BTreeMap::new(),
            },
        );
        report.type_conflicts.insert("dual".into());
        let lines = describe_group_sync(&report);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines["c1"], "synced: 2 committed, 1 unchanged");
        assert!(
            lines["dual"].contains("both a consumer group and a share group"),
            "{lines:?}"
        );
    }
}
