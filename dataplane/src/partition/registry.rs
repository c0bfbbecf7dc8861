//! Each shard's registry of the partition logs it owns, and the links that
//! let a connection on one shard read a partition owned by another.
//!
//! A shard owns its logs (`Rc<RefCell<PartitionLog>>`: shared by the
//! shard's fetchers and its registry, never by another thread). A request
//! that touches a partition runs a short synchronous job on the owning
//! shard (a closure sent through that shard's channel; inline when the
//! owner is the caller's shard) and gets back what the job computed — for a
//! read, an open file and a byte range to send. Jobs never await, so no
//! borrow of a log is ever held across a suspension point by a reader.
//! Appends are announced on the shard's [`Event`] so that long-polling
//! Fetch requests on any shard wake up.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use event_listener::{Event, EventListener};
use glommio::net::AcceptedTcpStream;

use super::catalog::CatalogHandle;
use super::producer_ids::ProducerIds;
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::{
    LogConfig, LogDir, LogError, PartitionLog, RecoveryReport, ReserveBudget, TopicPartition,
};
use ringmirror_storage::topic_config::{self, TopicConfigMap};

pub type SharedLog = Rc<RefCell<PartitionLog>>;

/// How long a job waits before trying again a log that its fetcher is
/// receiving into (only the mmap ingest mode borrows a log across a read).
const BUSY_RETRY: Duration = Duration::from_micros(200);

/// A partition as the serving side sees it.
pub struct ServedPartition {
    pub log: SharedLog,
    /// The mirror writing this partition (read-only to clients), or `None`.
    pub mirror: Option<String>,
    /// The leader epoch clients are told and checked against.
    pub leader_epoch: std::cell::Cell<i32>,
}

impl ServedPartition {
    pub fn new(log: PartitionLog, mirror: Option<String>) -> Rc<Self> {
        let epoch = log.epoch_cache().latest().map_or(0, |e| e.epoch.max(0));
        Rc::new(Self {
            log: Rc::new(RefCell::new(log)),
            mirror,
            leader_epoch: std::cell::Cell::new(epoch),
        })
    }

    /// The same log, now written by `mirror`.
    pub fn claimed_by(&self, mirror: &str) -> Rc<Self> {
        Rc::new(Self {
            log: Rc::clone(&self.log),
            mirror: Some(mirror.to_owned()),
            leader_epoch: self.leader_epoch.clone(),
        })
    }

    /// Raises the served leader epoch to at least `epoch` (it never goes down).
    pub fn observe_epoch(&self, epoch: i32) {
        if epoch > self.leader_epoch.get() {
            self.leader_epoch.set(epoch);
        }
    }
}

/// The partitions one shard owns.
pub struct Registry {
    pub shard: usize,
    partitions: RefCell<HashMap<TopicPartition, Rc<ServedPartition>>>,
    appended: Arc<Event>,
    catalog: Arc<CatalogHandle>,
    /// Where new (local) partitions are created, and with which settings.
    log_dir: Arc<LogDir>,
    log_config: LogConfig,
    /// The shard's share of the disk its logs may reserve ahead of their
    /// data (every log opened here takes from it; `/metrics` reads it).
    reserve_budget: Arc<ReserveBudget>,
    producer_ids: Arc<ProducerIds>,
    /// The shard's services that rooms above this one attach when the
    /// shard starts (its group and transaction coordinators), found by
    /// their type: the registry carries them to the jobs that run on the
    /// shard without depending on the rooms that define them.
    services: RefCell<Vec<Rc<dyn Any>>>,
    /// The links to every shard, set with the listener (groups exist only
    /// with one): the end of mirroring reaches every shard's groups.
    links: std::cell::OnceCell<Arc<ShardLinks>>,
}

/// A partition found on disk, not (yet) claimed by a configured mirror:
/// served read-only, since it holds mirrored data.
pub const UNCLAIMED_MIRROR: &str = "";

/// A file in a partition directory saying the topic is local (created at
/// this agent, writable) rather than mirrored data. It holds the configs
/// the topic was created with (see [`topic_config::encode`]); it is
/// empty for a topic that became local by failover (the control plane
/// keeps those configs, synced from the source).
pub const LOCAL_TOPIC_MARKER: &str = "ringmirror-local-topic";

