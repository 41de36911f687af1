//! The two baselines on the concrete algorithm: [`crate::Mode::Lock`] (one
//! mutex around enqueue, dequeue, link emulation and transmit, as kernel
//! qdiscs serialise on their root lock) and [`crate::Mode::None`] (each
//! client transmits to its own null backend).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pspat::{Clock, NullTx, RuntimeError, ShutdownPolicy, TxBackend, TxPacket};
use pspat_sched::{FlowId, LinkEmulator, Packet, Scheduler, VisitScheduler};

use crate::victim::{victim_capacity, wait_until};
use crate::window::{measure, LockedSampler, Sample};
use crate::{pin_to, BenchConfig, Mode, Progress, Tally};

/// Runs the lock or none mode on the concrete algorithm.
pub(crate) struct Baseline<'a, 'p> {
    pub(crate) cfg: &'a BenchConfig,
    pub(crate) pin: bool,
    pub(crate) ncores: usize,
    pub(crate) pin_ok: &'a Arc<AtomicBool>,
    pub(crate) progress: &'a mut (dyn FnMut(Progress) + 'p),
}

impl VisitScheduler for Baseline<'_, '_> {
    type Output = Result<Tally, RuntimeError>;

    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output {
        run_baseline(
            self.cfg,
            sched,
            self.pin,
            self.ncores,
            self.pin_ok,
            self.progress,
        )
    }
}

/// The lock-mode critical section's state.
struct Locked<S> {
    sched: S,
    link: LinkEmulator,
    tx: NullTx,
    batch: Vec<TxPacket>,
    transmitted: Vec<u64>,
    bytes: Vec<u64>,
    dropped: BTreeMap<String, u64>,
    victim_times: Vec<u64>,
    latencies: Vec<u64>,
}

impl<S: Scheduler> Locked<S> {
    /// Lets the link release what is due at `now` into `batch` (the
    /// client in the token's high half, the token itself as the cookie).
    fn release(&mut self, now: pspat_sched::Instant) {
        let Locked {
            sched, link, batch, ..
        } = self;
        link.release(now, sched, |p: Packet| {
            batch.push(TxPacket {
                client: (p.token >> 32) as u32,
                flow: p.flow,
                len: p.len,
                cookie: p.token,
                copies: 1,
                corrupt: false,
                ce: false,
            })
        });
    }
}

/// Empties `sched` from `now` on, asking a shaper at its next eligibility
/// times (at most a million empty dequeues, for a shaper that names none);
/// returns the packets taken.
fn discard_all<S: Scheduler>(sched: &mut S, now: pspat_sched::Instant) -> u64 {
    let (mut t, mut n, mut misses) = (now, 0u64, 0u32);
    while !sched.is_empty() && misses < 1 << 20 {
        match sched.dequeue(t) {
            Some(_) => n += 1,
            None => {
                misses += 1;
                t = sched
                    .next_eligible(t)
                    .filter(|&e| e > t)
                    .unwrap_or(t.saturating_add_nanos(100_000));
            }
        }
    }
    n
}

