//! [`LogDir`]: the data directory's own files — the recovery-point and
//! log-start checkpoints for every partition, and the clean-shutdown marker
//! that lets the next start skip recovery scans.
//!
//! The marker is removed as soon as the directory is opened, so a crash at
//! any later point means "scan from the recovery points" next time.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::checkpoint::{read_checkpoint, write_checkpoint};
use super::config::LogConfig;
use super::error::{LogError, Result};
use super::files::{fsync_dir, remove_if_exists, write_atomically};
use super::partition_log::{OpenOptions, PartitionLog, RecoveryReport};

const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
const LOG_START_CHECKPOINT: &str = "log-start-offset-checkpoint";
const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";

/// A topic partition; its directory is `<topic>-<partition>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }

    /// Parses a partition directory name (`my-topic-3` → (`my-topic`, 3)).
    pub fn from_dir_name(name: &str) -> Option<Self> {
        let (topic, partition) = name.rsplit_once('-')?;
        if topic.is_empty() {
            return None;
        }
        Some(Self::new(topic, partition.parse().ok().filter(|p: &i32| *p >= 0)?))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The data directory's two offset checkpoint files, in memory: recovery
/// points and log start offsets per partition. Whoever owns it decides when
/// to write (periodically while running, and at clean shutdown).
#[derive(Debug, Clone)]
pub struct OffsetCheckpoints {
    path: PathBuf,
    recovery_points: BTreeMap<TopicPartition, i64>,
    log_starts: BTreeMap<TopicPartition, i64>,
}

impl OffsetCheckpoints {
    /// Records a partition's recovery point and log start for the next write.
    pub fn record_offsets(&mut self, tp: &TopicPartition, recovery_point: i64, log_start_offset: i64) {
        self.recovery_points.insert(tp.clone(), recovery_point);
        self.log_starts.insert(tp.clone(), log_start_offset);
    }

    /// Forgets a deleted partition's entries.
    pub fn forget(&mut self, tp: &TopicPartition) {
        self.recovery_points.remove(tp);
        self.log_starts.remove(tp);
    }

    pub fn recovery_point(&self, tp: &TopicPartition) -> Option<i64> {
        self.recovery_points.get(tp).copied()
    }

    /// Writes both checkpoint files durably.
    pub fn write(&self) -> Result<()> {
        let lines = |m: &BTreeMap<TopicPartition, i64>| {
            m.iter()
                .map(|(tp, o)| format!("{} {} {o}", tp.topic, tp.partition))
                .collect::<Vec<_>>()
        };
        write_checkpoint(&self.path.join(RECOVERY_POINT_CHECKPOINT), lines(&self.recovery_points))?;
        write_checkpoint(&self.path.join(LOG_START_CHECKPOINT), lines(&self.log_starts))
    }

    /// Clean shutdown of a directory whose logs are all closed and whose
    /// offsets were recorded: writes the checkpoints, then the marker — in
    /// that order, so the marker never vouches for unsaved state.
    pub fn mark_clean_shutdown(self) -> Result<()> {
        self.write()?;
        write_atomically(&self.path.join(CLEAN_SHUTDOWN_MARKER), b"")
    }
}

pub struct LogDir {
    path: PathBuf,
    clean_shutdown: bool,
    checkpoints: OffsetCheckpoints,
}

fn parse_offsets(path: &Path) -> Result<BTreeMap<TopicPartition, i64>> {
    let mut out = BTreeMap::new();
    for line in read_checkpoint(path)? {
        let corrupt = || LogError::CorruptFile {
            path: path.to_owned(),
            reason: format!("bad entry {line:?}"),
        };
        let mut parts = line.split(' ');
        let (Some(topic), Some(partition), Some(offset), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(corrupt());
        };
        let tp = TopicPartition::new(topic, partition.parse().map_err(|_| corrupt())?);
        out.insert(tp, offset.parse().map_err(|_| corrupt())?);
    }
    Ok(out)
}

impl LogDir {
    /// Opens (creating) a data directory, reading its checkpoints and
    /// consuming the clean-shutdown marker.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        std::fs::create_dir_all(&path).map_err(LogError::io("create dir", &path))?;
        let marker = path.join(CLEAN_SHUTDOWN_MARKER);
        let clean_shutdown = marker.exists();
        if clean_shutdown {
            remove_if_exists(&marker)?;
            fsync_dir(&path)?;
        }
        let checkpoints = OffsetCheckpoints {
            recovery_points: parse_offsets(&path.join(RECOVERY_POINT_CHECKPOINT))?,
            log_starts: parse_offsets(&path.join(LOG_START_CHECKPOINT))?,
            path: path.clone(),
        };
        Ok(Self {
            path,
            clean_shutdown,
            checkpoints,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the previous run closed this directory cleanly.
    pub fn was_clean_shutdown(&self) -> bool {
        self.clean_shutdown
    }

    pub fn partition_dir(&self, tp: &TopicPartition) -> PathBuf {
        self.path.join(tp.to_string())
    }

    /// Partitions that have a directory here.
    pub fn partitions_on_disk(&self) -> Result<Vec<TopicPartition>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.path).map_err(LogError::io("list", &self.path))? {
            let entry = entry.map_err(LogError::io("list", &self.path))?;
            if entry.file_type().map_err(LogError::io("stat", entry.path()))?.is_dir()
                && let Some(tp) = entry.file_name().to_str().and_then(TopicPartition::from_dir_name)
            {
                out.push(tp);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Opens one partition's log with this directory's checkpoints.
    pub fn open_partition(
        &self,
        tp: &TopicPartition,
        topic_id: Option<[u8; 16]>,
        config: LogConfig,
        now_ms: u64,
    ) -> Result<(PartitionLog, RecoveryReport)> {
        PartitionLog::open(OpenOptions {
            dir: self.partition_dir(tp),
            topic_id,
            config,
            recovery_point: self.checkpoints.recovery_points.get(tp).copied().unwrap_or(0),
            log_start_offset: self.checkpoints.log_starts.get(tp).copied().unwrap_or(0),
            clean_shutdown: self.clean_shutdown,
            now_ms,
        })
    }

    /// The checkpoints as read at open, for an owner that keeps them
    /// current while the directory's logs run elsewhere.
    pub fn checkpoints(&self) -> &OffsetCheckpoints {
        &self.checkpoints
    }

    /// Records the logs' recovery points and log starts, and writes both
    /// checkpoint files.
    pub fn checkpoint<'a>(
        &mut self,
        logs: impl IntoIterator<Item = (&'a TopicPartition, &'a PartitionLog)>,
    ) -> Result<()> {
        for (tp, log) in logs {
            self.checkpoints
                .record_offsets(tp, log.recovery_point(), log.log_start_offset());
        }
        self.checkpoints.write()
    }

    /// Clean shutdown: closes every log, records its offsets, then
    /// [`OffsetCheckpoints::mark_clean_shutdown`].
    pub fn close(mut self, logs: Vec<(TopicPartition, PartitionLog)>, now_ms: u64) -> Result<()> {
        for (tp, mut log) in logs {
            log.flush(now_ms)?;
            self.checkpoints
                .record_offsets(&tp, log.recovery_point(), log.log_start_offset());
            log.close(now_ms)?;
        }
        self.checkpoints.mark_clean_shutdown()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_partition_dir_names_round_trip() {
        let tp = TopicPartition::new("orders-eu-1", 12);
        assert_eq!(tp.to_string(), "orders-eu-1-12");
        assert_eq!(TopicPartition::from_dir_name("orders-eu-1-12"), Some(tp));
        assert_eq!(TopicPartition::from_dir_name("nodash"), None);
        assert_eq!(TopicPartition::from_dir_name("-3"), None);
        assert_eq!(
            TopicPartition::from_dir_name("t--3"),
            Some(TopicPartition::new("t-", 3))
        );
    }
}
