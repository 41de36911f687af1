//! The arbiter round (\[J\] Fig. 5, `REFERENCE.md` §1.3) and the dispatcher
//! loop (\[J\] §3.3).
//!
//! Round: read the clock once; for each client list whose read gate Δ_A
//! expired, take its announcements and drain its in-service mailboxes into
//! the scheduler (freeing mailbox lines right after, as the reference
//! kernel does); then let the link emulator release up to `arb_batch`
//! decisions while `link_idle <= now`; hand them to the backend (T = 0), the
//! dispatchers' TX mailboxes, or the clients' grant mailboxes; return
//! descriptors and publish counters once per round.
//!
//! # Complexity
//! O(1) per packet plus the scheduler's cost; O(lists + in-service
//! mailboxes + bitmap words) per round. No allocation after start-up (the
//! client table grows only when a client is created), no `dyn` per packet.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::Arc;

use pspat_mailbox::{Consumer, Producer};
use pspat_sched::{FlowId, Instant, LinkEmulator, Packet, Scheduler};

use crate::client::{decode_slot, encode_grant};
use crate::runtime::{ClientShared, Registration, Shared, NONE};
use crate::stats::NREASONS;
use crate::sync::{fence, Ordering};
use crate::{ArbiterStats, TxBackend, TxMode, TxPacket};

/// Link-busy waits shorter than this are spun, longer ones slept.
const LINK_SPIN_NS: u64 = 50_000;
/// Safety-net park timeout.
const PARK_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// Descriptors returned to their owners, aggregated per 64-bit word.
pub(crate) struct Recycler {
    words: usize,
    pending: Vec<u64>,
    dirty: Vec<u32>,
}

impl Recycler {
    pub(crate) fn new(max_clients: usize, descs: usize) -> Self {
        let words = descs / 64;
        Recycler {
            words,
            pending: vec![0; max_clients * words],
            // At most one entry per word: never grows after start-up.
            dirty: Vec::with_capacity(max_clients * words),
        }
    }

    #[inline]
    pub(crate) fn mark(&mut self, client: u32, desc: u32) {
        let idx = client as usize * self.words + desc as usize / 64;
        if self.pending[idx] == 0 {
            self.dirty.push(idx as u32);
        }
        self.pending[idx] |= 1 << (desc % 64);
    }

    /// Publishes every pending word; `lookup(client)` gives its shared state.
    pub(crate) fn flush<'a>(&mut self, lookup: impl Fn(usize) -> &'a ClientShared) {
        for &idx in &self.dirty {
            let idx = idx as usize;
            let c = lookup(idx / self.words);
            // Release: pairs with the owner's Acquire swap in `alloc`; our
            // reads of these descriptors happen before it reuses them.
            c.done[idx % self.words].fetch_or(self.pending[idx], Ordering::Release);
            self.pending[idx] = 0;
        }
        self.dirty.clear();
    }
}

struct ArbClient {
    shared: Arc<ClientShared>,
    consumer: Consumer<NonZeroU64>,
    grants: Option<Producer<NonZeroU64>>,
    idle_reads: u32,
    in_service: bool,
    retired: bool,
    /// Announced since the last drain: look at `is_abandoned` (a client
    /// announces after dropping its producer, so idle mailboxes cost one
    /// slot load per read, not two).
    check_abandoned: bool,
}

struct ListState {
    next_read: u64,
    service: Vec<u32>,
}

enum Out<B> {
    Direct {
        backend: B,
        batch: Vec<TxPacket>,
    },
    Dispatch {
        tx: Vec<Producer<NonZeroU64>>,
        backlog: Vec<VecDeque<NonZeroU64>>,
        pushed: Vec<bool>,
    },
    Grant,
}

pub(crate) struct Arbiter<S, B> {
    rt: Arc<Shared>,
    sched: S,
    link: LinkEmulator,
    clients: Vec<Option<ArbClient>>,
    lists: Vec<ListState>,
    out: Out<B>,
    released: Vec<Packet>,
    recycler: Recycler,
    retired: usize,
    registered: usize,
    stats: ArbiterStats,
}

