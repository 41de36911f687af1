//! `pspat sched-bench`: the cost of one scheduling algorithm alone, measured
//! the way dummynet's userspace harness does it (`docs/REFERENCE.md` §6.5): no
//! threads, no link, a fill/drain controller that keeps between `qmin` and
//! `qmax` packets queued and always feeds the flow with the smallest
//! backlog. The controller is `pspat_eval::harness`; this file times it.
//!
//! `ns_per_pair` = wall time of the timed run / enqueues: one enqueue plus
//! one dequeue plus the generator and controller, the talk's metric.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use pspat_eval::harness::{parse_count, Flowsets, Harness, RunStats};
use pspat_sched::{AlgKind, Scheduler, SchedulerConfig, VisitScheduler};
use serde::Serialize;

use crate::usage;

mod front;

const AFTER_HELP: &str = concat!(
    pspat_cli::units_help!(),
    "\n\n\
Flowsets: comma-separated items weight:len:flows (the talk's syntax, e.g. 1::512,8::64),
or with ranges w:wmax:wsteps:len:lmax:lsteps:flows, or lo-hi-steps inside a field.
Empty weight = 1, empty len = 1000 bytes, empty flows = 1. Weights 1..=65536, lengths 1..=65535.
Numbers take K (10^3), M (10^6), k (2^10), m (2^20); --qmin/--qmax also n (x number of flows).

--sweep prints the talk's table: rows 1, 8, 64, 512, 4k, 32k flows (flowsets 1::N) and
mix (1::32k,2::4k,4::2k,8::1k,128::16,1k::1); one column per algorithm (all registered
algorithms except prio, which with equal priorities is a FIFO; --alg restricts to one),
then the talk's own figures (2.3 GHz Athlon, 2010) for comparison.

Exit codes: 0 success; 2 usage or configuration error.",
);

/// Flags of `pspat sched-bench`.
#[derive(clap::Args, Default)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Algorithm (default drr; with --sweep, restricts the sweep to it).
    #[arg(long)]
    pub alg: Option<String>,
    /// Flowsets, e.g. "1::512,8::64" (the talk's reference run, the default) or "1:60:32768".
    #[arg(long, allow_hyphen_values = true)]
    pub flowsets: Option<String>,
    /// Drain down to this many queued packets (n suffix = per flow). Default 1n.
    #[arg(long, allow_hyphen_values = true)]
    pub qmin: Option<String>,
    /// Fill up to this many queued packets (n suffix = per flow). Default 20n.
    #[arg(long, allow_hyphen_values = true)]
    pub qmax: Option<String>,
    /// Controller iterations per timed run (each is one enqueue or one dequeue);
    /// default: calibrated so one run takes about 1 s (0.2 s per cell with --sweep).
    #[arg(long, allow_hyphen_values = true)]
    pub iterations: Option<String>,
    /// Timed runs; the median ns_per_pair is reported with min and max. Default 5.
    #[arg(long, allow_negative_numbers = true)]
    pub repeat: Option<u32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print the talk's table: several flow counts, one column per algorithm.
    #[arg(long)]
    pub sweep: bool,
    /// Put the algorithm behind `pspat run`'s per-packet path: each flow is a source address,
    /// classified into its own dynamic queue (mask src-ip), then a pipe (filters, link, delay
    /// line) around the algorithm. One flowset only. Compare with the same run without it.
    #[arg(long)]
    pub dummynet: bool,
    /// With --dummynet: the pipe's delay (e.g. 10us; the harness's clock moves one packet time
    /// per dequeue at 1 byte per ns). Default 0.
    #[arg(long, value_parser = crate::units::duration_arg, requires = "dummynet")]
    pub delay: Option<Duration>,
    /// With --dummynet: the parts a packet goes through, to read the cost of each against the
    /// bare algorithm and the whole path: both (default), classifier (then the algorithm, no
    /// pipe), pipe (packets not classified).
    #[arg(long, value_enum, requires = "dummynet")]
    pub dummynet_part: Option<front::Part>,
}

/// One measured configuration.
#[derive(Serialize)]
struct Cell {
    alg: String,
    /// The algorithm behind the classifier and a pipe (`--dummynet`).
    dummynet: bool,
    /// The pipe's delay with `--dummynet`, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ns: Option<u64>,
    /// With `--dummynet`: the parts of the path measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    dummynet_part: Option<front::Part>,
    flowsets: String,
    flows: usize,
    qmin: u64,
    qmax: u64,
    iterations: u64,
    repeat: u32,
    enqueues: u64,
    dequeues: u64,
    drops: u64,
    ns_per_pair: f64,
    ns_per_pair_min: f64,
    ns_per_pair_max: f64,
}

