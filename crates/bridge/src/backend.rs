//! The transmit backend of the dispatchers: frames the runtime released go
//! out on the output interface by AF_PACKET, straight from the frame pool.
//!
//! A released packet's cookie is its frame's index. The backend reclaims the
//! frame ([`FrameArena::reclaim`]: the Acquire that makes the RX thread's
//! bytes visible), sends the batch with [`PacketTx::send_frames`] (no copy)
//! or [`PacketTxRing::send_frames`] (one copy into the ring), and puts every
//! frame back in flight ([`FrameArena::release`]) so that its RX thread
//! reclaims it when the runtime offers that slot again. Every packet it is
//! given is counted once: sent, or dropped under a [`TxReason`].
//!
//! A packet a pipe duplicated ([`TxPacket::copies`] = 2) is sent twice, the
//! copy right after the original in the same batch (the same frame named
//! twice, [`PacketTx::send_frames_picked`]). The copy is counted
//! `duplicated` when the backend takes the packet, and then sent or dropped
//! like any frame, so `received + duplicated = sent + dropped + in flight`
//! holds for the bridge; the runtime counts the packet once.
//!
//! With [`crate::IoBackend::Xdp`] (cargo feature `xdp`) the socket is a
//! sending-only AF_XDP socket (`Sender::Xdp`): each frame is copied once
//! from the pool into a UMEM TX frame, the completion ring reaped at each
//! send; a frame counts as sent once it is queued on the TX ring and the
//! kernel was asked to send it, as a frame `sendmmsg` took does. When the
//! transmitter ends it waits (at most `XDP_COMPLETE`) for the kernel to
//! report every queued frame sent.
//!
//! Cost per packet: one compare-exchange and one store on the frame's
//! state word, three counter stores; one system call per batch of up to
//! [`pspat_io::af_packet::MAX_BATCH`] frames.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat::{TxBackend, TxPacket};
use pspat_io::af_packet::MAX_BATCH;
use pspat_io::{Frame, FrameArena, IoError, PacketTx, PacketTxRing};

use crate::counters::{note_cpu, TxReason, TxShared, NTX};

/// A sending socket of either kind.
#[derive(Debug)]
pub enum Sender {
    /// `sendmmsg(2)`.
    Mmsg(PacketTx),
    /// A TPACKET_V2 TX ring.
    Ring(PacketTxRing),
    /// A sending-only AF_XDP socket (cargo feature `xdp`).
    #[cfg(feature = "xdp")]
    Xdp(Box<pspat_io::xdp::XdpSender>),
}

/// How long an ending transmitter waits for its AF_XDP socket's queued
/// frames to be reported sent.
#[cfg(feature = "xdp")]
const XDP_COMPLETE: Duration = Duration::from_millis(200);

impl Sender {
    /// The longest untagged frame the socket sends.
    pub fn max_frame(&self) -> usize {
        match self {
            Sender::Mmsg(s) => s.max_frame(),
            Sender::Ring(s) => s.max_frame(),
            #[cfg(feature = "xdp")]
            Sender::Xdp(s) => s.max_frame(),
        }
    }

    /// Sends `frames[picks[0]]`, `frames[picks[1]]`, ...
    fn send_frames(
        &mut self,
        arena: &FrameArena,
        frames: &[Frame],
        picks: &[u32],
    ) -> Result<usize, IoError> {
        match self {
            Sender::Mmsg(s) => s.send_frames_picked(arena, frames, picks),
            Sender::Ring(s) => s.send_frames_picked(arena, frames, picks),
            #[cfg(feature = "xdp")]
            Sender::Xdp(s) => s.send_frames_picked(arena, frames, picks).map_err(xdp_io),
        }
    }
}

/// An AF_XDP send's error as the AF_PACKET senders' would be: a frame
/// shorter than an Ethernet header is refused by the system call there
/// (EINVAL), ending the batch as a send error.
#[cfg(feature = "xdp")]
fn xdp_io(error: pspat_io::xdp::XdpError) -> IoError {
    use pspat_io::xdp::XdpError;
    match error {
        XdpError::Io(e) => e,
        other => IoError::Os {
            operation: "AF_XDP send",
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
        },
    }
}

