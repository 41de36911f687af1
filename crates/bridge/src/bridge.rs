//! Starting, watching and stopping a bridge.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use pspat::{Runtime, RuntimeConfig, ShutdownPolicy, Stats, TxOwner};
use pspat_io::offload::ReceiveOffloads;
use pspat_io::parse::{ParseLimits, ParseReason};
use pspat_io::{
    Frame, FrameArena, FramePool, IoError, PacketRx, PacketTx, PacketTxRing, RxConfig, StopLatch,
    TxConfig,
};
use pspat_sched::{AnyScheduler, DropReason, FlowParams, FlowTable, Scheduler};

use crate::backend::{transmitter_index, AfPacketTx, Sender};
use crate::classify::{Classifier, HashClassifier};
#[cfg(feature = "xdp")]
use crate::config::XdpAttach;
use crate::config::{BridgeConfig, BridgeError, Egress, IoBackend, TxKind};
use crate::counters::{
    read_cpu, Grouping, ReverseShared, RxReason, RxShared, TxReason, TxShared, NRX, NTX,
};
use crate::report::{
    add, EgressReport, FlowReport, OffloadReport, Report, ReverseReport, ThreadPlace,
};
use crate::reverse::{Direct, Reverse};
use crate::rx::{RxSocket, RxState, RxThread};

/// A running bridge: RX threads reading the input interface, one PSPAT
/// runtime per egress interface shaping, dispatchers sending on the egress
/// interfaces, and one thread per egress interface forwarding the reverse
/// direction (crate docs).
pub struct Bridge {
    cfg: BridgeConfig,
    /// The seed the transmitters' corruption draws follow now.
    corrupt_seed: Arc<AtomicU64>,
    /// The egress interfaces, `output` first (rates and cores resolved).
    egress: Vec<Egress>,
    /// The egress interface of each flow (empty when the flows are counted
    /// in groups: one egress interface carries them all).
    egress_of: Arc<[u16]>,
    /// The counter group of each flow ([`crate::FlowCounters`]).
    grouping: Grouping,
    /// The weight of each counter group (its flows' weights summed).
    weights: Vec<u32>,
    /// One runtime per egress interface (taken on stop).
    runtimes: Vec<Runtime<AfPacketTx>>,
    /// The thread id of each runtime's arbiter, when it could be told.
    arbiter_tids: Vec<Option<u32>>,
    stop: Arc<AtomicBool>,
    /// Raised with `stop`: ends the RX and reverse threads' waits on their
    /// rings at once.
    stop_latch: Arc<StopLatch>,
    rx_threads: Vec<JoinHandle<Vec<Frame>>>,
    reverse_threads: Vec<JoinHandle<()>>,
    rx: Vec<Arc<RxShared>>,
    /// The transmitters' counters, by egress interface.
    tx: Vec<TxList>,
    /// A shaped reverse direction ([`BridgeConfig::shape_reverse`]): its
    /// RX threads, their counters and the transmitters' reverse counters.
    rev_rx_threads: Vec<JoinHandle<Vec<Frame>>>,
    rev_rx: Vec<Arc<RxShared>>,
    rev_tx: Option<TxList>,
    /// With a [`crate::ReverseSwitch`]: the unshaped forwarding of each
    /// reverse RX thread.
    rev_direct: Vec<Arc<ReverseShared>>,
    /// The reverse threads' counters, by egress interface.
    reverse: Vec<Arc<ReverseShared>>,
    started: Instant,
    _pool: FramePool,
    frame_size: usize,
    /// Receive aggregation turned off on the interfaces read, turned back
    /// on when these drop (after the threads have stopped).
    offloads: Vec<ReceiveOffloads>,
    /// Interfaces where it could not be turned off, with the reason.
    offload_warnings: Vec<String>,
}

type TxList = Arc<Mutex<Vec<Arc<TxShared>>>>;

/// One direction's counters summed ([`Bridge::tally`]).
#[derive(Default)]
struct Tally {
    flows: Vec<FlowReport>,
    received: u64,
    received_bytes: u64,
    not_received: u64,
    parse: crate::report::ParseReport,
    /// Drops by the RX threads and the transmitters, by reason.
    dropped: BTreeMap<String, u64>,
    /// Frames the RX threads did not drop (they were submitted).
    rx_admitted: u64,
    /// By egress interface: frames of its flows submitted, sent and
    /// dropped by the transmitters, and left over (final: the runtime's).
    admitted: Vec<u64>,
    sent: Vec<u64>,
    tx_dropped: Vec<u64>,
    residual: Vec<u64>,
    /// By egress interface: copies of duplicated packets its transmitters
    /// were given.
    duplicated: Vec<u64>,
    /// Packets marked CE its transmitters could not mark.
    ce_unmarkable: u64,
    /// Every flow's `received + duplicated >= transmitted + dropped`.
    conserved: bool,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("input", &self.cfg.input)
            .field("egress", &self.egress)
            .finish()
    }
}

fn interface_error<'a>(
    role: &'static str,
    interface: &'a str,
) -> impl Fn(IoError) -> BridgeError + 'a {
    move |source| BridgeError::Interface {
        role,
        interface: interface.to_owned(),
        source,
    }
}

/// An AF_XDP error as the bridge reports it: the errors every socket shares
/// as [`BridgeError::Interface`], the others as [`BridgeError::Xdp`].
#[cfg(feature = "xdp")]
fn xdp_error<'a>(
    role: &'static str,
    interface: &'a str,
) -> impl Fn(pspat_io::xdp::XdpError) -> BridgeError + 'a {
    move |source| match source {
        pspat_io::xdp::XdpError::Io(source) => interface_error(role, interface)(source),
        source => BridgeError::Xdp {
            role,
            interface: interface.to_owned(),
            source,
        },
    }
}

/// The AF_XDP sockets' geometry: the defaults, the program in `attach`
/// mode.
#[cfg(feature = "xdp")]
fn xdp_config(attach: XdpAttach) -> pspat_io::xdp::XdpConfig {
    use pspat_io::xdp::AttachMode;
    pspat_io::xdp::XdpConfig {
        attach: match attach {
            XdpAttach::Auto => AttachMode::Auto,
            XdpAttach::Driver => AttachMode::Driver,
            XdpAttach::Skb => AttachMode::Skb,
        },
        ..pspat_io::xdp::XdpConfig::default()
    }
}

/// The socket the RX thread of the shaped direction reads on `input`.
fn open_input(cfg: &BridgeConfig, rx_cfg: &RxConfig) -> Result<RxSocket, BridgeError> {
    match cfg.io {
        IoBackend::AfPacket => Ok(RxSocket::Packet(
            PacketRx::open(&cfg.input, rx_cfg).map_err(interface_error("input", &cfg.input))?,
        )),
        #[cfg(feature = "xdp")]
        IoBackend::Xdp { attach } => Ok(RxSocket::Xdp(
            Box::new(
                pspat_io::xdp::XdpSocket::open(&cfg.input, 0, &xdp_config(attach))
                    .map_err(xdp_error("input", &cfg.input))?,
            ),
            0,
        )),
        #[cfg(not(feature = "xdp"))]
        IoBackend::Xdp { .. } => {
            // `validate` refuses it in this build; kept as an error, not
            // a panic.
            Err(BridgeError::Config {
                field: "io",
                message: "AF_XDP is not in this build".into(),
            })
        }
    }
}

