//! Indexed FIFO queues over one preallocated packet arena.
//!
//! Every algorithm keeps its packets here: queue `i` is usually flow `i`
//! (PRIO uses one queue per priority). Each queue has a 64-byte record
//! holding its bookkeeping and a *stage* of up to [`STAGE_PACKETS`] of its
//! newest packets; older packets sit in an arena of 64-byte *chunks* of
//! [`CHUNK_PACKETS`] packets, a singly linked list per queue whose links live
//! in a separate array. A push writes into the stage; when the stage is full
//! the push moves the staged packets and the new one into a fresh chunk in
//! one go (a *spill*). A pop takes from the head chunk while the queue has
//! chunks, then from the stage. Free chunks sit on a stack of indices, so
//! `push` and `pop` are O(1) and nothing allocates after
//! [`PacketQueues::new`].
//!
//! Why this layout: with deep queues over many flows (the dummynet harness
//! keeps up to 20 packets per flow over 32k flows, about 650 000 packets)
//! almost every access to another flow's packets misses the cache, so the
//! layout decides the cost.
//! * A push touches one line, the queue's record (bookkeeping and stage
//!   together), and, once every [`CHUNK_PACKETS`] pushes, a fresh chunk from
//!   the top of the free stack: the chunk most recently freed, usually
//!   still cached; when it is not (a long fill after a long drain), each
//!   spill prefetches the chunk [`SPILL_AHEAD`] spills further down the
//!   stack, so the miss is paid while other work goes on. A push never
//!   writes into an older, colder chunk, except to set one link in the
//!   compact link array.
//! * Chunks are always full when written, and a chunk holds four packets (the
//!   links are elsewhere), so a burst from one flow (DRR serves a flow until
//!   its credit runs out) misses once per four packets; a queue of at most
//!   [`STAGE_PACKETS`] packets (the common case of many short queues) has no
//!   chunk at all.
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
//! # Guarantees
//! * FIFO within each queue.
//! * The arena holds exactly `capacity` packets, however they are spread
//!   over the queues: a full arena or a queue at its limit refuses with
//!   [`DropReason`] and hands the packet back. (A queue's chunks are full but
//!   for its head chunk, which holds at least one packet, so a queue whose
//!   chunks hold a packets has at most 1 + (a − 1)/4 chunks, and
//!   ⌈capacity/4⌉ + min(queues, capacity) chunks always suffice; that many
//!   are allocated, and never more than `capacity`.)
//! * Memory: 64 bytes per queue, plus 72 bytes per chunk (the chunk, its
//!   link and its free-stack slot): about 18 bytes per packet of capacity
//!   and up to 72 more per queue.

use crate::{ConfigError, DropReason, Packet, Rejected};

const NIL: u32 = u32::MAX;

/// Packets per arena chunk (one 64-byte cache line; links are kept apart).
pub const CHUNK_PACKETS: usize = 4;

/// Packets a queue's record holds itself (its newest ones).
pub const STAGE_PACKETS: usize = 3;

/// How many spills ahead a push prefetches the free stack's chunks.
const SPILL_AHEAD: usize = 8;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk {
    pkts: [Packet; CHUNK_PACKETS],
}

/// One queue in one cache line: its chunk list (`head`, `tail`, and how
/// many packets of the head chunk were consumed), its length and its stage
/// (a ring: `stage_len` packets from `stage_start`).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Fifo {
    head: u32,
    tail: u32,
    /// Packets in the queue: in its chunks, then in its stage.
    len: u32,
    head_off: u8,
    stage_start: u8,
    stage_len: u8,
    stage: [Packet; STAGE_PACKETS],
}

impl Fifo {
    /// Packets held in chunks.
    #[inline(always)]
    fn in_chunks(&self) -> u32 {
        self.len - u32::from(self.stage_len)
    }
}