#[cfg(feature = "xdp")]
impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(Sender::Xdp(s)) = &mut self.sender {
            // What is still queued is counted sent: let the kernel send it
            // before the socket (and its UMEM) goes.
            if !self.link_lost {
                let _ = s.complete(XDP_COMPLETE);
            }
        }
    }
}

/// How long one batch may wait for room in the kernel before its remaining
/// frames are dropped as `tx_full`.
const FULL_BUDGET: Duration = Duration::from_millis(2);

/// One direction's sending side: its socket, counters and batch.
struct Lane {
    sender: Option<Sender>,
    counters: Arc<TxShared>,
    /// The first runtime client id of this direction: packet `p` counts in
    /// `done[(p.client - first_client) * groups + group]`.
    first_client: u32,
    /// The batch's frames, one per packet (`pkts` alongside).
    frames: Vec<Frame>,
    pkts: Vec<TxPacket>,
    /// What is sent, in order: indices into `frames`, a duplicated packet's
    /// twice in a row (the second is its copy).
    picks: Vec<u32>,
    link_lost: bool,
}

impl Lane {
    fn new(sender: Option<Sender>, counters: Arc<TxShared>, first_client: u32) -> Self {
        Lane {
            sender,
            counters,
            first_client,
            frames: Vec::with_capacity(MAX_BATCH),
            pkts: Vec::with_capacity(MAX_BATCH),
            picks: Vec::with_capacity(MAX_BATCH),
            link_lost: false,
        }
    }

    /// Counts `p` dropped for `reason`; a copy does not end its packet.
    fn drop_pkt(&self, p: &TxPacket, reason: TxReason, copy: bool) {
        let c = &self.counters;
        let g = c.grouping.of(p.flow.0);
        c.drops[g * NTX + reason as usize].add(1);
        if !copy {
            self.finish(p, g);
        }
    }

    /// Counts `p` (of counter group `g`) finished, for its RX thread's
    /// queue limit.
    fn finish(&self, p: &TxPacket, g: usize) {
        let c = &self.counters;
        c.done[(p.client - self.first_client) as usize * c.grouping.groups() + g].add(1);
    }

    /// Counts `p` sent; a copy does not end its packet.
    fn sent_pkt(&self, p: &TxPacket, copy: bool) {
        let c = &self.counters;
        let g = c.grouping.of(p.flow.0);
        c.sent[g].add(1);
        c.sent_bytes[g].add(u64::from(p.len));
        if !copy {
            self.finish(p, g);
        }
    }

    /// Whether send `i` of the batch is a copy (it names the frame the one
    /// before it named).
    fn is_copy(&self, i: usize) -> bool {
        i > 0 && self.picks[i] == self.picks[i - 1]
    }

    /// The packet of send `i` and whether it is a copy.
    fn pick(&self, i: usize) -> (&TxPacket, bool) {
        (&self.pkts[self.picks[i] as usize], self.is_copy(i))
    }

    /// Takes `p` into the batch (twice if it is duplicated), flushing first
    /// if it would not fit.
    fn push(&mut self, arena: &FrameArena, p: &TxPacket) {
        let copies = usize::from(p.copies.clamp(1, 2));
        if copies == 2 {
            let c = &self.counters;
            c.duplicated[c.grouping.of(p.flow.0)].add(1);
        }
        if self.picks.len() + copies > MAX_BATCH {
            self.flush(arena);
        }
        match arena.reclaim(p.cookie as u32) {
            Ok(frame) => {
                let i = self.frames.len() as u32;
                self.frames.push(frame);
                self.pkts.push(*p);
                self.picks.extend(std::iter::repeat_n(i, copies));
            }
            Err(_) => {
                self.drop_pkt(p, TxReason::FrameState, false);
                if copies == 2 {
                    self.drop_pkt(p, TxReason::FrameState, true);
                }
            }
        }
    }

