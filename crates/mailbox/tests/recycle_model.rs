//! Random descriptor lifecycles through `FreeDescriptors`, `Recycler` and
//! `ReturnedSet`, checked against a set model: every descriptor an owner
//! allocates comes back exactly once, a batched flush returns only whole
//! batches or everything after the hold limit, a word is kept back no
//! longer than `MAX_RETURN_HOLD_NS`, and a full flush leaves nothing kept.

use std::collections::BTreeSet;

use proptest::prelude::*;
use pspat_mailbox::{return_batch, FreeDescriptors, Recycler, ReturnedSet, MAX_RETURN_HOLD_NS};

#[derive(Clone, Debug)]
enum Op {
    /// Owner allocates up to n descriptors.
    Alloc(usize, usize),
    /// The transmitter is done with the k-th oldest descriptor in flight.
    Done(usize),
    /// `flush_batches` after `dt` ns.
    FlushBatches(u64),
    /// Full flush.
    Flush,
}

fn op(owners: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..owners, 1usize..40).prop_map(|(o, n)| Op::Alloc(o, n)),
        6 => (0usize..1000).prop_map(Op::Done),
        2 => (0u64..2 * MAX_RETURN_HOLD_NS / 3).prop_map(Op::FlushBatches),
        1 => Just(Op::Flush),
    ]
}

fn run(owners: usize, descriptors: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let sets: Vec<ReturnedSet> = (0..owners).map(|_| ReturnedSet::new(descriptors)).collect();
    let mut free: Vec<FreeDescriptors> = (0..owners)
        .map(|_| FreeDescriptors::new(descriptors))
        .collect();
    let mut r = Recycler::new(owners, descriptors);
    // Model: in flight (owner, desc), kept back by the recycler, owned free.
    let mut in_flight: Vec<(usize, u32)> = Vec::new();
    let mut kept: BTreeSet<(usize, u32)> = BTreeSet::new();
    let mut kept_since: Option<u64> = None;
    let mut now = 0u64;
    let batch = return_batch(descriptors);
    for o in ops {
        match *o {
            Op::Alloc(owner, n) => {
                for _ in 0..n {
                    let Some(d) = free[owner].alloc(&sets[owner]) else {
                        break;
                    };
                    prop_assert!(
                        !in_flight.contains(&(owner, d)) && !kept.contains(&(owner, d)),
                        "descriptor {d} of owner {owner} handed out while not free"
                    );
                    in_flight.push((owner, d));
                }
            }
            Op::Done(k) => {
                if !in_flight.is_empty() {
                    let (owner, d) = in_flight.remove(k % in_flight.len());
                    r.mark(owner as u32, d);
                    kept.insert((owner, d));
                }
            }
            Op::FlushBatches(dt) => {
                now += dt;
                let expired = kept_since.is_some_and(|t| now - t >= MAX_RETURN_HOLD_NS);
                r.flush_batches(now, |c| &sets[c as usize]);
                if expired {
                    kept.clear();
                } else {
                    // Whole 64-descriptor words that made a batch went back.
                    let words: BTreeSet<(usize, u32)> =
                        kept.iter().map(|&(o, d)| (o, d / 64)).collect();
                    for (o, w) in words {
                        let n = kept
                            .iter()
                            .filter(|&&(ko, kd)| ko == o && kd / 64 == w)
                            .count();
                        if n >= batch {
                            kept.retain(|&(ko, kd)| !(ko == o && kd / 64 == w));
                        }
                    }
                }
                kept_since = match kept_since {
                    _ if kept.is_empty() => None,
                    Some(t) if !expired => Some(t),
                    _ => Some(now),
                };
            }
            Op::Flush => {
                r.flush(|c| &sets[c as usize]);
                kept.clear();
                kept_since = None;
            }
        }
        prop_assert_eq!(r.holds_any(), !kept.is_empty());
    }
    // Everything comes back: finish the flights, flush, and every owner
    // can allocate its whole pool again.
    for (owner, d) in in_flight.drain(..) {
        r.mark(owner as u32, d);
    }
    r.flush(|c| &sets[c as usize]);
    prop_assert!(!r.holds_any());
    for (owner, f) in free.iter_mut().enumerate() {
        let mut all = BTreeSet::new();
        while let Some(d) = f.alloc(&sets[owner]) {
            prop_assert!(all.insert(d), "descriptor {d} handed out twice");
        }
        prop_assert_eq!(all.len(), descriptors, "owner {} lost descriptors", owner);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_descriptor_comes_back_once(
        owners in 1usize..4,
        descriptors in prop_oneof![Just(16usize), Just(70), Just(128), Just(1024)],
        ops in proptest::collection::vec(op(3), 1..300),
    ) {
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|o| match o {
                Op::Alloc(owner, n) => Op::Alloc(owner % owners, n),
                o => o,
            })
            .collect();
        run(owners, descriptors, &ops)?;
    }
}
