//! From a validated [`Plan`] to the core's pipe configuration
//! ([`pspat_sched::pipe::PipeConfig`]): the link half (bw, burst, delay,
//! profile, jitter, reorder) of a pipe or sched and the queue half (limit,
//! plr, RED/GRED and its ECN marking, CoDel, Gilbert-Elliott, the 4-state
//! loss model, the random losses' ECN marking, duplication) of a pipe or
//! flowset.
//!
//! # Guarantees
//! * Every value of the plan that the pipe models is carried over, units
//!   converted exactly (µs to ns, profile samples µs to ns); `bw 0` is an
//!   unlimited link.
//! * **One seed.** Pipe or sched `N` draws from [`pipe_seed`]`(plan.seed,
//!   N)`: the plan's one seed replays every pipe, and no two pipes share a
//!   random stream.
//! * A rate the core cannot represent (below 1 kbit/s, above 1 Tbit/s) is an
//!   error naming the object, never a silent clamp.
//!
//! What a pipe does not model is left to its caller: masks and `buckets`
//! (which flows exist), `noerror` (reporting drops to the sender), the
//! profile's own `bw` (informative: the samples are times).
//!
//! # Delay-line capacity
//! [`delay_line_capacity`] sizes the line for a link kept busy with 64-byte
//! packets over `delay + 4·jitter +` the largest profile sample, doubled for
//! duplicates, within 64..=2²⁰ (65 536 on an unlimited link). A fuller line
//! stops the link without losing anything (see [`pspat_sched::pipe`]).
//!
//! # Complexity
//! O(profile samples) per pipe; [`plan_pipe_configs`] is linear in the plan.

use std::collections::BTreeMap;

use pspat_sched::pipe::random::splitmix64;
use pspat_sched::pipe::{self, DelayProfile, Jitter, JitterDistribution, PipeConfig, QueueConfig};
use pspat_sched::rate::Rate;
use pspat_sched::ConfigError;

use crate::model::{Distribution, SlotInterval, SlotParams};
use crate::plan::{LinkPlan, PipePlan, Plan, QueueSetPlan, SchedPlan};
use crate::units::QueueLimit;

/// Smallest packet assumed when sizing a delay line, bytes.
pub const MIN_PACKET_BYTES: u64 = 64;
/// Smallest delay-line capacity chosen.
pub const MIN_DELAY_LINE: usize = 64;
/// Largest delay-line capacity chosen.
pub const MAX_CHOSEN_DELAY_LINE: usize = 1 << 20;
/// Capacity chosen for an unlimited link.
pub const UNLIMITED_DELAY_LINE: usize = 1 << 16;

/// The seed of pipe or sched `number` under the plan's `seed`.
///
/// # Examples
/// ```
/// use pspat_config::pipe_seed;
/// assert_eq!(pipe_seed(1, 7), pipe_seed(1, 7));
/// assert_ne!(pipe_seed(1, 7), pipe_seed(1, 8));
/// assert_ne!(pipe_seed(1, 7), pipe_seed(2, 7));
/// ```
pub fn pipe_seed(plan_seed: u64, number: u32) -> u64 {
    let mut s = plan_seed ^ (u64::from(number) << 32 | u64::from(number));
    splitmix64(&mut s)
}

/// The queue half of a pipe or flowset.
///
/// # Examples
/// ```
/// use pspat_config::{parse_ipfw, queue_config, NoProfiles};
/// use pspat_sched::pipe::QueueLimit;
/// let plan = parse_ipfw("pipe 1 config queue 20Kbytes plr 0.05", "x").unwrap().validate(&NoProfiles).unwrap();
/// let q = queue_config(&plan.pipes[&1].queue);
/// assert_eq!((q.limit, q.plr), (QueueLimit::Bytes(20_480), 0.05));
/// ```
pub fn queue_config(q: &QueueSetPlan) -> QueueConfig {
    QueueConfig {
        limit: match q.limit {
            QueueLimit::Slots(n) => pipe::QueueLimit::Slots(n),
            QueueLimit::Bytes(b) => pipe::QueueLimit::Bytes(b),
        },
        plr: q.plr,
        red: q.red.map(|r| pipe::Red {
            gentle: r.gentle,
            w_q: r.w_q,
            min_th: u64::from(r.min_th),
            max_th: u64::from(r.max_th),
            max_p: r.max_p,
        }),
        gilbert_elliott: q.gemodel.map(|g| pipe::GilbertElliott {
            p: g.p,
            r: g.r,
            loss_bad: g.one_minus_h,
            loss_good: g.one_minus_k,
        }),
        loss_state: q.lossstate.map(|m| pipe::LossState {
            p13: m.p13,
            p31: m.p31,
            p32: m.p32,
            p23: m.p23,
            p14: m.p14,
        }),
        duplicate: q.duplicate,
        duplicate_correlation: q.duplicate_correlation,
        corrupt: q.corrupt,
        corrupt_correlation: q.corrupt_correlation,
        // Validation sets it only with RED; a plan from elsewhere that has
        // it without RED changes nothing in the core.
        ecn: q.ecn,
        // Validation sets it only with a random loss; without one there is
        // nothing for it to mark.
        loss_ecn: q.lossecn,
        // µs to ns; validation keeps both times within an hour, and a plan
        // from elsewhere with a longer one saturates into the core's own
        // range check.
        codel: q.codel.map(|c| pipe::Codel {
            target_ns: c.target_us.saturating_mul(1_000),
            interval_ns: c.interval_us.saturating_mul(1_000),
            ecn: c.ecn,
        }),
        pie: q.pie.as_ref().map(pie_config),
    }
}

