//! `pspat lab up|down|compare`: the three-namespace test bed
//! (`pspat_lab::topology`) and the comparison of pspat with the kernel's
//! bridge and HTB (`pspat_lab::compare`); docs/LAB.md shows the picture.
//!
//! Every lab command removes what it created when it fails or is stopped
//! (Ctrl-C, SIGTERM); `up` leaves the lab in place on success (unless
//! `--hold`, which keeps it until Ctrl-C and then removes it). Not root, or
//! no namespaces: one line and exit code 2.
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pspat_cli::{units, usage};
use pspat_lab::compare::{self, CompareConfig};
use pspat_lab::topology::{self, HtbPlan};
use pspat_lab::{LabError, Mode};

/// Flags of `pspat lab`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Build the lab (removing a stale one first) and leave it up.
    Up(UpArgs),
    /// Remove the lab, whatever state it is in.
    Down,
    /// Run the experiments through the bare bridge, HTB and pspat shape (and local senders: direct, HTB, pspat).
    Compare(Box<CompareArgs>),
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ModeArg {
    Bridge,
    Htb,
    Pspat,
}

#[derive(clap::Args)]
struct UpArgs {
    /// What forwards between pspat-shin and pspat-shout.
    #[arg(long, value_enum, default_value = "bridge")]
    mode: ModeArg,
    /// Mode htb: the rate shared by the flows (e.g. 100M).
    #[arg(long, value_parser = units::rate_arg, default_value = "100M")]
    rate: u64,
    /// Mode htb: weights of the flows on ports --port, --port + 1, ...
    #[arg(long, default_value = "1")]
    weights: String,
    /// Mode htb: UDP destination port of flow 0.
    #[arg(long, default_value_t = 5056)]
    port: u16,
    /// Keep running until Ctrl-C, then remove the lab.
    #[arg(long)]
    hold: bool,
}

#[derive(clap::Args)]
struct CompareArgs {
    /// A short run for CI: senders 1 and 4, three split points, 1 s runs.
    #[arg(long)]
    quick: bool,
    /// Directory for the JSON, CSV, plots and SUMMARY.md.
    #[arg(long, default_value = "target/lab")]
    out: PathBuf,
    /// Length of each run (default 3s, --quick 1s).
    #[arg(long, value_parser = units::duration_arg)]
    duration: Option<Duration>,
    /// Sender counts of the throughput experiment, comma-separated.
    #[arg(long, value_delimiter = ',')]
    senders: Vec<usize>,
    /// R of the 10:1 split experiment.
    #[arg(long, value_parser = units::rate_arg, default_value = "10M")]
    split_rate: u64,
    /// R of the victim experiment.
    #[arg(long, value_parser = units::rate_arg, default_value = "200M")]
    victim_rate: u64,
    /// Sender counts of the local-senders experiment, comma-separated (default 1,2,4,8; --quick 1,4).
    #[arg(long, value_delimiter = ',')]
    local_senders: Vec<usize>,
    /// Dispatcher threads of the local senders' pspat runtime, on the traffic CPU (0: the arbiter sends, on the shaper CPU).
    #[arg(long, default_value_t = 0)]
    local_dispatchers: usize,
    /// pspat shape's dispatcher threads, on the traffic CPU (0: its arbiter transmits, on the shaper CPU).
    #[arg(long, default_value_t = 0)]
    shape_dispatchers: usize,
    /// CPU of pspat shape's RX threads (default: the shaper CPU).
    #[arg(long)]
    shape_rx_cpu: Option<usize>,
    /// pspat shape's I/O back end: af-packet or xdp (xdp needs a pspat built with the cargo feature xdp).
    #[arg(long, default_value = "af-packet", value_parser = shape_io_arg)]
    shape_io: pspat_lab::compare::ShapeIo,
    /// Packets one flow may hold, in both shapers: pspat shape's --queue-limit and a pfifo under each HTB class
    /// (1000: what HTB gives a class without a queue of its own on veth).
    #[arg(long, default_value_t = pspat_lab::topology::DEFAULT_QUEUE_LIMIT)]
    queue_limit: u32,
    /// The experiments to run, comma-separated, among throughput, split_10_1, victim, local_senders (default: all).
    #[arg(long, value_delimiter = ',')]
    experiments: Vec<String>,
    /// Greedy senders beside the victim.
    #[arg(long, default_value_t = 4)]
    victim_greedy: usize,
    /// Runs per mode and point (modes alternate).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// pspat shape's scheduling algorithm.
    #[arg(long, default_value = "drr")]
    alg: String,
    /// CPU of pspat shape (its arbiter).
    #[arg(long, default_value_t = 0)]
    shaper_cpu: usize,
    /// CPU of the senders and receivers.
    #[arg(long, default_value_t = 1)]
    traffic_cpu: usize,
    /// pspat shape's --rx-ring, comma-separated v2, v3 (default: pspat shape's own); with both, the victim
    /// experiment runs pspat once with each, in turn (modes pspat-v2, pspat-v3), the others use the first.
    #[arg(long = "rx-ring", value_delimiter = ',', value_parser = rx_ring_arg)]
    rx_ring: Vec<pspat_io::RxRing>,
    /// Print one JSON object (`schema_version` 1) instead of the summary.
    #[arg(long)]
    json: bool,
}

