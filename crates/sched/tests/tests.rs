//! Integration tests of `pspat-sched`, one binary.

// The conformance suite: invariants every algorithm must hold.
mod conformance;

// Service guarantees of WF2Q+, QFQ and QFQ+: lag bounds, shares, wrap.
mod fair;
// Hierarchies (HTB-like): guarantees, ceilings, excess by weight, bad descriptions.
mod hier;
// Eiffel: integer priority queues, rank policies, EDT shaping.
mod eiffel;
// No allocation per packet, for every algorithm (counting allocator).
mod alloc;
// Placement: the HRW family (HRW, AHRW, trees, cache-aware, PS-HRW, flowlet guard).
mod place;
// Flow lifecycle: add, change, remove, purge, reuse, random interleavings.
mod lifecycle;
