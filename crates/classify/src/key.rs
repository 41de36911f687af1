//! The packet key the classifier reads, and its masked form.
//!
//! [`PacketKey`] is what a receive thread knows about a packet once its
//! headers are parsed: addresses, protocol, ports, the IPv6 flow label, the
//! interface and the direction. It is plain data, so the crate stays free of
//! I/O.
//!
//! # Mapping from `pspat_io::parse::FlowKey`
//! A daemon fills a [`PacketKey`] from the parser's flow key field by field:
//! `src` ← `src`, `dst` ← `dst`, `proto` ← `protocol`, `src_port` ←
//! `src_port`, `dst_port` ← `dst_port`. The parser does not report the IPv6
//! flow label, so `flow_label` is 0 until it does; `ifindex` and `direction`
//! come from the socket the frame was read from (the receive loop knows
//! both). `dscp`, `ip_len` and `tcp_flags` come from the frame itself
//! through `pspat_io::parse::{dscp_parsed, ip_len_parsed,
//! tcp_flags_parsed}`, the flags only when
//! [`crate::Classifier::reads_tcp_flags`]. VLAN tags take no part in
//! dummynet's rules and are not carried.
//!
//! # Masked keys
//! A [`FlowMask`] keeps the bits of each field that tell flows apart
//! (`ipfw(8)`'s `mask`). IPv4 addresses are masked with `src-ip`/`dst-ip`
//! and IPv6 addresses with `src-ip6`/`dst-ip6`; the address family of each
//! address is part of the masked key, so an IPv4 and an IPv6 packet never
//! share a dynamic queue unless the mask is empty (an empty mask is one queue
//! and builds no table at all).
//!
//! A masked key is eleven 32-bit words ([`MaskedKey`]); a dynamic table
//! stores and hashes only the words its mask can leave non-zero
//! ([`KeyLayout`], [`PackedKey`]): two for `mask src-ip 0xffffffff`. A
//! table whose keys are exactly two words ([`KeyLayout::narrow`]: word 9
//! and one address word, the ports or the instance) has its keys built
//! straight from the packet as one 64-bit word
//! ([`CompiledMask::pack_narrow`]), hashed to the same value with one
//! multiplication and compared whole.

use std::net::IpAddr;

use pspat_config::FlowMask;

/// Whether the packet was received or is being sent (`in` / `out` in rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PacketDirection {
    /// Received on the interface (`in`, `recv IFACE`).
    #[default]
    In,
    /// Sent on the interface (`out`, `xmit IFACE`).
    Out,
}

/// What the classifier needs to know about one packet.
///
/// Every combination of values is accepted: a key whose source and
/// destination belong to different address families (which no parser
/// produces) is classified without panicking; each address is then matched
/// and masked by its own family.
///
/// # Examples
/// ```
/// use pspat_classify::{PacketDirection, PacketKey};
/// let k = PacketKey::new("10.199.0.1".parse().unwrap(), "10.199.0.2".parse().unwrap(), 17, 5000, 53);
/// assert_eq!((k.proto, k.dst_port, k.direction), (17, 53, PacketDirection::In));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PacketKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number of the transport (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6).
    pub proto: u8,
    /// Source port (0 for portless protocols, as the parser reports them).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// IPv6 flow label (low 20 bits are used); 0 when unknown or IPv4.
    pub flow_label: u32,
    /// The interface index the packet was received on or is sent on; 0 when
    /// unknown (matches no interface rule).
    pub ifindex: u32,
    /// Received or sent.
    pub direction: PacketDirection,
    /// The DiffServ code point: the six high bits of the IPv4 TOS byte or
    /// the IPv6 traffic class (0 when unknown); only its low six bits are
    /// read.
    pub dscp: u8,
    /// The IP length: IPv4's total length, or IPv6's payload length plus
    /// its 40-byte header (0 when unknown); rules' `iplen`.
    pub ip_len: u16,
    /// The TCP header's flag byte (`fin` 0x01 .. `urg` 0x20, as
    /// [`pspat_config::header::TCP_FLAG_NAMES`]) of a TCP packet, 0
    /// otherwise or when unknown; rules' `tcpflags`, `setup` and
    /// `established`, which read it only when [`PacketKey::proto`] is 6.
    /// A daemon reads it only when [`crate::Classifier::reads_tcp_flags`].
    pub tcp_flags: u8,
}

