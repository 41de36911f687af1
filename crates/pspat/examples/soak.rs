//! A soak with faults: many clients for a long time, clients created and
//! dropped continuously, backends that panic now and then, and the
//! runtime's promises checked throughout (issue 17, `docs/RELIABILITY.md`).
//!
//! The run is a sequence of *epochs*, each a fresh [`Runtime`] in one of
//! four shapes (the arbiter transmits; one dispatcher; client-transmit
//! mode; a 1 Gbit/s link with a 20 ms drain deadline). In most epochs one
//! backend panics at a random moment: the runtime then fails and closes,
//! every client sees `Closed`, and the soak shuts the runtime down, checks
//! it and starts the next epoch. Otherwise the epoch ends after its length
//! and shuts down cleanly. Checked:
//!
//! * every [`Runtime::stats`] snapshot (every 100 ms) is conserved;
//! * at every shutdown: conserved, nothing in flight, the runtime's
//!   `submitted` equals what the clients were told was accepted, and its
//!   `transmitted` equals what the backends received in calls that
//!   returned (a panicked call's batch is counted as dropped, `"fault"`);
//!   so *lost* = accepted − transmitted − dropped must be 0;
//! * a fault is reported by `shutdown` exactly when one was injected;
//! * reconfiguration: every `--reconfigure` seconds a change is sent
//!   through [`pspat::Control`] (alternately a weight change of one of the
//!   256 flows, and the removal and re-creation of one flow, whose queued
//!   packets are dropped as `flow_removed`); every change sent to a
//!   runtime that did not fail must be applied within a second;
//! * resident memory (`VmRSS` of `/proc/self/status`, sampled every
//!   second) is flat: the largest sample of the second half of the run is
//!   at most 10% + 16 MiB above the largest of the first half.
//!
//! Clients: `--clients` alive at once, spread over `--workers` threads;
//! each worker drops one of its clients and creates a new one every few
//! bursts, so ids are reused all the time (`max_clients` is only 64 above
//! `--clients`).
//!
//! Parameters (flag, or environment variable; defaults in brackets):
//! `--duration SECS` / `SOAK_SECONDS` \[600\], `--clients N` /
//! `SOAK_CLIENTS` \[1000\], `--workers N` / `SOAK_WORKERS` \[8\],
//! `--epoch SECS` / `SOAK_EPOCH_SECONDS` \[5\], `--fault-chance P` /
//! `SOAK_FAULT_CHANCE` \[0.7\], `--reconfigure SECS` /
//! `SOAK_RECONFIGURE_SECONDS` \[2\], `--seed N` / `SOAK_SEED` \[1\].
//!
//! Prints progress on stderr once a second and a summary on stdout; exits
//! 1 if any check failed, 2 on a bad parameter.
//!
//! ```text
//! cargo run --release -p pspat --example soak -- --duration 120
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as WallInstant};

use pspat::{
    Client, Control, Reconfigurable, Runtime, RuntimeConfig, ShutdownPolicy, Submission,
    SubmitError, TxBackend, TxMode, TxPacket,
};
use pspat_sched::{
    AlgKind, AnyScheduler, FlowId, FlowParams, FlowTable, Instant, Scheduler, SchedulerConfig,
};

/// The panic message of an injected fault (the panic hook stays quiet for it).
const INJECTED: &str = "soak: injected backend fault";

struct Params {
    duration: Duration,
    clients: usize,
    workers: usize,
    epoch: Duration,
    fault_chance: f64,
    reconfigure: Duration,
    seed: u64,
}

