//! loom models of the runtime's handshakes: the retire handshake of the
//! client lists (no stranded packet), the parker (no lost wake-up) and
//! descriptor recycling (no reuse before return). Each model runs the real
//! types of this crate (and the control inbox), and a real mailbox of E = 8 slots in lines of
//! Λ = 2; `.ci/loom.sh` bounds them to 4 preemptions.
//!
//! What each model catches when the ordering it relies on is weakened
//! (tried on a local copy of the crate; the weakened code is not kept):
//! * `retire_*`: removing the client's `publish_fence` or the fence in
//!   `try_retire`, or turning `try_retire`'s swap into a plain load,
//!   strands a packet in all three. Storing the bit before the hint in
//!   `ClientList::announce` strands one in
//!   `retire_races_announce_then_push`. Not caught: a Relaxed bit
//!   `fetch_or` (loom orders stores as they execute), and a
//!   compare-exchange from the retiring client's id in place of the swap
//!   (safe by C++20's fence coherence rule too; `client_list` docs).
//! * `sleep_wake_*`: removing the
//!   fence in `Parker::prepare_sleep` is a lost wake-up in
//!   `sleep_wake_in_service`, `sleep_wake_announced` and
//!   `sleep_wake_after_retire` (loom reports the deadlock: under loom the
//!   park has no timeout); removing the waker's `publish_fence` is one in
//!   `sleep_wake_in_service` and `sleep_wake_after_retire`; removing the
//!   fence at the end of `ClientList::announce` is one in
//!   `sleep_wake_announced` and `sleep_wake_after_retire`; removing the
//!   fence in `try_retire` is one in `sleep_wake_after_retire`; a
//!   `kick_force` that does not unpark is one in `sleep_wake_client_exit`.
//! * `inbox_loses_nothing_and_publishes_effects`: see its docs.
//! * `recycle_no_reuse_before_return`: weakening the `fetch_or` of
//!   `Recycler::flush` or the swap in `FreeDescriptors::alloc` to Relaxed
//!   lets the owner reuse the descriptor without seeing what its
//!   transmitter recorded. (A transmitter reading the owner's *next*
//!   contents would be load buffering, which loom does not explore: that
//!   half rests on the same edge.)

use std::num::NonZeroU64;
use std::time::Duration;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use pspat_mailbox::{
    mailbox_with_line, publish_fence, try_retire, ClientList, Consumer, FreeDescriptors, Parker,
    Producer, Recycler, ReturnedSet,
};

const E: usize = 8;
const LINE: usize = 2;
/// The client whose mailbox the models follow.
const ME: u32 = 0;
/// Another client on the same list.
const OTHER: u32 = 1;
/// Unused under loom (the park has no timeout), required by the API.
const NAP: Duration = Duration::from_secs(1);

fn nz(v: u64) -> NonZeroU64 {
    NonZeroU64::new(v).unwrap()
}

/// A loom builder bounded to 2 preemptions unless `LOOM_MAX_PREEMPTIONS`
/// says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// The arbiter's state for the followed mailbox, as in the runtime:
/// in service or not, and what it drained so far (in order).
struct Arbiter {
    rx: Consumer<NonZeroU64>,
    in_service: bool,
    /// Retire the mailbox when a read finds it empty.
    retires: bool,
    drained: u64,
}

impl Arbiter {
    fn new(rx: Consumer<NonZeroU64>, in_service: bool) -> Self {
        Arbiter {
            rx,
            in_service,
            retires: true,
            drained: 0,
        }
    }

    /// One read of the list: take announcements (the followed client's bit
    /// puts its mailbox in service), drain an in-service mailbox, and retire
    /// it at once if it was empty (the runtime waits a few empty reads; no
    /// wait is the hardest case).
    fn round(&mut self, lists: &[ClientList]) {
        for list in lists {
            list.take(|id| {
                if id == ME {
                    self.in_service = true;
                }
            });
        }
        if !self.in_service {
            return;
        }
        let mut got = 0;
        while let Some(v) = self.rx.pop() {
            self.drained += 1;
            assert_eq!(v.get(), self.drained, "in order, once each");
            got += 1;
        }
        self.rx.release();
        if got == 0 && self.retires && try_retire(lists, || self.rx.is_empty()) {
            self.in_service = false;
        }
    }