/// The sender of the shaped direction on egress interface `output`.
fn open_output(cfg: &BridgeConfig, output: &str) -> Result<Sender, BridgeError> {
    match cfg.io {
        IoBackend::AfPacket => open_sender(cfg, "output", output),
        #[cfg(feature = "xdp")]
        IoBackend::Xdp { attach } => Ok(Sender::Xdp(Box::new(
            pspat_io::xdp::XdpSender::open(output, 0, &xdp_config(attach))
                .map_err(xdp_error("output", output))?,
        ))),
        #[cfg(not(feature = "xdp"))]
        IoBackend::Xdp { .. } => Err(BridgeError::Config {
            field: "io",
            message: "AF_XDP is not in this build".into(),
        }),
    }
}

fn open_sender(
    cfg: &BridgeConfig,
    role: &'static str,
    output: &str,
) -> Result<Sender, BridgeError> {
    let tx_cfg = TxConfig {
        qdisc_bypass: cfg.qdisc_bypass,
        ..TxConfig::default()
    };
    let err = interface_error(role, output);
    Ok(match cfg.tx {
        TxKind::Sendmmsg => Sender::Mmsg(PacketTx::open(output, &tx_cfg).map_err(err)?),
        TxKind::Ring => Sender::Ring(PacketTxRing::open(output, &tx_cfg).map_err(err)?),
    })
}

