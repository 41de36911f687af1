//! The improved FastForward queue (IFFQ) of Rizzo, Valente, Lettieri,
//! Maffione, "PSPAT: software packet scheduling at hardware speed" §4, in the
//! NULL-clear variant (whole lines are zeroed) of `docs/REFERENCE.md` §2.3–§2.6.
//!
//! # Algorithm
//! The ring has `E` slots (a power of two) grouped in lines of `Λ` slots;
//! indices run free (wrapping `u64`) and are masked with `E - 1`.
//!
//! * **Validity in the slot.** A slot holding 0 is empty, anything else is a
//!   value ([`SlotValue`] guarantees a non-zero encoding). Producer and
//!   consumer never share an index: the producer owns `write` (`pw`) and
//!   `verified` (`pc`), the consumer owns `read` (`cr`) and `cleared` (`cc`),
//!   each inside its own handle.
//! * **Look-ahead.** The producer reads consumer-owned memory once per line:
//!   before filling the line that starts at `verified` it checks that the
//!   first slot of the line *after* it is empty. Lines are zeroed whole and
//!   in order, so that one load proves the whole target line free and keeps
//!   one empty line between the two sides.
//! * **Lazy release.** [`Consumer::pop`] never writes. [`Consumer::release`]
//!   zeroes every whole line already read, lagging the line being read, so a
//!   line changes owner once per `Λ` values and a nearly empty queue does not
//!   ping-pong a line with writes from both cores.
//! * **Init trick.** Both sides start one line in (`cc = 0`, `cr = pw = Λ`,
//!   `pc = 2Λ`): line 0 counts as consumed-not-released, so the first line
//!   needs no look-ahead and the capacity is `E - Λ` on every lap.
//!
//! # Capacity, exactly
//! Let `occupancy` be the values pushed and not yet freed by a `release`
//! (values popped but still in an unreleased line count). A push, and each
//! value of a burst, is refused **if and only if** `occupancy >= E - Λ`. The
//! look-ahead never refuses earlier: a look-ahead at `pc` fails exactly
//! when `pc - cc >= E - Λ` (line 0 counting as released). Hence right after
//! a `release`, a refusal means more than `E - 2Λ` values are still unread.
//!
//! # Complexity
//! `push`, `pop`: O(1), one atomic store or load, plus one load per `Λ`
//! pushes. `push_batch(n)`: O(n) stores plus one load per line. `release`:
//! O(lines read since the last call), at most `E` stores. None of them
//! allocates, blocks or spins: all are wait-free.
//!
//! # Memory ordering (`docs/REFERENCE.md` §2.6)
//! | Operation | Side | Ordering | Pairs with |
//! |---|---|---|---|
//! | slot store (`push`, `push_batch`) | producer | Release | the slot load in `pop` |
//! | slot load (`pop`, `is_empty`) | consumer | Acquire | the slot store of `push` |
//! | zeroing a line's slots 1..Λ | consumer | Relaxed | published by the next Release below |
//! | zeroing a line's first slot | consumer | Release | the look-ahead load |
//! | look-ahead load | producer | Acquire | the first-slot zeroing in `release` |
//! | `producer_gone` / `consumer_gone` store (drop) | either | Release | the Acquire in `is_abandoned` |
//! | `backpressure` | both | Relaxed | none: a hint |
//!
//! Without the Release/Acquire pair on a line's first slot, a late zero from
//! the consumer could erase a value of the next lap, or the consumer could
//! read a value of the next lap in place of this one.
//!
//! # Layout and padding
//! Everything one side writes sits on its own 128-byte block: the slots come
//! in 128-byte blocks of 16 (one default line each), the flags in a
//! [`CachePadded`] block, and each handle keeps its indices in a
//! [`CachePadded`] block of its own. The read-only constants (slot pointer,
//! mask, line size) share a block that nobody writes after construction.
//! Why 128 and not 64: recent x86-64 L2 prefetchers fetch cache lines in
//! adjacent pairs, so fields 64 bytes apart still bounce between cores, and
//! several aarch64 parts have 128-byte lines (see `crossbeam_utils`'s
//! per-architecture table). The `const` assertions below pin this layout on
//! x86-64, aarch64 and powerpc64; elsewhere `CachePadded` uses that
//! target's own line size and the slot blocks are only as aligned as it.
//!
//! # Verification
//! `tests/` holds the eleven reference vectors (§2.7), a proptest against a
//! `VecDeque` model that asserts the capacity rule above exactly, two-thread
//! stress tests, and loom models on `E = 8, Λ = 2` (`.ci/loom.sh`). loom
//! checks the `is_abandoned` pair (weakening it to Relaxed fails
//! `abandoned_producer_final_drain`); it does not model load buffering, so
//! the first-slot Release/look-ahead Acquire pair rests on the argument
//! above rather than on a failing model. Miri is not run yet.
//!
//! # Deviations from the reference
//! * The reference keeps constants and flags in one block; here the flags
//!   get their own, so a backpressure write does not evict the constants
//!   that every `push` reads.
//! * The batched producer of `spscq.h` (BIFFQ) extends its verified space by
//!   at most one line per burst; [`Producer::push_batch`] extends line by
//!   line (one look-ahead each) until the burst fits or the ring is full, so
//!   a burst is cut short only by the capacity rule above.
//! * Lines shorter than 16 slots ([`mailbox_with_line`]) exist for tests and
//!   model checking; the slots still sit in 128-byte blocks of 16.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::num::NonZeroU64;

