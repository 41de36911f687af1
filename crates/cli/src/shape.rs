//! `pspat shape --in IF --out IF`: pspat as a bump in the wire on real
//! packets (docs/SHAPE.md). Frames read from `--in` by AF_PACKET are
//! classified into flows, scheduled and rate-limited by the PSPAT runtime
//! and sent on `--out`; the reverse direction is forwarded unshaped. With
//! several `--out` interfaces (`--out IF1,IF2[:RATE],...`) the flows are
//! shared over them by weighted HRW on their rates, one arbiter each.
//!
//! Prints `shape: ready ...` on stderr once its rings are open, then one
//! progress line a second (rate and drops per flow); stops on SIGINT or
//! SIGTERM or after `--duration`, drains, and prints the final counters
//! (a table, or one JSON object with `--json`: docs/JSON.md).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat_bridge::{
    Bridge, BridgeConfig, BridgeError, Egress, IoBackend, Report, TxKind, Unparsed, XdpAttach,
};
use pspat_io::parse::FlowKeyKind;
use pspat_io::RxRing;

use crate::units::{self, human_rate, parse_weights};
use crate::usage;

/// Flags of `pspat shape`.
#[derive(clap::Args, Debug)]
#[command(after_help = concat!(pspat_cli::units_help!(), "\n\nNeeds root or CAP_NET_RAW. See docs/SHAPE.md.\n\nExit codes: 0 success; 1 the run failed (an interface went away, an accounting check failed); 2 usage or configuration error (nothing started)."))]
pub struct Args {
    /// Interface to read and shape frames from (at most 15 bytes).
    #[arg(long = "in", value_name = "IF", allow_hyphen_values = true)]
    input: String,
    /// Interface(s) to send shaped frames on (each at most 15 bytes, none the same as --in): several,
    /// comma separated, share the flows by weighted HRW on their rates (IF:RATE gives one its own rate).
    #[arg(long = "out", value_name = "IF[:RATE],...", allow_hyphen_values = true)]
    output: String,
    /// Emulated link rate in bit/s, 1000 bit/s to 10^12 (e.g. 100M, 1Gbit/s), of every --out interface
    /// without its own; unlimited if not given.
    #[arg(long, value_parser = units::rate_arg, allow_hyphen_values = true)]
    rate: Option<u64>,
    #[command(flatten)]
    scheduler: crate::sched_config::SchedulerFlags,
    /// Flows to classify into, 1..=65536 (default: the number of --weights, else 1).
    #[arg(long, allow_negative_numbers = true, value_parser = ranged::<1, 65536>)]
    flows: Option<i64>,
    /// Header fields naming a flow: 5-tuple, src-ip, dst-ip (hashed into --flows) or dst-port (port % flows).
    #[arg(long = "flow-key", default_value = "5-tuple", value_parser = flow_key_arg)]
    flow_key: FlowKeyKind,
    /// Weights of the flows, comma separated, each 1..=65536, one per flow (default: all 1).
    #[arg(long, allow_hyphen_values = true)]
    weights: Option<String>,
    /// Dispatcher threads, 0..=64 (0: the arbiter sends itself).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = ranged::<0, 64>)]
    dispatchers: i64,
    /// Stop after this long (a number with ns, us, ms or s; bare = seconds), above 0 and at most 10^6 s;
    /// runs until SIGINT or SIGTERM if not given.
    #[arg(long, value_parser = units::duration_arg, allow_hyphen_values = true)]
    duration: Option<Duration>,
    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// RX threads on --in, 1..=64 (more than one share the traffic by PACKET_FANOUT).
    #[arg(
        long = "rx-threads",
        default_value_t = 1,
        allow_negative_numbers = true, value_parser = ranged::<1, 64>
    )]
    rx_threads: i64,
    /// How dispatchers send: sendmmsg (from the frame pool) or ring (a TPACKET_V2 TX ring).
    #[arg(long, default_value = "sendmmsg", value_parser = tx_arg)]
    tx: TxKind,
    /// Sockets of the shaped direction: af-packet or xdp (AF_XDP on queue 0 of --in and of each
    /// --out: one RX thread, at most one dispatcher; needs a build with --features xdp).
    #[arg(long, default_value = "af-packet", value_parser = io_arg)]
    io: IoChoice,
    /// How the AF_XDP program attaches to --in with --io xdp: auto (driver mode where the driver offers
    /// it, else skb; default), driver or skb.
    #[arg(long = "xdp-mode", value_parser = xdp_mode_arg)]
    xdp_mode: Option<XdpAttach>,
    /// RX ring of the receiving sockets: v2 (TPACKET_V2, each frame handed over as soon as it
    /// arrives) or v3 (TPACKET_V3 blocks, handed over when full or after 1 ms: a frame may wait that
    /// long at low rates). Either way an idle RX thread sleeps in poll(2).
    #[arg(long = "rx-ring", default_value = "v2", value_parser = rx_ring_arg)]
    rx_ring: RxRing,
    /// Frames that do not parse (not IP, malformed): forward (in flow 0) or drop (counted by reason).
    #[arg(long, default_value = "forward", value_parser = unparsed_arg)]
    unparsed: Unparsed,
    /// Packets one flow may hold in the bridge (per RX thread), 1..=65536; above it, dropped as flow_limit.
    #[arg(
        long = "queue-limit",
        default_value_t = i64::from(pspat_bridge::DEFAULT_QUEUE_LIMIT),
        allow_negative_numbers = true, value_parser = ranged::<1, 65536>
    )]
    queue_limit: i64,
    /// Frames per RX thread, a multiple of 64 in 64..=65536.
    #[arg(long, default_value_t = 4096, allow_negative_numbers = true, value_parser = ranged::<64, 65536>)]
    descriptors: i64,
    /// How long stopping may drain queued frames at the link rate (then they are dropped as shutdown),
    /// at most 3600s.
    #[arg(long, default_value = "1s", value_parser = units::duration_arg, allow_hyphen_values = true)]
    drain: Duration,
    /// Do not forward the reverse direction (--out to --in).
    #[arg(long = "no-reverse")]
    no_reverse: bool,
    /// Let sent frames pass the kernel's qdisc (default: bypass it).
    #[arg(long = "no-qdisc-bypass")]
    no_qdisc_bypass: bool,
    /// Leave GRO and LRO as they are on the interfaces read (default: off
    /// while shaping, back on at exit: a TCP stream otherwise arrives as
    /// aggregates above the MTU, dropped as too_long).
    #[arg(long = "keep-offloads")]
    keep_offloads: bool,
    /// CPU(s) to pin the arbiters to, comma separated (the arbiter of the k-th --out interface on the
    /// (k mod n)-th).
    #[arg(long = "arbiter-cpu", allow_hyphen_values = true)]
    arbiter_cpu: Option<String>,
    /// CPU to pin the dispatchers to.
    #[arg(long = "dispatcher-cpu", allow_negative_numbers = true, value_parser = ranged::<0, 4095>)]
    dispatcher_cpu: Option<i64>,
    /// CPUs to pin the RX threads to, comma separated (thread k on the (k mod n)-th).
    #[arg(long = "rx-cpus", allow_hyphen_values = true)]
    rx_cpus: Option<String>,
}

