//! `pspat machine`: the facts every benchmark figure must carry.
//!
//! Prints the CPU model (`/proc/cpuinfo`), the CPUs online
//! (`/sys/devices/system/cpu/online`), every cache level with its size and
//! the CPUs that share it (`/sys/devices/system/cpu/cpu*/cache/index*/`, the
//! kernel's `Documentation/ABI/testing/sysfs-devices-system-cpu`), memory
//! (`/proc/meminfo`), the kernel release, the transparent-huge-page setting
//! and the load average, then measures a **dependent-load latency curve**
//! and the **CPU cost of a wake-up**.
//!
//! # The latency curve
//! For each buffer size, the buffer is cut into 64-byte lines, and each line
//! holds the index of the next one. The indices form a single random cycle
//! through every line (Sattolo's algorithm, a uniformly random cyclic
//! permutation: Sattolo, "An algorithm to generate a random cyclic
//! permutation", Information Processing Letters 22(6), 1986), so every load
//! depends on the one before and no hardware prefetcher can guess the next
//! address. After one untimed walk of the whole cycle (warm-up), a run times
//! `max(2 × lines, floor)` loads with `std::time::Instant`; the result is ns
//! per load, the median of 5 runs. On a shared machine the thread may wait
//! for its CPU in the middle of a run: the time it spent runnable but not
//! running (`/proc/thread-self/schedstat`) is subtracted, the wall figure
//! and the waiting share are reported beside it, and the table warns. The
//! other work still evicts the caches, so a loaded machine's curve is an
//! upper bound. `std::hint::black_box` hides the buffer
//! from the optimiser before the walk and consumes the final index after it,
//! so the chain is neither folded nor dropped. The loop's own work (a bounds
//! check and a counter) overlaps the load and adds well under a nanosecond.
//!
//! The `pspat` binary allocates blocks of 1 MiB or more on transparent huge
//! pages when the kernel allows it (`pspat::HugePageAlloc`), and so do these
//! buffers: from 1 MiB on, the curve shows cache and memory latency with few
//! TLB misses, as the scheduler's arena sees them. Each point's cost:
//! full mode 17 sizes (16 KiB to 64 MiB) with a floor of 2 M loads per run,
//! a few seconds in all; `--quick` 4 sizes with a floor of 100 k loads.
//!
//! Complexity: O(lines) memory and set-up per size, O(loads) per run.
//!
//! # The cost of a wake-up
//! A shaper that sleeps until its next release time pays one timed wake-up
//! per sleep, and on a virtual machine that cost varies by an order of
//! magnitude between hosts (each return from an idle vCPU may take the
//! hypervisor several exits, for the timer among others). The thread sleeps
//! 1 ms at a time (`std::thread::sleep`, a timer it arms itself), then parks
//! while a second thread on another core, if there is one, wakes it every
//! 1 ms (no timer of its own), then while a thread on its own core does
//! (the core is busy when the wake-up comes); for each, the thread's on-CPU time
//! (`/proc/thread-self/schedstat`, first field) per wake-up. The kernel
//! charges a woken thread from its wake-up, not from its switch-in, so the
//! idle core's way back from the interrupt is in the figure, as it is in the
//! arbiter's. Full mode 1 000 wake-ups of each kind (about 3 s), `--quick`
//! 100.
//!
//! The process pins itself to one core (`--core`, default the last one
//! `core_affinity` reports) before measuring, and says so: on a 2-core
//! machine the benchmarks put the arbiter on core 0 and everything else on
//! core 1, so the last core is the one a quiet system leaves freest.

use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use serde::Serialize;

use crate::usage;

/// Flags of `pspat machine`.
#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object (`schema_version` 1) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A short run for CI: 4 buffer sizes, short runs.
    #[arg(long)]
    pub quick: bool,
    /// Core to pin the measuring thread to (default: the last core).
    #[arg(long)]
    pub core: Option<usize>,
}

/// Bytes per element of the chase: one cache line on x86_64 and most arm64.
const LINE_BYTES: usize = 64;

/// Runs per buffer size; the median is reported.
const RUNS: usize = 5;