impl PacketKey {
    /// A received packet on no known interface, without a flow label.
    pub fn new(src: IpAddr, dst: IpAddr, proto: u8, src_port: u16, dst_port: u16) -> Self {
        PacketKey {
            src,
            dst,
            proto,
            src_port,
            dst_port,
            flow_label: 0,
            ifindex: 0,
            direction: PacketDirection::In,
            dscp: 0,
            ip_len: 0,
            tcp_flags: 0,
        }
    }
}

/// The address as four 32-bit words and whether it is IPv6.
#[inline]
fn words(a: IpAddr) -> ([u32; 4], bool) {
    match a {
        IpAddr::V4(v4) => ([u32::from(v4), 0, 0, 0], false),
        IpAddr::V6(v6) => {
            let x = u128::from(v6);
            (
                [
                    (x >> 96) as u32,
                    (x >> 64) as u32,
                    (x >> 32) as u32,
                    x as u32,
                ],
                true,
            )
        }
    }
}

/// A [`FlowMask`] in the form masking reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CompiledMask {
    src4: u32,
    dst4: u32,
    src6: [u32; 4],
    dst6: [u32; 4],
    ports: u32,
    proto: u8,
    label: u32,
}

impl CompiledMask {
    /// `None` for an empty mask (one queue or one instance: no table).
    pub(crate) fn new(m: &FlowMask) -> Option<Self> {
        if m.is_empty() {
            return None;
        }
        Some(CompiledMask {
            src4: u32::from(m.src_ip),
            dst4: u32::from(m.dst_ip),
            src6: words(IpAddr::V6(m.src_ip6)).0,
            dst6: words(IpAddr::V6(m.dst_ip6)).0,
            ports: (u32::from(m.src_port) << 16) | u32::from(m.dst_port),
            proto: m.proto,
            label: m.flow_id & 0xf_ffff,
        })
    }

    /// The masked key of `key` inside scheduler instance `instance`, all
    /// eleven words: the definition [`CompiledMask::pack`] is tested
    /// against (and what [`CompiledMask::remask`] gives back).
    #[cfg(test)]
    pub(crate) fn apply(&self, key: &PacketKey, instance: u32) -> MaskedKey {
        let (s, s6) = words(key.src);
        let (d, d6) = words(key.dst);
        let ports = (u32::from(key.src_port) << 16) | u32::from(key.dst_port);
        self.mask_fields(s, s6, d, d6, ports, key.flow_label, key.proto, instance)
    }

    /// The masked key of `key` inside `instance` (all eleven words), for
    /// the control path: a packet carried over to a new classifier takes
    /// its own key under the new mask (crate::carry). Same result as
    /// [`CompiledMask::pack`] before packing.
    pub(crate) fn masked(&self, key: &PacketKey, instance: u32) -> MaskedKey {
        let (s, s6) = words(key.src);
        let (d, d6) = words(key.dst);
        let ports = (u32::from(key.src_port) << 16) | u32::from(key.dst_port);
        self.mask_fields(s, s6, d, d6, ports, key.flow_label, key.proto, instance)
    }

    /// A key another mask made (`k`), masked again by this one, in
    /// `instance`: the key a packet of `k` gets under this mask when the
    /// bits the other mask dropped are zero. Exact (the packet's own key
    /// under this mask) when this mask keeps no bit the other dropped;
    /// otherwise every packet of `k` gets the one key the zeros give. The
    /// families stay.
    pub(crate) fn remask(&self, k: &MaskedKey, instance: u32) -> MaskedKey {
        let w = &k.0;
        self.mask_fields(
            [w[0], w[1], w[2], w[3]],
            (w[9] >> 28) & 1 == 1,
            [w[4], w[5], w[6], w[7]],
            (w[9] >> 29) & 1 == 1,
            w[8],
            w[9] & 0xf_ffff,
            ((w[9] >> 20) & 0xff) as u8,
            instance,
        )
    }

    /// Word 9 of a masked key: flow label (20 bits) | proto (8 bits) | two
    /// family bits.
    #[inline(always)]
    fn meta(&self, label: u32, proto: u8, s6: bool, d6: bool) -> u32 {
        (label & self.label)
            | (u32::from(proto & self.proto) << 20)
            | (u32::from(s6) << 28)
            | (u32::from(d6) << 29)
    }

