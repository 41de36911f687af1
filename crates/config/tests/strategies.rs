use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use pspat_config::header::TcpFlags;
use pspat_config::{
    Action, AddrList, AddrMatch, Codel, Config, DefaultAction, Direction, Distribution, FlowMask,
    FqCodel, FqPie, GilbertElliott, InterfaceMatch, InterfaceRole, LinkParams, LossState,
    MatchProbability, Parent, Pie, Pipe, PortRange, Prefix, Proto, Queue, QueueLimit, QueueParams,
    Red, Rule, Sched, SlotInterval, SlotParams, Table, TableEntry, Target,
};
use pspat_sched::AlgKind;

fn real() -> impl Strategy<Value = f64> {
    prop_oneof![
        -2.0..2.0f64,
        0.0..=1.0f64,
        Just(0.0),
        Just(1.0),
        any::<f64>().prop_filter("finite", |v| v.is_finite())
    ]
}

fn word() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9._*/-]{0,12}"
}

fn slot() -> impl Strategy<Value = SlotParams> {
    let interval = prop_oneof![
        (any::<u64>(), any::<u64>())
            .prop_map(|(min_us, max_us)| SlotInterval::Uniform { min_us, max_us }),
        (
            select(Distribution::ALL.to_vec()),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(
                |(distribution, delay_us, jitter_us)| SlotInterval::Distribution {
                    distribution,
                    delay_us,
                    jitter_us,
                }
            ),
    ];
    (interval, option::of(any::<u32>()), option::of(any::<u64>())).prop_map(
        |(interval, packets, bytes)| SlotParams {
            interval,
            packets,
            bytes,
        },
    )
}

fn link() -> impl Strategy<Value = LinkParams> {
    (
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(any::<u64>()),
        option::of(word()),
        option::of(any::<u64>()),
        option::of(select(Distribution::ALL.to_vec())),
        any::<bool>(),
        (
            option::of(any::<i32>()),
            option::of(any::<u32>()),
            option::of(any::<u32>()),
            option::of(real()),
            option::of(any::<u32>()),
            option::of(slot()),
            option::of(real()),
            option::of(real()),
        ),
    )
        .prop_map(
            |(
                bw,
                delay_us,
                burst,
                profile,
                jitter_us,
                distribution,
                reorder,
                (
                    packet_overhead,
                    cell_size,
                    cell_overhead,
                    reorder_probability,
                    reorder_gap,
                    slot,
                    jitter_correlation,
                    reorder_correlation,
                ),
            )| LinkParams {
                bw,
                delay_us,
                burst,
                profile,
                jitter_us,
                distribution,
                jitter_correlation,
                // `reorder P` prints as the flag too.
                reorder: reorder || reorder_probability.is_some(),
                reorder_probability,
                // Printed only after a probability.
                reorder_correlation: reorder_correlation.filter(|_| reorder_probability.is_some()),
                reorder_gap,
                packet_overhead,
                cell_size,
                cell_overhead,
                slot,
            },
        )
}

fn queue_params() -> impl Strategy<Value = QueueParams> {
    let limit = prop_oneof![
        any::<u32>().prop_map(QueueLimit::Slots),
        any::<u64>().prop_map(QueueLimit::Bytes)
    ];
    let red = (any::<bool>(), real(), any::<u32>(), any::<u32>(), real()).prop_map(
        |(gentle, w_q, min_th, max_th, max_p)| Red {
            gentle,
            w_q,
            min_th,
            max_th,
            max_p,
        },
    );
    let ge = (real(), real(), real(), real()).prop_map(|(p, r, one_minus_h, one_minus_k)| {
        GilbertElliott {
            p,
            r,
            one_minus_h,
            one_minus_k,
        }
    });
    // All five values, as the parsers store them (defaults filled in).
    let loss_state = prop_oneof![
        (real(), real(), real(), real(), real()).prop_map(|(p13, p31, p32, p23, p14)| {
            LossState {
                p13,
                p31,
                p32,
                p23,
                p14,
            }
        }),
        real().prop_map(LossState::with_defaults),
    ];
    // One AQM a queue, as the parsers accept: RED, CoDel, PIE or none.
    let aqm = prop_oneof![
        Just((None, None, None)),
        red.prop_map(|r| (Some(r), None, None)),
        codel().prop_map(|c| (None, Some(c), None)),
        pie().prop_map(|p| (None, None, Some(p))),
    ];
    (
        option::of(limit),
        option::of(real()),
        aqm,
        any::<bool>(),
        option::of(any::<u32>()),
        any::<bool>(),
        option::of(ge),
        option::of(loss_state),
        any::<bool>(),
        chance(),
        chance(),
    )
        .prop_map(
            |(
                limit,
                plr,
                (red, codel, pie),
                ecn,
                buckets,
                noerror,
                gemodel,
                lossstate,
                lossecn,
                (duplicate, duplicate_correlation),
                (corrupt, corrupt_correlation),
            )| {
                let mut q = QueueParams {
                    limit,
                    plr,
                    red,
                    codel,
                    pie,
                    // Only with RED, as validation accepts it.
                    ecn: ecn && red.is_some(),
                    buckets,
                    noerror,
                    gemodel,
                    lossstate,
                    lossecn: false,
                    duplicate,
                    duplicate_correlation,
                    corrupt,
                    corrupt_correlation,
                };
                // Only with a random loss, as validation accepts it.
                q.lossecn = lossecn && q.random_loss();
                q
            },
        )
}

/// CoDel's parameters, any values (the parsers store all three).
fn codel() -> impl Strategy<Value = Codel> {
    (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(target_us, interval_us, ecn)| Codel {
        target_us,
        interval_us,
        ecn,
    })
}

/// PIE's parameters, any values (the parsers store all eleven).
fn pie() -> impl Strategy<Value = Pie> {
    (
        (any::<u64>(), any::<u64>(), any::<u64>()),
        (real(), real(), real()),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (target_us, tupdate_us, max_burst_us),
                (alpha, beta, max_ecnth),
                (ecn, capdrop, derand, onoff, dre),
            )| Pie {
                target_us,
                tupdate_us,
                alpha,
                beta,
                max_burst_us,
                max_ecnth,
                ecn,
                capdrop,
                derand,
                onoff,
                dre,
            },
        )
}

