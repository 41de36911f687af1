//! Local senders through pspat, the setting of PSPAT \[J\] §6 (Fig. 7 and
//! 9): the threads of one process (`pspat traffic send --via pspat`) are
//! clients of a pspat runtime; its arbiter schedules their packets
//! (`--alg`, optionally at an emulated `--link-rate`) and the arbiter
//! itself (`--dispatchers 0`) or T dispatcher threads send them with a
//! [`UdpTx`] backend.
//!
//! # The path of a packet
//! A sender thread paces itself exactly as a direct sender does
//! ([`crate::traffic`]: greedy bursts of 64, or each stream on its own
//! schedule) but, instead of calling `sendmmsg`, submits bursts of
//! `(flow, frame length, cookie)` to its [`pspat::Client`]. The **cookie is
//! the send time** (`CLOCK_MONOTONIC` ns, read once per burst), so the
//! receiver's one-way latency includes the time a packet spent in pspat. A
//! full mailbox (`SubmitError::Full`) is back-pressure, not loss: the
//! thread waits for room ([`pspat::Client::wait_for_room`]) and submits the
//! same packets again.
//!
//! # Payload and sequence numbers
//! The backend writes each payload with the header every test packet
//! carries ([`crate::traffic`], module docs): sequence number, the cookie as
//! send time, the flow id (its destination port). Sequence numbers are
//! given **by the backend, per flow**: packets of one flow reach one
//! backend in the arbiter's order (pspat keeps each client's flow in
//! submission order, and places packets on dispatchers by flow), and each
//! backend sends a flow from its own socket, so a receiver stream (port,
//! source address) is exactly one backend's numbering of one flow. A packet
//! pspat drops never gets a number (it is counted at the sender by reason);
//! a gap at the receiver is a packet lost after a socket took it.
//!
//! # Sockets and batches
//! A [`UdpTx`] holds one connected [`UdpBatchSocket`] per flow it has sent
//! (opened before the runtime starts for the flows that `flow mod T`
//! places on it, lazily for any other). A `transmit` batch goes out flow by
//! flow: its packets are ordered by flow (each flow's in its own order) and
//! each flow's run is sent with one `sendmmsg` per 64 packets, so a batch
//! of F flows costs about F system calls. The order between different flows
//! inside one batch (at most `dispatch_batch` packets, microseconds) is not
//! kept; within a flow it is. No allocation per batch.
//!
//! # Accounting
//! Every packet a sender submitted is, after the runtime's shutdown, sent
//! (the kernel took it) or dropped with a reason: by the runtime
//! (`pspat::Stats::dropped_by_reason`) or refused by the socket
//! (`tx_<errno name>`, also under the report's `send_errors`):
//! `submitted = sent + Σ dropped`, nothing in flight ([`PspatSent`]).
use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

use pspat::{Client, Runtime, RuntimeConfig, SubmitError, TxBackend, TxOwner, TxPacket};
use pspat_io::udp::MAX_BATCH;
use pspat_io::{IoError, Timestamps, UdpBatchSocket};
use pspat_sched::{FlowId, FlowParams, FlowTable, SchedulerConfig};

use crate::clock::monotonic_ns;
use crate::sending::{
    encode_header, error_name, pin, pinning, FlowSent, Proto, SendConfig, SendReport, TrafficError,
    HEADER_BYTES, MAX_FRAME, PAYLOAD_HEADER,
};
pub use crate::sending::{PspatSent, PspatVia};
use crate::stop;

/// Per-flow counts of one backend.
#[derive(Debug, Clone, Copy, Default)]
struct FlowCount {
    sent: u64,
    bytes: u64,
    refused: u64,
}

/// A flow's socket in a [`UdpTx`].
#[derive(Debug)]
enum FlowSocket {
    /// Not opened yet.
    Closed,
    Open(UdpBatchSocket),
    /// Opening failed: its packets are refused as `socket_error`.
    Failed,
}

