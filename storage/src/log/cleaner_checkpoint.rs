//! `cleaner-offset-checkpoint` in the partition directory: the log
//! cleaner's first dirty offset (everything below it was cleaned), so that
//! `min.cleanable.dirty.ratio` survives a restart as Kafka's data-dir file
//! of the same name does. Kafka's text checkpoint format (version 0, count
//! 1, then the offset), written atomically (temp file, fsync, rename, fsync
//! of the directory). A missing file, or one that cannot be trusted, means
//! "never cleaned": the log opens and is cleaned in full once.

use std::path::Path;

use super::checkpoint::{read_checkpoint, write_checkpoint};
use super::error::Result;
use super::files::{fsync_dir, remove_if_exists};

pub(crate) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// The first dirty offset recorded in `dir`, for a log holding
/// [`log_start`, `log_end`): below the log start it is the log start; past
/// the log end (the tail it described is gone) the log counts as never
/// cleaned, as in Kafka's `LogCleanerManager.cleanableOffsets`.
pub(crate) fn load(dir: &Path, log_start: i64, log_end: i64) -> i64 {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    let stored = match read_checkpoint(&path) {
        Ok(entries) if entries.is_empty() => {
            tracing::debug!(path = %path.display(), "no cleaner checkpoint: the log counts as never cleaned");
            return log_start;
        }
        Ok(entries) => match entries[..] {
            [ref only] => only.trim().parse::<i64>().map_err(|e| e.to_string()),
            _ => Err(format!("{} entries, expected one", entries.len())),
        },
        Err(e) => Err(e.to_string()),
    };
    match stored {
        Ok(offset) if offset > log_end => {
            tracing::warn!(path = %path.display(), offset, log_end, "cleaner checkpoint is past the log end; cleaning the log in full");
            log_start
        }
        Ok(offset) => offset.max(log_start),
        Err(reason) => {
            tracing::warn!(path = %path.display(), reason, "unreadable cleaner checkpoint; cleaning the log in full");
            log_start
        }
    }
}

/// Records `first_dirty_offset` durably.
pub(crate) fn store(dir: &Path, first_dirty_offset: i64) -> Result<()> {
    write_checkpoint(&dir.join(CLEANER_CHECKPOINT_FILE), [first_dirty_offset.to_string()])
}

/// Forgets what was cleaned (the log was emptied).
pub(crate) fn remove(dir: &Path) -> Result<()> {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    if !path.exists() {
        return Ok(());
    }
    remove_if_exists(&path)?;
    fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_in_kafka_text_format_and_clamps_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path(), 5, 100), 5, "missing: never cleaned");
        store(dir.path(), 42).unwrap();
        let path = dir.path().join(CLEANER_CHECKPOINT_FILE);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0\n1\n42\n");
        assert!(!dir.path().join("cleaner-offset-checkpoint.tmp").exists());
        assert_eq!(load(dir.path(), 0, 100), 42);
        assert_eq!(load(dir.path(), 0, 42), 42, "the log end itself is fine");
        assert_eq!(load(dir.path(), 50, 100), 50, "below the log start: the log start");
        assert_eq!(load(dir.path(), 7, 41), 7, "past the log end: never cleaned");
        remove(dir.path()).unwrap();
        assert!(!path.exists());
        remove(dir.path()).unwrap();
    }

    #[test]
    fn a_corrupt_file_means_never_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CLEANER_CHECKPOINT_FILE);
        for text in [
            "",
            "garbage",
            "1\n1\n42\n",
            "0\n2\n42\n",
            "0\n1\nforty-two\n",
            "0\n2\n1\n2\n",
            "0\n0\n",
        ] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(load(dir.path(), 3, 100), 3, "{text:?}");
        }
    }
}