/// A file in a partition directory saying that mirroring is being ended
/// there (it holds the source cluster id); a start-up that finds it
/// finishes the job.
pub const ENDING_MIRROR_MARKER: &str = "ringmirror-ending-mirror";

/// An interrupted end of mirroring, if any: the source cluster id, and the
/// destination epoch the partition had (the markers go above it; absent in
/// markers written before it was recorded).
pub fn ending_mirror(log_dir: &LogDir, tp: &TopicPartition) -> Option<(String, Option<i32>)> {
    let text = std::fs::read_to_string(log_dir.partition_dir(tp).join(ENDING_MIRROR_MARKER)).ok()?;
    let mut lines = text.lines();
    let cluster_id = lines.next().unwrap_or_default().to_owned();
    let epoch = lines.next().and_then(|l| l.trim().parse().ok());
    Some((cluster_id, epoch))
}

/// Writes `name` (with `content`) into the partition's directory durably
/// and atomically (a temporary file renamed over it): a crash leaves the
/// marker whole or absent, never empty.
fn write_marker(dir: &std::path::Path, name: &str, content: &str) -> Result<(), String> {
    use std::io::Write;
    let path = dir.join(name);
    let temporary = dir.join(format!("{name}.tmp"));
    std::fs::File::create(&temporary)
        .and_then(|mut f| f.write_all(content.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&temporary, &path))
        .and_then(|()| std::fs::File::open(dir)?.sync_all())
        .map_err(|e| format!("write {}: {e}", path.display()))
}

/// Whether a partition directory holds a local topic's partition.
pub fn is_local_partition(log_dir: &LogDir, tp: &TopicPartition) -> bool {
    log_dir.partition_dir(tp).join(LOCAL_TOPIC_MARKER).exists()
}

/// The configs a local topic was created with, from its partition's marker
/// (empty for a topic that became local by failover, or none was given).
pub fn local_topic_configs(log_dir: &LogDir, tp: &TopicPartition) -> std::io::Result<TopicConfigMap> {
    let text = std::fs::read_to_string(log_dir.partition_dir(tp).join(LOCAL_TOPIC_MARKER))?;
    Ok(topic_config::decode(&text))
}

impl Registry {
    pub fn new(
        shard: usize,
        appended: Arc<Event>,
        catalog: Arc<CatalogHandle>,
        log_dir: Arc<LogDir>,
        log_config: LogConfig,
        reserve_budget: Arc<ReserveBudget>,
        producer_ids: Arc<ProducerIds>,
    ) -> Rc<Self> {
        Rc::new(Self {
            shard,
            partitions: RefCell::new(HashMap::new()),
            appended,
            catalog,
            log_dir,
            log_config,
            reserve_budget,
            producer_ids,
            services: RefCell::new(Vec::new()),
            links: std::cell::OnceCell::new(),
        })
    }