/// Buffer sizes of the full curve (bytes).
const FULL_SIZES: [usize; 17] = [
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    3 << 20,
    4 << 20,
    6 << 20,
    8 << 20,
    12 << 20,
    16 << 20,
    24 << 20,
    32 << 20,
    64 << 20,
];

/// Buffer sizes of `--quick`: L1, L2, a few MiB, beyond most L3s.
const QUICK_SIZES: [usize; 4] = [16 << 10, 256 << 10, 4 << 20, 32 << 20];

/// Timed loads per run at least (full mode, `--quick`).
const FULL_MIN_LOADS: usize = 2_000_000;
const QUICK_MIN_LOADS: usize = 100_000;

/// One cache line of the chase: the index of the next line, padded.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line {
    next: usize,
    _pad: [usize; LINE_BYTES / 8 - 1],
}

/// The whole report; `--json` prints it as is.
#[derive(Serialize)]
struct Report {
    schema_version: u32,
    /// `"machine"`, as every command's JSON names itself.
    command: &'static str,
    cpu: Cpu,
    cores: Cores,
    caches: Vec<Cache>,
    memory: Memory,
    kernel: Kernel,
    /// `/sys/kernel/mm/transparent_hugepage/enabled`, the bracketed choice.
    transparent_hugepage: Option<String>,
    /// `/proc/loadavg`: 1, 5 and 15 minutes, read before measuring.
    loadavg_before: Option<[f64; 3]>,
    /// Same, read after measuring.
    loadavg_after: Option<[f64; 3]>,
    pinning: Pinning,
    latency: Latency,
    /// CPU per wake-up; `None` without `/proc/thread-self/schedstat`.
    wake_up: Option<WakeUp>,
}

#[derive(Serialize, Default)]
struct Cpu {
    model_name: Option<String>,
    vendor_id: Option<String>,
    family: Option<u32>,
    model: Option<u32>,
    stepping: Option<u32>,
    /// `cpu MHz` of the first CPU as the kernel reported it (varies).
    mhz: Option<f64>,
    /// The `hypervisor` flag: a virtual machine.
    hypervisor: bool,
    /// Vector extensions present, of avx2, avx512f, sve, neon/asimd.
    vector: Vec<String>,
}

#[derive(Serialize)]
struct Cores {
    /// `/sys/devices/system/cpu/online`, as the kernel writes it.
    online: Option<String>,
    online_count: Option<usize>,
    /// `std::thread::available_parallelism` before pinning (the process's
    /// affinity mask as started).
    available_to_process: Option<usize>,
}

/// One cache, as seen from the CPUs in `shared_cpu_list`.
#[derive(Serialize, Clone, Debug, PartialEq)]
struct Cache {
    level: u32,
    /// `Data`, `Instruction` or `Unified`.
    kind: String,
    size_bytes: u64,
    ways: Option<u32>,
    line_bytes: Option<u32>,
    /// Every group of CPUs that shares one instance, e.g. `["0", "1"]` for a
    /// private cache on each of two CPUs, `["0-1"]` for one shared cache.
    shared_cpu_lists: Vec<String>,
}

#[derive(Serialize)]
struct Memory {
    total_bytes: Option<u64>,
    available_bytes: Option<u64>,
}

#[derive(Serialize)]
struct Kernel {
    release: Option<String>,
    version: Option<String>,
}

#[derive(Serialize)]
struct Pinning {
    core: usize,
    pinned: bool,
}

#[derive(Serialize)]
struct Latency {
    method: &'static str,
    /// What `ns_per_load_*` divide: `on-cpu` (wall time minus the time the
    /// thread waited for a CPU, from `/proc/thread-self/schedstat`) or
    /// `wall` when that file is missing.
    clock: &'static str,
    line_bytes: usize,
    runs_per_size: usize,
    min_loads_per_run: usize,
    points: Vec<LatencyPoint>,
}

#[derive(Serialize)]
struct LatencyPoint {
    size_bytes: usize,
    loads_per_run: usize,
    ns_per_load_median: f64,
    ns_per_load_min: f64,
    ns_per_load_max: f64,
    /// Wall time per load, median of the same runs.
    wall_ns_per_load_median: f64,
    /// Share of the runs' wall time spent waiting for a CPU (0 on a quiet
    /// machine; `None` without schedstat).
    cpu_wait_share: Option<f64>,
}

