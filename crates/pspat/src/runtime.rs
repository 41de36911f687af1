//! Building, running and shutting down one PSPAT instance: client lists,
//! the arbiter thread, optional dispatcher threads (\[J\] §3, Fig. 4;
//! `REFERENCE.md` §1).
//!
//! # Client lists and the "never strand a packet" argument
//! There is one client list per CPU (\[J\] §3.1). In userspace two threads
//! sharing a CPU could push into one list at once, so a list is a `fetch_or`
//! bitmap of client ids (`REFERENCE.md` §1.2, default fix), plus a `last`
//! hint: a client announces itself (sets its bit, stores `last = id`) only
//! when `last` is not already its id, so under load announcing costs one L1
//! hit per submit and one `fetch_or` per context switch. The CPU comes from
//! `sched_getcpu`, refreshed every 64 submits; a stale CPU only picks a
//! different (equally valid) list.
//!
//! The arbiter swaps a list's bitmap to zero when the list's read gate Δ_A
//! has expired and puts every announced mailbox "in service"; it drains
//! in-service mailboxes at each read of their list. A mailbox found empty on
//! `retire_after_reads` consecutive reads leaves service with this
//! handshake, the only place where ordering is subtle:
//!
//! * arbiter: `swap(last, NONE)` on every list (SeqCst; always a write,
//!   even when `last` names another client, which then re-announces once),
//!   `fence(SeqCst)`, then checks the mailbox; non-empty → stays in service;
//! * client (every submit): push (Release), `fence(SeqCst)`, load `last`;
//!   not its id → announce, storing `last = id` *before* setting its bit.
//!
//! Either the client's fence precedes the arbiter's in the single total
//! order of SeqCst operations, and the arbiter's check sees the packet; or
//! the arbiter's precedes, and the client's load returns the NONE written by
//! the swap or a later value. A later value is another client's id, or this
//! client's own id from an announcement made after the swap, whose bit is
//! still set: the arbiter sees it at the next read and drains everything
//! pushed before it (the bit is set after the pushes, Release → Acquire).
//! An announcement whose bit the arbiter already consumed cannot leave a
//! stale `last = id` behind the swap: the hint is stored before the bit, so
//! it precedes the swap in modification order. (An earlier version set the
//! bit first and used a compare-exchange; a stress test stranded a packet
//! through exactly that window.)
//! The same fence serves the sleep handshake (below), so a submit costs one
//! full fence (one per burst in [`crate::Client::submit_burst`]).
//!
//! # Sleeping (\[E\] §3.1, \[J\] §3.5, `REFERENCE.md` §1.7)
//! With nothing to do the arbiter spins for T_w ([`RuntimeConfig::spin_ns`]),
//! then stores `sleeping = true`, issues `fence(SeqCst)`, rescans every
//! bitmap and in-service mailbox, and parks only if the rescan found
//! nothing. A client, after its push and fence, reads `sleeping`; if set, it
//! swaps it to false and unparks the arbiter (kick v1; when the arbiter is
//! awake the kick is one load of a line that stays shared). By the same
//! fence argument no wake-up is lost; the park has a 100 ms timeout as a
//! safety net, and [`crate::ArbiterStats::unrequested_wakeups_with_work`]
//! counts any time it was needed. With packets queued but the emulated link
//! busy, the arbiter sleeps until `link_idle` (spinning when that is under
//! 50 µs, `thread::sleep` otherwise).
//!
//! # Dead clients and shutdown (`REFERENCE.md` §1.9)
//! Dropping a [`crate::Client`] drops its mailbox producer (which marks the
//! mailbox abandoned, Release), then announces the client and kicks the
//! arbiter. The arbiter retires an abandoned mailbox after draining it
//! empty; its packets still in the scheduler are transmitted normally (the
//! descriptor pool outlives the handle through an `Arc`). Ids are not
//! reused.
//!
//! [`Runtime::shutdown`] marks the runtime closing (no new clients) and waits
//! until every client handle is dropped, every mailbox retired and the
//! scheduler empty; the link rate is respected to the end (nothing is
//! released early). Then dispatchers drain their TX mailboxes and every
//! thread is joined: afterwards `in_flight == 0` for every client.
//!
//! # Complexity
//! Per packet the arbiter touches the client-mailbox slot (8 bytes, 16 per
//! line), the scheduler, and — when it transmits itself (T = 0) — the
//! client's descriptor entry (16 bytes, sequential per client). Per round it
//! reads one clock, and per list with an expired gate `max_clients / 64`
//! bitmap words and one slot per in-service mailbox.
//!
//! # Deviations
//! * A full TX mailbox does not drop: the arbiter keeps the packets already
//!   released in a small per-dispatcher backlog (at most one batch) and
//!   releases nothing more until the dispatcher made room, so overload
//!   backpressures into the scheduler, where policy decides. Drops inside the
//!   arbiter therefore come from the scheduler only.
//! * After a scheduler drop the rest of the client mailbox is still offered
//!   packet by packet (the reference drops the rest); each drop is counted
//!   with its own reason.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};

