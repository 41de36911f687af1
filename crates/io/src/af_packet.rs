//! Raw Ethernet frames through Linux AF_PACKET sockets: an RX ring of
//! TPACKET_V3 blocks or of TPACKET_V2 frame slots, TX by `sendmmsg(2)` or by
//! a TPACKET_V2 TX ring.
//!
//! Sources: packet(7); the kernel's `Documentation/networking/packet_mmap.rst`
//! (ring layout, block and frame status words, `PACKET_QDISC_BYPASS`,
//! `PACKET_FANOUT`) and `net/packet/af_packet.c` (which errors a send or a
//! poll returns when the bound device goes down or away, and when `poll(2)`
//! reports a ring readable).
//!
//! * [`PacketRx`]: a socket bound to one interface with a ring mapped into
//!   this process, of one of two kinds ([`RxConfig::ring`]):
//!   - [`RxRing::V3`]: blocks. The kernel fills a block and hands it over
//!     when it is full or after [`RxConfig::block_timeout`] (1 ms at
//!     least), so at low rates a frame waits up to that long in the ring;
//!     few status words to touch per frame at high rates.
//!   - [`RxRing::V2`]: one slot per frame, each with its own status word;
//!     the kernel hands every frame over as soon as it is written and
//!     `poll(2)` wakes on the first one, so no timeout delays a frame. A
//!     frame longer than a slot is truncated to it and counted
//!     ([`RxStats::truncated`]).
//!
//!   [`PacketRx::recv_with`] gives every frame that is ready (never waiting
//!   for more once one is) and gives each back to the kernel with its
//!   block or slot; O(1) per frame. [`PacketRx::recv_into`] copies each
//!   packet into a pool frame: the one copy a packet gets between reception
//!   and transmission. Several RX threads share one interface's traffic by
//!   hash with [`RxConfig::fanout`] (one socket each, same group id), with
//!   either ring. Frames this host sends on the interface are skipped. The
//!   kernel strips the outer VLAN tag on reception; the copy puts it back,
//!   so a frame reads as it was on the wire.
//! * [`PacketTx`]: frames sent by `sendmmsg(2)`, up to [`MAX_BATCH`] per
//!   system call.
//! * [`PacketTxRing`]: frames written into a mapped TPACKET_V2 TX ring, then
//!   one `send(2)` hands the whole batch to the kernel.
//!
//! Both senders can skip the kernel's qdisc ([`TxConfig::qdisc_bypass`]):
//! the arbiter has already scheduled the packets. A socket whose interface
//! goes down or away reports [`IoError::LinkLost`] from the next send,
//! receive or poll; close it and reopen when the interface is back.
//!
//! Opening any of these needs root or CAP_NET_RAW
//! ([`IoError::PermissionDenied`] otherwise).
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::error::{classify, IoError};
use crate::frames::{Frame, FrameArena, FramePool};
use crate::sys::{self, RingMap};

/// The most frames one `send_batch` call sends.
pub const MAX_BATCH: usize = 64;

/// EtherType of all protocols, in network byte order, as `socket(2)` and
/// `bind(2)` take it.
fn eth_p_all() -> u16 {
    (libc::ETH_P_ALL as u16).to_be()
}

/// Opens an AF_PACKET socket (receiving nothing until bound with a
/// protocol) and looks the interface up in the caller's namespace.
fn open_bound_socket(interface: &str) -> Result<(OwnedFd, i32), IoError> {
    sys::interface_name(interface)?;
    let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)?;
    let (index, flags) = sys::interface_index_and_flags(&fd, interface)?;
    if flags & libc::IFF_UP == 0 {
        return Err(IoError::InterfaceDown(interface.to_owned()));
    }
    Ok((fd, index))
}

/// Binds the socket to the interface; `protocol` 0 sends only, ETH_P_ALL
/// receives everything.
fn bind(fd: &OwnedFd, interface: &str, index: i32, protocol: u16) -> Result<(), IoError> {
    // SAFETY: an all-zero sockaddr_ll is valid (integers and a byte array).
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    address.sll_family = libc::AF_PACKET as u16;
    address.sll_protocol = protocol;
    address.sll_ifindex = index;
    // SAFETY: `address` is a live sockaddr_ll of the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&address as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(classify(
            "bind the packet socket",
            interface,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The interface's MTU.
pub(crate) fn mtu(fd: &OwnedFd, interface: &str) -> Result<usize, IoError> {
    let c_name = sys::interface_name(interface)?;
    // SAFETY: an all-zero ifreq is valid (see sys::interface_index_and_flags).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(c_name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name and writes the MTU
    // into the union of the live `request`.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut request) };
    if rc < 0 {
        return Err(classify(
            "read the interface MTU (SIOCGIFMTU)",
            interface,
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: SIOCGIFMTU succeeded, so the union holds the MTU member.
    let mtu = unsafe { request.ifr_ifru.ifru_mtu };
    Ok(usize::try_from(mtu).unwrap_or(0))
}

/// The frame-length rule of a sending socket: the kernel takes a frame of
/// up to MTU + Ethernet header bytes, 4 more when it carries a VLAN tag
/// (`packet_snd` in `net/packet/af_packet.c`), and a TX ring frame holds
/// at most `ring_room` bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameLimit {
    pub(crate) mtu: usize,
    pub(crate) ring_room: usize,
}

impl FrameLimit {
    fn max(&self, frame: &[u8]) -> usize {
        let tagged = matches!(frame.get(12..14), Some([0x81, 0x00] | [0x88, 0xa8]));
        let wire = self.mtu + 14 + if tagged { 4 } else { 0 };
        wire.min(self.ring_room)
    }

    /// Checks the first `count` frames; returns how many from the front
    /// may be sent, or an error when not even the first.
    pub(crate) fn admit<'a>(
        &self,
        frames: impl Iterator<Item = &'a [u8]>,
        count: usize,
    ) -> Result<usize, IoError> {
        for (i, frame) in frames.take(count).enumerate() {
            let max = self.max(frame);
            if frame.len() > max {
                if i == 0 {
                    return Err(IoError::FrameTooLong {
                        len: frame.len(),
                        max,
                    });
                }
                return Ok(i);
            }
        }
        Ok(count)
    }
}

/// A batch of frames to send: plain byte slices, or pool frames with their
/// arena.
trait Batch {
    fn count(&self) -> usize;
    fn frame(&self, i: usize) -> &[u8];
}

impl Batch for [&[u8]] {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        self[i]
    }
}

struct PoolBatch<'a> {
    arena: &'a FrameArena,
    frames: &'a [Frame],
}