/// The on-CPU cost of a thread's wake-ups (module docs, *The cost of a
/// wake-up*).
#[derive(Serialize)]
struct WakeUp {
    /// Time between wake-ups (ns).
    period_ns: u64,
    /// Wake-ups measured of each kind.
    wake_ups: u32,
    /// On-CPU µs per wake-up of a thread that sleeps on its own timer.
    timed_sleep_cpu_us: f64,
    /// Wake-ups per second of wall time the timed sleeps reached.
    timed_sleep_per_s: f64,
    /// On-CPU µs per wake-up of a thread woken by another thread (`None`
    /// with a single core: the waker would share it).
    woken_by_thread_cpu_us: Option<f64>,
    /// Core the waking thread ran on.
    waker_core: Option<usize>,
    /// On-CPU µs per wake-up of a thread woken by another thread on its own
    /// core: the core is busy with the waker when the wake-up comes, so no
    /// idle core returns.
    woken_on_own_core_cpu_us: Option<f64>,
}

/// Runs `pspat machine`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let core = match args.core {
        Some(c) if cores.iter().any(|id| id.id == c) => c,
        Some(c) => {
            let ids: Vec<String> = cores.iter().map(|id| id.id.to_string()).collect();
            return Err(usage(format!(
                "--core {c}: not a core this process may run on (available: {})",
                if ids.is_empty() {
                    "none reported".to_string()
                } else {
                    ids.join(",")
                }
            )));
        }
        None => cores.last().map_or(0, |id| id.id),
    };
    // Read before pinning: afterwards the process's mask holds one CPU.
    let available_to_process = std::thread::available_parallelism().ok().map(|n| n.get());
    let pinned = core_affinity::set_for_current(core_affinity::CoreId { id: core });
    if !args.json {
        if pinned {
            println!("pinning: measuring thread on core {core}");
        } else {
            println!("pinning: could not pin to core {core}; the curve is unpinned");
        }
    }

    let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
    let online = read("/sys/devices/system/cpu/online").map(|s| s.trim().to_string());
    let online_cpus = online.as_deref().and_then(parse_cpu_list);
    let meminfo = read("/proc/meminfo").unwrap_or_default();
    let loadavg_before = read("/proc/loadavg").and_then(|s| parse_loadavg(&s));

    let (sizes, min_loads): (&[usize], usize) = if args.quick {
        (&QUICK_SIZES, QUICK_MIN_LOADS)
    } else {
        (&FULL_SIZES, FULL_MIN_LOADS)
    };
    let mut points = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let point = measure(size, min_loads);
        if !args.json {
            // Progress on stderr: the full curve takes seconds.
            eprint!(".");
        }
        points.push(point);
    }
    let wake_up = measure_wake_up(
        if args.quick { 100 } else { 1_000 },
        core,
        cores.iter().map(|id| id.id).find(|&c| c != core),
    );
    if !args.json {
        eprintln!();
    }

    let report = Report {
        schema_version: 1,
        command: "machine",
        cpu: parse_cpuinfo(&cpuinfo),
        cores: Cores {
            online_count: online_cpus.as_ref().map(Vec::len),
            online,
            available_to_process,
        },
        caches: read_caches(
            Path::new("/sys/devices/system/cpu"),
            online_cpus.as_deref().unwrap_or(&[]),
        ),
        memory: Memory {
            total_bytes: meminfo_bytes(&meminfo, "MemTotal"),
            available_bytes: meminfo_bytes(&meminfo, "MemAvailable"),
        },
        kernel: Kernel {
            release: read("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()),
            version: read("/proc/sys/kernel/version").map(|s| s.trim().to_string()),
        },
        transparent_hugepage: read("/sys/kernel/mm/transparent_hugepage/enabled")
            .and_then(|s| bracketed(&s)),
        loadavg_before,
        loadavg_after: read("/proc/loadavg").and_then(|s| parse_loadavg(&s)),
        pinning: Pinning { core, pinned },
        latency: Latency {
            method: "random single-cycle pointer chase over 64-byte lines; \
                     ns per dependent load, median of 5 runs",
            clock: if run_queue_wait_ns().is_some() {
                "on-cpu"
            } else {
                "wall"
            },
            line_bytes: LINE_BYTES,
            runs_per_size: RUNS,
            min_loads_per_run: min_loads,
            points,
        },
        wake_up,
    };

    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write_table(&mut out, &report)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Builds one random cycle over `size / 64` lines and times the chase.
fn measure(size: usize, min_loads: usize) -> LatencyPoint {
    let lines = (size / LINE_BYTES).max(2);
    let next = random_cycle(lines, 0x9e37_79b9_7f4a_7c15 ^ size as u64);
    let buf: Vec<Line> = next
        .into_iter()
        .map(|n| Line {
            next: n,
            _pad: [0; LINE_BYTES / 8 - 1],
        })
        .collect();
    let loads = (2 * lines).max(min_loads);
    // Warm-up: one walk of the whole cycle brings the buffer into whatever
    // cache holds it and faults in its pages.
    black_box(chase(black_box(&buf), 0, lines));
    let mut on_cpu = Vec::with_capacity(RUNS);
    let mut wall = Vec::with_capacity(RUNS);
    let (mut wall_total, mut wait_total, mut have_wait) = (0.0, 0.0, true);
    for _ in 0..RUNS {
        // The two reads sit inside the timed span, so a wait that starts in
        // either of them is in both the wait and the wall time (their own
        // few microseconds are negligible against a run's milliseconds).
        let t = Instant::now();
        let before = run_queue_wait_ns();
        let end = chase(black_box(&buf), 0, loads);
        let after = run_queue_wait_ns();
        let elapsed = t.elapsed().as_secs_f64() * 1e9;
        black_box(end);
        let waited = match (before, after) {
            (Some(b), Some(a)) => (a.saturating_sub(b) as f64).min(elapsed),
            _ => {
                have_wait = false;
                0.0
            }
        };
        wall_total += elapsed;
        wait_total += waited;
        wall.push(elapsed / loads as f64);
        on_cpu.push((elapsed - waited) / loads as f64);
    }
    on_cpu.sort_by(f64::total_cmp);
    wall.sort_by(f64::total_cmp);
    LatencyPoint {
        size_bytes: size,
        loads_per_run: loads,
        ns_per_load_median: on_cpu[RUNS / 2],
        ns_per_load_min: on_cpu[0],
        ns_per_load_max: on_cpu[RUNS - 1],
        wall_ns_per_load_median: wall[RUNS / 2],
        cpu_wait_share: have_wait.then(|| wait_total / wall_total),
    }
}

/// The calling thread's on-CPU time so far (first field of
/// `/proc/thread-self/schedstat`).
fn on_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Times `wake_ups` sleeps of 1 ms on the calling thread's own timer, then
/// as many parks ended by a thread pinned to `other_core`, then by one
/// pinned to `own_core` (the calling thread's).
fn measure_wake_up(wake_ups: u32, own_core: usize, other_core: Option<usize>) -> Option<WakeUp> {
    let (cpu_before, started) = (on_cpu_ns()?, Instant::now());
    for _ in 0..wake_ups {
        std::thread::sleep(WAKE_PERIOD);
    }
    let (cpu_after, elapsed) = (on_cpu_ns()?, started.elapsed());
    let woken_by_thread_cpu_us = other_core.and_then(|core| woken_by_thread(wake_ups, core));
    Some(WakeUp {
        period_ns: WAKE_PERIOD.as_nanos() as u64,
        wake_ups,
        timed_sleep_cpu_us: per_wake_up_us(cpu_before, cpu_after, wake_ups),
        timed_sleep_per_s: f64::from(wake_ups) / elapsed.as_secs_f64(),
        woken_by_thread_cpu_us,
        waker_core: woken_by_thread_cpu_us.and(other_core),
        woken_on_own_core_cpu_us: woken_by_thread(wake_ups, own_core),
    })
}

/// The period of every wake-up [`measure_wake_up`] times.
const WAKE_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);

