//! The ways record bytes can travel from the socket into the log, kept
//! side by side so they can be measured against each other on the same
//! machine (perf/RESULTS.md): straight into the mapped tail of the active
//! segment, or into a page-aligned buffer and then written once into the
//! segment — with pwrite on the shard's core, or through the shard's
//! io_uring ring by the kernel's workers. Measured here, the buffered ways
//! win: a first store into fresh mapped pages costs a zero-fill and a write
//! fault per page (over half of the agent's CPU), which a write into the
//! page cache does not.

/// How a fetcher receives record bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IngestMode {
    /// recv straight into the active segment's mapped tail; validate in place.
    Mmap,
    /// recv into a page-aligned buffer, validate there, pwrite whole batches in.
    AlignedCopy,
    /// As `AlignedCopy`, but the write goes through the shard's io_uring
    /// ring and the shard receives on meanwhile; the log end moves when
    /// the write (and every one before it) is done.
    #[default]
    Uring,
    /// As `Uring`, on a ring with a kernel submission thread (SQPOLL): no
    /// system call per write, the thread picks writes up and copies them
    /// itself, on whichever core it runs — a core the shard does not have
    /// on a small machine (perf/RESULTS.md compares the two).
    UringSqpoll,
}

const PAGE_BYTES: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; PAGE_BYTES]);

/// A growable receive buffer whose start is page-aligned (aligned receive
/// buffers make loopback recv markedly faster than malloc'd ones here).
#[derive(Default)]
pub(crate) struct AlignedBuffer {
    pages: Vec<Page>,
}

impl AlignedBuffer {
    /// The first `len` bytes, growing the buffer if needed (contents unspecified).
    pub(crate) fn get_mut(&mut self, len: usize) -> &mut [u8] {
        let pages = len.div_ceil(PAGE_BYTES);
        if self.pages.len() < pages {
            self.pages.resize(pages, Page([0; PAGE_BYTES]));
        }
        // SAFETY: `Page` is plain bytes with no padding (repr(C), one array
        // field of exactly its size), so the vector's pages form one
        // contiguous, initialized byte region of `pages.len() * PAGE_BYTES`
        // bytes, and `len` is within it.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffer_is_page_aligned_and_grows() {
        let mut b = AlignedBuffer::default();
        let s = b.get_mut(10);
        assert_eq!(s.as_ptr() as usize % PAGE_BYTES, 0);
        s.copy_from_slice(&[7; 10]);
        let s = b.get_mut(3 * PAGE_BYTES + 1);
        assert_eq!(s.len(), 3 * PAGE_BYTES + 1);
        assert_eq!(s.as_ptr() as usize % PAGE_BYTES, 0);
    }
}
