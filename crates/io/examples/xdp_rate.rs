//! Receive rate of 60-byte frames on one veth end: an AF_XDP socket (its
//! program in driver mode, then in skb mode) against an AF_PACKET
//! TPACKET_V2 ring, on the same pair in the same run, the three receivers
//! alternated for five rounds; prints each run and the medians.
//!
//! A sender thread on the other end sends batches of 64 frames by
//! `sendmmsg` as fast as it can for the whole window; the figure is the
//! frames a receiver got per second of the window. Needs root (two
//! namespaces and a veth pair, removed at the end) and the `xdp` feature:
//! `cargo run --release -p pspat-io --features xdp --example xdp_rate
//! [seconds per run]`. Figures from a loaded machine are indications, not
//! results: the load average is printed before and after.
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat_io::af_packet::{PacketRx, PacketTx, RxConfig, RxRing, TxConfig, MAX_BATCH};
use pspat_io::netns::{self, Namespace, VethPair};

use common::FRAME;
use pspat_io::xdp::{AttachMode, XdpConfig, XdpError, XdpSocket};

const ROUNDS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    XdpDriver,
    XdpSkb,
    PacketV2,
}

impl Receiver {
    fn name(self) -> &'static str {
        match self {
            Receiver::XdpDriver => "af_xdp driver",
            Receiver::XdpSkb => "af_xdp skb",
            Receiver::PacketV2 => "packet v2",
        }
    }
}

/// A receiving socket of either kind, behind one call.
enum Socket {
    Xdp(Box<XdpSocket>),
    Packet(PacketRx),
}

impl Socket {
    fn open(receiver: Receiver, ns: &Namespace, interface: &str) -> Result<Self, String> {
        let xdp = |attach| {
            let config = XdpConfig {
                attach,
                ..XdpConfig::default()
            };
            // The kernel releases a closed socket's hold on the queue in
            // deferred work: the previous run's socket may still hold it
            // for a moment.
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                match ns.run(|| XdpSocket::open(interface, 0, &config)) {
                    Ok(Ok(socket)) => return Ok(Socket::Xdp(Box::new(socket))),
                    Ok(Err(XdpError::QueueBusy { .. })) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Ok(Err(error)) => return Err(error.to_string()),
                    Err(error) => return Err(error.to_string()),
                }
            }
        };
        match receiver {
            Receiver::XdpDriver => xdp(AttachMode::Driver),
            Receiver::XdpSkb => xdp(AttachMode::Skb),
            Receiver::PacketV2 => {
                let config = RxConfig {
                    ring: RxRing::V2,
                    ..RxConfig::default()
                };
                ns.run(|| PacketRx::open(interface, &config))
                    .map_err(|e| e.to_string())?
                    .map(Socket::Packet)
                    .map_err(|e| e.to_string())
            }
        }
    }

    fn recv(&mut self, timeout: Duration) -> Result<usize, String> {
        match self {
            Socket::Xdp(socket) => socket.recv_with(timeout, |_| {}).map_err(|e| e.to_string()),
            Socket::Packet(socket) => socket.recv_with(timeout, |_| {}).map_err(|e| e.to_string()),
        }
    }
}

struct Run {
    received_per_second: f64,
    sent_per_second: f64,
    /// CPU time (user + system) of the sending thread per frame sent: on
    /// veth the receive path (the XDP program, the copy into the UMEM or
    /// the AF_PACKET ring) runs in the sender's softirq, so this is where
    /// the receivers differ.
    sender_ns_per_frame: f64,
    /// CPU time of the receiving thread per frame received.
    receiver_ns_per_frame: f64,
}

/// CPU time (user + system) the calling thread used so far.
fn thread_cpu() -> Duration {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}

