//! From a received Ethernet frame to a [`FlowKey`], or to a counted reason
//! why not.
//!
//! [`parse_frame`] reads Ethernet II, up to two VLAN tags (802.1Q or
//! 802.1ad), IPv4 (with options) or IPv6 (with extension headers: hop-by-hop,
//! destination options, routing, fragment, authentication), then TCP, UDP,
//! ICMP or ICMPv6, with the `etherparse` crate's zero-copy slices (RFC 791,
//! RFC 8200, RFC 793, RFC 768, RFC 792, RFC 4443; IEEE 802.1Q). It never
//! panics and never allocates: any byte string gives either a key or a
//! [`ParseError`] whose [`ParseReason`] has a stable counter name
//! ([`ParseReason::counter_name`]) that [`ParseStats`] counts.
//!
//! What the key holds when there are no ports: for ICMP and ICMPv6 the
//! source port holds `type << 8 | code` and the destination port 0; for a
//! fragment of a fragmented datagram (any fragment: only the first carries
//! the ports, and all of one datagram must stay one flow), for IGMP and for
//! other IP protocols both ports are 0.
//!
//! Cost: O(headers), a few dozen bytes read; [`FlowKey::hash`] is a fixed
//! number of multiply-xorshift rounds.
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use etherparse::err::packet::SliceError;
use etherparse::err::{Layer, LenError};
use etherparse::{LenSource, LinkExtSlice, NetSlice, SlicedPacket, TransportSlice};

/// Ethernet II header length (bytes, without FCS).
pub const ETHERNET_HEADER_LEN: usize = 14;

/// One VLAN tag (bytes).
pub const VLAN_TAG_LEN: usize = 4;

/// VLAN tags a frame may carry (an 802.1ad outer tag and an 802.1Q inner
/// one).
pub const MAX_VLAN_TAGS: usize = 2;

/// IPv6 extension headers a packet may carry before its transport header by
/// default. RFC 8200 §4.1 recommends each header at most once (destination
/// options twice): seven; a longer chain is an attack or a bug.
pub const DEFAULT_MAX_IPV6_EXTENSION_HEADERS: usize = 8;

/// Why a frame gave no flow key. Every variant has a stable counter name
/// ([`ParseReason::counter_name`]) for statistics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseReason {
    /// Longer than the configured maximum frame length (above the MTU).
    OversizeFrame,
    /// Shorter than an Ethernet header.
    TruncatedEthernet,
    /// Cut inside a VLAN tag.
    TruncatedVlan,
    /// More than [`MAX_VLAN_TAGS`] VLAN tags.
    TooManyVlanTags,
    /// A link extension other than VLAN (MACsec).
    UnsupportedLinkExtension,
    /// Neither IPv4 nor IPv6 (ARP, LLDP, ...).
    NonIp,
    /// Cut inside the IP header, or shorter than the IP length fields say.
    TruncatedIp,
    /// An IP version field that does not match the EtherType.
    BadIpVersion,
    /// An IPv4 header length (IHL) below 5 words.
    BadIhl,
    /// An IP total/payload length field smaller than the header it follows.
    BadIpLength,
    /// Cut inside an IPv6 extension header or an IPv4 authentication
    /// header.
    TruncatedExtensionHeader,
    /// A malformed extension header (hop-by-hop not first, bad
    /// authentication header).
    BadExtensionHeader,
    /// More IPv6 extension headers than the configured limit.
    TooManyExtensionHeaders,
    /// Cut inside the TCP, UDP or ICMP header.
    TruncatedTransport,
    /// A TCP data offset below 5 words.
    BadTcpDataOffset,
}

impl ParseReason {
    /// Every reason, in counter order.
    pub const ALL: [ParseReason; 15] = [
        ParseReason::OversizeFrame,
        ParseReason::TruncatedEthernet,
        ParseReason::TruncatedVlan,
        ParseReason::TooManyVlanTags,
        ParseReason::UnsupportedLinkExtension,
        ParseReason::NonIp,
        ParseReason::TruncatedIp,
        ParseReason::BadIpVersion,
        ParseReason::BadIhl,
        ParseReason::BadIpLength,
        ParseReason::TruncatedExtensionHeader,
        ParseReason::BadExtensionHeader,
        ParseReason::TooManyExtensionHeaders,
        ParseReason::TruncatedTransport,
        ParseReason::BadTcpDataOffset,
    ];

