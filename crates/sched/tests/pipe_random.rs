//! The random processes against their formulas, with fixed seeds: random
//! loss, RED and gentle RED, Gilbert-Elliott, duplication, the correlated
//! chains of duplication, corruption and reordering, the delay profile and
//! the three jitter distributions.

use pspat_sched::pipe::Exit;
use pspat_sched::pipe::{
    DelayProfile, GilbertElliott, Jitter, JitterDistribution, LossState, NetemReorder, PipeConfig,
    QueueConfig, QueueLimit, Red, RedState,
};
use pspat_sched::{DropReason, Fate, Fifo, FlowId, Instant, Packet, Pipe};

use crate::pipe_common::{assert_binomial, at, drive, fifo_pipe, rate, Run, Z999};

const MS: u64 = 1_000_000;

/// `n` packets of `len` bytes, one every `gap` ns, tokens 0..n.
fn spaced(n: u64, len: u32, gap: u64) -> Vec<(Instant, Packet)> {
    (0..n)
        .map(|i| (at(i * gap), Packet::new(FlowId(0), len, i)))
        .collect()
}

fn queue(q: QueueConfig) -> PipeConfig {
    PipeConfig {
        queue: QueueConfig {
            limit: QueueLimit::Slots(1_000_000),
            ..q
        },
        seed: 20_261_123,
        ..PipeConfig::default()
    }
}

#[test]
fn random_loss_is_binomial_in_plr() {
    for plr in [0.0, 0.001, 0.01, 0.3, 1.0] {
        let n = 100_000;
        let mut pipe = fifo_pipe(
            queue(QueueConfig {
                plr,
                ..QueueConfig::default()
            }),
            1,
            16,
        );
        let run = drive(&mut pipe, &spaced(n, 100, 1_000));
        let lost = pipe.counters().dropped(DropReason::RandomLoss);
        assert_eq!(lost, run.rejected.len() as u64);
        assert_binomial(&format!("plr {plr}"), lost, n, plr);
        assert_eq!(pipe.counters().out_packets, n - lost);
    }
}

/// The mean gap between RED drops at a constant `p_b` with uniform
/// spacing: `1 + Σ_{k ≥ 1, k·p_b < 1} (1 − k·p_b)`.
fn red_mean_gap(p_b: f64) -> f64 {
    let mut e = 1.0;
    let mut k = 1.0;
    while k * p_b < 1.0 {
        e += 1.0 - k * p_b;
        k += 1.0;
    }
    e
}

/// Feeds `n` arrivals that all find `q` queued to RED with `w_q = 1` (so
/// the average is `q`); returns the drops.
fn red_drops_at(red: &Red, q: u64, len: u32, bytes: bool, n: u64, seed: u64) -> u64 {
    let mut state = RedState::default();
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n)
        .filter(|_| state.drops(red, q, len, bytes, 0, Some(1_000), &mut rng))
        .count() as u64
}

fn check_red_fraction(what: &str, drops: u64, n: u64, p_b: f64) {
    let f = 1.0 / red_mean_gap(p_b);
    // Uniform spacing makes drops more regular than Bernoulli trials: the
    // binomial interval is a conservative bound.
    let sd = (n as f64 * f * (1.0 - f)).sqrt();
    assert!(
        (drops as f64 - n as f64 * f).abs() <= Z999 * sd + 2.0,
        "{what}: {drops} drops of {n}, expected {:.1} ± {:.1} (p_b {p_b})",
        n as f64 * f,
        Z999 * sd
    );
}

#[test]
fn red_drops_follow_the_linear_probability_with_uniform_spacing() {
    // ipfw(8)'s example: red 0.002/30/80/0.1, here with w_q = 1 so that the
    // average equals the queue an arrival finds.
    let red = Red {
        gentle: false,
        w_q: 1.0,
        min_th: 30,
        max_th: 80,
        max_p: 0.1,
    };
    let n = 200_000;
    for avg in [35u64, 50, 65, 79] {
        let p_b = 0.1 * (avg as f64 - 30.0) / 50.0;
        let d = red_drops_at(&red, avg, 1_500, false, n, avg);
        check_red_fraction(&format!("RED avg {avg}"), d, n, p_b);
    }
    assert_eq!(
        red_drops_at(&red, 29, 1_500, false, n, 1),
        0,
        "below min_th"
    );
    assert_eq!(red_drops_at(&red, 80, 1_500, false, n, 1), n, "at max_th");
    // A byte-counted queue scales p_b by len / 1500.
    let bytes = Red {
        min_th: 30_000,
        max_th: 80_000,
        ..red
    };
    let d = red_drops_at(&bytes, 55_000, 750, true, n, 3);
    check_red_fraction("RED bytes", d, n, 0.05 * 750.0 / 1_500.0);
    // With 1/p_b an integer the fraction is 2·p_b/(1 + p_b).
    assert!((1.0 / red_mean_gap(0.05) - 0.1 / 1.05).abs() < 1e-12);
}

