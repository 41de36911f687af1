//! AF_XDP sockets (cargo feature `xdp`): raw Ethernet frames of one
//! interface queue through rings shared with the kernel, the frames in one
//! registered memory area (the UMEM), steered to the socket by a small XDP
//! program this module assembles and loads at run time.
//!
//! Turn it on with `cargo build --features pspat-io/xdp` in the workspace,
//! or `pspat-io = { ..., features = ["xdp"] }` in a crate's manifest;
//! without the feature none of this is compiled. Nothing is compiled to
//! BPF at build time and no C library is linked: the program is six
//! instructions written as constants and loaded with the `bpf(2)` system
//! call (see *The redirect program* below).
//!
//! Sources: the kernel's `Documentation/networking/af_xdp.rst` (UMEM,
//! rings, bind flags, `XDP_USE_NEED_WAKEUP`, `XDP_STATISTICS`),
//! `include/uapi/linux/if_xdp.h` (structures, socket options, mmap
//! offsets), `net/xdp/xsk.c` and `net/xdp/xsk_queue.h` (the ring protocol,
//! the copy-mode transmit budget, which errno means what).
//!
//! # What [`XdpSocket::open`] sets up
//!
//! * The UMEM: one private, page-aligned mapping of
//!   [`XdpConfig::frames`] frames of [`XdpConfig::frame_size`] bytes (2048
//!   or 4096), registered with `XDP_UMEM_REG`. The first half of the
//!   frames receive (they start in the fill ring), the second half
//!   transmit (they start on a free list). Nothing is allocated per frame.
//! * Four rings of [`XdpConfig::ring_size`] entries, mapped at the offsets
//!   `XDP_MMAP_OFFSETS` gives: fill (frame addresses this process lends
//!   the kernel for reception), RX (descriptors of received frames),
//!   TX (descriptors of frames to send) and completion (addresses of sent
//!   frames coming back). Each index has one writer: this process
//!   produces into fill and TX, the kernel into RX and completion. Every
//!   index this process reads is an Acquire load pairing with the
//!   kernel's release of it (the entries, and the frame bytes an RX
//!   descriptor points to, are visible); every index it writes is a
//!   Release store pairing with the kernel's acquire (entries written, or
//!   reads of given-back slots done, before the index moves). Before it
//!   reads a ring's need-wakeup flag after publishing, a full fence pairs
//!   with the kernel's barrier between setting the flag and its last look
//!   at the ring (`xdp/ring.rs` has the details).
//! * An [`XdpProgram`] attached to the interface (mode
//!   [`XdpConfig::attach`]) whose XSKMAP holds this socket at its queue,
//!   and the socket bound to (interface, queue) with `XDP_COPY`, or
//!   `XDP_ZEROCOPY` when [`XdpConfig::zero_copy`] asks.
//!
//! # The redirect program
//!
//! | # | instruction              | meaning                                            |
//! |---|--------------------------|----------------------------------------------------|
//! | 0 | `r2 = *(u32 *)(r1 + 16)` | the frame's queue (`xdp_md.rx_queue_index`)        |
//! | 1 | `r1 = map_fd` (2 slots)  | the XSKMAP, its descriptor patched in at load time |
//! | 3 | `r3 = 2`                 | `XDP_PASS`, the verdict when the slot is empty     |
//! | 4 | `call 51`                | `r0 = bpf_redirect_map(r1, r2, r3)`                |
//! | 5 | `exit`                   | return `r0`                                        |
//!
//! Loaded with `BPF_PROG_LOAD` (type XDP, license "Dual BSD/GPL"; a
//! refusal carries the verifier log's last lines,
//! [`XdpError::VerifierRefused`]) and attached with `BPF_LINK_CREATE`
//! (attach type `BPF_XDP`, driver or skb flags): the link's descriptor is
//! the attachment, so dropping the socket, or the process ending or
//! panicking, detaches it; no program stays on the interface.
//!
//! # Receiving and sending
//!
//! * [`XdpSocket::recv_with`] gives every frame the RX ring holds (at most
//!   [`XdpConfig::max_batch`]) to a closure, borrowed from the UMEM, then
//!   lends each frame back to the kernel through the fill ring; it waits
//!   up to a timeout with `poll(2)` when the ring is empty. O(1) per frame.
//! * [`XdpSocket::send_batch`] copies frames into free TX frames, queues
//!   their descriptors, and kicks the kernel with `sendto(2)`. Sent frames
//!   come back through the completion ring, reaped at each send and by
//!   [`XdpSocket::complete`]. Every frame given is counted once: queued
//!   (then completed or in flight, [`XdpSocket::in_flight`]), refused with
//!   an error ([`XdpStats::tx_failed`]), or left to the caller when the
//!   returned count is below the batch.
//! * [`XdpSocket::recv_into`] copies each received frame into a
//!   [`FramePool`] frame (the frame pool's one copy, as
//!   [`crate::PacketRx::recv_into`]); [`XdpSocket::send_frames_picked`]
//!   sends arena frames by index, a frame named twice sent twice, one copy
//!   each into a UMEM TX frame (as [`crate::PacketTx::send_frames_picked`]).
//! * [`XdpSender`] only sends: the same UMEM, rings and bind, but no
//!   program, so the interface's received traffic still reaches the
//!   kernel's stack (and AF_PACKET sockets). It still takes its queue.
//! * A socket whose interface goes away reports [`IoError::LinkLost`]
//!   (inside [`XdpError::Io`]) from the next receive (once the ring is
//!   drained) or send, and from every call after: open a new socket once
//!   the interface is back.
//! * With `XDP_USE_NEED_WAKEUP` (on by default,
//!   [`XdpConfig::need_wakeup`]) the kernel sets a flag on the fill and TX
//!   rings when it wants a system call to go on; this socket makes the
//!   call only then (`sendto` for TX, `recvfrom` for fill), and on every
//!   send without the option.
//!
//! # Modes and their costs
//!
//! * Copy mode (`XDP_COPY`, the default) works on every interface: the
//!   kernel copies each received frame into a UMEM frame and builds a
//!   socket buffer for each sent one (TX in copy mode always goes through
//!   the kernel's transmit path, at most 32 frames per `sendto`, so a
//!   batch may take several kicks). The program may run in driver mode
//!   (before any socket buffer exists: one copy per frame) or skb mode
//!   (after the kernel built a socket buffer: an allocation and a copy per
//!   frame).
//! * Zero-copy (`XDP_ZEROCOPY`) needs a driver that places frames straight
//!   into the UMEM (its `ndo_xsk_wakeup` and XSK pool support: i40e, ice,
//!   mlx5, ixgbe and a few others) and the program in driver mode; veth
//!   has neither, and the bind then fails with
//!   [`XdpError::ZeroCopyUnsupported`]. [`XdpSocket::zero_copy`] says
//!   what the kernel granted (`XDP_OPTIONS`).
//! * veth: driver mode works for reception on the end that has the
//!   program, with nothing needed on the peer (the peer needs an XDP
//!   program of its own, or GRO, only for frames *redirected into* it with
//!   `XDP_REDIRECT`/`XDP_TX`, which this module never does: its TX goes
//!   through the ordinary transmit path).
//!
//! # Limits
//!
//! * One socket per interface: each socket attaches its own program, so a
//!   second socket on another queue of the same interface gets
//!   [`XdpError::InterfaceBusy`] (a shared program for several queues is
//!   not built yet).
//! * A received frame may be at most `frame_size - 256` bytes (the
//!   kernel's `XDP_PACKET_HEADROOM` precedes it; longer frames are dropped
//!   by the kernel); a sent one at most the MTU plus the Ethernet header
//!   (4 more bytes when VLAN-tagged) and at most `frame_size`.
//! * Needs root (CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW) and Linux 5.13 or
//!   later (BPF links for XDP, the fallback verdict of
//!   `bpf_redirect_map`).
//! * A dropped socket detaches its program at once; frames still in the
//!   TX ring when it drops are discarded by the kernel.
mod program;
mod ring;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