/// A plan's PIE as the core's: µs to ns (validation keeps the times
/// within 10 s; a plan from elsewhere with longer ones saturates into the
/// core's own range check).
///
/// # Examples
/// ```
/// use pspat_config::{pie_config, Pie};
/// let p = pie_config(&Pie { dre: false, ..Pie::default() });
/// assert_eq!((p.target_ns, p.estimator), (15_000_000, pspat_sched::pipe::pie::DelayEstimator::Timestamp));
/// ```
pub fn pie_config(p: &crate::Pie) -> pipe::Pie {
    use pipe::pie::DelayEstimator;
    pipe::Pie {
        target_ns: p.target_us.saturating_mul(1_000),
        tupdate_ns: p.tupdate_us.saturating_mul(1_000),
        alpha: p.alpha,
        beta: p.beta,
        max_burst_ns: p.max_burst_us.saturating_mul(1_000),
        max_ecnth: p.max_ecnth,
        ecn: p.ecn,
        capdrop: p.capdrop,
        derand: p.derand,
        onoff: p.onoff,
        estimator: if p.dre {
            DelayEstimator::DepartureRate
        } else {
            DelayEstimator::Timestamp
        },
    }
}

/// The delay-line capacity chosen for `link` (see the module docs).
///
/// # Examples
/// ```
/// use pspat_config::{delay_line_capacity, parse_ipfw, NoProfiles};
/// let plan = parse_ipfw("pipe 1 config bw 10Mbit/s delay 20ms", "x").unwrap().validate(&NoProfiles).unwrap();
/// // 10 Mbit/s × 20 ms = 25 000 B = 390.6 packets of 64 B; doubled, plus rounding.
/// assert_eq!(delay_line_capacity(&plan.pipes[&1].link), 782);
/// ```
pub fn delay_line_capacity(link: &LinkPlan) -> usize {
    if link.bw_bps == 0 {
        return UNLIMITED_DELAY_LINE;
    }
    let profile_us = link
        .profile
        .as_ref()
        .and_then(|p| p.delay_table_us.iter().copied().max())
        .unwrap_or(0);
    let span_us = link
        .delay_us
        .saturating_add(link.jitter_us.saturating_mul(4))
        .saturating_add(profile_us)
        .saturating_add(link.slot.map_or(0, |s| slot_span_us(&s)));
    // bytes = bw · span / 8; packets = bytes / 64, rounded up.
    let bytes = u128::from(link.bw_bps) * u128::from(span_us) / 8_000_000;
    let packets = bytes.div_ceil(u128::from(MIN_PACKET_BYTES)) * 2;
    usize::try_from(packets)
        .unwrap_or(usize::MAX)
        .clamp(MIN_DELAY_LINE, MAX_CHOSEN_DELAY_LINE)
}

/// How long a packet may wait for its slot, about: the longest uniform
/// interval, or the mean plus four times the jitter.
fn slot_span_us(s: &SlotParams) -> u64 {
    match s.interval {
        SlotInterval::Uniform { max_us, .. } => max_us,
        SlotInterval::Distribution {
            delay_us,
            jitter_us,
            ..
        } => delay_us.saturating_add(jitter_us.saturating_mul(4)),
    }
}

