//! What one benchmark run measures: the architecture ([`Mode`]), the
//! clients, the scheduler and the link ([`BenchConfig`]), and the optional
//! latency-sensitive client ([`VictimConfig`]). Every field is checked by
//! [`BenchConfig::validate`] before any thread starts.

use std::fmt;
use std::time::Duration;

use pspat::{RuntimeConfig, RuntimeError, ShutdownPolicy, TxMode};
use pspat_sched::{FlowParams, FlowTable, LinkEmulator, SchedulerConfig};

/// Which architecture to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The PSPAT runtime.
    Pspat,
    /// One lock around the scheduler, link emulation and transmit.
    Lock,
    /// No scheduler.
    None,
}

impl Mode {
    /// `"pspat"`, `"lock"` or `"none"`.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Pspat => "pspat",
            Mode::Lock => "lock",
            Mode::None => "none",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "pspat" => Ok(Mode::Pspat),
            "lock" => Ok(Mode::Lock),
            "none" => Ok(Mode::None),
            _ => Err(RuntimeError::invalid(
                "mode",
                format!("unknown {s:?} (allowed: pspat, lock, none)"),
            )),
        }
    }
}

/// An extra latency-sensitive client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VictimConfig {
    /// Its weight.
    pub weight: u32,
    /// Packets per second it submits, 1..=10_000_000.
    pub pps: u64,
    /// Its packet length, 1..=65535.
    pub pkt_len: u32,
}

/// Everything one benchmark run needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchConfig {
    /// Architecture.
    pub mode: Mode,
    /// Greedy clients, 1..=1000.
    pub clients: usize,
    /// Algorithm and its parameters.
    pub sched: SchedulerConfig,
    /// Pspat mode: how packets are transmitted.
    pub tx_mode: TxMode,
    /// T for dispatcher mode (0 = the arbiter transmits).
    pub dispatchers: usize,
    /// Measured duration.
    pub duration: Duration,
    /// Packet length of the greedy clients, 1..=65535.
    pub pkt_len: u32,
    /// The lmax (largest packet, bytes) every greedy client's flow
    /// declares, `pkt_len..=65535`; the victim's flow declares the larger
    /// of this and its own length. Default [`pspat_sched::DEFAULT_LMAX`]
    /// (1500, one Ethernet MTU), as `pspat shape` gives every flow its
    /// output interface's largest frame: a flow does not know its packets'
    /// lengths in advance. A caller that raises `pkt_len` above it sets this
    /// too ([`BenchConfig::default_lmax`]). DRR's quanta and QFQ's groups
    /// derive from it; with lmax equal to a 60-byte `pkt_len`, DRR sends one
    /// packet per visit instead of 25.
    pub lmax: u32,
    /// Empty = all 1; one value = all; else one per client.
    pub weights: Vec<u32>,
    /// Link rate; `None` = unlimited.
    pub rate_bps: Option<u64>,
    /// Pin threads (arbiter core 0, clients core 1).
    pub pin: bool,
    /// Optional latency-sensitive client.
    pub victim: Option<VictimConfig>,
    /// Δ_A in ns.
    pub delta_a_ns: u64,
    /// Pspat mode: [`pspat::RuntimeConfig::max_wake_delay_ns`], the most
    /// wake-up coalescing moves a packet from its due time (default 1 ms).
    pub max_wake_delay_ns: u64,
    /// Pspat mode: [`pspat::RuntimeConfig::wake_batch`], about how many
    /// packets leave per wake-up of a sleeping arbiter (default 4).
    pub wake_batch: u32,
    /// Client mailbox slots, a power of two in 64..=65536; 0 (the default)
    /// sizes them to the descriptor pool: twice the client's descriptors,
    /// 64..=512 slots. Pspat mode only.
    pub mailbox_entries: usize,
    /// Descriptors per client (its packets in flight at most), a multiple of
    /// 64 in 64..=1048576; 0 (the default) gives 8 Ki in total, 512..=1024
    /// each (the method of the same name records what was measured). Pspat
    /// mode only.
    pub descriptors_per_client: usize,
    /// Pspat mode: what the runtime's shutdown does with packets still held
    /// after the measured window (default: drain for at most 5 s). Nothing
    /// sent after the window counts in the report either way.
    pub shutdown: ShutdownPolicy,
}

