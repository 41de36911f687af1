//! Indexed FIFO queues over one preallocated packet arena.
//!
//! Every algorithm keeps its packets here: queue `i` is usually flow `i`
//! (PRIO uses one queue per priority). The packets sit in an arena of
//! 64-byte *chunks* of [`CHUNK_PACKETS`] packets; a queue is a singly linked
//! list of chunks whose links live in a separate array, filled at the tail
//! and consumed at the head. Each queue has a 12-byte record: the arena
//! slot of its oldest packet, its tail chunk and its length (the slot of its
//! newest packet follows from those). A push writes into the tail chunk, or
//! into a fresh chunk once the tail chunk is full (or the queue was empty);
//! a pop takes from the head chunk and gives it back once it is consumed
//! (or the queue empties). Free chunks sit on a stack of indices, so `push`
//! and `pop` are O(1) and nothing allocates after [`PacketQueues::new`].
//!
//! Why this layout: with deep queues over many flows (the dummynet harness
//! keeps up to 20 packets per flow over 32k flows, about 650 000 packets)
//! almost every access to another flow's packets misses the cache, so the
//! layout decides the cost; with many short queues (a dynamic queue per
//! address) the per-queue record decides the memory.
//! * The records are small and dense (five to a cache line), so a pass over
//!   many flows reads a fifth of the lines a 64-byte record would, and a
//!   queue costs 12 bytes while it holds nothing.
//! * A push touches the queue's record and its tail chunk (the packets
//!   before it in the same chunk were pushed by the same queue), or, once
//!   every [`CHUNK_PACKETS`] pushes, a fresh chunk from the top of the free
//!   stack: the chunk most recently freed, usually still cached; when it is
//!   not (a long fill after a long drain), each such push prefetches the
//!   chunk [`FRESH_AHEAD`] takes further down the stack, so the miss is paid
//!   while other work goes on.
//! * A chunk holds four packets (the links are elsewhere), so a burst from
//!   one flow (DRR serves a flow until its credit runs out) misses once per
//!   four packets, and the pop of a chunk's first packet prefetches the next
//!   chunk of the queue.
//! * A [`Scout`] walks a queue's chain ahead of its consumer, for algorithms
//!   that know which queues they serve next (DRR). The walk reads the link
//!   array (4 bytes per chunk, mostly cached) and prefetches each chunk, so
//!   the chunk misses of one queue overlap instead of waiting for each
//!   other.
//!
//! Read-ahead uses the prefetch instruction (through `safe_arch`, so the
//! crate stays free of `unsafe`): unlike a load, a prefetch does not hold up
//! retirement while its line is on the way.
//!
//! # Record fields and their widths
//! * `start: u32`, the arena slot of the oldest packet: chunk `start / 4`,
//!   position `start % 4`. Below 4 × chunks ≤ 4 × capacity ≤ 2³² − 4, as
//!   [`PacketQueues::new`] refuses a capacity above
//!   [`PacketQueues::MAX_CAPACITY`] (2³⁰ − 1) with a [`ConfigError`].
//! * `tail: u32`, the chunk holding the newest packet (below the chunk
//!   count, so below 2³⁰).
//! * `len: u32`, the packets in the queue, at most the capacity.
//!
//! The newest packet is at position `(start + len − 1) % 4` of the tail
//! chunk: every chunk between the head and the tail is full.
//!
//! # Guarantees
//! * FIFO within each queue.
//! * The arena holds exactly `capacity` packets, however they are spread
//!   over the queues: a full arena or a queue at its limit refuses with
//!   [`DropReason`] and hands the packet back. (A queue of a packets whose
//!   oldest sits at position h ≤ 3 of its head chunk spans ⌈(h + a)/4⌉ ≤
//!   ⌈(a + 3)/4⌉ ≤ a/4 + 3/2 chunks, and at most min(queues, capacity)
//!   queues hold packets, so ⌈capacity/4⌉ + ⌈3·min(queues, capacity)/2⌉
//!   chunks always suffice; that many are allocated, and never more than
//!   `capacity`, as every chunk in use holds a packet.)
//! * Memory: 12 bytes per queue, plus 72 bytes per chunk (the chunk, its
//!   link and its free-stack slot): about 18 bytes per packet of capacity
//!   and up to 108 more per queue that may hold packets (queues beyond the
//!   capacity add 12 bytes each).

use crate::{ConfigError, DropReason, Packet, Rejected};

const NIL: u32 = u32::MAX;

/// Packets per arena chunk (one 64-byte cache line; links are kept apart).
pub const CHUNK_PACKETS: usize = 4;

/// `CHUNK_PACKETS` as the `u32` of the record's slot arithmetic.
const CHUNK: u32 = CHUNK_PACKETS as u32;

