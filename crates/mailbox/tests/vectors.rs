//! `docs/REFERENCE.md` §2.7: the reference `net/pspat/mailbox_test.c` vectors with
//! E = 512 slots, Λ = 16 slots per line, hence maxn = 496. `clear` there is
//! `Consumer::release` here.

use std::num::NonZeroU64;

use pspat_mailbox::{mailbox, Consumer, Producer};

const E: usize = 512;
const MAXN: usize = 496;

fn new() -> (Producer<NonZeroU64>, Consumer<NonZeroU64>) {
    let (tx, rx) = mailbox::<NonZeroU64>(E).unwrap();
    assert_eq!(tx.capacity(), MAXN);
    assert_eq!(rx.capacity(), MAXN);
    (tx, rx)
}

/// Sequence numbers pushed and expected back, starting at 1.
#[derive(Default)]
struct Seq {
    next_in: u64,
    next_out: u64,
}

impl Seq {
    fn take(&mut self) -> NonZeroU64 {
        self.next_in += 1;
        NonZeroU64::new(self.next_in).unwrap()
    }

    /// Pushes until refused; returns how many went in.
    fn fill(&mut self, tx: &mut Producer<NonZeroU64>) -> usize {
        let mut n = 0;
        loop {
            let v = self.take();
            match tx.push(v) {
                Ok(()) => n += 1,
                Err(full) => {
                    assert_eq!(full.0, v, "a refused push hands the value back");
                    self.next_in -= 1;
                    return n;
                }
            }
        }
    }

    /// Pushes exactly `n`, each of which must be accepted.
    fn insert(&mut self, tx: &mut Producer<NonZeroU64>, n: usize) {
        for i in 0..n {
            let v = self.take();
            assert!(tx.push(v).is_ok(), "insert {i} of {n} refused");
        }
    }

