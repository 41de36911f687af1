//! What a bridge is asked to do: [`BridgeConfig`], its checks, and the
//! errors of starting one ([`BridgeError`]).

use std::time::Duration;

use pspat_io::parse::FlowKeyKind;
use pspat_io::{IoError, RxRing};
use pspat_sched::SchedulerConfig;

use crate::switch::ReverseSwitch;

/// How long one wait for the ring lasts at most: an idle RX thread wakes
/// this often (a stop ends the wait at once, through the bridge's
/// [`pspat_io::StopLatch`]).
pub(crate) const RX_WAIT: Duration = Duration::from_secs(1);

/// The kernel's ring drop counts are read at most this often (and after
/// every wait of [`RX_WAIT`] when idle).
pub(crate) const KERNEL_STATS_EVERY: Duration = Duration::from_millis(100);

/// The most flows a bridge classifies into.
pub const MAX_FLOWS: u32 = 65_536;

/// The most RX threads (and so runtime clients) a bridge runs.
pub const MAX_RX_THREADS: usize = 64;

/// The most egress interfaces a bridge shares its flows over.
pub const MAX_EGRESS: usize = 16;

/// An egress interface beside the first ([`BridgeConfig::output`]): a bridge
/// with several shares its flows over them by weighted HRW on their rates
/// (crate [`crate::egress`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Egress {
    /// The interface's name.
    pub interface: String,
    /// Its emulated rate in bit/s; `None`: the bridge's
    /// [`BridgeConfig::rate_bps`].
    pub rate_bps: Option<u64>,
    /// Core to pin its arbiter to; `None`: [`BridgeConfig::arbiter_cpu`].
    pub arbiter_cpu: Option<usize>,
}

impl Egress {
    /// An egress interface with the bridge's rate and arbiter core.
    pub fn new(interface: impl Into<String>) -> Self {
        Egress {
            interface: interface.into(),
            rate_bps: None,
            arbiter_cpu: None,
        }
    }
}

/// What the RX threads do with a frame that does not parse (not IP, a
/// truncated or malformed header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unparsed {
    /// Forward it in the default flow (flow 0), so that ARP and other
    /// non-IP traffic crosses the bridge.
    #[default]
    Forward,
    /// Drop it, counted under its parse reason (`non_ip`, `bad_ihl`, ...).
    Drop,
}

impl Unparsed {
    /// `forward` or `drop`.
    pub const fn name(self) -> &'static str {
        match self {
            Unparsed::Forward => "forward",
            Unparsed::Drop => "drop",
        }
    }
}

impl std::str::FromStr for Unparsed {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "forward" => Ok(Unparsed::Forward),
            "drop" => Ok(Unparsed::Drop),
            _ => Err(format!("expected forward or drop, got {s:?}")),
        }
    }
}

/// How the dispatchers hand frames to the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TxKind {
    /// `sendmmsg(2)` straight from the frame pool (no copy).
    #[default]
    Sendmmsg,
    /// A mapped TPACKET_V2 TX ring (one copy into the ring) and one
    /// `send(2)` per batch.
    Ring,
}

impl TxKind {
    /// `sendmmsg` or `ring`.
    pub const fn name(self) -> &'static str {
        match self {
            TxKind::Sendmmsg => "sendmmsg",
            TxKind::Ring => "ring",
        }
    }
}

impl std::str::FromStr for TxKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sendmmsg" => Ok(TxKind::Sendmmsg),
            "ring" => Ok(TxKind::Ring),
            _ => Err(format!("expected ring or sendmmsg, got {s:?}")),
        }
    }
}

/// How the redirect program of an AF_XDP input attaches
/// ([`IoBackend::Xdp`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpAttach {
    /// Driver mode where the driver offers it, else skb mode.
    #[default]
    Auto,
    /// Driver (native) mode only.
    Driver,
    /// skb (generic) mode only.
    Skb,
}

impl XdpAttach {
    /// `auto`, `driver` or `skb`.
    pub const fn name(self) -> &'static str {
        match self {
            XdpAttach::Auto => "auto",
            XdpAttach::Driver => "driver",
            XdpAttach::Skb => "skb",
        }
    }
}

impl std::str::FromStr for XdpAttach {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(XdpAttach::Auto),
            "driver" => Ok(XdpAttach::Driver),
            "skb" => Ok(XdpAttach::Skb),
            _ => Err(format!("expected auto, driver or skb, got {s:?}")),
        }
    }
}