    /// The packed masked key of `key` in `instance` for a table of
    /// `layout` (this mask's): `layout.pack(&self.apply(key, instance))`,
    /// computing only the kept words (the per-packet path).
    #[inline(always)]
    pub(crate) fn pack(&self, layout: KeyLayout, key: &PacketKey, instance: u32) -> PackedKey {
        let mut p = PackedKey::default();
        let n = put_addr(&mut p, 0, key.src, self.src4, &self.src6, layout.src);
        let mut n = put_addr(&mut p, n, key.dst, self.dst4, &self.dst6, layout.dst);
        let mut put = |v: u32| {
            if let Some(o) = p.0.get_mut(n) {
                *o = v;
            }
            n += 1;
        };
        if layout.ports {
            put(((u32::from(key.src_port) << 16) | u32::from(key.dst_port)) & self.ports);
        }
        put(self.meta(
            key.flow_label,
            key.proto,
            key.src.is_ipv6(),
            key.dst.is_ipv6(),
        ));
        if layout.instance {
            put(instance);
        }
        p
    }

    /// The key [`CompiledMask::pack`] gives for a table of a two-word
    /// layout ([`KeyLayout::narrow`] is `Some(which)`), as one 64-bit word
    /// (the first packed word in the low half): the per-packet path of
    /// such tables, without the general packing's per-field tests.
    #[inline(always)]
    pub(crate) fn pack_narrow(&self, which: Narrow, key: &PacketKey, instance: u32) -> u64 {
        let meta = u64::from(self.meta(
            key.flow_label,
            key.proto,
            key.src.is_ipv6(),
            key.dst.is_ipv6(),
        ));
        let first = match which {
            Narrow::Src => first_word(key.src, self.src4, self.src6[0]),
            Narrow::Dst => first_word(key.dst, self.dst4, self.dst6[0]),
            Narrow::Ports => {
                ((u32::from(key.src_port) << 16) | u32::from(key.dst_port)) & self.ports
            }
            // Word 9 comes first, the instance after it.
            Narrow::Instance => return meta | (u64::from(instance) << 32),
        };
        u64::from(first) | (meta << 32)
    }

    /// The one masking step of `CompiledMask::apply` (the tests'
    /// definition of the masked key) and [`CompiledMask::remask`]:
    /// addresses as four words each with their families, ports as
    /// `src << 16 | dst`, the flow label and protocol.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // the fields of one key, unpacked
    fn mask_fields(
        &self,
        s: [u32; 4],
        s6: bool,
        d: [u32; 4],
        d6: bool,
        ports: u32,
        label: u32,
        proto: u8,
        instance: u32,
    ) -> MaskedKey {
        let sm = if s6 { self.src6 } else { [self.src4, 0, 0, 0] };
        let dm = if d6 { self.dst6 } else { [self.dst4, 0, 0, 0] };
        let meta = self.meta(label, proto, s6, d6);
        MaskedKey([
            s[0] & sm[0],
            s[1] & sm[1],
            s[2] & sm[2],
            s[3] & sm[3],
            d[0] & dm[0],
            d[1] & dm[1],
            d[2] & dm[2],
            d[3] & dm[3],
            ports & self.ports,
            meta,
            instance,
        ])
    }
}

/// Words of a [`MaskedKey`].
pub(crate) const KEY_WORDS: usize = 11;

/// The first word of address `a` masked by `m4` (IPv4) or `m6` (the
/// first word of the IPv6 mask).
#[inline(always)]
fn first_word(a: IpAddr, m4: u32, m6: u32) -> u32 {
    match a {
        IpAddr::V4(v4) => u32::from(v4) & m4,
        IpAddr::V6(v6) => ((u128::from(v6) >> 96) as u32) & m6,
    }
}

