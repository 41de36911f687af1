//! Provisional descriptor recycling; replaced by the loom-checked version.

use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors returned by transmitters to their owner.
#[derive(Debug)]
pub struct ReturnedSet {
    words: Box<[AtomicU64]>,
}

impl ReturnedSet {
    /// Room for `descriptors` (a multiple of 64).
    pub fn new(descriptors: usize) -> Self {
        ReturnedSet {
            words: (0..descriptors / 64).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    /// Number of 64-bit words.
    pub fn words(&self) -> usize {
        self.words.len()
    }
}

/// The owner's free descriptors.
#[derive(Debug)]
pub struct FreeDescriptors {
    free: Box<[u64]>,
    cursor: usize,
}

impl FreeDescriptors {
    /// All free.
    pub fn new(descriptors: usize) -> Self {
        FreeDescriptors {
            free: vec![u64::MAX; descriptors / 64].into_boxed_slice(),
            cursor: 0,
        }
    }
    /// Takes a free descriptor.
    #[inline]
    pub fn alloc(&mut self, returned: &ReturnedSet) -> Option<u32> {
        let words = self.free.len();
        for pass in 0..2 {
            for _ in 0..words {
                let w = self.free[self.cursor];
                if w != 0 {
                    self.free[self.cursor] = w & (w - 1);
                    return Some((self.cursor * 64) as u32 + w.trailing_zeros());
                }
                self.cursor += 1;
                if self.cursor == words {
                    self.cursor = 0;
                }
            }
            if pass == 0 {
                let mut any = false;
                for (f, d) in self.free.iter_mut().zip(returned.words.iter()) {
                    if d.load(Ordering::Relaxed) != 0 {
                        *f |= d.swap(0, Ordering::Acquire);
                        any = true;
                    }
                }
                if !any {
                    return None;
                }
            }
        }
        None
    }
    /// Frees locally.
    #[inline]
    pub fn free(&mut self, desc: u32) {
        self.free[desc as usize / 64] |= 1 << (desc % 64);
    }
}

/// Transmitter-side aggregation.
#[derive(Debug)]
pub struct Recycler {
    words: usize,
    pending: Vec<u64>,
    dirty: Vec<u32>,
}

impl Recycler {
    /// For `owners` owners of `descriptors_per_owner` each.
    pub fn new(owners: usize, descriptors_per_owner: usize) -> Self {
        let words = descriptors_per_owner / 64;
        Recycler {
            words,
            pending: vec![0; owners * words],
            dirty: Vec::with_capacity(owners * words),
        }
    }
    /// Marks one descriptor returned.
    #[inline]
    pub fn mark(&mut self, owner: u32, desc: u32) {
        let idx = owner as usize * self.words + desc as usize / 64;
        if self.pending[idx] == 0 {
            self.dirty.push(idx as u32);
        }
        self.pending[idx] |= 1 << (desc % 64);
    }
    /// Publishes every pending word.
    pub fn flush<'a>(&mut self, returned_set_of: impl Fn(u32) -> &'a ReturnedSet) {
        for &idx in &self.dirty {
            let idx = idx as usize;
            let set = returned_set_of((idx / self.words) as u32);
            set.words[idx % self.words].fetch_or(self.pending[idx], Ordering::Release);
            self.pending[idx] = 0;
        }
        self.dirty.clear();
    }
}