impl<S: Scheduler, B: TxBackend> Arbiter<S, B> {
    pub(crate) fn new(
        rt: Arc<Shared>,
        sched: S,
        link: LinkEmulator,
        direct: Option<B>,
        tx: Vec<Producer<NonZeroU64>>,
    ) -> Self {
        let cfg = &rt.cfg;
        let batch = cfg.arb_batch as usize;
        let out = match (cfg.tx_mode, direct) {
            (TxMode::Client, _) => Out::Grant,
            (TxMode::Dispatcher, Some(backend)) => Out::Direct {
                backend,
                batch: Vec::with_capacity(batch),
            },
            (TxMode::Dispatcher, None) => Out::Dispatch {
                backlog: tx.iter().map(|_| VecDeque::with_capacity(batch)).collect(),
                pushed: vec![false; tx.len()],
                tx,
            },
        };
        let lists = (0..rt.lists.len())
            .map(|_| ListState {
                next_read: 0,
                service: Vec::with_capacity(cfg.max_clients),
            })
            .collect();
        let recycler = Recycler::new(cfg.max_clients, cfg.descriptors_per_client);
        let mut clients = Vec::with_capacity(cfg.max_clients);
        clients.resize_with(cfg.max_clients, || None);
        Arbiter {
            sched,
            link,
            clients,
            lists,
            out,
            released: Vec::with_capacity(batch),
            recycler,
            retired: 0,
            registered: 0,
            stats: ArbiterStats::default(),
            rt,
        }
    }

