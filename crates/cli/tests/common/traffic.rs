//! Running `pspat` inside a network namespace from a test, and reading what
//! `pspat traffic` prints (`lab_cli.rs`, `run_e2e.rs`).

#![allow(dead_code)] // each test file uses a part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

/// `pspat ARGS` inside the named network namespace (`ip netns exec`), its
/// stdout and stderr piped.
pub fn pspat_in(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_pspat")])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The one JSON object (`schema_version` 1) a run that exited successfully
/// printed; `what` names the run in a failure.
pub fn json(output: Output, what: &str) -> Value {
    assert!(
        output.status.success(),
        "{what} exited {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(doc["schema_version"], 1, "{what}");
    doc
}

/// Waits for a `pspat traffic recv`'s `traffic: ready` line, then keeps
/// draining its stderr so that it never blocks on it.
pub fn wait_ready(child: &mut Child) {
    let stderr = child.stderr.take().expect("piped stderr");
    let mut reader = BufReader::new(stderr);
    let mut line = String::new();
    reader.read_line(&mut line).expect("a line on stderr");
    assert!(line.starts_with("traffic: ready"), "{line}");
    std::thread::spawn(move || {
        let mut sink = String::new();
        while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {}
    });
}

/// `pspat traffic recv ARGS --json` in namespace `ns`, started and ready.
pub fn ready_receiver(ns: &str, args: &[&str]) -> Child {
    let mut all = vec!["traffic", "recv"];
    all.extend_from_slice(args);
    all.push("--json");
    let mut receiver = pspat_in(ns, &all).spawn().expect("receiver starts");
    wait_ready(&mut receiver);
    receiver
}

/// A TCP receiver in namespace `ns` for at most `duration` (`12s`),
/// started and ready.
pub fn tcp_receiver(ns: &str, duration: &str) -> Child {
    ready_receiver(ns, &["--proto", "tcp", "--duration", duration])
}

/// One TCP stream of `duration` from namespace `ns` to `dst`, then
/// `receiver`'s end: the two JSON reports, sent and received.
pub fn send_tcp(ns: &str, dst: &str, duration: &str, receiver: Child) -> (Value, Value) {
    send_then_receive(
        ns,
        &[
            "--proto",
            "tcp",
            "--dst",
            dst,
            "--duration",
            duration,
            "--json",
        ],
        receiver,
        "tcp",
    )
}

/// Runs `pspat traffic send ARGS` in namespace `ns` to its end, then waits
/// for `receiver` (a `pspat traffic recv` started before): the two JSON
/// reports, sent and received; `what` names the pair in a failure.
pub fn send_then_receive(ns: &str, args: &[&str], receiver: Child, what: &str) -> (Value, Value) {
    let mut all = vec!["traffic", "send"];
    all.extend_from_slice(args);
    let sent = json(
        pspat_in(ns, &all).output().expect("sender runs"),
        &format!("traffic send ({what})"),
    );
    let received = json(
        receiver.wait_with_output().expect("receiver ends"),
        &format!("traffic recv ({what})"),
    );
    (sent, received)
}
