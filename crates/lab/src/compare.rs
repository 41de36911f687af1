//! `pspat lab compare`: the experiments of PSPAT \[J\] §6 through the lab's
//! three shaper modes (kernel bridge = `none`, bridge + HTB = `htb`,
//! `pspat shape` = `pspat`), with the same traffic for each.
//!
//! * **Throughput against senders** (\[J\] Fig. 7-9): S greedy sender
//!   threads, one flow each with equal weights, 60-byte frames; the figure
//!   is packets/s at the receiver. The shapers get a rate far above what
//!   the machine forwards (10 Gbit/s), so they schedule without limiting.
//! * **10:1 split** (\[J\] §6.5): two flows weighted 10:1 at the shaper,
//!   each offering half of `f · R` (60-byte frames); the figure is the heavy
//!   flow's share of received bytes against the ideal weighted max-min
//!   share (0.5 while `f ≤ 1`, then `min(f/2, 10/11) / min(f, 1)`).
//! * **Victim** (\[J\] §6.6): one flow at 4000 packets/s of 1500-byte frames
//!   with weight 50 among greedy 1500-byte senders of weight 1 that
//!   overload the rate R; the figure is the victim's one-way latency,
//!   against the victim alone through the bare bridge (`unloaded`). With
//!   several RX rings asked for ([`CompareConfig::rx_rings`]), mode pspat
//!   runs once with each, in turn within every repeat.
//! * **Local senders** (\[J\] Fig. 7 and 9, the papers' own setting): S
//!   greedy sender threads of one process in the sender namespace, one
//!   flow each, 60-byte frames, through the bare bridge; the figure is
//!   packets/s at the receiver when the threads send (a) `direct`ly with
//!   `sendmmsg`, no qdisc on the sender's veth, (b) directly through HTB on
//!   the sender's veth (`htb`, the same plan as mode htb at 10 Gbit/s), (c)
//!   as clients of a pspat runtime (`pspat`, `traffic send --via pspat`:
//!   DRR, link 10 Gbit/s, the arbiter sends, on the shaper CPU).
//! * **CPU per million packets**: CPU seconds (user + system, from
//!   `/proc/<pid>/stat`) of the run's own processes, senders, receiver and
//!   shaper, over the packets received, in millions; beside it the busy CPU
//!   seconds of the whole machine (`/proc/stat`: kernel softirq forwarding
//!   included, but also whatever else the machine ran).
//!
//! Rates and shares count the middle 60% of each run (the receiver's
//! steady window from 20% after the first packet), leaving out the start
//! and the drain of queues after the senders stop.
//!
//! Modes alternate within each experiment point (none, htb, pspat, and
//! again for each repeat), so drift of a shared machine spreads over all.
//! Every run is a fresh receiver, sender(s) and (mode pspat) shaper, each
//! a child process `ip netns exec <namespace> <this binary> ...`; the
//! shaper's arbiter is pinned to the shaper CPU (`--arbiter-cpu`), its RX
//! threads and dispatcher and all the traffic (`--cpu`) to the traffic CPU. When `pspat shape` does not exist in the
//! binary, or fails, its figures are null and the reason is kept; no
//! figure is ever filled in.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use pspat_io::RxRing;
use serde::Serialize;
use serde_json::Value;

use crate::procstat;
use crate::stop;
use crate::topology::{
    self, HtbPlan, Lab, LabError, Mode, DEFAULT_QUEUE_LIMIT, NS_RCV, NS_SHP, NS_SND,
};
use crate::traffic::Latency;

/// The first flow's port in every experiment. A multiple of 64 so that
/// `port % N` (pspat shape's `dst-port` key) is the flow index for N ≤ 64
/// that divides 64; other N are mapped explicitly (`pspat_weights`).
pub const BASE_PORT: u16 = 5056;

/// The parameters of a comparison.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// The `pspat` binary to run children from.
    pub exe: PathBuf,
    /// Where files go.
    pub out: PathBuf,
    /// A short run for CI.
    pub quick: bool,
    /// Sender counts of the throughput experiment.
    pub senders: Vec<usize>,
    /// Offered load fractions of the split experiment.
    pub split_fractions: Vec<f64>,
    /// R of the split experiment, bit/s.
    pub split_rate_bps: u64,
    /// R of the victim experiment, bit/s.
    pub victim_rate_bps: u64,
    /// Greedy senders in the victim experiment.
    pub victim_greedy: usize,
    /// Length of each run.
    pub duration: Duration,
    /// Runs per mode and point.
    pub repeat: usize,
    /// pspat shape's `--alg`.
    pub alg: String,
    /// CPU of the shaper's arbiter.
    pub shaper_cpu: usize,
    /// CPU of senders and receivers.
    pub traffic_cpu: usize,
    /// The modes compared.
    pub modes: Vec<Mode>,
    /// Sender counts of the local-senders experiment.
    pub local_senders: Vec<usize>,
    /// Dispatcher threads of the local senders' pspat runtime (0: the
    /// arbiter sends; else they run on the traffic CPU).
    pub local_dispatchers: usize,
    /// The experiments run, among [`EXPERIMENTS`].
    pub experiments: Vec<String>,
    /// pspat shape's `--rx-ring` (empty: its default). With several, the
    /// victim experiment runs mode pspat once with each, in turn, labelled
    /// `pspat-v2`, `pspat-v3`; every other run uses the first.
    pub rx_rings: Vec<RxRing>,
    /// Packets one flow may hold, the same for both shapers: pspat
    /// shape's `--queue-limit` and a `pfifo` of this limit under each HTB
    /// class (default [`DEFAULT_QUEUE_LIMIT`], what HTB gives a class
    /// without a queue of its own on a veth device).
    pub queue_limit: u32,
    /// pspat shape's `--dispatchers`: dispatcher threads on the traffic
    /// CPU; 0 (the default, the reference's mode): the arbiter transmits,
    /// on the shaper CPU.
    pub shape_dispatchers: usize,
    /// CPU of pspat shape's RX threads (`None`, the default: the shaper
    /// CPU, so that the whole shaper has one core and the traffic the
    /// other).
    pub shape_rx_cpu: Option<usize>,
    /// pspat shape's `--io` (`af-packet`, the default, or `xdp`, which
    /// needs a `pspat` built with the cargo feature `xdp`).
    pub shape_io: ShapeIo,
}

/// pspat shape's I/O back end in the lab (`--io`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShapeIo {
    /// AF_PACKET rings and `sendmmsg`.
    #[default]
    AfPacket,
    /// AF_XDP sockets (copy mode on veth).
    Xdp,
}

impl ShapeIo {
    /// `af-packet` or `xdp`, as `pspat shape --io` takes it.
    pub const fn name(self) -> &'static str {
        match self {
            ShapeIo::AfPacket => "af-packet",
            ShapeIo::Xdp => "xdp",
        }
    }
}

/// The experiments' names, in the order they run.
pub const EXPERIMENTS: [&str; 4] = ["throughput", "split_10_1", "victim", "local_senders"];

impl CompareConfig {
    /// The defaults of a full run (`quick` shortens them).
    pub fn new(exe: PathBuf, quick: bool) -> Self {
        Self {
            exe,
            out: PathBuf::from("target/lab"),
            quick,
            senders: if quick {
                vec![1, 4]
            } else {
                vec![1, 2, 4, 8, 16, 32, 64]
            },
            split_fractions: if quick {
                vec![0.5, 1.0, 1.5]
            } else {
                vec![0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5]
            },
            split_rate_bps: 10_000_000,
            victim_rate_bps: 200_000_000,
            victim_greedy: 4,
            duration: if quick {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(3)
            },
            repeat: 1,
            alg: "drr".into(),
            shaper_cpu: 0,
            traffic_cpu: 1,
            modes: vec![Mode::Bridge, Mode::Htb, Mode::Pspat],
            local_senders: if quick { vec![1, 4] } else { vec![1, 2, 4, 8] },
            local_dispatchers: 0,
            experiments: EXPERIMENTS.iter().map(|e| (*e).to_owned()).collect(),
            rx_rings: Vec::new(),
            queue_limit: DEFAULT_QUEUE_LIMIT,
            shape_dispatchers: 0,
            shape_io: ShapeIo::AfPacket,
            shape_rx_cpu: None,
        }
    }