impl BenchConfig {
    /// DRR, 60-byte packets (lmax 1500), 5 s, unlimited rate, pinned, T = 0.
    pub fn new(mode: Mode, clients: usize) -> Self {
        BenchConfig {
            mode,
            clients,
            sched: SchedulerConfig::new(pspat_sched::AlgKind::Drr),
            tx_mode: TxMode::Dispatcher,
            dispatchers: 0,
            duration: Duration::from_secs(5),
            pkt_len: 60,
            lmax: pspat_sched::DEFAULT_LMAX,
            weights: Vec::new(),
            rate_bps: None,
            pin: true,
            victim: None,
            delta_a_ns: 1000,
            max_wake_delay_ns: RuntimeConfig::default().max_wake_delay_ns,
            wake_batch: RuntimeConfig::default().wake_batch,
            mailbox_entries: 0,
            descriptors_per_client: 0,
            shutdown: ShutdownPolicy::default(),
        }
    }

    /// The lmax flows of `pkt_len`-byte packets declare unless told
    /// otherwise: one Ethernet MTU ([`pspat_sched::DEFAULT_LMAX`]), or the
    /// packet length when that is larger (see [`BenchConfig::lmax`]).
    pub fn default_lmax(pkt_len: u32) -> u32 {
        pspat_sched::DEFAULT_LMAX.max(pkt_len)
    }

    /// Checks every field before any thread starts:
    /// [`BenchConfig::validate_run`], then [`BenchConfig::validate_scheduler`].
    ///
    /// # Errors
    /// [`RuntimeError::OutOfRange`]/[`RuntimeError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        self.validate_run()?;
        self.validate_scheduler()
    }

    /// Checks everything but the scheduler's own parameters (`sched`):
    /// clients, lengths, duration, weights (the flow table), victim, runtime
    /// and link.
    ///
    /// # Errors
    /// As [`BenchConfig::validate`].
    pub fn validate_run(&self) -> Result<(), RuntimeError> {
        RuntimeError::check_range("clients", self.clients, 1..=1000)?;
        RuntimeError::check_range("pkt_len", self.pkt_len, 1..=65_535)?;
        RuntimeError::check_range("lmax", self.lmax, self.pkt_len..=65_535)?;
        if self.duration.is_zero() || self.duration > Duration::from_secs(3600) {
            return Err(RuntimeError::out_of_range(
                "duration",
                format!("{:?}", self.duration),
                "0 < duration <= 3600 s",
            ));
        }
        if self.weights.len() > 1 && self.weights.len() != self.clients {
            return Err(RuntimeError::invalid(
                "weights",
                format!(
                    "{} values for {} clients (give none, one, or one per client)",
                    self.weights.len(),
                    self.clients
                ),
            ));
        }
        if let Some(v) = &self.victim {
            RuntimeError::check_range("victim pps", v.pps, 1..=10_000_000)?;
            RuntimeError::check_range("victim pkt_len", v.pkt_len, 1..=65_535)?;
        }
        if self.mode == Mode::Pspat {
            self.runtime_config(false).validate()?;
        } else if let Some(r) = self.rate_bps {
            LinkEmulator::new(r, 512)?;
        }
        self.flow_table()?;
        Ok(())
    }

    /// Checks the scheduler's parameters (`sched`) by building it once with
    /// the run's flow table, so a bad algorithm parameter (a negative shaping
    /// rate, a malformed hierarchy) is a configuration error before anything
    /// starts. Call after [`BenchConfig::validate_run`]: a bad weight fails
    /// here too.
    ///
    /// # Errors
    /// As [`BenchConfig::validate`].
    pub fn validate_scheduler(&self) -> Result<(), RuntimeError> {
        // The run raises the capacity to hold every descriptor in flight
        // (`sched_config`), but a capacity the scheduler itself would refuse
        // is still the caller's mistake, reported as such.
        RuntimeError::check_range(
            "scheduler capacity (packets)",
            self.sched.capacity,
            1..=pspat_sched::PacketQueues::MAX_CAPACITY,
        )?;
        self.sched_config().build(self.flow_table()?)?;
        Ok(())
    }

    /// The bytes this run needs before it starts: the scheduler with its
    /// arena full (`SchedulerConfig::memory_estimate`), the runtime's
    /// mailboxes and descriptors in mode pspat (`pspat::memory_estimate`),
    /// and the victim's latency samples.
    pub fn memory_estimate(&self) -> u64 {
        let sched = self.sched_config().memory_estimate(self.total_clients());
        let runtime = match self.mode {
            Mode::Pspat => pspat::memory_estimate(&self.runtime_config(false)),
            Mode::Lock | Mode::None => 0,
        };
        // Latencies (and in lock mode submit times), 8 bytes each.
        let victim = 2 * 8 * crate::victim::victim_capacity(self) as u64;
        sched + runtime + victim
    }

    pub(crate) fn total_clients(&self) -> usize {
        self.clients + usize::from(self.victim.is_some())
    }

    pub(crate) fn weight(&self, i: usize) -> u32 {
        if i == self.clients {
            return self.victim.map_or(1, |v| v.weight);
        }
        match self.weights.len() {
            0 => 1,
            1 => self.weights[0],
            _ => self.weights[i],
        }
    }

    pub(crate) fn flow_table(&self) -> Result<FlowTable, RuntimeError> {
        let flows = (0..self.total_clients())
            .map(|i| FlowParams {
                weight: self.weight(i),
                lmax: if i == self.clients {
                    self.victim.map_or(self.lmax, |v| v.pkt_len.max(self.lmax))
                } else {
                    self.lmax
                },
                priority: u8::from(i != self.clients || self.victim.is_none()),
            })
            .collect();
        Ok(FlowTable::new(flows)?)
    }

    pub(crate) fn runtime_config(&self, pinned: bool) -> RuntimeConfig {
        // `RuntimeConfig` is non-exhaustive: start from its defaults.
        let mut rc = RuntimeConfig::default();
        rc.max_clients = self.total_clients().max(1);
        rc.mailbox_entries = self.mailbox_entries();
        rc.delta_a_ns = self.delta_a_ns;
        rc.max_wake_delay_ns = self.max_wake_delay_ns;
        rc.wake_batch = self.wake_batch;
        rc.tx_mode = self.tx_mode;
        rc.dispatchers = self.dispatchers;
        rc.rate_bps = self.rate_bps;
        rc.arbiter_core = pinned.then_some(ARBITER_CORE);
        rc.dispatcher_core = pinned.then_some(CLIENT_CORE);
        rc.descriptors_per_client = self.descriptors_per_client();
        rc.shutdown = self.shutdown;
        rc
    }
}

