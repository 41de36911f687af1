//! Sends 60-byte UDP frames on an interface as fast as `sendmmsg` takes
//! them, spread over flows by destination port, for the bridge's
//! forwarding-rate figures (docs/SHAPE.md). Needs root or CAP_NET_RAW.
//!
//! `blast IF [SECONDS] [FLOWS] [LEN]` (defaults 5, 4, 60): prints the frames
//! and rate the kernel took. Frames go from 10.199.200.1 to 10.199.200.2,
//! to MAC 02:00:00:00:00:02 (no host's address: nothing answers).

use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use pspat_io::af_packet::{PacketTx, TxConfig, MAX_BATCH};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(interface) = args.get(1) else {
        eprintln!("usage: blast IF [SECONDS] [FLOWS] [LEN]");
        std::process::exit(2);
    };
    let number = |i: usize, default: u64| -> u64 {
        args.get(i)
            .map(|a| {
                a.parse().unwrap_or_else(|_| {
                    eprintln!("blast: argument {i} ({a:?}) is not a whole number");
                    std::process::exit(2)
                })
            })
            .unwrap_or(default)
    };
    let seconds = number(2, 5);
    let flows = number(3, 4).clamp(1, 1024) as u16;
    let len = number(4, 60).clamp(60, 1514) as usize;
    let mut tx = match PacketTx::open(interface, &TxConfig::default()) {
        Ok(tx) => tx,
        Err(e) => {
            eprintln!("blast: {interface}: {e}");
            std::process::exit(2);
        }
    };
    let frames: Vec<Vec<u8>> = (0..MAX_BATCH)
        .map(|i| {
            let mut frame = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4([10, 199, 200, 1], [10, 199, 200, 2], 64)
                .udp(4000, 5000 + (i as u16 % flows))
                .write(&mut frame, &vec![0u8; len - 42])
                .expect("building into a Vec cannot fail");
            frame
        })
        .collect();
    let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut sent = 0u64;
    while Instant::now() < end {
        match tx.send_batch(&views) {
            Ok(n) => sent += n as u64,
            Err(e) => {
                eprintln!("blast: {e}");
                break;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "blast: {sent} frames of {len} bytes in {secs:.2} s: {:.3} Mpps",
        sent as f64 / secs / 1e6
    );
}