#[test]
fn gentle_red_rises_from_max_p_to_one_between_max_th_and_twice_max_th() {
    let red = Red {
        gentle: true,
        w_q: 1.0,
        min_th: 30,
        max_th: 80,
        max_p: 0.1,
    };
    let n = 200_000;
    for avg in [50u64, 80, 90, 120, 150] {
        let a = avg as f64;
        let p_b = if avg < 80 {
            0.1 * (a - 30.0) / 50.0
        } else {
            (1.0 - 0.1) * a / 80.0 - (1.0 - 2.0 * 0.1)
        };
        let d = red_drops_at(&red, avg, 1_500, false, n, avg + 1);
        check_red_fraction(&format!("GRED avg {avg}"), d, n, p_b);
    }
    // From 2·max_th on every packet goes, except the one that enters the
    // region (it draws the spacing variable, as dummynet's count = 0).
    assert_eq!(red_drops_at(&red, 160, 1_500, false, n, 1), n - 1);
}

#[test]
fn red_average_is_dummynets_ewma_with_idle_decay() {
    let red = Red {
        gentle: false,
        w_q: 0.002,
        min_th: 1_000,
        max_th: 2_000,
        max_p: 0.1,
    };
    let mut s = RedState::default();
    let mut rng = fastrand::Rng::with_seed(1);
    for _ in 0..500 {
        assert!(!s.drops(&red, 100, 1_500, false, 0, Some(512), &mut rng));
    }
    let expected = 100.0 * (1.0 - 0.998f64.powi(500));
    assert!((s.avg - expected).abs() < 1e-9, "{} vs {expected}", s.avg);
    // Empty for 10.5 average-packet times: avg·(1 − w_q)^(10 + 1).
    let before = s.avg;
    s.drops(&red, 0, 1_500, false, 10 * 512 + 256, Some(512), &mut rng);
    assert!((s.avg - before * 0.998f64.powi(11)).abs() < 1e-9);
    // 256 packet times or more: the average is forgotten.
    s.drops(&red, 0, 1_500, false, 256 * 512, Some(512), &mut rng);
    assert_eq!(s.avg, 0.0);
}

/// A FIFO pipe of one queue at 1 Mbit/s, 1 000 slots, whose RED has `w_q`
/// 1 (the average is the queue's length), thresholds 5 and 20 and `max_p`
/// 0.2, `gentle` and with `ecn` as asked, its random streams from `seed`.
fn red_pipe(gentle: bool, ecn: bool, seed: u64) -> Pipe<Fifo> {
    let red = Red {
        gentle,
        w_q: 1.0,
        min_th: 5,
        max_th: 20,
        max_p: 0.2,
    };
    fifo_pipe(
        PipeConfig {
            bw: Some(rate(1_000_000)),
            queue: QueueConfig {
                limit: QueueLimit::Slots(1_000),
                red: Some(red),
                ecn,
                ..QueueConfig::default()
            },
            seed,
            ..PipeConfig::default()
        },
        1,
        2_000,
    )
}

#[test]
fn red_in_a_pipe_keeps_the_queue_below_max_th() {
    let mut pipe = red_pipe(false, false, PipeConfig::default().seed);
    let mut longest = 0;
    for i in 0..1_000 {
        let _ = pipe.enqueue(at(i * 100_000), Packet::new(FlowId(0), 1_000, i));
        longest = longest.max(pipe.queue_len(FlowId(0)).unwrap().0);
    }
    assert!((5..=20).contains(&longest), "{longest}");
    assert!(pipe.counters().dropped(DropReason::Red) > 500);
    assert_eq!(pipe.counters().dropped(DropReason::FlowLimit), 0);
    assert!(pipe.red_average(FlowId(0)).unwrap() >= 5.0);
}