/// A whole number in `LO..=HI`, for clap: the error names the range.
fn ranged<const LO: i64, const HI: i64>(text: &str) -> Result<i64, String> {
    match text.trim().parse::<i64>() {
        Ok(v) if (LO..=HI).contains(&v) => Ok(v),
        _ => Err(format!(
            "{} is not a whole number in {LO}..={HI}",
            units::quote(text)
        )),
    }
}

fn flow_key_arg(text: &str) -> Result<FlowKeyKind, String> {
    text.parse().map_err(|_| {
        format!(
            "{} is not a flow key (allowed: 5-tuple, src-ip, dst-ip, dst-port)",
            units::quote(text)
        )
    })
}

fn tx_arg(text: &str) -> Result<TxKind, String> {
    text.parse().map_err(|_| {
        format!(
            "{} is not a sender (allowed: sendmmsg, ring)",
            units::quote(text)
        )
    })
}

/// `--io`: which sockets carry the shaped direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IoChoice {
    AfPacket,
    Xdp,
}

fn io_arg(text: &str) -> Result<IoChoice, String> {
    match text {
        "af-packet" => Ok(IoChoice::AfPacket),
        "xdp" => Ok(IoChoice::Xdp),
        _ => Err(format!(
            "{} is not an I/O back end (allowed: af-packet, xdp)",
            units::quote(text)
        )),
    }
}

