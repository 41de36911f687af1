//! A rebuilt link's AQM in virtual time: a CoDel queue in its dropping
//! state and a PIE queue with a drop probability go on as if the link had
//! not been rebuilt (the same drops, the same exits), queued packets keep
//! their enqueue times, and queues merged or split start their AQM afresh
//! with every packet accounted for.

use pspat_sched::pipe::codel::CodelState;
use pspat_sched::pipe::pie::{DelayEstimator, PieState};
use pspat_sched::pipe::{Codel, Pie, PipeConfig, QueueConfig, QueueLimit};
use pspat_sched::rate::Rate;
use pspat_sched::{
    AlgKind, AnyScheduler, DropReason, FlowId, FlowTable, Instant, Packet, Pipe, PipeSet, Rejected,
    Scheduler, SchedulerConfig,
};

const MS: u64 = 1_000_000;
const LINK: u32 = 7;

/// A queue's CoDel and PIE states, when its pipe keeps them.
type States = (Option<CodelState>, Option<PieState>);

/// The AQM a test puts on every queue.
#[derive(Clone, Copy, Debug)]
enum Aqm {
    Codel,
    Pie(DelayEstimator),
}

/// A DRR pipe of `flows` flows at 8 Mbit/s (1000 B take 1 ms), 1 ms of
/// delay, queues of 10 000 slots under `aqm`, seed 5.
fn aqm_pipe(aqm: Aqm, flows: usize) -> Pipe<AnyScheduler> {
    let (codel, pie) = match aqm {
        Aqm::Codel => (Some(Codel::default()), None),
        Aqm::Pie(estimator) => (
            None,
            Some(Pie {
                estimator,
                ..Pie::default()
            }),
        ),
    };
    pipe_with(codel, pie, flows)
}

/// [`aqm_pipe`] with CoDel `codel` and PIE `pie`.
fn pipe_with(codel: Option<Codel>, pie: Option<Pie>, flows: usize) -> Pipe<AnyScheduler> {
    let cfg = PipeConfig {
        bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
        delay_ns: MS,
        queue: QueueConfig {
            limit: QueueLimit::Slots(10_000),
            codel,
            pie,
            ..QueueConfig::default()
        },
        seed: 5,
        ..PipeConfig::default()
    };
    let sched = SchedulerConfig::new(AlgKind::Drr)
        .build(FlowTable::uniform(flows).unwrap())
        .unwrap();
    Pipe::new(cfg, sched, flows).unwrap()
}

/// A set holding link [`LINK`] as one instance of `pipe` (`flows` flows at
/// ids 0..flows) and `spare` free ids after them.
fn set_of(pipe: Pipe<AnyScheduler>, flows: u32, spare: u32) -> PipeSet<AnyScheduler> {
    let mut set = PipeSet::new();
    set.push(LINK, 0, pipe, flows).unwrap();
    set.reserve(spare).unwrap();
    set
}

/// What a run did with each packet: exits `(ns, token)` in order, and the
/// tokens dropped after admission (late drops) and refused on arrival,
/// each with its reason.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    exits: Vec<(u64, u64)>,
    late: Vec<(u64, DropReason)>,
    refused: Vec<(u64, DropReason)>,
}

impl Outcome {
    fn late_by(&self, reason: DropReason) -> usize {
        self.late.iter().filter(|d| d.1 == reason).count()
    }

    fn refused_by(&self, reason: DropReason) -> usize {
        self.refused.iter().filter(|d| d.1 == reason).count()
    }

    /// Every packet of `sent` left, was dropped late or refused, once.
    fn assert_accounts_for(&self, sent: u64) {
        let mut tokens: Vec<u64> = self.exits.iter().map(|e| e.1).collect();
        tokens.extend(self.late.iter().map(|d| d.0));
        tokens.extend(self.refused.iter().map(|d| d.0));
        tokens.sort_unstable();
        assert_eq!(tokens.len() as u64, sent, "{self:?}");
        tokens.dedup();
        assert_eq!(tokens.len() as u64, sent, "a packet counted twice");
    }
}

/// Everything due from `from` up to `until` into `out`, as an arbiter
/// would see it (with the late drops).
fn drain_between(
    set: &mut PipeSet<AnyScheduler>,
    from: Instant,
    until: Instant,
    out: &mut Outcome,
) {
    let mut now = from;
    for _ in 0..1_000_000 {
        while let Some(p) = set.dequeue(now) {
            out.exits.push((now.as_nanos(), p.without_marks().token));
        }
        set.take_late_drops(&mut |r: Rejected| out.late.push((r.packet.token, r.reason)));
        match set.next_eligible(now) {
            Some(t) if t > now && t <= until => now = t,
            _ => break,
        }
    }
}

