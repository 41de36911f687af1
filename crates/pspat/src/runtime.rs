//! Building, running and shutting down one PSPAT instance (\[J\] §3,
//! Fig. 4): the arbiter thread, optional dispatcher threads, and the factory
//! for client handles. The state these threads share is in
//! the `shared` module; the handshakes between them (client lists, sleep and
//! wake, recycling) are `pspat-mailbox`'s, model-checked with loom there.
//!
//! # Dead clients and shutdown
//! Dropping a [`crate::Client`] drops its mailbox producer (which marks the
//! mailbox abandoned, Release), then announces the client and kicks the
//! arbiter. The arbiter retires an abandoned mailbox after draining it
//! empty; its packets still in the scheduler are transmitted normally (the
//! descriptor pool outlives the handle through an `Arc`). Ids are reused:
//! once the mailbox is retired and every descriptor of the slot came home,
//! the slot (id, descriptors, counters) is handed to the next new client
//! and the old client's figures move to [`crate::Stats::departed`] (the
//! handshake is in the `shared` module). A service that creates and drops a
//! client per connection so runs in bounded memory with any `max_clients`.
//!
//! [`Runtime::shutdown`] marks the runtime closing (no new clients; every
//! submit fails with [`crate::SubmitError::Closed`]) and waits until every
//! client handle is dropped, every mailbox retired and the scheduler empty.
//! What is still held is bounded by [`crate::RuntimeConfig::shutdown`]
//! ([`crate::ShutdownPolicy`]):
//! * `Drain { deadline }` (default 5 s): the link rate is respected (nothing
//!   is released early) until `deadline` after the arbiter first saw the
//!   shutdown; then the arbiter drops everything still held — scheduler,
//!   mailboxes, the dispatchers' backlog — with
//!   [`pspat_sched::DropReason::Shutdown`], bypassing the link.
//! * `Discard`: the same at once.
//!
//! So once every client is dropped, shutdown takes at most the deadline
//! plus one round, one TX mailbox per dispatcher (transmitted without link
//! pacing) and a 50 ms link nap. Then dispatchers drain their TX mailboxes
//! and every thread is joined: afterwards `in_flight == 0` for every client.
//!
//! # Faults
//! A backend that panics is contained where it is called (the arbiter's
//! sink, a dispatcher's batch, a client's drain) with
//! `std::panic::catch_unwind`; a panic elsewhere in the arbiter or a
//! dispatcher is caught at the thread's edge. Either way the runtime is
//! marked failed and closing:
//! * a panicked backend is never called again, not even by `Client::drop`;
//!   the batch it was given and whatever its transmitter receives later are
//!   counted as dropped with [`pspat_sched::DropReason::Fault`] (the packets
//!   may or may not have reached the wire);
//! * every client's next submit fails with [`crate::SubmitError::Closed`];
//! * the arbiter drops everything it holds (scheduler, mailboxes, backlog)
//!   with `Fault` each round, bypassing the link;
//! * packets a dead thread held are counted as `Fault` by `shutdown` after
//!   every thread was joined.
//!
//! [`Runtime::shutdown`] then returns promptly with the final, conserved
//! statistics (`in_flight == 0`) and the first fault in
//! [`Finished::error`]. It returns `Err` only if a panic escaped
//! containment (a panic while unwinding).

use std::num::NonZeroU64;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_utils::CachePadded;

use pspat_mailbox::Producer;
use pspat_sched::{LinkEmulator, Scheduler};

use crate::arbiter::{Arbiter, Sink};
use crate::dispatcher::Dispatcher;
use crate::shared::{ClientShared, Registration, Shared, SlotMeta, SlotState};
use crate::stats::panic_text;
use crate::stats::Totals;
use crate::sync::{AtomicU64, Ordering};
use crate::{ArbiterStats, Client, Clock, RuntimeConfig, RuntimeError, Stats, TxBackend, TxMode};

/// Who a backend built by the factory belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxOwner {
    /// The arbiter (T = 0).
    Arbiter,
    /// Dispatcher `i`.
    Dispatcher(usize),
    /// Client `id` (client-transmit mode).
    Client(u32),
}

