//! Clients come and go (issue 17, finding 6): client slots and their memory
//! are reused once a client is gone and its packets left, statistics keep
//! the departed clients' totals in one aggregate, and conservation stays
//! exact (totals = clients present + departed).
//!
//! Old behaviour: ids were never reused. With the default `max_clients`
//! (1024) the 1025th `Runtime::client` failed with `TooManyClients`
//! although every earlier client had been dropped, every dead client kept
//! its descriptors and counters for ever and `stats()` listed each one.

use std::collections::BTreeSet;
use std::time::Duration;

use pspat::{
    ManualRuntime, NullTx, Runtime, RuntimeConfig, RuntimeError, Submission, SubmitError, TxMode,
};
use pspat_sched::{AlgKind, FlowId, FlowTable, Instant, SchedulerConfig};

fn fifo(capacity: usize) -> pspat_sched::AnyScheduler {
    let mut c = SchedulerConfig::new(AlgKind::Fifo);
    c.capacity = capacity;
    c.build(FlowTable::uniform(1).unwrap()).unwrap()
}

fn sub(cookie: u64) -> Submission {
    Submission {
        flow: FlowId(0),
        len: 60,
        cookie,
        ect: false,
    }
}

/// Resident memory of this process, from `/proc/self/status` (None where
/// there is no procfs).
fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Creates and drops `rounds` clients one after the other on a runtime with
/// the default `max_clients` (1024); every 7th submits a few packets; then
/// checks that memory stayed flat and every packet is accounted for.
fn churn(tx_mode: TxMode, dispatchers: usize, rounds: u64) {
    let mut cfg = RuntimeConfig::default();
    cfg.tx_mode = tx_mode;
    cfg.dispatchers = dispatchers;
    cfg.descriptors_per_client = 64;
    assert_eq!(cfg.max_clients, 1024);
    let rt = Runtime::start(cfg, fifo(1 << 16), |_| NullTx::new()).unwrap();
    let mut ids = BTreeSet::new();
    let mut accepted = 0u64;
    let mut rss_at_fifth = None;
    for i in 0..rounds {
        let mut c = match rt.client() {
            Ok(c) => c,
            Err(e) => panic!("client {i} refused: {e}"),
        };
        ids.insert(c.id());
        if i % 7 == 0 {
            for k in 0..3 {
                let mut s = sub(k);
                loop {
                    match c.submit(s) {
                        Ok(_) => break,
                        Err(SubmitError::Full(p)) => {
                            s = p;
                            c.wait_for_room(Duration::from_millis(10));
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                accepted += 1;
            }
        }
        drop(c);
        if i % (rounds / 10).max(1) == 0 {
            let s = rt.stats();
            assert!(s.conserved(), "client {i}: {s:?}");
            assert!(s.clients.len() <= 1024);
            if i == rounds / 5 {
                rss_at_fifth = rss_kib();
            }
        }
    }
    assert!(ids.len() <= 1024, "{} distinct ids", ids.len());
    assert!(ids.iter().all(|&id| id < 1024));
    if let (Some(a), Some(b)) = (rss_at_fifth, rss_kib()) {
        // Without reuse every dead client kept ~22 kB (and its mailbox):
        // 80 000 of them would be well over 1 GB.
        assert!(b < a + 64 * 1024, "RSS grew from {a} KiB to {b} KiB");
    }
    let done = rt.shutdown().unwrap();
    let s = &done.stats;
    assert!(s.conserved(), "{s:?}");
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.submitted, accepted);
    assert_eq!(s.transmitted, accepted);
    assert_eq!(s.departed.clients + s.clients.len() as u64, rounds);
    assert!(s.departed.clients > 0, "no slot was ever handed on");
    assert!(done.error.is_none());
}

#[test]
fn a_hundred_thousand_clients_come_and_go_through_1024_slots() {
    churn(TxMode::Dispatcher, 0, 100_000);
}

#[test]
fn clients_come_and_go_with_a_dispatcher() {
    churn(TxMode::Dispatcher, 1, 20_000);
}

#[test]
fn clients_come_and_go_in_client_transmit_mode() {
    churn(TxMode::Client, 0, 20_000);
}

/// Concurrent churn: 8 threads each create and drop clients, submitting a
/// burst each time, while the main thread checks conservation in snapshots.
#[test]
fn concurrent_churn_conserves_every_packet() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 16;
    cfg.descriptors_per_client = 64;
    cfg.dispatchers = 1;
    let rt = std::sync::Arc::new(Runtime::start(cfg, fifo(1 << 16), |_| NullTx::new()).unwrap());
    let workers: Vec<_> = (0..8u64)
        .map(|t| {
            let rt = std::sync::Arc::clone(&rt);
            std::thread::spawn(move || {
                let mut accepted = 0u64;
                for i in 0..2_000u64 {
                    let mut c = rt.client().expect("a slot within the wait");
                    let burst: Vec<Submission> = (0..(i % 9)).map(|k| sub(t << 32 | k)).collect();
                    accepted += c.submit_burst(&burst).accepted as u64;
                }
                accepted
            })
        })
        .collect();
    while !workers.iter().all(|w| w.is_finished()) {
        let s = rt.stats();
        assert!(s.conserved(), "{s:?}");
        assert!(s.clients.len() <= 16);
        std::thread::sleep(Duration::from_millis(1));
    }
    let accepted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let rt = std::sync::Arc::into_inner(rt).unwrap();
    let done = rt.shutdown().unwrap();
    let s = &done.stats;
    assert!(s.conserved(), "{s:?}");
    assert_eq!(
        (s.submitted, s.transmitted, s.in_flight),
        (accepted, accepted, 0)
    );
    assert_eq!(s.departed.clients + s.clients.len() as u64, 16_000);
}

/// A slot is handed on only after its last packet left: with one slot and
/// a slow link, a new client is refused while the old one's packets are
/// queued, and gets the same id, with fresh figures, once they were sent.
#[test]
fn a_slot_is_reused_only_after_its_packets_left() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 1;
    cfg.descriptors_per_client = 64;
    cfg.rate_bps = Some(1_000_000); // 480 µs per 60-byte packet
    let mut rt = ManualRuntime::new(cfg, fifo(64), |_| NullTx::new()).unwrap();
    let mut a = rt.client().unwrap();
    for k in 0..3 {
        a.submit(sub(k)).unwrap();
    }
    drop(a);
    let mut now = Instant::ZERO;
    rt.round(now); // collects 3, sends 1, retires the abandoned mailbox
    assert!(matches!(
        rt.client(),
        Err(RuntimeError::TooManyClients { max: 1 })
    ));
    let s = rt.stats();
    assert_eq!((s.clients.len(), s.clients[0].in_flight), (1, 2));
    now = rt.run_until_idle(now, 100);
    let mut b = rt.client().expect("the slot is quiescent now");
    assert_eq!(b.id(), 0);
    let s = rt.stats();
    assert_eq!(s.departed.clients, 1);
    assert_eq!((s.departed.submitted, s.departed.transmitted), (3, 3));
    assert_eq!(s.clients.len(), 1);
    assert_eq!((s.clients[0].submitted, s.clients[0].transmitted), (0, 0));
    b.submit(sub(10)).unwrap();
    b.submit(sub(11)).unwrap();
    assert_eq!(rt.stats().clients[0].submitted, 2);
    drop(b);
    let done = rt.finish(now).unwrap();
    let s = &done.stats;
    assert!(s.conserved(), "{s:?}");
    assert_eq!((s.submitted, s.transmitted, s.in_flight), (5, 5, 0));
    assert_eq!(s.clients[0].transmitted, 2);
}

/// Live clients are never displaced: with every slot held by a live client,
/// a new one is refused (after the wait), and one drop makes room.
#[test]
fn live_clients_keep_their_slots() {
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 4;
    let rt = Runtime::start(cfg, fifo(64), |_| NullTx::new()).unwrap();
    let mut held: Vec<_> = (0..4).map(|_| rt.client().unwrap()).collect();
    assert!(matches!(
        rt.client(),
        Err(RuntimeError::TooManyClients { max: 4 })
    ));
    let gone = held.remove(1).id();
    let again = rt.client().unwrap();
    assert_eq!(again.id(), gone);
    let mut ids: Vec<u32> = held.iter().map(|c| c.id()).collect();
    ids.push(again.id());
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2, 3]);
    drop(held);
    drop(again);
    let done = rt.shutdown().unwrap();
    assert!(done.stats.conserved());
}
