//! The 4-state loss model (tc-netem's `loss state`) in virtual time: the
//! long-run loss against the stationary distribution of its transition
//! matrix, each branch of the chain forced deterministic, and replay from
//! one seed.

use pspat_sched::pipe::{LossPhase, LossState, Pipe, PipeConfig, QueueConfig, QueueLimit};
use pspat_sched::{DropReason, Fifo, FlowId, Instant, Packet};

use crate::pipe_common::{assert_binomial, at, drive, fifo_pipe, Run, Z999};

/// `n` packets of 64 bytes, one every 100 ns, tokens 0..n.
fn spaced(n: u64) -> Vec<(Instant, Packet)> {
    (0..n)
        .map(|i| (at(i * 100), Packet::new(FlowId(0), 64, i)))
        .collect()
}

/// A pipe whose one queue has only the 4-state model (and room for all).
fn pipe_with(m: LossState, seed: u64) -> Pipe<Fifo> {
    fifo_pipe(
        PipeConfig {
            queue: QueueConfig {
                limit: QueueLimit::Slots(1_000_000),
                loss_state: Some(m),
                ..QueueConfig::default()
            },
            seed,
            ..PipeConfig::default()
        },
        1,
        16,
    )
}

/// The tokens of the packets refused, checking that the 4-state model
/// refused every one of them.
fn lost_tokens(pipe: &Pipe<Fifo>, run: &Run) -> Vec<u64> {
    assert!(run
        .rejected
        .iter()
        .all(|(_, r)| r.reason == DropReason::BurstLoss));
    assert_eq!(
        pipe.counters().dropped(DropReason::BurstLoss),
        run.rejected.len() as u64
    );
    run.rejected.iter().map(|(_, r)| r.packet.token).collect()
}

/// The chain's transition matrix, `P[i][j]` from state `i + 1` to `j + 1`.
fn matrix(m: &LossState) -> [[f64; 4]; 4] {
    [
        [1.0 - m.p13 - m.p14, 0.0, m.p13, m.p14],
        [0.0, 1.0 - m.p23, m.p23, 0.0],
        [m.p31, m.p32, 1.0 - m.p31 - m.p32, 0.0],
        [1.0, 0.0, 0.0, 0.0],
    ]
}

/// The stationary distribution of `p`: `π·(P − I) = 0` with the last
/// equation replaced by `Σ π = 1`, solved by Gaussian elimination with
/// partial pivoting.
fn stationary(p: &[[f64; 4]; 4]) -> [f64; 4] {
    // Row i of the system: Σ_j π_j·(P[j][i] − δ_ij) = 0; row 3: Σ π_j = 1.
    let mut a = [[0.0f64; 5]; 4];
    for (i, row) in a.iter_mut().enumerate().take(3) {
        for (j, cell) in row.iter_mut().enumerate().take(4) {
            *cell = p[j][i] - if i == j { 1.0 } else { 0.0 };
        }
    }
    a[3] = [1.0, 1.0, 1.0, 1.0, 1.0];
    for col in 0..4 {
        let pivot = (col..4)
            .max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))
            .unwrap();
        a.swap(col, pivot);
        assert!(a[col][col].abs() > 1e-12, "singular chain");
        let pivot_row = a[col];
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, y) in row.iter_mut().zip(pivot_row).skip(col) {
                    *x -= f * y;
                }
            }
        }
    }
    let pi = [0, 1, 2, 3].map(|i| a[i][4] / a[i][i]);
    // It is stationary.
    for j in 0..4 {
        let next: f64 = (0..4).map(|i| pi[i] * p[i][j]).sum();
        assert!((next - pi[j]).abs() < 1e-12, "{pi:?}");
    }
    pi
}

