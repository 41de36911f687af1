//! Random configurations and arrivals: conservation at every step, order
//! unless reorder, never early, never before arrival, drained at the end;
//! the fast and general paths (filters, delay line) give the same outcome.

use std::collections::HashMap;

use proptest::prelude::*;
use pspat_sched::pipe::pie::DelayEstimator;
use pspat_sched::pipe::{
    Codel, DelayProfile, Framing, GilbertElliott, Jitter, JitterDistribution, LossState,
    NetemReorder, Pie, Pipe, PipeConfig, QueueConfig, QueueLimit, Red, SlotInterval, Slots,
};
use pspat_sched::{AlgKind, Fate, FlowId, FlowTable, Instant, Packet, SchedulerConfig};

use crate::pipe_common::{at, drive, rate};

fn probability() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), 0.0..0.3f64, Just(1.0)]
}

fn queue_config() -> impl Strategy<Value = QueueConfig> {
    (
        prop_oneof![
            (1u32..40).prop_map(QueueLimit::Slots),
            (1u64..60_000).prop_map(QueueLimit::Bytes)
        ],
        probability(),
        proptest::option::of((
            any::<bool>(),
            0.001..=1.0f64,
            0u64..30,
            1u64..30,
            0.01..=1.0f64,
        )),
        proptest::option::of((0.0..=1.0f64, 0.0..=1.0f64, probability(), probability())),
        proptest::option::of(loss_state()),
        (probability(), 0.0..0.9f64),
        (probability(), 0.0..0.9f64),
        // CoDel, with targets and intervals of the order of the runs'
        // queueing delays (used only without RED: one AQM a queue).
        proptest::option::of((1u64..2_000_000, 1u64..20_000_000, any::<bool>())),
        // PIE, likewise (used only without RED and CoDel).
        proptest::option::of((
            1_000u64..2_000_000,
            1_000u64..5_000_000,
            0u64..3_000_000,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )),
    )
        .prop_map(
            |(
                limit,
                plr,
                red,
                ge,
                ls,
                (duplicate, duplicate_correlation),
                (corrupt, corrupt_correlation),
                codel,
                pie,
            )| QueueConfig {
                limit,
                plr,
                red: red.map(|(gentle, w_q, min, span, max_p)| {
                    // Thresholds in the limit's unit: bytes are scaled up.
                    let unit = if matches!(limit, QueueLimit::Bytes(_)) {
                        500
                    } else {
                        1
                    };
                    Red {
                        gentle,
                        w_q,
                        min_th: min * unit,
                        max_th: (min + span) * unit,
                        max_p,
                    }
                }),
                gilbert_elliott: ge.map(|(p, r, loss_bad, loss_good)| GilbertElliott {
                    p,
                    r,
                    loss_bad,
                    loss_good,
                }),
                loss_state: ls,
                duplicate,
                duplicate_correlation,
                corrupt,
                corrupt_correlation,
                ecn: false,
                loss_ecn: false,
                codel: codel
                    .filter(|_| red.is_none())
                    .map(|(target_ns, interval_ns, ecn)| Codel {
                        target_ns,
                        interval_ns,
                        ecn,
                    }),
                pie: pie.filter(|_| red.is_none() && codel.is_none()).map(
                    |(target_ns, tupdate_ns, max_burst_ns, ecn, ts, onoff)| Pie {
                        target_ns,
                        tupdate_ns,
                        max_burst_ns,
                        ecn,
                        onoff,
                        estimator: if ts {
                            DelayEstimator::Timestamp
                        } else {
                            DelayEstimator::DepartureRate
                        },
                        ..Pie::default()
                    },
                ),
            },
        )
}

/// A valid 4-state loss model: the ways out of states 1 and 3 sum to at
/// most 1 (each of the pair scaled into what the other leaves).
fn loss_state() -> impl Strategy<Value = LossState> {
    (
        probability(),
        0.0..=1.0f64,
        probability(),
        0.0..=1.0f64,
        0.0..=1.0f64,
    )
        .prop_map(|(p13, p14_share, p31, p32_share, p23)| LossState {
            p13,
            p31,
            p32: (1.0 - p31) * p32_share,
            p23,
            p14: (1.0 - p13) * p14_share * 0.3,
        })
}

fn framing() -> impl Strategy<Value = Framing> {
    prop_oneof![
        Just(Framing::NONE),
        (-64i32..=64, prop_oneof![Just(0u32), 1u32..100], 0u32..10).prop_map(|(o, c, co)| {
            Framing {
                packet_overhead: o,
                cell_size: c,
                cell_overhead: if c == 0 { 0 } else { co },
            }
        }),
    ]
}

