//! `pspat bench`: the runtime's throughput and latency against the two
//! baselines, in one binary (\[J\] §6.3, `docs/REFERENCE.md` §8.2-§8.4).
//!
//! * [`Mode::Pspat`]: clients submit to the runtime; the arbiter is pinned
//!   to the first core, clients and dispatchers to the second.
//! * [`Mode::Lock`]: the conventional architecture. Every client takes one
//!   mutex around scheduler enqueue, dequeue, link emulation and (null)
//!   transmit, as kernel qdiscs serialise on their root lock; clients spread
//!   over all cores.
//! * [`Mode::None`]: no scheduler; each client transmits to its own null
//!   backend.
//!
//! Each client is one flow (flow id = client id, the victim is the last
//! flow). Clients are greedy: they submit bursts of 32 as fast as they can
//! and yield when the mailbox is full (not a drop). The victim submits
//! `pps` packets per second; its latency is transmit time − submit time,
//! every packet sampled into a preallocated buffer.
//!
//! Atomics here are all `Relaxed`: the stop flag and the pinning flag order
//! nothing (results are read after `join`, which synchronizes), and the
//! baselines' per-client counters are single-writer tallies read either
//! after `join` or, once a second, as an approximate progress figure.
//!
//! `decisions_per_sec` is packets transmitted during the measured interval
//! divided by its length (with aggregation off a decision is a packet,
//! `docs/REFERENCE.md` §1.8).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use pspat_sched::{
    FlowId, FlowParams, FlowTable, LinkEmulator, Packet, Scheduler, SchedulerConfig, VisitScheduler,
};

use crate::{Clock, NullTx, Runtime, RuntimeConfig, RuntimeError, Submission, TxBackend, TxPacket};

pub use crate::config::TxMode;

/// Which architecture to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The PSPAT runtime.
    Pspat,
    /// One lock around the scheduler, link emulation and transmit.
    Lock,
    /// No scheduler.
    None,
}

impl Mode {
    /// `"pspat"`, `"lock"` or `"none"`.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Pspat => "pspat",
            Mode::Lock => "lock",
            Mode::None => "none",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "pspat" => Ok(Mode::Pspat),
            "lock" => Ok(Mode::Lock),
            "none" => Ok(Mode::None),
            _ => Err(RuntimeError::invalid(
                "mode",
                format!("unknown {s:?} (allowed: pspat, lock, none)"),
            )),
        }
    }
}

/// An extra latency-sensitive client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VictimConfig {
    /// Its weight.
    pub weight: u32,
    /// Packets per second it submits, 1..=10_000_000.
    pub pps: u64,
    /// Its packet length, 1..=65535.
    pub pkt_len: u32,
}

/// Everything one benchmark run needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchConfig {
    /// Architecture.
    pub mode: Mode,
    /// Greedy clients, 1..=1000.
    pub clients: usize,
    /// Algorithm and its parameters.
    pub sched: SchedulerConfig,
    /// Pspat mode: how packets are transmitted.
    pub tx_mode: TxMode,
    /// T for dispatcher mode (0 = the arbiter transmits).
    pub dispatchers: usize,
    /// Measured duration.
    pub duration: Duration,
    /// Packet length of the greedy clients, 1..=65535.
    pub pkt_len: u32,
    /// Empty = all 1; one value = all; else one per client.
    pub weights: Vec<u32>,
    /// Link rate; `None` = unlimited.
    pub rate_bps: Option<u64>,
    /// Pin threads (arbiter core 0, clients core 1).
    pub pin: bool,
    /// Optional latency-sensitive client.
    pub victim: Option<VictimConfig>,
    /// Δ_A in ns.
    pub delta_a_ns: u64,
    /// Client mailbox slots; 0 (the default) sizes them to the descriptor
    /// pool: twice the client's descriptors, 64..=512 slots.
    pub mailbox_entries: usize,
}

impl BenchConfig {
    /// DRR, 60-byte packets, 5 s, unlimited rate, pinned, T = 0.
    pub fn new(mode: Mode, clients: usize) -> Self {
        BenchConfig {
            mode,
            clients,
            sched: SchedulerConfig::new(pspat_sched::AlgKind::Drr),
            tx_mode: TxMode::Dispatcher,
            dispatchers: 0,
            duration: Duration::from_secs(5),
            pkt_len: 60,
            weights: Vec::new(),
            rate_bps: None,
            pin: true,
            victim: None,
            delta_a_ns: 1000,
            mailbox_entries: 0,
        }
    }

