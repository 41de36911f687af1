//! A node of several links: placement by weighted HRW, links added and
//! removed while traffic flows, per-flow order and conservation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pspat::node::{LinkId, Node, NodeClient};
use pspat::{RuntimeConfig, Submission, SubmitError, TxBackend, TxPacket};
use pspat_sched::{AlgKind, FlowId, FlowTable, Instant, SchedulerConfig};

const FLOWS: u32 = 3000;

/// Checks per-flow order across every link (cookie = the flow's sequence).
#[derive(Clone, Default)]
struct FlowOrder {
    next: Arc<Mutex<HashMap<u32, u64>>>,
    reorders: Arc<Mutex<u64>>,
}

impl TxBackend for FlowOrder {
    fn transmit(&mut self, _now: Instant, pkts: &[TxPacket]) {
        let mut next = self.next.lock().unwrap();
        for p in pkts {
            let n = next.entry(p.flow.0).or_insert(0);
            if p.cookie < *n {
                *self.reorders.lock().unwrap() += 1;
            }
            *n = (*n).max(p.cookie + 1);
        }
    }
}

fn sched() -> pspat_sched::AnyScheduler {
    let mut c = SchedulerConfig::new(AlgKind::Drr);
    c.capacity = 1 << 16;
    c.build(FlowTable::uniform(FLOWS as usize).unwrap())
        .unwrap()
}

fn add(node: &Node<FlowOrder>, rec: &FlowOrder) -> LinkId {
    add_at(node, rec, None)
}

fn add_at(node: &Node<FlowOrder>, rec: &FlowOrder, rate_bps: Option<u64>) -> LinkId {
    let r = rec.clone();
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 4;
    cfg.rate_bps = rate_bps;
    node.add_link(cfg, sched(), move |_| r.clone()).unwrap()
}