/// The transmit backend of local senders (module docs): one connected UDP
/// socket per flow, `sendmmsg` per flow run of a batch.
#[derive(Debug)]
pub struct UdpTx {
    dst: Ipv4Addr,
    base_port: u16,
    sockets: Vec<FlowSocket>,
    /// The next sequence number of each flow on this backend.
    seq: Vec<u64>,
    counts: Vec<FlowCount>,
    errors: BTreeMap<String, u64>,
    /// Scratch: `(flow, index)` of the batch, sorted.
    order: Vec<(u32, u32)>,
    /// Scratch: one payload buffer per packet of a `sendmmsg`.
    buffers: Vec<Vec<u8>>,
    /// The first socket error, for the report.
    first_error: Option<String>,
}

impl UdpTx {
    /// A backend for `flows` flows to `dst` on ports `base_port + flow`;
    /// nothing is opened yet.
    pub fn new(dst: Ipv4Addr, base_port: u16, flows: usize) -> Self {
        UdpTx {
            dst,
            base_port,
            sockets: (0..flows).map(|_| FlowSocket::Closed).collect(),
            seq: vec![0; flows],
            counts: vec![FlowCount::default(); flows],
            errors: BTreeMap::new(),
            order: Vec::with_capacity(1024),
            buffers: vec![vec![0; MAX_FRAME - HEADER_BYTES]; MAX_BATCH],
            first_error: None,
        }
    }

    /// Opens flow `flow`'s socket now (bound to any port, connected to the
    /// flow's port).
    ///
    /// # Errors
    /// The socket could not be opened or connected.
    pub fn open_flow(&mut self, flow: usize) -> Result<(), IoError> {
        let socket = UdpBatchSocket::bind((Ipv4Addr::UNSPECIFIED, 0), Timestamps::None)?;
        socket.connect((self.dst, self.base_port + flow as u16))?;
        self.sockets[flow] = FlowSocket::Open(socket);
        Ok(())
    }

    /// Packets the sockets took.
    pub fn sent(&self) -> u64 {
        self.counts.iter().map(|c| c.sent).sum()
    }

    /// Packets refused, by reason.
    pub fn refused(&self) -> &BTreeMap<String, u64> {
        &self.errors
    }

    fn refuse(&mut self, flow: usize, reason: String, packets: u64) {
        if let Some(c) = self.counts.get_mut(flow) {
            c.refused += packets;
        }
        *self.errors.entry(reason).or_insert(0) += packets;
    }

    /// Sends `pkts[order[at..end]]`, all of flow `flow` (at most
    /// [`MAX_BATCH`]), counting each packet once.
    fn send_run(&mut self, flow: usize, pkts: &[TxPacket], run: &[(u32, u32)]) {
        let count = run.len() as u64;
        if flow >= self.sockets.len() {
            self.refuse(flow, "bad_flow".into(), count);
            return;
        }
        if matches!(self.sockets[flow], FlowSocket::Closed) {
            if let Err(e) = self.open_flow(flow) {
                self.first_error.get_or_insert_with(|| e.to_string());
                self.sockets[flow] = FlowSocket::Failed;
            }
        }
        let FlowSocket::Open(socket) = &self.sockets[flow] else {
            self.refuse(flow, "socket_error".into(), count);
            return;
        };
        let port = self.base_port + flow as u16;
        let mut lens = [0usize; MAX_BATCH];
        for (k, &(_, i)) in run.iter().enumerate() {
            let p = &pkts[i as usize];
            let len = (p.len as usize)
                .saturating_sub(HEADER_BYTES)
                .clamp(PAYLOAD_HEADER, MAX_FRAME - HEADER_BYTES);
            lens[k] = len;
            encode_header(
                &mut self.buffers[k],
                self.seq[flow] + k as u64,
                p.cookie,
                port,
            );
        }
        let mut done = 0usize;
        let mut refused: Vec<(String, u64)> = Vec::new();
        let mut sent = 0u64;
        let mut bytes = 0u64;
        while done < run.len() {
            let mut slices: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
            for (k, slice) in slices[..run.len() - done].iter_mut().enumerate() {
                *slice = &self.buffers[done + k][..lens[done + k]];
            }
            match socket.send_batch(&slices[..run.len() - done]) {
                Ok(n) if n > 0 => {
                    for &len in &lens[done..done + n] {
                        bytes += (len + HEADER_BYTES) as u64;
                    }
                    sent += n as u64;
                    done += n;
                }
                result => {
                    // The first packet was refused: it takes no sequence
                    // number; the rest are renumbered before the retry.
                    let reason = match result {
                        Err(e) => error_name(&e),
                        Ok(_) => "no_progress".into(),
                    };
                    match refused.iter_mut().find(|(r, _)| *r == reason) {
                        Some((_, n)) => *n += 1,
                        None => refused.push((reason, 1)),
                    }
                    done += 1;
                    let next = self.seq[flow] + sent;
                    for (k, buffer) in self.buffers[done..run.len()].iter_mut().enumerate() {
                        buffer[0..8].copy_from_slice(&(next + k as u64).to_le_bytes());
                    }
                }
            }
        }
        self.seq[flow] += sent;
        let c = &mut self.counts[flow];
        c.sent += sent;
        c.bytes += bytes;
        for (reason, n) in refused {
            self.refuse(flow, reason, n);
        }
    }
}

