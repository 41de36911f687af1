//! `pspat traffic send|recv`: test traffic for the lab (`pspat lab`), or for
//! loopback. Runs in whatever network namespace it is started in
//! (`ip netns exec pspat-lab-snd pspat traffic send ...`). The generator and
//! the receiver are `pspat_lab::traffic` (its docs define frames, payload,
//! flows, pacing and what the receiver counts).
//!
//! `send --via pspat` makes the sending threads clients of a pspat runtime
//! (`pspat_lab::local`): `--alg`, `--link-rate`, `--dispatchers`,
//! `--arbiter-cpu`, `--dispatcher-cpu` configure it and need `--via pspat`.
//!
//! Safety of the network: `--dst` must be loopback or in 10.199.0.0/16, the
//! range of this project's test namespaces.
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Duration;

use std::io::Write;

use anyhow::Context;
use pspat_cli::{units, usage, SCHEMA_VERSION};
use pspat_lab::local::PspatVia;
use pspat_lab::traffic::{self, Proto, Rate, RecvConfig, RecvReport, SendConfig, SendReport, Via};
use pspat_sched::AlgKind;

/// Flags of `pspat traffic`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Send UDP flows (or one TCP stream) to a receiver.
    Send(SendArgs),
    /// Receive and count: per flow packets, rate, loss, reordering, latency.
    Recv(RecvArgs),
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ProtoArg {
    Udp,
    Tcp,
}

impl From<ProtoArg> for Proto {
    fn from(p: ProtoArg) -> Self {
        match p {
            ProtoArg::Udp => Proto::Udp,
            ProtoArg::Tcp => Proto::Tcp,
        }
    }
}

#[derive(clap::Args)]
struct SendArgs {
    /// The receiver: loopback or an address in 10.199.0.0/16.
    #[arg(long, default_value = "10.199.100.2")]
    dst: Ipv4Addr,
    /// Destination port of flow 0; flow i goes to port + i.
    #[arg(long, default_value_t = 5056)]
    port: u16,
    /// Flows, all of weight 1 (ignored with --weights).
    #[arg(long, default_value_t = 1)]
    flows: usize,
    /// Weights of the flows, comma-separated (their number sets the flows).
    #[arg(long)]
    weights: Option<String>,
    /// Sending threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Ethernet frame length in bytes without FCS (60..=1514; 60 leaves the 18-byte header as payload).
    #[arg(long, default_value_t = 60)]
    size: usize,
    /// Rate of all flows in bit/s of frames (e.g. 100M); leave out --rate and --pps to send greedily.
    #[arg(long, value_parser = units::rate_arg, conflicts_with = "pps")]
    rate: Option<u64>,
    /// Rate of all flows in packets/s.
    #[arg(long)]
    pps: Option<u64>,
    /// How long to send.
    #[arg(long, value_parser = units::duration_arg, default_value = "5s")]
    duration: Duration,
    /// CPUs to pin the threads to, comma-separated, round-robin.
    #[arg(long, value_delimiter = ',')]
    cpu: Vec<usize>,
    /// udp, or tcp for one bulk stream to --port.
    #[arg(long, value_enum, default_value = "udp")]
    proto: ProtoArg,
    /// direct: each thread calls sendmmsg; pspat: the threads are clients of a pspat runtime whose arbiter (or dispatchers) send.
    #[arg(long, value_enum, default_value = "direct")]
    via: ViaArg,
    /// --via pspat: the scheduling algorithm [default: drr].
    #[arg(long)]
    alg: Option<String>,
    /// --via pspat: the emulated link rate in bit/s (e.g. 1G) [default: unlimited].
    #[arg(long, value_parser = units::rate_arg)]
    link_rate: Option<u64>,
    /// --via pspat: dispatcher threads, 0..=64 (0: the arbiter sends) [default: 0].
    #[arg(long)]
    dispatchers: Option<usize>,
    /// --via pspat: CPU of the arbiter.
    #[arg(long)]
    arbiter_cpu: Option<usize>,
    /// --via pspat: CPU of the dispatchers.
    #[arg(long)]
    dispatcher_cpu: Option<usize>,
    /// Print one JSON object (`schema_version` 1) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ViaArg {
    Direct,
    Pspat,
}

