//! What the classifier's dynamic tables hold, for the daemon's per-queue
//! views (`pipe show`, `queue show`, the metrics): each live dynamic queue
//! or instance with its masked 5-tuple, decoded back into addresses.
//!
//! Control path: O(live entries) per call, allocates the answer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use pspat_sched::FlowId;

use crate::key::MaskedKey;
use crate::Classifier;

/// A dynamic queue's or instance's masked key: the packet's fields with the
/// mask applied (bits outside the mask are 0), as dummynet's `pipe show`
/// prints them per bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DynamicKey {
    /// IP protocol (masked).
    pub proto: u8,
    /// Source address (masked; its family is the packet's).
    pub src: IpAddr,
    /// Source port (masked).
    pub src_port: u16,
    /// Destination address (masked).
    pub dst: IpAddr,
    /// Destination port (masked).
    pub dst_port: u16,
    /// IPv6 flow label (masked; 0 for IPv4).
    pub flow_label: u32,
}

fn addr(w: &[u32], v6: bool) -> IpAddr {
    if v6 {
        let x = w
            .iter()
            .fold(0u128, |acc, &word| (acc << 32) | u128::from(word));
        IpAddr::V6(Ipv6Addr::from(x))
    } else {
        IpAddr::V4(Ipv4Addr::from(w[0]))
    }
}

impl MaskedKey {
    /// The fields back from the eleven words (`CompiledMask::apply`'s
    /// layout), and the instance in the last word.
    pub(crate) fn decode(&self) -> (DynamicKey, u32) {
        let w = &self.0;
        let meta = w[9];
        let key = DynamicKey {
            proto: ((meta >> 20) & 0xff) as u8,
            src: addr(&w[0..4], meta & (1 << 28) != 0),
            src_port: (w[8] >> 16) as u16,
            dst: addr(&w[4..8], meta & (1 << 29) != 0),
            dst_port: w[8] as u16,
            flow_label: meta & 0xf_ffff,
        };
        (key, w[10])
    }
}

impl Classifier {
    /// The live dynamic queues of masked flowset `queue` (stale ones
    /// included until reclaimed), least recently used first: the instance
    /// each belongs to, its flow id on the flowset's link (the flowset's
    /// first id plus the slot, as [`crate::Placement::flow`]) and its
    /// masked key. `None` for an unknown or unmasked flowset. O(live).
    pub fn dynamic_queues(&self, queue: u32) -> Option<Vec<(u32, FlowId, DynamicKey)>> {
        let q = self.queues.iter().find(|q| q.number == queue)?;
        let m = q.dynamic.as_ref()?;
        Some(
            m.table
                .entries()
                .map(|(slot, key, _)| {
                    let (k, instance) = key.decode();
                    (instance, FlowId(q.first.0 + slot), k)
                })
                .collect(),
        )
    }

    /// The live instances of masked pipe or sched `link` (stale ones
    /// included until reclaimed), least recently used first: the instance
    /// number and its masked key. `None` for an unknown or unmasked link.
    /// O(live).
    pub fn dynamic_instances(&self, link: u32) -> Option<Vec<(u32, DynamicKey)>> {
        let l = self.links.iter().find(|l| l.number == link)?;
        let m = l.instances.as_ref()?;
        Some(
            m.table
                .entries()
                .map(|(slot, key, _)| (slot, key.decode().0))
                .collect(),
        )
    }
}
