//! The leader-epoch cache: for each leader epoch, the first offset written in
//! it. Answers OffsetForLeaderEpoch with Kafka's semantics
//! (`LeaderEpochFileCache.endOffsetFor`) and persists as
//! `leader-epoch-checkpoint` (version 0, count, "epoch start_offset" lines).

use std::path::PathBuf;

use super::checkpoint::{read_checkpoint, write_checkpoint};
use super::error::{LogError, Result};

pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// Entries sorted by epoch and by start offset, both strictly increasing.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<EpochEntry>,
    dirty: bool,
}

impl LeaderEpochCache {
    pub(crate) fn load(path: PathBuf) -> Result<Self> {
        let mut entries = Vec::new();
        for line in read_checkpoint(&path)? {
            let corrupt = || LogError::CorruptFile {
                path: path.clone(),
                reason: format!("bad entry {line:?}"),
            };
            let (epoch, offset) = line.split_once(' ').ok_or_else(corrupt)?;
            entries.push(EpochEntry {
                epoch: epoch.parse().map_err(|_| corrupt())?,
                start_offset: offset.trim().parse().map_err(|_| corrupt())?,
            });
        }
        let mut cache = Self {
            path,
            entries: Vec::new(),
            dirty: false,
        };
        for entry in entries {
            cache.assign(entry.epoch, entry.start_offset);
        }
        cache.dirty = false;
        Ok(cache)
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start_offset`, as Kafka's `assign`:
    /// entries that conflict (an epoch ≥ this one, or a start offset ≥ this
    /// one) are removed first. A repeat of the latest epoch is a no-op.
    pub(crate) fn assign(&mut self, epoch: i32, start_offset: i64) {
        if epoch < 0 {
            return;
        }
        if let Some(latest) = self.latest()
            && latest.epoch == epoch
            && latest.start_offset <= start_offset
        {
            return;
        }
        let before = self.entries.len();
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        if self.entries.len() != before {
            tracing::warn!(epoch, start_offset, removed = before - self.entries.len(), path = %self.path.display(),
                "leader epoch entry conflicts with later entries; removed them");
        }
        self.entries.push(EpochEntry { epoch, start_offset });
        self.dirty = true;
    }

    /// Kafka's `endOffsetFor`: the end offset of `epoch` (the start of the
    /// next higher epoch, or the log end for the latest) and the largest
    /// epoch ≤ `epoch` that we know.
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> (i32, i64) {
        let Some(latest) = self.latest() else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        if epoch == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if epoch == latest.epoch {
            return (epoch, log_end_offset);
        }
        let higher = self.entries.partition_point(|e| e.epoch <= epoch);
        match (higher.checked_sub(1), self.entries.get(higher)) {
            (_, None) => (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET),
            (None, Some(next)) => (epoch, next.start_offset),
            (Some(floor), Some(next)) => (self.entries[floor].epoch, next.start_offset),
        }
    }

    /// The epoch of the batch at `offset`: the last entry starting at or before it.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        let i = self.entries.partition_point(|e| e.start_offset <= offset);
        i.checked_sub(1).map(|i| self.entries[i].epoch)
    }

    /// Removes entries starting at or after `end_offset` (log truncated there).
    pub(crate) fn truncate_from_end(&mut self, end_offset: i64) {
        let keep = self.entries.partition_point(|e| e.start_offset < end_offset);
        if keep != self.entries.len() {
            self.entries.truncate(keep);
            self.dirty = true;
        }
    }

    /// Drops entries wholly below `start_offset` and clamps the first
    /// remaining entry to start there (log start advanced).
    pub(crate) fn truncate_from_start(&mut self, start_offset: i64) {
        let first_kept = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset)
            .saturating_sub(1);
        if first_kept > 0 {
            self.entries.drain(..first_kept);
            self.dirty = true;
        }
        if let Some(first) = self.entries.first_mut()
            && first.start_offset < start_offset
        {
            first.start_offset = start_offset;
            self.dirty = true;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.dirty |= !self.entries.is_empty();
        self.entries.clear();
    }

    /// Writes the checkpoint if anything changed since the last write.
    pub(crate) fn persist(&mut self) -> Result<()> {
        if self.dirty {
            write_checkpoint(
                &self.path,
                self.entries.iter().map(|e| format!("{} {}", e.epoch, e.start_offset)),
            )?;
            self.dirty = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache {
            path: PathBuf::from("/nonexistent"),
            entries: Vec::new(),
            dirty: false,
        };
        for &(e, o) in entries {
            c.assign(e, o);
        }
        c
    }

    #[test]
    fn end_offset_for_follows_kafka_semantics() {
        let c = cache(&[(1, 0), (3, 100), (7, 250)]);
        let leo = 400;
        assert_eq!(c.end_offset_for(-1, leo), (-1, -1));
        assert_eq!(c.end_offset_for(7, leo), (7, 400), "latest epoch ends at the log end");
        assert_eq!(
            c.end_offset_for(0, leo),
            (0, 0),
            "below every epoch: start of the first"
        );
        assert_eq!(c.end_offset_for(1, leo), (1, 100));
        assert_eq!(
            c.end_offset_for(2, leo),
            (1, 100),
            "unknown epoch: floor epoch, next start"
        );
        assert_eq!(c.end_offset_for(5, leo), (3, 250));
        assert_eq!(c.end_offset_for(9, leo), (-1, -1), "above every epoch");
        assert_eq!(cache(&[]).end_offset_for(3, leo), (-1, -1));
    }

    #[test]
    fn assign_removes_conflicting_entries() {
        let mut c = cache(&[(1, 0), (3, 100), (7, 250)]);
        c.assign(7, 300);
        assert_eq!(c.entries().len(), 3, "same epoch later offset is a no-op");
        c.assign(5, 200);
        assert_eq!(
            c.entries(),
            &[
                EpochEntry {
                    epoch: 1,
                    start_offset: 0
                },
                EpochEntry {
                    epoch: 3,
                    start_offset: 100
                },
                EpochEntry {
                    epoch: 5,
                    start_offset: 200
                }
            ]
        );
    }

    #[test]
    fn truncation_from_both_ends() {
        let mut c = cache(&[(1, 0), (3, 100), (7, 250)]);
        c.truncate_from_end(250);
        assert_eq!(
            c.latest(),
            Some(EpochEntry {
                epoch: 3,
                start_offset: 100
            })
        );
        c.truncate_from_start(150);
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: 3,
                start_offset: 150
            }]
        );
        assert_eq!(c.epoch_for_offset(149), None);
        assert_eq!(c.epoch_for_offset(151), Some(3));
    }
}
