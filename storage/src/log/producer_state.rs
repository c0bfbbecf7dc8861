//! Producer and transaction state of one partition, rebuilt from batch
//! headers: the last epoch/sequence/offset per producer id, the ongoing
//! transactions (which bound the last stable offset), and completed aborts
//! (which go to `.txnindex`). A MIRROR_PID_RESET control record clears all of
//! it, on append and on recovery alike.
//!
//! Snapshots use Kafka's `<offset>.snapshot` format (version 1): version i16,
//! crc u32 (CRC32C of the rest), then an array of (producer id i64, epoch
//! i16, last sequence i32, last offset i64, offset delta i32, timestamp i64,
//! coordinator epoch i32, current txn first offset i64 or -1).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use crate::batch::{ControlRecord, ControlType, NO_PRODUCER_ID, RecordBatch};

use super::error::{LogError, Result};
use super::files::{SNAPSHOT_SUFFIX, list_offset_files, offset_file, remove_if_exists, write_atomically};
use super::txn_index::AbortedTxn;

const SNAPSHOT_VERSION: i16 = 1;
const SNAPSHOT_ENTRY_BYTES: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// What the log knows of one producer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// First offset of the producer's open transaction.
    pub current_txn_first_offset: Option<i64>,
}

/// The header fields of a batch that producer state needs, copied out so
/// the batch's bytes need not stay borrowed while state changes.
#[derive(Debug, Clone)]
pub(crate) struct BatchFacts {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub last_sequence: i32,
    pub last_offset_delta: i32,
    pub transactional: bool,
    pub is_control: bool,
    /// The control record of a control batch, `None` for an empty (cleaned)
    /// or unreadable one.
    pub control: Option<ControlRecord>,
}

impl BatchFacts {
    pub(crate) fn of<B: AsRef<[u8]>>(batch: &RecordBatch<B>) -> Self {
        let control = if batch.is_control() && batch.records_count() == 0 {
            // Kafka's cleaner leaves an empty control batch once the whole
            // transaction is cleaned from the log.
            None
        } else if batch.is_control() {
            match ControlRecord::decode(batch) {
                Ok(record) => Some(record),
                Err(e) => {
                    tracing::warn!(error = %e, "control batch with an unreadable record; treating it as unknown");
                    None
                }
            }
        } else {
            None
        };
        Self {
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            max_timestamp: batch.max_timestamp(),
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            base_sequence: batch.base_sequence(),
            last_sequence: batch.last_sequence(),
            last_offset_delta: batch.last_offset_delta(),
            transactional: batch.is_transactional(),
            is_control: batch.is_control(),
            control,
        }
    }
}

/// How many of a producer's latest batches are remembered to recognise a
/// retried one (Kafka's producers keep at most 5 requests in flight).
pub const RECENT_BATCHES_PER_PRODUCER: usize = 5;

/// A producer's recently appended batch: (base sequence, last sequence,
/// base offset).
pub type RecentBatch = (i32, i32, i64);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
    /// Ongoing transactions: first offset → producer id.
    ongoing: BTreeMap<i64, i64>,
    /// Each producer's latest batches, oldest first (memory only: after a
    /// restart from a snapshot only the last batch is known, as in Kafka).
    recent: HashMap<i64, VecDeque<RecentBatch>>,
}

impl ProducerState {
    pub fn producers(&self) -> impl Iterator<Item = &ProducerEntry> {
        self.producers.values()
    }

    pub fn producer(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Producer ids with an open transaction, by first offset.
    pub fn ongoing_transactions(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().map(|(&first, &pid)| (pid, first))
    }

    /// The first offset of the oldest open transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    pub(crate) fn clear(&mut self) {
        self.producers.clear();
        self.ongoing.clear();
        self.recent.clear();
    }

