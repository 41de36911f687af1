//! A global allocator that backs large blocks with transparent huge pages.
//!
//! The frame pool, the scheduler's packet arena and per-flow tables reach tens of megabytes
//! (32k flows of 20 packets: about 12 MB), and the algorithms touch them
//! in an order no hardware prefetcher guesses. With 4 KiB pages almost every
//! such touch also misses the TLB and walks the page table; with 2 MiB
//! pages the same data needs 512 times fewer TLB entries. Dataplanes
//! (DPDK, the kernel's own direct map) run on huge pages for this reason.
//!
//! [`HugePageAlloc`] is the system allocator with one change: on Linux a
//! block of at least [`MIN_HUGE_BLOCK`] bytes is mapped on its own
//! (`mmap`), aligned to a huge page (one below 2 MiB is rounded up to one
//! huge page: it wastes less than half of what it uses; a longer one keeps
//! its length, so the part after its last whole huge page stays on base
//! pages, resident only where written) and given `madvise(MADV_HUGEPAGE)`,
//! so Linux backs its whole huge pages with huge pages when `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or
//! `madvise` (the usual defaults). A fresh mapping reads as zero, so a
//! zeroed table (`vec![0; n]`) costs memory only where it is written, as
//! `calloc` gives it (the system allocator zeroes a block aligned beyond
//! its own alignment by writing every byte, which would make the whole
//! rounded block resident at once), and a freed block goes back to the
//! system at once. Small blocks are the system allocator's own; on other
//! systems large blocks are ordinary (aligned) ones, and when the kernel
//! refuses the advice they are ordinary pages. The advice changes where
//! memory lives, never what a program computes. The cost: a touched huge
//! page is resident whole, and the kernel may compact memory when such a
//! block is first touched.
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

/// Granularity of a mapping's length: 64 KiB, a multiple of every base
/// page size Linux uses (4, 16 and 64 KiB), so both ends of a block mapped
/// on its own fall on page boundaries.
const MAP_GRANULE: usize = 64 << 10;

/// The layout a block is really allocated with: a large block is aligned to
/// a huge page; below one huge page it is rounded up to one (so it wastes
/// less than half of what it uses, for the one TLB entry), above it to the
/// next [`MAP_GRANULE`], so its whole huge pages are huge and only the part
/// after the last of them is on base pages, which cost memory only where
/// written. A small block is left alone.
fn placed(layout: Layout) -> Layout {
    if layout.size() < MIN_HUGE_BLOCK {
        return layout;
    }
    let rounded = if layout.size() <= HUGE_PAGE {
        Some(HUGE_PAGE)
    } else {
        layout.size().checked_next_multiple_of(MAP_GRANULE)
    };
    rounded
        .and_then(|size| Layout::from_size_align(size, layout.align().max(HUGE_PAGE)).ok())
        .unwrap_or(layout)
}

/// Maps a block of `placed`'s layout (aligned to at least a huge page, a
/// whole number of base pages long) straight from the kernel: anonymous memory, zero until written, so
/// a zeroed block costs no page until it is touched, and an unmapped one
/// goes back to the system at once. Advised with `MADV_HUGEPAGE`. Null when
/// the kernel refuses.
#[cfg(target_os = "linux")]
fn map_block(placed: Layout) -> *mut u8 {
    let Some(len) = placed.size().checked_add(placed.align()) else {
        return std::ptr::null_mut();
    };
    // SAFETY: an anonymous private mapping at an address the kernel
    // chooses touches no existing memory; the result is checked below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let start = base as usize;
    let aligned = start.next_multiple_of(placed.align());
    let head = aligned - start;
    let tail = len - head - placed.size();
    // SAFETY: `[start, start + head)` and `[aligned + size, start + len)`
    // lie inside the mapping just made and outside the block returned, and
    // both start on a page boundary (the mapping starts on one; the
    // alignment and the size are multiples of `MAP_GRANULE`).
    unsafe {
        if head > 0 {
            libc::munmap(base, head);
        }
        if tail > 0 {
            libc::munmap((aligned + placed.size()) as *mut libc::c_void, tail);
        }
        // Advice only: a refusal leaves ordinary pages.
        libc::madvise(
            aligned as *mut libc::c_void,
            placed.size(),
            libc::MADV_HUGEPAGE,
        );
    }
    aligned as *mut u8
}

