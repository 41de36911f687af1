//! A host in a flowset's overflow queue, through `pspat run` end to end:
//! it stays there while it keeps sending, even after the one dynamic queue
//! frees, so its frames are not overtaken by its own later ones; after a
//! pause longer than the idle expiry it gets a queue of its own. The
//! daemon runs between namespaces of the test's own (`common::run_bed`)
//! with `--max-queues 1 --idle-expiry 300ms`. Skips, saying why, without
//! root.

use std::time::{Duration, Instant};

mod common;

use common::run_bed::{
    check_conservation, check_drop_reasons, ctl_json, finish, pace, pipe, send_all, Bed,
};

const SUBNET: u8 = 244;
const PORT: u16 = 7003;
/// Holds the one dynamic queue first, then goes quiet.
const FIRST: u8 = 10;
/// Overflows while the first host holds the queue, and keeps sending.
const SECOND: u8 = 11;

#[test]
fn a_host_in_the_overflow_queue_stays_there_while_it_keeps_sending() {
    let Some(bed) = Bed::new("overflow", SUBNET) else {
        return;
    };
    // One queue per source, one allowed: the second source shares the
    // overflow queue, which builds a backlog (100 frames, 200 ms at
    // 2 Mbit/s) while both send.
    let config = "\
        sched 2 config type qfq bw 2Mbit/s\n\
        queue 21 config sched 2 weight 1 queue 100 mask src-ip 0xffffffff\n\
        add 100 queue 21 udp from any to any dst-port 7003\n";
    let (child, _log) = bed.start(config, &["--max-queues", "1", "--idle-expiry", "300ms"]);
    let socket = bed.socket();
    let collector = bed.receiver();
    let mut tx = bed.sender_socket();
    let start = Instant::now();
    let mut seq = 0u32;
    let mut sent = 0u64;
    let mut round_trip = |rounds: std::ops::Range<u32>, hosts: &[(u8, u32)]| {
        for round in rounds {
            let mut batch = Vec::new();
            for &(host, per_round) in hosts {
                for _ in 0..per_round {
                    seq += 1;
                    sent += 1;
                    // The source rides in the frame's time field.
                    batch.push(bed.frame_from(host, PORT, seq, u64::from(host), 500));
                }
            }
            send_all(&mut tx, &batch);
            pace(start, Duration::from_millis(4), round);
        }
    };
    // Rounds of 4 ms. 0-200 ms: the first host (1 Mbit/s) takes the queue,
    // the second (2 Mbit/s) overflows; 200-1200 ms: the second alone. The
    // first host's queue is stale from 500 ms: a slot the second host
    // could take while its frames still wait in the overflow queue.
    round_trip(0..50, &[(FIRST, 1), (SECOND, 2)]);
    round_trip(50..300, &[(SECOND, 2)]);
    let during = ctl_json(&socket, &["queue", "show", "21"]);
    // A pause of 700 ms (the backlog drains, the hold of 300 to 375 ms
    // passes), then 200 ms more: a queue of its own.
    std::thread::sleep(Duration::from_millis(700));
    round_trip(475..525, &[(SECOND, 1)]);
    let after = ctl_json(&socket, &["queue", "show", "21"]);
    std::thread::sleep(Duration::from_millis(600));
    let doc = finish(child);
    let got = collector.finish();
    check_conservation(&doc);

    // Every frame the sched sent arrived, in order per source.
    let sched = pipe(&doc, 2);
    println!(
        "sched 2: in {} out {} dropped {} {}",
        sched["in_packets"], sched["out_packets"], sched["dropped_total"], sched["dropped"]
    );
    assert_eq!(sched["in_packets"].as_u64(), Some(sent), "{sched}");
    check_drop_reasons(sched, &["flow_limit"]);
    assert_eq!(got.len() as u64, sched["out_packets"].as_u64().unwrap());
    for host in [FIRST, SECOND] {
        let arrivals: Vec<_> = got.iter().filter(|a| a.sent == u64::from(host)).collect();
        assert!(!arrivals.is_empty(), "nothing from host {host} arrived");
        for w in arrivals.windows(2) {
            assert!(
                w[0].seq < w[1].seq,
                "host {host} reordered: frame {} arrived after frame {}",
                w[1].seq,
                w[0].seq
            );
        }
    }

    let flowset = |doc: &serde_json::Value| doc["result"]["queues"][0].clone();
    let (d, a) = (flowset(&during), flowset(&after));
    println!("during: {}\nafter: {}", d["dynamic"], a["dynamic"]);
    // While it kept sending, the second host overflowed every time: one
    // queue was ever created (the first host's), though it went stale.
    assert_eq!(d["dynamic"]["created"], 1, "{during}");
    assert!(d["dynamic"]["overflowed"].as_u64() > Some(500), "{during}");
    // After the pause it took a queue of its own (the first host's slot,
    // or a fresh one once that expired).
    assert_eq!(a["dynamic"]["created"], 2, "{after}");
    let own_row = a["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["overflow"] == false && q["src"] == format!("10.199.{SUBNET}.{SECOND}"))
        .cloned();
    assert!(
        own_row.is_some(),
        "no queue of the second host's own: {after}"
    );
}
