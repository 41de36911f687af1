//! An RX thread: one runtime client reading the input interface's ring.
//!
//! For each frame the ring gives: check its length against the output
//! link, parse it, classify it, note whether it is ECN-capable (its IP
//! header's ECN field, at the offset its flow key gives:
//! [`pspat_io::parse::ecn_capable_parsed`]; [`pspat::Submission::ect`]),
//! check its flow's queue limit, ask the
//! client for the descriptor slot it will travel in
//! ([`pspat::Client::next_slot`]), copy it into that slot's frame (the one
//! copy between the wire and the output socket), and submit it with the
//! frame's index as its cookie. A refused frame is counted under its reason
//! ([`RxReason`]). With several egress interfaces the thread holds one
//! client per interface and submits each frame to its flow's
//! ([`crate::egress`]). Frames are descriptors: with E egress interfaces RX
//! thread `k` owns frames `k·E·D .. (k+1)·E·D` of the pool, frame
//! `(k·E + e)·D + s` travels in slot `s` of its client on interface `e`, and
//! the runtime's guarantee that nobody touches a slot until its packet was
//! transmitted or dropped (and that the client's next use happens after)
//! is what lets the thread reclaim the frame again when the slot comes
//! back ([`pspat_io::FrameArena`]'s release and reclaim carry the bytes
//! across threads, with no separate return path).
//!
//! The thread waits for its ring in `poll(2)`, beside the bridge's
//! [`pspat_io::StopLatch`] (raised by a stop: the wait ends at once), at
//! most [`RX_WAIT`] at a time, so an idle bridge costs one wake-up a second
//! per thread; with a V2 ring
//! ([`pspat_io::RxRing`]) it wakes on the first frame, and each call gives
//! every frame that is ready, up to the ring's batch. Each frame is
//! submitted on its own (one publishing fence per frame): its bytes must
//! be copied into the slot the client will give it before it is
//! submitted, and [`pspat::Client::next_slot`] names only the slot of the
//! next submit, so a burst ([`pspat::Client::submit_burst`]) could not
//! place its later frames.
//!
//! A reverse RX thread with a [`ReverseSwitch`] reads the switch for each
//! frame: off, it forwards the frame unshaped ([`Direct`]: its own copy,
//! sent with the batch's others in one `sendmmsg(2)` on the input
//! interface, counted apart), on, it handles the frame as above. A lost
//! input link ends it either way.
//!
//! With [`crate::IoBackend::Xdp`] (cargo feature `xdp`) the thread reads an
//! AF_XDP socket on queue 0 of the input instead (`RxSocket::Xdp`): the
//! same handling, the frame copied from its UMEM frame into the slot's
//! pool frame, the UMEM frame lent straight back to the kernel through the
//! fill ring; the wait is the same `poll(2)` of at most [`RX_WAIT`]. The
//! kernel's drops (RX ring full, frame too long for a UMEM frame, no fill
//! frame) are counted as the ring drops of AF_PACKET are (`not_received`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat::{Client, Submission, SubmitError};
use pspat_io::af_packet::RxPacket;
use pspat_io::parse::{ecn_capable, ecn_capable_parsed, parse_frame, ParseLimits};
use pspat_io::{Frame, FrameArena, PacketRx, StopLatch};

use crate::backend::AfPacketTx;
use crate::classify::{Classifier, Verdict};
use crate::config::{KERNEL_STATS_EVERY, RX_WAIT};
use crate::counters::{note_cpu, Grouping, RxReason, RxShared, TxShared, NRX};
use crate::reverse::Direct;
use crate::switch::ReverseSwitch;

/// The socket an RX thread reads.
pub(crate) enum RxSocket {
    /// An AF_PACKET ring.
    Packet(PacketRx),
    /// An AF_XDP socket, with the kernel's drop count last read (its
    /// counters run from the socket's opening).
    #[cfg(feature = "xdp")]
    Xdp(Box<pspat_io::xdp::XdpSocket>, u64),
}

impl RxSocket {
    /// Ends the socket's waits once `latch` is raised (the sockets'
    /// `stop_waits_on`).
    pub(crate) fn stop_waits_on(&mut self, latch: Arc<StopLatch>) {
        match self {
            RxSocket::Packet(rx) => rx.stop_waits_on(latch),
            #[cfg(feature = "xdp")]
            RxSocket::Xdp(rx, _) => rx.stop_waits_on(latch),
        }
    }

