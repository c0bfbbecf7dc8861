//! The agent: opens the data directory, looks up the mirrored partitions at
//! each source, places them on shards, and runs until stopped. On stop,
//! every shard finishes its in-flight fetch, flushes and closes its logs,
//! and the data directory is marked cleanly shut down, so the next start
//! resumes from each log's end without a recovery scan.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};
use glommio::{LocalExecutorBuilder, Placement};
use ringmirror_dataplane::client::{Connection, ConnectionOptions};
use ringmirror_dataplane::fetch::{MirrorSettings, PartitionKey, ShardEvent, StopReason, fetch_source_metadata};
use ringmirror_dataplane::log::{LogDir, OffsetCheckpoints, TopicPartition};
use ringmirror_dataplane::shard::{ShardCommand, ShardHandle, ShardPlan, spawn_shard};

use crate::config::{AgentConfig, MirrorConfig};

/// glommio's default registered I/O memory per ring.
const IO_MEMORY_DEFAULT_BYTES: usize = 10 << 20;
/// glommio registers I/O memory on this many rings per executor.
const IO_RINGS_PER_EXECUTOR: usize = 3;
const DISCOVERY_ATTEMPTS_MAX: u32 = 10;

/// What the agent knows of one mirrored partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionStatus {
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub stopped: Option<StopReason>,
    pub truncations: u32,
    /// Batches refused (bad CRC, bad framing) and fetched again.
    pub bad_batches: u64,
}

pub type Status = BTreeMap<(String, TopicPartition), PartitionStatus>;

/// Called on the events thread for every shard event (measurement, tests).
pub type EventObserver = Box<dyn Fn(&ShardEvent) + Send>;

pub struct Agent {
    shards: Vec<ShardHandle>,
    /// Which shard holds each mirrored partition.
    placement: BTreeMap<(String, TopicPartition), usize>,
    log_dir: Arc<LogDir>,
    status: Arc<Mutex<Status>>,
    /// Ends when every shard has; returns the offset checkpoints it kept.
    events_thread: JoinHandle<OffsetCheckpoints>,
}

fn mirror_settings(m: &MirrorConfig) -> MirrorSettings {
    MirrorSettings {
        name: m.name.clone(),
        bootstrap_servers: m.bootstrap_servers.clone(),
        fetch_max_bytes: m.fetch_max_bytes,
        fetch_partition_max_bytes: m.fetch_partition_max_bytes,
        fetch_max_wait_ms: m.fetch_max_wait_ms,
        fetch_min_bytes: m.fetch_min_bytes,
        metadata_refresh_ms: m.metadata_refresh_interval_ms,
        ingest: m.ingest,
        connection: ConnectionOptions {
            client_id: format!("ringmirror-{}", m.name),
            ..ConnectionOptions::default()
        },
        ..MirrorSettings::default()
    }
}

/// Registered I/O memory per ring that fits RLIMIT_MEMLOCK for a non-root
/// process (root is not charged), said out loud when it has to shrink.
fn io_memory_bytes(executors: usize) -> usize {
    // SAFETY: plain syscalls with valid out-pointers.
    let (euid, limit) = unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let ok = libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) == 0;
        (libc::geteuid(), if ok { lim.rlim_cur } else { 0 })
    };
    if euid == 0 || limit == libc::RLIM_INFINITY {
        return IO_MEMORY_DEFAULT_BYTES;
    }
    // +1 executor for start-up discovery.
    let fit = (limit as usize / (IO_RINGS_PER_EXECUTOR * (executors + 1))) & !0xfff;
    if fit < IO_MEMORY_DEFAULT_BYTES {
        tracing::warn!(
            memlock_limit_bytes = limit,
            io_memory_bytes = fit,
            "RLIMIT_MEMLOCK is low: shrinking glommio's registered I/O memory; raise it (LimitMEMLOCK= in the systemd unit) for full speed"
        );
    }
    fit.min(IO_MEMORY_DEFAULT_BYTES)
}