pub use program::{AttachMode, XdpProgram};

use crate::af_packet::FrameLimit;
use crate::error::{classify, IoError};
use crate::frames::{Frame, FrameArena, FramePool};
use crate::sys::{self, RingMap};
use ring::{MmapOffsets, Ring};

// Socket level, options and bind flags (uapi if_xdp.h).
const SOL_XDP: i32 = 283;
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_OPTIONS: i32 = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_PGOFF_RX_RING: u64 = 0;
const XDP_PGOFF_TX_RING: u64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: u64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: u64 = 0x1_8000_0000;
/// Room the kernel leaves before a received frame in its UMEM frame.
const XDP_PACKET_HEADROOM: usize = 256;
/// Frames copy-mode TX sends per `sendto` (`TX_BATCH_SIZE`, net/xdp/xsk.c).
const COPY_TX_BUDGET: usize = 32;
/// `SIOCETHTOOL` and `ETHTOOL_GCHANNELS` (uapi sockios.h, ethtool.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// Why an AF_XDP socket could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// The errors every socket back end shares: no such interface, down,
    /// bad name, permission, bad configuration, a frame too long, the link
    /// lost, another system error.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The interface has no such queue (or one the socket cannot bind).
    #[error("interface {interface:?} has no queue {queue}{}", match .queues {
        Some(n) => format!(" (it has {n})"),
        None => String::new(),
    })]
    NoSuchQueue {
        /// The interface.
        interface: String,
        /// The queue asked for.
        queue: u32,
        /// How many queues it has, when the driver says.
        queues: Option<u32>,
    },
    /// The queue already has an AF_XDP socket (of this or another
    /// process). The kernel lets go of a closed socket's queue in deferred
    /// work, so a socket reopened on a queue just closed may see this for
    /// a moment: retry briefly.
    #[error("queue {queue} of {interface:?} already has an AF_XDP socket")]
    QueueBusy {
        /// The interface.
        interface: String,
        /// The queue.
        queue: u32,
    },
    /// The driver does not offer zero-copy on this interface.
    #[error("interface {interface:?} does not offer AF_XDP zero-copy: {source}")]
    ZeroCopyUnsupported {
        /// The interface.
        interface: String,
        /// The bind's error.
        source: io::Error,
    },
    /// The verifier refused the program; `log` holds the last lines of
    /// its log.
    #[error("the kernel refused the XDP program ({source}); verifier log:\n{log}")]
    VerifierRefused {
        /// The last lines of the verifier's log.
        log: String,
        /// The load's error.
        source: io::Error,
    },
    /// Another XDP program (or link) is attached to the interface.
    #[error("interface {interface:?} already has an XDP program attached")]
    InterfaceBusy {
        /// The interface.
        interface: String,
    },
    /// The interface refused the program in this mode (a driver without
    /// native XDP refuses driver mode; `AttachMode::Auto` then falls back
    /// to skb mode).
    #[error("interface {interface:?} refused the XDP program in {mode} mode: {source}")]
    AttachRefused {
        /// The interface.
        interface: String,
        /// The mode tried.
        mode: AttachMode,
        /// The attach's error.
        source: io::Error,
    },
    /// The kernel refused to set up or map a ring (or gave offsets this
    /// module cannot use).
    #[error("the kernel refused the AF_XDP {what}: {source}")]
    RingsRefused {
        /// Which ring or step.
        what: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// A frame shorter than an Ethernet header.
    #[error("frame of {len} bytes is shorter than an Ethernet header")]
    FrameTooShort {
        /// The frame's length.
        len: usize,
    },
}