    /// Checks every field before any thread starts.
    ///
    /// # Errors
    /// [`RuntimeError::OutOfRange`]/[`RuntimeError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        RuntimeError::check_range("clients", self.clients, 1..=1000)?;
        RuntimeError::check_range("pkt_len", self.pkt_len, 1..=65_535)?;
        if self.duration.is_zero() || self.duration > Duration::from_secs(3600) {
            return Err(RuntimeError::out_of_range(
                "duration",
                format!("{:?}", self.duration),
                "0 < duration <= 3600 s",
            ));
        }
        if self.weights.len() > 1 && self.weights.len() != self.clients {
            return Err(RuntimeError::invalid(
                "weights",
                format!(
                    "{} values for {} clients (give none, one, or one per client)",
                    self.weights.len(),
                    self.clients
                ),
            ));
        }
        // The run raises the capacity to hold every descriptor in flight
        // (`sched_config`), but a capacity the scheduler itself would refuse
        // is still the caller's mistake, reported as such.
        RuntimeError::check_range(
            "scheduler capacity (packets)",
            self.sched.capacity,
            1..=pspat_sched::PacketQueues::MAX_CAPACITY,
        )?;
        if let Some(v) = &self.victim {
            RuntimeError::check_range("victim pps", v.pps, 1..=10_000_000)?;
            RuntimeError::check_range("victim pkt_len", v.pkt_len, 1..=65_535)?;
        }
        if self.mode == Mode::Pspat {
            self.runtime_config(false).validate()?;
        } else if let Some(r) = self.rate_bps {
            LinkEmulator::new(r, 512)?;
        }
        // Build the scheduler once, so a bad algorithm parameter (a negative
        // shaping rate, a malformed hierarchy) is a configuration error
        // before anything starts.
        self.sched_config().build(self.flow_table()?)?;
        Ok(())
    }

    fn total_clients(&self) -> usize {
        self.clients + usize::from(self.victim.is_some())
    }

    fn weight(&self, i: usize) -> u32 {
        if i == self.clients {
            return self.victim.map_or(1, |v| v.weight);
        }
        match self.weights.len() {
            0 => 1,
            1 => self.weights[0],
            _ => self.weights[i],
        }
    }

    fn flow_table(&self) -> Result<FlowTable, RuntimeError> {
        let flows = (0..self.total_clients())
            .map(|i| FlowParams {
                weight: self.weight(i),
                lmax: if i == self.clients {
                    self.victim.map_or(self.pkt_len, |v| v.pkt_len)
                } else {
                    self.pkt_len
                },
                priority: u8::from(i != self.clients || self.victim.is_none()),
            })
            .collect();
        Ok(FlowTable::new(flows)?)
    }

    fn runtime_config(&self, pinned: bool) -> RuntimeConfig {
        RuntimeConfig {
            max_clients: self.total_clients().max(1),
            mailbox_entries: self.mailbox_entries(),
            delta_a_ns: self.delta_a_ns,
            tx_mode: self.tx_mode,
            dispatchers: self.dispatchers,
            rate_bps: self.rate_bps,
            arbiter_core: pinned.then_some(ARBITER_CORE),
            dispatcher_core: pinned.then_some(CLIENT_CORE),
            descriptors_per_client: self.descriptors_per_client(),
            ..RuntimeConfig::default()
        }
    }
}

impl BenchConfig {
    /// Packets in flight per client: 8 Ki in total, 128..=1024 each (so
    /// clients x 128 above 64 clients: 128 000 at 1000), and the scheduler is
    /// sized to hold them all, so it never drops. Greedy clients keep every
    /// descriptor in flight, so this budget is the scheduler's working set:
    /// with 64 Ki in flight 64 clients fell to ~3 M decisions/s (the queues
    /// left the caches). The floor is the other side of the trade: a client
    /// that runs out of descriptors yields its core, and with 1000 clients on
    /// one core each yield (~1.5 us) is paid per pool. Measured at 1000
    /// clients with 512-slot mailboxes (decisions/s): 16 per client 6.5 M,
    /// 32 12 M, 64 ~24 M, 128 19 M, 256 15.5 M, 512 12.5 M; with mailboxes
    /// sized to the pool (`mailbox_entries`): 64 per client 31.6 M, 128
    /// 34.4 M, 256 28.6 M.
    fn descriptors_per_client(&self) -> usize {
        ((8_192 / self.total_clients()) & !63).clamp(128, 1024)
    }

