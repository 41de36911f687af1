//! The PSPAT runtime: clients submit packets to private lock-free
//! mailboxes; one arbiter thread runs the scheduling algorithm and the link
//! emulator; dispatcher threads (or the clients themselves) transmit.
//! Rizzo, Valente, Lettieri, Maffione, "PSPAT: software packet scheduling
//! at hardware speed" (\[J\]), and its earlier version (\[E\]); see
//! `docs/REFERENCE.md` §1.
//!
//! # Guarantees
//! * **Conservation**: for every client and in total, `submitted =
//!   transmitted + dropped (by reason) + in_flight` in every [`Stats`]
//!   snapshot, and `in_flight == 0` after [`Runtime::shutdown`], also after
//!   a backend or thread panicked (see [`runtime`], *Faults*).
//! * **Bounded shutdown**: once the clients are gone, shutdown drains at the
//!   link rate for at most [`RuntimeConfig::shutdown`]'s deadline, then
//!   drops the rest with reason `"shutdown"`.
//! * **Order**: packets of one client and flow are transmitted in
//!   submission order.
//! * **Backpressure**: a full mailbox fails [`Client::submit`] at once,
//!   handing the packet back; a scheduler drop is reported on that client's
//!   next submit.
//! * **Rate**: released bytes never exceed the configured link rate by more
//!   than one packet over any window (the core's [`pspat_sched::LinkEmulator`]).
//! * No allocation and no `dyn` call per packet; the arbiter reads the clock
//!   once per round.
//! * **Arrival**: for a scheduler that
//!   [counts from arrival](pspat_sched::Scheduler::counts_from_arrival) (a
//!   pipe's delay line), a packet is enqueued at a time no earlier than its
//!   submission: the arbiter's thread reads the clock once more per chunk
//!   of up to 64 packets it collects from a mailbox, so a delay counted from
//!   arrival is never cut short.
//!
//! # Layers
//! ```text
//! Client::submit ─▶ client mailbox ─▶ Arbiter<S: Scheduler> ─▶ TX mailbox ─▶ dispatcher ─▶ TxBackend
//!                   (pspat-mailbox)   (collect, decide, link)   (T >= 1)                  (NullTx, ...)
//! ```
//!
//! # Example
//! ```
//! use pspat::{NullTx, Runtime, RuntimeConfig, Submission};
//! use pspat_sched::{AlgKind, FlowId, FlowTable, SchedulerConfig};
//!
//! let flows = FlowTable::uniform(4).unwrap();
//! let sched = SchedulerConfig::new(AlgKind::Drr).build(flows).unwrap();
//! let rt = Runtime::start(RuntimeConfig::default(), sched, |_| NullTx::new()).unwrap();
//! let workers: Vec<_> = (0..4)
//!     .map(|f| {
//!         let mut c = rt.client().unwrap();
//!         std::thread::spawn(move || {
//!             for seq in 0..10_000u64 {
//!                 let mut s = Submission { flow: FlowId(f), len: 60, cookie: seq, ect: false };
//!                 while let Err(e) = c.submit(s) {
//!                     s = e.into_inner();
//!                     std::thread::yield_now();
//!                 }
//!             }
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap();
//! }
//! let done = rt.shutdown().unwrap();
//! assert_eq!(done.stats.transmitted, 40_000);
//! assert!(done.stats.conserved() && done.stats.in_flight == 0);
//! ```

#![forbid(unsafe_code)]

mod arbiter;
mod client;
mod clock;
mod config;
pub mod control;
mod dispatcher;
mod error;
pub mod manual;
mod memory;
pub mod node;
pub mod runtime;
mod shared;
pub mod stats;
mod sync;
mod sys;
mod token;
mod tx;

pub use arbiter::placement::DispatchPlacement;
pub use arbiter::{Outcome, WaitingFor};
pub use client::{Accepted, Burst, Client, Submission};
pub use clock::Clock;
pub use config::{BackpressurePolicy, RuntimeConfig, ShutdownPolicy, TxMode};
pub use control::{Control, Reconfigurable, Ticket};
pub use error::{RuntimeError, SubmitError};
pub use manual::ManualRuntime;
pub use memory::memory_estimate;
pub use runtime::{ArbiterWaker, Finished, Runtime, TxOwner};
pub use stats::{ArbiterStats, ClientStats, Departed, Stats};
pub use token::MAX_FLOW_ID;
pub use tx::{NullTx, TxBackend, TxPacket};
