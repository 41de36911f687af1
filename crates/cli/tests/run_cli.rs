//! `pspat run` on bad input: one line on stderr naming the file position or
//! the flag, exit code 2, nothing started; and `--dry-run` building the
//! classifier and the pipes of a good configuration without interfaces.

use std::path::PathBuf;
use std::process::{Command, Output};

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("pspat-run-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn file(name: &str, text: &str) -> PathBuf {
    let p = dir().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn pspat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pspat"))
        .args(args)
        .output()
        .expect("run pspat")
}

/// Exit 2 and exactly one stderr line, which is returned.
fn usage_error(args: &[&str]) -> String {
    let out = pspat(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(out.stdout.is_empty(), "nothing on stdout");
    err.trim_end().to_string()
}

#[test]
fn a_missing_file_is_named() {
    let missing = dir().join("absent.ipfw");
    let m = missing.to_str().unwrap();
    let err = usage_error(&["run", m, "--in", "pspat-x0", "--out", "pspat-x1"]);
    assert!(
        err.starts_with(&format!("pspat: {m}: cannot read the configuration")),
        "{err}"
    );
}

#[test]
fn a_bad_line_is_reported_with_file_line_and_column() {
    let p = file(
        "bad.ipfw",
        "pipe 1 config bw 10Mbit/s\npipe 2 config delya 5ms\n",
    );
    let f = p.to_str().unwrap();
    let err = usage_error(&["run", f, "--in", "pspat-x0", "--out", "pspat-x1"]);
    assert!(
        err.starts_with(&format!("pspat: {f}:2:15: unknown pipe keyword 'delya'")),
        "{err}"
    );
    // A reference to a missing sched, in TOML.
    let t = file("bad.toml", "[[queue]]\nnumber = 1\nsched = 9\nweight = 2\n");
    let tf = t.to_str().unwrap();
    let err = usage_error(&["run", tf, "--dry-run"]);
    assert!(err.starts_with(&format!("pspat: {tf}:")), "{err}");
    assert!(err.contains('9'), "{err}");
}

#[test]
fn duplication_is_accepted_in_both_syntaxes() {
    let p = file(
        "dup.ipfw",
        "pipe 1 config bw 10Mbit/s\nqueue 3 config pipe 1 duplicate 0.01\nadd 100 queue 3 ip from any to any\n",
    );
    let t = file(
        "dup.toml",
        "[[pipe]]\nnumber = 1\nbw = \"10Mbit/s\"\nduplicate = 0.5\n",
    );
    for f in [p.to_str().unwrap(), t.to_str().unwrap()] {
        let out = pspat(&["run", f, "--dry-run"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{f}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.starts_with(&format!("run: {f}: ")), "{text}");
        assert!(text.contains("00001:  10.000 Mbit/s"), "{text}");
    }
    // A bad probability is still refused at its position.
    let bad = file("dup-bad.ipfw", "pipe 1 config duplicate 1.5\n");
    let f = bad.to_str().unwrap();
    let err = usage_error(&["run", f, "--dry-run"]);
    assert!(err.starts_with(&format!("pspat: {f}:1:")), "{err}");
}

#[test]
fn bad_flags_are_refused_before_anything_starts() {
    let p = file("ok.ipfw", "pipe 1 config bw 10Mbit/s\n");
    let f = p.to_str().unwrap();
    let err = usage_error(&["run", f]);
    assert!(err.contains("required"), "{err}");
    let err = usage_error(&["run", f, "--in", "pspat-x0", "--out", "pspat-x0"]);
    assert!(err.contains("--out") && err.contains("also --in"), "{err}");
    // A dry run says so too, although it opens neither.
    let err = usage_error(&[
        "run",
        f,
        "--in",
        "pspat-x0",
        "--out",
        "pspat-x0",
        "--dry-run",
    ]);
    assert!(err.contains("--out") && err.contains("also --in"), "{err}");
    // Each flag out of its range, on an otherwise good command line: the
    // error names the flag.
    for (flag, bad) in [
        ("--rx-threads", "0"),
        ("--descriptors", "100"),
        ("--duration", "0"),
        ("--idle-expiry", "0s"),
        ("--idle-expiry", "999us"),
        ("--idle-expiry", "3601s"),
        ("--idle-expiry", "soon"),
    ] {
        let err = usage_error(&["run", f, "--in", "pspat-x0", "--out", "pspat-x1", flag, bad]);
        assert!(err.contains(flag), "{flag} {bad}: {err}");
    }
}

#[test]
fn dry_run_builds_every_pipe_and_instance() {
    let p = file(
        "model.ipfw",
        "pipe 1 config bw 10Mbit/s delay 20ms plr 0.01 queue 50\n\
         sched 4 config type qfq bw 4Mbit/s mask src-ip 0xff\n\
         queue 1 config weight 10 sched 4 mask dst-ip 0xffffffff\n\
         add 100 queue 1 ip from 10.199.0.0/24 to any dst-port 80\n\
         add 200 pipe 1 ip from any to any // the rest\n",
    );
    let f = p.to_str().unwrap();
    let out = pspat(&[
        "run",
        f,
        "--dry-run",
        "--max-instances",
        "4",
        "--max-queues",
        "8",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // Pipe 1 (1 instance), sched 4 (4 instances + the overflow one), the
    // pass pipe: 7 pipes. Flow ids: pipe 1 has 1; sched 4 has 8 dynamic
    // queues + 1 overflow queue per instance, 5 instances; the pass pipe 1.
    assert!(
        text.starts_with(&format!(
            "run: {f}: 7 pipe(s) and instance(s), 47 flow ids, 2 rule(s)"
        )),
        "{text}"
    );
    assert!(
        text.contains("00001:  10.000 Mbit/s   20 ms  pipe fifo 1 instance(s) 50 sl."),
        "{text}"
    );
    assert!(
        text.contains("00004:   4.000 Mbit/s    0 ms  sched qfq 5 instance(s) -"),
        "{text}"
    );
    assert!(text.contains("pass : unlimited"), "{text}");
    // The same as one JSON object.
    let out = pspat(&[
        "run",
        f,
        "--dry-run",
        "--json",
        "--max-instances",
        "4",
        "--max-queues",
        "8",
    ]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(
        (
            &doc["command"],
            &doc["dry_run"],
            &doc["pipe_count"],
            &doc["flow_ids"]
        ),
        (
            &serde_json::json!("run"),
            &serde_json::json!(true),
            &serde_json::json!(7),
            &serde_json::json!(47)
        )
    );
    let pipes: Vec<_> = doc["pipes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["number"].as_u64(),
                p["alg"].as_str().unwrap(),
                p["bw_bps"].as_u64(),
                p["instances"].as_u64().unwrap(),
                p["in_packets"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pipes,
        [
            (Some(1), "fifo", Some(10_000_000), 1, 0),
            (Some(4), "qfq", Some(4_000_000), 5, 0),
            (None, "fifo", None, 1, 0)
        ]
    );
    let rules: Vec<_> = doc["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["number"].as_u64(),
                r["comment"].as_str(),
                r["packets"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            (Some(100), None, Some(0)),
            (Some(200), Some("the rest"), Some(0)),
            (None, None, Some(0))
        ]
    );
}

/// A start that fails after the control socket was opened (here: the
/// interfaces do not exist, or may not be opened without root) removes
/// the socket again: a file left behind would make `pspat ctl` talk of a
/// stale socket. A stale file found there is replaced, then removed too;
/// the socket of a daemon that answers is refused and left alone.
#[test]
fn a_failed_start_leaves_no_control_socket() {
    let p = file(
        "sock.ipfw",
        "pipe 1 config bw 1Mbit/s\nadd 100 pipe 1 ip from any to any\n",
    );
    let f = p.to_str().unwrap();
    let sock = dir().join("failed.sock");
    let _ = std::fs::remove_file(&sock);
    let s = sock.to_str().unwrap();
    let run = [
        "run",
        f,
        "--in",
        "nosuch0",
        "--out",
        "nosuch1",
        "--control",
        s,
    ];
    let err = usage_error(&run);
    assert!(
        err.contains("nosuch") || err.contains("--in") || err.contains("--out"),
        "{err}"
    );
    assert!(!sock.exists(), "{s} left behind: {err}");

    // A stale socket file (its listener gone): replaced, then removed.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    usage_error(&run);
    assert!(!sock.exists(), "the stale {s} left behind");

    // Another daemon's socket (one that answers) is not touched.
    let live = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let err = usage_error(&run);
    assert!(err.contains("another pspat run answers there"), "{err}");
    assert!(sock.exists(), "the live {s} was removed");
    drop(live);
    std::fs::remove_file(&sock).unwrap();
}

/// `--control PATH` in a directory that does not exist: refused in one
/// line, and no directory is created (only the default one is).
#[test]
fn a_control_socket_in_a_missing_directory_is_refused() {
    let p = file("nodir.ipfw", "pipe 1 config bw 1Mbit/s\n");
    let f = p.to_str().unwrap();
    let missing = dir().join("absent-dir");
    let _ = std::fs::remove_dir_all(&missing);
    let sock = missing.join("deeper").join("pspat.sock");
    let s = sock.to_str().unwrap();
    let err = usage_error(&[
        "run",
        f,
        "--in",
        "nosuch0",
        "--out",
        "nosuch1",
        "--control",
        s,
    ]);
    // Long paths are elided in the message; the words around them stay.
    assert!(
        err.starts_with("pspat: --control ")
            && err.contains(" its directory ")
            && err.ends_with(" does not exist"),
        "{err}"
    );
    assert!(!missing.exists(), "{} was created", missing.display());
}

/// A reader that stops early (`pspat run ... --json | head`) is no error:
/// exit 0, nothing on stderr, whether the text or the JSON found stdout
/// closed.
#[test]
fn a_closed_stdout_ends_a_dry_run_quietly() {
    // Far more output than a pipe buffers, so the write finds it closed.
    let text: String = (1..=800)
        .map(|n| format!("pipe {n} config bw {n}Kbit/s delay {n}ms\n"))
        .collect();
    let p = file("many.ipfw", &text);
    for json in [false, true] {
        let mut args = vec!["run", p.to_str().unwrap(), "--dry-run"];
        if json {
            args.push("--json");
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_pspat"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run pspat");
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).as_ref()
            ),
            (Some(0), ""),
            "--json {json}"
        );
    }
}