/// What [`Runtime::shutdown`] hands back.
#[non_exhaustive]
pub struct Finished<B> {
    /// Final counters: `in_flight == 0` everywhere.
    pub stats: Stats,
    /// Arbiter counters.
    pub arbiter: ArbiterStats,
    /// The arbiter's and dispatchers' backends (client backends come back
    /// from [`crate::Client::into_backend`]). A backend that panicked is
    /// handed back as the panic left it; one lost with its thread is absent.
    pub backends: Vec<B>,
    /// The first fault the runtime contained (a backend or a runtime thread
    /// that panicked), if any: then the packets it held were counted as
    /// dropped with [`pspat_sched::DropReason::Fault`], and `stats` is
    /// still final and conserved.
    pub error: Option<RuntimeError>,
}

/// What the arbiter thread hands back: its backend (T = 0) and counters;
/// `None` from the thread when the arbiter died.
type ArbiterEnd<B> = (Option<B>, ArbiterStats);

pub(crate) type Factory<B> = Mutex<Box<dyn FnMut(TxOwner) -> B + Send>>;

/// Everything a runtime is made of, before any thread runs: built once for
/// the threaded [`Runtime`] and the deterministic [`crate::ManualRuntime`].
pub(crate) struct Parts<S, B> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) arbiter: Arbiter<S, B>,
    pub(crate) dispatchers: Vec<Dispatcher<B>>,
    pub(crate) factory: Factory<B>,
}

impl<S: Scheduler, B: TxBackend> Parts<S, B> {
    pub(crate) fn build<F>(cfg: RuntimeConfig, sched: S, factory: F) -> Result<Self, RuntimeError>
    where
        F: FnMut(TxOwner) -> B + Send + 'static,
    {
        cfg.validate()?;
        let link = match cfg.rate_bps {
            Some(r) => LinkEmulator::new(r, cfg.arb_batch)?,
            None => LinkEmulator::unlimited(cfg.arb_batch)?,
        };
        let nlists = if cfg.lists == 0 {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(1024)
        } else {
            cfg.lists
        };
        let ndisp = match cfg.tx_mode {
            TxMode::Dispatcher => cfg.dispatchers,
            TxMode::Client => 0,
        };
        let transmitters = match cfg.tx_mode {
            TxMode::Dispatcher => ndisp.max(1),
            TxMode::Client => 0,
        };
        let mut factory: Box<dyn FnMut(TxOwner) -> B + Send> = Box::new(factory);
        // The arbiter's backend is built before the dispatchers' (with T = 0
        // there are none).
        let direct =
            (cfg.tx_mode == TxMode::Dispatcher && ndisp == 0).then(|| factory(TxOwner::Arbiter));
        let write_descs = direct.as_ref().is_none_or(TxBackend::wants_cookies);
        let shared = Arc::new(Shared::new(
            cfg.clone(),
            nlists,
            transmitters,
            ndisp,
            write_descs,
        ));
        let done: Arc<[CachePadded<AtomicU64>]> = (0..ndisp)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        let mut tx: Vec<Producer<NonZeroU64>> = Vec::with_capacity(ndisp);
        let mut dispatchers = Vec::with_capacity(ndisp);
        for d in 0..ndisp {
            let (p, c) = pspat_mailbox::mailbox::<NonZeroU64>(cfg.tx_mailbox_entries)
                .map_err(|e| RuntimeError::invalid("tx_mailbox_entries", e.to_string()))?;
            tx.push(p);
            let backend = factory(TxOwner::Dispatcher(d));
            dispatchers.push(Dispatcher::new(
                Arc::clone(&shared),
                (d, Arc::clone(&done)),
                c,
                backend,
            ));
        }
        let (batch, clients, descs) = (
            cfg.arb_batch as usize,
            cfg.max_clients,
            cfg.descriptors_per_client,
        );
        let sink = match (cfg.tx_mode, direct) {
            (TxMode::Client, _) => Sink::Grant,
            (TxMode::Dispatcher, Some(backend)) => Sink::direct(backend, batch, clients, descs),
            (TxMode::Dispatcher, None) => {
                Sink::dispatch(tx, (cfg.dispatch_placement, done), batch, clients, descs)
            }
        };
        let arbiter = Arbiter::new(Arc::clone(&shared), sched, link, sink);
        Ok(Parts {
            shared,
            arbiter,
            dispatchers,
            factory: Mutex::new(factory),
        })
    }
}

