//! Per-flow parameters shared by every algorithm: weight, maximum packet
//! length and priority, validated once into a [`FlowTable`].

use serde::{Deserialize, Serialize};

use crate::{ConfigError, FlowId, MAX_PACKET_LEN};

/// Smallest accepted weight.
pub const MIN_WEIGHT: u32 = 1;
/// Largest accepted weight (dummynet's RR and QFQ range).
pub const MAX_WEIGHT: u32 = 65_536;
/// Number of strict priorities (0 is the highest).
pub const PRIORITIES: u8 = 64;
/// Default maximum packet length of a flow, in bytes.
pub const DEFAULT_LMAX: u32 = 1_500;

/// The configuration of one flow.
///
/// # Examples
/// ```
/// use pspat_sched::FlowParams;
/// let f = FlowParams::weighted(10);
/// assert_eq!((f.weight, f.lmax, f.priority), (10, 1500, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FlowParams {
    /// Share of the link relative to the other flows, [`MIN_WEIGHT`]..=[`MAX_WEIGHT`].
    pub weight: u32,
    /// Largest packet the flow sends, 1..=65535 bytes (QFQ groups by it).
    pub lmax: u32,
    /// Strict priority for PRIO, 0 (highest) ..= 63.
    pub priority: u8,
}

impl Default for FlowParams {
    fn default() -> Self {
        FlowParams {
            weight: 1,
            lmax: DEFAULT_LMAX,
            priority: 0,
        }
    }
}

impl FlowParams {
    /// A flow with `weight` and the default lmax and priority.
    pub const fn weighted(weight: u32) -> Self {
        FlowParams {
            weight,
            lmax: DEFAULT_LMAX,
            priority: 0,
        }
    }
}

/// A validated, non-empty list of flows; `FlowId(i)` is entry `i`.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowParams, FlowTable};
/// let t = FlowTable::new(vec![FlowParams::weighted(1), FlowParams::weighted(3)]).unwrap();
/// assert_eq!(t.len(), 2);
/// assert_eq!(t.total_weight(), 4);
/// assert!(FlowTable::new(vec![FlowParams::weighted(0)]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowTable {
    flows: Vec<FlowParams>,
    total_weight: u64,
    max_lmax: u32,
}

impl FlowTable {
    /// Largest number of flows a table may hold (flow ids are `u32`, arrays are dense).
    pub const MAX_FLOWS: usize = 1 << 24;

    /// Validates every flow.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first flow whose weight, lmax or priority is
    /// out of range, or an empty or oversized table.
    pub fn new(flows: Vec<FlowParams>) -> Result<Self, ConfigError> {
        if flows.is_empty() {
            return Err(ConfigError::invalid(
                "flow table",
                "no flows: configure at least one",
            ));
        }
        if flows.len() > Self::MAX_FLOWS {
            return Err(ConfigError::out_of_range(
                "number of flows",
                flows.len(),
                format!("1..={}", Self::MAX_FLOWS),
            ));
        }
        for (i, f) in flows.iter().enumerate() {
            ConfigError::check_range(
                format!("flow {i} weight"),
                f.weight,
                MIN_WEIGHT..=MAX_WEIGHT,
            )?;
            ConfigError::check_range(format!("flow {i} lmax"), f.lmax, 1..=MAX_PACKET_LEN)?;
            if f.priority >= PRIORITIES {
                return Err(ConfigError::out_of_range(
                    format!("flow {i} priority"),
                    f.priority,
                    format!("0..={}", PRIORITIES - 1),
                ));
            }
        }
        let total_weight = flows.iter().map(|f| u64::from(f.weight)).sum();
        let max_lmax = flows.iter().map(|f| f.lmax).max().unwrap_or(DEFAULT_LMAX);
        Ok(FlowTable {
            flows,
            total_weight,
            max_lmax,
        })
    }

    /// `n` flows of weight 1.
    ///
    /// # Errors
    /// As [`FlowTable::new`] (`n == 0` or too many flows).
    pub fn uniform(n: usize) -> Result<Self, ConfigError> {
        Self::new(vec![FlowParams::default(); n])
    }

    /// Number of flows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Always false: a table has at least one flow.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The parameters of `flow`, if it exists.
    pub fn get(&self, flow: FlowId) -> Option<&FlowParams> {
        self.flows.get(flow.index())
    }

    /// All flows, indexed by flow id.
    pub fn as_slice(&self) -> &[FlowParams] {
        &self.flows
    }

    /// Sum of all weights.
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The largest lmax of any flow.
    pub fn max_lmax(&self) -> u32 {
        self.max_lmax
    }
}

impl FlowTable {
    /// Checks that `pkt` names a configured flow and has a length in
    /// 1..=[`MAX_PACKET_LEN`]; the common admission test of every algorithm.
    ///
    /// # Errors
    /// The packet back in a [`crate::Rejected`] with
    /// [`crate::DropReason::UnknownFlow`] or [`crate::DropReason::BadLength`].
    #[inline]
    pub fn admit(&self, pkt: &crate::Packet) -> Result<(), crate::Rejected> {
        let reject = |reason| {
            Err(crate::Rejected {
                packet: *pkt,
                reason,
            })
        };
        if pkt.flow.index() >= self.flows.len() {
            return reject(crate::DropReason::UnknownFlow);
        }
        if pkt.len == 0 || pkt.len > MAX_PACKET_LEN {
            return reject(crate::DropReason::BadLength);
        }
        Ok(())
    }
}
