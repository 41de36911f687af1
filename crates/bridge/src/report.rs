//! What a bridge counted: [`Report`], live ([`crate::Bridge::report`]) or
//! final ([`crate::Bridge::stop`]).
//!
//! Conservation, in total and per flow: `received + duplicated =
//! transmitted + dropped (by reason) + in_flight`, where `duplicated`
//! counts the copies of packets a pipe duplicated (`duplicate`): a copy
//! enters the bridge at its transmitter, and is then sent (counted in
//! `transmitted`) or dropped like any frame. `received` counts every frame the
//! input ring gave; frames the kernel dropped because the ring was full
//! never reached the bridge and are reported apart as `not_received`.
//! Drop reasons come from three places: the RX threads ([`crate::RxReason`]
//! and, with `--unparsed drop`, the parse reasons), the runtime's arbiter
//! (`shutdown`, `queue_full`, `fault`, ...), and the transmitters
//! ([`crate::TxReason`]). Frames dropped before they were classified
//! (parse refusals, `too_long`, `filtered`, `bad_flow`) count in the totals
//! but in no flow. A live report counts the arbiter's drops by reason in
//! the totals of their direction (the runtime counts them per RX thread,
//! and each direction has its own), so its `in_flight` is what the bridge
//! and its scheduler hold; per flow and per egress interface it computes
//! `in_flight` as the rest, the arbiter's drops included (per flow they
//! are only known once the bridge stopped). A final report has
//! `in_flight == 0` and gives each flow its arbiter drops.
//!
//! `corrupted` counts the packets a pipe corrupted (`corrupt`: one bit of
//! the frame flipped by the transmitter) once each, when the transmitter
//! takes them: they are neither extra frames nor drops, and stay out of the
//! conservation sum (each is counted `transmitted` or dropped as any
//! frame; a duplicated one's copy is in `duplicated` and carries the same
//! flipped bit).
//!
//! `ce_marked` counts the packets a pipe marked Congestion Experienced (RED
//! with `ecn`, on packets the RX threads found ECN-capable) whose IP header
//! the transmitter set to CE (`pspat_io::parse::mark_ce`: the ECN field
//! set to 3, the IPv4 header checksum updated), and `ce_unmarkable` (in
//! the totals of a direction only) those it could not (no ECN-capable
//! IPv4 or IPv6 header where the parser looks for one; never expected,
//! since only ECN-capable packets are marked). Like `corrupted`, each
//! packet once, when the transmitter takes it (a duplicated one's copy
//! carries the same mark), outside the conservation sum; a packet dropped
//! because its frame was not in flight (`frame_state`) is in neither.

use std::collections::BTreeMap;

use serde::Serialize;

/// One flow's counters, or one counter group's
/// ([`crate::FlowCounters::Groups`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FlowReport {
    /// The flow id (the group: flow ids `f` with `f % groups == flow`).
    pub flow: u32,
    /// Its weight (a group's: its flows' weights summed).
    pub weight: u32,
    /// The egress interface that carries it (the output interface when
    /// there is one).
    pub egress: String,
    /// Frames classified into it.
    pub received: u64,
    /// Their bytes.
    pub received_bytes: u64,
    /// Copies of its packets a pipe duplicated (each sent or dropped).
    pub duplicated: u64,
    /// Its packets a pipe corrupted (one bit flipped; module docs).
    pub corrupted: u64,
    /// Its packets a pipe marked Congestion Experienced (RED with `ecn`)
    /// that the transmitter set to CE (module docs).
    pub ce_marked: u64,
    /// Frames sent on the output interface (copies included).
    pub transmitted: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Drops by reason (zero counts omitted).
    pub dropped: BTreeMap<String, u64>,
    /// `received + duplicated - transmitted - dropped`.
    pub in_flight: u64,
}

/// The reverse direction's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReverseReport {
    /// Whether it is forwarded at all.
    pub enabled: bool,
    /// Whether it is shaped ([`crate::BridgeConfig::shape_reverse`]): its
    /// frames went through the classifier and the runtime like the forward
    /// direction's, and the fields below count them alone. With a
    /// [`crate::ReverseSwitch`]: whether it is shaped now (at the end, in
    /// a final report); its frames are counted here whatever the mode.
    pub shaped: bool,
    /// How many times the [`crate::ReverseSwitch`] turned the shaping on
    /// or off (0 without one).
    pub toggles: u64,
    /// Frames its ring (its RX threads' rings) gave.
    pub received: u64,
    /// Those of `received` forwarded unshaped: all of them when it is never
    /// shaped, those taken while the switch was off with a
    /// [`crate::ReverseSwitch`], none otherwise.
    pub received_unshaped: u64,
    /// Their bytes (counted when it can be shaped; 0 otherwise).
    pub received_bytes: u64,
    /// Copies of its packets a pipe duplicated (shaped only; each then sent
    /// or dropped).
    pub duplicated: u64,
    /// Its packets a pipe corrupted (shaped only; module docs).
    pub corrupted: u64,
    /// Its packets a pipe marked Congestion Experienced that the
    /// transmitter set to CE (shaped only; module docs).
    pub ce_marked: u64,
    /// Its packets a pipe marked Congestion Experienced that the
    /// transmitter could not mark (shaped only; module docs).
    pub ce_unmarkable: u64,
    /// Frames sent on the input interface (copies included).
    pub transmitted: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Drops by reason (zero counts omitted); when shaped, the runtime's
    /// drops of its flows are counted under the arbiter's reason (as the
    /// forward flows' in a final report).
    pub dropped: BTreeMap<String, u64>,
    /// The sum of `dropped`.
    pub dropped_total: u64,
    /// `received + duplicated - transmitted - dropped_total`: in the runtime (shaped) or
    /// in the thread's batch (unshaped); 0 in a final report.
    pub in_flight: u64,
    /// Frames the kernel dropped because its ring was full.
    pub not_received: u64,
    /// `received + duplicated = transmitted + dropped_total + in_flight` for the
    /// direction and each of its flows (and, final, `in_flight == 0`).
    pub conserved: bool,
}