    /// A client never has more packets in flight than descriptors, so a
    /// mailbox twice that size never refuses for long, and smaller mailboxes
    /// keep 1000 clients' rings (4 MB at 512 slots) closer to the caches:
    /// at 1000 clients 128 slots measured about 7% more decisions/s than 512.
    fn mailbox_entries(&self) -> usize {
        match self.mailbox_entries {
            0 => (2 * self.descriptors_per_client())
                .next_power_of_two()
                .clamp(64, 512),
            n => n,
        }
    }

    /// The scheduler's configuration: room for every descriptor, and the
    /// link rate as WF2Q+'s hint unless the caller gave one (links faster
    /// than the hint's range, above 1 Tbit/s, run without it).
    fn sched_config(&self) -> SchedulerConfig {
        let mut s = self.sched.clone();
        s.capacity = s
            .capacity
            .max(self.total_clients() * self.descriptors_per_client());
        if s.link_rate_bps.is_none() {
            s.link_rate_bps = self
                .rate_bps
                .filter(|&r| r <= pspat_sched::rate::MAX_RATE_BPS);
        }
        s
    }
}

const ARBITER_CORE: usize = 0;
const CLIENT_CORE: usize = 1;
const BURST: usize = 32;

/// Reported about once per second while running.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Seconds since the measured interval began.
    pub elapsed_s: f64,
    /// Packets transmitted so far.
    pub transmitted: u64,
}

/// The result of one run (`--json` prints it).
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// Version of this layout.
    pub schema_version: u32,
    /// `pspat`, `lock` or `none`.
    pub mode: String,
    /// Algorithm name.
    pub alg: String,
    /// `dispatcher` or `client`.
    pub tx_mode: String,
    /// Greedy clients.
    pub clients: usize,
    /// T.
    pub dispatchers: usize,
    /// Measured interval.
    pub duration_s: f64,
    /// Packet length of the greedy clients.
    pub pkt_len: u32,
    /// Link rate, if limited.
    pub rate_bps: Option<u64>,
    /// Where threads ran.
    pub pinning: String,
    /// Packets accepted (whole run).
    pub submitted: u64,
    /// Packets transmitted (whole run, including the final drain).
    pub transmitted: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Drops by reason.
    pub dropped_by_reason: BTreeMap<String, u64>,
    /// `submitted - transmitted - dropped` at the end (0 after a clean shutdown).
    pub in_flight: u64,
    /// Transmitted packets per second over the measured interval.
    pub decisions_per_sec: f64,
    /// Bytes transmitted.
    pub transmitted_bytes: u64,
    /// Per client (the victim last).
    pub per_client: Vec<ClientReport>,
    /// Pspat mode only.
    pub arbiter: Option<ArbiterReport>,
    /// With a victim only.
    pub victim: Option<VictimReport>,
}

/// One client's outcome.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClientReport {
    /// Id (= flow id).
    pub id: usize,
    /// Weight.
    pub weight: u32,
    /// Packets accepted.
    pub submitted: u64,
    /// Packets transmitted.
    pub transmitted: u64,
    /// Bytes transmitted.
    pub bytes: u64,
    /// Fraction of all transmitted bytes.
    pub share: f64,
    /// The share weighted max-min fairness gives: weight / sum of weights,
    /// except with a victim that sends less than its weight's share, which
    /// is due what it sends, the rest being split by weight among the others.
    pub expected_share: f64,
    /// Bytes × 8 / duration; bytes include the packets still queued when the
    /// window closed and drained at shutdown (at most the descriptor pool).
    pub rate_bps: f64,
}

/// Arbiter figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ArbiterReport {
    /// Rounds run.
    pub rounds: u64,
    /// Mean duration of a round that did work, ns.
    pub mean_round_ns: f64,
    /// Times the arbiter parked.
    pub sleeps: u64,
}

