//! A pipe's `duplicate` through the runtime, in virtual time
//! ([`pspat::ManualRuntime`]): the pipe marks a packet to be sent twice
//! (`pspat_sched::Packet::copies`), and every sink hands the mark to its
//! backend as [`TxPacket::copies`] — the arbiter's own backend (T = 0), the
//! dispatchers' (T = 2) and the clients' (client-transmit mode). The
//! runtime counts each packet once.

use pspat::{ManualRuntime, RuntimeConfig, Submission, TxBackend, TxMode, TxPacket};
use pspat_sched::pipe::{PipeConfig, PipeScheduler, QueueConfig};
use pspat_sched::{AlgKind, AnyScheduler, FlowId, FlowTable, Instant, Pipe, SchedulerConfig};

/// Records every packet handed over.
#[derive(Default)]
struct Log(Vec<TxPacket>);

impl TxBackend for Log {
    fn transmit(&mut self, _now: Instant, pkts: &[TxPacket]) {
        self.0.extend_from_slice(pkts);
    }
}

/// A FIFO pipe over 4 flows, 1 ms of delay, duplicating with probability
/// `p`, seeded.
fn pipe(p: f64) -> PipeScheduler<AnyScheduler> {
    let config = PipeConfig {
        delay_ns: 1_000_000,
        queue: QueueConfig {
            duplicate: p,
            ..QueueConfig::default()
        },
        seed: 2026,
        ..PipeConfig::default()
    };
    let fifo = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(4).unwrap())
        .unwrap();
    PipeScheduler::new(Pipe::new(config, fifo, 4).unwrap())
}

/// Submits `n` packets (cookies 0..n) in bursts of 32, running the runtime
/// until idle after each (the clock moves on 10 ms per burst); returns what
/// every backend got, the pipe's count of copies and the runtime's
/// transmitted count.
fn run(mode: TxMode, dispatchers: usize, n: u64) -> (Vec<TxPacket>, u64, u64) {
    let mut c = RuntimeConfig::default();
    c.max_clients = 4;
    c.descriptors_per_client = 64;
    c.mailbox_entries = 64;
    c.tx_mode = mode;
    c.dispatchers = dispatchers;
    let mut rt = ManualRuntime::new(c, pipe(0.25), |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    let mut now = Instant::ZERO;
    let mut next = 0u64;
    while next < n {
        for _ in 0..32.min(n - next) {
            let s = Submission {
                flow: FlowId((next % 4) as u32),
                len: 100,
                cookie: next,
                ect: false,
            };
            cl.submit(s).unwrap();
            next += 1;
        }
        now = rt.run_until_idle(now, 10_000);
        cl.drain();
        now = now.saturating_add_nanos(10_000_000);
    }
    let dups = rt.scheduler().pipe().counters().duplicates;
    let own = cl.into_backend().map(|b| b.0).unwrap_or_default();
    let done = rt.finish(now).unwrap();
    assert!(done.stats.conserved() && done.stats.in_flight == 0);
    let mut got: Vec<TxPacket> = done.backends.into_iter().flat_map(|b| b.0).collect();
    got.extend(own);
    (got, dups, done.stats.transmitted)
}

#[test]
fn every_sink_hands_the_copy_mark_to_its_backend() {
    let n = 4_000;
    let mut marked_sets = Vec::new();
    for (mode, t) in [
        (TxMode::Dispatcher, 0),
        (TxMode::Dispatcher, 2),
        (TxMode::Client, 0),
    ] {
        let (got, dups, transmitted) = run(mode, t, n);
        // Each packet once, counted once by the runtime.
        assert_eq!(transmitted, n, "{mode:?} T={t}");
        let mut cookies: Vec<u64> = got.iter().map(|p| p.cookie).collect();
        cookies.sort_unstable();
        assert_eq!(cookies, (0..n).collect::<Vec<_>>(), "{mode:?} T={t}");
        // The marks are the pipe's copies, no more, no fewer.
        assert!(got.iter().all(|p| p.copies == 1 || p.copies == 2));
        let mut marked: Vec<u64> = got
            .iter()
            .filter(|p| p.copies == 2)
            .map(|p| p.cookie)
            .collect();
        assert_eq!(marked.len() as u64, dups, "{mode:?} T={t}");
        // duplicate 0.25 over 4000 packets: within the 99.9% interval.
        let (mean, sd) = (n as f64 * 0.25, (n as f64 * 0.25 * 0.75).sqrt());
        assert!(
            (dups as f64 - mean).abs() <= 3.2905 * sd,
            "{mode:?} T={t}: {dups} copies, expected {mean} ± {:.0}",
            3.2905 * sd
        );
        marked.sort_unstable();
        marked_sets.push(marked);
    }
    // One seed, the same arrivals: the same packets are duplicated whatever
    // transmits them.
    assert_eq!(marked_sets[0], marked_sets[1]);
    assert_eq!(marked_sets[0], marked_sets[2]);
}

#[test]
fn without_duplicate_every_packet_is_sent_once() {
    let mut c = RuntimeConfig::default();
    c.max_clients = 4;
    c.descriptors_per_client = 64;
    let mut rt = ManualRuntime::new(c, pipe(0.0), |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..40 {
        cl.submit(Submission {
            flow: FlowId(i % 4),
            len: 60,
            cookie: u64::from(i),
            ect: false,
        })
        .unwrap();
    }
    let now = rt.run_until_idle(Instant::ZERO, 1_000);
    drop(cl);
    let done = rt.finish(now).unwrap();
    let got = &done.backends[0].0;
    assert_eq!(got.len(), 40);
    assert!(got.iter().all(|p| p.copies == 1));
}
