//! The test bed of the `pspat run` end-to-end tests (`run_e2e.rs`,
//! `run_control.rs`, `run_queues.rs`, `run_reverse.rs`): three namespaces
//! of the test's own (a sender, the bridge, a receiver) joined by two veth
//! pairs, the daemon started in the bridge namespace with its control
//! socket in the bed's directory, frames built and recognised by a marker,
//! the report's checks, and `pspat ctl` and `ping` through the bed. Every
//! name carries the `pspat-` prefix; addresses are 10.199.SUBNET.1 and .2.

#![allow(dead_code)] // each test file uses a part

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pspat_io::af_packet::{PacketRx, PacketTx, RxConfig, TxConfig};
use pspat_io::netns::{self, Namespace, VethPair};

const MAGIC: &[u8; 8] = b"pspat-rn";

pub struct Bed {
    // Dropped in this order: pairs, then namespaces.
    pub into: VethPair,
    pub out: VethPair,
    pub sender: Namespace,
    pub bridge: Namespace,
    pub receiver: Namespace,
    pub dir: PathBuf,
    subnet: u8,
}

impl Bed {
    /// A bed on 10.199.`subnet`.0/24, or `None` (reason printed) without
    /// root or namespaces.
    pub fn new(tag: &str, subnet: u8) -> Option<Bed> {
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
        let (a, b) = (
            format!("10.199.{subnet}.1/24"),
            format!("10.199.{subnet}.2/24"),
        );
        sender.ip(&["addr", "add", &a, "dev", &into.a]).unwrap();
        receiver.ip(&["addr", "add", &b, "dev", &out.b]).unwrap();
        let dir = std::env::temp_dir().join(format!("pspat-run-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Others may traverse it (the test of another user's request).
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(Bed {
            into,
            out,
            sender,
            bridge,
            receiver,
            dir,
            subnet,
        })
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("run.ipfw")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("pspat.sock")
    }

    /// The two interfaces the daemon reads: `--in`'s and `--out`'s ends in
    /// the bridge namespace.
    pub fn interfaces_read(&self) -> [String; 2] {
        [self.into.b.clone(), self.out.a.clone()]
    }

    /// Generic receive offload on `dev` of the bridge namespace: turned on
    /// or off (`Some`), or only read (`None`); the state read back.
    pub fn gro(&self, dev: &str, set: Option<bool>) -> bool {
        use pspat_io::offload;
        self.bridge
            .run(|| match set {
                Some(on) => offload::set_generic_receive_offload(dev, on),
                None => offload::generic_receive_offload(dev),
            })
            .expect("in the bridge namespace")
            .expect("GRO ioctl")
    }

    /// Starts `pspat run` on `config` in the bridge namespace with its
    /// control socket in the bed's directory and waits for `run: ready`;
    /// its stderr goes on being read into the returned channel.
    pub fn start(&self, config: &str, extra: &[&str]) -> (Child, mpsc::Receiver<String>) {
        std::fs::write(self.config(), config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pspat"));
        cmd.arg("run")
            .arg(self.config())
            .args(["--in", &self.into.b, "--out", &self.out.a, "--json"])
            .arg("--control")
            .arg(self.socket())
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
        wait_for(&rx, "run: ready", &mut child);
        (child, rx)
    }

    /// `GET path` over HTTP at `addr` (the daemon's `--metrics`), from
    /// inside the bridge's namespace (where the daemon's loopback is): the
    /// status line and the body.
    pub fn http_get(&self, addr: &str, path: &str) -> (String, String) {
        use std::io::Write;
        let mut stream = self
            .bridge
            .run(|| std::net::TcpStream::connect(addr))
            .unwrap()
            .expect("connect to the metrics endpoint");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        (
            head.lines().next().unwrap_or("").to_string(),
            body.to_string(),
        )
    }

    pub fn sender_socket(&self) -> PacketTx {
        self.sender
            .run(|| PacketTx::open(&self.into.a, &TxConfig::default()))
            .unwrap()
            .expect("open the sender")
    }

    /// Collects every frame built by [`Bed::frame`] that reaches the
    /// receiver. The ring holds 1 024 blocks, each handed over 1 ms after
    /// its first frame, so a receiver thread descheduled for up to about a
    /// second on a loaded machine loses nothing; [`Collector::finish`]
    /// says so if it did.
    pub fn receiver(&self) -> Collector {
        let cfg = RxConfig {
            block_timeout: Duration::from_millis(1),
            block_size: 32 << 10,
            blocks: 1024,
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
            let mut keep = |p: pspat_io::af_packet::RxPacket<'_>| {
                if let Some((port, seq, sent)) = parse(p.data) {
                    got.push(Arrival {
                        port,
                        seq,
                        sent,
                        at: p.timestamp.as_nanos() as u64,
                        len: p.frame_len() as u64,
                    });
                }
            };
            // Acquire: pairs with the Release store in `finish`.
            while !stop2.load(Ordering::Acquire) {
                rx.recv_with(Duration::from_millis(20), &mut keep)
                    .expect("receive");
            }
            // The last frames the daemon sent may still sit in the veth's
            // backlog or in a block the kernel has not handed over: read
            // until the ring stays empty for 100 ms.
            while rx
                .recv_with(Duration::from_millis(100), &mut keep)
                .expect("receive")
                > 0
            {}
            let ring_drops = rx.kernel_stats().expect("PACKET_STATISTICS").drops;
            (got, ring_drops)
        });
        Collector { stop, handle }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Stops the daemon (SIGTERM) and returns its JSON report.
pub fn finish(child: Child) -> serde_json::Value {
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    serde_json::from_str(&report_text(child)).expect("one JSON object")
}

/// Waits for the daemon to exit successfully; the text of its report on
/// stdout.
pub fn report_text(mut child: Child) -> String {
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "pspat run failed: {status}\n{stdout}");
    stdout
}

/// Waits up to 20 s for a stderr line containing `what`.
pub fn wait_for(rx: &mpsc::Receiver<String>, what: &str, child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(what) => return line,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                panic!("pspat run did not print `{what}`");
            }
        }
    }
}

