//! The lock-free mailboxes of pspat: one single-producer single-consumer
//! queue per client, drained by the arbiter.
//!
//! # Guarantees
//! * Fixed allocation at construction; `push`, `pop` and `release` never
//!   allocate, block or spin: they are wait-free.
//! * A full mailbox refuses at once and hands the value back; nothing is
//!   ever overwritten.
//! * Values leave in the order they entered, each exactly once.
//! * The split handles make a second producer or consumer a compile error.
//!
//! # Algorithm
//! The improved FastForward queue of Rizzo, Valente, Lettieri, Maffione,
//! "PSPAT: software packet scheduling at hardware speed" §4 (see
//! [`mailbox()`] and the module `mailbox`).
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

mod mailbox;
mod sync;

pub use mailbox::{
    mailbox, mailbox_with_line, CapacityError, Consumer, Full, Producer, SlotValue,
    DEFAULT_ENTRIES, DEFAULT_LINE_ENTRIES,
};
