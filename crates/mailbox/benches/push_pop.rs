//! Cross-thread transfers through one mailbox: the producer (the timed
//! thread) pushes `iters` values that a peer thread pops, releasing once per
//! drained batch like the arbiter. Both threads are pinned when
//! `core_affinity` can see two cores (producer on the second core, consumer
//! on the first); the pinning is printed once. Figures are not recorded
//! here: see `benches/comparison` for the same-run comparison with `rtrb`
//! and `crossbeam`.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pspat_mailbox::{mailbox, Consumer, Producer};

/// Cores for (producer, consumer), if there are at least two.
fn cores() -> Option<(core_affinity::CoreId, core_affinity::CoreId)> {
    let ids = core_affinity::get_core_ids()?;
    match ids.as_slice() {
        [c0, c1, ..] => Some((*c1, *c0)),
        _ => None,
    }
}

fn pin(core: Option<core_affinity::CoreId>) {
    if let Some(core) = core {
        core_affinity::set_for_current(core);
    }
}

fn drain(
    mut rx: Consumer<NonZeroU64>,
    n: u64,
    go: Arc<(Barrier, AtomicBool)>,
    core: Option<core_affinity::CoreId>,
) {
    pin(core);
    go.0.wait();
    // Running: tell the producer, which starts its clock only then, so the
    // time a woken thread takes to be scheduled is not measured.
    go.1.store(true, Ordering::Release);
    let mut got = 0;
    while got < n {
        let mut batch = 0;
        while let Some(v) = rx.pop() {
            std::hint::black_box(v);
            batch += 1;
        }
        if batch == 0 {
            std::hint::spin_loop();
        } else {
            rx.release();
            got += batch;
        }
    }
}

fn transfer(entries: usize, iters: u64, burst: usize) -> Duration {
    let (mut tx, rx): (Producer<NonZeroU64>, _) = mailbox(entries).expect("valid size");
    let pinning = cores();
    let go = Arc::new((Barrier::new(2), AtomicBool::new(false)));
    let peer = {
        let go = Arc::clone(&go);
        thread::spawn(move || drain(rx, iters, go, pinning.map(|p| p.1)))
    };
    pin(pinning.map(|p| p.0));
    let values: Vec<NonZeroU64> = (1..=burst as u64)
        .map(|i| NonZeroU64::new(i).expect("i >= 1"))
        .collect();
    go.0.wait();
    // Acquire: pairs with the consumer's Release once it runs.
    while !go.1.load(Ordering::Acquire) {
        std::hint::spin_loop();
    }
    let t0 = Instant::now();
    if burst == 1 {
        for i in 1..=iters {
            let v = NonZeroU64::new(i).expect("i >= 1");
            while tx.push(v).is_err() {
                std::hint::spin_loop();
            }
        }
    } else {
        let mut left = iters as usize;
        while left > 0 {
            let want = left.min(burst);
            let n = tx.push_batch(&values[..want]);
            if n == 0 {
                std::hint::spin_loop();
            }
            left -= n;
        }
    }
    peer.join().expect("consumer thread");
    t0.elapsed()
}

fn push_pop(c: &mut Criterion) {
    match cores() {
        Some((p, q)) => eprintln!(
            "push_pop: producer pinned to core {}, consumer to core {}",
            p.id, q.id
        ),
        None => eprintln!("push_pop: fewer than two cores visible, threads not pinned"),
    }
    let mut group = c.benchmark_group("cross_thread");
    group.throughput(Throughput::Elements(1));
    for burst in [1usize, 32] {
        group.bench_with_input(
            BenchmarkId::new("mailbox_512", burst),
            &burst,
            |b, &burst| {
                b.iter_custom(|iters| transfer(512, iters, burst));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, push_pop);
criterion_main!(benches);