impl<'a> PoolBatch<'a> {
    /// The batch, once every token it may send was checked against the
    /// arena (so that `frame` cannot fail).
    fn new(arena: &'a FrameArena, frames: &'a [Frame]) -> Result<Self, IoError> {
        for frame in frames.iter().take(MAX_BATCH) {
            arena.bytes(frame)?;
        }
        Ok(PoolBatch { arena, frames })
    }
}

impl Batch for PoolBatch<'_> {
    fn count(&self) -> usize {
        self.frames.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        self.arena.bytes(&self.frames[i]).unwrap_or_default()
    }
}

/// Pool frames sent in the order `picks` names them, a frame as many times
/// as it is named (a duplicated packet: the same bytes twice).
struct PickedBatch<'a> {
    arena: &'a FrameArena,
    frames: &'a [Frame],
    picks: &'a [u32],
}

impl<'a> PickedBatch<'a> {
    /// The batch, once every pick it may send and its token were checked
    /// (so that `frame` cannot fail).
    fn new(arena: &'a FrameArena, frames: &'a [Frame], picks: &'a [u32]) -> Result<Self, IoError> {
        for &i in picks.iter().take(MAX_BATCH) {
            let frame = frames.get(i as usize).ok_or(IoError::BadPick {
                pick: i,
                frames: frames.len(),
            })?;
            arena.bytes(frame)?;
        }
        Ok(PickedBatch {
            arena,
            frames,
            picks,
        })
    }
}

impl Batch for PickedBatch<'_> {
    fn count(&self) -> usize {
        self.picks.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        self.frames
            .get(self.picks[i] as usize)
            .and_then(|f| self.arena.bytes(f).ok())
            .unwrap_or_default()
    }
}

/// The kind of ring a [`PacketRx`] maps (module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RxRing {
    /// TPACKET_V2: one slot per frame, handed over as soon as it is
    /// written.
    V2,
    /// TPACKET_V3: blocks of frames, handed over when full or after the
    /// block timeout.
    #[default]
    V3,
}

impl RxRing {
    /// `v2` or `v3`.
    pub const fn name(self) -> &'static str {
        match self {
            RxRing::V2 => "v2",
            RxRing::V3 => "v3",
        }
    }
}

impl std::fmt::Display for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RxRing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "v2" => Ok(RxRing::V2),
            "v3" => Ok(RxRing::V3),
            _ => Err(format!("expected v2 or v3, got {s:?}")),
        }
    }
}

/// Geometry and options of a [`PacketRx`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxConfig {
    /// The kind of ring (default [`RxRing::V3`]).
    pub ring: RxRing,
    /// Bytes per ring block: a power of two, a multiple of the page size
    /// (default 256 KiB).
    pub block_size: usize,
    /// Blocks in the ring (default 16: 4 MiB).
    pub blocks: usize,
    /// V3: how long the kernel fills a block that is not full before
    /// handing it over (whole milliseconds, at least 1; default 2 ms).
    /// Checked but unused with V2.
    pub block_timeout: Duration,
    /// V2: bytes per frame slot, its header included: a power of two from
    /// 2048 up to the block size (default 2048). A slot holds a frame of
    /// up to [`RxConfig::slot_room`] bytes (VLAN tag removed). Unused with
    /// V3, whose frames take what they need of a block.
    pub frame_size: usize,
    /// V2: the most frames one receive call gives (1..=65536, default
    /// 256), so that a busy ring still lets the caller look up between
    /// batches. V3 gives whole blocks.
    pub max_batch: usize,
    /// `PACKET_FANOUT` group (hash mode) to join, so that several sockets
    /// (one per RX thread) share the interface's traffic by flow. Groups
    /// are per network namespace: every socket of one group must read the
    /// same interface, and another program's sockets must use another id.
    pub fanout: Option<u16>,
    /// Put the interface in promiscuous mode for as long as the socket is
    /// open (`PACKET_ADD_MEMBERSHIP` with `PACKET_MR_PROMISC`; the kernel
    /// counts such requests and drops this one when the socket closes), so
    /// that a NIC hands over frames addressed to other hosts, as a bridge
    /// needs. Default false.
    pub promiscuous: bool,
}

impl Default for RxConfig {
    fn default() -> Self {
        Self {
            ring: RxRing::default(),
            block_size: 1 << 18,
            blocks: 16,
            block_timeout: Duration::from_millis(2),
            frame_size: 2048,
            max_batch: 256,
            fanout: None,
            promiscuous: false,
        }
    }
}

/// Where a V2 RX slot's frame starts when the kernel writes it: after the
/// header and address (`TPACKET2_HDRLEN`), with room for a 16-byte link
/// header, aligned (`tpacket_rcv`'s `netoff`), less the 14-byte Ethernet
/// header.
const V2_MAC_OFFSET: usize = (std::mem::size_of::<libc::tpacket2_hdr>()
    .next_multiple_of(libc::TPACKET_ALIGNMENT)
    + std::mem::size_of::<libc::sockaddr_ll>()
    + 16)
    .next_multiple_of(libc::TPACKET_ALIGNMENT)
    - 14;

