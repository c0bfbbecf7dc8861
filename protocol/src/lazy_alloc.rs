//! A global allocator for processes that decode requests from the network:
//! [`LazyHugeAlloc`] serves very large allocations with lazily committed
//! anonymous mappings and everything else with the system allocator.
//!
//! Why: the `kafka-protocol` decoders reserve `Vec::with_capacity(n)` with
//! `n` read straight off the wire, before reading a single element. A few
//! bytes claiming 2^31 elements ask for tens or hundreds of GiB; `malloc`
//! refuses that, and Rust answers a failed allocation by aborting the
//! process — not a panic anyone can catch. Mapped with `MAP_NORESERVE`, the
//! same request costs only address space: pages are committed when first
//! written, the decoder writes a few elements, fails on the bytes that are
//! not there, and the mapping is unmapped when the vector is dropped.
//!
//! This relies on the kernel not accounting `MAP_NORESERVE` mappings, which
//! holds unless `vm.overcommit_memory` is 2 (strict); there a bogus capacity
//! still fails, and still aborts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;

/// Allocations of at least this many bytes are mapped rather than malloc'd:
/// far above anything a legitimate request frame decodes into, so ordinary
/// allocations keep the system allocator's speed.
pub const HUGE_ALLOC_BYTES: usize = 1 << 30;

/// Largest alignment served by a mapping: mappings start on a page boundary
/// and pages are at least this big; stricter alignments go to the system
/// allocator at any size.
const MAPPED_ALIGN_MAX: usize = 4096;

/// The allocator; register it with `#[global_allocator]` in every binary
/// that decodes client requests (the agent, fuzz targets, listener tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct LazyHugeAlloc;

fn is_mapped(layout: Layout) -> bool {
    layout.size() >= HUGE_ALLOC_BYTES && layout.align() <= MAPPED_ALIGN_MAX
}

/// A fresh private anonymous mapping (zero-filled, committed page by page
/// as it is written), or null.
fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous mapping at an address of the kernel's choosing
    // touches no existing memory.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        addr.cast()
    }
}

