//! `mailbox-compare`: cross-core transfers per second of `pspat-mailbox`,
//! `rtrb` and `crossbeam-queue`'s `ArrayQueue`, measured in the same run.
//!
//! Each run moves `--items` u64 values from a producer pinned to core 1 to
//! a consumer pinned to core 0. The mailbox has 512 slots (496 usable); the
//! others get a capacity of 496 so all three hold the same number of values.
//! Runs are interleaved (pspat, rtrb, crossbeam, pspat, ...) `--runs` times
//! and the median of each is reported, with the ratios pspat/rtrb and
//! pspat/crossbeam. Both sides busy-wait (spin) when full or empty.
//!
//! Usage: `mailbox-compare [--items N] [--runs R] [--json]`

use std::num::NonZeroU64;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const MAILBOX_ENTRIES: usize = 512;
/// Usable slots of the mailbox (entries - one 16-slot line), given to the others.
const EQUAL_CAPACITY: usize = 496;
const PRODUCER_CORE: usize = 1;
const CONSUMER_CORE: usize = 0;

const USAGE: &str =
    "usage: mailbox-compare [--items N (default 20000000)] [--runs R (default 5)] [--json]";

/// One queue under test: how to build it, push one value, and drain what is
/// there (returning how many values came out).
trait Queue {
    const NAME: &'static str;
    type Tx: Send + 'static;
    type Rx: Send + 'static;
    fn build() -> (Self::Tx, Self::Rx);
    fn push(tx: &mut Self::Tx, v: u64) -> bool;
    fn drain(rx: &mut Self::Rx) -> u64;
}

struct Pspat;
impl Queue for Pspat {
    const NAME: &'static str = "pspat";
    type Tx = pspat_mailbox::Producer<NonZeroU64>;
    type Rx = pspat_mailbox::Consumer<NonZeroU64>;
    fn build() -> (Self::Tx, Self::Rx) {
        let (tx, rx) = pspat_mailbox::mailbox(MAILBOX_ENTRIES).expect("512 is a valid size");
        assert_eq!(tx.capacity(), EQUAL_CAPACITY);
        (tx, rx)
    }
    #[inline]
    fn push(tx: &mut Self::Tx, v: u64) -> bool {
        // `v` counts from 1, so it is never zero.
        tx.push(NonZeroU64::new(v).expect("v >= 1")).is_ok()
    }
    #[inline]
    fn drain(rx: &mut Self::Rx) -> u64 {
        // Like the arbiter: pop until empty, then release once per batch.
        let mut n = 0;
        while let Some(v) = rx.pop() {
            std::hint::black_box(v);
            n += 1;
        }
        if n > 0 {
            rx.release();
        }
        n
    }
}

struct Rtrb;
impl Queue for Rtrb {
    const NAME: &'static str = "rtrb";
    type Tx = rtrb::Producer<u64>;
    type Rx = rtrb::Consumer<u64>;
    fn build() -> (Self::Tx, Self::Rx) {
        rtrb::RingBuffer::new(EQUAL_CAPACITY)
    }
    #[inline]
    fn push(tx: &mut Self::Tx, v: u64) -> bool {
        tx.push(v).is_ok()
    }
    #[inline]
    fn drain(rx: &mut Self::Rx) -> u64 {
        let mut n = 0;
        while let Ok(v) = rx.pop() {
            std::hint::black_box(v);
            n += 1;
        }
        n
    }
}

struct Crossbeam;
impl Queue for Crossbeam {
    const NAME: &'static str = "crossbeam";
    type Tx = Arc<crossbeam_queue::ArrayQueue<u64>>;
    type Rx = Arc<crossbeam_queue::ArrayQueue<u64>>;
    fn build() -> (Self::Tx, Self::Rx) {
        let q = Arc::new(crossbeam_queue::ArrayQueue::new(EQUAL_CAPACITY));
        (Arc::clone(&q), q)
    }
    #[inline]
    fn push(tx: &mut Self::Tx, v: u64) -> bool {
        tx.push(v).is_ok()
    }
    #[inline]
    fn drain(rx: &mut Self::Rx) -> u64 {
        let mut n = 0;
        while let Some(v) = rx.pop() {
            std::hint::black_box(v);
            n += 1;
        }
        n
    }
}

fn pin(core: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: core })
}

