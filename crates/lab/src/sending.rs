//! What a traffic sender is given and what it reports, for both senders:
//! the one that writes its own sockets ([`crate::traffic`]) and the one
//! whose threads are clients of a pspat runtime ([`crate::local`]); and
//! what the two share on the wire and in their threads: the frame sizes,
//! the payload header every test packet carries, thread pinning and the
//! names of socket errors.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use pspat_io::IoError;
use pspat_sched::AlgKind;
use serde::Serialize;

/// Ethernet, IPv4 and UDP headers in front of the payload.
pub const HEADER_BYTES: usize = 14 + 20 + 8;
/// The header each payload carries (module docs).
pub const PAYLOAD_HEADER: usize = 18;
/// The smallest frame: 60 bytes (module docs).
pub const MIN_FRAME: usize = HEADER_BYTES + PAYLOAD_HEADER;
/// The largest frame on a 1500-byte MTU.
pub const MAX_FRAME: usize = 1514;

/// Writes the payload header (module docs) into the first
/// [`PAYLOAD_HEADER`] bytes of `payload`: sequence number, send time
/// (`CLOCK_MONOTONIC` ns) and flow id (the destination port), little
/// endian. `payload` must hold at least [`PAYLOAD_HEADER`] bytes.
pub(crate) fn encode_header(payload: &mut [u8], seq: u64, sent_ns: u64, port: u16) {
    payload[0..8].copy_from_slice(&seq.to_le_bytes());
    payload[8..16].copy_from_slice(&sent_ns.to_le_bytes());
    payload[16..18].copy_from_slice(&port.to_le_bytes());
}

/// Why traffic could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    /// A bad parameter.
    #[error("{0}")]
    Config(String),
    /// A socket could not be opened or used.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The pspat runtime could not start, or failed (`--via pspat`).
    #[error("pspat runtime: {0}")]
    Runtime(String),
    /// A TCP step failed.
    #[error("{what}: {source}")]
    Tcp {
        /// The step.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
}

/// How fast to send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// As fast as the sockets take packets.
    Greedy,
    /// Bits per second of frames.
    Bps(u64),
    /// Packets per second.
    Pps(u64),
}

/// The transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// UDP flows (module docs).
    Udp,
    /// One bulk TCP stream to `base_port`.
    Tcp,
}

/// A sender's parameters.
#[derive(Debug, Clone)]
pub struct SendConfig {
    /// The receiver's address.
    pub dst: Ipv4Addr,
    /// Flow 0's destination port.
    pub base_port: u16,
    /// One weight per flow.
    pub weights: Vec<u32>,
    /// Sending threads.
    pub threads: usize,
    /// Frame length, bytes ([`MIN_FRAME`]..=[`MAX_FRAME`]).
    pub frame_bytes: usize,
    /// How fast.
    pub rate: Rate,
    /// How long.
    pub duration: Duration,
    /// CPUs to pin the threads to, round-robin (empty: unpinned).
    pub cpus: Vec<usize>,
    /// UDP or TCP.
    pub proto: Proto,
    /// Straight to the sockets, or through a pspat runtime (UDP only).
    pub via: Via,
}

/// How the sending threads put their packets on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum Via {
    /// Each thread sends with `sendmmsg` itself (no scheduler in the
    /// process; whatever qdisc the interface has applies).
    Direct,
    /// The threads are clients of a pspat runtime whose arbiter (or
    /// dispatchers) send ([`crate::local`]).
    Pspat(PspatVia),
}

impl Via {
    /// `direct` or `pspat`, as reports name it.
    pub fn name(&self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Pspat(_) => "pspat",
        }
    }
}

impl SendConfig {
    /// Checks the parameters; the message names the flag.
    pub fn check(&self) -> Result<(), TrafficError> {
        let bad = |m: String| Err(TrafficError::Config(m));
        if !(MIN_FRAME..=MAX_FRAME).contains(&self.frame_bytes) {
            return bad(format!(
                "--size {} is outside {MIN_FRAME}..={MAX_FRAME} bytes",
                self.frame_bytes
            ));
        }
        if self.weights.is_empty() || self.weights.len() > 1024 {
            return bad(format!(
                "--flows {} is outside 1..=1024",
                self.weights.len()
            ));
        }
        if self.weights.contains(&0) {
            return bad("--weights must all be at least 1".into());
        }
        if self.threads == 0 || self.threads > 256 {
            return bad(format!("--threads {} is outside 1..=256", self.threads));
        }
        if usize::from(self.base_port) + self.weights.len() > 65_536 || self.base_port == 0 {
            return bad("--port plus --flows passes 65535 (or --port is 0)".into());
        }
        match self.rate {
            Rate::Bps(0) => return bad("--rate must be above 0 (leave it out for greedy)".into()),
            Rate::Pps(0) => return bad("--pps must be above 0 (leave it out for greedy)".into()),
            _ => {}
        }
        if self.duration.is_zero() {
            return bad("--duration must be above 0".into());
        }
        if let Via::Pspat(p) = &self.via {
            if self.proto == Proto::Tcp {
                return bad("--via pspat sends UDP only (not --proto tcp)".into());
            }
            p.check()?;
        }
        Ok(())
    }

    /// The packets per second of the whole sender, `None` when greedy.
    pub fn total_pps(&self) -> Option<f64> {
        match self.rate {
            Rate::Greedy => None,
            Rate::Pps(p) => Some(p as f64),
            Rate::Bps(b) => Some(b as f64 / (8.0 * self.frame_bytes as f64)),
        }
    }

    /// The flows thread `t` sends (module docs).
    pub fn flows_of_thread(&self, t: usize) -> Vec<usize> {
        let n = self.weights.len();
        if n >= self.threads {
            (t..n).step_by(self.threads).collect()
        } else {
            vec![t % n]
        }
    }
}