/// Sends `pkt` (its flow the link's own, before any rebuild) into `set`.
fn send(set: &mut PipeSet<AnyScheduler>, at: Instant, flow: u32, token: u64, out: &mut Outcome) {
    let g = set.global(LINK, 0, FlowId(flow)).unwrap();
    if let Err(r) = set.enqueue(at, Packet::new(g, 1000, token)) {
        out.refused.push((token, r.reason));
    }
}

/// One 1000-byte packet of flow `i % flows` every 900 µs (a ninth more
/// than the link sends) for 2.5 s: `(arrival, flow, token)`.
fn overload(flows: u32) -> Vec<(Instant, u32, u64)> {
    (0..2_800u64)
        .map(|i| {
            (
                Instant::from_nanos(i * 900_000),
                (i % u64::from(flows)) as u32,
                i,
            )
        })
        .collect()
}

/// Runs `arrivals` through two sets of `aqm_pipe(aqm, 1)`, one kept, one
/// rebuilt at arrival `at_seq` (the same configuration, new ids): what
/// each did, and the AQM states of their queue right after the rebuild.
fn kept_and_rebuilt(aqm: Aqm, at_seq: usize) -> ([Outcome; 2], [States; 2]) {
    let arrivals = overload(1);
    let mut sets = [
        set_of(aqm_pipe(aqm, 1), 1, 1),
        set_of(aqm_pipe(aqm, 1), 1, 1),
    ];
    let mut outs = [Outcome::default(), Outcome::default()];
    let mut states = [(None, None), (None, None)];
    let mut last = Instant::ZERO;
    for (seq, &(at, flow, token)) in arrivals.iter().enumerate() {
        for k in 0..2 {
            drain_between(&mut sets[k], last, at, &mut outs[k]);
        }
        if seq == at_seq {
            let gone = sets[1]
                .replace_link_moving(LINK, at, vec![(0, 1, aqm_pipe(aqm, 1), 1)], &|i, f| {
                    Some((i, f))
                })
                .unwrap();
            assert_eq!(gone.len(), 1);
            for (k, set) in sets.iter_mut().enumerate() {
                let pipe = set.pipe_mut(LINK, 0).unwrap();
                states[k] = (
                    pipe.codel_state(FlowId(0)).copied(),
                    pipe.pie_state(FlowId(0)).copied(),
                );
            }
        }
        for k in 0..2 {
            send(&mut sets[k], at, flow, token, &mut outs[k]);
        }
        last = at;
    }
    for k in 0..2 {
        drain_between(&mut sets[k], last, Instant::MAX, &mut outs[k]);
        assert_eq!(sets[k].queued(), 0);
        outs[k].assert_accounts_for(arrivals.len() as u64);
    }
    (outs, states)
}

#[test]
fn a_codel_queue_rebuilt_in_its_dropping_state_drops_at_its_control_law_times() {
    // One flow 11 % over the link: CoDel enters its dropping state after
    // about 150 ms and stays in it. The link is rebuilt (same
    // configuration, new ids) at one of four instants; the rebuilt link
    // drops exactly the packets the kept one drops, and sends the rest at
    // the same instants: the dropping state, its count and next drop
    // time, and each queued packet's enqueue time went on.
    for at_seq in [400usize, 1_111, 1_500, 2_222] {
        let ([kept, rebuilt], [(kc, _), (rc, _)]) = kept_and_rebuilt(Aqm::Codel, at_seq);
        let (kc, rc) = (kc.unwrap(), rc.unwrap());
        assert!(kc.is_dropping() && kc.count() > 1, "{kc:?}");
        assert_eq!(rc, kc, "rebuilt at arrival {at_seq}");
        let after = kept.late.iter().filter(|d| d.0 >= at_seq as u64).count();
        assert!(after >= 10, "{after} CoDel drops after the rebuild");
        assert_eq!(kept.late_by(DropReason::Codel), kept.late.len());
        assert_eq!(rebuilt, kept, "rebuilt at arrival {at_seq}");
    }
}