/// Writes the first `count` words of address `a` masked by `m4` (IPv4) or
/// `m6` (IPv6) at `p[n..]`; returns `n + count`. An IPv4 address is one
/// word, the rest stay zero.
#[inline(always)]
fn put_addr(p: &mut PackedKey, n: usize, a: IpAddr, m4: u32, m6: &[u32; 4], count: u8) -> usize {
    let count = usize::from(count);
    if count > 0 {
        match a {
            IpAddr::V4(v4) => {
                if let Some(o) = p.0.get_mut(n) {
                    *o = u32::from(v4) & m4;
                }
            }
            IpAddr::V6(_) => {
                let (w, _) = words(a);
                for ((o, w), m) in p.0.iter_mut().skip(n).zip(w).zip(m6).take(count) {
                    *o = w & m;
                }
            }
        }
    }
    n + count
}

/// Which words of a [`MaskedKey`] a mask can leave non-zero: a dynamic
/// table stores and hashes only those (its [`PackedKey`]s), in this
/// order: the source address's leading words up to the last one either
/// source mask keeps bits of (1 for `src-ip`, up to 4 for `src-ip6`), the
/// destination's likewise, word 8 with a port mask, word 9 (flow label,
/// protocol, families) always, word 10 (the instance) only in a flowset's
/// table on a link with instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyLayout {
    src: u8,
    dst: u8,
    ports: bool,
    instance: bool,
    /// Pairs of kept words the hash folds (`width` halved, rounded up),
    /// computed once rather than per packet.
    pairs: u8,
    /// Exactly two kept words: the one besides word 9 (computed once).
    narrow: Option<Narrow>,
}

/// The word a two-word layout keeps besides word 9 (flow label, protocol,
/// families), which is always kept: its table's keys are one 64-bit word
/// ([`CompiledMask::pack_narrow`]), hashed with one multiplication and
/// compared whole. `mask src-ip` is one (`Src`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Narrow {
    /// The source address's first word (`src-ip`, or `src-ip6` keeping
    /// bits of the first word only); packed before word 9.
    Src,
    /// The destination's first word; packed before word 9.
    Dst,
    /// Word 8, the ports; packed before word 9.
    Ports,
    /// Word 10, the instance; packed after word 9.
    Instance,
}

/// The kept words of a [`MaskedKey`], first [`KeyLayout::width`] words,
/// then zeros (padded to pairs for the hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct PackedKey(pub(crate) [u32; KEY_WORDS + 1]);

/// Leading words of an address to keep under masks `m4` and `m6`.
fn address_words(m4: u32, m6: &[u32; 4]) -> u8 {
    let can = [m4 | m6[0], m6[1], m6[2], m6[3]];
    can.iter().rposition(|w| *w != 0).map_or(0, |i| i as u8 + 1)
}

impl KeyLayout {
    /// The layout of `mask`'s keys; `instances`: the instance word varies
    /// (a flowset's table on a link with an instance mask).
    pub(crate) fn new(mask: &CompiledMask, instances: bool) -> Self {
        KeyLayout {
            src: address_words(mask.src4, &mask.src6),
            dst: address_words(mask.dst4, &mask.dst6),
            ports: mask.ports != 0,
            instance: instances,
            pairs: 0,
            narrow: None,
        }
        .with_pairs()
    }

    /// The layout with its `pairs` and `narrow` set from its fields.
    fn with_pairs(self) -> Self {
        let narrow = (self.width() == 2).then_some(if self.src == 1 {
            Narrow::Src
        } else if self.dst == 1 {
            Narrow::Dst
        } else if self.ports {
            Narrow::Ports
        } else {
            Narrow::Instance
        });
        KeyLayout {
            // At most 11 words: 6 pairs.
            pairs: self.width().div_ceil(2) as u8,
            narrow,
            ..self
        }
    }

    /// `Some` when keys are exactly two words, with the word kept besides
    /// word 9 ([`Narrow`]).
    #[inline]
    pub(crate) fn narrow(&self) -> Option<Narrow> {
        self.narrow
    }

    /// Every word kept.
    #[cfg(test)]
    pub(crate) fn full() -> Self {
        KeyLayout {
            src: 4,
            dst: 4,
            ports: true,
            instance: true,
            pairs: 0,
            narrow: None,
        }
        .with_pairs()
    }

    /// Positions in a [`MaskedKey`] of the kept words, in packed order.
    fn kept(&self) -> impl Iterator<Item = usize> {
        (0..usize::from(self.src))
            .chain(4..4 + usize::from(self.dst))
            .chain(self.ports.then_some(8))
            .chain(std::iter::once(9))
            .chain(self.instance.then_some(10))
    }

