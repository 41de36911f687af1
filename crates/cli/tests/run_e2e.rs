//! `pspat run` end to end: the daemon between three namespaces it does not
//! own (a sender, the bridge, a receiver, joined by two veth pairs), fed
//! by this test. Every name carries the `pspat-` prefix and every address
//! is in 10.199.0.0/16. Skipped, with the reason printed, without root.
//!
//! * Delay: UDP frames built here (checksums computed, so no offload is
//!   involved) to a `delay 20ms` pipe and to a pipe without delay,
//!   interleaved; one-way latency = the receiver's kernel timestamp − the
//!   send time (one realtime clock, one process). The pipe adds 20 ms ± 1 ms
//!   to what the bridge alone costs, and never leaves early; `ping` through
//!   a `delay 40ms` pipe (the reverse direction is forwarded unshaped)
//!   measures 40 ms plus the bridge's own latency both ways (below 3 ms).
//! * Rate: a greedy UDP stream at 20 Mbit/s into `bw 10Mbit/s` arrives at
//!   10 Mbit/s ± 2% (frame bytes over arrival time, steady state), the
//!   excess dropped at the pipe's queue limit and counted; two RX threads
//!   (PACKET_FANOUT) share the one classifier.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pspat_io::af_packet::{PacketRx, PacketTx, RxConfig, TxConfig};
use pspat_io::netns::{self, Namespace, VethPair};

const MAGIC: &[u8; 8] = b"pspat-rn";

struct Bed {
    // Dropped in this order: pairs, then namespaces.
    into: VethPair,
    out: VethPair,
    sender: Namespace,
    bridge: Namespace,
    receiver: Namespace,
    dir: std::path::PathBuf,
}

impl Bed {
    fn new(tag: &str) -> Option<Bed> {
        if let Some(reason) = netns::unavailable() {
            println!("skipped: {reason}");
            return None;
        }
        let sender = Namespace::create().expect("sender namespace");
        let bridge = Namespace::create().expect("bridge namespace");
        let receiver = Namespace::create().expect("receiver namespace");
        let into = VethPair::create(&sender, &bridge).expect("input pair");
        let out = VethPair::create(&bridge, &receiver).expect("output pair");
        // One subnet from the sender to the receiver, across the bridge.
        sender
            .ip(&["addr", "add", "10.199.250.1/24", "dev", &into.a])
            .unwrap();
        receiver
            .ip(&["addr", "add", "10.199.250.2/24", "dev", &out.b])
            .unwrap();
        let dir = std::env::temp_dir().join(format!("pspat-run-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Bed {
            into,
            out,
            sender,
            bridge,
            receiver,
            dir,
        })
    }

    /// Starts `pspat run` on `config` in the bridge namespace and waits for
    /// `run: ready`; its stderr goes on being read into the returned channel.
    fn start(&self, config: &str, extra: &[&str]) -> (Child, mpsc::Receiver<String>) {
        let path = self.dir.join("run.ipfw");
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pspat"));
        cmd.arg("run")
            .arg(&path)
            .args(["--in", &self.into.b, "--out", &self.out.a, "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = self
            .bridge
            .run(|| cmd.spawn())
            .unwrap()
            .expect("spawn pspat run");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[pspat] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.starts_with("run: ready") => break,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    panic!("pspat run did not print `run: ready`");
                }
            }
        }
        (child, rx)
    }

    fn sender_socket(&self) -> PacketTx {
        self.sender
            .run(|| PacketTx::open(&self.into.a, &TxConfig::default()))
            .unwrap()
            .expect("open the sender")
    }

    /// Collects `(dst port, seq, send ns, receive ns, frame length)` of
    /// every frame built by [`frame`] that reaches the receiver.
    fn receiver(&self) -> Collector {
        let cfg = RxConfig {
            block_timeout: Duration::from_millis(1),
            ..RxConfig::default()
        };
        let mut rx = self
            .receiver
            .run(|| PacketRx::open(&self.out.b, &cfg))
            .unwrap()
            .expect("open the receiver");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut got = Vec::new();
            // Acquire: pairs with the Release store in `finish`.
            while !stop2.load(Ordering::Acquire) {
                rx.recv_with(Duration::from_millis(20), |p| {
                    if let Some((port, seq, sent)) = parse(p.data) {
                        let at = p.timestamp.as_nanos() as u64;
                        got.push(Arrival {
                            port,
                            seq,
                            sent,
                            at,
                            len: p.frame_len() as u64,
                        });
                    }
                })
                .expect("receive");
            }
            got
        });
        Collector { stop, handle }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Clone, Copy, Debug)]
struct Arrival {
    port: u16,
    seq: u32,
    sent: u64,
    at: u64,
    len: u64,
}

struct Collector {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Arrival>>,
}