#[derive(clap::Args)]
struct RecvArgs {
    /// Address to bind.
    #[arg(long, default_value = "0.0.0.0")]
    bind: Ipv4Addr,
    /// Port of flow 0; flow i arrives on port + i.
    #[arg(long, default_value_t = 5056)]
    port: u16,
    /// Flows (ports port..port + flows).
    #[arg(long, default_value_t = 1)]
    flows: usize,
    /// Stop after this long (default: at Ctrl-C / SIGTERM).
    #[arg(long, value_parser = units::duration_arg)]
    duration: Option<Duration>,
    /// CPUs to pin the threads to, comma-separated, round-robin.
    #[arg(long, value_delimiter = ',')]
    cpu: Vec<usize>,
    /// Also count, apart, what arrives from this long after the first packet (with --steady-span).
    #[arg(long, value_parser = units::duration_arg, requires = "steady_span")]
    steady_skip: Option<Duration>,
    /// Length of that steady window.
    #[arg(long, value_parser = units::duration_arg, requires = "steady_skip")]
    steady_span: Option<Duration>,
    /// udp, or tcp for one bulk stream on --port.
    #[arg(long, value_enum, default_value = "udp")]
    proto: ProtoArg,
    /// Also measure latency to each packet's arrival at the socket (the kernel's receive timestamp), apart from
    /// latency to when it is read (UDP).
    #[arg(long = "arrival-latency")]
    arrival_latency: bool,
    /// Print one JSON object (`schema_version` 1) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Installs the SIGINT/SIGTERM handler that asks every loop to stop.
pub fn install_stop_handler() {
    // A second installation (a test harness, a nested call) is refused by
    // ctrlc; the first handler already does the job.
    let _ = ctrlc::set_handler(pspat_lab::stop::request);
}

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn check_cpus(cpus: &[usize]) -> anyhow::Result<()> {
    let online = online_cpus();
    if let Some(bad) = cpus.iter().find(|&&c| c >= online) {
        return Err(usage(format!(
            "--cpu {bad} does not exist (this machine has cpus 0..={})",
            online - 1
        )));
    }
    Ok(())
}

/// Runs `pspat traffic`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    install_stop_handler();
    match args.action {
        Action::Send(a) => send(a),
        Action::Recv(a) => recv(a),
    }
}