    /// Words kept (1..=11).
    #[inline]
    pub(crate) fn width(&self) -> usize {
        usize::from(self.src)
            + usize::from(self.dst)
            + usize::from(self.ports)
            + 1
            + usize::from(self.instance)
    }

    /// The kept words of `k`.
    pub(crate) fn pack(&self, k: &MaskedKey) -> PackedKey {
        let mut p = PackedKey::default();
        for (o, i) in p.0.iter_mut().zip(self.kept()) {
            *o = k.0.get(i).copied().unwrap_or(0);
        }
        p
    }

    /// The key `words` (kept words, in order) were packed from; the words
    /// not kept are zero in every key of the mask.
    pub(crate) fn unpack(&self, words: &[u32]) -> MaskedKey {
        let mut k = MaskedKey::default();
        for (&w, i) in words.iter().zip(self.kept()) {
            if let Some(o) = k.0.get_mut(i) {
                *o = w;
            }
        }
        k
    }

    /// A seeded hash of a packed key: one folded multiplication per pair
    /// of kept words. Not a keyed pseudo-random function: it spreads keys,
    /// and the seed (chosen per table) keeps precomputed collision sets
    /// from working everywhere; the bounded table caps what any collision
    /// set can cost, and keys are always compared whole.
    #[inline(always)] // on the per-packet path
    pub(crate) fn hash(&self, p: &PackedKey, seed: u64) -> u64 {
        p.0.chunks_exact(2)
            .take(usize::from(self.pairs))
            .fold(seed ^ K0, |h, c| {
                fold_mul(h ^ (u64::from(c[0]) | (u64::from(c[1]) << 32)), K1)
            })
    }
}

/// [`KeyLayout::hash`] of a two-word key given as one 64-bit word (first
/// word low): the same value, one multiplication.
#[inline(always)]
pub(crate) fn hash_narrow(k: u64, seed: u64) -> u64 {
    fold_mul(seed ^ K0 ^ k, K1)
}

impl PackedKey {
    /// The packed key of a two-word key given as one 64-bit word.
    #[inline]
    pub(crate) fn from_narrow(k: u64) -> Self {
        let mut p = PackedKey::default();
        p.0[0] = k as u32;
        p.0[1] = (k >> 32) as u32;
        p
    }
}

/// A masked 5-tuple plus the scheduler instance it belongs to: source (4
/// words), destination (4), ports, flow label|protocol|families, instance.
/// 44 bytes.
#[derive(Clone, Copy, Debug, Eq, Default)]
pub(crate) struct MaskedKey(pub(crate) [u32; 11]);