use crossbeam_utils::CachePadded;

use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};

/// Slots per 128-byte block: the default line size `Λ`.
pub const DEFAULT_LINE_ENTRIES: usize = 16;
/// Default number of slots `E` (the reference `mailbox_entries`).
pub const DEFAULT_ENTRIES: usize = 512;

/// Slots of one 128-byte block.
type Block = CachePadded<[AtomicU64; DEFAULT_LINE_ENTRIES]>;

// Pin the layout (not under loom, whose atomics are larger). A default line
// is exactly one 128-byte block ...
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<[AtomicU64; DEFAULT_LINE_ENTRIES]>() == 128);
// ... and on the targets we tune for, blocks are 128-byte aligned, so no
// two blocks (nor a block and the flags) share a 128-byte prefetch pair.
#[cfg(all(
    not(loom),
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "powerpc64"
    )
))]
const _: () = {
    assert!(std::mem::align_of::<Block>() >= 128);
    assert!(std::mem::size_of::<Block>() == 128);
    assert!(std::mem::align_of::<CachePadded<Flags>>() >= 128);
    assert!(std::mem::align_of::<CachePadded<ProducerIndex>>() >= 128);
    assert!(std::mem::align_of::<CachePadded<ConsumerIndex>>() >= 128);
};

/// A value that fits a mailbox slot: 64 bits, never zero (zero marks an
/// empty slot).
///
/// # Examples
/// A packet handle that reserves zero:
/// ```
/// use std::num::NonZeroU64;
/// use pspat_mailbox::SlotValue;
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// struct Handle(u32);
/// impl SlotValue for Handle {
///     fn into_slot(self) -> NonZeroU64 {
///         NonZeroU64::MIN.saturating_add(u64::from(self.0)) // stores index + 1
///     }
///     fn from_slot(raw: NonZeroU64) -> Self {
///         Handle((raw.get() - 1) as u32)
///     }
/// }
/// assert_eq!(Handle::from_slot(Handle(0).into_slot()), Handle(0));
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
///
/// # Examples
/// ```
/// use pspat_mailbox::{mailbox_with_line, CapacityError};
/// use std::num::NonZeroU64;
/// let err = mailbox_with_line::<NonZeroU64>(500, 16).unwrap_err();
/// assert_eq!(err, CapacityError::EntriesInvalid { entries: 500, line_entries: 16 });
/// assert!(err.to_string().contains("power of two"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CapacityError {
    /// `line_entries` must be a power of two in `1..=16`.
    LineNotPowerOfTwo(usize),
    /// `entries` must be a power of two, at least four lines and at most 2^30.
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
            CapacityError::LineNotPowerOfTwo(l) => write!(
                f,
                "mailbox line of {l} entries: must be a power of two in 1..={DEFAULT_LINE_ENTRIES}"
            ),
            CapacityError::EntriesInvalid {
                entries,
                line_entries,
            } => write!(
                f,
                "mailbox of {entries} entries: must be a power of two >= 4 lines ({} entries) and <= 2^30",
                4 * line_entries
            ),
        }
    }
}

impl std::error::Error for CapacityError {}

/// A full mailbox hands the value back; nothing was written.
///
/// `Debug` does not print the value, so `T` need not be `Debug`.
///
/// # Examples
/// ```
/// use std::num::NonZeroU64;
/// let (mut tx, _rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
/// for i in 1..=48 {
///     tx.push(NonZeroU64::new(i).unwrap()).unwrap();
/// }
/// let full = tx.push(NonZeroU64::new(49).unwrap()).unwrap_err();
/// assert_eq!(full.0.get(), 49);
/// ```
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

