//! What `pspat lab compare` found: one record per run and the tables of
//! each experiment, as [`crate::compare::compare`] returns them, written to
//! `compare.json` and drawn by the plots.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::traffic::Latency;

/// One run: a mode at one point of an experiment.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// `throughput`, `split_10_1`, `victim`.
    pub experiment: &'static str,
    /// `none`, `htb`, `pspat` (`unloaded` for the victim alone).
    pub mode: String,
    /// The point: senders, offered fraction, or 0.
    pub point: f64,
    /// Packets the sender(s) sent.
    pub sent: u64,
    /// Packets each sender process sent, in start order (the victim's first).
    pub sent_by_sender: Vec<u64>,
    /// Packets received.
    pub received: u64,
    /// Sent but not received (dropped on the way or still queued).
    pub not_received: u64,
    /// Received packets per second in the middle 60% of the run.
    pub pps: f64,
    /// CPU seconds (user + system) of the run's own processes (senders,
    /// receiver, shaper) per million packets received.
    pub cpu_s_per_mpkt: Option<f64>,
    /// Busy CPU seconds of the whole machine over the run (kernel softirq
    /// work and anything else running included) per million received.
    pub machine_cpu_s_per_mpkt: Option<f64>,
    /// The shaper process's CPU seconds (mode pspat).
    pub shaper_cpu_s: Option<f64>,
    /// Per-flow received bytes in the middle 60% of the run.
    pub flow_bytes: Vec<u64>,
    /// Packets of flow 0 (the victim) received, whole run.
    pub flow0_received: u64,
    /// Latency of flow 0 (the victim), to when the receiver read it.
    pub flow0_latency: Latency,
    /// Latency of flow 0 to its arrival at the receiver's socket (the
    /// kernel's receive timestamp; victim and demo runs).
    pub flow0_arrival_latency: Option<Latency>,
    /// `pspat shape --json` (mode pspat).
    pub shaper: Option<Value>,
    /// The sender's runtime accounting (`traffic send --via pspat`: its
    /// JSON's `pspat` object), one per sender process that has one.
    pub sender_pspat: Vec<Value>,
    /// Why the run has no figures.
    pub error: Option<String>,
}

/// A row of the throughput experiment.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    /// Sender threads (= flows).
    pub senders: usize,
    /// Mpps through the bare bridge.
    pub none_mpps: Option<f64>,
    /// Mpps through HTB.
    pub htb_mpps: Option<f64>,
    /// Mpps through pspat shape.
    pub pspat_mpps: Option<f64>,
    /// CPU s of the run's processes per million packets, bare bridge.
    pub none_cpu_s_per_mpkt: Option<f64>,
    /// The same, HTB.
    pub htb_cpu_s_per_mpkt: Option<f64>,
    /// The same, pspat.
    pub pspat_cpu_s_per_mpkt: Option<f64>,
    /// Busy CPU s of the whole machine per million packets, bare bridge.
    pub none_machine_cpu_s_per_mpkt: Option<f64>,
    /// The same, HTB.
    pub htb_machine_cpu_s_per_mpkt: Option<f64>,
    /// The same, pspat.
    pub pspat_machine_cpu_s_per_mpkt: Option<f64>,
}

/// A row of the split experiment.
#[derive(Debug, Clone, Serialize)]
pub struct SplitRow {
    /// Offered load over R.
    pub offered_fraction: f64,
    /// Offered load, bit/s (both flows).
    pub offered_bps: f64,
    /// The heavy flow's ideal share.
    pub ideal_heavy_share: f64,
    /// Measured through the bare bridge (no weights: ~0.5).
    pub none_heavy_share: Option<f64>,
    /// Through HTB.
    pub htb_heavy_share: Option<f64>,
    /// Through pspat shape.
    pub pspat_heavy_share: Option<f64>,
    /// Received bit/s through HTB.
    pub htb_received_bps: Option<f64>,
    /// Received bit/s through pspat.
    pub pspat_received_bps: Option<f64>,
}

/// A row of the local-senders experiment.
#[derive(Debug, Clone, Serialize)]
pub struct LocalSendersRow {
    /// Sender threads (= flows).
    pub senders: usize,
    /// Mpps received, threads sending directly, no qdisc.
    pub direct_mpps: Option<f64>,
    /// Mpps received, threads sending directly through HTB on their veth.
    pub htb_mpps: Option<f64>,
    /// Mpps received, threads submitting to pspat.
    pub pspat_mpps: Option<f64>,
    /// CPU s of the run's processes per million packets, direct.
    pub direct_cpu_s_per_mpkt: Option<f64>,
    /// The same, HTB.
    pub htb_cpu_s_per_mpkt: Option<f64>,
    /// The same, pspat.
    pub pspat_cpu_s_per_mpkt: Option<f64>,
    /// Packets the pspat runs dropped (runtime drops and socket
    /// refusals), summed over repeats.
    pub pspat_dropped: u64,
    /// Whether every pspat run accounted for every packet (`submitted =
    /// sent + dropped`, nothing in flight); null without a pspat run.
    pub pspat_conserved: Option<bool>,
}

/// The victim experiment.
#[derive(Debug, Clone, Serialize)]
pub struct VictimResult {
    /// R, bit/s.
    pub rate_bps: u64,
    /// Greedy senders.
    pub greedy_senders: usize,
    /// The victim alone through the bare bridge: p99, µs.
    pub unloaded_p99_us: Option<f64>,
    /// Under overload, bare bridge.
    pub none_p99_us: Option<f64>,
    /// Under overload, HTB.
    pub htb_p99_us: Option<f64>,
    /// Under overload, pspat shape (with several RX rings, the first's).
    pub pspat_p99_us: Option<f64>,
    /// Full percentiles per mode (`unloaded`, `none`, `htb`, `pspat`; with
    /// several RX rings `pspat-v2`, `pspat-v3` instead of `pspat`), each
    /// the run with the median p99 over the repeats.
    pub latency: BTreeMap<String, Latency>,
    /// The same to the victim's arrival at the receiver's socket (the
    /// kernel's receive timestamp), before the receiving thread's wait
    /// for its core; each the run with the median arrival p99.
    pub arrival_latency: BTreeMap<String, Latency>,
    /// The victim's packets sent but not received, per mode (summed over
    /// repeats).
    pub victim_not_received: BTreeMap<String, u64>,
}

/// Everything `pspat lab compare` found.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// `--quick`.
    pub quick: bool,
    /// Seconds per run.
    pub duration_s: f64,
    /// Where processes ran.
    pub pinning: String,
    /// Packets one flow may hold in either shaper (`--queue-limit`).
    pub queue_limit: u32,
    /// pspat shape's dispatcher threads (0: the arbiter transmitted).
    pub shape_dispatchers: usize,
    /// pspat shape's I/O back end (`--shape-io`): `af-packet` or `xdp`.
    pub shape_io: &'static str,
    /// Whether `pspat shape` ran.
    pub pspat_available: bool,
    /// Why not.
    pub pspat_unavailable_reason: Option<String>,
    /// Throughput against senders.
    pub throughput: Vec<ThroughputRow>,
    /// The 10:1 split.
    pub split_10_1: Vec<SplitRow>,
    /// The victim.
    pub victim: VictimResult,
    /// Local senders: direct, through HTB, through pspat.
    pub local_senders: Vec<LocalSendersRow>,
    /// The experiments run.
    pub experiments: Vec<String>,
    /// Every run.
    pub runs: Vec<RunRecord>,
    /// Files written.
    pub files: Vec<String>,
    /// Plots not drawn, and why.
    pub plot_note: Option<String>,
}