/// The asymptotic variance per packet of the loss count: `Var_π(f) + 2·Σ_k
/// Cov_π(f(X_0), f(X_k))` with `f` the loss indicator (states 3 and 4),
/// the covariances from `P^k·(f − μ)` until they vanish.
fn loss_variance(p: &[[f64; 4]; 4], pi: &[f64; 4]) -> f64 {
    let mu = pi[2] + pi[3];
    let centered = [-mu, -mu, 1.0 - mu, 1.0 - mu];
    let cov = |g: &[f64; 4]| (0..4).map(|i| pi[i] * centered[i] * g[i]).sum::<f64>();
    let mut var = cov(&centered);
    let mut g = centered;
    for _ in 0..1_000_000 {
        g = [0, 1, 2, 3].map(|i| (0..4).map(|j| p[i][j] * g[j]).sum());
        let c = cov(&g);
        var += 2.0 * c;
        if g.iter().all(|x| x.abs() < 1e-15) {
            break;
        }
    }
    var
}

#[test]
fn long_run_loss_is_the_stationary_loss_of_the_chain() {
    let bursts = LossState {
        p13: 0.02,
        p31: 0.2,
        p32: 0.3,
        p23: 0.1,
        p14: 0.01,
    };
    // `lossstate 0 ... 0.05` as the config fills it in: p31 = 1 − p13.
    let isolated = LossState {
        p13: 0.0,
        p31: 1.0,
        p32: 0.0,
        p23: 1.0,
        p14: 0.05,
    };
    for m in [bursts, isolated] {
        let n = 300_000;
        let mut pipe = pipe_with(m, 20_261_123);
        let run = drive(&mut pipe, &spaced(n));
        let lost = lost_tokens(&pipe, &run);
        assert_eq!(pipe.counters().out_packets, n - lost.len() as u64);
        let p = matrix(&m);
        let pi = stationary(&p);
        let f = pi[2] + pi[3];
        // The balance equations' closed form agrees with the solve.
        let pi1 = pi[0];
        assert!((pi[3] - m.p14 * pi1).abs() < 1e-12);
        assert!((pi[2] - m.p13 * pi1 / m.p31).abs() < 1e-12);
        // The binomial interval widened (or narrowed) by the chain's
        // correlation: the exact asymptotic variance of the count.
        let sd = (n as f64 * loss_variance(&p, &pi)).sqrt();
        let k = lost.len() as f64;
        assert!(
            (k - n as f64 * f).abs() <= Z999 * sd + 1.0,
            "{m:?}: {k} of {n}, expected {:.0} ± {:.0}",
            n as f64 * f,
            Z999 * sd
        );
        let runs = 1 + lost.windows(2).filter(|w| w[1] != w[0] + 1).count();
        if m.p13 == 0.0 {
            // Only isolated losses: 1 → 4 → 1, never two in a row; the
            // count is then also within the plain binomial interval
            // (the correlation is negative), with π4 = p14/(1 + p14).
            assert!((f - m.p14 / (1.0 + m.p14)).abs() < 1e-12);
            assert_eq!(runs, lost.len(), "two consecutive losses");
            assert_binomial("isolated losses", lost.len() as u64, n, f);
        } else {
            // Bursts: some runs of several losses (a stay in state 3 lasts
            // 1/(p31 + p32) = 2 packets on average).
            assert!(runs < lost.len() * 9 / 10, "{runs} runs of {}", lost.len());
        }
    }
}

