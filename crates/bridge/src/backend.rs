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
//! A packet a pipe corrupted ([`TxPacket::corrupt`]) has one bit of its
//! frame flipped in the pool before it is sent ([`corrupt_frame`]): a
//! uniformly drawn bit of the bytes after the Ethernet header and its VLAN
//! tags, so that the frame still reaches its receiver and the IP header
//! checksum or the TCP/UDP checksum is what finds the damage; a frame with
//! nothing after its L2 header has a bit flipped anywhere. (tc-netem flips
//! a random bit of the packet's first bytes from the Ethernet header on,
//! so there a flip can also send the frame to no one, in a MAC address, or
//! make it another protocol, in the EtherType.) A duplicated packet is
//! flipped once and then sent twice, so both copies carry the same bit.
//! The packet is counted `corrupted` once when the backend takes it (like
//! `duplicated`); it is not an extra frame, and is then sent or dropped
//! like any other. Each lane draws its bits from a SplitMix64 stream of its
//! own, seeded from [`crate::BridgeConfig::corrupt_seed`], the transmitter
//! and the direction ([`lane_seed`]), so one seed replays the same bits for
//! the same packets taken in the same order.
//!
//! A packet a pipe marked Congestion Experienced ([`TxPacket::ce`]: RED
//! with `ecn`) has the ECN field of its IP header set to CE (3) in the
//! pool before it is sent, the IPv4 header checksum updated with it
//! ([`mark_ce`]); it is counted `ce_marked` once when the backend takes it
//! (a duplicated packet is marked once and both copies carry the mark),
//! or `ce_unmarkable` when its frame has no ECN-capable IP header (never
//! expected: the RX threads submit as ECN-capable only frames that have
//! one) and then goes out as it came. A packet both marked and corrupted
//! is marked first and then has its bit flipped, so both apply.
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
//! [`pspat_io::af_packet::MAX_BATCH`] frames. A corrupted packet adds one
//! SplitMix64 step, a walk over its VLAN tags and one byte written; a
//! CE-marked one a walk to its IP header and at most three bytes written.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat::{TxBackend, TxOwner, TxPacket};
use pspat_io::af_packet::MAX_BATCH;
use pspat_io::parse::mark_ce;
use pspat_io::{Frame, FrameArena, IoError, PacketTx, PacketTxRing};
use pspat_sched::pipe::random::splitmix64;

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
    /// The SplitMix64 state of the corruption draws ([`lane_seed`]): one
    /// step per corrupted packet taken.
    corrupt_state: u64,
    /// The bridge's corruption seed `corrupt_state` follows, and this
    /// lane's place (transmitter, direction) in it.
    corrupt_seed: u64,
    transmitter: u64,
    reverse: bool,
}

impl Lane {
    fn new(
        sender: Option<Sender>,
        counters: Arc<TxShared>,
        first_client: u32,
        corrupt_seed: u64,
        (transmitter, reverse): (u64, bool),
    ) -> Self {
        Lane {
            sender,
            counters,
            first_client,
            frames: Vec::with_capacity(MAX_BATCH),
            pkts: Vec::with_capacity(MAX_BATCH),
            picks: Vec::with_capacity(MAX_BATCH),
            link_lost: false,
            corrupt_state: lane_seed(corrupt_seed, transmitter, reverse),
            corrupt_seed,
            transmitter,
            reverse,
        }
    }