fn per_wake_up_us(before_ns: u64, after_ns: u64, wake_ups: u32) -> f64 {
    after_ns.saturating_sub(before_ns) as f64 / 1e3 / f64::from(wake_ups)
}

/// On-CPU µs per park of the calling thread ended by a thread pinned to
/// `waker_core` every [`WAKE_PERIOD`]; `None` if either cannot be measured.
fn woken_by_thread(wake_ups: u32, waker_core: usize) -> Option<f64> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let sleeper = std::thread::current();
    // Relaxed: the flag only ends the waker's loop; join orders the rest.
    let done = Arc::new(AtomicBool::new(false));
    let waker_done = Arc::clone(&done);
    let handle = std::thread::Builder::new()
        .name("pspat-waker".into())
        .spawn(move || {
            core_affinity::set_for_current(core_affinity::CoreId { id: waker_core });
            while !waker_done.load(Ordering::Relaxed) {
                std::thread::sleep(WAKE_PERIOD);
                sleeper.unpark();
            }
        })
        .ok()?;
    // A park may also end spuriously or on a token left from before:
    // count only the parks, which is what a wake-up costs either way.
    let before = on_cpu_ns();
    for _ in 0..wake_ups {
        std::thread::park();
    }
    let after = on_cpu_ns();
    done.store(true, Ordering::Relaxed);
    let _ = handle.join();
    Some(per_wake_up_us(before?, after?, wake_ups))
}