/// How long [`Runtime::client`] waits for a departing client's slot when
/// all `max_clients` slots are taken but some belong to dropped clients
/// whose packets are still on their way.
pub const CLIENT_SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A new client of `shared`: its mailbox, descriptor pool and (client mode)
/// grant mailbox and backend; the arbiter takes the registration at its next
/// round. Takes a reclaimed slot if there is one, else a new one below
/// `max_clients`, else waits up to `wait` for a leaving slot to become
/// quiescent (the arbiter must retire it: `wait` is zero for the manual
/// runtime, whose arbiter runs only when its caller steps it).
pub(crate) fn new_client<B: TxBackend>(
    shared: &Arc<Shared>,
    factory: &Factory<B>,
    wait: std::time::Duration,
) -> Result<Client<B>, RuntimeError> {
    if shared.is_closing() {
        return Err(RuntimeError::Closed);
    }
    let cfg = &shared.cfg;
    let (producer, consumer) = pspat_mailbox::mailbox::<NonZeroU64>(cfg.mailbox_entries)
        .map_err(|e| RuntimeError::invalid("mailbox_entries", e.to_string()))?;
    let nd = cfg.descriptors_per_client;
    let grant_mailbox = if cfg.tx_mode == TxMode::Client {
        // Room for every descriptor plus a line: the arbiter's grant push
        // can never find it full.
        let entries = (nd + 16).next_power_of_two().max(64);
        Some(
            pspat_mailbox::mailbox::<NonZeroU64>(entries)
                .map_err(|e| RuntimeError::invalid("descriptors_per_client", e.to_string()))?,
        )
    } else {
        None
    };
    let start = std::time::Instant::now();
    let mut reg = shared.registry();
    let (id, client) = loop {
        reg.reclaim(shared, false);
        if reg.free.is_empty() && reg.all.len() >= cfg.max_clients {
            reg.reclaim(shared, true);
        }
        if let Some(id) = reg.free.pop() {
            break (id, Arc::clone(&reg.all[id as usize]));
        }
        if reg.all.len() < cfg.max_clients {
            let id = reg.all.len() as u32;
            let c = Arc::new(ClientShared::new(id, nd));
            reg.all.push(Arc::clone(&c));
            reg.meta.push(SlotMeta {
                state: SlotState::Free,
                base: Totals::default(),
            });
            break (id, c);
        }
        if reg.leaving.is_empty() || start.elapsed() >= wait {
            return Err(RuntimeError::TooManyClients {
                max: cfg.max_clients,
            });
        }
        drop(reg);
        if shared.is_closing() {
            return Err(RuntimeError::Closed);
        }
        // The arbiter retires dropped clients' mailboxes as it runs; make
        // sure it runs.
        shared.arbiter.kick_force();
        std::thread::sleep(std::time::Duration::from_micros(50));
        reg = shared.registry();
    };
    let (grant_p, grant_c, backend) = match grant_mailbox {
        Some((p, c)) => match factory.lock() {
            Ok(mut f) => (Some(p), Some(c), Some(f(TxOwner::Client(id)))),
            Err(_) => {
                reg.free.push(id);
                return Err(RuntimeError::Thread {
                    what: "backend factory".into(),
                    reason: "poisoned".into(),
                });
            }
        },
        None => (None, None, None),
    };
    reg.meta[id as usize].state = SlotState::Live;
    reg.pending.push(Registration {
        shared: Arc::clone(&client),
        consumer,
        grants: grant_p,
    });
    // SeqCst: before the handle exists, so `can_exit` never misses it.
    shared.live_clients.fetch_add(1, Ordering::SeqCst);
    // Release: pairs with the Acquire swap in the arbiter, which then
    // locks the registry and finds this registration.
    shared.registry_dirty.store(true, Ordering::Release);
    drop(reg);
    Ok(Client::new(
        Arc::clone(shared),
        client,
        producer,
        grant_c,
        backend,
    ))
}

/// Called by a client handle at the very end of its retire: its slot is
/// leaving and will be reclaimed once quiescent.
pub(crate) fn client_left(shared: &Shared, id: u32) {
    let mut reg = shared.registry();
    if let Some(m) = reg.meta.get_mut(id as usize) {
        m.state = SlotState::Leaving;
    }
    reg.leaving.push_back(id);
}

/// Wakes a runtime's arbiter ([`Runtime::arbiter_waker`]).
///
/// A sleeping arbiter wakes as soon as a client submits, but a change
/// queued for its scheduler by another path ([`crate::Control::send`], an
/// inbox the scheduler reads in its own `enqueue` or `dequeue`) would
/// otherwise wait until the next packet or the arbiter's safety wake-up
/// ([`crate::RuntimeConfig::idle_safety_wake_ns`]). After [`ArbiterWaker::wake`] the arbiter runs a round, which
/// calls the scheduler's `dequeue` unless the link is still busy with a
/// packet (then the scheduler is called when the link frees, as for any
/// packet).
///
/// Costs one unpark (a system call when the arbiter sleeps); an arbiter
/// that is awake only runs one spare round. Dropping the runtime does not
/// wait for wakers: waking an arbiter that has exited does nothing.
#[derive(Clone)]
pub struct ArbiterWaker {
    shared: Arc<Shared>,
}

