//! pspat as a bump in the wire: frames read from one interface by AF_PACKET
//! are classified into flows, scheduled and rate-limited by the PSPAT
//! runtime, and sent on another interface; the reverse direction is
//! forwarded unshaped.
//!
//! ```text
//!  --in ─▶ RX thread k (TPACKET_V3 ring, PACKET_FANOUT when k > 1): length check,
//!          parse, Classifier → FlowId, per-flow queue limit, copy into frame k·D + slot
//!          ─▶ Client::submit { flow, len, cookie: frame index }
//!              ─▶ arbiter (scheduler + link emulator) ─▶ dispatcher: AfPacketTx
//!                  (reclaim frame, sendmmsg or TX ring) ─▶ --out
//!  --out ─▶ reverse thread (ring, sendmmsg) ─▶ --in                       (unshaped)
//! ```
//!
//! With [`BridgeConfig::shape_reverse`] the reverse direction is shaped
//! instead: `rx_threads` more RX threads read the output interface as
//! clients `rx_threads..2·rx_threads` of the same runtime, and the
//! transmitters send their packets on the input interface; each direction
//! is counted apart ([`ReverseReport`]). With a [`ReverseSwitch`]
//! ([`BridgeConfig::reverse_switch`]) those RX threads shape while it is on
//! and forward their frames unshaped (as the reverse thread does) while it
//! is off; it can be turned either way while the bridge runs.
//!
//! With [`BridgeConfig::io`] = [`IoBackend::Xdp`] (cargo feature `xdp`) the
//! shaped direction reads and sends through AF_XDP sockets on queue 0 of
//! the interfaces instead (one RX thread, at most one dispatcher), with the
//! same counters and guarantees; the reverse direction stays on AF_PACKET.
//!
//! With several egress interfaces ([`BridgeConfig::extra_outputs`]) each
//! has its own runtime (arbiter, dispatchers) and reverse thread, and every
//! flow is placed on one of them by weighted HRW on their rates
//! ([`egress`]); an RX thread holds one runtime client per interface.
//!
//! # Guarantees
//! * **One copy**: a frame is copied once, from the RX ring into its pool
//!   frame; `sendmmsg` sends from the pool (the TX ring copies once more,
//!   into the ring, as AF_XDP does into its UMEM). Frames are the runtime's descriptors
//!   ([`pspat::Client::next_slot`]): no separate return path, no
//!   allocation per packet on the shaped path.
//! * **Conservation** ([`report`]): `received + duplicated = transmitted +
//!   dropped (by reason) + in_flight` (`duplicated`: copies of packets a
//!   pipe duplicated), in total and per flow, live and final; after
//!   [`Bridge::stop`] `in_flight == 0`, also when an interface was lost.
//!   The kernel's own ring drops are reported apart (`not_received`).
//! * **Order**: frames of one flow read by one RX thread leave in arrival
//!   order (the runtime's per-client, per-flow order; a flow uses one egress
//!   interface for the bridge's life).
//! * **Weighted shares**: each flow has its own queue limit
//!   ([`BridgeConfig::queue_limit`]), so under overload every flow stays
//!   backlogged and the scheduler's weights decide the shares (unless the
//!   flows are counted in groups, [`FlowCounters::Groups`], for a
//!   scheduler that bounds its queues itself).
//! * **Idle costs nothing**: with no traffic the RX and reverse threads
//!   block in `poll(2)` (a second at a time; a stop ends the wait at once,
//!   [`pspat_io::StopLatch`]), the arbiter and dispatchers park.
//! * Bad frames never panic: each is counted under a reason.
//!
//! # Example
//! ```no_run
//! use pspat_bridge::{Bridge, BridgeConfig};
//! let mut cfg = BridgeConfig::new("pspat-in", "pspat-out");
//! cfg.rate_bps = Some(100_000_000);
//! cfg.flows = 4;
//! let bridge = Bridge::start(cfg)?;
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! let report = bridge.stop()?;
//! assert!(report.conserved && report.in_flight == 0);
//! # Ok::<(), pspat_bridge::BridgeError>(())
//! ```

mod backend;
mod bridge;
mod classify;
mod config;
mod counters;
pub mod egress;
pub mod report;
mod reverse;
mod rx;
mod switch;

pub use backend::{AfPacketTx, Sender};
pub use bridge::Bridge;
pub use classify::{Classifier, HashClassifier, Verdict};
pub use config::{
    BridgeConfig, BridgeError, Egress, FlowCounters, IoBackend, TxKind, Unparsed, XdpAttach,
    DEFAULT_CORRUPT_SEED, DEFAULT_QUEUE_LIMIT, MAX_EGRESS, MAX_FLOWS, MAX_RX_THREADS, XDP_BUILT,
};
pub use counters::{RxReason, TxReason};
pub use report::{
    EgressReport, FlowReport, OffloadReport, ParseReport, Report, ReverseReport, ThreadPlace,
};
pub use switch::ReverseSwitch;