    /// Attaches this shard's `service` (one per type, when the shard
    /// starts; a second of the same type is ignored).
    pub fn attach<T: 'static>(&self, service: Rc<T>) {
        let mut services = self.services.borrow_mut();
        if !services.iter().any(|attached| (**attached).is::<T>()) {
            services.push(service);
        }
    }

    /// This shard's service of type `T`, if one was attached.
    pub fn service<T: 'static>(&self) -> Option<Rc<T>> {
        let services = self.services.borrow();
        let attached = services.iter().find(|attached| (**attached).is::<T>())?;
        Rc::clone(attached).downcast().ok()
    }

    /// Whether `tp` has a directory in the data dir (served or not yet).
    pub fn partition_on_disk(&self, tp: &TopicPartition) -> bool {
        self.log_dir.partition_dir(tp).exists()
    }

    pub fn set_links(&self, links: Arc<ShardLinks>) {
        // Set once, when the shard starts its listener.
        let _ = self.links.set(links);
    }

    /// The links to every shard, once the listener started (none without one).
    pub fn links(&self) -> Option<&Arc<ShardLinks>> {
        self.links.get()
    }

    /// The data directory (the group coordinator keeps its offsets there).
    pub fn data_dir(&self) -> &std::path::Path {
        self.log_dir.path()
    }

    /// Opens (recovering if need be) a partition's log with the shard's
    /// settings, its reserved room held against the shard's budget.
    pub fn open_log(
        &self,
        tp: &TopicPartition,
        topic_id: Option<[u8; 16]>,
    ) -> Result<(PartitionLog, RecoveryReport), LogError> {
        let (mut log, report) = self.log_dir.open_partition(tp, topic_id, self.log_config, now_ms())?;
        log.set_reserve_budget(Arc::clone(&self.reserve_budget))?;
        Ok((log, report))
    }

    /// The shard's budget of disk reserved ahead of its logs' data.
    pub fn reserve_budget(&self) -> &Arc<ReserveBudget> {
        &self.reserve_budget
    }

    /// The agent-wide producer id allocator.
    pub fn producer_ids(&self) -> &ProducerIds {
        &self.producer_ids
    }

    /// The same allocator, for a holder that outlives a borrow (the
    /// transaction coordinator).
    pub fn shared_producer_ids(&self) -> Arc<ProducerIds> {
        Arc::clone(&self.producer_ids)
    }

    /// Creates (or, after a crash mid-creation, completes) a partition of a
    /// local topic and serves it, writable; its marker keeps the topic's
    /// `configs` (published in the catalog by the caller, and from the
    /// marker at every start).
    pub fn create_local(
        &self,
        tp: &TopicPartition,
        topic_id: [u8; 16],
        configs: &TopicConfigMap,
    ) -> Result<(), String> {
        if self.get(tp).is_some() {
            return Err(format!("{tp} already exists"));
        }
        let (log, _) = self.open_log(tp, Some(topic_id)).map_err(|e| e.to_string())?;
        write_marker(
            &self.log_dir.partition_dir(tp),
            LOCAL_TOPIC_MARKER,
            &topic_config::encode(configs),
        )?;
        self.register(tp.clone(), ServedPartition::new(log, None));
        Ok(())
    }

    /// Ends mirroring of a partition whose fetcher has let it go (failover):
    /// the destination leader epoch is bumped, open transactions are
    /// aborted and a MIRROR_PID_RESET written at that epoch (see
    /// `PartitionLog::end_mirroring`), and the partition becomes local and
    /// writable. Every step is idempotent and a marker file records the
    /// job until it is done, so a crash at any point is finished at the
    /// next start. Returns what was appended and the new leader epoch.
    pub fn end_mirroring(
        &self,
        tp: &TopicPartition,
        source_cluster_id: &str,
    ) -> Result<(ringmirror_storage::log::EndedMirroring, i32), String> {
        let served = self.get(tp).ok_or("not open on this shard")?;
        // Refused before the marker (which holds it) is written.
        ringmirror_storage::limits::check_cluster_id(source_cluster_id)?;
        let dir = self.log_dir.partition_dir(tp);
        write_marker(
            &dir,
            ENDING_MIRROR_MARKER,
            &format!("{source_cluster_id}\n{}", served.leader_epoch.get()),
        )?;
        ringmirror_storage::failpoint::crash_point("end-mirroring:started");
        let mut log = served.log.try_borrow_mut().map_err(|_| "the log is busy")?;
        let latest = log.epoch_cache().latest().map_or(0, |e| e.epoch);
        let epoch = served.leader_epoch.get().max(latest) + 1;
        let ended = log
            .end_mirroring(epoch, source_cluster_id, now_ms())
            .map_err(|e| e.to_string())?;
        drop(log);
        served.observe_epoch(epoch);
        write_marker(&dir, LOCAL_TOPIC_MARKER, "")?;
        ringmirror_storage::failpoint::crash_point("end-mirroring:writable");
        let _ = std::fs::remove_file(dir.join(ENDING_MIRROR_MARKER));
        self.register(
            tp.clone(),
            Rc::new(ServedPartition {
                log: Rc::clone(&served.log),
                mirror: None,
                leader_epoch: served.leader_epoch.clone(),
            }),
        );
        Ok((ended, epoch))
    }

    /// Makes a local topic's partition mirrored data again (failback: a
    /// mirror claims it and converges it with its source by truncation).
    /// The marker goes first, durably, so a crash leaves it mirrored data.
    pub fn reclaim_local(&self, tp: &TopicPartition, mirror: &str) -> Result<Rc<ServedPartition>, String> {
        let served = self.get(tp).ok_or_else(|| format!("{tp} is not open"))?;
        let dir = self.log_dir.partition_dir(tp);
        let marker = dir.join(LOCAL_TOPIC_MARKER);
        std::fs::remove_file(&marker)
            .and_then(|()| std::fs::File::open(&dir)?.sync_all())
            .map_err(|e| format!("remove {}: {e}", marker.display()))?;
        let claimed = served.claimed_by(mirror);
        self.register(tp.clone(), Rc::clone(&claimed));
        Ok(claimed)
    }

    /// Starts serving a partition: it is in the registry and the catalog.
    pub fn register(&self, tp: TopicPartition, partition: Rc<ServedPartition>) {
        let topic_id = partition.log.borrow().topic_id();
        self.catalog.update(|c| {
            c.add_partition(
                &tp.topic,
                topic_id,
                tp.partition,
                self.shard,
                partition.mirror.as_deref(),
            );
        });
        self.partitions.borrow_mut().insert(tp, partition);
    }

    /// Stops serving a partition and closes its log (flushed, indexes
    /// trimmed); returns its (recovery point, log start offset).
    pub fn close(&self, tp: &TopicPartition) -> ClosedOffsets {
        let partition = self
            .partitions
            .borrow_mut()
            .remove(tp)
            .ok_or("not open on this shard")?;
        self.catalog.update(|c| c.remove_partition(&tp.topic, tp.partition));
        close_log(partition)
    }

    /// Closes every log (at stop).
    pub fn close_all(&self) -> Vec<(TopicPartition, ClosedOffsets)> {
        let all: Vec<_> = self.partitions.borrow_mut().drain().collect();
        self.catalog.update(|c| {
            for (tp, _) in &all {
                c.remove_partition(&tp.topic, tp.partition);
            }
        });
        all.into_iter().map(|(tp, p)| (tp, close_log(p))).collect()
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Rc<ServedPartition>> {
        self.partitions.borrow().get(tp).cloned()
    }

    pub fn catalog(&self) -> Arc<CatalogHandle> {
        Arc::clone(&self.catalog)
    }

    /// Wakes Fetch requests waiting for data on this shard.
    pub fn notify_appended(&self) {
        self.appended.notify(usize::MAX);
    }

    pub fn appended(&self) -> &Arc<Event> {
        &self.appended
    }
}

