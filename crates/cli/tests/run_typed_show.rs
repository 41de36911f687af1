//! Typed pipes as a running `pspat run` shows them over its control socket,
//! with the daemon between three namespaces of its own (a sender, the
//! bridge, a receiver, joined by two veth pairs). Skipped, with the reason
//! printed, without root or namespaces.
//!
//! The configuration has a pipe of `type wf2q+` serving two flowsets of
//! weights 1 and 4, and a pipe of `type fq_codel` with every parameter off
//! its default (`target 7ms interval 150ms noecn quantum 600 limit 2000
//! flows 256`) serving a flowset. `pspat ctl pipe show` prints each pipe
//! exactly as `pspat run --dry-run` prints it for the same file, and its
//! `--json` carries the same settings; `sched show` and its `--json` give
//! each link's type with every parameter; `queue show` the flowsets'
//! weights and the fq_codel parameters lowered onto the flowset (its CoDel,
//! `limit` as its queue, `flows` as its dynamic-queue cap). A change of the
//! pipe's `bw` and fq_codel's `target` is applied in place (no rebuild) and
//! shows as `--dry-run` prints the changed file; a `type fq_codel` line that
//! leaves parameters out sets them back to their defaults; malformed typed
//! lines are refused (by `pspat ctl` with exit status 2 and one line, and by
//! the daemon itself when sent on the socket) and `pipe show` is unchanged.

use std::path::Path;
use std::process::Command;

mod common;

use common::run_bed::{answer_on_socket, changes, ctl, ctl_json, ctl_text, finish, pipe, Bed};

/// fq_codel with every parameter off dummynet's default, as printed.
const FQ_CODEL: &str = "fq_codel target 7ms interval 150ms noecn quantum 600 limit 2000 flows 256";

/// The same after the live change of `target`.
const FQ_CODEL_CHANGED: &str =
    "fq_codel target 9ms interval 150ms noecn quantum 600 limit 2000 flows 256";

/// The file, with `pipe_2` as pipe 2's line.
fn config(pipe_2: &str) -> String {
    format!(
        "pipe 1 config bw 10Mbit/s type wf2q+\n\
         queue 11 config pipe 1 weight 1\n\
         queue 12 config pipe 1 weight 4\n\
         {pipe_2}\n\
         queue 21 config pipe 2\n\
         add 100 queue 11 udp from any to any dst-port 6001\n\
         add 200 queue 12 udp from any to any dst-port 6002\n\
         add 300 queue 21 udp from any to any dst-port 6003\n\
         add 400 pipe 2 udp from any to any dst-port 6004\n"
    )
}

