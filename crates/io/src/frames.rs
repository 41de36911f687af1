//! One preallocated pool of fixed-size packet buffers ("frames"), named by
//! index.
//!
//! A packet is copied at most once between reception and transmission: the
//! RX path writes it into a frame, the descriptor that travels through the
//! scheduler carries the frame's index as its cookie, and the transmit path
//! sends from that same frame before it goes back to its pool.
//!
//! # Layout and cost
//!
//! All `count × frame_size` bytes are allocated at once, when the pool is
//! built, through [`HugePageAlloc`] (so a pool of a megabyte or more lies on
//! transparent huge pages where the kernel allows), and every page of it is
//! faulted in then, so the first packets do not wait for the kernel to
//! zero pages. Per frame the pool keeps
//! one state word and one length word. [`FramePool::alloc`] and
//! [`FramePool::recycle`] are O(1) (a pop from and a push onto a stack whose
//! capacity is reserved up front) and never allocate; [`FrameArena::release`]
//! and [`FrameArena::reclaim`] are one atomic store and one compare-exchange.
//!
//! # Ownership: who may touch a frame when
//!
//! Every frame is in exactly one of three states:
//!
//! * **free**: on the pool's free stack; nobody may touch its bytes.
//! * **owned**: exactly one [`Frame`] token exists for it. The token is not
//!   `Clone`; whoever holds it may read the frame (`&Frame`) and write it
//!   (`&mut Frame`), on any thread (the token is `Send`).
//! * **in flight**: the token was turned into a bare index by
//!   [`FrameArena::release`] (the cookie a descriptor carries); nobody may
//!   touch the bytes until one thread turns the index back into a token with
//!   [`FrameArena::reclaim`]. Exactly one reclaim of a release succeeds; a
//!   second one, or a reclaim of a frame that is not in flight, is an error,
//!   never a second token.
//!
//! So the bytes of a frame are only ever reachable through the one token
//! that names it, and the borrow checker does the rest. The pool owner
//! ([`FramePool`], one thread) allocates and recycles; the arena
//! ([`FrameArena`], shared behind an `Arc`) gives access to the bytes and
//! passes frames between threads. A typical life: the RX thread allocates,
//! writes and releases; the transmit thread reclaims, sends and releases;
//! the RX thread reclaims and recycles. A dropped token leaks its frame (it
//! stays owned and never returns to the free stack): [`Frame`] is
//! `#[must_use]`, and [`FramePool::free_count`] shows such leaks.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use crate::huge_pages::HugePageAlloc;

/// The default size of one frame (bytes): an Ethernet frame of MTU 1500
/// with two VLAN tags fits, with room for headroom.
pub const DEFAULT_FRAME_SIZE: usize = 2048;

/// Frames are aligned to, and their size is a multiple of, a cache line.
pub const FRAME_ALIGN: usize = 64;

/// The largest frame size a pool accepts (bytes): a 64 KiB IP datagram plus
/// link headers.
pub const MAX_FRAME_SIZE: usize = 1 << 17;

const FREE: u8 = 0;
const OWNED: u8 = 1;
const IN_FLIGHT: u8 = 2;

/// Why a pool could not be built or a frame could not be passed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame size is zero, not a multiple of [`FRAME_ALIGN`], or above
    /// [`MAX_FRAME_SIZE`].
    #[error("frame size {0} is not a positive multiple of {FRAME_ALIGN} up to {MAX_FRAME_SIZE}")]
    BadFrameSize(usize),
    /// The frame count is zero or does not fit a `u32` index.
    #[error("frame count {0} is not between 1 and 4294967295")]
    BadFrameCount(usize),
    /// `count × frame_size` does not fit in memory.
    #[error("a pool of {count} frames of {frame_size} bytes does not fit in memory")]
    TooLarge {
        /// Frames asked for.
        count: usize,
        /// Bytes per frame asked for.
        frame_size: usize,
    },
    /// The allocator refused the pool's memory.
    #[error("out of memory allocating {0} bytes of frames")]
    OutOfMemory(usize),
    /// The token belongs to another pool.
    #[error("frame {0} belongs to another pool")]
    Foreign(u32),
    /// The index names no frame of this pool.
    #[error("frame index {index} is out of range (pool of {count})")]
    OutOfRange {
        /// The index given.
        index: u32,
        /// Frames in the pool.
        count: u32,
    },
    /// The frame is not in flight (never released, or already reclaimed).
    #[error("frame {0} is not in flight")]
    NotInFlight(u32),
    /// A length above the frame size.
    #[error("length {len} exceeds the frame size {frame_size}")]
    TooLong {
        /// The length asked for.
        len: usize,
        /// The frame size.
        frame_size: usize,
    },
}

