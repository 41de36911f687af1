//! The reverse direction: frames from the output interface back to the
//! input one, unshaped, by one thread, so that replies (TCP
//! acknowledgements, ARP) cross the bridge.
//!
//! The thread copies up to [`MAX_BATCH`] frames from its ring into its own
//! buffers (VLAN tag restored), then sends them with one `sendmmsg(2)`.
//! Every frame is counted once: sent, or dropped under a reason
//! (`too_long` above the input link's frame length; `tx_full`, `tx_error`,
//! `link_lost` from the send).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pspat_io::af_packet::MAX_BATCH;
use pspat_io::{IoError, PacketRx, PacketTx};

use crate::counters::{note_cpu, ReverseShared, RxReason, TxReason, NRX};
use crate::rx::POLL;

pub(crate) struct Reverse {
    pub(crate) rx: PacketRx,
    pub(crate) tx: PacketTx,
    pub(crate) counters: Arc<ReverseShared>,
    pub(crate) stop: Arc<AtomicBool>,
}

struct Batch {
    buffers: Vec<Vec<u8>>,
    lens: Vec<usize>,
    max: usize,
}

impl Reverse {
    pub(crate) fn run(self) {
        let Reverse {
            mut rx,
            mut tx,
            counters,
            stop,
        } = self;
        let max = tx.max_frame();
        let mut batch = Batch {
            buffers: (0..MAX_BATCH).map(|_| vec![0u8; max + 4]).collect(),
            lens: Vec::with_capacity(MAX_BATCH),
            max,
        };
        let mut last_kernel = Instant::now();
        let mut lost = false;
        // Acquire: pairs with the Release store of `Bridge::stop`.
        while !stop.load(Ordering::Acquire) {
            note_cpu(&counters.cpu);
            let outcome = rx.recv_with(POLL, |p| {
                counters.received.add(1);
                let tagged = p.vlan_tag.is_some();
                let len = p.frame_len();
                if len > batch.max + if tagged { 4 } else { 0 } || p.wire_len > p.data.len() {
                    counters.drops[RxReason::TooLong as usize].add(1);
                    return;
                }
                let i = batch.lens.len();
                match p.copy_into(&mut batch.buffers[i]) {
                    Some(n) => batch.lens.push(n),
                    None => {
                        counters.drops[RxReason::TooLong as usize].add(1);
                        return;
                    }
                }
                if batch.lens.len() == MAX_BATCH {
                    lost |= flush(&mut tx, &mut batch, &counters);
                }
            });
            lost |= flush(&mut tx, &mut batch, &counters);
            if last_kernel.elapsed() >= POLL {
                if let Ok(k) = rx.kernel_stats() {
                    counters.kernel_drops.add(k.drops);
                }
                last_kernel = Instant::now();
            }
            if let Err(e) = outcome {
                counters.error.set(e.to_string());
                break;
            }
            if lost {
                break;
            }
        }
        if let Ok(k) = rx.kernel_stats() {
            counters.kernel_drops.add(k.drops);
        }
    }
}

/// Sends the batch; returns whether the input link was lost.
fn flush(tx: &mut PacketTx, batch: &mut Batch, counters: &ReverseShared) -> bool {
    let mut at = 0;
    let mut full_since: Option<Instant> = None;
    let mut lost = false;
    while at < batch.lens.len() {
        let frames: Vec<&[u8]> = batch.lens[at..]
            .iter()
            .zip(&batch.buffers[at..])
            .map(|(&n, b)| &b[..n])
            .collect();
        let reason = match tx.send_batch(&frames) {
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
                lost = true;
                TxReason::LinkLost
            }
            Err(e) => {
                counters.error.set(e.to_string());
                TxReason::TxError
            }
        };
        counters.drops[NRX + reason as usize].add((batch.lens.len() - at) as u64);
        at = batch.lens.len();
    }
    batch.lens.clear();
    lost
}
