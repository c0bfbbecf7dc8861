//! Flushing rolled segments off the appending thread. A roll seals the old
//! segment without waiting for its bytes to reach the disk; one process-wide
//! thread (`log-flusher`) then fsyncs the sealed segments' files, the
//! producer snapshot taken at the roll and the partition directory, and only
//! then moves the log's recovery point past them. Kafka does the same:
//! `UnifiedLog.roll` writes the snapshot unsynced and schedules
//! `flushUptoOffsetExclusive` (with the snapshot's flush) on its scheduler.
//!
//! The same thread starts write-back early: every [`WRITE_BEHIND_BYTES`]
//! appended to an active segment, it asks the kernel to start writing them
//! (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait for the
//! disk). Otherwise a 1 GiB segment's bytes would sit dirty until its roll
//! and then flood the disk at once, and appends meeting that flood waited
//! tens of milliseconds (perf/RESULTS.md, "Lag at half the sustained
//! maximum"). Nothing about durability changes: only the roll's fsync moves
//! the recovery point.
//!
//! Until a flush completes, the recovery point stays where it was, so a
//! crash rescans those segments; a clean [`PartitionLog::flush`] syncs
//! whatever is still pending itself. A shard appending at hundreds of MB/s
//! with 1 GiB segments used to stall for the whole segment's write-back at
//! every roll.
//!
//! [`PartitionLog::flush`]: super::PartitionLog::flush

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, OnceLock};

use super::error::{LogError, Result};
use super::files::fsync_dir;

/// The files of one sealed segment (and the snapshot its roll wrote) that
/// must reach the disk before the recovery point may pass `end_offset`.
#[derive(Clone)]
pub(super) struct SealedFiles {
    /// Open, so a segment deleted meanwhile is still synced harmlessly.
    pub(super) log: Arc<File>,
    pub(super) log_path: PathBuf,
    /// `.index`, `.timeindex`, `.txnindex` (the last may not exist).
    pub(super) indexes: [PathBuf; 3],
    pub(super) snapshot: Option<PathBuf>,
    /// The offset after the segment's last batch.
    pub(super) end_offset: i64,
}

impl SealedFiles {
    fn sync(&self) -> Result<()> {
        self.log.sync_all().map_err(LogError::io("fsync", &self.log_path))?;
        for path in self.indexes.iter().chain(&self.snapshot) {
            sync_path_if_exists(path)?;
        }
        Ok(())
    }
}

fn sync_path_if_exists(path: &Path) -> Result<()> {
    match File::open(path) {
        Ok(file) => file.sync_all().map_err(LogError::io("fsync", path)),
        // Deleted since (retention, truncation): nothing left to make durable.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("open", path)(e)),
    }
}

/// How far the background flushes of one log got: the offset below which
/// everything is on disk, or -1. A fresh one replaces it whenever the log is
/// cut, so a flush of what was cut away cannot move the new log's point.
#[derive(Debug)]
struct FlushedTo(AtomicI64);

/// A log's sealed segments not yet known to be on disk.
pub(super) struct UnflushedSegments {
    sealed: Vec<SealedFiles>,
    flushed_to: Arc<FlushedTo>,
}

impl Default for UnflushedSegments {
    fn default() -> Self {
        Self {
            sealed: Vec::new(),
            flushed_to: Arc::new(FlushedTo(AtomicI64::new(-1))),
        }
    }
}

/// Bytes appended to an active segment between two write-behind requests.
pub(super) const WRITE_BEHIND_BYTES: u64 = 8 << 20;

enum Job {
    Flush(FlushJob),
    /// Start writing `file`'s bytes in [from, to) back to the disk.
    WriteBehind {
        file: Arc<File>,
        from: u64,
        to: u64,
    },
}

struct FlushJob {
    dir: PathBuf,
    /// Every sealed segment not yet known flushed, oldest first: a job
    /// that fails leaves its files to the next one.
    sealed: Vec<SealedFiles>,
    upto: i64,
    flushed_to: Arc<FlushedTo>,
}

impl UnflushedSegments {
    /// Where the background flushes got (-1: nowhere yet).
    pub(super) fn flushed_to(&self) -> i64 {
        self.flushed_to.0.load(Ordering::Acquire)
    }

    /// Queues `sealed` (just rolled) for the flusher, with every earlier
    /// segment whose flush has not completed.
    pub(super) fn flush_in_background(&mut self, dir: &Path, sealed: SealedFiles) {
        let done = self.flushed_to();
        self.sealed.retain(|s| s.end_offset > done);
        let upto = sealed.end_offset;
        self.sealed.push(sealed);
        let job = FlushJob {
            dir: dir.to_owned(),
            sealed: self.sealed.clone(),
            upto,
            flushed_to: Arc::clone(&self.flushed_to),
        };
        if flusher().send(Job::Flush(job)).is_err() {
            tracing::error!(dir = %dir.display(), "the log flusher thread is gone; rolled segments wait for the next flush");
        }
    }

    /// Asks the flusher to start writing `file`'s bytes in [from, to) back.
    pub(super) fn write_behind(file: &Arc<File>, from: u64, to: u64) {
        // A flusher gone is reported by the next roll; write-behind is only a hint.
        let _ = flusher().send(Job::WriteBehind {
            file: Arc::clone(file),
            from,
            to,
        });
    }

    /// Syncs every pending sealed segment here and now (a clean flush).
    pub(super) fn sync_now(&mut self, dir: &Path) -> Result<()> {
        let done = self.flushed_to();
        self.sealed.retain(|s| s.end_offset > done);
        if self.sealed.is_empty() {
            return Ok(());
        }
        for sealed in &self.sealed {
            sealed.sync()?;
        }
        fsync_dir(dir)?;
        self.sealed.clear();
        Ok(())
    }

    /// The log was cut: flushes still running no longer say anything about
    /// it. The files stay listed (syncing a deleted one is harmless).
    pub(super) fn forget_progress(&mut self) {
        self.flushed_to = Arc::new(FlushedTo(AtomicI64::new(-1)));
    }
}

/// The process's flusher: one thread, jobs in order.
fn flusher() -> &'static Sender<Job> {
    static FLUSHER: OnceLock<Sender<Job>> = OnceLock::new();
    FLUSHER.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("log-flusher".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Flush(job) => run(&job),
                        Job::WriteBehind { file, from, to } => start_write_back(&file, from, to),
                    }
                }
            })
            .expect("spawn the log flusher thread");
        tx
    })
}

fn run(job: &FlushJob) {
    let synced = job
        .sealed
        .iter()
        .try_for_each(SealedFiles::sync)
        .and_then(|()| match fsync_dir(&job.dir) {
            // The partition was deleted meanwhile.
            Err(_) if !job.dir.exists() => Ok(()),
            other => other,
        });
    match synced {
        Ok(()) => {
            job.flushed_to.0.fetch_max(job.upto, Ordering::AcqRel);
        }
        Err(error) => {
            tracing::warn!(dir = %job.dir.display(), %error, "background flush of rolled segments failed; the recovery point stays");
        }
    }
}

fn start_write_back(file: &File, from: u64, to: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on a descriptor the job keeps open.
    let rc = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            from as libc::off64_t,
            to.saturating_sub(from) as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "write-behind of an active segment failed");
    }
}
