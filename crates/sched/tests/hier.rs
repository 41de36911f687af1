//! Hierarchies: a simulated link drives a 3-level tree and checks HTB's
//! promises (guarantees, ceilings, excess by weight), `next_eligible`, leaf
//! policies, and that every bad description is refused with an error naming
//! the node and field.

use std::collections::HashMap;

use pspat_sched::{
    AlgKind, ConfigError, FlowId, FlowParams, FlowTable, Hierarchy, HierarchyConfig, Instant,
    NodeConfig, Packet, Scheduler, SchedulerConfig,
};

const M: i64 = 1_000_000;

/// root 100 Mbit/s
/// ├── A  rate 30 ceil 100 w1
/// │   ├── A1 rate 20 ceil 100 w1 ─┬─ a1x rate 10, 2 flows (w 1 and 3), drr
/// │   │                           └─ a1y rate 10, 1 flow, fifo
/// │   └── A2 rate 10 ceil 100 w1 ─── a2x rate 10, 1 flow
/// ├── B  rate 20 ceil 100 w3 ─── B1 rate 20 ─── b1x rate 20, 2 flows
/// └── C  rate 10 ceil 25  w4 ─── C1 rate 10 ceil 25 ─── c1x rate 10 ceil 25, 1 flow
///
/// Flows: a1x {0, 1}, a1y {2}, a2x {3}, b1x {4, 5}, c1x {6}.
fn tree() -> HierarchyConfig {
    let mut a1x = NodeConfig::leaf("a1x", "A1", 10 * M, 100 * M, 1, 2);
    a1x.leaf_alg = Some("drr".into());
    let mut a1y = NodeConfig::leaf("a1y", "A1", 10 * M, 100 * M, 1, 1);
    a1y.leaf_alg = Some("fifo".into());
    HierarchyConfig::new(vec![
        NodeConfig::root("root", 100 * M),
        NodeConfig::inner("A", "root", 30 * M, 100 * M, 1),
        NodeConfig::inner("A1", "A", 20 * M, 100 * M, 1),
        a1x,
        a1y,
        NodeConfig::inner("A2", "A", 10 * M, 100 * M, 1),
        NodeConfig::leaf("a2x", "A2", 10 * M, 100 * M, 1, 1),
        NodeConfig::inner("B", "root", 20 * M, 100 * M, 3),
        NodeConfig::inner("B1", "B", 20 * M, 100 * M, 1),
        NodeConfig::leaf("b1x", "B1", 20 * M, 100 * M, 1, 2),
        NodeConfig::inner("C", "root", 10 * M, 25 * M, 4),
        NodeConfig::inner("C1", "C", 10 * M, 25 * M, 1),
        NodeConfig::leaf("c1x", "C1", 10 * M, 25 * M, 1, 1),
    ])
}

fn flows() -> FlowTable {
    let mut f = vec![FlowParams::weighted(1); 7];
    f[1].weight = 3;
    FlowTable::new(f).unwrap()
}

fn build(cfg: &HierarchyConfig) -> Hierarchy {
    Hierarchy::new(cfg, flows(), 4096, 1500).unwrap()
}

/// What a simulation saw.
struct Trace {
    /// (departure time ns, flow, len) in order.
    departures: Vec<(u64, u32, u32)>,
}

impl Trace {
    /// Bytes of each node in [from, to), by node name.
    fn bytes(&self, h: &Hierarchy, from: u64, to: u64) -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for &(t, f, len) in &self.departures {
            if t < from || t >= to {
                continue;
            }
            for n in h.path_of(FlowId(f)) {
                *out.entry(h.node_name(n).unwrap().to_string()).or_insert(0) += u64::from(len);
            }
        }
        out
    }
}