/// Waits for the daemon's `run: metrics: http://ADDR/metrics` line and
/// returns `ADDR`.
pub fn metrics_addr(rx: &mpsc::Receiver<String>, child: &mut Child) -> String {
    let line = wait_for(rx, "run: metrics: http://", child);
    line.trim_start_matches("run: metrics: http://")
        .trim_end_matches("/metrics")
        .to_string()
}

#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub port: u16,
    pub seq: u32,
    pub sent: u64,
    pub at: u64,
    pub len: u64,
}

pub struct Collector {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<(Vec<Arrival>, u64)>,
}

impl Collector {
    /// Stops collecting once the ring has been empty for 100 ms and
    /// returns what arrived. Panics if the receiver's own ring dropped a
    /// frame: a loss of the bed, which no check on pspat may count.
    pub fn finish(self) -> Vec<Arrival> {
        // Release: pairs with the receiver thread's Acquire load.
        self.stop.store(true, Ordering::Release);
        let (got, ring_drops) = self.handle.join().expect("receiver thread");
        assert_eq!(
            ring_drops,
            0,
            "the test's receiver ring dropped {ring_drops} frames (its thread was starved); \
             {} arrived",
            got.len()
        );
        got
    }
}

pub fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

pub fn parse(data: &[u8]) -> Option<(u16, u32, u64)> {
    let at = data.windows(MAGIC.len()).position(|w| w == MAGIC)?;
    let seq = u32::from_be_bytes(data.get(at + 8..at + 12)?.try_into().ok()?);
    let port = u16::from_be_bytes(data.get(at + 12..at + 14)?.try_into().ok()?);
    let sent = u64::from_be_bytes(data.get(at + 14..at + 22)?.try_into().ok()?);
    Some((port, seq, sent))
}

impl Bed {
    /// A UDP frame (IPv4 and UDP checksums computed) from the sender's
    /// address to the receiver's, port `dport`, `len` bytes, carrying the
    /// marker, `seq` and `sent_ns`.
    pub fn frame(&self, dport: u16, seq: u32, sent_ns: u64, len: usize) -> Vec<u8> {
        self.frame_from(1, dport, seq, sent_ns, len)
    }
}

impl Bed {
    /// [`Bed::frame`] from another source address of the sender's subnet
    /// (10.199.subnet.`host`; same MAC).
    pub fn frame_from(&self, host: u8, dport: u16, seq: u32, sent_ns: u64, len: usize) -> Vec<u8> {
        let mut payload = MAGIC.to_vec();
        payload.extend_from_slice(&seq.to_be_bytes());
        payload.extend_from_slice(&dport.to_be_bytes());
        payload.extend_from_slice(&sent_ns.to_be_bytes());
        payload.resize(len.max(64) - 42, 0xee);
        let mut out = Vec::with_capacity(len);
        let s = self.subnet;
        PacketBuilder::ethernet2([2, 0x99, 0, 0, s, 1], [2, 0x99, 0, 0, s, 2])
            .ipv4([10, 199, s, host], [10, 199, s, 2], 64)
            .udp(4000, dport)
            .write(&mut out, &payload)
            .expect("build");
        out
    }
}

