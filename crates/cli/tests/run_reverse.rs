//! `pspat run` turning the shaping of the reverse direction on and off
//! while it runs (docs/RUN.md, *Both directions*), end to end in the bed of
//! the other `run_*` tests (three namespaces, two veth pairs). Skipped,
//! with the reason printed, without root or without `ping`.
//!
//! The daemon starts with no rule naming a direction or an interface:
//! `ping` replies cross unshaped. `pspat ctl` adds `pipe 9 config delay
//! 30ms` and `add 50 pipe 9 icmp from any to any in recv <--out>`: the
//! reply says the reverse direction is shaped now, the daemon logs it, and
//! the replies take 30 ms more. `delete 50` turns it off again (said and
//! logged the same way): the replies are fast again. The final report
//! counts the reverse direction whatever its mode: two toggles, ended
//! unshaped, `received = transmitted + dropped`, nothing dropped, nothing
//! in flight. A second test sends a burst right after the change that
//! turns the shaping on: every frame of it is shaped.

mod common;

use common::run_bed::{check_conservation, ctl_json, finish, ping, ping_missing, wait_for, Bed};

/// The lines of a change's answer that turn the reverse direction.
fn toggles(doc: &serde_json::Value) -> Vec<String> {
    doc["result"]["changes"]
        .as_array()
        .expect("a change's answer")
        .iter()
        .filter_map(|c| c.as_str())
        .filter(|c| c.starts_with("reverse direction "))
        .map(str::to_string)
        .collect()
}

/// A configuration with no rule naming a direction or an interface: the
/// reverse direction starts unshaped.
const UNSHAPED: &str = "pipe 1 config\n\
                        add 100 pipe 1 udp from any to any dst-port 5001\n\
                        default allow\n";

#[test]
fn a_rule_naming_an_interface_shapes_the_replies_live_and_its_removal_unshapes_them() {
    if ping_missing() {
        return;
    }
    let subnet = 253;
    let Some(bed) = Bed::new("rev-live", subnet) else {
        return;
    };
    let (mut child, log) = bed.start(UNSHAPED, &[]);
    let socket = bed.socket();
    let count = 15;
    let before = ping(&bed, subnet, count);

    let doc = ctl_json(&socket, &["pipe", "9", "config", "delay", "30ms"]);
    assert!(toggles(&doc).is_empty(), "{doc}");
    let rule = format!("add 50 pipe 9 icmp from any to any in recv {}", bed.out.a);
    let doc = ctl_json(&socket, &[rule.as_str()]);
    let on = toggles(&doc);
    assert_eq!(on.len(), 1, "{doc}");
    assert!(on[0].contains(": shaped"), "{on:?}");
    wait_for(&log, "changed: reverse direction", &mut child);
    // The RX threads take the new mode with the next frame they read.
    let shaped = ping(&bed, subnet, count);

    let doc = ctl_json(&socket, &["delete", "50"]);
    let off = toggles(&doc);
    assert_eq!(off.len(), 1, "{doc}");
    assert!(off[0].contains(": unshaped"), "{off:?}");
    wait_for(&log, "changed: reverse direction", &mut child);
    let after = ping(&bed, subnet, count);

    let doc = finish(child);
    let r = &doc["reverse"];
    println!(
        "ping RTT (min/avg ms): unshaped {before:?}, in recv {} -> delay 30ms {shaped:?}, \
         rule deleted {after:?}; reverse {r}",
        bed.out.a
    );
    // The replies take the pipe's 30 ms while the rule is there. The rest
    // of the path is the bridge's own latency, whose minimum over a series
    // of pings moves by a few tenths of a millisecond from one series to
    // the next (1.132 ms unshaped, then 1.042 ms on top of the delay, in
    // one CI run): 0.5 ms of that is allowed.
    assert!(before.0 < 10.0, "unshaped before: {before:?}");
    assert!(
        shaped.0 >= before.0 + 29.5 && shaped.0 >= 30.0,
        "shaped: {shaped:?} against {before:?}"
    );
    assert!(shaped.1 <= 30.0 + before.1 + 5.0, "shaped: {shaped:?}");
    assert!(after.0 < 10.0, "unshaped after: {after:?}");
    // The reverse direction's account, whatever its mode: nothing lost.
    check_conservation(&doc);
    assert_eq!(r["enabled"], true, "{r}");
    assert_eq!(r["shaped"], false, "{r}");
    assert_eq!(r["toggles"], 2, "{r}");
    assert_eq!(r["conserved"], true, "{r}");
    assert_eq!(r["in_flight"], 0, "{r}");
    assert_eq!(r["dropped_total"], 0, "{r}");
    let received = r["received"].as_u64().unwrap();
    let unshaped = r["received_unshaped"].as_u64().unwrap();
    assert_eq!(
        received,
        r["transmitted"].as_u64().unwrap() + r["dropped_total"].as_u64().unwrap(),
        "{r}"
    );
    // Every echo reply crossed; those of the middle round were shaped.
    assert!(received >= u64::from(3 * count), "{r}");
    assert!(received - unshaped >= u64::from(count), "{r}");
    assert!(unshaped >= u64::from(2 * count), "{r}");
    let p9 = common::run_bed::pipe(&doc, 9);
    assert!(
        p9["out_packets"].as_u64().unwrap() >= u64::from(count),
        "{p9}"
    );
}

