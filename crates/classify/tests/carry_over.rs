//! Dynamic queues and instances carried from one classifier to the next
//! (`Classifier::carry_dynamic_from`), through the public API: a rule
//! change moves no flow; a coarser mask sends each old queue to the queue
//! its flows get; a finer one sends each old queue to one new queue; a
//! sched mask moves flows between instances.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};

use pspat_classify::{
    Classifier, ClassifierLimits, FlowOwner, LinkMoves, OverflowPolicy, PacketKey, Placement,
    Verdict,
};
use pspat_sched::{FlowId, Instant};

fn classifier(text: &str, limits: &ClassifierLimits) -> Classifier {
    let plan = pspat_config::parse_ipfw(text, "t.ipfw")
        .unwrap()
        .validate(&pspat_config::NoProfiles)
        .unwrap();
    Classifier::from_plan(&plan, limits).unwrap()
}

fn limits(queues: u32, instances: u32) -> ClassifierLimits {
    ClassifierLimits {
        queues_per_flowset: queues,
        instances_per_sched: instances,
        idle_expiry_ns: 1_000_000_000,
        ..ClassifierLimits::default()
    }
}

/// UDP from 10.199.`net`.`host`, port `port` to 10.199.9.9 port 7000.
fn key(net: u8, host: u8, port: u16) -> PacketKey {
    PacketKey::new(
        IpAddr::V4(Ipv4Addr::new(10, 199, net, host)),
        IpAddr::V4(Ipv4Addr::new(10, 199, 9, 9)),
        17,
        port,
        7000,
    )
}

fn keys() -> Vec<PacketKey> {
    let mut out = Vec::new();
    for net in 1..=3 {
        for host in 1..=3 {
            for port in [5001, 5002] {
                out.push(key(net, host, port));
            }
        }
    }
    out
}

fn place(c: &mut Classifier, at: u64, k: &PacketKey) -> Placement {
    match c.classify(Instant::from_nanos(at), k, 100) {
        Verdict::Enqueue(p) => p,
        v => panic!("{k:?}: {v:?}"),
    }
}

const SCHED: &str = "sched 4 config type qfq bw 8Mbit/s";

fn plan_text(sched_mask: &str, queue_mask: &str, extra: &str) -> String {
    format!(
        "{SCHED} {sched_mask}\n\
         queue 41 config sched 4 weight 2 {queue_mask}\n\
         add 100 queue 41 udp from any to any\n{extra}"
    )
}

/// Classifies every key in `old` (each once, 1 ms apart), builds `new`,
/// carries, and returns the old placements, the moves and the classifier.
fn carried(
    old_text: &str,
    new_text: &str,
    lim: &ClassifierLimits,
) -> (Vec<Placement>, LinkMoves, Classifier) {
    let mut old = classifier(old_text, lim);
    let before: Vec<Placement> = keys()
        .iter()
        .enumerate()
        .map(|(i, k)| place(&mut old, i as u64 * 1_000_000, k))
        .collect();
    let mut new = classifier(new_text, lim);
    let carry = new.carry_dynamic_from(&old);
    let moves = carry.link(4).expect("link 4 in both").clone();
    (before, moves, new)
}

#[test]
fn a_rule_change_keeps_every_dynamic_queue_and_instance() {
    let lim = limits(64, 8);
    let old_text = plan_text("mask src-ip 0xffffff00", "mask src-ip 0xffffffff", "");
    let new_text = plan_text(
        "mask src-ip 0xffffff00",
        "mask src-ip 0xffffffff",
        "add 50 deny tcp from any to any\n",
    );
    let (before, moves, mut new) = carried(&old_text, &new_text, &lim);
    assert!(!moves.remasked);
    let at = 100_000_000;
    for (k, b) in keys().iter().zip(&before) {
        let p = place(&mut new, at, k);
        assert_eq!((p.instance, p.flow), (b.instance, b.flow), "{k:?}");
        assert!(!p.new_queue, "{k:?} found its queue again");
        // Every id goes to itself.
        assert_eq!(moves.get(b.instance, b.flow), Some((b.instance, b.flow)));
    }
    // The counters of the tables came along.
    assert_eq!(new.flowset_stats(41).unwrap().created, 9);
    assert_eq!(new.instance_stats(4).unwrap().created, 3);
}

#[test]
fn a_coarser_flow_mask_sends_each_queue_to_the_queue_its_flows_get() {
    let lim = limits(64, 8);
    // Old: one queue per (source, port); new: one per source.
    let old_text = plan_text("", "mask src-ip 0xffffffff src-port 0xffff", "");
    let new_text = plan_text("", "mask src-ip 0xffffffff", "");
    let (before, moves, mut new) = carried(&old_text, &new_text, &lim);
    assert!(moves.remasked);
    assert_eq!(moves.keyed(), 18);
    let at = 100_000_000;
    let mut merged: HashMap<FlowId, HashSet<FlowId>> = HashMap::new();
    for (k, b) in keys().iter().zip(&before) {
        let p = place(&mut new, at, k);
        assert!(!p.new_queue, "{k:?}: its queue was carried over");
        assert_eq!(moves.get(b.instance, b.flow), Some((p.instance, p.flow)));
        merged.entry(p.flow).or_default().insert(b.flow);
    }
    // Nine sources, two old queues each.
    assert_eq!(merged.len(), 9);
    assert!(merged.values().all(|old| old.len() == 2), "{merged:?}");
}