impl TxBackend for UdpTx {
    fn transmit(&mut self, _now: pspat_sched::Instant, pkts: &[TxPacket]) {
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(pkts.iter().enumerate().map(|(i, p)| (p.flow.0, i as u32)));
        // (flow, index) pairs are distinct: the unstable sort is stable
        // per flow, and allocates nothing.
        order.sort_unstable();
        let mut at = 0;
        while at < order.len() {
            let flow = order[at].0;
            let mut end = at + 1;
            while end < order.len() && order[end].0 == flow && end - at < MAX_BATCH {
                end += 1;
            }
            self.send_run(flow as usize, pkts, &order[at..end]);
            at = end;
        }
        self.order = order;
    }
}

/// One (thread, flow) stream of a pspat sender.
struct Stream {
    flow: usize,
    interval_ns: f64,
    /// Packets given a slot (submitted).
    scheduled: u64,
    submitted: u64,
}

/// Sends `config`'s UDP traffic through a pspat runtime (module docs).
/// Called by [`crate::traffic::send`] for [`crate::traffic::Via::Pspat`].
///
/// # Errors
/// [`TrafficError`]: a bad parameter, a socket that cannot be opened, or a
/// runtime that cannot start or lost a thread.
pub fn send(config: &SendConfig, via: &PspatVia) -> Result<SendReport, TrafficError> {
    config.check()?;
    via.check()?;
    let n = config.weights.len();
    let lmax = config.frame_bytes as u32;
    let runtime_error = |e: &dyn std::fmt::Display| TrafficError::Runtime(e.to_string());
    let table = FlowTable::new(
        config
            .weights
            .iter()
            .map(|&w| FlowParams {
                lmax,
                ..FlowParams::weighted(w)
            })
            .collect(),
    )
    .map_err(|e| TrafficError::Config(format!("--weights: {e}")))?;
    let mut rc = RuntimeConfig::default();
    rc.dispatchers = via.dispatchers;
    rc.rate_bps = via.link_rate_bps;
    rc.arbiter_core = via.arbiter_cpu;
    rc.dispatcher_core = via.dispatcher_cpu;
    let mut sc = SchedulerConfig::new(via.alg);
    // Every descriptor of every client fits the scheduler: it never drops
    // for lack of room.
    sc.capacity = sc.capacity.max(config.threads * rc.descriptors_per_client);
    if sc.link_rate_bps.is_none() {
        sc.link_rate_bps = via.link_rate_bps;
    }
    let sched = sc
        .build(table)
        .map_err(|e| TrafficError::Config(format!("--alg {}: {e}", via.alg)))?;
    // Sockets first, so that errors come before any thread runs: backend
    // b (the arbiter's when T = 0) opens the flows `flow mod T` puts on it.
    let nb = via.dispatchers.max(1);
    let mut prebuilt = VecDeque::with_capacity(nb);
    for b in 0..nb {
        let mut tx = UdpTx::new(config.dst, config.base_port, n);
        for flow in (b..n).step_by(nb) {
            tx.open_flow(flow)?;
        }
        prebuilt.push_back(tx);
    }
    let (dst, base_port) = (config.dst, config.base_port);
    // The runtime builds the arbiter's backend (T = 0) or dispatcher 0, 1,
    // ... in order; one built later (none in dispatcher mode) opens its
    // sockets on first use.
    let factory = move |_: TxOwner| {
        prebuilt
            .pop_front()
            .unwrap_or_else(|| UdpTx::new(dst, base_port, n))
    };
    let rt = Runtime::start(rc, sched, factory).map_err(|e| runtime_error(&e))?;
    let mut clients = Vec::with_capacity(config.threads);
    for _ in 0..config.threads {
        clients.push(rt.client().map_err(|e| runtime_error(&e))?);
    }
    let total_weight: f64 = config.weights.iter().map(|&w| f64::from(w)).sum();
    let mut senders_of = vec![0usize; n];
    for t in 0..config.threads {
        for f in config.flows_of_thread(t) {
            senders_of[f] += 1;
        }
    }
    let total_pps = config.total_pps();
    let greedy = total_pps.is_none();
    let start = monotonic_ns();
    let deadline = start + config.duration.as_nanos() as u64;
    let results: Vec<ThreadEnd> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(t, client)| {
                let streams = config
                    .flows_of_thread(t)
                    .into_iter()
                    .map(|flow| Stream {
                        flow,
                        interval_ns: total_pps.map_or(0.0, |pps| {
                            let stream_pps = pps * f64::from(config.weights[flow])
                                / total_weight
                                / senders_of[flow] as f64;
                            1e9 / stream_pps.max(1e-9)
                        }),
                        scheduled: 0,
                        submitted: 0,
                    })
                    .collect();
                scope.spawn(move || {
                    pin(&config.cpus, t);
                    submit_loop(client, streams, config, greedy, start, deadline)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let finished = rt.shutdown().map_err(|e| runtime_error(&e))?;
    let mut flows: Vec<FlowSent> = (0..n)
        .map(|i| FlowSent {
            flow: i,
            port: config.base_port + i as u16,
            weight: config.weights[i],
            streams: senders_of[i],
            ..FlowSent::default()
        })
        .collect();
    let mut last = start;
    let mut full_waits = 0;
    let mut submit_errors: BTreeMap<String, u64> = BTreeMap::new();
    for end in &results {
        last = last.max(end.last);
        full_waits += end.waits;
        for (k, v) in &end.errors {
            *submit_errors.entry(k.clone()).or_insert(0) += v;
        }
    }
    let mut send_errors = BTreeMap::new();
    let mut backend_lost = None;
    let expected_backends = nb;
    if finished.backends.len() < expected_backends {
        backend_lost = Some(format!(
            "{} of {expected_backends} backends were lost with their threads: their counts are missing",
            expected_backends - finished.backends.len()
        ));
    }
    let mut socket_error = None;
    for b in &finished.backends {
        for (i, c) in b.counts.iter().enumerate() {
            flows[i].packets += c.sent;
            flows[i].bytes += c.bytes;
            flows[i].refused += c.refused;
        }
        for (k, v) in &b.errors {
            *send_errors.entry(k.clone()).or_insert(0) += v;
        }
        if socket_error.is_none() {
            socket_error.clone_from(&b.first_error);
        }
    }
    let stats = &finished.stats;
    let mut dropped = stats.dropped_by_reason();
    for (k, v) in &send_errors {
        *dropped.entry(format!("tx_{k}")).or_insert(0) += v;
    }
    let packets: u64 = flows.iter().map(|f| f.packets).sum();
    let bytes: u64 = flows.iter().map(|f| f.bytes).sum();
    let submitted: u64 = results
        .iter()
        .flat_map(|end| end.streams.iter().map(|s| s.submitted))
        .sum();
    let conserved = stats.conserved()
        && stats.in_flight == 0
        && submitted == stats.submitted
        && submitted == packets + dropped.values().sum::<u64>();
    let error = finished
        .error
        .as_ref()
        .map(ToString::to_string)
        .or(backend_lost)
        .or(socket_error)
        .or_else(|| {
            (!submit_errors.is_empty()).then(|| format!("submits refused: {submit_errors:?}"))
        });
    let duration_s = ((last.max(start + 1) - start) as f64 / 1e9).max(1e-9);
    let mut pinned = pinning(&config.cpus);
    if let Some(c) = via.arbiter_cpu {
        pinned += &format!("; arbiter on cpu {c}");
    }
    if let (Some(c), true) = (via.dispatcher_cpu, via.dispatchers > 0) {
        pinned += &format!("; dispatchers on cpu {c}");
    }
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
        pinning: pinned,
        via: "pspat",
        pspat: Some(PspatSent {
            alg: via.alg.to_string(),
            dispatchers: via.dispatchers,
            link_rate_bps: via.link_rate_bps,
            submitted,
            transmitted: stats.transmitted,
            sent: packets,
            dropped,
            in_flight: stats.in_flight,
            conserved,
            full_waits,
            error,
        }),
    })
}

/// What a sender thread hands back.
struct ThreadEnd {
    streams: Vec<Stream>,
    /// When its last accepted submit was.
    last: u64,
    /// How often it waited for room.
    waits: u64,
    /// Refused submits by kind (none expected).
    errors: BTreeMap<String, u64>,
}

/// One sender thread: submits its streams' packets until the deadline or a
/// stop.
fn submit_loop(
    mut client: Client<UdpTx>,
    mut streams: Vec<Stream>,
    config: &SendConfig,
    greedy: bool,
    start: u64,
    deadline: u64,
) -> ThreadEnd {
    let len = config.frame_bytes as u32;
    let mut burst = [pspat::Submission::default(); MAX_BATCH];
    let mut last = start;
    let mut waits = 0u64;
    let mut errors = BTreeMap::new();
    'run: loop {
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
                    let at = start + (stream.scheduled as f64 * stream.interval_ns) as u64;
                    next_due = next_due.min(at);
                    continue;
                }
                count.min(MAX_BATCH as u64) as usize
            };
            any = true;
            let stamp = monotonic_ns();
            for s in &mut burst[..count] {
                *s = pspat::Submission {
                    flow: FlowId(stream.flow as u32),
                    len,
                    cookie: stamp,
                    ect: false,
                };
            }
            let b = client.submit_burst(&burst[..count]);
            let accepted = b.accepted as u64;
            stream.submitted += accepted;
            // A refused rest is submitted again at once (back-pressure is
            // not loss).
            stream.scheduled += accepted;
            if accepted > 0 {
                last = monotonic_ns();
            }
            match b.error {
                None => {}
                Some(SubmitError::Full(_)) => {
                    waits += 1;
                    client.wait_for_room(Duration::from_millis(50));
                }
                Some(SubmitError::Closed(_)) => break 'run,
                Some(other) => {
                    // Neither happens here (valid flows and lengths, the
                    // report-only policy); counted, and the slot skipped.
                    *errors.entry(other.to_string()).or_insert(0) += 1;
                    stream.scheduled += 1;
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
    drop(client);
    ThreadEnd {
        streams,
        last,
        waits,
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::{recv, Rate, RecvConfig, Via};

    /// Loopback, unprivileged: two weighted paced flows from two client
    /// threads through the runtime (arbiter sends, then one dispatcher):
    /// every submitted packet is sent or dropped by reason, the receiver
    /// counts what was sent, in order per stream.
    #[test]
    fn loopback_through_pspat_accounts_for_every_packet() {
        for dispatchers in [0, 1] {
            let port = 48_100 + (std::process::id() % 400) as u16 * 4 + dispatchers as u16 * 2;
            let receiver = RecvConfig {
                bind: Ipv4Addr::LOCALHOST,
                base_port: port,
                flows: 2,
                duration: Some(Duration::from_millis(900)),
                cpus: Vec::new(),
                proto: Proto::Udp,
                steady: None,
                arrival_latency: false,
            };
            let sender = SendConfig {
                dst: Ipv4Addr::LOCALHOST,
                base_port: port,
                weights: vec![3, 1],
                threads: 2,
                frame_bytes: 100,
                rate: Rate::Pps(4_000),
                duration: Duration::from_millis(300),
                cpus: Vec::new(),
                proto: Proto::Udp,
                via: Via::Pspat(PspatVia {
                    dispatchers,
                    ..PspatVia::default()
                }),
            };
            let (sent, received) = std::thread::scope(|scope| {
                let r = scope.spawn(|| recv(&receiver));
                std::thread::sleep(Duration::from_millis(100));
                let s = crate::traffic::send(&sender).expect("send");
                (s, r.join().expect("receiver thread").expect("recv"))
            });
            let p = sent.pspat.as_ref().expect("pspat report");
            assert_eq!(sent.via, "pspat");
            assert!(p.conserved, "{p:?}");
            assert_eq!(p.in_flight, 0);
            assert!(p.submitted > 500, "{p:?}");
            assert_eq!(
                p.submitted,
                p.sent + p.dropped.values().sum::<u64>(),
                "{p:?}"
            );
            assert_eq!(sent.packets, p.sent);
            assert!(received.packets <= sent.packets);
            assert_eq!(
                sent.packets,
                received.packets + received.lost,
                "{sent:?} {received:?}"
            );
            assert_eq!(received.reordered, 0);
            for f in 0..2 {
                assert_eq!(sent.flows[f].packets, received.flows[f].packets, "flow {f}");
            }
            // Paced at 3:1 by the senders, unlimited link: the heavy flow
            // has about three times the light one's packets.
            let (heavy, light) = (sent.flows[0].packets, sent.flows[1].packets);
            assert!(heavy.abs_diff(3 * light) <= 16, "{heavy} vs {light}");
        }
    }

    /// A batch with two flows interleaved goes out flow by flow, each in
    /// its order, numbered from 0 per flow, with the cookie as send time.
    #[test]
    fn a_batch_goes_out_per_flow_in_order() {
        let a = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let base = a.local_addr().expect("addr").port();
        // Flow 0 to `a`; flow 1 to the next port (probably closed: its
        // packets are sent or refused, both counted).
        let mut tx = UdpTx::new(Ipv4Addr::LOCALHOST, base, 2);
        let pkts: Vec<TxPacket> = (0..10u64)
            .map(|i| TxPacket {
                client: 0,
                flow: FlowId((i % 2) as u32),
                len: 60,
                cookie: 1000 + i,
                copies: 1,
                corrupt: false,
                ce: false,
            })
            .collect();
        tx.transmit(pspat_sched::Instant::ZERO, &pkts);
        let c0 = tx.counts[0];
        assert_eq!(c0.sent, 5);
        assert_eq!(c0.bytes, 300);
        assert_eq!(tx.counts[1].sent + tx.counts[1].refused, 5);
        a.set_read_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        for k in 0..5u64 {
            let n = a.recv(&mut buf).expect("a datagram");
            assert_eq!(n, PAYLOAD_HEADER);
            assert_eq!(u64::from_le_bytes(buf[0..8].try_into().unwrap()), k);
            assert_eq!(
                u64::from_le_bytes(buf[8..16].try_into().unwrap()),
                1000 + 2 * k
            );
            assert_eq!(u16::from_le_bytes(buf[16..18].try_into().unwrap()), base);
        }
    }
}