fn run_baseline<S: Scheduler + Send + 'static>(
    cfg: &BenchConfig,
    sched: S,
    pin: bool,
    ncores: usize,
    pin_ok: &Arc<AtomicBool>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Tally, RuntimeError> {
    let n = cfg.total_clients();
    let clock = Clock::new();
    let cap = victim_capacity(cfg);
    let locked = if cfg.mode == Mode::Lock {
        let link = match cfg.rate_bps {
            Some(r) => LinkEmulator::new(r, 512)?,
            None => LinkEmulator::unlimited(512)?,
        };
        Some(Arc::new(Mutex::new(Locked {
            sched,
            link,
            tx: NullTx::new(),
            batch: Vec::with_capacity(512),
            transmitted: vec![0; n],
            bytes: vec![0; n],
            dropped: BTreeMap::new(),
            victim_times: Vec::with_capacity(cap),
            latencies: Vec::with_capacity(cap),
        })))
    } else {
        None
    };
    // Per client: submitted, and in none mode transmitted packets and bytes.
    let counters: Arc<Vec<ClientCounters>> = Arc::new((0..n).map(|_| Default::default()).collect());
    let sampler = Arc::new(LockedSampler::default());
    let stop_all = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(pspat_mailbox::StartGate::new());
    let mut handles = Vec::new();
    for i in 0..n {
        let stop = Arc::clone(&stop_all);
        let go = Arc::clone(&gate);
        let pin_ok = Arc::clone(pin_ok);
        let locked = locked.clone();
        let counters = Arc::clone(&counters);
        let sampler = Arc::clone(&sampler);
        let is_victim = i == cfg.clients;
        let len = if is_victim {
            cfg.victim.map_or(cfg.pkt_len, |v| v.pkt_len)
        } else {
            cfg.pkt_len
        };
        let pps = cfg.victim.map_or(1, |v| v.pps);
        let victim_id = cfg.clients;
        let h = std::thread::Builder::new()
            .name(format!("pspat-bench-{}-{i}", cfg.mode))
            .spawn(move || -> Vec<u64> {
                if pin {
                    pin_to(i % ncores, &pin_ok);
                }
                let mut own = NullTx::new();
                let mut lat = Vec::new();
                let mut one = [TxPacket {
                    client: i as u32,
                    flow: FlowId(i as u32),
                    len,
                    cookie: 0,
                    copies: 1,
                    corrupt: false,
                    ce: false,
                }];
                go.wait();
                let period = 1_000_000_000 / pps.max(1);
                let mut next = clock.now().as_nanos();
                let mut seq = 0u64;
                // Relaxed: a stop signal only.
                while !stop.load(Ordering::Relaxed) {
                    if is_victim {
                        wait_until(&clock, next, &stop);
                        next += period;
                    }
                    let t_submit = clock.now();
                    // Relaxed counters: each has one writer, the sampler
                    // only needs some recent value, and the final totals
                    // are read after the join.
                    counters[i].0[0].fetch_add(1, Ordering::Relaxed);
                    match &locked {
                        None => {
                            one[0].cookie = t_submit.as_nanos();
                            let now = clock.now();
                            own.transmit(now, &one);
                            if is_victim && lat.len() < cap {
                                lat.push(now.as_nanos() - t_submit.as_nanos());
                            }
                            // Relaxed, as for `counters[i].0[0]` above.
                            counters[i].0[1].fetch_add(1, Ordering::Relaxed);
                            counters[i].0[2].fetch_add(u64::from(len), Ordering::Relaxed);
                        }
                        Some(m) => {
                            let mut g = match m.lock() {
                                Ok(g) => g,
                                Err(p) => p.into_inner(),
                            };
                            let st = &mut *g;
                            let mut token = (i as u64) << 32;
                            if is_victim && st.victim_times.len() < st.victim_times.capacity() {
                                token |= st.victim_times.len() as u64 + 1;
                                st.victim_times.push(t_submit.as_nanos());
                            }
                            let now = clock.now();
                            if let Err(r) = st
                                .sched
                                .enqueue(now, Packet::new(FlowId(i as u32), len, token))
                            {
                                *st.dropped.entry(r.reason.as_str().to_string()).or_insert(0) += 1;
                            }
                            st.release(now);
                            let now = clock.now();
                            st.tx.transmit(now, &st.batch);
                            for p in &st.batch {
                                let c = p.client as usize;
                                st.transmitted[c] += 1;
                                st.bytes[c] += u64::from(p.len);
                                let vi = (p.cookie & 0xffff_ffff) as usize;
                                if c == victim_id && vi > 0 {
                                    let t = st.victim_times[vi - 1];
                                    st.latencies.push(now.as_nanos().saturating_sub(t));
                                }
                            }
                            st.batch.clear();
                            // The measuring thread never takes this
                            // contended lock (with 1000 clients a std mutex
                            // let it wait out the whole run): the holder
                            // copies the tallies when asked.
                            sampler.serve(&st.transmitted, &st.bytes);
                        }
                    }
                    seq += 1;
                    // Without a scheduler nothing ever blocks a client; with
                    // hundreds of spinning threads on two cores the thread
                    // that ends the run starved (seen with 1000 clients), so
                    // a none-mode client yields every 1024 packets, as a real
                    // sender blocks on I/O now and then.
                    if locked.is_none() && seq.is_multiple_of(1024) {
                        std::thread::yield_now();
                    }
                }
                lat
            })
            .map_err(|e| RuntimeError::Thread {
                what: format!("client {i}"),
                reason: e.to_string(),
            });
        match h {
            Ok(h) => handles.push(h),
            Err(e) => return Err(crate::start::abandon(e, &stop_all, &gate, handles)),
        }
    }
    let start = crate::start::open_and_warm_up(&gate, &handles);
    let window = match &locked {
        Some(_) => measure(cfg.duration, progress, &mut || sampler.sample()),
        // Relaxed: a running statistic, paired with the clients' Relaxed
        // adds; the exact totals are read after the joins.
        None => measure(cfg.duration, progress, &mut || {
            let read = |k: usize| {
                counters
                    .iter()
                    .map(|c| c.0[k].load(Ordering::Relaxed))
                    .collect()
            };
            Sample::now(read(1), read(2))
        }),
    };
    stop_all.store(true, Ordering::Relaxed);
    let mut latencies: Vec<u64> = crate::join_clients(handles)?
        .into_iter()
        .flatten()
        .collect();
    // Relaxed: every client is joined, so its last increment is visible.
    let submitted: Vec<u64> = counters
        .iter()
        .map(|c| c.0[0].load(Ordering::Relaxed))
        .collect();
    match locked {
        Some(m) => {
            let mut g = match m.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            // Shutdown as the runtime's (`cfg.shutdown`): release what is
            // still queued at the link rate until the drain deadline, then
            // drop the rest with reason "shutdown".
            let st = &mut *g;
            let deadline = match cfg.shutdown {
                ShutdownPolicy::Drain { deadline } => deadline,
                ShutdownPolicy::Discard => std::time::Duration::ZERO,
            };
            let drain_from = std::time::Instant::now();
            while !st.sched.is_empty() {
                if drain_from.elapsed() >= deadline {
                    let n = discard_all(&mut st.sched, clock.now());
                    *st.dropped.entry("shutdown".to_string()).or_insert(0) += n;
                    break;
                }
                let now = clock.now();
                st.release(now);
                st.tx.transmit(now, &st.batch);
                for p in &st.batch {
                    st.transmitted[p.client as usize] += 1;
                    st.bytes[p.client as usize] += u64::from(p.len);
                }
                st.batch.clear();
                std::hint::spin_loop();
            }
            latencies.extend(st.latencies.iter().copied());
            Ok(Tally {
                submitted,
                transmitted: st.transmitted.clone(),
                bytes: st.bytes.clone(),
                dropped_by_reason: st.dropped.clone(),
                window,
                start,
                latencies,
                arbiter: None,
            })
        }
        // Relaxed loads, as for `submitted`: after the joins.
        None => Ok(Tally {
            submitted,
            transmitted: counters
                .iter()
                .map(|c| c.0[1].load(Ordering::Relaxed))
                .collect(),
            bytes: counters
                .iter()
                .map(|c| c.0[2].load(Ordering::Relaxed))
                .collect(),
            dropped_by_reason: BTreeMap::new(),
            window,
            start,
            latencies,
            arbiter: None,
        }),
    }
}

/// One client's counters (submitted; in none mode transmitted packets and
/// bytes), on a line pair of their own. Clients sit on alternate cores, so
/// packed counters would share lines between cores and every packet of two
/// neighbours would move a line back and forth (the baseline would pay for
/// the bench's bookkeeping, not for sending).
#[derive(Default)]
#[repr(align(128))]
struct ClientCounters([AtomicU64; 3]);
