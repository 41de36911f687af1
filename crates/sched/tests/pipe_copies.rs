//! A pipe behind the [`Scheduler`] trait ([`PipeScheduler`]) hands a
//! duplicated packet out once, marked to be sent twice
//! ([`Packet::copies`]), and a corrupted one marked to have a bit flipped
//! ([`Packet::is_corrupt`]), in virtual time with fixed seeds.

use pspat_sched::pipe::{Jitter, JitterDistribution, PipeConfig, PipeScheduler, QueueConfig};
use pspat_sched::pipe::{PipeSet, QueueLimit};
use pspat_sched::{Fifo, FlowId, FlowTable, Instant, Packet, Pipe, Scheduler};

use crate::pipe_common::{assert_binomial, at};

const US: u64 = 1_000;

/// A FIFO pipe duplicating with probability `dup`, delay 100 µs, jitter
/// (reordering when `reorder`) 50 µs.
fn raw_pipe(dup: f64, seed: u64, reorder: bool) -> Pipe<Fifo> {
    marking_pipe(dup, 0.0, seed, reorder)
}

/// [`raw_pipe`] that also corrupts with probability `corrupt`.
fn marking_pipe(dup: f64, corrupt: f64, seed: u64, reorder: bool) -> Pipe<Fifo> {
    let cfg = PipeConfig {
        delay_ns: 100 * US,
        jitter: Some(Jitter {
            ns: 50 * US,
            distribution: JitterDistribution::Uniform,
        }),
        reorder,
        delay_line_capacity: 4_096,
        queue: QueueConfig {
            limit: QueueLimit::Slots(100_000),
            duplicate: dup,
            corrupt,
            ..QueueConfig::default()
        },
        seed,
        ..PipeConfig::default()
    };
    let fifo = Fifo::new(FlowTable::uniform(2).unwrap(), 100_000).unwrap();
    Pipe::new(cfg, fifo, 2).unwrap()
}

/// [`raw_pipe`] behind the [`Scheduler`] trait.
fn dup_pipe(dup: f64, seed: u64, reorder: bool) -> PipeScheduler<Fifo> {
    PipeScheduler::new(raw_pipe(dup, seed, reorder))
}

/// Offers `n` packets (tokens 0..n, two flows), one every `gap` ns, and
/// dequeues at every event until empty; returns the packets handed out in
/// order. Checks at every step that the scheduler conserves (accepted =
/// dequeued + queued: a marked packet is one packet).
fn run(s: &mut impl Scheduler, n: u64, gap: u64) -> Vec<Packet> {
    let mut out = Vec::new();
    let (mut i, mut now) = (0u64, Instant::ZERO);
    loop {
        let arrival = (i < n).then(|| at(i * gap));
        let t = match (arrival, s.next_eligible(now)) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(e)) => e,
            (Some(a), Some(e)) => a.min(e),
        };
        now = now.max(t);
        while let Some(p) = s.dequeue(now) {
            out.push(p);
        }
        while i < n && at(i * gap) <= now {
            s.enqueue(now, Packet::new(FlowId((i % 2) as u32), 100, i))
                .unwrap();
            i += 1;
        }
        assert_eq!(i, out.len() as u64 + s.queued() as u64, "conservation");
    }
    out
}

#[test]
fn a_duplicated_packet_is_handed_out_once_marked_within_the_binomial_interval() {
    for reorder in [false, true] {
        let n = 50_000;
        let mut s = dup_pipe(0.2, 7, reorder);
        let out = run(&mut s, n, 10 * US);
        // Every packet once, its token intact once the mark is cleared.
        let mut tokens: Vec<u64> = out.iter().map(|p| p.without_copy().token).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, (0..n).collect::<Vec<_>>(), "reorder {reorder}");
        let marked = out.iter().filter(|p| p.copies() == 2).count() as u64;
        assert!(out.iter().all(|p| (1..=2).contains(&p.copies())));
        assert_binomial(&format!("duplicate 0.2, reorder {reorder}"), marked, n, 0.2);
        // The pipe's count of copies, the adapter's and the marks agree.
        let c = s.pipe().counters();
        assert_eq!(c.duplicates, marked);
        assert_eq!(s.copies_marked(), marked);
        assert_eq!(s.duplicates_not_sent(), 0);
        assert_eq!((c.in_packets, c.out_packets), (n, n), "a copy is extra");
    }
}

#[test]
fn the_same_seed_marks_the_same_packets() {
    let marks = |seed| -> Vec<u64> {
        let mut s = dup_pipe(0.3, seed, true);
        run(&mut s, 5_000, 7 * US)
            .iter()
            .filter(|p| p.copies() == 2)
            .map(|p| p.without_copy().token)
            .collect()
    };
    let a = marks(11);
    assert!(!a.is_empty());
    assert_eq!(a, marks(11));
    assert_ne!(a, marks(12));
}