fn params() -> Result<Params, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str, env: &str, default: &str| -> Result<String, String> {
        if let Some(i) = args.iter().position(|a| a == flag) {
            return args
                .get(i + 1)
                .cloned()
                .ok_or_else(|| format!("{flag}: a value is missing"));
        }
        Ok(std::env::var(env).unwrap_or_else(|_| default.to_string()))
    };
    for a in args.iter().filter(|a| a.starts_with("--")) {
        if ![
            "--duration",
            "--clients",
            "--workers",
            "--epoch",
            "--fault-chance",
            "--reconfigure",
            "--seed",
        ]
        .contains(&a.as_str())
        {
            return Err(format!("unknown flag {a}"));
        }
    }
    fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
        v.trim()
            .parse()
            .map_err(|_| format!("{flag}: not a number: {:.40}", v))
    }
    let secs = |flag: &str, v: &str| -> Result<Duration, String> {
        let s: f64 = num(flag, v)?;
        if !(s > 0.0 && s <= 7.0 * 86_400.0) {
            return Err(format!(
                "{flag}: must be above 0 and at most a week, got {v}"
            ));
        }
        Ok(Duration::from_secs_f64(s))
    };
    let p = Params {
        duration: secs("--duration", &get("--duration", "SOAK_SECONDS", "600")?)?,
        clients: num("--clients", &get("--clients", "SOAK_CLIENTS", "1000")?)?,
        workers: num("--workers", &get("--workers", "SOAK_WORKERS", "8")?)?,
        epoch: secs("--epoch", &get("--epoch", "SOAK_EPOCH_SECONDS", "5")?)?,
        fault_chance: num(
            "--fault-chance",
            &get("--fault-chance", "SOAK_FAULT_CHANCE", "0.7")?,
        )?,
        reconfigure: secs(
            "--reconfigure",
            &get("--reconfigure", "SOAK_RECONFIGURE_SECONDS", "2")?,
        )?,
        seed: num("--seed", &get("--seed", "SOAK_SEED", "1")?)?,
    };
    if !(1..=100_000).contains(&p.clients) {
        return Err(format!(
            "--clients must be in 1..=100000, got {}",
            p.clients
        ));
    }
    if !(1..=256).contains(&p.workers) || p.workers > p.clients {
        return Err(format!(
            "--workers must be in 1..=256 and at most --clients, got {}",
            p.workers
        ));
    }
    if !(0.0..=1.0).contains(&p.fault_chance) {
        return Err(format!(
            "--fault-chance must be in 0..=1, got {}",
            p.fault_chance
        ));
    }
    Ok(p)
}

/// What every backend of one epoch shares.
#[derive(Default)]
struct EpochTx {
    /// Packets handed over in calls that returned.
    delivered: AtomicU64,
    /// Wall-clock nanoseconds since `origin` after which one backend
    /// panics (`u64::MAX`: no fault this epoch).
    fault_at_ns: AtomicU64,
    /// The fault fired (exactly one backend panics).
    fired: AtomicBool,
}

/// A backend that counts what it receives and panics once when its epoch's
/// fault time has come.
struct FaultyTx {
    shared: Arc<EpochTx>,
    origin: WallInstant,
}

impl TxBackend for FaultyTx {
    fn transmit(&mut self, _now: Instant, pkts: &[TxPacket]) {
        let s = &self.shared;
        // Relaxed: a trigger; the runtime's own synchronisation orders the
        // counts read after shutdown.
        if self.origin.elapsed().as_nanos() as u64 >= s.fault_at_ns.load(Ordering::Relaxed)
            && !s.fired.swap(true, Ordering::Relaxed)
        {
            std::panic::panic_any(INJECTED);
        }
        s.delivered.fetch_add(pkts.len() as u64, Ordering::Relaxed);
    }
}

/// The four runtime shapes the epochs rotate through.
fn epoch_config(k: u64, clients: usize) -> (RuntimeConfig, &'static str) {
    let mut c = RuntimeConfig::default();
    c.max_clients = clients + 64;
    c.descriptors_per_client = 64;
    c.mailbox_entries = 128;
    c.lists = 2;
    match k % 4 {
        0 => (c, "arbiter transmits"),
        1 => {
            c.dispatchers = 1;
            (c, "one dispatcher")
        }
        2 => {
            c.tx_mode = TxMode::Client;
            (c, "client transmit")
        }
        _ => {
            c.rate_bps = Some(1_000_000_000);
            c.shutdown = ShutdownPolicy::Drain {
                deadline: Duration::from_millis(20),
            };
            c.dispatchers = 1;
            (c, "1 Gbit/s, 20 ms drain")
        }
    }
}

/// Totals over the whole soak.
#[derive(Default)]
struct Totals {
    epochs: u64,
    faults_injected: u64,
    faults_reported: u64,
    accepted: u64,
    submitted: u64,
    transmitted: u64,
    dropped: u64,
    dropped_by_reason: std::collections::BTreeMap<String, u64>,
    lost: i128,
    clients_created: u64,
    snapshots: u64,
    reconfigurations_sent: u64,
    reconfigurations_applied: u64,
    failures: Vec<String>,
}