    fn runs(&self, experiment: &str) -> bool {
        self.experiments.iter().any(|e| e == experiment)
    }
}

pub use crate::compare_report::{
    CompareReport, LocalSendersRow, RunRecord, SplitRow, ThroughputRow, VictimResult,
};

/// A child process whose standard error is read line by line.
struct Proc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn spawn(name: &str, program: &str, args: &[String]) -> Result<Self, LabError> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| LabError::Io {
                what: format!("cannot start {name} (`{program}`)"),
                source,
            })?;
        let (tx, rx) = channel();
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self {
            name: name.to_owned(),
            child,
            lines: rx,
            seen: Vec::new(),
        })
    }

    /// Waits for a line starting with `prefix`; `Err` with what the child
    /// said when it ends first or the time runs out.
    fn wait_for(&mut self, prefix: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if stop::requested() {
                return Err("interrupted".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{}: no `{prefix}` line within {timeout:?}",
                    self.name
                ));
            }
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(line) => {
                    let ready = line.starts_with(prefix);
                    self.seen.push(line);
                    if ready {
                        return Ok(());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.child.wait();
                    let said = self.said();
                    return Err(format!("{} ended: {said}", self.name));
                }
            }
        }
    }

    fn said(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let text = self.seen.join(" / ");
        if text.is_empty() {
            "(nothing on stderr)".into()
        } else {
            text
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// Waits for the child to end (after `timeout`, SIGKILL) and parses
    /// its standard output as one JSON value.
    fn finish(mut self, timeout: Duration) -> Result<Value, String> {
        let deadline = Instant::now() + timeout;
        let mut passed_on = false;
        loop {
            if stop::requested() && !passed_on {
                // Ctrl-C reached this process only (e.g. `timeout -s INT`):
                // pass it on so the child reports and ends.
                self.signal(rustix::process::Signal::INT);
                passed_on = true;
            }
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() >= deadline => {
                    self.signal(rustix::process::Signal::KILL);
                    let _ = self.child.wait();
                    return Err(format!("{} did not end within {timeout:?}", self.name));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("{}: {e}", self.name)),
            }
        }
        let mut text = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        }
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            let said = self.said();
            return Err(format!("{} exited with {status}: {said}", self.name));
        }
        let parsed = serde_json::from_str(text.trim());
        parsed.map_err(|e| {
            let said = self.said();
            format!("{} printed no JSON object ({e}): {said}", self.name)
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One sender process's parameters.
struct SenderSpec {
    base_port: u16,
    weights: Vec<u32>,
    threads: usize,
    size: usize,
    /// `None`: greedy; `Some(pps)`.
    pps: Option<u64>,
    /// More `traffic send` arguments (`--via pspat ...`).
    extra: Vec<String>,
}

/// Where a run is: experiment, mode and point.
#[derive(Clone, Copy)]
struct Point {
    experiment: &'static str,
    /// `none`, `htb`, `pspat` or `unloaded`.
    label: &'static str,
    mode: Mode,
    point: f64,
    /// Flows the receiver listens for.
    flows: usize,
}

/// A shaper setup for one run.
struct ShapeSpec {
    rate_bps: u64,
    /// Weights of flows `BASE_PORT + i`.
    weights: Vec<u32>,
}

/// Weights as `pspat shape --flow-key dst-port --flows N` sees them:
/// flow `port % N` for port `BASE_PORT + i`.
pub fn pspat_weights(weights: &[u32]) -> Vec<u32> {
    let n = weights.len();
    let mut out = vec![1; n];
    for (i, &w) in weights.iter().enumerate() {
        out[(usize::from(BASE_PORT) + i) % n] = w;
    }
    out
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

struct Runner<'a> {
    config: &'a CompareConfig,
    exe: String,
    pspat_missing: Option<String>,
    runs: Vec<RunRecord>,
    /// pspat shape's `--rx-ring` for the next runs (None: its default).
    rx_ring: Option<RxRing>,
}

impl Runner<'_> {
    fn traffic(&self, ns: &str, name: &str, args: Vec<String>) -> Result<Proc, LabError> {
        let mut all: Vec<String> = vec!["netns".into(), "exec".into(), ns.into(), self.exe.clone()];
        all.push("traffic".into());
        all.extend(args);
        Proc::spawn(name, "ip", &all)
    }

    fn shaper(&self, spec: &ShapeSpec) -> Result<Proc, LabError> {
        let mut all: Vec<String> = vec!["netns".into(), "exec".into(), NS_SHP.into()];
        all.push(self.exe.clone());
        all.extend(
            [
                "shape",
                "--in",
                topology::SHP_IN,
                "--out",
                topology::SHP_OUT,
                "--rate",
            ]
            .map(String::from),
        );
        all.push(spec.rate_bps.to_string());
        all.extend(["--alg".into(), self.config.alg.clone()]);
        all.extend(["--flows".into(), spec.weights.len().to_string()]);
        all.extend(["--flow-key".into(), "dst-port".into()]);
        all.extend(["--weights".into(), join(&pspat_weights(&spec.weights))]);
        all.extend(["--queue-limit".into(), self.config.queue_limit.to_string()]);
        // The arbiter alone on the shaper CPU, its RX threads and
        // dispatchers beside the traffic (none: the arbiter transmits).
        all.extend(["--arbiter-cpu".into(), self.config.shaper_cpu.to_string()]);
        all.extend([
            "--dispatchers".into(),
            self.config.shape_dispatchers.to_string(),
        ]);
        if self.config.shape_dispatchers > 0 {
            all.extend([
                "--dispatcher-cpu".into(),
                self.config.traffic_cpu.to_string(),
            ]);
        }
        all.extend([
            "--rx-cpus".into(),
            self.config
                .shape_rx_cpu
                .unwrap_or(self.config.shaper_cpu)
                .to_string(),
        ]);
        if let Some(ring) = self.rx_ring {
            all.extend(["--rx-ring".into(), ring.name().into()]);
        }
        if self.config.shape_io != ShapeIo::AfPacket {
            all.extend(["--io".into(), self.config.shape_io.name().into()]);
        }
        all.push("--json".into());
        Proc::spawn("pspat shape", "ip", &all)
    }

    /// One run of `mode` with a receiver for `flows` flows and `senders`.
    fn run(
        &mut self,
        lab: &mut Lab,
        at: &Point,
        senders: &[SenderSpec],
        shape: &ShapeSpec,
    ) -> Result<RunRecord, LabError> {
        let Point {
            experiment,
            label,
            mode,
            point,
            flows,
        } = *at;
        let mut record = RunRecord {
            experiment,
            mode: label.to_owned(),
            point,
            sent: 0,
            sent_by_sender: Vec::new(),
            received: 0,
            not_received: 0,
            pps: 0.0,
            cpu_s_per_mpkt: None,
            machine_cpu_s_per_mpkt: None,
            shaper_cpu_s: None,
            flow_bytes: Vec::new(),
            flow0_received: 0,
            flow0_latency: Latency::default(),
            flow0_arrival_latency: None,
            shaper: None,
            sender_pspat: Vec::new(),
            error: None,
        };
        if mode == Mode::Pspat {
            if let Some(reason) = &self.pspat_missing {
                record.error = Some(reason.clone());
                return Ok(record);
            }
        }
        let plan = HtbPlan {
            rate_bps: shape.rate_bps,
            weights: shape.weights.clone(),
            base_port: BASE_PORT,
            leaf_limit: Some(self.config.queue_limit),
        };
        lab.set_mode(mode, Some(&plan))?;
        eprintln!(
            "lab compare: {experiment} {label} point {point}: {} s",
            self.config.duration.as_secs_f64()
        );
        let cpu = self.config.traffic_cpu.to_string();
        // Shares and rates count the middle 60% of the run: no start-up,
        // no drain after the senders stop.
        let skip = self.config.duration / 5;
        let span = self.config.duration * 3 / 5;
        let mut receiver = self.traffic(
            NS_RCV,
            "traffic recv",
            [
                "recv",
                "--port",
                &BASE_PORT.to_string(),
                "--flows",
                &flows.to_string(),
                "--cpu",
                &cpu,
                "--steady-skip",
                &format!("{}ms", skip.as_millis()),
                "--steady-span",
                &format!("{}ms", span.as_millis()),
                "--json",
            ]
            .map(String::from)
            .into_iter()
            .chain(matches!(experiment, "victim" | "demo").then(|| "--arrival-latency".to_string()))
            .collect(),
        )?;
        if let Err(e) = receiver.wait_for("traffic: ready", Duration::from_secs(5)) {
            record.error = Some(e);
            return Ok(record);
        }
        let mut shaper = None;
        if mode == Mode::Pspat {
            let mut proc = self.shaper(shape)?;
            match proc.wait_for("shape: ready", Duration::from_secs(10)) {
                Ok(()) => shaper = Some(proc),
                Err(e) => {
                    let missing = e.contains("unrecognized subcommand");
                    let reason = if missing {
                        "`pspat shape` is not in this binary (unrecognized subcommand)".to_owned()
                    } else {
                        format!("pspat shape failed to start: {e}")
                    };
                    if missing {
                        eprintln!("lab compare: {reason}; pspat columns stay null");
                        self.pspat_missing = Some(reason.clone());
                    }
                    record.error = Some(reason);
                    return Ok(record);
                }
            }
        }
        let busy_before = procstat::machine_busy_s();
        let mut procs = Vec::new();
        for (i, s) in senders.iter().enumerate() {
            let mut args: Vec<String> = [
                "send",
                "--dst",
                topology::RCV_ADDR,
                "--port",
                &s.base_port.to_string(),
                "--weights",
                &join(&s.weights),
                "--threads",
                &s.threads.to_string(),
                "--size",
                &s.size.to_string(),
                "--duration",
                &format!("{}ms", self.config.duration.as_millis()),
                "--cpu",
                &cpu,
                "--json",
            ]
            .map(String::from)
            .to_vec();
            if let Some(pps) = s.pps {
                args.extend(["--pps".into(), pps.to_string()]);
            }
            args.extend(s.extra.iter().cloned());
            procs.push(self.traffic(NS_SND, &format!("traffic send #{i}"), args)?);
        }
        let mut sent = Vec::new();
        for p in procs {
            match p.finish(self.config.duration + Duration::from_secs(10)) {
                Ok(v) => sent.push(v),
                Err(e) => {
                    record.error = Some(e);
                    return Ok(record);
                }
            }
        }
        // Let queues drain into the receiver before anything stops.
        std::thread::sleep(Duration::from_millis(300));
        let busy_after = procstat::machine_busy_s();
        if let Some(shaper) = shaper.take() {
            record.shaper_cpu_s = procstat::process_cpu_s(shaper.pid());
            shaper.signal(rustix::process::Signal::INT);
            match shaper.finish(Duration::from_secs(10)) {
                Ok(v) => record.shaper = Some(v),
                Err(e) => record.error = Some(e),
            }
        }
        receiver.signal(rustix::process::Signal::INT);
        let received = match receiver.finish(Duration::from_secs(5)) {
            Ok(v) => v,
            Err(e) => {
                record.error = Some(e);
                return Ok(record);
            }
        };
        let parse = |v: Value| serde_json::from_value::<SendSummary>(v);
        let mut process_cpu = record.shaper_cpu_s.unwrap_or(0.0);
        for v in sent {
            match parse(v) {
                Ok(s) => {
                    process_cpu += s.cpu_s.unwrap_or(0.0);
                    record.sent += s.packets;
                    record.sent_by_sender.push(s.packets);
                    record.sender_pspat.extend(s.pspat);
                }
                Err(e) => record.error = Some(format!("sender JSON: {e}")),
            }
        }
        match serde_json::from_value::<RecvSummary>(received) {
            Ok(r) => {
                process_cpu += r.cpu_s.unwrap_or(0.0);
                record.received = r.packets;
                record.pps = r.steady_pps.unwrap_or(r.pps);
                record.flow_bytes = r.flows.iter().map(|f| f.steady_bytes).collect();
                record.flow0_latency = r.flows.first().map(|f| f.latency).unwrap_or_default();
                record.flow0_arrival_latency = r.flows.first().and_then(|f| f.arrival_latency);
                record.flow0_received = r.flows.first().map_or(0, |f| f.packets);
            }
            Err(e) => record.error = Some(format!("receiver JSON: {e}")),
        }
        record.not_received = record.sent.saturating_sub(record.received);
        if record.received > 0 {
            let mpkt = record.received as f64 / 1e6;
            record.cpu_s_per_mpkt = Some(process_cpu / mpkt);
            if let (Some(a), Some(b)) = (busy_before, busy_after) {
                record.machine_cpu_s_per_mpkt = Some((b - a) / mpkt);
            }
        }
        Ok(record)
    }
}

/// The fields of a sender's JSON that the comparison reads.
#[derive(serde::Deserialize)]
struct SendSummary {
    packets: u64,
    cpu_s: Option<f64>,
    #[serde(default)]
    pspat: Option<Value>,
}

#[derive(serde::Deserialize)]
struct RecvSummary {
    packets: u64,
    cpu_s: Option<f64>,
    pps: f64,
    steady_pps: Option<f64>,
    flows: Vec<RecvFlow>,
}

#[derive(serde::Deserialize)]
struct RecvFlow {
    packets: u64,
    steady_bytes: u64,
    latency: Latency,
    #[serde(default)]
    arrival_latency: Option<Latency>,
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Bridge => "none",
        Mode::Htb => "htb",
        Mode::Pspat => "pspat",
    }
}

