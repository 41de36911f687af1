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
//!
//! # ECN
//!
//! [`ecn_capable`] reads and [`mark_ce`] sets the ECN field of a frame's
//! IP header (RFC 3168 §5: the two low bits of IPv4's TOS octet and of
//! IPv6's traffic class; 0 is Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE). In IPv6
//! the traffic class straddles the header's first two bytes, `(b0 & 0x0f)
//! << 4 | b1 >> 4`, so its ECN bits are bits 5-4 of the second byte. Both
//! find the IP header as [`parse_frame`] does, with the same `etherparse`
//! header slices: Ethernet II, at most [`MAX_VLAN_TAGS`] VLAN tags (802.1Q,
//! 802.1ad, or the older 0x9100 outer tag), then a whole IPv4 header
//! (version 4, IHL of at least 5 words, all of them present, options
//! included) or a whole IPv6 header (version 6, 40 bytes). They look at
//! nothing after that header, so a packet whose transport header is cut
//! or malformed is still recognised; anything else (ARP, another
//! EtherType, MACsec, a third VLAN tag, a cut IP header) is neither
//! ECN-capable nor marked.
//!
//! [`mark_ce`] sets the field to CE (3) on an ECN-capable packet and leaves
//! a Not-ECT one alone (it returns `false`, as dummynet's `ecn_mark` does:
//! the sender did not negotiate ECN, so the caller drops it instead). On
//! IPv4 it updates the header checksum incrementally over the 16-bit word
//! holding version, IHL and TOS (RFC 1624, eqn. 3: `HC' = ~(~HC + ~m +
//! m')` in one's complement arithmetic), which for a header whose checksum
//! was right gives what a full recomputation gives; a wrong checksum stays
//! wrong. IPv6 has no header checksum.
//!
//! [`ecn_capable_parsed`] answers as [`ecn_capable`] for a frame whose
//! [`parse_frame`] gave a key, without walking the headers again: the key's
//! VLAN tags and IP version say where the IP header is
//! ([`FlowKey::ip_header_offset`]), so it reads one byte.
//!
//! Cost: O(header): the Ethernet header and its tags, and the IP header's
//! first bytes, are read; [`mark_ce`] writes at most three bytes. Neither
//! allocates nor panics.
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use etherparse::err::packet::SliceError;
use etherparse::err::{Layer, LenError};
use etherparse::{
    ether_type, Ethernet2Slice, Ipv4HeaderSlice, Ipv6HeaderSlice, LenSource, LinkExtSlice,
    NetSlice, SingleVlanSlice, SlicedPacket, TransportSlice,
};

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

    /// Where the IP header starts in the frame this key was parsed from:
    /// after the Ethernet header and the key's VLAN tags.
    ///
    /// # Examples
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// use pspat_io::parse::{FlowKey, IpVersion};
    /// let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    /// let key = FlowKey {
    ///     ip_version: IpVersion::V4,
    ///     outer_vlan: Some(42),
    ///     inner_vlan: None,
    ///     src: any,
    ///     dst: any,
    ///     protocol: 17,
    ///     src_port: 1,
    ///     dst_port: 2,
    /// };
    /// assert_eq!(key.ip_header_offset(), 18);
    /// ```
    pub const fn ip_header_offset(&self) -> usize {
        let tags = self.outer_vlan.is_some() as usize + self.inner_vlan.is_some() as usize;
        ETHERNET_HEADER_LEN + tags * VLAN_TAG_LEN
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

/// The ECN codepoint Congestion Experienced (RFC 3168 §5), and the mask
/// of the ECN field in IPv4's TOS octet.
const ECN_CE: u8 = 0b11;

/// The IP version of `frame` and where its IP header starts, when it has a
/// whole IPv4 or IPv6 header where [`parse_frame`] looks for one (module
/// docs, ECN).
fn ip_header(frame: &[u8]) -> Option<(IpVersion, usize)> {
    let ethernet = Ethernet2Slice::from_slice_without_fcs(frame).ok()?;
    let mut next = ethernet.ether_type();
    let mut rest = ethernet.payload_slice();
    let mut tags = 0;
    while matches!(
        next,
        ether_type::VLAN_TAGGED_FRAME
            | ether_type::PROVIDER_BRIDGING
            | ether_type::VLAN_DOUBLE_TAGGED_FRAME
    ) {
        if tags == MAX_VLAN_TAGS {
            return None;
        }
        let vlan = SingleVlanSlice::from_slice(rest).ok()?;
        next = vlan.ether_type();
        rest = vlan.payload_slice();
        tags += 1;
    }
    let at = ETHERNET_HEADER_LEN + tags * VLAN_TAG_LEN;
    match next {
        ether_type::IPV4 => Ipv4HeaderSlice::from_slice(rest)
            .ok()
            .map(|_| (IpVersion::V4, at)),
        ether_type::IPV6 => Ipv6HeaderSlice::from_slice(rest)
            .ok()
            .map(|_| (IpVersion::V6, at)),
        _ => None,
    }
}

/// The ECN field of the IP header of `version` at `at` in `frame` (0 when
/// the byte that holds it is missing).
fn ecn_at(frame: &[u8], version: IpVersion, at: usize) -> u8 {
    let second = frame.get(at + 1).copied().unwrap_or(0);
    match version {
        IpVersion::V4 => second & ECN_CE,
        IpVersion::V6 => (second >> 4) & ECN_CE,
    }
}

/// Whether `frame` carries an ECN-capable IPv4 or IPv6 packet: its IP
/// header's ECN field is not 0 (ECT(0), ECT(1), or already CE). `false`
/// for a frame with no whole IP header where [`parse_frame`] looks for one
/// (module docs, ECN). O(header), never allocates.
///
/// # Examples
/// ```
/// use pspat_io::parse::ecn_capable;
/// let mut frame = vec![0u8; 34];
/// frame[12..14].copy_from_slice(&[0x08, 0x00]); // IPv4
/// frame[14] = 0x45; // version 4, IHL 5
/// assert!(!ecn_capable(&frame)); // Not-ECT
/// frame[15] = 0x02; // ECT(0)
/// assert!(ecn_capable(&frame));
/// assert!(!ecn_capable(&frame[..33])); // a cut IP header
/// ```
pub fn ecn_capable(frame: &[u8]) -> bool {
    ip_header(frame).is_some_and(|(version, at)| ecn_at(frame, version, at) != 0)
}

/// [`ecn_capable`] of a frame whose [`parse_frame`] gave `key`: the same
/// answer, from one byte read at [`FlowKey::ip_header_offset`] instead of
/// a walk over the headers. For any other frame the answer means nothing.
pub fn ecn_capable_parsed(frame: &[u8], key: &FlowKey) -> bool {
    ecn_at(frame, key.ip_version, key.ip_header_offset()) != 0
}

/// The DiffServ code point (the six high bits of the IPv4 TOS byte or of
/// the IPv6 traffic class) of a frame whose [`parse_frame`] gave `key`:
/// one byte or two read at [`FlowKey::ip_header_offset`]; 0 when they are
/// missing. For any other frame the answer means nothing.
///
/// # Examples
/// ```
/// use pspat_io::parse::{dscp_parsed, parse_frame, ParseLimits};
/// let mut frame = vec![0u8; 42];
/// frame[12..14].copy_from_slice(&[0x08, 0x00]); // IPv4
/// frame[14] = 0x45; // version 4, IHL 5
/// frame[15] = (46 << 2) | 0x02; // EF, ECT(0)
/// frame[16..18].copy_from_slice(&28u16.to_be_bytes()); // total length
/// frame[22] = 64; // TTL
/// frame[23] = 17; // UDP
/// frame[38..40].copy_from_slice(&8u16.to_be_bytes()); // UDP length
/// let key = parse_frame(&frame, &ParseLimits::default()).unwrap();
/// assert_eq!(dscp_parsed(&frame, &key), 46);
/// ```
pub fn dscp_parsed(frame: &[u8], key: &FlowKey) -> u8 {
    let at = key.ip_header_offset();
    let byte = |i: usize| frame.get(at + i).copied().unwrap_or(0);
    match key.ip_version {
        IpVersion::V4 => byte(1) >> 2,
        // Version (4 bits), then the traffic class across two bytes.
        IpVersion::V6 => ((byte(0) & 0x0f) << 2) | (byte(1) >> 6),
    }
}

/// The IP length of a frame whose [`parse_frame`] gave `key`, as ipfw's
/// `iplen` reads it: IPv4's total length, or IPv6's payload length plus its
/// 40-byte header; two bytes read at [`FlowKey::ip_header_offset`] (0, or
/// 40 on IPv6, when they are missing). For any other frame the answer
/// means nothing.
///
/// # Examples
/// ```
/// use pspat_io::parse::{ip_len_parsed, parse_frame, ParseLimits};
/// let mut frame = Vec::new();
/// etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
///     .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
///     .udp(1000, 2000)
///     .write(&mut frame, &[0; 12])
///     .unwrap();
/// let key = parse_frame(&frame, &ParseLimits::default()).unwrap();
/// assert_eq!(ip_len_parsed(&frame, &key), 20 + 8 + 12);
/// ```
pub fn ip_len_parsed(frame: &[u8], key: &FlowKey) -> u16 {
    let at = key.ip_header_offset();
    let word = |i: usize| {
        frame
            .get(at + i..at + i + 2)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
    };
    match key.ip_version {
        IpVersion::V4 => word(2),
        IpVersion::V6 => word(4).saturating_add(40),
    }
}

/// The TCP flag byte (`fin` 0x01, `syn` 0x02, `rst` 0x04, `psh` 0x08,
/// `ack` 0x10, `urg` 0x20, `ece` 0x40, `cwr` 0x80) of a frame whose
/// [`parse_frame`] gave `key`; 0 for another protocol or a fragment (the
/// key has no ports then either). Unlike [`dscp_parsed`] it walks the
/// headers again (IPv6 extension headers can stand before TCP's), so a
/// caller reads it only when a rule tests it.
///
/// # Examples
/// ```
/// use pspat_io::parse::{parse_frame, tcp_flags_parsed, ParseLimits};
/// let mut frame = Vec::new();
/// etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
///     .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
///     .tcp(40000, 443, 1, 65535)
///     .syn()
///     .write(&mut frame, &[])
///     .unwrap();
/// let key = parse_frame(&frame, &ParseLimits::default()).unwrap();
/// assert_eq!(tcp_flags_parsed(&frame, &key), 0x02);
/// ```
pub fn tcp_flags_parsed(frame: &[u8], key: &FlowKey) -> u8 {
    if key.protocol != 6 {
        return 0;
    }
    let Ok(packet) = SlicedPacket::from_ethernet(frame) else {
        return 0;
    };
    let fragmented = match &packet.net {
        Some(NetSlice::Ipv4(v4)) => v4.payload().fragmented,
        Some(NetSlice::Ipv6(v6)) => v6.payload().fragmented,
        _ => true,
    };
    match &packet.transport {
        Some(TransportSlice::Tcp(tcp)) if !fragmented => {
            tcp.header_slice().get(13).copied().unwrap_or(0)
        }
        _ => 0,
    }
}

/// Folds a sum of 16-bit words into one's complement 16 bits (end-around
/// carries).
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Marks the packet in `frame` Congestion Experienced: sets its IP
/// header's ECN field to 3 and, on IPv4, updates the header checksum
/// incrementally (RFC 1624; module docs, ECN). Returns `true` when the
/// packet is marked (already CE included: then nothing changes), `false`
/// when it cannot be, and then `frame` is left as it was: a Not-ECT
/// packet (ECN field 0), or a frame with no whole IP header where
/// [`parse_frame`] looks for one. O(header), never allocates.
///
/// # Examples
/// ```
/// use pspat_io::parse::{ecn_capable, mark_ce};
/// let mut frame = vec![0u8; 34];
/// frame[12..14].copy_from_slice(&[0x08, 0x00]); // IPv4
/// frame[14] = 0x45; // version 4, IHL 5
/// frame[15] = 0x01; // ECT(1)
/// frame[24..26].copy_from_slice(&[0xba, 0xfe]); // its header checksum
/// assert!(mark_ce(&mut frame));
/// assert_eq!(frame[15] & 3, 3);
/// assert_eq!(frame[24..26], [0xba, 0xfc]); // the word 0x4501 became 0x4503
/// assert!(ecn_capable(&frame));
/// frame[15] = 0; // Not-ECT: left alone
/// assert!(!mark_ce(&mut frame));
/// assert_eq!(frame[15], 0);
/// ```
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let Some((version, at)) = ip_header(frame) else {
        return false;
    };
    match ecn_at(frame, version, at) {
        0 => return false,
        ECN_CE => return true,
        _ => {}
    }
    match version {
        IpVersion::V4 => {
            // `ip_header` found a whole header, at least 20 bytes.
            let Some(header) = frame.get_mut(at..at + 20) else {
                return false;
            };
            let old = u16::from_be_bytes([header[0], header[1]]);
            header[1] |= ECN_CE;
            let new = u16::from_be_bytes([header[0], header[1]]);
            let checksum = u16::from_be_bytes([header[10], header[11]]);
            // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
            let sum = u32::from(!checksum) + u32::from(!old) + u32::from(new);
            header[10..12].copy_from_slice(&(!fold(sum)).to_be_bytes());
        }
        IpVersion::V6 => {
            let Some(second) = frame.get_mut(at + 1) else {
                return false;
            };
            *second |= ECN_CE << 4;
        }
    }
    true
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

    /// The code point from both families, behind a VLAN tag too, whatever
    /// the ECN bits beside it.
    #[test]
    fn dscp_is_read_from_ipv4_and_ipv6_headers() {
        for (dscp, ecn) in [(0u8, 0u8), (46, 2), (63, 3), (10, 1)] {
            let tc = (dscp << 2) | ecn;
            let mut v4 = Vec::new();
            etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
                .single_vlan(7.try_into().unwrap())
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .udp(1000, 2000)
                .write(&mut v4, &[0; 4])
                .unwrap();
            // The TOS byte after the 4-byte tag and the version/IHL byte.
            v4[14 + 4 + 1] = tc;
            let key = parse_frame(&v4, &ParseLimits::default()).unwrap();
            assert_eq!(dscp_parsed(&v4, &key), dscp, "IPv4 tos {tc:#x}");
            let mut v6 = Vec::new();
            etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
                .ipv6(
                    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                    64,
                )
                .udp(1000, 2000)
                .write(&mut v6, &[0; 4])
                .unwrap();
            // Version 6, then the traffic class across the next 8 bits.
            v6[14] = 0x60 | (tc >> 4);
            v6[15] = (tc << 4) | (v6[15] & 0x0f);
            let key = parse_frame(&v6, &ParseLimits::default()).unwrap();
            assert_eq!(dscp_parsed(&v6, &key), dscp, "IPv6 traffic class {tc:#x}");
        }
    }

    /// The IP length from both families behind a VLAN tag, and the TCP
    /// flags of TCP segments only.
    #[test]
    fn ip_length_and_tcp_flags_are_read_from_both_families() {
        let v6 = |b: etherparse::PacketBuilderStep<etherparse::Ethernet2Header>| {
            b.ipv6(
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                64,
            )
        };
        let mut tcp4 = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
            .single_vlan(7.try_into().unwrap())
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 443, 1, 65535)
            .ack(5)
            .psh()
            .write(&mut tcp4, &[0; 10])
            .unwrap();
        let key = parse_frame(&tcp4, &ParseLimits::default()).unwrap();
        assert_eq!(ip_len_parsed(&tcp4, &key), 20 + 20 + 10);
        assert_eq!(tcp_flags_parsed(&tcp4, &key), 0x18);
        let mut tcp6 = Vec::new();
        v6(etherparse::PacketBuilder::ethernet2([2; 6], [4; 6]))
            .tcp(40000, 443, 1, 65535)
            .rst()
            .write(&mut tcp6, &[])
            .unwrap();
        let key = parse_frame(&tcp6, &ParseLimits::default()).unwrap();
        assert_eq!(ip_len_parsed(&tcp6, &key), 40 + 20);
        assert_eq!(tcp_flags_parsed(&tcp6, &key), 0x04);
        let mut udp6 = Vec::new();
        v6(etherparse::PacketBuilder::ethernet2([2; 6], [4; 6]))
            .udp(1000, 2000)
            .write(&mut udp6, &[0; 3])
            .unwrap();
        let key = parse_frame(&udp6, &ParseLimits::default()).unwrap();
        assert_eq!(ip_len_parsed(&udp6, &key), 40 + 8 + 3);
        assert_eq!(tcp_flags_parsed(&udp6, &key), 0);
    }
}