#[test]
fn a_finer_flow_mask_sends_each_old_queue_to_one_new_queue() {
    let lim = limits(64, 8);
    // Old: one queue per /24; new: one per source.
    let old_text = plan_text("", "mask src-ip 0xffffff00", "");
    let new_text = plan_text("", "mask src-ip 0xffffffff", "");
    let (before, moves, mut new) = carried(&old_text, &new_text, &lim);
    assert!(moves.remasked);
    assert_eq!(moves.keyed(), 3);
    let mut to: HashMap<FlowId, FlowId> = HashMap::new();
    for b in &before {
        let (i, f) = moves.get(b.instance, b.flow).unwrap();
        assert_eq!(i, 0);
        // All packets of one old queue go to one new queue.
        assert_eq!(*to.entry(b.flow).or_insert(f), f);
    }
    let targets: HashSet<FlowId> = to.values().copied().collect();
    assert_eq!(targets.len(), 3, "distinct old queues stay apart");
    // Each new queue is the one of the /24's zero host (the bits the old
    // mask dropped): the flows' own packets get their own queues.
    for net in 1..=3u8 {
        let p = place(&mut new, 200_000_000, &key(net, 0, 5001));
        assert!(!p.new_queue);
        assert!(targets.contains(&p.flow));
        let own = place(&mut new, 200_000_000, &key(net, 1, 5001));
        assert!(own.new_queue);
        assert!(!targets.contains(&own.flow));
    }
}

#[test]
fn a_sched_mask_change_moves_flows_between_instances() {
    let lim = limits(64, 8);
    // Old: one instance per /24 (three), a queue per source in each;
    // new: one instance in all (the mask keeps only the /16).
    let old_text = plan_text("mask src-ip 0xffffff00", "mask src-ip 0xffffffff", "");
    let new_text = plan_text("mask src-ip 0xffff0000", "mask src-ip 0xffffffff", "");
    let (before, moves, mut new) = carried(&old_text, &new_text, &lim);
    assert!(moves.remasked);
    let instances: HashSet<u32> = before.iter().map(|b| b.instance).collect();
    assert_eq!(instances.len(), 3);
    for (k, b) in keys().iter().zip(&before) {
        let p = place(&mut new, 100_000_000, k);
        assert!(!p.new_queue);
        assert_eq!(moves.get(b.instance, b.flow), Some((p.instance, p.flow)));
    }
    assert_eq!(new.instance_stats(4).unwrap().live, 1);
    // And back: a finer sched mask splits nothing it cannot place.
    let mut back = classifier(&old_text, &lim);
    let carry = back.carry_dynamic_from(&new);
    let m = carry.link(4).unwrap();
    for (k, b) in keys().iter().zip(&before) {
        let p = place(&mut new, 100_000_000, k);
        assert!(m.get(p.instance, p.flow).is_some(), "{k:?} {b:?}");
    }
}

#[test]
fn masks_added_and_removed() {
    let lim = limits(64, 8);
    // An unmasked flowset becomes masked: its one queue is the zero key's.
    let (before, moves, mut new) = carried(
        &plan_text("", "", ""),
        &plan_text("", "mask src-ip 0xffffffff", ""),
        &lim,
    );
    let (i, f) = moves.get(0, before[0].flow).unwrap();
    assert_eq!(i, 0);
    let zero = PacketKey::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        17,
        0,
        0,
    );
    assert_eq!(place(&mut new, 50_000_000, &zero).flow, f);
    // A masked flowset and a masked sched lose their masks: everything
    // goes to the one queue of the one instance.
    let (before, moves, mut new) = carried(
        &plan_text("mask src-ip 0xffffff00", "mask src-ip 0xffffffff", ""),
        &plan_text("", "", ""),
        &lim,
    );
    let one = place(&mut new, 50_000_000, &keys()[0]);
    for b in &before {
        assert_eq!(
            moves.get(b.instance, b.flow),
            Some((one.instance, one.flow))
        );
    }
    // Overflow: the new table is too small; under the shared policy the
    // rest goes to the overflow queue, under Drop nowhere.
    for policy in [OverflowPolicy::SharedQueue, OverflowPolicy::Drop] {
        let lim = ClassifierLimits {
            overflow: policy,
            ..limits(4, 8)
        };
        let old_text = plan_text("", "mask src-ip 0xffffffff src-port 0xffff", "");
        let mut old = classifier(
            &old_text,
            &ClassifierLimits {
                queues_per_flowset: 64,
                ..lim.clone()
            },
        );
        let before: Vec<Placement> = keys().iter().map(|k| place(&mut old, 0, k)).collect();
        let new_text = plan_text("", "mask src-ip 0xffffffff", "");
        let mut new = classifier(&new_text, &lim);
        let carry = new.carry_dynamic_from(&old);
        let m = carry.link(4).unwrap();
        assert_eq!(carry.carried + carry.full, 18);
        assert_eq!(new.flowset_stats(41).unwrap().live, 4);
        let (_, range) = new.layout().range_of(FlowOwner::Queue(41)).unwrap();
        let placed: Vec<Option<(u32, FlowId)>> =
            before.iter().map(|b| m.get(b.instance, b.flow)).collect();
        let overflowed = placed
            .iter()
            .filter(|p| p.is_some() && p.map(|p| p.1) == range.overflow)
            .count();
        let none = placed.iter().filter(|p| p.is_none()).count();
        match policy {
            OverflowPolicy::SharedQueue => assert_eq!((overflowed, none), (10, 0)),
            OverflowPolicy::Drop => assert_eq!((overflowed, none), (0, 10)),
        }
    }
}