fn xdp_mode_arg(text: &str) -> Result<XdpAttach, String> {
    text.parse().map_err(|_| {
        format!(
            "{} is not an XDP attach mode (allowed: auto, driver, skb)",
            units::quote(text)
        )
    })
}

/// `--io` and `--xdp-mode` as the bridge's back end, checked against the
/// build and the thread counts.
fn io_backend(args: &Args, cfg: &BridgeConfig) -> anyhow::Result<IoBackend> {
    match args.io {
        IoChoice::AfPacket => {
            if args.xdp_mode.is_some() {
                return Err(usage("--xdp-mode applies to --io xdp only"));
            }
            Ok(IoBackend::AfPacket)
        }
        IoChoice::Xdp => {
            if !pspat_bridge::XDP_BUILT {
                return Err(usage(
                    "--io xdp: this pspat was built without AF_XDP; rebuild it with \
                     `cargo build --release -p pspat-cli --features xdp`",
                ));
            }
            if cfg.rx_threads != 1 {
                return Err(usage(format!(
                    "--io xdp reads queue 0 of --in with one socket: --rx-threads must be 1, got {}",
                    cfg.rx_threads
                )));
            }
            if cfg.dispatchers > 1 {
                return Err(usage(format!(
                    "--io xdp sends on queue 0 of each --out with one socket: --dispatchers must be \
                     0 or 1, got {}",
                    cfg.dispatchers
                )));
            }
            Ok(IoBackend::Xdp {
                attach: args.xdp_mode.unwrap_or_default(),
            })
        }
    }
}

fn rx_ring_arg(text: &str) -> Result<RxRing, String> {
    text.parse()
        .map_err(|_| format!("{} is not an RX ring (allowed: v2, v3)", units::quote(text)))
}

fn unparsed_arg(text: &str) -> Result<Unparsed, String> {
    text.parse().map_err(|_| {
        format!(
            "{} is not a policy (allowed: forward, drop)",
            units::quote(text)
        )
    })
}

fn in_range(flag: &str, v: i64, lo: i64, hi: i64) -> anyhow::Result<i64> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(usage(format!("{flag} must be in {lo}..={hi}, got {v}")))
    }
}

fn cpu(flag: &str, v: Option<i64>) -> anyhow::Result<Option<usize>> {
    let max = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64 - 1;
    v.map(|c| in_range(flag, c, 0, max).map(|c| c as usize))
        .transpose()
}

fn check_interface(flag: &str, name: &str) -> anyhow::Result<()> {
    let max = pspat_io::error::MAX_INTERFACE_NAME;
    if name.is_empty() || name.len() > max {
        return Err(usage(format!(
            "{flag}: interface name {} must be 1..={max} bytes, got {}",
            units::quote(name),
            name.len()
        )));
    }
    Ok(())
}

/// A comma-separated list of CPU numbers for `flag`.
fn cpu_list(flag: &str, list: &str) -> anyhow::Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for item in list.split(',') {
        let v: i64 = item.trim().parse().map_err(|_| {
            usage(format!(
                "{flag}: {} is not a CPU number",
                units::quote(item.trim())
            ))
        })?;
        cpus.push(cpu(flag, Some(v))?.unwrap_or(0));
    }
    Ok(cpus)
}

fn check_rate(flag: &str, rate: u64) -> anyhow::Result<u64> {
    units::check_rate(flag, rate).map_err(usage)
}

/// A value parser for a rate another command hands to `pspat shape
/// --rate` (`pspat demo --lab-rate`): refused when parsed, in the same
/// range, rather than by the child once the lab is built.
pub fn shape_rate_arg(text: &str) -> Result<u64, String> {
    units::rate_in_range(units::rate_arg(text)?)
}

