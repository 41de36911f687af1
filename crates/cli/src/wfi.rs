//! `pspat wfi`: one ideal link, one algorithm, a workload, and the exact
//! fluid (GPS) reference; per flow the worst T-WFI, lag and B-WFI measured
//! against the algorithm's published bound. The measurement itself lives in
//! `pspat_sched::wfi`; this file parses, runs and prints.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use pspat_sched::wfi::{self, Scenario, TraceRow, Workload, WorkloadParams};
use pspat_sched::AlgKind;

use crate::usage;

const AFTER_HELP: &str = "\
Workloads:
  greedy  every flow permanently backlogged (burst at t=0, then exactly its share)
  onoff   bursts of 1..=32 packets at line rate, random silences, 95% of each share
  victim  flow 0 (weight 50 unless --weights) sends one packet every ~250 us among greedy flows
  paper   the PSPAT paper's Section 5.2 example. FIXED parameters: 10 Gbit/s, 1500-byte packets,
          20 ms, weights summing to 200 (flow 0: 100, i.e. phi=0.5; flow 1: 1, i.e. phi=0.005;
          the rest split 99); --flows 25 (default) or 100. Only --seed may be changed.

T-WFI is the Bennett-Zhang form max(d - a - Q_k(a)/(phi_k*B)) compared with the bound;
lag is max(d - d_fluid) against the exact GPS reference; B-WFI is in bytes.
Bounds: qfq/qfq+ 6*L_k/(phi_k*B)+(L-L_k)/B; drr (1/phi_min+1/phi_k+N-1)*L/B;
wf2q+ L_k/(phi_k*B)+L/B; fifo/prio none.

Exit codes: 0 every flow within its bound; 1 some flow exceeded its bound (or the run failed);
2 usage or configuration error.";

/// Flags of `pspat wfi`.
#[derive(clap::Args, Default)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Algorithm (fifo, prio, drr, and any other registered name).
    #[arg(long, default_value = "drr")]
    pub alg: String,
    /// greedy, onoff, victim or paper.
    #[arg(long, default_value = "greedy")]
    pub workload: String,
    /// Number of flows (default 25 for paper, else the number of --weights, else 8).
    #[arg(long)]
    pub flows: Option<u32>,
    /// Comma-separated weights, one per flow, each 1..=65536.
    #[arg(long)]
    pub weights: Option<String>,
    /// Link rate in bit/s; suffixes K, M, G, T (powers of 1000), e.g. 10G. Default 10G.
    #[arg(long)]
    pub rate: Option<String>,
    /// Packet length in bytes, 1..=65535. Default 1500.
    #[arg(long)]
    pub pkt_len: Option<u32>,
    /// Keep only the first N arrivals (1..=10000000); without --duration, the
    /// workload is generated for about the link's time for N packets.
    #[arg(long)]
    pub packets: Option<u64>,
    /// Length of the workload: a number with ns, us, ms or s (bare = ns). Default 20ms.
    #[arg(long)]
    pub duration: Option<String>,
    /// Seed of the workload's random generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write one CSV row per packet to FILE
    /// (flow,weight,len,arrival_ns,departure_ns,fluid_finish_ns).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
}

/// Parses `10G`, `2.5Gbit/s`, `100M`, `1000000` into bit/s (the common
/// syntax of `crate::units`), within the simulator's range.
fn parse_rate(text: &str) -> anyhow::Result<u64> {
    let bps = crate::units::parse_rate(text).map_err(|e| usage(format!("--rate: {e}")))?;
    let min = pspat_sched::link::MIN_RATE_BPS;
    if !(min..=wfi::MAX_RATE_BPS).contains(&bps) {
        return Err(usage(format!(
            "--rate {text:?} is out of range (allowed: {min}..={} bit/s)",
            wfi::MAX_RATE_BPS
        )));
    }
    Ok(bps)
}

/// Parses `20ms`, `500us`, `1s`, `1000ns` or a bare number of ns.
fn parse_duration(text: &str) -> anyhow::Result<u64> {
    let t = text.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| {
        usage(format!(
            "--duration {text:?}: not a duration (e.g. 20ms, 500us, 1s)"
        ))
    })?;
    let ns = v * mult;
    if !(ns.is_finite() && (1.0..=wfi::MAX_DURATION_NS as f64).contains(&ns)) {
        return Err(usage(format!(
            "--duration {text:?} is out of range (allowed: 1ns..=10s)"
        )));
    }
    Ok(ns.round() as u64)
}

fn parse_weights(text: &str) -> anyhow::Result<Vec<u32>> {
    crate::units::parse_weights("--weights", text).map_err(usage)
}