/// Faults in every page of `len` bytes at `ptr` by writing a zero byte to
/// each (in 4 KiB steps, the smallest page size), so a block that will be
/// written at packet rate (a frame pool) pays its page faults, and the
/// kernel's zeroing of each huge page, when it is built rather than under
/// the first packets. O(len / 4 KiB) writes.
///
/// # Safety
/// `ptr..ptr + len` must be one live allocation the caller may write, with
/// no other reference to it, whose bytes are all zero (they stay zero).
pub unsafe fn prefault_zeroed(ptr: *mut u8, len: usize) {
    const STEP: usize = 4096;
    let mut off = 0;
    while off < len {
        // SAFETY: `off < len`, inside the block the caller owns; writing
        // the zero the byte already holds changes no value, and volatile
        // keeps the compiler from dropping the write.
        unsafe { std::ptr::write_volatile(ptr.add(off), 0) };
        off += STEP;
    }
}

/// Whether `placed` (from [`placed`]) is a large block, which [`map_block`]
/// maps on Linux.
fn is_mapped(placed: Layout) -> bool {
    cfg!(target_os = "linux") && placed.size() >= MIN_HUGE_BLOCK && placed.align() >= HUGE_PAGE
}

// SAFETY: every block is either the system allocator's (small blocks, and
// large ones off Linux) or a mapping of its own (`map_block`); `dealloc` and
// `realloc` tell the two apart from the caller's layout exactly as `alloc`
// did (`placed` is a pure function of the layout), so each block goes back
// where it came from.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let placed = placed(layout);
        if is_mapped(placed) {
            #[cfg(target_os = "linux")]
            return map_block(placed);
        }
        // SAFETY: `placed` has a non-zero size (at least `layout`'s, which
        // the caller guarantees non-zero).
        unsafe { System.alloc(placed) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let placed = placed(layout);
        if is_mapped(placed) {
            // A fresh anonymous mapping reads as zero.
            #[cfg(target_os = "linux")]
            return map_block(placed);
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(placed) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let placed = placed(layout);
        if is_mapped(placed) {
            // SAFETY: the caller gives back a block this allocator returned
            // for `layout`, so `map_block` mapped exactly `placed.size()`
            // bytes at `ptr`.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::munmap(ptr.cast(), placed.size());
            }
            return;
        }
        // SAFETY: the system allocator returned `ptr` for `placed`.
        unsafe { System.dealloc(ptr, placed) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = placed(layout);
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = placed(new_layout);
        if !is_mapped(old) && !is_mapped(new) {
            // SAFETY: both layouts are the system allocator's own, and
            // `ptr` is its block for `old`.
            return unsafe { System.realloc(ptr, old, new.size()) };
        }
        if old == new {
            // The same mapping holds the new size.
            return ptr;
        }
        // SAFETY: `new_layout` is non-zero-sized (the caller's contract).
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks are live, distinct and at least
            // `min(old size, new size)` long; `ptr` was allocated for
            // `layout` and is not used after this call.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
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
        assert_eq!(placed(big).size(), 3 * HUGE_PAGE + MAP_GRANULE);
        assert_eq!(placed(big).align(), HUGE_PAGE);
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

    /// Resident bytes of this process.
    fn resident() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split(' ').nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_zeroed_large_block_costs_memory_only_where_written() {
        let size = 64 << 20;
        let layout = Layout::from_size_align(size, 8).unwrap();
        let before = resident();
        // SAFETY: the block is allocated for `layout`, read and written
        // only inside its `size` bytes, and freed once with that layout.
        unsafe {
            let p = HugePageAlloc.alloc_zeroed(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE_PAGE, 0);
            let untouched = resident().saturating_sub(before);
            // Reads see zeros (the sampled pages become resident: at most
            // a few huge pages).
            for off in [0, size / 2, size - 1] {
                assert_eq!(*p.add(off), 0);
            }
            p.add(size / 3).write(1);
            let touched = resident().saturating_sub(before);
            HugePageAlloc.dealloc(p, layout);
            // Other tests of this binary allocate meanwhile: a margin of
            // a quarter of the block, far below the whole block a zeroing
            // write would make resident.
            assert!(untouched < size / 4, "{untouched} bytes resident untouched");
            assert!(
                touched < size / 4,
                "{touched} bytes resident after 4 touches"
            );
        }
    }
}
