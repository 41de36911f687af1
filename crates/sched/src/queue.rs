//! Indexed FIFO queues over one preallocated packet arena.
//!
//! Every algorithm keeps its packets here: queue `i` is usually flow `i`
//! (PRIO uses one queue per priority). The arena is a slab of 64-byte
//! *chunks*, each holding [`CHUNK_PACKETS`] packets and the index of the next
//! chunk; a queue is a singly linked list of chunks, consumed from an offset
//! in its head chunk and filled up to an offset in its tail chunk. Free
//! chunks sit on a stack of indices, so `push` and `pop` are O(1) and nothing
//! allocates after [`PacketQueues::new`].
//!
//! Why chunks: with deep queues (the dummynet harness keeps up to 20 packets
//! per flow over 32k flows, about 15 MB of packets) every packet of a
//! one-node-per-packet list lived in its own cache line, so each dequeue
//! paid a dependent cache miss for the head node and each enqueue one for the
//! old tail node plus one for the new node. With three packets per cache
//! line, consecutive packets of one flow share a line: a burst from one flow
//! (DRR serves a flow until its credit runs out) misses once per three
//! packets, and an enqueue writes into the tail chunk, which it only
//! allocates once per three packets. The free stack is a separate index
//! array (its top is hot) rather than a list threaded through the chunks,
//! and the stack is LIFO, so a chunk freed by a dequeue is the first reused.
//! A [`Scout`] walks a queue's chain ahead of its consumer, one chunk per
//! step, for algorithms that know which queues they serve next (DRR); it
//! only loads memory.
//!
//! The crate forbids `unsafe`, so there is no prefetch instruction: a read
//! ahead is a plain load whose value is discarded. Such a load still holds
//! up retirement until its line arrives, so it pays only when several
//! independent ones overlap (several scouts), not when one chain is walked
//! a step ahead of its own consumer.
//!
//! # Guarantees
//! * FIFO within each queue.
//! * The arena holds exactly `capacity` packets, however they are spread
//!   over the queues: a full arena or a queue at its limit refuses with
//!   [`DropReason`] and hands the packet back. (An empty queue keeps no
//!   chunk, and a non-empty queue of n packets holds at most
//!   min(n, ⌊(n + 2·CHUNK_PACKETS − 2)/CHUNK_PACKETS⌋) chunks, so
//!   min(capacity, ⌈capacity/CHUNK_PACKETS⌉ + 2·min(queues, capacity))
//!   chunks always suffice; that many are allocated.)
//! * Memory: 64 bytes per chunk (about 21 bytes per packet of capacity plus
//!   128 bytes per queue, at most 64 bytes per packet of capacity) plus
//!   16 bytes per queue.

use crate::{ConfigError, DropReason, Packet, Rejected};

const NIL: u32 = u32::MAX;

/// Packets per arena chunk (one 64-byte cache line with its link).
pub const CHUNK_PACKETS: usize = 3;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk {
    pkts: [Packet; CHUNK_PACKETS],
    next: u32,
}

/// One queue: its head and tail chunks, the offset of its oldest packet in
/// the head chunk and of the next free position in the tail chunk.
#[derive(Clone, Copy)]
struct Fifo {
    head: u32,
    tail: u32,
    len: u32,
    head_off: u16,
    tail_off: u16,
}

const EMPTY_FIFO: Fifo = Fifo {
    head: NIL,
    tail: NIL,
    len: 0,
    head_off: 0,
    tail_off: 0,
};

/// A read-ahead cursor over one queue's chunks; see [`PacketQueues::scout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scout {
    chunk: u32,
    left: u32,
}

impl Scout {
    /// A scout with nothing left to load.
    pub const DONE: Scout = Scout {
        chunk: NIL,
        left: 0,
    };

    /// True when the walk is over.
    pub fn is_done(&self) -> bool {
        self.left == 0
    }
}

/// `queues` FIFOs sharing an arena of `capacity` packets.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, Packet, PacketQueues};
/// let mut q = PacketQueues::new(2, 8, None).unwrap();
/// q.push(1, Packet::new(FlowId(1), 100, 7)).unwrap();
/// assert_eq!(q.front(1).map(|p| p.len), Some(100));
/// assert_eq!(q.pop(1).map(|p| p.token), Some(7));
/// assert!(q.is_empty(1));
/// ```
pub struct PacketQueues {
    chunks: Box<[Chunk]>,
    fifos: Box<[Fifo]>,
    /// Free chunk indices; the top is `free[free_len - 1]`.
    free: Box<[u32]>,
    free_len: usize,
    total: usize,
    capacity: usize,
    per_queue_limit: u32,
}

