//! Cost of [`Classifier::classify`] per packet with 1 Ki and 64 Ki live
//! dynamic queues (flowset mask `src-ip`, keys drawn at random from 65 536 sources,
//! all created before timing), next to the bare scheduling algorithm it feeds
//! (QFQ, enqueue + dequeue of one packet with 1024 packets backlogged over
//! the same 64 Ki flows) and to both together; the batch variant classifies
//! 16 packets per call (its time is per batch, its throughput per packet). Run with
//! `cargo bench -p pspat-classify --bench classify`.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pspat_classify::{Classifier, ClassifierLimits, OverflowPolicy, PacketKey, Verdict};
use pspat_sched::{FlowId, Instant, Packet, Qfq, Scheduler};

const QUEUES: u32 = 65_536;
const BACKLOG: usize = 1024;

fn setup(queues: u32) -> (Classifier, Vec<PacketKey>) {
    let text = "sched 4 config type qfq bw 10Gbit/s\n\
                queue 1 config weight 1 sched 4 mask src-ip 0xffffffff\n\
                add 100 deny tcp from any to any dst-port 22\n\
                add 200 queue 1 ip from 10.0.0.0/8 to any\n";
    let plan = pspat_config::parse_ipfw(text, "bench.ipfw")
        .and_then(|c| c.validate(&pspat_config::NoProfiles))
        .expect("the bench's configuration is valid");
    let limits = ClassifierLimits {
        queues_per_flowset: queues,
        overflow: OverflowPolicy::Drop,
        idle_expiry_ns: u64::MAX,
        ..ClassifierLimits::default()
    };
    let mut c = Classifier::from_plan(&plan, &limits).expect("limits are in range");
    let dst = "10.199.0.1".parse().expect("an address");
    let mut rng = fastrand::Rng::with_seed(42);
    let mut sources: Vec<u32> = (0..queues).map(|i| 0x0a00_0000 | (i << 4) | 1).collect();
    rng.shuffle(&mut sources);
    for &s in &sources {
        let k = PacketKey::new(std::net::Ipv4Addr::from(s).into(), dst, 17, 1000, 80);
        c.classify(Instant::ZERO, &k, 100);
    }
    assert_eq!(c.flowset_stats(1).map(|s| s.live), Some(queues));
    // A random sequence over the live keys (1 Mi packets, cycled).
    let keys = (0..1 << 20)
        .map(|_| {
            let s = sources[rng.usize(..sources.len())];
            PacketKey::new(std::net::Ipv4Addr::from(s).into(), dst, 17, 1000, 80)
        })
        .collect();
    (c, keys)
}

fn qfq(c: &Classifier) -> Qfq {
    let table = c
        .layout()
        .link(4)
        .and_then(|l| l.flow_table().ok())
        .expect("link 4 has flows");
    let mut q = Qfq::new(table, BACKLOG * 2).expect("a valid QFQ");
    for i in 0..BACKLOG {
        q.enqueue(Instant::ZERO, Packet::new(FlowId(i as u32 * 61), 100, 0))
            .expect("room");
    }
    q
}

fn bench(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("classify");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    let mut now = 0u64;
    // The same with 1 Ki queues (every table cache-resident): the cost
    // without memory misses.
    let (mut small, small_keys) = setup(1024);
    g.bench_function("classify_1k_dynamic_queues", |b| {
        b.iter(|| {
            i = (i + 1) & (small_keys.len() - 1);
            now += 10;
            black_box(small.classify(Instant::from_nanos(now), &small_keys[i], 100))
        })
    });
    drop(small);
    let (mut c, keys) = setup(QUEUES);
    let mut sched = qfq(&c);
    g.bench_function("classify_64k_dynamic_queues", |b| {
        b.iter(|| {
            i = (i + 1) & (keys.len() - 1);
            now += 10;
            black_box(c.classify(Instant::from_nanos(now), &keys[i], 100))
        })
    });
    let mut out = vec![Verdict::Pass; pspat_classify::BATCH];
    let lens = vec![100u32; pspat_classify::BATCH];
    let mut j = 0usize;
    g.throughput(Throughput::Elements(pspat_classify::BATCH as u64));
    g.bench_function("classify_batch16_64k_dynamic_queues", |b| {
        b.iter(|| {
            j = (j + pspat_classify::BATCH) & (keys.len() - 1);
            now += 10;
            let batch = &keys[j..j + pspat_classify::BATCH];
            black_box(c.classify_batch(Instant::from_nanos(now), batch, &lens, &mut out))
        })
    });
    g.throughput(Throughput::Elements(1));
    let mut rng = fastrand::Rng::with_seed(3);
    g.bench_function("qfq_enqueue_dequeue_64k_flows", |b| {
        b.iter(|| {
            now += 10;
            let t = Instant::from_nanos(now);
            let f = FlowId(rng.u32(..QUEUES));
            let _ = sched.enqueue(t, Packet::new(f, 100, 0));
            black_box(sched.dequeue(t))
        })
    });
    g.bench_function("classify_then_qfq", |b| {
        b.iter(|| {
            i = (i + 1) & (keys.len() - 1);
            now += 10;
            let t = Instant::from_nanos(now);
            if let Verdict::Enqueue(p) = c.classify(t, &keys[i], 100) {
                let _ = sched.enqueue(t, Packet::new(p.flow, 100, 0));
            }
            black_box(sched.dequeue(t))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
