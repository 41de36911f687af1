//! Every command's `--json` has one shape whatever the flags: it starts
//! with `schema_version` and `command`, and its top-level keys are the ones
//! docs/JSON.md lists. Runs the built binary with tiny durations.

use std::process::Command;

use serde_json::Value;

/// Runs `pspat ARGS --json`, checks the exit code is 0 and returns the
/// document and its top-level keys in order.
fn json_of(args: &[&str]) -> (Value, Vec<String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_pspat"))
        .args(args)
        .arg("--json")
        .output()
        .expect("the pspat binary runs");
    assert!(
        out.status.success(),
        "pspat {args:?} exited {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 output");
    // Key order as printed (serde_json's maps are sorted, so read it from
    // the text): every top-level key is at two spaces of indentation.
    let keys = text
        .lines()
        .filter_map(|l| l.strip_prefix("  \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect();
    let doc: Value = serde_json::from_str(&text).expect("one JSON document");
    (doc, keys)
}

fn check(args: &[&str], command: &str, keys: &[&str]) -> Value {
    let (doc, got) = json_of(args);
    assert_eq!(got, keys, "pspat {args:?}: top-level keys");
    assert_eq!(doc["schema_version"], 1, "pspat {args:?}");
    assert_eq!(doc["command"], command, "pspat {args:?}");
    doc
}

const BENCH_KEYS: &[&str] = &[
    "schema_version",
    "command",
    "modes",
    "repeat",
    "summary",
    "ratios",
    "runs",
];

#[test]
fn bench_has_one_shape_for_one_mode_or_several() {
    let one = check(
        &["bench", "--duration", "50ms", "--no-pin"],
        "bench",
        BENCH_KEYS,
    );
    assert_eq!(one["runs"].as_array().map(Vec::len), Some(1));
    assert_eq!(one["ratios"], serde_json::json!({}));
    let two = check(
        &[
            "bench",
            "--mode",
            "pspat,lock",
            "--clients",
            "2",
            "--duration",
            "50ms",
            "--no-pin",
        ],
        "bench",
        BENCH_KEYS,
    );
    assert_eq!(two["runs"].as_array().map(Vec::len), Some(2));
    assert!(two["ratios"]["pspat_over_lock"].is_number(), "{two}");
    assert!(two["summary"]["lock"]["median_decisions_per_sec"].is_number());
}

#[test]
fn demo_has_one_shape() {
    let doc = check(
        &["demo", "--duration", "50ms", "--traffic", "emulated"],
        "demo",
        &["schema_version", "command", "traffic", "run"],
    );
    assert_eq!(doc["traffic"], "emulated");
    assert!(doc["run"]["victim"]["p99_ns"].is_number(), "{doc}");
}

/// As root with namespaces, `demo` runs on real packets in the lab: the
/// same flows (the victim first, then the weighted greedy ones) measured at
/// the receiver, and pspat shape's own report with nothing left in flight.
#[test]
fn demo_on_real_traffic_has_its_shape() {
    if let Some(why) = pspat_io::netns::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let doc = check(
        &[
            "demo",
            "--duration",
            "1s",
            "--traffic",
            "lab",
            "--alg",
            "qfq",
        ],
        "demo",
        &["schema_version", "command", "traffic", "lab"],
    );
    assert_eq!(doc["traffic"], "lab");
    let lab = &doc["lab"];
    let flows = lab["flows"].as_array().expect("flows");
    assert_eq!(flows.len(), 5, "{doc}");
    assert_eq!(flows[0]["victim"], true);
    assert!(flows[0]["received"].as_u64().unwrap_or(0) > 0, "{doc}");
    assert!(lab["victim_latency"]["p99_us"].is_number());
    assert_eq!(lab["shaper"]["in_flight"], 0, "{doc}");
    assert!(lab["error"].is_null(), "{doc}");
}

#[test]
fn sched_bench_has_one_shape_with_or_without_sweep() {
    let keys = &["schema_version", "command", "sweep", "cells"];
    let one = check(
        &[
            "sched-bench",
            "--flowsets",
            "1::8",
            "--iterations",
            "1000",
            "--repeat",
            "1",
        ],
        "sched-bench",
        keys,
    );
    assert_eq!(one["cells"].as_array().map(Vec::len), Some(1));
    let sweep = check(
        &[
            "sched-bench",
            "--sweep",
            "--alg",
            "fifo",
            "--iterations",
            "1000",
            "--repeat",
            "1",
        ],
        "sched-bench",
        keys,
    );
    assert_eq!(sweep["sweep"], true);
    assert_eq!(sweep["cells"].as_array().map(Vec::len), Some(7));
    assert!(one["cells"][0].get("dummynet_part").is_none(), "{one}");
    assert_eq!(one["cells"][0]["dummynet"], false, "{one}");
}

#[test]
fn sched_bench_names_the_dummynet_part_it_measured() {
    for (part, delay) in [("both", "10us"), ("pipe", "0"), ("classifier", "")] {
        let mut args = vec![
            "sched-bench",
            "--flowsets",
            "1:60:16",
            "--iterations",
            "2000",
            "--repeat",
            "1",
            "--dummynet",
            "--dummynet-part",
            part,
        ];
        if !delay.is_empty() {
            args.extend(["--delay", delay]);
        }
        let doc = check(
            &args,
            "sched-bench",
            &["schema_version", "command", "sweep", "cells"],
        );
        let cell = &doc["cells"][0];
        assert_eq!(cell["dummynet"], true, "{doc}");
        assert_eq!(cell["dummynet_part"], part, "{doc}");
        let want_ns = if delay == "10us" { 10_000 } else { 0 };
        assert_eq!(cell["delay_ns"], want_ns, "{doc}");
        assert_eq!(cell["drops"], 0, "{doc}");
        assert!(cell["dequeues"].as_u64().unwrap_or(0) > 0, "{doc}");
    }
}

#[test]
fn pq_bench_has_one_shape_for_one_queue_or_all() {
    let keys = &[
        "schema_version",
        "command",
        "ranks",
        "ops",
        "repeat",
        "seed",
        "queues",
        "ratios",
    ];
    let all = check(
        &[
            "pq-bench", "--ranks", "100", "--ops", "1000", "--repeat", "1",
        ],
        "pq-bench",
        keys,
    );
    assert!(all["ratios"]["heap_over_cffs"].is_number(), "{all}");
    let one = check(
        &[
            "pq-bench", "--queue", "heap", "--ranks", "100", "--ops", "1000", "--repeat", "1",
        ],
        "pq-bench",
        keys,
    );
    assert_eq!(one["queues"].as_array().map(Vec::len), Some(1));
}

#[test]
fn wfi_has_one_shape() {
    let doc = check(
        &["wfi", "--flows", "4", "--duration", "1ms"],
        "wfi",
        &[
            "schema_version",
            "command",
            "seed",
            "alg",
            "all_within_bound",
            "flows",
            "packets",
            "per_flow",
            "rate_bps",
            "workload",
        ],
    );
    assert_eq!(doc["per_flow"].as_array().map(Vec::len), Some(4));
}