/// The heavy flow's ideal share when two flows offer `f·R/2` each and
/// are weighted 10:1 (module docs).
pub fn ideal_heavy_share(f: f64) -> f64 {
    if f <= 1.0 {
        0.5
    } else {
        // Past R the two flows share exactly R.
        (f / 2.0).min(10.0 / 11.0)
    }
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Runs `tc -n pspat-lab-snd ARGS`.
fn sender_tc(args: &[String]) -> Result<(), LabError> {
    let mut all = vec!["-n".to_owned(), NS_SND.to_owned()];
    all.extend(args.iter().cloned());
    let output = Command::new("tc")
        .args(&all)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Io {
            what: "cannot run `tc`".into(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LabError::Command {
            command: format!("tc {}", all.join(" ")),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// Puts `plan` (mode htb's HTB, built for the shaper's egress) on the
/// sender's veth instead: the same classes and filters on `pspat-snd0` in
/// the sender's namespace.
fn sender_htb(plan: &HtbPlan) -> Result<(), LabError> {
    for mut command in plan.commands()? {
        for arg in &mut command {
            if arg == topology::SHP_OUT {
                topology::SND_IF.clone_into(arg);
            }
        }
        sender_tc(&command)?;
    }
    Ok(())
}

/// Removes any qdisc from the sender's veth (back to the veth's default,
/// none); nothing there is not an error.
fn clear_sender_qdisc() {
    let args = ["qdisc", "del", "dev", topology::SND_IF, "root"].map(String::from);
    let _ = sender_tc(&args);
}

/// The local-senders experiment (module docs): for each sender count,
/// direct, direct through HTB on the sender's veth, and through pspat, in
/// alternation, all through the bare bridge.
fn local_senders(
    config: &CompareConfig,
    runner: &mut Runner<'_>,
    lab: &mut Lab,
) -> Result<Vec<LocalSendersRow>, LabError> {
    let fast = 10_000_000_000u64;
    let mut rows = Vec::new();
    for &s in &config.local_senders {
        let weights = vec![1u32; s];
        let plan = HtbPlan {
            rate_bps: fast,
            weights: weights.clone(),
            base_port: BASE_PORT,
            leaf_limit: Some(config.queue_limit),
        };
        let mut per_mode: BTreeMap<&str, [Vec<f64>; 2]> = BTreeMap::new();
        let mut pspat_dropped = 0u64;
        let mut pspat_conserved: Option<bool> = None;
        for _ in 0..config.repeat {
            for label in ["direct", "htb", "pspat"] {
                let extra = if label == "pspat" {
                    vec![
                        "--via".into(),
                        "pspat".into(),
                        "--alg".into(),
                        config.alg.clone(),
                        "--link-rate".into(),
                        fast.to_string(),
                        "--dispatchers".into(),
                        config.local_dispatchers.to_string(),
                        "--arbiter-cpu".into(),
                        config.shaper_cpu.to_string(),
                        "--dispatcher-cpu".into(),
                        config.traffic_cpu.to_string(),
                    ]
                } else {
                    Vec::new()
                };
                let spec = [SenderSpec {
                    base_port: BASE_PORT,
                    weights: weights.clone(),
                    threads: s,
                    size: 60,
                    pps: None,
                    extra,
                }];
                let shape = ShapeSpec {
                    rate_bps: fast,
                    weights: weights.clone(),
                };
                clear_sender_qdisc();
                if label == "htb" {
                    sender_htb(&plan)?;
                }
                let at = Point {
                    experiment: "local_senders",
                    label,
                    mode: Mode::Bridge,
                    point: s as f64,
                    flows: s,
                };
                let result = runner.run(lab, &at, &spec, &shape);
                clear_sender_qdisc();
                let mut r = result?;
                if label == "pspat" && r.error.is_none() {
                    for p in &r.sender_pspat {
                        let conserved = p.get("conserved").and_then(Value::as_bool) == Some(true);
                        pspat_conserved = Some(pspat_conserved.unwrap_or(true) && conserved);
                        pspat_dropped += p
                            .get("dropped")
                            .and_then(Value::as_object)
                            .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
                        if let Some(e) = p.get("error").and_then(Value::as_str) {
                            r.error = Some(format!("pspat sender: {e}"));
                        }
                    }
                    if r.sender_pspat.is_empty() {
                        r.error = Some("the sender printed no pspat accounting".into());
                    }
                }
                if r.error.is_none() {
                    let entry = per_mode.entry(label).or_default();
                    entry[0].push(r.pps / 1e6);
                    entry[1].extend(r.cpu_s_per_mpkt);
                } else {
                    eprintln!(
                        "lab compare: local senders {label} run failed: {}",
                        r.error.as_deref().unwrap_or("")
                    );
                }
                runner.runs.push(r);
            }
        }
        let get = |m: &str, i: usize| per_mode.get(m).and_then(|v| mean(&v[i]));
        rows.push(LocalSendersRow {
            senders: s,
            direct_mpps: get("direct", 0),
            htb_mpps: get("htb", 0),
            pspat_mpps: get("pspat", 0),
            direct_cpu_s_per_mpkt: get("direct", 1),
            htb_cpu_s_per_mpkt: get("htb", 1),
            pspat_cpu_s_per_mpkt: get("pspat", 1),
            pspat_dropped,
            pspat_conserved,
        });
    }
    Ok(rows)
}

/// What `pspat shape` would refuse only once the lab is built and its
/// first run starts: the algorithm (by the parser `pspat shape --alg`
/// uses) and a shaped rate outside the core's range (`--rate`). Checked
/// before the lab is built, so a typo costs no lab and no runs.
fn check_shape_args(alg: &str, rates: &[(&str, u64)]) -> Result<(), LabError> {
    pspat_sched::AlgKind::parse(alg).map_err(|e| LabError::Config(format!("--alg: {e}")))?;
    let (lo, hi) = (
        pspat_sched::rate::MIN_RATE_BPS,
        pspat_sched::rate::MAX_RATE_BPS,
    );
    for &(flag, rate) in rates {
        if !(lo..=hi).contains(&rate) {
            return Err(LabError::Config(format!(
                "{flag} must be in {lo}..={hi} bit/s (pspat shape's --rate), got {rate}"
            )));
        }
    }
    Ok(())
}

/// Checks `config` as [`compare`] does before it builds anything.
///
/// # Errors
/// [`LabError::Config`], one line naming the flag.
pub fn check(config: &CompareConfig) -> Result<(), LabError> {
    if config.senders.is_empty() || config.senders.iter().any(|&s| s == 0 || s > 256) {
        return Err(LabError::Config("--senders must be 1..=256 each".into()));
    }
    if config.local_dispatchers > 64 {
        return Err(LabError::Config(
            "--local-dispatchers must be 0..=64".into(),
        ));
    }
    if config.shape_dispatchers > 64 {
        return Err(LabError::Config(
            "--shape-dispatchers must be 0..=64".into(),
        ));
    }
    if !(1..=65_536).contains(&config.queue_limit) {
        return Err(LabError::Config("--queue-limit must be 1..=65536".into()));
    }
    if config.local_senders.iter().any(|&s| s == 0 || s > 256) {
        return Err(LabError::Config(
            "--local-senders must be 1..=256 each".into(),
        ));
    }
    if let Some(bad) = config
        .experiments
        .iter()
        .find(|e| !EXPERIMENTS.contains(&e.as_str()))
    {
        return Err(LabError::Config(format!(
            "--experiments: unknown {bad:?} (known: {})",
            EXPERIMENTS.join(", ")
        )));
    }
    if config.duration < Duration::from_millis(100) {
        return Err(LabError::Config("--duration must be at least 100ms".into()));
    }
    if config.shape_io == ShapeIo::Xdp && config.shape_dispatchers > 1 {
        // pspat shape sends on one AF_XDP socket per --out.
        return Err(LabError::Config(
            "--shape-io xdp takes --shape-dispatchers 0 or 1".into(),
        ));
    }
    check_shape_args(
        &config.alg,
        &[
            ("--split-rate", config.split_rate_bps),
            ("--victim-rate", config.victim_rate_bps),
        ],
    )
}

/// Runs the comparison: builds the lab, runs every experiment, removes
/// the lab, writes the files into `config.out` and returns the report.
///
/// # Errors
/// [`LabError::Config`] for a bad parameter ([`check`]), before anything
/// is built; otherwise when the lab cannot be built or a process cannot
/// start.
pub fn compare(config: &CompareConfig) -> Result<CompareReport, LabError> {
    check(config)?;
    std::fs::create_dir_all(&config.out).map_err(|source| LabError::Io {
        what: format!("cannot create {}", config.out.display()),
        source,
    })?;
    let shape_tx = shape_placement(config);
    let pinning = format!(
        "{shape_tx}; senders and receivers on cpu {} (--cpu); kernel forwarding in modes none and htb runs in the senders' softirq context, on cpu {}",
        config.traffic_cpu, config.traffic_cpu
    );
    let pinning = if config.runs("local_senders") {
        if config.local_dispatchers == 0 {
            format!(
                "{pinning}; local senders through pspat: the runtime's arbiter (which sends) on cpu {}",
                config.shaper_cpu
            )
        } else {
            format!(
                "{pinning}; local senders through pspat: the runtime's arbiter on cpu {}, its {} dispatcher(s) (which send) on cpu {}",
                config.shaper_cpu, config.local_dispatchers, config.traffic_cpu
            )
        }
    } else {
        pinning
    };
    eprintln!("lab compare: {pinning}");
    let mut lab = Lab::up(Mode::Bridge, None)?;
    let mut runner = Runner {
        config,
        exe: config.exe.display().to_string(),
        pspat_missing: None,
        runs: Vec::new(),
        rx_ring: config.rx_rings.first().copied(),
    };
    let fast = 10_000_000_000u64;

    // Throughput against senders.
    let mut throughput = Vec::new();
    let senders: &[usize] = if config.runs("throughput") {
        &config.senders
    } else {
        &[]
    };
    for &s in senders {
        let weights = vec![1u32; s];
        let mut per_mode: BTreeMap<&str, [Vec<f64>; 3]> = BTreeMap::new();
        for _ in 0..config.repeat {
            for &mode in &config.modes {
                let spec = [SenderSpec {
                    base_port: BASE_PORT,
                    weights: weights.clone(),
                    threads: s,
                    size: 60,
                    pps: None,
                    extra: Vec::new(),
                }];
                let shape = ShapeSpec {
                    rate_bps: fast,
                    weights: weights.clone(),
                };
                let label = mode_label(mode);
                let at = Point {
                    experiment: "throughput",
                    label,
                    mode,
                    point: s as f64,
                    flows: s,
                };
                let r = runner.run(&mut lab, &at, &spec, &shape)?;
                if r.error.is_none() {
                    let entry = per_mode.entry(label).or_default();
                    entry[0].push(r.pps / 1e6);
                    entry[1].extend(r.cpu_s_per_mpkt);
                    entry[2].extend(r.machine_cpu_s_per_mpkt);
                } else {
                    eprintln!(
                        "lab compare: {label} run failed: {}",
                        r.error.as_deref().unwrap_or("")
                    );
                }
                runner.runs.push(r);
            }
        }
        let get = |m: &str, i: usize| per_mode.get(m).and_then(|v| mean(&v[i]));
        throughput.push(ThroughputRow {
            senders: s,
            none_mpps: get("none", 0),
            htb_mpps: get("htb", 0),
            pspat_mpps: get("pspat", 0),
            none_cpu_s_per_mpkt: get("none", 1),
            htb_cpu_s_per_mpkt: get("htb", 1),
            pspat_cpu_s_per_mpkt: get("pspat", 1),
            none_machine_cpu_s_per_mpkt: get("none", 2),
            htb_machine_cpu_s_per_mpkt: get("htb", 2),
            pspat_machine_cpu_s_per_mpkt: get("pspat", 2),
        });
    }

    // The 10:1 split.
    let mut split = Vec::new();
    let fractions: &[f64] = if config.runs("split_10_1") {
        &config.split_fractions
    } else {
        &[]
    };
    for &f in fractions {
        let offered = f * config.split_rate_bps as f64;
        let per_flow_pps = (offered / 2.0 / (8.0 * 60.0)).round().max(1.0) as u64;
        let mut shares: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        for _ in 0..config.repeat {
            for &mode in &config.modes {
                // Two sender threads, one per flow, each at half the load.
                let spec = [SenderSpec {
                    base_port: BASE_PORT,
                    weights: vec![1, 1],
                    threads: 2,
                    size: 60,
                    pps: Some(2 * per_flow_pps),
                    extra: Vec::new(),
                }];
                let shape = ShapeSpec {
                    rate_bps: config.split_rate_bps,
                    weights: vec![10, 1],
                };
                let label = mode_label(mode);
                let r = runner.run(
                    &mut lab,
                    &Point {
                        experiment: "split_10_1",
                        label,
                        mode,
                        point: f,
                        flows: 2,
                    },
                    &spec,
                    &shape,
                )?;
                let total: u64 = r.flow_bytes.iter().sum();
                if r.error.is_none() && total > 0 {
                    let entry = shares.entry(label).or_default();
                    entry.0.push(r.flow_bytes[0] as f64 / total as f64);
                    entry.1.push(r.pps * 60.0 * 8.0);
                }
                runner.runs.push(r);
            }
        }
        let get = |m: &str, bps: bool| {
            shares
                .get(m)
                .and_then(|(s, b)| mean(if bps { b } else { s }))
        };
        split.push(SplitRow {
            offered_fraction: f,
            offered_bps: offered,
            ideal_heavy_share: ideal_heavy_share(f),
            none_heavy_share: get("none", false),
            htb_heavy_share: get("htb", false),
            pspat_heavy_share: get("pspat", false),
            htb_received_bps: get("htb", true),
            pspat_received_bps: get("pspat", true),
        });
    }

    // The victim.
    let k = config.victim_greedy.max(1);
    let mut weights = vec![50u32];
    weights.extend(std::iter::repeat_n(1, k));
    let shape = ShapeSpec {
        rate_bps: config.victim_rate_bps,
        weights: weights.clone(),
    };
    let victim_sender = || SenderSpec {
        base_port: BASE_PORT,
        weights: vec![1],
        threads: 1,
        size: 1500,
        pps: Some(4000),
        extra: Vec::new(),
    };
    let greedy = || SenderSpec {
        base_port: BASE_PORT + 1,
        weights: vec![1; k],
        threads: k,
        size: 1500,
        pps: None,
        extra: Vec::new(),
    };
    let mut latency: BTreeMap<String, Vec<Latency>> = BTreeMap::new();
    let mut arrival: BTreeMap<String, Vec<Latency>> = BTreeMap::new();
    let mut victim_lost: BTreeMap<String, u64> = BTreeMap::new();
    let victim_repeats = if config.runs("victim") {
        config.repeat
    } else {
        0
    };
    for _ in 0..victim_repeats {
        let r = runner.run(
            &mut lab,
            &Point {
                experiment: "victim",
                label: "unloaded",
                mode: Mode::Bridge,
                point: 0.0,
                flows: k + 1,
            },
            &[victim_sender()],
            &shape,
        )?;
        if r.error.is_none() {
            latency
                .entry("unloaded".into())
                .or_default()
                .push(r.flow0_latency);
            if let Some(a) = r.flow0_arrival_latency {
                arrival.entry("unloaded".into()).or_default().push(a);
            }
            *victim_lost.entry("unloaded".into()).or_default() += r
                .sent_by_sender
                .first()
                .map_or(0, |&s| s.saturating_sub(r.flow0_received));
        }
        runner.runs.push(r);
        // Mode pspat once per RX ring asked for (labelled by ring when
        // there are several), the others once.
        let rings = if config.rx_rings.len() > 1 {
            config.rx_rings.iter().map(|&r| Some(r)).collect()
        } else {
            vec![config.rx_rings.first().copied()]
        };
        let turns = config.modes.iter().flat_map(|&mode| {
            let per_mode = if mode == Mode::Pspat {
                rings.clone()
            } else {
                vec![None]
            };
            per_mode.into_iter().map(move |ring| (mode, ring))
        });
        for (mode, ring) in turns.collect::<Vec<_>>() {
            let label = match (mode, ring) {
                (Mode::Pspat, Some(RxRing::V2)) if rings.len() > 1 => "pspat-v2",
                (Mode::Pspat, Some(RxRing::V3)) if rings.len() > 1 => "pspat-v3",
                _ => mode_label(mode),
            };
            runner.rx_ring = ring.or(config.rx_rings.first().copied());
            let r = runner.run(
                &mut lab,
                &Point {
                    experiment: "victim",
                    label,
                    mode,
                    point: k as f64,
                    flows: k + 1,
                },
                &[victim_sender(), greedy()],
                &shape,
            )?;
            if r.error.is_none() {
                latency
                    .entry(label.into())
                    .or_default()
                    .push(r.flow0_latency);
                if let Some(a) = r.flow0_arrival_latency {
                    arrival.entry(label.into()).or_default().push(a);
                }
                *victim_lost.entry(label.into()).or_default() += r
                    .sent_by_sender
                    .first()
                    .map_or(0, |&s| s.saturating_sub(r.flow0_received));
            }
            runner.runs.push(r);
        }
    }
    runner.rx_ring = config.rx_rings.first().copied();
    let local_senders = if config.runs("local_senders") {
        local_senders(config, &mut runner, &mut lab)?
    } else {
        Vec::new()
    };
    drop(lab);
    // With repeats, keep the run with the median p99 per mode.
    let median_p99 = |runs: BTreeMap<String, Vec<Latency>>| -> BTreeMap<String, Latency> {
        runs.into_iter()
            .filter_map(|(m, mut v)| {
                v.sort_by(|a, b| a.p99_us.total_cmp(&b.p99_us));
                let median = v.get(v.len() / 2).copied()?;
                Some((m, median))
            })
            .collect()
    };
    let latency = median_p99(latency);
    let arrival_latency = median_p99(arrival);
    let p99 = |m: &str| latency.get(m).map(|l| l.p99_us);
    let victim = VictimResult {
        rate_bps: config.victim_rate_bps,
        greedy_senders: k,
        unloaded_p99_us: p99("unloaded"),
        none_p99_us: p99("none"),
        htb_p99_us: p99("htb"),
        pspat_p99_us: p99("pspat").or_else(|| {
            let first = config.rx_rings.first()?;
            p99(&format!("pspat-{}", first.name()))
        }),
        latency,
        arrival_latency,
        victim_not_received: victim_lost,
    };
    let mut report = CompareReport {
        quick: config.quick,
        duration_s: config.duration.as_secs_f64(),
        pinning,
        queue_limit: config.queue_limit,
        shape_dispatchers: config.shape_dispatchers,
        shape_io: config.shape_io.name(),
        pspat_available: runner.pspat_missing.is_none()
            && runner
                .runs
                .iter()
                .any(|r| r.mode.starts_with("pspat") && r.error.is_none()),
        pspat_unavailable_reason: runner.pspat_missing.clone().or_else(|| {
            runner
                .runs
                .iter()
                .find(|r| r.mode.starts_with("pspat") && r.error.is_some())
                .and_then(|r| r.error.clone())
        }),
        throughput,
        split_10_1: split,
        victim,
        local_senders,
        experiments: config.experiments.clone(),
        runs: runner.runs,
        files: Vec::new(),
        plot_note: None,
    };
    write_files(config, &mut report)?;
    Ok(report)
}

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.6}"))
}

fn write(path: &Path, text: &str, files: &mut Vec<String>) -> Result<(), LabError> {
    std::fs::File::create(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|source| LabError::Io {
            what: format!("cannot write {}", path.display()),
            source,
        })?;
    files.push(path.display().to_string());
    Ok(())
}

fn write_files(config: &CompareConfig, report: &mut CompareReport) -> Result<(), LabError> {
    let out = &config.out;
    let mut files = Vec::new();
    let json = serde_json::to_string_pretty(&*report).unwrap_or_default();
    write(&out.join("compare.json"), &json, &mut files)?;
    let mut csv = String::from("senders,none_mpps,htb_mpps,pspat_mpps,none_cpu_s_per_mpkt,htb_cpu_s_per_mpkt,pspat_cpu_s_per_mpkt,none_machine_cpu_s_per_mpkt,htb_machine_cpu_s_per_mpkt,pspat_machine_cpu_s_per_mpkt\n");
    for r in &report.throughput {
        csv += &format!(
            "{},{},{},{},{},{},{},{},{},{}\n",
            r.senders,
            opt(r.none_mpps),
            opt(r.htb_mpps),
            opt(r.pspat_mpps),
            opt(r.none_cpu_s_per_mpkt),
            opt(r.htb_cpu_s_per_mpkt),
            opt(r.pspat_cpu_s_per_mpkt),
            opt(r.none_machine_cpu_s_per_mpkt),
            opt(r.htb_machine_cpu_s_per_mpkt),
            opt(r.pspat_machine_cpu_s_per_mpkt)
        );
    }
    write(&out.join("throughput.csv"), &csv, &mut files)?;
    let mut csv = String::from("offered_fraction,offered_bps,ideal_heavy_share,none_heavy_share,htb_heavy_share,pspat_heavy_share,htb_received_bps,pspat_received_bps\n");
    for r in &report.split_10_1 {
        csv += &format!(
            "{},{},{},{},{},{},{},{}\n",
            r.offered_fraction,
            r.offered_bps,
            r.ideal_heavy_share,
            opt(r.none_heavy_share),
            opt(r.htb_heavy_share),
            opt(r.pspat_heavy_share),
            opt(r.htb_received_bps),
            opt(r.pspat_received_bps)
        );
    }
    write(&out.join("split_10_1.csv"), &csv, &mut files)?;
    let mut csv = String::from("mode,samples,min_us,p50_us,p90_us,p99_us,p999_us,max_us\n");
    for (mode, l) in &report.victim.latency {
        csv += &format!(
            "{mode},{},{},{},{},{},{},{}\n",
            l.samples, l.min_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
        );
    }
    write(&out.join("victim.csv"), &csv, &mut files)?;
    let mut csv = String::from("senders,direct_mpps,htb_mpps,pspat_mpps,direct_cpu_s_per_mpkt,htb_cpu_s_per_mpkt,pspat_cpu_s_per_mpkt,pspat_dropped,pspat_conserved\n");
    for r in &report.local_senders {
        csv += &format!(
            "{},{},{},{},{},{},{},{},{}\n",
            r.senders,
            opt(r.direct_mpps),
            opt(r.htb_mpps),
            opt(r.pspat_mpps),
            opt(r.direct_cpu_s_per_mpkt),
            opt(r.htb_cpu_s_per_mpkt),
            opt(r.pspat_cpu_s_per_mpkt),
            r.pspat_dropped,
            r.pspat_conserved.map_or(String::new(), |c| c.to_string())
        );
    }
    write(&out.join("local_senders.csv"), &csv, &mut files)?;
    let mut csv = String::from(
        "experiment,mode,point,sent,received,not_received,pps,cpu_s_per_mpkt,machine_cpu_s_per_mpkt,shaper_cpu_s,error\n",
    );
    for r in &report.runs {
        csv += &format!(
            "{},{},{},{},{},{},{},{},{},{},\"{}\"\n",
            r.experiment,
            r.mode,
            r.point,
            r.sent,
            r.received,
            r.not_received,
            r.pps,
            opt(r.cpu_s_per_mpkt),
            opt(r.machine_cpu_s_per_mpkt),
            opt(r.shaper_cpu_s),
            r.error.as_deref().unwrap_or("").replace('"', "'")
        );
    }
    write(&out.join("runs.csv"), &csv, &mut files)?;
    match crate::plot::draw_all(out, report) {
        Ok(mut drawn) => files.append(&mut drawn),
        Err(note) => report.plot_note = Some(note),
    }
    let summary = summary(report);
    write(&out.join("SUMMARY.md"), &summary, &mut files)?;
    report.files = files;
    // Rewrite the JSON with the file list.
    let json = serde_json::to_string_pretty(&*report).unwrap_or_default();
    write(&out.join("compare.json"), &json, &mut Vec::new())?;
    Ok(())
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.digits$}"))
}

/// The markdown summary.
pub fn summary(report: &CompareReport) -> String {
    let mut s = String::from("# pspat lab compare\n\n");
    s += &format!(
        "Runs of {} s each{}. Pinning: {}. Each flow may hold {} packets in either shaper (pspat shape's `--queue-limit`, a `pfifo` under each HTB class).\n\n",
        report.duration_s,
        if report.quick { " (--quick)" } else { "" },
        report.pinning,
        report.queue_limit
    );
    if let Some(reason) = &report.pspat_unavailable_reason {
        s += &format!("**pspat figures are missing**: {reason}.\n\n");
    }
    let ran = |e: &str| report.experiments.iter().any(|x| x == e);
    if ran("throughput") {
        s += "## Throughput against senders (60-byte frames, greedy, Mpps at the receiver)\n\n";
        s += "| senders | none | htb | pspat | CPU s/Mpkt none | htb | pspat |\n|---|---|---|---|---|---|---|\n";
        for r in &report.throughput {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.senders,
                cell(r.none_mpps, 3),
                cell(r.htb_mpps, 3),
                cell(r.pspat_mpps, 3),
                cell(r.none_cpu_s_per_mpkt, 2),
                cell(r.htb_cpu_s_per_mpkt, 2),
                cell(r.pspat_cpu_s_per_mpkt, 2)
            );
        }
    }
    if ran("split_10_1") {
        s += "\n## Two flows weighted 10:1, each offering half the load (heavy flow's share of bytes)\n\n";
        s += "| offered / R | ideal | none | htb | pspat |\n|---|---|---|---|---|\n";
        for r in &report.split_10_1 {
            s += &format!(
                "| {:.2} | {:.3} | {} | {} | {} |\n",
                r.offered_fraction,
                r.ideal_heavy_share,
                cell(r.none_heavy_share, 3),
                cell(r.htb_heavy_share, 3),
                cell(r.pspat_heavy_share, 3)
            );
        }
    }
    if ran("victim") {
        s += &format!(
            "\n## Victim: 4000 packets/s of 1500 bytes, weight 50, among {} greedy senders, R = {} bit/s (one-way latency, µs)\n\n",
            report.victim.greedy_senders, report.victim.rate_bps
        );
        s += "| mode | samples | p50 | p90 | p99 | p99.9 | max | not received |\n|---|---|---|---|---|---|---|---|\n";
        for (mode, l) in &report.victim.latency {
            s += &format!(
                "| {mode} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
                l.samples,
                l.p50_us,
                l.p90_us,
                l.p99_us,
                l.p999_us,
                l.max_us,
                report
                    .victim
                    .victim_not_received
                    .get(mode)
                    .map_or("-".into(), u64::to_string)
            );
        }
        if !report.victim.arrival_latency.is_empty() {
            s += "\nTo the victim's arrival at the receiver's socket (the kernel's receive timestamp), before the receiving thread waits for its core:\n\n";
            s += "| mode | samples | p50 | p90 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|\n";
            for (mode, l) in &report.victim.arrival_latency {
                s += &format!(
                    "| {mode} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                    l.samples, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
                );
            }
        }
    }
    if !report.local_senders.is_empty() {
        s += "\n## Local senders (60-byte frames, greedy, Mpps at the receiver)\n\n";
        s += "Sender threads of one process: `direct` sendmmsg with no qdisc, `htb` sendmmsg through HTB on the sender's veth, `pspat` submitting to a pspat runtime (whose arbiter or dispatchers send: see Pinning).\n\n";
        s += "| senders | direct | htb | pspat | pspat / direct | CPU s/Mpkt direct | htb | pspat | pspat dropped |\n|---|---|---|---|---|---|---|---|---|\n";
        for r in &report.local_senders {
            let ratio = match (r.pspat_mpps, r.direct_mpps) {
                (Some(p), Some(d)) if d > 0.0 => Some(p / d),
                _ => None,
            };
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {}{} |\n",
                r.senders,
                cell(r.direct_mpps, 3),
                cell(r.htb_mpps, 3),
                cell(r.pspat_mpps, 3),
                cell(ratio, 2),
                cell(r.direct_cpu_s_per_mpkt, 2),
                cell(r.htb_cpu_s_per_mpkt, 2),
                cell(r.pspat_cpu_s_per_mpkt, 2),
                r.pspat_dropped,
                if r.pspat_conserved == Some(false) {
                    " (not conserved)"
                } else {
                    ""
                }
            );
        }
    }
    let failed: Vec<&RunRecord> = report.runs.iter().filter(|r| r.error.is_some()).collect();
    if !failed.is_empty() {
        s += "\n## Runs without figures\n\n";
        for r in failed {
            s += &format!(
                "* {} {} at {}: {}\n",
                r.experiment,
                r.mode,
                r.point,
                r.error.as_deref().unwrap_or("")
            );
        }
    }
    if let Some(note) = &report.plot_note {
        s += &format!("\nPlots not drawn: {note}\n");
    }
    s += "\nFiles: compare.json (everything), throughput.csv, split_10_1.csv, victim.csv, local_senders.csv, runs.csv (every run), and the plots.\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pspat_weights_follow_port_modulo_flows() {
        // BASE_PORT % 2 == 0: identity for two flows.
        assert_eq!(pspat_weights(&[10, 1]), vec![10, 1]);
        // Three flows: port BASE_PORT + i lands on (BASE_PORT + i) % 3.
        let w = pspat_weights(&[50, 2, 3]);
        let b = usize::from(BASE_PORT);
        assert_eq!(w[b % 3], 50);
        assert_eq!(w[(b + 1) % 3], 2);
        assert_eq!(w[(b + 2) % 3], 3);
    }

    #[test]
    fn ideal_share_is_half_until_overload() {
        assert_eq!(ideal_heavy_share(0.5), 0.5);
        assert_eq!(ideal_heavy_share(1.0), 0.5);
        assert!((ideal_heavy_share(1.5) - 0.75).abs() < 1e-12);
        assert!((ideal_heavy_share(3.0) - 10.0 / 11.0).abs() < 1e-12);
    }

    /// What the `pspat shape` children would refuse is refused before
    /// the lab is built, in one line naming the flag.
    #[test]
    fn shape_arguments_are_checked_before_the_lab() {
        let good = CompareConfig::new(PathBuf::from("pspat"), true);
        check(&good).unwrap();
        let bad = CompareConfig {
            alg: "nosuch".into(),
            ..good.clone()
        };
        let e = check(&bad).unwrap_err().to_string();
        assert!(
            matches!(check(&bad), Err(LabError::Config(_)))
                && e.starts_with("--alg: ")
                && e.contains("\"nosuch\""),
            "{e}"
        );
        let fast = CompareConfig {
            victim_rate_bps: pspat_sched::rate::MAX_RATE_BPS + 1,
            ..good.clone()
        };
        let e = check(&fast).unwrap_err().to_string();
        assert!(e.starts_with("--victim-rate must be in "), "{e}");
        let xdp = CompareConfig {
            shape_io: ShapeIo::Xdp,
            shape_dispatchers: 2,
            ..good
        };
        assert!(check(&xdp).is_err());
        // The demo: the lab is not built (no root needed to get here).
        let demo_config = DemoConfig {
            exe: PathBuf::from("pspat"),
            rate_bps: 0,
            weights: vec![1, 2],
            victim_weight: 50,
            victim_pps: 4000,
            size: 1500,
            duration: Duration::from_secs(1),
            alg: "drr".into(),
        };
        let e = demo(&demo_config).unwrap_err().to_string();
        assert!(e.starts_with("--lab-rate must be in "), "{e}");
        let e = demo(&DemoConfig {
            rate_bps: 100_000_000,
            alg: "nosuch".into(),
            ..demo_config
        })
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("--alg: "), "{e}");
    }
}