/// Victim latency percentiles, ns.
#[derive(Clone, Debug, serde::Serialize)]
#[allow(missing_docs)]
pub struct VictimReport {
    pub id: usize,
    pub weight: u32,
    pub pps: u64,
    pub samples: u64,
    pub min_ns: u64,
    pub p10_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

/// Per-client totals gathered by any mode.
struct Tally {
    submitted: Vec<u64>,
    transmitted: Vec<u64>,
    bytes: Vec<u64>,
    dropped_by_reason: BTreeMap<String, u64>,
    tx_at_stop: u64,
    elapsed: f64,
    latencies: Vec<u64>,
    arbiter: Option<ArbiterReport>,
}

/// Runs one benchmark; `progress` is called about once per second.
///
/// # Errors
/// An invalid configuration (nothing started) or a failed thread.
pub fn run(
    cfg: &BenchConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<BenchReport, RuntimeError> {
    cfg.validate()?;
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let pin = cfg.pin && cores.len() >= 2;
    let pin_ok = Arc::new(AtomicBool::new(pin));
    let tally = match cfg.mode {
        Mode::Pspat => run_pspat(cfg, pin, &pin_ok, progress)?,
        // The lock mode calls the concrete algorithm, as the arbiter does
        // (see `AnyScheduler::visit`), so the comparison is not skewed by a
        // dispatch on every call; the none mode builds it and leaves it.
        Mode::Lock | Mode::None => {
            cfg.sched_config()
                .build(cfg.flow_table()?)?
                .visit(Baseline {
                    cfg,
                    pin,
                    ncores: cores.len().max(1),
                    pin_ok: &pin_ok,
                    progress,
                })?
        }
    };
    // Relaxed: every thread that could clear the flag has been joined, and
    // the join orders its store before this load.
    let pinning = match (pin_ok.load(Ordering::Relaxed), cfg.mode) {
        (true, Mode::Pspat) => {
            format!("arbiter on core {ARBITER_CORE}; clients and dispatchers on core {CLIENT_CORE}")
        }
        (true, _) => format!("clients spread over {} cores", cores.len()),
        (false, _) => "unpinned".to_string(),
    };
    let n = cfg.total_clients();
    let total_bytes: u64 = tally.bytes.iter().sum();
    let weights: Vec<u32> = (0..n).map(|i| cfg.weight(i)).collect();
    let victim_share = match cfg.victim {
        Some(_) if total_bytes > 0 => Some((
            cfg.clients,
            tally.bytes[cfg.clients] as f64 / total_bytes as f64,
        )),
        _ => None,
    };
    let expected = expected_shares(&weights, victim_share);
    let per_client = (0..n)
        .map(|i| ClientReport {
            id: i,
            weight: cfg.weight(i),
            submitted: tally.submitted[i],
            transmitted: tally.transmitted[i],
            bytes: tally.bytes[i],
            share: if total_bytes == 0 {
                0.0
            } else {
                tally.bytes[i] as f64 / total_bytes as f64
            },
            expected_share: expected[i],
            rate_bps: tally.bytes[i] as f64 * 8.0 / tally.elapsed,
        })
        .collect();
    let submitted: u64 = tally.submitted.iter().sum();
    let transmitted: u64 = tally.transmitted.iter().sum();
    let dropped: u64 = tally.dropped_by_reason.values().sum();
    let victim = cfg.victim.map(|v| {
        let mut l = tally.latencies.clone();
        l.sort_unstable();
        let q = |p: f64| -> u64 {
            if l.is_empty() {
                0
            } else {
                l[((l.len() - 1) as f64 * p).round() as usize]
            }
        };
        VictimReport {
            id: cfg.clients,
            weight: v.weight,
            pps: v.pps,
            samples: l.len() as u64,
            min_ns: q(0.0),
            p10_ns: q(0.10),
            p50_ns: q(0.50),
            p90_ns: q(0.90),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: q(1.0),
        }
    });
    Ok(BenchReport {
        schema_version: 1,
        mode: cfg.mode.name().into(),
        alg: if cfg.mode == Mode::None {
            "none".into()
        } else {
            cfg.sched.alg.name().into()
        },
        tx_mode: cfg.tx_mode.name().into(),
        clients: cfg.clients,
        dispatchers: cfg.dispatchers,
        duration_s: tally.elapsed,
        pkt_len: cfg.pkt_len,
        rate_bps: cfg.rate_bps,
        pinning,
        submitted,
        transmitted,
        dropped,
        dropped_by_reason: tally.dropped_by_reason,
        in_flight: submitted.saturating_sub(transmitted + dropped),
        decisions_per_sec: tally.tx_at_stop as f64 / tally.elapsed,
        transmitted_bytes: total_bytes,
        per_client,
        arbiter: tally.arbiter,
        victim,
    })
}

fn pin_to(core: usize, ok: &AtomicBool) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        // Relaxed: read only after this thread is joined (see `run`).
        ok.store(false, Ordering::Relaxed);
    }
}

fn victim_capacity(cfg: &BenchConfig) -> usize {
    cfg.victim.map_or(0, |v| {
        (v.pps as f64 * (cfg.duration.as_secs_f64() + 2.0)).min(20_000_000.0) as usize
    })
}

