//! The demo's verdict: every partition of the mirror against the
//! source's, batch for batch and byte for byte, with the offsets, epochs
//! and transactions around them.

use std::collections::VecDeque;
use std::path::Path;

use anyhow::Context;
use ringmirror_storage::batch::BatchIter;
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::{LogConfig, LogDir, PartitionLog, TopicPartition};

/// Differences listed in full before the rest are only counted.
pub(super) const DIFFERENCES_SHOWN: usize = 20;
/// Verification reads each log this many bytes (of whole batches) at a time.
const VERIFY_READ_BYTES: usize = 4 << 20;
const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";

/// What [`verify`] compared, and every difference it found.
#[derive(Debug, Default)]
pub struct Verification {
    pub partitions: usize,
    pub batches: u64,
    pub bytes: u64,
    /// One line per difference, naming the partition.
    pub differences: Vec<String>,
}

/// Compares every partition log of `mirror_dir` with `source_dir`'s (no
/// agent may have either open): the same partitions, the same batches byte
/// for byte at the same offsets, leader-epoch checkpoint files, log start
/// and end offsets, last stable offsets, aborted transactions and topic
/// ids. Both directories are closed cleanly again.
pub fn verify(source_dir: &Path, mirror_dir: &Path) -> anyhow::Result<Verification> {
    // Only reading: reserve and pre-fault little ahead of the active segments.
    let config = LogConfig {
        preallocate_bytes: 4096,
        prefault_bytes: 4096,
        ..LogConfig::default()
    };
    let source = LogDir::open(source_dir).context("open the source data dir")?;
    let mirror = LogDir::open(mirror_dir).context("open the mirror data dir")?;
    let on_source = source.partitions_on_disk()?;
    let on_mirror = mirror.partitions_on_disk()?;
    let mut v = Verification {
        partitions: on_source.len(),
        ..Verification::default()
    };
    for tp in on_mirror.iter().filter(|tp| !on_source.contains(tp)) {
        v.differences.push(format!("{tp}: in the mirror, not at the source"));
    }
    let (mut source_logs, mut mirror_logs) = (Vec::new(), Vec::new());
    for tp in &on_source {
        if !on_mirror.contains(tp) {
            v.differences.push(format!("{tp}: at the source, not in the mirror"));
            continue;
        }
        let checkpoint =
            |dir: &LogDir| std::fs::read_to_string(dir.partition_dir(tp).join(LEADER_EPOCH_CHECKPOINT)).ok();
        let (source_epochs, mirror_epochs) = (checkpoint(&source), checkpoint(&mirror));
        if source_epochs != mirror_epochs {
            v.differences.push(format!(
                "{tp}: {LEADER_EPOCH_CHECKPOINT} differs: source {source_epochs:?}, mirror {mirror_epochs:?}"
            ));
        }
        let (source_log, _) = source.open_partition(tp, None, config, now_ms())?;
        let (mirror_log, _) = mirror.open_partition(tp, None, config, now_ms())?;
        compare_logs(tp, &source_log, &mirror_log, &mut v)?;
        source_logs.push((tp.clone(), source_log));
        mirror_logs.push((tp.clone(), mirror_log));
    }
    source.close(source_logs, now_ms())?;
    mirror.close(mirror_logs, now_ms())?;
    Ok(v)
}

fn compare_logs(
    tp: &TopicPartition,
    source: &PartitionLog,
    mirror: &PartitionLog,
    v: &mut Verification,
) -> anyhow::Result<()> {
    let mut differ = |what: String| v.differences.push(format!("{tp}: {what}"));
    for (what, s, m) in [
        ("log start offset", source.log_start_offset(), mirror.log_start_offset()),
        ("log end offset", source.log_end_offset(), mirror.log_end_offset()),
        (
            "last stable offset",
            source.last_stable_offset(),
            mirror.last_stable_offset(),
        ),
    ] {
        if s != m {
            differ(format!("{what}: source {s}, mirror {m}"));
        }
    }
    if source.topic_id() != mirror.topic_id() {
        differ(format!(
            "topic id: source {:02x?}, mirror {:02x?}",
            source.topic_id(),
            mirror.topic_id()
        ));
    }
    let (source_aborted, mirror_aborted) = (
        source.aborted_transactions(0, i64::MAX),
        mirror.aborted_transactions(0, i64::MAX),
    );
    if source_aborted != mirror_aborted {
        let at = (source_aborted.iter().zip(&mirror_aborted))
            .position(|(s, m)| s != m)
            .unwrap_or(source_aborted.len().min(mirror_aborted.len()));
        differ(format!(
            "aborted transactions: {} at the source, {} in the mirror; entry #{at} is {:?} at the source, {:?} in the mirror",
            source_aborted.len(),
            mirror_aborted.len(),
            source_aborted.get(at),
            mirror_aborted.get(at)
        ));
    }
    let (mut source, mut mirror) = (BatchReader::new(source), BatchReader::new(mirror));
    for index in 0.. {
        let difference = match (source.next()?, mirror.next()?) {
            (None, None) => break,
            (Some((offset, _)), None) => {
                format!("the mirror ends after {index} batches, before the source's batch at offset {offset}")
            }
            (None, Some((offset, _))) => format!("the mirror has a batch at offset {offset} after the source's last"),
            (Some((s_offset, _)), Some((m_offset, _))) if s_offset != m_offset => {
                format!("batch #{index} is at offset {m_offset} in the mirror, at {s_offset} at the source")
            }
            (Some((offset, s)), Some((_, m))) if s != m => {
                let at = s.iter().zip(&m).position(|(s, m)| s != m);
                format!(
                    "batch at offset {offset} differs ({} and {} bytes, first difference at byte {at:?})",
                    s.len(),
                    m.len()
                )
            }
            (Some((_, bytes)), Some(_)) => {
                v.batches += 1;
                v.bytes += bytes.len() as u64;
                continue;
            }
        };
        // Past the first difference, every later batch would be reported too.
        differ(difference);
        break;
    }
    Ok(())
}

/// A log's batches in offset order, read a few MiB at a time, so that
/// verifying a partition of any size takes little memory.
struct BatchReader<'a> {
    log: &'a PartitionLog,
    next_offset: i64,
    chunk: VecDeque<(i64, Vec<u8>)>,
}

impl<'a> BatchReader<'a> {
    fn new(log: &'a PartitionLog) -> Self {
        Self {
            log,
            next_offset: log.log_start_offset(),
            chunk: VecDeque::new(),
        }
    }

    /// The next batch as (base offset, bytes), or `None` at the log end.
    fn next(&mut self) -> anyhow::Result<Option<(i64, Vec<u8>)>> {
        if self.chunk.is_empty() && self.next_offset < self.log.log_end_offset() {
            let slice = self.log.read(self.next_offset, VERIFY_READ_BYTES)?;
            let bytes = slice.to_vec()?;
            for item in BatchIter::new(&bytes, self.log.config().max_batch_bytes) {
                let (_, batch) = item?;
                self.chunk.push_back((batch.base_offset(), batch.bytes().to_vec()));
            }
            // An empty read would repeat forever: it ends the log instead.
            self.next_offset = if slice.len == 0 { i64::MAX } else { slice.end_offset };
        }
        Ok(self.chunk.pop_front())
    }
}