    /// The next corruption draw, in the stream of the seed the bridge
    /// follows now: when it changed ([`crate::Bridge::set_corrupt_seed`]),
    /// the lane continues from its position in the new seed's stream, as
    /// a pipe's random streams do on a new seed (a SplitMix64 state moves
    /// by one fixed step a draw, so its position is its state less its
    /// first state).
    fn corrupt_draw(&mut self) -> u64 {
        // Relaxed: the seed is a value alone, published with nothing; a
        // lane that sees a new one a few packets late draws those from the
        // old stream.
        let seed = self.counters.corrupt_seed.load(Ordering::Relaxed);
        if seed != self.corrupt_seed {
            let drawn = self.corrupt_state.wrapping_sub(lane_seed(
                self.corrupt_seed,
                self.transmitter,
                self.reverse,
            ));
            self.corrupt_state =
                lane_seed(seed, self.transmitter, self.reverse).wrapping_add(drawn);
            self.corrupt_seed = seed;
        }
        splitmix64(&mut self.corrupt_state)
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

    /// Takes `p` into the batch (twice if it is duplicated, marked CE if a
    /// pipe marked it, with one bit flipped if it is corrupted), flushing
    /// first if it would not fit.
    fn push(&mut self, arena: &FrameArena, p: &TxPacket) {
        let copies = usize::from(p.copies.clamp(1, 2));
        let c = &self.counters;
        if copies == 2 {
            c.duplicated[c.grouping.of(p.flow.0)].add(1);
        }
        // Drawn for every corrupted packet taken, sent or not, so that the
        // stream's position depends only on the packets taken.
        if p.corrupt {
            c.corrupted[c.grouping.of(p.flow.0)].add(1);
        }
        let draw = p.corrupt.then(|| self.corrupt_draw());
        if self.picks.len() + copies > MAX_BATCH {
            self.flush(arena);
        }
        match arena.reclaim(p.cookie as u32) {
            Ok(mut frame) => {
                if p.ce || draw.is_some() {
                    // Once for the frame: a copy sends the same bytes. The
                    // mark first, so that a flip cannot stop it (a flipped
                    // version or ECN bit); the flip then lands on the
                    // marked bytes as on any others.
                    let len = frame.len();
                    let mut bytes = arena
                        .buffer_mut(&mut frame)
                        .ok()
                        .and_then(|b| b.get_mut(..len));
                    if p.ce {
                        let c = &self.counters;
                        if bytes.as_deref_mut().is_some_and(mark_ce) {
                            c.ce_marked[c.grouping.of(p.flow.0)].add(1);
                        } else {
                            c.ce_unmarkable.add(1);
                        }
                    }
                    if let (Some(bytes), Some(draw)) = (bytes, draw) {
                        corrupt_frame(bytes, draw);
                    }
                }
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
    /// [`crate::BridgeConfig::corrupt_seed`] and this transmitter's index,
    /// for the reverse lane's stream.
    corrupt_seed: u64,
    transmitter: u64,
}

impl AfPacketTx {
    /// The transmitter `transmitter` ([`transmitter_index`]) of a bridge
    /// whose corruption seed is `corrupt_seed`.
    pub(crate) fn new(
        sender: Option<Sender>,
        arena: Arc<FrameArena>,
        counters: Arc<TxShared>,
        corrupt_seed: u64,
        transmitter: u64,
    ) -> Self {
        AfPacketTx {
            forward: Lane::new(sender, counters, 0, corrupt_seed, (transmitter, false)),
            reverse: None,
            arena,
            calls: 0,
            corrupt_seed,
            transmitter,
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
        self.reverse = Some(Lane::new(
            sender,
            counters,
            first_client,
            self.corrupt_seed,
            (self.transmitter, true),
        ));
        self
    }
}

/// The index of the transmitter `owner` of egress interface `egress`
/// (the runtime's dispatcher number, 0 for the arbiter), unique in a
/// bridge: the egress interface in the high half, the owner in the low.
pub(crate) fn transmitter_index(egress: usize, owner: TxOwner) -> u64 {
    let within = match owner {
        TxOwner::Arbiter => 0,
        TxOwner::Dispatcher(d) => d as u64,
        TxOwner::Client(id) => u64::from(id),
    };
    (egress as u64) << 32 | (within & 0xffff_ffff)
}

/// The first state of the corruption stream of a lane: `seed` mixed with
/// the transmitter's index and the lane's direction by one SplitMix64
/// step, so that every lane of every transmitter draws a stream of its
/// own and the same seed gives the same streams.
pub(crate) fn lane_seed(seed: u64, transmitter: u64, reverse: bool) -> u64 {
    let mut s = seed ^ (transmitter << 1 | u64::from(reverse)).wrapping_mul(0xd1b5_4a32_d192_ed03);
    splitmix64(&mut s)
}

/// Flips one bit of `frame` chosen by `draw` and returns its position
/// (byte × 8 + bit, bit 0 the least significant): a bit of the bytes
/// after the Ethernet header and its VLAN tags ([`l2_header_len`]), or of
/// the whole frame when nothing follows that header. Every bit of the
/// range is equally likely for a uniform `draw` (the draw is scaled to the
/// range by a 64 × 64-bit multiplication: a relative bias below 2⁻⁴⁵ for
/// frames up to 64 KiB). An empty frame is left alone (`None`).
pub(crate) fn corrupt_frame(frame: &mut [u8], draw: u64) -> Option<usize> {
    if frame.is_empty() {
        return None;
    }
    let header = l2_header_len(frame);
    let start = if header < frame.len() { header } else { 0 };
    let bits = (frame.len() - start) * 8;
    let at = start * 8 + ((u128::from(draw) * bits as u128) >> 64) as usize;
    let byte = frame.get_mut(at / 8)?;
    *byte ^= 1 << (at % 8);
    Some(at)
}

/// 802.1Q and 802.1ad, the VLAN tags [`l2_header_len`] steps over.
const VLAN_TPIDS: [u16; 2] = [0x8100, 0x88a8];

/// The length of the Ethernet header of `frame` with its VLAN tags: the
/// offset of the first byte after the EtherType that follows the tags
/// (any number of them); `frame.len()` when the frame ends inside that
/// header.
fn l2_header_len(frame: &[u8]) -> usize {
    // The EtherType (or the TPID of the first tag) after the two MAC
    // addresses.
    let mut at = 12;
    loop {
        let Some(&[hi, lo]) = frame.get(at..at + 2) else {
            return frame.len();
        };
        if !VLAN_TPIDS.contains(&u16::from_be_bytes([hi, lo])) {
            return at + 2;
        }
        at += pspat_io::parse::VLAN_TAG_LEN;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Grouping;
    use pspat_io::FramePool;
    use pspat_sched::FlowId;

    /// An untagged Ethernet header, then `payload` bytes.
    fn untagged(payload: usize) -> Vec<u8> {
        let mut f = vec![0xaa; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend((0..payload).map(|i| i as u8));
        f
    }

    /// An Ethernet header with the tags `tpids`, then `payload` bytes.
    fn tagged(tpids: &[u16], payload: usize) -> Vec<u8> {
        let mut f = vec![0xaa; 12];
        for t in tpids {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&[0x00, 0x2a]);
        }
        f.extend_from_slice(&[0x86, 0xdd]);
        f.extend((0..payload).map(|i| i as u8));
        f
    }

    /// The positions of the bits that differ between `a` and `b`.
    fn differing_bits(a: &[u8], b: &[u8]) -> Vec<usize> {
        assert_eq!(a.len(), b.len());
        (0..a.len() * 8)
            .filter(|&i| (a[i / 8] ^ b[i / 8]) & (1 << (i % 8)) != 0)
            .collect()
    }

    /// Flips with `draw` and checks that exactly the returned bit changed
    /// and that it lies at or after `first_byte`; returns its position.
    fn flip_one(frame: &[u8], draw: u64, first_byte: usize) -> usize {
        let mut out = frame.to_vec();
        let at = corrupt_frame(&mut out, draw).expect("a bit flipped");
        assert_eq!(differing_bits(frame, &out), [at], "draw {draw:#x}");
        assert!(at >= first_byte * 8, "bit {at} before byte {first_byte}");
        at
    }

    #[test]
    fn the_l2_header_is_the_ethernet_header_and_its_vlan_tags() {
        assert_eq!(l2_header_len(&untagged(20)), 14);
        assert_eq!(l2_header_len(&tagged(&[0x8100], 20)), 18);
        assert_eq!(l2_header_len(&tagged(&[0x88a8, 0x8100], 20)), 22);
        assert_eq!(l2_header_len(&tagged(&[0x88a8, 0x8100, 0x8100], 20)), 26);
        // Cut before or inside it: the whole frame.
        assert_eq!(l2_header_len(&[0; 13]), 13);
        assert_eq!(l2_header_len(&tagged(&[0x8100], 0)[..16]), 16);
        assert_eq!(l2_header_len(&[]), 0);
    }

    #[test]
    fn exactly_one_bit_of_the_payload_is_flipped() {
        let mut s = 42;
        for (frame, header) in [
            (untagged(46), 14),
            (untagged(1), 14),
            (tagged(&[0x8100], 60), 18),
            (tagged(&[0x88a8, 0x8100], 60), 22),
            (tagged(&[0x8100], 1), 18),
        ] {
            for _ in 0..2_000 {
                flip_one(&frame, splitmix64(&mut s), header);
            }
            // The ends of the range: the first bit after the header and
            // the frame's last bit.
            assert_eq!(flip_one(&frame, 0, header), header * 8);
            assert_eq!(flip_one(&frame, u64::MAX, header), frame.len() * 8 - 1);
        }
    }

    #[test]
    fn every_bit_after_the_header_is_drawn_equally() {
        // 2 bytes after the header: draw k·2⁶⁰ picks bit k of 16.
        let frame = untagged(2);
        for k in 0..16u64 {
            assert_eq!(flip_one(&frame, k << 60, 14), 14 * 8 + k as usize);
        }
        // A uniform stream over 5 bytes: each of the 40 bits about equally
        // often (within 6 standard deviations of 1 000).
        let frame = tagged(&[0x8100], 5);
        let mut hits = [0u32; 40];
        let mut s = 7;
        for _ in 0..40_000 {
            hits[flip_one(&frame, splitmix64(&mut s), 18) - 18 * 8] += 1;
        }
        let sd = (40_000.0f64 / 40.0 * (1.0 - 1.0 / 40.0)).sqrt();
        for (bit, &n) in hits.iter().enumerate() {
            assert!((f64::from(n) - 1_000.0).abs() <= 6.0 * sd, "bit {bit}: {n}");
        }
    }

    #[test]
    fn a_frame_with_nothing_after_its_l2_header_has_any_bit_flipped() {
        let mut s = 3;
        for frame in [
            vec![0x5a],
            vec![0xff; 13],
            untagged(0),
            tagged(&[0x8100], 0),
            tagged(&[0x8100], 0)[..16].to_vec(),
        ] {
            let mut seen = vec![false; frame.len() * 8];
            for _ in 0..4_000 {
                seen[flip_one(&frame, splitmix64(&mut s), 0)] = true;
            }
            assert!(seen.iter().all(|&b| b), "{} bytes: {seen:?}", frame.len());
        }
    }

    #[test]
    fn an_empty_frame_is_left_alone() {
        let mut empty: [u8; 0] = [];
        for draw in [0, 1, u64::MAX] {
            assert_eq!(corrupt_frame(&mut empty, draw), None);
        }
    }

    /// Random frames (any length to 300 bytes, 0 to 3 VLAN tags, cut
    /// anywhere, random bytes, EtherTypes that look like tags included):
    /// one bit differs, never inside the L2 header when bytes follow it.
    #[test]
    fn any_frame_gets_exactly_one_bit_flipped_outside_a_complete_l2_header() {
        let mut s = 0x5eed;
        for case in 0..20_000 {
            let tags = (splitmix64(&mut s) % 4) as usize;
            let tpids: Vec<u16> = (0..tags)
                .map(|_| VLAN_TPIDS[(splitmix64(&mut s) % 2) as usize])
                .collect();
            let payload = (splitmix64(&mut s) % 300) as usize;
            let mut frame = tagged(&tpids, payload);
            for b in frame.iter_mut().skip(14 + 4 * tags) {
                *b = splitmix64(&mut s) as u8;
            }
            let cut = (splitmix64(&mut s) % (frame.len() as u64 + 1)) as usize;
            frame.truncate(cut);
            let draw = splitmix64(&mut s);
            let mut out = frame.clone();
            let flipped = corrupt_frame(&mut out, draw);
            let diff = differing_bits(&frame, &out);
            match flipped {
                None => assert!(frame.is_empty() && diff.is_empty(), "case {case}"),
                Some(at) => {
                    assert_eq!(diff, [at], "case {case}: {frame:?}");
                    let header = l2_header_len(&frame);
                    if header < frame.len() {
                        assert!(at >= header * 8, "case {case}: bit {at}, header {header}");
                    }
                }
            }
        }
    }

    #[test]
    fn each_lane_of_each_transmitter_draws_its_own_stream_and_a_seed_replays_it() {
        let seed = crate::DEFAULT_CORRUPT_SEED;
        let ids = [
            transmitter_index(0, TxOwner::Arbiter),
            transmitter_index(0, TxOwner::Dispatcher(1)),
            transmitter_index(0, TxOwner::Dispatcher(2)),
            transmitter_index(1, TxOwner::Dispatcher(1)),
            transmitter_index(3, TxOwner::Dispatcher(0)),
        ];
        let mut firsts = std::collections::BTreeSet::new();
        for id in ids {
            for reverse in [false, true] {
                assert_eq!(lane_seed(seed, id, reverse), lane_seed(seed, id, reverse));
                assert!(
                    firsts.insert(lane_seed(seed, id, reverse)),
                    "{id} {reverse}"
                );
                assert_ne!(
                    lane_seed(seed, id, reverse),
                    lane_seed(seed + 1, id, reverse)
                );
            }
        }
        assert_eq!(
            transmitter_index(0, TxOwner::Arbiter),
            transmitter_index(0, TxOwner::Dispatcher(0))
        );
    }

    /// A new seed (`Bridge::set_corrupt_seed`): the lane's next draw is the
    /// one a lane started with that seed makes at the same position, so a
    /// run replays with the seed and the change made after the same draws.
    #[test]
    fn a_new_corruption_seed_continues_the_lane_from_its_position() {
        let lane = |seed: u64| {
            let shared = Arc::new(std::sync::atomic::AtomicU64::new(seed));
            let counters = Arc::new(TxShared::new(1, Grouping::new(1), Arc::clone(&shared)));
            (Lane::new(None, counters, 0, seed, (5, true)), shared)
        };
        let (mut changed, seed) = lane(9);
        let (mut fresh, _) = lane(10);
        for _ in 0..3 {
            changed.corrupt_draw();
            fresh.corrupt_draw();
        }
        seed.store(10, Ordering::Relaxed);
        let next: Vec<u64> = (0..4).map(|_| changed.corrupt_draw()).collect();
        let want: Vec<u64> = (0..4).map(|_| fresh.corrupt_draw()).collect();
        assert_eq!(next, want);
        // And back: the old seed's stream, from the seventh draw on.
        seed.store(9, Ordering::Relaxed);
        let (mut old, _) = lane(9);
        let want: Vec<u64> = (0..8).map(|_| old.corrupt_draw()).skip(7).collect();
        assert_eq!(vec![changed.corrupt_draw()], want);
    }

    /// A lane without a socket: what `push` does to the frame and the
    /// counters before the send (which then fails: no socket).
    #[test]
    fn a_corrupted_duplicated_packet_is_flipped_once_sent_twice_and_counted_once() {
        let mut pool = FramePool::new(4, 2048).expect("pool");
        let arena = Arc::clone(pool.arena());
        let original = tagged(&[0x8100], 100);
        let mut frame = pool.alloc().expect("a frame");
        arena.write(&mut frame, &original).expect("written");
        let cookie = u64::from(arena.release(frame).expect("released"));
        let counters = Arc::new(TxShared::new(
            1,
            Grouping::new(1),
            Arc::new(std::sync::atomic::AtomicU64::new(9)),
        ));
        let mut lane = Lane::new(None, Arc::clone(&counters), 0, 9, (0, false));
        let p = TxPacket {
            len: original.len() as u32,
            cookie,
            copies: 2,
            corrupt: true,
            flow: FlowId(0),
            ..TxPacket::default()
        };
        lane.push(&arena, &p);
        assert_eq!(lane.picks, [0, 0], "the frame named twice");
        let sent = arena.bytes(&lane.frames[0]).expect("bytes").to_vec();
        let diff = differing_bits(&original, &sent);
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert!(diff[0] >= 18 * 8, "{diff:?}");
        // The draw is the lane's first: a replay flips the same bit.
        let mut again = original.clone();
        let mut state = lane_seed(9, 0, false);
        assert_eq!(
            corrupt_frame(&mut again, splitmix64(&mut state)),
            Some(diff[0])
        );
        assert_eq!(lane.corrupt_state, state);
        assert_eq!(
            (counters.corrupted[0].read(), counters.duplicated[0].read()),
            (1, 1)
        );
        // A packet not marked is sent as it came.
        let mut frame = pool.alloc().expect("a frame");
        arena.write(&mut frame, &original).expect("written");
        let cookie = u64::from(arena.release(frame).expect("released"));
        lane.push(
            &arena,
            &TxPacket {
                len: original.len() as u32,
                cookie,
                ..TxPacket::default()
            },
        );
        assert_eq!(arena.bytes(&lane.frames[1]).expect("bytes"), &original[..]);
        assert_eq!(lane.corrupt_state, state, "no draw for it");
        // No socket: every send is dropped, the corruption stays counted
        // once and is no drop of its own.
        lane.flush(&arena);
        assert_eq!(counters.corrupted[0].read(), 1);
        assert_eq!(counters.drops[TxReason::TxError as usize].read(), 3);
        assert_eq!(counters.sent[0].read(), 0);
    }

    /// Where the IPv4 header of [`tagged_ipv4`] frames starts.
    const IP_AT: usize = 18;

    /// An 802.1Q-tagged IPv4/UDP frame whose TOS byte is `tos`, its header
    /// checksum right.
    fn tagged_ipv4(tos: u8) -> Vec<u8> {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .single_vlan(etherparse::VlanId::try_new(42).expect("a VLAN ID"))
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, 2000)
            .write(&mut f, &[7; 64])
            .expect("written");
        f[IP_AT + 1] = tos;
        let header = etherparse::Ipv4HeaderSlice::from_slice(&f[IP_AT..]).expect("IPv4");
        let checksum = header.to_header().calc_header_checksum();
        f[IP_AT + 10..IP_AT + 12].copy_from_slice(&checksum.to_be_bytes());
        f
    }

    /// The ECN field of a [`tagged_ipv4`] frame and whether its header
    /// checksum is what a full recomputation gives.
    fn ecn_and_checksum_ok(f: &[u8]) -> (u8, bool) {
        let header = etherparse::Ipv4HeaderSlice::from_slice(&f[IP_AT..]).expect("IPv4");
        let ok = header.header_checksum() == header.to_header().calc_header_checksum();
        (header.ecn().value(), ok)
    }

    /// Writes `bytes` into a frame of `pool` and puts it in flight: its
    /// cookie.
    fn in_flight(pool: &mut FramePool, bytes: &[u8]) -> u64 {
        let arena = Arc::clone(pool.arena());
        let mut frame = pool.alloc().expect("a frame");
        arena.write(&mut frame, bytes).expect("written");
        u64::from(arena.release(frame).expect("released"))
    }

    /// A lane without a socket: a packet a pipe marked CE leaves its
    /// backend with ECN 3 and a right IPv4 checksum (both copies of a
    /// duplicate: one frame), counted `ce_marked` once; one not marked
    /// leaves as it came; one that cannot be marked (Not-ECT) leaves as it
    /// came, counted `ce_unmarkable`; one marked and corrupted carries the
    /// mark and exactly one flipped bit on top of it.
    #[test]
    fn a_ce_packet_leaves_with_ecn_3_and_a_right_checksum() {
        let mut pool = FramePool::new(8, 2048).expect("pool");
        let arena = Arc::clone(pool.arena());
        let counters = Arc::new(TxShared::new(
            1,
            Grouping::new(1),
            Arc::new(std::sync::atomic::AtomicU64::new(9)),
        ));
        let mut lane = Lane::new(None, Arc::clone(&counters), 0, 9, (0, false));
        let ect0 = tagged_ipv4(0xb8 | 2);
        assert_eq!(ecn_and_checksum_ok(&ect0), (2, true));
        let packet = |cookie: u64, ce: bool| TxPacket {
            len: ect0.len() as u32,
            cookie,
            ce,
            flow: FlowId(0),
            ..TxPacket::default()
        };
        // Marked and duplicated.
        let cookie = in_flight(&mut pool, &ect0);
        lane.push(
            &arena,
            &TxPacket {
                copies: 2,
                ..packet(cookie, true)
            },
        );
        assert_eq!(lane.picks, [0, 0], "the marked frame named twice");
        let sent = arena.bytes(&lane.frames[0]).expect("bytes").to_vec();
        assert_eq!(ecn_and_checksum_ok(&sent), (3, true));
        assert_eq!(sent[IP_AT + 1] >> 2, 0xb8 >> 2, "DSCP kept");
        let changed: Vec<usize> = (0..sent.len()).filter(|&i| sent[i] != ect0[i]).collect();
        assert!(
            changed
                .iter()
                .all(|i| [IP_AT + 1, IP_AT + 10, IP_AT + 11].contains(i)),
            "{changed:?}"
        );
        assert_eq!(counters.ce_marked[0].read(), 1);
        // Not marked: as it came.
        let cookie = in_flight(&mut pool, &ect0);
        lane.push(&arena, &packet(cookie, false));
        assert_eq!(arena.bytes(&lane.frames[1]).expect("bytes"), &ect0[..]);
        assert_eq!(counters.ce_marked[0].read(), 1);
        // Marked but Not-ECT: as it came, counted apart.
        let not_ect = tagged_ipv4(0xb8);
        let cookie = in_flight(&mut pool, &not_ect);
        lane.push(&arena, &packet(cookie, true));
        assert_eq!(arena.bytes(&lane.frames[2]).expect("bytes"), &not_ect[..]);
        assert_eq!(counters.ce_marked[0].read(), 1);
        assert_eq!(counters.ce_unmarkable.read(), 1);
        // Marked and corrupted: the mark, then the lane's first draw's
        // flip on the marked bytes.
        let cookie = in_flight(&mut pool, &ect0);
        lane.push(
            &arena,
            &TxPacket {
                corrupt: true,
                ..packet(cookie, true)
            },
        );
        let mut want = ect0.clone();
        assert!(pspat_io::parse::mark_ce(&mut want));
        let mut state = lane_seed(9, 0, false);
        corrupt_frame(&mut want, splitmix64(&mut state));
        assert_eq!(arena.bytes(&lane.frames[3]).expect("bytes"), &want[..]);
        assert_eq!(
            (counters.ce_marked[0].read(), counters.corrupted[0].read()),
            (2, 1)
        );
        // No socket: every send dropped; the marks stay counted once.
        lane.flush(&arena);
        assert_eq!(counters.drops[TxReason::TxError as usize].read(), 5);
        assert_eq!(
            (counters.ce_marked[0].read(), counters.ce_unmarkable.read()),
            (2, 1)
        );
    }
}