/// What `pspat demo` runs in the lab ([`demo`]).
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The `pspat` binary to run children from.
    pub exe: PathBuf,
    /// The shaped rate, bit/s.
    pub rate_bps: u64,
    /// Weights of the greedy flows (ports `BASE_PORT + 1 ..`).
    pub weights: Vec<u32>,
    /// The victim's weight (port `BASE_PORT`).
    pub victim_weight: u32,
    /// The victim's packets per second.
    pub victim_pps: u64,
    /// UDP packet size of every flow, bytes on the wire (as `traffic send --size`).
    pub size: usize,
    /// Length of the run.
    pub duration: Duration,
    /// pspat shape's `--alg`.
    pub alg: String,
}

/// One flow of the demo, as the receiver measured it.
#[derive(Debug, Clone, Serialize)]
pub struct DemoFlow {
    /// Destination port.
    pub port: u16,
    /// Its weight.
    pub weight: u32,
    /// Whether it is the victim (paced) or greedy.
    pub victim: bool,
    /// The victim: packets received over the whole run (greedy: null).
    pub received: Option<u64>,
    /// Received rate in the steady window, bit/s.
    pub rate_bps: f64,
    /// Greedy flows: share of the greedy flows' bytes (the victim: null).
    pub share: Option<f64>,
    /// Greedy flows: weight over the greedy weights' sum.
    pub expected_share: Option<f64>,
}