/// Geometry and options of an [`XdpSocket`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    /// Frames in the UMEM (default 4096), an even number from 2 to
    /// 2^20: half receive, half transmit.
    pub frames: u32,
    /// Bytes per frame: 2048 (default) or 4096.
    pub frame_size: u32,
    /// Entries of each of the four rings: a power of two from 1 to
    /// 2^16, at least half the frames (default 2048).
    pub ring_size: u32,
    /// Bind with `XDP_ZEROCOPY` instead of `XDP_COPY` (default false).
    pub zero_copy: bool,
    /// Bind with `XDP_USE_NEED_WAKEUP` (default true).
    pub need_wakeup: bool,
    /// How the redirect program attaches (default [`AttachMode::Auto`]).
    pub attach: AttachMode,
    /// The most frames one receive call gives (1 to the ring size;
    /// default 256).
    pub max_batch: u32,
}

impl Default for XdpConfig {
    fn default() -> Self {
        Self {
            frames: 4096,
            frame_size: 2048,
            ring_size: 2048,
            zero_copy: false,
            need_wakeup: true,
            attach: AttachMode::Auto,
            max_batch: 256,
        }
    }
}

impl XdpConfig {
    fn check(&self) -> Result<(), XdpError> {
        let ok = matches!(self.frame_size, 2048 | 4096)
            && (2..=1 << 20).contains(&self.frames)
            && self.frames.is_multiple_of(2)
            && self.ring_size.is_power_of_two()
            && self.ring_size <= 1 << 16
            && self.ring_size >= self.frames / 2
            && (1..=self.ring_size).contains(&self.max_batch);
        if ok {
            return Ok(());
        }
        Err(XdpError::Io(IoError::BadConfig(format!(
            "AF_XDP socket of {} frames of {} bytes, rings of {} entries, {} frames per call: \
             frames must be 2048 or 4096 bytes, an even count from 2 to 2^20; rings a power of \
             two up to 65536 holding at least half the frames; 1 to ring-size frames per call",
            self.frames, self.frame_size, self.ring_size, self.max_batch
        ))))
    }
}

/// What an [`XdpSocket`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames given to the caller.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// RX descriptors pointing outside the UMEM (skipped; never seen from
    /// a working kernel).
    pub rx_invalid: u64,
    /// Frames [`XdpSocket::recv_into`] dropped for want of a free pool
    /// frame.
    pub rx_no_frame: u64,
    /// Frames [`XdpSocket::recv_into`] dropped because they did not fit a
    /// pool frame.
    pub rx_too_long: u64,
    /// Frames queued on the TX ring.
    pub tx_queued: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Queued frames the kernel reported sent (completion ring).
    pub tx_completed: u64,
    /// Frames refused with an error (too long, too short): not queued.
    pub tx_failed: u64,
    /// Send calls that queued nothing for want of a free TX frame or ring
    /// slot.
    pub tx_full: u64,
    /// `sendto(2)` kicks made.
    pub tx_kicks: u64,
    /// `recvfrom(2)` kicks made for the fill ring.
    pub fill_kicks: u64,
}

/// The kernel's counters of an AF_XDP socket (`XDP_STATISTICS`, since the
/// socket opened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct XdpKernelStats {
    /// Frames dropped for other reasons (a frame too long for a UMEM
    /// frame, among others).
    pub rx_dropped: u64,
    /// Fill descriptors the kernel found invalid.
    pub rx_invalid_descs: u64,
    /// TX descriptors the kernel found invalid.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty when woken.
    pub tx_ring_empty_descs: u64,
}

/// `struct xdp_desc`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct XdpDesc {
    addr: u64,
    len: u32,
    options: u32,
}

