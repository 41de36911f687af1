//! "No allocation per packet": after construction and a warm-up, a long run
//! of enqueues and dequeues of every algorithm allocates nothing.
//!
//! `allocation-counter` installs a counting global allocator in this test
//! binary and counts per thread, so tests running in parallel do not
//! interfere.

use pspat_sched::{
    AlgKind, FlowId, FlowParams, FlowTable, Instant, Packet, Scheduler, SchedulerConfig,
};

/// Random enqueue/dequeue mix over 64 flows with time advancing.
fn drive(s: &mut impl Scheduler, rng: &mut fastrand::Rng, now: &mut u64, steps: usize) {
    for i in 0..steps {
        *now += rng.u64(0..2_000);
        if rng.bool() || s.queued() > 3_000 {
            let _ = s.dequeue(Instant::from_nanos(*now));
        } else {
            let pkt = Packet::new(FlowId(rng.u32(0..64)), rng.u32(64..=1500), i as u64);
            let _ = s.enqueue(Instant::from_nanos(*now), pkt);
        }
    }
}

#[test]
fn steady_state_enqueue_and_dequeue_allocate_nothing() {
    // The counter works: a Vec allocates.
    let probe = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 16]);
    });
    assert!(
        probe.count_total >= 1,
        "the counting allocator is not active"
    );
    for &alg in AlgKind::ALL {
        let mut rng = fastrand::Rng::with_seed(7);
        let flows: Vec<FlowParams> = (0..64)
            .map(|_| FlowParams::weighted(rng.u32(1..=16)))
            .collect();
        let mut cfg = SchedulerConfig::new(alg);
        cfg.capacity = 4_096;
        let mut s = cfg
            .build(FlowTable::new(flows).expect("valid flows"))
            .expect("valid config");
        let mut now = 0;
        drive(&mut s, &mut rng, &mut now, 200_000); // warm-up
        let info = allocation_counter::measure(|| drive(&mut s, &mut rng, &mut now, 200_000));
        assert_eq!(
            info.count_total, 0,
            "{alg}: {} allocations in steady state",
            info.count_total
        );
    }
}