/// How many fresh-chunk takes ahead a push prefetches the free stack's
/// chunks.
const FRESH_AHEAD: usize = 8;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk {
    pkts: [Packet; CHUNK_PACKETS],
}

/// One queue's record (12 bytes; see the module docs for each field's
/// range). While `len` is 0, `start` is 0 and `tail` means nothing.
#[derive(Clone, Copy)]
struct Fifo {
    /// Arena slot of the oldest packet: chunk `start / 4`, position `start % 4`.
    start: u32,
    /// The chunk holding the newest packet.
    tail: u32,
    /// Packets in the queue.
    len: u32,
}

impl Fifo {
    /// The chunk holding the oldest packet.
    #[inline(always)]
    fn head(&self) -> u32 {
        self.start / CHUNK
    }

    /// The oldest packet's position in its chunk.
    #[inline(always)]
    fn head_off(&self) -> usize {
        (self.start % CHUNK) as usize
    }

    /// Where the next push goes in the tail chunk; 0 when the tail chunk is
    /// full (or the queue empty), so the push takes a fresh chunk. The sum
    /// wraps at 2³², a multiple of 4, so the position stays exact.
    #[inline(always)]
    fn next_off(&self) -> usize {
        (self.start.wrapping_add(self.len) % CHUNK) as usize
    }

    /// Chunks the queue spans.
    #[inline(always)]
    fn chunks(&self) -> u32 {
        (self.start % CHUNK + self.len).div_ceil(CHUNK)
    }
}

const EMPTY_FIFO: Fifo = Fifo {
    start: 0,
    tail: NIL,
    len: 0,
};

const _: () = assert!(std::mem::size_of::<Fifo>() == 12);

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
    /// `links[c]`: the chunk after `c` in its queue.
    links: Box<[u32]>,
    fifos: Box<[Fifo]>,
    /// Free chunk indices; the top is `free[free_len - 1]`.
    free: Box<[u32]>,
    free_len: usize,
    total: usize,
    capacity: usize,
    per_queue_limit: u32,
}

/// Copies a packet field by field: a packet written in pieces just before
/// (by the caller) would make one 16-byte copy wait for those stores to
/// reach the cache (a store-forwarding stall), and with them for every
/// older store still missing the cache.
#[inline(always)]
fn put(dst: &mut Packet, src: &Packet) {
    dst.flow = src.flow;
    dst.len = src.len;
    dst.token = src.token;
}

/// Chunks an arena of `capacity` packets over `queues` queues allocates
/// (the bound of the module docs). Below `capacity` + 1 ≤ 2³⁰ for the
/// accepted sizes.
pub(crate) fn arena_chunks(queues: usize, capacity: usize) -> usize {
    let active = queues.min(capacity);
    (capacity.div_ceil(CHUNK_PACKETS) + active + active.div_ceil(2)).min(capacity)
}

