//! Flow digests and the HRW weight function.
//!
//! # The digest
//! \[H\] §5.1 feeds the weight function a 31-bit digest D(c) of the
//! connection's 4-tuple and leaves the digest unspecified; its balance
//! depends on it being well mixed (with sequential keys fed raw, node shares
//! drift by several percent). pspat digests flow keys with **XXH64, seed 0**
//! (Y. Collet, xxHash specification, `doc/xxhash_spec.md` of the xxHash
//! repository): a public, fixed algorithm whose avalanche is well studied,
//! defined on little-endian byte order, so the same key gives the same digest
//! on every run and platform. [`FlowDigest::of_u64`] is XXH64 of the key's
//! 8 little-endian bytes, so a `u64` key and its bytes agree.
//!
//! # The weight function
//! \[H\] §5.1 (from Thaler & Ravishankar, "Using name-based mappings to
//! increase hit rates", IEEE/ACM ToN 6(1), 1998):
//!
//! ```text
//! g(c, S_i) = (A·((A·S_i + B) XOR D(c)) + B) mod 2^31,   A = 1103515245, B = 12345
//! ```
//!
//! with D(c) the top 31 bits of the 64-bit digest and S_i the target's id.
//! For a fixed S_i, `D ↦ g` is a bijection of `[0, 2^31)` (A is odd), so a
//! uniform digest gives a uniform weight. [`weight`] costs two multiplies.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.

/// Multiplier A of \[H\] §5.1.
pub const WEIGHT_A: u64 = 1_103_515_245;
/// Increment B of \[H\] §5.1.
pub const WEIGHT_B: u64 = 12_345;
/// Weights lie in `[0, WEIGHT_RANGE)`, i.e. 31 bits.
pub const WEIGHT_RANGE: u64 = 1 << 31;

/// A well-mixed 64-bit digest of a flow key (XXH64, seed 0).
///
/// # Examples
/// ```
/// use pspat_sched::place::FlowDigest;
/// let d = FlowDigest::of_bytes(b"10.0.0.1:5000->10.0.0.2:80/udp");
/// assert_eq!(d, FlowDigest::of_bytes(b"10.0.0.1:5000->10.0.0.2:80/udp"));
/// assert_eq!(FlowDigest::of_u64(7), FlowDigest::of_bytes(&7u64.to_le_bytes()));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowDigest(pub u64);

impl FlowDigest {
    /// Digest of a byte string (e.g. a serialized 5-tuple).
    pub fn of_bytes(key: &[u8]) -> Self {
        FlowDigest(xxh64(key, 0))
    }

    /// Digest of an integer key (e.g. a flow number), as its 8
    /// little-endian bytes.
    pub fn of_u64(key: u64) -> Self {
        FlowDigest(xxh64(&key.to_le_bytes(), 0))
    }

    /// The 31-bit D(c) of \[H\] §5.1: the digest's top 31 bits.
    pub fn d31(self) -> u64 {
        self.0 >> 33
    }
}

/// The HRW weight g(c, S) of \[H\] §5.1, in `[0, 2^31)`.
///
/// # Examples
/// ```
/// use pspat_sched::place::{weight, FlowDigest, WEIGHT_RANGE};
/// let d = FlowDigest::of_u64(42);
/// assert!(weight(d, 3) < WEIGHT_RANGE);
/// assert_eq!(weight(d, 3), weight(d, 3));
/// ```
#[inline]
pub fn weight(digest: FlowDigest, target_id: u32) -> u64 {
    let mask = WEIGHT_RANGE - 1;
    // Reductions mod 2^31 commute with wrapping u64 arithmetic (2^31 | 2^64).
    let s = (WEIGHT_A
        .wrapping_mul(u64::from(target_id))
        .wrapping_add(WEIGHT_B))
        & mask;
    (WEIGHT_A
        .wrapping_mul(s ^ digest.d31())
        .wrapping_add(WEIGHT_B))
        & mask
}