    /// The stable name of this reason's counter (snake case, never
    /// renamed).
    pub const fn counter_name(self) -> &'static str {
        match self {
            ParseReason::OversizeFrame => "oversize_frame",
            ParseReason::TruncatedEthernet => "truncated_ethernet",
            ParseReason::TruncatedVlan => "truncated_vlan",
            ParseReason::TooManyVlanTags => "too_many_vlan_tags",
            ParseReason::UnsupportedLinkExtension => "unsupported_link_extension",
            ParseReason::NonIp => "non_ip",
            ParseReason::TruncatedIp => "truncated_ip",
            ParseReason::BadIpVersion => "bad_ip_version",
            ParseReason::BadIhl => "bad_ihl",
            ParseReason::BadIpLength => "bad_ip_length",
            ParseReason::TruncatedExtensionHeader => "truncated_extension_header",
            ParseReason::BadExtensionHeader => "bad_extension_header",
            ParseReason::TooManyExtensionHeaders => "too_many_extension_headers",
            ParseReason::TruncatedTransport => "truncated_transport",
            ParseReason::BadTcpDataOffset => "bad_tcp_data_offset",
        }
    }

    /// This reason's position in [`ParseReason::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ParseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.counter_name())
    }
}

/// A frame that gave no flow key: why, and the byte offset of the layer
/// that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unparsable frame: {reason} (layer at byte {offset})")]
pub struct ParseError {
    /// Why.
    pub reason: ParseReason,
    /// Where the failing layer starts in the frame (bytes; 0 when the frame
    /// as a whole is refused).
    pub offset: usize,
}

impl ParseError {
    fn at(reason: ParseReason, offset: usize) -> Self {
        Self { reason, offset }
    }
}

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpVersion {
    /// IPv4 (EtherType 0x0800).
    V4,
    /// IPv6 (EtherType 0x86DD).
    V6,
}

impl IpVersion {
    /// The EtherType of this network protocol: the L3 protocol as the link
    /// names it.
    pub const fn ether_type(self) -> u16 {
        match self {
            IpVersion::V4 => 0x0800,
            IpVersion::V6 => 0x86DD,
        }
    }
}

/// What identifies a flow: the 5-tuple, the VLAN tags and the L3 protocol
/// (module docs for the ports of portless protocols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// IPv4 or IPv6 (the L3 protocol; its EtherType is
    /// [`IpVersion::ether_type`]).
    pub ip_version: IpVersion,
    /// Outer VLAN ID (12 bits), if tagged.
    pub outer_vlan: Option<u16>,
    /// Inner VLAN ID (12 bits), if double-tagged.
    pub inner_vlan: Option<u16>,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol number of the transport (6 TCP, 17 UDP, 1 ICMP, 58
    /// ICMPv6, ...): the last next-header of an IPv6 chain.
    pub protocol: u8,
    /// Source port (module docs for ICMP and fragments).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

/// Which fields of a [`FlowKey`] define a flow (`--flow-key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlowKeyKind {
    /// Every field (`5-tuple`).
    #[default]
    FiveTuple,
    /// The source address only (`src-ip`).
    SrcIp,
    /// The destination address only (`dst-ip`).
    DstIp,
    /// The transport protocol and destination port (`dst-port`).
    DstPort,
}

impl FlowKeyKind {
    /// Every kind, with its command-line name.
    pub const NAMES: [(&'static str, FlowKeyKind); 4] = [
        ("5-tuple", FlowKeyKind::FiveTuple),
        ("src-ip", FlowKeyKind::SrcIp),
        ("dst-ip", FlowKeyKind::DstIp),
        ("dst-port", FlowKeyKind::DstPort),
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, kind)| *kind == self)
            .map_or("5-tuple", |(name, _)| name)
    }
}

/// A `--flow-key` value that names no [`FlowKeyKind`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown flow key {0:?}: expected 5-tuple, src-ip, dst-ip or dst-port")]
pub struct UnknownFlowKeyKind(pub String);

impl FromStr for FlowKeyKind {
    type Err = UnknownFlowKeyKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::NAMES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, kind)| *kind)
            .ok_or_else(|| UnknownFlowKeyKind(text.to_owned()))
    }
}