fn send(c: &mut NodeClient<FlowOrder>, flow: u32, seq: &mut [u64]) {
    let mut s = Submission {
        flow: FlowId(flow),
        len: 100,
        cookie: seq[flow as usize],
        ect: false,
    };
    loop {
        match c.submit(s) {
            Ok(_) => break,
            Err(SubmitError::Full(back)) => {
                s = back;
                c.wait_for_room(FlowId(flow), Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
    seq[flow as usize] += 1;
}

/// Waits until nothing this client sent is in flight on any link (all
/// transmitted), by sending nothing for a while.
fn settle() {
    std::thread::sleep(Duration::from_millis(50));
}

#[test]
fn adding_a_link_moves_about_one_in_k_plus_one_flows_all_to_it() {
    let rec = FlowOrder::default();
    let node = Node::new();
    add(&node, &rec);
    add(&node, &rec);
    let mut c = node.client();
    let mut seq = vec![0u64; FLOWS as usize];
    for f in 0..FLOWS {
        send(&mut c, f, &mut seq);
    }
    let before: Vec<LinkId> = (0..FLOWS).map(|f| c.link_of(FlowId(f)).unwrap()).collect();
    let per_link = |v: &[LinkId], l| v.iter().filter(|&&x| x == l).count();
    assert!(
        per_link(&before, 0) > 1300 && per_link(&before, 1) > 1300,
        "balanced"
    );
    let new = add(&node, &rec);
    settle();
    // The next call sees the new membership and re-targets every flow.
    send(&mut c, 0, &mut seq);
    settle();
    // Nothing is in flight any more: the first moved flow's next packet
    // meets a boundary and goes to the new link.
    let first_moved = (0..FLOWS)
        .find(|&f| c.target_of(FlowId(f)) != Some(before[f as usize]))
        .expect("some flow moves");
    send(&mut c, first_moved, &mut seq);
    assert_eq!(
        c.link_of(FlowId(first_moved)),
        Some(new),
        "a moved flow goes to its target at a boundary"
    );
    // One more packet per flow: placement follows the new membership.
    for f in 0..FLOWS {
        send(&mut c, f, &mut seq);
    }
    let target: Vec<LinkId> = (0..FLOWS)
        .map(|f| c.target_of(FlowId(f)).unwrap())
        .collect();
    let moved: Vec<usize> = (0..FLOWS as usize)
        .filter(|&f| before[f] != target[f])
        .collect();
    let fraction = moved.len() as f64 / f64::from(FLOWS);
    assert!((fraction - 1.0 / 3.0).abs() < 0.04, "moved {fraction}");
    assert!(
        moved.iter().all(|&f| target[f] == new),
        "only onto the new link"
    );
    // Each flow is on its old link or, after a boundary, on its target.
    for f in 0..FLOWS as usize {
        let now = c.link_of(FlowId(f as u32)).unwrap();
        assert!(now == before[f] || now == target[f]);
    }
    drop(c);
    let done = node.shutdown().unwrap();
    assert_eq!(done.len(), 3);
    let sent: u64 = done.iter().map(|(_, f)| f.stats.transmitted).sum();
    assert_eq!(sent, 2 * u64::from(FLOWS) + 2);
    assert!(done
        .iter()
        .all(|(_, f)| f.stats.conserved() && f.stats.in_flight == 0));
    assert_eq!(*rec.reorders.lock().unwrap(), 0);
}

#[test]
fn links_added_and_removed_under_traffic_keep_order_and_lose_nothing() {
    // Slow links (100-byte packets take 40 µs at 20 Mbit/s): each burst
    // queues on its links, so a flow moved before its queued packets left
    // would be reordered; the pauses between bursts are the boundaries.
    let rate = Some(20_000_000);
    let rec = FlowOrder::default();
    let node = Arc::new(Node::new());
    let first = add_at(&node, &rec, rate);
    add_at(&node, &rec, rate);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (node, stop) = (Arc::clone(&node), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut c = node.client();
            let mut seq = vec![0u64; FLOWS as usize];
            let mut rng = fastrand::Rng::with_seed(7);
            let mut n = 0u64;
            let mut cycle = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Ten bursts faster than the links: a backlog of a few ms.
                for _ in 0..10 {
                    for _ in 0..40 {
                        send(&mut c, rng.u32(0..16), &mut seq);
                        n += 1;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                // Mostly too short for the backlog to drain; now and then
                // long enough (a flowlet boundary for every flow).
                cycle += 1;
                let pause = if cycle.is_multiple_of(4) { 30 } else { 2 };
                std::thread::sleep(Duration::from_millis(pause));
            }
            (n, c.held_links())
        })
    };
    std::thread::sleep(Duration::from_millis(150));
    let third = add_at(&node, &rec, rate);
    std::thread::sleep(Duration::from_millis(200));
    node.remove_link(first).unwrap();
    assert!(node.remove_link(first).is_err(), "removed twice");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, held) = sender.join().unwrap();
    assert!(
        !held.contains(&first),
        "the removed link was let go: {held:?}"
    );
    assert!(held.contains(&third));
    let reaped = node.reap().unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].0, first);
    let node = Arc::try_unwrap(node).ok().unwrap();
    let mut done = node.shutdown().unwrap();
    done.extend(reaped);
    let transmitted: u64 = done.iter().map(|(_, f)| f.stats.transmitted).sum();
    let dropped: u64 = done.iter().map(|(_, f)| f.stats.dropped).sum();
    assert_eq!((transmitted, dropped), (sent, 0));
    assert!(done
        .iter()
        .all(|(_, f)| f.stats.conserved() && f.stats.in_flight == 0));
    assert_eq!(
        *rec.reorders.lock().unwrap(),
        0,
        "no flow reordered by a move"
    );
    let third_stats = done.iter().find(|(l, _)| *l == third).unwrap();
    assert!(
        third_stats.1.stats.transmitted > 0,
        "the added link carried traffic"
    );
}

#[test]
fn a_node_without_links_refuses_with_closed() {
    let node: Node<FlowOrder> = Node::new();
    let mut c = node.client();
    let s = Submission {
        flow: FlowId(1),
        len: 60,
        cookie: 0,
        ect: false,
    };
    assert!(matches!(c.submit(s), Err(SubmitError::Closed(_))));
    drop(c);
    assert!(node.shutdown().unwrap().is_empty());
}
