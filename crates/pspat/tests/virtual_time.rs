//! The runtime in virtual time: [`pspat::ManualRuntime`] steps the arbiter's
//! round and the dispatchers with a clock the test controls, on one thread.
//! Every assertion is exact: no wall clock, no timing dependence.

use pspat::{
    BackpressurePolicy, ManualRuntime, NullTx, Outcome, RuntimeConfig, Submission, SubmitError,
    TxBackend, TxMode, TxPacket, WaitingFor,
};
use pspat_sched::{AlgKind, FlowId, FlowTable, Instant, SchedulerConfig};

/// Records every packet with the time it was handed over.
#[derive(Default)]
struct Log(Vec<(u64, TxPacket)>);

impl TxBackend for Log {
    fn transmit(&mut self, now: Instant, pkts: &[TxPacket]) {
        self.0.extend(pkts.iter().map(|p| (now.as_nanos(), *p)));
    }
}

fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

fn sub(flow: u32, len: u32, cookie: u64) -> Submission {
    Submission {
        flow: FlowId(flow),
        len,
        cookie,
        ect: false,
    }
}

fn cfg() -> RuntimeConfig {
    let mut c = RuntimeConfig::default();
    c.max_clients = 64;
    c.descriptors_per_client = 64;
    c.mailbox_entries = 64;
    c
}

#[test]
fn link_pacing_releases_each_packet_at_its_exact_time() {
    let mut c = cfg();
    c.rate_bps = Some(1_000_000_000); // 8 ns per byte
    let sched = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    let mut rt = ManualRuntime::new(c, sched, |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..5 {
        cl.submit(sub(0, 1000, i)).unwrap();
    }
    let mut now = at(0);
    let mut busy_until = Vec::new();
    for _ in 0..20 {
        match rt.round(now) {
            Outcome::Worked => {}
            Outcome::Busy { until, waiting_for } => {
                assert_eq!(waiting_for, WaitingFor::Link);
                busy_until.push(until.as_nanos());
                now = until;
            }
            Outcome::Idle => break,
        }
    }
    // 1000 bytes at 1 Gbit/s: 8 µs each; the first leaves at 0, and once
    // the last has left the scheduler the round is idle.
    assert_eq!(busy_until, vec![8_000, 16_000, 24_000, 32_000]);
    assert_eq!(rt.link_idle(), at(40_000));
    drop(cl);
    let done = rt.finish(now).unwrap();
    let times: Vec<u64> = done.backends[0].0.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![0, 8_000, 16_000, 24_000, 32_000]);
    assert_eq!(done.stats.transmitted, 5);
    assert_eq!(done.stats.in_flight, 0);
}

#[test]
fn the_read_gate_delays_collection_until_delta_a() {
    let mut c = cfg();
    c.delta_a_ns = 5_000;
    c.lists = 1;
    let sched = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    let mut rt = ManualRuntime::new(c, sched, |_| NullTx::new()).unwrap();
    let mut cl = rt.client().unwrap();
    // The first round reads the list (gate open) and opens the next read at 5 µs.
    assert_eq!(rt.round(at(0)), Outcome::Idle);
    cl.submit(sub(0, 60, 0)).unwrap();
    assert_eq!(rt.round(at(4_999)), Outcome::Idle, "gate still closed");
    assert_eq!(rt.stats().transmitted, 0);
    assert_eq!(rt.round(at(5_000)), Outcome::Worked);
    assert_eq!(rt.stats().transmitted, 1);
    drop(cl);
    rt.finish(at(5_000)).unwrap();
}

#[test]
fn a_shaper_names_its_next_eligible_time_and_holds_the_rate_exactly() {
    // No slack: a round at each named eligibility time, which always lies
    // in the future (the shaper never asks for busy polling).
    let (waits, log) = run_with_slack(cfg(), shaper_1mbit(), 40, 125, 0, WaitingFor::Shaper);
    assert_eq!(log.len(), 40);
    // 40 packets of 125 bytes at 1 Mbit/s: the last leaves at 39 ms, give or
    // take one time-queue bucket (1024 ns) early.
    let last = log.last().unwrap().0;
    assert!((38_998_976..=39_000_000).contains(&last), "last at {last}");
    for w in log.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!((998_976..=1_001_024).contains(&gap), "gap {gap}");
    }
    assert!(waits <= 41, "one wake-up per release, got {waits}");
}