    /// Pops up to `max`, checking order; returns how many came out.
    fn extract(&mut self, rx: &mut Consumer<NonZeroU64>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match rx.pop() {
                Some(v) => {
                    self.next_out += 1;
                    assert_eq!(v.get(), self.next_out, "out of order");
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn drain(&mut self, rx: &mut Consumer<NonZeroU64>) -> usize {
        self.extract(rx, usize::MAX)
    }
}

/// 1: a new mailbox is empty.
#[test]
fn v01_new_mailbox_is_empty() {
    let (tx, mut rx) = new();
    assert!(rx.is_empty());
    assert!(!tx.is_full());
    assert_eq!(rx.pop(), None);
}

/// 2: one insert succeeds and makes it non-empty.
#[test]
fn v02_insert_makes_it_non_empty() {
    let (mut tx, rx) = new();
    assert!(tx.push(NonZeroU64::new(42).unwrap()).is_ok());
    assert!(!rx.is_empty());
}

/// 3: insert v, extract gives v back and leaves it empty.
#[test]
fn v03_insert_extract_round_trip() {
    let (mut tx, mut rx) = new();
    let v = NonZeroU64::new(0xdead_beef).unwrap();
    tx.push(v).unwrap();
    assert_eq!(rx.pop(), Some(v));
    assert!(rx.is_empty());
    assert_eq!(rx.pop(), None);
}

/// 4: fill until failure takes exactly maxn = 496; the next insert fails.
#[test]
fn v04_fill_until_failure_takes_maxn() {
    let (mut tx, _rx) = new();
    let mut s = Seq::default();
    assert_eq!(s.fill(&mut tx), MAXN);
    assert!(tx.is_full());
    assert!(tx.push(NonZeroU64::MIN).is_err());
    assert!(tx.push_batch(&[NonZeroU64::MIN]) == 0);
}

/// 5: fill then drain: 496 in, 496 out, then empty.
#[test]
fn v05_fill_then_drain() {
    let (mut tx, mut rx) = new();
    let mut s = Seq::default();
    assert_eq!(s.fill(&mut tx), MAXN);
    assert_eq!(s.drain(&mut rx), MAXN);
    assert!(rx.is_empty());
}

/// 6: fill, drain, then insert without clear fails: popped slots stay
/// occupied until released.
#[test]
fn v06_insert_after_drain_without_release_fails() {
    let (mut tx, mut rx) = new();
    let mut s = Seq::default();
    assert_eq!(s.fill(&mut tx), MAXN);
    assert_eq!(s.drain(&mut rx), MAXN);
    assert!(tx.is_full());
    assert!(tx.push(NonZeroU64::MIN).is_err());
}

/// 7: fill, drain, clear: still empty, and a fill takes 496 again.
#[test]
fn v07_release_then_refill() {
    let (mut tx, mut rx) = new();
    let mut s = Seq::default();
    assert_eq!(s.fill(&mut tx), MAXN);
    assert_eq!(s.drain(&mut rx), MAXN);
    rx.release();
    assert!(rx.is_empty());
    assert!(!tx.is_full());
    assert_eq!(s.fill(&mut tx), MAXN);
    assert_eq!(s.drain(&mut rx), MAXN);
}

/// 8: 170 (= E/3) laps of fill, drain, clear: 496 each time, empty after each.
#[test]
fn v08_many_laps() {
    let (mut tx, mut rx) = new();
    let mut s = Seq::default();
    for lap in 0..E / 3 {
        assert_eq!(s.fill(&mut tx), MAXN, "lap {lap}");
        assert_eq!(s.drain(&mut rx), MAXN, "lap {lap}");
        rx.release();
        assert!(rx.is_empty(), "lap {lap}");
    }
    assert_eq!(s.next_out, 170 * 496);
}

/// 9: +99 (maxn/5), −45 (/11), −41 (/12), −1, +70 (/7), −2, drain: the last
/// drain yields 80 and leaves it empty.
#[test]
fn v09_mixed_ratios() {
    let (mut tx, mut rx) = new();
    let mut s = Seq::default();
    s.insert(&mut tx, MAXN / 5);
    assert_eq!(s.extract(&mut rx, MAXN / 11), 45);
    assert_eq!(s.extract(&mut rx, MAXN / 12), 41);
    assert_eq!(s.extract(&mut rx, 1), 1);
    s.insert(&mut tx, MAXN / 7);
    assert_eq!(s.extract(&mut rx, 2), 2);
    assert_eq!(s.drain(&mut rx), 80);
    assert!(rx.is_empty());
}

/// 10: while track + 57 <= 496: +57 (5·maxn/43), −46 (4·maxn/43), clear.
/// Every insert succeeds and the loop runs 40 (= ⌈439/11⌉) times.
#[test]
fn v10_fill_drain_clear_ratio() {
    let (mut tx, mut rx) = new();
    let mut s = Seq::default();
    let (plus, minus) = (5 * MAXN / 43, 4 * MAXN / 43);
    assert_eq!((plus, minus), (57, 46));
    let mut track = 0;
    let mut iterations = 0;
    while track + plus <= MAXN {
        s.insert(&mut tx, plus);
        assert_eq!(s.extract(&mut rx, minus), minus);
        rx.release();
        track += plus - minus;
        iterations += 1;
    }
    assert_eq!(iterations, 40);
    assert_eq!(s.drain(&mut rx), track);
}

/// 11: 8432 (17·maxn) times: insert one (never fails), drain at most two
/// (exactly one comes out); clear only when i mod 496 is 165 or 330.
#[test]
fn v11_one_at_a_time_with_rare_release() {
    let (mut tx, mut rx) = new();
    let mut s = Seq::default();
    for i in 0..17 * MAXN {
        let v = s.take();
        assert!(tx.push(v).is_ok(), "insert {i} failed");
        assert_eq!(s.extract(&mut rx, 2), 1, "step {i}");
        if matches!(i % MAXN, 165 | 330) {
            rx.release();
        }
    }
    assert_eq!(s.next_out, 8432);
}
