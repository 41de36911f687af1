//! `pspat shape` as a subprocess: every bad input is one line naming the
//! flag or interface with exit code 2; a run in a namespace prints the
//! ready line, stops on SIGTERM with a JSON report, and ends non-zero with
//! consistent counters when an interface disappears. The namespace tests
//! need root: without it they print "skipped: <reason>" and return.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pspat_io::netns::{self, Namespace, VethPair};
use serde_json::Value;

fn pspat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pspat"))
}

/// Runs `pspat shape ARGS`; returns the exit code and standard error.
fn shape(args: &[&str]) -> (Option<i32>, String) {
    let out = pspat()
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

fn one_line_exit_2(args: &[&str], needle: &str) {
    let (code, err) = shape(args);
    assert_eq!(code, Some(2), "pspat shape {args:?}: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "pspat shape {args:?}: one line: {err}"
    );
    assert!(
        err.contains(needle),
        "pspat shape {args:?}: {err:?} names {needle:?}"
    );
}

#[test]
fn bad_flags_are_one_line_naming_the_flag_and_exit_2() {
    let base = ["--in", "pspat-i", "--out", "pspat-o"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        base.iter().chain(extra.iter()).copied().collect()
    };
    one_line_exit_2(&["--in", "pspat-i", "--out", "pspat-i"], "--out");
    one_line_exit_2(&with(&["--rate", "0"]), "--rate");
    one_line_exit_2(&with(&["--rate", "fast"]), "--rate");
    one_line_exit_2(&with(&["--flows", "0"]), "--flows");
    one_line_exit_2(&with(&["--flows", "70000"]), "--flows");
    one_line_exit_2(&with(&["--flow-key", "4-tuple"]), "--flow-key");
    one_line_exit_2(&with(&["--weights", "1,x"]), "--weights");
    one_line_exit_2(&with(&["--weights", "1,2", "--flows", "3"]), "--weights");
    one_line_exit_2(&with(&["--dispatchers", "65"]), "--dispatchers");
    one_line_exit_2(&with(&["--rx-threads", "0"]), "--rx-threads");
    one_line_exit_2(&with(&["--duration", "0"]), "--duration");
    one_line_exit_2(&with(&["--duration", "-3s"]), "--duration");
    one_line_exit_2(&with(&["--alg", "nope"]), "--alg");
    one_line_exit_2(&with(&["--tx", "carrier-pigeon"]), "--tx");
    one_line_exit_2(&with(&["--rx-ring", "v1"]), "--rx-ring");
    one_line_exit_2(&with(&["--unparsed", "keep"]), "--unparsed");
    one_line_exit_2(&with(&["--queue-limit", "0"]), "--queue-limit");
    one_line_exit_2(&with(&["--descriptors", "100"]), "--descriptors");
    one_line_exit_2(&with(&["--arbiter-cpu", "100000"]), "--arbiter-cpu");
    one_line_exit_2(&with(&["--rx-cpus", "0,x"]), "--rx-cpus");
    one_line_exit_2(
        &["--in", "pspat-a-name-far-too-long", "--out", "pspat-o"],
        "--in",
    );
}

#[test]
fn missing_down_and_unprivileged_interfaces_are_one_line_exit_2() {
    if let Some(reason) = netns::unavailable() {
        println!("skipped: {reason}");
        return;
    }
    let ns = Namespace::create().expect("namespace");
    let ns2 = Namespace::create().expect("namespace");
    let pair = VethPair::create(&ns, &ns2).expect("pair");
    let pair2 = VethPair::create(&ns, &ns2).expect("pair");
    let run_in = |args: &[&str]| -> (Option<i32>, String) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns.name(),
                env!("CARGO_BIN_EXE_pspat"),
                "shape",
            ])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ip netns exec runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run_in(&["--in", &pair.a, "--out", "pspat-missing"]);
    assert_eq!((code, err.lines().count()), (Some(2), 1), "{err}");
    assert!(
        err.contains("--out") && err.contains("no such interface"),
        "{err}"
    );
    ns.ip(&["link", "set", &pair2.a, "down"]).unwrap();
    let (code, err) = run_in(&["--in", &pair2.a, "--out", &pair.a]);
    assert_eq!((code, err.lines().count()), (Some(2), 1), "{err}");
    assert!(err.contains("--in") && err.contains("down"), "{err}");
    // Without root (and so without CAP_NET_RAW).
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    if setpriv.exists() {
        let out = Command::new("ip")
            .args(["netns", "exec", ns.name(), "/usr/bin/setpriv"])
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args([
                env!("CARGO_BIN_EXE_pspat"),
                "shape",
                "--in",
                &pair.a,
                "--out",
                "lo",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("setpriv runs");
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("Permission denied") && err.contains("setpriv") {
            println!("skipped the unprivileged case: the binary is not reachable by nobody");
        } else {
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("CAP_NET_RAW"), "{err}");
        }
    }
}