/// Waits `duration`, calling `progress` each second with `transmitted()`.
fn measure(
    duration: Duration,
    progress: &mut dyn FnMut(Progress),
    transmitted: &dyn Fn() -> u64,
) -> (u64, f64) {
    let t0 = std::time::Instant::now();
    let base = transmitted();
    let mut next = Duration::from_secs(1);
    loop {
        let el = t0.elapsed();
        if el >= duration {
            break;
        }
        std::thread::sleep(
            (duration - el)
                .min(next.saturating_sub(el))
                .max(Duration::from_millis(1)),
        );
        if t0.elapsed() >= next && t0.elapsed() < duration {
            progress(Progress {
                elapsed_s: t0.elapsed().as_secs_f64(),
                transmitted: transmitted() - base,
            });
            next += Duration::from_secs(1);
        }
    }
    let tx = transmitted() - base;
    (tx, t0.elapsed().as_secs_f64())
}

/// Paces the victim: sleeps or spins until `deadline` ns on `clock`.
fn wait_until(clock: &Clock, deadline: u64, stop: &AtomicBool) {
    loop {
        let now = clock.now().as_nanos();
        // Relaxed: `stop` only ends loops; it publishes no data (results
        // travel through the thread's join).
        if now >= deadline || stop.load(Ordering::Relaxed) {
            return;
        }
        if deadline - now > 100_000 {
            std::thread::sleep(Duration::from_nanos(deadline - now - 50_000));
        } else {
            std::thread::yield_now();
        }
    }
}

fn run_pspat(
    cfg: &BenchConfig,
    pin: bool,
    pin_ok: &Arc<AtomicBool>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Tally, RuntimeError> {
    let sched = cfg.sched_config().build(cfg.flow_table()?)?;
    let victim_id = cfg.victim.map(|_| cfg.clients as u32);
    let cap = victim_capacity(cfg);
    // The arbiter runs on the concrete algorithm (see `AnyScheduler::visit`).
    let rt = sched.visit(StartRuntime {
        cfg: cfg.runtime_config(pin),
        victim_id,
        cap,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(cfg.total_clients() + 1));
    let mut handles = Vec::new();
    for i in 0..cfg.total_clients() {
        let mut c = rt.client()?;
        let stop = Arc::clone(&stop);
        let go = Arc::clone(&go);
        let pin_ok = Arc::clone(pin_ok);
        let is_victim = i == cfg.clients;
        let len = if is_victim {
            cfg.victim.map_or(cfg.pkt_len, |v| v.pkt_len)
        } else {
            cfg.pkt_len
        };
        let pps = cfg.victim.map_or(1, |v| v.pps);
        let clock = rt.clock();
        let h = std::thread::Builder::new()
            .name(format!("pspat-bench-client-{i}"))
            .spawn(move || {
                if pin {
                    pin_to(CLIENT_CORE, &pin_ok);
                }
                go.wait();
                let flow = FlowId(i as u32);
                if is_victim {
                    let period = 1_000_000_000 / pps.max(1);
                    let mut next = clock.now().as_nanos();
                    // Relaxed, as in `wait_until`: a stop signal only.
                    while !stop.load(Ordering::Relaxed) {
                        // Client-transmit mode: keep draining grants while
                        // waiting, so latency is not the submit period.
                        while c.drain() > 0 || c.outstanding() > 0 {
                            if clock.now().as_nanos() >= next || stop.load(Ordering::Relaxed) {
                                break;
                            }
                            std::thread::yield_now();
                        }
                        wait_until(&clock, next, &stop);
                        next += period;
                        let mut s = Submission {
                            flow,
                            len,
                            cookie: clock.now().as_nanos(),
                        };
                        while let Err(e) = c.submit(s) {
                            // Relaxed: a stop signal only.
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            s = e.into_inner();
                            std::thread::yield_now();
                        }
                    }
                } else {
                    let mut burst = [Submission {
                        flow,
                        len,
                        cookie: 0,
                    }; BURST];
                    let mut seq = 0u64;
                    // Relaxed: a stop signal only.
                    while !stop.load(Ordering::Relaxed) {
                        for (k, s) in burst.iter_mut().enumerate() {
                            s.cookie = seq + k as u64;
                        }
                        let b = c.submit_burst(&burst);
                        seq += b.accepted as u64;
                        // A refused tail is simply offered again in the
                        // next burst (cookies continue from `seq`). Behind
                        // a slow link this sleeps instead of spinning.
                        if b.accepted == 0 {
                            c.wait_for_room(Duration::from_millis(10));
                        }
                    }
                }
                c.into_backend()
            })
            .map_err(|e| RuntimeError::Thread {
                what: format!("client {i}"),
                reason: e.to_string(),
            })?;
        handles.push(h);
    }
    go.wait();
    let (tx_at_stop, elapsed) = measure(cfg.duration, progress, &|| rt.stats().transmitted);
    // Relaxed: pairs with nothing; the joins below order everything the
    // clients did before this thread reads their results.
    stop.store(true, Ordering::Relaxed);
    let mut backends = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(b) => backends.extend(b),
            Err(_) => {
                return Err(RuntimeError::Thread {
                    what: format!("client {i}"),
                    reason: "panicked".into(),
                })
            }
        }
    }
    let done = rt.shutdown()?;
    backends.extend(done.backends);
    let latencies = backends
        .iter()
        .flat_map(|b| b.latencies_ns().iter().copied())
        .collect();
    let st = &done.stats;
    let a = done.arbiter;
    Ok(Tally {
        submitted: st.clients.iter().map(|c| c.submitted).collect(),
        transmitted: st.clients.iter().map(|c| c.transmitted).collect(),
        bytes: st.clients.iter().map(|c| c.transmitted_bytes).collect(),
        dropped_by_reason: st.dropped_by_reason(),
        tx_at_stop,
        elapsed,
        latencies,
        arbiter: Some(ArbiterReport {
            rounds: a.rounds,
            mean_round_ns: if a.busy_rounds == 0 {
                0.0
            } else {
                a.busy_round_ns as f64 / a.busy_rounds as f64
            },
            sleeps: a.sleeps,
        }),
    })
}