#[test]
fn a_pie_queue_rebuilt_keeps_its_probability_and_its_draws() {
    // The same overload on PIE (both delay estimators): by the rebuild its
    // probability is above 0 and it drops on arrival. The rebuilt link's
    // queue goes on with the same state (probability, burst allowance,
    // delay estimates, update grid, departure-rate cycle) and the PIE
    // stream goes on from its draw: the same arrivals refused, the same
    // exits.
    for estimator in [DelayEstimator::DepartureRate, DelayEstimator::Timestamp] {
        for at_seq in [900usize, 1_501, 2_345] {
            let aqm = Aqm::Pie(estimator);
            let ([kept, rebuilt], [(_, kp), (_, rp)]) = kept_and_rebuilt(aqm, at_seq);
            let (kp, rp) = (kp.unwrap(), rp.unwrap());
            assert!(kp.probability() > 0.0, "{estimator:?}: {kp:?}");
            assert_eq!(rp, kp, "{estimator:?} rebuilt at arrival {at_seq}");
            let after = kept
                .refused
                .iter()
                .filter(|d| d.0 >= at_seq as u64 && d.1 == DropReason::Pie)
                .count();
            assert!(after >= 10, "{estimator:?}: {after} PIE drops after");
            assert_eq!(kept.refused_by(DropReason::Pie), kept.refused.len());
            assert_eq!(rebuilt, kept, "{estimator:?} rebuilt at arrival {at_seq}");
        }
    }
}

/// Ten packets of flow 0 at time 0 into a one-flow pipe of `old` (`None`:
/// no AQM) on link [`LINK`], rebuilt at 4.5 ms into one of `aqm` (four
/// packets have started, the fifth is on the link until 5 ms), then run
/// to the end: the new pipe's PIE state.
fn ten_rebuilt_into_pie_ts(old: Option<Aqm>) -> PieState {
    let ts = Aqm::Pie(DelayEstimator::Timestamp);
    let plain = || {
        let sched = SchedulerConfig::new(AlgKind::Drr)
            .build(FlowTable::uniform(1).unwrap())
            .unwrap();
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000u64).unwrap()),
            delay_ns: MS,
            ..PipeConfig::default()
        };
        Pipe::new(cfg, sched, 1).unwrap()
    };
    let mut set = set_of(old.map_or_else(plain, |a| aqm_pipe(a, 1)), 1, 1);
    let mut out = Outcome::default();
    for token in 0..10 {
        send(&mut set, Instant::ZERO, 0, token, &mut out);
    }
    let now = Instant::from_nanos(4_500_000);
    drain_between(&mut set, Instant::ZERO, now, &mut out);
    set.replace_link(LINK, now, vec![(0, 1, aqm_pipe(ts, 1), 1)], &Some)
        .unwrap();
    drain_between(&mut set, now, Instant::MAX, &mut out);
    out.assert_accounts_for(10);
    assert_eq!(out.exits.len(), 10, "{out:?}");
    *set.pipe_mut(LINK, 0).unwrap().pie_state(FlowId(0)).unwrap()
}

#[test]
fn sojourn_times_after_a_rebuild_count_from_the_original_enqueue() {
    // PIE's `ts` estimate is the sojourn of the last packet that left: the
    // tenth, queued at 0 and started at 9 ms (4.5 ms after the rebuild).
    // Handed over from a pipe that kept times (PIE or CoDel), it counts
    // from 0: 9 ms; from a pipe that kept none, its time is not known and
    // PIE learns nothing from it (the estimate stays 0).
    for old in [
        Some(Aqm::Pie(DelayEstimator::Timestamp)),
        Some(Aqm::Pie(DelayEstimator::DepartureRate)),
        Some(Aqm::Codel),
    ] {
        let st = ten_rebuilt_into_pie_ts(old);
        assert_eq!(st.current_qdelay_ns(), 9 * MS, "from {old:?}");
    }
    assert_eq!(ten_rebuilt_into_pie_ts(None).current_qdelay_ns(), 0);
}

/// Runs a queue overload of `flows` flows under `aqm` on link [`LINK`]
/// up to arrival 1 500 (CoDel dropping, PIE's probability above 0), then
/// `rebuild`s it, then sends the rest, each flow's packets to `after(flow)`
/// in the new pipe: what the run did, and the new pipe's AQM states of
/// `new_flows` queues right after the rebuild.
fn overloaded_then(
    aqm: Aqm,
    flows: u32,
    new_flows: u32,
    rebuild: &mut dyn FnMut(&mut PipeSet<AnyScheduler>, Instant),
    after: &dyn Fn(u64) -> u32,
) -> (Outcome, Vec<States>) {
    let arrivals = overload(flows);
    let mut set = set_of(aqm_pipe(aqm, flows as usize), flows, new_flows);
    let mut out = Outcome::default();
    let mut states = Vec::new();
    let mut last = Instant::ZERO;
    for (seq, &(at, flow, token)) in arrivals.iter().enumerate() {
        drain_between(&mut set, last, at, &mut out);
        if seq == 1_500 {
            let pipe = set.pipe_mut(LINK, 0).unwrap();
            for f in 0..flows {
                match aqm {
                    Aqm::Codel => {
                        assert!(pipe.codel_state(FlowId(f)).unwrap().is_dropping())
                    }
                    Aqm::Pie(_) => {
                        assert!(pipe.pie_state(FlowId(f)).unwrap().probability() > 0.0)
                    }
                }
            }
            rebuild(&mut set, at);
            let pipe = set.pipe_mut(LINK, 0).unwrap();
            states = (0..new_flows)
                .map(|f| {
                    (
                        pipe.codel_state(FlowId(f)).copied(),
                        pipe.pie_state(FlowId(f)).copied(),
                    )
                })
                .collect();
        }
        let flow = if seq >= 1_500 { after(token) } else { flow };
        send(&mut set, at, flow, token, &mut out);
        last = at;
    }
    drain_between(&mut set, last, Instant::MAX, &mut out);
    assert_eq!(set.queued(), 0);
    out.assert_accounts_for(arrivals.len() as u64);
    (out, states)
}

