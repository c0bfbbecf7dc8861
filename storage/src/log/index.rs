//! Sparse offset and time indexes, memory-mapped like Kafka's.
//!
//! `.index`: entries of (relative offset u32, position u32), big-endian.
//! `.timeindex`: entries of (timestamp i64, relative offset u32).
//! While a segment is active its index files are preallocated to
//! `segment.index.bytes` and mapped; sealing trims them to their entries, so
//! on a clean start the entry count is the file size / entry size. After an
//! unclean stop the indexes of re-validated segments are rebuilt.
//!
//! The preallocated file is sparse: disk blocks are reserved (fallocate) a
//! page at a time before entries are stored into them, and a segment
//! reserves its indexes' room for the entries a write can add before it
//! writes the batches ([`SparseIndex::reserve_entries`]). So a full disk is
//! an `ENOSPC` error before anything is appended, never a SIGBUS from a
//! store into an unbacked page, and never a batch without its index entry.
//!
//! As Kafka's `AbstractIndex` does, no descriptor is kept: the file is
//! opened to size, reserve or map it and closed again (a mapping outlives
//! its descriptor), so a segment holds one open file (its `.log`), not three.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::{MmapMut, MmapOptions};

use super::error::{LogError, Result};
use super::files::reserve_blocks;

const PAGE_BYTES: usize = 4096;

/// A file of fixed-size entries in a shared writable mapping.
pub(crate) struct IndexFile<const N: usize> {
    path: PathBuf,
    map: Option<MmapMut>,
    entries: usize,
    max_entries: usize,
    /// Bytes [reserved_from, reserved) of the file known to be backed by
    /// disk blocks (whole pages, or the whole file where the file system has
    /// no fallocate). The range starts at the page holding the end of the
    /// entries when the file is opened: the entries' own pages are not
    /// reserved again, since after an unclean stop the file's full length
    /// reads as entries and reserving them would allocate the whole file.
    reserved_from: usize,
    reserved: usize,
}

