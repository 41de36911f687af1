//! Provisional client lists (announce bitmap + `last` hint); replaced by the
//! loom-checked version.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// `last` value meaning nobody.
pub const NO_CLIENT: u32 = u32::MAX;

/// One per-CPU client list.
#[derive(Debug)]
pub struct ClientList {
    announced: Box<[AtomicU64]>,
    last: CachePadded<AtomicU32>,
}

impl ClientList {
    /// A list for ids `0..max_clients`.
    pub fn new(max_clients: usize) -> ClientList {
        ClientList {
            announced: (0..max_clients.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            last: CachePadded::new(AtomicU32::new(NO_CLIENT)),
        }
    }
    /// Client, after its pushes and the publish fence.
    #[inline]
    pub fn announce_if_needed(&self, id: u32) -> bool {
        if self.last.load(Ordering::Relaxed) != id {
            self.announce(id);
            return true;
        }
        false
    }
    /// Unconditional announcement.
    pub fn announce(&self, id: u32) {
        self.last.store(id, Ordering::SeqCst);
        self.announced[id as usize / 64].fetch_or(1 << (id % 64), Ordering::SeqCst);
    }
    /// Arbiter: takes every announced id.
    #[inline]
    pub fn take(&self, mut f: impl FnMut(u32)) {
        for (w, word) in self.announced.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                f((w * 64) as u32 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
    }
    /// Arbiter's pre-sleep rescan.
    pub fn has_announcements(&self) -> bool {
        self.announced
            .iter()
            .any(|w| w.load(Ordering::Relaxed) != 0)
    }
    /// Drops a stale bit of a reused slot.
    pub fn clear(&self, id: u32) {
        self.announced[id as usize / 64].fetch_and(!(1 << (id % 64)), Ordering::AcqRel);
    }
}

/// The arbiter's retire step for one mailbox.
pub fn try_retire(lists: &[ClientList], still_empty: impl FnOnce() -> bool) -> bool {
    for l in lists {
        l.last.swap(NO_CLIENT, Ordering::SeqCst);
    }
    fence(Ordering::SeqCst);
    still_empty()
}