pub fn pipe(doc: &serde_json::Value, number: u64) -> &serde_json::Value {
    doc["pipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["number"].as_u64() == Some(number))
        .unwrap_or_else(|| panic!("pipe {number} in the report"))
}

/// Asserts that every drop reason of pipe object `p` is among `reasons`.
pub fn check_drop_reasons(p: &serde_json::Value, reasons: &[&str]) {
    let dropped = p["dropped"].as_object().expect("drops by reason");
    assert!(
        dropped.keys().all(|k| reasons.contains(&k.as_str())),
        "drops other than {reasons:?}: {p}"
    );
}

pub fn check_conservation(doc: &serde_json::Value) {
    let t = &doc["totals"];
    assert_eq!(t["in_flight"], 0, "{t}");
    assert_eq!(t["conserved"], true, "{t}");
    assert_eq!(t["pipes_conserved"], true, "{t}");
    // A pipe's copies (`duplicate`) enter at the transmitters.
    let received = t["received"].as_u64().unwrap() + t["duplicated"].as_u64().unwrap();
    let gone = t["transmitted"].as_u64().unwrap() + t["dropped_total"].as_u64().unwrap();
    assert_eq!(
        received, gone,
        "received + duplicated = transmitted + dropped: {t}"
    );
}

/// Sends every frame of `batch` on `tx`, however many calls it takes.
pub fn send_all(tx: &mut PacketTx, batch: &[Vec<u8>]) {
    let views: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
    let mut at = 0;
    while at < views.len() {
        at += tx.send_batch(&views[at..]).expect("send");
    }
}

/// Sleeps until the end of round `round` of `period` each since `start`.
pub fn pace(start: Instant, period: Duration, round: u32) {
    let next = start + period * (round + 1);
    std::thread::sleep(next.saturating_duration_since(Instant::now()));
}

/// `pspat ctl --socket SOCKET ARGS...`.
pub fn ctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pspat"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run pspat ctl")
}

/// `pspat ctl WORDS`, which must succeed: what it printed.
pub fn ctl_text(socket: &Path, words: &[&str]) -> String {
    let out = ctl(socket, words);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pspat ctl {words:?}: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The changes a `ctl --json` answer lists (`result.changes`).
pub fn changes(doc: &serde_json::Value) -> Vec<&str> {
    doc["result"]["changes"]
        .as_array()
        .expect("result.changes")
        .iter()
        .filter_map(|c| c.as_str())
        .collect()
}

/// `pspat ctl --json`: the daemon's answer, which must be `ok`.
pub fn ctl_json(socket: &Path, words: &[&str]) -> serde_json::Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(words);
    let out = ctl(socket, &args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pspat ctl {words:?}: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The top-level keys in the order docs/JSON.md lists them.
    assert_eq!(
        top_level_keys(&text),
        [
            "schema_version",
            "command",
            "request",
            "ok",
            "error",
            "text",
            "result"
        ]
    );
    let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
    assert_eq!(
        (
            doc["schema_version"].as_u64(),
            doc["command"].as_str(),
            doc["ok"].as_bool()
        ),
        (Some(1), Some("ctl"), Some(true))
    );
    doc
}

/// Sends `line` on the control socket as `pspat ctl` does (one line, then
/// the writing side closed), without `pspat ctl`'s own check of the line,
/// and returns the daemon's answer. Times the daemon alone: no process
/// start is included.
pub fn answer_on_socket(socket: &Path, line: &str) -> serde_json::Value {
    use std::io::Write;
    let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(format!("{line}\n").as_bytes()).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    serde_json::from_str(answer.trim()).expect("one JSON object")
}

/// [`answer_on_socket`], which must be `ok`.
pub fn request_on_socket(socket: &Path, line: &str) -> serde_json::Value {
    let doc = answer_on_socket(socket, line);
    assert_eq!(doc["ok"], true, "{line}: {doc}");
    doc
}

/// Whether `ping` can run here; says so when it cannot (CI installs
/// Debian's iputils-ping, `.ci/run`).
pub fn ping_missing() -> bool {
    let missing = Command::new("ping")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err();
    if missing {
        println!("skipped: ping is not installed (Debian: apt-get install iputils-ping)");
    }
    missing
}

/// `ping -c COUNT -i 0.2` from the sender to the receiver through a running
/// bridge; its output and (min, avg) RTT in ms.
pub fn ping_through(bed: &Bed, subnet: u8, count: u32) -> (String, f64, f64) {
    let out = bed
        .sender
        .run(|| {
            Command::new("ping")
                .args(["-n", "-c", &count.to_string(), "-i", "0.2", "-W", "2"])
                .arg(format!("10.199.{subnet}.2"))
                .output()
        })
        .unwrap()
        .expect("run ping");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "ping failed: {text}");
    let (min, avg) = ping_rtt(&text);
    (text, min, avg)
}

/// The (min, avg) RTT in ms of `ping`'s summary line
/// (`rtt min/avg/max/mdev = ...`).
pub fn ping_rtt(text: &str) -> (f64, f64) {
    let [min, avg, _, _] = ping_summary(text);
    (min, avg)
}