/// Drives `h` on a link of `link_bps` for `dur_ns`. A flow `f` is kept
/// backlogged (4 packets queued) while `active(f, now)`; packet lengths
/// cycle through 200..=1500 bytes. Checks per-flow order on the way.
fn simulate(
    h: &mut Hierarchy,
    link_bps: u64,
    dur_ns: u64,
    nflows: u32,
    active: impl Fn(u32, u64) -> bool,
) -> Trace {
    let mut queued = vec![0u32; nflows as usize];
    let mut last_token = vec![None::<u64>; nflows as usize];
    let mut token = 0u64;
    let mut now = 0u64;
    let mut departures = Vec::new();
    let mut lens = [200u32, 1500, 700, 1500, 64, 1200, 1500, 900]
        .iter()
        .cycle();
    while now < dur_ns {
        for f in 0..nflows {
            while active(f, now) && queued[f as usize] < 4 {
                let len = *lens.next().unwrap();
                h.enqueue(Instant::from_nanos(now), Packet::new(FlowId(f), len, token))
                    .expect("room");
                token += 1;
                queued[f as usize] += 1;
            }
        }
        match h.dequeue(Instant::from_nanos(now)) {
            Some(p) => {
                let f = p.flow.0;
                queued[f as usize] -= 1;
                let lt = &mut last_token[f as usize];
                assert!(lt.is_none_or(|t| t < p.token), "flow {f} reordered");
                *lt = Some(p.token);
                departures.push((now, f, p.len));
                now += (u64::from(p.len) * 8_000_000_000).div_ceil(link_bps);
            }
            None => {
                let held = h.queued();
                let next = match h.next_eligible(Instant::from_nanos(now)) {
                    Some(t) => t.as_nanos().max(now + 1),
                    None => {
                        assert_eq!(held, 0, "None with packets held and no next_eligible");
                        now + 1_000
                    }
                };
                // Flows switching on later must not be skipped over.
                now = next.min(now + 100_000);
            }
        }
    }
    Trace { departures }
}

const SEC: u64 = 1_000_000_000;

fn mbps(bytes: u64, ns: u64) -> f64 {
    bytes as f64 * 8.0 / ns as f64 * 1_000.0
}

/// All leaves backlogged, link faster than the root so the root shapes.
fn all_backlogged() -> (Hierarchy, HashMap<String, u64>, u64) {
    let cfg = tree();
    let mut h = build(&cfg);
    let trace = simulate(&mut h, 1_000_000_000, 6 * SEC, 7, |_, _| true);
    let (from, to) = (SEC, 6 * SEC);
    let bytes = trace.bytes(&h, from, to);
    (h, bytes, to - from)
}

#[test]
fn every_backlogged_node_receives_its_guarantee() {
    let cfg = tree();
    let (_h, bytes, window) = all_backlogged();
    for node in &cfg.nodes {
        let got = mbps(bytes[&node.name], window);
        let want = node.rate_bps as f64 / 1e6;
        assert!(
            got >= want * 0.99,
            "{} got {got:.3} Mbit/s, below its guarantee {want}",
            node.name
        );
    }
    // The root shapes a 1 Gbit/s link to its 100 Mbit/s.
    let root = mbps(bytes["root"], window);
    assert!((99.0..=100.01).contains(&root), "root at {root:.3} Mbit/s");
}

#[test]
fn excess_splits_by_weight_within_one_percent() {
    let (_h, bytes, window) = all_backlogged();
    let rate = |n: &str| mbps(bytes[n], window);
    // C is held at its 25 Mbit/s ceiling; A (w1) and B (w3) share the other
    // 100 - 30 - 20 - 25 = 25 Mbit/s of excess 1:3.
    let ex_a = rate("A") - 30.0;
    let ex_b = rate("B") - 20.0;
    assert!(
        (ex_b / ex_a / 3.0 - 1.0).abs() <= 0.01,
        "excess A {ex_a:.3}, B {ex_b:.3}: ratio {:.4}, want 3",
        ex_b / ex_a
    );
    assert!(
        (ex_a - 6.25).abs() <= 0.0625,
        "A's excess {ex_a:.3}, want 6.25"
    );
    // Inside A, A1 and A2 (equal weights) split A's excess evenly.
    let ex_a1 = rate("A1") - 20.0;
    let ex_a2 = rate("A2") - 10.0;
    assert!(
        (ex_a1 / ex_a2 - 1.0).abs() <= 0.01,
        "excess A1 {ex_a1:.3}, A2 {ex_a2:.3}"
    );
}

