//! Runtime parameters: the transmit mode, the backpressure policy and
//! [`RuntimeConfig`] with its reference defaults and validation.

use crate::{DispatchPlacement, RuntimeError};

/// How released packets reach the wire (\[J\] §3.3, \[E\] §3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TxMode {
    /// The arbiter pushes released packets to T dispatcher threads (T = 0:
    /// the arbiter transmits itself).
    #[default]
    Dispatcher,
    /// The arbiter only grants; each client transmits its granted packets in
    /// [`crate::Client::drain`], which its caller calls (as do
    /// [`crate::Client::wait_for_room`] and dropping the client; `submit`
    /// never does, so it never blocks on the backend).
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

/// What a client learns of the arbiter's drops (`docs/REFERENCE.md` §1.5).
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

/// What [`crate::Runtime::shutdown`] does with packets still held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShutdownPolicy {
    /// Keep sending at the link rate for at most `deadline` after shutdown
    /// began (as the arbiter's clock sees it); whatever is still held then
    /// is dropped with [`pspat_sched::DropReason::Shutdown`].
    Drain {
        /// How long the drain may last.
        deadline: std::time::Duration,
    },
    /// Drop everything still held at once
    /// ([`pspat_sched::DropReason::Shutdown`]).
    Discard,
}

impl Default for ShutdownPolicy {
    /// Drain for at most 5 s.
    fn default() -> Self {
        ShutdownPolicy::Drain {
            deadline: std::time::Duration::from_secs(5),
        }
    }
}

/// Runtime parameters; [`RuntimeConfig::default`] holds the reference
/// defaults (`docs/REFERENCE.md` §1.10).
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
    /// Whether an idle arbiter spends its T_w yielding its core
    /// (`sched_yield`) instead of pausing in place (default false). For an
    /// arbiter that shares a core with its clients (fewer cores than
    /// threads): a client that is ready runs at once, where a pausing
    /// arbiter would hold the core for T_w and a parked one costs a futex
    /// wake-up per kick. On a core of its own it only adds a system call
    /// per empty round.
    pub spin_yields: bool,
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
    /// What shutdown does with packets still held (default: drain for at
    /// most 5 s).
    pub shutdown: ShutdownPolicy,
    /// Wake-up coalescing behind a slow link or a shaper, 1..=64 (default
    /// 4): about `wake_batch` packets leave per wake-up instead of one. The
    /// arbiter keeps the mean gap between released packets; each round
    /// also releases what falls due within the slack after it, and when it
    /// sleeps through a wait (not when it spins: under 50 µs for the link,
    /// 2 µs for a shaper) it sleeps the slack past the first due time. The
    /// slack is `(wake_batch − 1) / 2` mean gaps, at most
    /// `max_wake_delay_ns`. Release times stay exact in the emulated link and
    /// the shaper (they are computed, not read off the clock), so rates do
    /// not change; a packet leaves at most the slack (plus the wake-up
    /// latency when late) before or after its due time, a burst of at most
    /// the slack's worth of bytes at the rate. 1 wakes for every packet.
    pub wake_batch: u32,
    /// How released packets are spread over the dispatchers (T ≥ 1):
    /// `flow % T` by default, or HRW, or AHRW with the flowlet guard (see
    /// [`DispatchPlacement`]).
    pub dispatch_placement: DispatchPlacement,
    /// The most wake-up coalescing moves a packet from its due time, ns,
    /// either way (default 1 ms; 0..=100 ms): see [`Self::wake_batch`].
    pub max_wake_delay_ns: u64,
    /// The longest an idle arbiter sleeps without a kick, ns (default
    /// 100 ms; 1 ms..=10 s): a safety net that bounds what a lost wake-up
    /// would cost, and the only time an idle arbiter wakes by itself.
    /// Clients kick it when they submit, and shutdown does; a caller that
    /// hands it work another way wakes it ([`crate::Runtime::arbiter_waker`])
    /// and may raise this to spare an idle process wake-ups.
    pub idle_safety_wake_ns: u64,
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
            spin_yields: false,
            retire_after_reads: 4,
            backpressure: BackpressurePolicy::ReportOnly,
            lists: 0,
            arbiter_core: None,
            dispatcher_core: None,
            shutdown: ShutdownPolicy::default(),
            wake_batch: 4,
            dispatch_placement: DispatchPlacement::Modulo,
            max_wake_delay_ns: 1_000_000,
            idle_safety_wake_ns: 100_000_000,
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
            RuntimeError::check_range(
                "rate_bps",
                r,
                pspat_sched::rate::MIN_RATE_BPS..=pspat_sched::rate::MAX_RATE_BPS,
            )?;
        }
        RuntimeError::check_range("spin_ns", self.spin_ns, 0..=1_000_000_000)?;
        RuntimeError::check_range("retire_after_reads", self.retire_after_reads, 1..=u32::MAX)?;
        RuntimeError::check_range("lists", self.lists, 0..=1024)?;
        RuntimeError::check_range("wake_batch", self.wake_batch, 1..=64)?;
        RuntimeError::check_range("max_wake_delay_ns", self.max_wake_delay_ns, 0..=100_000_000)?;
        RuntimeError::check_range(
            "idle_safety_wake_ns",
            self.idle_safety_wake_ns,
            1_000_000..=10_000_000_000,
        )?;
        Ok(())
    }
}
