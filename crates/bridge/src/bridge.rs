//! Starting, watching and stopping a bridge.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use pspat::{Runtime, RuntimeConfig, ShutdownPolicy, Stats, TxOwner};
use pspat_io::parse::{ParseLimits, ParseReason};
use pspat_io::{Frame, FramePool, IoError, PacketRx, PacketTx, PacketTxRing, RxConfig, TxConfig};
use pspat_sched::{AnyScheduler, FlowParams, FlowTable, Scheduler};

use crate::backend::{AfPacketTx, Sender};
use crate::classify::{Classifier, HashClassifier};
use crate::config::{BridgeConfig, BridgeError, TxKind};
use crate::counters::{read_cpu, ReverseShared, RxReason, RxShared, TxReason, TxShared, NRX, NTX};
use crate::report::{add, FlowReport, Report, ReverseReport, ThreadPlace};
use crate::reverse::Reverse;
use crate::rx::{RxState, RxThread};

/// A running bridge: RX threads reading the input interface, the PSPAT
/// runtime shaping, dispatchers sending on the output interface, and a
/// thread forwarding the reverse direction (crate docs).
pub struct Bridge {
    cfg: BridgeConfig,
    weights: Vec<u32>,
    runtime: Option<Runtime<AfPacketTx>>,
    stop: Arc<AtomicBool>,
    rx_threads: Vec<JoinHandle<Vec<Frame>>>,
    reverse_thread: Option<JoinHandle<()>>,
    rx: Vec<Arc<RxShared>>,
    tx: Arc<Mutex<Vec<Arc<TxShared>>>>,
    reverse: Option<Arc<ReverseShared>>,
    started: Instant,
    _pool: FramePool,
    frame_size: usize,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("input", &self.cfg.input)
            .field("output", &self.cfg.output)
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

fn open_sender(cfg: &BridgeConfig) -> Result<Sender, BridgeError> {
    let tx_cfg = TxConfig {
        qdisc_bypass: cfg.qdisc_bypass,
        ..TxConfig::default()
    };
    let err = interface_error("output", &cfg.output);
    Ok(match cfg.tx {
        TxKind::Sendmmsg => Sender::Mmsg(PacketTx::open(&cfg.output, &tx_cfg).map_err(err)?),
        TxKind::Ring => Sender::Ring(PacketTxRing::open(&cfg.output, &tx_cfg).map_err(err)?),
    })
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
        let build = |cfg: &BridgeConfig, out_max: usize| -> Result<AnyScheduler, BridgeError> {
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
                sched_cfg.link_rate_bps = cfg.rate_bps;
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
    /// never refuses one for lack of room.
    ///
    /// # Errors
    /// As [`Bridge::start_with`].
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
        Bridge::start_inner(cfg, |_, _| Ok(sched), tune, make_classifier)
    }

    fn start_inner<S, C>(
        cfg: BridgeConfig,
        build: impl FnOnce(&BridgeConfig, usize) -> Result<S, BridgeError>,
        tune: impl FnOnce(&mut RuntimeConfig),
        mut make_classifier: impl FnMut(usize) -> C,
    ) -> Result<Bridge, BridgeError>
    where
        S: Scheduler + Send + 'static,
        C: Classifier,
    {
        cfg.validate()?;
        let flows = cfg.flows as usize;
        let weights = cfg.flow_weights();
        // Sockets first: the output's MTU sizes the frames.
        let nsend = cfg.dispatchers.max(1);
        let mut senders = VecDeque::with_capacity(nsend);
        for _ in 0..nsend {
            senders.push_back(open_sender(&cfg)?);
        }
        let out_max = senders.front().map_or(1514, Sender::max_frame);
        // Blocks handed over after 1 ms at most: the latency a lone frame
        // gets from the ring.
        let rx_cfg = RxConfig {
            fanout: (cfg.rx_threads > 1).then_some(cfg.fanout_group),
            block_timeout: std::time::Duration::from_millis(1),
            promiscuous: true,
            ..RxConfig::default()
        };
        let mut rxs = Vec::with_capacity(cfg.rx_threads);
        for _ in 0..cfg.rx_threads {
            rxs.push(
                PacketRx::open(&cfg.input, &rx_cfg)
                    .map_err(interface_error("input", &cfg.input))?,
            );
        }
        let reverse_sockets = if cfg.reverse {
            let reverse_rx = RxConfig {
                block_timeout: std::time::Duration::from_millis(1),
                promiscuous: true,
                ..RxConfig::default()
            };
            let rx = PacketRx::open(&cfg.output, &reverse_rx)
                .map_err(interface_error("output", &cfg.output))?;
            let tx_cfg = TxConfig {
                qdisc_bypass: cfg.qdisc_bypass,
                ..TxConfig::default()
            };
            let tx = PacketTx::open(&cfg.input, &tx_cfg)
                .map_err(interface_error("input", &cfg.input))?;
            Some((rx, tx))
        } else {
            None
        };
        // A frame holds the longest frame the output takes, VLAN tag
        // included.
        let frame_size = (out_max + 4).next_multiple_of(pspat_io::frames::FRAME_ALIGN);
        let d = cfg.descriptors;
        let mut pool = FramePool::new(d * cfg.rx_threads, frame_size)?;
        let arena = Arc::clone(pool.arena());
        let sched = build(&cfg, out_max)?;
        let mut rt_cfg = RuntimeConfig::default();
        rt_cfg.max_clients = cfg.rx_threads;
        rt_cfg.descriptors_per_client = d;
        rt_cfg.dispatchers = cfg.dispatchers;
        rt_cfg.rate_bps = cfg.rate_bps;
        rt_cfg.arbiter_core = cfg.arbiter_cpu;
        rt_cfg.dispatcher_core = cfg.dispatcher_cpu;
        rt_cfg.shutdown = ShutdownPolicy::Drain {
            deadline: cfg.drain,
        };
        tune(&mut rt_cfg);
        let tx_list: Arc<Mutex<Vec<Arc<TxShared>>>> = Arc::new(Mutex::new(Vec::new()));
        let factory = {
            let tx_list = Arc::clone(&tx_list);
            let arena = Arc::clone(&arena);
            let rx_threads = cfg.rx_threads;
            move |_owner: TxOwner| {
                let counters = Arc::new(TxShared::new(rx_threads, flows));
                if let Ok(mut list) = tx_list.lock() {
                    list.push(Arc::clone(&counters));
                }
                AfPacketTx::new(senders.pop_front(), Arc::clone(&arena), counters)
            }
        };
        let runtime = Runtime::start(rt_cfg, sched, factory)?;
        let stop = Arc::new(AtomicBool::new(false));
        let tx = tx_list.lock().map(|l| l.clone()).unwrap_or_default();
        // Frame k·D + s belongs to RX thread k's slot s.
        let mut tokens: Vec<Vec<Option<Frame>>> = (0..cfg.rx_threads)
            .map(|_| (0..d).map(|_| None).collect())
            .collect();
        while let Some(frame) = pool.alloc() {
            let i = frame.index() as usize;
            tokens[i / d][i % d] = Some(frame);
        }
        let mut bridge = Bridge {
            weights,
            runtime: Some(runtime),
            stop: Arc::clone(&stop),
            rx_threads: Vec::new(),
            reverse_thread: None,
            rx: Vec::new(),
            tx: tx_list,
            reverse: None,
            started: Instant::now(),
            _pool: pool,
            frame_size,
            cfg,
        };
        let limits = ParseLimits::for_mtu(out_max.saturating_sub(14));
        for (k, (rx, tokens)) in rxs.into_iter().zip(tokens).enumerate() {
            let Some(rt) = bridge.runtime.as_ref() else {
                break;
            };
            let client = rt.client()?;
            if client.id() as usize != k {
                return Err(BridgeError::Runtime(pspat::RuntimeError::Thread {
                    what: format!("RX thread {k}"),
                    reason: format!("runtime client id {} instead of {k}", client.id()),
                }));
            }
            let counters = Arc::new(RxShared::new(flows));
            bridge.rx.push(Arc::clone(&counters));
            let cpus = &bridge.cfg.rx_cpus;
            let thread = RxThread {
                rx,
                st: RxState {
                    index: k,
                    client,
                    classifier: make_classifier(k),
                    arena: Arc::clone(&arena),
                    tokens,
                    counters,
                    tx: tx.clone(),
                    flows,
                    queue_limit: u64::from(bridge.cfg.queue_limit),
                    out_max,
                    limits,
                    stop: Arc::clone(&stop),
                    cpu: (!cpus.is_empty()).then(|| cpus[k % cpus.len()]),
                    admitted: vec![0; flows],
                    scratch: vec![0; frame_size],
                },
            };
            let name = format!("pspat-rx-{k}");
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || thread.run())
                .map_err(|source| BridgeError::Spawn { name, source })?;
            bridge.rx_threads.push(handle);
        }
        if let Some((rx, tx)) = reverse_sockets {
            let counters = Arc::new(ReverseShared::default());
            bridge.reverse = Some(Arc::clone(&counters));
            let reverse = Reverse {
                rx,
                tx,
                counters,
                stop: Arc::clone(&stop),
            };
            let name = "pspat-reverse".to_string();
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || reverse.run())
                .map_err(|source| BridgeError::Spawn { name, source })?;
            bridge.reverse_thread = Some(handle);
        }
        Ok(bridge)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &BridgeConfig {
        &self.cfg
    }