/// Thread ids of this process's threads named `name`.
fn tids_named(name: &str) -> BTreeSet<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return BTreeSet::new();
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .filter_map(|t| t.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

impl Bridge {
    /// Starts a bridge with the built-in classifier ([`HashClassifier`]).
    ///
    /// # Errors
    /// As [`Bridge::start_with`].
    pub fn start(cfg: BridgeConfig) -> Result<Bridge, BridgeError> {
        let classifier = HashClassifier::new(&cfg);
        Bridge::start_with(cfg, move |_| classifier.clone())
    }

    /// Starts a bridge whose RX thread `k` classifies with
    /// `make_classifier(k)`. Every socket is opened (in the calling
    /// thread's network namespace) before any thread starts: when this
    /// returns `Ok`, the rings are open and frames are being forwarded.
    /// Each egress interface gets its own scheduler built from `cfg.sched`
    /// (over every flow; only the flows placed there use it).
    ///
    /// # Errors
    /// [`BridgeError`]: a field out of range, an interface missing, down,
    /// badly named or not openable (no CAP_NET_RAW), or a failure to
    /// allocate or spawn.
    pub fn start_with<C: Classifier>(
        cfg: BridgeConfig,
        make_classifier: impl FnMut(usize) -> C,
    ) -> Result<Bridge, BridgeError> {
        let weights = cfg.flow_weights();
        let build = |cfg: &BridgeConfig,
                     egress: &Egress,
                     out_max: usize|
         -> Result<AnyScheduler, BridgeError> {
            let lmax = (out_max + 4).min(65_535) as u32;
            let table = FlowTable::new(
                weights
                    .iter()
                    .map(|&w| FlowParams {
                        lmax,
                        ..FlowParams::weighted(w)
                    })
                    .collect(),
            )?;
            let mut sched_cfg = cfg.sched.clone();
            // Every descriptor fits the scheduler: it never drops for lack of
            // room while the bridge runs (the per-flow queue limit relies on it).
            sched_cfg.capacity = sched_cfg.capacity.max(cfg.descriptors * cfg.rx_threads);
            if sched_cfg.link_rate_bps.is_none() {
                sched_cfg.link_rate_bps = egress.rate_bps;
            }
            Ok(sched_cfg.build(table)?)
        };
        Bridge::start_inner(cfg, build, |_| {}, make_classifier)
    }

    /// Starts a bridge around a scheduler built by the caller (for example a
    /// [`pspat_sched::PipeSet`] hosting a whole dummynet configuration),
    /// with `tune` applied to the runtime's configuration last (after the
    /// fields the bridge fills in from `cfg`), and RX thread `k`
    /// classifying with `make_classifier(k)`.
    ///
    /// `cfg.sched` and `cfg.weights` are not used to build anything;
    /// `cfg.flows` must be the scheduler's flow count: a classifier verdict
    /// at or beyond it is dropped as `bad_flow`, and an id below it that
    /// the scheduler does not know is dropped by the arbiter
    /// (`unknown_flow`), both counted. The scheduler should hold every
    /// descriptor (`cfg.descriptors × cfg.rx_threads` packets) so that it
    /// never refuses one for lack of room. A scheduler that drops packets
    /// itself (a pipe's queue limit, `plr`, RED) should be paired with
    /// [`crate::FlowCounters::Groups`]: the transmitters never see those
    /// packets, so with per-flow counting each such drop stays charged to
    /// its flow's queue limit ([`BridgeConfig::queue_limit`]), and a flow
    /// with that many drops is refused as `flow_limit` from then on. One
    /// scheduler drives one link: `cfg.extra_outputs` must be empty.
    ///
    /// # Errors
    /// As [`Bridge::start_with`]; [`BridgeError::Config`] (`extra_outputs`)
    /// with several egress interfaces.
    pub fn start_custom<S, C>(
        cfg: BridgeConfig,
        sched: S,
        tune: impl FnOnce(&mut RuntimeConfig),
        make_classifier: impl FnMut(usize) -> C,
    ) -> Result<Bridge, BridgeError>
    where
        S: Scheduler + Send + 'static,
        C: Classifier,
    {
        if !cfg.extra_outputs.is_empty() {
            return Err(BridgeError::Config {
                field: "extra_outputs",
                message: "a caller-built scheduler drives one egress interface".into(),
            });
        }
        let mut sched = Some(sched);
        let mut tune = Some(tune);
        Bridge::start_inner(
            cfg,
            move |_, _, _| {
                sched.take().ok_or_else(|| BridgeError::Config {
                    field: "extra_outputs",
                    message: "a caller-built scheduler drives one egress interface".into(),
                })
            },
            move |rt| {
                if let Some(t) = tune.take() {
                    t(rt);
                }
            },
            make_classifier,
        )
    }

    fn start_inner<S, C>(
        cfg: BridgeConfig,
        mut build: impl FnMut(&BridgeConfig, &Egress, usize) -> Result<S, BridgeError>,
        mut tune: impl FnMut(&mut RuntimeConfig),
        mut make_classifier: impl FnMut(usize) -> C,
    ) -> Result<Bridge, BridgeError>
    where
        S: Scheduler + Send + 'static,
        C: Classifier,
    {
        cfg.validate()?;
        // Before any socket opens: no aggregate reaches a ring. Restored
        // when `offloads` drops, on an early error return too.
        let (offloads, offload_warnings) = receive_offloads_off(&cfg);
        let flows = cfg.flows as usize;
        let grouping = Grouping::new(cfg.counter_groups());
        let groups = grouping.groups();
        let mut weights = vec![0u32; groups];
        for (f, w) in cfg.flow_weights().into_iter().enumerate() {
            let g = grouping.of(f as u32);
            weights[g] = weights[g].saturating_add(w);
        }
        let egress = cfg.egress();
        let ne = egress.len();
        let egress_of: Arc<[u16]> = if cfg.limits_queues() {
            crate::egress::placement(&cfg)?
                .into_iter()
                .map(|e| e as u16)
                .collect()
        } else {
            // Grouped: one egress interface (validated).
            Arc::from(Vec::new())
        };
        let queue_limit = cfg.limits_queues().then_some(u64::from(cfg.queue_limit));
        // Sockets first: the egress interfaces' MTUs size the frames (the
        // smallest one bounds every frame, whichever interface it takes).
        let nsend = cfg.dispatchers.max(1);
        let mut senders: Vec<VecDeque<Sender>> = Vec::with_capacity(ne);
        for e in &egress {
            let mut list = VecDeque::with_capacity(nsend);
            for _ in 0..nsend {
                list.push_back(open_output(&cfg, &e.interface)?);
            }
            senders.push(list);
        }
        let out_max = senders
            .iter()
            .filter_map(|l| l.front().map(Sender::max_frame))
            .min()
            .unwrap_or(1514);
        // V2: each frame handed over as soon as the kernel wrote it, in a
        // slot that holds the longest frame the output takes (a VLAN tag
        // more, should the kernel keep an inner one in the frame). V3:
        // blocks handed over after 1 ms at most, the latency a lone frame
        // gets from the ring.
        let rx_base = |longest: usize| RxConfig {
            ring: cfg.rx_ring,
            block_timeout: std::time::Duration::from_millis(1),
            frame_size: RxConfig::slot_for(longest + 4),
            promiscuous: true,
            ..RxConfig::default()
        };
        let rx_cfg = RxConfig {
            fanout: (cfg.rx_threads > 1).then_some(cfg.fanout_group),
            ..rx_base(out_max)
        };
        let mut rxs = Vec::with_capacity(cfg.rx_threads);
        for _ in 0..cfg.rx_threads {
            rxs.push(open_input(&cfg, &rx_cfg)?);
        }
        // A shaped reverse direction: its senders on the input, its RX
        // sockets on the output (own fanout group: a group id is bound to
        // one interface).
        let shaped = cfg.shape_reverse;
        let mut rev_senders: VecDeque<Sender> = VecDeque::new();
        let mut rev_rxs = Vec::new();
        let mut in_max = out_max;
        if shaped {
            for _ in 0..nsend {
                rev_senders.push_back(open_sender(&cfg, "input", &cfg.input)?);
            }
            in_max = rev_senders.front().map_or(out_max, Sender::max_frame);
            let rev_cfg = RxConfig {
                fanout: (cfg.rx_threads > 1).then_some(cfg.fanout_group ^ 0x8000),
                ..rx_base(in_max)
            };
            for _ in 0..cfg.rx_threads {
                rev_rxs.push(RxSocket::Packet(
                    PacketRx::open(&cfg.output, &rev_cfg)
                        .map_err(interface_error("output", &cfg.output))?,
                ));
            }
        }
        // Switchable: each reverse RX thread's own sender for its unshaped
        // frames.
        let mut rev_direct_tx = Vec::new();
        if let (true, Some(switch)) = (shaped, &cfg.reverse_switch) {
            let tx_cfg = TxConfig {
                qdisc_bypass: cfg.qdisc_bypass,
                ..TxConfig::default()
            };
            for _ in 0..cfg.rx_threads {
                let tx = PacketTx::open(&cfg.input, &tx_cfg)
                    .map_err(interface_error("input", &cfg.input))?;
                rev_direct_tx.push((tx, switch.clone()));
            }
        }
        let mut reverse_sockets = Vec::new();
        if cfg.reverse && !shaped {
            for e in &egress {
                let tx_cfg = TxConfig {
                    qdisc_bypass: cfg.qdisc_bypass,
                    ..TxConfig::default()
                };
                let tx = PacketTx::open(&cfg.input, &tx_cfg)
                    .map_err(interface_error("input", &cfg.input))?;
                let rx = PacketRx::open(&e.interface, &rx_base(tx.max_frame()))
                    .map_err(interface_error("output", &e.interface))?;
                reverse_sockets.push((rx, tx));
            }
        }
        // A frame holds the longest frame the output takes, VLAN tag
        // included.
        let frame_size = (out_max.max(in_max) + 4).next_multiple_of(pspat_io::frames::FRAME_ALIGN);
        let d = cfg.descriptors;
        let directions = if shaped { 2 } else { 1 };
        let mut pool = FramePool::new(d * cfg.rx_threads * ne * directions, frame_size)?;
        let arena = Arc::clone(pool.arena());
        let mut runtimes = Vec::with_capacity(ne);
        let mut arbiter_tids = Vec::with_capacity(ne);
        let mut tx_lists: Vec<TxList> = Vec::with_capacity(ne);
        // The corruption seed every transmitter follows (changed live by
        // `set_corrupt_seed`).
        let corrupt_seed_now = Arc::new(AtomicU64::new(cfg.corrupt_seed));
        let rev_tx_list: TxList = Arc::new(Mutex::new(Vec::new()));
        for (index, (e, mut senders)) in egress.iter().zip(senders).enumerate() {
            let sched = build(&cfg, e, out_max)?;
            let mut rt_cfg = RuntimeConfig::default();
            rt_cfg.max_clients = cfg.rx_threads * directions;
            rt_cfg.descriptors_per_client = d;
            rt_cfg.dispatchers = cfg.dispatchers;
            rt_cfg.rate_bps = e.rate_bps;
            rt_cfg.arbiter_core = e.arbiter_cpu;
            rt_cfg.dispatcher_core = cfg.dispatcher_cpu;
            rt_cfg.shutdown = ShutdownPolicy::Drain {
                deadline: cfg.drain,
            };
            tune(&mut rt_cfg);
            let tx_list: TxList = Arc::new(Mutex::new(Vec::new()));
            let factory = {
                let tx_list = Arc::clone(&tx_list);
                let rev_tx_list = Arc::clone(&rev_tx_list);
                let arena = Arc::clone(&arena);
                let rx_threads = cfg.rx_threads;
                let corrupt_seed = cfg.corrupt_seed;
                let live_seed = Arc::clone(&corrupt_seed_now);
                // Only one egress with a shaped reverse (validated): the
                // reverse senders all go to this runtime's transmitters.
                let mut rev_senders = std::mem::take(&mut rev_senders);
                move |owner: TxOwner| {
                    let counters =
                        Arc::new(TxShared::new(rx_threads, grouping, Arc::clone(&live_seed)));
                    if let Ok(mut list) = tx_list.lock() {
                        list.push(Arc::clone(&counters));
                    }
                    let tx = AfPacketTx::new(
                        senders.pop_front(),
                        Arc::clone(&arena),
                        counters,
                        corrupt_seed,
                        transmitter_index(index, owner),
                    );
                    if !shaped {
                        return tx;
                    }
                    let rev = Arc::new(TxShared::new(rx_threads, grouping, Arc::clone(&live_seed)));
                    if let Ok(mut list) = rev_tx_list.lock() {
                        list.push(Arc::clone(&rev));
                    }
                    tx.with_reverse(rev_senders.pop_front(), rev, rx_threads as u32)
                }
            };
            // The new arbiter is the thread of that name that was not there
            // before (unknown if another runtime starts at the same time).
            let before = tids_named("pspat-arbiter");
            runtimes.push(Runtime::start(rt_cfg, sched, factory)?);
            let new: Vec<u32> = tids_named("pspat-arbiter")
                .difference(&before)
                .copied()
                .collect();
            arbiter_tids.push(match new.as_slice() {
                [one] => Some(*one),
                _ => None,
            });
            tx_lists.push(tx_list);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop_latch = Arc::new(StopLatch::new().map_err(BridgeError::StopLatch)?);
        let tx: Vec<Vec<Arc<TxShared>>> = tx_lists
            .iter()
            .map(|l| l.lock().map(|l| l.clone()).unwrap_or_default())
            .collect();
        // Frame (k·E + e)·D + s belongs to RX thread k's slot s on egress e
        // (k in rx_threads..2·rx_threads: the shaped reverse direction's RX
        // thread k - rx_threads, E = 1).
        let mut tokens: Vec<Vec<Vec<Option<Frame>>>> = (0..cfg.rx_threads * directions)
            .map(|_| (0..ne).map(|_| (0..d).map(|_| None).collect()).collect())
            .collect();
        while let Some(frame) = pool.alloc() {
            let i = frame.index() as usize;
            let (group, s) = (i / d, i % d);
            tokens[group / ne][group % ne][s] = Some(frame);
        }
        let rev_tokens = tokens.split_off(cfg.rx_threads);
        let mut bridge = Bridge {
            weights,
            egress,
            egress_of: Arc::clone(&egress_of),
            grouping,
            runtimes,
            arbiter_tids,
            stop: Arc::clone(&stop),
            stop_latch: Arc::clone(&stop_latch),
            rx_threads: Vec::new(),
            reverse_threads: Vec::new(),
            rx: Vec::new(),
            tx: tx_lists,
            corrupt_seed: corrupt_seed_now,
            rev_rx_threads: Vec::new(),
            rev_rx: Vec::new(),
            rev_tx: shaped.then(|| Arc::clone(&rev_tx_list)),
            rev_direct: Vec::new(),
            reverse: Vec::new(),
            started: Instant::now(),
            _pool: pool,
            frame_size,
            offloads,
            offload_warnings,
            cfg,
        };
        let limits = ParseLimits::for_mtu(out_max.saturating_sub(14));
        for (k, (mut rx, tokens)) in rxs.into_iter().zip(tokens).enumerate() {
            rx.stop_waits_on(Arc::clone(&stop_latch));
            let mut clients = Vec::with_capacity(ne);
            for rt in &bridge.runtimes {
                let client = rt.client()?;
                if client.id() as usize != k {
                    return Err(BridgeError::Runtime(pspat::RuntimeError::Thread {
                        what: format!("RX thread {k}"),
                        reason: format!("runtime client id {} instead of {k}", client.id()),
                    }));
                }
                clients.push(client);
            }
            let counters = Arc::new(RxShared::new(groups));
            bridge.rx.push(Arc::clone(&counters));
            let cpus = &bridge.cfg.rx_cpus;
            let thread = RxThread {
                rx,
                st: RxState {
                    index: k,
                    group: k,
                    clients,
                    classifier: make_classifier(k),
                    arena: Arc::clone(&arena),
                    tokens,
                    counters,
                    tx: tx.clone(),
                    egress_of: Arc::clone(&egress_of),
                    flows,
                    grouping,
                    queue_limit,
                    out_max,
                    limits,
                    stop: Arc::clone(&stop),
                    cpu: (!cpus.is_empty()).then(|| cpus[k % cpus.len()]),
                    admitted: vec![0; groups],
                    scratch: vec![0; frame_size],
                },
                direct: None,
            };
            let name = format!("pspat-rx-{k}");
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || thread.run())
                .map_err(|source| BridgeError::Spawn { name, source })?;
            bridge.rx_threads.push(handle);
        }
        let rev_tx: Vec<Arc<TxShared>> = rev_tx_list.lock().map(|l| l.clone()).unwrap_or_default();
        let in_limits = ParseLimits::for_mtu(in_max.saturating_sub(14));
        let mut rev_direct_tx = rev_direct_tx.into_iter();
        for (k, (mut rx, tokens)) in rev_rxs.into_iter().zip(rev_tokens).enumerate() {
            rx.stop_waits_on(Arc::clone(&stop_latch));
            let direct = rev_direct_tx.next().map(|(tx, switch)| {
                let counters = Arc::new(ReverseShared::default());
                bridge.rev_direct.push(Arc::clone(&counters));
                (Direct::new(tx, counters), switch)
            });
            let id = bridge.cfg.rx_threads + k;
            let client = bridge.runtimes[0].client()?;
            if client.id() as usize != id {
                return Err(BridgeError::Runtime(pspat::RuntimeError::Thread {
                    what: format!("reverse RX thread {k}"),
                    reason: format!("runtime client id {} instead of {id}", client.id()),
                }));
            }
            let counters = Arc::new(RxShared::new(groups));
            bridge.rev_rx.push(Arc::clone(&counters));
            let cpus = &bridge.cfg.rx_cpus;
            let thread = RxThread {
                rx,
                st: RxState {
                    index: k,
                    group: id,
                    clients: vec![client],
                    classifier: make_classifier(id),
                    arena: Arc::clone(&arena),
                    tokens,
                    counters,
                    tx: vec![rev_tx.clone()],
                    egress_of: Arc::clone(&egress_of),
                    flows,
                    grouping,
                    queue_limit,
                    out_max: in_max,
                    limits: in_limits,
                    stop: Arc::clone(&stop),
                    cpu: (!cpus.is_empty()).then(|| cpus[id % cpus.len()]),
                    admitted: vec![0; groups],
                    scratch: vec![0; frame_size],
                },
                direct,
            };
            let name = format!("pspat-rrx-{k}");
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || thread.run())
                .map_err(|source| BridgeError::Spawn { name, source })?;
            bridge.rev_rx_threads.push(handle);
        }
        for (e, (mut rx, tx)) in reverse_sockets.into_iter().enumerate() {
            rx.stop_waits_on(Arc::clone(&stop_latch));
            let counters = Arc::new(ReverseShared::default());
            bridge.reverse.push(Arc::clone(&counters));
            let reverse = Reverse {
                rx,
                direct: Direct::new(tx, counters),
                stop: Arc::clone(&stop),
            };
            let name = if ne == 1 {
                "pspat-reverse".to_string()
            } else {
                format!("pspat-reverse-{e}")
            };
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || reverse.run())
                .map_err(|source| BridgeError::Spawn { name, source })?;
            bridge.reverse_threads.push(handle);
        }
        Ok(bridge)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &BridgeConfig {
        &self.cfg
    }

    /// The egress interfaces, the output interface first, with their rates
    /// and arbiter cores resolved.
    pub fn egress(&self) -> &[Egress] {
        &self.egress
    }

    /// The egress interface (position in [`Bridge::egress`]) of each flow;
    /// empty when the flows are counted in groups
    /// ([`crate::FlowCounters::Groups`]), which have one egress interface.
    pub fn egress_of(&self) -> &[u16] {
        &self.egress_of
    }

    /// The egress interface of counter group `g`: its flow's, or with
    /// groups the one interface.
    fn group_egress(&self, g: usize) -> usize {
        self.egress_of.get(g).map_or(0, |&e| usize::from(e))
    }

    /// Bytes per frame buffer (the output's longest frame, rounded up).
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// The frame pool's arena. Frame `(k·E + e)·D + s` travels in slot `s`
    /// of RX thread `k`'s client on egress interface `e` (`D` descriptors
    /// per client; `k` from `rx_threads` on: the shaped reverse
    /// direction's), and a frame is in flight (released) while its
    /// descriptor is in the runtime: the one holding the descriptor (the
    /// arbiter, for a packet its scheduler holds) may reclaim the frame
    /// to read it and must release it again before handing the
    /// descriptor on.
    pub fn frames(&self) -> &Arc<FrameArena> {
        self._pool.arena()
    }

    /// One waker per output's arbiter: wakes it for a round now, e.g. after
    /// a change was queued for the scheduler given to
    /// [`Bridge::start_custom`] ([`pspat::ArbiterWaker`]).
    pub fn arbiter_wakers(&self) -> Vec<pspat::ArbiterWaker> {
        self.runtimes.iter().map(Runtime::arbiter_waker).collect()
    }

    /// The transmitters' counters of a shaped reverse direction (empty
    /// without one).
    fn rev_tx_counters(&self) -> Vec<Arc<TxShared>> {
        self.rev_tx
            .as_ref()
            .and_then(|l| l.lock().ok().map(|l| l.clone()))
            .unwrap_or_default()
    }

    fn tx_counters(&self) -> Vec<Vec<Arc<TxShared>>> {
        self.tx
            .iter()
            .map(|l| l.lock().map(|l| l.clone()).unwrap_or_default())
            .collect()
    }

    /// Makes the transmitters' corruption draws follow `seed` from now on
    /// (a live change of the configuration's seed): each lane continues
    /// from its position in the new seed's stream.
    pub fn set_corrupt_seed(&self, seed: u64) {
        // Relaxed: a value alone, published with nothing (the lanes read
        // it with Relaxed loads).
        self.corrupt_seed.store(seed, Ordering::Relaxed);
    }

    /// The first error that ended one of its threads (the input or an
    /// output interface went down or away), if any: the bridge should be
    /// stopped.
    pub fn failure(&self) -> Option<String> {
        let tx = self.tx_counters();
        let rev_tx = self.rev_tx_counters();
        let slots = self
            .rx
            .iter()
            .map(|r| &r.error)
            .chain(tx.iter().flatten().map(|t| &t.error))
            .chain(self.rev_rx.iter().map(|r| &r.error))
            .chain(rev_tx.iter().map(|t| &t.error))
            .chain(self.rev_direct.iter().map(|r| &r.error))
            .chain(self.reverse.iter().map(|r| &r.error));
        for slot in slots {
            if slot.is_set() {
                return slot.get();
            }
        }
        None
    }

    /// The counters now (module [`crate::report`]).
    pub fn report(&self) -> Report {
        let mut r = self.collect(None, false);
        r.threads = self.threads();
        r
    }

    fn threads(&self) -> Vec<ThreadPlace> {
        let one = self.egress.len() == 1;
        let mut out: Vec<ThreadPlace> = self
            .rx
            .iter()
            .enumerate()
            .map(|(k, r)| ThreadPlace {
                thread: format!("rx-{k}"),
                cpu: read_cpu(&r.cpu),
            })
            .collect();
        for (k, r) in self.rev_rx.iter().enumerate() {
            out.push(ThreadPlace {
                thread: format!("rx-reverse-{k}"),
                cpu: read_cpu(&r.cpu),
            });
        }
        for (e, tid) in self.arbiter_tids.iter().enumerate() {
            out.push(ThreadPlace {
                thread: if one {
                    "arbiter".into()
                } else {
                    format!("arbiter-{e}")
                },
                cpu: tid.and_then(tid_cpu),
            });
        }
        for (e, list) in self.tx_counters().iter().enumerate() {
            for (d, t) in list.iter().enumerate() {
                let thread = match (self.cfg.dispatchers, one) {
                    (0, true) => "arbiter (transmitting)".into(),
                    (0, false) => format!("arbiter-{e} (transmitting)"),
                    (_, true) => format!("dispatcher-{d}"),
                    (_, false) => format!("dispatcher-{e}.{d}"),
                };
                out.push(ThreadPlace {
                    thread,
                    cpu: read_cpu(&t.cpu),
                });
            }
        }
        for (e, r) in self.reverse.iter().enumerate() {
            out.push(ThreadPlace {
                thread: if one {
                    "reverse".into()
                } else {
                    format!("reverse-{e}")
                },
                cpu: read_cpu(&r.cpu),
            });
        }
        out
    }

    /// The interfaces whose receive aggregation this bridge turned off
    /// ([`BridgeConfig::receive_offloads_off`]); each is turned back on
    /// when the bridge stops or drops. Those where nothing was on are
    /// listed too, with nothing [`ReceiveOffloads::turned_off`].
    pub fn receive_offloads(&self) -> &[ReceiveOffloads] {
        &self.offloads
    }

    /// One line per interface whose receive aggregation could not be
    /// turned off (or stays partly on), with the reason.
    pub fn offload_warnings(&self) -> &[String] {
        &self.offload_warnings
    }

    /// Stops reading, drains what the runtimes hold (at the link rates, for
    /// at most the configured drain time, then drops the rest with reason
    /// `shutdown`), joins every thread and returns the final counters
    /// (`in_flight == 0`; [`Report::error`] names a lost interface).
    ///
    /// # Errors
    /// [`BridgeError::Runtime`] when a runtime could not shut down or an
    /// RX thread panicked.
    pub fn stop(mut self) -> Result<Report, BridgeError> {
        let threads = self.threads();
        // Release: pairs with the Acquire loads of the RX and reverse
        // threads' loops.
        self.stop.store(true, Ordering::Release);
        // After the store: a thread whose wait this ends sees the flag.
        self.stop_latch.raise();
        let mut panicked = None;
        for (k, h) in self.rx_threads.drain(..).enumerate() {
            match h.join() {
                Ok(tokens) => drop(tokens),
                Err(_) => panicked = Some(format!("RX thread {k}")),
            }
        }
        for (k, h) in self.rev_rx_threads.drain(..).enumerate() {
            match h.join() {
                Ok(tokens) => drop(tokens),
                Err(_) => panicked = Some(format!("reverse RX thread {k}")),
            }
        }
        for h in self.reverse_threads.drain(..) {
            if h.join().is_err() {
                panicked = Some("reverse thread".into());
            }
        }
        if self.runtimes.is_empty() {
            return Err(BridgeError::Runtime(pspat::RuntimeError::Closed));
        }
        let mut stats = Vec::with_capacity(self.runtimes.len());
        let mut runtime_error = None;
        let mut first_failure = None;
        for rt in std::mem::take(&mut self.runtimes) {
            match rt.shutdown() {
                Ok(finished) => {
                    drop(finished.backends);
                    stats.push(finished.stats);
                    if runtime_error.is_none() {
                        runtime_error = finished.error.map(|e| e.to_string());
                    }
                }
                Err(e) => {
                    first_failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_failure {
            return Err(BridgeError::Runtime(e));
        }
        if let Some(what) = panicked {
            return Err(BridgeError::Runtime(pspat::RuntimeError::Thread {
                what,
                reason: "panicked".into(),
            }));
        }
        let mut r = self.collect(Some(&stats), true);
        if r.error.is_none() {
            r.error = runtime_error;
        }
        r.threads = threads;
        // Every thread that read the interfaces has stopped: receive
        // aggregation goes back on now, and the report says whether it did.
        for row in &mut r.offloads {
            let Some(taken) = self
                .offloads
                .iter_mut()
                .find(|o| o.interface() == row.interface)
            else {
                continue;
            };
            match taken.restore() {
                Ok(()) => row.restored = taken.changed(),
                Err(e) => row.restore_error = Some(e.to_string()),
            }
        }
        Ok(r)
    }

    /// The rows of [`Report::offloads`]: each interface where receive
    /// aggregation was on (turned off, or left on by the device); not yet
    /// restored.
    fn offload_reports(&self) -> Vec<OffloadReport> {
        let names = |v: &[&'static str]| v.iter().map(|n| n.to_string()).collect();
        self.offloads
            .iter()
            .filter(|o| o.changed() || !o.still_on().is_empty())
            .map(|o| OffloadReport {
                interface: o.interface().to_string(),
                turned_off: names(&o.turned_off()),
                still_on: names(o.still_on()),
                restored: false,
                restore_error: None,
            })
            .collect()
    }

    /// The counters: live (`stats` is `None`), or final with every
    /// runtime's final statistics (by egress interface).
    fn collect(&self, stats: Option<&[Stats]>, final_report: bool) -> Report {
        let ne = self.egress.len();
        // Live: what the runtimes dropped so far (the pipes' limits, losses,
        // RED), read before any transmitter or RX counter, so that every
        // frame counted here is one the RX counters below already hold.
        let live_drops = stats.is_none().then(|| self.live_arbiter_drops());
        let tx = self.tx_counters();
        // Transmitters first, RX threads last (counters module docs): the
        // reverse direction's transmitters are read before any RX thread.
        let rev_tx = self.rev_tx_counters();
        let arbiter: Vec<BTreeMap<String, u64>> = (0..ne)
            .map(|e| {
                stats
                    .and_then(|s| s.get(e))
                    .map(Stats::dropped_by_reason)
                    .unwrap_or_default()
            })
            .collect();
        let mut arbiter_all = BTreeMap::new();
        for (reason, n) in arbiter.iter().flatten() {
            add(&mut arbiter_all, reason, *n);
        }
        // One arbiter reason names the per-flow arbiter drops; several are
        // lumped as `arbiter`.
        let arbiter_name = match arbiter_all.keys().collect::<Vec<_>>().as_slice() {
            [one] => (*one).clone(),
            _ => "arbiter".to_string(),
        };
        let mut fwd = self.tally(&self.rx, &tx, &arbiter_name, final_report);
        let mut rev = self.rev_tx.is_some().then(|| {
            self.tally(
                &self.rev_rx,
                std::slice::from_ref(&rev_tx),
                &arbiter_name,
                final_report,
            )
        });
        let mut r = Report {
            elapsed_s: self.started.elapsed().as_secs_f64(),
            final_report,
            offloads: self.offload_reports(),
            offload_warnings: self.offload_warnings.clone(),
            ..Report::default()
        };
        r.dropped = std::mem::take(&mut fwd.dropped);
        match &mut rev {
            // Unshaped reverse: every arbiter drop is the forward
            // direction's, by reason.
            None => {
                for (reason, n) in &arbiter_all {
                    add(&mut r.dropped, reason, *n);
                }
            }
            // Shaped: the runtime counts its drops by reason for both
            // directions together. When one direction alone lost frames
            // there, they are its own, by reason; otherwise each direction
            // counts its flows' residue under the arbiter's name.
            Some(rev) => {
                let (f, b) = (fwd.residual.iter().sum(), rev.residual.iter().sum());
                let whole = match (f, b) {
                    (_, 0) => Some(&mut r.dropped),
                    (0, _) => Some(&mut rev.dropped),
                    _ => None,
                };
                match whole {
                    Some(map) => {
                        for (reason, n) in &arbiter_all {
                            add(map, reason, *n);
                        }
                    }
                    None => {
                        add(&mut r.dropped, &arbiter_name, f);
                        add(&mut rev.dropped, &arbiter_name, b);
                    }
                }
            }
        }
        if let Some([forward, reverse]) = live_drops {
            for (reason, n) in forward {
                add(&mut r.dropped, &reason, n);
            }
            // Reverse clients exist only when the reverse is shaped.
            let target = match &mut rev {
                Some(rev) => &mut rev.dropped,
                None => &mut r.dropped,
            };
            for (reason, n) in reverse {
                add(target, &reason, n);
            }
        }
        r.received = fwd.received;
        r.received_bytes = fwd.received_bytes;
        r.not_received = fwd.not_received;
        r.parse = std::mem::take(&mut fwd.parse);
        let fl = std::mem::take(&mut fwd.flows);
        r.duplicated = fl.iter().map(|f| f.duplicated).sum();
        r.corrupted = fl.iter().map(|f| f.corrupted).sum();
        r.ce_marked = fl.iter().map(|f| f.ce_marked).sum();
        r.ce_unmarkable = fwd.ce_unmarkable;
        r.transmitted = fl.iter().map(|f| f.transmitted).sum();
        r.transmitted_bytes = fl.iter().map(|f| f.bytes).sum();
        r.dropped_total = r.dropped.values().sum();
        let entered = r.received + r.duplicated;
        let mut conserved = fwd.conserved && entered >= r.transmitted + r.dropped_total;
        r.in_flight = entered.saturating_sub(r.transmitted + r.dropped_total);
        let mut rev_in_flight = 0;
        // A switchable reverse direction's frames forwarded unshaped (sends
        // read before receipts, as in `reverse_report`).
        let direct = sum_unshaped(&self.rev_direct);
        if let Some(rev) = &mut rev {
            let transmitted: u64 =
                rev.flows.iter().map(|f| f.transmitted).sum::<u64>() + direct.transmitted;
            for (reason, n) in &direct.dropped {
                add(&mut rev.dropped, reason, *n);
            }
            let dropped_total: u64 = rev.dropped.values().sum();
            let entered = rev.received + direct.received + rev.duplicated.iter().sum::<u64>();
            rev.conserved &= direct.conserved && entered >= transmitted + dropped_total;
            rev_in_flight = entered.saturating_sub(transmitted + dropped_total);
            if final_report {
                rev.conserved &= rev_in_flight == 0;
            }
            conserved &= rev.conserved;
        }
        if final_report {
            // The runtimes' own accounts must agree with the bridge's.
            match stats {
                Some(s) if s.len() == ne => {
                    conserved &=
                        r.in_flight == 0 && fwd.admitted.iter().sum::<u64>() == fwd.rx_admitted;
                    for (e, s) in s.iter().enumerate() {
                        let (mut residual, mut submitted, mut gone, mut copies) = (
                            fwd.residual[e],
                            fwd.admitted[e],
                            fwd.sent[e] + fwd.tx_dropped[e],
                            fwd.duplicated[e],
                        );
                        if let (0, Some(rev)) = (e, &rev) {
                            conserved &= rev.admitted[0] == rev.rx_admitted;
                            residual += rev.residual[0];
                            submitted += rev.admitted[0];
                            gone += rev.sent[0] + rev.tx_dropped[0];
                            copies += rev.duplicated[0];
                        }
                        // The runtime counts a duplicated packet once; the
                        // transmitters count its copy apart.
                        conserved &= s.conserved()
                            && s.in_flight == 0
                            && residual == arbiter[e].values().sum::<u64>()
                            && s.submitted == submitted
                            && s.transmitted + copies == gone;
                    }
                }
                _ => conserved = false,
            }
        }
        r.egress = self.egress_reports(&fl);
        r.conserved = conserved;
        r.flows = fl;
        r.reverse = match rev {
            None => self.reverse_report(),
            Some(rev) => ReverseReport {
                enabled: true,
                shaped: self.cfg.reverse_switch.as_ref().is_none_or(|s| s.shaped()),
                toggles: self.cfg.reverse_switch.as_ref().map_or(0, |s| s.toggles()),
                received: rev.received + direct.received,
                received_unshaped: direct.received,
                received_bytes: rev.received_bytes + direct.received_bytes,
                duplicated: rev.duplicated.iter().sum(),
                corrupted: rev.flows.iter().map(|f| f.corrupted).sum(),
                ce_marked: rev.flows.iter().map(|f| f.ce_marked).sum(),
                ce_unmarkable: rev.ce_unmarkable,
                transmitted: rev.flows.iter().map(|f| f.transmitted).sum::<u64>()
                    + direct.transmitted,
                bytes: rev.flows.iter().map(|f| f.bytes).sum::<u64>() + direct.bytes,
                dropped_total: rev.dropped.values().sum(),
                dropped: rev.dropped,
                in_flight: rev_in_flight,
                not_received: rev.not_received,
                conserved: rev.conserved,
            },
        };
        r.error = self.failure();
        r
    }

    /// The running runtimes' drops by reason so far, per direction: the
    /// forward RX threads are runtime clients `0..rx_threads`, the shaped
    /// reverse's `rx_threads..2·rx_threads` (checked when they were made).
    fn live_arbiter_drops(&self) -> [BTreeMap<String, u64>; 2] {
        let mut out = [BTreeMap::new(), BTreeMap::new()];
        for rt in &self.runtimes {
            let stats = rt.stats();
            let by_client = stats.clients.iter().map(|c| {
                let direction = usize::from(c.id as usize >= self.cfg.rx_threads);
                (direction, &c.dropped_by_reason)
            });
            // A departed client's drops (none while the bridge runs: its
            // RX threads hold their clients to the end) are the forward's.
            let departed = std::iter::once((0, &stats.departed.dropped_by_reason));
            for (direction, by) in by_client.chain(departed) {
                for (reason, &n) in DropReason::ALL.iter().zip(by.iter()) {
                    if n > 0 {
                        add(&mut out[direction], reason.as_str(), n);
                    }
                }
            }
        }
        out
    }

    /// One direction's counters: its RX threads' and its transmitters' (by
    /// egress interface), per flow (per counter group when grouped). Each
    /// flow's residue (received, not
    /// finished) is its in-flight count while the bridge runs and, in a
    /// final tally, counted dropped under `arbiter_name` (what the runtime
    /// dropped); `dropped` holds the RX threads' and transmitters' drops
    /// only.
    fn tally(
        &self,
        rx: &[Arc<RxShared>],
        tx: &[Vec<Arc<TxShared>>],
        arbiter_name: &str,
        final_report: bool,
    ) -> Tally {
        let groups = self.grouping.groups();
        let ne = tx.len();
        let mut t = Tally {
            flows: (0..groups)
                .map(|g| FlowReport {
                    flow: g as u32,
                    weight: self.weights.get(g).copied().unwrap_or(1),
                    egress: self.egress[self.group_egress(g)].interface.clone(),
                    ..FlowReport::default()
                })
                .collect(),
            tx_dropped: vec![0; ne],
            sent: vec![0; ne],
            residual: vec![0; ne],
            admitted: vec![0; ne],
            duplicated: vec![0; ne],
            conserved: true,
            ..Tally::default()
        };
        for (e, list) in tx.iter().enumerate() {
            for c in list {
                t.ce_unmarkable += c.ce_unmarkable.read();
                for (f, flow) in t.flows.iter_mut().enumerate() {
                    let d = c.duplicated[f].read();
                    flow.duplicated += d;
                    t.duplicated[e] += d;
                    flow.corrupted += c.corrupted[f].read();
                    flow.ce_marked += c.ce_marked[f].read();
                    let sent = c.sent[f].read();
                    flow.transmitted += sent;
                    t.sent[e] += sent;
                    flow.bytes += c.sent_bytes[f].read();
                    for reason in TxReason::ALL {
                        let n = c.drops[f * NTX + reason as usize].read();
                        add(&mut flow.dropped, reason.name(), n);
                        add(&mut t.dropped, reason.name(), n);
                        t.tx_dropped[e] += n;
                    }
                }
            }
        }
        let mut rx_flow_dropped = vec![0u64; groups];
        for c in rx {
            let frames = c.frames.read();
            t.received += frames;
            t.received_bytes += c.bytes.read();
            t.not_received += c.kernel_drops.read();
            t.parse.parsed += c.parsed.read();
            let mut dropped_here = 0;
            for reason in RxReason::ALL {
                let n = c.drops[reason as usize].read();
                add(&mut t.dropped, reason.name(), n);
                dropped_here += n;
            }
            for reason in ParseReason::ALL {
                add(
                    &mut t.parse.refused,
                    reason.counter_name(),
                    c.refused[reason.index()].read(),
                );
                let n = c.unparsed[reason.index()].read();
                add(&mut t.dropped, reason.counter_name(), n);
                dropped_here += n;
            }
            t.rx_admitted += frames.saturating_sub(dropped_here);
            for (f, flow) in t.flows.iter_mut().enumerate() {
                flow.received += c.received[f].read();
                flow.received_bytes += c.received_bytes[f].read();
                for reason in RxReason::ALL {
                    let n = c.flow_drops[f * NRX + reason as usize].read();
                    add(&mut flow.dropped, reason.name(), n);
                    rx_flow_dropped[f] += n;
                }
            }
        }
        for (f, flow) in t.flows.iter_mut().enumerate() {
            let e = if ne == 1 { 0 } else { self.group_egress(f) };
            t.admitted[e] += flow.received.saturating_sub(rx_flow_dropped[f]);
            let gone = flow.transmitted + flow.dropped.values().sum::<u64>();
            let entered = flow.received + flow.duplicated;
            t.conserved &= entered >= gone;
            let rest = entered.saturating_sub(gone);
            if final_report {
                add(&mut flow.dropped, arbiter_name, rest);
                t.residual[e] += rest;
            } else {
                flow.in_flight = rest;
            }
        }
        t
    }

    /// Per egress interface, the sums over its flows.
    fn egress_reports(&self, fl: &[FlowReport]) -> Vec<EgressReport> {
        let weights = crate::egress::egress_weights(&self.egress);
        let wsum: f64 = weights.iter().sum();
        let mut out: Vec<EgressReport> = self
            .egress
            .iter()
            .zip(&weights)
            .map(|(e, w)| EgressReport {
                interface: e.interface.clone(),
                rate_bps: e.rate_bps,
                weight_share: w / wsum,
                ..EgressReport::default()
            })
            .collect();
        for (f, flow) in fl.iter().enumerate() {
            let g = &mut out[self.group_egress(f)];
            g.flows += 1;
            g.received += flow.received;
            g.duplicated += flow.duplicated;
            g.corrupted += flow.corrupted;
            g.ce_marked += flow.ce_marked;
            g.transmitted += flow.transmitted;
            g.bytes += flow.bytes;
            g.in_flight += flow.in_flight;
            for (reason, n) in &flow.dropped {
                add(&mut g.dropped, reason, *n);
            }
        }
        if !self.cfg.limits_queues() {
            // One egress interface carries every flow (validated).
            if let Some(g) = out.first_mut() {
                g.flows = self.cfg.flows;
            }
        }
        for g in &mut out {
            g.dropped_total = g.dropped.values().sum();
        }
        out
    }

    /// The unshaped reverse direction, summed over the egress interfaces.
    fn reverse_report(&self) -> ReverseReport {
        if self.reverse.is_empty() {
            return ReverseReport::default();
        }
        let mut out = sum_unshaped(&self.reverse);
        out.enabled = true;
        // Not counted for a reverse direction that is never shaped.
        out.received_bytes = 0;
        out.received_unshaped = out.received;
        out
    }
}

/// The counters of unshaped forwarding ([`Direct`]) summed: sends first,
/// receipts last (as in `collect`), so that `in_flight` never goes
/// below 0.
fn sum_unshaped(list: &[Arc<ReverseShared>]) -> ReverseReport {
    let mut out = ReverseReport::default();
    for c in list {
        out.transmitted += c.sent.read();
        out.bytes += c.sent_bytes.read();
        for reason in RxReason::ALL {
            add(
                &mut out.dropped,
                reason.name(),
                c.drops[reason as usize].read(),
            );
        }
        for reason in TxReason::ALL {
            add(
                &mut out.dropped,
                reason.name(),
                c.drops[NRX + reason as usize].read(),
            );
        }
        out.received_bytes += c.received_bytes.read();
        out.received += c.received.read();
        out.not_received += c.kernel_drops.read();
    }
    out.dropped_total = out.dropped.values().sum();
    let gone = out.transmitted + out.dropped_total;
    out.conserved = out.received >= gone;
    out.in_flight = out.received.saturating_sub(gone);
    out
}

/// The interfaces `cfg` reads: the input, and the egress interfaces when
/// a reverse direction (shaped or not) reads them.
fn interfaces_read(cfg: &BridgeConfig) -> Vec<&str> {
    let mut read = vec![cfg.input.as_str()];
    if cfg.shape_reverse || cfg.reverse {
        read.push(cfg.output.as_str());
        if !cfg.shape_reverse {
            read.extend(cfg.extra_outputs.iter().map(|e| e.interface.as_str()));
        }
    }
    read
}

/// [`BridgeConfig::receive_offloads_off`]: receive aggregation turned off
/// on every interface read, and a line for each one where it could not be.
fn receive_offloads_off(cfg: &BridgeConfig) -> (Vec<ReceiveOffloads>, Vec<String>) {
    let (mut taken, mut warnings) = (Vec::new(), Vec::new());
    if !cfg.receive_offloads_off {
        return (taken, warnings);
    }
    for interface in interfaces_read(cfg) {
        match ReceiveOffloads::turn_off(interface) {
            Ok(t) => {
                if !t.still_on().is_empty() {
                    warnings.push(format!(
                        "{interface}: {} stays on (the device does not change it); \
                         aggregates above the MTU are dropped as too_long",
                        t.still_on().join(", ")
                    ));
                }
                taken.push(t);
            }
            Err(e) => warnings.push(format!(
                "{interface}: receive offloads not turned off ({e}); \
                 aggregates above the MTU are dropped as too_long"
            )),
        }
    }
    (taken, warnings)
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // A bridge dropped without `stop`: stop its threads anyway.
        // Release: as in `stop`.
        self.stop.store(true, Ordering::Release);
        self.stop_latch.raise();
        for h in self.rx_threads.drain(..) {
            let _ = h.join();
        }
        for h in self.rev_rx_threads.drain(..) {
            let _ = h.join();
        }
        for h in self.reverse_threads.drain(..) {
            let _ = h.join();
        }
        for rt in self.runtimes.drain(..) {
            let _ = rt.shutdown();
        }
    }
}

/// The CPU thread `tid` of this process last ran on
/// (`/proc/self/task/<tid>/stat`, field 39), if it can be read.
fn tid_cpu(tid: u32) -> Option<usize> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace()
        .nth(39 - 3)
        .and_then(|c| c.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interfaces_read_are_the_input_and_those_a_reverse_direction_reads() {
        let mut cfg = BridgeConfig::new("in0", "out0");
        cfg.extra_outputs = vec![Egress::new("out1")];
        // Unshaped reverse: one reverse thread per egress interface.
        assert_eq!(interfaces_read(&cfg), ["in0", "out0", "out1"]);
        cfg.reverse = false;
        assert_eq!(interfaces_read(&cfg), ["in0"]);
        // Shaped reverse: one egress interface, read by the reverse RX threads.
        cfg.extra_outputs.clear();
        cfg.shape_reverse = true;
        assert_eq!(interfaces_read(&cfg), ["in0", "out0"]);
    }

    #[test]
    fn receive_offloads_are_left_alone_when_asked() {
        let mut cfg = BridgeConfig::new("pspat-nosuch0", "pspat-nosuch1");
        cfg.receive_offloads_off = false;
        let (taken, warnings) = receive_offloads_off(&cfg);
        assert!(taken.is_empty() && warnings.is_empty());
        // Asked, on interfaces that do not exist: a warning each, no panic.
        cfg.receive_offloads_off = true;
        let (taken, warnings) = receive_offloads_off(&cfg);
        assert!(taken.is_empty());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("pspat-nosuch0: "), "{warnings:?}");
    }
}
