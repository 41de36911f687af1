//! Client lists: how a client tells the arbiter that its mailbox has
//! packets, and how the arbiter takes a mailbox out of service without
//! stranding a packet.
//!
//! Source: \[J\] Rizzo, Valente, Lettieri, Maffione, "PSPAT: software
//! packet scheduling at hardware speed", §3.1 (one client list per CPU, so
//! the arbiter scans O(CPUs) lists rather than every mailbox). In the
//! kernel a list is touched only by the CPU it belongs to; in userspace two
//! threads on one CPU may announce at once, so a list here is a bitmap of
//! client ids set with `fetch_or`, plus a `last` hint.
//!
//! # Protocol
//! * **Client**, after each submit (or burst): push into its mailbox
//!   (Release), [`crate::publish_fence`], then
//!   [`ClientList::announce_if_needed`]: one load of `last`; if it is not
//!   this client's id, [`ClientList::announce`]: store `last = id`, set the
//!   id's bit (`fetch_or`, Release), and fence again (below). Under load a
//!   client finds its own id in `last` and pays one L1 hit; it announces
//!   once per migration, per other client on the same list, and per retire.
//! * **Arbiter**: [`ClientList::take`] swaps each non-zero bitmap word to
//!   zero (Acquire) and puts each announced mailbox in service; it drains
//!   in-service mailboxes each round; a mailbox found empty for a while
//!   leaves service through [`try_retire`]: swap every list's `last` to
//!   [`NO_CLIENT`] (always a write), fence, check the mailbox once more.
//!
//! # Why no packet is stranded
//! Let a client push packet `p` (store `P` into a slot), run its fence
//! `Fc`, and load `last` (`L`). Let the arbiter, retiring that mailbox,
//! swap `last` (`X`), run its fence `Fa`, and check the slot (`E`). Both
//! fences are SeqCst, so one precedes the other in the total order `S`.
//! * `Fc` before `Fa`: `P` is sequenced before `Fc` and `E` after `Fa`, so
//!   `E` reads `P` or a later value of the slot (C++20 \[atomics.order\],
//!   the fence-fence rule): the mailbox is not empty and stays in service.
//! * `Fa` before `Fc`: by the same rule `L` reads `X` (no client) or a later
//!   value of `last`. Another client's id or another retire's
//!   [`NO_CLIENT`]: not our id, so the client announces after `L`, setting
//!   its bit after `P`; the arbiter's next [`ClientList::take`] acquires
//!   the bit, puts the mailbox back in service and drains `p`. Our own id:
//!   a store `H` of an announcement of ours, later than `X` in the
//!   modification order of `last`. Its bit `B` is set after `H` (program
//!   order, then Release). If the arbiter had taken `B` before `X`, then `H`
//!   would happen-before `X` (`B` Release → the take's Acquire → `X` in the
//!   arbiter's program order), and `H` could not be later than `X`. So `B`
//!   is still set, or taken by a take after `X`, which put the mailbox back
//!   in service: either way the arbiter reads the mailbox again.
//!
//! After both sides finish, then, every pushed packet is drained, or the
//! mailbox is still in service, or its bit is announced.
//!
//! What the proof needs, and what goes wrong without it (the `retire_*`
//! loom models in `tests/loom_handshakes.rs`; each weakening below was
//! tried on a local copy, none is kept):
//! * Both fences. Without either, `L` and `E` may both read old values
//!   (the store-buffering pattern): with the client's
//!   [`crate::publish_fence`] or the fence in [`try_retire`] removed, loom
//!   finds a stranded packet in all three `retire_*` models.
//! * `X` must reset a hint that names us. A plain load in its place strands
//!   a packet at once (all `retire_*` models fail): `last` keeps our id and
//!   we never announce again. `X` is a swap, always a write, so the
//!   fence rule for modifications applies directly; it also resets another
//!   client's hint, which then announces once more (cheap). A
//!   compare-exchange from our id would write nothing when `last` names
//!   another client; that read is still ordered by C++20's coherence rule
//!   for SeqCst fences (\[atomics.order\] p4.4: if `L` read an older value
//!   of ours, `Fc` would precede `Fa`), and loom finds no failure with it
//!   (`retire_with_another_clients_hint`), but the swap keeps the proof
//!   short and costs the same (one locked instruction on x86-64).
//! * The hint is stored *before* the bit. The other order (bit, then hint)
//!   lets the arbiter take the bit, retire, and only then see the hint
//!   land, saying "announced" for a mailbox out of service: the client does
//!   not announce again and its next packets stay there. loom finds this
//!   (`retire_races_announce_then_push`); an earlier version of the runtime
//!   lost a packet in a stress test through exactly that window.
//! * The bit's `fetch_or` is Release, so that a take that sees the bit also
//!   orders the hint store before the retire's swap. With Relaxed, a
//!   machine that reorders the two stores (aarch64, POWER) could land the
//!   hint after the swap as above. loom does not catch that weakening: it
//!   places every store in modification order as it executes, so the hint
//!   store, executed first, always precedes the swap.
//!
//! # The sleeping arbiter
//! The arbiter's pre-sleep rescan ([`crate::Parker`]) reads the in-service
//! mailboxes and [`ClientList::has_announcements`]. A client's push `P`
//! precedes its fence `Fc`, but its announcement bit `B` comes after it,
//! so `Fc` alone does not order `B` before the client's kick: the sleeper
//! could miss `B` while the kick misses the sleep flag. Hence
//! [`ClientList::announce`] ends with a second `fence(SeqCst)`: the kick that
//! follows is then after a fence that follows everything the client
//! published, and the parker's argument applies to `B` as to `P`. An
//! announcement is rare (see above), so the second fence is too.
//!
//! # Memory ordering
//! | Operation | Side | Ordering | Pairs with |
//! |---|---|---|---|
//! | `last` load in `announce_if_needed` | client | Relaxed | ordered by the caller's `publish_fence` against `try_retire`'s fence |
//! | `last` store in `announce` | client | Relaxed | published by the Release `fetch_or` just after (program order) |
//! | bit `fetch_or` in `announce` | client | Release | the Acquire swap in `take`: the taker sees the hint, the pushes and anything else before it (a dropped producer) |
//! | fence after the bit | client | SeqCst | the sleeper's fence in `Parker::prepare_sleep` |
//! | word peek in `take`, `has_announcements` | arbiter | Relaxed | none: a non-zero word is then swapped with Acquire; a zero one is covered by a fence argument (above) |
//! | word swap in `take` | arbiter | Acquire | the Release `fetch_or` in `announce` |
//! | `last` swap in `try_retire` | arbiter | SeqCst | the fence that follows carries the argument; SeqCst costs nothing more than Relaxed on x86-64 (a locked `xchg` either way) |
//! | fence in `try_retire` | arbiter | SeqCst | the client's `publish_fence` |
//! | `clear` | either | Relaxed | the caller's own hand-over of the id (registry lock) |
//!
//! # Complexity
//! `announce_if_needed`: one load; `announce`: one store, one `fetch_or`,
//! one fence. `take`: one load per bitmap word (`max_clients / 64`) plus one
//! swap per non-zero word. `try_retire`: one swap per list and one fence.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

