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
//!   profile, corruption, reordering, slots) draws from its own stream, so turning
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
    let u = 1.0 - rng.f64();
    2.0 * (u.powf(-1.0 / PARETO_ALPHA) - 1.0) - 1.0
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
