use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use pspat_config::{apply, diff, parse_ipfw, Change, NoProfiles, Plan};

/// Protocols of generated rules, negated or not.
const PROTOS: [&str; 5] = ["ip", "udp", "not udp", "not icmp", "not tcp"];

/// Addresses of generated rules: prefixes and address lists of both
/// families, negated or not.
const ADDRS: [&str; 6] = [
    "any",
    "any",
    "192.168.0.0/16",
    "10.0.0.1,10.0.0.0/24,2001:db8::/32",
    "not 10.0.0.0/8,192.168.0.0/16",
    "not 2001:db8:4::/48",
];

/// Options after the addresses: ports and interfaces, negated or not.
const TAILS: [&str; 8] = [
    "",
    " dst-port 53",
    " not dst-port 80,443",
    " not src-port 1000-2000",
    " via eth0",
    " not via eth0",
    " not recv eth1",
    " out not xmit eth*",
];

/// A valid configuration as ipfw text: scheds 1..=4, pipes 5..=8, queues
/// feeding existing ones, a table whose values name queues, rules pointing at
/// existing objects, with every form of match (`not` before the protocol,
/// an address or list, a port list, an interface).
fn valid_text() -> impl Strategy<Value = String> {
    (
        subsequence(vec![1u32, 2, 3, 4], 0..=4),
        subsequence(vec![5u32, 6, 7, 8], 0..=4),
        proptest::collection::vec(
            (
                select(vec![
                    "drr",
                    "qfq",
                    "wf2q+",
                    "fifo",
                    "prio",
                    "fq_codel",
                    "fq_codel target 2ms flows 64 noecn",
                ]),
                select(vec!["1Mbit/s", "4Mbit/s"]),
            ),
            4,
        ),
        proptest::collection::vec(
            (
                select(vec!["10ms", "20ms", "500us"]),
                select(vec![
                    "0",
                    "0.01",
                    "0.01 lossecn",
                    "0 codel",
                    "0.01 codel target 2ms interval 50ms ecn",
                ]),
            ),
            4,
        ),
        proptest::collection::vec(
            (
                any::<prop::sample::Index>(),
                1u32..=100,
                select(vec!["", " mask dst-ip 0xff"]),
            ),
            0..5,
        ),
        subsequence(vec!["10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32"], 0..=3),
        proptest::collection::vec(
            (
                100u32..=400,
                any::<prop::sample::Index>(),
                0u8..4,
                (
                    select(PROTOS.to_vec()),
                    select(ADDRS.to_vec()),
                    select(ADDRS.to_vec()),
                    select(TAILS.to_vec()),
                ),
            ),
            0..5,
        ),
        select(vec!["", "default deny\n"]),
        select(vec!["", "seed 7\n", "seed 9\n"]),
    )
        .prop_map(
            |(scheds, pipes, sched_params, pipe_params, queues, prefixes, rules, default, seed)| {
                let mut text = String::new();
                for (i, n) in scheds.iter().enumerate() {
                    let (alg, bw) = sched_params[i % 4];
                    text += &format!("sched {n} config type {alg} bw {bw}\n");
                }
                for (i, n) in pipes.iter().enumerate() {
                    let (delay, plr) = pipe_params[i % 4];
                    text += &format!("pipe {n} config bw 10Mbit/s delay {delay} plr {plr}\n");
                }
                let parents: Vec<u32> = scheds.iter().chain(pipes.iter()).copied().collect();
                let mut queue_numbers = Vec::new();
                if !parents.is_empty() {
                    for (q, (idx, weight, mask)) in queues.iter().enumerate() {
                        let number = q as u32 + 1;
                        text += &format!(
                            "queue {number} config weight {weight} sched {}{mask}\n",
                            parents[idx.index(parents.len())]
                        );
                        queue_numbers.push(number);
                    }
                }
                let mut used = std::collections::BTreeSet::new();
                if !queue_numbers.is_empty() {
                    for (i, p) in prefixes.iter().enumerate() {
                        text += &format!(
                            "table 1 add {p} {}\n",
                            queue_numbers[i % queue_numbers.len()]
                        );
                    }
                }
                for (number, idx, kind, (proto, src, dst, tail)) in rules {
                    if !used.insert(number) {
                        continue;
                    }
                    let action = match kind {
                        0 if !pipes.is_empty() => format!("pipe {}", pipes[idx.index(pipes.len())]),
                        1 if !queue_numbers.is_empty() => {
                            format!("queue {}", queue_numbers[idx.index(queue_numbers.len())])
                        }
                        2 if !queue_numbers.is_empty() && !prefixes.is_empty() => {
                            "queue tablearg".into()
                        }
                        3 => "deny".into(),
                        _ => "allow".into(),
                    };
                    let src = if action.contains("tablearg") {
                        "table(1)"
                    } else {
                        src
                    };
                    text += &format!("add {number} {action} {proto} from {src} to {dst}{tail}\n");
                }
                text + default + seed
            },
        )
}