fn build_scenario(args: &Args) -> anyhow::Result<Scenario> {
    let name = args.workload.trim().to_ascii_lowercase();
    let mut params = WorkloadParams {
        seed: args.seed,
        ..WorkloadParams::default()
    };
    if name == "paper" {
        for (given, flag) in [
            (args.weights.is_some(), "--weights"),
            (args.rate.is_some(), "--rate"),
            (args.pkt_len.is_some(), "--pkt-len"),
            (args.packets.is_some(), "--packets"),
            (args.duration.is_some(), "--duration"),
        ] {
            if given {
                return Err(usage(format!(
                    "{flag} cannot be set with --workload paper: the scenario fixes 10 Gbit/s, 1500 B, 20 ms and its weights"
                )));
            }
        }
        let workload = Workload::from_name("paper", args.flows.unwrap_or(25), Vec::new())?;
        return Ok(Scenario::generate(&workload, &params)?);
    }
    if let Some(r) = &args.rate {
        params.rate_bps = parse_rate(r)?;
    }
    if let Some(l) = args.pkt_len {
        params.pkt_len = l;
    }
    if let Some(d) = &args.duration {
        params.duration_ns = parse_duration(d)?;
    }
    params.max_packets = args.packets;
    if let (Some(n), None) = (args.packets, &args.duration) {
        // Generate for long enough to reach n packets (the link's time for
        // n packets, plus a quarter), then keep the first n.
        let tx = u128::from(params.pkt_len) * 8_000_000_000 / u128::from(params.rate_bps);
        let ns = (u128::from(n) * tx.max(1) * 5 / 4).max(1);
        params.duration_ns = u64::try_from(ns)
            .unwrap_or(u64::MAX)
            .clamp(1, wfi::MAX_DURATION_NS);
    }
    let weights = match (&args.weights, args.flows) {
        (Some(w), flows) => {
            let w = parse_weights(w)?;
            if let Some(n) = flows {
                if n as usize != w.len() {
                    return Err(usage(format!(
                        "--flows {n} does not match the {} weights given",
                        w.len()
                    )));
                }
            }
            w
        }
        (None, flows) => {
            let n = flows.unwrap_or(8);
            if !(1..=wfi::MAX_FLOWS as u32).contains(&n) {
                return Err(usage(format!(
                    "--flows {n} is out of range (allowed: 1..={})",
                    wfi::MAX_FLOWS
                )));
            }
            let mut w = vec![1; n as usize];
            if name == "victim" {
                w[0] = wfi::VICTIM_WEIGHT;
            }
            w
        }
    };
    let workload = Workload::from_name(&name, weights.len() as u32, weights)?;
    Ok(Scenario::generate(&workload, &params)?)
}

fn opt(v: Option<f64>, scale: f64, prec: usize) -> String {
    v.map_or("-".to_string(), |x| format!("{:.*}", prec, x / scale))
}

/// `pspat wfi --json` (docs/JSON.md).
#[derive(serde::Serialize)]
struct WfiJson {
    schema_version: u32,
    command: &'static str,
    seed: u64,
    #[serde(flatten)]
    report: serde_json::Map<String, serde_json::Value>,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let alg = AlgKind::parse(&args.alg)?;
    let scenario = build_scenario(&args)?;
    let result = wfi::run(alg, &scenario)?;
    let report = &result.report;
    if let Some(path) = &args.trace {
        let file = std::fs::File::create(path)
            .with_context(|| format!("creating trace file {}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        writeln!(out, "{}", TraceRow::CSV_HEADER)?;
        for row in &result.trace {
            writeln!(out, "{}", row.csv())?;
        }
        out.flush()
            .with_context(|| format!("writing trace file {}", path.display()))?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        // The report's own fields after `schema_version` and `command`
        // (its inner `schema_version` is the same number, given once).
        let mut fields = match serde_json::to_value(report)? {
            serde_json::Value::Object(map) => map,
            _ => anyhow::bail!("the WFI report did not serialize to an object"),
        };
        fields.remove("schema_version");
        let doc = WfiJson {
            schema_version: crate::SCHEMA_VERSION,
            command: "wfi",
            seed: args.seed,
            report: fields,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "wfi: alg {} workload {} rate {} bit/s, {} flows, {} packets, seed {}",
            report.alg, report.workload, report.rate_bps, report.flows, report.packets, args.seed
        )?;
        writeln!(
            out,
            "{:>5} {:>6} {:>8} {:>8} {:>12} {:>12} {:>12} {:>12} {:>7}",
            "flow",
            "weight",
            "phi",
            "packets",
            "T-WFI_us",
            "lag_us",
            "B-WFI_B",
            "bound_us",
            "within"
        )?;
        for f in &report.per_flow {
            writeln!(
                out,
                "{:>5} {:>6} {:>8.4} {:>8} {:>12} {:>12} {:>12.0} {:>12} {:>7}",
                f.flow,
                f.weight,
                f.phi,
                f.packets,
                opt(f.max_twfi_ns, 1e3, 3),
                opt(f.max_lag_ns, 1e3, 3),
                f.max_bwfi_bytes,
                opt(f.bound_twfi_ns, 1e3, 3),
                f.within_bound.map_or("-", |w| if w { "yes" } else { "NO" }),
            )?;
        }
        let bounded = report.per_flow.iter().any(|f| f.bound_twfi_ns.is_some());
        writeln!(
            out,
            "all within bound: {}",
            match (bounded, report.all_within_bound) {
                (false, _) => "no bound for this algorithm",
                (true, true) => "yes",
                (true, false) => "NO",
            }
        )?;
    }
    out.flush()?;
    if report.all_within_bound {
        Ok(ExitCode::SUCCESS)
    } else {
        let over: Vec<String> = report
            .per_flow
            .iter()
            .filter(|f| f.within_bound == Some(false))
            .map(|f| f.flow.to_string())
            .collect();
        eprintln!(
            "pspat: {} exceeded its T-WFI bound for flow(s) {}",
            report.alg,
            over.join(", ")
        );
        Ok(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse() {
        assert_eq!(parse_rate("10G").unwrap(), 10_000_000_000);
        assert_eq!(parse_rate("2.5Gbit/s").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("1000").unwrap(), 1_000);
        assert!(parse_rate("10X").is_err());
        assert!(parse_rate("1").is_err());
        assert_eq!(parse_duration("20ms").unwrap(), 20_000_000);
        assert_eq!(parse_duration("1.5us").unwrap(), 1_500);
        assert_eq!(parse_duration("7").unwrap(), 7);
        assert!(parse_duration("0s").is_err());
        assert!(parse_weights("1,,2").is_err());
        assert!(parse_weights("").is_err());
        assert_eq!(parse_weights("1, 2,3").unwrap(), [1, 2, 3]);
    }
}