/// One worker: keeps `n` clients alive, submits bursts round-robin, drops
/// and recreates one client every few bursts. Returns (accepted, created).
fn worker(rt: &Runtime<FaultyTx>, n: usize, w: usize, seed: u64, stop: &AtomicBool) -> (u64, u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut clients: Vec<Client<FaultyTx>> = Vec::with_capacity(n);
    let mut created = 0u64;
    let mut accepted = 0u64;
    for _ in 0..n {
        match rt.client() {
            Ok(c) => {
                clients.push(c);
                created += 1;
            }
            Err(_) => return (accepted, created),
        }
    }
    let mut burst = Vec::with_capacity(16);
    let mut seq = 0u64;
    // Relaxed: a stop signal only.
    'run: while !stop.load(Ordering::Relaxed) {
        let mut any = false;
        for (i, c) in clients.iter_mut().enumerate() {
            c.drain();
            burst.clear();
            let flow = FlowId(((w * n + i) % 256) as u32);
            burst.extend((0..rng.usize(1..=16)).map(|k| Submission {
                flow,
                len: rng.u32(60..=1500),
                cookie: seq + k as u64,
                ect: false,
            }));
            let b = c.submit_burst(&burst);
            seq += b.accepted as u64;
            accepted += b.accepted as u64;
            any |= b.accepted > 0;
            if let Some(SubmitError::Closed(_)) = b.error {
                break 'run;
            }
        }
        if !any {
            if let Some(c) = clients.first_mut() {
                c.wait_for_room(Duration::from_millis(2));
            }
        }
        // Churn: one client leaves, a new one comes.
        if rng.u8(0..4) == 0 {
            let i = rng.usize(0..clients.len());
            drop(clients.swap_remove(i));
            match rt.client() {
                Ok(c) => {
                    clients.push(c);
                    created += 1;
                }
                Err(_) => break,
            }
        }
    }
    drop(clients);
    (accepted, created)
}