/// The AQM dropped again after the rebuild (it restarted and took hold).
fn assert_drops_again(aqm: Aqm, out: &Outcome) {
    let after = match aqm {
        Aqm::Codel => out
            .late
            .iter()
            .filter(|d| d.0 >= 1_500 && d.1 == DropReason::Codel)
            .count(),
        Aqm::Pie(_) => out
            .refused
            .iter()
            .filter(|d| d.0 >= 1_500 && d.1 == DropReason::Pie)
            .count(),
    };
    assert!(after > 0, "{aqm:?}: no drop after the rebuild");
}

#[test]
fn queues_merged_by_a_coarser_mask_start_their_aqm_afresh_and_keep_every_packet() {
    // Two queues, each half the overload, both dropping (CoDel) or with a
    // probability (PIE), merged into one queue of the rebuilt link: the
    // merged queue starts from a fresh state (which of its two old
    // states would it continue?), every packet is accounted for, and the
    // AQM takes hold again.
    for aqm in [Aqm::Codel, Aqm::Pie(DelayEstimator::Timestamp)] {
        let (out, states) = overloaded_then(
            aqm,
            2,
            1,
            &mut |set, at| {
                set.replace_link_moving(LINK, at, vec![(0, 2, aqm_pipe(aqm, 1), 1)], &|i, _| {
                    Some((i, FlowId(0)))
                })
                .unwrap();
            },
            &|_| 0,
        );
        match aqm {
            Aqm::Codel => assert_eq!(states[0].0, Some(CodelState::default())),
            Aqm::Pie(_) => assert_eq!(states[0].1, Some(PieState::default())),
        }
        assert_drops_again(aqm, &out);
    }
}

#[test]
fn a_queue_split_by_a_finer_mask_starts_its_aqm_afresh_and_keeps_every_packet() {
    // One queue holding two sources (even and odd tokens), dropping
    // (CoDel) or with a probability (PIE), split by a finer mask into a
    // queue per source: the heir (source 0's queue) holds only part of
    // the old queue's packets and starts afresh, as does the other; every
    // packet is accounted for, and the AQM takes hold again.
    for aqm in [Aqm::Codel, Aqm::Pie(DelayEstimator::Timestamp)] {
        let source = |token: u64| (token % 2) as u32;
        let (out, states) = overloaded_then(
            aqm,
            1,
            2,
            &mut |set, at| {
                set.replace_link_splitting(
                    LINK,
                    at,
                    vec![(0, 1, aqm_pipe(aqm, 2), 2)],
                    &|i, f| Some((i, f)),
                    &mut |i, _, p: &Packet| Some((i, FlowId(source(p.token)))),
                )
                .unwrap();
            },
            &source,
        );
        for (f, st) in states.iter().enumerate() {
            match aqm {
                Aqm::Codel => assert_eq!(st.0, Some(CodelState::default()), "queue {f}"),
                Aqm::Pie(_) => assert_eq!(st.1, Some(PieState::default()), "queue {f}"),
            }
        }
        assert_drops_again(aqm, &out);
    }
}

#[test]
fn a_queue_moved_whole_to_another_instance_keeps_its_aqm() {
    // The control for the two tests above: the same rebuild that moves
    // the one queue whole (its packets all to its heir) carries its state.
    for aqm in [Aqm::Codel, Aqm::Pie(DelayEstimator::Timestamp)] {
        let (out, states) = overloaded_then(
            aqm,
            1,
            2,
            &mut |set, at| {
                set.replace_link_splitting(
                    LINK,
                    at,
                    vec![(0, 1, aqm_pipe(aqm, 2), 2)],
                    &|i, _| Some((i, FlowId(1))),
                    &mut |i, _, _| Some((i, FlowId(1))),
                )
                .unwrap();
            },
            &|_| 1,
        );
        match aqm {
            Aqm::Codel => {
                let st = states[1].0.unwrap();
                assert!(st.is_dropping() && st.count() > 1, "{st:?}");
            }
            Aqm::Pie(_) => assert!(states[1].1.unwrap().probability() > 0.0),
        }
        assert_drops_again(aqm, &out);
    }
}