impl ArbiterWaker {
    /// Wakes the arbiter. Everything the calling thread wrote before the
    /// call is visible to the round that follows: the unpark pairs with
    /// the arbiter's park (the parker's `kick_force`).
    pub fn wake(&self) {
        self.shared.arbiter.kick_force();
    }
}

impl std::fmt::Debug for ArbiterWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArbiterWaker").finish_non_exhaustive()
    }
}

/// A running PSPAT instance: the arbiter thread, T dispatcher threads, and
/// the factory for client handles.
///
/// # Examples
/// ```
/// use pspat::{NullTx, Runtime, RuntimeConfig, Submission};
/// use pspat_sched::{AlgKind, FlowId, FlowTable, SchedulerConfig};
/// let sched = SchedulerConfig::new(AlgKind::Drr).build(FlowTable::uniform(2).unwrap()).unwrap();
/// let rt = Runtime::start(RuntimeConfig::default(), sched, |_| NullTx::new()).unwrap();
/// let mut c = rt.client().unwrap();
/// for i in 0..1000u64 {
///     let mut s = Submission { flow: FlowId(1), len: 60, cookie: i, ect: false };
///     while let Err(e) = c.submit(s) {
///         s = e.into_inner(); // mailbox full: retry
///     }
/// }
/// drop(c);
/// let done = rt.shutdown().unwrap();
/// assert_eq!(done.stats.transmitted, 1000);
/// assert_eq!(done.stats.in_flight, 0);
/// assert_eq!(done.backends.iter().map(|b| b.packets()).sum::<u64>(), 1000);
/// ```
pub struct Runtime<B: TxBackend> {
    shared: Arc<Shared>,
    arbiter: Option<JoinHandle<Option<ArbiterEnd<B>>>>,
    dispatchers: Vec<JoinHandle<Option<B>>>,
    factory: Factory<B>,
}

impl<B: TxBackend> Runtime<B> {
    /// Starts the arbiter (and dispatchers) over `sched`. `factory` builds
    /// one backend per transmitting thread or, in client-transmit mode, per
    /// client.
    ///
    /// # Errors
    /// An invalid configuration or a thread that could not be spawned.
    pub fn start<S, F>(cfg: RuntimeConfig, sched: S, factory: F) -> Result<Self, RuntimeError>
    where
        S: Scheduler + Send + 'static,
        F: FnMut(TxOwner) -> B + Send + 'static,
    {
        let parts = Parts::build(cfg, sched, factory)?;
        let shared = parts.shared;
        let cfg = &shared.cfg;
        let mut dispatcher_handles = Vec::new();
        for (d, disp) in parts.dispatchers.into_iter().enumerate() {
            let core = cfg.dispatcher_core;
            let sh = Arc::clone(&shared);
            let h = std::thread::Builder::new()
                .name(format!("pspat-dispatcher-{d}"))
                .spawn(move || {
                    pin(core);
                    // The thread's edge: a panic outside the backend call
                    // (which the dispatcher contains itself) fails the
                    // runtime instead of leaving it waiting for this thread.
                    match catch_unwind(AssertUnwindSafe(|| disp.run())) {
                        Ok(b) => Some(b),
                        Err(p) => {
                            sh.fail(format!("dispatcher {d}"), panic_text(&*p));
                            None
                        }
                    }
                })
                .map_err(|e| RuntimeError::Thread {
                    what: format!("dispatcher {d}"),
                    reason: e.to_string(),
                })?;
            dispatcher_handles.push(h);
        }
        let arb = parts.arbiter;
        let core = cfg.arbiter_core;
        let sh = Arc::clone(&shared);
        let arbiter = std::thread::Builder::new()
            .name("pspat-arbiter".into())
            .spawn(move || {
                pin(core);
                match catch_unwind(AssertUnwindSafe(|| arb.run())) {
                    Ok(r) => Some(r),
                    Err(p) => {
                        // The arbiter is gone: nothing more is released.
                        // Release: pairs with the Acquire loads of
                        // dispatchers and retiring clients, which stop
                        // waiting for it.
                        sh.fail("arbiter".into(), panic_text(&*p));
                        sh.arbiter_done.store(true, Ordering::Release);
                        for d in sh.dispatchers.iter() {
                            d.kick_force();
                        }
                        None
                    }
                }
            })
            .map_err(|e| RuntimeError::Thread {
                what: "arbiter".into(),
                reason: e.to_string(),
            })?;
        Ok(Runtime {
            shared,
            arbiter: Some(arbiter),
            dispatchers: dispatcher_handles,
            factory: parts.factory,
        })
    }

