//! The runtime in virtual time: a deterministic driver that steps the
//! arbiter's [`Outcome`]-returning round and the dispatchers' batches with a
//! clock the caller controls, and in-process clients, on the calling
//! thread. No thread is spawned and no clock is read, so the read gate Δ_A,
//! link pacing, shaping deadlines, backpressure and drop reporting can be
//! tested exactly, the way quinn drives a connection pair to its next
//! timeout.
//!
//! It runs the very code the threads run (the arbiter's round, the
//! sink, the dispatcher's step); only the loops around them (spinning,
//! parking, sleeping) are replaced by the caller's calls.
//!
//! # Examples
//! ```
//! use pspat::{ManualRuntime, NullTx, Outcome, RuntimeConfig, Submission};
//! use pspat_sched::{AlgKind, FlowId, FlowTable, Instant, SchedulerConfig};
//!
//! let mut cfg = RuntimeConfig::default();
//! cfg.rate_bps = Some(1_000_000_000); // 1 Gbit/s: a 1250-byte packet every 10 µs
//! let sched = SchedulerConfig::new(AlgKind::Fifo).build(FlowTable::uniform(1).unwrap()).unwrap();
//! let mut rt = ManualRuntime::new(cfg, sched, |_| NullTx::new()).unwrap();
//! let mut c = rt.client().unwrap();
//! for i in 0..3 {
//!     c.submit(Submission { flow: FlowId(0), len: 1250, cookie: i, ect: false }).unwrap();
//! }
//! assert_eq!(rt.round(Instant::ZERO), Outcome::Worked); // collects 3, sends 1
//! let Outcome::Busy { until, .. } = rt.round(Instant::from_nanos(1)) else { panic!() };
//! assert_eq!(until, Instant::from_nanos(10_000));       // the link is busy for 10 µs
//! drop(c);
//! let done = rt.finish(Instant::from_nanos(1)).unwrap();
//! assert_eq!(done.stats.transmitted, 3);
//! ```

use std::sync::Arc;

use pspat_sched::{Instant, Scheduler};

use crate::arbiter::{Arbiter, Outcome};
use crate::dispatcher::Dispatcher;
use crate::runtime::{close, new_client, Factory, Finished, Parts, TxOwner};
use crate::shared::Shared;
use crate::sync::Ordering;
use crate::{ArbiterStats, Client, RuntimeConfig, RuntimeError, Stats, TxBackend};

/// A runtime stepped by its caller: see the [module docs](self).
pub struct ManualRuntime<S: Scheduler, B: TxBackend> {
    shared: Arc<Shared>,
    arbiter: Arbiter<S, B>,
    dispatchers: Vec<Dispatcher<B>>,
    factory: Factory<B>,
}

impl<S: Scheduler, B: TxBackend> ManualRuntime<S, B> {
    /// Builds the runtime exactly as [`crate::Runtime::start`] does, without
    /// starting a thread.
    ///
    /// # Errors
    /// An invalid configuration.
    pub fn new<F>(cfg: RuntimeConfig, sched: S, factory: F) -> Result<Self, RuntimeError>
    where
        F: FnMut(TxOwner) -> B + Send + 'static,
    {
        let parts = Parts::build(cfg, sched, factory)?;
        Ok(ManualRuntime {
            shared: parts.shared,
            arbiter: parts.arbiter,
            dispatchers: parts.dispatchers,
            factory: parts.factory,
        })
    }

    /// A new in-process client. In client-transmit mode, step rounds until
    /// its packets were granted ([`Client::outstanding`] is 0) before
    /// dropping it: dropping waits for them, and nothing else runs rounds.
    ///
    /// # Errors
    /// As [`crate::Runtime::client`].
    pub fn client(&self) -> Result<Client<B>, RuntimeError> {
        new_client(&self.shared, &self.factory, std::time::Duration::ZERO)
    }

    /// One arbiter round at `now` (collect, link, hand-off, recycle).
    pub fn round(&mut self, now: Instant) -> Outcome {
        self.arbiter.round(now, now)
    }

    /// One round at `now` that also releases what is due by `release_by`
    /// (clamped to at least `now`), as the arbiter thread does with its
    /// wake-up coalescing slack ([`crate::RuntimeConfig::wake_batch`]).
    pub fn round_releasing_by(&mut self, now: Instant, release_by: Instant) -> Outcome {
        self.arbiter.round(now, release_by.max(now))
    }

    /// One batch of every dispatcher at `now`; returns packets transmitted.
    pub fn dispatch(&mut self, now: Instant) -> usize {
        self.dispatchers.iter_mut().map(|d| d.step(now)).sum()
    }

    /// A round, then one batch of every dispatcher.
    pub fn step(&mut self, now: Instant) -> Outcome {
        let o = self.round(now);
        let sent = self.dispatch(now);
        if sent > 0 && o != Outcome::Worked {
            return Outcome::Worked;
        }
        o
    }

    /// Steps from `now`, jumping the clock to each `Busy { until }`, until a
    /// step finds nothing to do or `max_steps` ran; returns the time reached.
    /// Rounds that worked do not advance the clock.
    pub fn run_until_idle(&mut self, mut now: Instant, max_steps: usize) -> Instant {
        for _ in 0..max_steps {
            match self.step(now) {
                Outcome::Worked => {}
                Outcome::Busy { until, .. } => now = now.max(until),
                Outcome::Idle => break,
            }
        }
        now
    }

    /// The scheduler, to inspect what it holds.
    pub fn scheduler(&self) -> &S {
        &self.arbiter.sched
    }

    /// When the emulated link finishes sending what it released.
    pub fn link_idle(&self) -> Instant {
        self.arbiter.link.link_idle()
    }

    /// Counters now.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Arbiter counters (rounds, decisions) now.
    pub fn arbiter_stats(&self) -> ArbiterStats {
        self.arbiter.stats
    }

    /// Whether the arbiter could exit now: closing, every client dropped,
    /// every mailbox retired, nothing held.
    fn try_exit(&mut self, now: Instant) -> bool {
        self.arbiter.can_exit(now)
    }

    /// Closes the runtime and steps until everything held was sent, from
    /// `now` (jumping the clock as [`ManualRuntime::run_until_idle`] does);
    /// then hands back the counters and backends. Drop every client first.
    ///
    /// # Errors
    /// [`RuntimeError::Invalid`] if a client is still alive or the packets
    /// held did not drain within a million steps.
    pub fn finish(mut self, mut now: Instant) -> Result<Finished<B>, RuntimeError> {
        close(&self.shared);
        for _ in 0..1_000_000 {
            now = self.run_until_idle(now, 1_000_000);
            if self.try_exit(now) {
                // Release, as the arbiter thread does after its last push.
                self.shared.arbiter_done.store(true, Ordering::Release);
                while self.dispatch(now) > 0 {}
                self.shared.settle_after_fault();
                let stats = self.shared.stats();
                let arbiter = self.arbiter.stats;
                let mut backends: Vec<B> = self.arbiter.sink.into_backend().into_iter().collect();
                backends.extend(self.dispatchers.into_iter().map(Dispatcher::into_backend));
                return Ok(Finished {
                    stats,
                    arbiter,
                    backends,
                    error: self.shared.fault_error(),
                });
            }
            if self.shared.live_clients.load(Ordering::SeqCst) != 0 {
                return Err(RuntimeError::invalid(
                    "ManualRuntime::finish",
                    "a client is still alive: drop every client first",
                ));
            }
        }
        Err(RuntimeError::invalid(
            "ManualRuntime::finish",
            "the packets held did not drain within a million steps",
        ))
    }
}