#[test]
fn a_packet_handed_over_without_a_time_passes_undecided_only_at_its_queue_s_head() {
    use pspat_sched::pipe::Moved;
    // Into a PIE `ts` queue at 10 ms, its link busy until 12 ms (the old
    // link's transmission in progress): a packet with its time (queued at
    // 0), then one without (from a pipe that kept none). The second,
    // behind a timed packet, is timed from the hand-over (10 ms), so each
    // keeps its own time: sojourns 12 ms, then 3 ms. The other way round,
    // the untimed one at the head passes unmeasured (the estimate stays
    // 0), and the timed one behind it measures 13 ms.
    let now = Instant::from_nanos(10 * MS);
    let queued = |token: u64, enqueued: Option<Instant>| Moved::Queued {
        packet: Packet::new(FlowId(0), 1000, token),
        enqueued,
    };
    let plans = [
        ([Some(Instant::ZERO), None], [12 * MS, 3 * MS]),
        ([None, Some(Instant::ZERO)], [0, 13 * MS]),
    ];
    for (times, want) in plans {
        let mut pipe = aqm_pipe(Aqm::Pie(DelayEstimator::Timestamp), 1);
        pipe.continue_link(Instant::from_nanos(12 * MS), 0);
        for (token, t) in times.into_iter().enumerate() {
            pipe.adopt(now, queued(token as u64, t)).unwrap();
        }
        let mut seen = Vec::new();
        // The first starts at 12 ms, the second at 13 ms.
        for start in [12 * MS, 13 * MS] {
            pipe.release(Instant::from_nanos(start), &mut |_| {});
            seen.push(pipe.pie_state(FlowId(0)).unwrap().current_qdelay_ns());
        }
        assert_eq!(seen, want, "{times:?}");
        pipe.release(Instant::from_nanos(20 * MS), &mut |_| {});
        assert_eq!(pipe.held(), 0);
    }
}

#[test]
fn a_carried_state_follows_its_queue_s_new_parameters_and_a_new_aqm_starts_afresh() {
    // CoDel dropping at arrival 1 500, rebuilt with a 500 ms target (a
    // flowset's new `codel target`): the state goes on (dropping, the
    // same count), as a queue's state does when its parameters change in
    // place, and the new target rules from the next packet: the sojourn is
    // far below it, so the dropping state ends and CoDel drops no more.
    let relaxed = Codel {
        target_ns: 500 * MS,
        ..Codel::default()
    };
    let (out, states) = overloaded_then(
        Aqm::Codel,
        1,
        1,
        &mut |set, at| {
            let kept = *set
                .pipe_mut(LINK, 0)
                .unwrap()
                .codel_state(FlowId(0))
                .unwrap();
            set.replace_link(
                LINK,
                at,
                vec![(0, 1, pipe_with(Some(relaxed), None, 1), 1)],
                &Some,
            )
            .unwrap();
            let st = set
                .pipe_mut(LINK, 0)
                .unwrap()
                .codel_state(FlowId(0))
                .copied();
            assert_eq!(st, Some(kept));
        },
        &|_| 0,
    );
    assert!(states[0].0.unwrap().is_dropping());
    let last_codel_drop = out
        .late
        .iter()
        .filter(|d| d.1 == DropReason::Codel)
        .map(|d| d.0)
        .max();
    assert!(last_codel_drop < Some(1_500), "{last_codel_drop:?}");
    // CoDel replaced by PIE on the rebuilt queue: PIE starts from a fresh
    // state (CoDel's says nothing of a drop probability), and takes hold.
    let ts = DelayEstimator::Timestamp;
    let (out, states) = overloaded_then(
        Aqm::Codel,
        1,
        1,
        &mut |set, at| {
            set.replace_link(LINK, at, vec![(0, 1, aqm_pipe(Aqm::Pie(ts), 1), 1)], &Some)
                .unwrap();
        },
        &|_| 0,
    );
    assert_eq!(states[0].1, Some(PieState::default()));
    assert_eq!(states[0].0, Some(CodelState::default()));
    assert_drops_again(Aqm::Pie(ts), &out);
}
