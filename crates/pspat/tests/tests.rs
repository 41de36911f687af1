//! Integration tests of the `pspat` runtime, one binary.
//!
//! Every test asserts counts, orders and bounds, never wall-clock speed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pspat::{
    BackpressurePolicy, DispatchPlacement, Runtime, RuntimeConfig, Submission, SubmitError,
    TxBackend, TxMode, TxPacket,
};
use pspat_sched::{AlgKind, FlowId, FlowTable, Instant, SchedulerConfig};

/// Records what it transmits and checks per-client order on the fly.
#[derive(Clone, Default)]
struct Recorder {
    inner: Arc<Mutex<RecState>>,
}

/// Cookies are `tag << 40 | seq`: the tag names the submitting thread, so
/// order is checked per (client id, tag) even when a departed client's id is
/// handed to a new client (slots are reused).
const TAG_SHIFT: u32 = 40;

#[derive(Default)]
struct RecState {
    next: std::collections::HashMap<(u32, u64), u64>,
    packets: u64,
    order_errors: u64,
    times: Vec<(u64, u32)>,
}

impl RecState {
    /// Packets seen in order from thread `tag` (all clients it used).
    fn next_of_tag(&self, tag: u64) -> u64 {
        self.next
            .iter()
            .filter(|((_, t), _)| *t == tag)
            .map(|(_, n)| *n)
            .sum()
    }
}

impl TxBackend for Recorder {
    fn transmit(&mut self, now: Instant, pkts: &[TxPacket]) {
        let mut s = self.inner.lock().unwrap();
        for p in pkts {
            let key = (p.client, p.cookie >> TAG_SHIFT);
            let seq = p.cookie & ((1 << TAG_SHIFT) - 1);
            let next = s.next.entry(key).or_insert(0);
            let in_order = seq == *next;
            *next = seq + 1;
            if !in_order {
                s.order_errors += 1;
            }
            s.packets += 1;
            s.times.push((now.as_nanos(), p.len));
        }
    }
}

fn drr(flows: usize, capacity: usize) -> pspat_sched::AnyScheduler {
    let mut c = SchedulerConfig::new(AlgKind::Drr);
    c.capacity = capacity;
    c.build(FlowTable::uniform(flows).unwrap()).unwrap()
}

/// `clients` threads submit random bursts with per-client sequence numbers;
/// a third of them exit mid-run; the main thread checks conservation in
/// snapshots while they run, and exactly after shutdown.
fn conservation_and_order(clients: usize, tx_mode: TxMode, dispatchers: usize, per_client: u64) {
    conservation_and_order_with(clients, tx_mode, dispatchers, per_client, 1024);
}

fn conservation_and_order_with(
    clients: usize,
    tx_mode: TxMode,
    dispatchers: usize,
    per_client: u64,
    tx_entries: usize,
) {
    conservation_and_order_placed(
        clients,
        tx_mode,
        dispatchers,
        per_client,
        tx_entries,
        DispatchPlacement::Modulo,
        false,
    );
}

