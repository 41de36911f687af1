//! Two threads: the producer pushes the sequence numbers `1..=n` with a mix
//! of `push` and `push_batch`; the consumer works in rounds like the arbiter
//! (pop up to a budget or until empty, then `release` once) and checks that
//! each number arrives exactly once and in order. The default runs are
//! short; `cargo test --release -p pspat-mailbox -- --ignored stress` runs
//! 100 M items per shape.

use std::num::NonZeroU64;
use std::thread;

use pspat_mailbox::{mailbox_with_line, Consumer, Producer};

/// xorshift64*: a seeded, dependency-free source of batch sizes.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Waiting for the other side: spin a little, then let the other thread
/// run (the test machine may have fewer free cores than threads).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        thread::yield_now();
    }
}

fn produce(mut tx: Producer<NonZeroU64>, n: u64, seed: u64) {
    let mut rng = Rng(seed);
    let mut next = 1u64;
    let mut burst = Vec::with_capacity(64);
    while next <= n {
        let mut spins = 0;
        if rng.below(2) == 0 {
            let v = NonZeroU64::new(next).unwrap();
            while tx.push(v).is_err() {
                backoff(&mut spins);
            }
            next += 1;
        } else {
            let len = (1 + rng.below(63)).min(n + 1 - next);
            burst.clear();
            burst.extend((next..next + len).map(|i| NonZeroU64::new(i).unwrap()));
            let mut done = 0;
            while done < burst.len() {
                let k = tx.push_batch(&burst[done..]);
                if k == 0 {
                    backoff(&mut spins);
                }
                done += k;
            }
            next += len;
        }
    }
    // Dropping `tx` marks it abandoned: the consumer's final drain must
    // still see every value.
}

fn consume(mut rx: Consumer<NonZeroU64>, n: u64, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    let mut expected = 1u64;
    let mut spins = 0;
    loop {
        let budget = 1 + rng.below(300);
        let mut got = 0;
        while got < budget {
            match rx.pop() {
                Some(v) => {
                    assert_eq!(v.get(), expected, "lost, duplicated or reordered");
                    expected += 1;
                    got += 1;
                }
                None => break,
            }
        }
        rx.release();
        if got > 0 {
            spins = 0;
        } else if rx.is_abandoned() {
            // Everything pushed happens-before the flag: one more drain.
            while let Some(v) = rx.pop() {
                assert_eq!(v.get(), expected, "lost, duplicated or reordered");
                expected += 1;
            }
            break;
        } else {
            backoff(&mut spins);
        }
    }
    assert_eq!(expected - 1, n, "every number arrives");
    expected - 1
}

fn two_threads(entries: usize, line: usize, n: u64, seed: u64) {
    let (tx, rx) = mailbox_with_line::<NonZeroU64>(entries, line).unwrap();
    let consumer = thread::spawn(move || consume(rx, n, seed ^ 0x9e37_79b9_7f4a_7c15));
    let producer = thread::spawn(move || produce(tx, n, seed));
    producer.join().unwrap();
    assert_eq!(consumer.join().unwrap(), n);
}

#[test]
fn two_threads_default_ring() {
    two_threads(512, 16, 1 << 22, 1);
}

#[test]
fn two_threads_small_ring() {
    two_threads(64, 16, 1 << 21, 2);
}

#[test]
fn two_threads_tiny_ring_short_lines() {
    two_threads(8, 2, 1 << 20, 3);
}

#[test]
#[ignore = "stress"]
fn stress_default_ring_100m() {
    two_threads(512, 16, 100_000_000, 11);
}

#[test]
#[ignore = "stress"]
fn stress_tiny_ring_100m() {
    two_threads(8, 2, 100_000_000, 12);
}