/// Sends change number `k`: even ones change a random flow's weight, odd
/// ones remove a random flow (purging its queue) and add it back.
fn reconfigure(control: &Control<AnyScheduler>, rng: &mut fastrand::Rng, k: u64) -> pspat::Ticket {
    let flow = FlowId(rng.u32(0..256));
    if k.is_multiple_of(2) {
        let weight = rng.u32(1..=64);
        control.send(move |s, _| {
            // The flow exists (only odd changes remove one, and they add it
            // back at once): an error here is a soak failure the final
            // counts would not show, so it panics the arbiter, which the
            // runtime reports as a fault nobody injected.
            s.change_flow(flow, FlowParams::weighted(weight))
                .expect("soak: weight change refused");
        })
    } else {
        control.send(move |s, purge| {
            s.remove_flow(flow, purge).expect("soak: removal refused");
            s.add_flow(flow, FlowParams::weighted(1))
                .expect("soak: re-creation refused");
        })
    }
}

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> ExitCode {
    let p = match params() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::from(2);
        }
    };
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&INJECTED) {
            default_hook(info);
        }
    }));
    let start = WallInstant::now();
    let mut rng = fastrand::Rng::with_seed(p.seed);
    let mut t = Totals::default();
    let mut rss: Vec<(f64, u64)> = Vec::new();
    let mut last_progress = WallInstant::now();
    let flows = FlowTable::uniform(256).expect("256 flows");
    while start.elapsed() < p.duration {
        let k = t.epochs;
        let (cfg, shape) = epoch_config(k, p.clients);
        let mut sc = SchedulerConfig::new(AlgKind::Drr);
        sc.capacity = 1 << 16;
        let (sched, control) = match sc.build(flows.clone()) {
            Ok(s) => Reconfigurable::new(s),
            Err(e) => {
                eprintln!("soak: scheduler: {e}");
                return ExitCode::from(1);
            }
        };
        let remaining = p.duration.saturating_sub(start.elapsed());
        let epoch = p.epoch.min(remaining).max(Duration::from_millis(100));
        let tx = Arc::new(EpochTx::default());
        let fault = rng.f64() < p.fault_chance;
        let origin = WallInstant::now();
        let fault_at = if fault {
            (epoch.as_nanos() as f64 * rng.f64().mul_add(0.8, 0.1)) as u64
        } else {
            u64::MAX
        };
        tx.fault_at_ns.store(fault_at, Ordering::Relaxed);
        let tx2 = Arc::clone(&tx);
        let rt = match Runtime::start(cfg, sched, move |_| FaultyTx {
            shared: Arc::clone(&tx2),
            origin,
        }) {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("soak: runtime: {e}");
                return ExitCode::from(1);
            }
        };
        let stop = AtomicBool::new(false);
        let mut reconfigured: Vec<pspat::Ticket> = Vec::new();
        let mut next_change = origin + p.reconfigure;
        let per = p.clients / p.workers;
        let (accepted, created) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..p.workers)
                .map(|w| {
                    let n = per + usize::from(w < p.clients % p.workers);
                    let (rt, stop) = (&rt, &stop);
                    let seed = p.seed ^ (k << 16) ^ w as u64;
                    s.spawn(move || worker(rt, n, w, seed, stop))
                })
                .collect();
            while origin.elapsed() < epoch && !handles.iter().all(|h| h.is_finished()) {
                std::thread::sleep(Duration::from_millis(100));
                if WallInstant::now() >= next_change {
                    next_change += p.reconfigure;
                    reconfigured.push(reconfigure(&control, &mut rng, t.reconfigurations_sent));
                    t.reconfigurations_sent += 1;
                }
                let st = rt.stats();
                t.snapshots += 1;
                if !st.conserved() {
                    t.failures
                        .push(format!("epoch {k}: snapshot not conserved"));
                }
                if last_progress.elapsed() >= Duration::from_secs(1) {
                    last_progress = WallInstant::now();
                    let r = rss_kib().unwrap_or(0);
                    rss.push((start.elapsed().as_secs_f64(), r));
                    eprintln!(
                        "soak: {:>5.0} s  epoch {k} ({shape})  packets {}  faults {}  clients present {}  RSS {} KiB",
                        start.elapsed().as_secs_f64(),
                        t.submitted + st.submitted,
                        t.faults_injected,
                        st.clients.len(),
                        r
                    );
                }
            }
            // Relaxed: a stop signal only; the joins order the rest.
            stop.store(true, Ordering::Relaxed);
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or((0, 0)))
                .fold((0u64, 0u64), |a, b| (a.0 + b.0, a.1 + b.1))
        });
        let done = match rt.shutdown() {
            Ok(d) => d,
            Err(e) => {
                t.failures.push(format!("epoch {k}: shutdown failed: {e}"));
                continue;
            }
        };
        let fired = tx.fired.load(Ordering::Relaxed);
        let applied = reconfigured
            .iter()
            .filter(|&&k| control.wait_applied(k, Duration::ZERO))
            .count();
        t.reconfigurations_applied += applied as u64;
        let s = &done.stats;
        t.epochs += 1;
        t.faults_injected += u64::from(fired);
        t.faults_reported += u64::from(done.error.is_some());
        t.accepted += accepted;
        t.submitted += s.submitted;
        t.transmitted += s.transmitted;
        t.dropped += s.dropped;
        t.clients_created += created;
        for (r, n) in s.dropped_by_reason() {
            *t.dropped_by_reason.entry(r).or_insert(0) += n;
        }
        let lost = i128::from(accepted) - i128::from(s.transmitted) - i128::from(s.dropped);
        t.lost += lost;
        let delivered = tx.delivered.load(Ordering::Relaxed);
        let mut check = |ok: bool, what: String| {
            if !ok {
                t.failures.push(format!("epoch {k} ({shape}): {what}"));
            }
        };
        check(s.conserved(), "final stats not conserved".into());
        check(s.in_flight == 0, format!("{} in flight", s.in_flight));
        check(
            s.submitted == accepted,
            format!("runtime submitted {} != accepted {accepted}", s.submitted),
        );
        check(lost == 0, format!("{lost} packets lost"));
        check(
            s.transmitted == delivered,
            format!(
                "runtime transmitted {} != backends received {delivered}",
                s.transmitted
            ),
        );
        check(
            fired || applied == reconfigured.len(),
            format!(
                "{} of {} reconfigurations applied",
                applied,
                reconfigured.len()
            ),
        );
        check(
            fired == done.error.is_some(),
            format!("fault injected {fired}, reported {:?}", done.error),
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    let half = elapsed / 2.0;
    let max_in = |a: f64, b: f64| {
        rss.iter()
            .filter(|(t, _)| *t >= a && *t < b)
            .map(|x| x.1)
            .max()
    };
    let (first_half, second_half) = (max_in(0.0, half), max_in(half, f64::MAX));
    if let (Some(a), Some(b)) = (first_half, second_half) {
        if b > a + a / 10 + 16 * 1024 {
            t.failures.push(format!(
                "memory grew: largest RSS {a} KiB in the first half, {b} KiB in the second"
            ));
        }
    }
    let rss_first = rss.first().map_or(0, |x| x.1);
    let rss_last = rss.last().map_or(0, |x| x.1);
    println!(
        "soak: {} s, {} clients alive ({} workers), {} epochs",
        elapsed.round(),
        p.clients,
        p.workers,
        t.epochs
    );
    println!("  packets accepted     {}", t.accepted);
    println!("  transmitted          {}", t.transmitted);
    println!(
        "  dropped              {} {:?}",
        t.dropped, t.dropped_by_reason
    );
    println!("  lost                 {}", t.lost);
    println!(
        "  faults injected      {} (reported by shutdown: {})",
        t.faults_injected, t.faults_reported
    );
    println!("  clients created      {}", t.clients_created);
    println!(
        "  reconfigurations     {} sent, {} applied (the rest went to runtimes that failed)",
        t.reconfigurations_sent, t.reconfigurations_applied
    );
    println!("  snapshots checked    {}", t.snapshots);
    println!(
        "  RSS first/last/max   {rss_first} / {rss_last} / {} KiB",
        rss.iter().map(|x| x.1).max().unwrap_or(0)
    );
    if t.failures.is_empty() {
        println!("  result               ok");
        ExitCode::SUCCESS
    } else {
        for f in &t.failures {
            println!("  FAILED: {f}");
        }
        ExitCode::from(1)
    }
}