impl PartialEq for MaskedKey {
    /// Word by word without branches (the derived comparison calls `memcmp`).
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u32, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// 64-bit × 64-bit → 128-bit multiply, folded.
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

const K0: u64 = 0xa076_1d64_78bd_642f;
const K1: u64 = 0xe703_7ed1_a0b4_28db;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    proptest::proptest! {
        /// Masking again by a coarser (or the same) mask gives the key the
        /// packet itself gets under it; by a finer one, a key that keeps
        /// only what both masks keep.
        #[test]
        fn remasking_by_a_coarser_mask_is_masking_the_packet(
            src in proptest::prelude::any::<u32>(),
            dst in proptest::prelude::any::<u128>(),
            v6 in proptest::prelude::any::<bool>(),
            sport in proptest::prelude::any::<u16>(),
            dport in proptest::prelude::any::<u16>(),
            proto in proptest::prelude::any::<u8>(),
            label in proptest::prelude::any::<u32>(),
            fine in 0u32..=32,
            coarse in 0u32..=32,
            inst in 0u32..8,
        ) {
            let (fine, coarse) = (fine.max(coarse), fine.min(coarse));
            let mask = |bits: u32, ports: bool| {
                let mut m = FlowMask::default();
                m.set(pspat_config::MaskField::SrcIp, &format!("/{bits}")).unwrap();
                m.set(pspat_config::MaskField::DstIp6, &format!("/{}", bits * 4)).unwrap();
                m.set(pspat_config::MaskField::Proto, "0xff").unwrap();
                if ports {
                    m.set(pspat_config::MaskField::DstPort, "0xffff").unwrap();
                }
                CompiledMask::new(&m)
            };
            let k = PacketKey {
                flow_label: label,
                ..PacketKey::new(
                    IpAddr::V4(Ipv4Addr::from(src)),
                    if v6 { IpAddr::V6(Ipv6Addr::from(dst)) } else { IpAddr::V4(Ipv4Addr::from(dst as u32)) },
                    proto,
                    sport,
                    dport,
                )
            };
            let (Some(f), Some(c)) = (mask(fine, true), mask(coarse, false)) else {
                return Ok(());
            };
            proptest::prop_assert_eq!(c.remask(&f.apply(&k, 0), inst), c.apply(&k, inst));
            proptest::prop_assert_eq!(f.remask(&f.apply(&k, 3), inst), f.apply(&k, inst));
            // Finer: what both keep.
            proptest::prop_assert_eq!(f.remask(&c.apply(&k, 0), inst), c.apply(&k, inst));
            // A table's packed form drops only words the mask leaves zero.
            for m in [f, c] {
                let layout = KeyLayout::new(&m, true);
                let mk = m.apply(&k, inst);
                let packed = layout.pack(&mk);
                proptest::prop_assert_eq!(layout.unpack(&packed.0[..layout.width()]), mk);
                proptest::prop_assert!(packed.0[layout.width()..].iter().all(|w| *w == 0));
                proptest::prop_assert_eq!(m.pack(layout, &k, inst), packed);
                let single = KeyLayout::new(&m, false);
                proptest::prop_assert_eq!(m.pack(single, &k, 0), single.pack(&m.apply(&k, 0)));
                proptest::prop_assert_eq!(single.unpack(&single.pack(&m.apply(&k, 0)).0), m.apply(&k, 0));
            }
        }
    }