impl fmt::Display for FlowKeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const UNSPECIFIED_V4: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
const UNSPECIFIED_V6: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

/// The finalizer of MurmurHash3 (Appleby, public domain; `fmix64`): every
/// input bit flips each output bit with probability close to 1/2.
const fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl FlowKey {
    /// The key with only the fields `kind` names kept; the others are
    /// cleared (addresses to the unspecified address of the key's IP
    /// version, ports, protocol and VLANs to zero/none). Two packets are in
    /// one flow under `kind` when their projections are equal.
    pub fn project(&self, kind: FlowKeyKind) -> FlowKey {
        let unspecified = match self.ip_version {
            IpVersion::V4 => UNSPECIFIED_V4,
            IpVersion::V6 => UNSPECIFIED_V6,
        };
        let cleared = FlowKey {
            ip_version: self.ip_version,
            outer_vlan: None,
            inner_vlan: None,
            src: unspecified,
            dst: unspecified,
            protocol: 0,
            src_port: 0,
            dst_port: 0,
        };
        match kind {
            FlowKeyKind::FiveTuple => *self,
            FlowKeyKind::SrcIp => FlowKey {
                src: self.src,
                ..cleared
            },
            FlowKeyKind::DstIp => FlowKey {
                dst: self.dst,
                ..cleared
            },
            FlowKeyKind::DstPort => FlowKey {
                protocol: self.protocol,
                dst_port: self.dst_port,
                ..cleared
            },
        }
    }

    /// A well-mixed 64-bit digest of the key, keyed by `seed` (so that a
    /// sender who does not know the seed cannot aim many flows at one
    /// bucket). Equal keys give equal digests; it is not a cryptographic
    /// MAC. The same function on every platform and in every build. (It
    /// shadows `std::hash::Hash::hash` in method calls; hash maps still use
    /// the derived `Hash`.)
    pub fn hash(&self, seed: u64) -> u64 {
        fn address_words(address: IpAddr) -> [u64; 2] {
            let octets = match address {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            };
            let (high, low) = octets.split_at(8);
            [
                u64::from_be_bytes(high.try_into().unwrap_or_default()),
                u64::from_be_bytes(low.try_into().unwrap_or_default()),
            ]
        }
        let vlan = |tag: Option<u16>| tag.map_or(0, |id| u64::from(id) | 0x1_0000);
        let meta = u64::from(self.ip_version.ether_type()) << 48
            | u64::from(self.protocol) << 40
            | vlan(self.outer_vlan) << 20
            | vlan(self.inner_vlan);
        let ports = u64::from(self.src_port) << 16 | u64::from(self.dst_port);
        let [s0, s1] = address_words(self.src);
        let [d0, d1] = address_words(self.dst);
        let mut h = mix64(seed ^ 0x9e37_79b9_7f4a_7c15);
        for word in [meta, ports, s0, s1, d0, d1] {
            h = mix64(h ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
        }
        mix64(h)
    }
}

/// Limits of [`parse_frame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// The longest frame accepted (bytes, from the destination MAC, without
    /// FCS).
    pub max_frame_len: usize,
    /// The most IPv6 extension headers accepted.
    pub max_ipv6_extension_headers: usize,
}

impl ParseLimits {
    /// Limits for a link of this MTU: an Ethernet header and two VLAN tags
    /// on top of it.
    pub const fn for_mtu(mtu: usize) -> Self {
        Self {
            max_frame_len: mtu + ETHERNET_HEADER_LEN + MAX_VLAN_TAGS * VLAN_TAG_LEN,
            max_ipv6_extension_headers: DEFAULT_MAX_IPV6_EXTENSION_HEADERS,
        }
    }
}

impl Default for ParseLimits {
    /// [`ParseLimits::for_mtu`] of 1500.
    fn default() -> Self {
        Self::for_mtu(1500)
    }
}