    /// Gives every ready frame to `on_packet`, waiting up to `timeout`
    /// for the first (the sockets' `recv_with`); the error as a line.
    #[cfg_attr(not(feature = "xdp"), allow(unused_mut))]
    fn recv(
        &mut self,
        timeout: Duration,
        mut on_packet: impl FnMut(RxPacket<'_>),
    ) -> Result<usize, String> {
        match self {
            RxSocket::Packet(rx) => rx.recv_with(timeout, on_packet).map_err(|e| e.to_string()),
            #[cfg(feature = "xdp")]
            RxSocket::Xdp(rx, _) => rx
                .recv_with(timeout, |data| {
                    // The frame as on the wire: AF_XDP sees the VLAN tag
                    // in place and never truncates.
                    on_packet(RxPacket {
                        data,
                        wire_len: data.len(),
                        vlan_tag: None,
                        timestamp: Duration::ZERO,
                        rx_hash: 0,
                    });
                })
                .map_err(|e| e.to_string()),
        }
    }

    /// Adds the kernel's drops since the last read to the counters.
    fn read_kernel_stats(&mut self, counters: &RxShared) {
        match self {
            RxSocket::Packet(rx) => read_kernel_stats(rx, counters),
            #[cfg(feature = "xdp")]
            RxSocket::Xdp(rx, last) => {
                if let Ok(k) = rx.kernel_stats() {
                    let total = k.rx_dropped + k.rx_ring_full;
                    counters.kernel_drops.add(total.saturating_sub(*last));
                    *last = total;
                }
            }
        }
    }
}

pub(crate) struct RxThread<C> {
    pub(crate) rx: RxSocket,
    pub(crate) st: RxState<C>,
    /// A reverse RX thread that can be switched live: its unshaped path,
    /// taken while the switch is off.
    pub(crate) direct: Option<(Direct, ReverseSwitch)>,
}

/// Everything of an RX thread but its socket.
pub(crate) struct RxState<C> {
    /// The thread's position among the RX threads of its direction (its
    /// `done` counters in the transmitters' blocks).
    pub(crate) index: usize,
    /// Its frames' group in the pool: `index` for the input's RX threads,
    /// `rx_threads + index` for a shaped reverse direction's.
    pub(crate) group: usize,
    /// One client per egress interface.
    pub(crate) clients: Vec<Client<AfPacketTx>>,
    pub(crate) classifier: C,
    pub(crate) arena: Arc<FrameArena>,
    /// This thread's frames by egress interface and slot: `Some` while the
    /// thread holds the token, `None` while the frame is in flight.
    pub(crate) tokens: Vec<Vec<Option<Frame>>>,
    pub(crate) counters: Arc<RxShared>,
    /// The transmitters' counters, by egress interface.
    pub(crate) tx: Vec<Vec<Arc<TxShared>>>,
    /// The egress interface of each flow (empty: every flow takes the
    /// first).
    pub(crate) egress_of: Arc<[u16]>,
    pub(crate) flows: usize,
    /// The counter group of each flow.
    pub(crate) grouping: Grouping,
    /// Packets of one group (one flow unless grouped) this thread may have
    /// in the runtime; `None`: no limit but the descriptors.
    pub(crate) queue_limit: Option<u64>,
    pub(crate) out_max: usize,
    pub(crate) limits: ParseLimits,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) cpu: Option<usize>,
    /// Frames of each counter group this thread submitted (for the queue
    /// limit).
    pub(crate) admitted: Vec<u64>,
    pub(crate) scratch: Vec<u8>,
}

impl<C: Classifier> RxThread<C> {
    /// Runs until stopped or the input link is lost; hands the frame
    /// tokens it holds back.
    pub(crate) fn run(self) -> Vec<Frame> {
        let RxThread {
            mut rx,
            mut st,
            mut direct,
        } = self;
        if let Some(cpu) = st.cpu {
            core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
        }
        let mut last_kernel = Instant::now();
        let mut lost = false;
        // Acquire: pairs with the Release store of `Bridge::stop`.
        while !st.stop.load(Ordering::Acquire) && !lost {
            note_cpu(&st.counters.cpu);
            let outcome = match &mut direct {
                None => rx.recv(RX_WAIT, |p| st.handle(p)),
                Some((d, switch)) => {
                    // The mode, for every frame (`ReverseSwitch::shaped`:
                    // Acquire): a frame read after a change took effect is
                    // handled in the new mode, even in a wait begun before.
                    let outcome = rx.recv(RX_WAIT, |p| {
                        if switch.shaped() {
                            st.handle(p);
                        } else {
                            d.take(p);
                        }
                    });
                    lost = d.flush();
                    outcome
                }
            };
            if last_kernel.elapsed() >= KERNEL_STATS_EVERY {
                rx.read_kernel_stats(&st.counters);
                last_kernel = Instant::now();
            }
            if let Err(e) = outcome {
                st.counters.error.set(e);
                break;
            }
        }
        rx.read_kernel_stats(&st.counters);
        // Dropping a client retires it; its runtime still transmits what it
        // accepted.
        drop(st.clients);
        st.tokens.into_iter().flatten().flatten().collect()
    }
}

/// Adds the kernel's ring drops since the last read to the counters.
pub(crate) fn read_kernel_stats(rx: &mut PacketRx, counters: &RxShared) {
    if let Ok(k) = rx.kernel_stats() {
        counters.kernel_drops.add(k.drops);
    }
}

impl<C: Classifier> RxState<C> {
    fn drop_unclassified(&self, reason: RxReason) {
        self.counters.drops[reason as usize].add(1);
    }

