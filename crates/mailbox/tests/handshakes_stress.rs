//! The handshakes together on real threads, as the runtime uses them:
//! several clients submit in bursts with pauses (so the arbiter keeps
//! retiring mailboxes and going to sleep), switching between two client
//! lists (a migration); one arbiter takes announcements, drains, retires
//! after a few empty reads, sleeps on a [`Parker`] with a timeout as its
//! safety net, and returns every descriptor through a [`Recycler`].
//!
//! Checked: every packet arrives exactly once and in order per client; the
//! descriptor contents the arbiter reads are those of the packet's own use
//! (no reuse before return); and no sleep ever ran into its timeout: the
//! clients never pause for long and always kick, so a sleep that times out
//! is a lost wake-up (and costs the run `NAP`). The default
//! runs are short; `cargo test --release -p pspat-mailbox -- --ignored
//! stress` runs a long one.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use pspat_mailbox::{
    mailbox, publish_fence, try_retire, ClientList, Consumer, FreeDescriptors, Parker, Producer,
    Recycler, ReturnedSet, Wake,
};

/// Descriptors per client: few, so they are reused constantly.
const DESCS: usize = 64;
/// Lists (CPUs).
const LISTS: usize = 2;
/// Empty reads before a mailbox leaves service.
const RETIRE_AFTER: u32 = 2;
/// The safety net; a lost wake-up would cost this much, and be counted.
const NAP: Duration = Duration::from_secs(10);

/// What a client shares with the arbiter besides its mailbox.
struct Owner {
    returned: ReturnedSet,
    /// Per descriptor: the sequence number of the packet using it.
    contents: Box<[AtomicU64]>,
}

/// Slot value: sequence number (from 1) and descriptor.
fn encode(seq: u64, desc: u32) -> NonZeroU64 {
    NonZeroU64::new(seq << 32 | u64::from(desc)).unwrap()
}

fn decode(v: NonZeroU64) -> (u64, u32) {
    (v.get() >> 32, v.get() as u32)
}

/// xorshift64*: seeded burst sizes and pauses.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

struct Shared {
    lists: Vec<ClientList>,
    parker: Parker,
    owners: Vec<Owner>,
}

fn client(shared: Arc<Shared>, id: u32, mut tx: Producer<NonZeroU64>, packets: u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(id + 1));
    let me = &shared.owners[id as usize];
    let mut free = FreeDescriptors::new(DESCS);
    let mut seq = 1;
    let mut burst_no = 0u64;
    while seq <= packets {
        let burst = 1 + rng.below(8);
        let mut pushed = 0;
        while pushed < burst && seq <= packets {
            let Some(desc) = free.alloc(&me.returned) else {
                break;
            };
            // Relaxed: published by the Release push below.
            me.contents[desc as usize].store(seq, Ordering::Relaxed);
            if tx.push(encode(seq, desc)).is_err() {
                free.free(desc);
                break;
            }
            seq += 1;
            pushed += 1;
        }
        if pushed > 0 {
            // A "migration" every 4 bursts.
            let list = &shared.lists[(id as usize + (burst_no / 4) as usize) % LISTS];
            publish_fence();
            list.announce_if_needed(id);
            shared.parker.kick();
        } else {
            thread::yield_now();
        }
        burst_no += 1;
        match rng.below(16) {
            0 => thread::sleep(Duration::from_micros(50)),
            1..=3 => thread::yield_now(),
            _ => {}
        }
    }
    drop(tx);
    shared.lists[id as usize % LISTS].announce(id);
    shared.parker.kick_force();
}

struct Mailbox {
    rx: Consumer<NonZeroU64>,
    in_service: bool,
    idle_reads: u32,
    next_seq: u64,
    done: bool,
}

