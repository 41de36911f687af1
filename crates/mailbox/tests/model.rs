//! Random `push` / `push_batch` / `pop` / `release` sequences on small
//! mailboxes, checked step by step against a `VecDeque` model.
//!
//! The capacity rule asserted here (derived in the `mailbox` module docs):
//! with `pushed` values in, `popped` out, and `released` = the values below
//! the last `release` point (`Λ·⌊popped_then/Λ⌋`, line 0 counting as already
//! released by the init trick), a push is refused **iff**
//! `pushed - released >= E - Λ`, and a burst appends exactly
//! `min(len, E - Λ - (pushed - released))`. So the look-ahead never refuses
//! below capacity, and right after a `release` a refusal implies more than
//! `E - 2Λ` values unread (`docs/REFERENCE.md` §2.7).

use std::collections::VecDeque;
use std::num::NonZeroU64;

use proptest::prelude::*;
use pspat_mailbox::{mailbox_with_line, Consumer, Producer};

#[derive(Clone, Debug)]
enum Op {
    Push,
    PushBatch(usize),
    Pop(usize),
    Release,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Push),
        2 => (0usize..80).prop_map(Op::PushBatch),
        3 => (1usize..40).prop_map(Op::Pop),
        1 => Just(Op::Release),
    ]
}

/// (E, Λ) pairs: the smallest legal ring, short and long lines, line 1.
const SHAPES: [(usize, usize); 7] = [
    (4, 1),
    (8, 2),
    (16, 4),
    (32, 4),
    (64, 8),
    (64, 16),
    (256, 16),
];

struct Model {
    entries: u64,
    line: u64,
    unread: VecDeque<u64>,
    pushed: u64,
    popped: u64,
    released: u64,
    /// True from a `release` until the next pop (for the §2.7 corollary).
    just_released: bool,
}

impl Model {
    fn capacity(&self) -> u64 {
        self.entries - self.line
    }
    /// Values occupying slots: unread plus popped-but-unreleased.
    fn occupancy(&self) -> u64 {
        self.pushed - self.released
    }
    fn full(&self) -> bool {
        self.occupancy() >= self.capacity()
    }
    fn room(&self) -> u64 {
        self.capacity() - self.occupancy()
    }
}

fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).unwrap()
}

fn run(entries: usize, line: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let (mut tx, mut rx): (Producer<NonZeroU64>, Consumer<NonZeroU64>) =
        mailbox_with_line(entries, line).unwrap();
    let mut m = Model {
        entries: entries as u64,
        line: line as u64,
        unread: VecDeque::new(),
        pushed: 0,
        popped: 0,
        released: 0,
        just_released: false,
    };
    prop_assert_eq!(tx.capacity() as u64, m.capacity());
    for (step, op) in ops.iter().enumerate() {
        prop_assert_eq!(
            tx.is_full(),
            m.full(),
            "is_full at step {} ({:?})",
            step,
            op
        );
        prop_assert_eq!(
            rx.is_empty(),
            m.unread.is_empty(),
            "is_empty at step {}",
            step
        );
        match *op {
            Op::Push => {
                let v = m.pushed + 1;
                match tx.push(nz(v)) {
                    Ok(()) => {
                        prop_assert!(!m.full(), "accepted beyond capacity at step {}", step);
                        m.unread.push_back(v);
                        m.pushed += 1;
                    }
                    Err(full) => {
                        prop_assert_eq!(full.0.get(), v);
                        prop_assert!(
                            m.full(),
                            "refused at occupancy {} < capacity {} (step {})",
                            m.occupancy(),
                            m.capacity(),
                            step
                        );
                        if m.just_released {
                            prop_assert!(m.unread.len() as u64 > m.entries - 2 * m.line);
                        }
                    }
                }
            }
            Op::PushBatch(len) => {
                let burst: Vec<NonZeroU64> = (1..=len as u64).map(|i| nz(m.pushed + i)).collect();
                let n = tx.push_batch(&burst) as u64;
                prop_assert_eq!(
                    n,
                    m.room().min(len as u64),
                    "burst of {} at step {}",
                    len,
                    step
                );
                for i in 1..=n {
                    m.unread.push_back(m.pushed + i);
                }
                m.pushed += n;
            }
            Op::Pop(k) => {
                for _ in 0..k {
                    let got = rx.pop().map(NonZeroU64::get);
                    prop_assert_eq!(got, m.unread.pop_front(), "pop at step {}", step);
                    if got.is_none() {
                        break;
                    }
                    m.popped += 1;
                    m.just_released = false;
                }
            }
            Op::Release => {
                rx.release();
                m.released = m.line * (m.popped / m.line);
                m.just_released = true;
            }
        }
    }
    // Drain: nothing lost, nothing duplicated.
    while let Some(v) = rx.pop() {
        prop_assert_eq!(Some(v.get()), m.unread.pop_front());
    }
    prop_assert!(m.unread.is_empty(), "lost {:?}", m.unread);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_vecdeque_model(
        shape in 0..SHAPES.len(),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let (entries, line) = SHAPES[shape];
        run(entries, line, &ops)?;
    }
}

/// Long deterministic runs over many laps on every shape (the random runs
/// are short): a fixed pattern of bursts, pops and releases.
#[test]
fn many_laps_every_shape() {
    for &(entries, line) in &SHAPES {
        let ops: Vec<Op> = (0..3000)
            .map(|i| match i % 7 {
                0 | 3 => Op::Push,
                1 => Op::PushBatch(i % 23),
                2 | 5 => Op::Pop(i % 11 + 1),
                4 => Op::PushBatch(i % 5),
                _ => Op::Release,
            })
            .collect();
        run(entries, line, &ops).unwrap();
    }
}

/// Regression (found by `matches_vecdeque_model` while extending bursts line
/// by line): a burst longer than the capacity must stop at the free slots.
/// Verifying further would test a look-ahead slot that the burst itself is
/// about to fill, still empty from the previous lap, so a full ring passed
/// the check (E = 4, Λ = 1: a burst of 4 took 4 values into 3 free slots).
#[test]
fn burst_longer_than_capacity_stops_at_the_free_slots() {
    use Op::{Pop, PushBatch, Release};
    run(4, 1, &[Op::Push, Pop(1), Release, PushBatch(4)]).unwrap();
    for &(entries, line) in &SHAPES {
        let ops = [
            PushBatch(2 * entries),
            Pop(entries),
            Release,
            PushBatch(2 * entries),
            Pop(3),
            PushBatch(entries),
        ];
        run(entries, line, &ops).unwrap();
    }
}
