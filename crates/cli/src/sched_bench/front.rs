//! `sched-bench --dummynet`: the algorithm behind the per-packet path of
//! `pspat run`, so that its cost can be set against the bare algorithm in
//! the same harness (docs/BENCHMARKS.md, section 13).
//!
//! Each harness flow `f` is a UDP source address (`10.0.0.0 + f`, one
//! destination, fixed ports). A packet goes through:
//! 1. the classifier ([`pspat_classify::Classifier::classify`]): one rule
//!    (`add 100 queue 1 ip from any to any`, after a `deny` rule that does
//!    not match, so rule matching is paid for two rules), a flowset with
//!    `mask src-ip 0xffffffff` and one dynamic queue per source. The
//!    front creates them at construction, in source order, so that the
//!    queue of harness flow `f` is flow `f` of the pipe: a packet goes
//!    through with its flow and token unchanged (checked on every packet);
//! 2. the pipe ([`pspat_sched::Pipe`] behind [`pspat_sched::PipeScheduler`]):
//!    the queue's filters (a slot limit as large as the harness's backlog),
//!    the algorithm, a link and the delay line (`--delay`).
//!
//! `--dummynet-part` leaves one of the two out ([`Part`]), so that the
//! cost of each can be read against the bare algorithm and the whole path
//! in the same run: `classifier` hands a classified packet to the
//! algorithm itself, `pipe` hands every packet to the pipe unclassified.
//!
//! # Time
//! The harness advances its clock by one nanosecond per step, enqueue or
//! dequeue. The front keeps a clock of its own that moves only when the
//! harness dequeues, by one packet time at a link rate of one byte per
//! nanosecond (8 Gbit/s): each dequeue lets the link finish exactly one
//! packet, so the backlog stays in the algorithm, as in the bare run, and
//! the delay line holds the packets of the last `--delay`.
//!
//! # Complexity and cost
//! Per packet, the classifier's rule scan (two rules) and one dynamic-queue
//! lookup, then the pipe's enqueue and release: O(1) over the algorithm's
//! own cost.
//!
//! In instructions (callgrind; a packet is two harness steps, its enqueue
//! and its dequeue), for QFQ over 1024 sources, per packet: the
//! classifier about 131 (its rule, the masked key, hash and lookup, the
//! counters; `pspat_classify`'s docs), the pipe about 165 (its own and its
//! queue's counters, the limit, the link's pacer, the delay line's append
//! and exit; `pspat_sched::pipe`'s docs), this front about 12 (the source
//! in a key kept from packet to packet, the check of the queue and the
//! clock), and the harness about 15 more than bare. The harness's extra
//! is partly its values kept on the stack around the inlined front and
//! pipe, partly another path through its backlog lists: the link takes
//! each packet from the algorithm one step before the harness sees it
//! leave (a packet is on the link before it exits), so the algorithm's
//! decisions, and the order in which flows come back to the harness,
//! differ from the bare run's. For the same reason the algorithm's own
//! count differs a little from bare (about 6 fewer at 1024 flows).

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context;
use pspat_classify::{Classifier, ClassifierLimits, OverflowPolicy, PacketKey, Verdict};
use pspat_sched::pipe::{QueueConfig, QueueLimit};
use pspat_sched::{
    ConfigError, FlowError, FlowId, FlowParams, FlowTable, Instant, Packet, Pipe, PipeConfig,
    PipeScheduler, Rate, Rejected, Scheduler,
};

/// The configuration the classifier is built from (`{weight}` filled in).
const CONFIG: &str = "sched 1 config type fifo\n\
                      queue 1 config weight {weight} sched 1 mask src-ip 0xffffffff\n\
                      add 50 deny tcp from any to any dst-port 22\n\
                      add 100 queue 1 ip from any to any\n";

/// The first source address (`10.0.0.0`).
const FIRST_SOURCE: u32 = 0x0a00_0000;

/// Which parts of the per-packet path a packet goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    /// The classifier, then the pipe around the algorithm.
    Both,
    /// The classifier, then the algorithm without a pipe.
    Classifier,
    /// The pipe around the algorithm, packets not classified.
    Pipe,
}