    /// Bytes per frame buffer (the output's longest frame, rounded up).
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// The first error that ended one of its threads (the input or output
    /// interface went down or away), if any: the bridge should be stopped.
    pub fn failure(&self) -> Option<String> {
        let tx = self.tx.lock().map(|l| l.clone()).unwrap_or_default();
        let slots = self
            .rx
            .iter()
            .map(|r| &r.error)
            .chain(tx.iter().map(|t| &t.error))
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
        let stats = self.runtime.as_ref().map(Runtime::stats);
        let mut r = self.collect(stats.as_ref(), false);
        r.threads = self.threads();
        r
    }

    fn threads(&self) -> Vec<ThreadPlace> {
        let mut out: Vec<ThreadPlace> = self
            .rx
            .iter()
            .enumerate()
            .map(|(k, r)| ThreadPlace {
                thread: format!("rx-{k}"),
                cpu: read_cpu(&r.cpu),
            })
            .collect();
        out.push(ThreadPlace {
            thread: "arbiter".into(),
            cpu: thread_cpu("pspat-arbiter"),
        });
        let tx = self.tx.lock().map(|l| l.clone()).unwrap_or_default();
        for (d, t) in tx.iter().enumerate() {
            out.push(ThreadPlace {
                thread: if self.cfg.dispatchers == 0 {
                    "arbiter (transmitting)".into()
                } else {
                    format!("dispatcher-{d}")
                },
                cpu: read_cpu(&t.cpu),
            });
        }
        if let Some(r) = &self.reverse {
            out.push(ThreadPlace {
                thread: "reverse".into(),
                cpu: read_cpu(&r.cpu),
            });
        }
        out
    }