/// What one flow's streams sent.
#[derive(Debug, Clone, Serialize, Default)]
pub struct FlowSent {
    /// Flow id.
    pub flow: usize,
    /// Destination port.
    pub port: u16,
    /// Weight.
    pub weight: u32,
    /// Streams (threads) sending it.
    pub streams: usize,
    /// Packets the kernel took.
    pub packets: u64,
    /// Frame bytes of those.
    pub bytes: u64,
    /// Packets refused by the local stack (not sent).
    pub refused: u64,
}

/// A sender's report.
#[derive(Debug, Clone, Serialize)]
pub struct SendReport {
    /// `udp` or `tcp`.
    pub proto: Proto,
    /// Frame length (UDP), bytes.
    pub frame_bytes: usize,
    /// Threads.
    pub threads: usize,
    /// The target rate in packets/s, null when greedy (UDP).
    pub target_pps: Option<f64>,
    /// Seconds from the first send to the last.
    pub duration_s: f64,
    /// Packets sent.
    pub packets: u64,
    /// Frame bytes sent (UDP) or stream bytes written (TCP).
    pub bytes: u64,
    /// `packets / duration_s`.
    pub pps: f64,
    /// `8 · bytes / duration_s`.
    pub bps: f64,
    /// Refused sends by reason.
    pub send_errors: BTreeMap<String, u64>,
    /// Per flow (UDP; empty for TCP).
    pub flows: Vec<FlowSent>,
    /// This process's CPU seconds (user + system), from /proc.
    pub cpu_s: Option<f64>,
    /// Where the threads ran.
    pub pinning: String,
    /// `direct` or `pspat` ([`Via`]).
    pub via: &'static str,
    /// Through pspat: the runtime's accounting (null when direct).
    pub pspat: Option<PspatSent>,
}

pub(crate) fn pin(cpus: &[usize], index: usize) {
    if let Some(&cpu) = cpus.get(index % cpus.len().max(1)) {
        core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
    }
}

pub(crate) fn pinning(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        "unpinned".into()
    } else {
        format!(
            "threads round-robin on cpu {}",
            cpus.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

pub(crate) fn error_name(error: &IoError) -> String {
    match error {
        IoError::Os { source, .. } => match source.raw_os_error() {
            Some(libc::ENOBUFS) => "no_buffer_space".into(),
            Some(libc::ECONNREFUSED) => "connection_refused".into(),
            Some(libc::EAGAIN) => "would_block".into(),
            Some(libc::EHOSTUNREACH) => "host_unreachable".into(),
            Some(libc::ENETUNREACH) => "network_unreachable".into(),
            Some(n) => format!("errno_{n}"),
            None => "other".into(),
        },
        other => other.to_string(),
    }
}

/// The runtime a `--via pspat` sender starts.
#[derive(Debug, Clone, PartialEq)]
pub struct PspatVia {
    /// The scheduling algorithm (`--alg`).
    pub alg: AlgKind,
    /// The emulated link rate, bit/s (`--link-rate`); `None`: unlimited.
    pub link_rate_bps: Option<u64>,
    /// Dispatcher threads (`--dispatchers`); 0: the arbiter sends.
    pub dispatchers: usize,
    /// CPU of the arbiter (`--arbiter-cpu`).
    pub arbiter_cpu: Option<usize>,
    /// CPU of the dispatchers (`--dispatcher-cpu`).
    pub dispatcher_cpu: Option<usize>,
}

impl Default for PspatVia {
    /// DRR, unlimited, the arbiter sends, unpinned.
    fn default() -> Self {
        PspatVia {
            alg: AlgKind::Drr,
            link_rate_bps: None,
            dispatchers: 0,
            arbiter_cpu: None,
            dispatcher_cpu: None,
        }
    }
}

impl PspatVia {
    /// Checks the parameters; the message names the flag.
    pub fn check(&self) -> Result<(), TrafficError> {
        if self.dispatchers > 64 {
            return Err(TrafficError::Config(format!(
                "--dispatchers {} is outside 0..=64",
                self.dispatchers
            )));
        }
        if let Some(r) = self.link_rate_bps {
            let range = pspat_sched::rate::MIN_RATE_BPS..=pspat_sched::rate::MAX_RATE_BPS;
            if !range.contains(&r) {
                return Err(TrafficError::Config(format!(
                    "--link-rate {r} is outside {}..={} bit/s",
                    range.start(),
                    range.end()
                )));
            }
        }
        Ok(())
    }
}

/// What the runtime of a `--via pspat` sender did (module docs,
/// *Accounting*).
#[derive(Debug, Clone, Serialize)]
pub struct PspatSent {
    /// The algorithm.
    pub alg: String,
    /// Dispatcher threads (0: the arbiter sent).
    pub dispatchers: usize,
    /// The emulated link rate, bit/s (null: unlimited).
    pub link_rate_bps: Option<u64>,
    /// Packets the runtime accepted from the sender threads.
    pub submitted: u64,
    /// Packets the runtime handed to a backend.
    pub transmitted: u64,
    /// Packets a socket took (the report's `packets`).
    pub sent: u64,
    /// Drops by reason: the runtime's, and socket refusals as `tx_<reason>`.
    pub dropped: BTreeMap<String, u64>,
    /// Packets still in the runtime (0 after a clean shutdown).
    pub in_flight: u64,
    /// `submitted = sent + Σ dropped` with nothing in flight.
    pub conserved: bool,
    /// Times a sender thread found its mailbox full and waited for room.
    pub full_waits: u64,
    /// A fault the runtime contained, or a backend lost with its thread.
    pub error: Option<String>,
}
