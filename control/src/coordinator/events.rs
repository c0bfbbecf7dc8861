//! What the shards' events do: state events (placed, paused, stopped,
//! truncated, mirroring ended, a command failed) move a partition's state;
//! telemetry events (progress, bad batches, fetch statistics) update what
//! the views and `/metrics` show.

use std::time::Instant;

use crate::admin::PartitionEvent;
use ringmirror_dataplane::fetch::{ShardEvent, StateEvent, StopReason, TelemetryEvent};
use ringmirror_dataplane::shard::ShardCommand;
use ringmirror_storage::failpoint::crash_point;
use ringmirror_storage::log::TopicPartition;

use super::{Core, now_ms};
use crate::state::MirrorPartitionState as State;
use crate::state_store::PartitionStateKey;

/// Divergence events a mirror keeps for `mirror describe`.
const PARTITION_EVENTS_KEPT_MAX: usize = 32;

impl Core {
    fn key_of(&self, mirror: &str, tp: &TopicPartition) -> Option<PartitionStateKey> {
        self.by_tp.get(&(mirror.to_owned(), tp.clone())).cloned()
    }

    /// Handles one event; returns whether it was a state event (one that
    /// the published reports must show at once).
    pub(super) fn on_event(&mut self, event: ShardEvent) -> bool {
        match event {
            ShardEvent::State(event) => {
                self.on_state_event(event);
                true
            }
            ShardEvent::Telemetry(event) => {
                self.on_telemetry(event);
                false
            }
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
                    // Recorded with the others placed meanwhile (the shard
                    // fetches already; the record follows what it does).
                    self.placed.push(key);
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
                    let shard = ringmirror_dataplane::partition::shard_for(&tp, self.shards.len());
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
                        r.last_mirror_epoch = last_mirror_epoch.get();
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

    /// Records MIRRORING for the partitions placed since the last call, in
    /// one flushed append per state partition rather than one per
    /// partition (P placements at start: a handful of flushes, not P).
    pub(super) fn record_placed(&mut self) {
        let placed = std::mem::take(&mut self.placed);
        let mut records = Vec::with_capacity(placed.len());
        for key in placed {
            // Still PREPARING: nothing else happened to it meanwhile.
            let Some(p) = self.partitions.get(&key) else { continue };
            if p.record.state != State::Preparing {
                continue;
            }
            let mut record = p.record.clone();
            record.state = State::Mirroring;
            record.error = None;
            record.updated_ms = now_ms();
            records.push((key, record));
        }
        if records.is_empty() {
            return;
        }
        if let Err(e) = self.store.put_partitions(records.clone()) {
            tracing::error!(error = %e, "cannot record placed partitions MIRRORING; some stay PREPARING until placed again");
        }
        for (key, record) in records {
            // Only what was written takes effect.
            if self.store.partitions().get(&key) != Some(&record) {
                continue;
            }
            let p = self.partitions.get_mut(&key).expect("listed");
            tracing::info!(mirror = key.mirror, partition = %p.tp, from = %p.record.state, to = %record.state, "partition state");
            p.record = record;
        }
        self.reports_dirty = true;
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
}
