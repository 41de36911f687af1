//! Issue 17 through the built binary: runs end on time on any link
//! (`--shutdown`), bad values of the new flag are usage errors, and the bad
//! input of findings 8–10 exits 2 with one short line naming the flag or
//! file. Wall-clock bounds are generous (they catch a hang, not a speed).

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `pspat ARGS`, failing the test if it has not ended within `bound`.
fn pspat(args: &[&str], bound: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pspat"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pspat binary runs");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > bound {
            let _ = child.kill();
            panic!("pspat {args:?} did not end within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Runs `pspat ARGS` (which must succeed) and parses its one JSON object.
fn json_of(args: &[&str]) -> serde_json::Value {
    let out = pspat(args, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pspat {args:?}: {err}");
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// Exit 2, one line on stderr that contains `needle`, at most 300 bytes.
fn usage_error(args: &[&str], needle: &str) {
    let out = pspat(args, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "pspat {args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "pspat {args:?}: {err}");
    assert!(lines[0].contains(needle), "pspat {args:?}: {err}");
    assert!(lines[0].len() <= 300, "a {} byte line", lines[0].len());
}

/// Finding 4: old behaviour, `bench --rate 1000 --duration 0.3` drained
/// 4096 queued packets at 1 kbit/s (about 33 minutes) and printed nothing.
/// Now shutdown drains for at most its deadline, then drops the rest.
#[test]
fn bench_and_demo_end_on_time_on_a_1_kbit_link() {
    for args in [
        &["bench", "--rate", "1000", "--duration", "0.3", "--no-pin"][..],
        &[
            "bench",
            "--rate",
            "1000",
            "--duration",
            "0.3",
            "--no-pin",
            "--shutdown",
            "discard",
        ],
        &[
            "demo",
            "--rate",
            "1000",
            "--duration",
            "0.3",
            "--shutdown",
            "drain:100ms",
        ],
    ] {
        let out = pspat(args, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "pspat {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "pspat {args:?} printed nothing");
    }
}

/// Finding 11, first half: `bench --rate 1M --duration 0.3` reported
/// 2.64 Mbit/s (the bytes drained after the run divided by the run's
/// length). The report now counts only what left in the measured window.
#[test]
fn a_shaped_bench_reports_only_its_measured_window() {
    let doc = json_of(&[
        "bench",
        "--rate",
        "1M",
        "--duration",
        "0.5",
        "--no-pin",
        "--json",
    ]);
    let run = &doc["runs"][0];
    let bps = run["throughput_bps"].as_f64().expect("throughput_bps");
    // One 60-byte packet is 480 bits: a window of 0.5 s holds about 1042
    // packets, so ±5% is about ±52 packets of slack for the window's edges.
    assert!(
        (0.95e6..=1.05e6).contains(&bps),
        "reported {bps} bit/s on a 1 Mbit/s link: {run}"
    );
    let window = run["window_bytes"].as_f64().expect("window_bytes");
    let all = run["transmitted_bytes"]
        .as_f64()
        .expect("transmitted_bytes");
    assert!(window <= all, "{run}");
}

/// Finding 11, second half: the victim's minimum latency always read
/// 0.0 µs (the round's clock read, taken before it collects, made some
/// latencies negative, clamped to 0). The backend now reads the clock at
/// the hand-off: every sample is a real, positive latency.
#[test]
fn the_victim_s_minimum_latency_is_measured() {
    let doc = json_of(&[
        "demo",
        "--traffic",
        "emulated",
        "--duration",
        "0.5",
        "--json",
    ]);
    let v = &doc["run"]["victim"];
    assert!(v["samples"].as_u64().unwrap_or(0) > 100, "{v}");
    let min = v["min_ns"].as_u64().expect("min_ns");
    assert!(min > 0, "minimum latency 0: {v}");
    assert!(min <= v["p50_ns"].as_u64().expect("p50_ns"), "{v}");
}

#[test]
fn bad_shutdown_values_name_the_flag() {
    for v in [
        "",
        "drain:",
        "drain:-1s",
        "drain:4000s",
        "flush",
        "discard:1s",
        "drain:5parsecs",
    ] {
        usage_error(
            &["bench", "--duration", "0.1", "--shutdown", v],
            "--shutdown",
        );
        usage_error(
            &["demo", "--duration", "0.1", "--shutdown", v],
            "--shutdown",
        );
    }
}

/// Finding 10: old behaviour, `--clients -1` said "unexpected argument
/// '-1' found" without the flag, an empty value "a value is required", and
/// a long bad value was repeated whole.
#[test]
fn numeric_flag_errors_name_the_flag_and_quote_a_short_prefix() {
    usage_error(&["bench", "--clients", "-1"], "--clients");
    // A flag the chosen mode would ignore is refused, not dropped silently.
    usage_error(
        &["bench", "--tx-mode", "client", "--dispatchers", "4"],
        "--dispatchers",
    );
    usage_error(&["bench", "--clients", ""], "--clients");
    let long = "x".repeat(100_000);
    usage_error(&["bench", "--mode", &long], "--mode");
    usage_error(&["bench", "--duration", &long], "--duration");
}

/// `--lmax` below `--pkt-len` or above 65535 is a usage error; without it a
/// packet longer than one MTU is its own lmax.
#[test]
fn lmax_is_at_least_the_packet_length() {
    usage_error(&["bench", "--lmax", "59"], "--lmax");
    usage_error(&["bench", "--pkt-len", "9000", "--lmax", "1500"], "--lmax");
    usage_error(&["bench", "--lmax", "65536"], "--lmax");
    let doc = json_of(&["bench", "--duration", "0.1", "--no-pin", "--json"]);
    assert_eq!(doc["runs"][0]["lmax"], 1500, "{doc}");
    let doc = json_of(&[
        "bench",
        "--duration",
        "0.1",
        "--no-pin",
        "--pkt-len",
        "9000",
        "--json",
    ]);
    assert_eq!(doc["runs"][0]["lmax"], 9000, "{doc}");
}

#[test]
fn descriptors_and_mailbox_entries_are_checked_and_reported() {
    usage_error(&["bench", "--descriptors", "100"], "--descriptors");
    usage_error(&["bench", "--descriptors", "0"], "--descriptors");
    usage_error(&["bench", "--descriptors", "2097152"], "--descriptors");
    usage_error(&["bench", "--mailbox-entries", "100"], "--mailbox-entries");
    usage_error(&["bench", "--mailbox-entries", "32"], "--mailbox-entries");
    usage_error(
        &["bench", "--mailbox-entries", "131072"],
        "--mailbox-entries",
    );
    // One short run of 2 clients with `extra` flags: its run object.
    let run_with = |extra: &[&str]| {
        let mut args = vec!["bench", "--clients", "2", "--duration", "0.1", "--no-pin"];
        args.extend_from_slice(extra);
        args.push("--json");
        json_of(&args)["runs"][0].clone()
    };
    // Defaults at 2 clients: 8 Ki shared, at most 1024 each; twice that in
    // slots, at most 512.
    let run = run_with(&[]);
    assert_eq!(run["descriptors_per_client"], 1024, "{run}");
    assert_eq!(run["mailbox_entries"], 512, "{run}");
    // Given: reported as given, and every packet accounted for.
    let run = run_with(&["--descriptors", "64", "--mailbox-entries", "1024"]);
    assert_eq!(run["descriptors_per_client"], 64, "{run}");
    assert_eq!(run["mailbox_entries"], 1024, "{run}");
    assert_eq!(run["in_flight"], 0, "{run}");
    assert_eq!(run["submitted"], run["transmitted"], "{run}");
    // Not used without the runtime: null.
    let run = run_with(&["--mode", "none"]);
    assert!(run["descriptors_per_client"].is_null(), "{run}");
    assert!(run["mailbox_entries"].is_null(), "{run}");
}

fn config_file(text: &str) -> tempfile_path::Path {
    tempfile_path::Path::with(text)
}

/// Finding 8: old behaviour, a JSON array was read as positional fields and
/// text after the object was ignored (exit 0). Finding 9: a capacity of
/// 1073741823 (then the documented maximum) started and took 18.9 GB.
#[test]
fn scheduler_files_must_be_one_object_and_fit_in_memory() {
    for (text, needle) in [
        ("[]", ".json"),
        ("[\"fifo\", 1]", ".json"),
        ("{\"alg\":\"fifo\"} this is not JSON at all !!!", ".json"),
        ("{\"alg\":\"fifo\",\"capacity\":1073741823}", "memory"),
    ] {
        let f = config_file(text);
        usage_error(
            &["bench", "--duration", "0.1", "--sched-config", f.as_str()],
            needle,
        );
    }
}

/// A scheduler file in the temporary directory, removed on drop.
mod tempfile_path {
    use super::Write;

    pub struct Path(std::path::PathBuf);

    impl Path {
        pub fn with(text: &str) -> Path {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "pspat-reliability-{}-{}.json",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let mut f = std::fs::File::create(&p).expect("temp file");
            f.write_all(text.as_bytes()).expect("write");
            Path(p)
        }

        pub fn as_str(&self) -> &str {
            self.0.to_str().expect("UTF-8 temp path")
        }
    }

    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// `demo --lab-rate` is the rate `pspat shape --rate` takes, checked when
/// the flags are parsed: before, 0 was accepted with `--traffic emulated`
/// and, with `--traffic lab`, refused by the shape child once the lab was
/// built (exit 1). Now every mode refuses it in one line, nothing started.
#[test]
fn a_lab_rate_out_of_shape_s_range_is_refused_in_every_mode() {
    for traffic in ["emulated", "lab", "auto"] {
        for rate in ["0", "999", "2T"] {
            usage_error(
                &["demo", "--traffic", traffic, "--lab-rate", rate],
                "--lab-rate",
            );
        }
    }
}

/// Every command's `--rate` takes the core's range and says so in one
/// phrasing: below it, and above it (where `bench` and `demo` once named
/// an internal field, `rate_bps = ... is out of range`).
#[test]
fn a_rate_out_of_the_core_s_range_is_refused_in_one_phrasing_by_every_command() {
    let range = "--rate must be in 1000..=1000000000000 bit/s (e.g. 100M), got";
    for rate in ["999", "2T"] {
        for args in [
            &["bench", "--no-pin", "--rate", rate][..],
            &["demo", "--traffic", "emulated", "--rate", rate],
            &["wfi", "--rate", rate],
            &["shape", "--in", "lo", "--out", "pspat-none", "--rate", rate],
        ] {
            usage_error(args, range);
        }
    }
}