/// The sockets the shaped direction reads and sends with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoBackend {
    /// AF_PACKET: RX rings ([`BridgeConfig::rx_ring`]) and `sendmmsg` or a
    /// TX ring ([`BridgeConfig::tx`]).
    #[default]
    AfPacket,
    /// AF_XDP (cargo feature `xdp`): the RX thread reads queue 0 of the
    /// input through an AF_XDP socket whose redirect program attaches in
    /// `attach` mode, copying each frame into its pool frame; the
    /// transmitter copies each frame into a sending-only AF_XDP socket on
    /// queue 0 of each egress interface. One RX thread and at most one
    /// dispatcher (one socket per interface queue). The reverse direction
    /// (shaped or not) stays on AF_PACKET. Without the feature,
    /// [`BridgeConfig::validate`] refuses it.
    Xdp {
        /// How the input's redirect program attaches.
        attach: XdpAttach,
    },
}

impl IoBackend {
    /// `af-packet` or `xdp`.
    pub const fn name(self) -> &'static str {
        match self {
            IoBackend::AfPacket => "af-packet",
            IoBackend::Xdp { .. } => "xdp",
        }
    }
}

/// Whether this build has the AF_XDP back end (cargo feature `xdp`).
pub const XDP_BUILT: bool = cfg!(feature = "xdp");

/// How finely the bridge breaks its counters down by flow id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlowCounters {
    /// Every flow id has its own counters (received, sent, dropped by
    /// reason, duplicated: [`crate::FlowReport`]) and its own queue limit
    /// ([`BridgeConfig::queue_limit`]). The counters take memory per flow
    /// id ([`BridgeConfig::flow_state_bytes`]).
    #[default]
    PerFlow,
    /// `n` counter groups (1..=[`MAX_FLOWS`]; more than `flows` are not
    /// used): flow id `f` counts in group `f % n`, and [`crate::Report`]'s
    /// `flows` holds one entry per group (its `flow` is the group). For a
    /// scheduler that counts and bounds every queue itself (a dummynet
    /// pipe set): the bridge keeps no per-flow queue limit
    /// ([`BridgeConfig::queue_limit`] is not used; an RX thread's
    /// descriptors bound what it has in the runtime), and its memory does
    /// not grow with `flows`. One egress interface only.
    Groups(u32),
}