impl<const N: usize> IndexFile<N> {
    /// Opens (creating if missing) an index file. When `active`, the file is
    /// grown to `max_bytes` for appends; the entry count comes from
    /// `entries` if given (after rebuilding) or from the file size.
    fn open(path: PathBuf, max_bytes: u64, active: bool, entries: Option<usize>) -> Result<(Self, bool)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(LogError::io("open", &path))?;
        let len = file.metadata().map_err(LogError::io("stat", &path))?.len();
        let max_entries = (max_bytes as usize / N).max(1);
        // A file whose size is not whole entries was not closed cleanly.
        let consistent = len % N as u64 == 0;
        let entries = entries.unwrap_or(if consistent { len as usize / N } else { 0 });
        let mut index = Self {
            path,
            map: None,
            entries,
            max_entries: max_entries.max(entries),
            reserved_from: 0,
            reserved: 0,
        };
        if active {
            index.make_active_with(&file)?;
        } else {
            file.set_len((entries * N) as u64)
                .map_err(LogError::io("truncate", &index.path))?;
            index.remap(&file, (entries * N) as u64)?;
        }
        Ok((index, consistent))
    }

    /// The file, opened for a change of its size, blocks or mapping; it is
    /// closed again when dropped.
    fn open_file(&self) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(LogError::io("open", &self.path))
    }

    fn remap(&mut self, file: &File, len: u64) -> Result<()> {
        self.map = None;
        if len > 0 {
            // SAFETY: the file is owned by this log and only modified through
            // this mapping; nothing truncates it while it is mapped.
            let map = unsafe { MmapOptions::new().len(len as usize).map_mut(file) }
                .map_err(LogError::io("mmap", &self.path))?;
            // Entries are touched one page at a time: without this, each
            // first-touch fault reads ahead (zero-filling) megabytes of the
            // sparse, preallocated file (measured: 30% of append time).
            if let Err(e) = map.advise(memmap2::Advice::Random) {
                tracing::debug!(path = %self.path.display(), error = %e, "madvise(MADV_RANDOM) failed");
            }
            self.map = Some(map);
        }
        Ok(())
    }

    /// Grows the file to its maximum (sparsely, as Kafka's `AbstractIndex`
    /// does with `RandomAccessFile.setLength`) and maps it for appends. Only
    /// the page holding the end of the entries is reserved again (a
    /// truncation may have cut its blocks); the pages before it are not
    /// touched, and get reserved again if entries are truncated back into
    /// them before a write there.
    fn make_active(&mut self) -> Result<()> {
        let file = self.open_file()?;
        self.make_active_with(&file)
    }

    fn make_active_with(&mut self, file: &File) -> Result<()> {
        let len = (self.max_entries * N) as u64;
        file.set_len(len).map_err(LogError::io("extend", &self.path))?;
        self.remap(file, len)?;
        self.reserved_from = 0;
        self.reserved = 0;
        self.reserve_entries_with(file, 0)
    }

    /// Reserves disk blocks for `more` entries past the current ones
    /// (capped at the file's maximum), a page at a time.
    fn reserve_entries(&mut self, more: usize) -> Result<()> {
        if self.reserved_for(more) {
            return Ok(());
        }
        let file = self.open_file()?;
        self.reserve_entries_with(&file, more)
    }

    /// Where the next entry's bytes start, rounded down to its page.
    fn write_page_start(&self) -> usize {
        let at = self.entries.min(self.max_entries) * N;
        at - at % PAGE_BYTES
    }

    /// Whether the blocks for `more` entries are reserved already.
    fn reserved_for(&self, more: usize) -> bool {
        self.reserved_from <= self.write_page_start()
            && (self.entries + more).min(self.max_entries) * N <= self.reserved
    }

    fn reserve_entries_with(&mut self, file: &File, more: usize) -> Result<()> {
        if self.reserved_for(more) {
            return Ok(());
        }
        let start = self.write_page_start();
        let end = (self.entries + more).min(self.max_entries) * N;
        let file_len = self.max_entries * N;
        let to = end.div_ceil(PAGE_BYTES).saturating_mul(PAGE_BYTES).min(file_len);
        // Extend the reserved range when the write starts inside it;
        // otherwise (opened, or entries truncated below it) start afresh at
        // the write's page. Re-reserving backed blocks is a no-op.
        let contiguous = self.reserved_from <= start && start <= self.reserved;
        let (from, to) = if contiguous {
            (self.reserved, to.max(self.reserved))
        } else {
            (start, to)
        };
        if reserve_blocks(file, &self.path, from as u64, to as u64)? {
            if !contiguous {
                self.reserved_from = start;
            }
            self.reserved = to;
        } else {
            // No fallocate here: nothing can be reserved, as for segments.
            self.reserved_from = 0;
            self.reserved = file_len;
        }
        Ok(())
    }

    /// Trims the file to its entries and maps it read-only (segment sealed
    /// or log closed). It does not flush: entries written through the old
    /// mapping stay dirty in the page cache until the file is flushed first
    /// or fsynced later (a background flush after a roll).
    fn seal(&mut self) -> Result<()> {
        let len = (self.entries * N) as u64;
        self.map = None;
        self.reserved_from = 0;
        self.reserved = 0;
        let file = self.open_file()?;
        file.set_len(len).map_err(LogError::io("trim", &self.path))?;
        self.remap(&file, len)
    }

    fn flush(&self) -> Result<()> {
        if let Some(map) = &self.map {
            map.flush_range(0, self.entries * N)
                .map_err(LogError::io("msync", &self.path))?;
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.entries
    }

    fn is_full(&self) -> bool {
        self.entries >= self.max_entries
    }

    fn remaining(&self) -> usize {
        self.max_entries.saturating_sub(self.entries)
    }

    fn entry(&self, i: usize) -> &[u8] {
        let map = self.map.as_ref().expect("an index with entries is mapped");
        &map[i * N..(i + 1) * N]
    }

    fn push(&mut self, entry: [u8; N]) -> Result<()> {
        assert!(
            !self.is_full(),
            "index {} is full: the segment must roll first",
            self.path.display()
        );
        let at = self.entries * N;
        if self.map.as_ref().is_none_or(|m| m.len() < at + N) {
            self.make_active()?;
        }
        self.reserve_entries(1)?;
        let map = self.map.as_mut().expect("an active index is mapped");
        map[at..at + N].copy_from_slice(&entry);
        self.entries += 1;
        Ok(())
    }

    fn truncate_entries(&mut self, entries: usize) {
        self.entries = self.entries.min(entries);
    }

    /// Index of the last entry for which `le(entry)` holds, entries being
    /// sorted so that `le` is true for a prefix.
    fn last_where(&self, le: impl Fn(&[u8]) -> bool) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if le(self.entry(mid)) { lo = mid + 1 } else { hi = mid }
        }
        lo.checked_sub(1)
    }

    fn delete(self) -> Result<()> {
        let path = self.path.clone();
        drop(self);
        super::files::remove_if_exists(&path)
    }
}

fn rel(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"))
}

/// An index file plus the base offset its relative offsets count from.
pub(crate) struct SparseIndex<const N: usize> {
    base_offset: i64,
    file: IndexFile<N>,
}