/// `--out IF[:RATE],...`: the interfaces and their own rates, checked
/// (names, no duplicates, none equal to `--in`, rates in range, all or none
/// with a rate).
fn egress_list(args: &Args) -> anyhow::Result<Vec<(String, Option<u64>)>> {
    let mut out: Vec<(String, Option<u64>)> = Vec::new();
    for item in args.output.split(',') {
        let (name, rate) = match item.split_once(':') {
            Some((name, rate)) => {
                let bps = units::parse_rate(rate)
                    .map_err(|e| usage(format!("--out: rate of {}: {e}", units::quote(name))))?;
                let flag = format!("--out: rate of {}", units::quote(name));
                (name, Some(check_rate(&flag, bps)?))
            }
            None => (item, None),
        };
        check_interface("--out", name)?;
        if name == args.input {
            return Err(usage(format!(
                "--out: {} is also --in: the bridge needs two different interfaces",
                units::quote(name)
            )));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(usage(format!(
                "--out: {} given twice: each egress interface once",
                units::quote(name)
            )));
        }
        out.push((name.to_string(), rate));
    }
    if out.len() > pspat_bridge::MAX_EGRESS {
        return Err(usage(format!(
            "--out: at most {} interfaces, got {}",
            pspat_bridge::MAX_EGRESS,
            out.len()
        )));
    }
    let own = out.iter().filter(|(_, r)| r.is_some()).count();
    if args.rate.is_none() && own != 0 && own != out.len() {
        return Err(usage(
            "--out: give every interface a rate (IF:RATE) or none, or set --rate for the others: \
             the rates weigh the placement of flows",
        ));
    }
    Ok(out)
}

fn config(args: &Args) -> anyhow::Result<BridgeConfig> {
    check_interface("--in", &args.input)?;
    let egress = egress_list(args)?;
    let mut cfg = BridgeConfig::new(args.input.clone(), egress[0].0.clone());
    cfg.sched = args.scheduler.config()?;
    if let Some(rate) = args.rate {
        cfg.rate_bps = Some(check_rate("--rate", rate)?);
    }
    let arbiter_cpus = match &args.arbiter_cpu {
        Some(list) => cpu_list("--arbiter-cpu", list)?,
        None => Vec::new(),
    };
    let arbiter_cpu =
        |k: usize| (!arbiter_cpus.is_empty()).then(|| arbiter_cpus[k % arbiter_cpus.len()]);
    cfg.rate_bps = egress[0].1.or(cfg.rate_bps);
    cfg.arbiter_cpu = arbiter_cpu(0);
    for (k, (name, rate)) in egress.iter().enumerate().skip(1) {
        let mut e = Egress::new(name.clone());
        e.rate_bps = rate.or(args.rate);
        e.arbiter_cpu = arbiter_cpu(k);
        cfg.extra_outputs.push(e);
    }
    let weights = match &args.weights {
        Some(w) => parse_weights("--weights", w).map_err(usage)?,
        None => Vec::new(),
    };
    let max_flows = i64::from(pspat_bridge::MAX_FLOWS);
    let flows = match args.flows {
        Some(n) => in_range("--flows", n, 1, max_flows)? as u32,
        None if !weights.is_empty() => weights.len() as u32,
        None => 1,
    };
    if weights.len() > max_flows as usize {
        return Err(usage(format!(
            "--weights: at most {max_flows} weights, got {}",
            weights.len()
        )));
    }
    if !weights.is_empty() && weights.len() != flows as usize {
        return Err(usage(format!(
            "--weights: {} weights for --flows {flows}: give one weight per flow",
            weights.len()
        )));
    }
    cfg.flows = flows;
    cfg.weights = weights;
    cfg.flow_key = args.flow_key;
    cfg.dispatchers = in_range("--dispatchers", args.dispatchers, 0, 64)? as usize;
    cfg.rx_threads = in_range("--rx-threads", args.rx_threads, 1, 64)? as usize;
    cfg.tx = args.tx;
    cfg.rx_ring = args.rx_ring;
    cfg.unparsed = args.unparsed;
    cfg.queue_limit = in_range("--queue-limit", args.queue_limit, 1, 65_536)? as u32;
    let d = in_range("--descriptors", args.descriptors, 64, 65_536)?;
    if d % 64 != 0 {
        return Err(usage(format!(
            "--descriptors must be a multiple of 64 in 64..=65536, got {d}"
        )));
    }
    cfg.descriptors = d as usize;
    if args.drain > Duration::from_secs(3600) {
        return Err(usage(format!(
            "--drain must be at most 3600s, got {}",
            units::format_duration(args.drain)
        )));
    }
    cfg.drain = args.drain;
    if let Some(d) = args.duration {
        units::check_duration("--duration", d, units::FORWARDING_RUN).map_err(usage)?;
    }
    cfg.reverse = !args.no_reverse;
    cfg.qdisc_bypass = !args.no_qdisc_bypass;
    cfg.receive_offloads_off = !args.keep_offloads;
    cfg.dispatcher_cpu = cpu("--dispatcher-cpu", args.dispatcher_cpu)?;
    if let Some(list) = &args.rx_cpus {
        cfg.rx_cpus = cpu_list("--rx-cpus", list)?;
    }
    cfg.io = io_backend(args, &cfg)?;
    cfg.validate().map_err(|e| usage(format!("{e}")))?;
    Ok(cfg)
}

