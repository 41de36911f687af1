//! FIFO: one queue in arrival order, the built-in scheduler of a dummynet pipe.
//!
//! # Complexity
//! O(1) per enqueue and dequeue.
//! # Guarantees
//! None beyond order: a greedy flow takes the link (T-WFI is unbounded).
//!
//! # Flow lifecycle
//! Flows only gate admission: adding or changing one is O(1) and changes
//! no order. Removing one takes its packets out of the shared queue
//! (O(packets queued), the others keep their order); `flow_queued` counts
//! by a walk of the queue, O(packets queued). No per-flow state, so
//! nothing is paid per packet for the lifecycle.

use crate::scheduler::purged;
use crate::{
    ConfigError, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, PacketQueues, Rejected,
    Scheduler,
};

/// First in, first out over all flows.
///
/// # Examples
/// ```
/// use pspat_sched::{Fifo, FlowId, FlowTable, Instant, Packet, Scheduler};
/// let mut s = Fifo::new(FlowTable::uniform(2).unwrap(), 16).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(1), 60, 1)).unwrap();
/// s.enqueue(Instant::ZERO, Packet::new(FlowId(0), 60, 2)).unwrap();
/// assert_eq!(s.dequeue(Instant::ZERO).unwrap().token, 1);
/// ```
pub struct Fifo {
    flows: FlowTable,
    queue: PacketQueues,
}

impl Fifo {
    /// A FIFO holding at most `capacity` packets of the flows in `flows`.
    ///
    /// # Errors
    /// A zero or oversized capacity.
    pub fn new(flows: FlowTable, capacity: usize) -> Result<Self, ConfigError> {
        Ok(Fifo {
            flows,
            queue: PacketQueues::new(1, capacity, None)?,
        })
    }
}

impl Scheduler for Fifo {
    #[inline]
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.flows.admit(&pkt)?;
        self.queue.push(0, pkt)
    }

    #[inline]
    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.queue.pop(0)
    }

    fn queued(&self) -> usize {
        self.queue.total()
    }

    fn name(&self) -> &'static str {
        "fifo"
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.insert(flow, params)
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.flows.update(flow, params).map(|_| ())
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.flows.remove(flow)?;
        self.queue
            .retain(0, |p| p.flow != flow, |p| purge(purged(p)));
        Ok(())
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.flows.contains(flow).then(|| {
            if self.flows.len() == 1 {
                self.queue.total()
            } else {
                self.queue.iter(0).filter(|p| p.flow == flow).count()
            }
        })
    }
}