use crossbeam_utils::CachePadded;
use pspat_mailbox::{Consumer, Producer};
use pspat_sched::Scheduler;

use crate::arbiter::{Arbiter, Dispatcher};
use crate::stats::{ClientStats, Counter, TxCount, NREASONS};
use crate::sync::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crate::{ArbiterStats, Client, Clock, RuntimeError, Stats, TxBackend};

/// How released packets reach the wire (\[J\] §3.3, \[E\] §3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TxMode {
    /// The arbiter pushes released packets to T dispatcher threads (T = 0:
    /// the arbiter transmits itself).
    #[default]
    Dispatcher,
    /// The arbiter only grants; each client transmits its granted packets in
    /// [`crate::Client::drain`] (called by every submit).
    Client,
}

impl TxMode {
    /// `"dispatcher"` or `"client"`.
    pub const fn name(self) -> &'static str {
        match self {
            TxMode::Dispatcher => "dispatcher",
            TxMode::Client => "client",
        }
    }
}

impl std::fmt::Display for TxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TxMode {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "dispatcher" => Ok(TxMode::Dispatcher),
            "client" | "client-drain" => Ok(TxMode::Client),
            _ => Err(RuntimeError::invalid(
                "tx mode",
                format!("unknown {s:?} (allowed: dispatcher, client)"),
            )),
        }
    }
}

/// What a client learns of the arbiter's drops (`REFERENCE.md` §1.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BackpressurePolicy {
    /// The next submit succeeds and reports the drop in
    /// [`crate::Accepted::drop_reported`]. The default: a greedy sender loses
    /// no submit to the report.
    #[default]
    ReportOnly,
    /// The reference semantics: the next submit fails with
    /// [`crate::SubmitError::DroppedEarlier`], handing the packet back.
    RejectNext,
}

/// Runtime parameters; [`RuntimeConfig::default`] holds the reference
/// defaults (`REFERENCE.md` §1.10).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Clients that may ever be created, 1..=1_048_576 (sizes the bitmaps
    /// and counter arrays).
    pub max_clients: usize,
    /// Client mailbox slots, a power of two in 64..=65536 (reference 512).
    pub mailbox_entries: usize,
    /// Descriptors per client: packets of one client in flight at most; a
    /// multiple of 64 in 64..=1_048_576 (default 1024).
    pub descriptors_per_client: usize,
    /// Δ_A, the minimum interval between two reads of one client list, ns
    /// (reference 1000; 0 reads every round).
    pub delta_a_ns: u64,
    /// Scheduler decisions per round at most (reference 512).
    pub arb_batch: u32,
    /// Packets a dispatcher transmits per batch (reference 256).
    pub dispatch_batch: usize,
    /// TX mailbox slots per dispatcher, a power of two >= 64.
    pub tx_mailbox_entries: usize,
    /// Transmission mode.
    pub tx_mode: TxMode,
    /// T, the dispatcher threads in dispatcher mode (0 = the arbiter
    /// transmits), 0..=64.
    pub dispatchers: usize,
    /// Emulated link rate, bit/s; `None` = unlimited.
    pub rate_bps: Option<u64>,
    /// T_w: how long the arbiter (and a dispatcher) spins idle before parking, ns.
    pub spin_ns: u64,
    /// Consecutive empty reads after which a mailbox leaves service
    /// (default 4). Small on purpose: the reference kernel drops a mailbox
    /// from its list as soon as it is drained; here a few reads of grace
    /// spare a client that pauses briefly the re-announcement. Every round
    /// reads every in-service mailbox (one or two cache misses each), so
    /// with many clients that each submit in short bursts (1000 clients
    /// time-sharing a core) a long grace period kept about all of them in
    /// service and the scan dominated the round: 64 reads gave ~17 M
    /// decisions/s in `pspat bench --clients 1000`, 4 reads ~24 M. A retire
    /// costs one `swap` per client list and one fence (module docs).
    pub retire_after_reads: u32,
    /// Report or reject after an arbiter drop.
    pub backpressure: BackpressurePolicy,
    /// Client lists; 0 = one per CPU.
    pub lists: usize,
    /// Core to pin the arbiter to.
    pub arbiter_core: Option<usize>,
    /// Core to pin dispatchers to.
    pub dispatcher_core: Option<usize>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_clients: 1024,
            mailbox_entries: 512,
            descriptors_per_client: 1024,
            delta_a_ns: 1000,
            arb_batch: 512,
            dispatch_batch: 256,
            tx_mailbox_entries: 1024,
            tx_mode: TxMode::Dispatcher,
            dispatchers: 0,
            rate_bps: None,
            spin_ns: 30_000,
            retire_after_reads: 4,
            backpressure: BackpressurePolicy::ReportOnly,
            lists: 0,
            arbiter_core: None,
            dispatcher_core: None,
        }
    }
}

