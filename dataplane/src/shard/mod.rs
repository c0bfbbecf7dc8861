//! Shards: one glommio executor per core, pinned, each owning the
//! partitions placed on it (their logs in its [`Registry`], their fetchers
//! and connections) and accepting client connections on the shared
//! listening port. Shards share nothing mutable: they take
//! [`ShardCommand`]s from a channel, report events through a
//! [`ShardEventSink`] (state events never dropped),
//! run other shards' read jobs ([`ShardLinks`]), and hand back their
//! partitions' final offsets when they stop.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

use glommio::net::TcpListener;
use glommio::task::JoinHandle;
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};

use crate::fetch::{
    MirrorCommand, MirrorInbox, MirrorPartition, MirrorSettings, PartitionKey, ShardEventSink, StateEvent,
    mirror_ended, run_mirror,
};
use crate::kafka::{AcceptMode, ListenerSettings, ServeTasks, run_acceptor, run_listener, serve_handed_off};
use crate::partition::registry::{UNCLAIMED_MIRROR, ending_mirror, is_local_partition, local_topic_configs};
use crate::partition::{
    CatalogHandle, LastMirrorEpoch, MirrorReportsHandle, ProducerIds, Registry, ServedPartition, ShardAccess,
    ShardLinkEnd, ShardLinks, run_jobs,
};
use crate::security::AclStore;
use ringmirror_storage::log::{EndedMirroring, LogConfig, LogDir, MirrorSource, ReserveBudget, TopicPartition};

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
    /// The shard's share of `reserve_budget_bytes` (see
    /// [`ReserveBudget::per_shard`]).
    pub reserve_budget: Arc<ReserveBudget>,
    /// Where clients connect (every shard accepts on the same port).
    pub listener: Option<ListenerSettings>,
}

/// What a shard shares with the others for serving.
pub struct ShardServing {
    /// Told once the shard is up (its listener bound), or why it is not.
    pub ready: std::sync::mpsc::Sender<Result<(), String>>,
    pub catalog: Arc<CatalogHandle>,
    /// What the control plane reports of each mirror, for DescribeClusterMirrors.
    pub mirror_reports: Arc<MirrorReportsHandle>,
    /// The agent's ACLs, served by the listener (one store for all shards).
    pub acls: Arc<AclStore>,
    pub producer_ids: Arc<ProducerIds>,
    pub links: Arc<ShardLinks>,
    pub end: ShardLinkEnd,
}

