//! `pspat pq-bench`: integer priority queues (Eiffel's cFFS and hFFS) against
//! the standard library's binary heap.
//!
//! # Method (the classic "hold" model)
//! A queue holds `--ranks N` elements. One operation pops the minimum and
//! pushes a new element ranked `popped + increment`, increments uniform in
//! `1..=2N`, so the live ranks stay spread over about `2N` consecutive values
//! (close to `N` distinct live ranks) and the minimum advances by about one
//! per operation. Increments come from a seeded table generated before
//! timing, and every queue replays the same table. Each repeat builds a fresh
//! queue, fills it, runs `N` untimed warm-up operations, then times `--ops`
//! operations with `std::time::Instant`; the median of `--repeat` runs is
//! reported as ns per operation (one push plus one pop).
//!
//! # The queues
//! * `cffs`: [`Cffs`], 3 levels (262 144 buckets per window), granularity
//!   the power of two that makes one window cover `2N` ranks (8 at 1M);
//!   memory 4 MiB of buckets plus 16 bytes per element.
//! * `hffs`: [`Hffs`], 3 levels, one fixed window sized to cover every rank
//!   the run can reach (so it sorts coarser than cFFS at the same N); ranks
//!   beyond it are clamped and counted.
//! * `heap`: `BinaryHeap<Reverse<(u64, u32)>>`, exact order.
//! * `gradient` (only when asked for, not in `all`): the gradient-queue
//!   experiment, shaped as `hffs`.
//!
//! The bucketed queues order by `rank / granularity` (FIFO within a bucket),
//! the heap exactly: the comparison is at the precision the queues are
//! configured for.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use pspat_sched::eiffel::{Cffs, GradientQueue, Hffs, OutOfWindow, QueueConfig};
use serde::Serialize;

/// Which queue to measure.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueKind {
    /// Circular hierarchical FFS.
    Cffs,
    /// Hierarchical FFS over one fixed window.
    Hffs,
    /// `std::collections::BinaryHeap`.
    Heap,
    /// The gradient queue experiment (fixed window, like hffs).
    Gradient,
    /// All three, side by side, with ratios to the heap.
    #[default]
    All,
}

impl QueueKind {
    fn name(self) -> &'static str {
        match self {
            QueueKind::Cffs => "cffs",
            QueueKind::Hffs => "hffs",
            QueueKind::Heap => "heap",
            QueueKind::Gradient => "gradient",
            QueueKind::All => "all",
        }
    }
}

/// Flags of `pspat pq-bench`.
#[derive(clap::Args)]
#[command(after_help = concat!(pspat_cli::units_help!(), "\n\nExit codes: 0 success; 1 the run failed; 2 usage or configuration error (nothing started)."))]
pub struct Args {
    /// Queue to measure (`all`: the three side by side).
    #[arg(long, value_enum, default_value_t = QueueKind::All)]
    pub queue: QueueKind,
    /// Live elements held (about as many distinct ranks), 1..=16000000.
    #[arg(long, default_value_t = 1_000_000, allow_negative_numbers = true)]
    pub ranks: u64,
    /// Timed push+pop pairs per repeat, 1..=10000000000.
    #[arg(long, default_value_t = 5_000_000, allow_negative_numbers = true)]
    pub ops: u64,
    /// Runs per queue; the median is reported, 1..=1000.
    #[arg(long, default_value_t = 5, allow_negative_numbers = true)]
    pub repeat: u32,
    /// Rank units per bucket for cffs and hffs (default: derived from --ranks
    /// and --ops, see the module docs), at least 1.
    #[arg(long, allow_negative_numbers = true)]
    pub granularity: Option<u64>,
    /// Seed of the increment table.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            queue: QueueKind::All,
            ranks: 1_000_000,
            ops: 5_000_000,
            repeat: 5,
            granularity: None,
            seed: 1,
            json: false,
        }
    }
}

const MAX_RANKS: u64 = 16_000_000;
const MAX_OPS: u64 = 10_000_000_000;
const LEVELS: u8 = 3;
/// Increments are replayed from a table of this many entries.
const TABLE: usize = 1 << 20;

#[derive(Serialize)]
struct Report {
    queue: &'static str,
    ranks: u64,
    ops: u64,
    repeat: u32,
    ns_per_op: f64,
    /// Median ns/op of the heap divided by this queue's (when measured);
    /// in the JSON it is `ratios["heap_over_<queue>"]`.
    #[serde(skip)]
    speedup_vs_heap: Option<f64>,
    /// Rank units per bucket (0 for the heap).
    granularity: u64,
    /// Pushes clamped into an edge bucket in the last run.
    clamped: u64,
    /// Checksum of popped ranks (keeps the work observable).
    checksum: u64,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(1..=MAX_RANKS).contains(&args.ranks) {
        return Err(crate::usage(format!(
            "--ranks must be 1..={MAX_RANKS}, got {}",
            args.ranks
        )));
    }
    if !(1..=MAX_OPS).contains(&args.ops) {
        return Err(crate::usage(format!(
            "--ops must be 1..={MAX_OPS}, got {}",
            args.ops
        )));
    }
    if !(1..=1000).contains(&args.repeat) {
        return Err(crate::usage(format!(
            "--repeat must be 1..=1000, got {}",
            args.repeat
        )));
    }
    if args.granularity == Some(0) {
        return Err(crate::usage("--granularity must be at least 1, got 0"));
    }
    let n = args.ranks;
    let mut rng = SplitMix(args.seed);
    let incs: Vec<u64> = (0..TABLE).map(|_| 1 + rng.next() % (2 * n)).collect();
    let init: Vec<u64> = (0..n).map(|_| rng.next() % (2 * n)).collect();