/// The classifier in front of `B`: the pipe around the algorithm
/// ([`Part::Both`]) or the algorithm itself ([`Part::Classifier`]); with
/// `CLASSIFY` false, packets go to `B` unclassified ([`Part::Pipe`]). The
/// part is a type, not a field tested per packet, and the pipe-only part's
/// algorithm is wrapped in a type of its own (`Distinct`), so that the
/// whole path compiles to what it was before the parts could be chosen.
pub(super) struct DummynetFront<B, const CLASSIFY: bool> {
    classifier: Classifier,
    behind: B,
    /// The key every packet shares but its source address.
    key: PacketKey,
    /// The front's clock, ns (module docs).
    clock: u64,
    /// Nanoseconds the link takes per packet (its length in bytes).
    packet_ns: u64,
}

/// The link's rate: one byte per nanosecond.
const LINK_BPS: u64 = 8_000_000_000;

/// The classifier for `flows` sources of weight `weight`, and the flow
/// table the algorithm must be built over (the flowset's dynamic queues).
pub(super) fn classifier(flows: usize, weight: u32) -> anyhow::Result<(Classifier, FlowTable)> {
    let text = CONFIG.replace("{weight}", &weight.to_string());
    let plan = pspat_config::parse_ipfw(&text, "sched-bench --dummynet")
        .and_then(|c| c.validate(&pspat_config::NoProfiles))
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("the --dummynet configuration")?;
    let limits = ClassifierLimits {
        queues_per_flowset: u32::try_from(flows).context("too many flows")?,
        overflow: OverflowPolicy::Drop,
        idle_expiry_ns: u64::MAX,
        ..ClassifierLimits::default()
    };
    let classifier = Classifier::from_plan(&plan, &limits).map_err(|e| anyhow::anyhow!("{e}"))?;
    let table = classifier
        .layout()
        .link(1)
        .context("sched 1 in the --dummynet configuration")?
        .flow_table()?;
    Ok((classifier, table))
}

/// The pipe around `sched` for `flows` queues and packets of `len` bytes,
/// with room for `backlog` packets and a delay of `delay_ns`.
pub(super) fn pipe_around<S: Scheduler>(
    sched: S,
    flows: usize,
    len: u32,
    backlog: u64,
    delay_ns: u64,
) -> anyhow::Result<PipeScheduler<S>> {
    let packet_ns = u64::from(len.max(1));
    // The delay line holds what left the link in the last `delay_ns`, one
    // packet per `packet_ns`, plus room for the one in flight.
    let line = (delay_ns / packet_ns + 64).next_power_of_two();
    let config = PipeConfig {
        bw: Some(Rate::checked("--dummynet link", LINK_BPS)?),
        delay_ns,
        queue: QueueConfig {
            limit: QueueLimit::Slots(u32::try_from(backlog).unwrap_or(u32::MAX)),
            ..QueueConfig::default()
        },
        delay_line_capacity: usize::try_from(line).context("--delay is too long")?,
        ..PipeConfig::default()
    };
    Ok(PipeScheduler::new(Pipe::new(config, sched, flows)?))
}

impl<B: Scheduler, const CLASSIFY: bool> DummynetFront<B, CLASSIFY> {
    /// The front before `behind`, with the classifier and over the table
    /// [`classifier`] returned, for `flows` sources sending packets of
    /// `len` bytes.
    pub(super) fn new(
        classifier: Classifier,
        behind: B,
        flows: usize,
        len: u32,
    ) -> anyhow::Result<Self> {
        let mut front = DummynetFront {
            classifier,
            behind,
            key: PacketKey::new(
                IpAddr::V4(Ipv4Addr::from(FIRST_SOURCE)),
                IpAddr::V4(Ipv4Addr::new(10, 199, 0, 1)),
                17,
                1000,
                80,
            ),
            clock: 0,
            packet_ns: u64::from(len.max(1)),
        };
        // Each source's queue, in source order: harness flow `f` is then
        // the pipe's flow `f`.
        for f in 0..u32::try_from(flows).context("too many flows")? {
            front.key.src = IpAddr::V4(Ipv4Addr::from(FIRST_SOURCE.wrapping_add(f)));
            match front
                .classifier
                .classify(Instant::from_nanos(0), &front.key, len)
            {
                Verdict::Enqueue(place) if place.flow == FlowId(f) => {}
                other => anyhow::bail!(
                    "the --dummynet front expected source {f} to get queue {f}, got {other:?}"
                ),
            }
        }
        Ok(front)
    }
}