/// [`red_pipe`] with `ecn` and `gentle` as asked, and the run of `n`
/// packets of 1000 bytes arriving 1 µs apart (all within one packet time,
/// so the queue grows by one per arrival but for RED's decisions),
/// ECN-capable where `ect(i)`.
fn ecn_run(ecn: bool, gentle: bool, n: u64, ect: impl Fn(u64) -> bool) -> (Pipe<Fifo>, Run) {
    let mut pipe = red_pipe(gentle, ecn, 20_261_201);
    let arrivals: Vec<_> = (0..n)
        .map(|i| {
            let p = Packet::new(FlowId(0), 1_000, i);
            (at(i * 1_000), if ect(i) { p.with_ect() } else { p })
        })
        .collect();
    let run = drive(&mut pipe, &arrivals);
    (pipe, run)
}

#[test]
fn red_with_ecn_marks_the_ecn_capable_packets_it_would_drop_and_drops_the_others() {
    // Every other packet ECN-capable.
    let (pipe, run) = ecn_run(true, false, 2_000, |i| i % 2 == 1);
    let c = pipe.counters();
    let red_drops: Vec<u64> = run
        .rejected
        .iter()
        .filter(|(_, r)| r.reason == DropReason::Red)
        .map(|(_, r)| r.packet.token)
        .collect();
    assert!(!red_drops.is_empty());
    assert!(
        red_drops.iter().all(|t| t % 2 == 0),
        "an ECN-capable packet was dropped"
    );
    let marked: Vec<&Exit> = run
        .with_fate(Fate::Transmit)
        .filter(|e| e.packet.is_ce())
        .collect();
    assert_eq!(marked.len() as u64, c.marked);
    assert!(c.marked > 100, "{c:?}");
    assert!(marked
        .iter()
        .all(|e| e.packet.is_ect() && e.packet.token & Packet::ECT_BIT != 0));
    // Marks and the caller's bit come off; the token is the caller's again.
    assert!(marked
        .iter()
        .all(|e| e.packet.without_marks().token & !Packet::ECT_BIT < 2_000));
    assert_eq!(c.out_packets + c.dropped_total(), 2_000);
    // Once the queue passed max_th every arrival is marked or dropped.
    let exits_ce: std::collections::HashSet<u64> = marked
        .iter()
        .map(|e| e.packet.without_marks().token & !Packet::ECT_BIT)
        .collect();
    assert!(exits_ce.iter().all(|t| t % 2 == 1));

    // Without `ecn` the same traffic loses every packet RED picks.
    let (plain, plain_run) = ecn_run(false, false, 2_000, |i| i % 2 == 1);
    assert_eq!(plain.counters().marked, 0);
    assert!(plain_run
        .with_fate(Fate::Transmit)
        .all(|e| !e.packet.is_ce()));
    assert!(plain_run
        .rejected
        .iter()
        .any(|(_, r)| r.reason == DropReason::Red && r.packet.token % 2 == 1));
}

#[test]
fn red_with_ecn_marks_every_packet_at_or_above_max_th_even_when_gentle() {
    // All ECN-capable: nothing is dropped by RED, and from the arrival
    // that finds 20 packets queued on (the one on the link aside), every
    // packet is marked; gentle RED without `ecn` would let some through
    // unmarked between max_th and twice max_th.
    let (pipe, run) = ecn_run(true, true, 60, |_| true);
    assert_eq!(pipe.counters().dropped_total(), 0, "{:?}", pipe.counters());
    let tokens_ce: Vec<bool> = {
        let mut v = vec![false; 60];
        for e in run.with_fate(Fate::Transmit) {
            v[(e.packet.without_marks().token & !Packet::ECT_BIT) as usize] = e.packet.is_ce();
        }
        v
    };
    // Packet 0 goes straight to the link; packet i finds i - 1 queued.
    assert!(tokens_ce[..6].iter().all(|m| !m), "{tokens_ce:?}");
    assert!(tokens_ce[21..].iter().all(|&m| m), "{tokens_ce:?}");
    assert_eq!(
        tokens_ce.iter().filter(|&&m| m).count() as u64,
        pipe.counters().marked
    );

    // The same arrivals, none ECN-capable: RED drops every one at or above
    // max_th, gentle or not, because `ecn` is set.
    let (pipe, run) = ecn_run(true, true, 60, |_| false);
    assert_eq!(pipe.counters().marked, 0);
    let dropped: Vec<u64> = run
        .rejected
        .iter()
        .filter(|(_, r)| r.reason == DropReason::Red)
        .map(|(_, r)| r.packet.token)
        .collect();
    assert!(dropped.len() >= 30, "{dropped:?}");
    assert_eq!(
        pipe.counters().dropped(DropReason::Red),
        dropped.len() as u64
    );
}

