//! A global allocator that backs large blocks with transparent huge pages.
//!
//! The frame pool, the scheduler's packet arena and per-flow tables reach tens of megabytes
//! (32k flows of 20 packets: about 12 MB), and the algorithms touch them
//! in an order no hardware prefetcher guesses. With 4 KiB pages almost every
//! such touch also misses the TLB and walks the page table; with 2 MiB
//! pages the same data needs 512 times fewer TLB entries. Dataplanes
//! (DPDK, the kernel's own direct map) run on huge pages for this reason.
//!
//! [`HugePageAlloc`] is the system allocator with one change: a block of
//! at least [`MIN_HUGE_BLOCK`] bytes is aligned to a huge page, rounded up
//! to whole huge pages (it wastes less than half of what it uses) and
//! given `madvise(MADV_HUGEPAGE)`, so Linux backs it with huge pages when
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or `madvise`
//! (the usual defaults). Small blocks are the system allocator's own; on
//! other systems, or when the kernel refuses the advice, large blocks are
//! ordinary (aligned) ones. The advice changes where memory lives, never
//! what a program computes. The cost: large blocks are rounded up, and
//! the kernel may compact memory when such a block is first touched.
//!
//! Install it in a binary with
//! `#[global_allocator] static ALLOC: pspat_io::HugePageAlloc = pspat_io::HugePageAlloc;`
//! (the `pspat` command line does).
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::unnecessary_safety_comment)]

use std::alloc::{GlobalAlloc, Layout, System};

/// Size of one transparent huge page on x86_64 and most aarch64 kernels
/// (bytes).
pub const HUGE_PAGE: usize = 2 << 20;

/// Blocks of at least this many bytes are placed on whole huge pages.
pub const MIN_HUGE_BLOCK: usize = HUGE_PAGE / 2;

/// The system allocator, placing blocks of at least [`MIN_HUGE_BLOCK`]
/// bytes on whole, advised huge pages (module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePageAlloc;

/// The layout a block is really allocated with: a large block is aligned to
/// a huge page and rounded up to whole huge pages (so it wastes less than
/// half of what it uses), a small one is left alone.
fn placed(layout: Layout) -> Layout {
    if layout.size() < MIN_HUGE_BLOCK {
        return layout;
    }
    layout
        .size()
        .checked_next_multiple_of(HUGE_PAGE)
        .and_then(|size| Layout::from_size_align(size, layout.align().max(HUGE_PAGE)).ok())
        .unwrap_or(layout)
}

/// Advises huge pages for a block allocated with `placed`'s layout, if
/// `placed` put it on whole huge pages.
fn advise(ptr: *mut u8, placed: Layout) {
    if ptr.is_null() || placed.size() < MIN_HUGE_BLOCK || placed.align() < HUGE_PAGE {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: the block `[ptr, ptr + size)` was just allocated for us, and
    // is aligned to a huge page (checked above), as madvise requires a
    // page-aligned start. MADV_HUGEPAGE changes only how the kernel backs
    // those pages, never their contents or mapping; a failure (THP
    // disabled, an old kernel) returns -1 and is ignored, leaving ordinary
    // pages.
    unsafe {
        libc::madvise(ptr.cast(), placed.size(), libc::MADV_HUGEPAGE);
    }
}

// SAFETY: every block comes from `System` with the layout `placed` derives
// from the caller's, which is at least as large and as aligned, and goes
// back to it with that same derived layout (`placed` is a pure function of
// the caller's layout, which the GlobalAlloc contract makes the caller
// repeat). `advise` neither moves, resizes nor frees a block.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let placed = placed(layout);
        // SAFETY: `placed` has a non-zero size (at least the caller's).
        let ptr = unsafe { System.alloc(placed) };
        advise(ptr, placed);
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let placed = placed(layout);
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(placed) };
        advise(ptr, placed);
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by System with `placed(layout)`
        // (see `alloc`), `layout` being the caller's, as it guarantees.
        unsafe { System.dealloc(ptr, placed(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = placed(layout);
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = placed(new_layout);
        if old == layout && new == new_layout {
            // SAFETY: both small: System allocated `ptr` with `layout`, and
            // the caller guarantees `new_size`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `new` has a non-zero size.
        let moved = unsafe { System.alloc(new) };
        if !moved.is_null() {
            advise(moved, new);
            // SAFETY: both blocks are live, distinct, and hold at least the
            // smaller of the two requested sizes; then the old block goes
            // back with the layout it was allocated with.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                System.dealloc(ptr, old);
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_take_whole_huge_pages_and_small_ones_are_left_alone() {
        let small = Layout::from_size_align(MIN_HUGE_BLOCK - 1, 8).unwrap();
        assert_eq!(placed(small), small);
        let large = Layout::from_size_align(MIN_HUGE_BLOCK, 64).unwrap();
        assert_eq!(
            placed(large),
            Layout::from_size_align(HUGE_PAGE, HUGE_PAGE).unwrap()
        );
        let big = Layout::from_size_align(3 * HUGE_PAGE + 1, 8).unwrap();
        assert_eq!(placed(big).size(), 4 * HUGE_PAGE);
    }

    #[test]
    fn blocks_of_every_size_round_trip() {
        for size in [
            1,
            4096,
            MIN_HUGE_BLOCK - 1,
            MIN_HUGE_BLOCK,
            3 * HUGE_PAGE + 17,
        ] {
            let layout = Layout::from_size_align(size, 64).unwrap();
            // SAFETY: a non-zero size; the block is written within bounds,
            // grown with realloc and freed with the layout it then has.
            unsafe {
                let p = HugePageAlloc.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % 64, 0);
                assert_eq!(*p.add(size - 1), 0);
                p.add(size - 1).write(7);
                let q = HugePageAlloc.realloc(p, layout, 2 * size);
                assert_eq!(*q.add(size - 1), 7);
                HugePageAlloc.dealloc(q, Layout::from_size_align(2 * size, 64).unwrap());
            }
        }
    }
}