/// Everything a [`crate::Bridge`] needs; [`BridgeConfig::new`] fills in the
/// defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BridgeConfig {
    /// The interface frames are read from and shaped.
    pub input: String,
    /// The interface shaped frames are sent on (and, in the reverse
    /// direction, read from); the first egress interface when there are
    /// several ([`BridgeConfig::extra_outputs`]).
    pub output: String,
    /// Further egress interfaces: the flows are shared over `output` and
    /// these by weighted HRW on their rates, each interface with its own
    /// runtime (arbiter, dispatchers, frames). Empty: one egress. At most
    /// [`MAX_EGRESS`] in all.
    pub extra_outputs: Vec<Egress>,
    /// RX threads on `input`, 1..=64; more than one share the traffic by
    /// flow hash (`PACKET_FANOUT`). Each is one runtime client.
    pub rx_threads: usize,
    /// Dispatcher threads, 0..=64 (0: the arbiter transmits itself).
    pub dispatchers: usize,
    /// The scheduling algorithm and its parameters.
    pub sched: SchedulerConfig,
    /// The emulated link rate in bit/s (of `output`, and of every extra
    /// egress that names none); `None` forwards unshaped (the scheduler
    /// still orders the flows).
    pub rate_bps: Option<u64>,
    /// Flows the built-in classifier maps frames into, 1..=65536.
    pub flows: u32,
    /// Which header fields name a flow for the built-in classifier.
    pub flow_key: FlowKeyKind,
    /// One weight per flow (each 1..=65536), or empty for all 1.
    pub weights: Vec<u32>,
    /// What the built-in classifier does with frames that do not parse.
    pub unparsed: Unparsed,
    /// The sockets of the shaped direction: AF_PACKET (default) or
    /// AF_XDP.
    pub io: IoBackend,
    /// How the dispatchers send (AF_PACKET only).
    pub tx: TxKind,
    /// The kind of RX ring of every receiving socket (the input's RX
    /// threads and the reverse direction's): [`RxRing::V2`] hands each
    /// frame over as soon as the kernel wrote it; [`RxRing::V3`] hands
    /// blocks over when full or after its 1 ms block timeout, which a lone
    /// frame waits out at low rates. Either way an idle RX thread sleeps in
    /// `poll(2)`.
    pub rx_ring: RxRing,
    /// Skip the kernel's qdisc on the sending sockets
    /// (`PACKET_QDISC_BYPASS`): the arbiter already scheduled the frames.
    pub qdisc_bypass: bool,
    /// Turn receive aggregation (GRO, LRO) off on every interface the
    /// bridge reads while it runs, and back on where it was on when the
    /// bridge stops ([`pspat_io::offload::ReceiveOffloads`]): with it on, a
    /// TCP stream reaches the RX sockets as aggregates above the MTU, which
    /// the bridge can only drop (`too_long`). An interface where it cannot
    /// be turned off (no `CAP_NET_ADMIN`) is named in
    /// [`crate::Bridge::offload_warnings`] and the bridge runs anyway.
    pub receive_offloads_off: bool,
    /// Packets of one flow one RX thread may have in the runtime at once,
    /// 1..=65536: the flow's queue (dummynet's `queue` slots). A frame
    /// above it is dropped with reason `flow_limit`. Per-flow limits keep
    /// every backlogged flow backlogged, which weighted shares need: one
    /// shared buffer with tail drop would give each flow its arrival
    /// share instead.
    pub queue_limit: u32,
    /// Counters per flow id, or per group of flow ids (then without the
    /// per-flow queue limit).
    pub flow_counters: FlowCounters,
    /// Frames (= runtime descriptors) per RX thread, a multiple of 64 in
    /// 64..=65536.
    pub descriptors: usize,
    /// Forward the reverse direction (`output` to `input`, unshaped) too.
    pub reverse: bool,
    /// Shape the reverse direction too: `rx_threads` more RX threads read
    /// `output` and are clients of the same runtime (client ids
    /// `rx_threads..2·rx_threads`), classified by `make_classifier(k)` for
    /// `k` in that range; the transmitters send each packet on the
    /// interface of its direction (`input` for those clients). Replaces the
    /// unshaped reverse thread (`reverse` is then ignored). One egress
    /// interface only (`extra_outputs` empty). The reverse RX sockets'
    /// fanout group is `fanout_group ^ 0x8000`.
    pub shape_reverse: bool,
    /// With `shape_reverse`: a switch that turns the shaping of the reverse
    /// direction on and off while the bridge runs. Off, its RX threads
    /// forward their frames unshaped, each through a socket of its own on
    /// `input` (as the unshaped reverse thread does); on, they classify
    /// and submit them. Each RX thread reads it for every frame. `None`:
    /// always shaped.
    pub reverse_switch: Option<ReverseSwitch>,
    /// Core to pin the arbiter to (of `output`, and of every extra egress
    /// that names none).
    pub arbiter_cpu: Option<usize>,
    /// Core to pin the dispatchers to.
    pub dispatcher_cpu: Option<usize>,
    /// Cores to pin RX thread k to (`rx_cpus[k % len]`); empty: unpinned.
    pub rx_cpus: Vec<usize>,
    /// How long stopping may drain what is queued at the link rate before
    /// dropping the rest with reason `shutdown`.
    pub drain: Duration,
    /// The `PACKET_FANOUT` group id of the RX sockets (when `rx_threads`
    /// > 1); unique per network namespace.
    pub fanout_group: u16,
    /// Seed of the bits the transmitters flip in the packets a pipe
    /// corrupted (`corrupt`): each transmitter's lane draws from a
    /// SplitMix64 stream of its own, this seed mixed with the
    /// transmitter's index (its egress interface and dispatcher) and its
    /// direction, so the same seed flips the same bits of the same packets
    /// taken in the same order. [`DEFAULT_CORRUPT_SEED`] by default.
    pub corrupt_seed: u64,
    /// Seed of the built-in classifier's flow hash.
    pub hash_seed: u64,
}

/// The default [`BridgeConfig::corrupt_seed`] (the bytes of `corrupt!`);
/// any value will do, a fixed one makes a run replayable.
pub const DEFAULT_CORRUPT_SEED: u64 = 0x636f_7272_7570_7421;