impl RxConfig {
    /// The longest Ethernet frame (VLAN tag removed) a V2 slot of
    /// `frame_size` bytes holds untruncated.
    pub const fn slot_room(frame_size: usize) -> usize {
        frame_size.saturating_sub(V2_MAC_OFFSET)
    }

    /// The smallest V2 slot size (a power of two, at least 2048) that
    /// holds an Ethernet frame of `frame_len` bytes (VLAN tag removed).
    pub fn slot_for(frame_len: usize) -> usize {
        (frame_len + V2_MAC_OFFSET).next_power_of_two().max(2048)
    }
}

/// What a [`PacketRx`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Packets given to the caller.
    pub packets: u64,
    /// Their bytes (as given: VLAN tag restored, truncation applied).
    pub bytes: u64,
    /// Packets that were longer on the wire than the ring kept.
    pub truncated: u64,
    /// Packets dropped by [`PacketRx::recv_into`] because the pool had no
    /// free frame.
    pub no_frame: u64,
    /// Packets dropped by [`PacketRx::recv_into`] because they do not fit a
    /// pool frame.
    pub too_long: u64,
    /// Frames this host sent on the interface, skipped.
    pub outgoing: u64,
    /// Ring blocks (V3) or frame slots (V2) handed back to the kernel.
    pub blocks: u64,
}

/// The kernel's own counters of an RX socket (`PACKET_STATISTICS`; reading
/// them resets them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelRxStats {
    /// Packets the socket saw.
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was frozen full.
    pub freezes: u64,
}

/// One received packet, borrowed from the ring until the callback returns.
#[derive(Debug, Clone, Copy)]
pub struct RxPacket<'a> {
    /// The bytes the ring holds (the outer VLAN tag, if any, removed by the
    /// kernel: see [`RxPacket::vlan_tag`]).
    pub data: &'a [u8],
    /// The packet's length on the wire without the removed tag (longer than
    /// `data` when truncated).
    pub wire_len: usize,
    /// The outer VLAN tag the kernel removed: (TPID, TCI).
    pub vlan_tag: Option<(u16, u16)>,
    /// When the kernel received it (realtime clock, since the Unix epoch).
    pub timestamp: Duration,
    /// The kernel's flow hash of the packet (0 when it computed none, and
    /// always 0 from a V2 ring, which has no field for it).
    pub rx_hash: u32,
}

impl RxPacket<'_> {
    /// The frame's length as it was on the wire, tag included, as far as
    /// the ring kept it.
    pub fn frame_len(&self) -> usize {
        self.data.len() + if self.vlan_tag.is_some() { 4 } else { 0 }
    }

    /// Copies the frame into `buffer`, putting the removed VLAN tag back
    /// after the MAC addresses; returns its length, or `None` (nothing
    /// copied) when it does not fit.
    pub fn copy_into(&self, buffer: &mut [u8]) -> Option<usize> {
        let len = self.frame_len();
        let dst = buffer.get_mut(..len)?;
        match self.vlan_tag {
            Some((tpid, tci)) if self.data.len() >= 12 => {
                dst[..12].copy_from_slice(&self.data[..12]);
                dst[12..14].copy_from_slice(&tpid.to_be_bytes());
                dst[14..16].copy_from_slice(&tci.to_be_bytes());
                dst[16..].copy_from_slice(&self.data[12..]);
            }
            Some(_) => {
                // Shorter than two MAC addresses: no place for the tag.
                dst[..self.data.len()].copy_from_slice(self.data);
                return Some(self.data.len());
            }
            None => dst.copy_from_slice(self.data),
        }
        Some(len)
    }
}

/// Offsets in a TPACKET_V3 block descriptor (`struct tpacket_block_desc`,
/// `struct tpacket_hdr_v1`).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
/// An upper bound of what a V3 block spends on its descriptor and one
/// frame's header and address before the frame's bytes.
const V3_OVERHEAD: usize = 256;

/// An AF_PACKET socket receiving one interface's frames through a
/// TPACKET_V3 or TPACKET_V2 ring (module docs).
pub struct PacketRx {
    // Unmapped before the socket closes (fields drop in this order).
    ring: RingMap,
    fd: OwnedFd,
    interface: String,
    kind: RxRing,
    block_size: usize,
    blocks: usize,
    /// V2: bytes per slot, slots per block, slots in all, most per call.
    frame_size: usize,
    per_block: usize,
    frames: usize,
    max_batch: usize,
    /// The next block (V3) or slot (V2) the kernel hands over.
    current: usize,
    stats: RxStats,
    /// The errno that reported the link lost, kept so that every later
    /// receive (once the ring is drained) reports it again.
    link_lost: Option<i32>,
    /// Ends a wait at once once raised ([`PacketRx::stop_waits_on`]).
    stop: Option<std::sync::Arc<crate::StopLatch>>,
}

impl std::fmt::Debug for PacketRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketRx")
            .field("interface", &self.interface)
            .field("ring", &self.kind)
            .field("blocks", &self.blocks)
            .field("block_size", &self.block_size)
            .field("stats", &self.stats)
            .finish()
    }
}