#[test]
fn forced_branches_give_their_exact_patterns() {
    let n = 1_000u64;
    let pattern = |m: LossState| {
        let mut pipe = pipe_with(m, 7);
        let run = drive(&mut pipe, &spaced(n));
        let lost = lost_tokens(&pipe, &run);
        assert_eq!(run.exits.len() as u64, n - lost.len() as u64);
        lost
    };
    // p13 = 1, p31 = p32 = 0: the first packet moves 1 → 3, and state 3
    // never leaves: every packet is lost.
    let all = pattern(LossState {
        p13: 1.0,
        p31: 0.0,
        p32: 0.0,
        p23: 1.0,
        p14: 0.0,
    });
    assert_eq!(all, (0..n).collect::<Vec<_>>());
    // 1 → 3, then 3 → 2 (p32 = 1) and 2 → 3 (p23 = 1): lost, sent, lost...
    let burst_cycle = pattern(LossState {
        p13: 1.0,
        p31: 0.0,
        p32: 1.0,
        p23: 1.0,
        p14: 0.0,
    });
    assert_eq!(burst_cycle, (0..n).step_by(2).collect::<Vec<_>>());
    // 1 → 4 (p14 = 1), 4 → 1: lost, sent, lost...
    let isolated_cycle = pattern(LossState {
        p13: 0.0,
        p31: 1.0,
        p32: 0.0,
        p23: 1.0,
        p14: 1.0,
    });
    assert_eq!(isolated_cycle, (0..n).step_by(2).collect::<Vec<_>>());
    // 1 → 3 then 3 → 1 (p31 = 1): lost, sent, lost... through the gap.
    let gap_cycle = pattern(LossState {
        p13: 1.0,
        p31: 1.0,
        p32: 0.0,
        p23: 1.0,
        p14: 0.0,
    });
    assert_eq!(gap_cycle, (0..n).step_by(2).collect::<Vec<_>>());
    // 1 → 3 → 2, then 2 stays (p23 = 0): only the first packet is lost.
    let one = pattern(LossState {
        p13: 1.0,
        p31: 0.0,
        p32: 1.0,
        p23: 0.0,
        p14: 0.0,
    });
    assert_eq!(one, [0]);
    // Nothing leaves state 1: no loss.
    let none = pattern(LossState {
        p13: 0.0,
        p31: 1.0,
        p32: 0.0,
        p23: 1.0,
        p14: 0.0,
    });
    assert!(none.is_empty());
}

#[test]
fn each_state_moves_with_its_transition_probabilities() {
    // Counted transitions from each state against the model's
    // probabilities, within four standard errors: the ranges of the one
    // draw are contiguous and as wide as their probabilities (a gap or an
    // overlap between two ranges would show in two of these counts).
    let m = LossState {
        p13: 0.3,
        p31: 0.25,
        p32: 0.35,
        p23: 0.5,
        p14: 0.2,
    };
    let mut rng = fastrand::Rng::with_seed(99);
    let mut phase = LossPhase::default();
    // moves[from][to], states 1..=4 at 0..=3.
    let mut moves = [[0u64; 4]; 4];
    for _ in 0..400_000 {
        let from = phase as usize - 1;
        let lost = m.step(&mut phase, &mut rng);
        assert_eq!(
            lost,
            matches!(phase, LossPhase::BurstLost | LossPhase::GapLost)
        );
        moves[from][phase as usize - 1] += 1;
    }
    let want = [
        [1.0 - m.p13 - m.p14, 0.0, m.p13, m.p14],
        [0.0, 1.0 - m.p23, m.p23, 0.0],
        [m.p31, m.p32, 1.0 - m.p31 - m.p32, 0.0],
        [1.0, 0.0, 0.0, 0.0],
    ];
    for (from, row) in moves.iter().enumerate() {
        let n: u64 = row.iter().sum();
        assert!(n > 10_000, "state {} visited {n} times", from + 1);
        for (to, &count) in row.iter().enumerate() {
            let p = want[from][to];
            let got = count as f64 / n as f64;
            let se = (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                (got - p).abs() <= 4.0 * se + 1e-12,
                "{} -> {}: {got} against {p}",
                from + 1,
                to + 1
            );
        }
    }
}

#[test]
fn one_seed_replays_the_same_losses() {
    let m = LossState {
        p13: 0.02,
        p31: 0.2,
        p32: 0.3,
        p23: 0.1,
        p14: 0.01,
    };
    let arr = spaced(50_000);
    let losses = |seed| {
        let mut pipe = pipe_with(m, seed);
        let run = drive(&mut pipe, &arr);
        lost_tokens(&pipe, &run)
    };
    let a = losses(42);
    assert!(!a.is_empty());
    assert_eq!(a, losses(42));
    assert_ne!(a, losses(43));
}
