//! A three-namespace test bed: a sender, the bridge, a receiver, joined by
//! two veth pairs. Every name carries the `pspat-` prefix and every
//! address is in 10.199.0.0/16 (`pspat_io::netns`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use pspat_bridge::{Bridge, BridgeConfig, HashClassifier, Report};
use pspat_io::af_packet::{PacketRx, PacketTx, RxConfig, TxConfig};
use pspat_io::netns::{self, Namespace, VethPair};
use pspat_sched::pipe::{PipeConfig, PipeScheduler};
use pspat_sched::{AlgKind, FlowTable, Pipe, SchedulerConfig};

pub const MAGIC: &[u8; 8] = b"pspat-br";

pub struct Bed {
    // Dropped in this order: pairs, then namespaces.
    pub into: VethPair,
    pub out: VethPair,
    pub sender: Namespace,
    pub bridge: Namespace,
    pub receiver: Namespace,
}

impl Bed {
    /// The bed, or `None` (with the reason printed) without root.
    pub fn new() -> Option<Bed> {
        if let Some(reason) = netns::unavailable() {
            println!("skipped: {reason}");
            return None;
        }
        let sender = Namespace::create().expect("sender namespace");
        let bridge = Namespace::create().expect("bridge namespace");
        let receiver = Namespace::create().expect("receiver namespace");
        let into = VethPair::create(&sender, &bridge).expect("input pair");
        let out = VethPair::create(&bridge, &receiver).expect("output pair");
        Some(Bed {
            into,
            out,
            sender,
            bridge,
            receiver,
        })
    }

    /// A bridge configuration from the input end to the output end.
    pub fn config(&self) -> BridgeConfig {
        BridgeConfig::new(self.into.b.clone(), self.out.a.clone())
    }

    pub fn start(&self, cfg: BridgeConfig) -> Bridge {
        self.bridge
            .run(|| Bridge::start(cfg))
            .expect("enter the bridge namespace")
            .expect("start the bridge")
    }

    pub fn start_with<C: pspat_bridge::Classifier>(
        &self,
        cfg: BridgeConfig,
        make: impl FnMut(usize) -> C + Send,
    ) -> Bridge {
        self.bridge
            .run(|| Bridge::start_with(cfg, make))
            .expect("enter the bridge namespace")
            .expect("start the bridge")
    }

    /// A bridge around one dummynet pipe configured by `pipe`, with a FIFO
    /// queue per flow, classifying with the built-in classifier.
    pub fn start_pipe(&self, cfg: BridgeConfig, pipe: PipeConfig) -> Bridge {
        let flows = cfg.flows as usize;
        let fifo = SchedulerConfig::new(AlgKind::Fifo)
            .build(FlowTable::uniform(flows).expect("flow table"))
            .expect("FIFO scheduler");
        let sched = PipeScheduler::new(Pipe::new(pipe, fifo, flows).expect("pipe"));
        let classifier = HashClassifier::new(&cfg);
        self.bridge
            .run(|| Bridge::start_custom(cfg, sched, |_| {}, move |_| classifier.clone()))
            .expect("enter the bridge namespace")
            .expect("start the bridge")
    }

    pub fn sender_socket(&self) -> PacketTx {
        self.sender
            .run(|| PacketTx::open(&self.into.a, &TxConfig::default()))
            .unwrap()
            .expect("open the sender")
    }

    /// A receiver on the far end, collecting `(dst port, sequence)` of
    /// every numbered frame until stopped.
    pub fn receiver(&self) -> Receiver {
        receiver_on(&self.receiver, &self.out.b)
    }
}

/// A receiver on `interface` in namespace `ns`, collecting `(dst port,
/// sequence)` of every numbered frame until stopped.
pub fn receiver_on(ns: &Namespace, interface: &str) -> Receiver {
    let mut rx = ns
        .run(|| PacketRx::open(interface, &RxConfig::default()))
        .unwrap()
        .expect("open the receiver");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let handle = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut drops = 0;
        while !stop2.load(Ordering::Acquire) {
            rx.recv_with(Duration::from_millis(20), |p| {
                let mut buf = [0u8; 2048];
                if let Some(n) = p.copy_into(&mut buf) {
                    if let Some(id) = numbered_id(&buf[..n]) {
                        got.push(id);
                    }
                }
            })
            .expect("receive");
            drops += rx.kernel_stats().map_or(0, |k| k.drops);
        }
        (got, drops)
    });
    Receiver { stop, handle }
}