/// Largest bytes any node sent in any window of `w` ns starting at a
/// departure.
fn worst_window(trace: &Trace, h: &Hierarchy, node: &str, w: u64) -> u64 {
    let idx = h.node_index(node).unwrap();
    let mine: Vec<(u64, u64)> = trace
        .departures
        .iter()
        .filter(|&&(_, f, _)| h.path_of(FlowId(f)).any(|n| n == idx))
        .map(|&(t, _, len)| (t, u64::from(len)))
        .collect();
    let mut worst = 0;
    let mut j = 0;
    let mut sum = 0;
    for i in 0..mine.len() {
        while j < mine.len() && mine[j].0 < mine[i].0 + w {
            sum += mine[j].1;
            j += 1;
        }
        worst = worst.max(sum);
        sum -= mine[i].1;
    }
    worst
}

#[test]
fn no_node_exceeds_its_ceiling() {
    let cfg = tree();
    let mut h = build(&cfg);
    // C alone for a while (it could take the whole link but for its
    // ceiling), then everybody.
    let trace = simulate(&mut h, 1_000_000_000, 3 * SEC, 7, |f, now| {
        f == 6 || now > SEC
    });
    for node in &cfg.nodes {
        let ceil = node.ceil_bps.unwrap_or(node.rate_bps) as u64;
        // Ceiling bucket: 1 ms of the ceiling, at least two 1500 B packets.
        let cburst = (ceil / 8_000).max(3_000);
        for w in [100_000u64, 1_000_000, 10_000_000, 100_000_000, SEC] {
            let got = worst_window(&trace, &h, &node.name, w);
            let bound = ceil * w / 8 / SEC + cburst + 1_500;
            assert!(
                got <= bound,
                "{} sent {got} B in {w} ns, above ceil x window + burst = {bound} B",
                node.name
            );
        }
    }
    // And C alone really ran at its ceiling.
    let c = trace.bytes(&h, SEC / 10, SEC)["C"];
    let got = mbps(c, SEC - SEC / 10);
    assert!((24.75..=25.1).contains(&got), "C alone at {got:.3} Mbit/s");
}

#[test]
fn an_idle_leaf_gives_its_guarantee_to_its_siblings() {
    let cfg = tree();
    let mut h = build(&cfg);
    // a1y (flow 2) idle: a1x gets all of A1.
    let trace = simulate(&mut h, 1_000_000_000, 4 * SEC, 7, |f, _| f != 2);
    let bytes = trace.bytes(&h, SEC, 4 * SEC);
    let window = 3 * SEC;
    assert_eq!(bytes.get("a1y"), None);
    assert_eq!(bytes["a1x"], bytes["A1"]);
    let a1x = mbps(bytes["a1x"], window);
    assert!(a1x >= 20.0 * 0.99, "a1x got {a1x:.3}, below A1's guarantee");
    // Nothing else changed shares: A still gets 30 + 6.25.
    let a = mbps(bytes["A"], window);
    assert!((a - 36.25).abs() <= 0.37, "A at {a:.3} Mbit/s");
    // A whole tenant idle: its guarantee goes to the others by weight.
    let mut h = build(&cfg);
    let trace = simulate(&mut h, 1_000_000_000, 4 * SEC, 7, |f, _| f >= 4);
    let bytes = trace.bytes(&h, SEC, 4 * SEC);
    let b = mbps(bytes["B"], window);
    let c = mbps(bytes["C"], window);
    assert!((c - 25.0).abs() <= 0.25, "C at {c:.3}");
    assert!((b - 75.0).abs() <= 0.75, "B at {b:.3}");
}

