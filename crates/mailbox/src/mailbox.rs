//! The improved FastForward queue (IFFQ) of the PSPAT journal paper §4 and
//! `REFERENCE.md` §2.3, with whole-line NULL clearing.
//!
//! * A slot holding 0 is empty; producer and consumer never share an index.
//! * The producer reads consumer-owned memory once per line: before filling a
//!   line it checks that the first slot of the line after it is empty.
//! * The consumer extracts without freeing ([`Consumer::pop`]) and frees whole
//!   lines later ([`Consumer::release`]), lagging the line it is reading, so
//!   a nearly empty queue does not ping-pong a line between the two cores.
//! * Capacity is `entries - line_entries`: one line always separates the two.

use std::fmt;
use std::marker::PhantomData;
use std::num::NonZeroU64;

use crossbeam_utils::CachePadded;

use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};

/// Slots per 128-byte block: the default line size.
pub const DEFAULT_LINE_ENTRIES: usize = 16;
/// Default number of slots (the reference `mailbox_entries`).
pub const DEFAULT_ENTRIES: usize = 512;

/// A value that fits a mailbox slot: 64 bits, never zero.
///
/// # Examples
/// ```
/// use std::num::NonZeroU64;
/// use pspat_mailbox::SlotValue;
/// let v = NonZeroU64::new(7).unwrap();
/// assert_eq!(NonZeroU64::from_slot(v.into_slot()), v);
/// ```
pub trait SlotValue: Copy {
    /// The non-zero encoding stored in the slot.
    fn into_slot(self) -> NonZeroU64;
    /// Decodes what [`SlotValue::into_slot`] stored.
    fn from_slot(raw: NonZeroU64) -> Self;
}

impl SlotValue for NonZeroU64 {
    #[inline]
    fn into_slot(self) -> NonZeroU64 {
        self
    }
    #[inline]
    fn from_slot(raw: NonZeroU64) -> Self {
        raw
    }
}

/// Why a mailbox could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapacityError {
    /// `line_entries` must be a power of two, at least 1.
    LineNotPowerOfTwo(usize),
    /// `entries` must be a power of two and at least four lines.
    EntriesInvalid {
        /// Requested slots.
        entries: usize,
        /// Slots per line.
        line_entries: usize,
    },
}

impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapacityError::LineNotPowerOfTwo(l) => {
                write!(f, "mailbox line of {l} entries: must be a power of two >= 1")
            }
            CapacityError::EntriesInvalid { entries, line_entries } => write!(
                f,
                "mailbox of {entries} entries: must be a power of two >= 4 lines ({} entries) and <= 2^30",
                4 * line_entries
            ),
        }
    }
}

impl std::error::Error for CapacityError {}

/// A full mailbox hands the value back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mailbox full")
    }
}

impl<T> std::error::Error for Full<T> {}

/// The state both sides see. Slots, and the flags, each start on their own
/// 128-byte block (the slots through `CachePadded` lines, the flags through
/// `CachePadded`), so neither shares a block with the other side's indices,
/// which live in the handles.
struct Shared {
    slots: Box<[CachePadded<[AtomicU64; DEFAULT_LINE_ENTRIES]>]>,
    flags: CachePadded<Flags>,
    mask: u64,
    line: u64,
}

struct Flags {
    /// Set by the consumer when it dropped a packet of this producer; read
    /// and cleared by the producer. A hint: Relaxed on both sides.
    backpressure: AtomicBool,
    producer_gone: AtomicBool,
    consumer_gone: AtomicBool,
}

impl Shared {
    #[inline]
    fn slot(&self, index: u64) -> &AtomicU64 {
        let i = (index & self.mask) as usize;
        &self.slots[i / DEFAULT_LINE_ENTRIES][i % DEFAULT_LINE_ENTRIES]
    }
}

/// Creates a mailbox of `entries` slots with the default 16-slot lines.
///
/// # Errors
/// `entries` not a power of two of at least 64.
///
/// # Examples
/// ```
/// use std::num::NonZeroU64;
/// let (mut tx, mut rx) = pspat_mailbox::mailbox::<NonZeroU64>(512).unwrap();
/// assert_eq!(tx.capacity(), 496);
/// tx.push(NonZeroU64::new(5).unwrap()).unwrap();
/// assert_eq!(rx.pop().map(|v| v.get()), Some(5));
/// rx.release();
/// ```
pub fn mailbox<T: SlotValue>(entries: usize) -> Result<(Producer<T>, Consumer<T>), CapacityError> {
    mailbox_with_line(entries, DEFAULT_LINE_ENTRIES)
}

