//! `pspat bench`: runtime throughput of PSPAT against the conventional
//! lock-based architecture and against no scheduler, in one run.
//!
//! Several modes (`--mode pspat,lock`) and repetitions (`--repeat`) run
//! interleaved (pspat, lock, pspat, lock, ...) so that slow drifts of the
//! machine hit every mode alike; the summary quotes medians and the ratio of
//! medians measured in the same run.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use pspat_bench::{self as bench, BenchConfig, BenchReport, ShutdownPolicy, TxMode};
use serde::Serialize;

use crate::units::{self, human_rate, parse_weights};
use crate::usage;

/// Flags of `pspat bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = concat!(pspat_cli::units_help!(), "\n\nExit codes: 0 success; 1 the run failed; 2 usage or configuration error (nothing started)."))]
pub struct Args {
    /// Architecture(s) to run, comma separated: pspat, lock (one mutex around the scheduler, as kernel qdiscs), none (no scheduler).
    #[arg(long, default_value = "pspat", allow_hyphen_values = true)]
    mode: String,
    /// Number of greedy clients, 1..=1000.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    clients: usize,
    #[command(flatten)]
    scheduler: crate::sched_config::SchedulerFlags,
    /// Who transmits what the arbiter releases: dispatcher (TX mailboxes; --dispatchers 0 = the arbiter itself) or client (clients transmit their granted packets).
    #[arg(long = "tx-mode", default_value = "dispatcher")]
    tx_mode: String,
    /// Dispatcher threads in dispatcher mode, 0..=64 (0: the arbiter transmits).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    dispatchers: usize,
    /// Length of each run: a number with ns, us, ms or s (bare = seconds), above 0 and at most 3600s.
    #[arg(long, default_value = "5s", value_parser = units::duration_arg, allow_hyphen_values = true)]
    duration: Duration,
    /// Packet length in bytes, 1..=65535.
    #[arg(long = "pkt-len", default_value_t = 60, allow_negative_numbers = true)]
    pkt_len: u32,
    /// The lmax each client's flow declares, bytes, from --pkt-len to 65535 (default 1500, one Ethernet MTU, or --pkt-len if larger: pspat shape likewise gives every flow its output interface's largest frame); DRR's quanta and QFQ's groups derive from it (--lmax 60 with 60-byte packets: DRR sends one packet per visit).
    #[arg(long, allow_negative_numbers = true)]
    lmax: Option<u32>,
    /// Descriptors per client in --mode pspat (its packets in flight at most), a multiple of 64 in 64..=1048576; default 8192 shared by the clients, 512..=1024 each (512 at 16 clients and more). Fewer shrink the scheduler's working set, more make each client yield less often (docs/BENCHMARKS.md, section 3).
    #[arg(long, allow_negative_numbers = true)]
    descriptors: Option<usize>,
    /// Mailbox slots per client in --mode pspat, a power of two in 64..=65536; default twice the descriptors, 64..=512.
    #[arg(long = "mailbox-entries", allow_negative_numbers = true)]
    mailbox_entries: Option<usize>,
    /// Client weights, comma separated (one value applies to all clients), each 1..=65536.
    #[arg(long, allow_hyphen_values = true)]
    weights: Option<String>,
    /// Emulated link rate in bit/s: a number with K, M, G or T (e.g. 1M, 1Mbit/s, 10G; bare = bit/s); default: unlimited.
    #[arg(long, value_parser = units::rate_arg, allow_hyphen_values = true)]
    rate: Option<u64>,
    /// Runs per mode, 1..=100; the summary quotes medians.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    repeat: usize,
    /// Arbiter read interval Delta_A: a duration (e.g. 1us, 500ns; bare = seconds), at most 1ms.
    #[arg(long = "delta-a", default_value = "1us", value_parser = units::duration_arg, allow_hyphen_values = true)]
    delta_a: Duration,
    /// Wake-up coalescing behind a slow link or a shaper: the most a packet leaves before or after its due time so that a sleeping arbiter releases it with the next ones; a duration (e.g. 2ms; bare = seconds), at most 100ms, 0 for a wake-up per release time. Longer means fewer wake-ups, so less CPU at low rates, and releases further from their times (docs/BENCHMARKS.md, section 10).
    #[arg(long = "max-wake-delay", default_value = "1ms", value_parser = units::duration_arg, allow_hyphen_values = true)]
    max_wake_delay: Duration,
    /// Wake-up coalescing: about this many packets leave per wake-up of a sleeping arbiter (each round releases what falls due within half this many mean gaps between releases, less one, and a sleep lasts as long past the first due time; at most --max-wake-delay), 1..=64; 1 wakes for every packet.
    #[arg(
        long = "wake-batch",
        default_value_t = pspat::RuntimeConfig::default().wake_batch,
        allow_negative_numbers = true
    )]
    wake_batch: u32,
    /// What shutdown does with packets still queued after the run: drain or drain:DEADLINE (send at the link rate for at most DEADLINE, a duration, default 5s, at most 3600s; then drop the rest) or discard (drop them at once). Dropped packets are counted with reason "shutdown"; nothing sent after the run counts in the report.
    #[arg(long, default_value = "drain:5s", value_parser = shutdown_arg, allow_hyphen_values = true)]
    shutdown: ShutdownPolicy,
    /// Do not pin threads (by default the arbiter runs on core 0, clients on core 1).
    #[arg(long = "no-pin")]
    no_pin: bool,
    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,
}