    /// Sends `self.picks` (frames of `self.frames`, with `self.pkts`
    /// alongside), counting each send.
    fn flush(&mut self, arena: &FrameArena) {
        let mut at = 0;
        let mut full_since: Option<Instant> = None;
        while at < self.picks.len() {
            let reason = match (&mut self.sender, self.link_lost) {
                (Some(sender), false) => {
                    match sender.send_frames(arena, &self.frames, &self.picks[at..]) {
                        Ok(0) => {
                            let since = *full_since.get_or_insert_with(Instant::now);
                            if since.elapsed() < FULL_BUDGET {
                                std::thread::yield_now();
                                continue;
                            }
                            TxReason::TxFull
                        }
                        Ok(n) => {
                            for i in at..at + n {
                                let (p, copy) = self.pick(i);
                                self.sent_pkt(p, copy);
                            }
                            at += n;
                            full_since = None;
                            continue;
                        }
                        Err(IoError::FrameTooLong { .. }) => {
                            let (p, copy) = self.pick(at);
                            self.drop_pkt(p, TxReason::TxTooLong, copy);
                            at += 1;
                            continue;
                        }
                        Err(e) if e.is_link_lost() => {
                            self.link_lost = true;
                            self.counters.error.set(e.to_string());
                            TxReason::LinkLost
                        }
                        Err(e) => {
                            self.counters.error.set(e.to_string());
                            TxReason::TxError
                        }
                    }
                }
                (_, true) => TxReason::LinkLost,
                (None, false) => TxReason::TxError,
            };
            // The rest of the batch goes with this reason.
            for i in at..self.picks.len() {
                let (p, copy) = self.pick(i);
                self.drop_pkt(p, reason, copy);
            }
            at = self.picks.len();
        }
        self.picks.clear();
        for frame in self.frames.drain(..) {
            // The token is this arena's own (reclaimed from it): release
            // cannot fail.
            let _ = arena.release(frame);
        }
        self.pkts.clear();
    }
}

/// The dispatchers' (or the arbiter's) backend (module docs). With a
/// shaped reverse direction it has two lanes: packets of clients below the
/// reverse lane's first client id go out on the output interface, the
/// others on the input interface, each counted in its direction's
/// counters.
pub struct AfPacketTx {
    forward: Lane,
    reverse: Option<Lane>,
    arena: Arc<FrameArena>,
    calls: u32,
}

impl AfPacketTx {
    pub(crate) fn new(
        sender: Option<Sender>,
        arena: Arc<FrameArena>,
        counters: Arc<TxShared>,
    ) -> Self {
        AfPacketTx {
            forward: Lane::new(sender, counters, 0),
            reverse: None,
            arena,
            calls: 0,
        }
    }

    /// Adds the reverse lane: clients from `first_client` on send with
    /// `sender`, counted in `counters`.
    pub(crate) fn with_reverse(
        mut self,
        sender: Option<Sender>,
        counters: Arc<TxShared>,
        first_client: u32,
    ) -> Self {
        self.reverse = Some(Lane::new(sender, counters, first_client));
        self
    }
}

impl TxBackend for AfPacketTx {
    fn transmit(&mut self, _now: pspat_sched::Instant, pkts: &[TxPacket]) {
        if self.calls.is_multiple_of(64) {
            note_cpu(&self.forward.counters.cpu);
            if let Some(r) = &self.reverse {
                note_cpu(&r.counters.cpu);
            }
        }
        self.calls = self.calls.wrapping_add(1);
        let AfPacketTx {
            forward,
            reverse,
            arena,
            ..
        } = self;
        for p in pkts {
            let lane = match reverse {
                Some(r) if p.client >= r.first_client => r,
                _ => &mut *forward,
            };
            lane.push(arena, p);
        }
        forward.flush(arena);
        if let Some(r) = reverse {
            r.flush(arena);
        }
    }
}