/// shaped-drr: 1 Mbit/s per unit of weight; 125 bytes take 1 ms.
fn shaper_1mbit() -> pspat_sched::AnyScheduler {
    let mut sc = SchedulerConfig::new(AlgKind::ShapedDrr);
    sc.eiffel.rate_bps = 1_000_000;
    sc.build(FlowTable::uniform(1).unwrap()).unwrap()
}

/// Submits `packets` packets of `len` bytes to a runtime of `sched` and
/// steps it as the arbiter thread does with a coalescing slack of
/// `slack_ns` (each round releases what is due up to the slack after its
/// clock read, each wait lasts the slack past the next due time) until it
/// is idle; every wait must be for `expect`. Returns the number of waits
/// and what was handed over, with the times.
fn run_with_slack(
    c: RuntimeConfig,
    sched: pspat_sched::AnyScheduler,
    packets: u64,
    len: u32,
    slack_ns: u64,
    expect: WaitingFor,
) -> (usize, Vec<(u64, TxPacket)>) {
    let mut rt = ManualRuntime::new(c, sched, |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..packets {
        cl.submit(sub(0, len, i)).unwrap();
    }
    let mut now = at(0);
    let mut waits = 0;
    loop {
        match rt.round_releasing_by(now, now.saturating_add_nanos(slack_ns)) {
            Outcome::Worked => {}
            Outcome::Busy { until, waiting_for } => {
                assert_eq!(waiting_for, expect);
                assert!(
                    until > now.saturating_add_nanos(slack_ns),
                    "what was due within the slack left in this round"
                );
                waits += 1;
                now = until.saturating_add_nanos(slack_ns);
            }
            Outcome::Idle => break,
        }
        assert!(
            waits < 1_000,
            "a wait per release at most, never busy polling"
        );
    }
    drop(cl);
    let mut done = rt.finish(now).unwrap();
    let log = std::mem::take(&mut done.backends[0].0);
    (waits, log)
}

#[test]
fn coalescing_releases_within_the_slack_either_way_and_keeps_the_rate() {
    // Shaper: one 125-byte packet per ms at 1 Mbit/s, slack 1 ms: a wake-up
    // every 3 ms releases the packets due 1 ms before, at and 1 ms after it.
    let (waits, log) = run_with_slack(
        cfg(),
        shaper_1mbit(),
        30,
        125,
        1_000_000,
        WaitingFor::Shaper,
    );
    assert_eq!(log.len(), 30);
    for (k, (t, p)) in log.iter().enumerate() {
        assert_eq!(p.cookie, k as u64, "order kept");
        let due = k as i64 * 1_000_000;
        // One time-queue bucket (1024 ns) of rounding besides the slack.
        assert!(
            (*t as i64 - due).abs() <= 1_000_000 + 1_024,
            "packet {k} due at {due} left at {t}"
        );
    }
    assert!(
        (9..=11).contains(&waits),
        "about one wake-up per three packets, got {waits}"
    );

    // Link: 1000 bytes at 1 Gbit/s take 8 us; slack 10 us.
    let mut c = cfg();
    c.rate_bps = Some(1_000_000_000);
    let sched = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    let (waits, log) = run_with_slack(c, sched, 40, 1000, 10_000, WaitingFor::Link);
    assert_eq!(log.len(), 40);
    for (k, (t, _)) in log.iter().enumerate() {
        let due = k as i64 * 8_000;
        assert!(
            (*t as i64 - due).abs() <= 10_000,
            "packet {k} due at {due} left at {t}"
        );
    }
    assert!(waits <= 40 / 2, "fewer waits than packets, got {waits}");
}

#[test]
fn backpressure_reports_a_scheduler_drop_on_the_next_submit() {
    let mut c = cfg();
    c.backpressure = BackpressurePolicy::RejectNext;
    let sched = SchedulerConfig {
        capacity: 2,
        ..SchedulerConfig::new(AlgKind::Fifo)
    }
    .build(FlowTable::uniform(1).unwrap())
    .unwrap();
    let mut rt = ManualRuntime::new(c, sched, |_| NullTx::new()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..4 {
        cl.submit(sub(0, 1000, i)).unwrap();
    }
    rt.round(at(0));
    let s = rt.stats();
    // The round collects all four before releasing: the scheduler keeps
    // two, the other two are dropped and counted.
    assert_eq!(s.transmitted + s.dropped + s.in_flight, 4);
    assert_eq!(s.dropped, 2);
    assert_eq!(s.dropped_by_reason()["queue_full"], 2);
    match cl.submit(sub(0, 1000, 4)) {
        Err(SubmitError::DroppedEarlier(p)) => assert_eq!(p.cookie, 4),
        other => panic!("expected DroppedEarlier, got {other:?}"),
    }
    cl.submit(sub(0, 1000, 4)).unwrap();
    drop(cl);
    let done = rt.finish(at(0)).unwrap();
    assert_eq!(done.stats.submitted, 5);
    assert_eq!(done.stats.transmitted + done.stats.dropped, 5);
    assert_eq!(done.stats.in_flight, 0);
}

#[test]
fn dispatchers_transmit_in_flow_order_with_descriptors_recycled() {
    let mut c = cfg();
    c.dispatchers = 2;
    c.rate_bps = Some(10_000_000_000);
    let sched = SchedulerConfig::new(AlgKind::Drr)
        .build(FlowTable::uniform(4).unwrap())
        .unwrap();
    let mut rt = ManualRuntime::new(c, sched, |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    let mut now = at(0);
    let mut seq = 0u64;
    // 1000 packets through a 64-descriptor pool: only recycling makes room.
    while seq < 1000 {
        match cl.submit(sub((seq % 4) as u32, 100, seq)) {
            Ok(_) => seq += 1,
            Err(SubmitError::Full(_)) => {
                // Past the read gate Δ_A (1 µs), then until nothing moves.
                now = rt.run_until_idle(now.saturating_add_nanos(1_000), 10_000);
            }
            Err(e) => panic!("{e}"),
        }
    }
    drop(cl);
    let done = rt.finish(now).unwrap();
    assert_eq!(done.stats.transmitted, 1000);
    assert_eq!(done.backends.len(), 2);
    for b in &done.backends {
        // Each flow goes to one dispatcher (flow % 2), in submission order.
        let mut last = [None::<u64>; 4];
        for (_, p) in &b.0 {
            let f = p.flow.index();
            assert_eq!(f % 2, b.0[0].1.flow.index() % 2);
            assert!(last[f].is_none_or(|l| l < p.cookie));
            last[f] = Some(p.cookie);
        }
    }
    // 100-byte packets at 10 Gbit/s: 80 ns each, so 1000 take 80 µs at least.
    assert!(now.as_nanos() >= 79_920, "now {}", now.as_nanos());
}

#[test]
fn client_transmit_mode_grants_and_the_client_sends() {
    let mut c = cfg();
    c.tx_mode = TxMode::Client;
    let sched = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    let mut rt = ManualRuntime::new(c, sched, |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..10 {
        cl.submit(sub(0, 60, i)).unwrap();
    }
    assert_eq!(cl.outstanding(), 10);
    rt.run_until_idle(at(0), 100);
    assert_eq!(cl.drain(), 10);
    assert_eq!(cl.outstanding(), 0);
    let b = cl.into_backend().unwrap();
    let cookies: Vec<u64> = b.0.iter().map(|(_, p)| p.cookie).collect();
    assert_eq!(cookies, (0..10).collect::<Vec<_>>());
    let done = rt.finish(at(0)).unwrap();
    assert_eq!(done.stats.transmitted, 10);
}

#[test]
fn submits_fail_with_closed_once_shutdown_began() {
    let sched = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    let rt = pspat::Runtime::start(cfg(), sched, |_| NullTx::new()).unwrap();
    let mut cl = rt.client().unwrap();
    cl.submit(sub(0, 60, 0)).unwrap();
    let closer = std::thread::spawn(move || rt.shutdown().unwrap());
    // Shutdown waits for this client; its submits soon fail with Closed.
    let mut closed = false;
    for _ in 0..1_000_000 {
        match cl.submit(sub(0, 60, 1)) {
            Err(SubmitError::Closed(p)) => {
                assert_eq!(p.cookie, 1);
                closed = true;
                break;
            }
            _ => std::thread::yield_now(),
        }
    }
    assert!(closed, "submit never reported Closed");
    drop(cl);
    let done = closer.join().unwrap();
    assert_eq!(done.stats.in_flight, 0);
    assert!(done.stats.conserved());
}

/// A whole dummynet pipe hosted by the runtime (as a scheduler): 8 Mbit/s
/// (1 µs per byte) and 20 ms of delay; each packet is handed to the backend
/// exactly at its departure from the link plus the delay, and the arbiter
/// says it waits for the "shaper" (the pipe's next exit) in between.
#[test]
fn a_pipe_in_the_runtime_delivers_at_departure_plus_delay() {
    use pspat_sched::pipe::{PipeConfig, PipeScheduler};
    use pspat_sched::rate::Rate;
    let config = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
        delay_ns: 20_000_000,
        ..PipeConfig::default()
    };
    let fifo = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    let pipe = pspat_sched::Pipe::new(config, fifo, 1).unwrap();
    let mut rt = ManualRuntime::new(cfg(), PipeScheduler::new(pipe), |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..3 {
        cl.submit(sub(0, 1000, i)).unwrap();
    }
    let mut now = at(0);
    for _ in 0..50 {
        match rt.round(now) {
            Outcome::Worked => {}
            Outcome::Busy { until, waiting_for } => {
                assert_eq!(waiting_for, WaitingFor::Shaper);
                now = until;
            }
            Outcome::Idle => break,
        }
    }
    drop(cl);
    let done = rt.finish(now).unwrap();
    let times: Vec<u64> = done.backends[0].0.iter().map(|(t, _)| *t).collect();
    // 1000 bytes take 1 ms each: departures at 1, 2, 3 ms, exits 20 ms later.
    assert_eq!(times, vec![21_000_000, 22_000_000, 23_000_000]);
    assert_eq!(done.stats.transmitted, 3);
    assert!(done.stats.conserved() && done.stats.in_flight == 0);
}

/// A profile that loses every packet: each is dropped after the link, late,
/// counted with reason `profile-loss` (the pipe's own reason), and its
/// descriptor comes back; nothing is transmitted and nothing stays in flight.
/// A FIFO pipe with an optional bandwidth whose delay profile loses every
/// packet (each one a late drop, `profile_loss`).
fn losing_pipe(bw_bps: Option<u64>) -> pspat_sched::pipe::PipeScheduler<pspat_sched::AnyScheduler> {
    use pspat_sched::pipe::{DelayProfile, PipeConfig, PipeScheduler};
    let config = PipeConfig {
        bw: bw_bps.map(|b| pspat_sched::Rate::checked("bw", b).unwrap()),
        profile: Some(DelayProfile::new(vec![1_000, 2_000], 0.0).unwrap()),
        ..PipeConfig::default()
    };
    let fifo = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    PipeScheduler::new(pspat_sched::Pipe::new(config, fifo, 1).unwrap())
}

#[test]
fn a_pipe_s_late_drops_are_counted_with_their_reason() {
    let mut rt = ManualRuntime::new(cfg(), losing_pipe(None), |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for round in 0..6u64 {
        // Half the descriptors (64 per client) each time: they all come back.
        for i in 0..32 {
            cl.submit(sub(0, 100, round * 32 + i)).unwrap();
        }
        rt.run_until_idle(at(round * 1_000_000_000), 10_000);
    }
    drop(cl);
    let done = rt.finish(at(10_000_000_000)).unwrap();
    assert_eq!(done.stats.transmitted, 0);
    assert_eq!(done.stats.dropped, 192);
    assert_eq!(done.stats.in_flight, 0);
    let by_reason = done.stats.dropped_by_reason();
    assert_eq!(
        by_reason.get(pspat_sched::DropReason::ProfileLoss.as_str()),
        Some(&192)
    );
}

/// Counts its calls; `transmit` would block for as long as the test holds
/// its gate (here it only counts: the test checks it is not called).
#[derive(Default)]
struct Calls(u64);

impl TxBackend for Calls {
    fn transmit(&mut self, _now: Instant, _pkts: &[TxPacket]) {
        self.0 += 1;
    }
}

/// Finding 7 (issue 17): in client-transmit mode `submit` never calls the
/// backend, so it never blocks on it; granted packets wait for `drain`.
/// Old behaviour: every submit drained first, so it called `transmit` for
/// the packets granted since the last one and took as long as the backend
/// (100 ms per batch with a slow backend), although the docs said submit
/// never blocks.
#[test]
fn client_transmit_submit_never_calls_the_backend() {
    let mut c = cfg();
    c.tx_mode = TxMode::Client;
    let sched = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap();
    let mut rt = ManualRuntime::new(c, sched, |_| Calls::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..10 {
        cl.submit(sub(0, 60, i)).unwrap();
    }
    rt.run_until_idle(at(0), 100);
    // Ten packets granted: further submits leave them to `drain`.
    for i in 10..20 {
        cl.submit(sub(0, 60, i)).unwrap();
    }
    let b = cl.submit_burst(&[sub(0, 60, 20), sub(0, 60, 21)]);
    assert_eq!(b.accepted, 2);
    assert_eq!(cl.outstanding(), 22);
    // Past the read gate Δ_A (1 µs): the list is read again.
    rt.run_until_idle(at(10_000), 100);
    assert_eq!(cl.drain(), 22, "one call for every packet granted");
    assert_eq!(cl.outstanding(), 0);
    let backend = cl.into_backend().unwrap();
    assert_eq!(backend.0, 1, "only drain called the backend");
    let done = rt.finish(at(10_000)).unwrap();
    assert_eq!(done.stats.transmitted, 22);
}

/// Under `ReportOnly`, a drop the arbiter reports while the client's
/// mailbox is full is not lost by the refused submit that first sees it: the
/// next accepted submit carries it. The read gate (Δ_A = 1 ms) keeps the
/// mailbox full while a pipe's profile loss drops a packet that already
/// left the mailbox.
#[test]
fn a_drop_report_survives_a_submit_refused_as_full() {
    let mut c = cfg();
    c.backpressure = BackpressurePolicy::ReportOnly;
    c.delta_a_ns = 1_000_000;
    c.lists = 1;
    c.descriptors_per_client = 256;
    // 100 bytes at 1 Mbit/s: 800 µs on the pipe's link, then lost in the
    // delay line.
    let mut rt = ManualRuntime::new(c, losing_pipe(Some(1_000_000)), |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    rt.round(at(0)); // reads the (empty) list; the gate opens again at 1 ms
    cl.submit(sub(0, 100, 0)).unwrap();
    rt.round(at(1_000_000)); // collects packet 0 into the pipe
    assert_eq!(rt.stats().dropped, 0);
    let mut cookie = 1;
    let refused = loop {
        match cl.submit(sub(0, 100, cookie)) {
            Ok(a) => assert!(!a.drop_reported, "nothing was dropped yet"),
            Err(SubmitError::Full(p)) => break p,
            Err(e) => panic!("expected Full, got {e:?}"),
        }
        cookie += 1;
    };
    assert!(cookie > 32, "the mailbox held only {cookie} packets");
    // Packet 0 leaves the pipe's link at 1.8 ms and is lost; the gate keeps
    // the mailbox full.
    rt.round(at(1_900_000));
    assert_eq!(rt.stats().dropped, 1);
    match cl.submit(refused) {
        Err(SubmitError::Full(p)) => assert_eq!(p.cookie, refused.cookie),
        other => panic!("expected Full, got {other:?}"),
    }
    rt.round(at(2_000_000)); // the gate opens: the mailbox empties
    let accepted = cl.submit(refused).expect("room again");
    assert!(
        accepted.drop_reported,
        "the drop report was swallowed by the refused submit"
    );
    let again = cl.submit(sub(0, 100, cookie + 1)).unwrap();
    assert!(!again.drop_reported, "reported once");
    drop(cl);
    let done = rt.finish(at(10_000_000_000)).unwrap();
    assert_eq!(done.stats.submitted, cookie + 2);
    assert_eq!(
        done.stats.dropped,
        cookie + 2,
        "the profile loses every packet"
    );
    assert_eq!(done.stats.in_flight, 0);
}

/// Changes sent through `pspat::Control` run on the arbiter between
/// scheduler calls: a weight change keeps every packet, a removal purges
/// the flow's queued packets as `flow_removed` drops, counted per client,
/// with descriptors recycled and nothing in flight at the end.
#[test]
fn control_changes_apply_between_rounds_and_count_what_they_purge() {
    use pspat::Reconfigurable;
    use pspat_sched::{FlowParams, Scheduler};
    let mut c = cfg();
    c.rate_bps = Some(8_000_000); // 1 µs per byte: 100 µs per packet
    let drr = SchedulerConfig::new(AlgKind::Drr)
        .build(FlowTable::uniform(2).unwrap())
        .unwrap();
    let (sched, control) = Reconfigurable::new(drr);
    let mut rt = ManualRuntime::new(c, sched, |_| Log::default()).unwrap();
    let mut cl = rt.client().unwrap();
    for i in 0..20 {
        cl.submit(sub(i as u32 % 2, 100, i)).unwrap();
    }
    rt.round(at(0)); // collects all 20; the first leaves
    let reweight = control.send(|s, _| s.change_flow(FlowId(0), FlowParams::weighted(3)).unwrap());
    assert!(!control.is_applied(reweight), "applied only by the arbiter");
    rt.round(at(100_000));
    assert!(control.is_applied(reweight));
    assert_eq!(rt.stats().dropped, 0, "a weight change drops nothing");
    let remove = control.send(|s, purge| s.remove_flow(FlowId(1), purge).unwrap());
    rt.round(at(200_000));
    assert!(control.is_applied(remove));
    let end = rt.run_until_idle(at(300_000), 10_000);
    let s = rt.stats();
    assert!(s.dropped > 0, "flow 1 still had packets queued");
    assert_eq!(s.dropped_by_reason()["flow_removed"], s.dropped);
    assert_eq!(s.transmitted + s.dropped, 20);
    assert_eq!(s.in_flight, 0);
    // The purged descriptors came back to the client.
    assert_eq!(cl.in_flight(), 0);
    let mut now = end;
    for i in 0..40 {
        cl.submit(sub(0, 100, 100 + i)).unwrap();
    }
    now = rt.run_until_idle(now, 10_000);
    drop(cl);
    let done = rt.finish(now).unwrap();
    assert_eq!(done.stats.transmitted + done.stats.dropped, 60);
    assert_eq!(done.stats.in_flight, 0);
    // Flow 0's packets left in their submission order.
    let sent = &done.backends[0].0;
    let flow0: Vec<u64> = sent
        .iter()
        .filter(|(_, p)| p.flow == FlowId(0))
        .map(|(_, p)| p.cookie)
        .collect();
    assert!(flow0.windows(2).all(|w| w[0] < w[1]), "{flow0:?}");
}

#[test]
fn descriptors_come_back_in_batches_while_busy_and_all_when_idle() {
    // 128 descriptors per client: a batch is 8. While rounds keep working,
    // a client's returned descriptors wait until they make a batch or have
    // waited `MAX_RETURN_HOLD_NS`; a round without work returns the rest.
    let mut c = cfg();
    c.descriptors_per_client = 128;
    c.mailbox_entries = 256;
    c.rate_bps = Some(1_000_000_000); // 8 ns per byte
    let sched = SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(2).unwrap())
        .unwrap();
    let mut rt = ManualRuntime::new(c, sched, |_| NullTx::new()).unwrap();
    let mut small = rt.client().unwrap();
    let mut big = rt.client().unwrap();
    for i in 0..3 {
        small.submit(sub(0, 60, i)).unwrap();
    }
    for i in 0..120 {
        big.submit(sub(1, 1500, i)).unwrap();
    }
    // A round every 12 µs (one 1500-byte packet): every round works, for
    // 1.44 ms in all.
    let step = 12_000;
    let hold = pspat_mailbox::MAX_RETURN_HOLD_NS;
    let mut now = 0;
    let mut small_back_at = None;
    let mut big_in_flight = Vec::new();
    while now < 2 * hold {
        assert_eq!(rt.round(at(now)), Outcome::Worked, "at {now} ns");
        if small_back_at.is_none() && small.in_flight() == 0 {
            small_back_at = Some(now);
        }
        big_in_flight.push(big.in_flight());
        now += step;
    }
    // The small client's 3 descriptors left in the first rounds and came
    // back at the first round past the hold limit, not one round earlier.
    let back = small_back_at.expect("the hold limit returned them");
    assert!(back >= hold && back < hold + step, "back at {back} ns");
    // The big client's come back 8 at a time (or all at the hold limit):
    // its count of packets in flight only ever drops by 8 between rounds,
    // except at the round that reached the hold limit.
    for (k, w) in big_in_flight.windows(2).enumerate() {
        let t = (k as u64 + 1) * step;
        let drop = w[0] - w[1];
        assert!(
            drop == 0 || drop == 8 || (t >= hold && t < hold + step),
            "{drop} came back at {t} ns"
        );
    }
    assert!(big_in_flight.last().unwrap() < &120);
    // A round 1 ns after the last one has no work (the link is busy): it
    // returns everything that left.
    let sent_before = rt.stats().transmitted;
    let idle = rt.round(at(now - step + 1));
    assert!(matches!(idle, Outcome::Busy { .. }), "{idle:?}");
    assert_eq!(big.in_flight() as u64, 123 - sent_before);
    drop((small, big));
    let done = rt.finish(at(now)).unwrap();
    assert_eq!(done.stats.transmitted, 123);
}
