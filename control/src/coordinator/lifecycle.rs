//! A mirrored partition's lifecycle: every state change written to
//! `__mirror_state` before it takes effect, FAILED retries, placement on
//! its shard (PREPARING: last mirror epochs from the source, then LME
//! truncation), destination epoch bumps (EPOCH_FENCING), new partitions
//! from a metadata round, and stopping (STOPPING → STOPPED).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use ringmirror_dataplane::client::jittered_backoff;
use ringmirror_dataplane::client::mirror_epochs::last_mirror_epochs;
use ringmirror_dataplane::fetch::{PartitionKey, SourceMetadata};
use ringmirror_dataplane::partition::LastMirrorEpoch;
use ringmirror_dataplane::partition::destination_epoch as epochs;
use ringmirror_dataplane::shard::{PartitionStart, ShardCommand};
use ringmirror_storage::failpoint::crash_point;
use ringmirror_storage::log::{MirrorSource, TopicPartition};

use super::connections::connection;
use super::{Core, Partition, SYNC_RETRY_MIN, internal, now_ms};
use crate::admin::AdminError;
use crate::state::MirrorPartitionState as State;
use crate::state_store::{PartitionRecord, PartitionStateKey};

/// FAILED partitions are retried after 1 s, doubling to 5 min, at most this often.
const FAILED_RETRY_MIN: Duration = Duration::from_secs(1);
const FAILED_RETRY_MAX: Duration = Duration::from_secs(300);
pub const FAILED_RETRY_ATTEMPTS_MAX: u32 = 100;

/// Jittered exponential backoff for the `attempt`-th FAILED retry.
fn failed_backoff(attempt: u32) -> Duration {
    jittered_backoff(FAILED_RETRY_MIN, FAILED_RETRY_MAX, attempt)
}