fn send(a: SendArgs) -> anyhow::Result<ExitCode> {
    let octets = a.dst.octets();
    if !(a.dst.is_loopback() || (octets[0] == 10 && octets[1] == 199)) {
        return Err(usage(format!(
            "--dst {} is outside loopback and 10.199.0.0/16 (test traffic stays in the lab)",
            a.dst
        )));
    }
    check_cpus(&a.cpu)?;
    let via = match a.via {
        ViaArg::Direct => {
            let given = [
                ("--alg", a.alg.is_some()),
                ("--link-rate", a.link_rate.is_some()),
                ("--dispatchers", a.dispatchers.is_some()),
                ("--arbiter-cpu", a.arbiter_cpu.is_some()),
                ("--dispatcher-cpu", a.dispatcher_cpu.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
                return Err(usage(format!("{flag} needs --via pspat")));
            }
            Via::Direct
        }
        ViaArg::Pspat => {
            let alg = a.alg.as_deref().unwrap_or("drr");
            let alg = AlgKind::parse(alg).map_err(|e| usage(format!("--alg: {e}")))?;
            for (flag, cpu) in [
                ("--arbiter-cpu", a.arbiter_cpu),
                ("--dispatcher-cpu", a.dispatcher_cpu),
            ] {
                if let Some(c) = cpu {
                    check_cpus(&[c]).map_err(|_| {
                        usage(format!(
                            "{flag} {c} does not exist (this machine has cpus 0..={})",
                            online_cpus() - 1
                        ))
                    })?;
                }
            }
            Via::Pspat(PspatVia {
                alg,
                link_rate_bps: a.link_rate,
                dispatchers: a.dispatchers.unwrap_or(0),
                arbiter_cpu: a.arbiter_cpu,
                dispatcher_cpu: a.dispatcher_cpu,
            })
        }
    };
    let weights = match &a.weights {
        Some(text) => units::parse_weights("--weights", text).map_err(usage)?,
        None => vec![1; a.flows],
    };
    let rate = match (a.rate, a.pps) {
        (Some(bps), _) => Rate::Bps(bps),
        (None, Some(pps)) => Rate::Pps(pps),
        (None, None) => Rate::Greedy,
    };
    let config = SendConfig {
        dst: a.dst,
        base_port: a.port,
        weights,
        threads: a.threads,
        frame_bytes: a.size,
        rate,
        duration: a.duration,
        cpus: a.cpu,
        proto: a.proto.into(),
        via,
    };
    config.check().map_err(|e| usage(e.to_string()))?;
    let report = traffic::send(&config).context("traffic send")?;
    if a.json {
        print_json("traffic send", &report)?;
    } else {
        print_send(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn recv(a: RecvArgs) -> anyhow::Result<ExitCode> {
    check_cpus(&a.cpu)?;
    let config = RecvConfig {
        bind: a.bind,
        base_port: a.port,
        flows: a.flows,
        duration: a.duration,
        cpus: a.cpu,
        proto: a.proto.into(),
        steady: a.steady_skip.zip(a.steady_span),
        arrival_latency: a.arrival_latency,
    };
    config.check().map_err(|e| usage(e.to_string()))?;
    let report = traffic::recv(&config).context("traffic recv")?;
    if a.json {
        print_json("traffic recv", &report)?;
    } else {
        print_recv(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints `report` as one pretty JSON object that starts with
/// `schema_version` and `command`, then the report's own fields in order.
pub fn print_json(command: &str, report: &impl serde::Serialize) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct Doc<'a, T: serde::Serialize> {
        schema_version: u32,
        command: &'a str,
        #[serde(flatten)]
        report: &'a T,
    }
    let doc = Doc {
        schema_version: SCHEMA_VERSION,
        command,
        report,
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &doc)?;
    writeln!(out)?;
    Ok(())
}

fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Udp => "udp",
        Proto::Tcp => "tcp",
    }
}

fn print_send(r: &SendReport) {
    if r.proto == Proto::Tcp {
        println!(
            "tcp: wrote {} bytes in {:.3} s: {} ({})",
            r.bytes,
            r.duration_s,
            units::human_rate(r.bps),
            r.pinning
        );
        return;
    }
    println!(
        "sent {} packets, {} bytes in {:.3} s: {:.0} packets/s, {} ({}, {}; {})",
        r.packets,
        r.bytes,
        r.duration_s,
        r.pps,
        units::human_rate(r.bps),
        proto_name(r.proto),
        r.pinning,
        r.cpu_s
            .map_or("cpu n/a".into(), |c| format!("{c:.2} cpu s"))
    );
    if !r.flows.is_empty() {
        println!("flow  port   weight  streams  packets      bytes        refused");
        for f in &r.flows {
            println!(
                "{:<5} {:<6} {:<7} {:<8} {:<12} {:<12} {}",
                f.flow, f.port, f.weight, f.streams, f.packets, f.bytes, f.refused
            );
        }
    }
    for (reason, count) in &r.send_errors {
        println!("refused: {reason} × {count}");
    }
    if let Some(p) = &r.pspat {
        println!(
            "through pspat ({}, {} dispatcher(s), link {}): submitted {} = sent {} + dropped {}{}; in flight {}; mailbox-full waits {}",
            p.alg,
            p.dispatchers,
            p.link_rate_bps
                .map_or("unlimited".into(), |b| units::human_rate(b as f64)),
            p.submitted,
            p.sent,
            p.dropped.values().sum::<u64>(),
            if p.dropped.is_empty() {
                String::new()
            } else {
                format!(" {:?}", p.dropped)
            },
            p.in_flight,
            p.full_waits
        );
        if let Some(e) = &p.error {
            println!("pspat: {e}");
        }
    }
}

fn print_recv(r: &RecvReport) {
    if r.proto == Proto::Tcp {
        println!(
            "tcp: received {} bytes in a {:.3} s window: goodput {} ({})",
            r.bytes,
            r.window_s,
            units::human_rate(r.bps),
            r.pinning
        );
        return;
    }
    println!(
        "received {} packets, {} bytes in a {:.3} s window: {:.0} packets/s, {}; lost {}, reordered {} ({})",
        r.packets,
        r.bytes,
        r.window_s,
        r.pps,
        units::human_rate(r.bps),
        r.lost,
        r.reordered,
        r.pinning
    );
    if let (Some(span), Some(pps)) = (r.steady_s, r.steady_pps) {
        println!("steady window of {span:.3} s: {pps:.0} packets/s");
    }
    if !r.flows.is_empty() {
        println!("flow  port   packets     pps         share   lost     reord  p50 µs    p90 µs    p99 µs    p99.9 µs  max µs");
        for f in &r.flows {
            let l = &f.latency;
            println!(
                "{:<5} {:<6} {:<11} {:<11.0} {:<7.4} {:<8} {:<6} {:<9.1} {:<9.1} {:<9.1} {:<9.1} {:.1}",
                f.flow,
                f.port,
                f.packets,
                f.pps,
                f.byte_share,
                f.lost,
                f.reordered,
                l.p50_us,
                l.p90_us,
                l.p99_us,
                l.p999_us,
                l.max_us
            );
        }
    }
}