/// `pspat shape --json` (docs/JSON.md).
#[derive(serde::Serialize)]
struct ShapeJson<'a> {
    schema_version: u32,
    command: &'static str,
    input: &'a str,
    output: &'a str,
    alg: String,
    rate_bps: Option<u64>,
    flow_key: &'static str,
    io: &'static str,
    xdp_mode: Option<&'static str>,
    tx: &'static str,
    rx_ring: &'static str,
    #[serde(flatten)]
    report: &'a Report,
}

fn progress(prev: &Report, now: &Report) -> String {
    let dt = (now.elapsed_s - prev.elapsed_s).max(1e-9);
    let rate = |b: u64, a: u64| human_rate((b.saturating_sub(a)) as f64 * 8.0 / dt);
    let mut line = format!(
        "shape: {:6.1} s  in {:>10.0} pps  out {:>12}  dropped {}",
        now.elapsed_s,
        now.received.saturating_sub(prev.received) as f64 / dt,
        rate(now.transmitted_bytes, prev.transmitted_bytes),
        now.dropped_total.saturating_sub(prev.dropped_total),
    );
    let active: Vec<_> = now
        .flows
        .iter()
        .zip(&prev.flows)
        .filter(|(n, p)| n.received > p.received)
        .collect();
    for (n, p) in active.iter().take(8) {
        let drops: u64 = n.dropped.values().sum::<u64>() - p.dropped.values().sum::<u64>();
        line.push_str(&format!(
            " | f{} {} d{}",
            n.flow,
            rate(n.bytes, p.bytes),
            drops
        ));
    }
    if active.len() > 8 {
        line.push_str(&format!(" | +{} flows", active.len() - 8));
    }
    if now.egress.len() > 1 {
        for (n, p) in now.egress.iter().zip(&prev.egress) {
            line.push_str(&format!(" | {} {}", n.interface, rate(n.bytes, p.bytes)));
        }
    }
    line
}