pub struct Receiver {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Vec<(u16, u32)>, u64)>,
}

/// A receiver on the bed's far end keeping, whole, every frame `wanted`
/// accepts, until stopped; then it reads on until its ring stays empty for
/// 100 ms (the last frames may still be in the veth's backlog).
pub fn frame_receiver(bed: &Bed, wanted: fn(&[u8]) -> bool) -> FrameReceiver {
    let mut rx = bed
        .receiver
        .run(|| PacketRx::open(&bed.out.b, &RxConfig::default()))
        .expect("enter the receiver namespace")
        .expect("open the receiver");
    let stop = Arc::new(AtomicBool::new(false));
    let handle = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || {
            let mut got = Vec::new();
            let mut keep = |p: pspat_io::af_packet::RxPacket<'_>| {
                let mut buf = [0u8; 2048];
                if let Some(n) = p.copy_into(&mut buf) {
                    if wanted(&buf[..n]) {
                        got.push(buf[..n].to_vec());
                    }
                }
            };
            // Acquire: pairs with the Release store in `finish`.
            while !stop.load(Ordering::Acquire) {
                rx.recv_with(Duration::from_millis(20), &mut keep)
                    .expect("receive");
            }
            while rx
                .recv_with(Duration::from_millis(100), &mut keep)
                .expect("receive")
                > 0
            {}
            (got, rx.kernel_stats().expect("PACKET_STATISTICS").drops)
        }
    });
    FrameReceiver { stop, handle }
}

/// What [`frame_receiver`] returns.
pub struct FrameReceiver {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Vec<Vec<u8>>, u64)>,
}

impl FrameReceiver {
    /// Stops; the frames kept, in arrival order, and the kernel's ring
    /// drops.
    pub fn finish(self) -> (Vec<Vec<u8>>, u64) {
        // Release: pairs with the receiver thread's Acquire load.
        self.stop.store(true, Ordering::Release);
        self.handle.join().expect("receiver thread")
    }
}

impl Receiver {
    /// Stops; the numbered frames in arrival order and the kernel's ring
    /// drops.
    pub fn finish(self) -> (Vec<(u16, u32)>, u64) {
        self.stop.store(true, Ordering::Release);
        self.handle.join().expect("receiver thread")
    }
}

/// A UDP frame to `dport` carrying the marker and `seq`, `len` bytes long
/// (at least 60).
pub fn numbered(dport: u16, seq: u32, len: usize) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.extend_from_slice(&dport.to_be_bytes());
    payload.resize(len.max(60) - 42, 0xee);
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 199, 200, 1], [10, 199, 200, 2], 64)
        .udp(4000, dport)
        .write(&mut frame, &payload)
        .expect("build");
    frame
}

/// `(dst port, sequence)` of a frame [`numbered`] built (tagged or not).
pub fn numbered_id(frame: &[u8]) -> Option<(u16, u32)> {
    let at = frame.windows(MAGIC.len()).position(|w| w == MAGIC)?;
    let seq = u32::from_be_bytes(frame.get(at + 8..at + 12)?.try_into().ok()?);
    let port = u16::from_be_bytes(frame.get(at + 12..at + 14)?.try_into().ok()?);
    Some((port, seq))
}

/// Sends every frame, `batch` at a time with `gap` between batches;
/// returns how many the kernel took.
pub fn send_all(tx: &mut PacketTx, frames: &[Vec<u8>], batch: usize, gap: Duration) -> u64 {
    let mut sent = 0u64;
    for chunk in frames.chunks(batch) {
        let views: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        let mut at = 0;
        let deadline = Instant::now() + Duration::from_secs(1);
        while at < views.len() && Instant::now() < deadline {
            at += tx.send_batch(&views[at..]).expect("send");
        }
        sent += at as u64;
        std::thread::sleep(gap);
    }
    sent
}