fn pipe_config() -> impl Strategy<Value = PipeConfig> {
    (
        proptest::option::of(prop_oneof![Just(1_000u64), 100_000u64..10_000_000_000]),
        prop_oneof![Just(0u64), 0u64..20_000],
        0u64..5_000_000,
        proptest::option::of((
            proptest::collection::vec(0u64..2_000_000, 1..8),
            0.0..=1.0f64,
        )),
        proptest::option::of((
            0u64..3_000_000,
            0usize..4,
            prop_oneof![Just(0.0f64), 0.0..=1.0f64],
        )),
        any::<bool>(),
        queue_config(),
        2usize..64,
        (
            any::<u64>(),
            framing(),
            proptest::option::of((0.0..=1.0f64, 1u32..6, 0.0..0.9f64)),
            proptest::option::of((
                0u64..2_000_000,
                0u64..2_000_000,
                proptest::option::of(1u32..5),
                proptest::option::of(1u64..4_000),
            )),
            proptest::option::weighted(0.3, 1u32..40),
        ),
    )
        .prop_map(
            |(
                bw,
                burst_bytes,
                delay_ns,
                profile,
                jitter,
                reorder,
                queue,
                cap,
                (seed, framing, netem, slots, held_limit),
            )| {
                PipeConfig {
                    bw: bw.map(rate),
                    burst_bytes,
                    framing,
                    delay_ns,
                    profile: profile.map(|(t, l)| DelayProfile::new(t, l).unwrap()),
                    jitter_correlation: jitter.map_or(0.0, |j| j.2),
                    jitter: jitter.map(|(ns, d, _)| Jitter {
                        ns,
                        distribution: [
                            JitterDistribution::Uniform,
                            JitterDistribution::Normal,
                            JitterDistribution::Pareto,
                            JitterDistribution::ParetoNormal,
                        ][d],
                    }),
                    reorder,
                    // tc-netem's reordering needs a line that reorders.
                    netem_reorder: netem.filter(|_| reorder).map(
                        |(probability, gap, correlation)| NetemReorder {
                            probability,
                            gap,
                            correlation,
                        },
                    ),
                    slots: slots.map(|(a, b, packets, bytes)| Slots {
                        interval: SlotInterval::Uniform {
                            min_ns: a.min(b),
                            max_ns: a.max(b),
                        },
                        packets,
                        bytes,
                    }),
                    queue,
                    delay_line_capacity: cap,
                    held_capacity: pspat_sched::SchedulerConfig::DEFAULT_CAPACITY,
                    held_limit,
                    seed,
                }
            },
        )
}

