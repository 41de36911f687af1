//! Where released packets go, chosen once when the runtime starts (\[J\]
//! §3.3, \[E\] §3): the arbiter transmits itself ([`Sink::Direct`], T = 0),
//! pushes to T dispatchers ([`Sink::Dispatch`]), or grants clients the right
//! to transmit ([`Sink::Grant`], client-transmit mode).
//!
//! The sink also owns what follows a decision: counting transmitted packets,
//! returning descriptors to their owners (one `fetch_or` per client and
//! 64-descriptor word once it holds a batch for its owner, or when the round
//! found no work, or after at most [`pspat_mailbox::MAX_RETURN_HOLD_NS`]:
//! [`pspat_mailbox::Recycler::flush_batches`]) and waking
//! dispatchers. The transmit mode is matched here and nowhere else in the
//! arbiter.
//!
//! # Deviation
//! A full TX mailbox does not drop: the sink keeps the packets already
//! released in a per-dispatcher backlog (at most one round, `arb_batch`
//! packets) and the arbiter releases nothing more until the dispatcher made
//! room, so overload backs up into the scheduler, where policy decides.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use pspat_mailbox::{publish_fence, Producer, Recycler};
use pspat_sched::{DropReason, Instant, Packet};

use super::collect::ArbClient;
use super::placement::{DispatchPlacement, Placer};
use crate::shared::Shared;
use crate::stats::{panic_text, TxCount, NREASONS};
use crate::sync::{AtomicU64, Ordering};
use crate::token::{DescRef, Grant, Marks};
use crate::{TxBackend, TxPacket};

pub(crate) enum Sink<B> {
    /// T = 0: the arbiter calls the backend once per round.
    Direct {
        backend: B,
        batch: Vec<TxPacket>,
        recycler: Recycler,
        /// The backend panicked once: it is never called again.
        failed: bool,
    },
    /// T >= 1: TX mailboxes, placed by [`Placer`] (`flow % T` by default).
    Dispatch {
        tx: Vec<Producer<NonZeroU64>>,
        placer: Box<Placer>,
        /// Packets each dispatcher has transmitted (its flowlet guard).
        done: Arc<[CachePadded<AtomicU64>]>,
        backlog: Vec<VecDeque<NonZeroU64>>,
        pushed: Vec<bool>,
        /// Descriptors of packets the scheduler dropped.
        recycler: Recycler,
    },
    /// Client-transmit mode: grants through each client's grant mailbox.
    Grant,
}

impl<B: TxBackend> Sink<B> {
    pub(crate) fn direct(backend: B, batch: usize, clients: usize, descs: usize) -> Self {
        Sink::Direct {
            backend,
            batch: Vec::with_capacity(batch),
            recycler: Recycler::new(clients, descs),
            failed: false,
        }
    }

    pub(crate) fn dispatch(
        tx: Vec<Producer<NonZeroU64>>,
        (placement, done): (DispatchPlacement, Arc<[CachePadded<AtomicU64>]>),
        batch: usize,
        clients: usize,
        descs: usize,
    ) -> Self {
        Sink::Dispatch {
            placer: Box::new(Placer::new(placement, tx.len())),
            done,
            backlog: tx.iter().map(|_| VecDeque::with_capacity(batch)).collect(),
            pushed: vec![false; tx.len()],
            tx,
            recycler: Recycler::new(clients, descs),
        }
    }

    /// Packets released but not yet handed to a dispatcher.
    pub(crate) fn has_backlog(&self) -> bool {
        match self {
            Sink::Dispatch { backlog, .. } => backlog.iter().any(|b| !b.is_empty()),
            _ => false,
        }
    }