/// The `last` hint when no client is named: after construction, a
/// [`try_retire`] or a [`ClientList::clear`]. Not a valid client id.
pub const NO_CLIENT: u32 = u32::MAX;

/// One client list: an announcement bitmap over client ids `0..max_clients`
/// and the `last` hint. `Send + Sync`: clients announce concurrently, one
/// arbiter takes.
///
/// # Examples
/// ```
/// use pspat_mailbox::ClientList;
/// let list = ClientList::new(128);
/// assert!(list.announce_if_needed(70), "first time: announce");
/// assert!(!list.announce_if_needed(70), "last = 70: nothing to do");
/// assert!(list.announce_if_needed(3), "another client");
/// let mut seen = Vec::new();
/// list.take(|id| seen.push(id));
/// assert_eq!(seen, [3, 70]);
/// assert!(!list.has_announcements());
/// ```
pub struct ClientList {
    /// The last client that announced itself here, or [`NO_CLIENT`]. Every
    /// client reads it on every submit; on its own block so the arbiter's
    /// bitmap swaps do not evict it.
    last: CachePadded<AtomicU32>,
    /// Bit `id` set: client `id` has packets the arbiter has not been told
    /// about yet.
    words: Box<[AtomicU64]>,
    /// Ids below this are accepted.
    max_clients: usize,
}

