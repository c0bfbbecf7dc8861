//! Walks the batches in a byte range, stopping cleanly at a partial batch.
//!
//! Framing only: each yielded batch has sane length bounds and magic 2, but
//! its CRC is not checked (see `validate` for that). A Fetch response may end
//! in a partial batch; the iterator then ends and `position()` says where the
//! unusable tail starts. A framing error ends the iteration after it is
//! yielded once.

use super::error::BatchError;
use super::header::{RecordBatch, frame_size};

pub struct BatchIter<'a> {
    buf: &'a [u8],
    position: usize,
    max_batch_bytes: u32,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    /// Iterates the batches of `buf`, refusing any batch longer than
    /// `max_batch_bytes` (a bound on what one batch may claim, so that a lying
    /// length cannot make a reader wait for gigabytes).
    pub fn new(buf: &'a [u8], max_batch_bytes: u32) -> Self {
        Self {
            buf,
            position: 0,
            max_batch_bytes,
            failed: false,
        }
    }

    /// Byte position of the next batch: after the iterator ends without an
    /// error, everything from here on is a partial batch (or nothing).
    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes after the last whole batch.
    pub fn remaining(&self) -> &'a [u8] {
        &self.buf[self.position..]
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<(usize, RecordBatch<&'a [u8]>), BatchError>;

    /// Yields `(position, batch)` pairs.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let rest = &self.buf[self.position..];
        match frame_size(rest, self.position, self.max_batch_bytes) {
            Ok(Some(size)) if size <= rest.len() => {
                let at = self.position;
                self.position += size;
                Some(Ok((at, RecordBatch::new_framed(&rest[..size]))))
            }
            Ok(_) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