/// The core's form of a link's slots.
fn slots(s: &SlotParams) -> pipe::Slots {
    pipe::Slots {
        interval: match s.interval {
            SlotInterval::Uniform { min_us, max_us } => pipe::SlotInterval::Uniform {
                min_ns: min_us.saturating_mul(1_000),
                max_ns: max_us.saturating_mul(1_000),
            },
            SlotInterval::Distribution {
                distribution,
                delay_us,
                jitter_us,
            } => pipe::SlotInterval::Drawn {
                delay_ns: delay_us.saturating_mul(1_000),
                jitter: Jitter {
                    ns: jitter_us.saturating_mul(1_000),
                    distribution: jitter_distribution(distribution),
                },
            },
        },
        packets: s.packets,
        bytes: s.bytes,
    }
}

/// The core's name of a jitter distribution.
fn jitter_distribution(d: Distribution) -> JitterDistribution {
    match d {
        Distribution::Uniform => JitterDistribution::Uniform,
        Distribution::Normal => JitterDistribution::Normal,
        Distribution::Pareto => JitterDistribution::Pareto,
        Distribution::ParetoNormal => JitterDistribution::ParetoNormal,
    }
}

/// The link half: everything but the queue, which is left at the default.
fn link_config(
    what: &str,
    link: &LinkPlan,
    plan_seed: u64,
    number: u32,
) -> Result<PipeConfig, ConfigError> {
    let bw = match link.bw_bps {
        0 => None,
        bps => Some(Rate::checked(format!("{what} bw (bit/s)"), bps)?),
    };
    let profile = match &link.profile {
        None => None,
        Some(p) => Some(DelayProfile::new(
            p.delay_table_us
                .iter()
                .map(|&us| us.saturating_mul(1_000))
                .collect(),
            p.profile.loss_level,
        )?),
    };
    let jitter = (link.jitter_us > 0).then(|| Jitter {
        ns: link.jitter_us.saturating_mul(1_000),
        distribution: jitter_distribution(link.distribution),
    });
    Ok(PipeConfig {
        bw,
        burst_bytes: link.burst_bytes,
        framing: pspat_sched::pipe::Framing {
            packet_overhead: link.packet_overhead,
            cell_size: link.cell_size,
            cell_overhead: link.cell_overhead,
        },
        delay_ns: link.delay_us.saturating_mul(1_000),
        profile,
        jitter,
        jitter_correlation: if link.jitter_us > 0 {
            link.jitter_correlation
        } else {
            0.0
        },
        reorder: link.reorder,
        netem_reorder: link.reorder_probability.map(|probability| {
            pspat_sched::pipe::NetemReorder {
                probability,
                gap: link.reorder_gap,
                correlation: link.reorder_correlation,
            }
        }),
        slots: link.slot.as_ref().map(slots),
        queue: QueueConfig::default(),
        delay_line_capacity: delay_line_capacity(link),
        held_capacity: pspat_sched::SchedulerConfig::DEFAULT_CAPACITY,
        held_limit: None,
        seed: pipe_seed(plan_seed, number),
    })
}

/// The configuration of `pipe N`: its link, and its own queue (the
/// flowsets attached to it are configured as a sched's are); an
/// `fq_codel` or `fq_pie` pipe's `limit` is the held limit, as in
/// [`sched_config`].
///
/// # Errors
/// A `bw` outside the core's range, naming the pipe.
///
/// # Examples
/// ```
/// use pspat_config::{parse_ipfw, pipe_config, NoProfiles};
/// let plan = parse_ipfw("pipe 3 config delay 80ms bw 40Mbit/s plr 0.01 queue 1000Kbytes", "x")
///     .unwrap()
///     .validate(&NoProfiles)
///     .unwrap();
/// let c = pipe_config(&plan.pipes[&3], plan.seed).unwrap();
/// assert_eq!(c.delay_ns, 80_000_000);
/// assert_eq!(c.bw.unwrap().bps(), 40_000_000);
/// ```
pub fn pipe_config(pipe: &PipePlan, plan_seed: u64) -> Result<PipeConfig, ConfigError> {
    let mut c = link_config(
        &format!("pipe {}", pipe.number),
        &pipe.link,
        plan_seed,
        pipe.number,
    )?;
    c.queue = queue_config(&pipe.queue);
    // A pipe of `type fq_codel` or `fq_pie` holds its limit as such a
    // sched does, its own queue one of the flows.
    c.held_limit = pipe
        .fq_codel
        .map(|f| f.limit)
        .or(pipe.fq_pie.map(|f| f.limit));
    Ok(c)
}

