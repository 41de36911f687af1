//! From a received frame to a flow: the [`Classifier`] trait the RX threads
//! call, and the built-in [`HashClassifier`].
//!
//! A classifier sees the frame (as on the wire, VLAN tag restored) and the
//! outcome of [`pspat_io::parse::parse_frame`] on it, and names a flow or
//! drops the frame. Each RX thread owns its classifier (no sharing, no
//! locks); a richer one (rules, tables, masks) plugs in through
//! [`crate::Bridge::start_with`].

use pspat_io::parse::{FlowKey, FlowKeyKind, ParseError, ParseReason};
use pspat_sched::FlowId;

use crate::config::{BridgeConfig, Unparsed};

/// What a classifier decided for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Shape it in this flow (must be below the bridge's flow count, else
    /// it is dropped with reason `bad_flow`).
    Flow(FlowId),
    /// Drop it: it did not parse, for this reason (counted under the
    /// reason's counter name).
    Unparsed(ParseReason),
    /// Drop it by policy (counted as `filtered`).
    Filtered,
}

/// Names the flow of each frame. One per RX thread; called once per frame.
pub trait Classifier: Send + 'static {
    /// Classifies `frame`, whose parse gave `key`.
    fn classify(&mut self, frame: &[u8], key: Result<&FlowKey, &ParseError>) -> Verdict;
}

impl<F> Classifier for F
where
    F: FnMut(&[u8], Result<&FlowKey, &ParseError>) -> Verdict + Send + 'static,
{
    fn classify(&mut self, frame: &[u8], key: Result<&FlowKey, &ParseError>) -> Verdict {
        self(frame, key)
    }
}

/// The built-in classifier (`--flow-key`, `--flows`):
/// * `5-tuple`, `src-ip`, `dst-ip`: the projected key
///   ([`FlowKey::project`]) hashed with a seed ([`FlowKey::hash`]), modulo
///   the flow count: flows of distinct keys may share a flow.
/// * `dst-port`: the destination port modulo the flow count, so that N
///   consecutive ports land in N distinct flows (port `p` in flow
///   `p % N`); ICMP and other portless packets have port 0.
/// * a frame that does not parse: flow 0 ([`Unparsed::Forward`]) or
///   dropped under its parse reason ([`Unparsed::Drop`]).
///
/// # Examples
/// ```
/// use pspat_bridge::{BridgeConfig, Classifier, HashClassifier, Verdict};
/// use pspat_io::parse::{FlowKeyKind, ParseError, ParseReason};
/// use pspat_sched::FlowId;
/// let mut cfg = BridgeConfig::new("in0", "out0");
/// cfg.flows = 4;
/// cfg.flow_key = FlowKeyKind::DstPort;
/// let mut c = HashClassifier::new(&cfg);
/// let err = ParseError { reason: ParseReason::NonIp, offset: 14 };
/// assert_eq!(c.classify(&[], Err(&err)), Verdict::Flow(FlowId(0)));
/// ```
#[derive(Clone, Debug)]
pub struct HashClassifier {
    kind: FlowKeyKind,
    flows: u64,
    seed: u64,
    unparsed: Unparsed,
}

impl HashClassifier {
    /// The classifier `cfg` describes.
    pub fn new(cfg: &BridgeConfig) -> Self {
        HashClassifier {
            kind: cfg.flow_key,
            flows: u64::from(cfg.flows.max(1)),
            seed: cfg.hash_seed,
            unparsed: cfg.unparsed,
        }
    }

    /// The flow of a parsed key.
    pub fn flow_of(&self, key: &FlowKey) -> FlowId {
        let bucket = match self.kind {
            FlowKeyKind::DstPort => u64::from(key.dst_port) % self.flows,
            kind => key.project(kind).hash(self.seed) % self.flows,
        };
        FlowId(bucket as u32)
    }
}

impl Classifier for HashClassifier {
    #[inline]
    fn classify(&mut self, _frame: &[u8], key: Result<&FlowKey, &ParseError>) -> Verdict {
        match (key, self.unparsed) {
            (Ok(key), _) => Verdict::Flow(self.flow_of(key)),
            (Err(_), Unparsed::Forward) => Verdict::Flow(FlowId(0)),
            (Err(e), Unparsed::Drop) => Verdict::Unparsed(e.reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(src: u8, dport: u16) -> FlowKey {
        FlowKey {
            ip_version: pspat_io::parse::IpVersion::V4,
            outer_vlan: None,
            inner_vlan: None,
            src: IpAddr::V4(Ipv4Addr::new(10, 199, 0, src)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 199, 1, 1)),
            protocol: 17,
            src_port: 1000 + u16::from(src),
            dst_port: dport,
        }
    }

    #[test]
    fn dst_port_is_injective_on_consecutive_ports() {
        let mut cfg = BridgeConfig::new("a", "b");
        cfg.flows = 8;
        cfg.flow_key = FlowKeyKind::DstPort;
        let c = HashClassifier::new(&cfg);
        let mut seen: Vec<u32> = (5000..5008).map(|p| c.flow_of(&key(1, p)).0).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn src_ip_ignores_ports_and_stays_in_range() {
        let mut cfg = BridgeConfig::new("a", "b");
        cfg.flows = 16;
        cfg.flow_key = FlowKeyKind::SrcIp;
        let c = HashClassifier::new(&cfg);
        for s in 0..50 {
            let f = c.flow_of(&key(s, 1));
            assert!(f.0 < 16);
            assert_eq!(f, c.flow_of(&key(s, 999)));
        }
    }

    #[test]
    fn unparsed_frames_follow_the_policy() {
        let mut cfg = BridgeConfig::new("a", "b");
        cfg.unparsed = Unparsed::Drop;
        let mut c = HashClassifier::new(&cfg);
        let e = ParseError {
            reason: ParseReason::BadIhl,
            offset: 14,
        };
        assert_eq!(
            c.classify(&[], Err(&e)),
            Verdict::Unparsed(ParseReason::BadIhl)
        );
    }
}