    let kinds: &[QueueKind] = match args.queue {
        QueueKind::All => &[QueueKind::Cffs, QueueKind::Hffs, QueueKind::Heap],
        QueueKind::Cffs => &[QueueKind::Cffs],
        QueueKind::Hffs => &[QueueKind::Hffs],
        QueueKind::Heap => &[QueueKind::Heap],
        QueueKind::Gradient => &[QueueKind::Gradient],
    };
    let mut reports = Vec::new();
    for &k in kinds {
        let mut times = Vec::with_capacity(args.repeat as usize);
        let mut last = (0, 0, 0);
        for _ in 0..args.repeat {
            let (ns, g, clamped, sum) = measure(k, &init, &incs, args.ops, args.granularity)?;
            times.push(ns);
            last = (g, clamped, sum);
        }
        times.sort_by(f64::total_cmp);
        reports.push(Report {
            queue: k.name(),
            ranks: n,
            ops: args.ops,
            repeat: args.repeat,
            ns_per_op: times[times.len() / 2],
            speedup_vs_heap: None,
            granularity: last.0,
            clamped: last.1,
            checksum: last.2,
        });
    }
    if let Some(heap) = reports
        .iter()
        .find(|r| r.queue == "heap")
        .map(|r| r.ns_per_op)
    {
        for r in reports.iter_mut().filter(|r| r.queue != "heap") {
            r.speedup_vs_heap = Some(heap / r.ns_per_op);
        }
    }
    print(&args, &reports)?;
    Ok(ExitCode::SUCCESS)
}

/// `pspat pq-bench --json`: one shape for one queue or all (docs/JSON.md).
#[derive(Serialize)]
struct PqBenchJson<'a> {
    schema_version: u32,
    command: &'static str,
    ranks: u64,
    ops: u64,
    repeat: u32,
    seed: u64,
    queues: &'a [Report],
    ratios: std::collections::BTreeMap<String, f64>,
}

fn print(args: &Args, reports: &[Report]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if args.json {
        let ratios: std::collections::BTreeMap<String, f64> = reports
            .iter()
            .filter_map(|r| Some((format!("heap_over_{}", r.queue), r.speedup_vs_heap?)))
            .collect();
        let doc = PqBenchJson {
            schema_version: crate::SCHEMA_VERSION,
            command: "pq-bench",
            ranks: args.ranks,
            ops: args.ops,
            repeat: args.repeat,
            seed: args.seed,
            queues: reports,
            ratios,
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{:<6} {:>10} {:>12} {:>10} {:>9} {:>6} {:>10}",
            "queue", "ranks", "ops", "ns/op", "vs heap", "gran", "clamped"
        )?;
        for r in reports {
            let ratio = r
                .speedup_vs_heap
                .map_or_else(|| "-".to_string(), |x| format!("{x:.2}x"));
            writeln!(
                out,
                "{:<6} {:>10} {:>12} {:>10.2} {:>9} {:>6} {:>10}",
                r.queue, r.ranks, r.ops, r.ns_per_op, ratio, r.granularity, r.clamped
            )?;
        }
        writeln!(
            out,
            "(median of {} runs; one op = one pop plus one push, hold model)",
            args.repeat
        )?;
    }
    Ok(())
}