/// `.index`: relative offset → byte position of a batch in the segment.
pub(crate) type OffsetIndex = SparseIndex<8>;
/// `.timeindex`: timestamp → relative offset, with timestamps increasing.
pub(crate) type TimeIndex = SparseIndex<12>;

impl<const N: usize> SparseIndex<N> {
    pub(crate) fn open(
        path: &Path,
        base_offset: i64,
        max_bytes: u64,
        active: bool,
        rebuild: bool,
    ) -> Result<(Self, bool)> {
        let (file, ok) = IndexFile::open(path.to_owned(), max_bytes, active, rebuild.then_some(0))?;
        Ok((Self { base_offset, file }, ok))
    }

    fn relative(&self, offset: i64) -> u32 {
        u32::try_from(offset - self.base_offset).expect("segment rolls before relative offsets overflow")
    }

    pub(crate) fn clear(&mut self) {
        self.file.truncate_entries(0);
    }
    pub(crate) fn is_full(&self) -> bool {
        self.file.is_full()
    }
    /// Entries that still fit before the segment must roll.
    pub(crate) fn remaining(&self) -> usize {
        self.file.remaining()
    }
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.file.len()
    }
    /// Trims and maps read-only, without flushing ([`IndexFile::seal`]).
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.file.seal()
    }
    pub(crate) fn path(&self) -> &Path {
        &self.file.path
    }
    pub(crate) fn make_active(&mut self) -> Result<()> {
        self.file.make_active()
    }
    /// Reserves disk room for `more` entries, so that appending them cannot
    /// meet a full disk.
    pub(crate) fn reserve_entries(&mut self, more: usize) -> Result<()> {
        self.file.reserve_entries(more)
    }
    pub(crate) fn flush(&self) -> Result<()> {
        self.file.flush()
    }
    pub(crate) fn delete(self) -> Result<()> {
        self.file.delete()
    }
}

impl OffsetIndex {
    pub(crate) fn append(&mut self, offset: i64, position: u32) -> Result<()> {
        let mut entry = [0u8; 8];
        entry[..4].copy_from_slice(&self.relative(offset).to_be_bytes());
        entry[4..].copy_from_slice(&position.to_be_bytes());
        self.file.push(entry)
    }

    fn at(&self, i: usize) -> (i64, u32) {
        let e = self.file.entry(i);
        (self.base_offset + i64::from(rel(e)), rel(&e[4..]))
    }

    /// The entry with the largest offset ≤ `offset`, or (base, 0).
    pub(crate) fn lookup(&self, offset: i64) -> (i64, u32) {
        let target = offset - self.base_offset;
        match self.file.last_where(|e| i64::from(rel(e)) <= target) {
            Some(i) => self.at(i),
            None => (self.base_offset, 0),
        }
    }

    pub(crate) fn last_entry(&self) -> Option<(i64, u32)> {
        self.file.len().checked_sub(1).map(|i| self.at(i))
    }

    /// Drops entries at or past byte `position`.
    pub(crate) fn truncate_to_position(&mut self, position: u32) {
        let keep = self.file.last_where(|e| rel(&e[4..]) < position).map_or(0, |i| i + 1);
        self.file.truncate_entries(keep);
    }
}

impl TimeIndex {
    fn at(&self, i: usize) -> (i64, i64) {
        let e = self.file.entry(i);
        (
            i64::from_be_bytes(e[..8].try_into().expect("8 bytes")),
            self.base_offset + i64::from(rel(&e[8..])),
        )
    }

    pub(crate) fn last_entry(&self) -> Option<(i64, i64)> {
        self.file.len().checked_sub(1).map(|i| self.at(i))
    }

    /// Appends (timestamp, offset) if it moves the index forward, as Kafka's
    /// `TimeIndex.maybeAppend`.
    pub(crate) fn maybe_append(&mut self, timestamp: i64, offset: i64) -> Result<()> {
        if self.file.is_full() || timestamp < 0 {
            return Ok(());
        }
        if let Some((last_ts, last_offset)) = self.last_entry()
            && (timestamp <= last_ts || offset <= last_offset)
        {
            return Ok(());
        }
        let mut entry = [0u8; 12];
        entry[..8].copy_from_slice(&timestamp.to_be_bytes());
        entry[8..].copy_from_slice(&self.relative(offset).to_be_bytes());
        self.file.push(entry)
    }