/// The egress interfaces and their rates, for the first lines.
fn egress_line(cfg: &BridgeConfig) -> String {
    cfg.egress()
        .iter()
        .map(|e| match e.rate_bps {
            Some(r) => format!("{} at {}", e.interface, human_rate(r as f64)),
            None => format!("{} unlimited", e.interface),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn reasons(map: &std::collections::BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn table(out: &mut impl Write, cfg: &BridgeConfig, r: &Report) -> std::io::Result<()> {
    if cfg.extra_outputs.is_empty() {
        writeln!(
            out,
            "shape {} -> {}: {}, rate {}, {} flows by {}, {:.1} s",
            cfg.input,
            cfg.output,
            cfg.sched.alg,
            cfg.rate_bps
                .map_or("unlimited".into(), |r| human_rate(r as f64)),
            cfg.flows,
            cfg.flow_key,
            r.elapsed_s
        )?;
    } else {
        writeln!(
            out,
            "shape {} -> {}: {}, {} flows by {} placed by weighted HRW on the rates, {:.1} s",
            cfg.input,
            egress_line(cfg),
            cfg.sched.alg,
            cfg.flows,
            cfg.flow_key,
            r.elapsed_s
        )?;
    }
    let width = r
        .egress
        .iter()
        .map(|e| e.interface.len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        out,
        " {:>6} {:>6} {:>width$} {:>12} {:>12} {:>14}  dropped",
        "flow", "weight", "egress", "received", "transmitted", "bytes"
    )?;
    for f in r
        .flows
        .iter()
        .filter(|f| f.received > 0 || r.flows.len() <= 64)
    {
        writeln!(
            out,
            " {:>6} {:>6} {:>width$} {:>12} {:>12} {:>14}  {}",
            f.flow,
            f.weight,
            f.egress,
            f.received,
            f.transmitted,
            f.bytes,
            reasons(&f.dropped)
        )?;
    }
    if r.egress.len() > 1 {
        for e in &r.egress {
            writeln!(
                out,
                "egress {}: rate {}, {} flows (weight share {:.3}), received {} transmitted {} ({} bytes) dropped {} ({}) in flight {}",
                e.interface,
                e.rate_bps.map_or("unlimited".into(), |r| human_rate(r as f64)),
                e.flows,
                e.weight_share,
                e.received,
                e.transmitted,
                e.bytes,
                e.dropped_total,
                reasons(&e.dropped),
                e.in_flight
            )?;
        }
    }
    writeln!(
        out,
        "total: received {} ({} bytes) transmitted {} ({} bytes) dropped {} ({}) in flight {}",
        r.received,
        r.received_bytes,
        r.transmitted,
        r.transmitted_bytes,
        r.dropped_total,
        reasons(&r.dropped),
        r.in_flight
    )?;
    writeln!(out, "not received (kernel ring full): {}", r.not_received)?;
    writeln!(
        out,
        "parse: parsed {} refused {}",
        r.parse.parsed,
        reasons(&r.parse.refused)
    )?;
    if r.reverse.enabled {
        writeln!(
            out,
            "reverse {} -> {}: received {} transmitted {} ({} bytes) dropped {} not received {}",
            cfg.egress()
                .iter()
                .map(|e| e.interface.as_str())
                .collect::<Vec<_>>()
                .join(","),
            cfg.input,
            r.reverse.received,
            r.reverse.transmitted,
            r.reverse.bytes,
            reasons(&r.reverse.dropped),
            r.reverse.not_received
        )?;
    } else {
        writeln!(out, "reverse: not forwarded (--no-reverse)")?;
    }
    let threads: Vec<String> = r
        .threads
        .iter()
        .map(|t| match t.cpu {
            Some(c) => format!("{} cpu {c}", t.thread),
            None => format!("{} cpu ?", t.thread),
        })
        .collect();
    writeln!(out, "threads: {}", threads.join(", "))?;
    writeln!(
        out,
        "accounting: received {} = transmitted {} + dropped {} + in flight {}: {}",
        r.received,
        r.transmitted,
        r.dropped_total,
        r.in_flight,
        if r.conserved { "holds" } else { "FAILS" }
    )
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cfg = config(&args)?;
    let term = Arc::new(AtomicBool::new(false));
    let stop_bell = crate::supervise::stop_signals(&term)
        .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
    let bridge = Bridge::start(cfg.clone()).map_err(|e| match e {
        BridgeError::Interface { role, source, .. } if e.is_usage() => {
            let flag = if role == "input" { "--in" } else { "--out" };
            usage(format!("{flag}: {source}"))
        }
        e if e.is_usage() => usage(e.to_string()),
        e => anyhow::anyhow!("shape: {e}"),
    })?;
    let placed = (cfg.egress().len() > 1).then(|| {
        let mut count = vec![0u32; cfg.egress().len()];
        for &e in bridge.egress_of() {
            count[usize::from(e)] += 1;
        }
        format!(
            " (flows per egress: {})",
            count
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    eprintln!(
        "shape: ready: {} -> {}{} ({}, {} flows by {}, {} RX thread(s), {} dispatcher(s), {}, frames of {} bytes)",
        cfg.input,
        egress_line(&cfg),
        placed.unwrap_or_default(),
        cfg.sched.alg,
        cfg.flows,
        cfg.flow_key,
        cfg.rx_threads,
        cfg.dispatchers,
        match cfg.io {
            IoBackend::AfPacket => format!("tx {}, rx ring {}", cfg.tx.name(), cfg.rx_ring.name()),
            IoBackend::Xdp { attach } => format!("io xdp, program in {} mode", attach.name()),
        },
        bridge.frame_size()
    );
    let offloads = crate::offload_guard::Offloads::started(&bridge.report(), &shape_note);
    let start = Instant::now();
    let mut prev = bridge.report();
    let failure = crate::supervise::until_stopped(
        &term,
        &stop_bell,
        start,
        args.duration,
        || bridge.failure(),
        || {
            let now = bridge.report();
            eprintln!("{}", progress(&prev, &now));
            prev = now;
        },
    );
    let report = bridge.stop().map_err(|e| anyhow::anyhow!("shape: {e}"))?;
    offloads.stopped(&report, &shape_note);
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = ShapeJson {
            schema_version: crate::SCHEMA_VERSION,
            command: "shape",
            input: &cfg.input,
            output: &cfg.output,
            alg: cfg.sched.alg.to_string(),
            rate_bps: cfg.rate_bps,
            flow_key: cfg.flow_key.name(),
            io: cfg.io.name(),
            xdp_mode: match cfg.io {
                IoBackend::AfPacket => None,
                IoBackend::Xdp { attach } => Some(attach.name()),
            },
            tx: cfg.tx.name(),
            rx_ring: cfg.rx_ring.name(),
            report: &report,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        table(&mut out, &cfg, &report)?;
    }
    out.flush()?;
    if let Some(f) = failure.or(report.error.clone()) {
        eprintln!("pspat: shape: {}", units::elide_long_words(&f));
        return Ok(ExitCode::from(1));
    }
    if !report.conserved || report.in_flight != 0 {
        eprintln!("pspat: shape: accounting check failed");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// How `pspat shape` says an offload note: on standard error.
fn shape_note(note: crate::offload_guard::Note) {
    match note {
        crate::offload_guard::Note::Done(line) => eprintln!("shape: {line}"),
        crate::offload_guard::Note::Warning(line) => eprintln!("shape: warning: {line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn config_of(extra: &[&str]) -> anyhow::Result<BridgeConfig> {
        let argv = ["shape", "--in", "pspat-a", "--out", "pspat-b"];
        let cli = Cli::try_parse_from(argv.iter().chain(extra)).expect("flags parse");
        config(&cli.args)
    }

    fn refusal(extra: &[&str]) -> String {
        let e = config_of(extra).expect_err("refused");
        assert!(
            e.downcast_ref::<pspat_cli::UsageError>().is_some(),
            "a usage error (exit 2): {e}"
        );
        let line = e.to_string();
        assert!(!line.contains('\n'), "one line: {line}");
        line
    }

    #[test]
    fn io_defaults_to_af_packet_and_xdp_is_built_or_named_how_to_build() {
        assert_eq!(config_of(&[]).unwrap().io, IoBackend::AfPacket);
        assert_eq!(
            config_of(&["--io", "af-packet"]).unwrap().io,
            IoBackend::AfPacket
        );
        if pspat_bridge::XDP_BUILT {
            assert_eq!(
                config_of(&["--io", "xdp"]).unwrap().io,
                IoBackend::Xdp {
                    attach: XdpAttach::Auto
                }
            );
            assert_eq!(
                config_of(&["--io", "xdp", "--xdp-mode", "skb", "--dispatchers", "0"])
                    .unwrap()
                    .io,
                IoBackend::Xdp {
                    attach: XdpAttach::Skb
                }
            );
            assert!(refusal(&["--io", "xdp", "--rx-threads", "2"]).contains("--rx-threads"));
            assert!(refusal(&["--io", "xdp", "--dispatchers", "2"]).contains("--dispatchers"));
        } else {
            let line = refusal(&["--io", "xdp"]);
            assert!(line.contains("--features xdp"), "{line}");
        }
        assert!(refusal(&["--xdp-mode", "driver"]).contains("--io xdp"));
        for bad in [["--io", "dpdk"], ["--xdp-mode", "native"]] {
            let argv = ["shape", "--in", "pspat-a", "--out", "pspat-b"];
            assert!(
                Cli::try_parse_from(argv.iter().chain(&bad)).is_err(),
                "{bad:?}"
            );
        }
    }
}