impl PacketQueues {
    /// Largest arena accepted, in packets (chunk indices are `u32`).
    pub const MAX_CAPACITY: usize = (u32::MAX / 4) as usize;

    /// `queues` empty FIFOs over room for `capacity` packets, each FIFO
    /// holding at most `per_queue_limit` packets (`None`: no limit of its own).
    ///
    /// # Errors
    /// `capacity` or `queues` of zero or above the maximum, or a zero limit.
    pub fn new(
        queues: usize,
        capacity: usize,
        per_queue_limit: Option<u32>,
    ) -> Result<Self, ConfigError> {
        if capacity == 0 || capacity > Self::MAX_CAPACITY {
            return Err(ConfigError::out_of_range(
                "scheduler capacity (packets)",
                capacity,
                format!("1..={}", Self::MAX_CAPACITY),
            ));
        }
        if queues == 0 || queues > Self::MAX_CAPACITY {
            return Err(ConfigError::out_of_range(
                "number of queues",
                queues,
                format!("1..={}", Self::MAX_CAPACITY),
            ));
        }
        if per_queue_limit == Some(0) {
            return Err(ConfigError::out_of_range(
                "per-flow queue limit",
                0,
                "1.. packets",
            ));
        }
        // See the module docs for the bound; below u32::MAX by MAX_CAPACITY.
        // A queue of n packets also holds at most n chunks.
        let n_chunks = (capacity.div_ceil(CHUNK_PACKETS) + 2 * queues.min(capacity)).min(capacity);
        let chunks = vec![
            Chunk {
                pkts: [Packet::default(); CHUNK_PACKETS],
                next: NIL,
            };
            n_chunks
        ]
        .into_boxed_slice();
        // Reversed, so chunks are handed out in increasing order at first.
        let free = (0..n_chunks as u32).rev().collect();
        Ok(PacketQueues {
            chunks,
            fifos: vec![EMPTY_FIFO; queues].into_boxed_slice(),
            free,
            free_len: n_chunks,
            total: 0,
            capacity,
            per_queue_limit: per_queue_limit.unwrap_or(u32::MAX),
        })
    }