fn plan(text: &str) -> Plan {
    parse_ipfw(text, "gen.ipfw")
        .and_then(|c| c.validate(&NoProfiles))
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Keys that differ between two plans, per collection.
fn differing(old: &Plan, new: &Plan) -> usize {
    fn count<V: PartialEq>(
        a: &std::collections::BTreeMap<u32, V>,
        b: &std::collections::BTreeMap<u32, V>,
    ) -> usize {
        a.keys()
            .chain(b.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| a.get(k) != b.get(k))
            .count()
    }
    let mut tables = 0;
    let empty = Default::default();
    for t in old
        .tables
        .keys()
        .chain(new.tables.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (a, b) = (
            old.tables.get(t).unwrap_or(&empty),
            new.tables.get(t).unwrap_or(&empty),
        );
        tables += a
            .keys()
            .chain(b.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| a.get(k) != b.get(k))
            .count();
    }
    count(&old.scheds, &new.scheds)
        + count(&old.pipes, &new.pipes)
        + count(&old.queues, &new.queues)
        + count(&old.rules, &new.rules)
        + tables
        + usize::from(old.default_action != new.default_action)
        + usize::from(old.seed != new.seed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn applying_the_diff_to_old_gives_new(a in valid_text(), b in valid_text()) {
        let (old, new) = (plan(&a), plan(&b));
        let changes = diff(&old, &new);
        prop_assert_eq!(changes.len(), differing(&old, &new), "one change per differing object");
        let mut p = old.clone();
        for c in &changes {
            apply(&mut p, c);
            // Scheds 1..=4 and pipes 5..=8 never trade numbers, so every step is consistent.
            prop_assert!(p.dangling_references().is_empty(), "after {:?}: {:?}", c, p.dangling_references());
        }
        prop_assert_eq!(&p, &new);
        prop_assert!(diff(&new, &new).is_empty());
        // The changes survive a JSON round trip (the control inbox may carry them serialised).
        let json = serde_json::to_string(&changes).unwrap();
        prop_assert_eq!(serde_json::from_str::<Vec<Change>>(&json).unwrap(), changes);
    }
}

#[test]
fn a_number_moving_from_pipe_to_sched_is_removed_then_added() {
    let old = plan("pipe 1 config bw 1Mbit/s\nqueue 1 config sched 1\n");
    let new = plan("sched 1 config type drr bw 1Mbit/s\nqueue 1 config sched 1\n");
    let changes = diff(&old, &new);
    assert!(
        matches!(&changes[..], [Change::RemovePipe(1), Change::AddSched(s)] if s.number == 1),
        "{changes:?}"
    );
    let mut p = old;
    for c in &changes {
        apply(&mut p, c);
    }
    assert_eq!(p, new);
}

#[test]
fn a_changed_profile_is_a_changed_pipe() {
    let text = "pipe 1 config bw 1Mbit/s profile p\n";
    let cfg = parse_ipfw(text, "x").unwrap();
    let v1 = |_: &str| Ok::<_, std::io::Error>("prob delay\n0 1\n1 2\n".to_string());
    let v2 = |_: &str| Ok::<_, std::io::Error>("prob delay\n0 1\n1 3\n".to_string());
    let (old, new) = (cfg.validate(&v1).unwrap(), cfg.validate(&v2).unwrap());
    assert!(matches!(&diff(&old, &new)[..], [Change::ChangePipe(p)] if p.number == 1));
}

/// Turning `ecn` (with RED) or `lossecn` (with a random loss) on or off is
/// a changed pipe or queue, applied in place.
#[test]
fn turning_ecn_or_lossecn_on_or_off_is_a_changed_pipe_or_queue() {
    type Flag = fn(&pspat_config::QueueSetPlan) -> bool;
    let cases: [(&str, &str, &str, Flag); 2] = [
        ("red 0.002/30/80/0.1", "gred 0.002/30/80/0.1", "ecn", |q| {
            q.ecn
        }),
        ("plr 0.01", "gemodel 0.01", "lossecn", |q| q.lossecn),
    ];
    for (pipe_params, queue_params, flag, set) in cases {
        let line = |pipe_flag: &str, queue_flag: &str| {
            plan(&format!(
                "pipe 1 config bw 1Mbit/s {pipe_params}{pipe_flag}\n\
                 queue 2 config pipe 1 {queue_params}{queue_flag}\n"
            ))
        };
        let with = format!(" {flag}");
        let (old, new) = (line("", &with), line(&with, ""));
        let changes = diff(&old, &new);
        assert!(
            matches!(
                &changes[..],
                [Change::ChangePipe(p), Change::ChangeQueue(q)]
                    if p.number == 1 && set(&p.queue) && q.number == 2 && !set(&q.queue)
            ),
            "{flag}: {changes:?}"
        );
        let mut p = old;
        for c in &changes {
            apply(&mut p, c);
        }
        assert_eq!(p, new, "{flag}");
    }
}

/// Turning CoDel on, changing one of its parameters, or replacing it with
/// RED or drop-tail is a changed pipe or queue, applied in place.
#[test]
fn turning_codel_on_changing_or_replacing_it_is_a_changed_pipe_or_queue() {
    let line = |pipe_aqm: &str, queue_aqm: &str| {
        plan(&format!(
            "pipe 1 config bw 1Mbit/s {pipe_aqm}\nqueue 2 config pipe 1 weight 2 {queue_aqm}\n"
        ))
    };
    let steps = [
        ("droptail", "red 0.002/30/80/0.1 ecn"),
        ("codel", "codel target 2ms ecn"),
        ("codel target 10ms", "codel target 2ms ecn"),
        ("codel target 10ms", "codel target 2ms"),
        ("gred 0.002/30/80/0.1", "codel target 2ms"),
        ("gred 0.002/30/80/0.1", "droptail"),
    ];
    for pair in steps.windows(2) {
        let (old, new) = (line(pair[0].0, pair[0].1), line(pair[1].0, pair[1].1));
        let changes = diff(&old, &new);
        let pipe_changed = pair[0].0 != pair[1].0;
        let queue_changed = pair[0].1 != pair[1].1;
        let expected = usize::from(pipe_changed) + usize::from(queue_changed);
        assert_eq!(changes.len(), expected, "{pair:?}: {changes:?}");
        for c in &changes {
            match c {
                Change::ChangePipe(p) => {
                    assert!(pipe_changed && p.number == 1, "{pair:?}: {c:?}");
                    assert_eq!(p.queue.codel, new.pipes[&1].queue.codel);
                }
                Change::ChangeQueue(q) => {
                    assert!(queue_changed && q.number == 2, "{pair:?}: {c:?}");
                    assert_eq!(q.queue.codel, new.queues[&2].queue.codel);
                }
                other => panic!("{pair:?}: unexpected {other:?}"),
            }
        }
        let mut p = old;
        for c in &changes {
            apply(&mut p, c);
        }
        assert_eq!(p, new, "{pair:?}");
    }
}
