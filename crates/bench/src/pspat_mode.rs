//! [`crate::Mode::Pspat`]: clients submit to the PSPAT runtime; the arbiter
//! runs the scheduler and the link emulator on its own core.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pspat::{NullTx, Runtime, RuntimeConfig, RuntimeError, Submission};
use pspat_sched::{FlowId, Scheduler, VisitScheduler};

use crate::config::{BURST, CLIENT_CORE};
use crate::report::ArbiterReport;
use crate::victim::{victim_capacity, wait_until};
use crate::window::{measure, Sample};
use crate::{pin_to, BenchConfig, Progress, Tally};
use pspat_mailbox::StartGate;

pub(crate) fn run_pspat(
    cfg: &BenchConfig,
    pin: bool,
    pin_ok: &Arc<AtomicBool>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Tally, RuntimeError> {
    let sched = cfg.sched_config().build(cfg.flow_table()?)?;
    let victim_id = cfg.victim.map(|_| cfg.clients as u32);
    let cap = victim_capacity(cfg);
    // The arbiter runs on the concrete algorithm (see `AnyScheduler::visit`).
    // The victim stamps its submits with this clock and the backends read it
    // at the hand-off (`NullTx::with_latency_clock`).
    let clock = pspat::Clock::new();
    let rt = sched.visit(StartRuntime {
        cfg: cfg.runtime_config(pin),
        victim_id,
        cap,
        clock,
    })?;
    let stop_all = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(StartGate::new());
    let mut handles = Vec::new();
    for i in 0..cfg.total_clients() {
        let mut c = match rt.client() {
            Ok(c) => c,
            Err(e) => return Err(crate::start::abandon(e, &stop_all, &gate, handles)),
        };
        let stop = Arc::clone(&stop_all);
        let go = Arc::clone(&gate);
        let pin_ok = Arc::clone(pin_ok);
        let is_victim = i == cfg.clients;
        let len = if is_victim {
            cfg.victim.map_or(cfg.pkt_len, |v| v.pkt_len)
        } else {
            cfg.pkt_len
        };
        let pps = cfg.victim.map_or(1, |v| v.pps);
        let h = std::thread::Builder::new()
            .name(format!("pspat-bench-client-{i}"))
            .spawn(move || {
                if pin {
                    pin_to(CLIENT_CORE, &pin_ok);
                }
                go.wait();
                let flow = FlowId(i as u32);
                if is_victim {
                    let period = 1_000_000_000 / pps.max(1);
                    let mut next = clock.now().as_nanos();
                    // Relaxed, as in `wait_until`: a stop signal only.
                    while !stop.load(Ordering::Relaxed) {
                        // Client-transmit mode: keep draining grants while
                        // waiting, so latency is not the submit period.
                        while c.drain() > 0 || c.outstanding() > 0 {
                            if clock.now().as_nanos() >= next || stop.load(Ordering::Relaxed) {
                                break;
                            }
                            std::thread::yield_now();
                        }
                        wait_until(&clock, next, &stop);
                        next += period;
                        let mut s = Submission {
                            flow,
                            len,
                            cookie: clock.now().as_nanos(),
                            ect: false,
                        };
                        while let Err(e) = c.submit(s) {
                            // Relaxed: a stop signal only.
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            s = e.into_inner();
                            // Client-transmit mode: submit never
                            // transmits, so free descriptors by draining.
                            c.drain();
                            std::thread::yield_now();
                        }
                    }
                } else {
                    let mut burst = [Submission {
                        flow,
                        len,
                        cookie: 0,
                        ect: false,
                    }; BURST];
                    let mut seq = 0u64;
                    // Relaxed: a stop signal only.
                    while !stop.load(Ordering::Relaxed) {
                        for (k, s) in burst.iter_mut().enumerate() {
                            s.cookie = seq + k as u64;
                        }
                        let b = c.submit_burst(&burst);
                        seq += b.accepted as u64;
                        // A refused tail is simply offered again in the
                        // next burst (cookies continue from `seq`). Behind
                        // a slow or shaped link this sleeps, not spins,
                        // for as long as a batch of descriptors takes to
                        // come back (behind a 1 Mbit/s link a quarter of
                        // the pool, 256, in about 123 ms): a shorter
                        // timeout only adds wake-ups. The stop is seen
                        // within the timeout.
                        if b.accepted == 0 {
                            c.wait_for_room(std::time::Duration::from_millis(200));
                        }
                    }
                }
                c.into_backend()
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
    let window = measure(cfg.duration, progress, &mut || {
        let st = rt.stats();
        Sample::now(
            st.clients.iter().map(|c| c.transmitted).collect(),
            st.clients.iter().map(|c| c.transmitted_bytes).collect(),
        )
    });
    // Relaxed: pairs with nothing; the joins below order everything the
    // clients did before this thread reads their results.
    stop_all.store(true, Ordering::Relaxed);
    let mut backends: Vec<NullTx> = crate::join_clients(handles)?
        .into_iter()
        .flatten()
        .collect();
    let done = rt.shutdown()?;
    // A contained fault (a panicked backend or runtime thread) still hands
    // back conserved counters, but the run's figures are not a measurement.
    if let Some(e) = done.error {
        return Err(e);
    }
    backends.extend(done.backends);
    let latencies = backends
        .iter()
        .flat_map(|b| b.latencies_ns().iter().copied())
        .collect();
    let st = &done.stats;
    let a = done.arbiter;
    Ok(Tally {
        submitted: st.clients.iter().map(|c| c.submitted).collect(),
        transmitted: st.clients.iter().map(|c| c.transmitted).collect(),
        bytes: st.clients.iter().map(|c| c.transmitted_bytes).collect(),
        dropped_by_reason: st.dropped_by_reason(),
        window,
        start,
        latencies,
        arbiter: Some(ArbiterReport {
            rounds: a.rounds,
            mean_round_ns: if a.busy_rounds == 0 {
                0.0
            } else {
                a.busy_round_ns as f64 / a.busy_rounds as f64
            },
            sleeps: a.sleeps,
        }),
    })
}

/// Starts the runtime on the concrete algorithm inside an `AnyScheduler`,
/// with a null transmitter that samples the victim's latency if there is one.
pub(crate) struct StartRuntime {
    cfg: RuntimeConfig,
    victim_id: Option<u32>,
    cap: usize,
    clock: pspat::Clock,
}

impl VisitScheduler for StartRuntime {
    type Output = Result<Runtime<NullTx>, RuntimeError>;

    fn visit<S: Scheduler + Send + 'static>(self, sched: S) -> Self::Output {
        let (victim_id, cap, clock) = (self.victim_id, self.cap, self.clock);
        Runtime::start(self.cfg, sched, move |_| match victim_id {
            Some(v) => NullTx::with_latency_clock(v, cap, clock),
            None => NullTx::new(),
        })
    }
}