/// Longest drain deadline `--shutdown` accepts.
const MAX_DRAIN: Duration = Duration::from_secs(3600);

/// Parses `--shutdown` (bench and demo): `drain`, `drain:DEADLINE` (a
/// duration as `--duration` takes it, at most 3600s) or `discard`.
///
/// # Errors
/// One line saying what is allowed (clap names the flag).
pub(crate) fn shutdown_arg(text: &str) -> Result<ShutdownPolicy, String> {
    let t = text.trim();
    let allowed = "allowed: drain, drain:DEADLINE (e.g. drain:2s), discard";
    let (word, deadline) = match t.split_once(':') {
        Some((w, d)) => (w, Some(d)),
        None => (t, None),
    };
    match (word.to_ascii_lowercase().as_str(), deadline) {
        ("discard", None) => Ok(ShutdownPolicy::Discard),
        ("drain", None) => Ok(ShutdownPolicy::default()),
        ("drain", Some(d)) => {
            let deadline = units::parse_duration(d)?;
            if deadline > MAX_DRAIN {
                return Err(format!(
                    "drain deadline {} is above 3600s",
                    units::format_duration(deadline)
                ));
            }
            Ok(ShutdownPolicy::Drain { deadline })
        }
        _ => Err(format!("unknown policy {} ({allowed})", units::quote(t))),
    }
}

/// A validated configuration for each mode, in run order.
fn configs(args: &Args) -> anyhow::Result<Vec<BenchConfig>> {
    let modes = units::parse_modes(&args.mode).map_err(usage)?;
    if !(1..=1000).contains(&args.clients) {
        return Err(usage(format!(
            "--clients must be in 1..=1000, got {}",
            args.clients
        )));
    }
    let sched = args.scheduler.config()?;
    let tx_mode = match args.tx_mode.as_str() {
        "dispatcher" => TxMode::Dispatcher,
        "client" => TxMode::Client,
        other => {
            return Err(usage(format!(
                "--tx-mode: unknown mode {other:?} (allowed: dispatcher, client)"
            )))
        }
    };
    if args.dispatchers > 64 {
        return Err(usage(format!(
            "--dispatchers must be in 0..=64, got {}",
            args.dispatchers
        )));
    }
    if tx_mode == TxMode::Client && args.dispatchers > 0 {
        // Granted packets go back to their clients: no dispatcher would run.
        return Err(usage(
            "--dispatchers applies to --tx-mode dispatcher; with --tx-mode client the clients transmit",
        ));
    }
    units::check_duration("--duration", args.duration, units::MEASURED_RUN).map_err(usage)?;
    if !(1..=65_535).contains(&args.pkt_len) {
        return Err(usage(format!(
            "--pkt-len must be in 1..=65535 bytes, got {}",
            args.pkt_len
        )));
    }
    let lmax = args.lmax.unwrap_or(BenchConfig::default_lmax(args.pkt_len));
    if !(args.pkt_len..=65_535).contains(&lmax) {
        return Err(usage(format!(
            "--lmax must be in {}..=65535 bytes (at least --pkt-len), got {lmax}",
            args.pkt_len
        )));
    }
    if let Some(d) = args.descriptors {
        if !d.is_multiple_of(64) || !(64..=1 << 20).contains(&d) {
            return Err(usage(format!(
                "--descriptors must be a multiple of 64 in 64..=1048576, got {d}"
            )));
        }
    }
    if let Some(m) = args.mailbox_entries {
        if !m.is_power_of_two() || !(64..=65_536).contains(&m) {
            return Err(usage(format!(
                "--mailbox-entries must be a power of two in 64..=65536, got {m}"
            )));
        }
    }
    let weights = match &args.weights {
        None => Vec::new(),
        Some(text) => parse_weights("--weights", text).map_err(usage)?,
    };
    if weights.len() > 1 && weights.len() != args.clients {
        return Err(usage(format!(
            "--weights lists {} weights for {} clients (give one weight for all, or exactly one per client)",
            weights.len(),
            args.clients
        )));
    }
    let rate_bps = args
        .rate
        .map(|r| units::check_rate("--rate", r).map_err(usage))
        .transpose()?;
    if !(1..=100).contains(&args.repeat) {
        return Err(usage(format!(
            "--repeat must be in 1..=100, got {}",
            args.repeat
        )));
    }
    if !(1..=64).contains(&args.wake_batch) {
        return Err(usage(format!(
            "--wake-batch must be in 1..=64, got {}",
            args.wake_batch
        )));
    }
    if args.max_wake_delay > Duration::from_millis(100) {
        return Err(usage(format!(
            "--max-wake-delay must be at most 100ms, got {}",
            units::format_duration(args.max_wake_delay)
        )));
    }
    if args.delta_a > Duration::from_millis(1) {
        return Err(usage(format!(
            "--delta-a must be at most 1ms, got {}",
            units::format_duration(args.delta_a)
        )));
    }

    modes
        .into_iter()
        .map(|mode| {
            let mut cfg = BenchConfig::new(mode, args.clients);
            cfg.sched = sched.clone();
            cfg.tx_mode = tx_mode;
            cfg.dispatchers = args.dispatchers;
            cfg.duration = args.duration;
            cfg.pkt_len = args.pkt_len;
            cfg.lmax = lmax;
            cfg.descriptors_per_client = args.descriptors.unwrap_or(0);
            cfg.mailbox_entries = args.mailbox_entries.unwrap_or(0);
            cfg.weights = weights.clone();
            cfg.rate_bps = rate_bps;
            cfg.pin = !args.no_pin;
            cfg.delta_a_ns = args.delta_a.as_nanos() as u64;
            cfg.max_wake_delay_ns = args.max_wake_delay.as_nanos() as u64;
            cfg.wake_batch = args.wake_batch;
            cfg.shutdown = args.shutdown;
            check_config(&cfg, &args.scheduler)?;
            Ok(cfg)
        })
        .collect()
}