const DEFAULT_FLOWSETS: &str = "1::512,8::64";
const SWEEP_ROWS: [(&str, &str); 7] = [
    ("1", "1::1"),
    ("8", "1::8"),
    ("64", "1::64"),
    ("512", "1::512"),
    ("4k", "1::4k"),
    ("32k", "1::32k"),
    ("mix", "1::32k,2::4k,4::2k,8::1k,128::16,1k::1"),
];
/// The talk's table (Rizzo's talk, docs/REFERENCE.md §4): ns per pair on a 2.3 GHz Athlon.
const TALK_COLUMNS: [&str; 6] = ["NONE", "FIFO", "DRR", "QFQ", "KPS", "WF2Q+"];
const TALK_TABLE: [[u32; 6]; 7] = [
    [62, 83, 105, 221, 450, 210],
    [60, 80, 102, 163, 543, 344],
    [59, 80, 100, 158, 540, 526],
    [64, 85, 110, 175, 560, 740],
    [74, 102, 157, 197, 590, 1110],
    [62, 117, 147, 222, 601, 1690],
    [92, 119, 160, 255, 612, 1715],
];

struct Plan {
    alg: AlgKind,
    flowsets: Flowsets,
    spec: String,
    qmin: u64,
    qmax: u64,
    iterations: Option<u64>,
    target: Duration,
    repeat: u32,
    /// `--dummynet` and its delay, ns.
    dummynet: Option<u64>,
    /// `--dummynet-part`.
    part: front::Part,
}

/// One harness run on a fresh scheduler: `warmup` untimed steps, then
/// `iterations` timed ones. Returns the wall time and the counters of the
/// timed steps.
fn timed_run(plan: &Plan, warmup: u64, iterations: u64) -> anyhow::Result<(Duration, RunStats)> {
    let mut cfg = SchedulerConfig::new(plan.alg);
    cfg.capacity = usize::try_from(plan.qmax)
        .map_err(|_| usage(format!("--qmax {} is too large", plan.qmax)))?;
    if let Some(delay_ns) = plan.dummynet {
        let set = plan.flowsets.sets()[0];
        let (classifier, table) = front::classifier(plan.flowsets.flows(), set.weight)?;
        let sched = cfg.build(table)?;
        return sched.visit(DummynetRun {
            plan,
            warmup,
            iterations,
            classifier,
            delay_ns,
        });
    }
    let sched = cfg.build(plan.flowsets.flow_table()?)?;
    // The harness runs on the concrete algorithm, as an embedder's loop
    // would: through `AnyScheduler` every enqueue and dequeue would also
    // load the variant tag and jump (about 2-4 ns per pair measured).
    sched.visit(TimedRun {
        plan,
        warmup,
        iterations,
    })
}

struct TimedRun<'a> {
    plan: &'a Plan,
    warmup: u64,
    iterations: u64,
}

impl VisitScheduler for TimedRun<'_> {
    type Output = anyhow::Result<(Duration, RunStats)>;

    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output {
        let mut h = Harness::new(sched, &self.plan.flowsets, self.plan.qmin, self.plan.qmax)?;
        h.run(self.warmup);
        let before = h.stats();
        let t0 = Instant::now();
        let after = h.run(self.iterations);
        let dt = t0.elapsed();
        Ok((dt, after.since(&before)))
    }
}

/// [`TimedRun`] with the algorithm behind the classifier and a pipe.
struct DummynetRun<'a> {
    plan: &'a Plan,
    warmup: u64,
    iterations: u64,
    classifier: pspat_classify::Classifier,
    delay_ns: u64,
}

impl VisitScheduler for DummynetRun<'_> {
    type Output = anyhow::Result<(Duration, RunStats)>;

    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output {
        let set = self.plan.flowsets.sets()[0];
        let front_plan = front::FrontPlan {
            part: self.plan.part,
            flows: self.plan.flowsets.flows(),
            len: set.len,
            backlog: self.plan.qmax,
            delay_ns: self.delay_ns,
        };
        let run = TimedRun {
            plan: self.plan,
            warmup: self.warmup,
            iterations: self.iterations,
        };
        front::visit_front(front_plan, self.classifier, sched, run)?
    }
}

impl front::VisitFront for TimedRun<'_> {
    type Output = anyhow::Result<(Duration, RunStats)>;

    fn visit<F: front::Front>(self, front: F) -> Self::Output {
        VisitScheduler::visit(self, front)
    }
}