/// Looks up which source partitions a mirror covers.
fn discover(m: &MirrorConfig, io_memory: usize) -> anyhow::Result<Vec<PartitionKey>> {
    let include = m
        .topics_include
        .as_deref()
        .map(|r| regex::Regex::new(&format!("^(?:{r})$")))
        .transpose()?;
    let exclude = regex::Regex::new(&format!("^(?:{})$", m.topics_exclude))?;
    let settings = mirror_settings(m);
    let named = m.topics.clone();
    let want_all = include.is_some();
    let metadata = LocalExecutorBuilder::new(Placement::Unbound)
        .name("discovery")
        .io_memory(io_memory)
        .spawn(move || async move {
            let mut last_error = None;
            for attempt in 0..DISCOVERY_ATTEMPTS_MAX {
                for addr in &settings.bootstrap_servers {
                    let result = async {
                        let mut conn = Connection::connect(addr, settings.connection.clone()).await?;
                        fetch_source_metadata(&mut conn, if want_all { None } else { Some(&named[..]) }).await
                    }
                    .await;
                    match result {
                        Ok(metadata) => return Ok(metadata),
                        Err(e) => last_error = Some(format!("{addr}: {e}")),
                    }
                }
                glommio::timer::sleep(Duration::from_millis(200 << attempt.min(5))).await;
            }
            Err(last_error.unwrap_or_else(|| "no bootstrap servers".into()))
        })
        .map_err(|e| anyhow::anyhow!("start discovery executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("discovery executor: {e}"))?
        .map_err(|e| anyhow::anyhow!("mirror {:?}: cannot read source metadata: {e}", m.name))?;
    for name in &m.topics {
        if !metadata.topics.contains_key(name) {
            tracing::error!(
                mirror = m.name,
                topic = name,
                "topic does not exist at the source; not mirroring it"
            );
        }
    }
    let mut keys: Vec<PartitionKey> = metadata
        .partitions
        .iter()
        .filter(|(tp, _)| {
            (m.topics.contains(&tp.topic) || include.as_ref().is_some_and(|r| r.is_match(&tp.topic)))
                && !exclude.is_match(&tp.topic)
        })
        .map(|(tp, p)| PartitionKey {
            mirror: m.name.clone(),
            topic_id: p.topic_id,
            tp: tp.clone(),
        })
        .collect();
    keys.sort_by(|a, b| a.tp.cmp(&b.tp));
    Ok(keys)
}

impl Agent {
    pub fn start(config: AgentConfig) -> anyhow::Result<Self> {
        Self::start_observed(config, Box::new(|_| {}))
    }

    /// Like [`Agent::start`], also handing every shard event to `observer`.
    pub fn start_observed(config: AgentConfig, observer: EventObserver) -> anyhow::Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shard_count = config.shards.unwrap_or(cores).max(1);
        let io_memory = io_memory_bytes(shard_count);
        let log_dir = LogDir::open(&config.data_dir).context("open data dir")?;
        tracing::info!(data_dir = %config.data_dir.display(), clean = log_dir.was_clean_shutdown(), shards = shard_count, "starting agent");
        let log_config = config.log.clone();
        let mut plans: Vec<ShardPlan> = (0..shard_count)
            .map(|index| ShardPlan {
                index,
                cpu: index % cores,
                io_memory_bytes: io_memory,
                mirrors: Vec::new(),
                log_config: log_config.clone(),
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut placement = BTreeMap::new();
        for m in &config.mirrors {
            let keys = discover(m, io_memory)?;
            tracing::info!(mirror = m.name, partitions = keys.len(), "mirroring");
            let mut per_shard: Vec<Vec<PartitionKey>> = vec![Vec::new(); shard_count];
            for key in keys {
                if !seen.insert(key.tp.clone()) {
                    bail!(
                        "{} is mirrored by two mirrors; each destination partition has one source",
                        key.tp
                    );
                }
                placement.insert((m.name.clone(), key.tp.clone()), key.shard(shard_count));
                per_shard[key.shard(shard_count)].push(key);
            }
            for (plan, keys) in plans.iter_mut().zip(per_shard) {
                if !keys.is_empty() {
                    plan.mirrors.push((mirror_settings(m), keys));
                }
            }
        }
        let log_dir = Arc::new(log_dir);
        let (events_tx, events_rx) = async_channel::bounded::<ShardEvent>(4096);
        let mut shards = Vec::with_capacity(shard_count);
        for plan in plans {
            shards.push(spawn_shard(plan, Arc::clone(&log_dir), events_tx.clone()).context("start shard")?);
        }
        drop(events_tx);
        let status = Arc::new(Mutex::new(Status::new()));
        let status_writer = Arc::clone(&status);
        let mut checkpoints = log_dir.checkpoints().clone();
        let checkpoint_interval = Duration::from_millis(config.offset_checkpoint_interval_ms);
        let events_thread = std::thread::Builder::new()
            .name("events".into())
            .spawn(move || {
                let mut last_write = std::time::Instant::now();
                let mut dirty = false;
                while let Ok(event) = events_rx.recv_blocking() {
                    observer(&event);
                    dirty |= record_checkpoint(&mut checkpoints, &event);
                    apply_event(&status_writer, event);
                    if dirty && last_write.elapsed() >= checkpoint_interval {
                        // Bounds how much a crash makes the next start re-scan.
                        if let Err(e) = checkpoints.write() {
                            tracing::error!(error = %e, "cannot write offset checkpoints");
                        }
                        last_write = std::time::Instant::now();
                        dirty = false;
                    }
                }
                checkpoints
            })
            .context("start events thread")?;
        Ok(Self {
            shards,
            placement,
            log_dir,
            status,
            events_thread,
        })
    }

    fn command(&self, mirror: &str, tp: &TopicPartition, command: ShardCommand) -> anyhow::Result<()> {
        let shard = self
            .placement
            .get(&(mirror.to_owned(), tp.clone()))
            .with_context(|| format!("{tp} is not mirrored by {mirror:?}"))?;
        self.shards[*shard].send(command).map_err(anyhow::Error::msg)
    }

    /// Stops fetching a partition; its log stays open.
    pub fn pause(&self, mirror: &str, tp: &TopicPartition) -> anyhow::Result<()> {
        self.command(
            mirror,
            tp,
            ShardCommand::Pause {
                mirror: mirror.into(),
                tp: tp.clone(),
            },
        )
    }

    /// Fetches a paused or stopped partition again, with fresh source metadata.
    pub fn resume(&self, mirror: &str, tp: &TopicPartition) -> anyhow::Result<()> {
        self.command(
            mirror,
            tp,
            ShardCommand::Resume {
                mirror: mirror.into(),
                tp: tp.clone(),
            },
        )
    }

    /// Stops mirroring a partition and closes its log.
    pub fn remove(&mut self, mirror: &str, tp: &TopicPartition) -> anyhow::Result<()> {
        self.command(
            mirror,
            tp,
            ShardCommand::RemovePartition {
                mirror: mirror.into(),
                tp: tp.clone(),
            },
        )?;
        self.placement.remove(&(mirror.to_owned(), tp.clone()));
        Ok(())
    }

    /// A snapshot of every partition's progress.
    pub fn status(&self) -> Status {
        self.status.lock().expect("status lock").clone()
    }

    /// Stops cleanly: shards finish in-flight appends, flush and close their
    /// logs; then checkpoints and the clean-shutdown marker are written.
    pub fn stop(self) -> anyhow::Result<()> {
        for shard in &self.shards {
            shard.request_stop();
        }
        let mut closed = Vec::new();
        let mut failures = Vec::new();
        for shard in self.shards {
            match shard.join() {
                Ok(c) => closed.extend(c),
                Err(e) => failures.push(e),
            }
        }
        let mut checkpoints = self
            .events_thread
            .join()
            .map_err(|_| anyhow::anyhow!("events thread panicked"))?;
        drop(self.log_dir);
        for c in &closed {
            checkpoints.record_offsets(&c.tp, c.recovery_point, c.log_start_offset);
        }
        if !failures.is_empty() {
            checkpoints.write().context("write offset checkpoints")?;
            bail!("shards failed to stop cleanly: {}", failures.join("; "));
        }
        checkpoints.mark_clean_shutdown().context("mark clean shutdown")?;
        tracing::info!(partitions = closed.len(), "agent stopped cleanly");
        Ok(())
    }
}

/// Keeps the checkpoint entries current; returns whether they changed.
fn record_checkpoint(checkpoints: &mut OffsetCheckpoints, event: &ShardEvent) -> bool {
    match event {
        ShardEvent::Checkpoint {
            tp,
            recovery_point,
            log_start_offset,
            ..
        }
        | ShardEvent::Removed {
            tp,
            recovery_point,
            log_start_offset,
            ..
        } => {
            checkpoints.record_offsets(tp, *recovery_point, *log_start_offset);
            true
        }
        _ => false,
    }
}

fn apply_event(status: &Mutex<Status>, event: ShardEvent) {
    let mut status = status.lock().expect("status lock");
    match event {
        ShardEvent::Progress {
            mirror,
            tp,
            log_end_offset,
            high_watermark,
        } => {
            let s = status.entry((mirror, tp)).or_default();
            s.log_end_offset = log_end_offset;
            s.high_watermark = high_watermark;
        }
        ShardEvent::Truncated {
            mirror,
            tp,
            to_offset,
            reason,
        } => {
            tracing::info!(mirror, %tp, to_offset, reason, "log truncated to converge with the source");
            let s = status.entry((mirror, tp)).or_default();
            s.log_end_offset = to_offset;
            s.truncations += 1;
        }
        ShardEvent::Stopped { mirror, tp, reason } => {
            tracing::error!(mirror, %tp, ?reason, "partition stopped appending");
            status.entry((mirror, tp)).or_default().stopped = Some(reason);
        }
        ShardEvent::Removed {
            mirror,
            tp,
            recovery_point,
            log_start_offset,
        } => {
            tracing::info!(mirror, %tp, recovery_point, log_start_offset, "partition no longer mirrored");
            status.remove(&(mirror, tp));
        }
        ShardEvent::Checkpoint { .. } => {}
        ShardEvent::BadBatch {
            mirror,
            tp,
            offset,
            error,
        } => {
            tracing::warn!(mirror, %tp, offset, error, "bad batch from the source refused");
            status.entry((mirror, tp)).or_default().bad_batches += 1;
        }
        ShardEvent::CommandFailed { mirror, tp, error } => {
            tracing::error!(mirror, %tp, error, "command failed");
        }
    }
}