/// The tokens a run picked for loss: those dropped for a random loss and,
/// with `lossecn`, those it marked instead.
fn loss_picks(run: &Run) -> std::collections::BTreeSet<u64> {
    run.rejected
        .iter()
        .filter(|(_, r)| matches!(r.reason, DropReason::RandomLoss | DropReason::BurstLoss))
        .map(|(_, r)| r.packet.without_marks().token & !Packet::ECT_BIT)
        .chain(
            run.with_fate(Fate::Transmit)
                .filter(|e| e.packet.is_ce())
                .map(|e| e.packet.without_marks().token & !Packet::ECT_BIT),
        )
        .collect()
}

#[test]
fn lossecn_marks_the_ecn_capable_packets_a_loss_picks_and_the_losses_move_as_without_it() {
    // Each random loss in turn: plr, Gilbert-Elliott, the 4-state model.
    let ge = GilbertElliott {
        p: 0.05,
        r: 0.3,
        loss_bad: 0.9,
        loss_good: 0.01,
    };
    for (name, base) in [
        (
            "plr",
            QueueConfig {
                plr: 0.2,
                ..QueueConfig::default()
            },
        ),
        (
            "gemodel",
            QueueConfig {
                gilbert_elliott: Some(ge),
                ..QueueConfig::default()
            },
        ),
        (
            "lossstate",
            QueueConfig {
                loss_state: Some(LossState {
                    p13: 0.05,
                    p31: 0.5,
                    p32: 0.2,
                    p23: 0.3,
                    p14: 0.02,
                }),
                ..QueueConfig::default()
            },
        ),
    ] {
        let n = 20_000u64;
        // Every third packet not ECN-capable.
        let arrivals: Vec<_> = spaced(n, 100, 1_000)
            .into_iter()
            .map(|(t, p)| (t, if p.token % 3 == 0 { p } else { p.with_ect() }))
            .collect();
        let run_with = |loss_ecn: bool| {
            let mut pipe = fifo_pipe(queue(QueueConfig { loss_ecn, ..base }), 1, 16);
            let run = drive(&mut pipe, &arrivals);
            (*pipe.counters(), run)
        };
        let (plain_c, plain) = run_with(false);
        let (c, marking) = run_with(true);
        // The same packets picked, by the same draws.
        let picks = loss_picks(&marking);
        assert_eq!(picks, loss_picks(&plain), "{name}");
        assert!(picks.len() as u64 > n / 20, "{name}: {}", picks.len());
        // Of them, the ECN-capable ones go on marked, only the others drop.
        let dropped: Vec<u64> = marking
            .rejected
            .iter()
            .map(|(_, r)| r.packet.token)
            .collect();
        assert!(
            dropped.iter().all(|t| t % 3 == 0),
            "{name}: an ECN-capable packet dropped"
        );
        assert_eq!(
            c.marked + dropped.len() as u64,
            picks.len() as u64,
            "{name}"
        );
        assert_eq!(
            c.marked,
            marking
                .with_fate(Fate::Transmit)
                .filter(|e| e.packet.is_ce())
                .count() as u64
        );
        assert_eq!(c.out_packets, n - dropped.len() as u64, "{name}");
        assert_eq!(plain_c.marked, 0);
        assert!(plain.with_fate(Fate::Transmit).all(|e| !e.packet.is_ce()));
    }
}

/// A one-queue FIFO pipe that loses by `ge`, after `n` packets of 64 bytes
/// 100 ns apart (tokens 0..n), and what they did.
fn gilbert_elliott_run(ge: GilbertElliott, n: u64) -> (Pipe<Fifo>, Run) {
    let mut pipe = fifo_pipe(
        queue(QueueConfig {
            gilbert_elliott: Some(ge),
            ..QueueConfig::default()
        }),
        1,
        16,
    );
    let run = drive(&mut pipe, &spaced(n, 64, 100));
    (pipe, run)
}

#[test]
fn gilbert_elliott_as_a_correlated_loss_keeps_its_rate_and_lag_one_correlation() {
    // `pspat config from-netem` writes tc-netem's `loss P C` as the chain
    // p = P(1 - C), r = (1 - P)(1 - C), 1-h = 1, 1-k = 0: loss rate P,
    // and the fates of successive packets correlated by C.
    let (loss, correlation) = (0.05, 0.25);
    let ge = GilbertElliott {
        p: loss * (1.0 - correlation),
        r: (1.0 - loss) * (1.0 - correlation),
        loss_bad: 1.0,
        loss_good: 0.0,
    };
    let n = 400_000u64;
    let (pipe, run) = gilbert_elliott_run(ge, n);
    let mut lost = vec![false; n as usize];
    for (_, r) in &run.rejected {
        lost[r.packet.token as usize] = true;
    }
    assert_eq!(
        lost.iter().filter(|&&l| l).count() as u64,
        pipe.counters().dropped(DropReason::BurstLoss),
        "every loss is a rejected packet"
    );
    assert_chain("loss", &lost, loss, correlation);
}