/// What the lab demo measured.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// The shaped rate, bit/s.
    pub rate_bps: u64,
    /// Length of the run, s.
    pub duration_s: f64,
    /// Where the threads ran.
    pub pinning: String,
    /// Per flow, the victim first.
    pub flows: Vec<DemoFlow>,
    /// The victim's one-way latency (sender to receiver, one clock), to
    /// when the receiver read it.
    pub victim_latency: Latency,
    /// The same to its arrival at the receiver's socket (the kernel's
    /// receive timestamp).
    pub victim_arrival_latency: Option<Latency>,
    /// Packets the senders sent.
    pub sent: u64,
    /// Packets the receiver got.
    pub received: u64,
    /// Packets pspat shape forwarded per second (its decisions).
    pub decisions_per_s: Option<f64>,
    /// pspat shape's own JSON report (every counter, drops by reason).
    pub shaper: Option<Value>,
    /// Why the run is incomplete, if it is.
    pub error: Option<String>,
}

/// Where `pspat shape`'s threads run under `config`, in words (the
/// summaries' pinning line).
fn shape_placement(config: &CompareConfig) -> String {
    let rx_cpu = config.shape_rx_cpu.unwrap_or(config.shaper_cpu);
    if config.shape_dispatchers == 0 {
        format!(
            "pspat shape's arbiter (which transmits) on cpu {} (--arbiter-cpu), its RX threads on cpu {rx_cpu}",
            config.shaper_cpu
        )
    } else {
        format!(
            "pspat shape's arbiter on cpu {} (--arbiter-cpu), its RX threads on cpu {rx_cpu}, its {} dispatcher(s) on cpu {}",
            config.shaper_cpu, config.shape_dispatchers, config.traffic_cpu
        )
    }
}

