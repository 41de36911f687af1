//! The bridge's two transmit paths alone: 60-byte frames sent from a frame
//! pool on one interface by `sendmmsg(2)` ([`PacketTx::send_frames`], no
//! copy) and by a TPACKET_V2 TX ring ([`PacketTxRing::send_frames`], one
//! copy), with qdisc bypass as the bridge uses them, in alternating rounds
//! (docs/SHAPE.md). Needs root or CAP_NET_RAW.
//!
//! `txrate IF [SECONDS_PER_ROUND] [ROUNDS]` (defaults 2, 5): prints each
//! round and the median rate of each path.

use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use pspat_io::af_packet::{PacketTx, PacketTxRing, TxConfig, MAX_BATCH};
use pspat_io::{Frame, FramePool, IoError};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(interface) = args.get(1) else {
        eprintln!("usage: txrate IF [SECONDS_PER_ROUND] [ROUNDS]");
        std::process::exit(2);
    };
    let number = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| {
            a.parse().unwrap_or_else(|_| {
                eprintln!("txrate: argument {i} ({a:?}) is not a whole number");
                std::process::exit(2)
            })
        })
    };
    let round = Duration::from_secs(number(2, 2).max(1));
    let rounds = number(3, 5).clamp(1, 100);
    let cfg = TxConfig {
        qdisc_bypass: true,
        ..TxConfig::default()
    };
    let open_error = |e: IoError| -> ! {
        eprintln!("txrate: {interface}: {e}");
        std::process::exit(2)
    };
    let mut mmsg = PacketTx::open(interface, &cfg).unwrap_or_else(|e| open_error(e));
    let mut ring = PacketTxRing::open(interface, &cfg).unwrap_or_else(|e| open_error(e));
    let mut pool = FramePool::new(MAX_BATCH, 2048).expect("pool");
    let arena = std::sync::Arc::clone(pool.arena());
    let frames: Vec<Frame> = (0..MAX_BATCH)
        .map(|i| {
            let mut frame = pool.alloc().expect("a free frame");
            let mut bytes = Vec::new();
            PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4([10, 199, 200, 1], [10, 199, 200, 2], 64)
                .udp(4000, 5000 + i as u16 % 4)
                .write(&mut bytes, &[0u8; 18])
                .expect("building into a Vec cannot fail");
            arena.write(&mut frame, &bytes).expect("fits");
            frame
        })
        .collect();
    let measure = |send: &mut dyn FnMut() -> Result<usize, IoError>| -> f64 {
        let start = Instant::now();
        let mut sent = 0u64;
        while start.elapsed() < round {
            match send() {
                Ok(n) => sent += n as u64,
                Err(e) => {
                    eprintln!("txrate: {e}");
                    std::process::exit(1);
                }
            }
        }
        sent as f64 / start.elapsed().as_secs_f64() / 1e6
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let m = measure(&mut || mmsg.send_frames(&arena, &frames));
        let g = measure(&mut || ring.send_frames(&arena, &frames));
        println!("round {r}: sendmmsg {m:.3} Mpps, ring {g:.3} Mpps");
        a.push(m);
        b.push(g);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "median of {rounds}: sendmmsg {:.3} Mpps, ring {:.3} Mpps (60-byte frames, qdisc bypass)",
        median(&mut a),
        median(&mut b)
    );
    for frame in frames {
        let _ = pool.recycle(frame);
    }
}