/// One run: (ns per op, granularity, clamped pushes, checksum).
fn measure(
    kind: QueueKind,
    init: &[u64],
    incs: &[u64],
    ops: u64,
    granularity: Option<u64>,
) -> anyhow::Result<(f64, u64, u64, u64)> {
    let n = init.len() as u64;
    let mask = incs.len() - 1;
    let warm = n;
    match kind {
        QueueKind::Cffs => {
            let g = granularity
                .unwrap_or_else(|| QueueConfig::granularity_for(LEVELS, 2 * n).next_power_of_two());
            let cfg = queue_config(g);
            let mut q = Cffs::new(cfg, init.len())?;
            // Start the window at 0 (the fill is not in rank order), then
            // lift the floor: the hold model never goes below a popped rank.
            q.set_floor(0);
            for (id, &r) in init.iter().enumerate() {
                q.push(id as u32, r).context("cffs fill")?;
            }
            q.set_floor(u64::MAX);
            let step = |i: u64, q: &mut Cffs| -> anyhow::Result<u64> {
                let (id, r) = q.pop().context("cffs ran empty")?;
                q.push(id, r + incs[i as usize & mask])
                    .context("cffs push")?;
                Ok(r)
            };
            let (ns, sum) = hold_loop(warm, ops, |i| step(i, &mut q))?;
            Ok((ns, g, q.clamped(), sum))
        }
        QueueKind::Hffs => {
            // The minimum advances by about one rank per op (mean increment
            // N over N elements); leave 8N of headroom above the last one.
            let reach = (warm + ops).saturating_mul(2).saturating_add(8 * n);
            let g = granularity
                .unwrap_or_else(|| QueueConfig::granularity_for(LEVELS, reach).next_power_of_two());
            let mut q = Hffs::new(queue_config(g), init.len())?;
            for (id, &r) in init.iter().enumerate() {
                q.push(id as u32, r).context("hffs fill")?;
            }
            let step = |i: u64, q: &mut Hffs| -> anyhow::Result<u64> {
                let (id, r) = q.pop().context("hffs ran empty")?;
                q.push(id, r + incs[i as usize & mask])
                    .context("hffs push")?;
                Ok(r)
            };
            let (ns, sum) = hold_loop(warm, ops, |i| step(i, &mut q))?;
            Ok((ns, g, q.clamped(), sum))
        }
        QueueKind::Gradient => {
            let reach = (warm + ops).saturating_mul(2).saturating_add(8 * n);
            let g = granularity
                .unwrap_or_else(|| QueueConfig::granularity_for(LEVELS, reach).next_power_of_two());
            let mut q = GradientQueue::new(queue_config(g), init.len())?;
            for (id, &r) in init.iter().enumerate() {
                q.push(id as u32, r).context("gradient fill")?;
            }
            let step = |i: u64, q: &mut GradientQueue| -> anyhow::Result<u64> {
                let (id, r) = q.pop().context("gradient ran empty")?;
                q.push(id, r + incs[i as usize & mask])
                    .context("gradient push")?;
                Ok(r)
            };
            let (ns, sum) = hold_loop(warm, ops, |i| step(i, &mut q))?;
            Ok((ns, g, 0, sum))
        }
        QueueKind::Heap | QueueKind::All => {
            let mut q: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::with_capacity(init.len());
            for (id, &r) in init.iter().enumerate() {
                q.push(Reverse((r, id as u32)));
            }
            let step = |i: u64, q: &mut BinaryHeap<Reverse<(u64, u32)>>| {
                let Reverse((r, id)) = q.pop().context("heap ran empty")?;
                q.push(Reverse((r + incs[i as usize & mask], id)));
                anyhow::Ok(r)
            };
            let (ns, sum) = hold_loop(warm, ops, |i| step(i, &mut q))?;
            Ok((ns, 0, 0, sum))
        }
    }
}

/// The hold model's measurement: `warm` untimed steps, then `ops` timed
/// ones; returns ns per step and the checksum of popped ranks (kept alive so
/// the work cannot be optimised away).
fn hold_loop(
    warm: u64,
    ops: u64,
    mut step: impl FnMut(u64) -> anyhow::Result<u64>,
) -> anyhow::Result<(f64, u64)> {
    for i in 0..warm {
        step(i)?;
    }
    let t = Instant::now();
    let mut sum = 0u64;
    for i in warm..warm + ops {
        sum = sum.wrapping_add(step(i)?);
    }
    let ns = t.elapsed().as_nanos() as f64 / ops as f64;
    Ok((ns, black_box(sum)))
}

fn queue_config(granularity: u64) -> QueueConfig {
    QueueConfig {
        levels: LEVELS,
        granularity,
        out_of_window: OutOfWindow::Clamp,
    }
}

/// A small seeded generator (SplitMix64), so the CLI needs no RNG crate.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_queue_runs_and_agrees_on_size() {
        for k in [
            QueueKind::Cffs,
            QueueKind::Hffs,
            QueueKind::Heap,
            QueueKind::Gradient,
        ] {
            let mut rng = SplitMix(3);
            let n = 1000u64;
            let incs: Vec<u64> = (0..1024).map(|_| 1 + rng.next() % (2 * n)).collect();
            let init: Vec<u64> = (0..n).map(|_| rng.next() % (2 * n)).collect();
            let (_, _, clamped, sum) = measure(k, &init, &incs, 10_000, None).unwrap();
            assert!(sum > 0);
            assert_eq!(clamped, 0, "{k:?}: the window must cover the hold model");
        }
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        for args in [
            Args {
                ranks: 0,
                ..Args::default()
            },
            Args {
                ops: 0,
                ..Args::default()
            },
            Args {
                repeat: 0,
                ..Args::default()
            },
            Args {
                granularity: Some(0),
                ..Args::default()
            },
        ] {
            let e = run(args).unwrap_err();
            assert!(e.downcast_ref::<crate::UsageError>().is_some());
        }
    }
}