/// A front of any part, as [`visit_front`] hands it over.
pub(super) trait Front: Scheduler + Send + 'static {
    /// Dynamic queues the classifier holds.
    #[cfg(test)]
    fn dynamic_queues(&self) -> u32;
}

impl<B: Scheduler + Send + 'static, const CLASSIFY: bool> Front for DummynetFront<B, CLASSIFY> {
    #[cfg(test)]
    fn dynamic_queues(&self) -> u32 {
        self.classifier.flowset_stats(1).map_or(0, |s| s.live)
    }
}

/// What to do with a front, whichever its part (as
/// [`pspat_sched::VisitScheduler`] for an algorithm).
pub(super) trait VisitFront {
    type Output;
    fn visit<F: Front>(self, front: F) -> Self::Output;
}

/// How [`visit_front`] builds a front.
#[derive(Clone, Copy, Debug)]
pub(super) struct FrontPlan {
    pub part: Part,
    /// Harness flows, one source and one dynamic queue each.
    pub flows: usize,
    /// Packet length, bytes.
    pub len: u32,
    /// Packets the pipe's queues may hold (the harness's `qmax`).
    pub backlog: u64,
    /// The pipe's delay, ns (0 without the pipe).
    pub delay_ns: u64,
}

/// Builds the front of `plan.part` around `sched`, with `classifier` (from
/// [`classifier`]), and hands it to `visit`.
///
/// # Errors
/// A set-up the front cannot build, or a delay without the pipe.
pub(super) fn visit_front<S: Scheduler + Send + 'static, V: VisitFront>(
    plan: FrontPlan,
    classifier: Classifier,
    sched: S,
    visit: V,
) -> anyhow::Result<V::Output> {
    let FrontPlan {
        part,
        flows,
        len,
        backlog,
        delay_ns,
    } = plan;
    Ok(match part {
        Part::Both => {
            let pipe = pipe_around(sched, flows, len, backlog, delay_ns)?;
            visit.visit(DummynetFront::<_, true>::new(classifier, pipe, flows, len)?)
        }
        Part::Classifier => {
            anyhow::ensure!(
                delay_ns == 0,
                "a delay needs the pipe (--dummynet-part both or pipe)"
            );
            visit.visit(DummynetFront::<_, true>::new(
                classifier, sched, flows, len,
            )?)
        }
        Part::Pipe => {
            let pipe = pipe_around(Distinct(sched), flows, len, backlog, delay_ns)?;
            visit.visit(DummynetFront::<_, false>::new(
                classifier, pipe, flows, len,
            )?)
        }
    })
}

/// The algorithm behind the pipe of [`Part::Pipe`]: a type of its own, so
/// that this part's pipe is compiled apart from the whole path's, whose
/// calls then keep a single caller and stay inlined into the harness (one
/// pipe type behind two fronts took them out of line: 66 instructions a
/// packet more for the whole path).
struct Distinct<S>(S);

impl<S: Scheduler> Scheduler for Distinct<S> {
    #[inline(always)]
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.0.enqueue(now, pkt)
    }

    #[inline(always)]
    fn dequeue(&mut self, now: Instant) -> Option<Packet> {
        self.0.dequeue(now)
    }

    fn queued(&self) -> usize {
        self.0.queued()
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn next_eligible(&self, now: Instant) -> Option<Instant> {
        self.0.next_eligible(now)
    }

    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn add_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.0.add_flow(flow, params)
    }

    fn change_flow(&mut self, flow: FlowId, params: FlowParams) -> Result<(), FlowError> {
        self.0.change_flow(flow, params)
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), FlowError> {
        self.0.remove_flow(flow, purge)
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.0.flow_queued(flow)
    }

    fn take_late_drops(&mut self, out: &mut dyn FnMut(Rejected)) {
        self.0.take_late_drops(out)
    }

    fn counts_from_arrival(&self) -> bool {
        self.0.counts_from_arrival()
    }

    fn uncharge(&mut self, flow: FlowId, len: u32) {
        self.0.uncharge(flow, len)
    }

    fn drop_head(&mut self, flow: FlowId) -> Option<Packet> {
        self.0.drop_head(flow)
    }

    fn set_quantum(&mut self, bytes: u32) -> Result<(), ConfigError> {
        self.0.set_quantum(bytes)
    }
}

