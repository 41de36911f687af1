//! Integration tests of `pspat-sched`, one binary.

// The conformance suite: invariants every algorithm must hold.
mod conformance;

// Hierarchies (HTB-like): guarantees, ceilings, excess by weight, bad descriptions.
mod hier;
