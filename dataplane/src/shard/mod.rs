//! Shards: one glommio executor per core, pinned, each owning the mirror
//! partitions placed on it (their logs, fetchers and connections). Shards
//! share nothing mutable: they take [`ShardCommand`]s from a channel, report
//! [`ShardEvent`]s through another, and hand back their partitions' final
//! offsets when they stop.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

use glommio::task::JoinHandle;
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};

use crate::fetch::{MirrorCommand, MirrorInbox, MirrorPartition, MirrorSettings, PartitionKey, ShardEvent, run_mirror};
use crate::log::{LogConfig, LogDir, TopicPartition};

/// What one shard starts with.
#[derive(Debug, Clone)]
pub struct ShardPlan {
    pub index: usize,
    /// The CPU to pin to.
    pub cpu: usize,
    /// glommio's registered I/O memory per ring (it counts against
    /// RLIMIT_MEMLOCK for non-root users).
    pub io_memory_bytes: usize,
    pub log_config: LogConfig,
}

/// What the rest of the agent may ask of a shard.
#[derive(Debug, Clone)]
pub enum ShardCommand {
    /// Open (or create) the partition's log and start mirroring it.
    AddPartition {
        settings: MirrorSettings,
        key: PartitionKey,
    },
    RemovePartition {
        mirror: String,
        tp: TopicPartition,
    },
    Pause {
        mirror: String,
        tp: TopicPartition,
    },
    /// Fetch again after a pause or a stop (e.g. once the destination epoch was bumped).
    Resume {
        mirror: String,
        tp: TopicPartition,
    },
    /// Finish in-flight appends, flush and close every log, and end.
    Stop,
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
    commands: async_channel::Sender<ShardCommand>,
    join: ExecutorJoinHandle<Result<Vec<ClosedPartition>, String>>,
}

impl ShardHandle {
    /// Queues a command; fails only if the shard has ended.
    pub fn send(&self, command: ShardCommand) -> Result<(), String> {
        self.commands
            .try_send(command)
            .map_err(|e| format!("shard {}: {e}", self.index))
    }

    /// A sender for this shard's commands (for other threads that steer it).
    pub fn commands(&self) -> async_channel::Sender<ShardCommand> {
        self.commands.clone()
    }

    /// Asks the shard to stop: in-flight fetches finish, logs are flushed and closed.
    pub fn request_stop(&self) {
        // A shard that already ended has nothing left to stop.
        let _ = self.send(ShardCommand::Stop);
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
    let (commands, inbox) = async_channel::unbounded();
    let index = plan.index;
    let join = LocalExecutorBuilder::new(Placement::Fixed(plan.cpu))
        .name(&format!("shard-{index}"))
        .io_memory(plan.io_memory_bytes)
        .spawn(move || async move {
            Shard {
                index,
                log_dir,
                events,
                log_config: plan.log_config,
                mirrors: HashMap::new(),
            }
            .run(inbox)
            .await
        })
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(ShardHandle { index, commands, join })
}

struct MirrorTask {
    inbox: MirrorInbox,
    task: JoinHandle<Vec<MirrorPartition>>,
}

struct Shard {
    index: usize,
    log_dir: Arc<LogDir>,
    events: async_channel::Sender<ShardEvent>,
    log_config: LogConfig,
    mirrors: HashMap<String, MirrorTask>,
}

impl Shard {
    async fn run(mut self, commands: async_channel::Receiver<ShardCommand>) -> Result<Vec<ClosedPartition>, String> {
        while let Ok(command) = commands.recv().await {
            let (mirror, tp, command) = match command {
                ShardCommand::Stop => break,
                ShardCommand::AddPartition { settings, key } => {
                    self.add_partition(settings, key);
                    continue;
                }
                ShardCommand::RemovePartition { mirror, tp } => (mirror, tp.clone(), MirrorCommand::Remove(tp)),
                ShardCommand::Pause { mirror, tp } => (mirror, tp.clone(), MirrorCommand::Pause(tp)),
                ShardCommand::Resume { mirror, tp } => (mirror, tp.clone(), MirrorCommand::Resume(tp)),
            };
            match self.mirrors.get(&mirror) {
                Some(m) => m.inbox.borrow_mut().push_back(command),
                None => {
                    let error = "no such mirror on this shard".to_string();
                    let _ = self.events.try_send(ShardEvent::CommandFailed { mirror, tp, error });
                }
            }
        }
        self.stop().await
    }

    fn add_partition(&mut self, settings: MirrorSettings, key: PartitionKey) {
        let topic_id = (key.topic_id != [0; 16]).then_some(key.topic_id);
        let (log, report) = match self
            .log_dir
            .open_partition(&key.tp, topic_id, self.log_config, now_ms())
        {
            Ok(opened) => opened,
            Err(e) => {
                tracing::error!(shard = self.index, partition = %key, error = %e, "cannot open partition log");
                let error = format!("open log: {e}");
                let _ = self.events.try_send(ShardEvent::CommandFailed {
                    mirror: key.mirror,
                    tp: key.tp,
                    error,
                });
                return;
            }
        };
        if report.scanned_from_offset.is_some() {
            tracing::info!(partition = %key, ?report, "recovered partition log");
        }
        let partition = MirrorPartition::new(key, log);
        match self.mirrors.get(&settings.name) {
            Some(m) => m.inbox.borrow_mut().push_back(MirrorCommand::Add(Box::new(partition))),
            None => {
                let inbox: MirrorInbox = Rc::new(RefCell::new(VecDeque::new()));
                let name = settings.name.clone();
                let task = glommio::spawn_local(run_mirror(
                    settings,
                    vec![partition],
                    self.events.clone(),
                    Rc::clone(&inbox),
                ))
                .detach();
                self.mirrors.insert(name, MirrorTask { inbox, task });
            }
        }
    }

    async fn stop(self) -> Result<Vec<ClosedPartition>, String> {
        for m in self.mirrors.values() {
            m.inbox.borrow_mut().push_back(MirrorCommand::Stop);
        }
        let mut closed = Vec::new();
        let mut first_error = None;
        for (_, m) in self.mirrors {
            for partition in m.task.await.unwrap_or_default() {
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
}