const EMPTY_FIFO: Fifo = Fifo {
    head: NIL,
    tail: NIL,
    len: 0,
    head_off: 0,
    stage_start: 0,
    stage_len: 0,
    stage: [Packet::new(crate::FlowId(0), 0, 0); STAGE_PACKETS],
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

/// A stage position: the stage is a ring of [`STAGE_PACKETS`] slots, and
/// `i` is below twice that.
#[inline(always)]
fn wrap(i: usize) -> usize {
    if i >= STAGE_PACKETS {
        i - STAGE_PACKETS
    } else {
        i
    }
}

/// Copies a packet field by field: a packet written in pieces just before
/// (by the caller, or by a recent push into a stage) would make one 16-byte
/// copy wait for those stores to reach the cache (a store-forwarding
/// stall), and with them for every older store still missing the cache.
#[inline(always)]
fn put(dst: &mut Packet, src: &Packet) {
    dst.flow = src.flow;
    dst.len = src.len;
    dst.token = src.token;
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
        // See the module docs for the bound; below u32::MAX by MAX_CAPACITY.
        let n_chunks = (capacity.div_ceil(CHUNK_PACKETS) + queues.min(capacity)).min(capacity);
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
        let staged = usize::from(fifo.stage_len);
        let spill = staged == STAGE_PACKETS;
        // The chunk bound (module docs) makes the free stack non-empty
        // whenever `total < capacity`; the second test only keeps this
        // panic-free should that reasoning ever be wrong.
        if self.total >= self.capacity || (spill && self.free_len == 0) {
            return Err(Rejected {
                packet: pkt,
                reason: DropReason::QueueFull,
            });
        }
        if spill {
            self.free_len -= 1;
            let c = self.free[self.free_len];
            // A chunk a later spill will take: start loading it now so that
            // its fill does not stall on the miss.
            let ahead = self.free_len.saturating_sub(SPILL_AHEAD);
            if let Some(&n) = self.free.get(ahead) {
                prefetch_chunk(&self.chunks, n);
            }
            let chunk = &mut self.chunks[c as usize];
            let start = usize::from(fifo.stage_start);
            for (i, dst) in chunk.pkts[..STAGE_PACKETS].iter_mut().enumerate() {
                put(dst, &fifo.stage[wrap(start + i)]);
            }
            put(&mut chunk.pkts[STAGE_PACKETS], &pkt);
            if fifo.in_chunks() == 0 {
                fifo.head = c;
                fifo.head_off = 0;
            } else {
                self.links[fifo.tail as usize] = c;
            }
            fifo.tail = c;
            fifo.stage_start = 0;
            fifo.stage_len = 0;
        } else {
            put(
                &mut fifo.stage[wrap(usize::from(fifo.stage_start) + staged)],
                &pkt,
            );
            fifo.stage_len += 1;
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
        let in_chunks = fifo.in_chunks();
        fifo.len -= 1;
        self.total -= 1;
        if in_chunks == 0 {
            let start = usize::from(fifo.stage_start);
            let pkt = fifo.stage[start];
            fifo.stage_len -= 1;
            fifo.stage_start = wrap(start + 1) as u8;
            return Some(pkt);
        }
        let c = fifo.head;
        let pkt = self.chunks[c as usize].pkts[usize::from(fifo.head_off)];
        fifo.head_off += 1;
        if usize::from(fifo.head_off) == CHUNK_PACKETS {
            fifo.head = self.links[c as usize];
            fifo.head_off = 0;
            self.free[self.free_len] = c;
            self.free_len += 1;
        } else if fifo.head_off == 1 && in_chunks as usize > CHUNK_PACKETS {
            // The queue has another chunk: start loading it now, so the pop
            // that reaches it finds it in cache.
            prefetch_chunk(&self.chunks, self.links[c as usize]);
        }
        Some(pkt)
    }

    /// The oldest packet of queue `q`, left in place.
    #[inline(always)]
    pub fn front(&self, q: usize) -> Option<&Packet> {
        let fifo = self.fifos.get(q)?;
        if fifo.len == 0 {
            None
        } else if fifo.in_chunks() == 0 {
            Some(&fifo.stage[usize::from(fifo.stage_start)])
        } else {
            Some(&self.chunks[fifo.head as usize].pkts[usize::from(fifo.head_off)])
        }
    }

    /// Starts a read-ahead of the first `max_chunks` chunks (at least one)
    /// of queue `q`: reads its record (with the stage) and prefetches its
    /// head chunk and that chunk's link now, and each
    /// [`PacketQueues::scout_step`] prefetches the next ones. For
    /// an algorithm that knows which queues it will serve a few steps from
    /// now: several scouts walking different queues keep several independent
    /// cache misses in flight. A hint only: the contents never change, and a
    /// scout made stale by later pushes and pops only fetches lines in vain
    /// (every step is bounds-checked and the walk ends after `max_chunks`).
    #[inline]
    pub fn scout(&self, q: usize, max_chunks: u32) -> Scout {
        match self.fifos.get(q) {
            Some(f) if f.in_chunks() != 0 => {
                self.prefetch_chunk_and_link(f.head);
                let chunks = (u32::from(f.head_off) + f.in_chunks()).div_ceil(CHUNK_PACKETS as u32);
                Scout {
                    chunk: f.head,
                    left: chunks.min(max_chunks).saturating_sub(1),
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
        let (fifo, in_chunks) = match self.fifos.get(q) {
            Some(f) => (Some(f), f.in_chunks() as usize),
            None => (None, 0),
        };
        let mut chunk = fifo.map_or(NIL, |f| f.head);
        let mut off = fifo.map_or(0, |f| usize::from(f.head_off));
        let chunked = (0..in_chunks).map(move |_| {
            let p = &self.chunks[chunk as usize].pkts[off];
            off += 1;
            if off == CHUNK_PACKETS {
                off = 0;
                chunk = self.links[chunk as usize];
            }
            p
        });
        let staged = fifo.into_iter().flat_map(|f| {
            let start = usize::from(f.stage_start);
            (0..usize::from(f.stage_len)).map(move |i| &f.stage[wrap(start + i)])
        });
        chunked.chain(staged)
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

    #[test]
    fn a_stage_that_wrapped_spills_in_arrival_order() {
        let mut q = PacketQueues::new(1, 16, None).unwrap();
        let pkt = |t| Packet::new(FlowId(0), 1, t);
        for t in 0..3 {
            q.push(0, pkt(t)).unwrap();
        }
        // Popping from the stage moves its start, so the next push wraps
        // around the ring; the one after spills the stage (oldest first)
        // and itself into a chunk.
        assert_eq!(q.pop(0).unwrap().token, 0);
        q.push(0, pkt(3)).unwrap();
        assert_eq!(q.scout(0, 4), Scout::DONE, "no chunk yet");
        q.push(0, pkt(4)).unwrap();
        assert_ne!(q.scout(0, 4), Scout::DONE, "the spill made a chunk");
        q.push(0, pkt(5)).unwrap();
        q.push(0, pkt(6)).unwrap();
        assert_eq!(q.front(0).map(|p| p.token), Some(1));
        let order: Vec<u64> = std::iter::from_fn(|| q.pop(0).map(|p| p.token)).collect();
        assert_eq!(order, [1, 2, 3, 4, 5, 6]);
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
            // Every 4th push spills the stage (3) and the new packet into a
            // chunk, so n pushed packets fill n / 4 chunks and leave n % 4
            // in the stage: the scout loads the head chunk now and one more
            // per step.
            let mut s = q.scout(0, 16);
            let mut steps = 0;
            while !s.is_done() {
                q.scout_step(&mut s);
                steps += 1;
            }
            assert_eq!(steps, (n / CHUNK_PACKETS as u64).saturating_sub(1));
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