    /// Stops reading, drains what the runtime holds (at the link rate, for
    /// at most the configured drain time, then drops the rest with reason
    /// `shutdown`), joins every thread and returns the final counters
    /// (`in_flight == 0`; [`Report::error`] names a lost interface).
    ///
    /// # Errors
    /// [`BridgeError::Runtime`] when the runtime could not shut down or an
    /// RX thread panicked.
    pub fn stop(mut self) -> Result<Report, BridgeError> {
        let threads = self.threads();
        // Release: pairs with the Acquire loads of the RX and reverse
        // threads' loops.
        self.stop.store(true, Ordering::Release);
        let mut panicked = None;
        for (k, h) in self.rx_threads.drain(..).enumerate() {
            match h.join() {
                Ok(tokens) => drop(tokens),
                Err(_) => panicked = Some(format!("RX thread {k}")),
            }
        }
        if let Some(h) = self.reverse_thread.take() {
            if h.join().is_err() {
                panicked = Some("reverse thread".into());
            }
        }
        let Some(rt) = self.runtime.take() else {
            return Err(BridgeError::Runtime(pspat::RuntimeError::Closed));
        };
        let finished = rt.shutdown()?;
        drop(finished.backends);
        if let Some(what) = panicked {
            return Err(BridgeError::Runtime(pspat::RuntimeError::Thread {
                what,
                reason: "panicked".into(),
            }));
        }
        let mut r = self.collect(Some(&finished.stats), true);
        if r.error.is_none() {
            r.error = finished.error.map(|e| e.to_string());
        }
        r.threads = threads;
        Ok(r)
    }

