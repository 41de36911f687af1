//! Faults and shutdown bounds (issue 17): a backend that panics on a
//! dispatcher, on the arbiter or on a client is contained (the runtime fails
//! and closes, every packet held is counted as dropped with reason
//! `"fault"`, shutdown returns the final statistics and the error), and
//! shutdown drains for at most its deadline (reason `"shutdown"`).
//! Wall-clock bounds are generous (10 s): they catch a hang, not a speed.

use std::sync::mpsc;
use std::time::{Duration, Instant as WallInstant};

use pspat::{
    Finished, ManualRuntime, NullTx, Runtime, RuntimeConfig, ShutdownPolicy, Submission,
    SubmitError, TxBackend, TxMode, TxPacket,
};
use pspat_sched::{AlgKind, FlowId, FlowTable, Instant, SchedulerConfig};

const BOUND: Duration = Duration::from_secs(10);

/// Transmits `limit` packets, then panics on the call that would exceed it.
struct PanicAfter {
    sent: u64,
    limit: u64,
    calls_after_panic: u64,
    panicked: bool,
}

impl PanicAfter {
    fn new(limit: u64) -> Self {
        PanicAfter {
            sent: 0,
            limit,
            calls_after_panic: 0,
            panicked: false,
        }
    }
}

impl TxBackend for PanicAfter {
    fn transmit(&mut self, _now: Instant, pkts: &[TxPacket]) {
        if self.panicked {
            self.calls_after_panic += 1;
        }
        if self.sent + pkts.len() as u64 > self.limit {
            self.panicked = true;
            panic!("test backend fails after {} packets", self.limit);
        }
        self.sent += pkts.len() as u64;
    }
}

fn sched() -> pspat_sched::AnyScheduler {
    SchedulerConfig::new(AlgKind::Fifo)
        .build(FlowTable::uniform(1).unwrap())
        .unwrap()
}

fn sub(i: u64, len: u32) -> Submission {
    Submission {
        flow: FlowId(0),
        len,
        cookie: i,
        ect: false,
    }
}

/// Submits up to `n` packets, waiting on a full mailbox, until the runtime
/// says it is closed or `BOUND` passes; returns (accepted, saw Closed).
fn submit_until_closed<B: TxBackend>(c: &mut pspat::Client<B>, n: u64, len: u32) -> (u64, bool) {
    let start = WallInstant::now();
    let mut accepted = 0;
    let mut i = 0;
    while i < n && start.elapsed() < BOUND {
        match c.submit(sub(i, len)) {
            Ok(_) => {
                accepted += 1;
                i += 1;
            }
            Err(SubmitError::Closed(_)) => return (accepted, true),
            Err(SubmitError::Full(_)) => {
                c.wait_for_room(Duration::from_millis(10));
            }
            Err(e) => panic!("unexpected submit error: {e}"),
        }
    }
    (accepted, false)
}

/// `rt.shutdown()` on another thread, failing the test if it takes longer
/// than `BOUND`.
fn shutdown_within<B: TxBackend>(rt: Runtime<B>) -> Finished<B> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(rt.shutdown());
    });
    rx.recv_timeout(BOUND)
        .expect("shutdown did not return within 10 s")
        .expect("shutdown failed")
}

fn assert_final(done: &Finished<impl TxBackend>, submitted: u64) {
    let s = &done.stats;
    assert!(s.conserved(), "{s:?}");
    assert_eq!(s.in_flight, 0, "{s:?}");
    assert_eq!(s.submitted, submitted);
    assert_eq!(s.submitted, s.transmitted + s.dropped);
}

fn cfg() -> RuntimeConfig {
    let mut c = RuntimeConfig::default();
    c.max_clients = 8;
    c.lists = 1;
    c
}

fn fault_drops(done: &Finished<impl TxBackend>) -> u64 {
    done.stats
        .dropped_by_reason()
        .get("fault")
        .copied()
        .unwrap_or(0)
}

#[test]
fn dispatcher_backend_panic_fails_the_runtime_and_shutdown_returns() {
    let mut c = cfg();
    c.dispatchers = 1;
    c.dispatch_batch = 16;
    let rt = Runtime::start(c, sched(), |_| PanicAfter::new(100)).unwrap();
    let mut client = rt.client().unwrap();
    let (accepted, closed) = submit_until_closed(&mut client, 1_000_000, 60);
    assert!(closed, "submits never saw the fault");
    drop(client);
    let done = shutdown_within(rt);
    assert_final(&done, accepted);
    assert!(matches!(
        done.error,
        Some(pspat::RuntimeError::Thread { .. })
    ));
    assert!(done.stats.transmitted <= 100);
    assert!(fault_drops(&done) > 0);
    assert_eq!(done.backends.len(), 1);
    assert_eq!(done.backends[0].calls_after_panic, 0);
}

