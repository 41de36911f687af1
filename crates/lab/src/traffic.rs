//! Test traffic: a UDP sender (`sendmmsg`, N threads, flows by destination
//! port with weights, a rate or greedy) and a receiver that counts each
//! flow's packets, loss, reordering and one-way latency; plus one bulk TCP
//! stream whose goodput the receiver measures.
//!
//! # Frames and payload
//! `frame_bytes` is the Ethernet frame without preamble and FCS, as the
//! shapers count it: 14 (Ethernet) + 20 (IPv4) + 8 (UDP) + payload. The
//! smallest, 60 bytes, is the Ethernet minimum less its 4-byte FCS and
//! leaves an 18-byte payload, exactly the header every packet carries
//! (little endian): sequence number `u64` (per stream, from 0), send time
//! `u64` (`CLOCK_MONOTONIC` ns, one clock read per batch just before the
//! `sendmmsg`), flow id `u16` (the flow's destination port, so that several
//! senders with different base ports feed one receiver). Larger frames are padded with zeros; the
//! largest is 1514 (MTU 1500).
//!
//! # Flows, threads and rates
//! Flow `i` goes to port `base_port + i` with weight `wᵢ`. With T threads
//! and N flows, thread t sends flows `{i : i mod T = t}` when N ≥ T, else
//! flow `t mod N`; each (thread, flow) pair is one socket, one *stream*,
//! with its own sequence. With a rate R (bit/s of frames, or packets/s),
//! flow i gets `R·wᵢ/Σw`, split evenly over the threads that send it, and
//! each stream paces itself against its own schedule (at most 64 packets a
//! call; a packet the local stack refuses still takes its slot, so a
//! refusal never becomes a burst later). Greedy streams send batches of 64
//! round-robin. A refused send (ENOBUFS, ECONNREFUSED...) is counted by
//! reason and is not a sent packet: `packets` counts what the kernel took.
//!
//! # Receiver
//! One socket and thread per flow. A stream is (flow, source address).
//! For each datagram: `seq == next` is in order; `seq > next` counts the
//! gap `seq - next` as lost; `seq < next` is late: one reorder, and one
//! earlier-counted loss taken back. Latency = receive time (one
//! `CLOCK_MONOTONIC` read per `recvmmsg` batch) − send time, recorded in an
//! HDR histogram (3 significant digits, 1 ns to 60 s). Loss at the very end
//! of a stream (after its last received packet) is invisible to the
//! receiver: compare with the sender's `packets` for that.
//!
//! Cost: O(1) per packet, no allocation per packet except a new stream's
//! first entry.
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use pspat_io::udp::MAX_BATCH;
use pspat_io::{RecvMeta, Timestamps, UdpBatchSocket};
use serde::Serialize;

use crate::clock::monotonic_ns;
use crate::stop;

use crate::sending::{encode_header, error_name, pin, pinning};
pub use crate::sending::{
    FlowSent, Proto, Rate, SendConfig, SendReport, TrafficError, Via, HEADER_BYTES, MAX_FRAME,
    MIN_FRAME, PAYLOAD_HEADER,
};

struct Stream {
    flow: usize,
    socket: UdpBatchSocket,
    /// Nanoseconds between packets (rate mode).
    interval_ns: f64,
    /// Packets given a slot (sent or refused).
    scheduled: u64,
    sent: u64,
    refused: u64,
}