#[test]
fn leaf_policies_drr_and_fifo_work_inside_leaves() {
    let cfg = tree();
    let mut h = build(&cfg);
    let trace = simulate(&mut h, 1_000_000_000, 3 * SEC, 7, |_, _| true);
    let mut per_flow = [0u64; 7];
    for &(t, f, len) in &trace.departures {
        if t >= SEC {
            per_flow[f as usize] += u64::from(len);
        }
    }
    // a1x is DRR over flows 0 (w1) and 1 (w3).
    let ratio = per_flow[1] as f64 / per_flow[0] as f64;
    assert!(
        (ratio / 3.0 - 1.0).abs() <= 0.02,
        "drr leaf split {ratio:.3}"
    );
    // a1y is FIFO over flow 2 alone: it got its leaf's service (order was
    // checked by `simulate`).
    let a1y = trace.bytes(&h, SEC, 3 * SEC)["a1y"];
    assert_eq!(a1y, per_flow[2]);
}

#[test]
fn next_eligible_is_exact_when_everything_is_rate_limited() {
    // 8 Mbit/s = 1 byte per µs at every level.
    let cfg = HierarchyConfig::new(vec![
        NodeConfig::root("root", 8 * M),
        NodeConfig::inner("t", "root", 8 * M, 8 * M, 1),
        NodeConfig::inner("v", "t", 4 * M, 8 * M, 1),
        NodeConfig::leaf("l", "v", 4 * M, 8 * M, 1, 1),
    ]);
    let mut h = Hierarchy::new(&cfg, FlowTable::uniform(1).unwrap(), 64, 1500).unwrap();
    for i in 0..40 {
        h.enqueue(Instant::ZERO, Packet::new(FlowId(0), 1000, i))
            .unwrap();
    }
    let mut now = 0u64;
    let mut sent = 0u64;
    let mut waits = 0;
    while !h.is_empty() {
        match h.dequeue(Instant::from_nanos(now)) {
            Some(p) => {
                sent += u64::from(p.len);
                // Never ahead of 1 B/µs beyond the 3000 B bucket and a packet.
                assert!(sent <= now / 1_000 + 3_000 + 1_000, "{sent} B by {now} ns");
            }
            None => {
                let t = h
                    .next_eligible(Instant::from_nanos(now))
                    .unwrap()
                    .as_nanos();
                assert!(t > now, "next_eligible {t} not after {now}");
                assert!(
                    h.dequeue(Instant::from_nanos(t - 1)).is_none(),
                    "a packet was eligible before next_eligible ({t})"
                );
                now = t;
                assert!(h.dequeue(Instant::from_nanos(now)).is_some_and(|p| {
                    sent += u64::from(p.len);
                    true
                }));
                waits += 1;
            }
        }
    }
    assert_eq!(sent, 40_000);
    assert!(waits >= 36, "only {waits} waits");
    // 40 kB at 1 B/µs with a 3 kB head start: about 37 ms.
    assert!((36_000_000..=37_100_000).contains(&now), "done at {now}");
    assert_eq!(h.next_eligible(Instant::from_nanos(now)), None);
}

fn err(cfg: &HierarchyConfig) -> String {
    cfg.validate().expect_err("must be refused").to_string()
}

fn assert_names(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} does not name {p:?}");
    }
}