    /// The offset of the entry with the largest timestamp ≤ `timestamp`
    /// (where a scan for that timestamp may start), or the base offset.
    pub(crate) fn lookup(&self, timestamp: i64) -> i64 {
        match self
            .file
            .last_where(|e| i64::from_be_bytes(e[..8].try_into().expect("8 bytes")) <= timestamp)
        {
            Some(i) => self.at(i).1,
            None => self.base_offset,
        }
    }

    /// Drops entries for offsets ≥ `offset`.
    pub(crate) fn truncate_to_offset(&mut self, offset: i64) {
        let target = offset - self.base_offset;
        let keep = self
            .file
            .last_where(|e| i64::from(rel(&e[8..])) < target)
            .map_or(0, |i| i + 1);
        self.file.truncate_entries(keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors of this process open on `path`.
    fn descriptors_on(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target == path)
            .count()
    }

    /// A full-length index left by an unclean stop reads as entries; opening
    /// it does not allocate their blocks, and entries truncated back below
    /// the reserved room (a rebuild) get their page reserved again before
    /// the next store: the invariant that keeps a full disk from a SIGBUS.
    #[test]
    fn reopening_a_full_length_index_reserves_only_from_the_write_page() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let max_bytes = 1 << 20;
        std::fs::File::create(&path).unwrap().set_len(max_bytes).unwrap();
        let (mut idx, _) = OffsetIndex::open(&path, 0, max_bytes, true, false).unwrap();
        assert!(idx.is_full(), "a full-length file reads as entries");
        let blocks = || std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(blocks() <= PAGE_BYTES as u64, "{} bytes allocated on open", blocks());
        idx.clear();
        assert!(!idx.file.reserved_for(1), "truncated below the reserved room");
        idx.append(0, 0).unwrap();
        assert_eq!((idx.file.reserved_from, idx.file.reserved), (0, PAGE_BYTES));
        assert_eq!(blocks(), PAGE_BYTES as u64);
    }

    /// As Kafka's `AbstractIndex`: an index is mapped, not held open, while
    /// active (appends past a page reserve more blocks), sealed and reopened.
    #[test]
    fn an_index_holds_no_descriptor_once_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap().join("00000000000000000000.index");
        let (mut idx, _) = OffsetIndex::open(&path, 0, 1 << 20, true, false).unwrap();
        assert_eq!(descriptors_on(&path), 0, "active");
        // 1 000 entries of 8 bytes: two pages reserved after the first.
        for i in 0..1000u32 {
            idx.append(i64::from(i) * 10, i * 4096).unwrap();
        }
        assert_eq!(descriptors_on(&path), 0, "after appends");
        assert_eq!(idx.lookup(9995), (9990, 999 * 4096));
        idx.seal().unwrap();
        assert_eq!(descriptors_on(&path), 0, "sealed");
        drop(idx);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8000);
        let (idx, ok) = OffsetIndex::open(&path, 0, 1 << 20, false, false).unwrap();
        assert!(ok);
        assert_eq!(descriptors_on(&path), 0, "reopened");
        assert_eq!(idx.lookup(5005), (5000, 500 * 4096));
    }

    #[test]
    fn offset_index_lookup_finds_floor_entry_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let (mut idx, _) = OffsetIndex::open(&path, 100, 4096, true, false).unwrap();
        for (i, pos) in [(110, 4100u32), (130, 8300), (170, 12500)] {
            idx.append(i, pos).unwrap();
        }
        assert_eq!(idx.lookup(99), (100, 0));
        assert_eq!(idx.lookup(100), (100, 0));
        assert_eq!(idx.lookup(129), (110, 4100));
        assert_eq!(idx.lookup(130), (130, 8300));
        assert_eq!(idx.lookup(1000), (170, 12500));
        idx.seal().unwrap();
        drop(idx);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 24);
        let (mut idx, ok) = OffsetIndex::open(&path, 100, 4096, false, false).unwrap();
        assert!(ok);
        assert_eq!(idx.entries(), 3);
        idx.truncate_to_position(8300);
        assert_eq!(idx.last_entry(), Some((110, 4100)));
    }

    #[test]
    fn time_index_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.timeindex");
        let (mut idx, _) = TimeIndex::open(&path, 0, 4096, true, false).unwrap();
        idx.maybe_append(1000, 5).unwrap();
        idx.maybe_append(900, 9).unwrap();
        idx.maybe_append(2000, 12).unwrap();
        assert_eq!(idx.last_entry(), Some((2000, 12)));
        assert_eq!(idx.lookup(999), 0);
        assert_eq!(idx.lookup(1500), 5);
        idx.truncate_to_offset(12);
        assert_eq!(idx.last_entry(), Some((1000, 5)));
    }
}