impl<B: Scheduler, const CLASSIFY: bool> Scheduler for DummynetFront<B, CLASSIFY> {
    fn enqueue(&mut self, _now: Instant, pkt: Packet) -> Result<(), Rejected> {
        let now = Instant::from_nanos(self.clock);
        if CLASSIFY {
            self.key.src = IpAddr::V4(Ipv4Addr::from(FIRST_SOURCE.wrapping_add(pkt.flow.0)));
            match self.classifier.classify(now, &self.key, pkt.len) {
                // The source's own queue (created at construction): the
                // packet goes on unchanged.
                Verdict::Enqueue(place) if place.flow == pkt.flow => {}
                // Every source has its queue (the cap is the flow count)
                // and the rule matches every UDP packet: anything else is
                // a bug in the set-up, reported as the harness's drop.
                _ => {
                    return Err(Rejected {
                        packet: pkt,
                        reason: pspat_sched::DropReason::Policy,
                    })
                }
            }
        }
        self.behind.enqueue(now, pkt)
    }

    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.clock += self.packet_ns;
        self.behind.dequeue(Instant::from_nanos(self.clock))
    }

    fn queued(&self) -> usize {
        self.behind.queued()
    }

    fn name(&self) -> &'static str {
        "dummynet-front"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pspat_eval::harness::{Flowsets, Harness};
    use pspat_sched::{AlgKind, SchedulerConfig, VisitScheduler};

    struct Check {
        classifier: Classifier,
        part: Part,
        flows: usize,
    }

    impl VisitScheduler for Check {
        type Output = ();
        fn visit<S: Scheduler + Send + 'static>(self, sched: S) {
            let delay_ns = if self.part == Part::Classifier {
                0
            } else {
                5_000
            };
            let plan = FrontPlan {
                part: self.part,
                flows: self.flows,
                len: 60,
                backlog: 20_000,
                delay_ns,
            };
            visit_front(plan, self.classifier, sched, RunFront).unwrap();
        }
    }

    struct RunFront;

    impl VisitFront for RunFront {
        type Output = ();
        fn visit<F: Front>(self, front: F) {
            let sets = Flowsets::parse("1:60:1000").unwrap();
            let mut h = Harness::new(front, &sets, 1000, 20_000).unwrap();
            let stats = h.run(200_000);
            assert_eq!(stats.drops, 0, "every packet finds its queue");
            assert!(stats.dequeues > 50_000, "packets leave: {stats:?}");
            assert_eq!(
                stats.enqueues,
                stats.dequeues - stats.empty_dequeues + h.pending(),
                "every packet dequeued or held: {stats:?}"
            );
            assert_eq!(h.scheduler().queued() as u64, h.pending());
            assert_eq!(h.scheduler().dynamic_queues(), 1000, "one queue per source");
        }
    }

    #[test]
    fn each_source_gets_a_queue_and_every_packet_comes_back() {
        for alg in ["qfq", "drr", "fifo"] {
            for part in [Part::Both, Part::Classifier, Part::Pipe] {
                let (classifier, table) = classifier(1000, 1).unwrap();
                let mut cfg = SchedulerConfig::new(AlgKind::parse(alg).unwrap());
                cfg.capacity = 20_000;
                cfg.build(table).unwrap().visit(Check {
                    classifier,
                    part,
                    flows: 1000,
                });
            }
        }
    }

    #[test]
    fn a_delay_without_the_pipe_is_refused() {
        let (classifier, table) = classifier(8, 1).unwrap();
        let sched = pspat_sched::Fifo::new(table, 64).unwrap();
        let plan = FrontPlan {
            part: Part::Classifier,
            flows: 8,
            len: 60,
            backlog: 64,
            delay_ns: 1_000,
        };
        let err = visit_front(plan, classifier, sched, RunFront).expect_err("refused");
        assert!(err.to_string().contains("needs the pipe"), "{err}");
    }
}