    fn addr(v6: bool, x: u128) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from(x))
        } else {
            IpAddr::V4(Ipv4Addr::from(x as u32))
        }
    }

    proptest::proptest! {
        /// The per-packet packing equals packing the full masked key, and
        /// unpacking gives the full key back, for any mask words, families
        /// and fields.
        #[test]
        fn packing_a_packet_is_packing_its_masked_key(
            m4 in proptest::prelude::any::<[u32; 2]>(),
            m6 in proptest::prelude::any::<[u128; 2]>(),
            zero in proptest::prelude::any::<[bool; 5]>(),
            ports in proptest::prelude::any::<u32>(),
            proto in proptest::prelude::any::<u8>(),
            label in proptest::prelude::any::<u32>(),
            fam in proptest::prelude::any::<[bool; 2]>(),
            a in proptest::prelude::any::<[u128; 2]>(),
            fields in proptest::prelude::any::<(u8, u16, u16, u32)>(),
            instances in proptest::prelude::any::<bool>(),
            inst in 0u32..16,
        ) {
            let pick = |z: bool, v: u32| if z { 0 } else { v };
            let m = CompiledMask {
                src4: pick(zero[0], m4[0]),
                dst4: pick(zero[1], m4[1]),
                src6: if zero[2] { [0; 4] } else { words(IpAddr::V6(Ipv6Addr::from(m6[0]))).0 },
                dst6: if zero[3] { [0; 4] } else { words(IpAddr::V6(Ipv6Addr::from(m6[1]))).0 },
                ports: pick(zero[4], ports),
                proto,
                label: label & 0xf_ffff,
            };
            let k = PacketKey {
                flow_label: fields.3,
                ..PacketKey::new(addr(fam[0], a[0]), addr(fam[1], a[1]), fields.0, fields.1, fields.2)
            };
            let layout = KeyLayout::new(&m, instances);
            let inst = if instances { inst } else { 0 };
            let full = m.apply(&k, inst);
            let packed = m.pack(layout, &k, inst);
            proptest::prop_assert_eq!(packed, layout.pack(&full));
            proptest::prop_assert_eq!(layout.unpack(&packed.0[..layout.width()]), full);
            proptest::prop_assert!(packed.0[layout.width()..].iter().all(|w| *w == 0));
        }
    }

    proptest::proptest! {
        /// A two-word layout's one-word key is its packed key, and hashes
        /// the same, for each word such a layout keeps besides word 9, any
        /// mask bits of that word, either family and any fields.
        #[test]
        fn a_narrow_key_is_the_packed_key(
            which in 0usize..4,
            bits in 1u32..,
            meta in proptest::prelude::any::<(u8, u32)>(),
            fam in proptest::prelude::any::<[bool; 2]>(),
            a in proptest::prelude::any::<[u128; 2]>(),
            fields in proptest::prelude::any::<(u8, u16, u16, u32)>(),
            inst in proptest::prelude::any::<u32>(),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut m = CompiledMask {
                src4: 0,
                dst4: 0,
                src6: [0; 4],
                dst6: [0; 4],
                ports: 0,
                proto: meta.0,
                label: meta.1 & 0xf_ffff,
            };
            match which {
                0 => (m.src4, m.src6[0]) = (bits, bits.rotate_left(7)),
                1 => (m.dst4, m.dst6[0]) = (bits, bits.rotate_left(7)),
                2 => m.ports = bits,
                _ => {}
            }
            let k = PacketKey {
                flow_label: fields.3,
                ..PacketKey::new(addr(fam[0], a[0]), addr(fam[1], a[1]), fields.0, fields.1, fields.2)
            };
            let layout = KeyLayout::new(&m, which == 3);
            let narrow = layout.narrow();
            proptest::prop_assert!(narrow.is_some(), "{:?}", layout);
            let inst = if which == 3 { inst } else { 0 };
            let n = narrow.map_or(0, |w| m.pack_narrow(w, &k, inst));
            let packed = m.pack(layout, &k, inst);
            proptest::prop_assert_eq!(PackedKey::from_narrow(n), packed);
            proptest::prop_assert_eq!(hash_narrow(n, seed), layout.hash(&packed, seed));
        }
    }

    #[test]
    fn only_two_word_layouts_are_narrow() {
        let layout = |f: &[(pspat_config::MaskField, &str)], instances: bool| {
            let mut m = FlowMask::default();
            for (field, v) in f {
                m.set(*field, v).unwrap();
            }
            KeyLayout::new(&CompiledMask::new(&m).unwrap(), instances)
        };
        use pspat_config::MaskField::{DstIp, Proto, SrcIp, SrcIp6};
        assert_eq!(
            layout(&[(SrcIp, "0xffffffff")], false).narrow(),
            Some(Narrow::Src)
        );
        assert_eq!(layout(&[(DstIp, "/24")], false).narrow(), Some(Narrow::Dst));
        assert_eq!(
            layout(&[(Proto, "0xff")], true).narrow(),
            Some(Narrow::Instance)
        );
        assert_eq!(layout(&[(Proto, "0xff")], false).narrow(), None, "one word");
        assert_eq!(
            layout(&[(SrcIp, "/32")], true).narrow(),
            None,
            "three words"
        );
        assert_eq!(
            layout(&[(SrcIp6, "/64")], false).narrow(),
            None,
            "three words"
        );
        assert_eq!(
            layout(&[(SrcIp, "/32"), (DstIp, "/32")], false).narrow(),
            None
        );
    }

    #[test]
    fn masks_each_family_with_its_own_fields() {
        let mut m = FlowMask::default();
        m.set(pspat_config::MaskField::SrcIp, "/24").unwrap();
        let c = CompiledMask::new(&m).unwrap();
        let k4 = PacketKey::new(
            IpAddr::V4(Ipv4Addr::new(10, 199, 1, 77)),
            IpAddr::V4(Ipv4Addr::new(10, 199, 2, 1)),
            6,
            1,
            2,
        );
        let mk = c.apply(&k4, 3);
        assert_eq!(mk.0[0], u32::from(Ipv4Addr::new(10, 199, 1, 0)));
        assert_eq!(&mk.0[1..9], &[0; 8]);
        assert_eq!(mk.0[10], 3);
        let k6 = PacketKey::new(
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            6,
            1,
            2,
        );
        let mk6 = c.apply(&k6, 3);
        assert_eq!(&mk6.0[0..9], &[0; 9]);
        assert_ne!(mk6, c.apply(&k4, 3), "families stay apart");
        assert!(CompiledMask::new(&FlowMask::default()).is_none());
    }
}
