//! Deficit Round Robin. Shreedhar and Varghese, "Efficient Fair Queueing
//! Using Deficit Round Robin", SIGCOMM 1995; as dummynet's `dn_sched_rr.c`
//! and Linux `sch_drr.c`.
//!
//! Backlogged flows sit on a ring. The flow at the head sends while its
//! credit covers its head packet; otherwise it earns one quantum
//! (`weight × quantum_unit` bytes) and moves to the tail. A flow that empties
//! leaves the ring and starts again from one quantum, so idle flows bank no
//! credit.
//!
//! # Complexity
//! O(1) per enqueue. Dequeue is O(1) when every quantum is at least the
//! largest packet; with smaller quanta a dequeue may rotate the ring up to
//! `lmax / quantum` times per flow, but always makes progress (each rotation
//! adds a quantum, so the head packet fits after finitely many).
//! # Guarantees
//! Over a round each backlogged flow receives its quantum, within one maximum
//! packet. T-WFI_DRR(k) = (1/φ_min + 1/φ_k + N − 1)·L/B (Rizzo and Valente,
//! Comput. Commun. 67, 2015; PSPAT journal paper §5.2): O(N).
//! # Deviations
//! None known.

use crate::{ConfigError, FlowTable, Instant, Packet, PacketQueues, Rejected, Scheduler};

/// Default quantum per unit of weight, in bytes (one Ethernet MTU).
pub const DEFAULT_QUANTUM_UNIT: u32 = 1_500;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct FlowState {
    credit: u64,
    quantum: u64,
    next: u32,
    active: bool,
}

/// Deficit Round Robin with per-flow quanta derived from the weights.
///
/// # Examples
/// ```
/// use pspat_sched::{Drr, FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler};
/// let flows = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(2)]).unwrap();
/// let mut s = Drr::new(flows, 64, 100).unwrap();
/// for i in 0..6 {
///     s.enqueue(Instant::ZERO, Packet::new(FlowId(i % 2), 100, i as u64)).unwrap();
/// }
/// let order: Vec<u32> = (0..6).map(|_| s.dequeue(Instant::ZERO).unwrap().flow.0).collect();
/// assert_eq!(order, [0, 1, 1, 0, 1, 0]);
/// ```
pub struct Drr {
    flows: FlowTable,
    queues: PacketQueues,
    state: Box<[FlowState]>,
    head: u32,
    tail: u32,
}

impl Drr {
    /// DRR over `flows`, holding at most `capacity` packets, with quantum
    /// `weight × quantum_unit` bytes per flow.
    ///
    /// A quantum below a flow's largest packet is allowed and still makes
    /// progress (see the module docs for the cost).
    ///
    /// # Errors
    /// A zero `quantum_unit` or a capacity out of range.
    pub fn new(flows: FlowTable, capacity: usize, quantum_unit: u32) -> Result<Self, ConfigError> {
        if quantum_unit == 0 {
            return Err(ConfigError::out_of_range(
                "DRR quantum unit (bytes)",
                0,
                "1..=65535",
            ));
        }
        let queues = PacketQueues::new(flows.len(), capacity, None)?;
        let state = flows
            .as_slice()
            .iter()
            .map(|f| FlowState {
                credit: 0,
                quantum: u64::from(f.weight) * u64::from(quantum_unit),
                next: NIL,
                active: false,
            })
            .collect();
        Ok(Drr {
            flows,
            queues,
            state,
            head: NIL,
            tail: NIL,
        })
    }

    /// The quantum of `flow` in bytes.
    pub fn quantum(&self, flow: crate::FlowId) -> Option<u64> {
        self.state.get(flow.index()).map(|s| s.quantum)
    }

    #[inline]
    fn append(&mut self, f: u32) {
        self.state[f as usize].next = NIL;
        if self.tail == NIL {
            self.head = f;
        } else {
            self.state[self.tail as usize].next = f;
        }
        self.tail = f;
    }

    #[inline]
    fn pop_head(&mut self) -> u32 {
        let f = self.head;
        self.head = self.state[f as usize].next;
        if self.head == NIL {
            self.tail = NIL;
        }
        f
    }
}

impl Scheduler for Drr {
    #[inline(always)]
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        let f = pkt.flow.0;
        self.queues.push(f as usize, pkt)?;
        let st = &mut self.state[f as usize];
        if !st.active {
            st.active = true;
            st.credit = st.quantum;
            self.append(f);
        }
        Ok(())
    }

    #[inline(always)]
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        loop {
            if self.head == NIL {
                return None;
            }
            let f = self.head;
            // Invariant: a flow on the ring has a non-empty queue.
            let len = u64::from(self.queues.front(f as usize)?.len);
            let st = &mut self.state[f as usize];
            if len <= st.credit {
                st.credit -= len;
                let pkt = self.queues.pop(f as usize);
                if self.queues.is_empty(f as usize) {
                    self.state[f as usize].active = false;
                    self.pop_head();
                    // The next flow on the ring is served next.
                    if self.head != NIL {
                        self.queues.prefetch(self.head as usize);
                    }
                }
                return pkt;
            }
            st.credit += st.quantum;
            self.pop_head();
            self.append(f);
        }
    }

    fn queued(&self) -> usize {
        self.queues.total()
    }

    fn name(&self) -> &'static str {
        "drr"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlowId, FlowParams};

    #[test]
    fn quantum_below_packet_still_makes_progress() {
        let flows = FlowTable::new(vec![FlowParams::weighted(1); 3]).unwrap();
        let mut s = Drr::new(flows, 64, 7).unwrap();
        for i in 0..9u64 {
            s.enqueue(Instant::ZERO, Packet::new(FlowId((i % 3) as u32), 1500, i))
                .unwrap();
        }
        let mut out = Vec::new();
        while let Some(p) = s.dequeue(Instant::ZERO) {
            out.push(p.token);
        }
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn zero_quantum_unit_is_an_error() {
        assert!(Drr::new(FlowTable::uniform(1).unwrap(), 4, 0).is_err());
    }
}