    /// The producer's remembered batch with exactly these sequences, if any
    /// (a retry of a batch already appended).
    pub fn duplicate_of(&self, producer_id: i64, base_sequence: i32, last_sequence: i32) -> Option<RecentBatch> {
        let known = |&(first, last, _): &RecentBatch| first == base_sequence && last == last_sequence;
        if let Some(found) = self
            .recent
            .get(&producer_id)
            .and_then(|r| r.iter().copied().find(known))
        {
            return Some(found);
        }
        let e = self.producers.get(&producer_id)?;
        let last_batch = (
            e.last_sequence.wrapping_sub(e.offset_delta),
            e.last_sequence,
            e.last_offset - i64::from(e.offset_delta),
        );
        known(&last_batch).then_some(last_batch)
    }

    /// Applies one batch. Returns the aborted transaction that an ABORT
    /// marker completed, for the transaction index.
    pub(crate) fn apply(&mut self, b: &BatchFacts) -> Option<AbortedTxn> {
        if let Some(control) = &b.control
            && control.control_type == ControlType::MirrorPidReset
        {
            self.clear();
            return None;
        }
        // A control batch without a readable marker changes nothing (Kafka's
        // ProducerAppendInfo.append skips an empty one): above all it never
        // opens a transaction.
        if b.producer_id == NO_PRODUCER_ID || (b.is_control && b.control.is_none()) {
            return None;
        }
        let entry = self.producers.entry(b.producer_id).or_insert(ProducerEntry {
            producer_id: b.producer_id,
            producer_epoch: b.producer_epoch,
            last_sequence: -1,
            last_offset: -1,
            offset_delta: 0,
            last_timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        });
        if entry.producer_epoch != b.producer_epoch {
            // A new epoch forgets the old one's batches, as Kafka's
            // ProducerStateEntry.maybeUpdateProducerEpoch does: with
            // transaction version 2 every COMMIT/ABORT marker carries the
            // bumped epoch, so after a marker no sequence is remembered.
            entry.producer_epoch = b.producer_epoch;
            entry.last_sequence = -1;
            entry.last_offset = -1;
            entry.offset_delta = 0;
            self.recent.remove(&b.producer_id);
        }
        entry.last_timestamp = b.max_timestamp;
        match &b.control {
            Some(control) if matches!(control.control_type, ControlType::Abort | ControlType::Commit) => {
                if let Some(epoch) = control.coordinator_epoch {
                    entry.coordinator_epoch = epoch;
                }
                let first_offset = entry.current_txn_first_offset.take()?;
                self.ongoing.remove(&first_offset);
                (control.control_type == ControlType::Abort).then(|| AbortedTxn {
                    producer_id: b.producer_id,
                    first_offset,
                    last_offset: b.last_offset,
                    last_stable_offset: self.first_unstable_offset().unwrap_or(b.last_offset + 1),
                })
            }
            Some(_) => None,
            None => {
                entry.last_sequence = b.last_sequence;
                entry.last_offset = b.last_offset;
                entry.offset_delta = b.last_offset_delta;
                let recent = self.recent.entry(b.producer_id).or_default();
                if recent.len() == RECENT_BATCHES_PER_PRODUCER {
                    recent.pop_front();
                }
                recent.push_back((b.base_sequence, b.last_sequence, b.base_offset));
                if b.transactional && entry.current_txn_first_offset.is_none() {
                    entry.current_txn_first_offset = Some(b.base_offset);
                    self.ongoing.insert(b.base_offset, b.producer_id);
                }
                None
            }
        }
    }