fn measure(plan: &Plan) -> anyhow::Result<Cell> {
    // Warm-up: one full fill and drain cycle, untimed.
    let warmup = 2 * plan.qmax + 2;
    let iterations = match plan.iterations {
        Some(n) => n,
        None => {
            let probe = (4 * plan.qmax).max(1 << 18);
            let (dt, _) = timed_run(plan, warmup, probe)?;
            let per_iter = dt.as_secs_f64() / probe as f64;
            ((plan.target.as_secs_f64() / per_iter.max(1e-10)) as u64).clamp(100_000, 2_000_000_000)
        }
    };
    let mut samples = Vec::new();
    let mut last = RunStats::default();
    for _ in 0..plan.repeat {
        let (dt, stats) = timed_run(plan, warmup, iterations)?;
        if stats.enqueues == 0 {
            return Err(usage("the run made no enqueue: raise --iterations"));
        }
        samples.push(dt.as_nanos() as f64 / stats.enqueues as f64);
        last = stats;
    }
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2];
    Ok(Cell {
        alg: plan.alg.name().to_string(),
        dummynet: plan.dummynet.is_some(),
        delay_ns: plan.dummynet,
        dummynet_part: plan.dummynet.map(|_| plan.part),
        flowsets: plan.spec.clone(),
        flows: plan.flowsets.flows(),
        qmin: plan.qmin,
        qmax: plan.qmax,
        iterations,
        repeat: plan.repeat,
        enqueues: last.enqueues,
        dequeues: last.dequeues,
        drops: last.drops,
        ns_per_pair: median,
        ns_per_pair_min: samples[0],
        ns_per_pair_max: samples[samples.len() - 1],
    })
}

/// `pspat sched-bench --json`: one shape with or without `--sweep`
/// (docs/JSON.md).
#[derive(Serialize)]
struct SchedBenchJson<'a> {
    schema_version: u32,
    command: &'static str,
    sweep: bool,
    cells: &'a [Cell],
}

fn write_json(out: &mut impl Write, sweep: bool, cells: &[Cell]) -> anyhow::Result<()> {
    let doc = SchedBenchJson {
        schema_version: crate::SCHEMA_VERSION,
        command: "sched-bench",
        sweep,
        cells,
    };
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)?;
    Ok(())
}