/// Returns (sleeps, sleeps that timed out).
fn arbiter(shared: Arc<Shared>, rxs: Vec<Consumer<NonZeroU64>>, packets: u64) -> (u64, u64) {
    shared.parker.bind_current_thread();
    let mut boxes: Vec<Mailbox> = rxs
        .into_iter()
        .map(|rx| Mailbox {
            rx,
            in_service: false,
            idle_reads: 0,
            next_seq: 1,
            done: false,
        })
        .collect();
    let mut recycler = Recycler::new(boxes.len(), DESCS);
    let (mut sleeps, mut timeouts) = (0, 0);
    loop {
        let mut work = 0;
        for list in &shared.lists {
            list.take(|id| {
                let b = &mut boxes[id as usize];
                if !b.done {
                    b.in_service = true;
                    b.idle_reads = 0;
                }
            });
        }
        for (id, b) in boxes.iter_mut().enumerate() {
            if !b.in_service {
                continue;
            }
            // Before popping: once abandoned, `pop` sees every value.
            let abandoned = b.rx.is_abandoned();
            let mut got = 0;
            while let Some(v) = b.rx.pop() {
                let (seq, desc) = decode(v);
                assert_eq!(
                    seq, b.next_seq,
                    "client {id}: lost, duplicated or reordered"
                );
                // Relaxed: published by the client's push, acquired by pop.
                let c = shared.owners[id].contents[desc as usize].load(Ordering::Relaxed);
                assert_eq!(
                    c, seq,
                    "client {id}: descriptor {desc} reused before return"
                );
                b.next_seq += 1;
                recycler.mark(id as u32, desc);
                got += 1;
            }
            b.rx.release();
            work += got;
            if abandoned {
                assert_eq!(b.next_seq, packets + 1, "client {id}: all drained at exit");
                b.in_service = false;
                b.done = true;
                continue;
            }
            b.idle_reads = if got > 0 { 0 } else { b.idle_reads + 1 };
            if b.idle_reads >= RETIRE_AFTER && try_retire(&shared.lists, || b.rx.is_empty()) {
                b.in_service = false;
            }
        }
        recycler.flush(|owner| &shared.owners[owner as usize].returned);
        if work > 0 {
            continue;
        }
        if boxes.iter().all(|b| b.done) {
            return (sleeps, timeouts);
        }
        shared.parker.prepare_sleep();
        let pending = shared.lists.iter().any(ClientList::has_announcements)
            || boxes.iter().any(|b| b.in_service && !b.rx.is_empty());
        if pending {
            shared.parker.cancel_sleep();
            continue;
        }
        sleeps += 1;
        if shared.parker.sleep(NAP) == Wake::TimedOut {
            timeouts += 1;
        }
    }
}

fn run(clients: u32, packets: u64) {
    let mut txs = Vec::new();
    let mut rxs = Vec::new();
    for _ in 0..clients {
        let (tx, rx) = mailbox::<NonZeroU64>(64).unwrap();
        txs.push(tx);
        rxs.push(rx);
    }
    let shared = Arc::new(Shared {
        lists: (0..LISTS)
            .map(|_| ClientList::new(clients as usize))
            .collect(),
        parker: Parker::new(),
        owners: (0..clients)
            .map(|_| Owner {
                returned: ReturnedSet::new(DESCS),
                contents: (0..DESCS).map(|_| AtomicU64::new(0)).collect(),
            })
            .collect(),
    });
    let arb = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || arbiter(shared, rxs, packets))
    };
    let handles: Vec<_> = txs
        .into_iter()
        .enumerate()
        .map(|(id, tx)| {
            let shared = Arc::clone(&shared);
            thread::spawn(move || client(shared, id as u32, tx, packets))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (sleeps, timeouts) = arb.join().unwrap();
    assert_eq!(
        timeouts, 0,
        "{timeouts} of {sleeps} sleeps timed out: a lost wake-up"
    );
}

#[test]
fn handshakes_two_clients() {
    run(2, 20_000);
}

#[test]
fn handshakes_five_clients() {
    run(5, 5_000);
}

#[test]
#[ignore = "stress"]
fn stress_handshakes_eight_clients_2m() {
    run(8, 2_000_000);
}