    /// The pre-sleep rescan: anything announced, or an in-service mailbox
    /// with a packet.
    fn pending_work(&self, lists: &[ClientList]) -> bool {
        lists.iter().any(ClientList::has_announcements) || (self.in_service && !self.rx.is_empty())
    }
}

/// The client's submit: push, fence, announce if the hint is not ours.
fn submit(tx: &mut Producer<NonZeroU64>, list: &ClientList, value: u64) {
    tx.push(nz(value)).unwrap();
    publish_fence();
    list.announce_if_needed(ME);
}

/// After both sides finish, whatever the arbiter missed must still be
/// reachable: one more round must drain every packet. It finds nothing
/// only if the mailbox left service with a packet in it and no bit set.
fn assert_nothing_stranded(arb: &mut Arbiter, lists: &[ClientList], pushed: u64) {
    arb.round(lists);
    assert_eq!(
        arb.drained, pushed,
        "stranded: out of service, nothing announced, packets left"
    );
}

/// The core race: the mailbox is in service and the client's hint is its
/// own id (it announced before, the arbiter took the bit). The arbiter
/// finds it empty and retires it while the client pushes and reads the
/// hint.
#[test]
fn retire_races_push() {
    model(|| {
        let (mut tx, rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let lists = Arc::new([ClientList::new(64)]);
        lists[0].announce(ME);
        lists[0].take(|_| {});
        let mut arb = Arbiter::new(rx, true);
        let client = {
            let lists = Arc::clone(&lists);
            thread::spawn(move || submit(&mut tx, &lists[0], 1))
        };
        arb.round(&lists[..]);
        client.join().unwrap();
        assert_nothing_stranded(&mut arb, &lists[..], 1);
    });
}

/// Two submits, the first announcing from scratch, against two arbiter
/// rounds that may take the bit, drain and retire in between: the second
/// submit's hint may come from the first announcement, made before or
/// after the retire's swap.
#[test]
fn retire_races_announce_then_push() {
    model(|| {
        let (mut tx, rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let lists = Arc::new([ClientList::new(64)]);
        let mut arb = Arbiter::new(rx, false);
        let client = {
            let lists = Arc::clone(&lists);
            thread::spawn(move || {
                submit(&mut tx, &lists[0], 1);
                submit(&mut tx, &lists[0], 2);
            })
        };
        arb.round(&lists[..]);
        arb.round(&lists[..]);
        client.join().unwrap();
        assert_nothing_stranded(&mut arb, &lists[..], 2);
    });
}

/// The hint names another client when the arbiter retires: a third thread
/// announces client 1 on the same list while client 0 pushes, so the
/// retire's swap may overwrite client 1's hint, and client 0 may read its
/// own older id, client 1's, or the reset.
#[test]
fn retire_with_another_clients_hint() {
    model(|| {
        let (mut tx, rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let lists = Arc::new([ClientList::new(64)]);
        lists[0].announce(ME);
        lists[0].take(|_| {});
        let mut arb = Arbiter::new(rx, true);
        let other = {
            let lists = Arc::clone(&lists);
            thread::spawn(move || lists[0].announce(OTHER))
        };
        let client = {
            let lists = Arc::clone(&lists);
            thread::spawn(move || submit(&mut tx, &lists[0], 1))
        };
        arb.round(&lists[..]);
        client.join().unwrap();
        other.join().unwrap();
        assert_nothing_stranded(&mut arb, &lists[..], 1);
    });
}

/// The arbiter's idle loop: a round, then flag, fence, rescan, and park
/// unless the rescan found work; until `done` says so. A lost wake-up
/// parks forever: loom reports the deadlock.
///
/// The sleeper runs on a spawned thread and the waker on the model's main
/// thread, which joins it: a kick's unpark may arrive late (a stale token),
/// and a loom thread blocked in `join` must not receive one (loom's join
/// asserts it was woken by the joined thread).
fn sleeper(
    parker: &Parker,
    lists: &[ClientList],
    arb: &mut Arbiter,
    done: impl Fn(&Arbiter) -> bool,
) {
    parker.bind_current_thread();
    loop {
        arb.round(lists);
        if done(arb) {
            return;
        }
        parker.prepare_sleep();
        if arb.pending_work(lists) {
            parker.cancel_sleep();
            continue;
        }
        parker.sleep(NAP);
    }
}

/// Spawns the sleeper over `arb` until it drained `expected` packets.
fn spawn_sleeper(
    parker: &Arc<Parker>,
    lists: &Arc<[ClientList; 1]>,
    mut arb: Arbiter,
    expected: u64,
) -> thread::JoinHandle<()> {
    let (parker, lists) = (Arc::clone(parker), Arc::clone(lists));
    thread::spawn(move || sleeper(&parker, &lists[..], &mut arb, |a| a.drained == expected))
}

/// The waker's submit: push, fence, announce if needed, kick.
fn submit_and_kick(tx: &mut Producer<NonZeroU64>, list: &ClientList, parker: &Parker, v: u64) {
    submit(tx, list, v);
    parker.kick();
}

/// Sleep against a push into an in-service mailbox that stays in service
/// (no retire here; no announcement needed: the hint is the client's own
/// id). A first packet is already queued, so the sleeper drains, then
/// races the second push with its rescan.
#[test]
fn sleep_wake_in_service() {
    model(|| {
        let (mut tx, rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let lists = Arc::new([ClientList::new(64)]);
        lists[0].announce(ME);
        lists[0].take(|_| {});
        let parker = Arc::new(Parker::new());
        let mut arb = Arbiter::new(rx, true);
        arb.retires = false;
        tx.push(nz(1)).unwrap();
        let sleeper = spawn_sleeper(&parker, &lists, arb, 2);
        submit_and_kick(&mut tx, &lists[0], &parker, 2);
        sleeper.join().unwrap();
    });
}

/// Sleep against a client that must announce (its mailbox is out of
/// service): the rescan sees the bit, or the kick sees the flag. Needs the
/// fence at the end of `ClientList::announce`.
#[test]
fn sleep_wake_announced() {
    model(|| {
        let (mut tx, rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let lists = Arc::new([ClientList::new(64)]);
        let parker = Arc::new(Parker::new());
        let sleeper = spawn_sleeper(&parker, &lists, Arbiter::new(rx, false), 1);
        submit_and_kick(&mut tx, &lists[0], &parker, 1);
        sleeper.join().unwrap();
    });
}

/// Both handshakes at once, as in the runtime: the arbiter finds the
/// mailbox empty, retires it, and goes to sleep, while the client (whose
/// hint is its own id) pushes, fences, checks the hint and kicks.
#[test]
fn sleep_wake_after_retire() {
    model(|| {
        let (mut tx, rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let lists = Arc::new([ClientList::new(64)]);
        lists[0].announce(ME);
        lists[0].take(|_| {});
        let parker = Arc::new(Parker::new());
        let sleeper = spawn_sleeper(&parker, &lists, Arbiter::new(rx, true), 1);
        submit_and_kick(&mut tx, &lists[0], &parker, 1);
        sleeper.join().unwrap();
    });
}

/// A client's exit: it pushes, drops its producer, announces
/// unconditionally and kicks with `kick_force`; the sleeper must wake,
/// see the mailbox abandoned and drain it.
#[test]
fn sleep_wake_client_exit() {
    model(|| {
        let (mut tx, rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let lists = Arc::new([ClientList::new(64)]);
        lists[0].announce(ME);
        lists[0].take(|_| {});
        let parker = Arc::new(Parker::new());
        let sleeper = {
            let (parker, lists) = (Arc::clone(&parker), Arc::clone(&lists));
            let mut arb = Arbiter::new(rx, true);
            thread::spawn(move || {
                // Done once abandoned and empty: the Acquire of
                // `is_abandoned` makes every push visible to `is_empty`.
                sleeper(&parker, &lists[..], &mut arb, |a| {
                    a.rx.is_abandoned() && a.rx.is_empty()
                });
                assert_eq!(arb.drained, 1, "abandoned after its push: drained");
            })
        };
        tx.push(nz(1)).unwrap();
        drop(tx);
        lists[0].announce(ME);
        parker.kick_force();
        sleeper.join().unwrap();
    });
}

/// One descriptor (so its reuse is forced): the owner writes its contents
/// (Relaxed, as the runtime does) and pushes its index; the transmitter
/// pops, reads, records what it read, returns it (`mark`, `flush`); the
/// owner allocates it again, checks the record and writes new contents.
/// The transmitter must have read the first contents, and the owner must
/// see that record before it rewrites.
#[test]
fn recycle_no_reuse_before_return() {
    model(|| {
        let (mut tx, mut rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let returned = Arc::new(ReturnedSet::new(1));
        let contents = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(0));
        let transmitter = {
            let (returned, contents, seen) = (
                Arc::clone(&returned),
                Arc::clone(&contents),
                Arc::clone(&seen),
            );
            thread::spawn(move || {
                let mut recycler = Recycler::new(1, 1);
                for round in 1..=2u64 {
                    let desc = loop {
                        match rx.pop() {
                            Some(v) => break v.get() - 1,
                            None => thread::yield_now(),
                        }
                    };
                    // Relaxed: published by the owner's push, acquired by
                    // our pop.
                    let c = contents.load(Ordering::Relaxed);
                    assert_eq!(c, round, "read the contents of this use");
                    seen.store(c, Ordering::Relaxed);
                    recycler.mark(0, desc as u32);
                    recycler.flush(|_| &returned);
                }
                rx.release();
            })
        };
        let mut free = FreeDescriptors::new(1);
        for round in 1..=2u64 {
            let desc = loop {
                match free.alloc(&returned) {
                    Some(d) => break d,
                    None => thread::yield_now(),
                }
            };
            assert_eq!(desc, 0);
            // The previous use's transmitter is done with it: its record is
            // visible (Release flush → Acquire alloc).
            assert_eq!(
                seen.load(Ordering::Relaxed),
                round - 1,
                "reused before return"
            );
            contents.store(round, Ordering::Relaxed);
            tx.push(nz(u64::from(desc) + 1)).unwrap();
        }
        transmitter.join().unwrap();
        assert_eq!(seen.load(Ordering::Relaxed), 2);
    });
}

/// A client slot handed over to a new client (the runtime reuses client
/// ids). The old owner (two descriptors) has submitted one packet; then,
/// concurrently, it leaves (drops its producer, announces its exit, gives
/// its free descriptor back with `give_back_all`), a transmitter pops the
/// packet, counts it and returns its descriptor, and the reclaimer looks
/// once: if the set holds every descriptor it takes them all and clears the
/// id's announcement state. Then it must see the transmitter's count (no
/// packet of the old owner is left anywhere) and the old owner's last
/// announcement (so `clear` removed it and the new owner's first
/// announcement cannot be skipped). No thread spins: loom explores every
/// order of the three.
#[test]
fn slot_handover_after_every_descriptor_came_home() {
    model(|| {
        let (mut tx, mut rx) = mailbox_with_line::<NonZeroU64>(E, LINE).unwrap();
        let returned = Arc::new(ReturnedSet::new(2));
        let list = Arc::new(ClientList::new(64));
        let counted = Arc::new(AtomicU64::new(0));
        let mut free = FreeDescriptors::new(2);
        let d = free.alloc(&returned).unwrap();
        tx.push(nz(u64::from(d) + 1)).unwrap();
        let transmitter = {
            let (returned, counted) = (Arc::clone(&returned), Arc::clone(&counted));
            thread::spawn(move || {
                let mut recycler = Recycler::new(1, 2);
                // Pushed before this thread was spawned.
                let desc = rx.pop().unwrap().get() - 1;
                // Relaxed, as the runtime's single-writer counters: the
                // flush's Release publishes it.
                counted.store(1, Ordering::Relaxed);
                recycler.mark(0, desc as u32);
                recycler.flush(|_| &returned);
            })
        };
        let owner = {
            let (returned, list) = (Arc::clone(&returned), Arc::clone(&list));
            thread::spawn(move || {
                drop(tx);
                publish_fence();
                list.announce(ME);
                free.give_back_all(&returned);
            })
        };
        if returned.holds_all(2) {
            assert_eq!(counted.load(Ordering::Relaxed), 1, "a packet still out");
            assert_eq!(returned.take_all(), 2);
            list.clear(ME);
            assert!(!list.has_announcements(), "a stale announcement survived");
            assert_ne!(list.last(), ME, "a stale hint survived");
        }
        owner.join().unwrap();
        transmitter.join().unwrap();
    });
}

/// The control inbox: two senders, one owner draining whenever the hint is
/// set. Every value is applied exactly once, and a sender that sees its
/// ticket applied sees the owner's effect. Caught when weakened (tried on
/// a local copy): `drain`'s Release store made Relaxed ("applied but not
/// visible"), and the hint cleared after the lock instead of before it (a
/// value lost).
#[test]
fn inbox_loses_nothing_and_publishes_effects() {
    use pspat_mailbox::Inbox;
    model(|| {
        let inbox = Arc::new(Inbox::new());
        let effect = Arc::new(AtomicU64::new(0));
        let senders: Vec<_> = (1..=2u64)
            .map(|v| {
                let (inbox, effect) = (Arc::clone(&inbox), Arc::clone(&effect));
                thread::spawn(move || {
                    let t = inbox.send(v);
                    if inbox.is_applied(t) {
                        // Relaxed: ordered by `is_applied`'s Acquire.
                        let bits = effect.load(Ordering::Relaxed);
                        assert_ne!(bits & (1 << v), 0, "applied but not visible");
                    }
                })
            })
            .collect();
        let mut applied = 0;
        let mut order = Vec::new();
        // Bounded: the owner checks the hint a few times, as rounds would.
        for _ in 0..3 {
            if inbox.has_pending() {
                applied += inbox.drain(|v: u64| {
                    order.push(v);
                    // Relaxed: published by `drain`'s Release store.
                    effect.fetch_or(1 << v, Ordering::Relaxed);
                });
            }
            thread::yield_now();
        }
        for s in senders {
            s.join().unwrap();
        }
        // Once the senders are done, one more check finds what is left.
        if inbox.has_pending() {
            applied += inbox.drain(|v: u64| order.push(v));
        }
        assert_eq!(applied, 2, "a value was lost or applied twice: {order:?}");
        assert_eq!(inbox.applied(), 2);
    });
}

/// The start gate: two waiters and an opener. No waiter leaves before the
/// gate opened, each sees what the opener wrote before opening, and every
/// waiter leaves (a lost wake-up would leave one parked: a deadlock loom
/// reports).
#[test]
fn start_gate_releases_every_waiter_after_open() {
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;
    use pspat_mailbox::StartGate;

    model(|| {
        let gate = Arc::new(StartGate::new());
        let setting = Arc::new(AtomicU64::new(0));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (gate, setting) = (Arc::clone(&gate), Arc::clone(&setting));
                thread::spawn(move || {
                    gate.wait();
                    // Relaxed: ordered by the gate (its Release/Acquire
                    // flag, and unpark before the park that returns).
                    assert_eq!(setting.load(Ordering::Relaxed), 7);
                })
            })
            .collect();
        // Relaxed: published by `open`.
        setting.store(7, Ordering::Relaxed);
        gate.open(waiters.iter().map(|h| h.thread()));
        for h in waiters {
            h.join().unwrap();
        }
        assert_eq!(gate.left(), 2);
    });
}