/// The state both sides see. The constants (`slots` pointer, `mask`, `line`)
/// are written once, before the handles exist; the slots and the flags each
/// start on their own 128-byte block, and the indices live in the handles.
struct Shared {
    slots: Box<[Block]>,
    flags: CachePadded<Flags>,
    /// `E - 1`.
    mask: u64,
    /// `Λ`.
    line: u64,
}

struct Flags {
    /// Set by the consumer when it dropped a value of this producer; read
    /// and cleared by the producer. A hint: Relaxed on both sides.
    backpressure: AtomicBool,
    /// Set when the `Producer` is dropped, after its last push.
    producer_gone: AtomicBool,
    /// Set when the `Consumer` is dropped.
    consumer_gone: AtomicBool,
}

impl Shared {
    #[inline]
    fn slot(&self, index: u64) -> &AtomicU64 {
        let i = (index & self.mask) as usize;
        &self.slots[i / DEFAULT_LINE_ENTRIES][i % DEFAULT_LINE_ENTRIES]
    }

    #[inline]
    fn capacity(&self) -> usize {
        (self.mask + 1 - self.line) as usize
    }
}

/// Creates a mailbox of `entries` slots with the default 16-slot lines; it
/// holds `entries - 16` values at once.
///
/// # Errors
/// [`CapacityError::EntriesInvalid`] unless `entries` is a power of two in
/// `64..=2^30`.
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
/// (both powers of two, `line_entries <= 16`, `4 * line_entries <= entries
/// <= 2^30`); it holds `entries - line_entries` values at once. Lines shorter
/// than 16 slots are for tests and model checking: they trade false sharing
/// for reaching wrap-around with fewer operations.
///
/// # Errors
/// [`CapacityError::LineNotPowerOfTwo`] or [`CapacityError::EntriesInvalid`]
/// when the sizes are not as above.
///
/// # Examples
/// ```
/// use std::num::NonZeroU64;
/// let (tx, _rx) = pspat_mailbox::mailbox_with_line::<NonZeroU64>(8, 2).unwrap();
/// assert_eq!(tx.capacity(), 6);
/// assert!(pspat_mailbox::mailbox_with_line::<NonZeroU64>(8, 4).is_err());
/// ```
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
    // "consumed, not yet released" and the capacity is E - Λ on every lap.
    let producer = Producer {
        shared: Arc::clone(&shared),
        idx: CachePadded::new(ProducerIndex {
            write: line,
            verified: 2 * line,
        }),
        _not_sync: PhantomData,
    };
    let consumer = Consumer {
        shared,
        idx: CachePadded::new(ConsumerIndex {
            cleared: 0,
            read: line,
        }),
        _not_sync: PhantomData,
    };
    Ok((producer, consumer))
}

/// The producer's private indices (free-running, wrapping).
struct ProducerIndex {
    /// Next slot to write (`pw`).
    write: u64,
    /// Slots below this are known free (`pc`); a multiple of `Λ`.
    verified: u64,
}

/// The consumer's private indices (free-running, wrapping).
struct ConsumerIndex {
    /// First slot not yet zeroed (`cc`); a multiple of `Λ`.
    cleared: u64,
    /// Next slot to read (`cr`).
    read: u64,
}

/// The writing end. `Send` (when `T` is), not `Sync`, not `Clone`: exactly
/// one thread produces at a time, and a second producer is a compile error.
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
    /// `T` because values of `T` cross threads (so `Send` needs `T: Send`);
    /// `Cell<()>` takes `Sync` away: all methods that touch the indices take
    /// `&mut self`, but `&self` hints must stay on the owning thread too.
    _not_sync: PhantomData<(T, Cell<()>)>,
}

/// The reading end. `Send` (when `T` is), not `Sync`, not `Clone`: exactly
/// one thread consumes at a time.
///
/// ```compile_fail
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<pspat_mailbox::Consumer<std::num::NonZeroU64>>();
/// ```
/// ```compile_fail
/// fn needs_clone<T: Clone>() {}
/// needs_clone::<pspat_mailbox::Consumer<std::num::NonZeroU64>>();
/// ```
pub struct Consumer<T> {
    shared: Arc<Shared>,
    idx: CachePadded<ConsumerIndex>,
    /// See [`Producer`]'s field of the same name.
    _not_sync: PhantomData<(T, Cell<()>)>,
}