/// A closed log's (recovery point, log start offset), or why it would not close.
pub type ClosedOffsets = Result<(i64, i64), String>;

fn close_log(partition: Rc<ServedPartition>) -> ClosedOffsets {
    let partition = Rc::try_unwrap(partition).map_err(|_| "the log is still in use".to_string())?;
    let log = Rc::try_unwrap(partition.log)
        .map_err(|_| "the log is still in use".to_string())?
        .into_inner();
    let offsets = (log.log_end_offset(), log.log_start_offset());
    log.close(now_ms()).map_err(|e| e.to_string())?;
    Ok(offsets)
}

/// A job for the owning shard; it returns false when a log it needs was
/// busy, and then runs again shortly.
pub type ShardJob = Box<dyn FnMut(&Registry) -> bool + Send>;

/// Every shard's job channel and append event; shared by all shards.
pub struct ShardLinks {
    jobs: Vec<async_channel::Sender<ShardJob>>,
    appended: Vec<Arc<Event>>,
    /// Connections accepted elsewhere, for each shard to serve (the
    /// one-acceptor mode).
    handoff: Vec<async_channel::Sender<AcceptedTcpStream>>,
}

/// What one shard needs to take its end of the links.
pub struct ShardLinkEnd {
    pub jobs: async_channel::Receiver<ShardJob>,
    pub appended: Arc<Event>,
    pub handoff: async_channel::Receiver<AcceptedTcpStream>,
}