/// The calling thread's total time spent runnable but waiting for a CPU
/// (second field of `/proc/thread-self/schedstat`, Linux 3.17 and later;
/// the kernel's `Documentation/scheduler/sched-stats.rst`). The kernel adds
/// a wait when the thread is switched in, so a value read by the running
/// thread is complete up to that instant.
fn run_queue_wait_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Follows `loads` links from `start`; each load's address is the value of
/// the one before.
#[inline(never)]
fn chase(buf: &[Line], start: usize, loads: usize) -> usize {
    let mut i = start;
    for _ in 0..loads {
        i = buf[i].next;
    }
    i
}

/// A uniformly random cyclic permutation of `0..n` (Sattolo's algorithm):
/// following `next` from any index visits all `n` before returning.
fn random_cycle(n: usize, seed: u64) -> Vec<usize> {
    let mut next: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..n).rev() {
        // j uniform in 0..i (strictly below i: that is what makes one cycle).
        let j = (rng.next() % i as u64) as usize;
        next.swap(i, j);
    }
    next
}

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): enough to scatter addresses, seeded for
/// repeatable cycles.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The first CPU's fields of `/proc/cpuinfo`.
fn parse_cpuinfo(text: &str) -> Cpu {
    let mut cpu = Cpu::default();
    // The first block (up to the first blank line) describes CPU 0.
    for line in text.lines().take_while(|l| !l.trim().is_empty()) {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "model name" => cpu.model_name = Some(value.to_string()),
            "vendor_id" => cpu.vendor_id = Some(value.to_string()),
            "cpu family" => cpu.family = value.parse().ok(),
            "model" => cpu.model = value.parse().ok(),
            "stepping" => cpu.stepping = value.parse().ok(),
            "cpu MHz" => cpu.mhz = value.parse().ok(),
            "flags" | "Features" => {
                let flags: Vec<&str> = value.split_whitespace().collect();
                cpu.hypervisor = flags.contains(&"hypervisor");
                cpu.vector = ["avx2", "avx512f", "sve", "asimd", "neon"]
                    .iter()
                    .filter(|f| flags.contains(f))
                    .map(|f| f.to_string())
                    .collect();
            }
            _ => {}
        }
    }
    cpu
}

/// Parses a kernel CPU list such as `0-3,6,8-9`; `None` if malformed.
fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Parses a sysfs cache size such as `32K`, `512K`, `32768K`, `1M`.
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.as_bytes().last()? {
        b'K' => (&t[..t.len() - 1], 1u64 << 10),
        b'M' => (&t[..t.len() - 1], 1 << 20),
        b'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// A `/proc/meminfo` field in bytes (the file gives kB).
fn meminfo_bytes(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        kb.checked_mul(1024)
    })
}