/// Weighted greedy flows and a paced victim through `pspat shape` in the
/// lab (built here, removed on return, on error and on Ctrl-C): the real
/// traffic version of `pspat demo`. The greedy flows offer 1.5 times the
/// shaped rate together, in equal parts, so the link is overloaded and the
/// shaper alone decides their shares; the victim is paced.
///
/// # Errors
/// [`LabError`] when the lab cannot be built or a process cannot start.
pub fn demo(config: &DemoConfig) -> Result<DemoReport, LabError> {
    if config.weights.is_empty() || config.weights.len() > 64 {
        return Err(LabError::Config("demo: 1..=64 greedy flows".into()));
    }
    check_shape_args(&config.alg, &[("--lab-rate", config.rate_bps)])?;
    let compare = CompareConfig {
        duration: config.duration,
        alg: config.alg.clone(),
        ..CompareConfig::new(config.exe.clone(), false)
    };
    let pinning = format!(
        "{}; senders and receiver on cpu {}",
        shape_placement(&compare),
        compare.traffic_cpu
    );
    let mut lab = Lab::up(Mode::Pspat, None)?;
    let mut runner = Runner {
        config: &compare,
        exe: config.exe.display().to_string(),
        pspat_missing: None,
        runs: Vec::new(),
        rx_ring: None,
    };
    let n = config.weights.len();
    let mut weights = vec![config.victim_weight];
    weights.extend(&config.weights);
    let shape = ShapeSpec {
        rate_bps: config.rate_bps,
        weights: weights.clone(),
    };
    let victim = SenderSpec {
        base_port: BASE_PORT,
        weights: vec![1],
        threads: 1,
        size: config.size,
        pps: Some(config.victim_pps),
        extra: Vec::new(),
    };
    // The greedy flows together offer 1.5 times the shaped rate, in equal
    // parts: the link is overloaded (the shaper, not the offered load,
    // decides the shares), the machine's cores are not flooded.
    let overload_pps = (1.5 * config.rate_bps as f64 / (8.0 * config.size as f64)).ceil() as u64;
    let greedy = SenderSpec {
        base_port: BASE_PORT + 1,
        weights: vec![1; n],
        threads: n,
        size: config.size,
        pps: Some(overload_pps.max(1)),
        extra: Vec::new(),
    };
    let at = Point {
        experiment: "demo",
        label: "pspat",
        mode: Mode::Pspat,
        point: 0.0,
        flows: n + 1,
    };
    let record = runner.run(&mut lab, &at, &[victim, greedy], &shape)?;
    drop(lab);
    let span_s = (config.duration * 3 / 5).as_secs_f64();
    let greedy_bytes: u64 = record.flow_bytes.iter().skip(1).sum();
    let greedy_weights: u64 = config.weights.iter().map(|&w| u64::from(w)).sum();
    let flows = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let bytes = record.flow_bytes.get(i).copied().unwrap_or(0);
            let victim = i == 0;
            DemoFlow {
                port: BASE_PORT + i as u16,
                weight: w,
                victim,
                received: victim.then_some(record.flow0_received),
                rate_bps: bytes as f64 * 8.0 / span_s,
                share: (!victim && greedy_bytes > 0).then(|| bytes as f64 / greedy_bytes as f64),
                expected_share: (!victim).then(|| f64::from(w) / greedy_weights as f64),
            }
        })
        .collect();
    let transmitted = record
        .shaper
        .as_ref()
        .and_then(|v| v.get("transmitted"))
        .and_then(Value::as_u64);
    Ok(DemoReport {
        rate_bps: config.rate_bps,
        duration_s: config.duration.as_secs_f64(),
        pinning,
        flows,
        victim_latency: record.flow0_latency,
        victim_arrival_latency: record.flow0_arrival_latency,
        sent: record.sent,
        received: record.received,
        decisions_per_s: transmitted.map(|t| t as f64 / config.duration.as_secs_f64()),
        shaper: record.shaper,
        error: record.error,
    })
}