    fn take_registrations(&mut self) {
        // Relaxed peek first: a swap is a locked RMW, too dear for every
        // round. Acquire swap: pairs with the Release store in
        // `Runtime::client`.
        if !self.rt.registry_dirty.load(Ordering::Relaxed)
            || !self.rt.registry_dirty.swap(false, Ordering::Acquire)
        {
            return;
        }
        let pending: Vec<Registration> = match self.rt.registry.lock() {
            Ok(mut r) => std::mem::take(&mut r.pending),
            Err(p) => std::mem::take(&mut p.into_inner().pending),
        };
        for r in pending {
            let id = r.shared.id as usize;
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

    pub(crate) fn run(mut self) -> (Option<B>, ArbiterStats) {
        let delta_a = self.rt.cfg.delta_a_ns;
        let spin_ns = self.rt.cfg.spin_ns;
        let mut idle_since: Option<u64> = None;
        let mut unkicked = false;
        // Start of the previous round if it did work: its duration ends at
        // this round's clock read (one clock read per round, not two).
        let mut busy_since: Option<Instant> = None;
        loop {
            let now = self.rt.clock.now();
            if let Some(start) = busy_since.take() {
                self.stats.busy_round_ns += now.saturating_nanos_since(start);
            }
            self.take_registrations();
            if self.sched.is_empty() {
                // The link was idle since the last round (possibly a long
                // sleep): restart it at `now` so no credit accumulates
                // (`REFERENCE.md` §1.3). With an empty scheduler this only
                // sets `link_idle = now`.
                self.link.release(now, &mut self.sched, |_| {});
            }
            let mut work = 0usize;
            for l in 0..self.lists.len() {
                if now.as_nanos() >= self.lists[l].next_read {
                    self.lists[l].next_read = now.as_nanos() + delta_a;
                    work += self.collect(l, now);
                }
            }
            work += self.release(now);
            self.stats.rounds += 1;
            if work > 0 {
                self.stats.busy_rounds += 1;
                busy_since = Some(now);
                if unkicked {
                    self.stats.unrequested_wakeups_with_work += 1;
                }
                unkicked = false;
                idle_since = None;
                if self.stats.busy_rounds.is_multiple_of(64) {
                    self.publish_stats();
                }
                continue;
            }
            unkicked = false;
            if !self.sched.is_empty() || self.has_backlog() {
                let wait = self.link.link_idle().saturating_nanos_since(now);
                if wait > LINK_SPIN_NS {
                    std::thread::sleep(std::time::Duration::from_nanos(wait - LINK_SPIN_NS / 2));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            if self.can_exit() {
                break;
            }
            let since = *idle_since.get_or_insert(now.as_nanos());
            if now.as_nanos() - since < spin_ns {
                std::hint::spin_loop();
                continue;
            }
            // Sleep protocol: flag, fence, rescan (module docs of `runtime`).
            self.rt.arbiter_sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.pending_work() {
                // Relaxed: only we and kickers write it; a kicker's swap to
                // false is equivalent.
                self.rt.arbiter_sleeping.store(false, Ordering::Relaxed);
                idle_since = None;
                continue;
            }
            self.publish_stats();
            self.stats.sleeps += 1;
            let parked = std::time::Instant::now();
            std::thread::park_timeout(PARK_TIMEOUT);
            // The flag still set after a full timeout: nobody kicked us. (An
            // early return is a stale unpark token from a kick that raced
            // with a rescan that found work anyway, or a spurious wake-up:
            // not a lost wake-up.)
            let timed_out = parked.elapsed() >= PARK_TIMEOUT;
            unkicked = self.rt.arbiter_sleeping.swap(false, Ordering::AcqRel) && timed_out;
            idle_since = None;
        }
        self.flush_out(self.rt.clock.now());
        // Release: pairs with the dispatchers' Acquire load; every TX push
        // happens before it.
        self.rt.arbiter_done.store(true, Ordering::Release);
        for d in self.rt.dispatchers.iter() {
            if let Some(t) = d.thread.get() {
                t.unpark();
            }
        }
        self.publish_stats();
        let backend = match self.out {
            Out::Direct { backend, .. } => Some(backend),
            _ => None,
        };
        (backend, self.stats)
    }

    fn publish_stats(&self) {
        let a = &self.rt.arb_stats;
        a.rounds.set(self.stats.rounds);
        a.busy_rounds.set(self.stats.busy_rounds);
        a.busy_round_ns.set(self.stats.busy_round_ns);
        a.sleeps.set(self.stats.sleeps);
        a.decisions.set(self.stats.decisions);
        a.unrequested.set(self.stats.unrequested_wakeups_with_work);
    }

    fn has_backlog(&self) -> bool {
        match &self.out {
            Out::Dispatch { backlog, .. } => backlog.iter().any(|b| !b.is_empty()),
            _ => false,
        }
    }

    fn can_exit(&mut self) -> bool {
        // Acquire: pairs with the SeqCst store in `Runtime::close`.
        if !self.rt.closing.load(Ordering::Acquire) {
            return false;
        }
        // SeqCst: pairs with the clients' SeqCst decrement, made after their
        // final announcement, so every mailbox is visible once this is 0.
        if self.rt.live_clients.load(Ordering::SeqCst) != 0 {
            return false;
        }
        self.take_registrations();
        if self.retired == self.registered && self.sched.is_empty() && !self.has_backlog() {
            return true;
        }
        // Every client is gone: read every list now, gate or not, so the
        // remaining (abandoned) mailboxes are drained and retired.
        let now = self.rt.clock.now();
        for l in 0..self.lists.len() {
            self.collect(l, now);
        }
        false
    }

    /// Rescan after the sleep fence: anything announced, any in-service
    /// mailbox non-empty, closing?
    fn pending_work(&self) -> bool {
        if self.rt.closing.load(Ordering::SeqCst) {
            return true;
        }
        for list in self.rt.lists.iter() {
            // Relaxed: ordered by the SeqCst fence the caller issued after
            // setting `sleeping`; a bit seen here is taken with the Acquire
            // swap in `collect` before anything it announces is read.
            if list
                .announced
                .iter()
                .any(|w| w.load(Ordering::Relaxed) != 0)
            {
                return true;
            }
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
    fn collect(&mut self, l: usize, now: Instant) -> usize {
        // No `Arc::clone` of `rt` here: its reference count shares a block
        // with fields every client reads on each submit (`lists`, `clock`),
        // and two RMWs per round cost the client a miss per burst.
        for w in 0..self.rt.lists[l].announced.len() {
            let word = &self.rt.lists[l].announced[w];
            // Relaxed peek; the swap is Acquire (pairs with the clients'
            // `fetch_or` in `announce`).
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                let id = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if self.clients[id].is_none() {
                    self.take_registrations();
                }
                if let Some(c) = self.clients[id].as_mut() {
                    c.check_abandoned = true;
                    if !c.in_service && !c.retired {
                        c.in_service = true;
                        c.idle_reads = 0;
                        self.lists[l].service.push(id as u32);
                    }
                }
            }
        }
        let mut n = 0;
        let mut i = 0;
        while i < self.lists[l].service.len() {
            let id = self.lists[l].service[i] as usize;
            let (got, leave) = self.drain_mailbox(id, now);
            n += got;
            if leave {
                self.lists[l].service.swap_remove(i);
            } else {
                i += 1;
            }
        }
        n
    }

    /// Drains one mailbox into the scheduler; returns (packets, leaves service).
    fn drain_mailbox(&mut self, id: usize, now: Instant) -> (usize, bool) {
        let retire_after = self.rt.cfg.retire_after_reads;
        let Arbiter {
            sched,
            clients,
            recycler,
            rt,
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
        let mut n = 0;
        while let Some(v) = c.consumer.pop() {
            n += 1;
            let (desc, flow, len) = decode_slot(v);
            let pkt = Packet::new(FlowId(flow), len, ((id as u64) << 32) | u64::from(desc));
            if let Err(rej) = sched.enqueue(now, pkt) {
                rt.drops[id * NREASONS + rej.reason.index()].add(1);
                c.consumer.set_backpressure();
                match c.grants.as_mut() {
                    Some(g) => push_grant(g, desc, true),
                    None => recycler.mark(id as u32, desc),
                }
            }
        }
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
            self.retired += 1;
            return (n, true);
        }
        if n == 0 && c.idle_reads >= retire_after {
            // Retire handshake (module docs of `runtime`).
            // Always a write (a failed compare-exchange would be only a
            // read, outside the fence argument): another client's hint is
            // reset too, which costs it one extra announcement.
            for list in rt.lists.iter() {
                list.last.swap(NONE, Ordering::SeqCst);
            }
            fence(Ordering::SeqCst);
            if c.consumer.is_empty() {
                c.in_service = false;
                return (0, true);
            }
            c.idle_reads = 0;
        }
        (n, false)
    }

    /// Link emulation and hand-off; returns decisions made.
    fn release(&mut self, now: Instant) -> usize {
        if let Out::Dispatch {
            tx,
            backlog,
            pushed,
        } = &mut self.out
        {
            let mut stuck = false;
            for ((p, q), woke) in tx.iter_mut().zip(backlog.iter_mut()).zip(pushed.iter_mut()) {
                while let Some(&v) = q.front() {
                    if p.push(v).is_err() {
                        stuck = true;
                        break;
                    }
                    q.pop_front();
                    // The dispatcher may have gone to sleep since: kick it.
                    *woke = true;
                }
            }
            if stuck {
                self.flush_out(now);
                return 0;
            }
        }
        let released = &mut self.released;
        let n = self
            .link
            .release(now, &mut self.sched, |p| released.push(p)) as usize;
        self.stats.decisions += n as u64;
        // Decided at start-up: clients write their descriptors (and so the
        // cookies) only when this is true.
        let cookies = self.rt.write_descs;
        let Arbiter {
            out,
            released,
            clients,
            recycler,
            ..
        } = self;
        match out {
            Out::Direct { batch, .. } => {
                for p in released.iter() {
                    let client = (p.token >> 32) as u32;
                    let desc = p.token as u32;
                    let cookie = if cookies {
                        clients[client as usize].as_ref().map_or(0, |c| {
                            // Relaxed: published by the client's Release
                            // push, which our pop acquired.
                            c.shared.descs[desc as usize].cookie.load(Ordering::Relaxed)
                        })
                    } else {
                        0
                    };
                    batch.push(TxPacket {
                        client,
                        flow: p.flow,
                        len: p.len,
                        cookie,
                    });
                    recycler.mark(client, desc);
                }
            }
            Out::Dispatch {
                tx,
                backlog,
                pushed,
            } => {
                // Every backlog was empty when this round began releasing
                // (a stuck one returns early above), and a round releases
                // at most `arb_batch` packets: no backlog outgrows the
                // `arb_batch` it was allocated with.
                debug_assert!(backlog.iter().all(|b| b.is_empty()));
                let t = tx.len();
                for p in released.iter() {
                    let d = p.flow.index() % t;
                    let v = NonZeroU64::new(p.token | 1 << 63).unwrap_or(NonZeroU64::MIN);
                    pushed[d] = true;
                    if !backlog[d].is_empty() || tx[d].push(v).is_err() {
                        backlog[d].push_back(v);
                    }
                }
            }
            Out::Grant => {
                for p in released.iter() {
                    let client = (p.token >> 32) as usize;
                    if let Some(g) = clients[client].as_mut().and_then(|c| c.grants.as_mut()) {
                        push_grant(g, p.token as u32, false);
                    }
                }
            }
        }
        released.clear();
        self.flush_out(now);
        n
    }

    /// Transmit (T = 0), publish counters, return descriptors, wake dispatchers.
    fn flush_out(&mut self, now: Instant) {
        let Arbiter {
            out,
            clients,
            recycler,
            rt,
            ..
        } = self;
        match out {
            Out::Direct { backend, batch } => {
                if !batch.is_empty() {
                    backend.transmit(now, batch);
                    count_transmitted(&rt.tx_counts[0], batch);
                    batch.clear();
                }
            }
            Out::Dispatch { pushed, .. } => {
                if pushed.iter().any(|&b| b) {
                    // Pairs with the fence a dispatcher issues after setting
                    // `sleeping` (same argument as the arbiter's sleep).
                    fence(Ordering::SeqCst);
                    for (d, p) in pushed.iter_mut().enumerate() {
                        if std::mem::take(p) {
                            let ds = &rt.dispatchers[d];
                            if ds.sleeping.load(Ordering::Relaxed)
                                && ds.sleeping.swap(false, Ordering::AcqRel)
                            {
                                if let Some(t) = ds.thread.get() {
                                    t.unpark();
                                }
                            }
                        }
                    }
                }
            }
            Out::Grant => {}
        }
        recycler.flush(|c| match clients[c].as_ref() {
            Some(c) => &c.shared,
            None => unreachable_client(),
        });
    }
}

/// Adds a transmitted batch to this transmitter's counter row, one store
/// per run of consecutive packets of the same client (DRR serves a flow's
/// quantum in a row, so runs are long).
#[inline]
fn count_transmitted(row: &[crate::stats::TxCount], batch: &[TxPacket]) {
    let mut i = 0;
    while i < batch.len() {
        let c = batch[i].client;
        let mut bytes = 0u64;
        let mut j = i;
        while j < batch.len() && batch[j].client == c {
            bytes += u64::from(batch[j].len);
            j += 1;
        }
        row[c as usize].packets.add((j - i) as u64);
        row[c as usize].bytes.add(bytes);
        i = j;
    }
}

#[cold]
fn unreachable_client() -> ! {
    // Descriptors are only ever marked for registered clients, and the
    // arbiter never forgets a client.
    unreachable!("descriptor of an unregistered client")
}

#[inline]
fn push_grant(g: &mut Producer<NonZeroU64>, desc: u32, dropped: bool) {
    let v = encode_grant(desc, dropped);
    // Cannot fail: the grant mailbox holds every descriptor of its client
    // (sized in `Runtime::client`), and each is in flight at most once.
    while g.push(v).is_err() {
        std::hint::spin_loop();
    }
}

/// A dispatcher thread: drains its TX mailbox in batches, transmits,
/// returns descriptors.
pub(crate) struct Dispatcher<B> {
    rt: Arc<Shared>,
    index: usize,
    rx: Consumer<NonZeroU64>,
    backend: B,
}

impl<B: TxBackend> Dispatcher<B> {
    pub(crate) fn new(rt: Arc<Shared>, index: usize, rx: Consumer<NonZeroU64>, backend: B) -> Self {
        Dispatcher {
            rt,
            index,
            rx,
            backend,
        }
    }

    pub(crate) fn run(mut self) -> B {
        let cap = self.rt.cfg.dispatch_batch;
        let spin_ns = self.rt.cfg.spin_ns;
        let mut batch: Vec<TxPacket> = Vec::with_capacity(cap);
        let mut recycler =
            Recycler::new(self.rt.cfg.max_clients, self.rt.cfg.descriptors_per_client);
        let mut known: Vec<Option<Arc<ClientShared>>> = vec![None; self.rt.cfg.max_clients];
        let mut idle_since: Option<std::time::Instant> = None;
        loop {
            while batch.len() < cap {
                let Some(v) = self.rx.pop() else { break };
                let client = ((v.get() >> 32) & 0x7fff_ffff) as usize;
                let desc = v.get() as u32;
                if known[client].is_none() {
                    let all = match self.rt.registry.lock() {
                        Ok(r) => r.all.clone(),
                        Err(p) => p.into_inner().all.clone(),
                    };
                    for c in all {
                        let id = c.id as usize;
                        known[id] = Some(c);
                    }
                }
                let Some(c) = known[client].as_ref() else {
                    continue;
                };
                let d = &c.descs[desc as usize];
                // Relaxed: published through client push → arbiter pop →
                // TX push (Release) → our pop (Acquire).
                let meta = d.meta.load(Ordering::Relaxed);
                batch.push(TxPacket {
                    client: client as u32,
                    flow: FlowId((meta >> 32) as u32),
                    len: meta as u32,
                    cookie: d.cookie.load(Ordering::Relaxed),
                });
                recycler.mark(client as u32, desc);
            }
            if !batch.is_empty() {
                self.backend.transmit(self.rt.clock.now(), &batch);
                count_transmitted(&self.rt.tx_counts[self.index], &batch);
                batch.clear();
                self.rx.release();
                recycler.flush(|c| match known[c].as_deref() {
                    Some(s) => s,
                    None => unreachable_client(),
                });
                idle_since = None;
                continue;
            }
            // Acquire: pairs with the arbiter's Release store after its
            // last push; an empty mailbox now stays empty.
            if self.rt.arbiter_done.load(Ordering::Acquire) && self.rx.is_empty() {
                break;
            }
            let since = *idle_since.get_or_insert_with(std::time::Instant::now);
            if (since.elapsed().as_nanos() as u64) < spin_ns {
                std::hint::spin_loop();
                continue;
            }
            let me = &self.rt.dispatchers[self.index];
            // Sleep handshake with the arbiter's fence in `flush_out` (same
            // argument as the arbiter's own sleep, `runtime` module docs).
            me.sleeping.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if !self.rx.is_empty() || self.rt.arbiter_done.load(Ordering::SeqCst) {
                // Relaxed: only a hint to the arbiter that an unpark is
                // needed; a stale `true` costs it one spare unpark.
                me.sleeping.store(false, Ordering::Relaxed);
                continue;
            }
            std::thread::park_timeout(PARK_TIMEOUT);
            // Relaxed: as above; the data we drain next is ordered by the
            // TX mailbox's own Release/Acquire pair.
            me.sleeping.store(false, Ordering::Relaxed);
            idle_since = None;
        }
        self.rx.release();
        self.backend
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::TxCount;

    #[test]
    fn counts_runs_per_client() {
        let row: Vec<TxCount> = (0..3).map(|_| TxCount::default()).collect();
        let p = |client, len| TxPacket {
            client,
            len,
            ..TxPacket::default()
        };
        count_transmitted(&row, &[p(0, 10), p(0, 20), p(2, 5), p(0, 1)]);
        assert_eq!((row[0].packets.read(), row[0].bytes.read()), (3, 31));
        assert_eq!((row[1].packets.read(), row[1].bytes.read()), (0, 0));
        assert_eq!((row[2].packets.read(), row[2].bytes.read()), (1, 5));
    }

    #[test]
    fn recycler_aggregates_per_word() {
        let mut r = Recycler::new(2, 128);
        for d in [0, 5, 63, 64, 127] {
            r.mark(1, d);
        }
        assert_eq!(r.dirty.len(), 2, "one RMW per 64-descriptor word");
        assert_eq!(r.pending[2], (1 << 0) | (1 << 5) | (1 << 63));
        assert_eq!(r.pending[3], 1 | (1 << 63));
    }
}