    /// Retries the backlog; false while a dispatcher is still full (the
    /// arbiter then releases nothing this round).
    pub(crate) fn make_room(&mut self) -> bool {
        let Sink::Dispatch {
            tx,
            backlog,
            pushed,
            ..
        } = self
        else {
            return true;
        };
        let mut room = true;
        for ((p, q), woke) in tx.iter_mut().zip(backlog.iter_mut()).zip(pushed.iter_mut()) {
            while let Some(&v) = q.front() {
                if p.push(v).is_err() {
                    room = false;
                    break;
                }
                q.pop_front();
                // The dispatcher may have gone to sleep since: kick it.
                *woke = true;
            }
        }
        room
    }

    /// A packet the scheduler refused: its descriptor goes back to its owner
    /// (the drop itself was counted by the caller).
    #[inline]
    pub(crate) fn dropped(&mut self, r: DescRef, client: &mut ArbClient) {
        match self {
            Sink::Direct { recycler, .. } | Sink::Dispatch { recycler, .. } => {
                recycler.mark(r.client, r.desc)
            }
            Sink::Grant => {
                if let Some(g) = client.grants.as_mut() {
                    push_grant(
                        g,
                        Grant {
                            desc: r.desc,
                            dropped: true,
                            marks: Marks::PLAIN,
                        },
                    );
                }
            }
        }
    }

    /// Hands the round's decisions on. `write_descs`: clients wrote their
    /// descriptors (the cookie is read only then).
    #[inline]
    pub(crate) fn hand_off(
        &mut self,
        released: &[Packet],
        clients: &mut [Option<ArbClient>],
        write_descs: bool,
    ) {
        match self {
            Sink::Direct {
                batch, recycler, ..
            } => {
                for p in released {
                    let (r, marks) = DescRef::released(p);
                    let cookie = if write_descs {
                        clients[r.client as usize].as_ref().map_or(0, |c| {
                            // Relaxed: published by the client's Release
                            // push, which the arbiter's pop acquired.
                            c.shared.descs[r.desc as usize]
                                .cookie
                                .load(Ordering::Relaxed)
                        })
                    } else {
                        0
                    };
                    batch.push(TxPacket {
                        client: r.client,
                        flow: p.flow,
                        len: p.len,
                        cookie,
                        copies: marks.copies,
                        corrupt: marks.corrupt,
                        ce: marks.ce,
                    });
                    recycler.mark(r.client, r.desc);
                }
            }
            Sink::Dispatch {
                tx,
                backlog,
                pushed,
                placer,
                done,
                ..
            } => {
                if released.is_empty() {
                    return;
                }
                placer.begin_round(done);
                // Every backlog was empty when this round began releasing
                // (`make_room` returned true), and a round releases at most
                // `arb_batch` packets: no backlog outgrows the `arb_batch` it
                // was allocated with.
                debug_assert!(backlog.iter().all(|b| b.is_empty()));
                for p in released {
                    let d = placer.place(p.flow);
                    let (r, marks) = DescRef::released(p);
                    let v = r.tx_slot(marks);
                    pushed[d] = true;
                    if !backlog[d].is_empty() || tx[d].push(v).is_err() {
                        backlog[d].push_back(v);
                    }
                }
            }
            Sink::Grant => {
                for p in released {
                    let (r, marks) = DescRef::released(p);
                    if let Some(g) = clients[r.client as usize]
                        .as_mut()
                        .and_then(|c| c.grants.as_mut())
                    {
                        push_grant(
                            g,
                            Grant {
                                desc: r.desc,
                                dropped: false,
                                marks,
                            },
                        );
                    }
                }
            }
        }
    }

    /// Returns every descriptor the sink still keeps back (see
    /// [`Recycler::flush_batches`]): called when a round found no work, so
    /// nothing is kept while the arbiter waits, and at exit.
    pub(crate) fn return_all(&mut self, clients: &[Option<ArbClient>]) {
        let (Sink::Direct { recycler, .. } | Sink::Dispatch { recycler, .. }) = self else {
            return;
        };
        if recycler.holds_any() {
            recycler.flush(|c| returned_set(clients, c));
        }
    }

