//! Dispatcher threads (\[J\] §3.3): each drains its TX mailbox in batches
//! of `dispatch_batch`, reads the descriptors, calls its backend once per
//! batch and returns the descriptors to their owners (one `fetch_or` per
//! client and 64-descriptor word per batch).
//!
//! [`Dispatcher::step`] is one batch at a given time; [`Dispatcher::run`]
//! is the thread around it (spin T_w, then park on its
//! [`pspat_mailbox::Parker`], which the arbiter kicks after pushing).

use std::num::NonZeroU64;
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use std::time::Duration;

use pspat_mailbox::{Consumer, Recycler};
use pspat_sched::{FlowId, Instant};

use crate::arbiter::sink::{count_transmitted, unreachable_client};
use crate::shared::{ClientShared, Shared};
use crate::stats::{count_faulted, panic_text};
use crate::sync::{AtomicU64, Ordering};
use crate::token::DescRef;
use crate::{TxBackend, TxPacket};

/// Safety-net park timeout.
const PARK_TIMEOUT: Duration = Duration::from_millis(100);

pub(crate) struct Dispatcher<B> {
    rt: Arc<Shared>,
    index: usize,
    rx: Consumer<NonZeroU64>,
    backend: B,
    batch: Vec<TxPacket>,
    recycler: Recycler,
    /// Clients seen so far, by id (refreshed from the registry on a miss).
    known: Vec<Option<Arc<ClientShared>>>,
    /// The backend panicked once: it is never called again, and what this
    /// dispatcher receives is counted as [`pspat_sched::DropReason::Fault`].
    failed: bool,
    /// Packets transmitted (or counted as faulted) by each dispatcher: the
    /// arbiter's flowlet guard (`arbiter::placement`).
    done: Arc<[CachePadded<AtomicU64>]>,
    sent: u64,
}

impl<B: TxBackend> Dispatcher<B> {
    pub(crate) fn new(
        rt: Arc<Shared>,
        (index, done): (usize, Arc<[CachePadded<AtomicU64>]>),
        rx: Consumer<NonZeroU64>,
        backend: B,
    ) -> Self {
        let cfg = &rt.cfg;
        Dispatcher {
            batch: Vec::with_capacity(cfg.dispatch_batch),
            recycler: Recycler::new(cfg.max_clients, cfg.descriptors_per_client),
            known: vec![None; cfg.max_clients],
            failed: false,
            done,
            sent: 0,
            rt,
            index,
            rx,
            backend,
        }
    }

    /// Transmits up to one batch at `now`; returns the packets sent.
    pub(crate) fn step(&mut self, now: Instant) -> usize {
        let cap = self.rt.cfg.dispatch_batch;
        while self.batch.len() < cap {
            let Some(v) = self.rx.pop() else { break };
            let (r, marks) = DescRef::from_tx_slot(v);
            let client = r.client as usize;
            if self.known[client].is_none() {
                for c in self.rt.registry().all.iter() {
                    let id = c.id as usize;
                    self.known[id] = Some(Arc::clone(c));
                }
            }
            let Some(c) = self.known[client].as_ref() else {
                unreachable_client()
            };
            let d = &c.descs[r.desc as usize];
            // Relaxed: published through client push → arbiter pop → TX
            // push (Release) → our pop (Acquire).
            let meta = d.meta.load(Ordering::Relaxed);
            self.batch.push(TxPacket {
                client: r.client,
                flow: FlowId((meta >> 32) as u32),
                len: meta as u32,
                cookie: d.cookie.load(Ordering::Relaxed),
                copies: marks.copies,
                corrupt: marks.corrupt,
                ce: marks.ce,
            });
            self.recycler.mark(r.client, r.desc);
        }
        let n = self.batch.len();
        if n == 0 {
            // Out of work: return what recycling kept back for a batch, so
            // no descriptor waits while this dispatcher does.
            if self.recycler.holds_any() {
                let known = &self.known;
                self.recycler.flush(|c| returned_set(known, c));
            }
            return 0;
        }
        if !self.failed {
            let (backend, batch) = (&mut self.backend, &self.batch);
            let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                backend.transmit(now, batch)
            }));
            if let Err(p) = sent {
                self.failed = true;
                self.rt.fail(
                    format!("dispatcher {}'s backend", self.index),
                    panic_text(&*p),
                );
            }
        }
        let row = &self.rt.tx_counts[self.index];
        if self.failed {
            count_faulted(row, &self.batch);
        } else {
            count_transmitted(row, &self.batch);
        }
        self.batch.clear();
        self.sent += n as u64;
        // Release: pairs with the arbiter's Acquire load in
        // `Placer::begin_round`; the backend's `transmit` returned before.
        self.done[self.index].store(self.sent, Ordering::Release);
        self.rx.release();
        let known = &self.known;
        // Those that make a batch for their owner; the rest at the latest
        // when this dispatcher runs out of work.
        self.recycler
            .flush_batches(now.as_nanos(), |c| returned_set(known, c));
        n
    }

    /// True once the arbiter finished and this mailbox is drained.
    pub(crate) fn finished(&self) -> bool {
        // Acquire: pairs with the arbiter's Release store after its last
        // push; an empty mailbox now stays empty.
        self.rt.arbiter_done.load(Ordering::Acquire) && self.rx.is_empty()
    }

    /// The dispatcher thread.
    pub(crate) fn run(mut self) -> B {
        let rt = Arc::clone(&self.rt);
        let me = &rt.dispatchers[self.index];
        me.bind_current_thread();
        let spin_ns = self.rt.cfg.spin_ns;
        let mut idle_since: Option<std::time::Instant> = None;
        loop {
            if self.step(self.rt.clock.now()) > 0 {
                idle_since = None;
                continue;
            }
            if self.finished() {
                break;
            }
            let since = *idle_since.get_or_insert_with(std::time::Instant::now);
            if (since.elapsed().as_nanos() as u64) < spin_ns {
                std::hint::spin_loop();
                continue;
            }
            me.prepare_sleep();
            // SeqCst load after the sleep fence (pairs with the arbiter's
            // publish fence before its kick).
            if !self.rx.is_empty() || self.rt.arbiter_done.load(Ordering::SeqCst) {
                me.cancel_sleep();
                continue;
            }
            me.sleep(PARK_TIMEOUT);
            idle_since = None;
        }
        self.rx.release();
        self.backend
    }

    /// Hands the backend back (virtual-time driver).
    pub(crate) fn into_backend(self) -> B {
        self.backend
    }
}

/// The set client `c` takes its returned descriptors from; `known` holds
/// every client this dispatcher has seen a packet of.
fn returned_set(known: &[Option<Arc<ClientShared>>], c: u32) -> &pspat_mailbox::ReturnedSet {
    match known[c as usize].as_deref() {
        Some(s) => &s.returned,
        None => unreachable_client(),
    }
}
