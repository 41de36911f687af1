//! A discrete-event driver for a pipe and the checks it makes at every step.

use pspat_sched::pipe::{Exit, Pipe, PipeConfig};
use pspat_sched::rate::Rate;
use pspat_sched::{Fifo, FlowTable, Instant, Packet, Rejected, Scheduler};

/// What a run produced.
#[derive(Debug, Default)]
pub struct Run {
    /// Every exit, with the `now` of the release that handed it out.
    pub exits: Vec<(Instant, Exit)>,
    /// Every packet refused at enqueue, with its arrival time.
    pub rejected: Vec<(Instant, Rejected)>,
}

impl Run {
    /// The exits with a given fate.
    pub fn with_fate(&self, fate: pspat_sched::Fate) -> impl Iterator<Item = &Exit> + '_ {
        self.exits
            .iter()
            .map(|(_, e)| e)
            .filter(move |e| e.fate == fate)
    }
}

/// `in = out + dropped + held`, exactly.
pub fn assert_conserved<S: Scheduler>(pipe: &Pipe<S>) {
    let c = pipe.counters();
    assert_eq!(
        c.in_packets,
        c.out_packets + c.dropped_total() + pipe.held(),
        "conservation: {c:?}, held {}",
        pipe.held()
    );
}

/// Runs `arrivals` (sorted by time) through `pipe` until it is empty:
/// at each event time, releases then enqueues what arrives then. Checks
/// conservation after every call and that no exit is early.
pub fn drive<S: Scheduler>(pipe: &mut Pipe<S>, arrivals: &[(Instant, Packet)]) -> Run {
    let mut run = Run::default();
    let mut i = 0;
    let mut now = Instant::ZERO;
    let mut steps = 0u64;
    loop {
        let next_arrival = arrivals.get(i).map(|a| a.0);
        let t = match (next_arrival, pipe.poll_at()) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(p)) => p,
            (Some(a), Some(p)) => a.min(p),
        };
        now = now.max(t);
        steps += 1;
        assert!(
            steps < 50_000_000,
            "the driver does not progress at {now:?}"
        );
        pipe.release(now, &mut |e| {
            assert!(e.at <= now, "early exit: {e:?} at {now:?}");
            run.exits.push((now, e));
        });
        assert_conserved(pipe);
        while i < arrivals.len() && arrivals[i].0 <= now {
            let (at, pkt) = arrivals[i];
            if let Err(r) = pipe.enqueue(now, pkt) {
                run.rejected.push((at, r));
            }
            assert_conserved(pipe);
            i += 1;
        }
    }
    assert_eq!(pipe.held(), 0, "drained");
    run
}

/// A FIFO pipe over `flows` flows with room for `capacity` packets.
pub fn fifo_pipe(cfg: PipeConfig, flows: usize, capacity: usize) -> Pipe<Fifo> {
    let fifo = Fifo::new(FlowTable::uniform(flows).unwrap(), capacity).unwrap();
    Pipe::new(cfg, fifo, flows).unwrap()
}

/// A rate in bit/s.
pub fn rate(bps: u64) -> Rate {
    Rate::checked("test rate", bps).unwrap()
}

/// `ns` as an instant.
pub fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// The two-sided 99.9% normal quantile.
pub const Z999: f64 = 3.2905;

/// Asserts that `k` successes in `n` trials fit probability `p` within the
/// normal approximation's 99.9% interval.
pub fn assert_binomial(what: &str, k: u64, n: u64, p: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (k as f64 - mean).abs() <= Z999 * sd + 1.0,
        "{what}: {k} of {n}, expected {mean:.1} ± {:.1}",
        Z999 * sd
    );
}
