//! The pipe's random numbers: one seed, one independent stream per random
//! process, and the few distributions the pipe draws from.
//!
//! # Guarantees
//! * **One seed replays a run.** [`Streams::new`] derives every stream from
//!   the one seed (SplitMix64, Steele, Lea and Flood, "Fast splittable
//!   pseudorandom number generators", OOPSLA 2014), so the same seed and the
//!   same calls give the same drops, delays and duplicates.
//! * **Processes do not disturb each other.** Each random process (plr,
//!   Gilbert-Elliott, the 4-state loss model, RED, duplication, jitter,
//!   profile, corruption, reordering, slots, PIE) draws from its own stream, so turning
//!   one on or off leaves the others' draws unchanged, and draws made at
//!   enqueue do not depend on how often the caller releases.
//! * Floating point: uniform draws are exact binary fractions; the normal
//!   and Pareto samples use `ln`, `sqrt`, `cos` and `powf`, which are
//!   deterministic on one platform and build but may differ in the last bit
//!   between platforms' math libraries.
//!
//! # Complexity
//! O(1) per draw, no allocation.

use fastrand::Rng;

/// One step of SplitMix64: advances `state` and returns a well-mixed word.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::splitmix64;
/// let mut s = 0;
/// assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf); // the published first output for seed 0
/// ```
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The independent generators of one pipe, all derived from one seed.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::Streams;
/// let (mut a, mut b) = (Streams::new(7), Streams::new(7));
/// assert_eq!(a.loss.u64(..), b.loss.u64(..));
/// assert_ne!(Streams::new(7).loss.u64(..), Streams::new(7).jitter.u64(..));
/// ```
#[derive(Clone, Debug)]
pub struct Streams {
    /// `plr` draws.
    pub loss: Rng,
    /// Gilbert-Elliott loss and state transitions.
    pub gilbert_elliott: Rng,
    /// RED's uniform spacing draws.
    pub red: Rng,
    /// Duplication draws.
    pub duplicate: Rng,
    /// Jitter samples.
    pub jitter: Rng,
    /// Delay-profile samples.
    pub profile: Rng,
    /// Corruption draws (derived after the older streams, so that adding
    /// it left their sequences as they were).
    pub corrupt: Rng,
    /// tc-netem reordering draws (derived after the older streams, likewise).
    pub reorder: Rng,
    /// Slot intervals (derived after the older streams, likewise).
    pub slot: Rng,
    /// The 4-state loss model's draws, one a packet it sees (derived
    /// last, likewise).
    pub loss_state: Rng,
    /// PIE's drop draws, one a packet PIE decides by chance (derived after
    /// the 4-state model's, likewise).
    pub pie: Rng,
    /// The seed the streams were derived from.
    seed: u64,
}

impl Streams {
    /// Every stream of a pipe seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let mut s = seed;
        let mut next = || Rng::with_seed(splitmix64(&mut s));
        Streams {
            loss: next(),
            gilbert_elliott: next(),
            red: next(),
            duplicate: next(),
            jitter: next(),
            profile: next(),
            corrupt: next(),
            reorder: next(),
            slot: next(),
            loss_state: next(),
            pie: next(),
            seed,
        }
    }

    /// The seed the streams are derived from now.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Gives every stream the state it would have if it had been derived
    /// from `seed` ([`Streams::new`]) and had made the draws it made since:
    /// each stream keeps its position and continues the new seed's
    /// sequence from there. (Each stream is a WyRand generator, whose state
    /// moves by one fixed constant per 64-bit draw, so its position is its
    /// state less its first state.)
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::random::Streams;
    /// let (mut a, mut b) = (Streams::new(1), Streams::new(2));
    /// for _ in 0..5 {
    ///     a.loss.u64(..);
    ///     b.loss.u64(..);
    /// }
    /// a.reseed(2);
    /// assert_eq!(a.loss.u64(..), b.loss.u64(..));
    /// assert_eq!(a.jitter.u64(..), b.jitter.u64(..));
    /// ```
    pub fn reseed(&mut self, seed: u64) {
        let (old, new) = (Streams::new(self.seed), Streams::new(seed));
        let pairs = [
            (&mut self.loss, &old.loss, &new.loss),
            (
                &mut self.gilbert_elliott,
                &old.gilbert_elliott,
                &new.gilbert_elliott,
            ),
            (&mut self.red, &old.red, &new.red),
            (&mut self.duplicate, &old.duplicate, &new.duplicate),
            (&mut self.jitter, &old.jitter, &new.jitter),
            (&mut self.profile, &old.profile, &new.profile),
            (&mut self.corrupt, &old.corrupt, &new.corrupt),
            (&mut self.reorder, &old.reorder, &new.reorder),
            (&mut self.slot, &old.slot, &new.slot),
            (&mut self.loss_state, &old.loss_state, &new.loss_state),
            (&mut self.pie, &old.pie, &new.pie),
        ];
        for (rng, first, first_new) in pairs {
            let advanced = rng.get_seed().wrapping_sub(first.get_seed());
            rng.seed(first_new.get_seed().wrapping_add(advanced));
        }
        self.seed = seed;
    }
}