/// Creates a mailbox of `entries` slots grouped in lines of `line_entries`
/// (both powers of two, `entries >= 4 * line_entries`). Lines shorter than 16
/// slots are for tests and model checking: they trade false sharing for
/// reaching wrap-around with fewer operations.
///
/// # Errors
/// [`CapacityError`] when the sizes are not as above (or exceed 2^30).
pub fn mailbox_with_line<T: SlotValue>(
    entries: usize,
    line_entries: usize,
) -> Result<(Producer<T>, Consumer<T>), CapacityError> {
    if line_entries == 0 || !line_entries.is_power_of_two() || line_entries > DEFAULT_LINE_ENTRIES {
        return Err(CapacityError::LineNotPowerOfTwo(line_entries));
    }
    if !entries.is_power_of_two() || entries < 4 * line_entries || entries > 1 << 30 {
        return Err(CapacityError::EntriesInvalid {
            entries,
            line_entries,
        });
    }
    let blocks = entries.div_ceil(DEFAULT_LINE_ENTRIES);
    let slots = (0..blocks)
        .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
        .collect();
    let line = line_entries as u64;
    let shared = Arc::new(Shared {
        slots,
        flags: CachePadded::new(Flags {
            backpressure: AtomicBool::new(false),
            producer_gone: AtomicBool::new(false),
            consumer_gone: AtomicBool::new(false),
        }),
        mask: entries as u64 - 1,
        line,
    });
    // The init trick: both sides start one line in, so line 0 counts as
    // "consumed, not yet cleared" and capacity is entries - line on every lap.
    let producer = Producer {
        shared: Arc::clone(&shared),
        idx: CachePadded::new(ProducerIndex {
            write: line,
            verified: 2 * line,
        }),
        _values: PhantomData,
    };
    let consumer = Consumer {
        shared,
        idx: CachePadded::new(ConsumerIndex {
            cleared: 0,
            read: line,
        }),
        _values: PhantomData,
    };
    Ok((producer, consumer))
}

struct ProducerIndex {
    /// Next slot to write (`pw`).
    write: u64,
    /// Slots below this are known free (`pc`).
    verified: u64,
}

struct ConsumerIndex {
    /// First slot not yet zeroed (`cc`).
    cleared: u64,
    /// Next slot to read (`cr`).
    read: u64,
}

/// The writing end. `Send`, not `Sync`, not `Clone`: one thread produces.
///
/// ```compile_fail
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<pspat_mailbox::Producer<std::num::NonZeroU64>>();
/// ```
/// ```compile_fail
/// fn needs_clone<T: Clone>() {}
/// needs_clone::<pspat_mailbox::Producer<std::num::NonZeroU64>>();
/// ```
pub struct Producer<T> {
    shared: Arc<Shared>,
    idx: CachePadded<ProducerIndex>,
    // Not Sync: `fn() -> T` keeps Send, `*const ()`-free, but Cell blocks Sync.
    _values: PhantomData<(fn(T) -> T, std::cell::Cell<()>)>,
}

/// The reading end. `Send`, not `Sync`, not `Clone`: one thread consumes.
///
/// ```compile_fail
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<pspat_mailbox::Consumer<std::num::NonZeroU64>>();
/// ```
pub struct Consumer<T> {
    shared: Arc<Shared>,
    idx: CachePadded<ConsumerIndex>,
    _values: PhantomData<(fn(T) -> T, std::cell::Cell<()>)>,
}

impl<T: SlotValue> Producer<T> {
    /// Slots usable at once: `entries - line_entries`.
    pub fn capacity(&self) -> usize {
        (self.shared.mask + 1 - self.shared.line) as usize
    }

    /// Checks (once per line) that the line starting at `verified` is free.
    #[inline]
    fn extend(&mut self) -> bool {
        let ahead = self.shared.slot(self.idx.verified + self.shared.line);
        // Pairs with the Release store of the first slot of each line in
        // `Consumer::release`: seeing that slot zero means every read and
        // zeroing of the line before it (the one we are about to fill) is
        // done, so our writes cannot be erased or read as stale.
        if ahead.load(Ordering::Acquire) != 0 {
            return false;
        }
        self.idx.verified += self.shared.line;
        true
    }