/// The configuration of `sched N`'s link; its queues are the flowsets that
/// feed it, each configured with [`queue_config`] (set per flow with
/// [`pspat_sched::pipe::Pipe::set_queue`]). An `fq_codel` sched's `limit`
/// is the held limit of each of its pipes (an instance's packets in all;
/// over it, the oldest packet of the longest queue is dropped); its
/// quantum is the scheduler's ([`pspat_sched::SchedulerConfig::fq_quantum`],
/// set where the scheduler is built).
///
/// # Errors
/// A `bw` outside the core's range, naming the sched.
///
/// # Examples
/// ```
/// use pspat_config::{parse_ipfw, sched_config, NoProfiles};
/// let plan = parse_ipfw("sched 1 config type fq_codel limit 2000\nqueue 1 config sched 1", "x")
///     .unwrap()
///     .validate(&NoProfiles)
///     .unwrap();
/// assert_eq!(sched_config(&plan.scheds[&1], plan.seed).unwrap().held_limit, Some(2000));
/// ```
pub fn sched_config(sched: &SchedPlan, plan_seed: u64) -> Result<PipeConfig, ConfigError> {
    let mut c = link_config(
        &format!("sched {}", sched.number),
        &sched.link,
        plan_seed,
        sched.number,
    )?;
    c.held_limit = sched
        .fq_codel
        .map(|f| f.limit)
        .or(sched.fq_pie.map(|f| f.limit));
    Ok(c)
}