fn conservation_and_order_placed(
    clients: usize,
    tx_mode: TxMode,
    dispatchers: usize,
    per_client: u64,
    tx_entries: usize,
    placement: DispatchPlacement,
    spin_yields: bool,
) {
    let mut cfg = RuntimeConfig::default();
    cfg.dispatch_placement = placement;
    cfg.spin_yields = spin_yields;
    cfg.max_clients = clients;
    cfg.tx_mode = tx_mode;
    cfg.dispatchers = dispatchers;
    cfg.descriptors_per_client = 512;
    cfg.tx_mailbox_entries = tx_entries;
    let rec = Recorder::default();
    let r2 = rec.clone();
    // Room for every descriptor: no scheduler drop, so order is checkable exactly.
    let rt = Runtime::start(cfg, drr(clients, clients * 512), move |_| r2.clone()).unwrap();
    let mut handles = Vec::new();
    for i in 0..clients {
        let mut c = rt.client().unwrap();
        handles.push(std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(0x5eed + i as u64);
            // Every third client exits early, mid-run.
            let total = if i % 3 == 0 {
                per_client / 4
            } else {
                per_client
            };
            let mut seq = 0u64;
            let mut buf = Vec::with_capacity(64);
            while seq < total {
                let n = rng.u64(1..=64).min(total - seq);
                buf.clear();
                buf.extend((0..n).map(|k| Submission {
                    flow: FlowId(i as u32),
                    len: rng.u32(1..=1500),
                    cookie: ((i as u64) << TAG_SHIFT) | (seq + k),
                    ect: false,
                }));
                let b = c.submit_burst(&buf);
                seq += b.accepted as u64;
                if let Some(e) = b.error {
                    assert!(matches!(e, SubmitError::Full(_)), "{e}");
                    // Client-transmit mode: transmits what was granted.
                    c.drain();
                    std::thread::yield_now();
                }
                if rng.u8(0..8) == 0 {
                    std::thread::yield_now();
                }
            }
            (i as u64, seq)
        }));
    }
    let mut snapshots = 0;
    while !handles.iter().all(|h| h.is_finished()) {
        let s = rt.stats();
        assert!(s.conserved(), "snapshot {snapshots}: {s:?}");
        snapshots += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    let per_thread: Vec<(u64, u64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let expected: u64 = per_thread.iter().map(|(_, n)| n).sum();
    let done = rt.shutdown().unwrap();
    let s = &done.stats;
    assert!(s.conserved());
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.submitted, expected);
    assert_eq!(s.dropped, 0);
    assert_eq!(s.transmitted, expected);
    let r = rec.inner.lock().unwrap();
    assert_eq!(r.packets, expected);
    assert_eq!(r.order_errors, 0, "per-client order broken");
    for c in &s.clients {
        assert_eq!(c.in_flight, 0);
    }
    for (tag, sent) in per_thread {
        assert_eq!(
            r.next_of_tag(tag),
            sent,
            "thread {tag}: every packet, in order"
        );
    }
}

#[test]
fn sixty_four_clients_bursts_exits_conserve_and_keep_order() {
    conservation_and_order(64, TxMode::Dispatcher, 1, 3_000);
}

#[test]
fn dispatcher_mode_t0_arbiter_transmits() {
    conservation_and_order(8, TxMode::Dispatcher, 0, 5_000);
}

#[test]
fn dispatcher_mode_t2() {
    conservation_and_order(8, TxMode::Dispatcher, 2, 5_000);
}

/// TX mailboxes of 64 slots fill up: the arbiter keeps released packets in
/// its backlog instead of dropping them.
/// HRW and AHRW placement over three dispatchers with small TX mailboxes
/// (so backlogs build and AHRW moves flows at flowlet boundaries): every
/// packet arrives, each client's (= flow's) packets in order.
#[test]
fn hrw_and_ahrw_placement_keep_every_flow_in_order() {
    for placement in [DispatchPlacement::Hrw, DispatchPlacement::Ahrw] {
        conservation_and_order_placed(24, TxMode::Dispatcher, 3, 20_000, 64, placement, false);
    }
}

/// An arbiter that yields its core while idle (`spin_yields`, for cores
/// shared with clients) loses and reorders nothing either.
#[test]
fn an_arbiter_that_yields_while_idle_conserves_and_keeps_order() {
    conservation_and_order_placed(
        16,
        TxMode::Dispatcher,
        1,
        10_000,
        1024,
        DispatchPlacement::Modulo,
        true,
    );
}

#[test]
fn dispatcher_mode_small_tx_mailboxes_lose_nothing() {
    conservation_and_order_with(8, TxMode::Dispatcher, 2, 5_000, 64);
}

#[test]
fn client_transmit_mode() {
    conservation_and_order(8, TxMode::Client, 0, 5_000);
}