/// Sends UDP (or TCP) traffic per `config`, until its duration ends or a
/// stop is requested.
pub fn send(config: &SendConfig) -> Result<SendReport, TrafficError> {
    config.check()?;
    if config.proto == Proto::Tcp {
        return send_tcp(config);
    }
    if let Via::Pspat(via) = &config.via {
        return crate::local::send(config, via);
    }
    let n = config.weights.len();
    let total_weight: f64 = config.weights.iter().map(|&w| f64::from(w)).sum();
    let mut senders_of = vec![0usize; n];
    for t in 0..config.threads {
        for f in config.flows_of_thread(t) {
            senders_of[f] += 1;
        }
    }
    let total_pps = config.total_pps();
    // Open every socket first, so that errors come before any thread runs.
    let mut per_thread = Vec::with_capacity(config.threads);
    for t in 0..config.threads {
        let mut streams = Vec::new();
        for flow in config.flows_of_thread(t) {
            let socket = UdpBatchSocket::bind((Ipv4Addr::UNSPECIFIED, 0), Timestamps::None)?;
            socket.connect((config.dst, config.base_port + flow as u16))?;
            let interval_ns = match total_pps {
                Some(pps) => {
                    let stream_pps = pps * f64::from(config.weights[flow])
                        / total_weight
                        / senders_of[flow] as f64;
                    1e9 / stream_pps.max(1e-9)
                }
                None => 0.0,
            };
            streams.push(Stream {
                flow,
                socket,
                interval_ns,
                scheduled: 0,
                sent: 0,
                refused: 0,
            });
        }
        per_thread.push(streams);
    }
    let payload_len = config.frame_bytes - HEADER_BYTES;
    let greedy = total_pps.is_none();
    let duration_ns = config.duration.as_nanos() as u64;
    let start = monotonic_ns();
    let deadline = start + duration_ns;
    let results: Vec<(Vec<Stream>, BTreeMap<String, u64>, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = per_thread
            .into_iter()
            .enumerate()
            .map(|(t, mut streams)| {
                let cpus = &config.cpus;
                scope.spawn(move || {
                    pin(cpus, t);
                    let mut errors = BTreeMap::new();
                    let mut buffers = vec![vec![0u8; payload_len]; MAX_BATCH];
                    let mut last = start;
                    loop {
                        let now = monotonic_ns();
                        if now >= deadline || stop::requested() {
                            break;
                        }
                        let mut next_due = u64::MAX;
                        let mut any = false;
                        for stream in &mut streams {
                            let count = if greedy {
                                MAX_BATCH
                            } else {
                                let due = ((now - start) as f64 / stream.interval_ns) as u64 + 1;
                                let count = due.saturating_sub(stream.scheduled);
                                if count == 0 {
                                    let at = start
                                        + (stream.scheduled as f64 * stream.interval_ns) as u64;
                                    next_due = next_due.min(at);
                                    continue;
                                }
                                count.min(MAX_BATCH as u64) as usize
                            };
                            any = true;
                            let port = config.base_port + stream.flow as u16;
                            let stamp = monotonic_ns();
                            for (k, buffer) in buffers[..count].iter_mut().enumerate() {
                                encode_header(buffer, stream.sent + k as u64, stamp, port);
                            }
                            let slices: Vec<&[u8]> =
                                buffers[..count].iter().map(Vec::as_slice).collect();
                            match stream.socket.send_batch(&slices) {
                                Ok(sent) => {
                                    stream.sent += sent as u64;
                                    if !greedy {
                                        // The unsent rest of the batch is retried at once.
                                        stream.scheduled += sent as u64;
                                    }
                                    if sent > 0 {
                                        last = monotonic_ns();
                                    }
                                }
                                Err(error) => {
                                    // The first packet was refused: count it, give up its slot.
                                    stream.refused += 1;
                                    stream.scheduled += 1;
                                    *errors.entry(error_name(&error)).or_insert(0) += 1;
                                }
                            }
                        }
                        if !any && next_due != u64::MAX {
                            let wait = next_due.saturating_sub(monotonic_ns()).min(1_000_000);
                            if wait > 50_000 {
                                std::thread::sleep(Duration::from_nanos(wait - 20_000));
                            } else {
                                std::thread::yield_now();
                            }
                        }
                    }
                    (streams, errors, last)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut flows: Vec<FlowSent> = (0..n)
        .map(|i| FlowSent {
            flow: i,
            port: config.base_port + i as u16,
            weight: config.weights[i],
            streams: senders_of[i],
            ..FlowSent::default()
        })
        .collect();
    let mut send_errors = BTreeMap::new();
    let mut last = start;
    for (streams, errors, thread_last) in results {
        last = last.max(thread_last);
        for s in streams {
            flows[s.flow].packets += s.sent;
            flows[s.flow].bytes += s.sent * config.frame_bytes as u64;
            flows[s.flow].refused += s.refused;
        }
        for (k, v) in errors {
            *send_errors.entry(k).or_insert(0) += v;
        }
    }
    let packets: u64 = flows.iter().map(|f| f.packets).sum();
    let bytes: u64 = flows.iter().map(|f| f.bytes).sum();
    let duration_s = ((last - start) as f64 / 1e9).max(1e-9);
    Ok(SendReport {
        proto: Proto::Udp,
        frame_bytes: config.frame_bytes,
        threads: config.threads,
        target_pps: total_pps,
        duration_s,
        packets,
        bytes,
        pps: packets as f64 / duration_s,
        bps: 8.0 * bytes as f64 / duration_s,
        send_errors,
        flows,
        cpu_s: crate::procstat::self_cpu_s(),
        pinning: pinning(&config.cpus),
        via: "direct",
        pspat: None,
    })
}

fn send_tcp(config: &SendConfig) -> Result<SendReport, TrafficError> {
    pin(&config.cpus, 0);
    let address = SocketAddr::V4(SocketAddrV4::new(config.dst, config.base_port));
    let mut stream =
        TcpStream::connect_timeout(&address, Duration::from_secs(3)).map_err(|source| {
            TrafficError::Tcp {
                what: "connect",
                source,
            }
        })?;
    stream
        .set_write_timeout(Some(Duration::from_millis(100)))
        .map_err(|source| TrafficError::Tcp {
            what: "set a write timeout",
            source,
        })?;
    let chunk = vec![0x5au8; 64 * 1024];
    let start = monotonic_ns();
    let deadline = start + config.duration.as_nanos() as u64;
    let mut bytes = 0u64;
    let mut send_errors = BTreeMap::new();
    while monotonic_ns() < deadline && !stop::requested() {
        match stream.write(&chunk) {
            Ok(n) => bytes += n as u64,
            Err(e) if pspat_io::error::is_retryable(e.kind()) => {}
            Err(e) => {
                *send_errors.entry(e.kind().to_string()).or_insert(0) += 1;
                break;
            }
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let duration_s = ((monotonic_ns() - start) as f64 / 1e9).max(1e-9);
    Ok(SendReport {
        proto: Proto::Tcp,
        frame_bytes: 0,
        threads: 1,
        target_pps: None,
        duration_s,
        packets: 0,
        bytes,
        pps: 0.0,
        bps: 8.0 * bytes as f64 / duration_s,
        send_errors,
        flows: Vec::new(),
        cpu_s: crate::procstat::self_cpu_s(),
        pinning: pinning(&config.cpus),
        via: "direct",
        pspat: None,
    })
}

/// A receiver's parameters.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    /// Address to bind (0.0.0.0: any).
    pub bind: Ipv4Addr,
    /// Flow 0's port.
    pub base_port: u16,
    /// Flows (ports `base_port..base_port + flows`).
    pub flows: usize,
    /// Stop after this long (else on a stop request only).
    pub duration: Option<Duration>,
    /// CPUs to pin the threads to, round-robin (empty: unpinned).
    pub cpus: Vec<usize>,
    /// UDP or TCP.
    pub proto: Proto,
    /// A steady-state window `(skip, span)`: packets arriving from `skip`
    /// after the first packet (any flow) for `span` are also counted apart
    /// (`steady_*`), so that shares and rates leave out the start and the
    /// drain after the senders stop.
    pub steady: Option<(Duration, Duration)>,
    /// Also measure each packet's one-way latency to its arrival at the
    /// socket (the kernel's receive timestamp, `SO_TIMESTAMPNS`), apart from
    /// the latency to when the receiving thread reads it: the difference is
    /// the receiver's own wait for its core.
    pub arrival_latency: bool,
}

impl RecvConfig {
    /// Checks the parameters; the message names the flag.
    pub fn check(&self) -> Result<(), TrafficError> {
        if self.flows == 0 || self.flows > 1024 {
            return Err(TrafficError::Config(format!(
                "--flows {} is outside 1..=1024",
                self.flows
            )));
        }
        if usize::from(self.base_port) + self.flows > 65_536 || self.base_port == 0 {
            return Err(TrafficError::Config(
                "--port plus --flows passes 65535 (or --port is 0)".into(),
            ));
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err(TrafficError::Config("--duration must be above 0".into()));
        }
        if self.proto == Proto::Tcp && self.flows != 1 {
            // Refused rather than ignored: a TCP receiver takes one stream.
            return Err(TrafficError::Config(
                "--flows applies to UDP; --proto tcp receives one stream on --port".into(),
            ));
        }
        Ok(())
    }
}

/// Latency percentiles, microseconds.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, Default, PartialEq)]
pub struct Latency {
    /// Samples.
    pub samples: u64,
    /// Smallest.
    pub min_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th.
    pub p99_us: f64,
    /// 99.9th.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    let us = |ns: u64| ns as f64 / 1e3;
    Latency {
        samples: h.len(),
        min_us: us(h.min()),
        mean_us: h.mean() / 1e3,
        p50_us: us(h.value_at_quantile(0.5)),
        p90_us: us(h.value_at_quantile(0.9)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
    }
}

/// What one flow received.
#[derive(Debug, Clone, Serialize, Default)]
pub struct FlowReceived {
    /// Flow id.
    pub flow: usize,
    /// Port.
    pub port: u16,
    /// Source streams seen.
    pub streams: usize,
    /// Packets received.
    pub packets: u64,
    /// Frame bytes (payload + 42).
    pub bytes: u64,
    /// Packets per second over the receiver's window.
    pub pps: f64,
    /// Bits per second of frames over the receiver's window.
    pub bps: f64,
    /// Share of all received frame bytes.
    pub byte_share: f64,
    /// Lost: sequence gaps not filled later.
    pub lost: u64,
    /// Packets that came after a higher sequence number of their stream.
    pub reordered: u64,
    /// Datagrams too short to carry the header, or whose flow id is not
    /// this port.
    pub malformed: u64,
    /// One-way latency, to when the receiving thread read the packet.
    pub latency: Latency,
    /// One-way latency to the packet's arrival at the socket (the kernel's
    /// receive timestamp); `null` unless asked for (`--arrival-latency`).
    pub arrival_latency: Option<Latency>,
    /// Packets inside the steady window (0 without one).
    pub steady_packets: u64,
    /// Frame bytes inside the steady window.
    pub steady_bytes: u64,
    /// Share of all frame bytes inside the steady window.
    pub steady_byte_share: f64,
}

/// A receiver's report.
#[derive(Debug, Clone, Serialize)]
pub struct RecvReport {
    /// `udp` or `tcp`.
    pub proto: Proto,
    /// Seconds from the first packet (any flow) to the last.
    pub window_s: f64,
    /// Packets received.
    pub packets: u64,
    /// Frame bytes (UDP) or stream bytes (TCP) received.
    pub bytes: u64,
    /// Packets per second over the window.
    pub pps: f64,
    /// Bits per second over the window (TCP: the goodput).
    pub bps: f64,
    /// Lost, all flows.
    pub lost: u64,
    /// Reordered, all flows.
    pub reordered: u64,
    /// Latency of all flows together.
    pub latency: Latency,
    /// Length of the steady window, s (null without one).
    pub steady_s: Option<f64>,
    /// Packets per second inside the steady window.
    pub steady_pps: Option<f64>,
    /// Per flow (UDP).
    pub flows: Vec<FlowReceived>,
    /// This process's CPU seconds, from /proc.
    pub cpu_s: Option<f64>,
    /// Where the threads ran.
    pub pinning: String,
}

#[derive(Default)]
struct StreamState {
    next: u64,
}

struct FlowState {
    received: FlowReceived,
    first_ns: u64,
    last_ns: u64,
    histogram: Histogram<u64>,
    /// To arrival at the socket (with `arrival_latency`).
    arrival: Option<Histogram<u64>>,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap_or_else(|_| {
        // The bounds above are valid constants: new_with_bounds cannot fail.
        unreachable!("constant histogram bounds")
    })
}

/// Prints the ready line on standard error (for the orchestration that
/// waits for it).
fn ready(what: &str) {
    eprintln!("traffic: ready ({what})");
}

/// Receives until the duration ends or a stop is requested.
pub fn recv(config: &RecvConfig) -> Result<RecvReport, TrafficError> {
    config.check()?;
    if config.proto == Proto::Tcp {
        return recv_tcp(config);
    }
    let mut sockets = Vec::with_capacity(config.flows);
    for i in 0..config.flows {
        let timestamps = if config.arrival_latency {
            Timestamps::Kernel
        } else {
            Timestamps::None
        };
        let socket = UdpBatchSocket::bind((config.bind, config.base_port + i as u16), timestamps)?;
        sockets.push(socket);
    }
    ready(&format!(
        "udp ports {}..={}",
        config.base_port,
        usize::from(config.base_port) + config.flows - 1
    ));
    let start = monotonic_ns();
    let deadline = config
        .duration
        .map_or(u64::MAX, |d| start + d.as_nanos() as u64);
    let first_arrival = AtomicU64::new(0);
    let steady = config
        .steady
        .map(|(skip, span)| (skip.as_nanos() as u64, span.as_nanos() as u64));
    let states: Vec<Result<FlowState, TrafficError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(flow, socket)| {
                let cpus = &config.cpus;
                let port = config.base_port + flow as u16;
                let shared = Shared {
                    cpus,
                    deadline,
                    first_arrival: &first_arrival,
                    steady,
                    arrival_latency: config.arrival_latency,
                };
                scope.spawn(move || recv_flow(flow, port, &socket, &shared))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut flows = Vec::with_capacity(config.flows);
    let mut all = new_histogram();
    let (mut first, mut last) = (u64::MAX, 0u64);
    for state in states {
        let state = state?;
        if state.received.packets > 0 {
            first = first.min(state.first_ns);
            last = last.max(state.last_ns);
        }
        let _ = all.add(&state.histogram);
        let mut received = state.received;
        received.latency = latency(&state.histogram);
        received.arrival_latency = state.arrival.as_ref().map(latency);
        flows.push(received);
    }
    let window_s = if last > first {
        (last - first) as f64 / 1e9
    } else {
        0.0
    };
    let packets: u64 = flows.iter().map(|f| f.packets).sum();
    let bytes: u64 = flows.iter().map(|f| f.bytes).sum();
    let per_s = |v: f64| if window_s > 0.0 { v / window_s } else { 0.0 };
    let steady_bytes: u64 = flows.iter().map(|f| f.steady_bytes).sum();
    let steady_packets: u64 = flows.iter().map(|f| f.steady_packets).sum();
    for f in &mut flows {
        f.steady_byte_share = if steady_bytes > 0 {
            f.steady_bytes as f64 / steady_bytes as f64
        } else {
            0.0
        };
        f.pps = per_s(f.packets as f64);
        f.bps = per_s(8.0 * f.bytes as f64);
        f.byte_share = if bytes > 0 {
            f.bytes as f64 / bytes as f64
        } else {
            0.0
        };
    }
    Ok(RecvReport {
        proto: Proto::Udp,
        window_s,
        packets,
        bytes,
        pps: per_s(packets as f64),
        bps: per_s(8.0 * bytes as f64),
        lost: flows.iter().map(|f| f.lost).sum(),
        reordered: flows.iter().map(|f| f.reordered).sum(),
        latency: latency(&all),
        steady_s: steady.map(|(_, span)| span as f64 / 1e9),
        steady_pps: steady.map(|(_, span)| steady_packets as f64 / (span as f64 / 1e9)),
        flows,
        cpu_s: crate::procstat::self_cpu_s(),
        pinning: pinning(&config.cpus),
    })
}

/// What the receiving threads share.
struct Shared<'a> {
    cpus: &'a [usize],
    deadline: u64,
    /// The first arrival of any flow (0: none yet).
    first_arrival: &'a AtomicU64,
    /// `(skip, span)` in ns.
    steady: Option<(u64, u64)>,
    /// [`RecvConfig::arrival_latency`].
    arrival_latency: bool,
}

fn recv_flow(
    flow: usize,
    port: u16,
    socket: &UdpBatchSocket,
    shared: &Shared<'_>,
) -> Result<FlowState, TrafficError> {
    let deadline = shared.deadline;
    pin(shared.cpus, flow);
    let mut state = FlowState {
        received: FlowReceived {
            flow,
            port,
            ..FlowReceived::default()
        },
        first_ns: 0,
        last_ns: 0,
        histogram: new_histogram(),
        arrival: shared.arrival_latency.then(new_histogram),
    };
    let mut streams: HashMap<SocketAddr, StreamState> = HashMap::new();
    let mut storage = vec![[0u8; 2048]; MAX_BATCH];
    let mut meta = [RecvMeta::default(); MAX_BATCH];
    loop {
        let now = monotonic_ns();
        if now >= deadline || stop::requested() {
            break;
        }
        let wait = Duration::from_nanos((deadline - now).min(100_000_000));
        let mut buffers: Vec<&mut [u8]> = storage.iter_mut().map(|b| &mut b[..]).collect();
        let count = socket.recv_batch(&mut buffers, &mut meta, wait)?;
        if count == 0 {
            continue;
        }
        let now = monotonic_ns();
        // Per batch: kernel timestamps are realtime, the senders' monotonic.
        let offset = state
            .arrival
            .as_ref()
            .map(|_| crate::clock::realtime_offset_ns());
        if state.received.packets == 0 {
            state.first_ns = now;
        }
        state.last_ns = now;
        // Relaxed: only the value matters; the first thread to see a packet
        // sets it and the others read it.
        let _ = shared
            .first_arrival
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        let origin = shared.first_arrival.load(Ordering::Relaxed);
        let in_steady = shared
            .steady
            .is_some_and(|(skip, span)| now >= origin + skip && now < origin + skip + span);
        for (buffer, m) in buffers[..count].iter().zip(&meta[..count]) {
            let r = &mut state.received;
            if m.len < PAYLOAD_HEADER || m.truncated {
                r.malformed += 1;
                continue;
            }
            let field = |a: usize, b: usize| {
                let mut bytes = [0u8; 8];
                bytes[..b - a].copy_from_slice(&buffer[a..b]);
                u64::from_le_bytes(bytes)
            };
            let (seq, sent_ns, id) = (field(0, 8), field(8, 16), field(16, 18));
            if id != u64::from(port) {
                r.malformed += 1;
                continue;
            }
            r.packets += 1;
            r.bytes += (m.len + HEADER_BYTES) as u64;
            if in_steady {
                r.steady_packets += 1;
                r.steady_bytes += (m.len + HEADER_BYTES) as u64;
            }
            let key = m
                .source
                .unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)));
            let stream = streams.entry(key).or_default();
            if seq >= stream.next {
                r.lost += seq - stream.next;
                stream.next = seq + 1;
            } else {
                r.reordered += 1;
                r.lost = r.lost.saturating_sub(1);
            }
            let _ = state.histogram.record(now.saturating_sub(sent_ns).max(1));
            if let (Some(h), Some(offset), Some(at)) = (&mut state.arrival, offset, m.timestamp) {
                let arrived = i128::try_from(at.as_nanos()).unwrap_or(i128::MAX) - offset;
                let ns = u64::try_from(arrived - i128::from(sent_ns)).unwrap_or(0);
                let _ = h.record(ns.max(1));
            }
        }
    }
    state.received.streams = streams.len();
    Ok(state)
}

fn recv_tcp(config: &RecvConfig) -> Result<RecvReport, TrafficError> {
    pin(&config.cpus, 0);
    let tcp = |what| move |source| TrafficError::Tcp { what, source };
    let listener =
        TcpListener::bind((config.bind, config.base_port)).map_err(tcp("bind the TCP port"))?;
    listener
        .set_nonblocking(true)
        .map_err(tcp("make the listener non-blocking"))?;
    ready(&format!("tcp port {}", config.base_port));
    let start = monotonic_ns();
    let deadline = config
        .duration
        .map_or(u64::MAX, |d| start + d.as_nanos() as u64);
    let over = || monotonic_ns() >= deadline || stop::requested();
    let mut connection = None;
    while connection.is_none() && !over() {
        match listener.accept() {
            Ok((stream, _)) => connection = Some(stream),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(tcp("accept")(e)),
        }
    }
    let (mut bytes, mut first, mut last) = (0u64, 0u64, 0u64);
    if let Some(mut stream) = connection {
        stream
            .set_nonblocking(false)
            .map_err(tcp("make the connection blocking"))?;
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(tcp("set a read timeout"))?;
        let mut buffer = vec![0u8; 256 * 1024];
        while !over() {
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    let now = monotonic_ns();
                    if bytes == 0 {
                        first = now;
                    }
                    last = now;
                    bytes += n as u64;
                }
                Err(e) if pspat_io::error::is_retryable(e.kind()) => {}
                Err(e) => return Err(tcp("read")(e)),
            }
        }
    }
    let window_s = if last > first {
        (last - first) as f64 / 1e9
    } else {
        0.0
    };
    Ok(RecvReport {
        proto: Proto::Tcp,
        window_s,
        packets: 0,
        bytes,
        pps: 0.0,
        bps: if window_s > 0.0 {
            8.0 * bytes as f64 / window_s
        } else {
            0.0
        },
        lost: 0,
        reordered: 0,
        latency: Latency::default(),
        steady_s: None,
        steady_pps: None,
        flows: Vec::new(),
        cpu_s: crate::procstat::self_cpu_s(),
        pinning: pinning(&config.cpus),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(weights: Vec<u32>, threads: usize) -> SendConfig {
        SendConfig {
            dst: Ipv4Addr::LOCALHOST,
            base_port: 47_000,
            weights,
            threads,
            frame_bytes: 60,
            rate: Rate::Greedy,
            duration: Duration::from_millis(200),
            cpus: Vec::new(),
            proto: Proto::Udp,
            via: Via::Direct,
        }
    }

    #[test]
    fn threads_cover_every_flow() {
        let c = config(vec![1; 5], 2);
        assert_eq!(c.flows_of_thread(0), vec![0, 2, 4]);
        assert_eq!(c.flows_of_thread(1), vec![1, 3]);
        let c = config(vec![1; 2], 5);
        let flows: Vec<usize> = (0..5).flat_map(|t| c.flows_of_thread(t)).collect();
        assert_eq!(flows, vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn bad_parameters_name_their_flag() {
        let mut c = config(vec![1], 1);
        c.frame_bytes = 59;
        assert!(c.check().unwrap_err().to_string().contains("--size"));
        c.frame_bytes = 60;
        c.weights = vec![1, 0];
        assert!(c.check().unwrap_err().to_string().contains("--weights"));
        c.weights = vec![1];
        c.rate = Rate::Bps(0);
        assert!(c.check().unwrap_err().to_string().contains("--rate"));
    }

    #[test]
    fn a_rate_in_bits_counts_whole_frames() {
        let mut c = config(vec![1], 1);
        c.rate = Rate::Bps(48_000);
        assert_eq!(c.total_pps(), Some(100.0));
    }

    /// Loopback, unprivileged: a paced sender and a receiver in one process
    /// agree on every packet.
    #[test]
    fn loopback_send_and_receive_account_for_every_packet() {
        let port = 47_100 + (std::process::id() % 500) as u16 * 2;
        let receiver = RecvConfig {
            bind: Ipv4Addr::LOCALHOST,
            base_port: port,
            flows: 2,
            duration: Some(Duration::from_millis(800)),
            cpus: Vec::new(),
            proto: Proto::Udp,
            steady: None,
            arrival_latency: true,
        };
        let mut sender = config(vec![3, 1], 1);
        sender.base_port = port;
        sender.rate = Rate::Pps(2_000);
        sender.duration = Duration::from_millis(300);
        let (sent, received) = std::thread::scope(|scope| {
            let r = scope.spawn(|| recv(&receiver));
            std::thread::sleep(Duration::from_millis(100));
            let s = send(&sender).expect("send");
            (s, r.join().expect("receiver thread").expect("recv"))
        });
        assert!(sent.packets > 100, "{sent:?}");
        assert_eq!(
            sent.packets,
            received.packets + received.lost,
            "{sent:?} {received:?}"
        );
        assert_eq!(received.reordered, 0);
        assert_eq!(received.latency.samples, received.packets);
        // Every packet also has its arrival at the socket, which comes
        // before the thread reads it.
        for flow in &received.flows {
            let arrival = flow.arrival_latency.expect("arrival latency asked for");
            assert_eq!(arrival.samples, flow.packets, "{flow:?}");
            assert!(arrival.min_us > 0.0, "{arrival:?}");
            // Percentiles of the same packets: arrival ≤ read per packet, so
            // per percentile too (hdrhistogram's buckets: 0.1% apart).
            assert!(
                arrival.p50_us <= flow.latency.p50_us * 1.001,
                "{arrival:?} {flow:?}"
            );
            assert!(
                arrival.max_us <= flow.latency.max_us * 1.001,
                "{arrival:?} {flow:?}"
            );
        }
        // Weights 3:1 at a paced rate: the heavy flow has three times the
        // packets, give or take the last interval of each stream.
        let (heavy, light) = (sent.flows[0].packets, sent.flows[1].packets);
        assert!(heavy.abs_diff(3 * light) <= 8, "{heavy} vs {light}");
    }
}