#[test]
fn bad_descriptions_are_refused_naming_node_and_field() {
    let good = tree();
    assert!(good.validate().is_ok());
    let edit = |f: &dyn Fn(&mut Vec<NodeConfig>)| {
        let mut c = good.clone();
        f(&mut c.nodes);
        err(&c)
    };
    let pos = |c: &Vec<NodeConfig>, n: &str| c.iter().position(|x| x.name == n).unwrap();

    // A cycle: A1 -> a2x... no: A1 under A2 and A2 under A1.
    let m = edit(&|c| {
        let i = pos(c, "A1");
        c[i].parent = Some("A2".into());
        let j = pos(c, "A2");
        c[j].parent = Some("A1".into());
    });
    assert_names(&m, &["cycle", "parent"]);
    assert!(
        m.contains("\"A1\"") || m.contains("\"A2\"") || m.contains("a2x"),
        "{m}"
    );
    // Unknown parent.
    let m = edit(&|c| {
        let i = pos(c, "B1");
        c[i].parent = Some("nobody".into());
    });
    assert_names(&m, &["\"B1\"", "parent", "nobody"]);
    // Children guaranteed more than their parent.
    let m = edit(&|c| {
        let i = pos(c, "A2");
        c[i].rate_bps = 11 * M;
        let j = pos(c, "a2x");
        c[j].rate_bps = 11 * M;
    });
    assert_names(&m, &["\"A\"", "rate_bps", "30000000", "31000000"]);
    // Zero and negative rates.
    let m = edit(&|c| {
        let i = pos(c, "c1x");
        c[i].rate_bps = 0;
    });
    assert_names(&m, &["\"c1x\"", "rate_bps", "= 0"]);
    let m = edit(&|c| {
        let i = pos(c, "C");
        c[i].rate_bps = -5;
    });
    assert_names(&m, &["\"C\"", "rate_bps", "-5"]);
    // Ceiling below the rate, zero ceiling.
    let m = edit(&|c| {
        let i = pos(c, "B1");
        c[i].ceil_bps = Some(10 * M);
    });
    assert_names(&m, &["\"B1\"", "ceil_bps", "10000000"]);
    // Duplicate name.
    let m = edit(&|c| {
        let i = pos(c, "A2");
        c[i].name = "A1".into();
    });
    assert_names(&m, &["\"A1\"", "duplicate"]);
    // No root, several roots.
    let m = edit(&|c| c[0].parent = Some("A".into()));
    assert_names(&m, &["no root"]);
    let m = edit(&|c| {
        let i = pos(c, "B");
        c[i].parent = None;
    });
    assert_names(&m, &["several roots", "root", "B"]);
    // Leaf without flows; inner node with flows or a policy.
    let m = edit(&|c| {
        let i = pos(c, "a2x");
        c[i].flows = 0;
    });
    assert_names(&m, &["\"a2x\"", "flows", "at least one flow"]);
    let m = edit(&|c| {
        let i = pos(c, "A2");
        c[i].flows = 3;
    });
    assert_names(&m, &["\"A2\"", "flows"]);
    let m = edit(&|c| {
        let i = pos(c, "A2");
        c[i].leaf_alg = Some("fifo".into());
    });
    assert_names(&m, &["\"A2\"", "leaf_alg"]);
    // Unknown or recursive leaf policy.
    let m = edit(&|c| {
        let i = pos(c, "a2x");
        c[i].leaf_alg = Some("nope".into());
    });
    assert_names(&m, &["\"a2x\"", "leaf_alg", "nope", "drr"]);
    let m = edit(&|c| {
        let i = pos(c, "a2x");
        c[i].leaf_alg = Some("htb".into());
    });
    assert_names(&m, &["\"a2x\"", "leaf_alg", "hierarchy"]);
    // Zero weight, bad burst.
    let m = edit(&|c| {
        let i = pos(c, "B");
        c[i].weight = 0;
    });
    assert_names(&m, &["\"B\"", "weight"]);
    let m = edit(&|c| {
        let i = pos(c, "B");
        c[i].burst_ns = Some(0);
    });
    assert_names(&m, &["\"B\"", "burst_ns"]);
    // Too deep: a chain of 9 levels.
    let mut nodes = vec![NodeConfig::root("n0", 100 * M)];
    for i in 1..9 {
        let prev = format!("n{}", i - 1);
        nodes.push(NodeConfig::inner(&format!("n{i}"), &prev, M, M, 1));
    }
    nodes[8].flows = 1;
    let m = err(&HierarchyConfig::new(nodes.clone()));
    assert_names(&m, &["\"n8\"", "depth", "9"]);
    nodes.truncate(8);
    nodes[7].flows = 1;
    assert!(
        HierarchyConfig::new(nodes).validate().is_ok(),
        "8 levels are fine"
    );
    // Empty description.
    assert_names(
        &err(&HierarchyConfig::new(vec![])),
        &["hierarchy", "no nodes"],
    );
    // Flow count that does not match the table, and nothing panics.
    let e = Hierarchy::new(&good, FlowTable::uniform(3).unwrap(), 64, 1500)
        .err()
        .expect("mismatch");
    assert_names(&e.to_string(), &["7", "3", "flow"]);
    let e = SchedulerConfig {
        hierarchy: Some(good.clone()),
        ..SchedulerConfig::new(AlgKind::Hierarchy)
    }
    .build(FlowTable::uniform(8).unwrap())
    .err()
    .expect("mismatch");
    assert!(matches!(e, ConfigError::Invalid { .. }), "{e}");
}