impl<T: SlotValue> Producer<T> {
    /// Values the mailbox holds at once: `entries - line_entries`.
    ///
    /// # Examples
    /// ```
    /// let (tx, _rx) = pspat_mailbox::mailbox::<std::num::NonZeroU64>(512).unwrap();
    /// assert_eq!(tx.capacity(), 496);
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Verifies one more line: checks that the first slot of the line after
    /// the one starting at `verified` is empty.
    #[inline]
    fn extend(&mut self) -> bool {
        let line = self.shared.line;
        let ahead = self.shared.slot(self.idx.verified.wrapping_add(line));
        // Acquire. Pairs with the Release store of each line's first slot in
        // `Consumer::release`: seeing that slot zero means every read and
        // zeroing of the line before it (the one we are about to fill) is
        // done, so our stores can be neither erased nor read in place of the
        // previous lap's values.
        if ahead.load(Ordering::Acquire) != 0 {
            return false;
        }
        self.idx.verified = self.idx.verified.wrapping_add(line);
        true
    }

    /// Stores one value at `write`, which must be below `verified`.
    #[inline]
    fn publish(&mut self, value: T) {
        // Release. Pairs with the Acquire load in `Consumer::pop`: a consumer
        // that reads this non-zero slot also sees everything this thread did
        // before the push (e.g. the packet `value` refers to).
        self.shared
            .slot(self.idx.write)
            .store(value.into_slot().get(), Ordering::Release);
        self.idx.write = self.idx.write.wrapping_add(1);
    }

    /// Appends `value`, or hands it back at once if the mailbox is full.
    ///
    /// Reads consumer-owned memory only when starting a new line.
    ///
    /// # Errors
    /// [`Full`] with the value when `capacity()` values are in the mailbox
    /// (counting popped ones whose line is not released yet); nothing is
    /// overwritten.
    ///
    /// # Examples
    /// ```
    /// use std::num::NonZeroU64;
    /// let (mut tx, mut rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
    /// tx.push(NonZeroU64::new(1).unwrap()).unwrap();
    /// assert_eq!(rx.pop(), NonZeroU64::new(1));
    /// ```
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), Full<T>> {
        if self.idx.write == self.idx.verified && !self.extend() {
            return Err(Full(value));
        }
        self.publish(value);
        Ok(())
    }

    /// Appends the longest prefix of `values` that fits and returns its
    /// length. Space is verified once per line for the whole burst (BIFFQ,
    /// `docs/REFERENCE.md` §2.5), then the values are published in order; a
    /// consumer may see the first ones before the call returns.
    ///
    /// Returns less than `values.len()` only when the mailbox became full,
    /// by the same rule as [`Producer::push`].
    ///
    /// # Examples
    /// ```
    /// use std::num::NonZeroU64;
    /// let (mut tx, mut rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
    /// let burst: Vec<NonZeroU64> = (1..=60).map(|i| NonZeroU64::new(i).unwrap()).collect();
    /// assert_eq!(tx.push_batch(&burst), 48); // the capacity
    /// assert_eq!(rx.pop(), NonZeroU64::new(1));
    /// ```
    #[inline]
    pub fn push_batch(&mut self, values: &[T]) -> usize {
        let mut room = self.idx.verified.wrapping_sub(self.idx.write) as usize;
        // Never verify more than `capacity` slots ahead of `write`: the
        // look-ahead slot of a further line would be one this very burst is
        // about to fill, still empty from the previous lap, and the check
        // would pass on a full ring (the proptest found this: E = 4, Λ = 1,
        // a burst of 4 took 4 values into 3 free slots).
        let want = values.len().min(self.shared.capacity());
        while room < want && self.extend() {
            room += self.shared.line as usize;
        }
        let n = room.min(values.len());
        for &v in &values[..n] {
            self.publish(v);
        }
        n
    }

    /// True if the next [`Producer::push`] would fail. A hint: it may turn
    /// false at any moment (the consumer releases a line); once false, it
    /// stays false until this producer pushes.
    ///
    /// # Examples
    /// ```
    /// use std::num::NonZeroU64;
    /// let (mut tx, _rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
    /// assert!(!tx.is_full());
    /// while tx.push(NonZeroU64::MIN).is_ok() {}
    /// assert!(tx.is_full());
    /// ```
    #[inline]
    pub fn is_full(&self) -> bool {
        let ahead = self
            .shared
            .slot(self.idx.verified.wrapping_add(self.shared.line));
        // Relaxed: nothing is written on the strength of this answer; `push`
        // repeats the load with Acquire before it writes.
        self.idx.write == self.idx.verified && ahead.load(Ordering::Relaxed) != 0
    }

    /// True if the consumer dropped one of our values since the last call;
    /// clears the flag. Costs one load of a rarely written block when unset.
    ///
    /// # Examples
    /// ```
    /// let (mut tx, rx) = pspat_mailbox::mailbox::<std::num::NonZeroU64>(64).unwrap();
    /// rx.set_backpressure();
    /// assert!(tx.take_backpressure());
    /// assert!(!tx.take_backpressure());
    /// ```
    #[inline]
    pub fn take_backpressure(&mut self) -> bool {
        let flag = &self.shared.flags.backpressure;
        // Relaxed: the flag is a hint about drops that are counted elsewhere;
        // no other memory is read on the strength of it.
        flag.load(Ordering::Relaxed) && flag.swap(false, Ordering::Relaxed)
    }

    /// True once the consumer has been dropped; values pushed now are never
    /// read. Once true, stays true.
    ///
    /// # Examples
    /// ```
    /// let (tx, rx) = pspat_mailbox::mailbox::<std::num::NonZeroU64>(64).unwrap();
    /// assert!(!tx.is_abandoned());
    /// drop(rx);
    /// assert!(tx.is_abandoned());
    /// ```
    pub fn is_abandoned(&self) -> bool {
        // Acquire. Pairs with the Release store in `Consumer::drop`.
        self.shared.flags.consumer_gone.load(Ordering::Acquire)
    }
}