/// `struct xdp_umem_reg` (Linux 6.8 layout; older kernels read the first
/// 28 bytes, the rest being zero).
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// `struct sockaddr_xdp`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// `struct ethtool_channels`.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// An AF_XDP socket on one queue of one interface, with its UMEM, rings
/// and redirect program (module docs).
pub struct XdpSocket {
    // Drop order: the program first (detached: no more frames steered
    // here), then the rings are unmapped, the socket closed, and last the
    // UMEM unmapped, once the kernel let go of it.
    /// `None` for a sending-only socket ([`XdpSender`]).
    program: Option<XdpProgram>,
    /// The mode the program runs in (the configured one, unused, for a
    /// sending-only socket).
    mode: AttachMode,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    fill: Ring<u64>,
    completion: Ring<u64>,
    fd: OwnedFd,
    umem: RingMap,
    interface: String,
    queue: u32,
    frame_size: u32,
    /// Addresses of the TX frames not in the kernel's hands (capacity
    /// fixed at open: half the frames).
    tx_free: Vec<u64>,
    tx_frames: usize,
    /// First byte of the TX half of the UMEM.
    tx_base: u64,
    limit: FrameLimit,
    need_wakeup: bool,
    zero_copy: bool,
    max_batch: u32,
    stats: XdpStats,
    /// The errno that reported the link lost, kept so that every later
    /// call reports it again.
    link_lost: Option<i32>,
    /// Ends a wait at once once raised ([`XdpSocket::stop_waits_on`]).
    stop: Option<std::sync::Arc<crate::StopLatch>>,
}

impl std::fmt::Debug for XdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpSocket")
            .field("interface", &self.interface)
            .field("queue", &self.queue)
            .field("mode", &self.mode)
            .field("redirects", &self.program.is_some())
            .field("zero_copy", &self.zero_copy)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Opens an AF_XDP socket.
fn xdp_socket() -> Result<OwnedFd, XdpError> {
    // SAFETY: socket(2) takes plain integers and returns a new descriptor
    // or -1; nothing is borrowed.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let error = io::Error::last_os_error();
        return Err(XdpError::Io(match error.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => IoError::PermissionDenied {
                operation: "open an AF_XDP socket (needs CAP_NET_RAW)",
            },
            _ => IoError::Os {
                operation: "open an AF_XDP socket",
                source: error,
            },
        }));
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The interface's queue count as its driver reports it
/// (`ETHTOOL_GCHANNELS`: receive or combined channels, and transmit or
/// combined, the smaller), or `None` when it reports none.
fn queue_count(probe: &OwnedFd, interface: &str) -> Option<u32> {
    let c_name = sys::interface_name(interface).ok()?;
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    // SAFETY: an all-zero ifreq is valid (a byte array and a union of
    // integers and pointers).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(c_name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    request.ifr_ifru.ifru_data = (&mut channels as *mut EthtoolChannels).cast();
    // SAFETY: SIOCETHTOOL reads the NUL-terminated name and the command
    // at `ifru_data`, and writes an ethtool_channels there; both live
    // across the call.
    let rc = unsafe { libc::ioctl(probe.as_raw_fd(), SIOCETHTOOL as _, &mut request) };
    if rc < 0 {
        return None;
    }
    let rx = channels.rx_count + channels.combined_count;
    let tx = channels.tx_count + channels.combined_count;
    let queues = rx.min(tx);
    (queues > 0).then_some(queues)
}

impl XdpSocket {
    /// Opens a socket on queue `queue` of `interface` (in the calling
    /// thread's network namespace) with `config`'s geometry, and attaches
    /// the redirect program.
    pub fn open(interface: &str, queue: u32, config: &XdpConfig) -> Result<Self, XdpError> {
        Self::open_inner(interface, queue, config, true)
    }

    /// Opens the socket; with `redirect` false no program is attached, so
    /// nothing reaches its RX ring and the interface's traffic passes to
    /// the kernel's stack as before ([`XdpSender`]).
    fn open_inner(
        interface: &str,
        queue: u32,
        config: &XdpConfig,
        redirect: bool,
    ) -> Result<Self, XdpError> {
        config.check()?;
        sys::interface_name(interface)?;
        // Interface ioctls go through an ordinary UDP socket: an AF_XDP
        // socket answers none.
        let probe = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
        let (ifindex, flags) = sys::interface_index_and_flags(&probe, interface)?;
        if flags & libc::IFF_UP == 0 {
            return Err(IoError::InterfaceDown(interface.to_owned()).into());
        }
        let ifindex = ifindex as u32;
        let mtu = crate::af_packet::mtu(&probe, interface)?;
        let queues = queue_count(&probe, interface);
        if let Some(queues) = queues.filter(|&n| queue >= n) {
            return Err(XdpError::NoSuchQueue {
                interface: interface.to_owned(),
                queue,
                queues: Some(queues),
            });
        }
        let fd = xdp_socket()?;
        let frame_size = config.frame_size as usize;
        let umem = RingMap::anonymous(
            config.frames as usize * frame_size,
            "map the AF_XDP frame area (mmap)",
        )?;
        let registration = UmemReg {
            addr: umem.base() as u64,
            len: umem.len() as u64,
            chunk_size: config.frame_size,
            ..UmemReg::default()
        };
        let refused = |what: &'static str| {
            move |error: IoError| match error {
                IoError::Os { source, .. } => XdpError::RingsRefused { what, source },
                other => XdpError::Io(other),
            }
        };
        sys::setsockopt(
            &fd,
            SOL_XDP,
            XDP_UMEM_REG,
            &registration,
            "register the frame area (XDP_UMEM_REG)",
        )
        .map_err(refused("frame area (XDP_UMEM_REG)"))?;
        for (option, what) in [
            (XDP_UMEM_FILL_RING, "fill ring"),
            (XDP_UMEM_COMPLETION_RING, "completion ring"),
            (XDP_RX_RING, "RX ring"),
            (XDP_TX_RING, "TX ring"),
        ] {
            sys::setsockopt(
                &fd,
                SOL_XDP,
                option,
                &config.ring_size,
                "size an AF_XDP ring",
            )
            .map_err(refused(what))?;
        }
        let offsets: MmapOffsets = sys::getsockopt(
            &fd,
            SOL_XDP,
            XDP_MMAP_OFFSETS,
            "read the ring offsets (XDP_MMAP_OFFSETS)",
        )
        .map_err(refused("ring offsets (XDP_MMAP_OFFSETS)"))?;
        let size = config.ring_size;
        let rx = Ring::map(&fd, offsets.rx, size, XDP_PGOFF_RX_RING, false, "RX ring")?;
        let tx = Ring::map(&fd, offsets.tx, size, XDP_PGOFF_TX_RING, true, "TX ring")?;
        let mut fill = Ring::map(
            &fd,
            offsets.fill,
            size,
            XDP_UMEM_PGOFF_FILL_RING,
            true,
            "fill ring",
        )?;
        let completion = Ring::map(
            &fd,
            offsets.completion,
            size,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            false,
            "completion ring",
        )?;
        // The receiving half goes to the kernel through the fill ring
        // before the bind, so that the first frame finds a buffer.
        let half = config.frames / 2;
        for i in 0..half {
            fill.write(i, u64::from(i) * u64::from(config.frame_size));
        }
        fill.produce(half);
        let tx_base = u64::from(half) * u64::from(config.frame_size);
        let mut tx_free = Vec::with_capacity(half as usize);
        tx_free.extend(
            (0..u64::from(half))
                .rev()
                .map(|i| tx_base + i * u64::from(config.frame_size)),
        );

