//! `.txnindex`: the aborted transactions whose ABORT marker lies in a
//! segment. Entries of 34 bytes: version i16 (0), producer id i64, first
//! offset i64, last offset i64, last stable offset i64. READ_COMMITTED
//! fetches use them to tell consumers which records to drop. Written rarely,
//! so it is a plain appended file kept in memory as well; created lazily.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use super::error::{LogError, Result};
use super::files::remove_if_exists;

const ENTRY_BYTES: usize = 34;
const VERSION: i16 = 0;

/// An aborted transaction: records of `producer_id` in
/// [`first_offset`, `last_offset`] are to be skipped by READ_COMMITTED readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// The partition's last stable offset right after the marker.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[..2].copy_from_slice(&VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let i64_at = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        (i16::from_be_bytes([b[0], b[1]]) == VERSION).then(|| Self {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

pub(crate) struct TxnIndex {
    path: PathBuf,
    file: Option<File>,
    entries: Vec<AbortedTxn>,
    dirty: bool,
}

impl TxnIndex {
    /// Loads the index; a torn or unreadable tail is dropped (and rewritten).
    pub(crate) fn open(path: PathBuf) -> Result<Self> {
        let mut index = Self {
            path,
            file: None,
            entries: Vec::new(),
            dirty: false,
        };
        let bytes = match std::fs::read(&index.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(index),
            Err(e) => return Err(LogError::io("read", &index.path)(e)),
        };
        index.entries = bytes.chunks_exact(ENTRY_BYTES).map_while(AbortedTxn::decode).collect();
        if index.entries.len() * ENTRY_BYTES != bytes.len() {
            tracing::warn!(path = %index.path.display(), kept = index.entries.len(), "dropping torn transaction index tail");
            index.rewrite()?;
        }
        Ok(index)
    }

    pub(crate) fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    fn file(&mut self) -> Result<&mut File> {
        if self.file.is_none() {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(LogError::io("open", &self.path))?;
            self.file = Some(file);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }

    pub(crate) fn append(&mut self, txn: AbortedTxn) -> Result<()> {
        let path = self.path.clone();
        self.file()?
            .write_all(&txn.encode())
            .map_err(LogError::io("append", &path))?;
        self.entries.push(txn);
        self.dirty = true;
        Ok(())
    }

    /// Drops entries whose marker is at or past `offset`.
    pub(crate) fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let keep = self.entries.iter().take_while(|t| t.last_offset < offset).count();
        if keep != self.entries.len() {
            self.entries.truncate(keep);
            self.rewrite()?;
        }
        Ok(())
    }

    pub(crate) fn clear(&mut self) -> Result<()> {
        self.truncate_to(i64::MIN)
    }

    fn rewrite(&mut self) -> Result<()> {
        self.file = None;
        if self.entries.is_empty() {
            return remove_if_exists(&self.path);
        }
        let bytes: Vec<u8> = self.entries.iter().flat_map(AbortedTxn::encode).collect();
        std::fs::write(&self.path, bytes).map_err(LogError::io("write", &self.path))?;
        self.dirty = true;
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.dirty {
            let path = self.path.clone();
            self.file()?.sync_data().map_err(LogError::io("fsync", &path))?;
            self.dirty = false;
        }
        Ok(())
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub(crate) fn delete(self) -> Result<()> {
        remove_if_exists(&self.path)
    }
}