/// One run: `items` transfers; returns the elapsed time from the moment both
/// threads run to the moment the consumer has the last value.
fn run<Q: Queue>(items: u64) -> Duration {
    let (mut tx, mut rx) = Q::build();
    let go = Arc::new((Barrier::new(2), AtomicBool::new(false)));
    let consumer = {
        let go = Arc::clone(&go);
        thread::spawn(move || {
            pin(CONSUMER_CORE);
            go.0.wait();
            // Release: pairs with the producer's Acquire before it starts the clock.
            go.1.store(true, Ordering::Release);
            let mut got = 0;
            while got < items {
                let n = Q::drain(&mut rx);
                if n == 0 {
                    std::hint::spin_loop();
                }
                got += n;
            }
            Instant::now()
        })
    };
    let producer = thread::spawn(move || {
        pin(PRODUCER_CORE);
        go.0.wait();
        while !go.1.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let t0 = Instant::now();
        for v in 1..=items {
            while !Q::push(&mut tx, v) {
                std::hint::spin_loop();
            }
        }
        t0
    });
    let t0 = producer.join().expect("producer thread");
    let t1 = consumer.join().expect("consumer thread");
    t1.duration_since(t0)
}

fn mtps(items: u64, d: Duration) -> f64 {
    items as f64 / d.as_secs_f64() / 1e6
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

struct Args {
    items: u64,
    runs: usize,
    json: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        items: 20_000_000,
        runs: 5,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => a.json = true,
            "--items" | "--runs" => {
                let v = it.next().ok_or(format!("{arg} needs a value"))?;
                let n: u64 = v.parse().map_err(|_| format!("{arg} {v}: not a number"))?;
                if n == 0 {
                    return Err(format!("{arg} must be at least 1"));
                }
                if arg == "--items" {
                    a.items = n;
                } else {
                    a.runs = n as usize;
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mailbox-compare: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let cores = core_affinity::get_core_ids().map_or(0, |c| c.len());
    // Cores 0 and 1 are the ones used below.
    let pinned = cores >= 2;
    let names = [Pspat::NAME, Rtrb::NAME, Crossbeam::NAME];
    let mut rates: [Vec<f64>; 3] = Default::default();
    for r in 0..args.runs {
        rates[0].push(mtps(args.items, run::<Pspat>(args.items)));
        rates[1].push(mtps(args.items, run::<Rtrb>(args.items)));
        rates[2].push(mtps(args.items, run::<Crossbeam>(args.items)));
        if !args.json {
            eprintln!(
                "run {}/{}: pspat {:.1}, rtrb {:.1}, crossbeam {:.1} Mtransfers/s",
                r + 1,
                args.runs,
                rates[0][r],
                rates[1][r],
                rates[2][r]
            );
        }
    }
    let med: Vec<f64> = rates.iter().map(|v| median(v)).collect();
    let vs_rtrb = med[0] / med[1];
    let vs_crossbeam = med[0] / med[2];
    if args.json {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        println!(
            "{{\"schema_version\":1,\"items\":{},\"runs\":{},\"order\":\"interleaved pspat,rtrb,crossbeam\",\
\"pinning\":{{\"producer_core\":{PRODUCER_CORE},\"consumer_core\":{CONSUMER_CORE},\"pinned\":{pinned}}},\
\"capacity\":{{\"pspat_entries\":{MAILBOX_ENTRIES},\"pspat_usable\":{EQUAL_CAPACITY},\"rtrb\":{EQUAL_CAPACITY},\"crossbeam\":{EQUAL_CAPACITY}}},\
\"median_mtransfers_per_s\":{{\"pspat\":{:.3},\"rtrb\":{:.3},\"crossbeam\":{:.3}}},\
\"runs_mtransfers_per_s\":{{\"pspat\":[{}],\"rtrb\":[{}],\"crossbeam\":[{}]}},\
\"ratio_pspat_over_rtrb\":{vs_rtrb:.3},\"ratio_pspat_over_crossbeam\":{vs_crossbeam:.3}}}",
            args.items,
            args.runs,
            med[0],
            med[1],
            med[2],
            list(&rates[0]),
            list(&rates[1]),
            list(&rates[2]),
        );
    } else {
        println!(
            "{} u64 transfers per run, {} interleaved runs; producer {} core {PRODUCER_CORE}, consumer {} core {CONSUMER_CORE}",
            args.items,
            args.runs,
            if pinned { "pinned to" } else { "NOT pinned (too few cores), meant for" },
            if pinned { "pinned to" } else { "meant for" },
        );
        println!(
            "capacity: pspat {MAILBOX_ENTRIES} slots ({EQUAL_CAPACITY} usable); rtrb and crossbeam ArrayQueue {EQUAL_CAPACITY} (equal usable capacity)"
        );
        for (name, m) in names.iter().zip(&med) {
            println!("{name:>10}: median {m:8.1} Mtransfers/s");
        }
        println!("pspat/rtrb {vs_rtrb:.3}, pspat/crossbeam {vs_crossbeam:.3} (same run)");
    }
    ExitCode::SUCCESS
}