impl RuntimeConfig {
    /// Checks every field.
    ///
    /// # Errors
    /// [`RuntimeError::OutOfRange`] naming the field and its allowed range.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        RuntimeError::check_range("max_clients", self.max_clients, 1..=1 << 20)?;
        if !self.mailbox_entries.is_power_of_two() || !(64..=65536).contains(&self.mailbox_entries)
        {
            return Err(RuntimeError::out_of_range(
                "mailbox_entries",
                self.mailbox_entries,
                "a power of two in 64..=65536",
            ));
        }
        let d = self.descriptors_per_client;
        if !d.is_multiple_of(64) || !(64..=1 << 20).contains(&d) {
            return Err(RuntimeError::out_of_range(
                "descriptors_per_client",
                d,
                "a multiple of 64 in 64..=1048576",
            ));
        }
        RuntimeError::check_range("delta_a_ns", self.delta_a_ns, 0..=1_000_000_000)?;
        RuntimeError::check_range("arb_batch", self.arb_batch, 1..=65536)?;
        RuntimeError::check_range("dispatch_batch", self.dispatch_batch, 1..=65536)?;
        if !self.tx_mailbox_entries.is_power_of_two()
            || !(64..=1 << 20).contains(&self.tx_mailbox_entries)
        {
            return Err(RuntimeError::out_of_range(
                "tx_mailbox_entries",
                self.tx_mailbox_entries,
                "a power of two in 64..=1048576",
            ));
        }
        RuntimeError::check_range("dispatchers", self.dispatchers, 0..=64)?;
        if let Some(r) = self.rate_bps {
            RuntimeError::check_range("rate_bps", r, pspat_sched::link::MIN_RATE_BPS..=u64::MAX)?;
        }
        RuntimeError::check_range("spin_ns", self.spin_ns, 0..=1_000_000_000)?;
        RuntimeError::check_range("retire_after_reads", self.retire_after_reads, 1..=u32::MAX)?;
        RuntimeError::check_range("lists", self.lists, 0..=1024)?;
        Ok(())
    }
}

/// `last` value meaning "nobody".
pub(crate) const NONE: u32 = u32::MAX;

/// One per-CPU client list: announcement bitmap and `last` hint.
pub(crate) struct ClientList {
    /// Bit `id` set: client `id` has (new) packets to look at.
    pub(crate) announced: Box<[AtomicU64]>,
    /// The last client that announced itself here (client-side hint).
    pub(crate) last: CachePadded<AtomicU32>,
}

/// One descriptor: written by its client before the push that publishes it,
/// read by the transmitter, recycled through the owner's `done` bitmap.
#[derive(Default)]
pub(crate) struct Desc {
    pub(crate) cookie: AtomicU64,
    /// `flow << 32 | len`.
    pub(crate) meta: AtomicU64,
}

/// State of one client that other threads read.
pub(crate) struct ClientShared {
    pub(crate) id: u32,
    pub(crate) submitted: CachePadded<Counter>,
    /// Transmit counters of the client itself (client-transmit mode).
    pub(crate) self_tx: CachePadded<TxCount>,
    pub(crate) descs: Box<[Desc]>,
    /// Completed descriptors, `fetch_or`ed by transmitters (Release) and
    /// swapped out by the owner (Acquire).
    pub(crate) done: CachePadded<Box<[AtomicU64]>>,
}

