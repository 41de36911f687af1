//! `pspat wfi`: one ideal link, one algorithm, a workload, and the exact
//! fluid (GPS) reference; per flow the worst T-WFI, lag and B-WFI measured
//! against the algorithm's published bound. The measurement itself lives in
//! `pspat_eval::wfi`; this file parses, runs and prints.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use pspat_eval::wfi::{self, Scenario, TraceRow, Workload, WorkloadParams};
use pspat_sched::AlgKind;

use crate::usage;

const AFTER_HELP: &str = concat!(
    pspat_cli::units_help!(),
    "\n\n\
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
2 usage or configuration error.",
);

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
    #[arg(long, allow_negative_numbers = true)]
    pub flows: Option<u32>,
    /// Comma-separated weights, one per flow, each 1..=65536.
    #[arg(long, allow_hyphen_values = true)]
    pub weights: Option<String>,
    /// Link rate in bit/s: a number with K, M, G or T (e.g. 1M, 1Mbit/s, 10G; bare = bit/s). Default 10G.
    #[arg(long, value_parser = crate::units::rate_arg, allow_hyphen_values = true)]
    pub rate: Option<u64>,
    /// Packet length in bytes, 1..=65535. Default 1500.
    #[arg(long, allow_negative_numbers = true)]
    pub pkt_len: Option<u32>,
    /// Keep only the first N arrivals (1..=10000000); without --duration, the
    /// workload is generated for about the link's time for N packets.
    #[arg(long, allow_negative_numbers = true)]
    pub packets: Option<u64>,
    /// Length of the workload: a number with ns, us, ms or s (bare = seconds), at most 10s. Default 20ms.
    #[arg(long, value_parser = crate::units::duration_arg, allow_hyphen_values = true)]
    pub duration: Option<std::time::Duration>,
    /// Seed of the workload's random generators.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write one CSV row per packet to FILE
    /// (flow,weight,len,arrival_ns,departure_ns,fluid_finish_ns).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
}

/// Checks a rate against the simulator's range (the core's).
fn check_rate(bps: u64) -> anyhow::Result<u64> {
    crate::units::check_rate("--rate", bps).map_err(usage)
}

/// Checks a duration against the simulator's range; in ns.
fn check_duration(d: std::time::Duration) -> anyhow::Result<u64> {
    let range =
        std::time::Duration::from_nanos(1)..=std::time::Duration::from_nanos(wfi::MAX_DURATION_NS);
    crate::units::check_duration("--duration", d, range).map_err(usage)?;
    // In range: at most 10 s.
    Ok(d.as_nanos() as u64)
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
    if let Some(r) = args.rate {
        params.rate_bps = check_rate(r)?;
    }
    if let Some(l) = args.pkt_len {
        params.pkt_len = l;
    }
    if let Some(d) = args.duration {
        params.duration_ns = check_duration(d)?;
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
    let workload = Workload::from_name(&name, weights.len() as u32, weights)
        .map_err(|e| usage(format!("--workload: {e}")))?;
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
    let alg = AlgKind::parse(&args.alg).map_err(|e| usage(format!("--alg: {e}")))?;
    let scenario = build_scenario(&args)?;
    // The trace file is created before the run: a path that cannot be
    // written is a usage error, found before any work.
    let trace = match &args.trace {
        Some(path) => Some((
            path,
            std::fs::File::create(path)
                .map_err(|e| usage(format!("--trace {}: {e}", path.display())))?,
        )),
        None => None,
    };
    let result = wfi::run(alg, &scenario)?;
    let report = &result.report;
    if let Some((path, file)) = trace {
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
        use std::time::Duration;
        assert_eq!(check_rate(10_000_000_000).unwrap(), 10_000_000_000);
        assert!(check_rate(1).is_err());
        assert!(check_rate(wfi::MAX_RATE_BPS + 1).is_err());
        assert_eq!(
            check_duration(Duration::from_millis(20)).unwrap(),
            20_000_000
        );
        assert_eq!(check_duration(Duration::from_nanos(7)).unwrap(), 7);
        assert!(check_duration(Duration::ZERO).is_err());
        assert!(check_duration(Duration::from_secs(11)).is_err());
        assert!(parse_weights("1,,2").is_err());
        assert!(parse_weights("").is_err());
        assert_eq!(parse_weights("1, 2,3").unwrap(), [1, 2, 3]);
    }
}
