//! The distinct inverse weights of the QFQ entities, shared: an entity
//! stores a slot number of this table instead of its 41-bit inverse weight.
//!
//! Every entity holds exactly one reference, so the table never needs more
//! slots than there are entities; it is sized for that at construction and
//! never allocates afterwards. A slot whose last entity took another weight
//! is freed at once and reused by the next new weight, so weight churn
//! cannot fill it: the live slots are exactly the distinct inverse weights
//! the entities hold. A new weight is found in an open-addressing index
//! (linear probing, at most half full, backward-shift deletion), so adding
//! or changing a flow costs O(1) expected.
//!
//! The three arrays are zeroed allocations: only the slots and index words
//! written are touched, so a table that holds few distinct weights keeps
//! a few pages resident whatever its size.

const NIL: u32 = u32::MAX;

pub(crate) struct InvWeights {
    /// Slot → inverse weight. A free slot below `used` holds the next free
    /// slot instead (`NIL` ends the chain).
    inv_w: Box<[u64]>,
    /// Slot → the number of entities holding it (0: free).
    refs: Box<[u32]>,
    /// Slot + 1 of each live weight, at the position its hash probes to
    /// (0: empty). Its length is a power of two at least twice the slots.
    index: Box<[u32]>,
    /// log₂ of `index.len()`.
    index_bits: u32,
    /// Slots `0..used` have been handed out at least once; the ones above
    /// were never written.
    used: u32,
    /// The first free slot below `used`.
    free: u32,
    /// Slots in use: the distinct inverse weights held.
    live: u32,
}

impl InvWeights {
    /// A table for `entities` entities (at most that many distinct weights).
    pub(crate) fn new(entities: usize) -> Self {
        let slots = entities.max(1);
        let index_len = (2 * slots).next_power_of_two();
        InvWeights {
            inv_w: vec![0; slots].into_boxed_slice(),
            refs: vec![0; slots].into_boxed_slice(),
            index: vec![0; index_len].into_boxed_slice(),
            index_bits: index_len.trailing_zeros(),
            used: 0,
            free: NIL,
            live: 0,
        }
    }

    /// The inverse weight of a slot held by some entity.
    #[inline(always)]
    pub(crate) fn get(&self, slot: u32) -> u64 {
        self.inv_w[slot as usize]
    }

    /// The number of distinct inverse weights held.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.live as usize
    }

    /// The size of the table in bytes (all three arrays, touched or not).
    #[cfg(test)]
    pub(crate) fn reserved_bytes(&self) -> usize {
        self.inv_w.len() * 8 + self.refs.len() * 4 + self.index.len() * 4
    }

    #[inline]
    fn home(&self, inv_w: u64) -> usize {
        // Fibonacci hashing: the top bits of a multiplication by 2⁶⁴/φ.
        (inv_w.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.index_bits)) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    /// One more entity holds `inv_w`: its slot, taken from the free ones if
    /// `inv_w` is new. The caller holds at most `entities − 1` references
    /// beforehand (it released the entity's previous one), so a slot is
    /// always free.
    pub(crate) fn acquire(&mut self, inv_w: u64) -> u32 {
        let mask = self.mask();
        let mut p = self.home(inv_w);
        loop {
            let x = self.index[p];
            if x == 0 {
                break;
            }
            let slot = x - 1;
            if self.inv_w[slot as usize] == inv_w {
                self.refs[slot as usize] += 1;
                return slot;
            }
            p = (p + 1) & mask;
        }
        let slot = if self.free != NIL {
            let s = self.free;
            self.free = self.inv_w[s as usize] as u32;
            s
        } else {
            debug_assert!((self.used as usize) < self.inv_w.len(), "weight table full");
            self.used += 1;
            self.used - 1
        };
        self.inv_w[slot as usize] = inv_w;
        self.refs[slot as usize] = 1;
        self.index[p] = slot + 1;
        self.live += 1;
        slot
    }

    /// One entity fewer holds `slot`; the last one frees it.
    pub(crate) fn release(&mut self, slot: u32) {
        let refs = &mut self.refs[slot as usize];
        debug_assert!(*refs > 0, "slot {slot} released while free");
        *refs = refs.saturating_sub(1);
        if *refs > 0 {
            return;
        }
        let mask = self.mask();
        let mut hole = self.home(self.inv_w[slot as usize]);
        // Bounded by the index length: the slot is in it, and the index is
        // never full.
        for _ in 0..self.index.len() {
            if self.index[hole] == slot + 1 {
                break;
            }
            hole = (hole + 1) & mask;
        }
        debug_assert_eq!(self.index[hole], slot + 1);
        // Backward shift: move later entries of the probe run into the hole
        // unless their home lies cyclically after it.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let x = self.index[j];
            if x == 0 {
                break;
            }
            let home = self.home(self.inv_w[(x - 1) as usize]);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.index[hole] = x;
                hole = j;
            }
        }
        self.index[hole] = 0;
        self.inv_w[slot as usize] = u64::from(self.free);
        self.free = slot;
        self.live -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random acquire/release sequences against a map of references: every
    /// held slot keeps its weight, equal weights share one slot, and the
    /// live slots are exactly the distinct weights held.
    #[test]
    fn churn_keeps_one_slot_per_held_weight() {
        let entities = 64;
        let mut t = InvWeights::new(entities);
        let mut rng = fastrand::Rng::with_seed(11);
        // Entity → (weight, slot).
        let mut held: Vec<Option<(u64, u32)>> = vec![None; entities];
        for step in 0..200_000 {
            let e = rng.usize(0..entities);
            if let Some((_, slot)) = held[e].take() {
                t.release(slot);
            }
            if rng.bool() {
                // Few values (many collisions in the index) in some phases,
                // many in others.
                let range = if (step / 10_000) % 2 == 0 { 6 } else { 1 << 20 };
                let w = (1u64 << 40) / rng.u64(1..=range);
                held[e] = Some((w, t.acquire(w)));
            }
            let mut by_weight: HashMap<u64, u32> = HashMap::new();
            for &(w, slot) in held.iter().flatten() {
                assert_eq!(t.get(slot), w, "step {step}");
                assert_eq!(*by_weight.entry(w).or_insert(slot), slot, "step {step}");
            }
            assert_eq!(t.live(), by_weight.len(), "step {step}");
        }
        assert!(t.used as usize <= entities);
    }

    #[test]
    fn a_table_of_one_entity_holds_its_weight() {
        let mut t = InvWeights::new(0);
        let a = t.acquire(7);
        assert_eq!((t.get(a), t.live()), (7, 1));
        t.release(a);
        assert_eq!(t.live(), 0);
        let b = t.acquire(9);
        assert_eq!((b, t.get(b)), (a, 9));
        assert_eq!(t.reserved_bytes(), 8 + 4 + 2 * 4);
    }
}
