//! For a scheduler that counts from arrival, the time the arbiter's thread
//! enqueues a packet at, its arrival stamp, is never earlier than the
//! packet's submission: a pipe's delay line counts from that stamp, so an
//! early stamp lets a packet out before its delay.
//!
//! Old behaviour: every packet a round collected was stamped with the round's
//! single clock read, taken before the mailboxes were read, so a packet
//! submitted between that read and the collection was stamped early by that
//! gap; a daemon whose arbiter thread was preempted there let a packet out
//! of a 20 ms pipe after 19.05 ms.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pspat::{NullTx, Runtime, RuntimeConfig, Submission, SubmitError};
use pspat_sched::{FlowId, Instant, Packet, Rejected, Scheduler};

/// A FIFO that records each packet's length (the test's sequence number)
/// with the time it was enqueued at.
struct StampRecorder {
    queue: VecDeque<Packet>,
    stamps: Arc<Mutex<Vec<(u32, u64)>>>,
    counts_from_arrival: bool,
}

impl Scheduler for StampRecorder {
    fn enqueue(&mut self, now: Instant, pkt: Packet) -> Result<(), Rejected> {
        self.stamps.lock().unwrap().push((pkt.len, now.as_nanos()));
        self.queue.push_back(pkt);
        Ok(())
    }

    fn dequeue(&mut self, _now: Instant) -> Option<Packet> {
        self.queue.pop_front()
    }

    fn queued(&self) -> usize {
        self.queue.len()
    }

    fn name(&self) -> &'static str {
        "stamp-recorder"
    }

    fn counts_from_arrival(&self) -> bool {
        self.counts_from_arrival
    }
}

/// Spins for about `ns` of the runtime's clock, so the arbiter keeps
/// polling (its idle spin) rather than parking between packets.
fn spin_for(c: &pspat::Client<NullTx>, ns: u64) {
    let until = c.now().as_nanos() + ns;
    while c.now().as_nanos() < until {
        std::hint::spin_loop();
    }
}

#[test]
fn no_packet_is_stamped_before_it_was_submitted() {
    const PACKETS: u32 = 20_000;
    let stamps = Arc::new(Mutex::new(Vec::with_capacity(PACKETS as usize)));
    let sched = StampRecorder {
        queue: VecDeque::with_capacity(4096),
        stamps: Arc::clone(&stamps),
        counts_from_arrival: true,
    };
    let mut cfg = RuntimeConfig::default();
    cfg.max_clients = 1;
    let rt = Runtime::start(cfg, sched, |_| NullTx::new()).unwrap();
    let mut client = rt.client().unwrap();
    // submitted[seq] = the runtime clock just before packet `seq`'s submit.
    let mut submitted = vec![0u64; PACKETS as usize + 1];
    let mut seq = 1;
    while seq <= PACKETS {
        let before = client.now().as_nanos();
        let s = Submission {
            flow: FlowId(0),
            len: seq,
            cookie: u64::from(seq),
            ect: false,
        };
        match client.submit(s) {
            Ok(_) => {
                submitted[seq as usize] = before;
                seq += 1;
                // A gap of a few hundred ns to a few µs: packets land at
                // every point of the arbiter's rounds.
                spin_for(&client, u64::from(seq % 16) * 250);
            }
            Err(SubmitError::Full(_)) => std::thread::sleep(Duration::from_micros(50)),
            Err(e) => panic!("{e}"),
        }
    }
    drop(client);
    let done = rt.shutdown().unwrap();
    assert!(done.stats.conserved() && done.stats.in_flight == 0);
    let stamps = stamps.lock().unwrap();
    assert_eq!(stamps.len(), PACKETS as usize);
    let early: Vec<(u32, u64)> = stamps
        .iter()
        .filter(|&&(len, at)| at < submitted[len as usize])
        .map(|&(len, at)| (len, submitted[len as usize] - at))
        .collect();
    assert!(
        early.is_empty(),
        "{} of {PACKETS} packets stamped before their submission, e.g. (seq, ns early) {:?}",
        early.len(),
        &early[..early.len().min(5)]
    );
    // Stamps never go back in time.
    assert!(stamps.windows(2).all(|w| w[0].1 <= w[1].1));
}