#[test]
fn arbiter_backend_panic_counts_every_packet_and_closes_clients() {
    let mut c = cfg();
    c.dispatchers = 0;
    let rt = Runtime::start(c, sched(), |_| PanicAfter::new(100)).unwrap();
    let mut client = rt.client().unwrap();
    let (accepted, closed) = submit_until_closed(&mut client, 1_000_000, 60);
    assert!(closed, "submits never saw the fault");
    drop(client);
    let done = shutdown_within(rt);
    assert_final(&done, accepted);
    assert!(done.error.is_some());
    assert!(fault_drops(&done) > 0);
    assert_eq!(done.backends[0].calls_after_panic, 0);
}

#[test]
fn client_backend_panic_is_contained_without_a_second_call() {
    let mut c = cfg();
    c.tx_mode = TxMode::Client;
    let rt = Runtime::start(c, sched(), |_| PanicAfter::new(100)).unwrap();
    let mut client = rt.client().unwrap();
    let (accepted, closed) = submit_until_closed(&mut client, 1_000_000, 60);
    assert!(closed, "submits never saw the fault");
    // Retires (waiting for the outstanding packets) without calling the
    // panicked backend again.
    let backend = client.into_backend().unwrap();
    assert!(backend.panicked);
    assert_eq!(backend.calls_after_panic, 0);
    let done = shutdown_within(rt);
    assert_final(&done, accepted);
    assert!(done.error.is_some());
    assert!(fault_drops(&done) > 0);
}

/// A FIFO whose `dequeue` panics after `limit` packets: a fault of the
/// arbiter thread itself, outside any backend call.
struct PanickingScheduler {
    q: std::collections::VecDeque<pspat_sched::Packet>,
    dequeued: u64,
    limit: u64,
}

impl pspat_sched::Scheduler for PanickingScheduler {
    fn enqueue(
        &mut self,
        _now: Instant,
        pkt: pspat_sched::Packet,
    ) -> Result<(), pspat_sched::Rejected> {
        self.q.push_back(pkt);
        Ok(())
    }
    fn dequeue(&mut self, _now: Instant) -> Option<pspat_sched::Packet> {
        if self.dequeued == self.limit && !self.q.is_empty() {
            panic!("test scheduler fails after {} packets", self.limit);
        }
        let p = self.q.pop_front()?;
        self.dequeued += 1;
        Some(p)
    }
    fn queued(&self) -> usize {
        self.q.len()
    }
    fn name(&self) -> &'static str {
        "panicking"
    }
}

#[test]
fn arbiter_thread_panic_is_caught_at_its_edge_and_settled() {
    for dispatchers in [0, 1] {
        let mut c = cfg();
        c.dispatchers = dispatchers;
        let sched = PanickingScheduler {
            q: std::collections::VecDeque::new(),
            dequeued: 0,
            limit: 50,
        };
        let rt = Runtime::start(c, sched, |_| NullTx::new()).unwrap();
        let mut client = rt.client().unwrap();
        let (accepted, closed) = submit_until_closed(&mut client, 1_000_000, 60);
        assert!(closed, "submits never saw the fault");
        drop(client);
        let done = shutdown_within(rt);
        assert_final(&done, accepted);
        match &done.error {
            Some(pspat::RuntimeError::Thread { what, .. }) => assert_eq!(what, "arbiter"),
            other => panic!("expected the arbiter's fault, got {other:?}"),
        }
        // Packets the arbiter had dequeued when it died may not have
        // reached a backend: they are settled as faults with the rest.
        assert!(done.stats.transmitted <= 50);
        assert_eq!(fault_drops(&done), accepted - done.stats.transmitted);
    }
}

#[test]
fn a_healthy_run_reports_no_error() {
    let rt = Runtime::start(cfg(), sched(), |_| NullTx::new()).unwrap();
    let mut client = rt.client().unwrap();
    let (accepted, closed) = submit_until_closed(&mut client, 5_000, 60);
    assert!(!closed);
    drop(client);
    let done = shutdown_within(rt);
    assert_final(&done, accepted);
    assert!(done.error.is_none());
    assert_eq!(done.stats.transmitted, 5_000);
}

