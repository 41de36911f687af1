//! `pspat lab` and `pspat traffic` through the built binary: bad flags
//! (one line, exit 2), and, as root with namespaces, the lab's life cycle
//! (up, down, a stale lab left by a crash) and traffic through the bridge
//! (UDP: every packet accounted for, no reordering, latency recorded; TCP:
//! every byte arrives), local senders through pspat (every packet
//! submitted is sent or dropped by reason, in order per flow), and
//! `lab compare`'s local-senders experiment. Without root the namespace
//! tests print why and return.
//!
//! The lab has fixed names, so the tests that build it take one lock.
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use serde_json::Value;

mod common;

use common::traffic::{json, pspat_in, ready_receiver, send_then_receive, tcp_receiver};

static LAB: Mutex<()> = Mutex::new(());

fn pspat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pspat"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the pspat binary runs")
}

fn skip_reason() -> Option<String> {
    pspat_io::netns::unavailable()
}

fn namespaces() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("pspat-lab-"))
        .map(str::to_owned)
        .collect()
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip runs");
    assert!(status.success(), "ip {args:?}");
}

/// Two UDP flows weighted 3:1, two sender threads, 4000 packets/s for
/// 1 s, a JSON report: the paced traffic of the accounting tests.
const PACED_3_1: &[&str] = &[
    "--weights",
    "3,1",
    "--threads",
    "2",
    "--pps",
    "4000",
    "--duration",
    "1s",
    "--json",
];

