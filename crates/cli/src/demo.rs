//! `pspat demo`: the default job. Weighted greedy clients and one
//! latency-sensitive victim share an emulated 10 Gbit/s link through the full
//! threaded runtime (arbiter, client mailboxes, DRR, leaky bucket).
//!
//! The scenario follows the PSPAT journal paper §6.6: the victim sends 4 kpps
//! of 1500-byte packets with a weight 50 times the smallest; the greedy
//! clients overload the link, so their shares must follow their weights while
//! the victim keeps a low latency.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use pspat_bench::{self as bench, BenchConfig, Mode, VictimConfig};

use crate::units::{self, human_rate, parse_weights};
use crate::usage;

/// Flags of `pspat demo`; every one has a default.
#[derive(clap::Args, Debug)]
#[command(after_help = concat!(pspat_cli::units_help!(), "\n\nExit codes: 0 success; 1 the run failed; 2 usage or configuration error (nothing started)."))]
pub struct Args {
    /// Length of the run: a number with ns, us, ms or s (bare = seconds), above 0 and at most 3600s.
    #[arg(long, default_value = "10s", value_parser = units::duration_arg, allow_hyphen_values = true)]
    duration: Duration,
    #[command(flatten)]
    scheduler: crate::sched_config::SchedulerFlags,
    /// Emulated link rate in bit/s: a number with K, M, G or T (e.g. 1M, 1Mbit/s, 10G; bare = bit/s).
    #[arg(long, default_value = "10G", value_parser = units::rate_arg, allow_hyphen_values = true)]
    rate: u64,
    /// Weights of the greedy clients, comma separated, each 1..=65536 (one client per weight).
    #[arg(long, default_value = "1,2,4,8", allow_hyphen_values = true)]
    weights: String,
    /// Packet length of every client in bytes, 64..=65535.
    #[arg(
        long = "pkt-len",
        default_value_t = 1500,
        allow_negative_numbers = true
    )]
    pkt_len: u32,
    /// Weight of the latency-sensitive victim, 1..=65536.
    #[arg(
        long = "victim-weight",
        default_value_t = 50,
        allow_negative_numbers = true
    )]
    victim_weight: u32,
    /// Packets per second the victim sends, 1..=1000000.
    #[arg(
        long = "victim-pps",
        default_value_t = 4000,
        allow_negative_numbers = true
    )]
    victim_pps: u64,
    /// Where the packets come from: `auto` (real UDP packets through
    /// `pspat shape` in a lab of network namespaces when the process may
    /// build one, as root; the emulated runtime otherwise), `lab` or
    /// `emulated`.
    #[arg(long, value_enum, default_value_t = crate::demo_lab::Traffic::Auto)]
    traffic: crate::demo_lab::Traffic,
    /// The shaped rate of the lab demo (real traffic), bit/s (e.g. 100M), in the range of `pspat shape --rate`;
    /// checked in every --traffic mode.
    #[arg(long, default_value = "100M", value_parser = crate::shape::shape_rate_arg, allow_hyphen_values = true)]
    lab_rate: u64,
    /// What shutdown does with packets still queued after the run: drain or drain:DEADLINE (send at the link rate for at most DEADLINE, a duration, default 5s, at most 3600s; then drop the rest) or discard (drop them at once). Dropped packets are counted with reason "shutdown"; nothing sent after the run counts in the report.
    #[arg(long, default_value = "drain:5s", value_parser = crate::bench::shutdown_arg, allow_hyphen_values = true)]
    shutdown: pspat_bench::ShutdownPolicy,
    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            duration: Duration::from_secs(10),
            scheduler: Default::default(),
            rate: 10_000_000_000,
            weights: "1,2,4,8".into(),
            pkt_len: 1500,
            victim_weight: 50,
            victim_pps: 4000,
            traffic: crate::demo_lab::Traffic::Auto,
            lab_rate: 100_000_000,
            shutdown: pspat_bench::ShutdownPolicy::default(),
            json: false,
        }
    }
}

