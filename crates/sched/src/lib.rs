//! The sans-IO scheduling core of pspat.
//!
//! # Guarantees
//! * **Deterministic**: no clock reads (time is the `now` argument), no
//!   threads, no I/O, no `unsafe`; the same calls give the same answers.
//! * **No allocation per packet**: every scheduler allocates its packet arena
//!   and per-flow state at construction; `enqueue`/`dequeue` never allocate.
//! * **Nothing lost silently**: a refused packet comes back in [`Rejected`]
//!   with a [`DropReason`].
//! * **Flow lifecycle**: flows are slots of a [`FlowTable`], present or
//!   absent, added, changed and removed at run time through [`Scheduler`]
//!   (a removed flow's packets come back with [`DropReason::FlowRemoved`]);
//!   per-flow state is sized by the table's capacity, so this allocates
//!   nothing either (see [`scheduler`]).
//!
//! # Layers
//! ```text
//! Packet{flow,len,token} ──enqueue──▶ Scheduler (FIFO | PRIO | DRR | ...) ──dequeue──▶ LinkEmulator ──▶ caller
//!                                      per-flow FIFOs in PacketQueues          leaky bucket on link_idle
//! ```
//!
//! # Example
//! ```
//! use pspat_sched::{AlgKind, FlowId, FlowParams, FlowTable, Instant, LinkEmulator, Packet, Scheduler, SchedulerConfig};
//!
//! let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
//! let mut sched = SchedulerConfig::new(AlgKind::Drr).build(flows).unwrap();
//! let mut link = LinkEmulator::new(10_000_000_000, 512).unwrap();
//! for i in 0..8 {
//!     sched.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 1500, i as u64)).unwrap();
//! }
//! let mut sent = 0;
//! let mut now = Instant::ZERO;
//! while sent < 8 {
//!     sent += link.release(now, &mut sched, |_pkt| {});
//!     now = link.link_idle();
//! }
//! ```
#![forbid(unsafe_code)]

mod any;
pub mod drr;
pub mod eiffel;
mod error;
pub mod fifo;
mod flow;
pub mod fq;
pub mod hier;
pub mod link;
mod memory;
mod packet;
pub mod pipe;
pub mod place;
mod prefetch;
pub mod prio;
pub mod qfq;
pub mod qfq_plus;
mod queue;
pub mod rate;
pub mod scheduler;
mod time;
mod vclock;
pub mod wf2q_plus;

pub use any::{AlgKind, AnyScheduler, SchedulerConfig, VisitScheduler};
pub use drr::Drr;
pub use error::{ConfigError, FlowError};
pub use fifo::Fifo;
pub use flow::{FlowParams, FlowTable, DEFAULT_LMAX, MAX_WEIGHT, MIN_WEIGHT, PRIORITIES};
pub use fq::Fq;
pub use hier::{Hierarchy, HierarchyConfig, NodeConfig};
pub use link::LinkEmulator;
pub use packet::{FlowId, Packet, MAX_PACKET_LEN};
pub use pipe::{Exit, Fate, FlowCounters, Pipe, PipeConfig, PipeRoutes, PipeScheduler, PipeSet};
pub use place::PlaceError;
pub use prio::Prio;
pub use qfq::Qfq;
pub use qfq_plus::QfqPlus;
pub use queue::{PacketQueues, Scout};
pub use rate::{Pacer, Rate};
pub use scheduler::{DropReason, Rejected, Scheduler};
pub use time::Instant;
pub use wf2q_plus::Wf2qPlus;