impl Collector {
    fn finish(self) -> Vec<Arrival> {
        // Release: pairs with the receiver thread's Acquire load.
        self.stop.store(true, Ordering::Release);
        self.handle.join().expect("receiver thread")
    }
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A UDP frame (IPv4 and UDP checksums computed) from 10.199.250.1 to
/// 10.199.250.2 port `dport`, `len` bytes, carrying the marker, `seq` and
/// the send time.
fn frame(dport: u16, seq: u32, sent_ns: u64, len: usize) -> Vec<u8> {
    let mut payload = MAGIC.to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.extend_from_slice(&dport.to_be_bytes());
    payload.extend_from_slice(&sent_ns.to_be_bytes());
    payload.resize(len.max(64) - 42, 0xee);
    let mut out = Vec::with_capacity(len);
    PacketBuilder::ethernet2([2, 0x99, 0, 0, 0, 1], [2, 0x99, 0, 0, 0, 2])
        .ipv4([10, 199, 250, 1], [10, 199, 250, 2], 64)
        .udp(4000, dport)
        .write(&mut out, &payload)
        .expect("build");
    out
}

fn parse(data: &[u8]) -> Option<(u16, u32, u64)> {
    let at = data.windows(MAGIC.len()).position(|w| w == MAGIC)?;
    let seq = u32::from_be_bytes(data.get(at + 8..at + 12)?.try_into().ok()?);
    let port = u16::from_be_bytes(data.get(at + 12..at + 14)?.try_into().ok()?);
    let sent = u64::from_be_bytes(data.get(at + 14..at + 22)?.try_into().ok()?);
    Some((port, seq, sent))
}

/// Waits for the daemon to exit; its JSON report.
fn finish(mut child: Child) -> serde_json::Value {
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "pspat run failed: {status}\n{stdout}");
    // The top-level keys in the order docs/JSON.md lists them (every
    // top-level key is at two spaces of indentation).
    let keys: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  \""))
        .filter_map(|l| l.split('"').next())
        .collect();
    assert_eq!(
        keys,
        [
            "schema_version",
            "command",
            "config",
            "input",
            "output",
            "elapsed_s",
            "pipes",
            "rules",
            "classifier",
            "totals",
            "reverse",
            "error"
        ]
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(
        (doc["schema_version"].as_u64(), doc["command"].as_str()),
        (Some(1), Some("run"))
    );
    doc
}

