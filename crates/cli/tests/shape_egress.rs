//! `pspat shape --out IF1,IF2[:RATE]`: several egress interfaces as a
//! subprocess. Bad egress lists are one line naming `--out` with exit code
//! 2; a run over a bond of two veth pairs reports each flow's egress and
//! per-egress totals that add up. The namespace tests need root: without
//! it they print "skipped: <reason>" and return.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use etherparse::PacketBuilder;
use pspat_io::af_packet::{PacketTx, TxConfig};
use pspat_io::netns::{self, Namespace, VethPair};
use serde_json::Value;

fn shape(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pspat"))
        .arg("shape")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the pspat binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn one_line_exit_2(args: &[&str], needles: &[&str]) {
    let (code, err) = shape(args);
    assert_eq!(code, Some(2), "pspat shape {args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "pspat shape {args:?}: {err}");
    for needle in needles {
        assert!(
            err.contains(needle),
            "pspat shape {args:?}: {err:?} names {needle:?}"
        );
    }
}

#[test]
fn bad_egress_lists_are_one_line_naming_out_and_exit_2() {
    let with = |out: &'static str| ["--in", "pspat-i", "--out", out];
    one_line_exit_2(&with("pspat-o,pspat-o"), &["--out", "given twice"]);
    one_line_exit_2(&with("pspat-o,pspat-i"), &["--out", "also --in"]);
    one_line_exit_2(&with("pspat-o:0,pspat-p:0"), &["--out", "pspat-o"]);
    one_line_exit_2(&with("pspat-o:10M,pspat-p:0"), &["--out", "pspat-p"]);
    one_line_exit_2(&with("pspat-o:fast,pspat-p"), &["--out", "pspat-o"]);
    one_line_exit_2(&with("pspat-o:10M,pspat-p"), &["--out", "rate"]);
    one_line_exit_2(&with("pspat-o,"), &["--out", "interface name"]);
    one_line_exit_2(
        &with("pspat-o,pspat-a-name-far-too-long"),
        &["--out", "pspat-a-name"],
    );
    let many: String = (0..17)
        .map(|i| format!("pspat-o{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let many: &'static str = Box::leak(many.into_boxed_str());
    one_line_exit_2(&with(many), &["--out", "at most 16"]);
    one_line_exit_2(
        &[
            "--in",
            "pspat-i",
            "--out",
            "pspat-o,pspat-p",
            "--arbiter-cpu",
            "0,x",
        ],
        &["--arbiter-cpu"],
    );
}

/// A namespace for the bridge, one outside it, an input pair and two
/// output pairs (the bond) between them.
struct Bond {
    into: VethPair,
    outs: [VethPair; 2],
    outer: Namespace,
    bridge: Namespace,
}

fn bond() -> Option<Bond> {
    if let Some(reason) = netns::unavailable() {
        println!("skipped: {reason}");
        return None;
    }
    let outer = Namespace::create().expect("namespace");
    let bridge = Namespace::create().expect("namespace");
    let into = VethPair::create(&outer, &bridge).expect("pair");
    let outs = [
        VethPair::create(&bridge, &outer).expect("pair"),
        VethPair::create(&bridge, &outer).expect("pair"),
    ];
    Some(Bond {
        into,
        outs,
        outer,
        bridge,
    })
}

fn shape_in(bond: &Bond, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        bond.bridge.name(),
        env!("CARGO_BIN_EXE_pspat"),
        "shape",
    ])
    .args(args)
    .stdin(Stdio::null());
    c
}

#[test]
fn an_unknown_egress_interface_is_one_line_exit_2() {
    let Some(bond) = bond() else {
        return;
    };
    let out_list = format!("{},pspat-missing", bond.outs[0].a);
    let out = shape_in(&bond, &["--in", &bond.into.b, "--out", &out_list])
        .output()
        .expect("ip netns exec runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        (out.status.code(), err.lines().count()),
        (Some(2), 1),
        "{err}"
    );
    assert!(
        err.contains("--out") && err.contains("pspat-missing"),
        "{err}"
    );
}

#[test]
fn a_run_over_two_egress_links_reports_each_flows_egress_and_per_egress_totals() {
    let Some(bond) = bond() else {
        return;
    };
    let out_list = format!("{}:10M,{}:30M", bond.outs[0].a, bond.outs[1].a);
    let mut child = shape_in(
        &bond,
        &[
            "--in",
            &bond.into.b,
            "--out",
            &out_list,
            "--flows",
            "16",
            "--flow-key",
            "dst-port",
            "--json",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let first = lines.next().expect("a line").expect("text");
    assert!(first.starts_with("shape: ready"), "{first}");
    assert!(first.contains("flows per egress"), "{first}");
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).count());
    let mut tx = bond
        .outer
        .run(|| PacketTx::open(&bond.into.a, &TxConfig::default()))
        .unwrap()
        .expect("open the sender");
    let frames: Vec<Vec<u8>> = (0..16u16)
        .flat_map(|f| {
            (0..10).map(move |_| {
                let mut frame = Vec::new();
                PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                    .ipv4([10, 199, 201, 1], [10, 199, 201, 2], 64)
                    .udp(4000, 6000 + f)
                    .write(&mut frame, &[0u8; 32])
                    .expect("build");
                frame
            })
        })
        .collect();
    for chunk in frames.chunks(16) {
        let views: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        let mut at = 0;
        while at < views.len() {
            at += tx.send_batch(&views[at..]).expect("send");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(300));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait");
    rest.join().expect("stderr");
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(doc["conserved"], true, "{doc}");
    assert_eq!(doc["in_flight"], 0);
    let egress = doc["egress"].as_array().expect("egress");
    assert_eq!(egress.len(), 2);
    let names = [bond.outs[0].a.as_str(), bond.outs[1].a.as_str()];
    for (e, name) in egress.iter().zip(names) {
        assert_eq!(e["interface"], name);
        for key in [
            "flows",
            "received",
            "transmitted",
            "bytes",
            "dropped_total",
            "in_flight",
        ] {
            assert!(e[key].is_u64(), "egress.{key}: {e}");
        }
        assert!(e["dropped"].is_object());
        assert!(e["weight_share"].is_f64());
    }
    assert_eq!(egress[0]["rate_bps"], 10_000_000);
    assert_eq!(egress[1]["rate_bps"], 30_000_000);
    let sum = |key: &str| -> u64 { egress.iter().map(|e| e[key].as_u64().unwrap()).sum() };
    assert_eq!(sum("transmitted"), doc["transmitted"].as_u64().unwrap());
    assert_eq!(sum("flows"), 16);
    let flows = doc["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 16);
    for f in flows {
        let on = f["egress"].as_str().expect("flow egress");
        assert!(names.contains(&on), "{f}");
    }
    let threads: Vec<&str> = doc["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| t["thread"].as_str())
        .collect();
    assert!(
        threads.contains(&"arbiter-0") && threads.contains(&"arbiter-1"),
        "{threads:?}"
    );
    drop(bond.outer);
}