    pub(crate) fn encode_snapshot(&self) -> Vec<u8> {
        let mut entries: Vec<&ProducerEntry> = self.producers.values().collect();
        entries.sort_by_key(|e| e.producer_id);
        let mut out = Vec::with_capacity(10 + entries.len() * SNAPSHOT_ENTRY_BYTES);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(entries.len() as i32).to_be_bytes());
        for e in entries {
            out.extend_from_slice(&e.producer_id.to_be_bytes());
            out.extend_from_slice(&e.producer_epoch.to_be_bytes());
            out.extend_from_slice(&e.last_sequence.to_be_bytes());
            out.extend_from_slice(&e.last_offset.to_be_bytes());
            out.extend_from_slice(&e.offset_delta.to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let crc = crc32c::crc32c(&out[6..]);
        out[2..6].copy_from_slice(&crc.to_be_bytes());
        out
    }

    pub(crate) fn decode_snapshot(bytes: &[u8]) -> std::result::Result<Self, String> {
        if bytes.len() < 10 {
            return Err("shorter than its header".into());
        }
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != SNAPSHOT_VERSION {
            return Err(format!("unsupported version {version}"));
        }
        let stored = u32::from_be_bytes(bytes[2..6].try_into().expect("4 bytes"));
        if stored != crc32c::crc32c(&bytes[6..]) {
            return Err("CRC mismatch".into());
        }
        let count = i32::from_be_bytes(bytes[6..10].try_into().expect("4 bytes"));
        let entries = &bytes[10..];
        if count < 0 || entries.len() != count as usize * SNAPSHOT_ENTRY_BYTES {
            return Err(format!("entry count {count} does not match {} bytes", entries.len()));
        }
        let mut state = Self::default();
        for e in entries.chunks_exact(SNAPSHOT_ENTRY_BYTES) {
            let i64_at = |at: usize| i64::from_be_bytes(e[at..at + 8].try_into().expect("8 bytes"));
            let i32_at = |at: usize| i32::from_be_bytes(e[at..at + 4].try_into().expect("4 bytes"));
            let txn_first = i64_at(38);
            let entry = ProducerEntry {
                producer_id: i64_at(0),
                producer_epoch: i16::from_be_bytes([e[8], e[9]]),
                last_sequence: i32_at(10),
                last_offset: i64_at(14),
                offset_delta: i32_at(22),
                last_timestamp: i64_at(26),
                coordinator_epoch: i32_at(34),
                current_txn_first_offset: (txn_first >= 0).then_some(txn_first),
            };
            if let Some(first) = entry.current_txn_first_offset {
                state.ongoing.insert(first, entry.producer_id);
            }
            state.producers.insert(entry.producer_id, entry);
        }
        Ok(state)
    }

    /// Writes `<offset>.snapshot` durably.
    pub(crate) fn write_snapshot(&self, dir: &Path, offset: i64) -> Result<()> {
        write_atomically(&offset_file(dir, offset, SNAPSHOT_SUFFIX), &self.encode_snapshot())
    }

    /// Writes the snapshot at `offset` without syncing it (a roll: the
    /// background flush syncs it with the sealed segment). A crash before
    /// that may leave it torn or empty, and loading skips a torn snapshot
    /// for an older one. Returns its path.
    pub(crate) fn write_snapshot_unsynced(&self, dir: &Path, offset: i64) -> Result<PathBuf> {
        let path = offset_file(dir, offset, SNAPSHOT_SUFFIX);
        std::fs::write(&path, self.encode_snapshot()).map_err(LogError::io("write", &path))?;
        Ok(path)
    }

    /// Loads the newest readable snapshot at or below `max_offset`, deleting
    /// corrupt ones on the way. Returns its offset and state.
    pub(crate) fn load_latest_snapshot(dir: &Path, max_offset: i64) -> Result<Option<(i64, Self)>> {
        for offset in list_offset_files(dir, SNAPSHOT_SUFFIX)?
            .into_iter()
            .rev()
            .filter(|&o| o <= max_offset)
        {
            let path = offset_file(dir, offset, SNAPSHOT_SUFFIX);
            let bytes = std::fs::read(&path).map_err(LogError::io("read", &path))?;
            match Self::decode_snapshot(&bytes) {
                Ok(state) => return Ok(Some((offset, state))),
                Err(reason) => {
                    tracing::warn!(path = %path.display(), reason, "deleting unreadable producer snapshot");
                    remove_if_exists(&path)?;
                }
            }
        }
        Ok(None)
    }

    /// Deletes snapshots at offsets for which `doomed` holds.
    pub(crate) fn delete_snapshots(dir: &Path, doomed: impl Fn(i64) -> bool) -> Result<()> {
        for offset in list_offset_files(dir, SNAPSHOT_SUFFIX)?
            .into_iter()
            .filter(|&o| doomed(o))
        {
            remove_if_exists(&offset_file(dir, offset, SNAPSHOT_SUFFIX))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(base: i64, last: i64, pid: i64, txn: bool, control: Option<ControlType>) -> BatchFacts {
        BatchFacts {
            base_offset: base,
            last_offset: last,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            last_sequence: (last - base) as i32,
            last_offset_delta: (last - base) as i32,
            transactional: txn,
            is_control: control.is_some(),
            control: control.map(|t| ControlRecord {
                key_version: 0,
                control_type: t,
                coordinator_epoch: Some(3),
                source_cluster_id: None,
            }),
        }
    }

    #[test]
    fn abort_completes_transaction_with_kafka_last_stable_offset() {
        let mut s = ProducerState::default();
        assert_eq!(s.apply(&facts(0, 4, 1, true, None)), None);
        assert_eq!(s.apply(&facts(5, 9, 2, true, None)), None);
        assert_eq!(s.first_unstable_offset(), Some(0));
        let aborted = s.apply(&facts(10, 10, 1, true, Some(ControlType::Abort))).unwrap();
        assert_eq!(
            aborted,
            AbortedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 10,
                last_stable_offset: 5
            }
        );
        assert_eq!(s.first_unstable_offset(), Some(5));
        assert_eq!(s.apply(&facts(11, 11, 2, true, Some(ControlType::Commit))), None);
        assert_eq!(s.first_unstable_offset(), None);
    }

    #[test]
    fn mirror_pid_reset_clears_everything_and_snapshots_round_trip() {
        let mut s = ProducerState::default();
        s.apply(&facts(0, 4, 1, true, None));
        s.apply(&facts(5, 9, 2, false, None));
        let decoded = ProducerState::decode_snapshot(&s.encode_snapshot()).unwrap();
        // Snapshots keep each producer's last batch, not the recent ones.
        assert_eq!((&decoded.producers, &decoded.ongoing), (&s.producers, &s.ongoing));
        let mut corrupt = s.encode_snapshot();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        assert!(ProducerState::decode_snapshot(&corrupt).is_err());
        s.apply(&facts(10, 10, NO_PRODUCER_ID, false, Some(ControlType::MirrorPidReset)));
        assert_eq!(s.producers().count(), 0);
        assert_eq!(s.first_unstable_offset(), None);
    }

    #[test]
    fn a_marker_with_a_bumped_epoch_forgets_the_old_epochs_batches_as_kafka() {
        let mut s = ProducerState::default();
        s.apply(&facts(0, 4, 1, true, None));
        assert!(s.duplicate_of(1, 0, 4).is_some());
        // Transaction version 2: the marker carries epoch + 1.
        let mut marker = facts(5, 5, 1, true, Some(ControlType::Commit));
        marker.producer_epoch = 1;
        s.apply(&marker);
        let entry = *s.producer(1).unwrap();
        assert_eq!(
            (
                entry.producer_epoch,
                entry.last_sequence,
                entry.last_offset,
                entry.offset_delta
            ),
            (1, -1, -1, 0),
            "what Kafka's snapshot holds for the producer after the marker"
        );
        assert_eq!(s.duplicate_of(1, 0, 4), None, "the old epoch's batches are forgotten");
        let decoded = ProducerState::decode_snapshot(&s.encode_snapshot()).unwrap();
        assert_eq!(decoded.producer(1), Some(&entry));
        // A marker at the same epoch (transaction version 1) keeps them.
        let mut t = ProducerState::default();
        t.apply(&facts(0, 4, 1, true, None));
        t.apply(&facts(5, 5, 1, true, Some(ControlType::Commit)));
        assert_eq!(t.producer(1).unwrap().last_sequence, 4);
    }

    #[test]
    fn an_empty_control_batch_left_by_kafkas_cleaner_opens_no_transaction() {
        let mut s = ProducerState::default();
        let mut cleaned_marker = facts(130, 130, 7, true, None);
        cleaned_marker.is_control = true;
        assert_eq!(s.apply(&cleaned_marker), None);
        assert_eq!(s.first_unstable_offset(), None, "the last stable offset is not held");
        assert_eq!(s.producer(7), None, "Kafka keeps no state for it either");
    }
}