// SAFETY: every block is served by exactly one of the system allocator or a
// mapping, chosen by `is_mapped` on its layout; the caller hands the same
// layout back on dealloc and realloc (GlobalAlloc's contract), so each block
// is released by whoever served it. Mappings are page-aligned, which meets
// every alignment `is_mapped` accepts.
unsafe impl GlobalAlloc for LazyHugeAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_mapped(layout) {
            map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's guarantees (non-zero size).
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_mapped(layout) {
            // Fresh anonymous pages read as zero: nothing to clear, and
            // nothing committed until written.
            map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_mapped(layout) {
            // SAFETY: `ptr` is the start of a mapping of `layout.size()`
            // bytes made by `map` (or resized to that size by `realloc`).
            // munmap only fails for arguments that are not a mapping.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            // SAFETY: the system allocator served this block with `layout`.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to the
        // alignment, does not overflow isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (is_mapped(layout), is_mapped(new_layout)) {
            // SAFETY: a system block, staying one.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                // Let the kernel move the pages rather than copy them (and
                // commit the untouched ones in the process).
                // SAFETY: `ptr` is a mapping of `layout.size()` bytes; on
                // failure it is left as it was.
                let moved = unsafe { libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE) };
                if moved == libc::MAP_FAILED {
                    ptr::null_mut()
                } else {
                    moved.cast()
                }
            }
            // Across the threshold: a block from the other side, the bytes
            // both sizes hold copied, the old block released.
            _ => {
                // SAFETY: `new_layout` has a non-zero size (the caller's
                // guarantee) and a valid alignment (the old layout's).
                let new_ptr = unsafe { self.alloc(new_layout) };
                if !new_ptr.is_null() {
                    // SAFETY: both blocks hold at least this many bytes and
                    // are distinct live allocations.
                    unsafe {
                        ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                new_ptr
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    /// A byte that depends on its position, to tell copied bytes from others.
    fn pattern(i: usize) -> u8 {
        (i % 251) as u8
    }

    /// About 65 positions spread evenly over `size` bytes, and the last one.
    fn probes(size: usize) -> impl Iterator<Item = usize> {
        (0..size).step_by(size / 64 + 1).chain([size - 1])
    }

    #[test]
    fn small_allocations_go_to_the_system_allocator() {
        for (size, align) in [(1, 1), (100, 8), (PAGE, 64), (HUGE_ALLOC_BYTES - 1, 16)] {
            assert!(!is_mapped(layout(size, align)));
        }
        let l = layout(1000, 8);
        unsafe {
            let p = LazyHugeAlloc.alloc(l);
            assert!(!p.is_null());
            ptr::write_bytes(p, 0xab, l.size());
            assert_eq!(*p.add(999), 0xab);
            LazyHugeAlloc.dealloc(p, l);
        }
    }

    #[test]
    fn huge_allocations_are_mapped_lazily() {
        // 2^31 elements of 64 bytes: what a lying array count asks for, far
        // more than this machine's memory, yet it costs only address space.
        for size in [HUGE_ALLOC_BYTES, 1 << 37] {
            let l = layout(size, 8);
            assert!(is_mapped(l));
            unsafe {
                let p = LazyHugeAlloc.alloc(l);
                assert!(!p.is_null(), "mapping {size} bytes failed");
                assert_eq!(p as usize % PAGE, 0);
                *p = 1;
                *p.add(size / 2) = 2;
                *p.add(size - 1) = 3;
                assert_eq!((*p, *p.add(size / 2), *p.add(size - 1)), (1, 2, 3));
                LazyHugeAlloc.dealloc(p, l);
            }
        }
    }

    #[test]
    fn zeroed_allocations_read_as_zero() {
        for size in [64, 1 << 20, HUGE_ALLOC_BYTES + 3] {
            let l = layout(size, 8);
            unsafe {
                let p = LazyHugeAlloc.alloc_zeroed(l);
                assert!(!p.is_null());
                assert!(probes(size).all(|i| *p.add(i) == 0), "{size} bytes");
                LazyHugeAlloc.dealloc(p, l);
            }
        }
    }

    #[test]
    fn realloc_across_the_threshold_keeps_the_bytes() {
        let small = 3 * PAGE + 5;
        let huge = HUGE_ALLOC_BYTES + PAGE;
        let huger = 2 * HUGE_ALLOC_BYTES + 7;
        let l = layout(small, 8);
        unsafe {
            let p = LazyHugeAlloc.alloc(l);
            assert!(!p.is_null());
            for i in 0..small {
                *p.add(i) = pattern(i);
            }
            // small -> huge: copied into a mapping.
            let p = LazyHugeAlloc.realloc(p, l, huge);
            assert!(!p.is_null());
            assert!((0..small).all(|i| *p.add(i) == pattern(i)));
            *p.add(huge - 1) = 0xee;
            // huge -> bigger: moved by the kernel, tail kept, new part zero.
            let p = LazyHugeAlloc.realloc(p, layout(huge, 8), huger);
            assert!(!p.is_null());
            assert!((0..small).all(|i| *p.add(i) == pattern(i)));
            assert_eq!(*p.add(huge - 1), 0xee);
            assert_eq!(*p.add(huger - 1), 0);
            // huge -> small: copied back to the system allocator.
            let p = LazyHugeAlloc.realloc(p, layout(huger, 8), small - 1);
            assert!(!p.is_null());
            assert!((0..small - 1).all(|i| *p.add(i) == pattern(i)));
            LazyHugeAlloc.dealloc(p, layout(small - 1, 8));
        }
    }

    #[test]
    fn alignment_is_honoured_on_both_sides_of_the_threshold() {
        for (size, align) in [
            (24, 64),
            (PAGE, PAGE),
            (HUGE_ALLOC_BYTES, PAGE),
            // Stricter than a page: the system allocator, even when huge.
            (HUGE_ALLOC_BYTES, 2 * PAGE),
        ] {
            let l = layout(size, align);
            assert_eq!(is_mapped(l), size >= HUGE_ALLOC_BYTES && align <= PAGE);
            unsafe {
                let p = LazyHugeAlloc.alloc(l);
                assert!(!p.is_null(), "{size} bytes aligned to {align}");
                assert_eq!(p as usize % align, 0, "{size} bytes aligned to {align}");
                *p.add(size - 1) = 1;
                LazyHugeAlloc.dealloc(p, l);
            }
        }
    }
}