fn make_plan(args: &Args, alg: AlgKind, spec: &str, target: Duration) -> anyhow::Result<Plan> {
    let flowsets = Flowsets::parse(spec)?;
    let n = flowsets.flows() as u64;
    let qmin = parse_count(args.qmin.as_deref().unwrap_or("1n"), "--qmin", Some(n))?;
    let qmax = parse_count(args.qmax.as_deref().unwrap_or("20n"), "--qmax", Some(n))?;
    if qmax == 0 || qmax <= qmin {
        return Err(usage(format!(
            "--qmax ({qmax} packets) must be above --qmin ({qmin} packets) and at least 1"
        )));
    }
    if qmax > 1 << 28 {
        return Err(usage(format!(
            "--qmax {qmax} packets is out of range (allowed: 1..={})",
            1u64 << 28
        )));
    }
    let iterations = match &args.iterations {
        Some(s) => {
            let v = parse_count(s, "--iterations", None)?;
            if v == 0 {
                return Err(usage("--iterations must be at least 1"));
            }
            Some(v)
        }
        None => None,
    };
    let repeat = args.repeat.unwrap_or(5);
    if !(1..=1000).contains(&repeat) {
        return Err(usage(format!(
            "--repeat {repeat} is out of range (allowed: 1..=1000)"
        )));
    }
    // The harness sizes the arena to --qmax: refuse what cannot fit.
    let mut sized = SchedulerConfig::new(alg);
    sized.capacity = usize::try_from(qmax).unwrap_or(usize::MAX);
    pspat_cli::memory::check(
        &format!("--qmax {qmax} with {} flows", flowsets.flows()),
        sized.memory_estimate(flowsets.flows()),
        pspat_cli::memory::available(),
    )
    .map_err(usage)?;
    let dummynet = if args.dummynet {
        if flowsets.sets().len() != 1 {
            return Err(usage(format!(
                "--dummynet takes one flowset (one weight and length for every source), got {} in {spec:?}",
                flowsets.sets().len()
            )));
        }
        if args.delay.is_some() && args.dummynet_part == Some(front::Part::Classifier) {
            return Err(usage(
                "--delay needs the pipe: --dummynet-part classifier measures the classifier without it",
            ));
        }
        let delay = args.delay.unwrap_or_default();
        Some(u64::try_from(delay.as_nanos()).map_err(|_| usage("--delay is too long"))?)
    } else {
        None
    };
    Ok(Plan {
        dummynet,
        part: args.dummynet_part.unwrap_or(front::Part::Both),
        alg,
        flowsets,
        spec: spec.to_string(),
        qmin,
        qmax,
        iterations,
        target,
        repeat,
    })
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.sweep {
        if args.dummynet {
            return Err(usage(
                "--dummynet cannot be combined with --sweep (name one flowset with --flowsets)",
            ));
        }
        if args.flowsets.is_some() {
            return Err(usage(
                "--flowsets cannot be combined with --sweep (the sweep fixes its rows)",
            ));
        }
        let algs: Vec<AlgKind> = match &args.alg {
            Some(a) => vec![AlgKind::parse(a).map_err(|e| usage(format!("--alg: {e}")))?],
            None => AlgKind::ALL
                .iter()
                .copied()
                // prio with equal priorities is a FIFO; shaped-drr holds packets
                // until their departure time, and the harness's clock (one ns
                // per step) makes most of its dequeues empty, so its cost per
                // pair is not comparable. Both run when named with --alg.
                .filter(|a| !matches!(a.name(), "prio" | "shaped-drr"))
                .collect(),
        };
        // Validate every plan before measuring anything.
        let mut plans = Vec::new();
        for (_, spec) in SWEEP_ROWS {
            for &alg in &algs {
                plans.push(make_plan(&args, alg, spec, Duration::from_millis(200))?);
            }
        }
        let mut cells = Vec::new();
        for plan in &plans {
            cells.push(measure(plan)?);
        }
        if args.json {
            write_json(&mut out, true, &cells)?;
        } else {
            writeln!(
                out,
                "ns per enqueue+dequeue pair, generator included (median of {} runs; qmin {}, qmax {})",
                plans.first().map_or(5, |p| p.repeat),
                args.qmin.as_deref().unwrap_or("1n"),
                args.qmax.as_deref().unwrap_or("20n"),
            )?;
            write!(out, "{:>6}", "flows")?;
            for a in &algs {
                write!(out, " {:>9}", a.name())?;
            }
            writeln!(out)?;
            for (r, (label, _)) in SWEEP_ROWS.iter().enumerate() {
                write!(out, "{label:>6}")?;
                for c in &cells[r * algs.len()..(r + 1) * algs.len()] {
                    write!(out, " {:>9.1}", c.ns_per_pair)?;
                }
                writeln!(out)?;
            }
            writeln!(out)?;
            writeln!(
                out,
                "For comparison, the talk's figures (2.3 GHz Athlon, 667 MHz RAM, ns per pair):"
            )?;
            write!(out, "{:>6}", "flows")?;
            for c in TALK_COLUMNS {
                write!(out, " {c:>6}")?;
            }
            writeln!(out)?;
            for (r, (label, _)) in SWEEP_ROWS.iter().enumerate() {
                write!(out, "{label:>6}")?;
                for v in TALK_TABLE[r] {
                    write!(out, " {v:>6}")?;
                }
                writeln!(out)?;
            }
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let alg = AlgKind::parse(args.alg.as_deref().unwrap_or("drr"))
        .map_err(|e| usage(format!("--alg: {e}")))?;
    let spec = args.flowsets.as_deref().unwrap_or(DEFAULT_FLOWSETS);
    let plan = make_plan(&args, alg, spec, Duration::from_secs(1))?;
    let cell = measure(&plan)?;
    if args.json {
        write_json(&mut out, false, std::slice::from_ref(&cell))?;
    } else {
        writeln!(
            out,
            "sched-bench: alg {} flowsets {} ({} flows), qmin {} qmax {}",
            cell.alg, cell.flowsets, cell.flows, cell.qmin, cell.qmax
        )?;
        if let Some(d) = cell.delay_ns {
            const CLASSIFIER: &str = "the classifier (one dynamic queue per source, mask src-ip)";
            let pipe = format!(
                "a pipe (link at 1 byte/ns, delay {})",
                crate::units::format_duration(Duration::from_nanos(d))
            );
            match plan.part {
                front::Part::Both => writeln!(out, "behind {CLASSIFIER} and {pipe}")?,
                front::Part::Classifier => writeln!(out, "behind {CLASSIFIER}, without the pipe")?,
                front::Part::Pipe => writeln!(out, "behind {pipe}, packets not classified")?,
            }
        }
        writeln!(
            out,
            "{} iterations x {} runs: {} enqueues, {} dequeues, {} drops per run",
            cell.iterations, cell.repeat, cell.enqueues, cell.dequeues, cell.drops
        )?;
        writeln!(
            out,
            "ns per pair: {:.1} (median; min {:.1}, max {:.1})",
            cell.ns_per_pair, cell.ns_per_pair_min, cell.ns_per_pair_max
        )?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
