//! `pspat demo` on real traffic: when the process may build network
//! namespaces (root, `ip` present), the demo builds the lab of `pspat lab`
//! (sender, shaper and receiver namespaces joined by veth pairs), sends the
//! demo's weighted greedy flows and its paced victim as UDP through
//! `pspat shape`, measures at the receiver and removes the lab. Otherwise
//! (or with `--traffic emulated`) it says why in one line and the caller
//! runs the emulated demo.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use pspat_lab::compare::{demo, DemoConfig, DemoReport};

/// Where the demo's packets come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Traffic {
    /// Real packets in the lab when namespaces are available, else emulated.
    #[default]
    Auto,
    /// Real packets in the lab; an error when namespaces are unavailable.
    Lab,
    /// The runtime alone, clients submitting to a null backend.
    Emulated,
}

/// The demo's knobs the lab run uses.
pub struct LabDemoArgs<'a> {
    pub traffic: Traffic,
    pub rate_bps: u64,
    pub weights: &'a [u32],
    pub victim_weight: u32,
    pub victim_pps: u64,
    pub pkt_len: u32,
    pub duration: Duration,
    pub alg: &'a str,
    /// A `--sched-config` file (the lab demo takes `--alg` only).
    pub sched_file: Option<&'a std::path::Path>,
    pub json: bool,
}

/// Runs the lab demo when it should and can; `Ok(None)` means "run the
/// emulated demo" (the reason was printed on stderr).
pub fn try_lab(args: &LabDemoArgs) -> anyhow::Result<Option<ExitCode>> {
    if args.traffic == Traffic::Emulated {
        return Ok(None);
    }
    if let Some(file) = args.sched_file {
        if args.traffic == Traffic::Lab {
            return Err(pspat_cli::usage(
                "--traffic lab takes --alg, not --sched-config".to_string(),
            ));
        }
        eprintln!(
            "pspat demo: --sched-config {} runs the emulated demo (the lab demo takes --alg)",
            file.display()
        );
        return Ok(None);
    }
    if let Some(why) = pspat_io::netns::unavailable() {
        if args.traffic == Traffic::Lab {
            return Err(pspat_cli::usage(format!("--traffic lab: {why}")));
        }
        eprintln!(
            "pspat demo: real traffic needs network namespaces ({why}); running the emulated demo"
        );
        return Ok(None);
    }
    let exe = std::env::current_exe()?;
    // Ctrl-C stops the run; the lab's guard removes what it built.
    let _ = ctrlc::set_handler(pspat_lab::stop::request);
    if !args.json {
        eprintln!(
            "pspat demo: real traffic in a lab of namespaces: {} greedy UDP flows (weights {}) + 1 victim ({} pps, weight {}), {}-byte packets, through `pspat shape` at {}, {}, {:.1} s",
            args.weights.len(),
            args.weights.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            args.victim_pps,
            args.victim_weight,
            args.pkt_len,
            pspat_cli::units::human_rate(args.rate_bps as f64),
            args.alg,
            args.duration.as_secs_f64()
        );
    }
    let report = demo(&DemoConfig {
        exe,
        rate_bps: args.rate_bps,
        weights: args.weights.to_vec(),
        victim_weight: args.victim_weight,
        victim_pps: args.victim_pps,
        size: args.pkt_len as usize,
        duration: args.duration,
        alg: args.alg.to_owned(),
    })
    .map_err(|e| anyhow::anyhow!("pspat demo (lab): {e}"))?;
    print(&report, args.json)?;
    Ok(Some(if report.error.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }))
}

#[derive(serde::Serialize)]
struct LabJson<'a> {
    schema_version: u32,
    command: &'static str,
    traffic: &'static str,
    lab: &'a DemoReport,
}

fn print(r: &DemoReport, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(
            &mut out,
            &LabJson {
                schema_version: pspat_cli::SCHEMA_VERSION,
                command: "demo",
                traffic: "lab",
                lab: r,
            },
        )?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "traffic: lab (real UDP packets through pspat shape)")?;
    writeln!(out, "pinning: {}", r.pinning)?;
    writeln!(
        out,
        "shaped rate {}, sent {} packets, received {}",
        pspat_cli::units::human_rate(r.rate_bps as f64),
        r.sent,
        r.received
    )?;
    if let Some(d) = r.decisions_per_s {
        writeln!(
            out,
            "decisions/s: {:.0} (packets pspat shape forwarded per second)",
            d
        )?;
    }
    writeln!(
        out,
        "{:>6} {:>7} {:>8} {:>14} {:>9} {:>9}",
        "port", "weight", "kind", "rate", "share", "expected"
    )?;
    for f in &r.flows {
        let pct = |v: Option<f64>| v.map_or("-".to_owned(), |x| format!("{:.2}%", x * 100.0));
        writeln!(
            out,
            "{:>6} {:>7} {:>8} {:>14} {:>9} {:>9}",
            f.port,
            f.weight,
            if f.victim { "victim" } else { "greedy" },
            pspat_cli::units::human_rate(f.rate_bps),
            pct(f.share),
            pct(f.expected_share)
        )?;
    }
    let l = &r.victim_latency;
    writeln!(
        out,
        "victim one-way latency (µs): p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  ({} samples)",
        l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.samples
    )?;
    if let Some(a) = &r.victim_arrival_latency {
        writeln!(
            out,
            "  to its arrival at the receiver's socket: p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            a.p50_us, a.p90_us, a.p99_us, a.p999_us, a.max_us
        )?;
    }
    if let Some(e) = &r.error {
        writeln!(out, "incomplete: {e}")?;
    }
    Ok(())
}