/// What the rest of the agent may ask of a shard.
#[derive(Debug, Clone)]
pub enum ShardCommand {
    /// Open a partition's log found on disk and serve it: a local topic's
    /// partition writable, anything else read-only as mirrored data until a
    /// mirror claims it.
    ServePartition {
        tp: TopicPartition,
    },
    /// Open (or create) the partition's log and start mirroring it.
    AddPartition {
        settings: MirrorSettings,
        key: PartitionKey,
        start: PartitionStart,
    },
    /// A mirror's changed settings (`mirror update`), for its partitions on
    /// this shard; ignored by a shard that has none.
    UpdateMirror {
        settings: MirrorSettings,
    },
    /// Raise the destination leader epoch clients are told (an epoch bump).
    SetLeaderEpoch {
        tp: TopicPartition,
        epoch: i32,
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
    /// Compare the partition's last batches with the source's now
    /// (`mirror check`); a difference is reported as `Diverged`.
    CheckDivergence {
        mirror: String,
        tp: TopicPartition,
    },
    /// Compare every batch held from `from_offset` with the source's
    /// (`mirror verify`), reading at most `bytes_per_s`; answered with
    /// `Verified`.
    Verify {
        mirror: String,
        tp: TopicPartition,
        from_offset: i64,
        bytes_per_s: u64,
    },
    /// End mirroring (failover): the partition becomes local and writable.
    EndMirroring {
        mirror: String,
        tp: TopicPartition,
    },
    /// End mirroring of a partition no fetcher holds (a stop the control
    /// plane finishes after a restart, or of a partition that never got
    /// placed): idempotent, and reported with `MirrorEnded` like any end.
    EndMirroringUnplaced {
        mirror: String,
        tp: TopicPartition,
        source_cluster_id: String,
        /// The destination epoch while mirroring (the markers go above it).
        destination_epoch: i32,
    },
    /// Answered once every command before it has been carried out.
    Barrier(std::sync::mpsc::Sender<()>),
    /// Finish in-flight appends, flush and close every log, and end.
    Stop,
}

/// How the control plane places a partition on its shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStart {
    /// The destination leader epoch (DLE) clients are told; always above
    /// the source epochs of the batches mirrored (the fetcher stops at a
    /// batch above it).
    pub destination_epoch: i32,
    /// LME truncation to run first (PREPARING), with the last mirror epoch
    /// the source answered; `None` when resuming a partition already mirroring.
    /// A log holding only `source`'s batches is not cut (see
    /// [`ringmirror_storage::log::PartitionLog::converge_for_mirror`]).
    pub truncate_above_epoch: Option<LastMirrorEpoch>,
    /// The source the mirror appends from: its cluster id and the
    /// partition's source topic id (`None`: one of them is not known).
    pub source: Option<MirrorSource>,
    /// Placed without fetching (a PAUSED partition after a restart).
    pub paused: bool,
    /// The partition may be a local topic's (failback: mirroring back into
    /// a topic that was failed over); otherwise a local topic is left alone.
    pub claim_local: bool,
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
    /// Queues a command; fails only if the shard has ended. The command
    /// queue is unbounded (commands are few: one per operator request or
    /// state change per partition), so none is ever refused while it runs.
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

/// Starts a shard's executor thread.
pub fn spawn_shard(
    plan: ShardPlan,
    log_dir: Arc<LogDir>,
    events: ShardEventSink,
    serving: ShardServing,
) -> std::io::Result<ShardHandle> {
    let (commands, inbox) = async_channel::unbounded();
    let index = plan.index;
    let join = LocalExecutorBuilder::new(Placement::Fixed(plan.cpu))
        .name(&format!("shard-{index}"))
        .io_memory(plan.io_memory_bytes)
        .spawn(move || async move {
            let serve_tasks = Rc::new(ServeTasks::default());
            let registry = Registry::new(
                index,
                serving.end.appended,
                serving.catalog,
                Arc::clone(&log_dir),
                plan.log_config,
                plan.reserve_budget,
                serving.producer_ids,
            );
            glommio::spawn_local(run_jobs(Rc::clone(&registry), serving.end.jobs)).detach();
            glommio::spawn_local(crate::partition::registry::run_log_cleaner(Rc::clone(&registry))).detach();
            glommio::spawn_local(crate::partition::registry::run_reserve_release(Rc::clone(&registry))).detach();
            if let Some(settings) = plan.listener {
                // Groups are reached only through the listener.
                crate::kafka::groups::start(&registry, settings.groups);
                registry.set_links(Arc::clone(&serving.links));
                crate::kafka::transactions::start(&registry, Arc::clone(&serving.links));
                let access = ShardAccess {
                    local: Rc::clone(&registry),
                    links: serving.links,
                };
                // Bound here, before start-up is reported, so that clients
                // can connect as soon as the agent says it is up. The
                // serving tasks are closed when the shard stops.
                let accepts_here = settings.accept == AcceptMode::EachShard || index == 0;
                let bound = if accepts_here {
                    TcpListener::bind(settings.addr)
                        .map(Some)
                        .map_err(|e| format!("shard {index}: listen on {}: {e}", settings.addr))
                } else {
                    Ok(None)
                };
                match bound {
                    Ok(listener) => {
                        let _ = serving.ready.send(Ok(()));
                        match (settings.accept, listener) {
                            (AcceptMode::EachShard, Some(listener)) => {
                                serve_tasks.spawn(run_listener(
                                    listener,
                                    settings,
                                    access,
                                    serving.mirror_reports,
                                    serving.acls,
                                    Rc::clone(&serve_tasks),
                                ));
                            }
                            (_, listener) => {
                                if let Some(listener) = listener {
                                    serve_tasks.spawn(run_acceptor(listener, Arc::clone(&access.links)));
                                }
                                serve_tasks.spawn(serve_handed_off(
                                    serving.end.handoff,
                                    settings,
                                    access,
                                    serving.mirror_reports,
                                    serving.acls,
                                    Rc::clone(&serve_tasks),
                                ));
                            }
                        }
                    }
                    Err(e) => {
                        let _ = serving.ready.send(Err(e));
                    }
                }
            } else {
                let _ = serving.ready.send(Ok(()));
            }
            Shard {
                index,
                log_dir,
                events,
                mirrors: HashMap::new(),
                registry,
                serve_tasks,
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
    events: ShardEventSink,
    mirrors: HashMap<String, MirrorTask>,
    registry: Rc<Registry>,
    serve_tasks: Rc<ServeTasks>,
}

impl Shard {
    async fn run(mut self, commands: async_channel::Receiver<ShardCommand>) -> Result<Vec<ClosedPartition>, String> {
        while let Ok(command) = commands.recv().await {
            let (mirror, tp, command) = match command {
                ShardCommand::Stop => break,
                ShardCommand::Barrier(done) => {
                    let _ = done.send(());
                    continue;
                }
                ShardCommand::ServePartition { tp } => {
                    let local = is_local_partition(&self.log_dir, &tp);
                    let mirror = (!local).then(|| UNCLAIMED_MIRROR.to_string());
                    if local {
                        self.publish_local_configs(&tp);
                    }
                    if self.registry.get(&tp).is_none()
                        && let Err(e) = self
                            .open(&tp, None, mirror)
                            .and_then(|_| self.finish_interrupted_end(&tp))
                    {
                        self.events.state(StateEvent::CommandFailed {
                            mirror: UNCLAIMED_MIRROR.into(),
                            tp,
                            error: e,
                        });
                    }
                    continue;
                }
                ShardCommand::AddPartition { settings, key, start } => {
                    self.add_partition(settings, key, start);
                    continue;
                }
                ShardCommand::EndMirroringUnplaced {
                    mirror,
                    tp,
                    source_cluster_id,
                    destination_epoch,
                } => {
                    self.end_unplaced(mirror, tp, &source_cluster_id, destination_epoch);
                    continue;
                }
                ShardCommand::UpdateMirror { settings } => {
                    if let Some(m) = self.mirrors.get(&settings.name) {
                        m.inbox
                            .borrow_mut()
                            .push_back(MirrorCommand::UpdateSettings(Box::new(settings)));
                    }
                    continue;
                }
                ShardCommand::SetLeaderEpoch { tp, epoch } => {
                    if let Some(served) = self.registry.get(&tp) {
                        served.observe_epoch(epoch);
                    }
                    continue;
                }
                ShardCommand::RemovePartition { mirror, tp } => (mirror, tp.clone(), MirrorCommand::Remove(tp)),
                ShardCommand::Pause { mirror, tp } => (mirror, tp.clone(), MirrorCommand::Pause(tp)),
                ShardCommand::Resume { mirror, tp } => (mirror, tp.clone(), MirrorCommand::Resume(tp)),
                ShardCommand::EndMirroring { mirror, tp } => (mirror, tp.clone(), MirrorCommand::End(tp)),
                ShardCommand::CheckDivergence { mirror, tp } => {
                    (mirror, tp.clone(), MirrorCommand::CheckDivergence(tp))
                }
                ShardCommand::Verify {
                    mirror,
                    tp,
                    from_offset,
                    bytes_per_s,
                } => (
                    mirror,
                    tp.clone(),
                    MirrorCommand::Verify {
                        tp,
                        from_offset,
                        bytes_per_s,
                    },
                ),
            };
            match self.mirrors.get(&mirror) {
                Some(m) => m.inbox.borrow_mut().push_back(command),
                None => {
                    let error = "no such mirror on this shard".to_string();
                    self.events.state(StateEvent::CommandFailed { mirror, tp, error });
                }
            }
        }
        self.stop().await
    }

    /// Opens (recovering if needed) a partition's log and serves it.
    fn open(
        &self,
        tp: &TopicPartition,
        topic_id: Option<[u8; 16]>,
        mirror: Option<String>,
    ) -> Result<Rc<ServedPartition>, String> {
        let (log, report) = self.registry.open_log(tp, topic_id).map_err(|e| {
            tracing::error!(shard = self.index, partition = %tp, error = %e, "cannot open partition log");
            format!("open log: {e}")
        })?;
        if report.scanned_from_offset.is_some() {
            tracing::info!(partition = %tp, ?report, "recovered partition log");
        }
        let served = ServedPartition::new(log, mirror);
        self.registry.register(tp.clone(), Rc::clone(&served));
        Ok(served)
    }

    /// Publishes the configs a local topic was created with (its
    /// partition's marker) in the catalog; a marker without any (a topic
    /// local by failover: the control plane publishes its synced configs)
    /// changes nothing.
    fn publish_local_configs(&self, tp: &TopicPartition) {
        match local_topic_configs(&self.log_dir, tp) {
            Ok(configs) if configs.is_empty() => {}
            Ok(configs) => {
                self.registry.catalog().publish_topic_configs(&tp.topic, configs);
            }
            Err(e) => tracing::warn!(partition = %tp, error = %e, "cannot read the local topic's configs"),
        }
    }

    /// Completes an end of mirroring that a crash interrupted, above the
    /// destination epoch its marker recorded.
    fn finish_interrupted_end(&self, tp: &TopicPartition) -> Result<(), String> {
        let Some((cluster_id, epoch)) = ending_mirror(&self.log_dir, tp) else {
            return Ok(());
        };
        if let (Some(epoch), Some(served)) = (epoch, self.registry.get(tp)) {
            served.observe_epoch(epoch);
        }
        let (ended, epoch) = self.registry.end_mirroring(tp, &cluster_id)?;
        tracing::info!(partition = %tp, ?ended, epoch, "finished ending mirroring, interrupted before");
        Ok(())
    }

    fn end_unplaced(&self, mirror: String, tp: TopicPartition, source_cluster_id: &str, destination_epoch: i32) {
        let Some(served) = self.registry.get(&tp) else {
            let error = "end mirroring: the partition is not open".to_string();
            self.events.state(StateEvent::CommandFailed { mirror, tp, error });
            return;
        };
        served.observe_epoch(destination_epoch);
        let event = if served.mirror.is_none() && ending_mirror(&self.log_dir, &tp).is_none() {
            // Already ended (before a restart): report it, change nothing.
            let ended = EndedMirroring {
                aborted_transactions: 0,
                wrote_pid_reset: false,
                log_end_offset: served.log.borrow().log_end_offset(),
            };
            mirror_ended(
                &self.registry,
                mirror,
                tp,
                &ended,
                served.leader_epoch.get(),
                destination_epoch,
            )
        } else {
            match self.registry.end_mirroring(&tp, source_cluster_id) {
                Ok((ended, epoch)) => mirror_ended(&self.registry, mirror, tp, &ended, epoch, destination_epoch),
                Err(e) => StateEvent::CommandFailed {
                    mirror,
                    tp,
                    error: format!("end mirroring: {e}"),
                },
            }
        };
        self.events.state(event);
    }

    fn add_partition(&mut self, settings: MirrorSettings, key: PartitionKey, start: PartitionStart) {
        let (mirror, tp) = (key.mirror.clone(), key.tp.clone());
        if let Err(error) = self.try_add_partition(settings, key, start) {
            self.events.state(StateEvent::CommandFailed { mirror, tp, error });
        }
    }

    fn try_add_partition(
        &mut self,
        settings: MirrorSettings,
        key: PartitionKey,
        start: PartitionStart,
    ) -> Result<(), String> {
        let topic_id = (key.topic_id != [0; 16]).then_some(key.topic_id);
        // Whether this mirror's supervisor here still holds the partition
        // (stopped after an error, such as a full disk, and now retried).
        let mut held = false;
        let served = match self.registry.get(&key.tp) {
            // Found on disk at start: now claimed by its mirror.
            Some(served) if served.mirror.as_deref() == Some(UNCLAIMED_MIRROR) => {
                let claimed = served.claimed_by(&key.mirror);
                self.registry.register(key.tp.clone(), Rc::clone(&claimed));
                claimed
            }
            Some(served)
                if served.mirror.as_deref() == Some(key.mirror.as_str()) && self.mirrors.contains_key(&key.mirror) =>
            {
                held = true;
                served
            }
            Some(_) if start.claim_local && is_local_partition(&self.log_dir, &key.tp) => {
                self.registry.reclaim_local(&key.tp, &key.mirror)?
            }
            Some(served) if served.mirror.is_none() => {
                tracing::info!(partition = %key, "a local topic now (its mirroring ended, or it was created here): not mirroring it");
                return Err("the partition is a local topic's (writable here); not mirroring into it".into());
            }
            Some(_) => return Err("already mirrored by another mirror".into()),
            None => self.open(&key.tp, topic_id, Some(key.mirror.clone()))?,
        };
        let truncated = match start.truncate_above_epoch {
            Some(lme) => served
                .log
                .try_borrow_mut()
                .map_err(|_| "the partition's log is busy; LME truncation will be retried".to_string())?
                .converge_for_mirror(start.source.as_ref(), lme.get())
                .map_err(|e| format!("LME truncation: {e}"))?,
            None => None,
        };
        served.observe_epoch(start.destination_epoch);
        self.events.state(StateEvent::Placed {
            mirror: key.mirror.clone(),
            tp: key.tp.clone(),
            log_end_offset: served.log.borrow().log_end_offset(),
            truncated_to: truncated,
        });
        if held {
            // Placed afresh from the source's current metadata, as a resume is.
            let command = if start.paused {
                MirrorCommand::Pause(key.tp)
            } else {
                MirrorCommand::Resume(key.tp)
            };
            if let Some(m) = self.mirrors.get(&key.mirror) {
                m.inbox.borrow_mut().push_back(command);
            }
            return Ok(());
        }
        let mut partition = MirrorPartition::new(key, served);
        partition.paused = start.paused;
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
                    Rc::clone(&self.registry),
                ))
                .detach();
                self.mirrors.insert(name, MirrorTask { inbox, task });
            }
        }
        Ok(())
    }

    async fn stop(self) -> Result<Vec<ClosedPartition>, String> {
        // No new requests: the listening socket and client connections close.
        self.serve_tasks.close_all().await;
        for m in self.mirrors.values() {
            m.inbox.borrow_mut().push_back(MirrorCommand::Stop);
        }
        for (_, m) in self.mirrors {
            // Fetchers have finished their in-flight appends; the logs stay
            // in the registry, which closes them below.
            drop(m.task.await);
        }
        let mut closed = Vec::new();
        let mut first_error = None;
        for (tp, result) in self.registry.close_all() {
            match result {
                Ok((recovery_point, log_start_offset)) => closed.push(ClosedPartition {
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
        match first_error {
            None => Ok(closed),
            Some(e) => Err(e),
        }
    }
}