/// Parse outcomes of every frame received (forwarded or not).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ParseReport {
    /// Frames that gave a flow key.
    pub parsed: u64,
    /// Frames that did not, by reason (zero counts omitted).
    pub refused: BTreeMap<String, u64>,
}

/// One egress interface's totals: the sums over the flows placed on it
/// (each flow has one egress), so frames dropped before classification are
/// in none. Conservation per interface: `received + duplicated =
/// transmitted + dropped + in_flight`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EgressReport {
    /// The interface.
    pub interface: String,
    /// Its emulated rate in bit/s (`None`: unlimited).
    pub rate_bps: Option<u64>,
    /// The share of flows weighted HRW gives it: its rate over the sum
    /// (equal shares when unshaped).
    pub weight_share: f64,
    /// Flows placed on it.
    pub flows: u32,
    /// Frames of its flows the bridge received.
    pub received: u64,
    /// Copies of its flows' packets a pipe duplicated.
    pub duplicated: u64,
    /// Its flows' packets a pipe corrupted.
    pub corrupted: u64,
    /// Its flows' packets set to Congestion Experienced (module docs).
    pub ce_marked: u64,
    /// Frames sent on it (copies included).
    pub transmitted: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Drops of its flows by reason (zero counts omitted).
    pub dropped: BTreeMap<String, u64>,
    /// Sum of `dropped`.
    pub dropped_total: u64,
    /// Frames of its flows in the bridge now (0 in a final report).
    pub in_flight: u64,
}

/// Where a thread ran (the CPU it was last seen on).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadPlace {
    /// `rx-0`, `arbiter`, `dispatcher-0`, `reverse`, ...
    pub thread: String,
    /// The CPU, when known.
    pub cpu: Option<usize>,
}

/// Receive aggregation on one interface the bridge reads
/// ([`crate::BridgeConfig::receive_offloads_off`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OffloadReport {
    /// The interface.
    pub interface: String,
    /// What the bridge turned off while it runs, by ethtool's feature
    /// names (`generic-receive-offload`, `large-receive-offload`).
    pub turned_off: Vec<String>,
    /// What stayed on because the device would not change it.
    pub still_on: Vec<String>,
    /// Final report: whether everything in `turned_off` is on again.
    pub restored: bool,
    /// Final report: why it could not be turned back on.
    pub restore_error: Option<String>,
}

/// Everything a bridge counted (module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// Seconds since the bridge started.
    pub elapsed_s: f64,
    /// Frames the input ring gave.
    pub received: u64,
    /// Their bytes.
    pub received_bytes: u64,
    /// Copies of packets a pipe duplicated (`duplicate`): extra frames the
    /// transmitters were given, each then sent or dropped.
    pub duplicated: u64,
    /// Packets a pipe corrupted (`corrupt`): the transmitters flipped one
    /// bit of each (module docs); counted once per packet, in no sum of
    /// the conservation.
    pub corrupted: u64,
    /// Packets a pipe marked Congestion Experienced (RED with `ecn`): the
    /// transmitters set the ECN field of their IP header to CE (module
    /// docs); counted once per packet, in no sum of the conservation.
    pub ce_marked: u64,
    /// Packets a pipe marked Congestion Experienced that the transmitters
    /// could not mark (no ECN-capable IP header; module docs), sent as
    /// they came.
    pub ce_unmarkable: u64,
    /// Frames sent on the output interface (copies included).
    pub transmitted: u64,
    /// Their bytes.
    pub transmitted_bytes: u64,
    /// Drops by reason (zero counts omitted).
    pub dropped: BTreeMap<String, u64>,
    /// Sum of `dropped`.
    pub dropped_total: u64,
    /// Frames in the bridge now (0 in a final report).
    pub in_flight: u64,
    /// Frames the kernel dropped because the input ring was full: never
    /// received, so in no other counter.
    pub not_received: u64,
    /// Parse outcomes.
    pub parse: ParseReport,
    /// Per flow, by id; per counter group when the bridge counts its flows
    /// in groups ([`crate::FlowCounters::Groups`]).
    pub flows: Vec<FlowReport>,
    /// Per egress interface, the output interface first.
    pub egress: Vec<EgressReport>,
    /// The reverse direction.
    pub reverse: ReverseReport,
    /// Where the threads ran.
    pub threads: Vec<ThreadPlace>,
    /// Receive aggregation on each interface the bridge reads where it was
    /// on (turned off until the bridge stops, or left on by the device).
    pub offloads: Vec<OffloadReport>,
    /// Interfaces where the bridge could not turn receive aggregation off
    /// (no `CAP_NET_ADMIN`, a device that refused), one line each.
    pub offload_warnings: Vec<String>,
    /// Whether `received + duplicated = transmitted + dropped + in_flight`
    /// held, in total
    /// and for every flow, and (final report) the runtime's own accounts
    /// agree.
    pub conserved: bool,
    /// Whether this is the final report.
    pub final_report: bool,
    /// The first error that ended a thread (a lost interface), if any.
    pub error: Option<String>,
}

pub(crate) fn add(map: &mut BTreeMap<String, u64>, key: &str, n: u64) {
    if n > 0 {
        *map.entry(key.to_string()).or_insert(0) += n;
    }
}