/// A token handed to an arena or pool it does not belong to, given back
/// so that its frame is not lost.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("frame {} belongs to another pool", .0.index)]
pub struct ForeignFrame(pub Frame);

/// The unique right to read and write one frame (module docs).
#[must_use = "a dropped Frame never returns to its pool"]
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    arena: u32,
    index: u32,
    len: u32,
}

impl Frame {
    /// The frame's index in its pool (the cookie a descriptor carries).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Bytes of packet data the frame holds (from its start).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the frame holds no packet data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[derive(Debug, Default)]
struct FrameSlot {
    /// FREE, OWNED or IN_FLIGHT.
    state: AtomicU8,
    /// The packet length while in flight.
    len: AtomicU32,
}

/// The memory and per-frame states of a pool, shared by every thread that
/// handles its frames (module docs).
pub struct FrameArena {
    base: NonNull<u8>,
    layout: Layout,
    frame_size: usize,
    count: u32,
    id: u32,
    slots: Box<[FrameSlot]>,
}

// SAFETY: the arena owns its block (no aliasing outside it); its bytes are
// only reached through a `Frame` token, of which at most one exists per
// frame (module docs), so two threads never touch one frame at once; the
// slot states are atomics.
unsafe impl Send for FrameArena {}
// SAFETY: as for Send: shared access (`&FrameArena`) gives a frame's bytes
// only against its unique token.
unsafe impl Sync for FrameArena {}

impl std::fmt::Debug for FrameArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameArena")
            .field("frame_size", &self.frame_size)
            .field("count", &self.count)
            .field("id", &self.id)
            .finish()
    }
}

static NEXT_ARENA_ID: AtomicU32 = AtomicU32::new(0);

impl FrameArena {
    fn new(count: usize, frame_size: usize) -> Result<Self, FrameError> {
        if frame_size == 0 || !frame_size.is_multiple_of(FRAME_ALIGN) || frame_size > MAX_FRAME_SIZE
        {
            return Err(FrameError::BadFrameSize(frame_size));
        }
        let count32 = u32::try_from(count)
            .ok()
            .filter(|&c| c > 0)
            .ok_or(FrameError::BadFrameCount(count))?;
        let layout = count
            .checked_mul(frame_size)
            .and_then(|bytes| Layout::from_size_align(bytes, FRAME_ALIGN).ok())
            .ok_or(FrameError::TooLarge { count, frame_size })?;
        // SAFETY: the layout has a non-zero size (count and frame_size are
        // both positive); the block is freed in Drop with this same layout.
        let raw = unsafe { HugePageAlloc.alloc_zeroed(layout) };
        let base = NonNull::new(raw).ok_or(FrameError::OutOfMemory(layout.size()))?;
        // Every frame is written at packet rate: take the page faults now,
        // not under the first packets.
        // SAFETY: `base` is the zeroed block of `layout.size()` bytes just
        // allocated, owned here alone.
        unsafe { crate::huge_pages::prefault_zeroed(base.as_ptr(), layout.size()) };
        let slots = (0..count).map(|_| FrameSlot::default()).collect();
        // Relaxed: the id only has to be unique, it orders nothing.
        let id = NEXT_ARENA_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            base,
            layout,
            frame_size,
            count: count32,
            id,
            slots,
        })
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// Frames in the pool.
    pub fn count(&self) -> u32 {
        self.count
    }

    fn check(&self, frame: &Frame) -> Result<(), FrameError> {
        if frame.arena == self.id {
            Ok(())
        } else {
            Err(FrameError::Foreign(frame.index))
        }
    }

    /// The frame's packet data (its first `frame.len()` bytes).
    pub fn bytes<'a>(&'a self, frame: &'a Frame) -> Result<&'a [u8], FrameError> {
        let whole = self.buffer(frame)?;
        Ok(&whole[..frame.len()])
    }

    /// The frame's whole buffer, read-only.
    fn buffer<'a>(&'a self, frame: &'a Frame) -> Result<&'a [u8], FrameError> {
        self.check(frame)?;
        let offset = frame.index as usize * self.frame_size;
        // SAFETY: `frame` is a token of this arena (checked), so its index is
        // below `count` and `[offset, offset + frame_size)` lies inside the
        // block. The token is unique for its frame and borrowed for 'a, so
        // nobody writes these bytes while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset), self.frame_size) })
    }

    /// The frame's whole buffer (`frame_size` bytes), to write a packet
    /// into; then [`FrameArena::set_len`] says how much of it is data.
    pub fn buffer_mut<'a>(&'a self, frame: &'a mut Frame) -> Result<&'a mut [u8], FrameError> {
        self.check(frame)?;
        let offset = frame.index as usize * self.frame_size;
        // SAFETY: as in `buffer`, the range lies inside the block; the token
        // is unique for its frame and mutably borrowed for 'a, so this is
        // the only reference to these bytes while the slice lives.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.base.as_ptr().add(offset), self.frame_size)
        })
    }

    /// Sets how many bytes of the frame are packet data.
    pub fn set_len(&self, frame: &mut Frame, len: usize) -> Result<(), FrameError> {
        self.check(frame)?;
        if len > self.frame_size {
            return Err(FrameError::TooLong {
                len,
                frame_size: self.frame_size,
            });
        }
        frame.len = len as u32;
        Ok(())
    }

    /// Copies `packet` into the frame and sets its length.
    pub fn write(&self, frame: &mut Frame, packet: &[u8]) -> Result<(), FrameError> {
        let buffer = self.buffer_mut(frame)?;
        let Some(dst) = buffer.get_mut(..packet.len()) else {
            return Err(FrameError::TooLong {
                len: packet.len(),
                frame_size: self.frame_size,
            });
        };
        dst.copy_from_slice(packet);
        frame.len = packet.len() as u32;
        Ok(())
    }

    /// Puts a frame in flight and returns its index, the cookie from which
    /// one thread may [`FrameArena::reclaim`] it (module docs). A token of
    /// another arena comes back in the error.
    pub fn release(&self, frame: Frame) -> Result<u32, ForeignFrame> {
        if frame.arena != self.id {
            return Err(ForeignFrame(frame));
        }
        let slot = &self.slots[frame.index as usize];
        // Relaxed: published by the Release store of the state just below.
        slot.len.store(frame.len, Ordering::Relaxed);
        // Release: pairs with the Acquire of `reclaim`'s compare-exchange, so
        // the reclaiming thread sees the length and every byte written
        // through the token before this point.
        slot.state.store(IN_FLIGHT, Ordering::Release);
        Ok(frame.index)
    }

    /// Takes a frame in flight back as a token; fails (and gives no token)
    /// unless the frame is in flight.
    pub fn reclaim(&self, index: u32) -> Result<Frame, FrameError> {
        let slot = self
            .slots
            .get(index as usize)
            .ok_or(FrameError::OutOfRange {
                index,
                count: self.count,
            })?;
        // Acquire on success: pairs with `release`'s Release store (the bytes
        // and the length written before it are visible). Relaxed on failure:
        // nothing is read then.
        slot.state
            .compare_exchange(IN_FLIGHT, OWNED, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| FrameError::NotInFlight(index))?;
        Ok(Frame {
            arena: self.id,
            index,
            // Relaxed: ordered by the Acquire above.
            len: slot.len.load(Ordering::Relaxed),
        })
    }
}

