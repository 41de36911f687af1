//! Integration tests of the pipe (`pspat_sched::pipe`), one binary, all in
//! virtual time with fixed seeds.

// The event driver and the checks every run makes (conservation, never early).
mod pipe_common;
// Exact times: delay, rate bound, burst, limits, order, replay, no allocation.
mod pipe_timing;
// Random processes against their formulas: plr, RED, GRED, Gilbert-Elliott,
// duplication, profile, jitter.
mod pipe_random;
// tc-netem's 4-state loss model: stationary loss, forced branches, replay.
mod pipe_loss_state;
// Random configurations and arrivals: conservation, order, never early.
mod pipe_prop;
// tc-netem's slots: bursts at slot instants, budgets, intervals, live changes.
mod pipe_slots;
// Live changes: a new seed, a link rebuilt with its instances moved.
mod pipe_live;
// Live changes of AQM queues: CoDel and PIE states and enqueue times carried
// across a rebuild; merged and split queues start afresh.
mod pipe_live_aqm;
// The pipe behind the Scheduler trait: a duplicate marks its original.
mod pipe_copies;
// Per-queue counters: conservation per queue, sums, shared configurations.
mod pipe_queues;
// CoDel: the state machine's drop instants, a standing queue held, ECN, live changes.
mod pipe_codel;
// FQ-CoDel: flow queueing behind CoDel queues; a sparse flow goes first.
mod pipe_fq_codel;
// PIE: the delay settled near target under overload, ECN, replay; FQ-PIE.
mod pipe_pie;