    /// Appends `value`, or hands it back at once if the mailbox is full.
    ///
    /// # Errors
    /// [`Full`] with the value when no slot is free; nothing is overwritten.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), Full<T>> {
        if self.idx.write == self.idx.verified && !self.extend() {
            return Err(Full(value));
        }
        // Publish. Pairs with the Acquire load in `Consumer::pop`: a consumer
        // that reads this non-zero slot also sees what `value` refers to.
        self.shared
            .slot(self.idx.write)
            .store(value.into_slot().get(), Ordering::Release);
        self.idx.write += 1;
        Ok(())
    }

    /// Appends a prefix of `values` as one burst: space is verified once for
    /// the burst (extending by at most one line), then the values are
    /// published in order. Returns how many were appended.
    #[inline]
    pub fn push_batch(&mut self, values: &[T]) -> usize {
        let mut room = (self.idx.verified - self.idx.write) as usize;
        if room < values.len() && self.extend() {
            room += self.shared.line as usize;
        }
        let n = room.min(values.len());
        for v in &values[..n] {
            // Publish; pairs with the Acquire load in `Consumer::pop`.
            self.shared
                .slot(self.idx.write)
                .store(v.into_slot().get(), Ordering::Release);
            self.idx.write += 1;
        }
        n
    }

    /// True if the consumer dropped one of our values since the last call;
    /// clears the flag. Costs one load of a rarely written line when unset.
    #[inline]
    pub fn take_backpressure(&mut self) -> bool {
        let flag = &self.shared.flags.backpressure;
        // Relaxed: the flag is a hint about drops that are counted elsewhere;
        // it orders nothing.
        flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::Relaxed)
    }

    /// True once the consumer has been dropped; values pushed now are never read.
    pub fn is_abandoned(&self) -> bool {
        // Pairs with the Release store in `Consumer::drop`.
        self.shared.flags.consumer_gone.load(Ordering::Acquire)
    }
}

impl<T: SlotValue> Consumer<T> {
    /// Slots usable at once: `entries - line_entries`.
    pub fn capacity(&self) -> usize {
        (self.shared.mask + 1 - self.shared.line) as usize
    }

    /// Takes the oldest value, if any. The slot stays occupied until
    /// [`Consumer::release`] frees its line.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        // Pairs with the Release store in `Producer::push`/`push_batch`.
        let raw = self.shared.slot(self.idx.read).load(Ordering::Acquire);
        let value = NonZeroU64::new(raw)?;
        self.idx.read += 1;
        Some(T::from_slot(value))
    }

    /// True when no value is waiting. May turn false at any moment; once
    /// false it stays false until this consumer pops.
    #[inline]
    pub fn is_empty(&self) -> bool {
        // Acquire so that a following `pop` that trusts this answer sees the value.
        self.shared.slot(self.idx.read).load(Ordering::Acquire) == 0
    }

    /// Frees every whole line already read, except the line being read, so
    /// the producer can reuse them. Call it once per round, not per value.
    #[inline]
    pub fn release(&mut self) {
        let line = self.shared.line;
        let target = self.idx.read & !(line - 1);
        while self.idx.cleared != target {
            let start = self.idx.cleared;
            for i in 1..line {
                // Relaxed: published by the Release store of the next line's
                // first slot (or of this line's, for the last line cleared).
                self.shared.slot(start + i).store(0, Ordering::Relaxed);
            }
            // Release on the line's first slot, after the rest of the line:
            // pairs with the producer's Acquire look-ahead in `extend`. A
            // producer that sees it zero also sees all earlier zeroes and our
            // reads of this and all earlier lines as done.
            self.shared.slot(start).store(0, Ordering::Release);
            self.idx.cleared += line;
        }
    }

    /// Flags the producer: one of its values was dropped downstream. It sees
    /// the flag on its next [`Producer::take_backpressure`].
    #[inline]
    pub fn set_backpressure(&self) {
        // Relaxed: a hint, see `Producer::take_backpressure`.
        self.shared
            .flags
            .backpressure
            .store(true, Ordering::Relaxed);
    }

    /// True once the producer has been dropped. Values it pushed before are
    /// still readable: after this returns true, `pop` sees all of them.
    pub fn is_abandoned(&self) -> bool {
        // Pairs with the Release store in `Producer::drop`, which follows
        // every push of that producer.
        self.shared.flags.producer_gone.load(Ordering::Acquire)
    }
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        // Release: orders every earlier push before the flag; pairs with the
        // Acquire in `Consumer::is_abandoned`.
        self.shared
            .flags
            .producer_gone
            .store(true, Ordering::Release);
    }
}

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        // Pairs with the Acquire in `Producer::is_abandoned`.
        self.shared
            .flags
            .consumer_gone
            .store(true, Ordering::Release);
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("write", &self.idx.write)
            .field("verified", &self.idx.verified)
            .finish()
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("read", &self.idx.read)
            .field("cleared", &self.idx.cleared)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn v(i: u64) -> NonZeroU64 {
        NonZeroU64::new(i + 1).unwrap()
    }

    #[test]
    fn fill_to_capacity_then_refuse_until_release() {
        let (mut tx, mut rx) = mailbox::<NonZeroU64>(512).unwrap();
        let mut n = 0;
        while tx.push(v(n)).is_ok() {
            n += 1;
        }
        assert_eq!(n, 496);
        for i in 0..n {
            assert_eq!(rx.pop(), Some(v(i)));
        }
        assert!(rx.pop().is_none());
        assert!(tx.push(v(0)).is_err(), "no insert before release");
        rx.release();
        let mut m = 0;
        while tx.push(v(m)).is_ok() {
            m += 1;
        }
        assert_eq!(m, 496);
    }
}