fn pipe(doc: &serde_json::Value, number: u64) -> &serde_json::Value {
    doc["pipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["number"].as_u64() == Some(number))
        .unwrap_or_else(|| panic!("pipe {number} in the report"))
}

fn check_conservation(doc: &serde_json::Value) {
    let t = &doc["totals"];
    assert_eq!(t["in_flight"], 0, "{t}");
    assert_eq!(t["conserved"], true, "{t}");
    assert_eq!(t["pipes_conserved"], true, "{t}");
    let received = t["received"].as_u64().unwrap();
    let gone = t["transmitted"].as_u64().unwrap() + t["dropped_total"].as_u64().unwrap();
    assert_eq!(received, gone, "received = transmitted + dropped: {t}");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn run_delays_each_pipe_by_its_own_delay_to_the_millisecond() {
    let Some(bed) = Bed::new("delay") else {
        return;
    };
    let config = "\
        pipe 1 config delay 20ms\n\
        pipe 2 config\n\
        pipe 3 config delay 40ms\n\
        add 100 pipe 1 udp from any to any dst-port 5001\n\
        add 200 pipe 2 udp from any to any dst-port 5002\n\
        add 300 pipe 3 icmp from any to any\n\
        default allow\n";
    let (child, _log) = bed.start(config, &["--duration", "6"]);
    let collector = bed.receiver();
    let ping = bed
        .sender
        .run(|| {
            Command::new("ping")
                .args(["-n", "-c", "10", "-i", "0.2", "-W", "2", "10.199.250.2"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .unwrap()
        .expect("spawn ping");
    let mut tx = bed.sender_socket();
    for seq in 0..400u32 {
        for port in [5001u16, 5002] {
            let f = frame(port, seq, realtime_ns(), 200);
            assert_eq!(tx.send_batch(&[f.as_slice()]).expect("send"), 1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ping = ping.wait_with_output().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let got = collector.finish();
    let doc = finish(child);
    check_conservation(&doc);
    let latency = |port: u16| -> Vec<f64> {
        got.iter()
            .filter(|a| a.port == port)
            .map(|a| (a.at as f64 - a.sent as f64) / 1e6)
            .collect()
    };
    let (mut slow, mut fast) = (latency(5001), latency(5002));
    assert!(
        slow.len() >= 390 && fast.len() >= 390,
        "frames lost: {} {}",
        slow.len(),
        fast.len()
    );
    // Order kept within each pipe.
    for port in [5001u16, 5002] {
        let seqs: Vec<u32> = got
            .iter()
            .filter(|a| a.port == port)
            .map(|a| a.seq)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "order of port {port}");
    }
    let (min_slow, min_fast) = (
        slow.iter().copied().fold(f64::MAX, f64::min),
        fast.iter().copied().fold(f64::MAX, f64::min),
    );
    let (m_slow, m_fast) = (median(&mut slow), median(&mut fast));
    let p99 = slow[slow.len() * 99 / 100];
    println!(
        "one-way latency, ms: delay 20ms pipe median {m_slow:.3} min {min_slow:.3} p99 {p99:.3}; \
         no-delay pipe median {m_fast:.3} min {min_fast:.3}; difference of medians {:.3}",
        m_slow - m_fast
    );
    // Never early: the pipe holds each packet 20 ms after the bridge got it.
    assert!(min_slow >= 20.0, "a packet left early: {min_slow} ms");
    // The pipe adds 20 ms ± 1 ms to what the bridge alone costs.
    assert!((m_slow - m_fast - 20.0).abs() <= 1.0, "{m_slow} - {m_fast}");
    assert!(m_slow <= 22.0, "median one-way {m_slow} ms");
    assert_eq!(pipe(&doc, 1)["delay_ns"], 20_000_000);
    assert!(pipe(&doc, 1)["out_packets"].as_u64().unwrap() >= 400);
    // ping: 40 ms one way, the reply unshaped.
    let text = String::from_utf8_lossy(&ping.stdout);
    println!("{text}");
    assert!(ping.status.success(), "ping failed: {text}");
    let rtt = text
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .and_then(|l| l.split('=').nth(1))
        .map(|v| {
            v.trim()
                .trim_end_matches(" ms")
                .split('/')
                .map(|x| x.parse::<f64>().unwrap())
                .collect::<Vec<_>>()
        })
        .expect("ping's rtt line");
    let (min_rtt, avg_rtt) = (rtt[0], rtt[1]);
    println!("ping through delay 40ms: min {min_rtt} avg {avg_rtt} ms");
    assert!(min_rtt >= 40.0, "ping faster than the pipe: {min_rtt}");
    // 40 ms plus the bridge's own latency both ways (each direction's RX
    // ring hands a lone frame over within its 1 ms block timeout).
    assert!(min_rtt <= 43.0, "ping {min_rtt} ms");
    assert!(pipe(&doc, 3)["out_packets"].as_u64().unwrap() >= 10);
    // ARP went through the pass pipe.
    assert!(doc["classifier"]["not_ip_passed"].as_u64().unwrap() >= 1);
}

#[test]
fn run_holds_a_greedy_udp_stream_to_the_pipe_rate() {
    let Some(bed) = Bed::new("rate") else {
        return;
    };
    let config = "\
        pipe 1 config bw 10Mbit/s queue 100\n\
        add 100 pipe 1 udp from any to any dst-port 6000\n\
        default deny\n";
    let (child, _log) = bed.start(config, &["--rx-threads", "2"]);
    let collector = bed.receiver();
    let mut tx = bed.sender_socket();
    // 20 Mbit/s of 1000-byte frames (2500 a second) for 4 s, in bursts of
    // 25 every 10 ms.
    let start = Instant::now();
    let mut seq = 0u32;
    for round in 0..400u32 {
        let batch: Vec<Vec<u8>> = (0..25)
            .map(|_| {
                seq += 1;
                frame(6000, seq, realtime_ns(), 1000)
            })
            .collect();
        let views: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
        let mut at = 0;
        while at < views.len() {
            at += tx.send_batch(&views[at..]).expect("send");
        }
        let next = start + Duration::from_millis(10 * u64::from(round + 1));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let doc = finish(child);
    let got = collector.finish();
    check_conservation(&doc);
    let p1 = pipe(&doc, 1);
    assert!(
        p1["dropped"]["flow_limit"].as_u64().unwrap_or(0) > 0,
        "{p1}"
    );
    // Steady state: from 0.5 s after the first arrival to the last one.
    let first = got.first().expect("frames arrived").at;
    let window: Vec<&Arrival> = got.iter().filter(|a| a.at >= first + 500_000_000).collect();
    assert!(window.len() > 1000, "{} frames", window.len());
    let span = (window.last().unwrap().at - window[0].at) as f64 / 1e9;
    let bytes: u64 = window[1..].iter().map(|a| a.len).sum();
    let rate = bytes as f64 * 8.0 / span;
    println!(
        "received {:.4} Mbit/s over {span:.3} s ({} frames); pipe in {} out {} dropped {}",
        rate / 1e6,
        window.len(),
        p1["in_packets"],
        p1["out_packets"],
        p1["dropped_total"]
    );
    assert!((rate / 10e6 - 1.0).abs() <= 0.02, "rate {rate} bit/s");
}