/// A sched's type: none, any algorithm's name, or `fq_codel` or `fq_pie`
/// with any parameters (the parsers store them all, and the type fq with
/// them).
#[allow(clippy::type_complexity)] // the three fields of a sched's type
fn sched_type() -> impl Strategy<Value = (Option<AlgKind>, Option<FqCodel>, Option<FqPie>)> {
    let fq_codel = (codel(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(codel, quantum, limit, flows)| FqCodel {
            codel,
            quantum,
            limit,
            flows,
        },
    );
    let fq_pie = (pie(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(pie, quantum, limit, flows)| FqPie {
            pie,
            quantum,
            limit,
            flows,
        },
    );
    prop_oneof![
        option::of(select(AlgKind::ALL.to_vec())).prop_map(|alg| (alg, None, None)),
        Just((Some(AlgKind::Fq), Some(FqCodel::default()), None)),
        fq_codel.prop_map(|f| (Some(AlgKind::Fq), Some(f), None)),
        Just((Some(AlgKind::Fq), None, Some(FqPie::default()))),
        fq_pie.prop_map(|f| (Some(AlgKind::Fq), None, Some(f))),
    ]
}

/// A probability and its correlation (`duplicate P [C]`): a correlation
/// only with a probability, as the printers write it only after one.
fn chance() -> impl Strategy<Value = (Option<f64>, Option<f64>)> {
    (option::of(real()), option::of(real())).prop_map(|(p, c)| (p, c.filter(|_| p.is_some())))
}

fn mask() -> impl Strategy<Value = FlowMask> {
    let u128s = prop_oneof![
        any::<u128>(),
        (0u32..=128).prop_map(|n| if n == 0 { 0 } else { u128::MAX << (128 - n) }),
        Just(0)
    ];
    let u32s = prop_oneof![any::<u32>(), Just(0), Just(u32::MAX)];
    prop_oneof![
        Just(FlowMask::all()),
        Just(FlowMask::default()),
        (
            u32s.clone(),
            u32s,
            u128s.clone(),
            u128s,
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            0u32..(1 << 20)
        )
            .prop_map(|(s, d, s6, d6, sp, dp, proto, flow_id)| FlowMask {
                src_ip: Ipv4Addr::from(s),
                dst_ip: Ipv4Addr::from(d),
                src_ip6: Ipv6Addr::from(s6),
                dst_ip6: Ipv6Addr::from(d6),
                src_port: sp,
                dst_port: dp,
                proto,
                flow_id,
            }),
    ]
}

fn prefix() -> impl Strategy<Value = Prefix> {
    prop_oneof![
        (any::<u32>(), 0u8..=32).prop_map(|(a, len)| Prefix {
            addr: IpAddr::V4(Ipv4Addr::from(a)),
            len
        }),
        (any::<u128>(), 0u8..=128).prop_map(|(a, len)| Prefix {
            addr: IpAddr::V6(Ipv6Addr::from(a)),
            len
        }),
    ]
}

fn addr() -> impl Strategy<Value = AddrMatch> {
    prop_oneof![
        Just(AddrMatch::Any),
        Just(AddrMatch::Me),
        prefix().prop_map(AddrMatch::Prefix),
        any::<u32>().prop_map(AddrMatch::Table),
        Just(AddrMatch::NotMe),
        prefix().prop_map(AddrMatch::NotPrefix),
        any::<u32>().prop_map(AddrMatch::NotTable),
        addr_list().prop_map(AddrMatch::List),
        addr_list().prop_map(AddrMatch::NotList),
    ]
}

/// Lists of 2 to 5 entries, both families mixed.
fn addr_list() -> impl Strategy<Value = AddrList> {
    vec(prefix(), 2..6).prop_map(|prefixes| AddrList::new(prefixes).expect("2 to 5 entries"))
}

fn ports() -> impl Strategy<Value = Vec<PortRange>> {
    vec(
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| PortRange {
            lo: a.min(b),
            hi: a.max(b),
        }),
        0..3,
    )
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        any::<u32>().prop_map(Target::Number),
        Just(Target::Tablearg)
    ]
}