fn arrivals() -> impl Strategy<Value = Vec<(u64, u32, u32)>> {
    // (gap ns, flow, len)
    proptest::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..2_000_000],
            0u32..4,
            1u32..=1_500,
        ),
        1..300,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn conservation_order_and_never_early(
        cfg in pipe_config(),
        alg in prop_oneof![Just(AlgKind::Fifo), Just(AlgKind::Drr), Just(AlgKind::Fq), Just(AlgKind::Qfq), Just(AlgKind::Wf2qPlus), Just(AlgKind::ShapedDrr)],
        arr in arrivals(),
    ) {
        let mut t = 0;
        let arr: Vec<(Instant, Packet)> = arr
            .iter()
            .enumerate()
            .map(|(i, &(gap, flow, len))| {
                t += gap;
                (at(t), Packet::new(FlowId(flow), len, i as u64))
            })
            .collect();
        let arrival: HashMap<u64, (Instant, FlowId)> =
            arr.iter().map(|(a, p)| (p.token, (*a, p.flow))).collect();
        let mut sched = SchedulerConfig::new(alg);
        sched.capacity = 256;
        sched.eiffel.rate_bps = 4_000_000; // shaped-drr: 4 Mbit/s per unit of weight
        let s = sched.build(FlowTable::uniform(4).unwrap()).unwrap();
        let reorder = cfg.reorder;
        let mut pipe = Pipe::new(cfg, s, 4).unwrap();
        // drive() checks conservation after every call, never early, and drained.
        let run = drive(&mut pipe, &arr);
        let c = *pipe.counters();
        prop_assert_eq!(c.in_packets, arr.len() as u64);
        prop_assert_eq!(c.in_packets, c.out_packets + c.dropped_total());
        prop_assert_eq!(c.duplicates, run.with_fate(Fate::Duplicate).count() as u64);
        // A corrupted packet is marked once, as it left the link: on its
        // exit to transmit (and its copy's), never on a drop.
        let corrupt_exits = run.with_fate(Fate::Transmit).filter(|e| e.packet.is_corrupt()).count();
        prop_assert_eq!(c.corrupted, corrupt_exits as u64);
        prop_assert!(run.rejected.iter().all(|(_, r)| !r.packet.is_corrupt()));
        // Every packet accounted for exactly once (plus its duplicate).
        let mut seen: HashMap<u64, u32> = HashMap::new();
        for (_, r) in &run.rejected {
            *seen.entry(r.packet.token).or_default() += 1;
        }
        for (_, e) in &run.exits {
            let token = e.packet.without_marks().token;
            if e.fate != Fate::Duplicate {
                *seen.entry(token).or_default() += 1;
            }
            prop_assert!(e.at >= arrival[&token].0, "left before it arrived");
        }
        prop_assert_eq!(seen.len(), arr.len());
        prop_assert!(seen.values().all(|&n| n == 1));
        if !reorder {
            // Exit times never decrease, and each flow keeps its order.
            prop_assert!(run.exits.windows(2).all(|w| w[0].1.at <= w[1].1.at));
            let mut last: HashMap<FlowId, u64> = HashMap::new();
            for (_, e) in run.exits.iter().filter(|(_, e)| e.fate == Fate::Transmit) {
                let token = e.packet.without_marks().token;
                let flow = arrival[&token].1;
                if let Some(&prev) = last.get(&flow) {
                    prop_assert!(prev < token, "flow {:?} reordered", flow);
                }
                last.insert(flow, token);
            }
        }
    }
}

/// `q` with the filters a flowset without them has: no plr, RED,
/// Gilbert-Elliott or 4-state loss (so its packets take the pipe's fast
/// path).
fn without_filters(q: QueueConfig) -> QueueConfig {
    QueueConfig {
        plr: 0.0,
        red: None,
        gilbert_elliott: None,
        loss_state: None,
        ..q
    }
}

/// `q` with RED configured where it has none, set so that it never drops
/// nor draws (the average stays below `min_th`): its packets take the
/// general filter path and keep filter state in the side table, with the
/// same outcome as `q`. (An inert Gilbert-Elliott would not do: its draws
/// share one stream with the real ones of other queues.) A queue with CoDel
/// or PIE keeps its configuration (a queue has one AQM, RED, CoDel or PIE).
fn with_inert_filters(q: QueueConfig) -> QueueConfig {
    if q.codel.is_some() || q.pie.is_some() {
        return q;
    }
    QueueConfig {
        red: q.red.or(Some(Red {
            gentle: false,
            w_q: 0.5,
            min_th: u64::MAX - 1,
            max_th: u64::MAX,
            max_p: 1.0,
        })),
        ..q
    }
}

/// What a run shows to its caller, in order: every exit (release time,
/// exit time, token, flow, fate), every refusal (arrival, token, reason),
/// the pipe's counters and every queue's.
type Outcome = (
    Vec<(Instant, Instant, u64, FlowId, Fate)>,
    Vec<(Instant, u64, pspat_sched::DropReason)>,
    pspat_sched::pipe::PipeCounters,
    Vec<pspat_sched::pipe::FlowCounters>,
);

/// Runs `arr` through a pipe of `cfg` over `alg` with 4 flows, flow `f`
/// configured with `queues[f]` when given.
fn outcome(
    cfg: PipeConfig,
    queues: &[Option<QueueConfig>],
    alg: AlgKind,
    arr: &[(Instant, Packet)],
) -> Outcome {
    let mut sched = SchedulerConfig::new(alg);
    sched.capacity = 256;
    let s = sched.build(FlowTable::uniform(4).unwrap()).unwrap();
    let mut pipe = Pipe::new(cfg, s, 4).unwrap();
    for (f, q) in queues.iter().enumerate() {
        if let Some(q) = q {
            pipe.set_queue(FlowId(f as u32), *q).unwrap();
        }
    }
    let run = drive(&mut pipe, arr);
    (
        run.exits
            .iter()
            .map(|(now, e)| (*now, e.at, e.packet.token, e.packet.flow, e.fate))
            .collect(),
        run.rejected
            .iter()
            .map(|(a, r)| (*a, r.packet.token, r.reason))
            .collect(),
        *pipe.counters(),
        pipe.all_flow_counters().copied().collect(),
    )
}