/// Asserts that the answers `yes` (one per packet, in order) have the
/// long-run share `p` of a two-state chain, within its 99.9% interval (the
/// count's variance is n·p(1−p)·(1 + c)/(1 − c)), and a lag-1 correlation
/// within 0.02 of `c`.
fn assert_chain(what: &str, yes: &[bool], p: f64, c: f64) {
    let n = yes.len() as f64;
    let count = yes.iter().filter(|&&y| y).count() as f64;
    let sd = (n * p * (1.0 - p) * (1.0 + c) / (1.0 - c)).sqrt();
    assert!(
        (count - n * p).abs() <= Z999 * sd,
        "{what}: {count} of {n}, expected {:.0} ± {:.0}",
        n * p,
        Z999 * sd
    );
    let m = count / n;
    let pairs = yes.windows(2).filter(|w| w[0] && w[1]).count() as f64 / (n - 1.0);
    let lag1 = (pairs - m * m) / (m * (1.0 - m));
    assert!(
        (lag1 - c).abs() < 0.02,
        "{what}: lag-1 correlation {lag1:.4}, asked {c}"
    );
}

#[test]
fn correlated_duplication_corruption_and_reordering_keep_their_rates_and_lag_one_correlations() {
    // tc-netem's `duplicate P C`, `corrupt P C` and `reorder P C` as
    // pspat reads them: two-state chains of the decisions, one per queue
    // (duplication, corruption) or per pipe (reordering).
    let (dup, dup_c) = (0.1, 0.4);
    let (corrupt, corrupt_c) = (0.05, 0.3);
    let (reorder, reorder_c) = (0.2, 0.5);
    let n = 200_000u64;
    let (gap, delay) = (1_000, MS);
    let mut pipe = fifo_pipe(
        PipeConfig {
            delay_ns: delay,
            delay_line_capacity: 4_096,
            reorder: true,
            netem_reorder: Some(NetemReorder {
                probability: reorder,
                gap: 1,
                correlation: reorder_c,
            }),
            ..queue(QueueConfig {
                duplicate: dup,
                duplicate_correlation: dup_c,
                corrupt,
                corrupt_correlation: corrupt_c,
                ..QueueConfig::default()
            })
        },
        1,
        16,
    );
    let run = drive(&mut pipe, &spaced(n, 200, gap));
    let mut duplicated = vec![false; n as usize];
    let mut corrupted = vec![false; n as usize];
    let mut ahead = vec![false; n as usize];
    for (_, e) in &run.exits {
        let i = e.packet.without_marks().token as usize;
        match e.fate {
            Fate::Duplicate => duplicated[i] = true,
            Fate::Transmit => {
                corrupted[i] = e.packet.is_corrupt();
                // Sent ahead: it left before its arrival plus the delay.
                ahead[i] = e.at.as_nanos() < i as u64 * gap + delay;
            }
            other => panic!("packet {i}: {other:?}"),
        }
    }
    assert_eq!(pipe.counters().out_packets, n, "every packet left once");
    assert_eq!(
        duplicated.iter().filter(|&&d| d).count() as u64,
        pipe.counters().duplicates
    );
    assert_eq!(
        corrupted.iter().filter(|&&c| c).count() as u64,
        pipe.counters().corrupted
    );
    assert_eq!(
        ahead.iter().filter(|&&a| a).count() as u64,
        pipe.counters().reordered
    );
    assert_chain("duplicate", &duplicated, dup, dup_c);
    assert_chain("corrupt", &corrupted, corrupt, corrupt_c);
    assert_chain("reorder", &ahead, reorder, reorder_c);
}

#[test]
fn a_correlation_of_zero_draws_as_the_uncorrelated_probability() {
    // The chain with c = 0 makes the same draw as a plain probability, so
    // a configuration that gains `correlation 0` behaves as before.
    let run = |c: f64| {
        let mut pipe = duplicating_pipe(0.1, c);
        let run = drive(&mut pipe, &spaced(20_000, 200, 1_000));
        run.exits.iter().map(|(_, e)| *e).collect::<Vec<_>>()
    };
    let (plain, zero, some) = (run(0.0), run(0.0), run(0.5));
    assert_eq!(plain, zero);
    assert_ne!(plain, some, "a correlation changes the decisions");
}

