//! A partition directory's segment files on disk (ours or a Kafka
//! broker's: the same layout), for comparing what two logs hold. Reads
//! only; never writes or repairs a log.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The `.log` files in partition directory `dir`, in offset order (their
/// names are 20-digit base offsets).
pub fn log_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    Ok(logs)
}

/// Checks that `logs`, read in order as one stream, hold exactly `expected`
/// and after it only zeros: an agent's active segment ends in space it
/// reserved ahead of its write position. Reads one file at a time.
pub fn check_logs_hold(logs: &[PathBuf], expected: &[u8]) -> anyhow::Result<()> {
    let mut at = 0usize;
    for log in logs {
        let bytes = std::fs::read(log).with_context(|| format!("read {}", log.display()))?;
        let take = bytes.len().min(expected.len() - at);
        anyhow::ensure!(
            bytes[..take] == expected[at..at + take],
            "{}: differs from the expected bytes",
            log.display()
        );
        anyhow::ensure!(
            bytes[take..].iter().all(|&b| b == 0),
            "{}: non-zero bytes past the data",
            log.display()
        );
        at += take;
    }
    anyhow::ensure!(at == expected.len(), "{at} of {} bytes found", expected.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` as consecutive segments of a partition directory.
    fn segments(files: &[&[u8]]) -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        for (i, bytes) in files.iter().enumerate() {
            std::fs::write(dir.path().join(format!("{:020}.log", i * 100)), bytes).unwrap();
        }
        let logs = log_files(dir.path()).unwrap();
        (dir, logs)
    }

    #[test]
    fn logs_hold_the_bytes_across_segments_with_a_zeroed_tail() {
        let (_dir, logs) = segments(&[b"abc", b"de\0\0\0"]);
        check_logs_hold(&logs, b"abcde").unwrap();
    }

    #[test]
    fn a_changed_byte_a_short_log_or_data_past_the_end_is_reported() {
        let (_dir, logs) = segments(&[b"abc", b"dX"]);
        assert!(check_logs_hold(&logs, b"abcde").is_err());
        let (_dir, logs) = segments(&[b"abc", b"d"]);
        let error = check_logs_hold(&logs, b"abcde").unwrap_err().to_string();
        assert_eq!(error, "4 of 5 bytes found");
        let (_dir, logs) = segments(&[b"abc", b"de\0f"]);
        assert!(check_logs_hold(&logs, b"abcde").is_err());
    }
}
