//! The lock-free mailboxes of pspat (one single-producer single-consumer
//! queue per client, drained by the arbiter) and the other cross-thread
//! handshakes of the runtime, each in its own module, each model-checked
//! with loom:
//!
//! * [`mailbox`](mod@mailbox): the IFFQ mailbox itself.
//! * [`client_list`]: per-CPU client lists (announce, take) and the retire
//!   handshake that takes a mailbox out of service without stranding a
//!   packet ([`try_retire`]).
//! * [`parker`]: sleep and wake-up of the arbiter or a dispatcher with no
//!   lost wake-up ([`Parker`], [`publish_fence`]).
//! * [`recycle`]: descriptors returned by transmitters to their owner, never
//!   reused before they are returned ([`FreeDescriptors`], [`Recycler`]).
//!
//! # Guarantees
//! * Fixed allocation at construction; `push`, `pop` and `release` never
//!   allocate, block or spin: they are wait-free.
//! * A full mailbox refuses at once and hands the value back; nothing is
//!   ever overwritten.
//! * Values leave in the order they entered, each exactly once.
//! * Capacity `entries - line_entries` (496 of 512 by default): a push is
//!   refused exactly when that many values are in the mailbox, counting the
//!   popped ones whose line [`Consumer::release`] has not freed yet.
//! * A popped value happens-after everything its producer did before pushing
//!   it; [`Consumer::is_abandoned`] returning true happens-after every push.
//! * The split handles make a second producer or consumer a compile error:
//!   [`Producer`] and [`Consumer`] are `Send`, neither `Sync` nor `Clone`.
//! * No `unsafe`: the slots are atomics.
//! * The handshakes' guarantees, proofs and memory orderings are in their
//!   modules' docs; every ordering names the operation it pairs with.
//!
//! # Algorithm
//! The improved FastForward queue (IFFQ) of Rizzo, Valente, Lettieri,
//! Maffione, "PSPAT: software packet scheduling at hardware speed" §4, in the
//! variant that zeroes whole lines: a zero slot is empty, the indices are
//! private to each side, the producer looks one line ahead once per line and
//! the consumer frees read slots a line at a time, one line behind. The
//! [`mailbox` module](mod@mailbox) gives the algorithm, the exact capacity
//! rule, the memory orderings (each Release with its Acquire) and the
//! 128-byte layout.
//!
//! # Layers
//! ```text
//! client thread                      arbiter thread
//! Producer::push / push_batch ─▶ [ E slots, 128-byte blocks ] ─▶ Consumer::pop ... release once per round
//!          ◀──────────── backpressure flag (hint) ────────────  Consumer::set_backpressure
//! publish_fence; ClientList::announce_if_needed ─▶ [ bitmap + last ] ─▶ ClientList::take, try_retire
//! Parker::kick ───────────────────▶ [ sleep flag ] ◀──────────────── Parker::prepare_sleep, sleep
//! FreeDescriptors::alloc ◀──────── [ ReturnedSet ] ◀──────────────── Recycler::mark, flush
//! ```
//!
//! # Example
//! ```
//! use std::num::NonZeroU64;
//! let (mut tx, mut rx) = pspat_mailbox::mailbox::<NonZeroU64>(64).unwrap();
//! let consumer = std::thread::spawn(move || {
//!     let mut sum = 0;
//!     let mut got = 0;
//!     while got < 100 {
//!         if let Some(v) = rx.pop() {
//!             sum += v.get();
//!             got += 1;
//!         } else {
//!             rx.release();
//!         }
//!     }
//!     sum
//! });
//! for i in 1..=100 {
//!     let mut v = NonZeroU64::new(i).unwrap();
//!     while let Err(full) = tx.push(v) {
//!         v = full.0;
//!         std::hint::spin_loop();
//!     }
//! }
//! assert_eq!(consumer.join().unwrap(), 5050);
//! ```

#![forbid(unsafe_code)]

pub mod client_list;
pub mod inbox;
pub mod mailbox;
pub mod parker;
pub mod recycle;
pub mod start_gate;
mod sync;

pub use client_list::{try_retire, ClientList, NO_CLIENT};
pub use inbox::{Inbox, Ticket};
pub use parker::{publish_fence, Parker, Wake};
pub use recycle::{
    return_batch, FreeDescriptors, Recycler, ReturnedSet, MAX_DESCRIPTORS, MAX_RETURN_HOLD_NS,
};
pub use start_gate::StartGate;
pub use sync::Thread;

pub use mailbox::{
    mailbox, mailbox_with_line, CapacityError, Consumer, Full, Producer, SlotValue,
    DEFAULT_ENTRIES, DEFAULT_LINE_ENTRIES,
};