impl BenchConfig {
    /// Packets in flight per client: the field of this name when set
    /// (`pspat bench --descriptors`), else 8 Ki in total, 512..=1024 each
    /// (so clients x 512 from 16 clients on: 512 000 at 1000). The
    /// scheduler is sized to hold them all, so it never drops. Greedy
    /// clients keep every descriptor in flight, so this budget is the
    /// scheduler's working set: with 64 Ki in flight 64 clients fell to
    /// ~3 M decisions/s (the queues left the caches). The floor is the other
    /// side of the trade: a client that runs out of descriptors yields its
    /// core, and with 1000 clients on one core every turn costs the client
    /// core a yield, a context switch and the cold misses of the client's
    /// state, so a turn carries at most a pool. At 1000 clients a floor of
    /// 128 held a 2-vCPU AMD EPYC guest to about 12.5 M decisions/s where
    /// 256 reached 19.5 M; 512 against 256 measured 1.30x on an AMD EPYC
    /// guest of family 26, 1.07x on one of family 25 model 17, 0.98x on an
    /// Intel Xeon guest of model 207 with a narrower spread, and at 64
    /// clients 0.97x to 1.04x (docs/BENCHMARKS.md, section 3). Earlier, with
    /// 512-slot mailboxes: 16 per client 6.5 M, 32 12 M, 64 ~24 M, 128 19 M,
    /// 256 15.5 M, 512 12.5 M; with mailboxes sized to the pool
    /// (`mailbox_entries`): 64 per client 31.6 M, 128 34.4 M, 256 28.6 M
    /// (Intel Xeon guest, 1067b2e).
    pub fn descriptors_per_client(&self) -> usize {
        match self.descriptors_per_client {
            0 => ((8_192 / self.total_clients()) & !63).clamp(512, 1024),
            n => n,
        }
    }

    /// Mailbox slots per client: the field of this name when set (`pspat
    /// bench --mailbox-entries`), else twice the descriptors, 64..=512.
    /// A client never has more packets in flight than descriptors, so a
    /// mailbox twice that size never refuses for long, and smaller mailboxes
    /// keep 1000 clients' rings (4 MB at 512 slots) closer to the caches:
    /// at 1000 clients 128 slots measured about 7% more decisions/s than 512.
    pub fn mailbox_entries(&self) -> usize {
        match self.mailbox_entries {
            0 => (2 * self.descriptors_per_client())
                .next_power_of_two()
                .clamp(64, 512),
            n => n,
        }
    }

    /// The scheduler's configuration: room for every descriptor, and the
    /// link rate as WF2Q+'s hint unless the caller gave one (links faster
    /// than the hint's range, above 1 Tbit/s, run without it).
    pub(crate) fn sched_config(&self) -> SchedulerConfig {
        let mut s = self.sched.clone();
        s.capacity = s
            .capacity
            .max(self.total_clients() * self.descriptors_per_client());
        if s.link_rate_bps.is_none() {
            s.link_rate_bps = self.rate_bps.filter(|&r| r <= WF2Q_HINT_MAX_BPS);
        }
        s
    }
}