/// A bridge namespace with an input and an output pair.
struct Bed {
    into: VethPair,
    out: VethPair,
    outer: Namespace,
    bridge: Namespace,
}

fn bed() -> Option<Bed> {
    if let Some(reason) = netns::unavailable() {
        println!("skipped: {reason}");
        return None;
    }
    let outer = Namespace::create().expect("namespace");
    let bridge = Namespace::create().expect("namespace");
    let into = VethPair::create(&outer, &bridge).expect("pair");
    let out = VethPair::create(&bridge, &outer).expect("pair");
    Some(Bed {
        into,
        out,
        outer,
        bridge,
    })
}

/// Starts `pspat shape` in the bridge namespace and waits for its ready
/// line.
fn spawn_ready(bed: &Bed, extra: &[&str]) -> (Child, std::thread::JoinHandle<Vec<String>>) {
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            bed.bridge.name(),
            env!("CARGO_BIN_EXE_pspat"),
            "shape",
        ])
        .args(["--in", &bed.into.b, "--out", &bed.out.a])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let first = lines.next().expect("a line").expect("text");
    assert!(first.starts_with("shape: ready"), "{first}");
    // Keep draining stderr so the child never blocks on it.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect());
    (child, rest)
}

#[test]
fn sigterm_stops_a_run_and_json_has_the_documented_keys() {
    let Some(bed) = bed() else {
        return;
    };
    let (child, _) = spawn_ready(&bed, &["--rate", "10M", "--flows", "2", "--json"]);
    std::thread::sleep(Duration::from_millis(300));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["command"], "shape");
    assert_eq!(doc["rx_ring"], "v2", "the default RX ring");
    assert_eq!(doc["io"], "af-packet", "the default I/O back end");
    assert!(doc["xdp_mode"].is_null(), "no XDP mode with AF_PACKET");
    for key in ["received", "transmitted", "in_flight"] {
        assert!(doc[key].is_u64(), "{key}: {doc}");
    }
    assert!(doc["dropped"].is_object());
    assert_eq!(doc["in_flight"], 0);
    let flows = doc["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 2);
    for key in ["flow", "weight", "received", "transmitted", "bytes"] {
        assert!(flows[0][key].is_u64(), "flows[0].{key}");
    }
    assert!(flows[0]["dropped"].is_object());
    for key in ["received", "transmitted"] {
        assert!(doc["reverse"][key].is_u64(), "reverse.{key}");
    }
    assert!(doc["reverse"]["dropped"].is_object());
    assert!(doc["threads"].as_array().is_some_and(|t| !t.is_empty()));
    assert_eq!(doc["conserved"], true);
    drop(bed.outer);
}

#[test]
fn an_interface_that_disappears_ends_the_run_non_zero_with_counters() {
    let Some(bed) = bed() else {
        return;
    };
    let (child, stderr) = spawn_ready(&bed, &["--duration", "20s", "--rx-ring", "v3"]);
    std::thread::sleep(Duration::from_millis(200));
    bed.into.remove().expect("remove the input pair");
    let started = Instant::now();
    let out = child.wait_with_output().expect("wait");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "ended promptly"
    );
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("accounting: received"), "{table}");
    assert!(table.contains(": holds"), "consistent counters: {table}");
    let stderr = stderr.join().expect("stderr lines");
    let last = stderr.last().expect("an error line");
    assert!(
        last.starts_with("pspat: shape: ")
            && last.contains(&bed.into.b)
            && last.contains("disappeared"),
        "{stderr:?}"
    );
}