        let program = if redirect {
            Some(XdpProgram::attach(
                interface,
                ifindex,
                config.attach,
                queues.unwrap_or(queue + 1).max(queue + 1),
            )?)
        } else {
            None
        };
        let mode = program.as_ref().map_or(config.attach, XdpProgram::mode);
        let mut bind_flags = if config.zero_copy {
            XDP_ZEROCOPY
        } else {
            XDP_COPY
        };
        if config.need_wakeup {
            bind_flags |= XDP_USE_NEED_WAKEUP;
        }
        let address = SockaddrXdp {
            family: libc::AF_XDP as u16,
            flags: bind_flags,
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // SAFETY: `address` is a live sockaddr_xdp of the length passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&address as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            let error = io::Error::last_os_error();
            return Err(match error.raw_os_error() {
                Some(libc::EBUSY) => XdpError::QueueBusy {
                    interface: interface.to_owned(),
                    queue,
                },
                Some(libc::EOPNOTSUPP | libc::EINVAL | libc::EPROTONOSUPPORT)
                    if config.zero_copy =>
                {
                    XdpError::ZeroCopyUnsupported {
                        interface: interface.to_owned(),
                        source: error,
                    }
                }
                Some(libc::EINVAL) if queues.is_none() => XdpError::NoSuchQueue {
                    interface: interface.to_owned(),
                    queue,
                    queues: None,
                },
                _ => classify("bind the AF_XDP socket", interface, error).into(),
            });
        }
        if let Some(program) = &program {
            program.insert(queue, fd.as_raw_fd())?;
        }
        let options: u32 = sys::getsockopt(&fd, SOL_XDP, XDP_OPTIONS, "read XDP_OPTIONS")?;
        Ok(Self {
            program,
            mode,
            rx,
            tx,
            fill,
            completion,
            fd,
            umem,
            interface: interface.to_owned(),
            queue,
            frame_size: config.frame_size,
            tx_free,
            tx_frames: half as usize,
            tx_base,
            limit: FrameLimit {
                mtu,
                ring_room: frame_size,
            },
            need_wakeup: config.need_wakeup,
            zero_copy: options & XDP_OPTIONS_ZEROCOPY != 0,
            max_batch: config.max_batch,
            stats: XdpStats::default(),
            link_lost: None,
            stop: None,
        })
    }

    /// The interface this socket is bound to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The queue this socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// The mode the redirect program runs in (driver or skb).
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// Whether the kernel runs this socket in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// What this socket counted.
    pub fn stats(&self) -> XdpStats {
        self.stats
    }

    /// The longest untagged frame [`XdpSocket::send_batch`] sends.
    pub fn max_frame(&self) -> usize {
        (self.limit.mtu + 14).min(self.limit.ring_room)
    }

    /// The longest frame the kernel delivers whole (longer ones it drops,
    /// counting them in [`XdpKernelStats::rx_dropped`]).
    pub fn max_rx_frame(&self) -> usize {
        self.frame_size as usize - XDP_PACKET_HEADROOM
    }

    /// Frames queued for sending that the kernel has not reported sent.
    pub fn in_flight(&self) -> usize {
        self.tx_frames - self.tx_free.len()
    }

    /// The kernel's counters (`XDP_STATISTICS`).
    pub fn kernel_stats(&self) -> Result<XdpKernelStats, XdpError> {
        Ok(sys::getsockopt(
            &self.fd,
            SOL_XDP,
            XDP_STATISTICS,
            "read XDP_STATISTICS",
        )?)
    }

    /// Gives every frame the RX ring holds (at most `max_batch`) to
    /// `on_frame`, waiting up to `timeout` for the first when none is
    /// ready (less once a latch it waits on is raised,
    /// [`XdpSocket::stop_waits_on`]). Returns how many frames were given
    /// (0 after a timeout or a raise);
    /// [`IoError::LinkLost`] (inside [`XdpError::Io`]) when the interface
    /// went away and every frame received before was given; from then on
    /// every call says so again (open a new socket once the interface is
    /// back).
    pub fn recv_with(
        &mut self,
        timeout: Duration,
        mut on_frame: impl FnMut(&[u8]),
    ) -> Result<usize, XdpError> {
        let given = self.drain(&mut on_frame)?;
        if given > 0 {
            return Ok(given);
        }
        self.check_link()?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let stop = self.stop.as_ref().map(|l| l.raw_fd());
            let ready = sys::poll(self.fd.as_raw_fd(), libc::POLLIN, stop, left)?;
            let given = self.drain(&mut on_frame)?;
            if given > 0 {
                return Ok(given);
            }
            if ready.error || ready.stopped || left.is_zero() {
                // The kernel reports an unbound socket (its interface
                // gone) by the socket's error, not by poll's events.
                if let Some(error) = sys::take_socket_error(&self.fd) {
                    return Err(self.note_error("receive", error));
                }
                return Ok(0);
            }
        }
    }

    /// Makes every wait of [`XdpSocket::recv_with`] (and the calls built
    /// on it) end at once, with what is ready, once `latch` is raised
    /// (as [`crate::PacketRx::stop_waits_on`]).
    pub fn stop_waits_on(&mut self, latch: std::sync::Arc<crate::StopLatch>) {
        self.stop = Some(latch);
    }

    /// [`IoError::LinkLost`] once the link was reported lost.
    fn check_link(&self) -> Result<(), XdpError> {
        match self.link_lost {
            Some(errno) => Err(IoError::LinkLost {
                interface: self.interface.clone(),
                source: io::Error::from_raw_os_error(errno),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// Classifies a system error of this socket, remembering a lost link.
    fn note_error(&mut self, operation: &'static str, error: io::Error) -> XdpError {
        let error = classify(operation, &self.interface, error);
        if let IoError::LinkLost { source, .. } = &error {
            self.link_lost = source.raw_os_error().or(Some(libc::ENETDOWN));
        }
        error.into()
    }

    /// Hands the ready frames to `on_frame` and lends each back to the
    /// kernel through the fill ring.
    fn drain(&mut self, on_frame: &mut dyn FnMut(&[u8])) -> Result<usize, XdpError> {
        let ready = self.rx.ready().min(self.max_batch);
        if ready == 0 {
            return Ok(0);
        }
        // The fill ring has room for every receiving frame (ring_size ≥
        // frames / 2), so for every frame handed over; the min is a guard.
        let count = ready.min(self.fill.room());
        let chunk_mask = !(u64::from(self.frame_size) - 1);
        let umem_len = self.umem.len() as u64;
        let mut given = 0;
        for i in 0..count {
            let desc = self.rx.read(i);
            let frame = desc.addr & chunk_mask;
            let end = desc.addr.checked_add(u64::from(desc.len));
            let inside =
                end.is_some_and(|end| end <= umem_len && end <= frame + u64::from(self.frame_size));
            if inside {
                // SAFETY: `[addr, addr + len)` lies inside the UMEM and
                // inside one frame (checked); the kernel wrote it before
                // publishing the descriptor (Acquire in `ready`) and does
                // not touch the frame again until it comes back through
                // the fill ring below; the slice does not outlive the
                // callback.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        self.umem.base().add(desc.addr as usize),
                        desc.len as usize,
                    )
                };
                on_frame(bytes);
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += u64::from(desc.len);
                given += 1;
            } else {
                self.stats.rx_invalid += 1;
            }
            self.fill.write(i, frame);
        }
        self.rx.consume(count);
        self.fill.produce(count);
        if self.need_wakeup && self.fill.needs_wakeup() {
            self.kick_fill()?;
        }
        Ok(given)
    }

    /// Wakes the kernel to take fill-ring frames (`recvfrom` without
    /// waiting).
    fn kick_fill(&mut self) -> Result<(), XdpError> {
        self.stats.fill_kicks += 1;
        // SAFETY: a zero-length receive without buffers or address; the
        // kernel only looks at the rings.
        let rc = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let error = io::Error::last_os_error();
            if !matches!(
                error.raw_os_error(),
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)
            ) {
                return Err(self.note_error("wake the fill ring (recvfrom)", error));
            }
        }
        Ok(())
    }

    /// Takes back the TX frames the kernel sent (completion ring).
    fn reap(&mut self) {
        let ready = self.completion.ready();
        let frame_size = u64::from(self.frame_size);
        let tx_end = self.tx_base + self.tx_frames as u64 * frame_size;
        for i in 0..ready {
            let addr = self.completion.read(i) & !(frame_size - 1);
            // Only a TX frame of this socket, at most once each: the free
            // list never outgrows the TX half.
            if (self.tx_base..tx_end).contains(&addr) && self.tx_free.len() < self.tx_frames {
                self.tx_free.push(addr);
            }
        }
        self.completion.consume(ready);
        self.stats.tx_completed += u64::from(ready);
    }

    /// Receives like [`XdpSocket::recv_with`], copying each frame into a
    /// frame of `pool` appended to `out` (the UMEM frame goes straight
    /// back to the fill ring); returns how many were taken. A frame that
    /// finds no free pool frame or does not fit one is dropped and counted
    /// ([`XdpStats::rx_no_frame`], [`XdpStats::rx_too_long`]).
    pub fn recv_into(
        &mut self,
        timeout: Duration,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
    ) -> Result<usize, XdpError> {
        let arena = std::sync::Arc::clone(pool.arena());
        let (mut no_frame, mut too_long, mut taken) = (0, 0, 0);
        let outcome = self.recv_with(timeout, |bytes| {
            let Some(mut frame) = pool.alloc() else {
                no_frame += 1;
                return;
            };
            if arena.write(&mut frame, bytes).is_ok() {
                out.push(frame);
                taken += 1;
            } else {
                too_long += 1;
                // The frame is this pool's own (just allocated): recycling
                // cannot fail.
                let _ = pool.recycle(frame);
            }
        });
        self.stats.rx_no_frame += no_frame;
        self.stats.rx_too_long += too_long;
        outcome?;
        Ok(taken)
    }

    /// Copies up to the free TX frames' worth of `frames` from the front
    /// into the UMEM, queues them and kicks the kernel; returns how many
    /// were queued (0 when no TX frame or ring slot was free).
    /// [`IoError::FrameTooLong`] or [`XdpError::FrameTooShort`] when the
    /// first frame cannot be sent (a later one ends the batch before it).
    pub fn send_batch(&mut self, frames: &[&[u8]]) -> Result<usize, XdpError> {
        self.send_with(frames.len(), |i| frames[i])
    }

    /// Sends `frames[picks[0]]`, `frames[picks[1]]`, ... of `arena` like
    /// [`XdpSocket::send_batch`]: one copy from the arena frame into a
    /// UMEM TX frame; a frame named twice is sent twice (a duplicated
    /// packet). Returns how many picks were queued; the tokens stay the
    /// caller's. [`IoError::BadPick`] for a pick beyond `frames`, and the
    /// arena's error for a token not of `arena`, when the first pick is
    /// such (a later one ends the batch before it).
    pub fn send_frames_picked(
        &mut self,
        arena: &FrameArena,
        frames: &[Frame],
        picks: &[u32],
    ) -> Result<usize, XdpError> {
        // Only as many picks as could be queued at once are resolved.
        let mut count = picks.len().min(self.tx_frames);
        for (i, &pick) in picks[..count].iter().enumerate() {
            let resolved = frames
                .get(pick as usize)
                .ok_or(IoError::BadPick {
                    pick,
                    frames: frames.len(),
                })
                .and_then(|frame| arena.bytes(frame).map_err(IoError::from));
            if let Err(error) = resolved {
                if i == 0 {
                    self.stats.tx_failed += 1;
                    return Err(error.into());
                }
                count = i;
                break;
            }
        }
        self.send_with(count, |i| {
            frames
                .get(picks[i] as usize)
                .and_then(|frame| arena.bytes(frame).ok())
                .unwrap_or(&[])
        })
    }

    /// The sending of [`XdpSocket::send_batch`] over the `count` frames
    /// `frame_at(0..count)`.
    fn send_with<'f>(
        &mut self,
        count: usize,
        frame_at: impl Fn(usize) -> &'f [u8],
    ) -> Result<usize, XdpError> {
        self.check_link()?;
        self.reap();
        let offered = count.min(self.tx_free.len()).min(self.tx.room() as usize);
        if offered == 0 {
            if count > 0 {
                self.stats.tx_full += 1;
                // Whatever is queued still needs the kernel to move on.
                self.kick_tx(self.in_flight())?;
            }
            return Ok(0);
        }
        let short = (0..offered).position(|i| frame_at(i).len() < 14);
        if short == Some(0) {
            self.stats.tx_failed += 1;
            return Err(XdpError::FrameTooShort {
                len: frame_at(0).len(),
            });
        }
        let offered = short.unwrap_or(offered);
        let count = match self.limit.admit((0..offered).map(&frame_at), offered) {
            Ok(count) => count,
            Err(error) => {
                self.stats.tx_failed += 1;
                return Err(error.into());
            }
        };
        let mut written = 0u32;
        for frame in (0..count).map(&frame_at) {
            // `count` ≤ free frames (`offered`): the list does not run dry.
            let Some(addr) = self.tx_free.pop() else {
                break;
            };
            // SAFETY: `addr` is a TX frame of the UMEM that no ring holds
            // (it came off the free list), so the kernel does not read it
            // now; `frame.len()` ≤ frame_size (admitted against
            // ring_room), so the copy stays inside the frame; source and
            // destination do not overlap (the caller's bytes are not in
            // the UMEM's TX frames, which only this socket writes).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    frame.as_ptr(),
                    self.umem.base().add(addr as usize),
                    frame.len(),
                );
            }
            self.tx.write(
                written,
                XdpDesc {
                    addr,
                    len: frame.len() as u32,
                    options: 0,
                },
            );
            written += 1;
            self.stats.tx_bytes += frame.len() as u64;
        }
        self.tx.produce(written);
        self.stats.tx_queued += u64::from(written);
        self.kick_tx(written as usize)?;
        Ok(written as usize)
    }

    /// Asks the kernel to send what the TX ring holds, when it wants to be
    /// asked (always without `XDP_USE_NEED_WAKEUP`): copy mode sends up
    /// to 32 frames per call and says EAGAIN while more remain, so up to
    /// `queued / 32 + 1` calls.
    fn kick_tx(&mut self, queued: usize) -> Result<(), XdpError> {
        if self.need_wakeup && !self.tx.needs_wakeup() {
            return Ok(());
        }
        for _ in 0..=queued / COPY_TX_BUDGET {
            self.stats.tx_kicks += 1;
            // SAFETY: a zero-length send without buffer or address; the
            // kernel only looks at the TX ring.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc >= 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                // More to send (the copy-mode budget) or a busy queue: ask
                // again, within the bound.
                Some(libc::EAGAIN | libc::EBUSY) => continue,
                // No memory for a socket buffer now: the frames stay queued
                // for the next kick.
                Some(libc::ENOBUFS) => return Ok(()),
                _ => return Err(self.note_error("send (sendto)", error)),
            }
        }
        Ok(())
    }

    /// Kicks and reaps until every queued frame was reported sent or
    /// `timeout` passed; returns whether none is left in flight.
    pub fn complete(&mut self, timeout: Duration) -> Result<bool, XdpError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reap();
            let in_flight = self.in_flight();
            if in_flight == 0 {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            self.kick_tx(in_flight)?;
            self.reap();
            if self.in_flight() > 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// The redirect program this socket attached (`None` only inside an
    /// [`XdpSender`], which attaches none).
    pub fn program(&self) -> Option<&XdpProgram> {
        self.program.as_ref()
    }
}