impl Core {
    /// Moves a partition to `to` (a valid transition) and writes the new
    /// record, flushed, before returning.
    pub(super) fn set_state(
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
    pub(super) fn set_state_logged(
        &mut self,
        key: &PartitionStateKey,
        to: State,
        edit: impl FnOnce(&mut PartitionRecord),
    ) {
        if let Err(e) = self.set_state(key, to, edit) {
            tracing::error!(mirror = key.mirror, partition = key.partition, error = %e, "cannot change partition state");
        }
    }

    pub(super) fn fail(&mut self, key: &PartitionStateKey, error: String) {
        tracing::error!(
            mirror = key.mirror,
            partition = key.partition,
            error,
            "partition FAILED"
        );
        self.set_state_logged(key, State::Failed, |r| r.error = Some(error));
        self.schedule_retry(key);
    }

    pub(super) fn schedule_retry(&mut self, key: &PartitionStateKey) {
        if let Some(p) = self.partitions.get_mut(key) {
            p.next_retry = (p.record.retry_attempt < FAILED_RETRY_ATTEMPTS_MAX)
                .then(|| Instant::now() + failed_backoff(p.record.retry_attempt));
        }
    }

    /// FAILED partitions whose backoff ran out go through PREPARING again.
    pub(super) fn retry_failed(&mut self) {
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
    pub(super) fn restart_partition(&mut self, key: &PartitionStateKey, automatic: bool) {
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
                    m.metadata.next_sync = Instant::now();
                }
            }
            Err(e) => tracing::error!(mirror = key.mirror, partition = key.partition, error = %e, "cannot retry"),
        }
    }

    pub(super) fn shard_of(&self, key: &PartitionStateKey, tp: &TopicPartition) -> usize {
        PartitionKey {
            mirror: key.mirror.clone(),
            topic_id: key.topic_id,
            tp: tp.clone(),
        }
        .shard(self.shards.len())
    }

    pub(super) fn send(&self, key: &PartitionStateKey, command: ShardCommand) {
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
    pub(super) fn place(&mut self, key: &PartitionStateKey, last_mirror_epoch: Option<LastMirrorEpoch>, paused: bool) {
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

    pub(super) fn end_unplaced(&self, key: &PartitionStateKey) {
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
    pub(super) fn bump_epoch(&mut self, key: &PartitionStateKey, source_epoch: i32, resume: bool) {
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

    pub(super) fn apply_metadata(&mut self, name: &str, metadata: &SourceMetadata) {
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
                m.metadata.sync_error = Some(format!("source cluster id is {seen}, not the recorded {recorded}"));
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
        m.metadata.sync_error = None;
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
        // Topics this mirror holds partitions of (a paused mirror takes new
        // partitions of those only), and per topic the other holders a new
        // partition must not be mixed with: found once per round, not once
        // per new partition (O(P), not O(P²), when a mirror first sees P).
        let held: HashSet<&str> = self
            .by_tp
            .keys()
            .filter(|(m, _)| m == name)
            .map(|(_, tp)| tp.topic.as_str())
            .collect();
        let mut holders: HashMap<&str, Vec<&PartitionStateKey>> = HashMap::new();
        for (k, p) in &self.partitions {
            // A stopped partition of another mirror is local now: it may be claimed.
            if k.mirror == name || p.record.state != State::Stopped {
                holders.entry(p.tp.topic.as_str()).or_default().push(k);
            }
        }
        let mut new = Vec::new();
        let mut conflicts = Vec::new();
        for (key, tp, sle) in found {
            // A paused mirror takes no new topics (no metadata sync); a new
            // partition of a paused topic is added, and placed PAUSED.
            if mirror_paused && !held.contains(tp.topic.as_str()) {
                continue;
            }
            // Decided per topic, so that a topic never mixes partitions of
            // two sources: another mirror holding any partition of it (a
            // stopped one is local now and may be claimed), or this mirror
            // holding it under another topic id (recreated at the source).
            let holder = holders.get(tp.topic.as_str()).and_then(|keys| {
                keys.iter()
                    .find(|k| k.mirror != name || k.topic_id != key.topic_id)
                    .map(|k| k.mirror.clone())
            });
            if let Some(other) = holder {
                conflicts.push((tp.topic.clone(), other));
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
            new.push((key, tp, sle, record));
        }
        let m = self.mirrors.get_mut(name).expect("exists");
        for (topic, other) in conflicts {
            if m.reported_conflicts.insert(topic.clone()) {
                if other == name {
                    tracing::error!(
                        mirror = name,
                        topic,
                        "source topic id changed (topic recreated?); not mirroring the new one"
                    );
                } else {
                    tracing::error!(
                        mirror = name,
                        other,
                        topic,
                        "topic is already mirrored by another mirror; each destination topic has one source"
                    );
                }
            }
        }
        // One flushed append per state partition for all of them, not one per partition.
        let records = new
            .iter()
            .map(|(key, _, _, record)| (key.clone(), record.clone()))
            .collect();
        if let Err(e) = self.store.put_partitions(records) {
            tracing::error!(mirror = name, error = %e, "cannot record new partitions; some are not mirrored");
        }
        let mut added = 0;
        for (key, tp, sle, record) in new {
            // Those written before an error are recorded; the others are
            // found again at the next round.
            if !self.store.partitions().contains_key(&key) {
                continue;
            }
            self.by_tp.insert((name.to_owned(), tp.clone()), key.clone());
            self.partitions
                .insert(key.clone(), Partition::unplaced(tp, record, sle));
            self.mirrors.get_mut(name).expect("exists").to_prepare.push(key);
            added += 1;
        }
        if added > 0 {
            tracing::info!(mirror = name, added, "new partitions to mirror");
            self.reports_dirty = true;
            crash_point("prepare:preparing-written");
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

    /// Stops one partition for `reason` (logged).
    pub(super) fn stop_for(&mut self, key: &PartitionStateKey, reason: &str) {
        tracing::warn!(mirror = key.mirror, partition = key.partition, topic = %self.partitions[key].tp.topic, reason, "stopping the partition (its data stays, writable)");
        if let Err(e) = self.stop_partition(key) {
            tracing::error!(mirror = key.mirror, partition = key.partition, error = %e, "cannot stop the partition");
        }
    }

    /// Whether `topic` of mirror `name` is paused: some partition of it is
    /// PAUSING or PAUSED and none is fetching. New partitions of a paused
    /// topic start PAUSED, and it has no metadata sync.
    pub(super) fn topic_paused(&self, name: &str, topic: &str) -> bool {
        paused_among(
            self.partitions
                .iter()
                .filter(|(k, p)| k.mirror == name && p.tp.topic == topic)
                .map(|(_, p)| p.record.state),
        )
    }

    /// Whether the whole mirror is paused (as [`Core::topic_paused`], over
    /// all its partitions): no new topics, no ACL sync.
    pub(super) fn mirror_paused(&self, name: &str) -> bool {
        paused_among(
            self.partitions
                .iter()
                .filter(|(k, _)| k.mirror == name)
                .map(|(_, p)| p.record.state),
        )
    }

    /// STOPPING: the shard ends mirroring (markers, writable) and reports it.
    pub(super) fn stop_partition(&mut self, key: &PartitionStateKey) -> Result<(), AdminError> {
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
    pub(super) async fn prepare_waiting(&mut self) {
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
                    m.metadata.next_sync = m.metadata.next_sync.min(Instant::now() + SYNC_RETRY_MIN);
                    continue;
                }
            };
            m.to_prepare.clear();
            // Once per topic, not per partition: placing changes no state,
            // and PAUSING is written only where the topic is paused already.
            let mut paused_topics: HashMap<String, bool> = HashMap::new();
            for key in keys {
                let lme = lmes.get(&(key.topic_id, key.partition)).copied().unwrap_or_default();
                let topic = self.partitions[&key].tp.topic.clone();
                // A new (or retried) partition of a paused topic starts
                // PAUSED: PAUSING is written before it is placed.
                let paused = match paused_topics.get(&topic) {
                    Some(&paused) => paused,
                    None => {
                        let paused = self.topic_paused(&name, &topic);
                        paused_topics.insert(topic, paused);
                        paused
                    }
                };
                if paused && self.set_state(&key, State::Pausing, |_| {}).is_err() {
                    continue;
                }
                self.place(&key, Some(lme), paused);
            }
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