#[test]
fn bad_flags_exit_2_with_one_line() {
    for args in [
        vec!["traffic", "send", "--size", "10"],
        vec!["traffic", "send", "--dst", "192.0.2.1"],
        vec!["traffic", "send", "--weights", "1,0"],
        vec!["traffic", "send", "--rate", "fast"],
        vec!["traffic", "send", "--pps", "0"],
        vec!["traffic", "recv", "--flows", "0"],
        vec!["traffic", "recv", "--proto", "sctp"],
        vec!["traffic", "recv", "--proto", "tcp", "--flows", "4"],
        vec!["traffic", "send", "--alg", "drr"],
        vec!["traffic", "send", "--via", "pspat", "--dispatchers", "65"],
        vec!["traffic", "send", "--via", "pspat", "--alg", "nope"],
        vec!["traffic", "send", "--via", "pspat", "--proto", "tcp"],
        vec!["lab", "compare", "--experiments", "nope"],
        vec!["lab", "up", "--mode", "nope"],
        vec!["lab", "up", "--mode", "pspat", "--rate", "0"],
        vec!["lab", "up", "--mode", "htb", "--port", "0"],
        vec!["lab", "compare", "--repeat", "0"],
        vec!["lab", "compare", "--traffic-cpu", "9999"],
        vec!["lab", "sideways"],
    ] {
        let out = pspat(&args);
        assert_eq!(out.status.code(), Some(2), "pspat {args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "pspat {args:?}: {stderr}"
        );
        assert!(stderr.starts_with("pspat: "), "pspat {args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "pspat {args:?}");
    }
}

/// What only `lab compare`'s `pspat shape` children would refuse (the
/// algorithm, a rate beyond shape's `--rate`) is refused up front: exit 2,
/// one line naming it, no lab built. Before, `--alg nosuch` built the lab,
/// ran every experiment and exited 0 with "pspat figures are missing".
/// Without root the flags are still checked first.
#[test]
fn compare_refuses_what_pspat_shape_would_before_building_the_lab() {
    let _guard = LAB.lock().unwrap_or_else(|p| p.into_inner());
    let before = namespaces();
    for (args, needle) in [
        (
            &["lab", "compare", "--alg", "nosuch", "--quick"][..],
            "nosuch",
        ),
        (
            &["lab", "compare", "--victim-rate", "2T", "--quick"][..],
            "--victim-rate",
        ),
    ] {
        let out = pspat(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "pspat {args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "pspat {args:?}: {stderr}");
        assert!(
            lines[0].starts_with("pspat: ") && lines[0].contains(needle),
            "pspat {args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "pspat {args:?}");
        // The lab's names are fixed: under the lock, none of them appeared.
        assert_eq!(namespaces(), before, "pspat {args:?} built namespaces");
    }
}

#[test]
fn lab_up_then_down_leaves_nothing() {
    if let Some(reason) = skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    let _guard = LAB.lock().unwrap_or_else(|p| p.into_inner());
    for mode in ["bridge", "htb", "pspat"] {
        let out = pspat(&["lab", "up", "--mode", mode, "--weights", "10,1"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(namespaces().len(), 3, "mode {mode}");
        let out = pspat(&["lab", "down"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(namespaces().is_empty(), "mode {mode}: {:?}", namespaces());
        for link in ["pspat-snd0", "pspat-shin", "pspat-shout", "pspat-rcv0"] {
            assert!(!link_exists(link), "{link} left after down");
        }
    }
    // Down with nothing there succeeds and says so.
    let out = pspat(&["lab", "down"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to remove"));
}

#[test]
fn a_stale_lab_is_removed_by_down_and_by_up() {
    if let Some(reason) = skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    let _guard = LAB.lock().unwrap_or_else(|p| p.into_inner());
    // What a crash in the middle of `up` may leave: one namespace and a
    // pair still in the root namespace.
    ip(&["netns", "add", "pspat-lab-snd"]);
    ip(&[
        "link",
        "add",
        "pspat-shin",
        "type",
        "veth",
        "peer",
        "name",
        "pspat-shout",
    ]);
    let out = pspat(&["lab", "down"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(namespaces().is_empty());
    assert!(!link_exists("pspat-shin") && !link_exists("pspat-shout"));

    ip(&["netns", "add", "pspat-lab-rcv"]);
    ip(&[
        "-n",
        "pspat-lab-rcv",
        "link",
        "add",
        "pspat-rcv0",
        "type",
        "veth",
        "peer",
        "name",
        "pspat-stale0",
    ]);
    let out = pspat(&["lab", "up"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("removed a stale lab"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(namespaces().len(), 3);
    assert!(pspat(&["lab", "down"]).status.success());
    assert!(namespaces().is_empty());
}

/// Builds the lab in `mode` under the lab lock, or prints why namespaces
/// are unavailable and returns `None` (the test then skips).
fn lab_up(mode: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if let Some(reason) = skip_reason() {
        println!("skipped: {reason}");
        return None;
    }
    let guard = LAB.lock().unwrap_or_else(|p| p.into_inner());
    let out = pspat(&["lab", "up", "--mode", mode]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(guard)
}

/// `pspat traffic recv --flows FLOWS --duration DURATION --json` in the
/// receiver's namespace, once it said it is ready.
fn start_receiver(flows: &str, duration: &str) -> std::process::Child {
    ready_receiver("pspat-lab-rcv", &["--flows", flows, "--duration", duration])
}

#[test]
fn traffic_through_the_bridge_is_accounted_for() {
    let Some(_guard) = lab_up("bridge") else {
        return;
    };

    // UDP: two flows weighted 3:1 at 4000 packets/s for 1 s, two threads.
    let receiver = start_receiver("2", "4s");
    let (sent, received) = send_then_receive(
        "pspat-lab-snd",
        &[PACED_3_1, &["--size", "200"]].concat(),
        receiver,
        "udp",
    );
    let packets = sent["packets"].as_u64().expect("packets");
    assert!(packets > 0);
    let got = received["packets"].as_u64().expect("packets");
    let lost = received["lost"].as_u64().expect("lost");
    assert_eq!(packets, got + lost, "sent = received + lost: {received}");
    assert_eq!(received["reordered"], 0);
    assert_eq!(received["latency"]["samples"].as_u64(), Some(got));
    assert!(received["latency"]["p50_us"]
        .as_f64()
        .is_some_and(|l| l > 0.0));
    for flow in 0..2 {
        assert_eq!(
            sent["flows"][flow]["packets"], received["flows"][flow]["packets"],
            "flow {flow}"
        );
    }

    // TCP: one bulk stream for 1 s; every byte written arrives.
    let receiver = tcp_receiver("pspat-lab-rcv", "5s");
    let (sent, received) = send_then_receive(
        "pspat-lab-snd",
        &["--proto", "tcp", "--duration", "1s", "--json"],
        receiver,
        "tcp",
    );
    assert!(sent["bytes"].as_u64().is_some_and(|b| b > 0));
    assert_eq!(sent["bytes"], received["bytes"]);
    assert!(received["bps"].as_f64().is_some_and(|b| b > 0.0));

    assert!(pspat(&["lab", "down"]).status.success());
    assert!(namespaces().is_empty());
}

/// TCP through `pspat shape` shaped at 50 Mbit/s (issue "Real traffic"):
/// one bulk stream for 3 s reaches at least 90% of the rate as goodput,
/// every byte arrives, and the shaper's own accounting holds with nothing
/// in flight. ACKs come back through the bridge's unshaped reverse path.
#[test]
fn tcp_through_pspat_shape_reaches_90_percent_of_50_mbit() {
    let Some(_guard) = lab_up("pspat") else {
        return;
    };
    let mut shaper = pspat_in(
        "pspat-lab-shp",
        &[
            "shape",
            "--in",
            "pspat-shin",
            "--out",
            "pspat-shout",
            "--rate",
            "50M",
            "--alg",
            "fifo",
            "--json",
        ],
    )
    .spawn()
    .expect("shape starts");
    {
        use std::io::{BufRead, BufReader};
        let stderr = shaper.stderr.take().expect("piped stderr");
        let mut reader = BufReader::new(stderr);
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line).expect("shape's stderr");
            assert!(n > 0, "shape ended before it was ready");
            if line.starts_with("shape: ready") {
                break;
            }
        }
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {}
        });
    }
    let receiver = tcp_receiver("pspat-lab-rcv", "8s");
    let (sent, received) = send_then_receive(
        "pspat-lab-snd",
        &["--proto", "tcp", "--duration", "3s", "--json"],
        receiver,
        "tcp",
    );
    // SIGINT: the shaper drains and prints its report.
    let _ = Command::new("kill")
        .args(["-INT", &shaper.id().to_string()])
        .status();
    let report = json(
        shaper.wait_with_output().expect("shape ends"),
        "pspat shape",
    );
    assert!(pspat(&["lab", "down"]).status.success());
    assert_eq!(sent["bytes"], received["bytes"], "every byte arrives");
    let goodput = received["bps"].as_f64().expect("bps");
    assert!(goodput >= 0.9 * 50e6, "goodput {goodput} bit/s: {received}");
    assert!(goodput <= 50e6, "never above the shaped rate: {goodput}");
    assert_eq!(report["in_flight"], 0, "{report}");
    let dropped: u64 = report["dropped"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    assert_eq!(
        report["received"].as_u64(),
        report["transmitted"].as_u64().map(|t| t + dropped),
        "received = transmitted + dropped: {report}"
    );
}

/// Local senders through pspat (issue "Real traffic", item 3): two client
/// threads of `traffic send --via pspat` with one dispatcher, two flows
/// weighted 3:1, paced, through the bridge: the runtime accounts for every
/// packet (`submitted = sent + dropped`, nothing in flight), the receiver
/// counts at most what was sent, every gap it saw as lost, and no flow is
/// reordered.
#[test]
fn local_senders_through_pspat_are_accounted_for() {
    let Some(_guard) = lab_up("bridge") else {
        return;
    };
    let receiver = start_receiver("2", "4s");
    let (sent, received) = send_then_receive(
        "pspat-lab-snd",
        &[&["--via", "pspat", "--dispatchers", "1"], PACED_3_1].concat(),
        receiver,
        "--via pspat",
    );
    assert!(pspat(&["lab", "down"]).status.success());
    assert_eq!(sent["via"], "pspat");
    let p = &sent["pspat"];
    let submitted = p["submitted"].as_u64().expect("submitted");
    let sent_packets = p["sent"].as_u64().expect("sent");
    let dropped: u64 = p["dropped"]
        .as_object()
        .expect("dropped")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert!(submitted > 1000, "{sent}");
    assert_eq!(submitted, sent_packets + dropped, "{sent}");
    assert_eq!(p["in_flight"], 0, "{sent}");
    assert_eq!(p["conserved"], true, "{sent}");
    assert!(p["error"].is_null(), "{sent}");
    assert_eq!(sent["packets"].as_u64(), Some(sent_packets));
    let got = received["packets"].as_u64().expect("packets");
    let lost = received["lost"].as_u64().expect("lost");
    assert!(got > 0 && got <= sent_packets, "{received}");
    assert_eq!(
        sent_packets,
        got + lost,
        "sent = received + lost: {received}"
    );
    for flow in 0..2 {
        assert_eq!(received["flows"][flow]["reordered"], 0, "flow {flow}");
        assert!(
            received["flows"][flow]["packets"].as_u64() <= sent["flows"][flow]["packets"].as_u64(),
            "flow {flow}"
        );
    }
}

/// `lab compare --quick --experiments local_senders --json`: one row per
/// sender count (1 and 4) with a positive rate in each of the three ways
/// of sending, every pspat run conserved, and the CSV written. (Only this
/// experiment: the others have their own runs and CI time counts.)
#[test]
fn lab_compare_reports_local_senders() {
    let Some(_guard) = lab_up("bridge") else {
        return;
    };
    let out = std::env::temp_dir().join(format!("pspat-lab-compare-{}", std::process::id()));
    let out_arg = out.display().to_string();
    let doc = json(
        pspat(&[
            "lab",
            "compare",
            "--quick",
            "--experiments",
            "local_senders",
            "--out",
            &out_arg,
            "--json",
        ]),
        "lab compare",
    );
    assert!(namespaces().is_empty(), "compare removes its lab");
    let rows = doc["local_senders"].as_array().expect("local_senders");
    let senders: Vec<u64> = rows.iter().filter_map(|r| r["senders"].as_u64()).collect();
    assert_eq!(senders, vec![1, 4], "{doc}");
    for r in rows {
        for key in ["direct_mpps", "htb_mpps", "pspat_mpps"] {
            assert!(r[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {r}");
        }
        assert_eq!(r["pspat_conserved"], true, "{r}");
    }
    assert_eq!(doc["throughput"].as_array().map(Vec::len), Some(0));
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 6, "three ways of sending at two points");
    for r in runs {
        assert!(r["error"].is_null(), "{r}");
        assert!(r["received"].as_u64() <= r["sent"].as_u64(), "{r}");
    }
    let csv = std::fs::read_to_string(out.join("local_senders.csv")).expect("local_senders.csv");
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let _ = std::fs::remove_dir_all(&out);
}