/// What the arbiter receives when a client is created.
pub(crate) struct Registration {
    pub(crate) shared: Arc<ClientShared>,
    pub(crate) consumer: Consumer<NonZeroU64>,
    /// Client-transmit mode: the arbiter's end of the grant mailbox.
    pub(crate) grants: Option<Producer<NonZeroU64>>,
}

/// Per dispatcher, what the arbiter and the dispatcher share.
pub(crate) struct DispatcherShared {
    pub(crate) sleeping: CachePadded<AtomicBool>,
    pub(crate) thread: OnceLock<Thread>,
}

pub(crate) struct Registry {
    pub(crate) all: Vec<Arc<ClientShared>>,
    pub(crate) pending: Vec<Registration>,
}

/// State shared by every thread of one runtime.
pub(crate) struct Shared {
    pub(crate) cfg: RuntimeConfig,
    pub(crate) clock: Clock,
    pub(crate) lists: Box<[ClientList]>,
    pub(crate) arbiter_sleeping: CachePadded<AtomicBool>,
    pub(crate) arbiter_thread: OnceLock<Thread>,
    pub(crate) closing: AtomicBool,
    pub(crate) arbiter_done: AtomicBool,
    pub(crate) live_clients: AtomicUsize,
    pub(crate) registry_dirty: AtomicBool,
    pub(crate) registry: Mutex<Registry>,
    /// `[transmitter][client]`: transmitter 0 is the arbiter (T = 0) or
    /// dispatcher 0.
    pub(crate) tx_counts: Box<[Box<[TxCount]>]>,
    /// `[client * NREASONS + reason]`, written by the arbiter.
    pub(crate) drops: Box<[Counter]>,
    pub(crate) dispatchers: Box<[DispatcherShared]>,
    pub(crate) arb_stats: ArbStatCounters,
    /// False only when the arbiter transmits (T = 0) to a backend that does
    /// not want cookies: then nobody reads a descriptor (the slot carries
    /// flow and length) and clients skip writing them.
    pub(crate) write_descs: bool,
}

#[derive(Default)]
pub(crate) struct ArbStatCounters {
    pub(crate) rounds: Counter,
    pub(crate) busy_round_ns: Counter,
    pub(crate) busy_rounds: Counter,
    pub(crate) sleeps: Counter,
    pub(crate) decisions: Counter,
    pub(crate) unrequested: Counter,
}

impl Shared {
    /// Kick v1: call after a push and a `fence(SeqCst)`.
    #[inline]
    pub(crate) fn kick_arbiter(&self) {
        // Relaxed load: ordered after the caller's SeqCst fence, which pairs
        // with the fence the arbiter issues after storing `true` (module docs).
        if self.arbiter_sleeping.load(Ordering::Relaxed)
            // AcqRel swap: exactly one kicker wins and unparks.
            && self.arbiter_sleeping.swap(false, Ordering::AcqRel)
        {
            if let Some(t) = self.arbiter_thread.get() {
                t.unpark();
            }
        }
    }