/// A sending-only AF_XDP socket on one queue of one interface: the UMEM
/// and rings of an [`XdpSocket`], bound the same way, but no redirect
/// program, so the interface's received traffic still reaches the kernel's
/// stack (and AF_PACKET sockets). For a sender whose interface also
/// carries traffic the other way, read by other means. The queue is still
/// taken: one socket per queue, receiving or sending.
#[derive(Debug)]
pub struct XdpSender(XdpSocket);

impl XdpSender {
    /// Opens a sending-only socket on queue `queue` of `interface` (in the
    /// calling thread's network namespace) with `config`'s geometry
    /// (`attach` unused: no program).
    pub fn open(interface: &str, queue: u32, config: &XdpConfig) -> Result<Self, XdpError> {
        XdpSocket::open_inner(interface, queue, config, false).map(Self)
    }

    /// The interface this socket is bound to.
    pub fn interface(&self) -> &str {
        self.0.interface()
    }

    /// The queue this socket is bound to.
    pub fn queue(&self) -> u32 {
        self.0.queue()
    }

    /// Whether the kernel runs this socket in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.0.zero_copy()
    }

    /// What this socket counted.
    pub fn stats(&self) -> XdpStats {
        self.0.stats()
    }

    /// The longest untagged frame this socket sends.
    pub fn max_frame(&self) -> usize {
        self.0.max_frame()
    }

    /// Frames queued for sending that the kernel has not reported sent.
    pub fn in_flight(&self) -> usize {
        self.0.in_flight()
    }

    /// The kernel's counters (`XDP_STATISTICS`).
    pub fn kernel_stats(&self) -> Result<XdpKernelStats, XdpError> {
        self.0.kernel_stats()
    }

    /// [`XdpSocket::send_batch`].
    pub fn send_batch(&mut self, frames: &[&[u8]]) -> Result<usize, XdpError> {
        self.0.send_batch(frames)
    }

    /// [`XdpSocket::send_frames_picked`].
    pub fn send_frames_picked(
        &mut self,
        arena: &FrameArena,
        frames: &[Frame],
        picks: &[u32],
    ) -> Result<usize, XdpError> {
        self.0.send_frames_picked(arena, frames, picks)
    }

    /// [`XdpSocket::complete`].
    pub fn complete(&mut self, timeout: Duration) -> Result<bool, XdpError> {
        self.0.complete(timeout)
    }
}