    /// Counts a drop of a frame of counter group `group`.
    fn drop_flow(&self, group: usize, reason: RxReason) {
        self.counters.drops[reason as usize].add(1);
        self.counters.flow_drops[group * NRX + reason as usize].add(1);
    }

    fn handle(&mut self, p: RxPacket<'_>) {
        let c = &self.counters;
        let len = p.frame_len();
        c.frames.add(1);
        c.bytes.add(len as u64);
        let tagged =
            p.vlan_tag.is_some() || matches!(p.data.get(12..14), Some([0x81, 0x00] | [0x88, 0xa8]));
        let max = self.out_max + if tagged { 4 } else { 0 };
        if len > max || p.wire_len > p.data.len() || len > self.arena.frame_size() {
            self.drop_unclassified(RxReason::TooLong);
            return;
        }
        // The frame as it was on the wire: the ring's bytes, or with the
        // VLAN tag the kernel removed put back.
        let frame: &[u8] = if p.vlan_tag.is_some() {
            match p.copy_into(&mut self.scratch) {
                Some(n) => &self.scratch[..n],
                None => {
                    self.drop_unclassified(RxReason::TooLong);
                    return;
                }
            }
        } else {
            p.data
        };
        let key = parse_frame(frame, &self.limits);
        match &key {
            Ok(_) => c.parsed.add(1),
            Err(e) => c.refused[e.reason.index()].add(1),
        }
        let flow = match self.classifier.classify(frame, key.as_ref()) {
            Verdict::Flow(f) if (f.0 as usize) < self.flows => f,
            Verdict::Flow(_) => return self.drop_unclassified(RxReason::BadFlow),
            Verdict::Filtered => return self.drop_unclassified(RxReason::Filtered),
            Verdict::Unparsed(reason) => {
                c.unparsed[reason.index()].add(1);
                return;
            }
        };
        // ECN-capable: for a parsed frame, the one byte at the IP header
        // offset its key gives; for one that did not parse (forwarded to
        // flow 0), the walk to its IP header, if it has a whole one.
        let ect = match &key {
            Ok(k) => ecn_capable_parsed(frame, k),
            Err(_) => ecn_capable(frame),
        };
        let f = self.grouping.of(flow.0);
        let e = self
            .egress_of
            .get(flow.0 as usize)
            .map_or(0, |&e| usize::from(e));
        c.received[f].add(1);
        c.received_bytes[f].add(len as u64);
        if let Some(limit) = self.queue_limit {
            // The flow's queue: what this thread submitted less what the
            // transmitters finished (loaded Acquire: counted after the
            // frames left, so never more than were submitted). Arbiter
            // drops do not happen while the bridge runs (the scheduler's
            // capacity covers every descriptor), so they cannot leave a
            // flow stuck; a scheduler that drops by itself counts its flows
            // in groups, without this limit (`Bridge::start_custom`).
            let groups = self.grouping.groups();
            let done: u64 = self.tx[e]
                .iter()
                .map(|t| t.done[self.index * groups + f].read())
                .sum();
            if self.admitted[f].saturating_sub(done) >= limit {
                return self.drop_flow(f, RxReason::FlowLimit);
            }
        }
        let Some(slot) = self.clients[e].next_slot() else {
            return self.drop_flow(f, RxReason::MailboxFull);
        };
        let d = self.tokens[e].len();
        let index = ((self.group * self.tokens.len() + e) * d) as u32 + slot;
        let token = match self.tokens[e][slot as usize].take() {
            Some(t) => Ok(t),
            // Back from the transmitter (or dropped by the runtime): the slot
            // is free, so the frame is in flight and nobody else reclaims it.
            None => self.arena.reclaim(index),
        };
        let Ok(mut token) = token else {
            // Never expected (the slot guarantee): the frame is lost to this
            // thread, the packet counted.
            return self.drop_flow(f, RxReason::MailboxFull);
        };
        let copied = self
            .arena
            .buffer_mut(&mut token)
            .ok()
            .and_then(|buf| p.copy_into(buf));
        let Some(n) = copied.filter(|&n| self.arena.set_len(&mut token, n).is_ok()) else {
            self.tokens[e][slot as usize] = Some(token);
            return self.drop_flow(f, RxReason::TooLong);
        };
        let Ok(cookie) = self.arena.release(token) else {
            return self.drop_flow(f, RxReason::MailboxFull);
        };
        let sub = Submission {
            flow,
            len: n as u32,
            cookie: u64::from(cookie),
            ect,
        };
        match self.clients[e].submit(sub) {
            Ok(_) => self.admitted[f] += 1,
            Err(err) => {
                // Refused: the frame is still ours; take the token back.
                self.tokens[e][slot as usize] = self.arena.reclaim(cookie).ok();
                let reason = match err {
                    SubmitError::Closed(_) => RxReason::Closed,
                    _ => RxReason::MailboxFull,
                };
                self.drop_flow(f, reason);
            }
        }
    }
}
