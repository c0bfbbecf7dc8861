//! Shards: one glommio executor per core, pinned, each owning the mirror
//! partitions placed on it (their logs, fetchers and connections). Shards
//! share nothing mutable; they hear "stop" through an atomic flag and
//! report through a channel, and hand back their partitions' final offsets
//! when they end.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};

use crate::fetch::{MirrorPartition, MirrorSettings, PartitionKey, ShardEvent, run_mirror};
use crate::log::{LogConfig, LogDir, TopicPartition};

/// How often a shard looks at its stop flag.
const STOP_POLL_MS: u64 = 20;

/// What one shard runs.
#[derive(Debug, Clone)]
pub struct ShardPlan {
    pub index: usize,
    /// The CPU to pin to.
    pub cpu: usize,
    /// glommio's registered I/O memory per ring (it counts against
    /// RLIMIT_MEMLOCK for non-root users).
    pub io_memory_bytes: usize,
    pub mirrors: Vec<(MirrorSettings, Vec<PartitionKey>)>,
    pub log_config: LogConfig,
}

/// A partition's offsets after its log was closed, for the checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedPartition {
    pub tp: TopicPartition,
    pub recovery_point: i64,
    pub log_start_offset: i64,
}

pub struct ShardHandle {
    pub index: usize,
    stop: Arc<AtomicBool>,
    join: ExecutorJoinHandle<Result<Vec<ClosedPartition>, String>>,
}

impl ShardHandle {
    /// Asks the shard to stop: in-flight fetches finish, logs are flushed and closed.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Waits for the shard to end; returns its partitions' final offsets.
    pub fn join(self) -> Result<Vec<ClosedPartition>, String> {
        self.join
            .join()
            .map_err(|e| format!("shard {} panicked or failed: {e}", self.index))?
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Starts a shard's executor thread.
pub fn spawn_shard(
    plan: ShardPlan,
    log_dir: Arc<LogDir>,
    events: async_channel::Sender<ShardEvent>,
) -> std::io::Result<ShardHandle> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = Arc::clone(&stop);
    let index = plan.index;
    let join = LocalExecutorBuilder::new(Placement::Fixed(plan.cpu))
        .name(&format!("shard-{index}"))
        .io_memory(plan.io_memory_bytes)
        .spawn(move || async move { run_shard(plan, log_dir, events, stop_flag).await })
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(ShardHandle { index, stop, join })
}

async fn run_shard(
    plan: ShardPlan,
    log_dir: Arc<LogDir>,
    events: async_channel::Sender<ShardEvent>,
    stop_flag: Arc<AtomicBool>,
) -> Result<Vec<ClosedPartition>, String> {
    let stop = Rc::new(Cell::new(false));
    let mut tasks = Vec::new();
    for (settings, keys) in plan.mirrors {
        let mut partitions = Vec::with_capacity(keys.len());
        for key in keys {
            let topic_id = (key.topic_id != [0; 16]).then_some(key.topic_id);
            let (log, report) = log_dir
                .open_partition(&key.tp, topic_id, plan.log_config.clone(), now_ms())
                .map_err(|e| format!("shard {}: open {}: {e}", plan.index, key.tp))?;
            if report.scanned_from_offset.is_some() {
                tracing::info!(partition = %key, ?report, "recovered partition log");
            }
            partitions.push(MirrorPartition::new(key, log));
        }
        tasks.push(glommio::spawn_local(run_mirror(
            settings,
            partitions,
            events.clone(),
            Rc::clone(&stop),
        )));
    }
    while !stop_flag.load(Ordering::Acquire) {
        glommio::timer::sleep(Duration::from_millis(STOP_POLL_MS)).await;
    }
    stop.set(true);
    let mut closed = Vec::new();
    let mut first_error = None;
    for task in tasks {
        for partition in task.await {
            let tp = partition.key.tp.clone();
            let log_start_offset = partition.log.log_start_offset();
            let recovery_point = partition.log.log_end_offset();
            match partition.log.close(now_ms()) {
                Ok(()) => closed.push(ClosedPartition {
                    tp,
                    recovery_point,
                    log_start_offset,
                }),
                Err(e) => {
                    tracing::error!(%tp, error = %e, "closing partition log failed");
                    first_error.get_or_insert(format!("close {tp}: {e}"));
                }
            }
        }
    }
    match first_error {
        None => Ok(closed),
        Some(e) => Err(e),
    }
}