/// The default [`BridgeConfig::queue_limit`]: what Linux gives a qdisc
/// class on a veth or Ethernet device with no queue of its own (its
/// `txqueuelen`). The limit counts a flow's frames from reception to the
/// end of their send, so it must cover what the path holds while the
/// transmitter catches up; 64 lost up to a tenth of a 1 Gbit/s link on a
/// 2-vCPU guest whose arbiter shared its core with the RX thread
/// (docs/BENCHMARKS.md, section 11).
pub const DEFAULT_QUEUE_LIMIT: u32 = 1000;

impl BridgeConfig {
    /// The defaults: one RX thread, no dispatcher (the arbiter transmits), DRR, unshaped, 1 flow
    /// keyed by 5-tuple, unparsed frames forwarded, V2 RX rings, sendmmsg
    /// with qdisc bypass, receive aggregation off on the interfaces read,
    /// [`DEFAULT_QUEUE_LIMIT`] packets per flow queue, 4096 frames per RX thread, the
    /// reverse direction forwarded, 1 s of drain.
    pub fn new(input: impl Into<String>, output: impl Into<String>) -> Self {
        BridgeConfig {
            input: input.into(),
            output: output.into(),
            extra_outputs: Vec::new(),
            rx_threads: 1,
            dispatchers: 0,
            sched: SchedulerConfig::default(),
            rate_bps: None,
            flows: 1,
            flow_key: FlowKeyKind::FiveTuple,
            weights: Vec::new(),
            unparsed: Unparsed::Forward,
            io: IoBackend::AfPacket,
            tx: TxKind::default(),
            rx_ring: RxRing::V2,
            qdisc_bypass: true,
            receive_offloads_off: true,
            queue_limit: DEFAULT_QUEUE_LIMIT,
            flow_counters: FlowCounters::PerFlow,
            descriptors: 4096,
            reverse: true,
            shape_reverse: false,
            reverse_switch: None,
            arbiter_cpu: None,
            dispatcher_cpu: None,
            rx_cpus: Vec::new(),
            drain: Duration::from_secs(1),
            fanout_group: (std::process::id() & 0xffff) as u16,
            corrupt_seed: DEFAULT_CORRUPT_SEED,
            hash_seed: 0x7073_7061_7462_7267,
        }
    }

    /// The weight of every flow (the configured ones, or all 1).
    pub fn flow_weights(&self) -> Vec<u32> {
        if self.weights.is_empty() {
            vec![1; self.flows as usize]
        } else {
            self.weights.clone()
        }
    }

    /// How many counter groups the bridge keeps: `flows` with
    /// [`FlowCounters::PerFlow`], else the groups asked for (at most
    /// `flows`).
    pub fn counter_groups(&self) -> usize {
        let flows = self.flows.max(1) as usize;
        match self.flow_counters {
            FlowCounters::PerFlow => flows,
            FlowCounters::Groups(n) => (n.max(1) as usize).min(flows),
        }
    }

    /// Whether the RX threads bound each flow's queue
    /// ([`BridgeConfig::queue_limit`]).
    pub(crate) fn limits_queues(&self) -> bool {
        self.flow_counters == FlowCounters::PerFlow
    }

    /// Bytes a bridge started with this configuration keeps for its flows:
    /// its counter groups in every RX thread's block and every
    /// transmitter's (`done` per RX thread and group, and the sums), the
    /// RX threads' admitted counts, the weights per group and, with
    /// [`FlowCounters::PerFlow`], the egress interface of each flow id.
    /// What does not depend on the flows (the frame pool, the rings) is
    /// not counted.
    pub fn flow_state_bytes(&self) -> usize {
        use crate::counters::{RX_PER_GROUP, TX_PER_GROUP};
        const WORD: usize = std::mem::size_of::<u64>();
        let groups = self.counter_groups();
        let directions = if self.shape_reverse { 2 } else { 1 };
        let rx_blocks = self.rx_threads * directions;
        let tx_blocks = self.egress().len() * self.dispatchers.max(1) * directions;
        let per_group = rx_blocks * (RX_PER_GROUP + 1) * WORD
            + tx_blocks * (self.rx_threads + TX_PER_GROUP) * WORD
            + std::mem::size_of::<u32>();
        let per_flow = if self.limits_queues() {
            std::mem::size_of::<u16>()
        } else {
            0
        };
        groups * per_group + self.flows as usize * per_flow
    }