#[test]
fn config_round_trips_through_json() {
    let cfg = tree();
    let json = serde_json::to_string_pretty(&cfg).unwrap();
    let back: HierarchyConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, cfg);
    // Optional fields may be left out.
    let short = r#"{"nodes": [
        {"name": "link", "rate_bps": 1000000000},
        {"name": "q", "parent": "link", "rate_bps": 1000, "ceil_bps": 1000000000, "flows": 2}
    ]}"#;
    let cfg: HierarchyConfig = serde_json::from_str(short).unwrap();
    assert_eq!(cfg.nodes[1].weight, 1);
    assert!(cfg.validate().is_ok());
    // A negative rate deserialises and is refused by name.
    let neg = short.replace("\"rate_bps\": 1000,", "\"rate_bps\": -1000,");
    let cfg: HierarchyConfig = serde_json::from_str(&neg).unwrap();
    assert_names(&err(&cfg), &["\"q\"", "rate_bps", "-1000"]);
    // A misspelt field is refused, naming it.
    let typo = short.replace("\"ceil_bps\"", "\"ceil\"");
    let e = serde_json::from_str::<HierarchyConfig>(&typo).unwrap_err();
    assert!(e.to_string().contains("ceil"), "{e}");
    // The scheduler config carries the tree.
    let sc = SchedulerConfig {
        hierarchy: Some(tree()),
        ..SchedulerConfig::new(AlgKind::Hierarchy)
    };
    let json = serde_json::to_string(&sc).unwrap();
    assert!(json.contains("\"htb\""), "{json}");
    let back: SchedulerConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, sc);
    assert_eq!(back.build(flows()).unwrap().name(), "htb");
}

#[test]
fn selectable_by_name_with_a_work_conserving_default() {
    for name in ["htb", "HIER", "hclock"] {
        assert_eq!(AlgKind::parse(name).unwrap(), AlgKind::Hierarchy);
    }
    assert_eq!(AlgKind::Hierarchy.name(), "htb");
    // Default tree: unlimited, weighted DRR over flows whatever `now` does.
    let weights = [1u32, 2, 3, 4, 1, 1, 5, 2, 8, 1, 3];
    let flows = FlowTable::new(weights.iter().map(|&w| FlowParams::weighted(w)).collect()).unwrap();
    let mut s = SchedulerConfig::new(AlgKind::Hierarchy)
        .build(flows)
        .unwrap();
    let mut token = 0;
    for f in 0..weights.len() as u32 {
        for _ in 0..4 {
            s.enqueue(Instant::ZERO, Packet::new(FlowId(f), 1000, token))
                .unwrap();
            token += 1;
        }
    }
    let mut served = [0u64; 11];
    for _ in 0..200_000 {
        let p = s.dequeue(Instant::ZERO).expect("work-conserving");
        served[p.flow.index()] += u64::from(p.len);
        s.enqueue(Instant::ZERO, Packet::new(p.flow, 1000, token))
            .unwrap();
        token += 1;
    }
    let total: u64 = served.iter().sum();
    let wsum: u32 = weights.iter().sum();
    for (f, &w) in weights.iter().enumerate() {
        let share = served[f] as f64 / total as f64;
        let want = f64::from(w) / f64::from(wsum);
        assert!(
            (share / want - 1.0).abs() <= 0.01,
            "flow {f} (w {w}) got {share:.4}, want {want:.4}"
        );
    }
    assert_eq!(s.next_eligible(Instant::ZERO), Some(Instant::ZERO));
}