impl<T: SlotValue> Consumer<T> {
    /// Values the mailbox holds at once: `entries - line_entries`.
    ///
    /// # Examples
    /// ```
    /// let (_tx, rx) = pspat_mailbox::mailbox::<std::num::NonZeroU64>(64).unwrap();
    /// assert_eq!(rx.capacity(), 48);
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Takes the oldest value, if any. Never writes shared memory: the slot
    /// stays occupied until [`Consumer::release`] frees its line, so call
    /// `release` once per round or the producer will find the mailbox full.
    ///
    /// A value returned here happens-after everything its producer did
    /// before pushing it.
    ///
    /// # Examples
    /// ```
    /// use std::num::NonZeroU64;
    /// let (mut tx, mut rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
    /// assert_eq!(rx.pop(), None);
    /// tx.push(NonZeroU64::new(3).unwrap()).unwrap();
    /// assert_eq!(rx.pop(), NonZeroU64::new(3));
    /// rx.release();
    /// ```
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        // Acquire. Pairs with the Release store in `Producer::publish`.
        let raw = self.shared.slot(self.idx.read).load(Ordering::Acquire);
        let value = NonZeroU64::new(raw)?;
        self.idx.read = self.idx.read.wrapping_add(1);
        Some(T::from_slot(value))
    }

    /// True when no value is waiting. May turn false at any moment; once
    /// false, it stays false until this consumer pops.
    ///
    /// # Examples
    /// ```
    /// use std::num::NonZeroU64;
    /// let (mut tx, rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
    /// assert!(rx.is_empty());
    /// tx.push(NonZeroU64::MIN).unwrap();
    /// assert!(!rx.is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        // Acquire (pairs with `Producer::publish`) so that a caller who acts
        // on a `false` here sees what the producer did before the push.
        self.shared.slot(self.idx.read).load(Ordering::Acquire) == 0
    }

    /// Frees every whole line already read, except the line being read (the
    /// lag that keeps a nearly empty queue from ping-ponging that line), so
    /// the producer can reuse them. Call it once per round, not per value.
    ///
    /// After it returns, [`Producer::push`] succeeds unless at least
    /// `capacity()` values are still unread or in the line being read.
    ///
    /// # Examples
    /// ```
    /// use std::num::NonZeroU64;
    /// let (mut tx, mut rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
    /// while tx.push(NonZeroU64::MIN).is_ok() {}
    /// while rx.pop().is_some() {}
    /// assert!(tx.push(NonZeroU64::MIN).is_err()); // popped, not yet released
    /// rx.release();
    /// assert!(tx.push(NonZeroU64::MIN).is_ok());
    /// ```
    #[inline]
    pub fn release(&mut self) {
        let line = self.shared.line;
        let target = self.idx.read & !(line - 1);
        while self.idx.cleared != target {
            let start = self.idx.cleared;
            for i in 1..line {
                // Relaxed: published by the Release store of this line's
                // first slot just below, which follows in program order.
                self.shared
                    .slot(start.wrapping_add(i))
                    .store(0, Ordering::Relaxed);
            }
            // Release, last for the line. Pairs with the producer's Acquire
            // look-ahead in `Producer::extend`: a producer that sees this slot
            // zero also sees our reads and zeroes of this and all earlier
            // lines as done before it refills any of them.
            self.shared.slot(start).store(0, Ordering::Release);
            self.idx.cleared = start.wrapping_add(line);
        }
    }

    /// Flags the producer: one of its values was dropped downstream. It sees
    /// the flag on its next [`Producer::take_backpressure`], and no
    /// happens-before is implied (it is a hint).
    ///
    /// # Examples
    /// See [`Producer::take_backpressure`].
    #[inline]
    pub fn set_backpressure(&self) {
        // Relaxed: a hint, see `Producer::take_backpressure`.
        self.shared
            .flags
            .backpressure
            .store(true, Ordering::Relaxed);
    }

    /// True once the producer has been dropped. Values it pushed before are
    /// still readable: after this returns true, `pop` returns every one of
    /// them before it returns `None`. Once true, stays true.
    ///
    /// # Examples
    /// ```
    /// use std::num::NonZeroU64;
    /// let (mut tx, mut rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
    /// tx.push(NonZeroU64::MIN).unwrap();
    /// drop(tx);
    /// assert!(rx.is_abandoned());
    /// assert_eq!(rx.pop(), Some(NonZeroU64::MIN));
    /// assert_eq!(rx.pop(), None);
    /// ```
    pub fn is_abandoned(&self) -> bool {
        // Acquire. Pairs with the Release store in `Producer::drop`, which
        // follows every push of that producer.
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
        // Release. Pairs with the Acquire in `Producer::is_abandoned`.
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

    /// Moves both sides to just below 2^64, as if 2^64 - 4E values had gone
    /// through (the init trick shifted by a multiple of E).
    fn near_wrap(entries: usize, line: usize) -> (Producer<NonZeroU64>, Consumer<NonZeroU64>) {
        let (mut tx, mut rx) = mailbox_with_line(entries, line).unwrap();
        let base = 0u64.wrapping_sub(4 * entries as u64);
        let line = line as u64;
        tx.idx.write = base.wrapping_add(line);
        tx.idx.verified = base.wrapping_add(2 * line);
        rx.idx.cleared = base;
        rx.idx.read = base.wrapping_add(line);
        (tx, rx)
    }

    /// Indices are free-running: crossing 2^64 must behave like any other lap
    /// (the first version used `+=`, which panics there with overflow checks).
    #[test]
    fn indices_wrap_past_u64_max() {
        let (mut tx, mut rx) = near_wrap(64, 16);
        let mut next_in = 0;
        let mut next_out = 0;
        for _round in 0..12 {
            let mut n = 0;
            while tx.push(v(next_in)).is_ok() {
                next_in += 1;
                n += 1;
            }
            assert_eq!(n, 48);
            while let Some(x) = rx.pop() {
                assert_eq!(x, v(next_out));
                next_out += 1;
            }
            rx.release();
        }
        assert_eq!(next_out, 12 * 48);
        assert!(tx.idx.write < 1 << 20, "the indices did wrap");
    }

    /// The same across the wrap with bursts.
    #[test]
    fn push_batch_wraps_past_u64_max() {
        let (mut tx, mut rx) = near_wrap(32, 4);
        let burst: Vec<NonZeroU64> = (0..10).map(v).collect();
        for _ in 0..40 {
            assert_eq!(tx.push_batch(&burst), 10);
            for want in &burst {
                assert_eq!(rx.pop(), Some(*want));
            }
            rx.release();
        }
    }

    /// A line longer than a block is refused, and the message says why
    /// (it used to claim "must be a power of two" for 32).
    #[test]
    fn line_longer_than_a_block_is_refused_with_the_range() {
        let err = mailbox_with_line::<NonZeroU64>(512, 32).unwrap_err();
        assert_eq!(err, CapacityError::LineNotPowerOfTwo(32));
        assert!(err.to_string().contains("1..=16"), "{err}");
    }
}