fn config(args: &Args) -> anyhow::Result<BenchConfig> {
    let sched = args.scheduler.config()?;
    let rate = args.rate;
    crate::units::check_rate("--rate", rate).map_err(usage)?;
    let weights = parse_weights("--weights", &args.weights).map_err(usage)?;
    if weights.len() > 999 {
        return Err(usage(format!(
            "--weights: at most 999 greedy clients, got {}",
            weights.len()
        )));
    }
    units::check_duration("--duration", args.duration, units::MEASURED_RUN).map_err(usage)?;
    if !(64..=65_535).contains(&args.pkt_len) {
        return Err(usage(format!(
            "--pkt-len must be in 64..=65535 bytes, got {}",
            args.pkt_len
        )));
    }
    if !(1..=pspat_sched::MAX_WEIGHT).contains(&args.victim_weight) {
        return Err(usage(format!(
            "--victim-weight must be in 1..={}, got {}",
            pspat_sched::MAX_WEIGHT,
            args.victim_weight
        )));
    }
    if !(1..=1_000_000).contains(&args.victim_pps) {
        return Err(usage(format!(
            "--victim-pps must be in 1..=1000000, got {}",
            args.victim_pps
        )));
    }
    let mut cfg = BenchConfig::new(Mode::Pspat, weights.len());
    cfg.sched = sched;
    cfg.weights = weights;
    cfg.rate_bps = Some(rate);
    cfg.pkt_len = args.pkt_len;
    cfg.lmax = BenchConfig::default_lmax(args.pkt_len);
    cfg.duration = args.duration;
    cfg.shutdown = args.shutdown;
    cfg.victim = Some(VictimConfig {
        weight: args.victim_weight,
        pps: args.victim_pps,
        pkt_len: args.pkt_len,
    });
    crate::bench::check_config(&cfg, &args.scheduler)?;
    Ok(cfg)
}

/// `pspat demo --json` (docs/JSON.md).
#[derive(serde::Serialize)]
struct DemoJson<'a> {
    schema_version: u32,
    command: &'static str,
    traffic: &'static str,
    run: &'a bench::BenchReport,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cfg = config(&args)?;
    let lab = crate::demo_lab::LabDemoArgs {
        traffic: args.traffic,
        rate_bps: args.lab_rate,
        weights: &cfg.weights,
        victim_weight: args.victim_weight,
        victim_pps: args.victim_pps,
        pkt_len: args.pkt_len,
        duration: args.duration,
        alg: &cfg.sched.alg.to_string(),
        sched_file: args.scheduler.file(),
        json: args.json,
    };
    if let Some(code) = crate::demo_lab::try_lab(&lab)? {
        return Ok(code);
    }
    if !args.json {
        eprintln!(
            "pspat demo: {} greedy clients (weights {}) + 1 victim ({} pps, weight {}) on an emulated {} link, {}, {:.1} s",
            cfg.weights.len(),
            args.weights,
            args.victim_pps,
            args.victim_weight,
            human_rate(args.rate as f64),
            cfg.sched.alg,
            args.duration.as_secs_f64()
        );
    }
    let mut progress = |p: bench::Progress| {
        eprintln!(
            "  {:5.1} s  {:>12} packets transmitted",
            p.elapsed_s, p.transmitted
        );
    };
    let report = bench::run(&cfg, &mut progress).context("demo run")?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = DemoJson {
            schema_version: crate::SCHEMA_VERSION,
            command: "demo",
            traffic: "emulated",
            run: &report,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(out, "pinning: {}", report.pinning)?;
        writeln!(
            out,
            "decisions/s: {:.3} M   transmitted {} of a {} link",
            report.decisions_per_sec / 1e6,
            // Inside the measured window only (packets drained at shutdown
            // are not counted).
            human_rate(report.throughput_bps),
            human_rate(args.rate as f64)
        )?;
        // Expected shares (`ClientReport::expected_share`): the victim takes
        // what it sends; the greedy clients split the rest by weight.
        let victim_id = report.victim.as_ref().map(|v| v.id);
        let victim_role = format!("victim (sends {} pps)", args.victim_pps);
        writeln!(
            out,
            "  {:>6} {:>6} {:>14} {:>8} {:>9}  role",
            "client", "weight", "rate", "share", "expected"
        )?;
        for c in &report.per_client {
            let role = if Some(c.id) == victim_id {
                victim_role.as_str()
            } else {
                "greedy"
            };
            writeln!(
                out,
                "  {:>6} {:>6} {:>14} {:>7.2}% {:>8.2}%  {}",
                c.id,
                c.weight,
                human_rate(c.rate_bps),
                100.0 * c.share,
                100.0 * c.expected_share,
                role
            )?;
        }
        if let Some(v) = &report.victim {
            writeln!(
                out,
                "victim latency (submit to transmit, {} samples): min {:.1} us, p10 {:.1}, p50 {:.1}, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1} us",
                v.samples,
                v.min_ns as f64 / 1e3,
                v.p10_ns as f64 / 1e3,
                v.p50_ns as f64 / 1e3,
                v.p90_ns as f64 / 1e3,
                v.p99_ns as f64 / 1e3,
                v.p999_ns as f64 / 1e3,
                v.max_ns as f64 / 1e3
            )?;
        }
        writeln!(
            out,
            "accounting: submitted {} = transmitted {} + dropped {} + in flight {}",
            report.submitted, report.transmitted, report.dropped, report.in_flight
        )?;
    }
    if report.submitted != report.transmitted + report.dropped + report.in_flight
        || report.in_flight != 0
    {
        eprintln!("pspat: accounting check failed");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