#[test]
fn ten_thousand_leaves_three_levels_conserve_packets() {
    let cfg =
        HierarchyConfig::balanced(&[10, 10, 100], 1, pspat_sched::hier::UNLIMITED_BPS).unwrap();
    let mut h = Hierarchy::new(&cfg, FlowTable::uniform(10_000).unwrap(), 65_536, 1500).unwrap();
    assert_eq!(h.leaf_count(), 10_000);
    let mut rng = fastrand::Rng::with_seed(5);
    let mut held = 0usize;
    let mut out = 0u64;
    for i in 0..100_000u64 {
        let f = rng.u32(0..10_000);
        if h.enqueue(Instant::from_nanos(i), Packet::new(FlowId(f), 64, i))
            .is_ok()
        {
            held += 1;
        }
        if rng.bool() && h.dequeue(Instant::from_nanos(i)).is_some() {
            held -= 1;
            out += 1;
        }
        assert_eq!(h.queued(), held);
    }
    while h.dequeue(Instant::from_nanos(1 << 40)).is_some() {
        out += 1;
    }
    assert!(h.is_empty());
    assert!(out > 40_000);
}

/// A random 3-level tree obeying the rules: guarantees split (part of) the
/// parent's rate, ceilings between the rate and the link.
fn random_tree(rng: &mut fastrand::Rng) -> HierarchyConfig {
    let link = rng.i64(10..=1000) * M;
    let mut nodes = vec![NodeConfig::root("root", link)];
    let algs = ["fifo", "drr", "prio"];
    let tenants = rng.usize(1..4);
    for t in 0..tenants {
        let trate = (link / tenants as i64 * rng.i64(50..=100) / 100).max(1);
        let tname = format!("t{t}");
        nodes.push(NodeConfig::inner(
            &tname,
            "root",
            trate,
            rng.i64(trate..=link),
            rng.u32(1..8),
        ));
        let vms = rng.usize(1..4);
        for v in 0..vms {
            let vrate = (trate / vms as i64 * rng.i64(50..=100) / 100).max(1);
            let vname = format!("{tname}v{v}");
            nodes.push(NodeConfig::inner(
                &vname,
                &tname,
                vrate,
                rng.i64(vrate..=link),
                rng.u32(1..8),
            ));
            let leaves = rng.usize(1..4);
            for l in 0..leaves {
                let lrate = (vrate / leaves as i64 * rng.i64(50..=100) / 100).max(1);
                let mut leaf = NodeConfig::leaf(
                    &format!("{vname}l{l}"),
                    &vname,
                    lrate,
                    rng.i64(lrate..=link),
                    rng.u32(1..8),
                    rng.u32(1..4),
                );
                leaf.leaf_alg = Some(algs[rng.usize(0..3)].into());
                leaf.burst_ns = rng.bool().then(|| rng.u64(1_000..10_000_000));
                nodes.push(leaf);
            }
        }
    }
    HierarchyConfig::new(nodes)
}