#[test]
fn a_flowset_moved_or_deleted_has_no_place() {
    let lim = limits(64, 8);
    let (before, moves, _) = carried(
        &plan_text("", "mask src-ip 0xffffffff", "queue 42 config sched 4\n"),
        "sched 4 config type qfq bw 8Mbit/s\nqueue 42 config sched 4\nadd 100 queue 42 ip from any to any\n",
        &lim,
    );
    assert!(before
        .iter()
        .all(|b| moves.get(b.instance, b.flow).is_none()));
}

#[test]
fn a_carried_packet_placed_by_its_own_key_joins_its_flow_s_next_packets() {
    let lim = limits(64, 8);
    // Finer flow masks (a /24's queue, an unmasked flowset) and finer
    // sched masks (one instance, one per /24): each old packet placed by
    // its own key goes to the instance and queue the flow's next packet
    // gets; the per-queue move sends it there only for the zero key.
    for (old_text, new_text) in [
        (
            plan_text("", "mask src-ip 0xffffff00", ""),
            plan_text("", "mask src-ip 0xffffffff", ""),
        ),
        (
            plan_text("", "", ""),
            plan_text("", "mask src-ip 0xffffffff src-port 0xffff", ""),
        ),
        (
            plan_text("", "", ""),
            plan_text("mask src-ip 0xffffff00", "mask src-ip 0xffffffff", ""),
        ),
    ] {
        let (before, moves, mut new) = carried(&old_text, &new_text, &lim);
        assert!(moves.remasked, "{new_text}");
        let placed: Vec<(u32, FlowId)> = keys()
            .iter()
            .zip(&before)
            .map(|(k, b)| {
                assert_eq!(moves.owner(b.flow), Some(FlowOwner::Queue(41)));
                new.place_carried(&moves, b.flow, k).expect("a slot")
            })
            .collect();
        let mut differ = 0;
        for ((k, b), to) in keys().iter().zip(&before).zip(&placed) {
            let p = place(&mut new, 300_000_000, k);
            assert!(!p.new_queue, "{k:?}: its entry came with its packet");
            assert_eq!((p.instance, p.flow), *to, "{k:?} in {new_text}");
            differ += usize::from(moves.get(b.instance, b.flow) != Some(*to));
        }
        assert!(differ > 0, "{new_text}: the whole-queue move is not exact");
    }
    // A flowset with no place on the link (deleted): nowhere.
    let (before, moves, mut new) = carried(
        &plan_text("", "mask src-ip 0xffffffff", "queue 42 config sched 4\n"),
        "sched 4 config type qfq bw 8Mbit/s\nqueue 42 config sched 4\nadd 100 queue 42 ip from any to any\n",
        &lim,
    );
    for (k, b) in keys().iter().zip(&before) {
        assert_eq!(moves.owner(b.flow), None);
        assert_eq!(new.place_carried(&moves, b.flow, k), None);
    }
}

#[test]
fn carried_packets_beyond_the_table_go_to_the_overflow_queue_or_nowhere() {
    for policy in [OverflowPolicy::SharedQueue, OverflowPolicy::Drop] {
        let lim = ClassifierLimits {
            overflow: policy,
            ..limits(4, 8)
        };
        let (before, moves, mut new) = carried(
            &plan_text("", "", ""),
            &plan_text("", "mask src-ip 0xffffffff src-port 0xffff", ""),
            &lim,
        );
        let (_, range) = new.layout().range_of(FlowOwner::Queue(41)).unwrap();
        let overflow = range.overflow;
        let placed: Vec<Option<(u32, FlowId)>> = keys()
            .iter()
            .zip(&before)
            .map(|(k, b)| new.place_carried(&moves, b.flow, k))
            .collect();
        // 18 keys, 4 slots, one taken by the old queue's zero key.
        let own = placed
            .iter()
            .filter(|p| p.is_some() && p.map(|p| p.1) != overflow)
            .count();
        assert_eq!(own, 3, "{placed:?}");
        match policy {
            OverflowPolicy::SharedQueue => {
                assert!(placed[3..].iter().all(|p| p.map(|p| p.1) == overflow))
            }
            OverflowPolicy::Drop => assert!(placed[3..].iter().all(Option::is_none)),
        }
    }
}