/// Each client's share of the link under weighted max-min fairness, all
/// clients greedy except `victim = (index, measured share)`: a victim asking
/// less than its weight's share is due exactly what it sends, and the others
/// split the rest by weight; otherwise every share follows the weights.
fn expected_shares(weights: &[u32], victim: Option<(usize, f64)>) -> Vec<f64> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let by_weight = |w: u32, of: u64| {
        if of == 0 {
            0.0
        } else {
            f64::from(w) / of as f64
        }
    };
    match victim {
        Some((v, share)) if v < weights.len() && share < by_weight(weights[v], total) => {
            let others = total - u64::from(weights[v]);
            (0..weights.len())
                .map(|i| {
                    if i == v {
                        share
                    } else {
                        (1.0 - share) * by_weight(weights[i], others)
                    }
                })
                .collect()
        }
        _ => weights.iter().map(|&w| by_weight(w, total)).collect(),
    }
}

/// Starts the runtime on the concrete algorithm inside an `AnyScheduler`,
/// with a null transmitter that samples the victim's latency if there is one.
struct StartRuntime {
    cfg: RuntimeConfig,
    victim_id: Option<u32>,
    cap: usize,
}

impl VisitScheduler for StartRuntime {
    type Output = Result<Runtime<NullTx>, RuntimeError>;

    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output {
        let (victim_id, cap) = (self.victim_id, self.cap);
        Runtime::start(self.cfg, sched, move |_| match victim_id {
            Some(v) => NullTx::with_latency_sampling(v, cap),
            None => NullTx::new(),
        })
    }
}

/// Runs the lock or none mode on the concrete algorithm.
struct Baseline<'a, 'p> {
    cfg: &'a BenchConfig,
    pin: bool,
    ncores: usize,
    pin_ok: &'a Arc<AtomicBool>,
    progress: &'a mut (dyn FnMut(Progress) + 'p),
}

impl VisitScheduler for Baseline<'_, '_> {
    type Output = Result<Tally, RuntimeError>;

    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output {
        run_baseline(
            self.cfg,
            sched,
            self.pin,
            self.ncores,
            self.pin_ok,
            self.progress,
        )
    }
}

/// The lock-mode critical section's state.
struct Locked<S> {
    sched: S,
    link: LinkEmulator,
    tx: NullTx,
    batch: Vec<TxPacket>,
    transmitted: Vec<u64>,
    bytes: Vec<u64>,
    dropped: BTreeMap<String, u64>,
    victim_times: Vec<u64>,
    latencies: Vec<u64>,
}