impl PacketRx {
    /// Opens a socket on `interface` (in the calling thread's network
    /// namespace) with a ring of `config`'s kind and geometry.
    pub fn open(interface: &str, config: &RxConfig) -> Result<Self, IoError> {
        // SAFETY: sysconf takes and returns integers.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let timeout_ms = config.block_timeout.as_millis();
        if !config.block_size.is_power_of_two()
            || !config.block_size.is_multiple_of(page)
            || config.block_size > 1 << 30
            || config.blocks == 0
            || config.blocks > 1 << 16
            || !(1..=60_000).contains(&timeout_ms)
        {
            return Err(IoError::BadConfig(format!(
                "RX ring of {} blocks of {} bytes, block timeout {:?}: blocks must be a power-of-two \
                 multiple of the page size ({page}), 1 to 65536 of them, timeout 1 ms to 60 s",
                config.blocks, config.block_size, config.block_timeout
            )));
        }
        if config.ring == RxRing::V2
            && (!config.frame_size.is_power_of_two()
                || config.frame_size < 2048
                || config.frame_size > config.block_size
                || !(1..=1 << 16).contains(&config.max_batch))
        {
            return Err(IoError::BadConfig(format!(
                "V2 RX ring of {}-byte slots in {}-byte blocks, {} frames per call: slots must \
                 be a power of two from 2048 up to the block size, 1 to 65536 frames per call",
                config.frame_size, config.block_size, config.max_batch
            )));
        }
        let per_block = config.block_size / config.frame_size.max(1);
        let frames = per_block * config.blocks;
        let (fd, index) = open_bound_socket(interface)?;
        match config.ring {
            RxRing::V3 => {
                let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
                sys::setsockopt(
                    &fd,
                    libc::SOL_PACKET,
                    libc::PACKET_VERSION,
                    &version,
                    "select TPACKET_V3",
                )?;
                let frame_size = 2048u32;
                let request = libc::tpacket_req3 {
                    tp_block_size: config.block_size as u32,
                    tp_block_nr: config.blocks as u32,
                    tp_frame_size: frame_size,
                    tp_frame_nr: (config.block_size / frame_size as usize * config.blocks) as u32,
                    tp_retire_blk_tov: timeout_ms as u32,
                    tp_sizeof_priv: 0,
                    tp_feature_req_word: libc::TP_FT_REQ_FILL_RXHASH,
                };
                sys::setsockopt(
                    &fd,
                    libc::SOL_PACKET,
                    libc::PACKET_RX_RING,
                    &request,
                    "set up the RX ring",
                )?;
            }
            RxRing::V2 => {
                let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
                sys::setsockopt(
                    &fd,
                    libc::SOL_PACKET,
                    libc::PACKET_VERSION,
                    &version,
                    "select TPACKET_V2",
                )?;
                let request = libc::tpacket_req {
                    tp_block_size: config.block_size as u32,
                    tp_block_nr: config.blocks as u32,
                    tp_frame_size: config.frame_size as u32,
                    tp_frame_nr: frames as u32,
                };
                sys::setsockopt(
                    &fd,
                    libc::SOL_PACKET,
                    libc::PACKET_RX_RING,
                    &request,
                    "set up the RX ring",
                )?;
            }
        }
        let ring = RingMap::new(&fd, config.block_size * config.blocks)?;
        // Frames this host sends are skipped in the ring walk anyway; asking
        // the kernel not to queue them (Linux 4.20+) saves it the work, and
        // an older kernel's refusal changes nothing.
        let on: libc::c_int = 1;
        let _ = sys::setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &on,
            "set PACKET_IGNORE_OUTGOING",
        );
        bind(&fd, interface, index, eth_p_all())?;
        if config.promiscuous {
            let request = libc::packet_mreq {
                mr_ifindex: index,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            sys::setsockopt(
                &fd,
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                &request,
                "put the interface in promiscuous mode (PACKET_ADD_MEMBERSHIP)",
            )?;
        }
        if let Some(group) = config.fanout {
            let argument = u32::from(group) | (libc::PACKET_FANOUT_HASH << 16);
            sys::setsockopt(
                &fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &argument,
                "join the PACKET_FANOUT group",
            )?;
        }
        Ok(Self {
            fd,
            ring,
            interface: interface.to_owned(),
            kind: config.ring,
            block_size: config.block_size,
            blocks: config.blocks,
            frame_size: config.frame_size,
            per_block,
            frames,
            max_batch: config.max_batch,
            current: 0,
            stats: RxStats::default(),
            link_lost: None,
            stop: None,
        })
    }

    /// The interface this socket reads.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// What this socket counted.
    pub fn stats(&self) -> RxStats {
        self.stats
    }

    /// The kind of ring this socket reads.
    pub fn ring(&self) -> RxRing {
        self.kind
    }

    /// The longest frame (VLAN tag removed) the ring keeps whole: a V2
    /// slot's room, or a V3 block less its headers.
    pub fn max_frame(&self) -> usize {
        match self.kind {
            RxRing::V2 => RxConfig::slot_room(self.frame_size),
            RxRing::V3 => self.block_size.saturating_sub(V3_OVERHEAD),
        }
    }

    /// The kernel's counters since the last call (`PACKET_STATISTICS`;
    /// `freezes` is always 0 with a V2 ring, which the kernel never
    /// freezes).
    pub fn kernel_stats(&mut self) -> Result<KernelRxStats, IoError> {
        #[derive(Clone, Copy, Default)]
        #[repr(C)]
        struct StatsV3 {
            packets: u32,
            drops: u32,
            freezes: u32,
        }
        let raw: StatsV3 = sys::getsockopt(
            &self.fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            "read PACKET_STATISTICS",
        )?;
        Ok(KernelRxStats {
            packets: u64::from(raw.packets),
            drops: u64::from(raw.drops),
            freezes: u64::from(raw.freezes),
        })
    }

    /// The status word of block `index`, shared with the kernel.
    fn block_status(&self, index: usize) -> &AtomicU32 {
        debug_assert!(index < self.blocks);
        // SAFETY: block `index` lies inside the mapping (index < blocks, the
        // mapping is blocks × block_size), its status word is a 4-byte
        // aligned u32 at offset 8 of the page-aligned block, and the kernel
        // only ever accesses it as one 32-bit word (with barriers around
        // its own updates), so viewing it as an atomic is sound for as long
        // as `self` (and so the mapping) lives.
        unsafe {
            &*self
                .ring
                .base()
                .add(index * self.block_size + BLOCK_STATUS)
                .cast()
        }
    }