impl PacketQueues {
    /// Largest arena accepted, in packets (a record's `start` is an arena
    /// slot, 4 × chunks, in a `u32`).
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
        ConfigError::check_range(
            "scheduler capacity (packets)",
            capacity,
            1..=Self::MAX_CAPACITY,
        )?;
        ConfigError::check_range("number of queues", queues, 1..=Self::MAX_CAPACITY)?;
        if per_queue_limit == Some(0) {
            return Err(ConfigError::out_of_range(
                "per-flow queue limit",
                0,
                "1.. packets",
            ));
        }
        let n_chunks = arena_chunks(queues, capacity);
        let chunks = vec![
            Chunk {
                pkts: [Packet::default(); CHUNK_PACKETS],
            };
            n_chunks
        ]
        .into_boxed_slice();
        // Reversed, so chunks are handed out in increasing order at first.
        let free = (0..n_chunks as u32).rev().collect();
        Ok(PacketQueues {
            chunks,
            links: vec![NIL; n_chunks].into_boxed_slice(),
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
        let off = fifo.next_off();
        let fresh = off == 0;
        // The chunk bound (module docs) makes the free stack non-empty
        // whenever `total < capacity`; the second test only keeps this
        // panic-free should that reasoning ever be wrong.
        if self.total >= self.capacity || (fresh && self.free_len == 0) {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::QueueFull,
            });
        }
        if fresh {
            self.free_len -= 1;
            let c = self.free[self.free_len];
            // A chunk a later push will take: start loading it now so that
            // its write does not stall on the miss.
            let ahead = self.free_len.saturating_sub(FRESH_AHEAD);
            if let Some(&n) = self.free.get(ahead) {
                prefetch_chunk(&self.chunks, n);
            }
            put(&mut self.chunks[c as usize].pkts[0], &pkt);
            if fifo.len == 0 {
                fifo.start = c * CHUNK;
            } else {
                self.links[fifo.tail as usize] = c;
            }
            fifo.tail = c;
        } else {
            put(&mut self.chunks[fifo.tail as usize].pkts[off], &pkt);
        }
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
        let c = fifo.head();
        let off = fifo.head_off();
        let pkt = self.chunks[c as usize].pkts[off];
        fifo.len -= 1;
        self.total -= 1;
        if fifo.len == 0 || off == CHUNK_PACKETS - 1 {
            // The head chunk is consumed (or the queue is empty): give it
            // back, and go on to the next one if there is one. An empty
            // queue's `start` is a chunk's first slot, so that its next
            // push takes a fresh chunk.
            fifo.start = if fifo.len == 0 {
                0
            } else {
                self.links[c as usize] * CHUNK
            };
            self.free[self.free_len] = c;
            self.free_len += 1;
        } else {
            fifo.start += 1;
            if off == 0 && fifo.len as usize >= CHUNK_PACKETS {
                // The queue has another chunk: start loading it now, so the
                // pop that reaches it finds it in cache.
                prefetch_chunk(&self.chunks, self.links[c as usize]);
            }
        }
        Some(pkt)
    }

    /// The oldest packet of queue `q`, left in place.
    #[inline(always)]
    pub fn front(&self, q: usize) -> Option<&Packet> {
        let fifo = self.fifos.get(q)?;
        if fifo.len == 0 {
            None
        } else {
            Some(&self.chunks[fifo.head() as usize].pkts[fifo.head_off()])
        }
    }

    /// Starts a read-ahead of the first `max_chunks` chunks (at least one)
    /// of queue `q`: reads its record and prefetches its head chunk and
    /// that chunk's link now, and each [`PacketQueues::scout_step`]
    /// prefetches the next ones. For an algorithm that knows which queues
    /// it will serve a few steps from now: several scouts walking different
    /// queues keep several independent cache misses in flight. A hint only:
    /// the contents never change, and a scout made stale by later pushes
    /// and pops only fetches lines in vain (every step is bounds-checked
    /// and the walk ends after `max_chunks`).
    #[inline]
    pub fn scout(&self, q: usize, max_chunks: u32) -> Scout {
        match self.fifos.get(q) {
            Some(f) if f.len != 0 => {
                self.prefetch_chunk_and_link(f.head());
                Scout {
                    chunk: f.head(),
                    left: f.chunks().min(max_chunks).saturating_sub(1),
                }
            }
            _ => Scout::DONE,
        }
    }
    /// Moves `scout` one chunk along its queue: reads the link (prefetched
    /// by the step before) and prefetches the chunk it names and that
    /// chunk's link; nothing when the walk is over.
    #[inline(always)]
    pub fn scout_step(&self, scout: &mut Scout) {
        if scout.left == 0 {
            return;
        }
        match self.links.get(scout.chunk as usize) {
            Some(&next) => {
                scout.chunk = next;
                scout.left -= 1;
                self.prefetch_chunk_and_link(next);
            }
            None => *scout = Scout::DONE,
        }
    }

    /// Prefetches chunk `c` and its link, which the next step of a walk
    /// over it reads.
    #[inline(always)]
    fn prefetch_chunk_and_link(&self, c: u32) {
        prefetch_chunk(&self.chunks, c);
        if let Some(link) = self.links.get(c as usize) {
            crate::prefetch::prefetch(link);
        }
    }

    /// The packets of queue `q`, oldest first (nothing for a queue that
    /// does not exist). O(1) per packet.
    pub fn iter(&self, q: usize) -> impl Iterator<Item = &Packet> + '_ {
        let (mut chunk, mut off, len) = match self.fifos.get(q) {
            Some(f) => (f.head(), f.head_off(), f.len as usize),
            None => (NIL, 0, 0),
        };
        (0..len).map(move |_| {
            let p = &self.chunks[chunk as usize].pkts[off];
            off += 1;
            if off == CHUNK_PACKETS {
                off = 0;
                // The tail chunk's link is stale, but it is read only
                // after the queue's last packet, and never followed.
                chunk = self.links[chunk as usize];
            }
            p
        })
    }

    /// Removes from queue `q` every packet for which `keep` is false,
    /// handing each to `removed` in queue order; the others keep their
    /// order. O(len(q)); allocates nothing (the queue is rotated in place:
    /// every pop frees the room its push needs).
    pub fn retain(
        &mut self,
        q: usize,
        mut keep: impl FnMut(&Packet) -> bool,
        mut removed: impl FnMut(Packet),
    ) {
        for _ in 0..self.len(q) {
            let Some(p) = self.pop(q) else { break };
            if keep(&p) {
                // Cannot fail: the pop just made room in the arena and in
                // the queue's limit.
                if let Err(rej) = self.push(q, p) {
                    removed(rej.packet);
                }
            } else {
                removed(p);
            }
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

/// Starts loading chunk `c` without waiting for it.
#[inline(always)]
fn prefetch_chunk(chunks: &[Chunk], c: u32) {
    if let Some(ch) = chunks.get(c as usize) {
        crate::prefetch::prefetch(ch);
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

    /// Scout steps over queue `q`: the chunks it spans, less the head one.
    fn scout_steps(q: &PacketQueues, i: usize) -> u32 {
        let mut s = q.scout(i, u32::MAX);
        let mut steps = 0;
        while !s.is_done() {
            q.scout_step(&mut s);
            steps += 1;
        }
        steps
    }

    #[test]
    fn a_queue_crosses_chunks_in_order_and_gives_each_back() {
        let mut q = PacketQueues::new(1, 16, None).unwrap();
        let pkt = |t| Packet::new(FlowId(0), 1, t);
        assert_eq!(q.free_len, arena_chunks(1, 16));
        for t in 0..3 {
            q.push(0, pkt(t)).unwrap();
        }
        assert_eq!(q.free_len, arena_chunks(1, 16) - 1, "one chunk in use");
        assert_eq!(q.pop(0).unwrap().token, 0);
        assert_eq!(q.pop(0).unwrap().token, 1);
        // The oldest packet sits at position 2 of the head chunk; six more
        // packets fill that chunk and spill into a second one.
        for t in 3..9 {
            q.push(0, pkt(t)).unwrap();
        }
        assert_eq!(q.len(0), 7);
        assert_eq!(q.free_len, arena_chunks(1, 16) - 3);
        assert_eq!(scout_steps(&q, 0), 2, "three chunks: 2 + 7 slots");
        assert_eq!(q.front(0).map(|p| p.token), Some(2));
        assert_eq!(q.pop(0).unwrap().token, 2);
        assert_eq!(q.pop(0).unwrap().token, 3);
        assert_eq!(
            q.free_len,
            arena_chunks(1, 16) - 2,
            "the head chunk came back"
        );
        let order: Vec<u64> = std::iter::from_fn(|| q.pop(0).map(|p| p.token)).collect();
        assert_eq!(order, [4, 5, 6, 7, 8]);
        assert_eq!(
            q.free_len,
            arena_chunks(1, 16),
            "an empty queue holds no chunk"
        );
        assert_eq!(q.total(), 0);
    }

    #[test]
    fn queues_straddling_two_chunks_still_reach_capacity() {
        // The worst case of the chunk bound: every queue holds two packets
        // in two chunks (the last slot of one, the first of the next).
        for queues in [1usize, 2, 3, 5, 8] {
            let capacity = 2 * queues + 2;
            let mut q = PacketQueues::new(queues, capacity, None).unwrap();
            let mut token = 0;
            for i in 0..queues {
                for _ in 0..4 {
                    q.push(i, Packet::new(FlowId(0), 1, token)).unwrap();
                    token += 1;
                }
                for _ in 0..3 {
                    q.pop(i).unwrap();
                }
                q.push(i, Packet::new(FlowId(0), 1, token)).unwrap();
                token += 1;
                assert_eq!(scout_steps(&q, i), 1, "queue {i} spans two chunks");
            }
            while q.total() < capacity {
                q.push(0, Packet::new(FlowId(0), 1, token)).unwrap();
                token += 1;
            }
            assert_eq!(
                q.push(0, Packet::default()).unwrap_err().reason,
                DropReason::QueueFull
            );
        }
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
            // n pushed packets fill ⌈n / 4⌉ chunks: the scout loads the
            // head chunk now and one more per step.
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
    fn iter_and_retain_follow_a_vecdeque_model() {
        use std::collections::VecDeque;
        let mut rng = fastrand::Rng::with_seed(3);
        let mut q = PacketQueues::new(3, 40, None).unwrap();
        let mut model = vec![VecDeque::new(); 3];
        for token in 0..5_000u64 {
            let i = rng.usize(..3);
            match rng.u8(..10) {
                0..=5 => {
                    let p = Packet::new(FlowId(rng.u32(..4)), 1, token);
                    if q.push(i, p).is_ok() {
                        model[i].push_back(p);
                    }
                }
                6..=8 => assert_eq!(q.pop(i), model[i].pop_front()),
                _ => {
                    let drop = FlowId(rng.u32(..4));
                    let mut out = Vec::new();
                    q.retain(i, |p| p.flow != drop, |p| out.push(p));
                    let expect: Vec<Packet> = model[i]
                        .iter()
                        .copied()
                        .filter(|p| p.flow == drop)
                        .collect();
                    model[i].retain(|p| p.flow != drop);
                    assert_eq!(out, expect);
                }
            }
            let got: Vec<Packet> = q.iter(i).copied().collect();
            assert_eq!(got, model[i].iter().copied().collect::<Vec<_>>());
        }
        assert_eq!(q.iter(9).count(), 0);
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
