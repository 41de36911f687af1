//! A fixed packet workload through a pipe behind the `Scheduler` trait
//! (`PipeScheduler` over FIFO queues), for counting instructions per packet
//! with valgrind (docs/RUN.md, *Duplication*): 64 flows, 100-byte packets,
//! an 8 Gbit/s link (100 ns a packet), 10 µs of delay, `duplicate P`.
//!
//! `cargo run --release -p pspat-sched --example pipe_copy_cost -- N P`
//! runs N packets and prints what left and how many were marked. Run it
//! under `valgrind --tool=callgrind` for two values of N: the difference of
//! the instruction counts over the difference of N is the cost per packet
//! without the set-up.

use pspat_sched::pipe::{PipeConfig, PipeScheduler, QueueConfig, QueueLimit};
use pspat_sched::{Fifo, FlowId, FlowTable, Instant, Packet, Pipe, Rate, Scheduler};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let p: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0.0);
    let flows = 64;
    let config = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000_000u64).expect("rate")),
        delay_ns: 10_000,
        queue: QueueConfig {
            limit: QueueLimit::Slots(1_024),
            duplicate: p,
            ..QueueConfig::default()
        },
        delay_line_capacity: 1_024,
        seed: 42,
        ..PipeConfig::default()
    };
    let fifo = Fifo::new(FlowTable::uniform(flows).expect("flows"), 4_096).expect("fifo");
    let mut pipe = PipeScheduler::new(Pipe::new(config, fifo, flows).expect("pipe"));
    let (mut out, mut marked) = (0u64, 0u64);
    let mut now = 0u64;
    for i in 0..n {
        // One arrival every 100 ns (the link's rate), then whatever is due.
        now += 100;
        let t = Instant::from_nanos(now);
        let pkt = Packet::new(FlowId((i % flows as u64) as u32), 100, i);
        if pipe.enqueue(t, pkt).is_err() {
            continue;
        }
        while let Some(p) = pipe.dequeue(t) {
            out += 1;
            // The copy mark (`Packet::COPY_BIT`), read as the runtime does.
            marked += p.token >> 63;
            std::hint::black_box(p.token & !(1 << 63));
        }
    }
    while let Some(t) = pipe.next_eligible(Instant::from_nanos(now)) {
        now = now.max(t.as_nanos());
        while let Some(p) = pipe.dequeue(Instant::from_nanos(now)) {
            out += 1;
            // The copy mark (`Packet::COPY_BIT`), read as the runtime does.
            marked += p.token >> 63;
            std::hint::black_box(p.token & !(1 << 63));
        }
    }
    println!("{n} packets: {out} out, {marked} marked to be sent twice (duplicate {p})");
}
