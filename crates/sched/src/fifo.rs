//! FIFO: one queue in arrival order, the built-in scheduler of a dummynet pipe.
//!
//! # Complexity
//! O(1) per enqueue and dequeue.
//! # Guarantees
//! None beyond order: a greedy flow takes the link (T-WFI is unbounded).

use crate::{ConfigError, FlowTable, Instant, Packet, PacketQueues, Rejected, Scheduler};

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
}
