//! File naming and durable-write helpers shared by the log's files.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::{LogError, Result};

pub(crate) const LOG_SUFFIX: &str = "log";
pub(crate) const INDEX_SUFFIX: &str = "index";
pub(crate) const TIME_INDEX_SUFFIX: &str = "timeindex";
pub(crate) const TXN_INDEX_SUFFIX: &str = "txnindex";
pub(crate) const SNAPSHOT_SUFFIX: &str = "snapshot";

/// `<dir>/<20-digit offset>.<suffix>`, Kafka's segment file naming.
pub(crate) fn offset_file(dir: &Path, offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{offset:020}.{suffix}"))
}

/// Parses `<20-digit offset>.<suffix>` back to the offset.
pub(crate) fn parse_offset_file(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Offsets of every `<offset>.<suffix>` file in `dir`, sorted.
pub(crate) fn list_offset_files(dir: &Path, suffix: &str) -> Result<Vec<i64>> {
    let mut offsets = Vec::new();
    for entry in fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        if let Some(offset) = entry.file_name().to_str().and_then(|n| parse_offset_file(n, suffix)) {
            offsets.push(offset);
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(LogError::io("fsync dir", dir))
}

/// Replaces `path` with `contents` so that a crash leaves either the old or
/// the new file, never a torn one: write a temp file, fsync, rename, fsync dir.
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).map_err(LogError::io("create", &tmp))?;
    file.write_all(contents).map_err(LogError::io("write", &tmp))?;
    file.sync_all().map_err(LogError::io("fsync", &tmp))?;
    fs::rename(&tmp, path).map_err(LogError::io("rename", path))?;
    fsync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Reserves disk blocks for [from, to) of `file` (fallocate, which extends
/// the file when `to` is past its end). Returns false on a file system
/// without fallocate, where nothing was reserved: the caller decides how to
/// go on without it. Stores into a mapping over unreserved blocks of a full
/// file system raise SIGBUS, which is why every mapped file reserves first.
pub(crate) fn reserve_blocks(file: &File, path: &Path, from: u64, to: u64) -> Result<bool> {
    use std::os::fd::AsRawFd;
    if to <= from {
        return Ok(true);
    }
    // SAFETY: plain syscall on an owned, open descriptor.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, from as libc::off_t, (to - from) as libc::off_t) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return Ok(false);
    }
    Err(LogError::io("fallocate", path)(err))
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LogError::io("remove", path)(e)),
        _ => Ok(()),
    }
}
