//! One AF_XDP ring mapped into this process: a power-of-two array of
//! entries with a producer index, a consumer index and a flags word, each
//! written by one side only (the kernel's `net/xdp/xsk_queue.h` describes
//! the protocol; the offsets come from `XDP_MMAP_OFFSETS`).
//!
//! The indices run freely (wrapping u32); entry `i` sits in slot
//! `i & (size - 1)`. Entries between consumer and producer belong to the
//! consumer, the rest to the producer.
//!
//! * Producer (fill and TX rings, this process): reads the consumer index
//!   with Acquire, pairing with the kernel's release of it, so that the
//!   kernel is done reading the slots it gave back before they are
//!   overwritten; writes entries; stores the producer index with Release,
//!   pairing with the kernel's acquire of it, so that the entries are
//!   visible before the index that publishes them.
//! * Consumer (RX and completion rings, this process): reads the producer
//!   index with Acquire, pairing with the kernel's release of it, so that
//!   the entries (and the frame bytes an RX descriptor points to) are
//!   visible; reads entries; stores the consumer index with Release,
//!   pairing with the kernel's acquire of it, so that the reads are done
//!   before the kernel reuses the slots.
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use super::XdpError;
use crate::sys::RingMap;

/// `struct xdp_ring_offset`: byte offsets inside one ring's mapping.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(super) struct RingOffsets {
    pub(super) producer: u64,
    pub(super) consumer: u64,
    pub(super) desc: u64,
    pub(super) flags: u64,
}

/// `struct xdp_mmap_offsets`: the four rings' offsets.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub(super) struct MmapOffsets {
    pub(super) rx: RingOffsets,
    pub(super) tx: RingOffsets,
    pub(super) fill: RingOffsets,
    pub(super) completion: RingOffsets,
}

/// A mapped ring of `size` entries of `T` (a u64 frame address for the
/// fill and completion rings, an `XdpDesc` for RX and TX).
pub(super) struct Ring<T> {
    map: RingMap,
    offsets: RingOffsets,
    mask: u32,
    /// This side's index (the producer's when we produce, the consumer's
    /// when we consume): only this process writes it.
    local: u32,
    _entries: std::marker::PhantomData<T>,
}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries (a power of two) the kernel offers
    /// at page offset `pgoff` of the socket.
    pub(super) fn map(
        fd: &OwnedFd,
        offsets: RingOffsets,
        size: u32,
        pgoff: u64,
        producer_side: bool,
        what: &'static str,
    ) -> Result<Self, XdpError> {
        let entry = std::mem::size_of::<T>();
        let len = offsets.desc as usize + size as usize * entry;
        let word_ok =
            |offset: u64| offset as usize + 4 <= offsets.desc as usize && offset.is_multiple_of(4);
        if !size.is_power_of_two()
            || !word_ok(offsets.producer)
            || !word_ok(offsets.consumer)
            || !word_ok(offsets.flags)
            || !(offsets.desc as usize).is_multiple_of(std::mem::align_of::<T>())
        {
            return Err(XdpError::RingsRefused {
                what,
                source: std::io::Error::from_raw_os_error(libc::EPROTO),
            });
        }
        let offset = libc::off_t::try_from(pgoff).map_err(|_| XdpError::RingsRefused {
            what,
            source: std::io::Error::from_raw_os_error(libc::EOVERFLOW),
        })?;
        let map =
            RingMap::with_offset(fd, len, offset, "mmap an AF_XDP ring").map_err(|error| {
                match error {
                    crate::IoError::Os { source, .. } => XdpError::RingsRefused { what, source },
                    other => XdpError::Io(other),
                }
            })?;
        let mut ring = Self {
            map,
            offsets,
            mask: size - 1,
            local: 0,
            _entries: std::marker::PhantomData,
        };
        // Relaxed: nothing was exchanged yet; both indices start at 0 on a
        // new ring, read here for form's sake.
        ring.local = if producer_side {
            ring.word(offsets.producer).load(Ordering::Relaxed)
        } else {
            ring.word(offsets.consumer).load(Ordering::Relaxed)
        };
        Ok(ring)
    }

    fn word(&self, offset: u64) -> &AtomicU32 {
        // SAFETY: `offset` was checked in `map` to be 4-byte aligned and to
        // leave a whole u32 before the entries, inside the mapping, which
        // lives as long as `self`; the kernel accesses these words only
        // as whole 32-bit values (READ_ONCE/WRITE_ONCE and acquire/release
        // helpers), so an atomic view is sound.
        unsafe { &*self.map.base().add(offset as usize).cast::<AtomicU32>() }
    }

    fn slot(&self, index: u32) -> *mut T {
        let slot = (index & self.mask) as usize;
        // SAFETY: slot < size, and the mapping holds `size` entries of `T`
        // from `desc` on (its length was computed so in `map`); `desc` is
        // aligned for `T`.
        unsafe {
            self.map
                .base()
                .add(self.offsets.desc as usize)
                .cast::<T>()
                .add(slot)
        }
    }

    /// Entries the kernel produced that this process has not consumed.
    pub(super) fn ready(&self) -> u32 {
        // Acquire: pairs with the kernel's release store of the producer
        // index (module docs).
        let producer = self.word(self.offsets.producer).load(Ordering::Acquire);
        producer.wrapping_sub(self.local)
    }

    /// Reads the `i`-th entry after the consumer index (`i` < `ready()`).
    pub(super) fn read(&self, i: u32) -> T {
        // SAFETY: the slot is inside the mapping (`slot`) and belongs to
        // this process until the consumer index passes it; `T` is plain
        // integers, read by value.
        unsafe { self.slot(self.local.wrapping_add(i)).read() }
    }

    /// Gives `count` consumed entries back to the kernel.
    pub(super) fn consume(&mut self, count: u32) {
        self.local = self.local.wrapping_add(count);
        // Release: pairs with the kernel's acquire of the consumer index,
        // so our reads of the entries happen before it reuses the slots.
        self.word(self.offsets.consumer)
            .store(self.local, Ordering::Release);
    }

    /// Free slots this process may produce into.
    pub(super) fn room(&self) -> u32 {
        // Acquire: pairs with the kernel's release store of the consumer
        // index, so it is done with the slots we are about to reuse.
        let consumer = self.word(self.offsets.consumer).load(Ordering::Acquire);
        (self.mask + 1).wrapping_sub(self.local.wrapping_sub(consumer))
    }

    /// Writes the `i`-th entry after the producer index (`i` < `room()`),
    /// unpublished until [`Ring::produce`].
    pub(super) fn write(&mut self, i: u32, entry: T) {
        // SAFETY: the slot is inside the mapping (`slot`) and, being free,
        // is not read by the kernel until the producer index passes it.
        unsafe { self.slot(self.local.wrapping_add(i)).write(entry) }
    }

    /// Publishes `count` written entries to the kernel.
    pub(super) fn produce(&mut self, count: u32) {
        self.local = self.local.wrapping_add(count);
        // Release: pairs with the kernel's acquire of the producer index,
        // so the entries are visible before it reads them.
        self.word(self.offsets.producer)
            .store(self.local, Ordering::Release);
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`). The
    /// caller published entries just before: a full fence orders that
    /// store before this load, pairing with the kernel's barrier between
    /// setting the flag and its last look at the ring, so that one of the
    /// two sides sees the other's write and no entry is left unnoticed.
    pub(super) fn needs_wakeup(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word(self.offsets.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
}

/// `XDP_RING_NEED_WAKEUP` of a ring's flags word.
const XDP_RING_NEED_WAKEUP: u32 = 1;