fn shape_io_arg(text: &str) -> Result<pspat_lab::compare::ShapeIo, String> {
    use pspat_lab::compare::ShapeIo;
    match text {
        "af-packet" => Ok(ShapeIo::AfPacket),
        "xdp" => Ok(ShapeIo::Xdp),
        _ => Err(format!("'{text}': expected af-packet or xdp")),
    }
}

fn rx_ring_arg(text: &str) -> Result<pspat_io::RxRing, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an RX ring (allowed: v2, v3)"))
}

/// Runs `pspat lab`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::traffic::install_stop_handler();
    match args.action {
        Action::Up(a) => {
            namespaces()?;
            up(a)
        }
        Action::Down => {
            namespaces()?;
            let removed = topology::down().map_err(lab_error)?;
            if removed.is_empty() {
                println!("lab down: nothing to remove");
            } else {
                println!("lab down: removed {}", removed.join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Compare(a) => compare_cmd(*a),
    }
}

/// Exit 2 when this process may not build network namespaces.
fn namespaces() -> anyhow::Result<()> {
    match pspat_io::netns::unavailable() {
        Some(reason) => Err(usage(format!("lab needs network namespaces: {reason}"))),
        None => Ok(()),
    }
}

fn lab_error(e: LabError) -> anyhow::Error {
    match e {
        LabError::Unavailable(_) | LabError::Config(_) => usage(e.to_string()),
        other => anyhow::Error::new(other),
    }
}

fn up(a: UpArgs) -> anyhow::Result<ExitCode> {
    let weights = units::parse_weights("--weights", &a.weights).map_err(usage)?;
    // The plan's own checks name HTB's parameters; these name the flags.
    if a.rate < 8_000 {
        return Err(usage(format!(
            "--rate must be at least 8000 bit/s (HTB's smallest rate, 8 kbit/s), got {}",
            a.rate
        )));
    }
    if a.port == 0 {
        return Err(usage("--port must be at least 1"));
    }
    let mode = match a.mode {
        ModeArg::Bridge => Mode::Bridge,
        ModeArg::Htb => Mode::Htb,
        ModeArg::Pspat => Mode::Pspat,
    };
    let plan = HtbPlan {
        rate_bps: a.rate,
        weights,
        base_port: a.port,
        leaf_limit: None,
    };
    plan.commands().map_err(|e| usage(e.to_string()))?;
    let lab = pspat_lab::Lab::up(mode, Some(&plan)).map_err(lab_error)?;
    if !lab.removed_stale.is_empty() {
        eprintln!(
            "lab up: removed a stale lab first: {}",
            lab.removed_stale.join(", ")
        );
    }
    println!("{}", lab.describe());
    if a.hold {
        eprintln!("lab up: holding; Ctrl-C removes the lab");
        while !pspat_lab::stop::requested() {
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(lab);
        println!("lab down: removed");
    } else {
        lab.keep();
    }
    Ok(ExitCode::SUCCESS)
}

fn compare_cmd(a: CompareArgs) -> anyhow::Result<ExitCode> {
    let exe =
        std::env::current_exe().map_err(|e| anyhow::anyhow!("cannot find this binary: {e}"))?;
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (flag, cpu) in [
        ("--shaper-cpu", a.shaper_cpu),
        ("--traffic-cpu", a.traffic_cpu),
        ("--shape-rx-cpu", a.shape_rx_cpu.unwrap_or(a.shaper_cpu)),
    ] {
        if cpu >= online {
            return Err(usage(format!(
                "{flag} {cpu} does not exist (this machine has cpus 0..={})",
                online - 1
            )));
        }
    }
    if a.repeat == 0 {
        return Err(usage("--repeat must be at least 1"));
    }
    if a.victim_greedy == 0 || a.victim_greedy > 64 {
        return Err(usage("--victim-greedy must be 1..=64"));
    }
    for (flag, rate) in [
        ("--split-rate", a.split_rate),
        ("--victim-rate", a.victim_rate),
    ] {
        if rate < 1_000_000 {
            return Err(usage(format!("{flag} must be at least 1M")));
        }
    }
    let mut config = CompareConfig::new(exe, a.quick);
    config.out = a.out;
    if let Some(d) = a.duration {
        config.duration = d;
    }
    if !a.senders.is_empty() {
        config.senders = a.senders;
    }
    if !a.local_senders.is_empty() {
        config.local_senders = a.local_senders;
    }
    config.local_dispatchers = a.local_dispatchers;
    config.shape_dispatchers = a.shape_dispatchers;
    config.shape_io = a.shape_io;
    config.shape_rx_cpu = a.shape_rx_cpu;
    config.queue_limit = a.queue_limit;
    if let Some(bad) = a
        .experiments
        .iter()
        .find(|e| !compare::EXPERIMENTS.contains(&e.as_str()))
    {
        return Err(usage(format!(
            "--experiments: unknown {bad:?} (known: {})",
            compare::EXPERIMENTS.join(", ")
        )));
    }
    if !a.experiments.is_empty() {
        config.experiments = a.experiments;
    }
    config.split_rate_bps = a.split_rate;
    config.victim_rate_bps = a.victim_rate;
    config.victim_greedy = a.victim_greedy;
    config.repeat = a.repeat;
    config.alg = a.alg;
    config.shaper_cpu = a.shaper_cpu;
    config.traffic_cpu = a.traffic_cpu;
    config.rx_rings = a.rx_ring;
    if config.rx_rings.len() > 2
        || (config.rx_rings.len() == 2 && config.rx_rings[0] == config.rx_rings[1])
    {
        return Err(usage("--rx-ring: give v2, v3, or both once each"));
    }
    if config.shape_io == compare::ShapeIo::Xdp && !pspat_bridge::XDP_BUILT {
        // The pspat shape children are this binary.
        return Err(usage(
            "--shape-io xdp: this pspat was built without AF_XDP; rebuild it with \
             `cargo build --release -p pspat-cli --features xdp`",
        ));
    }
    // Every flag, including what only the pspat shape children would
    // refuse (--alg, the rates), is checked before the namespaces are
    // asked for and the lab is built: bad input is exit 2 wherever it runs.
    compare::check(&config).map_err(lab_error)?;
    namespaces()?;
    let report = compare::compare(&config).map_err(lab_error)?;
    if a.json {
        crate::traffic::print_json("lab compare", &report)?;
    } else {
        print!("{}", compare::summary(&report));
        println!("Written to {}", config.out.display());
    }
    Ok(ExitCode::SUCCESS)
}