impl ShardLinks {
    pub fn new(shards: usize) -> (Arc<Self>, Vec<ShardLinkEnd>) {
        let mut jobs = Vec::with_capacity(shards);
        let mut appended = Vec::with_capacity(shards);
        let mut handoff = Vec::with_capacity(shards);
        let mut ends = Vec::with_capacity(shards);
        for _ in 0..shards {
            let (tx, rx) = async_channel::unbounded();
            let (handoff_tx, handoff_rx) = async_channel::unbounded();
            let event = Arc::new(Event::new());
            jobs.push(tx);
            appended.push(Arc::clone(&event));
            handoff.push(handoff_tx);
            ends.push(ShardLinkEnd {
                jobs: rx,
                appended: event,
                handoff: handoff_rx,
            });
        }
        (
            Arc::new(Self {
                jobs,
                appended,
                handoff,
            }),
            ends,
        )
    }

    pub fn shards(&self) -> usize {
        self.jobs.len()
    }

    /// Gives an accepted connection to `shard` to serve.
    pub async fn hand_off(&self, shard: usize, stream: AcceptedTcpStream) -> bool {
        self.handoff[shard].send(stream).await.is_ok()
    }

    /// A listener for the next append on `shard` (create it before looking
    /// at the data, so that an append in between is not missed).
    pub fn listen(&self, shard: usize) -> EventListener {
        self.appended[shard].listen()
    }

    /// Runs `f` on `shard` and returns its result; `None` if the shard has
    /// ended. `f` returns `None` when a log it needs is busy; it then runs
    /// again shortly.
    pub async fn run<R, F>(&self, shard: usize, mut f: F) -> Option<R>
    where
        R: Send + 'static,
        F: FnMut(&Registry) -> Option<R> + Send + 'static,
    {
        let (tx, rx) = async_channel::bounded(1);
        let job: ShardJob = Box::new(move |registry| match f(registry) {
            Some(r) => {
                let _ = tx.try_send(r);
                true
            }
            None => false,
        });
        self.jobs.get(shard)?.send(job).await.ok()?;
        rx.recv().await.ok()
    }
}

/// The shard's job loop: runs jobs from other shards against its registry.
pub async fn run_jobs(registry: Rc<Registry>, jobs: async_channel::Receiver<ShardJob>) {
    while let Ok(mut job) = jobs.recv().await {
        while !job(&registry) {
            glommio::timer::sleep(BUSY_RETRY).await;
        }
    }
}

/// The shard's log cleaner: every `log_cleaner_interval_ms` it cleans one
/// local partition whose topic is compacted and whose dirty ratio is due
/// (mirrored partitions follow their source byte for byte and are never
/// cleaned). The topic's config overrides in the catalog (synced from the
/// mirror's source) win over the log's settings. Cleaning is synchronous
/// work on the shard, so each pass cleans at most one partition, taking
/// them in turn.
pub async fn run_log_cleaner(registry: Rc<Registry>) {
    let interval = Duration::from_millis(registry.log_config.log_cleaner_interval_ms.max(1));
    let mut last_cleaned: Option<TopicPartition> = None;
    loop {
        glommio::timer::sleep(interval).await;
        registry.apply_retention();
        if let Some(tp) = registry.clean_next_log(last_cleaned.as_ref()) {
            last_cleaned = Some(tp);
        }
    }
}

/// The shard's release of reserved disk: every half of
/// `reserve_release_idle_ms`, each partition that appended nothing for
/// that long gives the room its active segment reserved ahead of its data
/// back to the file system and to the shard's budget.
pub async fn run_reserve_release(registry: Rc<Registry>) {
    let interval = Duration::from_millis((registry.log_config.reserve_release_idle_ms / 2).max(1));
    loop {
        glommio::timer::sleep(interval).await;
        registry.release_idle_reservations(now_ms());
    }
}