/// The reverse RX thread reads the switch for every frame: the first frames
/// to arrive after a change turned the shaping on are shaped, even when the
/// thread was already waiting on its ring, idle, in the unshaped mode.
#[test]
fn the_first_reverse_frames_after_the_switch_turns_on_are_shaped() {
    let subnet = 248;
    let Some(bed) = Bed::new("rev-first", subnet) else {
        return;
    };
    let (mut child, log) = bed.start(UNSHAPED, &[]);
    let socket = bed.socket();
    let mut back = bed
        .receiver
        .run(|| pspat_io::PacketTx::open(&bed.out.b, &pspat_io::TxConfig::default()))
        .unwrap()
        .expect("open the reverse sender");
    // Unshaped: 20 frames cross. Then the reverse RX thread waits, idle.
    for seq in 0..20 {
        let f = bed.frame(6100, seq, 0, 200);
        assert_eq!(back.send_batch(&[f.as_slice()]).expect("send"), 1);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Pipe 9 loses everything: a frame it shapes never arrives.
    ctl_json(&socket, &["pipe", "9", "config", "plr", "1"]);
    let rule = format!(
        "add 50 pipe 9 udp from any to any dst-port 6100 in recv {}",
        bed.out.a
    );
    let doc = ctl_json(&socket, &[rule.as_str()]);
    assert_eq!(toggles(&doc).len(), 1, "{doc}");
    wait_for(&log, "changed: reverse direction", &mut child);
    // At once: the thread is still in the wait it began unshaped.
    let burst: Vec<Vec<u8>> = (20..70).map(|seq| bed.frame(6100, seq, 0, 200)).collect();
    for f in &burst {
        assert_eq!(back.send_batch(&[f.as_slice()]).expect("send"), 1);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let doc = finish(child);
    check_conservation(&doc);
    let r = &doc["reverse"];
    let p9 = common::run_bed::pipe(&doc, 9);
    println!("pipe 9 {p9}\nreverse {r}");
    // Every frame of the burst went to pipe 9, none past it unshaped.
    assert_eq!(p9["in_packets"].as_u64(), Some(50), "{p9}");
    assert_eq!(p9["dropped"]["random_loss"].as_u64(), Some(50), "{p9}");
    assert_eq!(r["toggles"], 1, "{r}");
    assert_eq!(r["conserved"], true, "{r}");
    // The first 20 crossed unshaped (the namespaces' own frames may too).
    assert!(r["received_unshaped"].as_u64().unwrap() >= 20, "{r}");
}
