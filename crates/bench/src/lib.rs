//! `pspat-bench`: the PSPAT runtime's throughput and latency against the two
//! baselines of the journal paper's evaluation, in one process (\[J\] §6.3).
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
//! The engine uses only the runtime's public API (`Runtime`, `Client`,
//! `NullTx`, `Clock`, ...), as any embedder would.
//!
//! Atomics here are all `Relaxed`: the stop flag and the pinning flag order
//! nothing (results are read after `join`, which synchronizes), and the
//! baselines' per-client counters are single-writer tallies read either
//! after `join` or, once a second, as an approximate progress figure.
//!
//! `decisions_per_sec` is packets transmitted during the measured interval
//! divided by its length (with aggregation off a decision is a packet).
//!
//! \[J\] L. Rizzo, P. Valente, G. Lettieri, V. Maffione, "PSPAT: software
//! packet scheduling at hardware speed" (the journal version).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pspat::RuntimeError;

mod baseline;
mod config;
mod pspat_mode;
mod report;
mod start;
mod victim;
mod window;

pub use config::{BenchConfig, Mode, VictimConfig};
pub use pspat::{ShutdownPolicy, TxMode};
pub use report::{ArbiterReport, BenchReport, ClientReport, Progress, VictimReport};

use baseline::Baseline;
use config::{ARBITER_CORE, CLIENT_CORE};
use pspat_mode::run_pspat;
use report::expected_shares;

/// Joins every client thread, in order, collecting what each returned.
///
/// # Errors
/// [`RuntimeError::Thread`] naming the first client that panicked.
pub(crate) fn join_clients<T>(
    handles: Vec<std::thread::JoinHandle<T>>,
) -> Result<Vec<T>, RuntimeError> {
    handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            h.join().map_err(|_| RuntimeError::Thread {
                what: format!("client {i}"),
                reason: "panicked".into(),
            })
        })
        .collect()
}

/// Per-client totals gathered by any mode.
pub(crate) struct Tally {
    pub(crate) submitted: Vec<u64>,
    pub(crate) transmitted: Vec<u64>,
    pub(crate) bytes: Vec<u64>,
    pub(crate) dropped_by_reason: BTreeMap<String, u64>,
    pub(crate) window: window::Window,
    /// The clients running when the window opened.
    pub(crate) start: start::StartReport,
    pub(crate) latencies: Vec<u64>,
    pub(crate) arbiter: Option<ArbiterReport>,
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
    // Shares and rates count only the measured window (`window`).
    let w = &tally.window;
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    let window_bytes: u64 = w.bytes.iter().sum();
    let window_transmitted: u64 = w.transmitted.iter().sum();
    let weights: Vec<u32> = (0..n).map(|i| cfg.weight(i)).collect();
    let victim_share = match cfg.victim {
        Some(_) if window_bytes > 0 => Some((
            cfg.clients,
            at(&w.bytes, cfg.clients) as f64 / window_bytes as f64,
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
            window_transmitted: at(&w.transmitted, i),
            window_bytes: at(&w.bytes, i),
            share: if window_bytes == 0 {
                0.0
            } else {
                at(&w.bytes, i) as f64 / window_bytes as f64
            },
            expected_share: expected[i],
            rate_bps: at(&w.bytes, i) as f64 * 8.0 / w.elapsed,
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
        mode: cfg.mode.name().into(),
        alg: if cfg.mode == Mode::None {
            "none".into()
        } else {
            cfg.sched.alg.name().into()
        },
        tx_mode: cfg.tx_mode.name().into(),
        clients: cfg.clients,
        dispatchers: cfg.dispatchers,
        duration_s: w.elapsed,
        pkt_len: cfg.pkt_len,
        lmax: cfg.lmax,
        descriptors_per_client: (cfg.mode == Mode::Pspat).then(|| cfg.descriptors_per_client()),
        mailbox_entries: (cfg.mode == Mode::Pspat).then(|| cfg.mailbox_entries()),
        rate_bps: cfg.rate_bps,
        pinning,
        submitted,
        transmitted,
        dropped,
        dropped_by_reason: tally.dropped_by_reason,
        in_flight: submitted.saturating_sub(transmitted + dropped),
        decisions_per_sec: window_transmitted as f64 / w.elapsed,
        transmitted_bytes: total_bytes,
        window_transmitted,
        window_bytes,
        throughput_bps: window_bytes as f64 * 8.0 / w.elapsed,
        clients_running: tally.start.clients_running,
        warm_up_s: tally.start.wait_s,
        per_client,
        arbiter: tally.arbiter,
        victim,
    })
}

pub(crate) fn pin_to(core: usize, ok: &AtomicBool) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        // Relaxed: read only after this thread is joined (see `run`).
        ok.store(false, Ordering::Relaxed);
    }
}