impl AsRawFd for XdpSender {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

impl AsRawFd for XdpSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<XdpDesc>(), 16);
        assert_eq!(std::mem::size_of::<UmemReg>(), 32);
        assert_eq!(std::mem::size_of::<SockaddrXdp>(), 16);
        assert_eq!(std::mem::size_of::<MmapOffsets>(), 128);
        assert_eq!(std::mem::size_of::<XdpKernelStats>(), 48);
        assert_eq!(std::mem::size_of::<EthtoolChannels>(), 36);
    }

    #[test]
    fn configurations_are_checked() {
        assert!(XdpConfig::default().check().is_ok());
        let bad = [
            XdpConfig {
                frame_size: 3000,
                ..XdpConfig::default()
            },
            XdpConfig {
                frame_size: 1024,
                ..XdpConfig::default()
            },
            XdpConfig {
                frames: 4095,
                ..XdpConfig::default()
            },
            XdpConfig {
                ring_size: 1000,
                ..XdpConfig::default()
            },
            XdpConfig {
                ring_size: 1024,
                ..XdpConfig::default()
            },
            XdpConfig {
                max_batch: 0,
                ..XdpConfig::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(config.check(), Err(XdpError::Io(IoError::BadConfig(_)))),
                "{config:?} refused"
            );
        }
    }
}