    /// Gives every frame the kernel handed over (at most the whole ring, or
    /// `max_batch` frames of a V2 ring) to `on_packet`. Returns how many
    /// packets were given.
    fn drain(&mut self, on_packet: &mut dyn FnMut(RxPacket<'_>)) -> usize {
        match self.kind {
            RxRing::V2 => self.drain_v2(on_packet),
            RxRing::V3 => self.drain_v3(on_packet),
        }
    }

    /// Counts a packet given and hands it to `on_packet`.
    fn give(&mut self, packet: RxPacket<'_>, on_packet: &mut dyn FnMut(RxPacket<'_>)) {
        self.stats.packets += 1;
        self.stats.bytes += packet.frame_len() as u64;
        if packet.wire_len > packet.data.len() {
            self.stats.truncated += 1;
        }
        on_packet(packet);
    }

    /// The status word of V2 slot `index`, shared with the kernel.
    fn slot_status(&self, index: usize) -> &AtomicU32 {
        debug_assert!(index < self.frames);
        // SAFETY: slot `index` lies inside the mapping (index < frames =
        // per_block × blocks, each block holding per_block whole slots),
        // its first field `tp_status` is a u32 at a 16-byte aligned offset
        // of the page-aligned mapping, and the kernel only ever accesses it
        // as one 32-bit word (with barriers around its own updates), so an
        // atomic view is sound for as long as `self` (and the mapping)
        // lives.
        unsafe { &*self.ring.base().add(self.slot_offset(index)).cast() }
    }

    /// Where V2 slot `index` starts in the mapping.
    fn slot_offset(&self, index: usize) -> usize {
        index / self.per_block * self.block_size + index % self.per_block * self.frame_size
    }

