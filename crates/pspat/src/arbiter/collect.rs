//! Step 1 of the round: collect (\[J\] §3.1, Fig. 5). For each client list
//! whose read gate Δ_A expired, take its announcements, put announced
//! mailboxes in service, drain every in-service mailbox into the scheduler
//! and free the mailbox's consumed lines right after, as the reference kernel
//! does. A mailbox found empty on `retire_after_reads` consecutive reads
//! leaves service through `pspat_mailbox::try_retire`, whose argument shows
//! that no packet is stranded; an abandoned mailbox (its client dropped) is
//! retired once drained, and the client's slot marked `detached` so that
//! it can be handed to a new client (see the `shared` module).
//!
//! # Complexity
//! Per list with an expired gate: `max_clients / 64` bitmap words and one
//! slot read per in-service mailbox; per packet one slot and one enqueue.
//!
//! # Deviation
//! After a scheduler drop the rest of that mailbox is still offered packet
//! by packet (the reference drops the rest); each drop is counted with its
//! own reason and reported to the client through the mailbox's
//! backpressure flag.

use std::num::NonZeroU64;
use std::sync::Arc;

use pspat_mailbox::{try_retire, Consumer, Producer};
use pspat_sched::{Instant, Packet, Scheduler};

use super::{Arbiter, Sink};
use crate::shared::{ClientShared, Registration, Shared};
use crate::stats::NREASONS;
use crate::sync::Ordering;
use crate::token::{ClientSlot, DescRef};
use crate::TxBackend;

/// Packets a mailbox drain takes before it enqueues them: where the arbiter's
/// thread stamps from the clock (a scheduler that counts from arrival), one
/// clock read per chunk (some 20 ns over up to 64 packets) makes every stamp
/// later than its packet's submission.
pub(crate) const STAMP_CHUNK: usize = 64;

/// The arbiter's view of one client.
pub(crate) struct ArbClient {
    pub(crate) shared: Arc<ClientShared>,
    pub(crate) consumer: Consumer<NonZeroU64>,
    pub(crate) grants: Option<Producer<NonZeroU64>>,
    idle_reads: u32,
    in_service: bool,
    retired: bool,
    /// Announced since the last drain: look at `is_abandoned` (a client
    /// announces after dropping its producer, so idle mailboxes cost one
    /// slot load per read, not two).
    check_abandoned: bool,
}

impl ArbClient {
    /// The client's bit was taken from a list: put it in service there.
    fn announced(&mut self, id: u32, list: &mut ListState) {
        self.check_abandoned = true;
        if !self.in_service && !self.retired {
            self.in_service = true;
            self.idle_reads = 0;
            list.service.push(id);
        }
    }
}

/// One client list as the arbiter tracks it.
pub(crate) struct ListState {
    /// Δ_A gate: the list is read again at or after this time (ns).
    next_read: u64,
    /// In-service client ids.
    service: Vec<u32>,
}

impl ListState {
    pub(crate) fn new(max_clients: usize) -> Self {
        ListState {
            next_read: 0,
            service: Vec::with_capacity(max_clients),
        }
    }
}

impl<S: Scheduler, B: TxBackend> Arbiter<S, B> {
    /// Takes clients created since the last look.
    pub(crate) fn take_registrations(&mut self) {
        // Relaxed peek first: a swap is a locked RMW, too dear for every
        // round. Acquire swap: pairs with the Release store in
        // `Runtime::client`.
        if !self.rt.registry_dirty.load(Ordering::Relaxed)
            || !self.rt.registry_dirty.swap(false, Ordering::Acquire)
        {
            return;
        }
        let pending: Vec<Registration> = std::mem::take(&mut self.rt.registry().pending);
        for r in pending {
            let id = r.shared.id as usize;
            // A reused slot: the previous client's mailbox was retired
            // (`detached`) before the slot was handed on, so dropping its
            // state here loses nothing.
            debug_assert!(self.clients[id].as_ref().is_none_or(|c| c.retired));
            self.clients[id] = Some(ArbClient {
                shared: r.shared,
                consumer: r.consumer,
                grants: r.grants,
                idle_reads: 0,
                in_service: false,
                retired: false,
                check_abandoned: false,
            });
            self.registered += 1;
        }
    }

    /// Reads every list whose gate expired at `now`; returns packets taken.
    pub(crate) fn collect_due(&mut self, now: Instant) -> usize {
        let delta_a = self.rt.cfg.delta_a_ns;
        let mut n = 0;
        for l in 0..self.lists.len() {
            if now.as_nanos() >= self.lists[l].next_read {
                self.lists[l].next_read = now.as_nanos() + delta_a;
                n += self.collect(l);
            }
        }
        n
    }

    /// Reads every list now, gate or not (shutdown: drain and retire the
    /// abandoned mailboxes).
    pub(crate) fn collect_all(&mut self) -> usize {
        (0..self.lists.len()).map(|l| self.collect(l)).sum()
    }

    /// Rescan after the sleep fence: anything announced, or any in-service
    /// mailbox non-empty?
    pub(crate) fn has_pending_input(&self) -> bool {
        // Ordered by the SeqCst fence of `Parker::prepare_sleep`; a bit seen
        // here is taken with the Acquire swap in `collect` before anything
        // it announces is read.
        if self.rt.lists.iter().any(|l| l.has_announcements()) {
            return true;
        }
        self.lists.iter().any(|l| {
            l.service.iter().any(|&id| {
                self.clients[id as usize]
                    .as_ref()
                    .is_some_and(|c| !c.consumer.is_empty())
            })
        })
    }