fn rule() -> impl Strategy<Value = Rule> {
    let action = prop_oneof![
        target().prop_map(Action::Pipe),
        target().prop_map(Action::Queue),
        Just(Action::Allow),
        Just(Action::Deny)
    ];
    let proto = select(vec![
        Proto::Ip,
        Proto::Ip4,
        Proto::Ip6,
        Proto::Tcp,
        Proto::Udp,
        Proto::Icmp,
    ]);
    let direction = select(vec![Direction::Any, Direction::In, Direction::Out]);
    let interface = option::of(
        (
            select(vec![
                InterfaceRole::Via,
                InterfaceRole::Recv,
                InterfaceRole::Xmit,
            ]),
            "[a-z][a-z0-9*]{0,10}",
            any::<bool>(),
        )
            .prop_map(|(role, name, negated)| InterfaceMatch {
                role,
                name,
                negated,
            }),
    );
    // `not` before the protocol (never `ip`, which would match nothing)
    // and before each port list (only with a list: a negation of no list
    // is not written).
    let nots = (any::<bool>(), any::<bool>(), any::<bool>());
    // A comment's words, one space apart (as the parsers normalise them),
    // with the `;` and `//` a comment may hold.
    let comment = option::of("[a-zA-Z0-9;:/.,()é!-]{1,10}( [a-zA-Z0-9;/]{1,8}){0,3}");
    // `prob`: a probability above 0, at most 1, as the parsers keep it.
    let prob = option::of((1u32..=1_000_000).prop_map(|p| MatchProbability(f64::from(p) / 1e6)));
    (
        option::of(any::<u32>()),
        action,
        proto,
        addr(),
        addr(),
        ports(),
        ports(),
        direction,
        interface,
        nots,
        (comment, prob, vec(0u8..64, 0..4), any::<bool>()),
        (
            vec((0u16..2000, 0u16..100), 0..3),
            option::of((0u8..64, 0u8..64)),
            any::<[bool; 4]>(),
        ),
    )
        .prop_map(
            |(
                number,
                action,
                proto,
                src,
                dst,
                src_ports,
                dst_ports,
                direction,
                interface,
                nots,
                (comment, prob, mut dscp, not_dscp),
                (ip_len, flags, [not_len, not_flags, established, not_established]),
            )| {
                let ip_len: Vec<PortRange> = ip_len
                    .into_iter()
                    .map(|(lo, span)| PortRange { lo, hi: lo + span })
                    .collect();
                // Every flag named set or clear, never both; at least one.
                let tcp_flags = flags
                    .map(|(set, clear)| TcpFlags {
                        set,
                        clear: clear & !set,
                    })
                    .filter(|f| f.set | f.clear != 0);
                // As the parsers keep a list: ascending, no repeats.
                dscp.sort_unstable();
                dscp.dedup();
                let (not_proto, not_src, not_dst) = nots;
                Rule {
                    number,
                    action,
                    proto,
                    proto_negated: not_proto && proto != Proto::Ip,
                    src,
                    dst,
                    src_ports_negated: not_src && !src_ports.is_empty(),
                    src_ports,
                    dst_ports_negated: not_dst && !dst_ports.is_empty(),
                    dst_ports,
                    direction,
                    interface,
                    // As the parsers: a negation of a list only (at most
                    // four code points here, never all 64).
                    dscp_negated: not_dscp && !dscp.is_empty(),
                    dscp,
                    ip_len_negated: not_len && !ip_len.is_empty(),
                    ip_len,
                    tcp_flags_negated: not_flags && tcp_flags.is_some(),
                    tcp_flags,
                    established,
                    established_negated: not_established && established,
                    prob,
                    comment,
                }
            },
        )
}

