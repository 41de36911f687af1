//! loom models (`docs/REFERENCE.md` §2.6): two threads on a mailbox of E = 8
//! slots in lines of Λ = 2 (capacity 6), small enough for loom to reach
//! wrap-around. Every model asserts that nothing is lost, duplicated or
//! reordered. Run with `.ci/loom.sh` (`LOOM_MAX_PREEMPTIONS=2`, release).

use std::num::NonZeroU64;

use loom::thread;
use pspat_mailbox::{mailbox_with_line, Consumer, Producer};

const E: usize = 8;
const LINE: usize = 2;

fn tiny() -> (Producer<NonZeroU64>, Consumer<NonZeroU64>) {
    mailbox_with_line(E, LINE).unwrap()
}

fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).unwrap()
}

/// A loom builder bounded to 2 preemptions unless `LOOM_MAX_PREEMPTIONS`
/// says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Pushes `1..=n` one at a time, yielding while full.
fn push_all(tx: &mut Producer<NonZeroU64>, n: u64) {
    for i in 1..=n {
        while tx.push(nz(i)).is_err() {
            thread::yield_now();
        }
    }
}

/// Pops until `n` values came, releasing once per empty poll (like the
/// arbiter's round), and checks they are `1..=n` in order.
fn pop_all(rx: &mut Consumer<NonZeroU64>, n: u64) {
    let mut expected = 1;
    while expected <= n {
        match rx.pop() {
            Some(v) => {
                assert_eq!(v.get(), expected);
                expected += 1;
            }
            None => {
                rx.release();
                thread::yield_now();
            }
        }
    }
    rx.release();
    assert_eq!(rx.pop(), None, "nothing beyond what was pushed");
}

/// 14 values through 6 usable slots (indices 2..16, so two passes over
/// slot 0..7): the producer wraps and refills lines the consumer released,
/// while the consumer pops and releases concurrently.
#[test]
fn wrap_around_in_order() {
    model(|| {
        let (mut tx, mut rx) = tiny();
        let producer = thread::spawn(move || push_all(&mut tx, 14));
        pop_all(&mut rx, 14);
        producer.join().unwrap();
    });
}

/// A `release` racing an `insert`: the ring is full of popped-but-unreleased
/// values; the producer retries while the consumer releases. The push must
/// land after the release (never overwritten by a late zero) and be read
/// exactly once.
#[test]
fn release_races_insert() {
    model(|| {
        let (mut tx, mut rx) = tiny();
        for i in 1..=6 {
            tx.push(nz(i)).unwrap();
        }
        for i in 1..=6 {
            assert_eq!(rx.pop(), Some(nz(i)));
        }
        assert!(tx.push(nz(7)).is_err(), "full until released");
        let producer = thread::spawn(move || {
            for i in 7..=9 {
                while tx.push(nz(i)).is_err() {
                    thread::yield_now();
                }
            }
        });
        rx.release();
        let mut expected = 7;
        while expected <= 9 {
            match rx.pop() {
                Some(v) => {
                    assert_eq!(v.get(), expected);
                    expected += 1;
                }
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(rx.pop(), None);
    });
}

/// Bursts: `push_batch` of 4 at a time (appending a prefix when short of
/// room) across the wrap, against a popping and releasing consumer.
#[test]
fn push_batch_across_wrap() {
    model(|| {
        let (mut tx, mut rx) = tiny();
        let producer = thread::spawn(move || {
            let all: Vec<NonZeroU64> = (1..=10).map(nz).collect();
            let mut done = 0;
            while done < all.len() {
                let end = (done + 4).min(all.len());
                let k = tx.push_batch(&all[done..end]);
                if k == 0 {
                    thread::yield_now();
                }
                done += k;
            }
        });
        pop_all(&mut rx, 10);
        producer.join().unwrap();
    });
}

/// The producer drops after pushing; a consumer that sees `is_abandoned`
/// must then find every pushed value (the Release/Acquire on the flag).
#[test]
fn abandoned_producer_final_drain() {
    model(|| {
        let (mut tx, mut rx) = tiny();
        let producer = thread::spawn(move || {
            for i in 1..=3 {
                tx.push(nz(i)).unwrap();
            }
            drop(tx);
        });
        let mut expected = 1;
        loop {
            if rx.is_abandoned() {
                while let Some(v) = rx.pop() {
                    assert_eq!(v.get(), expected);
                    expected += 1;
                }
                break;
            }
            match rx.pop() {
                Some(v) => {
                    assert_eq!(v.get(), expected);
                    expected += 1;
                }
                None => thread::yield_now(),
            }
        }
        assert_eq!(expected, 4, "all three values seen after is_abandoned");
        producer.join().unwrap();
    });
}

/// The consumer drops; the producer eventually sees `is_abandoned`, and
/// pushing stays safe (it just fills up).
#[test]
fn abandoned_consumer_is_seen() {
    model(|| {
        let (mut tx, rx) = tiny();
        let consumer = thread::spawn(move || drop(rx));
        while !tx.is_abandoned() {
            let _ = tx.push(nz(1));
            thread::yield_now();
        }
        consumer.join().unwrap();
        assert!(tx.is_abandoned());
    });
}

/// Backpressure is a hint, but never lost nor invented: one set by the
/// consumer is taken exactly once, whether the producer polls before,
/// during or after.
#[test]
fn backpressure_taken_exactly_once() {
    model(|| {
        let (mut tx, rx) = tiny();
        let consumer = thread::spawn(move || {
            rx.set_backpressure();
            rx
        });
        let mut taken = u32::from(tx.take_backpressure());
        let _rx = consumer.join().unwrap();
        taken += u32::from(tx.take_backpressure());
        assert_eq!(taken, 1);
        assert!(!tx.take_backpressure());
    });
}