/// Every pipe and sched of the plan, by number (they share one number space).
///
/// # Errors
/// The first pipe or sched, by number, whose `bw` the core cannot represent.
pub fn plan_pipe_configs(plan: &Plan) -> Result<BTreeMap<u32, PipeConfig>, ConfigError> {
    let mut out = BTreeMap::new();
    for (&n, p) in &plan.pipes {
        out.insert(n, pipe_config(p, plan.seed)?);
    }
    for (&n, s) in &plan.scheds {
        out.insert(n, sched_config(s, plan.seed)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_ipfw;

    fn plan(text: &str) -> Plan {
        parse_ipfw(text, "t.ipfw")
            .unwrap()
            .validate(&|name: &str| {
                assert_eq!(name, "wifi.prof");
                Ok("samples 4\nloss-level 0.75\nprob delay\n0 1\n1 4\n".to_string())
            })
            .unwrap()
    }

    #[test]
    fn the_man_page_pipe_line_gives_the_expected_pipe() {
        let p = plan("pipe 1 config bw 10Mbit/s delay 20ms plr 0.01 queue 50");
        let c = pipe_config(&p.pipes[&1], p.seed).unwrap();
        let expected = PipeConfig {
            bw: Some(Rate::checked("bw", 10_000_000u64).unwrap()),
            burst_bytes: 0,
            framing: pspat_sched::pipe::Framing::NONE,
            delay_ns: 20_000_000,
            profile: None,
            jitter: None,
            jitter_correlation: 0.0,
            reorder: false,
            netem_reorder: None,
            slots: None,
            queue: QueueConfig {
                limit: pipe::QueueLimit::Slots(50),
                plr: 0.01,
                red: None,
                gilbert_elliott: None,
                loss_state: None,
                duplicate: 0.0,
                duplicate_correlation: 0.0,
                corrupt: 0.0,
                corrupt_correlation: 0.0,
                ecn: false,
                loss_ecn: false,
                codel: None,
                pie: None,
            },
            delay_line_capacity: 782,
            held_capacity: pspat_sched::SchedulerConfig::DEFAULT_CAPACITY,
            held_limit: None,
            seed: pipe_seed(crate::plan::DEFAULT_SEED, 1),
        };
        assert_eq!(c, expected);
        // And it builds a pipe.
        let fifo = pspat_sched::Fifo::new(pspat_sched::FlowTable::uniform(1).unwrap(), 64).unwrap();
        assert!(pspat_sched::Pipe::new(c, fifo, 1).is_ok());
    }

    #[test]
    fn every_extension_is_carried_over() {
        let p = plan(
            "seed 42\n\
             pipe 2 config bw 1Mbit/s burst 3000 delay 10ms profile wifi.prof jitter 2ms distribution pareto correlation 25% reorder 10% 40% gap 3 \
             slot 800us 1ms packets 32 bytes 64KB \
             packetoverhead -4 cellsize 48 celloverhead 5 \
             queue 64KB gred 0.002/30000/60000/0.1 gemodel 0.01 0.3 0.6 0.001 lossecn duplicate 0.05 0.5 corrupt 0.002\n\
             sched 4 config type qfq bw 0\n\
             queue 7 config sched 4 weight 3 red 0.5/5/15/0.2 ecn\n\
             queue 8 config sched 4 codel interval 50ms target 2500us ecn",
        );
        let c = pipe_config(&p.pipes[&2], p.seed).unwrap();
        assert_eq!(c.burst_bytes, 3_000);
        assert_eq!(
            c.framing,
            pspat_sched::pipe::Framing {
                packet_overhead: -4,
                cell_size: 48,
                cell_overhead: 5
            }
        );
        assert_eq!(c.delay_ns, 10_000_000);
        let prof = c.profile.as_ref().unwrap();
        assert_eq!(
            prof.table_ns(),
            [1_000_000, 2_000_000, 3_000_000, 4_000_000]
        );
        assert_eq!(prof.loss_index(), 3);
        assert_eq!(
            c.jitter,
            Some(Jitter {
                ns: 2_000_000,
                distribution: JitterDistribution::Pareto
            })
        );
        assert!(c.reorder);
        assert_eq!(c.jitter_correlation, 0.25);
        assert_eq!(
            c.slots,
            Some(pipe::Slots {
                interval: pipe::SlotInterval::Uniform {
                    min_ns: 800_000,
                    max_ns: 1_000_000
                },
                packets: Some(32),
                bytes: Some(65_536),
            })
        );
        assert_eq!(
            c.netem_reorder,
            Some(pspat_sched::pipe::NetemReorder {
                probability: 0.1,
                gap: 3,
                correlation: 0.4
            })
        );
        assert_eq!(c.queue.limit, pipe::QueueLimit::Bytes(65_536));
        assert_eq!(
            c.queue.red,
            Some(pipe::Red {
                gentle: true,
                w_q: 0.002,
                min_th: 30_000,
                max_th: 60_000,
                max_p: 0.1
            })
        );
        assert_eq!(
            c.queue.gilbert_elliott,
            Some(pipe::GilbertElliott {
                p: 0.01,
                r: 0.3,
                loss_bad: 0.6,
                loss_good: 0.001
            })
        );
        assert_eq!(c.queue.duplicate, 0.05);
        assert_eq!(c.queue.duplicate_correlation, 0.5);
        assert_eq!(c.queue.corrupt, 0.002);
        assert_eq!(c.queue.corrupt_correlation, 0.0);
        assert_eq!(c.seed, pipe_seed(42, 2));
        assert!(c.validate().is_ok());
        let all = plan_pipe_configs(&p).unwrap();
        assert_eq!(all.keys().copied().collect::<Vec<_>>(), [2, 4]);
        assert_eq!(all[&4].bw, None, "bw 0 is unlimited");
        assert_eq!(all[&4].delay_line_capacity, UNLIMITED_DELAY_LINE);
        let q7 = queue_config(&p.queues[&7].queue);
        assert_eq!(q7.red.unwrap().max_th, 15);
        assert!(q7.ecn, "dummynet's ecn goes with its RED");
        assert!(!c.queue.ecn);
        assert!(
            c.queue.loss_ecn,
            "lossecn goes with its Gilbert-Elliott loss"
        );
        assert!(!q7.loss_ecn);
        assert_eq!(q7.limit, pipe::QueueLimit::Slots(50));
        assert_eq!((q7.codel, c.queue.codel), (None, None));
        let q8 = queue_config(&p.queues[&8].queue);
        assert_eq!(
            q8.codel,
            Some(pipe::Codel {
                target_ns: 2_500_000,
                interval_ns: 50_000_000,
                ecn: true
            }),
            "CoDel's times in ns, its own ecn"
        );
        assert!(!q8.ecn && q8.red.is_none(), "RED's ecn stays off");
        assert!(q8.validate().is_ok());
    }

    #[test]
    fn a_rate_the_core_cannot_represent_is_named() {
        // Validation refuses such a rate, but a plan can also come from JSON
        // or a hand-built value: building the pipe still checks it.
        let mut p = plan("pipe 9 config bw 1Mbit/s");
        if let Some(pipe) = p.pipes.get_mut(&9) {
            pipe.link.bw_bps = 500;
        }
        let e = pipe_config(&p.pipes[&9], p.seed).unwrap_err().to_string();
        assert!(e.contains("pipe 9 bw"), "{e}");
        assert!(plan_pipe_configs(&p).is_err());
    }
}