impl Registry {
    /// Releases the room idle partitions reserved ahead of their data (see
    /// `PartitionLog::release_idle_reservation`: the room of writes in
    /// flight stays). A log in use — the mmap ingest receiving into its
    /// tail — is left for the next pass. Returns the bytes released.
    pub fn release_idle_reservations(&self, now_ms: u64) -> u64 {
        let mut released = 0;
        for (tp, partition) in self.partitions.borrow().iter() {
            let Ok(mut log) = partition.log.try_borrow_mut() else {
                continue;
            };
            match log.release_idle_reservation(now_ms) {
                Ok(bytes) => released += bytes,
                Err(e) => {
                    tracing::warn!(shard = self.shard, partition = %tp, error = %e, "releasing reserved disk failed");
                }
            }
        }
        if released > 0 {
            tracing::debug!(shard = self.shard, released, "idle partitions released reserved disk");
        }
        released
    }

    /// Applies retention (time and size, the log's settings or the topic's
    /// synced `retention.ms`/`retention.bytes`) to local partitions whose
    /// cleanup policy deletes. Mirrored partitions follow their source's log
    /// start instead.
    fn apply_retention(&self) {
        let catalog = self.catalog.snapshot();
        for (tp, partition) in self.partitions.borrow().iter().filter(|(_, p)| p.mirror.is_none()) {
            let Ok(mut log) = partition.log.try_borrow_mut() else {
                continue;
            };
            let Some((retention_ms, retention_bytes)) =
                topic_config::retention_limits(log.config(), catalog.topic_configs(&tp.topic))
            else {
                continue;
            };
            if let Err(e) = log.apply_retention(retention_ms, retention_bytes, now_ms()) {
                tracing::warn!(shard = self.shard, partition = %tp, error = %e, "retention failed");
            }
        }
    }

    /// Cleans the first due compacted local partition after `after` (in
    /// partition order, wrapping); returns the one it cleaned.
    fn clean_next_log(&self, after: Option<&TopicPartition>) -> Option<TopicPartition> {
        let catalog = self.catalog.snapshot();
        let mut candidates: Vec<(
            TopicPartition,
            Rc<ServedPartition>,
            ringmirror_storage::log::CleanOptions,
        )> = self
            .partitions
            .borrow()
            .iter()
            .filter(|(_, p)| p.mirror.is_none())
            .filter_map(|(tp, p)| {
                let log = p.log.try_borrow().ok()?;
                let options = topic_config::clean_options(log.config(), catalog.topic_configs(&tp.topic))?;
                Some((tp.clone(), Rc::clone(p), options))
            })
            .collect();
        candidates.sort_by(|a, b| a.0.cmp(&b.0));
        let start = after.map_or(0, |a| candidates.partition_point(|(tp, _, _)| tp <= a));
        let count = candidates.len();
        for (tp, partition, options) in candidates.iter().cycle().skip(start).take(count) {
            let Ok(mut log) = partition.log.try_borrow_mut() else {
                continue;
            };
            match log.clean(options, now_ms()) {
                Ok(report) if report.segments_cleaned == 0 => continue,
                Ok(report) => {
                    tracing::info!(shard = self.shard, partition = %tp, ?report, "cleaned a compacted log");
                    return Some(tp.clone());
                }
                Err(e) => {
                    tracing::warn!(shard = self.shard, partition = %tp, error = %e, "log cleaning failed");
                    return Some(tp.clone());
                }
            }
        }
        None
    }
}

/// A question about one partition, answered on its owning shard.
pub type PartitionFn<Q, R> = fn(&ServedPartition, &PartitionLog, &Q) -> R;

/// What a connection needs to reach partitions: its own shard's registry
/// (used directly) and the links to the others.
#[derive(Clone)]
pub struct ShardAccess {
    pub local: Rc<Registry>,
    pub links: Arc<ShardLinks>,
}

impl ShardAccess {
    /// Runs `f` against the registry of `shard`: inline when it is this one.
    pub async fn on<R, F>(&self, shard: usize, mut f: F) -> Option<R>
    where
        R: Send + 'static,
        F: FnMut(&Registry) -> Option<R> + Send + 'static,
    {
        if shard == self.local.shard {
            loop {
                if let Some(r) = f(&self.local) {
                    return Some(r);
                }
                glommio::timer::sleep(BUSY_RETRY).await;
            }
        }
        self.links.run(shard, f).await
    }