#[test]
fn gilbert_elliott_long_run_loss_is_its_stationary_formula() {
    for (p, r, loss_bad, loss_good) in [
        (0.05, 0.3, 0.7, 0.02),
        (0.01, 0.1, 1.0, 0.0),
        (0.2, 0.2, 0.5, 0.1),
    ] {
        let ge = GilbertElliott {
            p,
            r,
            loss_bad,
            loss_good,
        };
        let n = 300_000;
        let (pipe, run) = gilbert_elliott_run(ge, n);
        let lost = pipe.counters().dropped(DropReason::BurstLoss);
        // Stationary: π_bad = p/(p + r).
        let pi_bad = p / (p + r);
        let f = (1.0 - pi_bad) * loss_good + pi_bad * loss_bad;
        assert!((f - ge.stationary_loss()).abs() < 1e-12);
        // Variance of the loss count of a two-state chain: Bernoulli part
        // plus the correlated part, Var_π(f)·2λ/(1 − λ), λ = 1 − p − r.
        let lambda = 1.0 - p - r;
        let var_f = pi_bad * (1.0 - pi_bad) * (loss_bad - loss_good).powi(2);
        let sd = (n as f64 * (f * (1.0 - f) + var_f * 2.0 * lambda / (1.0 - lambda))).sqrt();
        assert!(
            (lost as f64 - n as f64 * f).abs() <= Z999 * sd,
            "GE {p}/{r}/{loss_bad}/{loss_good}: {lost} of {n}, expected {:.0} ± {:.0}",
            n as f64 * f,
            Z999 * sd
        );
        // Bursts: with 1-h = 1 and 1-k = 0 a run of consecutive losses is a
        // stay in the bad state, geometric with mean 1/r.
        if loss_bad == 1.0 && loss_good == 0.0 {
            let tokens: Vec<u64> = run.rejected.iter().map(|(_, x)| x.packet.token).collect();
            let runs = 1 + tokens.windows(2).filter(|w| w[1] != w[0] + 1).count();
            let mean_run = tokens.len() as f64 / runs as f64;
            assert!(
                (mean_run * r - 1.0).abs() < 0.1,
                "mean loss run {mean_run}, 1/r = {}",
                1.0 / r
            );
        }
    }
}

/// A FIFO pipe with a 1 ms delay that duplicates with probability `p` and
/// correlation `c`.
fn duplicating_pipe(p: f64, c: f64) -> Pipe<Fifo> {
    fifo_pipe(
        PipeConfig {
            delay_ns: MS,
            // A thousand packets and their copies are in flight: room for all,
            // or the link would stop and the FIFO overflow.
            delay_line_capacity: 4_096,
            ..queue(QueueConfig {
                duplicate: p,
                duplicate_correlation: c,
                ..QueueConfig::default()
            })
        },
        1,
        16,
    )
}

#[test]
fn duplicates_follow_their_original_at_the_same_time() {
    let n = 100_000;
    let mut pipe = duplicating_pipe(0.1, 0.0);
    let run = drive(&mut pipe, &spaced(n, 200, 1_000));
    let dups = run.with_fate(Fate::Duplicate).count() as u64;
    assert_eq!(dups, pipe.counters().duplicates);
    assert_binomial("duplicate 0.1", dups, n, 0.1);
    assert_eq!(pipe.counters().out_packets, n, "a duplicate is extra");
    for (i, (_, e)) in run.exits.iter().enumerate() {
        if e.fate == Fate::Duplicate {
            let (_, orig) = run.exits[i - 1];
            assert_eq!(
                (orig.fate, orig.packet, orig.at),
                (Fate::Transmit, e.packet, e.at)
            );
        }
    }
}

/// Each packet's extra airtime from the profile: exit − arrival −
/// transmission − delay (transmitted) or exit − arrival − transmission
/// (lost at the end of the link).
fn airtimes(run: &Run, gap: u64, tx: u64, delay: u64) -> Vec<(u64, bool)> {
    run.exits
        .iter()
        .map(|(_, e)| {
            let arrival = e.packet.token * gap;
            let lost = e.fate == Fate::Dropped(DropReason::ProfileLoss);
            let extra = e.at.as_nanos() - arrival - tx - if lost { 0 } else { delay };
            (extra, lost)
        })
        .collect()
}