    /// Walks the V2 slots the kernel handed over, from the next one in
    /// ring order, giving each packet to `on_packet` and its slot back to
    /// the kernel right after; stops at the first slot still the kernel's
    /// or after `max_batch` slots.
    fn drain_v2(&mut self, on_packet: &mut dyn FnMut(RxPacket<'_>)) -> usize {
        let mut given = 0;
        let header_len = std::mem::size_of::<libc::tpacket2_hdr>();
        let address_at = header_len.next_multiple_of(libc::TPACKET_ALIGNMENT);
        for _ in 0..self.max_batch {
            // Acquire: pairs with the kernel's write barrier before it sets
            // TP_STATUS_USER, so the slot's header and frame are visible.
            if self.slot_status(self.current).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            let slot = self.slot_offset(self.current);
            let base = self.ring.base();
            // SAFETY: the header and the address after it lie inside the
            // slot (frame_size ≥ 2048 > address_at + sockaddr_ll), which
            // user space owns until its status goes back to the kernel;
            // plain integers, read unaligned.
            let (header, address) = unsafe {
                (
                    base.add(slot).cast::<libc::tpacket2_hdr>().read_unaligned(),
                    base.add(slot + address_at)
                        .cast::<libc::sockaddr_ll>()
                        .read_unaligned(),
                )
            };
            let start = usize::from(header.tp_mac);
            let len = header.tp_snaplen as usize;
            if start + len <= self.frame_size {
                if address.sll_pkttype == libc::PACKET_OUTGOING {
                    self.stats.outgoing += 1;
                } else {
                    // SAFETY: `[start, start + len)` lies inside the slot
                    // (checked), which user space owns until the status
                    // store below; the slice does not outlive the callback.
                    let data = unsafe { std::slice::from_raw_parts(base.add(slot + start), len) };
                    let vlan_tag =
                        (header.tp_status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
                            let tpid = if header.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                                header.tp_vlan_tpid
                            } else {
                                0x8100
                            };
                            (tpid, header.tp_vlan_tci)
                        });
                    let packet = RxPacket {
                        data,
                        wire_len: header.tp_len as usize,
                        vlan_tag,
                        timestamp: Duration::new(
                            u64::from(header.tp_sec),
                            header.tp_nsec.min(999_999_999),
                        ),
                        rx_hash: 0,
                    };
                    self.give(packet, on_packet);
                    given += 1;
                }
            }
            // Release: our reads of the slot happen before the kernel may
            // refill it (it checks the status before writing).
            self.slot_status(self.current)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.stats.blocks += 1;
            self.current = (self.current + 1) % self.frames;
        }
        given
    }

    /// Walks every V3 block the kernel handed over (at most the whole
    /// ring), giving each packet to `on_packet`, then the block back to the
    /// kernel. Returns how many packets were given.
    fn drain_v3(&mut self, on_packet: &mut dyn FnMut(RxPacket<'_>)) -> usize {
        let mut given = 0;
        for _ in 0..self.blocks {
            // Acquire: pairs with the kernel's write barrier before it sets
            // TP_STATUS_USER, so the block's packets are visible.
            if self.block_status(self.current).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            let block = self.current * self.block_size;
            let base = self.ring.base();
            let read_u32 = |offset: usize| -> u32 {
                // SAFETY: callers pass offsets inside the current block
                // (checked against block_size below), which belongs to
                // user space until its status goes back to the kernel; an
                // unaligned read copes with any offset.
                unsafe { base.add(block + offset).cast::<u32>().read_unaligned() }
            };
            let packets = read_u32(BLOCK_NUM_PKTS);
            let mut offset = read_u32(BLOCK_FIRST_PKT) as usize;
            for _ in 0..packets {
                let header_len = std::mem::size_of::<libc::tpacket3_hdr>();
                let address_at = header_len.next_multiple_of(libc::TPACKET_ALIGNMENT);
                if offset + address_at + std::mem::size_of::<libc::sockaddr_ll>() > self.block_size
                {
                    break;
                }
                // SAFETY: the header lies inside the block (checked just
                // above); tpacket3_hdr is plain integers, read unaligned.
                let header: libc::tpacket3_hdr = unsafe {
                    base.add(block + offset)
                        .cast::<libc::tpacket3_hdr>()
                        .read_unaligned()
                };
                // SAFETY: the sockaddr_ll follows the aligned header inside
                // the block (checked above); plain integers.
                let address: libc::sockaddr_ll = unsafe {
                    base.add(block + offset + address_at)
                        .cast::<libc::sockaddr_ll>()
                        .read_unaligned()
                };
                let start = offset + usize::from(header.tp_mac);
                let len = header.tp_snaplen as usize;
                if start + len <= self.block_size {
                    if address.sll_pkttype == libc::PACKET_OUTGOING {
                        self.stats.outgoing += 1;
                    } else {
                        // SAFETY: `[start, start + len)` lies inside the
                        // block (checked), which user space owns until the
                        // status store below; the slice does not outlive
                        // the callback.
                        let data =
                            unsafe { std::slice::from_raw_parts(base.add(block + start), len) };
                        let vlan_tag =
                            (header.tp_status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
                                let tpid =
                                    if header.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                                        header.hv1.tp_vlan_tpid
                                    } else {
                                        0x8100
                                    };
                                (tpid, header.hv1.tp_vlan_tci as u16)
                            });
                        let packet = RxPacket {
                            data,
                            wire_len: header.tp_len as usize,
                            vlan_tag,
                            timestamp: Duration::new(
                                u64::from(header.tp_sec),
                                header.tp_nsec.min(999_999_999),
                            ),
                            rx_hash: header.hv1.tp_rxhash,
                        };
                        self.give(packet, on_packet);
                        given += 1;
                    }
                }
                if header.tp_next_offset == 0 {
                    break;
                }
                offset += header.tp_next_offset as usize;
            }
            // Release: our reads of the block happen before the kernel may
            // refill it (it checks the status before writing).
            self.block_status(self.current)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.stats.blocks += 1;
            self.current = (self.current + 1) % self.blocks;
        }
        given
    }

    /// Gives every received packet to `on_packet`, waiting up to `timeout`
    /// for the first block when none is ready (less once a latch it waits
    /// on is raised, [`PacketRx::stop_waits_on`]). Returns how many packets
    /// were given (0 after a timeout or a raise). [`IoError::LinkLost`] when the
    /// interface went down or away and every packet received before was
    /// given; from then on every call that finds the ring empty says so
    /// again (reopen the socket once the interface is back).
    pub fn recv_with(
        &mut self,
        timeout: Duration,
        mut on_packet: impl FnMut(RxPacket<'_>),
    ) -> Result<usize, IoError> {
        let given = self.drain(&mut on_packet);
        if given > 0 {
            return Ok(given);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(errno) = self.link_lost {
                return Err(IoError::LinkLost {
                    interface: self.interface.clone(),
                    source: std::io::Error::from_raw_os_error(errno),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let stop = self.stop.as_ref().map(|l| l.raw_fd());
            let ready = sys::poll(self.fd.as_raw_fd(), libc::POLLIN, stop, left)?;
            if ready.error {
                if let Some(error) = sys::take_socket_error(&self.fd) {
                    match classify("receive", &self.interface, error) {
                        // Reported after the ring is drained (next turn).
                        IoError::LinkLost { source, .. } => {
                            self.link_lost = source.raw_os_error().or(Some(libc::ENETDOWN));
                        }
                        other => return Err(other),
                    }
                }
            }
            let given = self.drain(&mut on_packet);
            if given > 0 || ((left.is_zero() || ready.stopped) && self.link_lost.is_none()) {
                return Ok(given);
            }
        }
    }

    /// Makes every wait of [`PacketRx::recv_with`] (and the calls built on
    /// it) end at once, with what is ready, once `latch` is raised: a
    /// thread may then wait long for frames and still stop promptly.
    pub fn stop_waits_on(&mut self, latch: std::sync::Arc<crate::StopLatch>) {
        self.stop = Some(latch);
    }

    /// Receives like [`PacketRx::recv_with`], copying each packet into a
    /// frame of `pool` appended to `out`. A packet that finds no free frame
    /// or does not fit one is dropped and counted ([`RxStats`]).
    pub fn recv_into(
        &mut self,
        timeout: Duration,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
    ) -> Result<usize, IoError> {
        let arena = std::sync::Arc::clone(pool.arena());
        let mut no_frame = 0;
        let mut too_long = 0;
        let mut taken = 0;
        self.recv_with(timeout, |packet| {
            let Some(mut frame) = pool.alloc() else {
                no_frame += 1;
                return;
            };
            let copied = arena
                .buffer_mut(&mut frame)
                .ok()
                .and_then(|buffer| packet.copy_into(buffer));
            match copied.map(|len| arena.set_len(&mut frame, len)) {
                Some(Ok(())) => {
                    out.push(frame);
                    taken += 1;
                }
                _ => {
                    too_long += 1;
                    // The frame is this pool's own (just allocated): recycling
                    // cannot fail.
                    let _ = pool.recycle(frame);
                }
            }
        })?;
        self.stats.no_frame += no_frame;
        self.stats.too_long += too_long;
        Ok(taken)
    }
}

/// Options of the two senders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxConfig {
    /// Skip the kernel's qdisc (`PACKET_QDISC_BYPASS`).
    pub qdisc_bypass: bool,
    /// Frames in a [`PacketTxRing`] (default 256).
    pub ring_frames: usize,
    /// Bytes per TX ring frame, header included: a power of two from 2048
    /// (default 2048).
    pub ring_frame_size: usize,
    /// How long one flush of the TX ring may wait for the kernel (default
    /// 1 s): a bound, never reached while the link works.
    pub send_timeout: Duration,
}

impl Default for TxConfig {
    fn default() -> Self {
        Self {
            qdisc_bypass: false,
            ring_frames: 256,
            ring_frame_size: 2048,
            send_timeout: Duration::from_secs(1),
        }
    }
}

/// What a sender counted. Every frame given to a `send_batch` is counted
/// once: in `sent`, in `failed`, or not at all when the call returned a
/// count below the batch (the caller still holds those).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Frames the kernel took.
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames of calls that returned an error (not confirmed sent; on a TX
    /// ring some may have left before the error).
    pub failed: u64,
    /// Calls that sent nothing because the kernel had no room (ENOBUFS,
    /// EAGAIN, or a TX ring full of frames not yet sent).
    pub full: u64,
}

/// Opens a sending socket: its descriptor, the interface index and MTU.
fn open_sender(interface: &str, config: &TxConfig) -> Result<(OwnedFd, i32, usize), IoError> {
    let (fd, index) = open_bound_socket(interface)?;
    if config.qdisc_bypass {
        let on: libc::c_int = 1;
        sys::setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            &on,
            "set PACKET_QDISC_BYPASS",
        )?;
    }
    let mtu = mtu(&fd, interface)?;
    Ok((fd, index, mtu))
}

/// An AF_PACKET socket sending frames on one interface by `sendmmsg(2)`
/// (module docs).
#[derive(Debug)]
pub struct PacketTx {
    fd: OwnedFd,
    interface: String,
    limit: FrameLimit,
    stats: TxStats,
}

impl PacketTx {
    /// Opens a sending socket on `interface` (in the calling thread's
    /// network namespace).
    pub fn open(interface: &str, config: &TxConfig) -> Result<Self, IoError> {
        let (fd, index, mtu) = open_sender(interface, config)?;
        bind(&fd, interface, index, 0)?;
        Ok(Self {
            fd,
            interface: interface.to_owned(),
            limit: FrameLimit {
                mtu,
                ring_room: usize::MAX,
            },
            stats: TxStats::default(),
        })
    }

    /// The longest untagged frame this socket sends (the interface's MTU
    /// plus an Ethernet header; 4 bytes more for a VLAN-tagged frame).
    pub fn max_frame(&self) -> usize {
        self.limit.mtu + 14
    }

    /// What this socket counted.
    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// Sends up to [`MAX_BATCH`] frames from the front of `frames` in one
    /// system call; returns how many the kernel took (0 when it had no
    /// room). [`IoError::FrameTooLong`] when the first frame is longer than
    /// the link takes (a later one ends the batch before it). On any other
    /// error nothing of the batch was sent ([`TxStats::failed`]).
    pub fn send_batch(&mut self, frames: &[&[u8]]) -> Result<usize, IoError> {
        self.send(frames)
    }

    /// Sends pool frames like [`PacketTx::send_batch`], straight from the
    /// pool's memory (no copy); the tokens stay the caller's.
    pub fn send_frames(&mut self, arena: &FrameArena, frames: &[Frame]) -> Result<usize, IoError> {
        self.send(&PoolBatch::new(arena, frames)?)
    }

    /// Sends `frames[picks[0]]`, `frames[picks[1]]`, ... like
    /// [`PacketTx::send_frames`] (no copy): a frame named twice is sent
    /// twice (a duplicated packet); returns how many picks were sent.
    /// [`IoError::BadPick`] for a pick beyond `frames`.
    pub fn send_frames_picked(
        &mut self,
        arena: &FrameArena,
        frames: &[Frame],
        picks: &[u32],
    ) -> Result<usize, IoError> {
        self.send(&PickedBatch::new(arena, frames, picks)?)
    }

    fn send<B: Batch + ?Sized>(&mut self, batch: &B) -> Result<usize, IoError> {
        let offered = batch.count().min(MAX_BATCH);
        let count = self
            .limit
            .admit((0..offered).map(|i| batch.frame(i)), offered)?;
        if count == 0 {
            return Ok(0);
        }
        let sent = match sys::sendmmsg(self.fd.as_raw_fd(), (0..count).map(|i| batch.frame(i))) {
            Ok(sent) => sent,
            Err(error) if matches!(error.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => {
                self.stats.full += 1;
                return Ok(0);
            }
            Err(error) => {
                self.stats.failed += count as u64;
                return Err(classify("sendmmsg", &self.interface, error));
            }
        };
        self.stats.sent += sent as u64;
        self.stats.bytes += (0..sent).map(|i| batch.frame(i).len() as u64).sum::<u64>();
        Ok(sent)
    }
}

/// An AF_PACKET socket sending frames on one interface through a mapped
/// TPACKET_V2 TX ring (module docs).
pub struct PacketTxRing {
    // Unmapped before the socket closes (fields drop in this order).
    ring: RingMap,
    fd: OwnedFd,
    interface: String,
    frame_size: usize,
    frames: usize,
    next: usize,
    limit: FrameLimit,
    stats: TxStats,
}

impl std::fmt::Debug for PacketTxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketTxRing")
            .field("interface", &self.interface)
            .field("frames", &self.frames)
            .field("frame_size", &self.frame_size)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Where a TX ring frame's data starts: after the TPACKET_V2 header,
/// aligned (packet_mmap.rst: `tp_hdrlen - sizeof(struct sockaddr_ll)`).
const TX_DATA_OFFSET: usize =
    std::mem::size_of::<libc::tpacket2_hdr>().next_multiple_of(libc::TPACKET_ALIGNMENT);

impl PacketTxRing {
    /// Opens a sending socket with a TX ring on `interface` (in the calling
    /// thread's network namespace).
    pub fn open(interface: &str, config: &TxConfig) -> Result<Self, IoError> {
        let frame_size = config.ring_frame_size;
        if !frame_size.is_power_of_two()
            || !(2048..=1 << 16).contains(&frame_size)
            || config.ring_frames == 0
            || config.ring_frames > 1 << 16
        {
            return Err(IoError::BadConfig(format!(
                "TX ring of {} frames of {frame_size} bytes: frames must be a power of two from \
                 2048 to 65536 bytes, 1 to 65536 of them",
                config.ring_frames
            )));
        }
        let (fd, index, mtu) = open_sender(interface, config)?;
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        sys::setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
            "select TPACKET_V2",
        )?;
        // One block per 64 KiB (or per frame when frames are larger); the
        // frame count is rounded up to whole blocks.
        let block_size = frame_size.max(1 << 16);
        let per_block = block_size / frame_size;
        let blocks = config.ring_frames.div_ceil(per_block);
        let frames = blocks * per_block;
        let request = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: frames as u32,
        };
        sys::setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_TX_RING,
            &request,
            "set up the TX ring",
        )?;
        let timeout = libc::timeval {
            tv_sec: config.send_timeout.as_secs() as libc::time_t,
            tv_usec: config.send_timeout.subsec_micros() as libc::suseconds_t,
        };
        sys::setsockopt(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            &timeout,
            "set SO_SNDTIMEO",
        )?;
        let ring = RingMap::new(&fd, block_size * blocks)?;
        bind(&fd, interface, index, 0)?;
        Ok(Self {
            fd,
            ring,
            interface: interface.to_owned(),
            frame_size,
            frames,
            next: 0,
            limit: FrameLimit {
                mtu,
                ring_room: frame_size - TX_DATA_OFFSET,
            },
            stats: TxStats::default(),
        })
    }

    /// The longest untagged frame this ring sends (the interface's MTU
    /// plus an Ethernet header, at most what a ring frame holds).
    pub fn max_frame(&self) -> usize {
        (self.limit.mtu + 14).min(self.limit.ring_room)
    }

    /// What this socket counted.
    pub fn stats(&self) -> TxStats {
        self.stats
    }

    /// The status word of ring frame `index`, shared with the kernel.
    fn status(&self, index: usize) -> &AtomicU32 {
        debug_assert!(index < self.frames);
        // SAFETY: frame `index` lies inside the mapping (index < frames and
        // blocks hold whole frames back to back), its first field
        // `tp_status` is an aligned u32 the kernel accesses as one word, so
        // an atomic view is sound while `self` lives.
        unsafe { &*self.ring.base().add(index * self.frame_size).cast() }
    }

    /// Writes up to [`MAX_BATCH`] frames from the front of `frames` into
    /// the ring and has the kernel send them; returns how many it sent (0
    /// when the ring had no free slot). [`IoError::FrameTooLong`] when the
    /// first frame is longer than the link takes (a later one ends the
    /// batch before it).
    pub fn send_batch(&mut self, frames: &[&[u8]]) -> Result<usize, IoError> {
        self.send(frames)
    }

    /// Sends pool frames like [`PacketTxRing::send_batch`] (one copy, into
    /// the ring); the tokens stay the caller's.
    pub fn send_frames(&mut self, arena: &FrameArena, frames: &[Frame]) -> Result<usize, IoError> {
        self.send(&PoolBatch::new(arena, frames)?)
    }

    /// Sends `frames[picks[0]]`, `frames[picks[1]]`, ... like
    /// [`PacketTxRing::send_frames`]: a frame named twice is copied into
    /// the ring twice (a duplicated packet); returns how many picks were
    /// sent. [`IoError::BadPick`] for a pick beyond `frames`.
    pub fn send_frames_picked(
        &mut self,
        arena: &FrameArena,
        frames: &[Frame],
        picks: &[u32],
    ) -> Result<usize, IoError> {
        self.send(&PickedBatch::new(arena, frames, picks)?)
    }

    fn send<B: Batch + ?Sized>(&mut self, batch: &B) -> Result<usize, IoError> {
        let offered = batch.count().min(MAX_BATCH);
        let admitted = self
            .limit
            .admit((0..offered).map(|i| batch.frame(i)), offered)?;
        let mut queued = 0;
        let mut bytes = 0u64;
        while queued < admitted {
            let frame = batch.frame(queued);
            let slot = self.next;
            // Acquire: pairs with the kernel's release of the slot after it
            // sent the frame (TP_STATUS_AVAILABLE), so our writes below do
            // not race its reads. WRONG_FORMAT slots are ours too.
            let status = self.status(slot).load(Ordering::Acquire);
            if status != libc::TP_STATUS_AVAILABLE && status != libc::TP_STATUS_WRONG_FORMAT {
                break;
            }
            let base = self.ring.base();
            // SAFETY: the slot is ours (status checked above), its data area
            // `[TX_DATA_OFFSET, TX_DATA_OFFSET + len)` fits in the frame
            // (admit: len ≤ ring_room = frame_size - TX_DATA_OFFSET), and
            // the kernel does not read it before the SEND_REQUEST store
            // below.
            unsafe {
                let at = base.add(slot * self.frame_size);
                std::ptr::copy_nonoverlapping(frame.as_ptr(), at.add(TX_DATA_OFFSET), frame.len());
                let header = at.cast::<libc::tpacket2_hdr>();
                std::ptr::addr_of_mut!((*header).tp_len).write(frame.len() as u32);
                std::ptr::addr_of_mut!((*header).tp_snaplen).write(frame.len() as u32);
            }
            // Release: the data and length written above are visible to the
            // kernel before it sees the request.
            self.status(slot)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.next = (self.next + 1) % self.frames;
            queued += 1;
            bytes += frame.len() as u64;
        }
        if queued == 0 {
            if admitted > 0 {
                self.stats.full += 1;
            }
            return Ok(0);
        }
        // A blocking send(2) of nothing: the kernel sends every requested
        // frame and waits (at most SO_SNDTIMEO) until they left.
        // SAFETY: no buffer is passed; the ring holds the data.
        let rc = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, 0) };
        if rc < 0 {
            let error = std::io::Error::last_os_error();
            self.stats.failed += queued as u64;
            return Err(classify("send from the TX ring", &self.interface, error));
        }
        self.stats.sent += queued as u64;
        self.stats.bytes += bytes;
        Ok(queued)
    }
}