impl Streams {
    /// Takes over `from`'s positions (a pipe that replaces another, of the
    /// same instance, when its link is rebuilt): each stream continues, in
    /// this seed's sequence, from the draw `from` had reached, so the
    /// change does not restart the random processes ([`Streams::reseed`]'s
    /// rule with `from`'s positions).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::pipe::random::Streams;
    /// let mut old = Streams::new(3);
    /// for _ in 0..4 {
    ///     old.loss.u64(..);
    /// }
    /// let mut heir = Streams::new(3);
    /// heir.continue_from(&old);
    /// assert_eq!(heir.loss.u64(..), old.loss.u64(..));
    /// ```
    pub fn continue_from(&mut self, from: &Streams) {
        let mut carried = from.clone();
        carried.reseed(self.seed);
        *self = carried;
    }
}

/// True with probability `p` (0 never, 1 always): one uniform draw in
/// `[0, 1)` compared with `p`.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::bernoulli;
/// let mut rng = fastrand::Rng::with_seed(1);
/// assert!(!bernoulli(&mut rng, 0.0) && bernoulli(&mut rng, 1.0));
/// ```
#[inline]
pub fn bernoulli(rng: &mut Rng, p: f64) -> bool {
    rng.f64() < p
}

/// One step of a two-state chain over yes and no whose long-run share of
/// yes is `p` and whose successive answers have correlation `c`
/// (`0 <= c < 1`): yes with probability `p + c·(1 − p)` after a yes and
/// `p·(1 − c)` after a no, from one uniform draw; `last` holds the previous
/// answer (false before the first) and takes this one. With `c` = 0 this is
/// [`bernoulli`] with `p`, the same draw.
///
/// Both conditional probabilities keep the stationary share at `p`
/// (`p·(p + c(1−p)) + (1−p)·p(1−c) = p`), and the lag-1 correlation of the
/// answers is the difference between them, `c`. This is the two-state
/// chain tc-netem's documentation describes for a probability with a
/// correlation (its own draws, a weighted mean of uniforms, hold neither
/// the share nor the correlation).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::correlated_bernoulli;
/// let mut rng = fastrand::Rng::with_seed(7);
/// let (mut last, mut yes, mut runs) = (false, 0u32, 0u32);
/// for _ in 0..100_000 {
///     let prev = last;
///     if correlated_bernoulli(&mut rng, &mut last, 0.1, 0.5) {
///         yes += 1;
///         runs += u32::from(!prev);
///     }
/// }
/// assert!((9_000..11_000).contains(&yes));
/// // A run of yes lasts 1 / (1 − 0.55) packets on average, not 1 / 0.9.
/// assert!(f64::from(yes) / f64::from(runs) > 2.0);
/// ```
#[inline]
pub fn correlated_bernoulli(rng: &mut Rng, last: &mut bool, p: f64, c: f64) -> bool {
    let threshold = if *last {
        p + c * (1.0 - p)
    } else {
        p * (1.0 - c)
    };
    *last = rng.f64() < threshold;
    *last
}