/// 400 packets of 1250 bytes at 1 Mbit/s take 4 s to send; shutdown must
/// give up at its deadline (or at once) and count the rest.
fn slow_link_shutdown(policy: ShutdownPolicy) -> Finished<NullTx> {
    let mut c = cfg();
    c.rate_bps = Some(1_000_000);
    c.shutdown = policy;
    let rt = Runtime::start(c, sched(), |_| NullTx::new()).unwrap();
    let mut client = rt.client().unwrap();
    let (accepted, closed) = submit_until_closed(&mut client, 400, 1250);
    assert_eq!((accepted, closed), (400, false));
    drop(client);
    let start = WallInstant::now();
    let done = shutdown_within(rt);
    assert!(start.elapsed() < Duration::from_secs(3), "shutdown drained");
    assert_final(&done, 400);
    assert!(done.error.is_none());
    let shut = done.stats.dropped_by_reason().get("shutdown").copied();
    assert_eq!(shut, Some(done.stats.dropped));
    assert!(done.stats.dropped > 0);
    done
}

#[test]
fn shutdown_drain_stops_at_its_deadline() {
    slow_link_shutdown(ShutdownPolicy::Drain {
        deadline: Duration::from_millis(100),
    });
}

#[test]
fn shutdown_discard_drops_at_once() {
    slow_link_shutdown(ShutdownPolicy::Discard);
}

#[test]
fn virtual_time_drain_sends_until_the_deadline_then_drops() {
    const PKT_NS: u64 = 10_000_000; // 1250 bytes at 1 Mbit/s
    const DEADLINE_NS: u64 = 50_000_000;
    let mut c = cfg();
    c.rate_bps = Some(1_000_000);
    c.shutdown = ShutdownPolicy::Drain {
        deadline: Duration::from_nanos(DEADLINE_NS),
    };
    let rt = ManualRuntime::new(c, sched(), |_| NullTx::new()).unwrap();
    let mut client = rt.client().unwrap();
    for i in 0..100 {
        client.submit(sub(i, 1250)).unwrap();
    }
    drop(client);
    let done = rt.finish(Instant::ZERO).unwrap();
    assert_final(&done, 100);
    // Released at 0, 10, ..., 40 ms: the link's pace until the deadline;
    // at 50 ms what is left is dropped.
    let sent = done.stats.transmitted;
    assert_eq!(sent, DEADLINE_NS / PKT_NS, "{:?}", done.stats);
    assert_eq!(
        done.stats.dropped_by_reason().get("shutdown").copied(),
        Some(100 - sent)
    );
}

#[test]
fn virtual_time_discard_drops_everything_at_once() {
    let mut c = cfg();
    c.rate_bps = Some(1_000_000);
    c.shutdown = ShutdownPolicy::Discard;
    let rt = ManualRuntime::new(c, sched(), |_| NullTx::new()).unwrap();
    let mut client = rt.client().unwrap();
    for i in 0..100 {
        client.submit(sub(i, 1250)).unwrap();
    }
    drop(client);
    let done = rt.finish(Instant::ZERO).unwrap();
    assert_final(&done, 100);
    assert_eq!(done.stats.transmitted, 0);
    assert_eq!(
        done.stats.dropped_by_reason().get("shutdown").copied(),
        Some(100)
    );
}

#[test]
fn virtual_time_arbiter_backend_fault_is_exact() {
    // Two packets per round: the first batch is sent, the second makes the
    // backend panic (2 + 2 > 3); it and everything held after are faults.
    let mut c = cfg();
    c.arb_batch = 2;
    let mut rt = ManualRuntime::new(c, sched(), |_| PanicAfter::new(3)).unwrap();
    let mut client = rt.client().unwrap();
    for i in 0..10 {
        client.submit(sub(i, 60)).unwrap();
    }
    rt.round(Instant::ZERO);
    assert!(client.submit(sub(10, 60)).is_ok(), "no fault yet");
    rt.round(Instant::ZERO);
    assert!(matches!(
        client.submit(sub(11, 60)),
        Err(SubmitError::Closed(_))
    ));
    drop(client);
    let done = rt.finish(Instant::ZERO).unwrap();
    assert_final(&done, 11);
    assert_eq!(done.stats.transmitted, 2);
    assert_eq!(fault_drops(&done), 9);
    assert!(done.error.is_some());
    assert_eq!(done.backends[0].calls_after_panic, 0);
}