/// The largest link-rate hint WF2Q+ takes (1 Tbit/s, its fixed-point
/// range); faster links run without the hint.
const WF2Q_HINT_MAX_BPS: u64 = 1_000_000_000_000;

pub(crate) const ARBITER_CORE: usize = 0;
pub(crate) const CLIENT_CORE: usize = 1;
pub(crate) const BURST: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use pspat_sched::FlowId;

    #[test]
    fn the_coalescing_settings_reach_the_runtime() {
        let mut cfg = BenchConfig::new(Mode::Pspat, 1);
        let defaults = RuntimeConfig::default();
        let rc = cfg.runtime_config(false);
        assert_eq!(
            (rc.max_wake_delay_ns, rc.wake_batch),
            (defaults.max_wake_delay_ns, defaults.wake_batch)
        );
        cfg.max_wake_delay_ns = 2_000_000;
        cfg.wake_batch = 16;
        let rc = cfg.runtime_config(false);
        assert_eq!((rc.max_wake_delay_ns, rc.wake_batch), (2_000_000, 16));
        assert!(rc.validate().is_ok());
    }

    #[test]
    fn flows_declare_the_lmax_and_the_victim_its_larger_length() {
        let mut cfg = BenchConfig::new(Mode::Pspat, 2);
        let t = cfg.flow_table().unwrap();
        assert_eq!(t.get(FlowId(0)).map(|f| f.lmax), Some(1500));
        assert_eq!(t.get(FlowId(1)).map(|f| f.lmax), Some(1500));
        cfg.lmax = 60;
        cfg.victim = Some(VictimConfig {
            weight: 50,
            pps: 4000,
            pkt_len: 1500,
        });
        let t = cfg.flow_table().unwrap();
        let lmax: Vec<u32> = t.slots().map(|f| f.lmax).collect();
        assert_eq!(lmax, [60, 60, 1500]);
        cfg.victim = Some(VictimConfig {
            weight: 50,
            pps: 4000,
            pkt_len: 40,
        });
        assert_eq!(cfg.flow_table().unwrap().max_lmax(), 60);
    }

    #[test]
    fn an_lmax_below_the_packet_length_is_refused() {
        let mut cfg = BenchConfig::new(Mode::Pspat, 2);
        cfg.pkt_len = 1500;
        cfg.lmax = 1499;
        let e = cfg.validate().unwrap_err().to_string();
        assert_eq!(
            e, "lmax = 1499 is out of range (allowed: 1500..=65535)",
            "{e}"
        );
        cfg.lmax = 1500;
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn descriptors_and_mailbox_slots_default_to_the_budget_or_take_the_given_sizes() {
        let mut cfg = BenchConfig::new(Mode::Pspat, 1000);
        assert_eq!(cfg.descriptors_per_client(), 512);
        assert_eq!(cfg.mailbox_entries(), 512);
        assert_eq!(
            BenchConfig::new(Mode::Pspat, 8).descriptors_per_client(),
            1024
        );
        assert_eq!(
            BenchConfig::new(Mode::Pspat, 12).descriptors_per_client(),
            640
        );
        assert_eq!(
            BenchConfig::new(Mode::Pspat, 64).descriptors_per_client(),
            512
        );
        let mut one = BenchConfig::new(Mode::Pspat, 1);
        assert_eq!(one.descriptors_per_client(), 1024);
        assert_eq!(one.mailbox_entries(), 512);
        one.descriptors_per_client = 64;
        assert_eq!(one.mailbox_entries(), 128, "the default slots follow");
        cfg.descriptors_per_client = 64;
        cfg.mailbox_entries = 128;
        let rc = cfg.runtime_config(false);
        assert_eq!((rc.descriptors_per_client, rc.mailbox_entries), (64, 128));
        assert!(cfg.validate().is_ok());
        cfg.descriptors_per_client = 100;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.starts_with("descriptors_per_client = 100"), "{e}");
        cfg.descriptors_per_client = 64;
        cfg.mailbox_entries = 100;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.starts_with("mailbox_entries = 100"), "{e}");
    }

    #[test]
    fn the_default_lmax_is_one_mtu_or_the_packet() {
        assert_eq!(BenchConfig::default_lmax(60), 1500);
        assert_eq!(BenchConfig::default_lmax(9000), 9000);
    }
}