/// Submits until the pool or the mailbox is full; returns how many were
/// accepted.
fn submit_until_full(c: &mut pspat::Client<pspat::NullTx>, cookie: &mut u64) -> u64 {
    let mut accepted = 0;
    loop {
        let s = Submission {
            flow: FlowId(0),
            len: 60,
            cookie: *cookie,
            ect: false,
        };
        match c.submit(s) {
            Ok(_) => {
                accepted += 1;
                *cookie += 1;
            }
            Err(SubmitError::Full(_)) => return accepted,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Behind a slow link (a wait over a millisecond) a client waits for a
/// quarter of its pool, so its waits, and the kicks of the arbiter after
/// them, come a quarter as often; the rest of the pool keeps the link busy
/// meanwhile.
#[test]
fn after_a_slow_wait_a_client_waits_for_a_quarter_of_its_pool() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 1;
    cfg.descriptors_per_client = 256;
    cfg.rate_bps = Some(1_000_000); // 60 B = 480 µs
    let rt = Runtime::start(cfg, drr(1, 512), |_| pspat::NullTx::new()).unwrap();
    let mut c = rt.client().unwrap();
    let mut cookie = 0;
    // The whole pool, and more when the link sent a packet and the arbiter
    // recycled its descriptor while the loop ran (480 µs a packet: a
    // preempted client sees one come back).
    let filled = submit_until_full(&mut c, &mut cookie);
    assert!(filled >= 256, "{filled}");
    // The first wait is for a sixteenth of the pool: 16 packets, about
    // 8 ms at this rate, so it is a slow one.
    let start = std::time::Instant::now();
    assert!(c.wait_for_room(Duration::from_secs(10)));
    assert!(start.elapsed() > Duration::from_millis(1));
    let first = submit_until_full(&mut c, &mut cookie);
    assert!(first >= 16, "{first}");
    // The next wait is for a quarter of the pool.
    assert!(c.wait_for_room(Duration::from_secs(10)));
    let second = submit_until_full(&mut c, &mut cookie);
    assert!(second >= 64, "after a slow wait: {second} free, want 64");
    drop(c);
    let done = rt.shutdown().unwrap();
    let s = &done.stats;
    assert!(s.conserved() && s.in_flight == 0, "{s:?}");
    assert_eq!(s.submitted, cookie);
}

/// Pool exhaustion hands the packet back; a scheduler drop is reported on
/// the next submit and counted by reason.
fn backpressure(policy: BackpressurePolicy) {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 1;
    cfg.mailbox_entries = 64;
    cfg.descriptors_per_client = 64;
    cfg.rate_bps = Some(1_000_000); // 60 B = 480 µs: packets pile up
    cfg.backpressure = policy;
    let rt = Runtime::start(cfg, drr(1, 4), |_| pspat::NullTx::new()).unwrap();
    let mut c = rt.client().unwrap();
    let mut accepted = 0u64;
    // A drop made while this loop still submits is reported by one of its
    // submits (the report goes with the next submit after the drop).
    let mut reported_early = false;
    let full = loop {
        let s = Submission {
            flow: FlowId(0),
            len: 60,
            cookie: 1000 + accepted,
            ect: false,
        };
        match c.submit(s) {
            Ok(a) => {
                accepted += 1;
                reported_early |= a.drop_reported;
            }
            Err(SubmitError::Full(back)) => break back,
            Err(SubmitError::DroppedEarlier(_)) => reported_early = true,
            Err(e) => panic!("{e}"),
        }
        assert!(accepted <= 64, "a full pool must refuse");
    };
    assert_eq!(
        full.cookie,
        1000 + accepted,
        "the refused packet is handed back"
    );
    // The scheduler holds 4 packets: the rest were dropped as queue_full.
    while rt.stats().dropped == 0 {
        std::thread::yield_now();
    }
    let next = loop {
        let s = Submission {
            flow: FlowId(0),
            len: 60,
            cookie: 7,
            ect: false,
        };
        match c.submit(s) {
            Err(SubmitError::Full(_)) => std::thread::sleep(Duration::from_millis(1)),
            other => break other,
        }
    };
    match policy {
        BackpressurePolicy::ReportOnly => assert!(reported_early || next.unwrap().drop_reported),
        BackpressurePolicy::RejectNext => {
            assert!(
                reported_early
                    || matches!(next, Err(SubmitError::DroppedEarlier(s)) if s.cookie == 7)
            )
        }
    }
    drop(c);
    let done = rt.shutdown().unwrap();
    let s = &done.stats;
    assert!(s.conserved() && s.in_flight == 0);
    assert!(s.dropped > 0);
    assert_eq!(s.dropped_by_reason().get("queue_full"), Some(&s.dropped));
}

#[test]
fn backpressure_report_only() {
    backpressure(BackpressurePolicy::ReportOnly);
}

#[test]
fn backpressure_reject_next() {
    backpressure(BackpressurePolicy::RejectNext);
}

/// A full mailbox fails `submit` at once and hands the packet back. The read
/// gate Δ_A = 1 s keeps the arbiter away from the mailbox meanwhile.
#[test]
fn full_mailbox_hands_the_packet_back() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 1;
    cfg.mailbox_entries = 64; // 48 usable slots
    cfg.delta_a_ns = 1_000_000_000;
    let rt = Runtime::start(cfg, drr(1, 1024), |_| pspat::NullTx::new()).unwrap();
    let mut c = rt.client().unwrap();
    let mut accepted = 0u64;
    let back = loop {
        let s = Submission {
            flow: FlowId(0),
            len: 60,
            cookie: accepted,
            ect: false,
        };
        match c.submit(s) {
            Ok(_) => accepted += 1,
            Err(SubmitError::Full(back)) => break back,
            Err(e) => panic!("{e}"),
        }
    };
    assert!(
        accepted >= 48,
        "refused before the mailbox was full: {accepted}"
    );
    assert_eq!(back.cookie, accepted);
    let before = rt.stats();
    assert_eq!(
        before.submitted, accepted,
        "a refused packet is not counted"
    );
    drop(c);
    let done = rt.shutdown().unwrap();
    assert_eq!(done.stats.transmitted, accepted);
    assert_eq!(done.stats.in_flight, 0);
}

/// Bursts separated by idle gaps longer than T_w: the arbiter parks between
/// them and every burst is delivered by a kick, never by the safety timeout.
#[test]
fn arbiter_sleeps_and_submit_wakes_it() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 1;
    cfg.spin_ns = 20_000;
    let rt = Runtime::start(cfg, drr(1, 1024), |_| pspat::NullTx::new()).unwrap();
    let mut c = rt.client().unwrap();
    let mut sent = 0u64;
    for burst in 0..40 {
        for _ in 0..(burst % 7 + 1) {
            let mut s = Submission {
                flow: FlowId(0),
                len: 100,
                cookie: sent,
                ect: false,
            };
            while let Err(e) = c.submit(s) {
                s = e.into_inner();
            }
            sent += 1;
        }
        while rt.stats().transmitted < sent {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let a = rt.arbiter_stats();
    drop(c);
    let done = rt.shutdown().unwrap();
    assert_eq!(done.stats.transmitted, sent);
    assert!(a.sleeps > 0, "the arbiter never slept");
    assert_eq!(
        done.arbiter.unrequested_wakeups_with_work, 0,
        "a wake-up was lost"
    );
}

/// A change sent through [`pspat::Control`] to an idle runtime is applied
/// at once when the arbiter is woken, not at its 100 ms safety wake-up.
/// Each change is sent 10 ms after the previous one was applied, with the
/// arbiter parked since: unwoken, it would wait about 90 ms (a median of
/// 90 ms, checked by taking the `wake` out).
#[test]
fn a_woken_arbiter_applies_a_change_without_waiting_for_a_packet() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 1;
    let (sched, control) = pspat::Reconfigurable::new(drr(2, 1024));
    let rt = Runtime::start(cfg, sched, |_| pspat::NullTx::new()).unwrap();
    let waker = rt.arbiter_waker();
    let mut waits = Vec::new();
    for weight in 2..9u32 {
        std::thread::sleep(Duration::from_millis(10));
        let sent = std::time::Instant::now();
        let ticket = control.send(move |s, _| {
            pspat_sched::Scheduler::change_flow(
                s,
                FlowId(1),
                pspat_sched::FlowParams::weighted(weight),
            )
            .unwrap();
        });
        waker.wake();
        assert!(control.wait_applied(ticket, Duration::from_secs(2)));
        waits.push(sent.elapsed());
    }
    let stats = rt.arbiter_stats();
    let done = rt.shutdown().unwrap();
    assert_eq!(done.stats.transmitted, 0);
    assert!(
        stats.sleeps >= 7,
        "the arbiter did not sleep between changes"
    );
    waits.sort();
    let median = waits[waits.len() / 2];
    assert!(
        median < Duration::from_millis(60),
        "applied after {waits:?}: the wake-up did not reach the arbiter"
    );
}

/// An idle arbiter wakes by itself once per `idle_safety_wake_ns`: ten
/// times a second by default, about once with 1 s; a client's packet still
/// wakes it at once, and shutdown does.
#[test]
fn an_idle_arbiter_sleeps_its_safety_wake_and_a_packet_still_wakes_it() {
    let sleeps_in = |safety_ns: u64| {
        let mut cfg = RuntimeConfig::default();
        cfg.max_clients = 1;
        cfg.idle_safety_wake_ns = safety_ns;
        let rt = Runtime::start(cfg, drr(2, 1024), |_| pspat::NullTx::new()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let before = rt.arbiter_stats().sleeps;
        std::thread::sleep(Duration::from_millis(1500));
        let idle = rt.arbiter_stats().sleeps - before;
        let mut c = rt.client().unwrap();
        let sent = std::time::Instant::now();
        let s = Submission {
            flow: FlowId(1),
            len: 60,
            cookie: 1,
            ect: false,
        };
        while c.submit(s).is_err() {}
        while rt.stats().transmitted < 1 {
            std::thread::yield_now();
        }
        let waited = sent.elapsed();
        drop(c);
        let begun = std::time::Instant::now();
        let done = rt.shutdown().unwrap();
        assert_eq!(done.stats.transmitted, 1);
        (idle, waited, begun.elapsed())
    };
    let (default_sleeps, _, _) = sleeps_in(100_000_000);
    let (long_sleeps, waited, shutdown) = sleeps_in(1_000_000_000);
    println!("sleeps in 1.5 s idle: {default_sleeps} (100 ms), {long_sleeps} (1 s); packet after {waited:?}, shutdown {shutdown:?}");
    assert!(default_sleeps >= 10, "{default_sleeps}");
    assert!(long_sleeps <= 3, "{long_sleeps}");
    assert!(waited < Duration::from_millis(500), "{waited:?}");
    assert!(shutdown < Duration::from_millis(500), "{shutdown:?}");
    let mut cfg = RuntimeConfig::default();
    cfg.idle_safety_wake_ns = 0;
    assert!(cfg.validate().is_err());
}

/// Released bytes never run ahead of the emulated link by more than wake-up
/// coalescing allows: by transmit time t, at most B·(t - t0) + one packet
/// with `wake_batch = 1`, plus B·`max_wake_delay` (the most a release comes
/// early) by default. t0 is the runtime clock's epoch: the round that first
/// collects a packet may have read its clock (and started the link there)
/// before the client's first `now()`, so measuring from the client's first
/// reading failed now and then under load.
#[test]
fn link_rate_bounds_released_bytes() {
    link_rate_bound_run(1);
    link_rate_bound_run(RuntimeConfig::default().wake_batch);
}

fn link_rate_bound_run(wake_batch: u32) {
    let rate = 8_000_000u64; // 1 MB/s
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 2;
    cfg.rate_bps = Some(rate);
    cfg.wake_batch = wake_batch;
    let early_ns = if wake_batch > 1 {
        cfg.max_wake_delay_ns
    } else {
        0
    };
    let rec = Recorder::default();
    let r2 = rec.clone();
    let rt = Runtime::start(cfg, drr(2, 4096), move |_| r2.clone()).unwrap();
    let mut a = rt.client().unwrap();
    let mut b = rt.client().unwrap();
    let t0 = 0;
    let mut seq = [0u64; 2];
    while a.now().as_nanos() - t0 < 150_000_000 {
        for (i, c) in [&mut a, &mut b].into_iter().enumerate() {
            let s = Submission {
                flow: FlowId(i as u32),
                len: 1000,
                cookie: seq[i],
                ect: false,
            };
            if c.submit(s).is_ok() {
                seq[i] += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    drop((a, b));
    let done = rt.shutdown().unwrap();
    assert!(done.stats.conserved() && done.stats.in_flight == 0);
    let r = rec.inner.lock().unwrap();
    assert!(r.times.len() > 100, "{} packets", r.times.len());
    let mut bytes = 0u64;
    for &(t, len) in &r.times {
        bytes += u64::from(len);
        let allowed = rate as u128 * u128::from(t - t0 + early_ns) / 8_000_000_000 + 1000;
        assert!(
            u128::from(bytes) <= allowed,
            "wake_batch {wake_batch}: {bytes} B by {} ns",
            t - t0
        );
    }
    assert_eq!(r.order_errors, 0);
}

/// Mailboxes leave service after a single empty read (Δ_A = 0), so the
/// retire handshake runs constantly; every packet must still arrive while
/// the clients are alive (a stranded packet would only move at client exit).
#[test]
fn retire_handshake_never_strands_a_packet() {
    retire_handshake_run();
}

fn retire_handshake_run() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 4;
    cfg.delta_a_ns = 0;
    cfg.retire_after_reads = 1;
    cfg.spin_ns = 5_000;
    let rt = Runtime::start(cfg, drr(4, 8192), |_| pspat::NullTx::new()).unwrap();
    let handles: Vec<_> = (0..4u32)
        .map(|i| {
            let mut c = rt.client().unwrap();
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(u64::from(i));
                for seq in 0..5_000u64 {
                    let mut s = Submission {
                        flow: FlowId(i),
                        len: 64,
                        cookie: seq,
                        ect: false,
                    };
                    while let Err(e) = c.submit(s) {
                        s = e.into_inner();
                        std::thread::yield_now();
                    }
                    for _ in 0..rng.u32(0..200) {
                        std::hint::spin_loop();
                    }
                    if rng.u8(0..32) == 0 {
                        std::thread::yield_now();
                    }
                }
                c
            })
        })
        .collect();
    let clients: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let t0 = std::time::Instant::now();
    while rt.stats().transmitted < 20_000 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "packets stranded: {:?}",
            rt.stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(clients);
    let done = rt.shutdown().unwrap();
    assert_eq!(done.stats.transmitted, 20_000);
    assert_eq!(done.arbiter.unrequested_wakeups_with_work, 0);
}

/// Heavier version of the 64-client test: run with
/// `cargo test --release -p pspat -- --ignored stress`.
#[test]
#[ignore = "stress"]
fn stress_many_clients_all_modes() {
    for _ in 0..30 {
        retire_handshake_run();
    }
    for _ in 0..3 {
        conservation_and_order(256, TxMode::Dispatcher, 2, 20_000);
        conservation_and_order(256, TxMode::Dispatcher, 0, 20_000);
        conservation_and_order(128, TxMode::Client, 0, 20_000);
    }
}

/// Frees a slot only after "sending" it, as a frame-owning backend does.
#[derive(Clone, Default)]
struct SlotOwner {
    busy: Arc<Mutex<std::collections::HashSet<u64>>>,
}

impl TxBackend for SlotOwner {
    fn transmit(&mut self, _now: Instant, pkts: &[TxPacket]) {
        let mut busy = self.busy.lock().unwrap();
        for p in pkts {
            assert!(
                busy.remove(&p.cookie),
                "slot {} sent but not busy",
                p.cookie
            );
        }
    }
}

/// `next_slot` never names a slot whose packet is still in flight, and the
/// packet submitted next travels in that slot: the client marks the slot
/// busy before submitting, the backend clears it after sending; a slot named
/// while busy, or sent twice, fails.
fn next_slot_is_never_in_flight(tx_mode: TxMode, dispatchers: usize) {
    let mut cfg = RuntimeConfig::default();
    cfg.tx_mode = tx_mode;
    cfg.dispatchers = dispatchers;
    cfg.descriptors_per_client = 64;
    let owner = SlotOwner::default();
    let busy = owner.busy.clone();
    let rt = Runtime::start(cfg, drr(2, 1024), move |_| owner.clone()).unwrap();
    let mut threads = Vec::new();
    for f in 0..2u32 {
        let mut c = rt.client().unwrap();
        let busy = busy.clone();
        threads.push(std::thread::spawn(move || {
            let id = u64::from(c.id()) << 32;
            let mut sent = 0u64;
            while sent < 20_000 {
                let Some(slot) = c.next_slot() else {
                    c.drain();
                    std::thread::yield_now();
                    continue;
                };
                let cookie = id | u64::from(slot);
                assert!(
                    busy.lock().unwrap().insert(cookie),
                    "slot {slot} named while in flight"
                );
                let s = Submission {
                    flow: FlowId(f),
                    len: 60,
                    cookie,
                    ect: false,
                };
                match c.submit(s) {
                    Ok(_) => sent += 1,
                    Err(e) => {
                        assert!(matches!(e, SubmitError::Full(_)), "{e}");
                        busy.lock().unwrap().remove(&cookie);
                        std::thread::yield_now();
                    }
                }
            }
            while c.outstanding() > 0 {
                c.drain();
                std::thread::yield_now();
            }
            sent
        }));
    }
    let sent: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let done = rt.shutdown().unwrap();
    assert_eq!(done.stats.transmitted, sent);
    assert_eq!(done.stats.dropped, 0);
    assert!(busy.lock().unwrap().is_empty(), "every slot came back");
}

#[test]
fn next_slot_dispatchers() {
    next_slot_is_never_in_flight(TxMode::Dispatcher, 1);
}

#[test]
fn next_slot_arbiter_transmits() {
    next_slot_is_never_in_flight(TxMode::Dispatcher, 0);
}

#[test]
fn next_slot_client_transmit() {
    next_slot_is_never_in_flight(TxMode::Client, 0);
}
