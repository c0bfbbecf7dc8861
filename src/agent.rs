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
use ringmirror_dataplane::fetch::{ShardEvent, StopReason};
use ringmirror_dataplane::log::{LogDir, OffsetCheckpoints, TopicPartition};
use ringmirror_dataplane::shard::{ShardCommand, ShardHandle, ShardPlan, spawn_shard};

use crate::config::AgentConfig;
use crate::discovery::{Discovery, Placement};

/// glommio's default registered I/O memory per ring.
const IO_MEMORY_DEFAULT_BYTES: usize = 10 << 20;
/// glommio registers I/O memory on this many rings per executor.
const IO_RINGS_PER_EXECUTOR: usize = 3;
/// How long `start` waits for the first discovery round before returning.
const FIRST_DISCOVERY_WAIT: Duration = Duration::from_secs(30);

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
    /// Which shard holds each mirrored partition (kept by discovery).
    placement: Placement,
    discovery: Discovery,
    log_dir: Arc<LogDir>,
    status: Arc<Mutex<Status>>,
    /// Ends when every shard has; returns the offset checkpoints it kept.
    events_thread: JoinHandle<OffsetCheckpoints>,
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
    // +1 executor for discovery.
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
        let plans: Vec<ShardPlan> = (0..shard_count)
            .map(|index| ShardPlan {
                index,
                cpu: index % cores,
                io_memory_bytes: io_memory,
                log_config: config.log,
            })
            .collect();
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
        let placement: Placement = Arc::default();
        let (first_round_tx, first_round) = std::sync::mpsc::channel();
        let commands = shards.iter().map(ShardHandle::commands).collect();
        let discovery = Discovery::start(
            &config.mirrors,
            commands,
            Arc::clone(&placement),
            io_memory,
            first_round_tx,
        )?;
        if first_round.recv_timeout(FIRST_DISCOVERY_WAIT).is_err() {
            tracing::warn!("first discovery round is slow; partitions will be placed as they are found");
        }
        Ok(Self {
            shards,
            placement,
            discovery,
            log_dir,
            status,
            events_thread,
        })
    }

    fn command(&self, mirror: &str, tp: &TopicPartition, command: ShardCommand) -> anyhow::Result<()> {
        let shard = self
            .placement
            .lock()
            .expect("placement lock")
            .get(&(mirror.to_owned(), tp.clone()))
            .copied()
            .flatten()
            .with_context(|| format!("{tp} is not mirrored by {mirror:?}"))?;
        self.shards[shard].send(command).map_err(anyhow::Error::msg)
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
    pub fn remove(&self, mirror: &str, tp: &TopicPartition) -> anyhow::Result<()> {
        self.command(
            mirror,
            tp,
            ShardCommand::RemovePartition {
                mirror: mirror.into(),
                tp: tp.clone(),
            },
        )?;
        // Kept as removed, so discovery does not bring it back.
        self.placement
            .lock()
            .expect("placement lock")
            .insert((mirror.to_owned(), tp.clone()), None);
        Ok(())
    }

    /// A snapshot of every partition's progress.
    pub fn status(&self) -> Status {
        self.status.lock().expect("status lock").clone()
    }

    /// Stops cleanly: shards finish in-flight appends, flush and close their
    /// logs; then checkpoints and the clean-shutdown marker are written.
    pub fn stop(self) -> anyhow::Result<()> {
        self.discovery.stop();
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
