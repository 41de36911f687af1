//! Compares the two AF_PACKET senders on a veth pair: `sendmmsg` against
//! the TX ring, 60-byte frames in batches of 64, with and without qdisc
//! bypass, for a few seconds each; prints packets per second sent and
//! received and which sender was faster.
//!
//! Needs root (it makes two namespaces and a veth pair, removed at the
//! end). Run: `cargo run --release -p pspat-io --example veth_pps [seconds]`.
//! Figures from a loaded machine are indications, not results.
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat_io::af_packet::{PacketRx, PacketTx, PacketTxRing, RxConfig, TxConfig, MAX_BATCH};
use pspat_io::netns::{self, Namespace, VethPair};

use common::FRAME;
use pspat_io::IoError;

struct Outcome {
    sent: u64,
    received: u64,
    seconds: f64,
}

fn measure(
    ns_b: &Namespace,
    interface_b: &str,
    seconds: f64,
    mut send: impl FnMut(&[&[u8]]) -> Result<usize, IoError>,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let mut rx = ns_b.run(|| PacketRx::open(interface_b, &RxConfig::default()))??;
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let receiver = {
        let (stop, received) = (Arc::clone(&stop), Arc::clone(&received));
        std::thread::spawn(move || {
            // Relaxed: a stop flag; the count is read after join.
            while !stop.load(Ordering::Relaxed) {
                let n = rx.recv_with(Duration::from_millis(10), |_| {}).unwrap_or(0);
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            // Whatever is still in the ring.
            let n = rx.recv_with(Duration::from_millis(50), |_| {}).unwrap_or(0);
            received.fetch_add(n as u64, Ordering::Relaxed);
        })
    };
    let batch = [&FRAME[..]; MAX_BATCH];
    let start = Instant::now();
    let limit = Duration::from_secs_f64(seconds);
    let mut sent = 0u64;
    while start.elapsed() < limit {
        sent += send(&batch)? as u64;
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    receiver.join().map_err(|_| "the receiver panicked")?;
    Ok(Outcome {
        sent,
        received: received.load(Ordering::Relaxed),
        seconds: elapsed,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: f64 = match std::env::args().nth(1) {
        Some(text) => text.parse().map_err(|_| format!("bad seconds {text:?}"))?,
        None => 2.0,
    };
    if !(0.1..=60.0).contains(&seconds) {
        return Err("seconds must be between 0.1 and 60".into());
    }
    if let Some(reason) = netns::unavailable() {
        println!("skipped: {reason}");
        return Ok(());
    }
    let ns_a = Namespace::create()?;
    let ns_b = Namespace::create()?;
    let pair = VethPair::create(&ns_a, &ns_b)?;
    let mut results = Vec::new();
    for bypass in [false, true] {
        let config = TxConfig {
            qdisc_bypass: bypass,
            ..TxConfig::default()
        };
        let mut tx = ns_a.run(|| PacketTx::open(&pair.a, &config))??;
        let outcome = measure(&ns_b, &pair.b, seconds, |f| tx.send_batch(f))?;
        results.push((format!("sendmmsg, qdisc bypass {bypass}"), outcome));
        let mut ring = ns_a.run(|| PacketTxRing::open(&pair.a, &config))??;
        let outcome = measure(&ns_b, &pair.b, seconds, |f| ring.send_batch(f))?;
        results.push((format!("TX ring,  qdisc bypass {bypass}"), outcome));
    }
    println!(
        "{:<30} {:>12} {:>12}",
        "sender (60-byte frames)", "sent pps", "recv pps"
    );
    for (name, outcome) in &results {
        println!(
            "{name:<30} {:>12.0} {:>12.0}",
            outcome.sent as f64 / outcome.seconds,
            outcome.received as f64 / outcome.seconds
        );
    }
    let rate = |i: usize| results[i].1.received as f64 / results[i].1.seconds;
    for (mmsg, ring, label) in [(0, 1, "through the qdisc"), (2, 3, "bypassing the qdisc")] {
        let (faster, ratio) = if rate(mmsg) >= rate(ring) {
            ("sendmmsg", rate(mmsg) / rate(ring).max(1.0))
        } else {
            ("the TX ring", rate(ring) / rate(mmsg).max(1.0))
        };
        println!("{label}: {faster} delivered {ratio:.2}x the packets per second");
    }
    Ok(())
}