impl ClientList {
    /// A list for client ids `0..max_clients` (rounded up to a multiple of
    /// 64 in the bitmap), nothing announced, `last` = [`NO_CLIENT`]. At
    /// most `u32::MAX` ids: `NO_CLIENT` is not one of them.
    pub fn new(max_clients: usize) -> ClientList {
        let max_clients = max_clients.min(NO_CLIENT as usize);
        ClientList {
            last: CachePadded::new(AtomicU32::new(NO_CLIENT)),
            words: (0..max_clients.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            max_clients,
        }
    }

    /// Client ids this list accepts: `0..max_clients()`.
    pub fn max_clients(&self) -> usize {
        self.max_clients
    }

    /// Client, after its pushes and [`crate::publish_fence`]: announces `id`
    /// unless `last` already names it. Returns true if it announced. Under
    /// load this is one load of a line every client of the list shares and
    /// nobody writes.
    ///
    /// An `id >= max_clients()` is never announced (debug builds assert):
    /// the caller owns the id range.
    #[inline]
    pub fn announce_if_needed(&self, id: u32) -> bool {
        // Relaxed: ordered after the caller's `publish_fence`, which pairs
        // with the fence in `try_retire` (module docs).
        if self.last.load(Ordering::Relaxed) == id {
            return false;
        }
        self.announce(id);
        true
    }

    /// Announces `id` unconditionally (a client's exit, after dropping its
    /// mailbox producer): stores `last = id`, sets the bit, then issues
    /// `fence(SeqCst)` so that a [`crate::Parker::kick`] right after it
    /// covers the bit (module docs, "The sleeping arbiter").
    ///
    /// An `id >= max_clients()` is ignored (debug builds assert).
    pub fn announce(&self, id: u32) {
        let Some(word) = self.word_of(id) else {
            return;
        };
        // Relaxed: the Release `fetch_or` below publishes it. The hint goes
        // first: a taker that acquires the bit also sees the hint, so its
        // later retire swap is after this store in `last`'s modification
        // order and resets it (module docs).
        self.last.store(id, Ordering::Relaxed);
        // Release: pairs with the Acquire swap in `take`, which then sees
        // the hint, our pushes and anything else we did before announcing.
        word.fetch_or(1 << (id % 64), Ordering::Release);
        // Orders the bit before the caller's kick (module docs).
        fence(Ordering::SeqCst);
    }

    /// Arbiter: takes every announcement, calling `f(id)` for each announced
    /// id in increasing order within a word, and clears them. A word is
    /// swapped only if a Relaxed load finds it non-zero; the swap is Acquire,
    /// so `f` runs after everything the client did before announcing.
    pub fn take(&self, mut f: impl FnMut(u32)) {
        for (w, word) in self.words.iter().enumerate() {
            // Relaxed peek: a swap is a locked RMW, too dear for idle words.
            // A bit missed here is seen by the next take, or by the pre-sleep
            // rescan (after its fence).
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // Acquire: pairs with the Release `fetch_or` in `announce`.
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                f(w as u32 * 64 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
    }

    /// Arbiter, in its pre-sleep rescan (after [`crate::Parker::prepare_sleep`]'s
    /// fence): true if any bit is set. Does not take them.
    pub fn has_announcements(&self) -> bool {
        // Relaxed: ordered by the caller's fence; the bits are then taken
        // with the Acquire swap in `take` before anything they announce is
        // read.
        self.words.iter().any(|w| w.load(Ordering::Relaxed) != 0)
    }

    /// When client id `id` is about to be reused for a new client: drops a
    /// stale bit of the old client and, if `last` still names it, resets
    /// `last` to [`NO_CLIENT`]. The hint is the part that matters: a stale
    /// `last = id` would let the new client skip its first announcement for
    /// a mailbox the arbiter does not serve. Call it on every list after the
    /// old client's last announcement and before the new client's first one
    /// (both ordered by the caller, e.g. through the registry lock that hands
    /// the id over); an announcement of the new client would be lost.
    ///
    /// An `id >= max_clients()` is ignored (debug builds assert).
    pub fn clear(&self, id: u32) {
        let Some(word) = self.word_of(id) else {
            return;
        };
        // Relaxed: both sides of the hand-over are ordered by the caller.
        word.fetch_and(!(1 << (id % 64)), Ordering::Relaxed);
        let _ = self
            .last
            .compare_exchange(id, NO_CLIENT, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The `last` hint now ([`NO_CLIENT`] if none); for tests and
    /// diagnostics.
    pub fn last(&self) -> u32 {
        // Relaxed: a snapshot for diagnostics.
        self.last.load(Ordering::Relaxed)
    }

    /// The bitmap word holding `id`'s bit; `None` (debug builds assert) for
    /// an id out of range.
    fn word_of(&self, id: u32) -> Option<&AtomicU64> {
        if (id as usize) < self.max_clients {
            self.words.get(id as usize / 64)
        } else {
            debug_assert!(false, "client id {id} >= {}", self.max_clients);
            None
        }
    }

    /// The arbiter's half of the retire handshake for this list: `last` ←
    /// [`NO_CLIENT`], always a write. [`try_retire`] does this for every
    /// list and then fences.
    fn reset_hint(&self) {
        // SeqCst: see the module docs' table (the fence after it carries the
        // argument).
        self.last.swap(NO_CLIENT, Ordering::SeqCst);
    }
}

impl fmt::Debug for ClientList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientList")
            .field("max_clients", &self.max_clients)
            .field("last", &self.last())
            .field("has_announcements", &self.has_announcements())
            .finish()
    }
}

/// The arbiter's retire step for one mailbox: reset every list's hint
/// (SeqCst swap, always a write), `fence(SeqCst)`, then `still_empty()`
/// (typically [`crate::Consumer::is_empty`]); true = the mailbox may leave
/// service without stranding a packet (module docs for the proof). False:
/// a packet arrived meanwhile; keep the mailbox in service.
///
/// Every client on any of `lists` announces once more after this (its hint
/// was reset): one store, one `fetch_or` and one fence each.
///
/// # Examples
/// ```
/// use pspat_mailbox::{try_retire, ClientList, NO_CLIENT};
/// let lists = [ClientList::new(64), ClientList::new(64)];
/// lists[0].announce(5);
/// lists[0].take(|_| {});
/// assert!(try_retire(&lists, || true));
/// assert_eq!(lists[0].last(), NO_CLIENT, "client 5 will announce again");
/// assert!(!try_retire(&lists, || false), "a packet came: stays in service");
/// ```
pub fn try_retire(lists: &[ClientList], still_empty: impl FnOnce() -> bool) -> bool {
    for list in lists {
        list.reset_hint();
    }
    // Pairs with the clients' `publish_fence` (module docs).
    fence(Ordering::SeqCst);
    still_empty()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn taken(list: &ClientList) -> Vec<u32> {
        let mut v = Vec::new();
        list.take(|id| v.push(id));
        v
    }

    #[test]
    fn announce_sets_bit_and_hint() {
        let l = ClientList::new(200);
        assert_eq!(l.last(), NO_CLIENT);
        assert!(!l.has_announcements());
        l.announce(130);
        assert_eq!(l.last(), 130);
        assert!(l.has_announcements());
        assert_eq!(taken(&l), [130]);
        assert!(!l.has_announcements());
        assert_eq!(l.last(), 130, "take leaves the hint alone");
    }

    #[test]
    fn announce_if_needed_skips_only_for_the_named_client() {
        let l = ClientList::new(64);
        assert!(l.announce_if_needed(1));
        assert!(!l.announce_if_needed(1));
        assert!(l.announce_if_needed(2));
        assert!(l.announce_if_needed(1), "the hint moved to 2");
        assert_eq!(taken(&l), [1, 2]);
        assert!(!l.announce_if_needed(1));
        assert!(taken(&l).is_empty(), "no new bit without an announcement");
    }

    #[test]
    fn take_reports_every_id_across_words_once() {
        let l = ClientList::new(256);
        let ids = [0, 63, 64, 65, 127, 128, 255];
        for &id in ids.iter().rev() {
            l.announce(id);
        }
        l.announce(64); // twice: still one bit
        assert_eq!(taken(&l), ids);
        assert!(taken(&l).is_empty());
    }

    #[test]
    fn try_retire_resets_every_hint_and_reports_the_check() {
        let lists: Vec<ClientList> = (0..3).map(|_| ClientList::new(64)).collect();
        lists[0].announce(4);
        lists[2].announce(9);
        assert!(try_retire(&lists, || true));
        assert!(lists.iter().all(|l| l.last() == NO_CLIENT));
        assert!(lists[0].announce_if_needed(4), "4 announces again");
        assert!(lists[2].announce_if_needed(9), "9 too: its hint was reset");
        let mut calls = 0;
        assert!(!try_retire(&lists, || {
            calls += 1;
            false
        }));
        assert_eq!(calls, 1);
    }

    #[test]
    fn clear_drops_the_bit_and_only_its_own_hint() {
        let l = ClientList::new(64);
        l.announce(7);
        l.clear(7);
        assert!(!l.has_announcements());
        assert_eq!(l.last(), NO_CLIENT);
        assert!(l.announce_if_needed(7), "a reused id announces first");
        l.announce(8);
        l.clear(7);
        assert_eq!(l.last(), 8, "another client's hint stays");
        assert_eq!(taken(&l), [8]);
    }

    #[test]
    fn sizes_round_up_to_whole_words() {
        let l = ClientList::new(65);
        assert_eq!(l.max_clients(), 65);
        l.announce(64);
        assert_eq!(taken(&l), [64]);
        let empty = ClientList::new(0);
        assert!(!empty.has_announcements());
        assert!(taken(&empty).is_empty());
    }

    #[test]
    fn client_list_is_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<ClientList>();
    }
}