/// The first three fields of `/proc/loadavg`.
fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// The bracketed choice of a sysfs setting such as `always [madvise] never`.
fn bracketed(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

/// Every cache the online CPUs see, one entry per (level, type, size),
/// listing each distinct group of CPUs that shares one instance.
fn read_caches(root: &Path, cpus: &[usize]) -> Vec<Cache> {
    let mut caches: Vec<Cache> = Vec::new();
    for &cpu in cpus {
        let dir = root.join(format!("cpu{cpu}/cache"));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut indexes: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("index"))
            })
            .collect();
        indexes.sort();
        for index in indexes {
            let field = |name: &str| {
                std::fs::read_to_string(index.join(name))
                    .ok()
                    .map(|s| s.trim().to_string())
            };
            let (Some(level), Some(kind), Some(size)) = (
                field("level").and_then(|s| s.parse().ok()),
                field("type"),
                field("size").and_then(|s| parse_size(&s)),
            ) else {
                continue;
            };
            let shared = field("shared_cpu_list").unwrap_or_else(|| cpu.to_string());
            let ways = field("ways_of_associativity").and_then(|s| s.parse().ok());
            let line_bytes = field("coherency_line_size").and_then(|s| s.parse().ok());
            match caches
                .iter_mut()
                .find(|c| c.level == level && c.kind == kind && c.size_bytes == size)
            {
                Some(c) => {
                    if !c.shared_cpu_lists.contains(&shared) {
                        c.shared_cpu_lists.push(shared);
                    }
                }
                None => caches.push(Cache {
                    level,
                    kind,
                    size_bytes: size,
                    ways,
                    line_bytes,
                    shared_cpu_lists: vec![shared],
                }),
            }
        }
    }
    caches.sort_by(|a, b| (a.level, &a.kind).cmp(&(b.level, &b.kind)));
    caches
}

/// `16 KiB`, `3 MiB`, `1.5 GiB`.
fn human_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if b >= unit {
            let v = b as f64 / unit as f64;
            return if b.is_multiple_of(unit) {
                format!("{} {name}", b / unit)
            } else {
                format!("{v:.1} {name}")
            };
        }
    }
    format!("{b} B")
}