/// The target's half of [`weight`]: S' = (A·S + B) mod 2^31, which depends
/// on the target id alone, so a placement computes it once per target.
#[inline]
pub fn target_seed(target_id: u32) -> u32 {
    // Wrapping u32 arithmetic reduced mod 2^31 equals the u64 form
    // (2^31 | 2^32); A and B fit in 31 bits.
    (WEIGHT_A as u32)
        .wrapping_mul(target_id)
        .wrapping_add(WEIGHT_B as u32)
        & (WEIGHT_RANGE as u32 - 1)
}

/// [`weight`] from a [`target_seed`] and the digest's [`FlowDigest::d31`]:
/// one 32-bit multiply, an add and a mask, so a loop over targets
/// vectorises. Equal to `weight(digest, id)` for `seed = target_seed(id)`.
#[inline]
pub fn seeded_weight(seed: u32, d31: u32) -> u32 {
    (WEIGHT_A as u32)
        .wrapping_mul(seed ^ d31)
        .wrapping_add(WEIGHT_B as u32)
        & (WEIGHT_RANGE as u32 - 1)
}

/// The weight mapped to the open interval (0, 1): `(g + 1/2) / 2^31`.
///
/// Never 0 or 1, so `ln` of it is finite and negative.
#[inline]
pub fn unit_weight(digest: FlowDigest, target_id: u32) -> f64 {
    (weight(digest, target_id) as f64 + 0.5) / WEIGHT_RANGE as f64
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline]
fn round(acc: u64, lane: u64) -> u64 {
    acc.wrapping_add(lane.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

#[inline]
fn merge(acc: u64, v: u64) -> u64 {
    (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4)
}

#[inline]
fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[inline]
fn le32(b: &[u8]) -> u64 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u64::from(u32::from_le_bytes(a))
}

/// XXH64 of `input` with `seed`, per the xxHash specification.
pub fn xxh64(input: &[u8], seed: u64) -> u64 {
    let len = input.len() as u64;
    let mut rest = input;
    let mut acc = if rest.len() >= 32 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        while rest.len() >= 32 {
            for (i, lane) in v.iter_mut().enumerate() {
                *lane = round(*lane, le64(&rest[8 * i..]));
            }
            rest = &rest[32..];
        }
        let mut acc = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for lane in v {
            acc = merge(acc, lane);
        }
        acc
    } else {
        seed.wrapping_add(P5)
    };
    acc = acc.wrapping_add(len);
    while rest.len() >= 8 {
        acc ^= round(0, le64(rest));
        acc = acc.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        acc ^= le32(rest).wrapping_mul(P1);
        acc = acc.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        acc ^= u64::from(b).wrapping_mul(P5);
        acc = acc.rotate_left(11).wrapping_mul(P1);
    }
    acc ^= acc >> 33;
    acc = acc.wrapping_mul(P2);
    acc ^= acc >> 29;
    acc = acc.wrapping_mul(P3);
    acc ^ (acc >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_matches_the_specification_vectors() {
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
        assert_eq!(xxh64(b"asdf", 0), 0x4158_72F5_99CE_A71E);
        assert_eq!(xxh64(b"Call me Ishmael.", 0), 0x6D04_390F_C9D6_1A90);
        assert_eq!(
            xxh64(b"Nobody inspects the spammish repetition", 0),
            0xFBCE_A83C_8A37_8BF1
        );
    }

    #[test]
    fn weight_is_the_thaler_ravishankar_formula() {
        let d = FlowDigest(0x1234_5678_9ABC_DEF0);
        let s = 5u64;
        let x = (1_103_515_245 * s + 12_345) % (1 << 31);
        let expect = (1_103_515_245u64 * (x ^ (d.0 >> 33)) + 12_345) % (1 << 31);
        assert_eq!(weight(d, 5), expect);
    }

    #[test]
    fn the_seeded_weight_equals_the_weight() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for id in (0..2_000u32).chain([u32::MAX - 1, u32::MAX]) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let d = FlowDigest(x);
            let fast = seeded_weight(target_seed(id), d.d31() as u32);
            assert_eq!(u64::from(fast), weight(d, id), "id {id}");
        }
    }
}