    fn collect(&self, stats: Option<&Stats>, final_report: bool) -> Report {
        let flows = self.cfg.flows as usize;
        let tx = self.tx.lock().map(|l| l.clone()).unwrap_or_default();
        let mut r = Report {
            elapsed_s: self.started.elapsed().as_secs_f64(),
            final_report,
            ..Report::default()
        };
        // Transmitters first, RX threads last (counters module docs).
        let mut fl: Vec<FlowReport> = (0..flows)
            .map(|f| FlowReport {
                flow: f as u32,
                weight: self.weights.get(f).copied().unwrap_or(1),
                ..FlowReport::default()
            })
            .collect();
        let mut tx_total = 0u64;
        for t in &tx {
            for (f, flow) in fl.iter_mut().enumerate() {
                flow.transmitted += t.sent[f].read();
                flow.bytes += t.sent_bytes[f].read();
                for reason in TxReason::ALL {
                    let n = t.drops[f * NTX + reason as usize].read();
                    add(&mut flow.dropped, reason.name(), n);
                    add(&mut r.dropped, reason.name(), n);
                    tx_total += n;
                }
            }
        }
        let arbiter = stats.map(Stats::dropped_by_reason).unwrap_or_default();
        let arbiter_total: u64 = arbiter.values().sum();
        for (reason, n) in &arbiter {
            add(&mut r.dropped, reason, *n);
        }
        let mut rx_admitted = 0u64;
        for c in &self.rx {
            let frames = c.frames.read();
            r.received += frames;
            r.received_bytes += c.bytes.read();
            r.not_received += c.kernel_drops.read();
            r.parse.parsed += c.parsed.read();
            let mut dropped_here = 0;
            for reason in RxReason::ALL {
                let n = c.drops[reason as usize].read();
                add(&mut r.dropped, reason.name(), n);
                dropped_here += n;
            }
            for reason in ParseReason::ALL {
                add(
                    &mut r.parse.refused,
                    reason.counter_name(),
                    c.refused[reason.index()].read(),
                );
                let n = c.unparsed[reason.index()].read();
                add(&mut r.dropped, reason.counter_name(), n);
                dropped_here += n;
            }
            rx_admitted += frames.saturating_sub(dropped_here);
            for (f, flow) in fl.iter_mut().enumerate() {
                flow.received += c.received[f].read();
                flow.received_bytes += c.received_bytes[f].read();
                for reason in RxReason::ALL {
                    add(
                        &mut flow.dropped,
                        reason.name(),
                        c.flow_drops[f * NRX + reason as usize].read(),
                    );
                }
            }
        }
        r.transmitted = fl.iter().map(|f| f.transmitted).sum();
        r.transmitted_bytes = fl.iter().map(|f| f.bytes).sum();
        r.dropped_total = r.dropped.values().sum();
        let mut conserved = r.received >= r.transmitted + r.dropped_total;
        r.in_flight = r.received.saturating_sub(r.transmitted + r.dropped_total);
        // One arbiter reason names the per-flow arbiter drops; several are
        // lumped as `arbiter`.
        let arbiter_name = match arbiter.keys().collect::<Vec<_>>().as_slice() {
            [one] => (*one).clone(),
            _ => "arbiter".to_string(),
        };
        let mut residual_total = 0u64;
        for flow in &mut fl {
            let gone = flow.transmitted + flow.dropped.values().sum::<u64>();
            conserved &= flow.received >= gone;
            let residual = flow.received.saturating_sub(gone);
            if final_report {
                add(&mut flow.dropped, &arbiter_name, residual);
                residual_total += residual;
            } else {
                flow.in_flight = residual;
            }
        }
        if final_report {
            // The runtime's own accounts must agree with the bridge's.
            if let Some(s) = stats {
                conserved &= s.conserved()
                    && s.in_flight == 0
                    && r.in_flight == 0
                    && residual_total == arbiter_total
                    && s.submitted == rx_admitted
                    && s.transmitted == r.transmitted + tx_total;
            }
        }
        r.conserved = conserved;
        r.flows = fl;
        r.reverse = self.reverse_report();
        r.error = self.failure();
        r
    }

    fn reverse_report(&self) -> ReverseReport {
        let Some(c) = &self.reverse else {
            return ReverseReport::default();
        };
        let mut dropped = BTreeMap::new();
        // Sends first, receipts last (as in `collect`).
        let transmitted = c.sent.read();
        let bytes = c.sent_bytes.read();
        for reason in RxReason::ALL {
            add(&mut dropped, reason.name(), c.drops[reason as usize].read());
        }
        for reason in TxReason::ALL {
            add(
                &mut dropped,
                reason.name(),
                c.drops[NRX + reason as usize].read(),
            );
        }
        ReverseReport {
            enabled: true,
            received: c.received.read(),
            transmitted,
            bytes,
            dropped,
            not_received: c.kernel_drops.read(),
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // A bridge dropped without `stop`: stop its threads anyway.
        // Release: as in `stop`.
        self.stop.store(true, Ordering::Release);
        for h in self.rx_threads.drain(..) {
            let _ = h.join();
        }
        if let Some(h) = self.reverse_thread.take() {
            let _ = h.join();
        }
        if let Some(rt) = self.runtime.take() {
            let _ = rt.shutdown();
        }
    }
}

/// The CPU a thread of this process named `name` last ran on
/// (`/proc/self/task/*/stat`, field 39), if it can be read.
fn thread_cpu(name: &str) -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).ok()?;
        // Fields after the command (which may hold spaces) start at field 3.
        let rest = stat.rsplit_once(')')?.1;
        return rest
            .split_whitespace()
            .nth(39 - 3)
            .and_then(|c| c.parse().ok());
    }
    None
}