    /// Every egress interface, `output` first, with its rate and arbiter
    /// core resolved (an extra egress without its own takes the bridge's).
    pub fn egress(&self) -> Vec<Egress> {
        std::iter::once(Egress {
            interface: self.output.clone(),
            rate_bps: self.rate_bps,
            arbiter_cpu: self.arbiter_cpu,
        })
        .chain(self.extra_outputs.iter().map(|e| Egress {
            interface: e.interface.clone(),
            rate_bps: e.rate_bps.or(self.rate_bps),
            arbiter_cpu: e.arbiter_cpu.or(self.arbiter_cpu),
        }))
        .collect()
    }

    /// Checks every field (not the interfaces: [`crate::Bridge::start`]
    /// does when it opens them).
    ///
    /// # Errors
    /// [`BridgeError::Config`] naming the field and its range.
    pub fn validate(&self) -> Result<(), BridgeError> {
        let bad =
            |field: &'static str, message: String| Err(BridgeError::Config { field, message });
        if self.input == self.output {
            return bad(
                "output",
                format!(
                    "the input and output interfaces are both {:?}: they must differ",
                    self.input
                ),
            );
        }
        let egress = self.egress();
        if egress.len() > MAX_EGRESS {
            return bad(
                "output",
                format!(
                    "at most {MAX_EGRESS} egress interfaces, got {}",
                    egress.len()
                ),
            );
        }
        for (i, e) in egress.iter().enumerate() {
            if e.interface == self.input {
                return bad(
                    "output",
                    format!(
                        "the input and output interfaces are both {:?}: they must differ",
                        self.input
                    ),
                );
            }
            if egress[..i].iter().any(|o| o.interface == e.interface) {
                return bad(
                    "output",
                    format!("egress interface {:?} given twice", e.interface),
                );
            }
        }
        if egress.len() > 1 {
            let limited = egress.iter().filter(|e| e.rate_bps.is_some()).count();
            if limited != 0 && limited != egress.len() {
                return bad(
                    "output",
                    "give a rate to every egress interface or to none: the rates weigh the \
                     placement of flows"
                        .into(),
                );
            }
        }
        if self.shape_reverse && egress.len() > 1 {
            return bad(
                "shape_reverse",
                "the reverse direction can be shaped with one egress interface only".into(),
            );
        }
        if self.reverse_switch.is_some() && !self.shape_reverse {
            return bad(
                "reverse_switch",
                "a reverse switch needs shape_reverse (the reverse RX threads it switches)".into(),
            );
        }
        if let IoBackend::Xdp { .. } = self.io {
            if !XDP_BUILT {
                return bad(
                    "io",
                    "AF_XDP is not in this build: rebuild with the xdp feature \
                     (cargo build --release -p pspat-cli --features xdp)"
                        .into(),
                );
            }
            if self.rx_threads != 1 {
                return bad(
                    "rx_threads",
                    format!(
                        "AF_XDP reads queue 0 of the input with one socket: one RX thread, got {}",
                        self.rx_threads
                    ),
                );
            }
            if self.dispatchers > 1 {
                return bad(
                    "dispatchers",
                    format!(
                        "AF_XDP sends on queue 0 of each output with one socket: at most one \
                         dispatcher, got {}",
                        self.dispatchers
                    ),
                );
            }
        }
        if !(1..=MAX_RX_THREADS).contains(&self.rx_threads) {
            return bad(
                "rx_threads",
                format!("must be 1..={MAX_RX_THREADS}, got {}", self.rx_threads),
            );
        }
        if self.dispatchers > 64 {
            return bad(
                "dispatchers",
                format!("must be 0..=64, got {}", self.dispatchers),
            );
        }
        if !(1..=MAX_FLOWS).contains(&self.flows) {
            return bad(
                "flows",
                format!("must be 1..={MAX_FLOWS}, got {}", self.flows),
            );
        }
        if !self.weights.is_empty() && self.weights.len() != self.flows as usize {
            return bad(
                "weights",
                format!(
                    "{} weights given for {} flows: give one per flow",
                    self.weights.len(),
                    self.flows
                ),
            );
        }
        if let Some(w) = self
            .weights
            .iter()
            .find(|w| !(pspat_sched::MIN_WEIGHT..=pspat_sched::MAX_WEIGHT).contains(*w))
        {
            return bad(
                "weights",
                format!(
                    "each must be {}..={}, got {w}",
                    pspat_sched::MIN_WEIGHT,
                    pspat_sched::MAX_WEIGHT
                ),
            );
        }
        let range = pspat_sched::rate::MIN_RATE_BPS..=pspat_sched::rate::MAX_RATE_BPS;
        for e in &egress {
            if let Some(r) = e.rate_bps.filter(|r| !range.contains(r)) {
                let at = if egress.len() > 1 {
                    format!(" (egress {})", e.interface)
                } else {
                    String::new()
                };
                return bad(
                    "rate",
                    format!(
                        "must be {}..={} bit/s, got {r}{at}",
                        range.start(),
                        range.end()
                    ),
                );
            }
        }
        if let FlowCounters::Groups(n) = self.flow_counters {
            if !(1..=MAX_FLOWS).contains(&n) {
                return bad(
                    "flow_counters",
                    format!("groups must be 1..={MAX_FLOWS}, got {n}"),
                );
            }
            if egress.len() > 1 {
                return bad(
                    "flow_counters",
                    "flows can be counted in groups with one egress interface only".into(),
                );
            }
        }
        if !(1..=65_536).contains(&self.queue_limit) {
            return bad(
                "queue_limit",
                format!("must be 1..=65536, got {}", self.queue_limit),
            );
        }
        if !self.descriptors.is_multiple_of(64) || !(64..=65_536).contains(&self.descriptors) {
            return bad(
                "descriptors",
                format!(
                    "must be a multiple of 64 in 64..=65536, got {}",
                    self.descriptors
                ),
            );
        }
        if self.drain > Duration::from_secs(3600) {
            return bad(
                "drain",
                format!("must be at most 3600 s, got {:?}", self.drain),
            );
        }
        Ok(())
    }
}