impl Drop for FrameArena {
    fn drop(&mut self) {
        // SAFETY: `base` was allocated by HugePageAlloc with `layout` in
        // `new` and is freed once, here; no token can outlive the arena's
        // last `Arc` in a way that reaches the bytes, since every access
        // goes through `&FrameArena`.
        unsafe { HugePageAlloc.dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// A pool of frames: the arena plus the free stack, owned by one thread
/// (module docs).
#[derive(Debug)]
pub struct FramePool {
    arena: Arc<FrameArena>,
    free: Vec<u32>,
}

impl FramePool {
    /// Allocates `count` frames of `frame_size` bytes each, all at once
    /// (zeroed, on huge pages where possible), all free.
    pub fn new(count: usize, frame_size: usize) -> Result<Self, FrameError> {
        let arena = Arc::new(FrameArena::new(count, frame_size)?);
        // Popped from the end: frame 0 goes first.
        let free = (0..arena.count).rev().collect();
        Ok(Self { arena, free })
    }

    /// The shared arena, for the threads that read, write and pass frames.
    pub fn arena(&self) -> &Arc<FrameArena> {
        &self.arena
    }

    /// Takes a free frame (empty), or `None` when every frame is in use.
    /// O(1), no allocation.
    pub fn alloc(&mut self) -> Option<Frame> {
        let index = self.free.pop()?;
        // Relaxed: the free stack is this thread's own; no other thread
        // reads the state of a free frame's slot to decide anything.
        self.arena.slots[index as usize]
            .state
            .store(OWNED, Ordering::Relaxed);
        Some(Frame {
            arena: self.arena.id,
            index,
            len: 0,
        })
    }

    /// Returns a frame to the free stack. O(1), no allocation. A token of
    /// another pool comes back in the error.
    pub fn recycle(&mut self, frame: Frame) -> Result<(), ForeignFrame> {
        if frame.arena != self.arena.id {
            return Err(ForeignFrame(frame));
        }
        // Relaxed: the token proves the frame is owned by this thread now.
        self.arena.slots[frame.index as usize]
            .state
            .store(FREE, Ordering::Relaxed);
        // The stack's capacity is `count` from the start and holds each index
        // at most once, so this push never reallocates.
        self.free.push(frame.index);
        Ok(())
    }

    /// Takes back a frame in flight by its index and recycles it.
    pub fn recycle_index(&mut self, index: u32) -> Result<(), FrameError> {
        let frame = self.arena.reclaim(index)?;
        // The arena's own reclaim made this token: it is this pool's.
        self.recycle(frame)
            .map_err(|ForeignFrame(frame)| FrameError::Foreign(frame.index))
    }

    /// Frames on the free stack.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_write_release_reclaim_recycle() {
        let mut pool = FramePool::new(4, DEFAULT_FRAME_SIZE).unwrap();
        let arena = Arc::clone(pool.arena());
        let mut frame = pool.alloc().unwrap();
        assert_eq!(frame.index(), 0);
        assert!(frame.is_empty());
        arena.write(&mut frame, b"hello").unwrap();
        assert_eq!(arena.bytes(&frame).unwrap(), b"hello");
        let cookie = arena.release(frame).unwrap();
        assert_eq!(pool.free_count(), 3);
        let back = std::thread::spawn(move || {
            let frame = arena.reclaim(cookie).unwrap();
            assert_eq!(arena.bytes(&frame).unwrap(), b"hello");
            assert_eq!(arena.reclaim(cookie), Err(FrameError::NotInFlight(cookie)));
            arena.release(frame).unwrap()
        })
        .join()
        .unwrap();
        pool.recycle_index(back).unwrap();
        assert_eq!(pool.free_count(), 4);
        assert_eq!(pool.recycle_index(back), Err(FrameError::NotInFlight(back)));
    }

    #[test]
    fn exhaustion_and_reuse_are_by_index() {
        let mut pool = FramePool::new(3, 64).unwrap();
        let frames: Vec<Frame> = std::iter::from_fn(|| pool.alloc()).collect();
        assert_eq!(
            frames.iter().map(Frame::index).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(pool.alloc().is_none());
        for frame in frames {
            pool.recycle(frame).unwrap();
        }
        assert_eq!(pool.alloc().unwrap().index(), 2);
    }

    #[test]
    fn bad_sizes_counts_lengths_and_foreign_tokens_are_typed_errors() {
        assert_eq!(
            FramePool::new(1, 100).unwrap_err(),
            FrameError::BadFrameSize(100)
        );
        assert_eq!(
            FramePool::new(1, 0).unwrap_err(),
            FrameError::BadFrameSize(0)
        );
        assert_eq!(
            FramePool::new(0, 64).unwrap_err(),
            FrameError::BadFrameCount(0)
        );
        assert!(matches!(
            FramePool::new(usize::MAX / 64, 128),
            Err(FrameError::BadFrameCount(_) | FrameError::TooLarge { .. })
        ));
        let mut a = FramePool::new(1, 64).unwrap();
        let mut b = FramePool::new(1, 64).unwrap();
        let mut fa = a.alloc().unwrap();
        let fb = b.alloc().unwrap();
        assert_eq!(
            a.arena().clone().write(&mut fa, &[0; 65]),
            Err(FrameError::TooLong {
                len: 65,
                frame_size: 64
            })
        );
        assert_eq!(a.arena().bytes(&fb), Err(FrameError::Foreign(0)));
        let fb = a.recycle(fb).unwrap_err().0;
        let fb = a.arena().release(fb).unwrap_err().0;
        b.recycle(fb).unwrap();
        assert_eq!(b.free_count(), 1);
        assert_eq!(
            a.arena().reclaim(7),
            Err(FrameError::OutOfRange { index: 7, count: 1 })
        );
        a.recycle(fa).unwrap();
    }

    #[test]
    fn a_large_pool_is_one_block_and_every_frame_is_distinct() {
        // 1024 × 2048 = 2 MiB: one huge-page-placed block.
        let mut pool = FramePool::new(1024, DEFAULT_FRAME_SIZE).unwrap();
        let arena = Arc::clone(pool.arena());
        let mut frames: Vec<Frame> = std::iter::from_fn(|| pool.alloc()).collect();
        for frame in &mut frames {
            let tag = frame.index().to_le_bytes();
            let buffer = arena.buffer_mut(frame).unwrap();
            buffer[..4].copy_from_slice(&tag);
            buffer[DEFAULT_FRAME_SIZE - 4..].copy_from_slice(&tag);
            arena.set_len(frame, DEFAULT_FRAME_SIZE).unwrap();
        }
        for frame in frames {
            let bytes = arena.bytes(&frame).unwrap();
            assert_eq!(bytes[..4], frame.index().to_le_bytes());
            assert_eq!(bytes[DEFAULT_FRAME_SIZE - 4..], frame.index().to_le_bytes());
            pool.recycle(frame).unwrap();
        }
        assert_eq!(pool.free_count(), 1024);
    }
}