/// Median, min and max of one mode's runs (decisions/s).
#[derive(Serialize)]
struct ModeSummary {
    runs: usize,
    median_decisions_per_sec: f64,
    min_decisions_per_sec: f64,
    max_decisions_per_sec: f64,
}

/// `pspat bench --json`: one shape whatever the modes and repeats
/// (docs/JSON.md).
#[derive(Serialize)]
struct BenchJson<'a> {
    schema_version: u32,
    command: &'static str,
    /// Modes in run order.
    modes: Vec<String>,
    repeat: usize,
    /// By mode name.
    summary: BTreeMap<String, ModeSummary>,
    /// `"<first>_over_<other>"`: median decisions/s of the first mode over
    /// each other mode's; empty with one mode.
    ratios: BTreeMap<String, f64>,
    /// Every run, in run order.
    runs: &'a [BenchReport],
}

/// Checks a run's configuration before anything starts (`bench` and `demo`):
/// the run's own fields, then its memory need, and only then the scheduler,
/// which is built once to check it (an arena of a billion packets must be
/// refused by the memory check, not allocated).
pub(crate) fn check_config(
    cfg: &BenchConfig,
    scheduler: &crate::sched_config::SchedulerFlags,
) -> anyhow::Result<()> {
    cfg.validate_run().map_err(|e| usage(e.to_string()))?;
    pspat_cli::memory::check(
        &format!("the run with {}", scheduler.source()),
        cfg.memory_estimate(),
        pspat_cli::memory::available(),
    )
    .map_err(usage)?;
    cfg.validate_scheduler().map_err(|e| scheduler.refused(e))?;
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn summarize(reports: &[BenchReport], mode: &str) -> ModeSummary {
    let mut d: Vec<f64> = reports
        .iter()
        .filter(|r| r.mode == mode)
        .map(|r| r.decisions_per_sec)
        .collect();
    let min = d.iter().copied().fold(f64::INFINITY, f64::min);
    let max = d.iter().copied().fold(0.0, f64::max);
    ModeSummary {
        runs: d.len(),
        median_decisions_per_sec: median(&mut d),
        min_decisions_per_sec: min,
        max_decisions_per_sec: max,
    }
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cfgs = configs(&args)?;
    let mut reports: Vec<BenchReport> = Vec::new();
    let total = cfgs.len() * args.repeat;
    for rep in 0..args.repeat {
        for cfg in &cfgs {
            let label = format!("[{}/{}] {}", reports.len() + 1, total, cfg.mode);
            eprintln!(
                "{label}: {} clients, {:.1} s ...",
                cfg.clients,
                cfg.duration.as_secs_f64()
            );
            let mut progress = |p: bench::Progress| {
                eprintln!(
                    "{label}: {:5.1} s  {:>14} transmitted",
                    p.elapsed_s, p.transmitted
                );
            };
            let report = bench::run(cfg, &mut progress)
                .with_context(|| format!("{} run {}", cfg.mode, rep + 1))?;
            reports.push(report);
        }
    }
    let modes: Vec<String> = cfgs.iter().map(|c| c.mode.to_string()).collect();
    let summary: BTreeMap<String, ModeSummary> = modes
        .iter()
        .map(|m| (m.clone(), summarize(&reports, m)))
        .collect();
    let first = &modes[0];
    let ratios: BTreeMap<String, f64> = modes
        .iter()
        .skip(1)
        .map(|m| {
            (
                format!("{first}_over_{m}"),
                summary[first].median_decisions_per_sec
                    / summary[m].median_decisions_per_sec.max(1e-9),
            )
        })
        .collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = BenchJson {
            schema_version: crate::SCHEMA_VERSION,
            command: "bench",
            modes: modes.clone(),
            repeat: args.repeat,
            summary,
            ratios,
            runs: &reports,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else if let [r] = reports.as_slice() {
        print_report(&mut out, r)?;
    } else {
        for r in &reports {
            print_report(&mut out, r)?;
            writeln!(out)?;
        }
        writeln!(out, "summary ({} runs per mode, interleaved):", args.repeat)?;
        writeln!(
            out,
            "  {:<6} {:>14} {:>14} {:>14}",
            "mode", "median dec/s", "min", "max"
        )?;
        for m in &modes {
            let s = &summary[m];
            writeln!(
                out,
                "  {:<6} {:>14} {:>14} {:>14}",
                m,
                mega(s.median_decisions_per_sec),
                mega(s.min_decisions_per_sec),
                mega(s.max_decisions_per_sec)
            )?;
        }
        for (name, ratio) in &ratios {
            writeln!(out, "  ratio {name} (medians, same run): {ratio:.2}x")?;
        }
    }
    let lost = reports
        .iter()
        .any(|r| r.submitted != r.transmitted + r.dropped + r.in_flight || r.in_flight != 0);
    if lost {
        eprintln!("pspat: accounting check failed: submitted != transmitted + dropped, or packets left in flight");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn mega(x: f64) -> String {
    format!("{:.2} M", x / 1e6)
}

/// The readable table of one run.
pub fn print_report(out: &mut impl Write, r: &BenchReport) -> std::io::Result<()> {
    let link = r
        .rate_bps
        .map_or("unlimited".to_string(), |b| human_rate(b as f64));
    writeln!(
        out,
        "mode {}, alg {}, {} clients, tx {} (dispatchers {}), {} B packets (lmax {}), link {}, {:.2} s",
        r.mode, r.alg, r.clients, r.tx_mode, r.dispatchers, r.pkt_len, r.lmax, link, r.duration_s
    )?;
    if let (Some(d), Some(m)) = (r.descriptors_per_client, r.mailbox_entries) {
        writeln!(out, "per client: {d} descriptors, {m} mailbox slots")?;
    }
    writeln!(out, "pinning: {}", r.pinning)?;
    writeln!(
        out,
        "decisions/s: {}   throughput {} (measured window only)",
        mega(r.decisions_per_sec),
        human_rate(r.throughput_bps)
    )?;
    writeln!(
        out,
        "packets: submitted {}, transmitted {}, dropped {}, in flight {}",
        r.submitted, r.transmitted, r.dropped, r.in_flight
    )?;
    for (reason, n) in r.dropped_by_reason.iter().filter(|(_, n)| **n > 0) {
        writeln!(out, "  dropped ({reason}): {n}")?;
    }
    if let Some(a) = &r.arbiter {
        writeln!(
            out,
            "arbiter: {} rounds, mean round {:.0} ns, {} sleeps",
            a.rounds, a.mean_round_ns, a.sleeps
        )?;
    }
    let shown = r.per_client.len().min(16);
    writeln!(
        out,
        "  {:>5} {:>6} {:>14} {:>12} {:>8} {:>9}",
        "client", "weight", "transmitted", "rate", "share", "expected"
    )?;
    for c in &r.per_client[..shown] {
        writeln!(
            out,
            "  {:>5} {:>6} {:>14} {:>12} {:>7.2}% {:>8.2}%",
            c.id,
            c.weight,
            c.transmitted,
            human_rate(c.rate_bps),
            100.0 * c.share,
            100.0 * c.expected_share
        )?;
    }
    if r.per_client.len() > shown {
        writeln!(
            out,
            "  ... {} more clients (see --json)",
            r.per_client.len() - shown
        )?;
    }
    Ok(())
}