#[test]
fn profile_samples_are_uniform_over_the_table_and_lose_above_loss_level() {
    // Ten distinct entries, 0..90 µs; loss-level 0.8 loses indices 8 and 9.
    let table: Vec<u64> = (0..10).map(|i| i * 10_000).collect();
    let profile = DelayProfile::new(table.clone(), 0.8).unwrap();
    let n = 50_000u64;
    let gap = MS; // far apart: no packet waits behind another's airtime
    let mut pipe = fifo_pipe(
        PipeConfig {
            bw: Some(rate(8_000_000_000)),
            delay_ns: 5 * MS,
            profile: Some(profile),
            // No order floor: a lost packet is handed back at its link exit
            // (in order-keeping mode it waits behind the packets ahead).
            reorder: true,
            seed: 77,
            ..PipeConfig::default()
        },
        1,
        16,
    );
    let run = drive(&mut pipe, &spaced(n, 100, gap));
    let mut counts = [0u64; 10];
    for (extra, lost) in airtimes(&run, gap, 100, 5 * MS) {
        let i = table
            .iter()
            .position(|&t| t == extra)
            .expect("a table entry");
        assert_eq!(lost, i >= 8, "entry {i}");
        counts[i] += 1;
    }
    let expected = n as f64 / 10.0;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // 9 degrees of freedom, 99.9% quantile.
    assert!(chi2 < 27.877, "chi-square {chi2}: {counts:?}");
    let lost = pipe.counters().dropped(DropReason::ProfileLoss);
    assert_eq!(lost, counts[8] + counts[9]);
    assert_binomial("profile loss", lost, n, 0.2);
    assert_eq!(pipe.counters().out_packets + lost, n);
}

#[test]
fn profile_airtime_occupies_the_link() {
    // Two packets at once: the second starts after the first's airtime.
    let profile = DelayProfile::new(vec![7_000], 1.0).unwrap();
    let mut pipe = fifo_pipe(
        PipeConfig {
            bw: Some(rate(8_000_000_000)),
            profile: Some(profile),
            ..PipeConfig::default()
        },
        1,
        16,
    );
    let arr = [
        (at(0), Packet::new(FlowId(0), 100, 0)),
        (at(0), Packet::new(FlowId(0), 100, 1)),
    ];
    let run = drive(&mut pipe, &arr);
    let t: Vec<u64> = run.exits.iter().map(|(_, e)| e.at.as_nanos()).collect();
    assert_eq!(t, [7_100, 14_200]);
}

/// The standard normal CDF (Abramowitz and Stegun 7.1.26, error < 1.5e-7).
fn phi(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// A cumulative distribution function.
type Cdf = Box<dyn Fn(f64) -> f64>;

/// Kolmogorov-Smirnov distance between the samples and `cdf`.
fn ks(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
        })
        .fold(0.0, f64::max)
}

/// The `n` jitter samples a pipe seeded with `seed` draws, at 1 ms scale
/// with `jitter_correlation` `rho`, in packet order: one 100-byte packet
/// every 200 µs on a fast link, a delay of ten standard deviations (so
/// nothing is cut) and reordering allowed (no order floor: the raw
/// samples).
fn jitter_samples(dist: JitterDistribution, rho: f64, n: u64, seed: u64) -> Vec<f64> {
    let gap = 200_000;
    let delay = 10 * MS;
    let mut pipe = fifo_pipe(
        PipeConfig {
            bw: Some(rate(8_000_000_000)),
            delay_ns: delay,
            jitter: Some(Jitter {
                ns: MS,
                distribution: dist,
            }),
            jitter_correlation: rho,
            reorder: true,
            delay_line_capacity: 4_096,
            seed,
            ..PipeConfig::default()
        },
        1,
        16,
    );
    let run = drive(&mut pipe, &spaced(n, 100, gap));
    let mut by_token: Vec<(u64, f64)> = run
        .exits
        .iter()
        .map(|(_, e)| {
            let t = e.packet.token;
            (t, e.at.as_nanos() as f64 - (t * gap + 100 + delay) as f64)
        })
        .collect();
    by_token.sort_by_key(|e| e.0);
    by_token.into_iter().map(|e| e.1).collect()
}

/// Pearson's correlation of successive values.
fn lag1(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let cov = xs
        .windows(2)
        .map(|w| (w[0] - mean) * (w[1] - mean))
        .sum::<f64>()
        / (n - 1.0);
    cov / var
}