/// The min, avg, max and mdev RTT in ms of `ping`'s summary line (`rtt
/// min/avg/max/mdev = A/B/C/D ms`, followed by `, pipe N` when replies
/// came back later than the next request went out).
pub fn ping_summary(text: &str) -> [f64; 4] {
    let values: Vec<f64> = text
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.split_whitespace().next())
        .map(|v| v.split('/').map(|x| x.parse::<f64>().unwrap()).collect())
        .expect("ping's rtt line");
    values.try_into().expect("four values")
}

/// [`ping_through`]'s (min, avg) RTT in ms.
pub fn ping(bed: &Bed, subnet: u8, count: u32) -> (f64, f64) {
    let (_, min, avg) = ping_through(bed, subnet, count);
    (min, avg)
}

/// The top-level keys of pretty-printed JSON in the order printed (every
/// top-level key is at two spaces of indentation; serde_json's maps sort
/// theirs, so the order is read from the text).
pub fn top_level_keys(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("  \""))
        .filter_map(|l| l.split('"').next())
        .collect()
}

impl Bed {
    /// Turns segmentation and checksum offloads off where the host's stack
    /// sends, on the sender's and the receiver's ends: with them on, a veth
    /// hands the bridge 64 KiB aggregates, and frames whose checksums are
    /// left unfinished (TCP through the daemon).
    pub fn host_offloads_off(&self) {
        for (ns, dev) in [(&self.sender, &self.into.a), (&self.receiver, &self.out.b)] {
            let state =
                pspat_io::offload::disable_offloads_in(ns.name(), dev).expect("offloads off");
            assert!(state.all_off(), "{dev}: {:?}", state.features);
        }
    }

    /// Makes the receiver's stack take the frames [`Bed::frame`] builds: its
    /// end gets their destination MAC address.
    pub fn accept_own_frames(&self) {
        let mac = format!("02:99:00:00:{:02x}:02", self.subnet);
        self.receiver
            .ip(&["link", "set", "dev", &self.out.b, "address", &mac])
            .expect("set the receiver's MAC address");
    }

    /// The receiver namespace's counters from `/proc/net/snmp` and
    /// `/proc/net/netstat`, as `Ip.InHdrErrors`, `Udp.InErrors`,
    /// `IpExt.InCEPkts`, ...
    pub fn receiver_counters(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for file in ["snmp", "netstat"] {
            let text = self
                .receiver
                .run(|| std::fs::read_to_string(format!("/proc/thread-self/net/{file}")))
                .expect("enter the receiver namespace")
                .expect("read the receiver's counters");
            let lines: Vec<&str> = text.lines().collect();
            // Pairs of lines: `Proto: Name ...`, then `Proto: value ...`.
            for pair in lines.chunks(2) {
                let [names, values] = pair else { continue };
                let (Some((proto, names)), Some((_, values))) =
                    (names.split_once(':'), values.split_once(':'))
                else {
                    continue;
                };
                for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
                    if let Ok(v) = value.parse::<u64>() {
                        out.insert(format!("{proto}.{name}"), v);
                    }
                }
            }
        }
        out
    }

    /// A UDP socket of the receiver's own stack on its address and `port`,
    /// read by a thread of its own into [`UdpSink::finish`].
    pub fn udp_sink(&self, port: u16) -> UdpSink {
        let sock = self
            .receiver
            .run(|| std::net::UdpSocket::bind(format!("10.199.{}.2:{port}", self.subnet)))
            .expect("enter the receiver namespace")
            .expect("bind the receiver's socket");
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let handle = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 2048];
                loop {
                    match sock.recv(&mut buf) {
                        Ok(n) => got.push(buf[..n].to_vec()),
                        // Nothing for 20 ms: done once asked to stop.
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) =>
                        {
                            // Acquire: pairs with the Release store in
                            // `finish`.
                            if stop.load(Ordering::Acquire) {
                                break;
                            }
                        }
                        Err(e) => panic!("receive: {e}"),
                    }
                }
                got
            }
        });
        UdpSink { stop, handle }
    }
}

/// The payloads a UDP socket of the receiver's stack got, in order
/// ([`Bed::udp_sink`]).
pub struct UdpSink {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Vec<u8>>>,
}

impl UdpSink {
    /// Stops once the socket has been empty for 20 ms; what it got.
    pub fn finish(self) -> Vec<Vec<u8>> {
        // Release: pairs with the thread's Acquire load.
        self.stop.store(true, Ordering::Release);
        self.handle.join().expect("receiver thread")
    }
}

/// The sequence number of a payload [`Bed::frame`] built.
pub fn payload_seq(payload: &[u8]) -> Option<u32> {
    payload
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes)
}
