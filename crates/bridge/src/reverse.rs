//! The reverse direction unshaped: frames from the output interface back to
//! the input one, so that replies (TCP acknowledgements, ARP) cross the
//! bridge.
//!
//! [`Direct`] copies up to [`MAX_BATCH`] frames from a ring into its own
//! buffers (VLAN tag restored), then sends them with one `sendmmsg(2)`.
//! Every frame is counted once: sent, or dropped under a reason
//! (`too_long` above the input link's frame length; `tx_full`, `tx_error`,
//! `link_lost` from the send). One thread ([`Reverse`]) forwards a reverse
//! direction that is never shaped; the RX threads of a shaped reverse
//! direction that can be switched live ([`crate::ReverseSwitch`]) forward through
//! a [`Direct`] of their own while the switch is off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat_io::af_packet::{RxPacket, MAX_BATCH};
use pspat_io::{IoError, PacketRx, PacketTx};

use crate::config::{KERNEL_STATS_EVERY, RX_WAIT};
use crate::counters::{note_cpu, ReverseShared, RxReason, TxReason, NRX};

/// The thread of a reverse direction that is never shaped.
pub(crate) struct Reverse {
    pub(crate) rx: PacketRx,
    pub(crate) direct: Direct,
    pub(crate) stop: Arc<AtomicBool>,
}

impl Reverse {
    pub(crate) fn run(self) {
        let Reverse {
            mut rx,
            mut direct,
            stop,
        } = self;
        let mut last_kernel = Instant::now();
        // Acquire: pairs with the Release store of `Bridge::stop`.
        while !stop.load(Ordering::Acquire) {
            note_cpu(&direct.counters.cpu);
            let outcome = rx.recv_with(RX_WAIT, |p| direct.take(p));
            let lost = direct.flush();
            if last_kernel.elapsed() >= KERNEL_STATS_EVERY {
                if let Ok(k) = rx.kernel_stats() {
                    direct.counters.kernel_drops.add(k.drops);
                }
                last_kernel = Instant::now();
            }
            if let Err(e) = outcome {
                direct.counters.error.set(e.to_string());
                break;
            }
            if lost {
                break;
            }
        }
        if let Ok(k) = rx.kernel_stats() {
            direct.counters.kernel_drops.add(k.drops);
        }
    }
}

/// Unshaped forwarding to the input interface: a batch of copies sent
/// with one `sendmmsg(2)`, counted in its [`ReverseShared`].
pub(crate) struct Direct {
    tx: PacketTx,
    buffers: Vec<Vec<u8>>,
    lens: Vec<usize>,
    max: usize,
    pub(crate) counters: Arc<ReverseShared>,
    /// The input link was lost (sticky).
    lost: bool,
}

impl Direct {
    /// Buffers for [`MAX_BATCH`] frames of the longest `tx` takes.
    pub(crate) fn new(tx: PacketTx, counters: Arc<ReverseShared>) -> Self {
        let max = tx.max_frame();
        Direct {
            tx,
            buffers: (0..MAX_BATCH).map(|_| vec![0u8; max + 4]).collect(),
            lens: Vec::with_capacity(MAX_BATCH),
            max,
            counters,
            lost: false,
        }
    }

    /// Takes one frame into the batch (sending the batch when full).
    pub(crate) fn take(&mut self, p: RxPacket<'_>) {
        let c = &self.counters;
        c.received.add(1);
        let tagged = p.vlan_tag.is_some();
        let len = p.frame_len();
        c.received_bytes.add(len as u64);
        if len > self.max + if tagged { 4 } else { 0 } || p.wire_len > p.data.len() {
            c.drops[RxReason::TooLong as usize].add(1);
            return;
        }
        let i = self.lens.len();
        match p.copy_into(&mut self.buffers[i]) {
            Some(n) => self.lens.push(n),
            None => {
                c.drops[RxReason::TooLong as usize].add(1);
                return;
            }
        }
        if self.lens.len() == MAX_BATCH {
            self.flush();
        }
    }

    /// Sends the batch; returns whether the input link was lost (now or
    /// before).
    pub(crate) fn flush(&mut self) -> bool {
        let counters = &self.counters;
        let mut at = 0;
        let mut full_since: Option<Instant> = None;
        while at < self.lens.len() {
            let frames: Vec<&[u8]> = self.lens[at..]
                .iter()
                .zip(&self.buffers[at..])
                .map(|(&n, b)| &b[..n])
                .collect();
            let reason = match self.tx.send_batch(&frames) {
                Ok(0) => {
                    let since = *full_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < Duration::from_millis(2) {
                        std::thread::yield_now();
                        continue;
                    }
                    TxReason::TxFull
                }
                Ok(n) => {
                    counters.sent.add(n as u64);
                    counters
                        .sent_bytes
                        .add(frames[..n].iter().map(|f| f.len() as u64).sum());
                    at += n;
                    full_since = None;
                    continue;
                }
                Err(IoError::FrameTooLong { .. }) => {
                    counters.drops[NRX + TxReason::TxTooLong as usize].add(1);
                    at += 1;
                    continue;
                }
                Err(e) if e.is_link_lost() => {
                    counters.error.set(e.to_string());
                    self.lost = true;
                    TxReason::LinkLost
                }
                Err(e) => {
                    counters.error.set(e.to_string());
                    TxReason::TxError
                }
            };
            counters.drops[NRX + reason as usize].add((self.lens.len() - at) as u64);
            at = self.lens.len();
        }
        self.lens.clear();
        self.lost
    }
}