fn len_reason(error: &LenError) -> ParseReason {
    match error.layer {
        Layer::Ethernet2Header | Layer::EtherPayload | Layer::LinuxSllHeader => {
            ParseReason::TruncatedEthernet
        }
        Layer::VlanHeader => ParseReason::TruncatedVlan,
        Layer::MacsecHeader | Layer::MacsecPacket | Layer::Arp => ParseReason::NonIp,
        Layer::IpHeader | Layer::Ipv4Header | Layer::Ipv6Header => ParseReason::TruncatedIp,
        Layer::Ipv4Packet | Layer::Ipv6Packet => match error.len_source {
            // The length field itself is below the header it belongs to.
            LenSource::Ipv4HeaderTotalLen | LenSource::Ipv6HeaderPayloadLen
                if error.len < error.required_len =>
            {
                ParseReason::BadIpLength
            }
            _ => ParseReason::TruncatedIp,
        },
        Layer::IpAuthHeader
        | Layer::Ipv6ExtHeader
        | Layer::Ipv6HopByHopHeader
        | Layer::Ipv6DestOptionsHeader
        | Layer::Ipv6RouteHeader
        | Layer::Ipv6FragHeader => ParseReason::TruncatedExtensionHeader,
        Layer::UdpHeader
        | Layer::UdpPayload
        | Layer::TcpHeader
        | Layer::Icmpv4
        | Layer::Icmpv4Timestamp
        | Layer::Icmpv4TimestampReply
        | Layer::Icmpv6
        | Layer::Igmp => ParseReason::TruncatedTransport,
    }
}

fn slice_error(error: &SliceError) -> ParseError {
    use etherparse::err::{ip, ipv4, ipv6};
    match error {
        SliceError::Len(len) => ParseError::at(len_reason(len), len.layer_start_offset),
        SliceError::LinuxSll(_) | SliceError::Macsec(_) => {
            ParseError::at(ParseReason::UnsupportedLinkExtension, 0)
        }
        SliceError::Ip(ip::HeaderError::Ipv4HeaderLengthSmallerThanHeader { .. })
        | SliceError::Ipv4(ipv4::HeaderError::HeaderLengthSmallerThanHeader { .. }) => {
            ParseError::at(ParseReason::BadIhl, 0)
        }
        SliceError::Ip(ip::HeaderError::UnsupportedIpVersion { .. })
        | SliceError::Ipv4(ipv4::HeaderError::UnexpectedVersion { .. })
        | SliceError::Ipv6(ipv6::HeaderError::UnexpectedVersion { .. }) => {
            ParseError::at(ParseReason::BadIpVersion, 0)
        }
        SliceError::Ipv4Exts(_) | SliceError::Ipv6Exts(_) => {
            ParseError::at(ParseReason::BadExtensionHeader, 0)
        }
        SliceError::Tcp(_) => ParseError::at(ParseReason::BadTcpDataOffset, 0),
    }
}

/// Parses one Ethernet frame (from the destination MAC, without FCS) into
/// its flow key (module docs). Never panics, never allocates.
pub fn parse_frame(frame: &[u8], limits: &ParseLimits) -> Result<FlowKey, ParseError> {
    if frame.len() > limits.max_frame_len {
        return Err(ParseError::at(ParseReason::OversizeFrame, 0));
    }
    let packet = SlicedPacket::from_ethernet(frame).map_err(|e| slice_error(&e))?;
    let mut vlans = [None; MAX_VLAN_TAGS];
    let mut tags = 0;
    for ext in &packet.link_exts {
        match ext {
            LinkExtSlice::Vlan(vlan) => {
                let Some(slot) = vlans.get_mut(tags) else {
                    return Err(ParseError::at(
                        ParseReason::TooManyVlanTags,
                        ETHERNET_HEADER_LEN + tags * VLAN_TAG_LEN,
                    ));
                };
                *slot = Some(vlan.vlan_identifier().value());
                tags += 1;
            }
            LinkExtSlice::Macsec(_) => {
                return Err(ParseError::at(
                    ParseReason::UnsupportedLinkExtension,
                    ETHERNET_HEADER_LEN + tags * VLAN_TAG_LEN,
                ))
            }
        }
    }
    let net_offset = ETHERNET_HEADER_LEN + tags * VLAN_TAG_LEN;
    let (ip_version, src, dst, payload) = match &packet.net {
        Some(NetSlice::Ipv4(v4)) => {
            let header = v4.header();
            (
                IpVersion::V4,
                IpAddr::V4(header.source_addr()),
                IpAddr::V4(header.destination_addr()),
                v4.payload(),
            )
        }
        Some(NetSlice::Ipv6(v6)) => {
            let chain = v6.extensions().clone().into_iter().count();
            if chain > limits.max_ipv6_extension_headers {
                return Err(ParseError::at(
                    ParseReason::TooManyExtensionHeaders,
                    net_offset,
                ));
            }
            let header = v6.header();
            (
                IpVersion::V6,
                IpAddr::V6(header.source_addr()),
                IpAddr::V6(header.destination_addr()),
                v6.payload(),
            )
        }
        Some(NetSlice::Arp(_)) | None => {
            // A frame with more VLAN tags than etherparse keeps ends here
            // too: its payload after the last kept tag is another tag.
            let more_tags = packet.link_exts.len() == SlicedPacket::LINK_EXTS_CAP;
            let reason = if more_tags || tags > MAX_VLAN_TAGS {
                ParseReason::TooManyVlanTags
            } else {
                ParseReason::NonIp
            };
            return Err(ParseError::at(reason, net_offset));
        }
    };
    let (src_port, dst_port) = match &packet.transport {
        _ if payload.fragmented => (0, 0),
        Some(TransportSlice::Tcp(tcp)) => (tcp.source_port(), tcp.destination_port()),
        Some(TransportSlice::Udp(udp)) => (udp.source_port(), udp.destination_port()),
        Some(TransportSlice::Icmpv4(icmp)) => (
            u16::from(icmp.type_u8()) << 8 | u16::from(icmp.code_u8()),
            0,
        ),
        Some(TransportSlice::Icmpv6(icmp)) => (
            u16::from(icmp.type_u8()) << 8 | u16::from(icmp.code_u8()),
            0,
        ),
        Some(TransportSlice::Igmp(_)) | None => (0, 0),
    };
    Ok(FlowKey {
        ip_version,
        outer_vlan: vlans[0],
        inner_vlan: vlans[1],
        src,
        dst,
        protocol: payload.ip_number.0,
        src_port,
        dst_port,
    })
}