    /// Reads list `l`: announcements, then every in-service mailbox.
    fn collect(&mut self, l: usize) -> usize {
        // No `Arc::clone` of `rt` here: its reference count shares a block
        // with fields every client reads on each submit (`lists`, `clock`),
        // and two RMWs per round cost the client a miss per burst.
        {
            let Arbiter {
                rt,
                clients,
                lists,
                late,
                ..
            } = self;
            rt.lists[l].take(|id| match clients[id as usize].as_mut() {
                Some(c) if !c.retired => c.announced(id, &mut lists[l]),
                // Not registered yet, or a retired client whose slot may
                // have a new registration waiting.
                _ => late.push(id),
            });
        }
        if !self.late.is_empty() {
            // Announced before the arbiter took the registration: the bit's
            // Acquire swap made the registration visible, so take it now.
            // (A stale bit of a retired client with no successor yet is
            // ignored by `announced`.)
            self.take_registrations();
            for i in 0..self.late.len() {
                let id = self.late[i];
                if let Some(c) = self.clients[id as usize].as_mut() {
                    c.announced(id, &mut self.lists[l]);
                }
            }
            self.late.clear();
        }
        let mut n = 0;
        let mut i = 0;
        while i < self.lists[l].service.len() {
            let id = self.lists[l].service[i] as usize;
            let (got, leave) = self.drain_mailbox(id);
            n += got;
            if leave {
                self.lists[l].service.swap_remove(i);
            } else {
                i += 1;
            }
        }
        n
    }

    /// Drains one mailbox into the scheduler: every packet at the round's
    /// `stamp`, or, when the round restamps, a chunk of at most
    /// [`STAMP_CHUNK`] packets at a time, each at a clock read taken after
    /// it (`drain_stamping_chunks`); returns (packets, leaves service).
    fn drain_mailbox(&mut self, id: usize) -> (usize, bool) {
        let retire_after = self.rt.cfg.retire_after_reads;
        let Arbiter {
            sched,
            clients,
            sink,
            rt,
            stamp,
            restamp,
            ..
        } = self;
        let Some(c) = clients[id].as_mut() else {
            return (0, true);
        };
        // Checked before popping: once abandoned, `pop` sees every value.
        // Only after an announcement: a dropping client announces after
        // its producer is gone (Release), and our swap of the bitmap word
        // acquired that announcement.
        let abandoned = std::mem::take(&mut c.check_abandoned) && c.consumer.is_abandoned();
        let n = if *restamp {
            drain_stamping_chunks(sched, rt, sink, c, id, stamp)
        } else {
            let now = *stamp;
            let mut n = 0;
            while let Some(v) = c.consumer.pop() {
                n += 1;
                let (r, pkt) = ClientSlot::decode(v).packet(id as u32);
                enqueue_packet(sched, rt, sink, c, r, pkt, now);
            }
            n
        };
        if n > 0 {
            c.consumer.release();
            c.idle_reads = 0;
        } else {
            c.idle_reads += 1;
        }
        if abandoned {
            c.consumer.release();
            c.in_service = false;
            c.retired = true;
            // Release: pairs with the Acquire load in `Registry::reclaim`;
            // the arbiter touches this client's mailbox no more.
            c.shared.detached.store(true, Ordering::Release);
            self.retired += 1;
            return (n, true);
        }
        if n == 0 && c.idle_reads >= retire_after {
            if try_retire(&rt.lists, || c.consumer.is_empty()) {
                c.in_service = false;
                return (0, true);
            }
            c.idle_reads = 0;
        }
        (n, false)
    }
}

/// Drains client `id`'s mailbox a chunk of at most [`STAMP_CHUNK`] packets
/// at a time, each chunk enqueued at a clock read taken after it was
/// popped (raising `stamp` to it); returns packets taken. Not inlined: its
/// chunk buffer stays out of the frame of the plain drain.
#[inline(never)]
fn drain_stamping_chunks<S: Scheduler, B: TxBackend>(
    sched: &mut S,
    rt: &Shared,
    sink: &mut Sink<B>,
    c: &mut ArbClient,
    id: usize,
    stamp: &mut Instant,
) -> usize {
    let mut chunk = [None::<NonZeroU64>; STAMP_CHUNK];
    let mut n = 0;
    loop {
        let mut k = 0;
        while k < STAMP_CHUNK {
            let Some(v) = c.consumer.pop() else { break };
            chunk[k] = Some(v);
            k += 1;
        }
        if k == 0 {
            return n;
        }
        // Every packet of the chunk was in the mailbox before this read,
        // so none is stamped before it was submitted.
        *stamp = (*stamp).max(rt.clock.now());
        for v in chunk[..k].iter().flatten() {
            let (r, pkt) = ClientSlot::decode(*v).packet(id as u32);
            enqueue_packet(sched, rt, sink, c, r, pkt, *stamp);
        }
        n += k;
        if k < STAMP_CHUNK {
            return n;
        }
    }
}

/// Enqueues `pkt`, of descriptor `r`, at `now`; a scheduler drop is
/// counted with its reason, reported through the client's backpressure
/// flag, and its descriptor recycled.
#[inline(always)]
fn enqueue_packet<S: Scheduler, B: TxBackend>(
    sched: &mut S,
    rt: &Shared,
    sink: &mut Sink<B>,
    c: &mut ArbClient,
    r: DescRef,
    pkt: Packet,
    now: Instant,
) {
    if let Err(rej) = sched.enqueue(now, pkt) {
        rt.drops[r.client as usize * NREASONS + rej.reason.index()].add(1);
        c.consumer.set_backpressure();
        sink.dropped(r, c);
    }
}