    /// Answers `f` for each (owner shard, partition, question): one job per
    /// shard, results in input order; `None` for a partition its shard no
    /// longer has (or a shard that has ended).
    pub async fn query<Q, R>(&self, items: Vec<(usize, TopicPartition, Q)>, f: PartitionFn<Q, R>) -> Vec<Option<R>>
    where
        Q: Send + 'static,
        R: Send + 'static,
    {
        let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
        let mut by_shard: HashMap<usize, Vec<(usize, TopicPartition, Q)>> = HashMap::new();
        for (i, (shard, tp, q)) in items.into_iter().enumerate() {
            by_shard.entry(shard).or_default().push((i, tp, q));
        }
        for (shard, items) in by_shard {
            let answers = self
                .on(shard, move |registry| {
                    let mut answers = Vec::with_capacity(items.len());
                    for (i, tp, q) in &items {
                        let answer = match registry.get(tp) {
                            Some(p) => Some(f(&p, &*p.log.try_borrow().ok()?, q)),
                            None => None,
                        };
                        answers.push((*i, answer));
                    }
                    Some(answers)
                })
                .await;
            for (i, answer) in answers.into_iter().flatten() {
                out[i] = answer;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use ringmirror_storage::batch::{BatchBuilder, BuildRecord};

    use super::*;
    use crate::partition::ServerIdentity;

    fn active_blocks_bytes(log: &PartitionLog) -> u64 {
        let base = *log.segment_base_offsets().last().unwrap();
        let path = log.dir().join(format!("{base:020}.log"));
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    /// The shard's housekeeping pass: a log opened on the shard holds its
    /// room against the shard's budget; once idle for the bound its blocks
    /// go back, except a log in use (the mmap ingest receiving into it),
    /// left for a later pass.
    #[test]
    fn idle_partitions_give_their_reserved_blocks_back_unless_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let budget = Arc::new(ReserveBudget::new(1 << 30));
        let config = LogConfig::default();
        let registry = Registry::new(
            0,
            Arc::new(Event::new()),
            CatalogHandle::new(ServerIdentity::default()),
            Arc::new(LogDir::open(dir.path().join("data")).unwrap()),
            config,
            Arc::clone(&budget),
            Arc::new(ProducerIds::open(dir.path().join("state")).unwrap()),
        );
        let tps = [TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
        for tp in &tps {
            registry.create_local(tp, [7; 16], &TopicConfigMap::default()).unwrap();
        }
        let appended_at = now_ms();
        let mut before = Vec::new();
        for tp in &tps {
            let served = registry.get(tp).unwrap();
            let mut log = served.log.borrow_mut();
            let records = vec![BuildRecord {
                timestamp: 1,
                value: Some(vec![1; 10_000]),
                ..Default::default()
            }];
            log.append(
                &BatchBuilder {
                    records,
                    ..Default::default()
                }
                .build(),
                appended_at,
            )
            .unwrap();
            before.push(active_blocks_bytes(&log));
            assert!(
                before.last().unwrap() - log.size_bytes() >= 32 * 1024,
                "room reserved ahead"
            );
        }
        assert!(
            budget.reserved_ahead_bytes() >= 64 * 1024,
            "held against the shard's budget"
        );

        assert_eq!(
            registry.release_idle_reservations(appended_at + 1_000),
            0,
            "not idle yet"
        );
        let in_use = registry.get(&tps[1]).unwrap();
        let borrowed = in_use.log.borrow_mut();
        let released = registry.release_idle_reservations(appended_at + config.reserve_release_idle_ms);
        assert!(released >= 32 * 1024, "released {released}");
        drop(borrowed);
        let after: Vec<u64> = tps
            .iter()
            .map(|tp| active_blocks_bytes(&registry.get(tp).unwrap().log.borrow()))
            .collect();
        assert_eq!(before[0] - after[0], released, "the idle log's blocks went back");
        assert_eq!(after[1], before[1], "the log in use kept its room");
        assert!(budget.reserved_ahead_bytes() > 0 && budget.released_bytes_total() == released);

        // The next pass takes the other one.
        let later = appended_at + 2 * config.reserve_release_idle_ms;
        assert!(registry.release_idle_reservations(later) > 0);
        assert_eq!(budget.reserved_ahead_bytes(), 0);
    }
}