    /// Snapshot of every client (see [`crate::stats`] for the read order).
    pub(crate) fn stats(&self) -> Stats {
        let all: Vec<Arc<ClientShared>> = match self.registry.lock() {
            Ok(r) => r.all.clone(),
            Err(p) => p.into_inner().all.clone(),
        };
        let mut s = Stats::default();
        for c in &all {
            let id = c.id as usize;
            let mut tx = c.self_tx.packets.read();
            let mut bytes = c.self_tx.bytes.read();
            for row in self.tx_counts.iter() {
                tx += row[id].packets.read();
                bytes += row[id].bytes.read();
            }
            let mut by = [0u64; NREASONS];
            for (r, slot) in by.iter_mut().enumerate() {
                *slot = self.drops[id * NREASONS + r].read();
            }
            let dropped = by.iter().sum();
            // Last: see the module docs of `stats`.
            let submitted = c.submitted.read();
            s.push(ClientStats {
                id: c.id,
                submitted,
                transmitted: tx,
                transmitted_bytes: bytes,
                dropped,
                dropped_by_reason: by,
                in_flight: submitted.saturating_sub(tx + dropped),
            });
        }
        s
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
///     let mut s = Submission { flow: FlowId(1), len: 60, cookie: i };
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
    arbiter: Option<JoinHandle<(Option<B>, ArbiterStats)>>,
    dispatchers: Vec<JoinHandle<B>>,
    factory: Mutex<Box<dyn FnMut(TxOwner) -> B + Send>>,
}

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
    /// from [`crate::Client::into_backend`]).
    pub backends: Vec<B>,
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
        cfg.validate()?;
        let link = match cfg.rate_bps {
            Some(r) => pspat_sched::LinkEmulator::new(r, cfg.arb_batch)?,
            None => pspat_sched::LinkEmulator::unlimited(cfg.arb_batch)?,
        };
        let nlists = if cfg.lists == 0 {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(1024)
        } else {
            cfg.lists
        };
        let words = cfg.max_clients.div_ceil(64);
        let lists = (0..nlists)
            .map(|_| ClientList {
                announced: (0..words).map(|_| AtomicU64::new(0)).collect(),
                last: CachePadded::new(AtomicU32::new(NONE)),
            })
            .collect();
        let transmitters = match cfg.tx_mode {
            TxMode::Dispatcher => cfg.dispatchers.max(1),
            TxMode::Client => 0,
        };
        let tx_counts = (0..transmitters)
            .map(|_| (0..cfg.max_clients).map(|_| TxCount::default()).collect())
            .collect();
        let drops = (0..cfg.max_clients * NREASONS)
            .map(|_| Counter::default())
            .collect();
        let ndisp = if cfg.tx_mode == TxMode::Dispatcher {
            cfg.dispatchers
        } else {
            0
        };
        let dispatchers = (0..ndisp)
            .map(|_| DispatcherShared {
                sleeping: CachePadded::new(AtomicBool::new(false)),
                thread: OnceLock::new(),
            })
            .collect();
        let mut factory: Box<dyn FnMut(TxOwner) -> B + Send> = Box::new(factory);
        // Built before the dispatchers' backends as before: with T = 0 there
        // are none.
        let direct = if cfg.tx_mode == TxMode::Dispatcher && ndisp == 0 {
            Some(factory(TxOwner::Arbiter))
        } else {
            None
        };
        let write_descs = direct.as_ref().is_none_or(TxBackend::wants_cookies);
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            clock: Clock::new(),
            lists,
            arbiter_sleeping: CachePadded::new(AtomicBool::new(false)),
            arbiter_thread: OnceLock::new(),
            closing: AtomicBool::new(false),
            arbiter_done: AtomicBool::new(false),
            live_clients: AtomicUsize::new(0),
            registry_dirty: AtomicBool::new(false),
            registry: Mutex::new(Registry {
                all: Vec::new(),
                pending: Vec::new(),
            }),
            tx_counts,
            drops,
            dispatchers,
            arb_stats: ArbStatCounters::default(),
            write_descs,
        });
        let mut tx_producers = Vec::new();
        let mut dispatcher_handles = Vec::new();
        for d in 0..ndisp {
            let (p, c) = pspat_mailbox::mailbox::<NonZeroU64>(cfg.tx_mailbox_entries)
                .map_err(|e| RuntimeError::invalid("tx_mailbox_entries", e.to_string()))?;
            tx_producers.push(p);
            let backend = factory(TxOwner::Dispatcher(d));
            let disp = Dispatcher::new(Arc::clone(&shared), d, c, backend);
            let core = cfg.dispatcher_core;
            let h = std::thread::Builder::new()
                .name(format!("pspat-dispatcher-{d}"))
                .spawn(move || {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core_affinity::CoreId { id: core });
                    }
                    disp.run()
                })
                .map_err(|e| RuntimeError::Thread {
                    what: format!("dispatcher {d}"),
                    reason: e.to_string(),
                })?;
            let _ = shared.dispatchers[d].thread.set(h.thread().clone());
            dispatcher_handles.push(h);
        }
        let arb = Arbiter::new(Arc::clone(&shared), sched, link, direct, tx_producers);
        let core = cfg.arbiter_core;
        let arbiter = std::thread::Builder::new()
            .name("pspat-arbiter".into())
            .spawn(move || {
                if let Some(core) = core {
                    core_affinity::set_for_current(core_affinity::CoreId { id: core });
                }
                arb.run()
            })
            .map_err(|e| RuntimeError::Thread {
                what: "arbiter".into(),
                reason: e.to_string(),
            })?;
        let _ = shared.arbiter_thread.set(arbiter.thread().clone());
        Ok(Runtime {
            shared,
            arbiter: Some(arbiter),
            dispatchers: dispatcher_handles,
            factory: Mutex::new(factory),
        })
    }

    /// A new client handle with its own mailbox and descriptor pool.
    ///
    /// # Errors
    /// [`RuntimeError::TooManyClients`] past `max_clients`;
    /// [`RuntimeError::Closed`] after shutdown began.
    pub fn client(&self) -> Result<Client<B>, RuntimeError> {
        if self.shared.closing.load(Ordering::Acquire) {
            return Err(RuntimeError::Closed);
        }
        let cfg = &self.shared.cfg;
        let (producer, consumer) = pspat_mailbox::mailbox::<NonZeroU64>(cfg.mailbox_entries)
            .map_err(|e| RuntimeError::invalid("mailbox_entries", e.to_string()))?;
        let mut reg = self
            .shared
            .registry
            .lock()
            .map_err(|_| RuntimeError::Thread {
                what: "registry".into(),
                reason: "poisoned".into(),
            })?;
        let id = reg.all.len();
        if id >= cfg.max_clients {
            return Err(RuntimeError::TooManyClients {
                max: cfg.max_clients,
            });
        }
        let nd = cfg.descriptors_per_client;
        let shared = Arc::new(ClientShared {
            id: id as u32,
            submitted: CachePadded::new(Counter::default()),
            self_tx: CachePadded::new(TxCount::default()),
            descs: (0..nd).map(|_| Desc::default()).collect(),
            done: CachePadded::new((0..nd / 64).map(|_| AtomicU64::new(0)).collect()),
        });
        let (grant_p, grant_c, backend) = if cfg.tx_mode == TxMode::Client {
            // Room for every descriptor plus a line: the arbiter's grant push
            // can never find it full.
            let entries = (nd + 16).next_power_of_two().max(64);
            let (p, c) = pspat_mailbox::mailbox::<NonZeroU64>(entries)
                .map_err(|e| RuntimeError::invalid("descriptors_per_client", e.to_string()))?;
            let b = match self.factory.lock() {
                Ok(mut f) => f(TxOwner::Client(id as u32)),
                Err(_) => {
                    return Err(RuntimeError::Thread {
                        what: "backend factory".into(),
                        reason: "poisoned".into(),
                    })
                }
            };
            (Some(p), Some(c), Some(b))
        } else {
            (None, None, None)
        };
        reg.all.push(Arc::clone(&shared));
        reg.pending.push(Registration {
            shared: Arc::clone(&shared),
            consumer,
            grants: grant_p,
        });
        // SeqCst: before the handle exists, so `can_exit` never misses it.
        self.shared.live_clients.fetch_add(1, Ordering::SeqCst);
        // Release: pairs with the Acquire swap in the arbiter, which then
        // locks the registry and finds this registration.
        self.shared.registry_dirty.store(true, Ordering::Release);
        drop(reg);
        Ok(Client::new(
            Arc::clone(&self.shared),
            shared,
            producer,
            grant_c,
            backend,
        ))
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
        let a = &self.shared.arb_stats;
        ArbiterStats {
            rounds: a.rounds.read(),
            busy_round_ns: a.busy_round_ns.read(),
            busy_rounds: a.busy_rounds.read(),
            sleeps: a.sleeps.read(),
            decisions: a.decisions.read(),
            unrequested_wakeups_with_work: a.unrequested.read(),
        }
    }

    /// Stops accepting clients, waits until every client handle is dropped
    /// and every packet transmitted or dropped, then joins every thread.
    /// Drop (or [`crate::Client::into_backend`]) every client first, or from
    /// other threads: a client still held by the calling thread would make
    /// this wait forever. Dropping a `Runtime` does the same as this.
    ///
    /// # Errors
    /// [`RuntimeError::Thread`] if a runtime thread panicked.
    pub fn shutdown(mut self) -> Result<Finished<B>, RuntimeError> {
        self.close();
        let mut backends = Vec::new();
        let arbiter = match self.arbiter.take().map(JoinHandle::join) {
            Some(Ok((b, st))) => {
                backends.extend(b);
                st
            }
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
                Ok(b) => backends.push(b),
                Err(_) => {
                    return Err(RuntimeError::Thread {
                        what: format!("dispatcher {i}"),
                        reason: "panicked".into(),
                    })
                }
            }
        }
        Ok(Finished {
            stats: self.shared.stats(),
            arbiter,
            backends,
        })
    }

    fn close(&self) {
        // SeqCst store then fence: the arbiter checks `closing` in its
        // pre-sleep rescan, after its own fence.
        self.shared.closing.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.shared.arbiter_sleeping.store(false, Ordering::SeqCst);
        if let Some(t) = self.shared.arbiter_thread.get() {
            t.unpark();
        }
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