fn timed(arr: &[(u64, u32, u32)]) -> Vec<(Instant, Packet)> {
    let mut t = 0;
    arr.iter()
        .enumerate()
        .map(|(i, &(gap, flow, len))| {
            t += gap;
            (at(t), Packet::new(FlowId(flow), len, i as u64))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The fast path (a queue with only a limit) and the general filter
    /// path give the same exits, times, order, drops and counters: every
    /// queue of one run is made to take the general path by filters that
    /// never act. Queues with real filters are mixed in, and per-flow
    /// configurations are installed after construction (the side table of
    /// RED and Gilbert-Elliott state then appears late).
    #[test]
    fn fast_and_general_filter_paths_agree(
        cfg in pipe_config(),
        plain in any::<bool>(),
        queues in proptest::collection::vec(
            proptest::option::of((queue_config(), any::<bool>())), 4),
        alg in prop_oneof![Just(AlgKind::Fifo), Just(AlgKind::Drr), Just(AlgKind::Qfq)],
        arr in arrivals(),
    ) {
        let arr = timed(&arr);
        let mut fast = cfg.clone();
        if plain {
            fast.queue = without_filters(fast.queue);
        }
        let fast_queues: Vec<Option<QueueConfig>> = queues
            .iter()
            .map(|q| q.map(|(q, plain)| if plain { without_filters(q) } else { q }))
            .collect();
        let mut general = fast.clone();
        general.queue = with_inert_filters(general.queue);
        let general_queues: Vec<Option<QueueConfig>> =
            fast_queues.iter().map(|q| q.map(with_inert_filters)).collect();
        let a = outcome(fast, &fast_queues, alg, &arr);
        let b = outcome(general, &general_queues, alg, &arr);
        prop_assert_eq!(a, b);
    }

    /// A fixed delay (no profile, jitter or duplication) moves each packet
    /// into the line by the pipe's short path; a jitter of 0 ns takes the
    /// general path and draws a delay of 0. Both give the same exits,
    /// times, order, drops and counters, whatever the queues' filters.
    #[test]
    fn fixed_delay_and_drawn_delay_paths_agree(
        cfg in pipe_config(),
        queues in proptest::collection::vec(proptest::option::of(queue_config()), 4),
        alg in prop_oneof![Just(AlgKind::Fifo), Just(AlgKind::Drr), Just(AlgKind::Qfq)],
        arr in arrivals(),
    ) {
        let arr = timed(&arr);
        let no_copy = |q: QueueConfig| QueueConfig { duplicate: 0.0, ..q };
        let fixed = PipeConfig {
            jitter: None,
            profile: None,
            queue: no_copy(cfg.queue),
            ..cfg
        };
        let queues: Vec<Option<QueueConfig>> = queues.iter().map(|q| q.map(no_copy)).collect();
        let drawn = PipeConfig {
            jitter: Some(Jitter { ns: 0, distribution: JitterDistribution::Uniform }),
            ..fixed.clone()
        };
        let a = outcome(fixed, &queues, alg, &arr);
        let b = outcome(drawn, &queues, alg, &arr);
        prop_assert!(!a.0.is_empty() || !a.1.is_empty(), "the run did something");
        prop_assert_eq!(a, b);
    }

    /// Without jitter and profile losses every exit time is non-decreasing
    /// in link order, so the order-keeping ring and the reordering heap
    /// must hand out the same exits at the same times in the same order.
    #[test]
    fn ring_and_heap_delay_lines_agree_without_jitter(
        cfg in pipe_config(),
        alg in prop_oneof![Just(AlgKind::Fifo), Just(AlgKind::Drr), Just(AlgKind::Qfq)],
        arr in arrivals(),
    ) {
        let arr = timed(&arr);
        let ring = PipeConfig {
            jitter: None,
            reorder: false,
            netem_reorder: None,
            // A loss level of 1 keeps the profile's airtime and loses nothing.
            profile: cfg
                .profile
                .as_ref()
                .map(|p| DelayProfile::new(p.table_ns().to_vec(), 1.0).unwrap()),
            ..cfg
        };
        let heap = PipeConfig { reorder: true, ..ring.clone() };
        let a = outcome(ring, &[], alg, &arr);
        let b = outcome(heap, &[], alg, &arr);
        prop_assert!(!a.0.is_empty() || !a.1.is_empty(), "the run did something");
        prop_assert_eq!(a, b);
    }
}