    /// Appends `pkt` to queue `q`.
    ///
    /// # Errors
    /// [`DropReason::QueueFull`] when the arena is full,
    /// [`DropReason::FlowLimit`] when `q` is at its limit,
    /// [`DropReason::UnknownFlow`] when `q` does not exist.
    #[inline(always)]
    pub fn push(&mut self, q: usize, pkt: Packet) -> Result<(), Rejected> {
        let Some(fifo) = self.fifos.get_mut(q) else {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::UnknownFlow,
            });
        };
        if fifo.len >= self.per_queue_limit {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::FlowLimit,
            });
        }
        // The chunk bound (module docs) makes the free stack non-empty
        // whenever `total < capacity`; the second test only keeps this
        // panic-free should that reasoning ever be wrong.
        let need_chunk = fifo.len == 0 || usize::from(fifo.tail_off) == CHUNK_PACKETS;
        if self.total >= self.capacity || (need_chunk && self.free_len == 0) {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::QueueFull,
            });
        }
        if need_chunk {
            self.free_len -= 1;
            let c = self.free[self.free_len];
            // The chunk the next allocation will take: load it now so that
            // its later fill does not stall on the miss.
            if let Some(&n) = self.free.get(self.free_len.wrapping_sub(1)) {
                touch(&self.chunks, n);
            }
            if fifo.len == 0 {
                fifo.head = c;
                fifo.head_off = 0;
            } else {
                self.chunks[fifo.tail as usize].next = c;
            }
            fifo.tail = c;
            fifo.tail_off = 0;
        }
        // Field by field: a caller that has just written `pkt` to memory in
        // pieces would make one 16-byte copy wait for those stores to reach
        // the cache (a store-forwarding stall), and with them for every older
        // store still missing the cache.
        let dst = &mut self.chunks[fifo.tail as usize].pkts[usize::from(fifo.tail_off)];
        dst.flow = pkt.flow;
        dst.len = pkt.len;
        dst.token = pkt.token;
        fifo.tail_off += 1;
        fifo.len += 1;
        self.total += 1;
        Ok(())
    }

    /// Removes the oldest packet of queue `q`.
    #[inline(always)]
    pub fn pop(&mut self, q: usize) -> Option<Packet> {
        let fifo = self.fifos.get_mut(q)?;
        if fifo.len == 0 {
            return None;
        }
        let c = fifo.head;
        let chunk = &self.chunks[c as usize];
        let pkt = chunk.pkts[usize::from(fifo.head_off)];
        let next = chunk.next;
        fifo.head_off += 1;
        fifo.len -= 1;
        self.total -= 1;
        if fifo.len == 0 {
            *fifo = EMPTY_FIFO;
        } else if fifo.head_off == 1 && fifo.len as usize >= CHUNK_PACKETS {
            // The queue continues past this chunk: start loading the next
            // one now, so the pop that reaches it finds it in cache (a plain
            // load the out-of-order core overlaps with the work until then).
            touch(&self.chunks, next);
            return Some(pkt);
        } else if usize::from(fifo.head_off) == CHUNK_PACKETS {
            fifo.head = next;
            fifo.head_off = 0;
        } else {
            return Some(pkt);
        }
        self.free[self.free_len] = c;
        self.free_len += 1;
        Some(pkt)
    }

    /// The oldest packet of queue `q`, left in place.
    #[inline(always)]
    pub fn front(&self, q: usize) -> Option<&Packet> {
        let fifo = self.fifos.get(q)?;
        (fifo.len != 0).then(|| &self.chunks[fifo.head as usize].pkts[usize::from(fifo.head_off)])
    }

    /// Starts a read-ahead of the first `max_chunks` chunks (at least one)
    /// of queue `q`: loads its head chunk now, and each
    /// [`PacketQueues::scout_step`] loads the next one. For an algorithm
    /// that knows which queues it will serve a few steps from now: several
    /// scouts walking different queues keep several independent cache
    /// misses in flight, where serving one queue alone walks its chain one
    /// dependent miss at a time. A hint only: the contents never change, and
    /// a scout made stale by later pushes and pops only loads lines in vain
    /// (every step is bounds-checked and the walk ends after `max_chunks`).
    #[inline]
    pub fn scout(&self, q: usize, max_chunks: u32) -> Scout {
        match self.fifos.get(q) {
            Some(f) if f.len != 0 => {
                touch(&self.chunks, f.head);
                let chunks = (u32::from(f.head_off) + f.len).div_ceil(CHUNK_PACKETS as u32);
                Scout {
                    chunk: f.head,
                    left: chunks.min(max_chunks).saturating_sub(1),
                }
            }
            _ => Scout::DONE,
        }
    }

    /// Moves `scout` one chunk along its queue, loading that chunk (one load;
    /// nothing when the walk is over).
    #[inline(always)]
    pub fn scout_step(&self, scout: &mut Scout) {
        if scout.left == 0 {
            return;
        }
        match self.chunks.get(scout.chunk as usize) {
            Some(c) => {
                scout.chunk = c.next;
                scout.left -= 1;
                touch(&self.chunks, scout.chunk);
            }
            None => *scout = Scout::DONE,
        }
    }

    /// Packets in queue `q` (0 for a queue that does not exist).
    #[inline(always)]
    pub fn len(&self, q: usize) -> usize {
        self.fifos.get(q).map_or(0, |f| f.len as usize)
    }

    /// True when queue `q` holds nothing.
    #[inline(always)]
    pub fn is_empty(&self, q: usize) -> bool {
        self.len(q) == 0
    }

    /// Packets in all queues.
    #[inline]
    pub fn total(&self) -> usize {
        self.total
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.fifos.len()
    }

    /// Arena size in packets.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// True when the arena holds `capacity` packets.
    pub fn is_full(&self) -> bool {
        self.total >= self.capacity
    }
}