#[test]
fn random_shaped_trees_conserve_order_and_never_stall() {
    for seed in [3u64, 11, 99, 2024, 77777] {
        check_random_tree(seed);
    }
}

#[test]
#[ignore = "stress"]
fn stress_hier_random_trees() {
    for seed in 0..300 {
        check_random_tree(seed);
    }
}

/// Random tree and arrivals: conservation, per-flow order, `next_eligible`
/// after every `None`, a full drain, and no node above its ceiling.
fn check_random_tree(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let cfg = random_tree(&mut rng);
    cfg.validate()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let nflows = cfg.total_flows() as u32;
    let table = FlowTable::new(
        (0..nflows)
            .map(|_| FlowParams {
                weight: rng.u32(1..10),
                lmax: 1500,
                priority: rng.u8(0..4),
            })
            .collect(),
    )
    .unwrap();
    let mut h = Hierarchy::new(&cfg, table, 512, 1500).unwrap();
    let mut now = 0u64;
    let mut token = 0u64;
    let mut accepted = 0u64;
    let mut last = vec![None::<u64>; nflows as usize];
    let mut out = 0u64;
    let mut trace = Trace {
        departures: Vec::new(),
    };
    let mut depart = |p: Packet, last: &mut Vec<Option<u64>>, now: u64| {
        trace.departures.push((now, p.flow.0, p.len));
        let l = &mut last[p.flow.index()];
        assert!(l.is_none_or(|t| t < p.token), "seed {seed}: reordered");
        *l = Some(p.token);
    };
    for _ in 0..30_000 {
        now += rng.u64(0..20_000);
        if rng.u8(0..10) < 5 {
            let f = rng.u32(0..nflows);
            for _ in 0..rng.usize(1..6) {
                let p = Packet::new(FlowId(f), rng.u32(64..=1500), token);
                token += 1;
                match h.enqueue(Instant::from_nanos(now), p) {
                    Ok(()) => accepted += 1,
                    Err(r) => assert_eq!(r.packet, p, "seed {seed}"),
                }
            }
        } else {
            match h.dequeue(Instant::from_nanos(now)) {
                Some(p) => {
                    out += 1;
                    depart(p, &mut last, now);
                }
                None if h.queued() > 0 => {
                    let t = h.next_eligible(Instant::from_nanos(now));
                    assert!(
                        t.is_some_and(|t| t.as_nanos() > now),
                        "seed {seed}: idle with {} held at {now}, next_eligible {t:?}",
                        h.queued()
                    );
                }
                None => {}
            }
        }
        assert_eq!(h.queued() as u64, accepted - out, "seed {seed}");
    }
    let mut rounds = 0;
    while !h.is_empty() {
        match h.dequeue(Instant::from_nanos(now)) {
            Some(p) => {
                out += 1;
                depart(p, &mut last, now);
            }
            None => {
                now = h
                    .next_eligible(Instant::from_nanos(now))
                    .unwrap()
                    .as_nanos()
            }
        }
        rounds += 1;
        assert!(rounds < 1_000_000, "seed {seed}: never drained");
    }
    assert_eq!(out, accepted, "seed {seed}");
    assert_eq!(h.next_eligible(Instant::from_nanos(now)), None);
    // No node above its ceiling in any window.
    for node in &cfg.nodes {
        let ceil = node.ceil_bps.unwrap_or(node.rate_bps) as u64;
        let burst = node.burst_ns.unwrap_or(1_000_000);
        let cburst = (u128::from(ceil) * u128::from(burst) / 8_000_000_000).max(3_000) as u64;
        for w in [1_000_000u64, 10_000_000, 100_000_000] {
            let got = worst_window(&trace, &h, &node.name, w);
            let bound = ceil * w / 8 / SEC + cburst + 1_500;
            assert!(
                got <= bound,
                "seed {seed}: {} sent {got} B in {w} ns > {bound}",
                node.name
            );
        }
    }
}