fn run_baseline<S: Scheduler + Send + 'static>(
    cfg: &BenchConfig,
    sched: S,
    pin: bool,
    ncores: usize,
    pin_ok: &Arc<AtomicBool>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Tally, RuntimeError> {
    let n = cfg.total_clients();
    let clock = Clock::new();
    let cap = victim_capacity(cfg);
    let locked = if cfg.mode == Mode::Lock {
        let link = match cfg.rate_bps {
            Some(r) => LinkEmulator::new(r, 512)?,
            None => LinkEmulator::unlimited(512)?,
        };
        Some(Arc::new(Mutex::new(Locked {
            sched,
            link,
            tx: NullTx::new(),
            batch: Vec::with_capacity(512),
            transmitted: vec![0; n],
            bytes: vec![0; n],
            dropped: BTreeMap::new(),
            victim_times: Vec::with_capacity(cap),
            latencies: Vec::with_capacity(cap),
        })))
    } else {
        None
    };
    let counters: Arc<Vec<[AtomicU64; 3]>> = Arc::new((0..n).map(|_| Default::default()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(n + 1));
    let mut handles = Vec::new();
    for i in 0..n {
        let stop = Arc::clone(&stop);
        let go = Arc::clone(&go);
        let pin_ok = Arc::clone(pin_ok);
        let locked = locked.clone();
        let counters = Arc::clone(&counters);
        let is_victim = i == cfg.clients;
        let len = if is_victim {
            cfg.victim.map_or(cfg.pkt_len, |v| v.pkt_len)
        } else {
            cfg.pkt_len
        };
        let pps = cfg.victim.map_or(1, |v| v.pps);
        let victim_id = cfg.clients;
        let h = std::thread::Builder::new()
            .name(format!("pspat-bench-{}-{i}", cfg.mode))
            .spawn(move || -> Vec<u64> {
                if pin {
                    pin_to(i % ncores, &pin_ok);
                }
                let mut own = NullTx::new();
                let mut lat = Vec::new();
                let mut one = [TxPacket {
                    client: i as u32,
                    flow: FlowId(i as u32),
                    len,
                    cookie: 0,
                }];
                go.wait();
                let period = 1_000_000_000 / pps.max(1);
                let mut next = clock.now().as_nanos();
                let mut seq = 0u64;
                // Relaxed: a stop signal only.
                while !stop.load(Ordering::Relaxed) {
                    if is_victim {
                        wait_until(&clock, next, &stop);
                        next += period;
                    }
                    let t_submit = clock.now();
                    // Relaxed counters: each has one writer, the sampler
                    // only needs some recent value, and the final totals
                    // are read after the join.
                    counters[i][0].fetch_add(1, Ordering::Relaxed);
                    match &locked {
                        None => {
                            one[0].cookie = t_submit.as_nanos();
                            let now = clock.now();
                            own.transmit(now, &one);
                            if is_victim && lat.len() < cap {
                                lat.push(now.as_nanos() - t_submit.as_nanos());
                            }
                            // Relaxed, as for `counters[i][0]` above.
                            counters[i][1].fetch_add(1, Ordering::Relaxed);
                            counters[i][2].fetch_add(u64::from(len), Ordering::Relaxed);
                        }
                        Some(m) => {
                            let mut g = match m.lock() {
                                Ok(g) => g,
                                Err(p) => p.into_inner(),
                            };
                            let st = &mut *g;
                            let mut token = (i as u64) << 32;
                            if is_victim && st.victim_times.len() < st.victim_times.capacity() {
                                token |= st.victim_times.len() as u64 + 1;
                                st.victim_times.push(t_submit.as_nanos());
                            }
                            let now = clock.now();
                            if let Err(r) = st
                                .sched
                                .enqueue(now, Packet::new(FlowId(i as u32), len, token))
                            {
                                *st.dropped.entry(r.reason.as_str().to_string()).or_insert(0) += 1;
                            }
                            let Locked {
                                sched, link, batch, ..
                            } = st;
                            link.release(now, sched, |p: Packet| {
                                batch.push(TxPacket {
                                    client: (p.token >> 32) as u32,
                                    flow: p.flow,
                                    len: p.len,
                                    cookie: p.token,
                                })
                            });
                            let now = clock.now();
                            st.tx.transmit(now, &st.batch);
                            // The measuring thread reads these, never the
                            // contended lock: with 1000 clients a std mutex
                            // let it wait out the whole run (0 decisions/s
                            // measured). Relaxed: a statistic, read once
                            // per second; the exact per-client tally is the
                            // one kept under the lock.
                            counters[i][1].fetch_add(st.batch.len() as u64, Ordering::Relaxed);
                            for p in &st.batch {
                                let c = p.client as usize;
                                st.transmitted[c] += 1;
                                st.bytes[c] += u64::from(p.len);
                                let vi = (p.cookie & 0xffff_ffff) as usize;
                                if c == victim_id && vi > 0 {
                                    let t = st.victim_times[vi - 1];
                                    st.latencies.push(now.as_nanos().saturating_sub(t));
                                }
                            }
                            st.batch.clear();
                        }
                    }
                    seq += 1;
                    // Without a scheduler nothing ever blocks a client; with
                    // hundreds of spinning threads on two cores the thread
                    // that ends the run starved (seen with 1000 clients), so
                    // a none-mode client yields every 1024 packets, as a real
                    // sender blocks on I/O now and then.
                    if locked.is_none() && seq.is_multiple_of(1024) {
                        std::thread::yield_now();
                    }
                }
                lat
            })
            .map_err(|e| RuntimeError::Thread {
                what: format!("client {i}"),
                reason: e.to_string(),
            })?;
        handles.push(h);
    }
    go.wait();
    // Packets transmitted so far, in both modes (in lock mode each client
    // adds what its turn under the lock released). Relaxed: a running
    // statistic, paired with the clients' Relaxed adds; the exact totals are
    // read after the joins.
    let transmitted = || -> u64 { counters.iter().map(|c| c[1].load(Ordering::Relaxed)).sum() };
    let (tx_at_stop, elapsed) = measure(cfg.duration, progress, &transmitted);
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(l) => latencies.extend(l),
            Err(_) => {
                return Err(RuntimeError::Thread {
                    what: format!("client {i}"),
                    reason: "panicked".into(),
                })
            }
        }
    }
    // Relaxed: every client is joined, so its last increment is visible.
    let submitted: Vec<u64> = counters
        .iter()
        .map(|c| c[0].load(Ordering::Relaxed))
        .collect();
    match locked {
        Some(m) => {
            let mut g = match m.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            // Clean shutdown: release what is still queued, at the link rate.
            let st = &mut *g;
            while !st.sched.is_empty() {
                let now = clock.now();
                let Locked {
                    sched, link, batch, ..
                } = st;
                link.release(now, sched, |p: Packet| {
                    batch.push(TxPacket {
                        client: (p.token >> 32) as u32,
                        flow: p.flow,
                        len: p.len,
                        cookie: p.token,
                    })
                });
                st.tx.transmit(now, &st.batch);
                for p in &st.batch {
                    st.transmitted[p.client as usize] += 1;
                    st.bytes[p.client as usize] += u64::from(p.len);
                }
                st.batch.clear();
                std::hint::spin_loop();
            }
            latencies.extend(st.latencies.iter().copied());
            Ok(Tally {
                submitted,
                transmitted: st.transmitted.clone(),
                bytes: st.bytes.clone(),
                dropped_by_reason: st.dropped.clone(),
                tx_at_stop,
                elapsed,
                latencies,
                arbiter: None,
            })
        }
        // Relaxed loads, as for `submitted`: after the joins.
        None => Ok(Tally {
            submitted,
            transmitted: counters
                .iter()
                .map(|c| c[1].load(Ordering::Relaxed))
                .collect(),
            bytes: counters
                .iter()
                .map(|c| c[2].load(Ordering::Relaxed))
                .collect(),
            dropped_by_reason: BTreeMap::new(),
            tx_at_stop,
            elapsed,
            latencies,
            arbiter: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::expected_shares;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn greedy_clients_are_due_their_weights() {
        assert!(close(&expected_shares(&[1, 3], None), &[0.25, 0.75]));
    }

    #[test]
    fn a_light_victim_is_due_what_it_sends_and_the_rest_splits_by_weight() {
        // The demo: weights 1, 2, 4, 8 and a victim of weight 50 using 1%.
        let e = expected_shares(&[1, 2, 4, 8, 50], Some((4, 0.01)));
        let rest = 0.99 / 15.0;
        assert!(
            close(&e, &[rest, 2.0 * rest, 4.0 * rest, 8.0 * rest, 0.01]),
            "{e:?}"
        );
    }

    #[test]
    fn a_victim_asking_more_than_its_weight_is_held_to_its_weight() {
        let e = expected_shares(&[1, 1], Some((1, 0.9)));
        assert!(close(&e, &[0.5, 0.5]), "{e:?}");
    }
}
