//! Placement of flows on targets (dispatchers, links, arbiters, cores) with
//! the Highest Random Weight family.
//!
//! The scheduling algorithm decides *when* a packet leaves; placement decides
//! *where* it goes, so it does not change the scheduler's fairness.
//!
//! # Variants
//! | Type | Source | Per decision | Guarantee |
//! |---|---|---|---|
//! | [`Hrw`] | \[H\] §5.1 | N evaluations | affinity; 1/N per target; adding a target moves ~1/(N+1), all onto it |
//! | [`WeightedHrw`] | weighted rendezvous / \[H\] Thm 7.1 | N evaluations | target j wins w_j/Σw |
//! | [`Ahrw`] | \[H\] Def. 5.1–5.2, Eq. 6.1–6.2 | N evaluations | ≡ HRW on equal queues; diverts 1 − 1/ρ from a ρ-times loaded target |
//! | [`HierAhrw`] | \[H\] §5.3, Def. 5.3 | sum of fan-outs | AHRW at each level |
//! | [`CaAhrw`] | \[H\] §6.2–6.3, Eq. 6.3–6.6 | 2N evaluations | AHRW on cost-weighted queues: stays near home |
//! | [`HierCaAhrw`] | \[H\] §6.4, Eq. 6.7–6.8 | fan-outs of two paths | CA-AHRW at each level |
//! | [`PsHrw`] | \[H\] Ch. 7, Thm 7.1 | N evaluations | tenant shares ∝ demand; recomputed only on drift > β or arrival/departure |
//! | [`FlowletGuard`] | pspat | O(1) expected | a flow moves only when nothing of it is in flight: no reordering |
//!
//! Every decision is O(N) or better, allocates nothing, reads no clock and is
//! a pure function of its inputs (the digest, the target ids, the queue
//! snapshot the caller passes in). Ties between equal scores go to the lowest
//! target id. Each module's docs state its choices where \[H\] is ambiguous.
//!
//! The weight function and the digest are in [`digest`]'s docs: XXH64 flow
//! digests feeding \[H\] §5.1's g(c, S) = (A·((A·S + B) ⊕ D(c)) + B) mod 2^31.
//!
//! # Example
//! ```
//! use pspat_sched::place::{Ahrw, FlowDigest, FlowletGuard, MinQueue};
//! let mut ahrw = Ahrw::with_targets(4, MinQueue::NonZero).unwrap();
//! let mut guard = FlowletGuard::new(4096).unwrap();
//! let flow = FlowDigest::of_bytes(b"10.0.0.1:4000 10.0.0.2:80 udp");
//! ahrw.queues_mut().copy_from_slice(&[3000, 0, 1500, 1500]);
//! let target = guard.route(flow, ahrw.decide(flow) as u32);
//! guard.sent(flow);
//! // ... the target transmits the packet ...
//! guard.completed(flow);
//! assert!(target < 4);
//! ```
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, University of California, Riverside,
//! 2010.

mod ahrw;
mod carp;
mod cost;
pub mod digest;
mod error;
mod flowlet;
mod hier;
mod hrw;
mod ps_hrw;
mod topology;

pub use ahrw::{multiplier, Ahrw, MinQueue};
pub use carp::carp_multipliers;
pub use cost::{CaAhrw, CaTreeDecision, CostMatrix, HierCaAhrw};
pub use digest::{unit_weight, weight, FlowDigest, WEIGHT_A, WEIGHT_B, WEIGHT_RANGE};
pub use error::PlaceError;
pub use flowlet::FlowletGuard;
pub use hier::{Aggregate, HierAhrw, HierTree, TreeDecision};
pub use hrw::{Hrw, WeightForm, WeightedHrw};
pub use ps_hrw::{PsHrw, TenantId, DEFAULT_BETA};
pub use topology::{parse_cpu_list, CostRatios, CpuPlace, SysfsCache, SysfsCpu, Topology};