#[test]
fn no_duplicate_marks_nothing_and_one_marks_everything() {
    for (p, want) in [(0.0, 0), (1.0, 2_000)] {
        let mut s = dup_pipe(p, 3, false);
        let out = run(&mut s, 2_000, 10 * US);
        let marked = out.iter().filter(|p| p.copies() == 2).count();
        assert_eq!((out.len(), marked), (2_000, want), "duplicate {p}");
    }
}

#[test]
fn a_pipe_set_hands_the_marks_on_with_its_global_flow_ids() {
    let mut set = PipeSet::new();
    set.push(1, 0, raw_pipe(0.0, 5, false), 2).unwrap();
    set.push(2, 0, raw_pipe(0.5, 5, false), 2).unwrap();
    let n = 4_000;
    // Flows 0 and 1 belong to link 1 (never duplicates), 2 and 3 to link 2.
    let mut out = Vec::new();
    let mut now = Instant::ZERO;
    for i in 0..n {
        now = at(i * 10 * US);
        while let Some(p) = set.dequeue(now) {
            out.push(p);
        }
        set.enqueue(now, Packet::new(FlowId((i % 4) as u32), 100, i))
            .unwrap();
    }
    while let Some(t) = set.next_eligible(now) {
        now = now.max(t);
        while let Some(p) = set.dequeue(now) {
            out.push(p);
        }
    }
    assert_eq!(out.len() as u64, n);
    assert!(out.iter().filter(|p| p.flow.0 < 2).all(|p| p.copies() == 1));
    let marked = out.iter().filter(|p| p.copies() == 2).count() as u64;
    assert!(out
        .iter()
        .filter(|p| p.copies() == 2)
        .all(|p| p.flow.0 >= 2 && p.without_copy().token % 4 == u64::from(p.flow.0)));
    assert_binomial("duplicate 0.5 on half the packets", marked, n / 2, 0.5);
}

#[test]
fn a_corrupted_packet_is_marked_within_the_binomial_interval() {
    for reorder in [false, true] {
        let n = 50_000;
        let mut s = PipeScheduler::new(marking_pipe(0.0, 0.1, 9, reorder));
        let out = run(&mut s, n, 10 * US);
        let mut tokens: Vec<u64> = out.iter().map(|p| p.without_marks().token).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, (0..n).collect::<Vec<_>>(), "reorder {reorder}");
        let marked = out.iter().filter(|p| p.is_corrupt()).count() as u64;
        assert!(out.iter().all(|p| p.copies() == 1), "no duplication asked");
        assert_binomial(&format!("corrupt 0.1, reorder {reorder}"), marked, n, 0.1);
        let c = s.pipe().counters();
        assert_eq!(c.corrupted, marked);
        assert_eq!((c.in_packets, c.out_packets, c.duplicates), (n, n, 0));
    }
}

#[test]
fn corruption_and_duplication_are_drawn_apart_and_a_copy_keeps_its_originals_mark() {
    let n = 40_000;
    let mut s = PipeScheduler::new(marking_pipe(0.5, 0.5, 21, true));
    let out = run(&mut s, n, 10 * US);
    assert_eq!(out.len() as u64, n);
    // Every copy found its original, corrupted or not.
    assert_eq!(s.duplicates_not_sent(), 0);
    assert_eq!(s.copies_marked(), s.pipe().counters().duplicates);
    let both = out
        .iter()
        .filter(|p| p.is_corrupt() && p.copies() == 2)
        .count() as u64;
    assert_binomial("corrupt 0.5 and duplicate 0.5", both, n, 0.25);
    let corrupt = out.iter().filter(|p| p.is_corrupt()).count() as u64;
    assert_binomial("corrupt 0.5", corrupt, n, 0.5);
}

#[test]
fn the_same_seed_corrupts_the_same_packets_and_none_or_all_as_asked() {
    let marks = |corrupt, seed| -> Vec<u64> {
        let mut s = PipeScheduler::new(marking_pipe(0.0, corrupt, seed, false));
        run(&mut s, 4_000, 7 * US)
            .iter()
            .filter(|p| p.is_corrupt())
            .map(|p| p.without_marks().token)
            .collect()
    };
    let a = marks(0.3, 11);
    assert!(!a.is_empty());
    assert_eq!(a, marks(0.3, 11));
    assert_ne!(a, marks(0.3, 12));
    assert!(marks(0.0, 11).is_empty());
    assert_eq!(marks(1.0, 11), (0..4_000).collect::<Vec<_>>());
}

#[test]
fn corruption_leaves_the_other_streams_draws_as_they_were() {
    // The same seed with and without corruption: the duplicates (their own
    // stream) fall on the same packets.
    let copies = |corrupt| -> Vec<u64> {
        let mut s = PipeScheduler::new(marking_pipe(0.3, corrupt, 5, false));
        run(&mut s, 4_000, 7 * US)
            .iter()
            .filter(|p| p.copies() == 2)
            .map(|p| p.without_marks().token)
            .collect()
    };
    assert_eq!(copies(0.0), copies(0.4));
}