/// Any model the syntaxes can express (valid or not).
pub fn config() -> impl Strategy<Value = Config> {
    let sched = (
        any::<u32>(),
        sched_type(),
        link(),
        mask(),
        option::of(any::<u32>()),
    )
        .prop_map(
            |(number, (alg, fq_codel, fq_pie), link, mask, buckets)| Sched {
                number,
                alg,
                fq_codel,
                fq_pie,
                link,
                mask,
                buckets,
            },
        );
    // A pipe's `type fifo` is its default, which the normal form leaves
    // out: the model of a printed pipe has no type for it.
    let pipe = (any::<u32>(), sched_type(), link(), queue_params(), mask()).prop_map(
        |(number, (alg, fq_codel, fq_pie), link, queue, mask)| Pipe {
            number,
            alg: alg.filter(|&a| a != AlgKind::Fifo),
            fq_codel,
            fq_pie,
            link,
            queue,
            mask,
        },
    );
    let parent = prop_oneof![
        any::<u32>().prop_map(Parent::Sched),
        any::<u32>().prop_map(Parent::Pipe)
    ];
    let queue = (
        any::<u32>(),
        option::of(parent),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        queue_params(),
        mask(),
    )
        .prop_map(|(number, parent, weight, lmax, pri, params, mask)| Queue {
            number,
            parent,
            weight,
            lmax,
            pri,
            params,
            mask,
        });
    // Distinct table numbers and, per table, distinct prefixes (as parsing groups and TOML keys require);
    // a table without entries is one `table N create`.
    let tables = proptest::collection::btree_map(
        any::<u32>(),
        proptest::collection::btree_map(prefix(), any::<u32>(), 0..4),
        0..3,
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(number, entries)| {
                let mut seen = std::collections::HashSet::new();
                let entries = entries
                    .into_iter()
                    .filter(|(p, _)| seen.insert(p.to_string()))
                    .map(|(prefix, value)| TableEntry { prefix, value })
                    .collect();
                Table { number, entries }
            })
            .collect::<Vec<_>>()
    });
    (
        vec(sched, 0..3),
        vec(pipe, 0..3),
        vec(queue, 0..3),
        tables,
        vec(rule(), 0..4),
        select(vec![DefaultAction::Allow, DefaultAction::Deny]),
        option::of(any::<u64>()),
    )
        .prop_map(
            |(scheds, pipes, queues, tables, rules, default_action, seed)| Config {
                scheds,
                pipes,
                queues,
                tables,
                rules,
                default_action,
                seed,
                ..Config::default()
            },
        )
}