    /// A new client handle with its own mailbox and descriptor pool.
    ///
    /// Client ids are reused: a dropped client's slot (id, descriptors,
    /// counters) goes to a later client once its last packet was
    /// transmitted or dropped; its figures then move to
    /// [`Stats::departed`](crate::Stats). With every slot taken by live
    /// clients or by dropped ones whose packets are still on their way, it
    /// waits up to [`CLIENT_SLOT_WAIT`] for one of the latter.
    ///
    /// # Errors
    /// [`RuntimeError::TooManyClients`] when `max_clients` clients are
    /// alive (or no departing slot freed up in time);
    /// [`RuntimeError::Closed`] after shutdown began.
    pub fn client(&self) -> Result<Client<B>, RuntimeError> {
        new_client(&self.shared, &self.factory, CLIENT_SLOT_WAIT)
    }

    /// Counters now; consistent per client (see [`crate::stats`]).
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The runtime's clock (the one backends receive as `now`).
    pub fn clock(&self) -> Clock {
        self.shared.clock
    }

    /// Arbiter counters now.
    pub fn arbiter_stats(&self) -> ArbiterStats {
        self.shared.arb_stats.read()
    }

    /// A handle that wakes the arbiter for a round now, from any thread:
    /// for work the runtime's mailboxes do not carry (a change queued
    /// through [`crate::Control`] or an inbox of the caller's own).
    pub fn arbiter_waker(&self) -> ArbiterWaker {
        ArbiterWaker {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Stops accepting clients and packets (every submit fails with
    /// [`crate::SubmitError::Closed`]), waits until every client handle is
    /// dropped and every packet transmitted or dropped, then joins every
    /// thread. Drop (or [`crate::Client::into_backend`]) every client first,
    /// or from other threads: a client still held by the calling thread would
    /// make this wait forever. Dropping a `Runtime` does the same as this.
    ///
    /// How long it takes is bounded by [`crate::RuntimeConfig::shutdown`]
    /// once the clients are gone (see the module docs). After a contained
    /// fault it returns at once with [`Finished::error`] set.
    ///
    /// # Errors
    /// [`RuntimeError::Thread`] if a runtime thread's panic escaped
    /// containment (its counters are then lost).
    pub fn shutdown(mut self) -> Result<Finished<B>, RuntimeError> {
        self.close();
        let mut backends = Vec::new();
        let arbiter = match self.arbiter.take().map(JoinHandle::join) {
            Some(Ok(Some((b, st)))) => {
                backends.extend(b);
                st
            }
            Some(Ok(None)) => self.shared.arb_stats.read(),
            Some(Err(_)) => {
                return Err(RuntimeError::Thread {
                    what: "arbiter".into(),
                    reason: "panicked".into(),
                })
            }
            None => ArbiterStats::default(),
        };
        for (i, h) in std::mem::take(&mut self.dispatchers)
            .into_iter()
            .enumerate()
        {
            match h.join() {
                Ok(b) => backends.extend(b),
                Err(_) => {
                    return Err(RuntimeError::Thread {
                        what: format!("dispatcher {i}"),
                        reason: "panicked".into(),
                    })
                }
            }
        }
        // Every runtime thread was joined: this thread is now the only
        // writer of the drop counters.
        self.shared.settle_after_fault();
        Ok(Finished {
            stats: self.shared.stats(),
            arbiter,
            backends,
            error: self.shared.fault_error(),
        })
    }

    fn close(&self) {
        close(&self.shared);
    }
}

/// Marks `shared` closing and wakes the arbiter.
pub(crate) fn close(shared: &Shared) {
    shared.close();
}

fn pin(core: Option<usize>) {
    if let Some(core) = core {
        core_affinity::set_for_current(core_affinity::CoreId { id: core });
    }
}

impl<B: TxBackend> Drop for Runtime<B> {
    fn drop(&mut self) {
        if self.arbiter.is_some() {
            self.close();
            if let Some(h) = self.arbiter.take() {
                let _ = h.join();
            }
            for h in self.dispatchers.drain(..) {
                let _ = h.join();
            }
        }
    }
}