#[test]
fn correlated_jitter_keeps_its_distribution_and_has_the_asked_correlation() {
    let rho = 0.5;
    let n = 40_000u64;
    let j = MS as f64;
    // Normal: lag-1 correlation ρ exactly. Uniform through the copula:
    // (6/π)·asin(ρ/2) (Pearson's correlation of Φ of a bivariate normal).
    let uniform_rho = 6.0 / std::f64::consts::PI * (rho / 2.0f64).asin();
    for (dist, want, cdf) in [
        (
            JitterDistribution::Normal,
            rho,
            Box::new(move |x: f64| phi(x / j)) as Cdf,
        ),
        (
            JitterDistribution::Uniform,
            uniform_rho,
            Box::new(move |x: f64| ((x + j) / (2.0 * j)).clamp(0.0, 1.0)),
        ),
    ] {
        let xs = jitter_samples(dist, rho, n, 8);
        assert_eq!(xs.len() as u64, n);
        let r = lag1(&xs);
        // The standard error of a lag-1 estimate over 40 000 samples is
        // below 0.005; 0.02 is four of them and then some.
        assert!(
            (r - want).abs() < 0.02,
            "{dist:?}: lag-1 correlation {r}, want {want}"
        );
        // Every 20th sample is as good as independent (0.5^20): its
        // distribution is the jitter's, by the KS test at 99.9%.
        let thin: Vec<f64> = xs.iter().step_by(20).copied().collect();
        let d = ks(thin.clone(), cdf);
        assert!(
            d < 1.949 / (thin.len() as f64).sqrt(),
            "{dist:?}: KS distance {d}"
        );
    }
    // The heavy tails keep their minimum and mean through the copula.
    for dist in [JitterDistribution::Pareto, JitterDistribution::ParetoNormal] {
        let xs = jitter_samples(dist, rho, n, 8);
        let min = xs.iter().copied().fold(f64::MAX, f64::min);
        let mean = xs.iter().sum::<f64>() / n as f64;
        assert!(lag1(&xs) > 0.2, "{dist:?}: lag-1 correlation {}", lag1(&xs));
        assert!(min >= -2.7 * j, "{dist:?}: minimum {min}");
        assert!(mean.abs() < 0.1 * j, "{dist:?}: mean {mean}");
    }
    // Without correlation, successive samples are independent.
    let r = lag1(&jitter_samples(JitterDistribution::Normal, 0.0, n, 8));
    assert!(r.abs() < 0.02, "independent: {r}");
}

#[test]
fn jitter_samples_follow_their_distribution() {
    let j = MS as f64;
    let n = 20_000u64;
    // paretonormal at quantile q is h(Φ⁻¹(q)), h(z) = z/4 + (1 − Φ(z))^(−1/3)
    // − 3/2, increasing in z: its CDF at x is Φ(z) where h(z) = x, found
    // by bisection with the test's own Φ.
    let pareto_normal_cdf = move |x: f64| {
        let h = |z: f64| z / 4.0 + (1.0 - phi(z)).max(1e-300).powf(-1.0 / 3.0) - 1.5;
        let (mut lo, mut hi) = (-9.0f64, 9.0f64);
        if h(lo) >= x / j {
            return 0.0;
        }
        if h(hi) <= x / j {
            return 1.0;
        }
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if h(mid) < x / j {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        phi((lo + hi) / 2.0)
    };
    let cases: [(JitterDistribution, Cdf); 4] = [
        (
            JitterDistribution::Uniform,
            Box::new(move |x: f64| ((x + j) / (2.0 * j)).clamp(0.0, 1.0)),
        ),
        (
            JitterDistribution::Normal,
            Box::new(move |x: f64| phi(x / j)),
        ),
        (
            JitterDistribution::Pareto,
            Box::new(move |x: f64| {
                if x < -j {
                    0.0
                } else {
                    1.0 - ((x / j + 3.0) / 2.0).powi(-3)
                }
            }),
        ),
        (
            JitterDistribution::ParetoNormal,
            Box::new(pareto_normal_cdf),
        ),
    ];
    for (dist, cdf) in cases {
        let samples = jitter_samples(dist, 0.0, n, 5);
        let d = ks(samples.clone(), cdf);
        // 99.9% critical value of the one-sample KS statistic: 1.949/√n.
        assert!(d < 1.949 / (n as f64).sqrt(), "{dist:?}: KS distance {d}");
        let mean = samples.iter().sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.05 * j, "{dist:?}: mean {mean}");
    }
}