/// `pspat run FILE --dry-run`: the pipe table it prints, without its first
/// line (the file's summary).
fn dry_run(file: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pspat"))
        .arg("run")
        .arg(file)
        .arg("--dry-run")
        .output()
        .expect("run pspat run --dry-run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "--dry-run: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (first, table) = text.split_once('\n').expect("a summary line");
    assert!(first.starts_with("run: "), "{text}");
    table.to_string()
}

/// The rows of pipe table `table` for the pipe whose header starts with
/// `head` (`00002:`): the header and the indented lines under it.
fn block(table: &str, head: &str) -> String {
    let mut lines = table.lines().skip_while(|l| !l.starts_with(head));
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("no {head} in:\n{table}"));
    let mut out = format!("{header}\n");
    for l in lines.take_while(|l| l.starts_with(' ')) {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The settings line of a pipe's rows (the line under the header that
/// starts with `type `), trimmed.
fn settings(block: &str) -> &str {
    block
        .lines()
        .skip(1)
        .map(str::trim)
        .find(|l| l.starts_with("type "))
        .unwrap_or_else(|| panic!("no settings line in:\n{block}"))
}

/// Sends `line` on the control socket as it is, without `pspat ctl`'s own
/// check, and returns the daemon's answer, which must be a refusal.
fn refused_on_socket(socket: &Path, line: &str) -> serde_json::Value {
    let doc = answer_on_socket(socket, line);
    assert_eq!(doc["ok"], false, "{line}: {doc}");
    assert!(doc["result"].is_null(), "{line}: {doc}");
    doc
}

/// A `sched show --json` row by link number.
fn sched_row(doc: &serde_json::Value, number: u64) -> &serde_json::Value {
    doc["result"]["scheds"]
        .as_array()
        .expect("result.scheds")
        .iter()
        .find(|s| s["number"].as_u64() == Some(number))
        .unwrap_or_else(|| panic!("link {number} in {doc}"))
}

/// A `queue show --json` row by flowset number.
fn queue_row(doc: &serde_json::Value, number: u64) -> &serde_json::Value {
    doc["result"]["queues"]
        .as_array()
        .expect("result.queues")
        .iter()
        .find(|q| q["number"].as_u64() == Some(number))
        .unwrap_or_else(|| panic!("flowset {number} in {doc}"))
}

#[test]
fn typed_pipes_show_their_type_and_parameters_as_dry_run_prints_them() {
    let Some(bed) = Bed::new("typed-show", 236) else {
        return;
    };
    let file = config(&format!(
        "pipe 2 config bw 10Mbit/s type {FQ_CODEL} delay 3ms"
    ));
    let (child, _log) = bed.start(&file, &[]);
    let socket = bed.socket();
    // The file the daemon runs, as `--dry-run` prints it.
    let dry = dry_run(&bed.config());
    let (dry_1, dry_2) = (block(&dry, "00001:"), block(&dry, "00002:"));
    assert_eq!(settings(&dry_1), "type wf2q+", "{dry}");
    assert_eq!(settings(&dry_2), format!("type {FQ_CODEL}"), "{dry}");

    // pipe show: each pipe's rows as --dry-run prints them (no rule sends
    // a frame the bed's hosts make, so the counters are still 0).
    let all = ctl_text(&socket, &["pipe", "show"]);
    assert_eq!(block(&all, "00001:"), dry_1, "pipe show:\n{all}");
    assert_eq!(block(&all, "00002:"), dry_2, "pipe show:\n{all}");
    let one = ctl_text(&socket, &["pipe", "show", "1"]);
    assert_eq!(one, dry_1);
    let two = ctl_text(&socket, &["pipe", "show", "2"]);
    assert_eq!(two, dry_2);
    assert!(
        two.starts_with("00002:  10.000 Mbit/s    3 ms  pipe fq 1 instance(s)"),
        "{two}"
    );

    // Its --json: the same text, and the settings as --dry-run prints them.
    let doc = ctl_json(&socket, &["pipe", "show"]);
    assert_eq!(doc["text"], all.as_str());
    let pipes = &doc["result"];
    for (n, alg, delay_ns, dry) in [(1, "wf2q+", 0, &dry_1), (2, "fq", 3_000_000, &dry_2)] {
        let row = pipe(pipes, n);
        assert_eq!(row["settings"], settings(dry), "{row}");
        assert_eq!(row["alg"], alg, "{row}");
        assert_eq!(row["kind"], "pipe", "{row}");
        assert_eq!(row["bw_bps"], 10_000_000, "{row}");
        assert_eq!(row["delay_ns"], delay_ns, "{row}");
        assert_eq!(row["instances"], 1, "{row}");
        assert_eq!(row["in_packets"], 0, "{row}");
    }

    // sched show: each link's type with every parameter, the same words as
    // pipe show's settings.
    let scheds = ctl_text(&socket, &["sched", "show"]);
    let lines: Vec<&str> = scheds.lines().collect();
    assert_eq!(
        lines,
        [
            "00001:  10.000 Mbit/s pipe type wf2q+ instances 1".to_string(),
            format!(
                "00002:  10.000 Mbit/s pipe {} instances 1",
                settings(&dry_2)
            ),
        ],
        "{scheds}"
    );
    assert_eq!(
        ctl_text(&socket, &["sched", "show", "2"]),
        format!("{}\n", lines[1])
    );
    let doc = ctl_json(&socket, &["sched", "show"]);
    assert_eq!(doc["text"], scheds.as_str());
    let s1 = sched_row(&doc, 1);
    assert_eq!(
        (&s1["kind"], &s1["alg"], &s1["fq_codel"], &s1["fq_pie"]),
        (
            &"pipe".into(),
            &"wf2q+".into(),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ),
        "{s1}"
    );
    let s2 = sched_row(&doc, 2);
    assert_eq!(s2["alg"], "fq", "{s2}");
    assert_eq!(
        s2["fq_codel"].as_str(),
        settings(&dry_2).strip_prefix("type "),
        "{s2}"
    );
    assert_eq!(s2["fq_codel"], FQ_CODEL, "{s2}");
    assert!(s2["fq_pie"].is_null(), "{s2}");
    assert_eq!(
        (&s2["bw_bps"], &s2["delay_ns"], &s2["instances"]),
        (&10_000_000.into(), &3_000_000.into(), &1.into()),
        "{s2}"
    );

    // queue show: the flowsets' weights on the wf2q+ pipe, and fq_codel's
    // parameters lowered onto pipe 2's flowset: its CoDel, `limit` as its
    // queue and `flows` as its dynamic queues.
    let queues = ctl_text(&socket, &["queue", "show"]);
    let lines: Vec<&str> = queues.lines().collect();
    assert_eq!(
        lines,
        [
            "q00011: pipe 1 weight 1 lmax 1500 pri 0 50 sl. plr 0",
            "q00012: pipe 1 weight 4 lmax 1500 pri 0 50 sl. plr 0",
            "q00021: pipe 2 weight 1 lmax 1500 pri 0 2000 sl. plr 0 codel target 7ms interval 150ms \
             dynamic queues 0 of 256 (created 0, expired 0, overflowed 0)",
        ],
        "{queues}"
    );
    let doc = ctl_json(&socket, &["queue", "show"]);
    for (n, weight) in [(11, 1), (12, 4)] {
        let q = queue_row(&doc, n);
        assert_eq!(
            (&q["parent"], &q["weight"]),
            (&"pipe 1".into(), &weight.into()),
            "{q}"
        );
    }
    let q21 = queue_row(&doc, 21);
    assert_eq!(q21["parent"], "pipe 2", "{q21}");
    assert_eq!(q21["settings"], "codel target 7ms interval 150ms", "{q21}");
    assert_eq!(q21["queue_limit"], "2000 sl.", "{q21}");
    assert_eq!(q21["dynamic"]["capacity"], 256, "{q21}");

    // A live change of the pipe's bw and fq_codel's target (the type's line
    // is a whole setting: the other parameters are given again). Both are
    // applied in place: nothing is rebuilt.
    let line = format!("bw 20Mbit/s type {FQ_CODEL_CHANGED}");
    let mut words = vec!["pipe", "2", "config"];
    words.extend(line.split_whitespace());
    let doc = ctl_json(&socket, &words);
    assert_eq!(
        changes(&doc),
        [
            "pipe 2: bw 20.00 Mbit/s delay 3ms".to_string(),
            format!("pipe 2: type {FQ_CODEL_CHANGED}"),
            "queue 21: queue 2000 slots plr 0 codel target 9ms interval 150ms".to_string(),
        ],
        "{doc}"
    );
    // As --dry-run prints the file with the changed line.
    let changed = bed.dir.join("changed.ipfw");
    std::fs::write(
        &changed,
        config(&format!(
            "pipe 2 config bw 20Mbit/s type {FQ_CODEL_CHANGED} delay 3ms"
        )),
    )
    .unwrap();
    let dry_changed = dry_run(&changed);
    let dry_2_changed = block(&dry_changed, "00002:");
    assert_eq!(settings(&dry_2_changed), format!("type {FQ_CODEL_CHANGED}"));
    let all = ctl_text(&socket, &["pipe", "show"]);
    assert_eq!(block(&all, "00002:"), dry_2_changed, "{all}");
    assert_eq!(block(&all, "00001:"), dry_1, "pipe 1 unchanged: {all}");
    let row = pipe(&ctl_json(&socket, &["pipe", "show", "2"])["result"], 2).clone();
    assert_eq!(row["settings"], settings(&dry_2_changed), "{row}");
    assert_eq!(row["bw_bps"], 20_000_000, "{row}");
    let doc = ctl_json(&socket, &["sched", "show", "2"]);
    assert_eq!(sched_row(&doc, 2)["fq_codel"], FQ_CODEL_CHANGED, "{doc}");
    assert_eq!(sched_row(&doc, 2)["bw_bps"], 20_000_000, "{doc}");
    let doc = ctl_json(&socket, &["queue", "show", "21"]);
    assert_eq!(
        queue_row(&doc, 21)["settings"],
        "codel target 9ms interval 150ms",
        "{doc}"
    );

    // Malformed typed lines: refused by pspat ctl with exit status 2 and
    // one line naming the token, and by the daemon itself when sent on the
    // socket; pipe show is unchanged.
    let before_text = ctl_text(&socket, &["pipe", "show"]);
    let before_json = ctl_json(&socket, &["pipe", "show"])["result"]["pipes"].clone();
    for (words, error) in [
        (
            &["pipe", "2", "config", "type", "fq_codel", "target", "0ms"][..],
            "<ctl>:1:36: pipe 2 fq_codel target 0ms is out of range (allowed: 1us..=3600s)",
        ),
        (
            &["pipe", "1", "config", "type", "wf2q++"][..],
            "<ctl>:1:20: unknown scheduler type 'wf2q++'",
        ),
        (
            &[
                "pipe", "2", "config", "type", "fq_codel", "quantum", "600", "quantum", "700",
            ][..],
            "<ctl>:1:41: 'quantum' is given twice in this statement",
        ),
        (
            &["pipe", "1", "config", "type", "wf2q+", "target", "5ms"][..],
            "<ctl>:1:26: 'target' is a parameter of the fq_codel sched type",
        ),
    ] {
        let out = ctl(&socket, words);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{words:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{words:?}: {err}");
        assert!(
            err.starts_with(&format!("pspat: {error}")),
            "{words:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{words:?}: {out:?}");
        let answer = refused_on_socket(&socket, &words.join(" "));
        let reason = answer["error"].as_str().unwrap_or_default();
        assert!(reason.starts_with(error), "{words:?}: {answer}");
        assert_eq!(reason.lines().count(), 1, "{words:?}: {answer}");
    }
    assert_eq!(ctl_text(&socket, &["pipe", "show"]), before_text);
    assert_eq!(
        ctl_json(&socket, &["pipe", "show"])["result"]["pipes"],
        before_json
    );

    // A `type fq_codel` line that leaves parameters out sets them back to
    // their defaults, not the running values (docs/CONFIG.md).
    let doc = ctl_json(
        &socket,
        &[
            "pipe", "2", "config", "type", "fq_codel", "target", "9ms", "flows", "256",
        ],
    );
    let want = "fq_codel target 9ms interval 100ms ecn quantum 1514 limit 10240 flows 256";
    assert!(
        changes(&doc).contains(&format!("pipe 2: type {want}").as_str()),
        "{doc}"
    );
    let two = ctl_text(&socket, &["pipe", "show", "2"]);
    assert_eq!(settings(&two), format!("type {want}"), "{two}");
    let doc = ctl_json(&socket, &["sched", "show", "2"]);
    assert_eq!(sched_row(&doc, 2)["fq_codel"], want, "{doc}");

    // The wf2q+ pipe's bw: its link is rebuilt (docs/RUN.md, *What can
    // change live*), with its type and its flowsets' weights.
    let doc = ctl_json(&socket, &["pipe", "1", "config", "bw", "20Mbit/s"]);
    assert!(
        changes(&doc).contains(&"pipe 1 rebuilt (the packets it holds go on in the new one)"),
        "{doc}"
    );
    let one = ctl_text(&socket, &["pipe", "show", "1"]);
    assert!(
        one.starts_with("00001:  20.000 Mbit/s    0 ms  pipe wf2q+ 1 instance(s)"),
        "{one}"
    );
    assert_eq!(settings(&one), "type wf2q+", "{one}");
    let doc = ctl_json(&socket, &["sched", "show", "1"]);
    assert_eq!(sched_row(&doc, 1)["alg"], "wf2q+", "{doc}");
    assert_eq!(sched_row(&doc, 1)["bw_bps"], 20_000_000, "{doc}");
    let doc = ctl_json(&socket, &["queue", "show"]);
    assert_eq!(queue_row(&doc, 11)["weight"], 1, "{doc}");
    assert_eq!(queue_row(&doc, 12)["weight"], 4, "{doc}");

    // The final report carries the running settings too.
    let doc = finish(child);
    assert_eq!(pipe(&doc, 1)["settings"], "type wf2q+");
    assert_eq!(pipe(&doc, 2)["settings"], format!("type {want}"));
    assert_eq!(pipe(&doc, 2)["bw_bps"], 20_000_000);
}