/// `per_flow` numbered frames of `len` bytes on each of `flows`
/// destination ports from `first_port`, the ports in turn.
pub fn round_robin(first_port: u16, flows: u16, per_flow: u32, len: usize) -> Vec<Vec<u8>> {
    (0..per_flow)
        .flat_map(|seq| (0..flows).map(move |f| numbered(first_port + f, seq, len)))
        .collect()
}

/// Sends `frames` ([`send_all`]), checks that the sender's kernel took
/// every one and that the bridge kept count while it settled, and stops it
/// 200 ms later: the final report and the frames sent.
pub fn send_and_stop(
    bridge: Bridge,
    tx: &mut PacketTx,
    frames: &[Vec<u8>],
    batch: usize,
    gap: Duration,
) -> (Report, u64) {
    let sent = send_all(tx, frames, batch, gap);
    assert_eq!(
        sent,
        frames.len() as u64,
        "the sender's kernel took every frame"
    );
    let live = settle(&bridge, sent, Duration::from_secs(10));
    assert!(live.conserved, "{live:?}");
    std::thread::sleep(Duration::from_millis(200));
    (bridge.stop().expect("stop"), sent)
}

/// Waits until the bridge received `want` frames (or the kernel dropped
/// the rest) and holds none, or `limit` passed; returns the last report.
pub fn settle(bridge: &Bridge, want: u64, limit: Duration) -> Report {
    let deadline = Instant::now() + limit;
    loop {
        let r = bridge.report();
        if (r.received + r.not_received >= want && r.in_flight == 0) || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks a run's accounting across the bridge and each flow's order:
/// what the sender sent arrived at the far end or was counted dropped
/// (by the bridge, by reason, or by a kernel ring), nothing in flight.
/// Returns how many flows arrived.
pub fn check_conserved_and_ordered(
    report: &Report,
    got: &[(u16, u32)],
    sent: u64,
    far_drops: u64,
) -> usize {
    assert!(report.conserved, "{report:?}");
    assert_eq!(report.in_flight, 0, "{report:?}");
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(
        sent,
        got.len() as u64 + report.dropped_total + report.not_received + far_drops,
        "sent = far end + bridge drops + ring drops ({report:?})"
    );
    assert_eq!(report.received + report.not_received, sent);
    assert_eq!(report.transmitted, got.len() as u64 + far_drops);
    let per_flow: u64 = report.flows.iter().map(|f| f.received).sum();
    assert_eq!(per_flow, report.received);
    for f in &report.flows {
        let dropped: u64 = f.dropped.values().sum();
        assert_eq!(f.received, f.transmitted + dropped, "flow {}", f.flow);
    }
    let mut last: BTreeMap<u16, u32> = BTreeMap::new();
    for (port, seq) in got {
        if let Some(prev) = last.insert(*port, *seq) {
            assert!(*seq > prev, "flow {port}: {seq} after {prev}");
        }
    }
    last.len()
}

/// Waits (at most 5 s) for `bridge` to notice that one of its interfaces
/// was removed, checks that it says so in one line, stops it and checks
/// that its counters add up for the `sent` frames offered; returns the
/// final report.
pub fn stop_after_removal(bridge: Bridge, sent: u64) -> Report {
    let deadline = Instant::now() + Duration::from_secs(5);
    while bridge.failure().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let failure = bridge.failure().expect("the bridge noticed");
    assert!(failure.contains("went down or disappeared"), "{failure}");
    assert!(!failure.contains('\n'), "one line: {failure}");
    let report = bridge.stop().expect("stop");
    assert!(report.conserved, "{report:?}");
    assert_eq!(report.in_flight, 0);
    assert!(report.error.is_some());
    assert_eq!(report.received + report.not_received, sent, "{report:?}");
    assert_eq!(
        report.received,
        report.transmitted + report.dropped_total,
        "{report:?}"
    );
    report
}

/// Drops the bed and checks that its three namespaces are gone.
pub fn remove_and_check(bed: Bed) {
    let names = [&bed.sender, &bed.bridge, &bed.receiver].map(|ns| ns.name().to_string());
    drop(bed);
    for name in names {
        assert!(
            !std::path::Path::new(&format!("/var/run/netns/{name}")).exists(),
            "namespace {name} removed"
        );
    }
}