/// Why a bridge could not start or ended in error.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// A field out of its range.
    #[error("{field}: {message}")]
    Config {
        /// The field ([`BridgeConfig`]'s name for it).
        field: &'static str,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// An interface could not be opened (missing, down, bad name, no
    /// permission).
    #[error("{role} interface {interface:?}: {source}")]
    Interface {
        /// `input` or `output`.
        role: &'static str,
        /// Its name.
        interface: String,
        /// What the socket layer said.
        source: IoError,
    },
    /// An AF_XDP socket could not be opened (cargo feature `xdp`): the
    /// queue or the interface's XDP hook is taken, the kernel refused the
    /// program, the mode or the rings. Errors every socket shares come as
    /// [`BridgeError::Interface`].
    #[cfg(feature = "xdp")]
    #[error("{role} interface {interface:?}: {source}")]
    Xdp {
        /// `input` or `output`.
        role: &'static str,
        /// Its name.
        interface: String,
        /// What the AF_XDP layer said.
        source: pspat_io::xdp::XdpError,
    },
    /// The scheduler refused its configuration.
    #[error("scheduler: {0}")]
    Scheduler(#[from] pspat_sched::ConfigError),
    /// The runtime could not start or stop.
    #[error("runtime: {0}")]
    Runtime(#[from] pspat::RuntimeError),
    /// The frame pool could not be allocated.
    #[error("frame pool: {0}")]
    Frames(#[from] pspat_io::FrameError),
    /// The latch that ends the RX threads' waits at a stop could not be
    /// made (no file descriptor left).
    #[error("stop latch: {0}")]
    StopLatch(IoError),
    /// A thread could not be spawned.
    #[error("cannot spawn thread {name}: {source}")]
    Spawn {
        /// The thread's name.
        name: String,
        /// The system's error.
        source: std::io::Error,
    },
}

impl BridgeError {
    /// Whether the error is the caller's (a bad field, an interface that is
    /// missing, down, badly named, or not openable without privileges), as
    /// opposed to a failure of the machine.
    pub fn is_usage(&self) -> bool {
        match self {
            BridgeError::Config { .. } | BridgeError::Scheduler(_) => true,
            BridgeError::Interface { source, .. } => matches!(
                source,
                IoError::NoSuchInterface(_)
                    | IoError::InterfaceDown(_)
                    | IoError::InterfaceNameTooLong(_)
                    | IoError::BadInterfaceName(_)
                    | IoError::PermissionDenied { .. }
            ),
            #[cfg(feature = "xdp")]
            BridgeError::Xdp { source, .. } => {
                use pspat_io::xdp::XdpError;
                matches!(
                    source,
                    XdpError::NoSuchQueue { .. }
                        | XdpError::QueueBusy { .. }
                        | XdpError::InterfaceBusy { .. }
                        | XdpError::AttachRefused { .. }
                        | XdpError::ZeroCopyUnsupported { .. }
                )
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(flows: u32, counters: FlowCounters) -> BridgeConfig {
        let mut c = BridgeConfig::new("pspat-in", "pspat-out");
        c.flows = flows;
        c.flow_counters = counters;
        c
    }

    #[test]
    fn groups_are_counted_within_the_flows_and_need_one_egress() {
        assert_eq!(cfg(10, FlowCounters::PerFlow).counter_groups(), 10);
        assert_eq!(cfg(10, FlowCounters::Groups(4)).counter_groups(), 4);
        assert_eq!(cfg(3, FlowCounters::Groups(4)).counter_groups(), 3);
        assert!(cfg(10, FlowCounters::Groups(4)).validate().is_ok());
        let field = |c: BridgeConfig| match c.validate() {
            Err(BridgeError::Config { field, .. }) => field,
            other => panic!("expected a configuration error, got {other:?}"),
        };
        assert_eq!(field(cfg(10, FlowCounters::Groups(0))), "flow_counters");
        assert_eq!(
            field(cfg(10, FlowCounters::Groups(MAX_FLOWS + 1))),
            "flow_counters"
        );
        let mut two = cfg(10, FlowCounters::Groups(1));
        two.extra_outputs.push(Egress {
            interface: "pspat-out2".into(),
            rate_bps: None,
            arbiter_cpu: None,
        });
        assert_eq!(field(two), "flow_counters");
    }

    #[test]
    fn xdp_is_refused_with_its_build_named_when_not_built() {
        let mut c = cfg(4, FlowCounters::PerFlow);
        c.io = IoBackend::Xdp {
            attach: XdpAttach::Driver,
        };
        match (XDP_BUILT, c.validate()) {
            (true, Ok(())) => {}
            (false, Err(BridgeError::Config { field, message })) => {
                assert_eq!(field, "io");
                assert!(message.contains("--features xdp"), "{message}");
            }
            (built, other) => panic!("built {built}: {other:?}"),
        }
        assert_eq!(IoBackend::default(), IoBackend::AfPacket);
        assert_eq!("skb".parse::<XdpAttach>(), Ok(XdpAttach::Skb));
        assert!("native".parse::<XdpAttach>().is_err());
    }

    #[test]
    fn a_reverse_switch_needs_a_shaped_reverse_direction() {
        let mut c = cfg(4, FlowCounters::PerFlow);
        c.reverse_switch = Some(ReverseSwitch::new(false));
        match c.validate() {
            Err(BridgeError::Config { field, .. }) => assert_eq!(field, "reverse_switch"),
            other => panic!("expected a configuration error, got {other:?}"),
        }
        c.shape_reverse = true;
        assert!(c.validate().is_ok(), "{:?}", c.validate());
    }

    #[test]
    fn grouped_flow_state_does_not_grow_with_the_flows() {
        let per_flow = |c: FlowCounters| {
            let (small, large) = (cfg(2_000, c), cfg(62_000, c));
            (large.flow_state_bytes() - small.flow_state_bytes()) as f64 / 60_000.0
        };
        // One RX thread, one transmitter: 6 RX reasons and 5 TX reasons;
        // sent, bytes, duplicated, corrupted, ce_marked.
        let own = per_flow(FlowCounters::PerFlow);
        assert_eq!(own, (8.0 + 1.0) * 8.0 + (1.0 + 10.0) * 8.0 + 4.0 + 2.0);
        assert_eq!(per_flow(FlowCounters::Groups(1)), 0.0);
        let mut shaped = cfg(100, FlowCounters::PerFlow);
        let one = shaped.flow_state_bytes();
        shaped.shape_reverse = true;
        assert_eq!(shaped.flow_state_bytes() - one, one - 100 * (4 + 2));
    }
}
