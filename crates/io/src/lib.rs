//! Packet I/O for pspat: where frames meet the operating system.
//!
//! * [`frames`]: one preallocated pool of fixed-size buffers named by index
//!   (a descriptor's cookie is its frame index); at most one copy per packet
//!   between reception and transmission.
//! * [`HugePageAlloc`]: a global allocator that puts large blocks (the frame
//!   pool, the scheduler's arenas) on transparent huge pages.
//! * [`parse`]: Ethernet, VLAN, IPv4/IPv6, TCP/UDP/ICMP into a [`parse::FlowKey`],
//!   or a counted reason why not; the IP header's ECN field read
//!   ([`parse::ecn_capable`]) and set to Congestion Experienced
//!   ([`parse::mark_ce`]).
//! * [`af_packet`]: raw Ethernet frames through AF_PACKET sockets: a
//!   TPACKET_V3 or per-frame TPACKET_V2 RX ring ([`PacketRx`], [`RxRing`],
//!   with `PACKET_FANOUT`), TX by
//!   `sendmmsg` ([`PacketTx`]) or by a TX ring ([`PacketTxRing`]), with
//!   `PACKET_QDISC_BYPASS` as an option; typed errors ([`IoError`]).
//! * [`udp`]: UDP sockets with `sendmmsg`/`recvmmsg` batches and kernel or
//!   user timestamps, for unprivileged local senders.
//! * `xdp` (cargo feature `xdp`, off by default): AF_XDP sockets on one
//!   interface queue, with the redirect program loaded at run time.
//! * [`netns`]: test-bed support (namespaces and veth pairs that remove
//!   themselves), for this workspace's tests and examples.
//!
//! This crate and the FFI crate are the only ones with system calls and
//! `unsafe`; every `unsafe` block states the invariant it relies on in a
//! `// SAFETY:` comment.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod af_packet;
pub mod cpu;
pub mod error;
pub mod frames;
pub mod huge_pages;
pub mod netns;
pub mod offload;
pub mod parse;
pub mod stop;
mod sys;
pub mod udp;
#[cfg(feature = "xdp")]
pub mod xdp;

pub use af_packet::{PacketRx, PacketTx, PacketTxRing, RxConfig, RxRing, TxConfig};
pub use error::IoError;
pub use frames::{ForeignFrame, Frame, FrameArena, FrameError, FramePool, DEFAULT_FRAME_SIZE};
pub use huge_pages::HugePageAlloc;
pub use stop::StopLatch;
pub use udp::{RecvMeta, Timestamps, UdpBatchSocket};