/// A plain load of chunk `c`'s first word, kept alive so the compiler emits
/// it; nothing waits on its value, so the core overlaps the miss with the
/// following work (the crate forbids `unsafe`, hence no prefetch intrinsic).
#[inline(always)]
fn touch(chunks: &[Chunk], c: u32) {
    if let Some(ch) = chunks.get(c as usize) {
        std::hint::black_box(ch.pkts[0].len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FlowId;

    #[test]
    fn fifo_per_queue_and_arena_reuse() {
        let mut q = PacketQueues::new(3, 4, None).unwrap();
        for i in 0..4 {
            q.push((i % 2) as usize, Packet::new(FlowId(0), 1, i))
                .unwrap();
        }
        let err = q.push(2, Packet::new(FlowId(0), 1, 9)).unwrap_err();
        assert_eq!(err.reason, DropReason::QueueFull);
        assert_eq!(err.packet.token, 9);
        assert_eq!(q.pop(0).unwrap().token, 0);
        assert_eq!(q.pop(0).unwrap().token, 2);
        assert!(q.pop(0).is_none());
        q.push(2, Packet::new(FlowId(0), 1, 10)).unwrap();
        assert_eq!(q.pop(1).unwrap().token, 1);
        assert_eq!(q.pop(1).unwrap().token, 3);
        assert_eq!(q.pop(2).unwrap().token, 10);
        assert_eq!(q.total(), 0);
    }

    #[test]
    fn matches_a_vecdeque_model_and_always_reaches_capacity() {
        use std::collections::VecDeque;
        for (queues, capacity) in [(1, 1), (2, 3), (5, 7), (7, 40), (40, 7), (3, 100)] {
            let mut q = PacketQueues::new(queues, capacity, None).unwrap();
            let mut model = vec![VecDeque::new(); queues];
            let mut rng = fastrand::Rng::with_seed(queues as u64 * 1000 + capacity as u64);
            let mut token = 0u64;
            for _ in 0..20_000 {
                let i = rng.usize(..queues);
                // Bias towards pushing so the arena is often full.
                if rng.u8(..10) < 6 {
                    let r = q.push(i, Packet::new(FlowId(i as u32), 1, token));
                    let total: usize = model.iter().map(VecDeque::len).sum();
                    if total < capacity {
                        assert!(r.is_ok(), "refused below capacity");
                        model[i].push_back(token);
                    } else {
                        assert_eq!(r.unwrap_err().reason, DropReason::QueueFull);
                    }
                    token += 1;
                } else {
                    assert_eq!(q.front(i).map(|p| p.token), model[i].front().copied());
                    assert_eq!(q.pop(i).map(|p| p.token), model[i].pop_front());
                }
                assert_eq!(q.len(i), model[i].len());
                assert_eq!(q.total(), model.iter().map(VecDeque::len).sum::<usize>());
                assert_eq!(q.is_full(), q.total() == capacity);
            }
        }
    }

    #[test]
    fn a_scout_walks_every_chunk_of_its_queue_then_stops() {
        let mut q = PacketQueues::new(2, 64, None).unwrap();
        assert!(q.scout(0, 16).is_done());
        assert!(q.scout(7, 16).is_done());
        for n in 1..=20u64 {
            q.push(0, Packet::new(FlowId(0), 1, n)).unwrap();
            // A queue of n packets from offset 0 spans ceil(n / 3) chunks:
            // the scout loads the head now and one more per step.
            let mut s = q.scout(0, 16);
            let mut steps = 0;
            while !s.is_done() {
                q.scout_step(&mut s);
                steps += 1;
            }
            assert_eq!(steps, n.div_ceil(CHUNK_PACKETS as u64) - 1);
            let mut capped = q.scout(0, 2);
            q.scout_step(&mut capped);
            assert!(capped.is_done());
        }
    }

    #[test]
    fn stale_scouts_are_harmless() {
        // Scouts started and then left behind by pops and pushes only load
        // memory: they never panic, end within their budget, and never
        // change what the queues hold.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut q = PacketQueues::new(4, 30, None).unwrap();
        let mut scouts = Vec::new();
        let mut token = 0;
        for _ in 0..20_000 {
            let i = rng.usize(..4);
            if rng.bool() {
                let _ = q.push(i, Packet::new(FlowId(i as u32), 1, token));
                token += 1;
            } else {
                let _ = q.pop(i);
            }
            if rng.u8(..8) == 0 {
                scouts.push((q.scout(rng.usize(..5), rng.u32(..12)), 0));
            }
            for (s, steps) in &mut scouts {
                q.scout_step(s);
                *steps += 1;
                assert!(*steps <= 12 || s.is_done());
            }
            scouts.retain(|(s, _)| !s.is_done());
        }
        let total: usize = (0..4).map(|i| q.len(i)).sum();
        assert_eq!(total, q.total());
        for i in 0..4 {
            let mut last = None;
            while let Some(p) = q.pop(i) {
                assert!(last < Some(p.token), "FIFO order kept");
                last = Some(p.token);
            }
        }
    }

    #[test]
    fn per_queue_limit_and_unknown_queue() {
        let mut q = PacketQueues::new(1, 8, Some(2)).unwrap();
        q.push(0, Packet::default()).unwrap();
        q.push(0, Packet::default()).unwrap();
        assert_eq!(
            q.push(0, Packet::default()).unwrap_err().reason,
            DropReason::FlowLimit
        );
        assert_eq!(
            q.push(5, Packet::default()).unwrap_err().reason,
            DropReason::UnknownFlow
        );
        assert!(PacketQueues::new(1, 0, None).is_err());
        assert!(PacketQueues::new(1, 1, Some(0)).is_err());
    }
}