/// Frames parsed and refused, per reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParseStats {
    /// Frames that gave a flow key.
    pub parsed: u64,
    refused: [u64; ParseReason::ALL.len()],
}

impl ParseStats {
    /// Counts one outcome of [`parse_frame`].
    pub fn record(&mut self, outcome: &Result<FlowKey, ParseError>) {
        match outcome {
            Ok(_) => self.parsed += 1,
            Err(error) => self.refused[error.reason.index()] += 1,
        }
    }

    /// Parses `frame` and counts the outcome.
    pub fn parse(&mut self, frame: &[u8], limits: &ParseLimits) -> Result<FlowKey, ParseError> {
        let outcome = parse_frame(frame, limits);
        self.record(&outcome);
        outcome
    }

    /// Frames refused for `reason`.
    pub fn refused(&self, reason: ParseReason) -> u64 {
        self.refused[reason.index()]
    }

    /// Frames refused, all reasons together.
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }

    /// `(counter name, count)` for every reason, in [`ParseReason::ALL`]
    /// order (zeros included).
    pub fn counters(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ParseReason::ALL
            .iter()
            .map(|reason| (reason.counter_name(), self.refused(*reason)))
    }

    /// Adds another set of counts (another RX thread's) to these.
    pub fn merge(&mut self, other: &ParseStats) {
        self.parsed += other.parsed;
        for (mine, theirs) in self.refused.iter_mut().zip(other.refused) {
            *mine += theirs;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_sits_at_its_index_with_a_distinct_name() {
        for (i, reason) in ParseReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
            assert_eq!(reason.to_string(), reason.counter_name());
        }
        let mut names: Vec<_> = ParseReason::ALL.iter().map(|r| r.counter_name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ParseReason::ALL.len());
    }

    #[test]
    fn stats_merge_and_limits_follow_the_mtu() {
        let mut a = ParseStats::default();
        a.record(&Err(ParseError::at(ParseReason::NonIp, 14)));
        let mut b = ParseStats::default();
        b.record(&Err(ParseError::at(ParseReason::NonIp, 14)));
        b.record(&Err(ParseError::at(ParseReason::BadIhl, 14)));
        a.merge(&b);
        assert_eq!(a.refused(ParseReason::NonIp), 2);
        assert_eq!(a.refused(ParseReason::BadIhl), 1);
        assert_eq!(a.refused_total(), 3);
        assert_eq!(ParseLimits::default().max_frame_len, 1522);
        assert_eq!(ParseLimits::for_mtu(9000).max_frame_len, 9022);
    }
}
