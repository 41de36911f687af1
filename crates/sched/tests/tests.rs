//! Integration tests of `pspat-sched`, one binary.

// The conformance suite: invariants every algorithm must hold.
mod conformance;

// Eiffel: integer priority queues, rank policies, EDT shaping.
mod eiffel;