fn run(
    receiver: Receiver,
    ns_a: &Namespace,
    ns_b: &Namespace,
    pair: &VethPair,
    seconds: f64,
) -> Result<Run, String> {
    let mut socket = Socket::open(receiver, ns_b, &pair.b)?;
    let mut tx = ns_a
        .run(|| PacketTx::open(&pair.a, &TxConfig::default()))
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
        std::thread::spawn(move || {
            let batch = [&FRAME[..]; MAX_BATCH];
            let mut count = 0u64;
            let cpu = thread_cpu();
            // Relaxed: a stop flag; the count is read after join.
            while !stop.load(Ordering::Relaxed) {
                count += tx.send_batch(&batch).unwrap_or(0) as u64;
            }
            sent.store(count, Ordering::Relaxed);
            thread_cpu().saturating_sub(cpu)
        })
    };
    // Let the sender reach its pace before the window opens.
    let warm = Instant::now() + Duration::from_millis(100);
    while Instant::now() < warm {
        socket.recv(Duration::from_millis(10))?;
    }
    let start = Instant::now();
    let cpu = thread_cpu();
    let window = Duration::from_secs_f64(seconds);
    let mut received = 0u64;
    while start.elapsed() < window {
        received += socket.recv(Duration::from_millis(10))? as u64;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let receiver_cpu = thread_cpu().saturating_sub(cpu);
    stop.store(true, Ordering::Relaxed);
    let sender_cpu = sender.join().map_err(|_| "the sender panicked")?;
    let total_time = elapsed + 0.1;
    let sent = sent.load(Ordering::Relaxed);
    Ok(Run {
        received_per_second: received as f64 / elapsed,
        sent_per_second: sent as f64 / total_time,
        sender_ns_per_frame: sender_cpu.as_nanos() as f64 / sent.max(1) as f64,
        receiver_ns_per_frame: receiver_cpu.as_nanos() as f64 / received.max(1) as f64,
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: f64 = match std::env::args().nth(1) {
        Some(text) => text.parse().map_err(|_| format!("bad seconds {text:?}"))?,
        None => 1.0,
    };
    if !(0.1..=60.0).contains(&seconds) {
        return Err("seconds must be 0.1 to 60".into());
    }
    if let Some(reason) = netns::unavailable() {
        return Err(reason.into());
    }
    let ns_a = Namespace::create()?;
    let ns_b = Namespace::create()?;
    let pair = VethPair::create(&ns_a, &ns_b)?;
    println!("load average before: {}", load_average());
    let mut receivers = vec![Receiver::XdpDriver, Receiver::XdpSkb, Receiver::PacketV2];
    if let Err(error) = Socket::open(Receiver::XdpDriver, &ns_b, &pair.b) {
        println!("driver mode refused, measuring skb mode only: {error}");
        receivers.retain(|&r| r != Receiver::XdpDriver);
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); receivers.len()];
    let mut sender_costs: Vec<Vec<f64>> = vec![Vec::new(); receivers.len()];
    let mut receiver_costs: Vec<Vec<f64>> = vec![Vec::new(); receivers.len()];
    for round in 0..ROUNDS {
        for (i, &receiver) in receivers.iter().enumerate() {
            let outcome = run(receiver, &ns_a, &ns_b, &pair, seconds)?;
            println!(
                "round {round} {:<14} received {:>10.0} frames/s (sent {:>10.0}/s); CPU per \
                 frame: sender {:>6.0} ns, receiver {:>6.0} ns",
                receiver.name(),
                outcome.received_per_second,
                outcome.sent_per_second,
                outcome.sender_ns_per_frame,
                outcome.receiver_ns_per_frame,
            );
            rates[i].push(outcome.received_per_second);
            sender_costs[i].push(outcome.sender_ns_per_frame);
            receiver_costs[i].push(outcome.receiver_ns_per_frame);
        }
    }
    println!("load average after: {}", load_average());
    println!("medians of {ROUNDS} runs of {seconds} s, 60-byte frames:");
    for (i, receiver) in receivers.iter().enumerate() {
        println!(
            "  {:<14} {:>10.0} frames/s; CPU per frame: sender {:>6.0} ns, receiver {:>6.0} ns",
            receiver.name(),
            median(&mut rates[i]),
            median(&mut sender_costs[i]),
            median(&mut receiver_costs[i]),
        );
    }
    Ok(())
}