    /// End of round: transmit (T = 0), count, return descriptors (those
    /// that make a batch for their owner, [`Recycler::flush_batches`]),
    /// wake dispatchers.
    pub(crate) fn flush(&mut self, now: Instant, rt: &Shared, clients: &[Option<ArbClient>]) {
        let owner = |c: u32| returned_set(clients, c);
        match self {
            Sink::Direct {
                backend,
                batch,
                recycler,
                failed,
            } => {
                if !batch.is_empty() {
                    if !*failed {
                        let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            backend.transmit(now, batch)
                        }));
                        if let Err(p) = sent {
                            *failed = true;
                            rt.fail("the arbiter's backend".into(), panic_text(&*p));
                        }
                    }
                    if *failed {
                        // The arbiter is the only writer of `drops`.
                        let fault = DropReason::Fault.index();
                        for p in batch.iter() {
                            rt.drops[p.client as usize * NREASONS + fault].add(1);
                        }
                    } else {
                        count_transmitted(&rt.tx_counts[0], batch);
                    }
                    batch.clear();
                }
                recycler.flush_batches(now.as_nanos(), owner);
            }
            Sink::Dispatch {
                pushed, recycler, ..
            } => {
                if pushed.iter().any(|&b| b) {
                    // Pairs with the fence a dispatcher's `prepare_sleep`
                    // issues (pspat_mailbox::parker).
                    publish_fence();
                    for (d, p) in pushed.iter_mut().enumerate() {
                        if std::mem::take(p) {
                            rt.dispatchers[d].kick();
                        }
                    }
                }
                recycler.flush_batches(now.as_nanos(), owner);
            }
            Sink::Grant => {}
        }
    }

    /// Drops every packet released but not yet handed to a dispatcher,
    /// counting each against its client with `reason`; returns how many.
    pub(crate) fn discard_backlog(
        &mut self,
        reason: DropReason,
        rt: &Shared,
        clients: &mut [Option<ArbClient>],
    ) -> usize {
        let Sink::Dispatch {
            backlog, recycler, ..
        } = self
        else {
            return 0;
        };
        let mut n = 0;
        for q in backlog.iter_mut() {
            for v in q.drain(..) {
                let (r, _) = DescRef::from_tx_slot(v);
                if clients[r.client as usize].is_none() {
                    unreachable_client();
                }
                rt.drops[r.client as usize * NREASONS + reason.index()].add(1);
                recycler.mark(r.client, r.desc);
                n += 1;
            }
        }
        n
    }

    /// The arbiter's backend (T = 0), handed back at shutdown.
    pub(crate) fn into_backend(self) -> Option<B> {
        match self {
            Sink::Direct { backend, .. } => Some(backend),
            _ => None,
        }
    }
}

/// Adds a transmitted batch to this transmitter's counter row, one store
/// per run of consecutive packets of the same client (DRR serves a flow's
/// quantum in a row, so runs are long).
#[inline]
pub(crate) fn count_transmitted(row: &[TxCount], batch: &[TxPacket]) {
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
pub(crate) fn unreachable_client() -> ! {
    // Descriptors are only ever marked for registered clients, and the
    // arbiter never forgets a client.
    unreachable!("descriptor of an unregistered client")
}

#[inline]
fn push_grant(g: &mut Producer<NonZeroU64>, grant: Grant) {
    let v = grant.encode();
    // Cannot fail: the grant mailbox holds every descriptor of its client
    // (sized in `Runtime::client`), and each is in flight at most once.
    while g.push(v).is_err() {
        std::hint::spin_loop();
    }
}

/// The set client `c` takes its returned descriptors from.
fn returned_set(clients: &[Option<ArbClient>], c: u32) -> &pspat_mailbox::ReturnedSet {
    match clients[c as usize].as_ref() {
        Some(c) => &c.shared.returned,
        None => unreachable_client(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