/// A standard normal sample (Box-Muller, one of the pair; two uniform draws).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::standard_normal;
/// let mut rng = fastrand::Rng::with_seed(3);
/// let mean = (0..10_000).map(|_| standard_normal(&mut rng)).sum::<f64>() / 10_000.0;
/// assert!(mean.abs() < 0.05);
/// ```
pub fn standard_normal(rng: &mut Rng) -> f64 {
    // 1 - u lies in (0, 1]: the logarithm is finite.
    let u1 = 1.0 - rng.f64();
    let u2 = rng.f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Shape of the Pareto jitter: α = 3, as iproute2's `pareto` table.
pub const PARETO_ALPHA: f64 = 3.0;

/// A Pareto sample of shape [`PARETO_ALPHA`], shifted and scaled to mean 0
/// and minimum −1: `2·(U^(−1/α) − 1) − 1` with `U` uniform in `(0, 1]`
/// (the mean of `U^(−1/α) − 1` is `1/(α−1) = 1/2`).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::centered_pareto;
/// let mut rng = fastrand::Rng::with_seed(5);
/// assert!((0..1000).all(|_| centered_pareto(&mut rng) >= -1.0));
/// ```
pub fn centered_pareto(rng: &mut Rng) -> f64 {
    centered_pareto_at(1.0 - rng.f64())
}

/// [`centered_pareto`]'s value where the probability above it is `upper`
/// (its quantile function at `1 − upper`), `upper` in `(0, 1]`.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::centered_pareto_at;
/// assert_eq!(centered_pareto_at(1.0), -1.0);
/// ```
pub fn centered_pareto_at(upper: f64) -> f64 {
    2.0 * (upper.powf(-1.0 / PARETO_ALPHA) - 1.0) - 1.0
}

/// The standard normal quantile `Φ⁻¹(p)` for `p` in `(0, 1)`: Acklam's
/// rational approximation (a central and two tail regions split at
/// 0.02425; relative error below 1.2·10⁻⁹). `p` at or outside the bounds
/// gives ±infinity.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::normal_quantile;
/// assert_eq!(normal_quantile(0.5), 0.0);
/// assert!((normal_quantile(0.975) - 1.959_963_984_540_054).abs() < 1e-8);
/// assert!((normal_quantile(0.001) + 3.090_232_306_167_813).abs() < 1e-8);
/// ```
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        let num = ((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5];
        let den = (((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0;
        num / den
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        let num = ((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5];
        let den = ((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0;
        num * q / den
    }
}

/// The standard normal distribution function `Φ(x)`, through the
/// complementary error function of Numerical Recipes' `erfcc` (a
/// Chebyshev fit with a relative error below 1.2·10⁻⁷ everywhere, the
/// tails included: `Φ(−8)` is right to that relative error, not rounded to 0).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::normal_cdf;
/// assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
/// assert!((normal_cdf(1.959_963_984_540_054) - 0.975).abs() < 1e-7);
/// assert!((normal_cdf(-3.090_232_306_167_813) / 0.001 - 1.0).abs() < 1e-6);
/// ```
pub fn normal_cdf(x: f64) -> f64 {
    // Φ(x) = erfc(−x/√2) / 2.
    let v = -x / std::f64::consts::SQRT_2;
    let z = v.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let erfc = if v >= 0.0 { erfc } else { 2.0 - erfc };
    erfc / 2.0
}

/// tc-netem's `paretonormal` sample, scale 1: at one uniform quantile `q`,
/// a quarter of the standard normal quantile plus the centred Pareto
/// (shape [`PARETO_ALPHA`]) quantile `(1 − q)^(−1/α) − 3/2`, as iproute2
/// builds its `paretonormal` table (a quarter normal, three quarters its
/// Pareto scaled by 4/3, at the same quantile). Mean 0; bounded
/// below (about −2.6 at the smallest quantile drawn, 2⁻⁵⁴), a heavy right
/// tail.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::pareto_normal;
/// let mut rng = fastrand::Rng::with_seed(4);
/// let mean = (0..20_000).map(|_| pareto_normal(&mut rng)).sum::<f64>() / 20_000.0;
/// assert!(mean.abs() < 0.05);
/// ```
pub fn pareto_normal(rng: &mut Rng) -> f64 {
    // A quantile strictly inside (0, 1): 53 random bits and a half.
    let q = ((rng.u64(..) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    pareto_normal_at(normal_quantile(q), 1.0 - q)
}

/// [`pareto_normal`]'s value at the quantile whose standard normal
/// quantile is `z` and whose upper-tail probability is `upper` (the same
/// quantile given both ways, each where it is precise).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::pareto_normal_at;
/// assert_eq!(pareto_normal_at(0.0, 1.0), -0.5);
/// ```
pub fn pareto_normal_at(z: f64, upper: f64) -> f64 {
    z / 4.0 + upper.powf(-1.0 / PARETO_ALPHA) - 1.5
}

/// `base^exp` by repeated squaring: only multiplications, so the result is
/// the same on every IEEE-754 platform.
///
/// # Examples
/// ```
/// use pspat_sched::pipe::random::pow_u32;
/// assert_eq!(pow_u32(0.5, 3), 0.125);
/// assert_eq!(pow_u32(0.9, 0), 1.0);
/// ```
pub fn pow_u32(mut base: f64, mut exp: u32) -> f64 {
    let mut acc = 1.0;
    while exp > 0 {
        if exp & 1 == 1 {
            acc *= base;
        }
        base *= base;
        exp >>= 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::{normal_cdf, normal_quantile};

    #[test]
    fn the_normal_cdf_and_quantile_invert_each_other_into_the_tails() {
        // Relative to the smaller tail, so that 1e-9 is checked as well
        // as 0.5.
        for k in 1..=999 {
            let p = k as f64 / 1_000.0;
            let back = normal_cdf(normal_quantile(p));
            assert!((back - p).abs() / p.min(1.0 - p) < 2e-7, "{p}: {back}");
        }
        for p in [1e-9, 1e-6, 1e-4] {
            let back = normal_cdf(normal_quantile(p));
            assert!((back / p - 1.0).abs() < 2e-6, "{p}: {back}");
            let z = normal_quantile(1.0 - p);
            assert!((normal_cdf(-z) / p - 1.0).abs() < 1e-5, "{p}: upper tail");
        }
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
        assert_eq!(normal_quantile(1.0), f64::INFINITY);
    }
}