fn write_table(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "unknown".to_string());
    let c = &r.cpu;
    writeln!(out, "cpu:       {}", opt(&c.model_name))?;
    writeln!(
        out,
        "           vendor {}, family {}, model {}, stepping {}, {} MHz reported{}{}",
        opt(&c.vendor_id),
        c.family.map_or("?".into(), |v| v.to_string()),
        c.model.map_or("?".into(), |v| v.to_string()),
        c.stepping.map_or("?".into(), |v| v.to_string()),
        c.mhz.map_or("?".into(), |v| format!("{v:.0}")),
        if c.hypervisor {
            "; virtual machine (hypervisor flag)"
        } else {
            ""
        },
        if c.vector.is_empty() {
            String::new()
        } else {
            format!("; {}", c.vector.join(", "))
        },
    )?;
    writeln!(
        out,
        "cores:     online {} ({} CPUs), {} available to this process",
        opt(&r.cores.online),
        r.cores.online_count.map_or("?".into(), |v| v.to_string()),
        r.cores
            .available_to_process
            .map_or("?".into(), |v| v.to_string()),
    )?;
    if r.caches.is_empty() {
        writeln!(out, "caches:    not reported by sysfs")?;
    }
    for cache in &r.caches {
        let shape = match (cache.ways, cache.line_bytes) {
            (Some(w), Some(l)) => format!(", {w}-way, {l} B lines"),
            _ => String::new(),
        };
        writeln!(
            out,
            "cache:     L{} {:<11} {:>9}{shape}; one per CPU group {}",
            cache.level,
            cache.kind,
            human_bytes(cache.size_bytes),
            cache.shared_cpu_lists.join(" | "),
        )?;
    }
    writeln!(
        out,
        "memory:    {} total, {} available",
        r.memory.total_bytes.map_or("?".into(), human_bytes),
        r.memory.available_bytes.map_or("?".into(), human_bytes),
    )?;
    writeln!(
        out,
        "kernel:    {} {}",
        opt(&r.kernel.release),
        opt(&r.kernel.version)
    )?;
    writeln!(out, "THP:       {}", opt(&r.transparent_hugepage))?;
    let la =
        |l: &Option<[f64; 3]>| l.map_or("?".into(), |[a, b, c]| format!("{a:.2} {b:.2} {c:.2}"));
    writeln!(
        out,
        "load avg:  {} before, {} after (1, 5, 15 min)",
        la(&r.loadavg_before),
        la(&r.loadavg_after)
    )?;
    writeln!(
        out,
        "\ndependent-load latency ({}; at least {} loads per run; core {}{}; \
         clock {}):",
        r.latency.method,
        r.latency.min_loads_per_run,
        r.pinning.core,
        if r.pinning.pinned { "" } else { ", NOT pinned" },
        r.latency.clock,
    )?;
    writeln!(
        out,
        "{:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "buffer", "ns/load", "min", "max", "wall", "cpu wait"
    )?;
    for p in &r.latency.points {
        writeln!(
            out,
            "{:>10} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10}",
            human_bytes(p.size_bytes as u64),
            p.ns_per_load_median,
            p.ns_per_load_min,
            p.ns_per_load_max,
            p.wall_ns_per_load_median,
            p.cpu_wait_share
                .map_or("?".into(), |w| format!("{:.0}%", w * 100.0)),
        )?;
    }
    if r.latency
        .points
        .iter()
        .any(|p| p.cpu_wait_share.is_some_and(|w| w > 0.01))
    {
        writeln!(
            out,
            "note: the thread waited for its CPU during the runs (other work on core {}); \
             ns/load leaves the waits out, but the other work also evicts the caches: \
             measure on a quiet machine",
            r.pinning.core
        )?;
    }
    match &r.wake_up {
        None => writeln!(
            out,
            "\nwake-up cost: not measured (no /proc/thread-self/schedstat)"
        )?,
        Some(w) => {
            writeln!(
                out,
                "\nwake-up cost (on-CPU time of the woken thread, {} wake-ups, one every {} µs):",
                w.wake_ups,
                w.period_ns / 1_000
            )?;
            writeln!(
                out,
                "  sleep on its own timer   {:>6.1} µs per wake-up ({:.0} wake-ups/s)",
                w.timed_sleep_cpu_us, w.timed_sleep_per_s
            )?;
            match (w.woken_by_thread_cpu_us, w.waker_core) {
                (Some(us), Some(core)) => writeln!(
                    out,
                    "  woken by a thread        {us:>6.1} µs per wake-up (waker on core {core})"
                )?,
                _ => writeln!(out, "  woken by a thread        not measured (one core)")?,
            }
            if let Some(us) = w.woken_on_own_core_cpu_us {
                writeln!(
                    out,
                    "  woken on its own core    {us:>6.1} µs per wake-up (the waker shares core {}: no idle core to wake)",
                    r.pinning.core
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_up_cost_is_measured_for_both_kinds_and_only_with_a_second_core() {
        let core = core_affinity::get_core_ids()
            .unwrap_or_default()
            .first()
            .map_or(0, |id| id.id);
        let Some(alone) = measure_wake_up(5, core, None) else {
            // No schedstat on this kernel: nothing to measure.
            assert!(on_cpu_ns().is_none());
            return;
        };
        assert_eq!(alone.wake_ups, 5);
        assert!(alone.timed_sleep_cpu_us > 0.0);
        // Five 1 ms sleeps cannot run faster than 1 000 a second.
        assert!(
            alone.timed_sleep_per_s <= 1_000.0,
            "{}",
            alone.timed_sleep_per_s
        );
        assert!(alone.woken_by_thread_cpu_us.is_none() && alone.waker_core.is_none());
        assert!(alone.woken_on_own_core_cpu_us.is_some_and(|us| us > 0.0));
        let woken = measure_wake_up(5, core, Some(core)).expect("schedstat was readable above");
        assert!(woken.woken_by_thread_cpu_us.is_some_and(|us| us > 0.0));
        assert_eq!(woken.waker_core, Some(core));
    }

    #[test]
    fn random_cycle_visits_every_index_once() {
        for n in [2, 3, 17, 1000] {
            let next = random_cycle(n, 7);
            let mut seen = vec![false; n];
            let mut i = 0;
            for _ in 0..n {
                assert!(!seen[i], "n={n}: index {i} visited twice");
                seen[i] = true;
                i = next[i];
            }
            assert_eq!(i, 0, "n={n}: the walk must close after n steps");
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn chase_follows_links() {
        let next = random_cycle(64, 1);
        let buf: Vec<Line> = next
            .iter()
            .map(|&n| Line {
                next: n,
                _pad: [0; 7],
            })
            .collect();
        assert_eq!(chase(&buf, 0, 64), 0);
        assert_eq!(chase(&buf, 0, 1), next[0]);
        assert_eq!(chase(&buf, 0, 2), next[next[0]]);
        assert_eq!(std::mem::size_of::<Line>(), LINE_BYTES);
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn sizes_and_meminfo_parse() {
        assert_eq!(parse_size("32K"), Some(32 << 10));
        assert_eq!(parse_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("64"), Some(64));
        assert_eq!(parse_size("x"), None);
        let mi = "MemTotal:       24683656 kB\nMemFree: 1 kB\nMemAvailable:   23963100 kB\n";
        assert_eq!(meminfo_bytes(mi, "MemTotal"), Some(24683656 * 1024));
        assert_eq!(meminfo_bytes(mi, "MemAvailable"), Some(23963100 * 1024));
        assert_eq!(meminfo_bytes(mi, "Cached"), None);
        assert_eq!(
            parse_loadavg("0.59 0.72 0.38 1/200 123\n"),
            Some([0.59, 0.72, 0.38])
        );
        assert_eq!(
            bracketed("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(human_bytes(16 << 10), "16 KiB");
        assert_eq!(human_bytes(3 << 20), "3 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn cpuinfo_first_block() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n\
                    model name\t: AMD EPYC\nstepping\t: 1\ncpu MHz\t\t: 2445.412\n\
                    flags\t\t: fpu sse2 avx2 hypervisor\n\nprocessor\t: 1\nmodel name\t: other\n";
        let cpu = parse_cpuinfo(text);
        assert_eq!(cpu.model_name.as_deref(), Some("AMD EPYC"));
        assert_eq!(cpu.vendor_id.as_deref(), Some("AuthenticAMD"));
        assert_eq!(
            (cpu.family, cpu.model, cpu.stepping),
            (Some(25), Some(1), Some(1))
        );
        assert!(cpu.hypervisor);
        assert_eq!(cpu.vector, vec!["avx2".to_string()]);
    }

    #[test]
    fn caches_group_cpus_sharing_an_instance() {
        let root = std::env::temp_dir().join(format!("pspat-machine-test-{}", std::process::id()));
        let write = |cpu: usize, idx: usize, level: &str, kind: &str, size: &str, shared: &str| {
            let d = root.join(format!("cpu{cpu}/cache/index{idx}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [
                ("level", level),
                ("type", kind),
                ("size", size),
                ("shared_cpu_list", shared),
                ("ways_of_associativity", "8"),
                ("coherency_line_size", "64"),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        for cpu in 0..2 {
            write(cpu, 0, "1", "Data", "32K", &cpu.to_string());
            write(cpu, 1, "2", "Unified", "512K", &cpu.to_string());
            write(cpu, 2, "3", "Unified", "32768K", "0-1");
        }
        let caches = read_caches(&root, &[0, 1]);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(caches.len(), 3);
        assert_eq!(caches[0].level, 1);
        assert_eq!(caches[0].shared_cpu_lists, vec!["0", "1"]);
        assert_eq!(caches[2].size_bytes, 32 << 20);
        assert_eq!(caches[2].shared_cpu_lists, vec!["0-1"]);
        assert_eq!(caches[2].ways, Some(8));
    }
}
