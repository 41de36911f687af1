//! Transmit backends: what happens to a packet once the arbiter released it.
//!
//! A backend receives batches (\[J\] §3.3: dispatchers call the driver in
//! batches; [`crate::RuntimeConfig::dispatch_batch`]), together with the
//! time read once for the batch. The runtime owns one backend per
//! transmitting thread: the arbiter (dispatcher mode with T = 0), each
//! dispatcher (T >= 1), or each client (client-transmit mode). Static
//! dispatch: the runtime is generic over `B: TxBackend`.
//!
//! # Guarantees
//! Packets of one client with one flow reach one backend, in submission
//! order (placement is per flow, see [`crate::runtime`]).

use pspat_sched::{FlowId, Instant};

/// A released packet as a backend sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxPacket {
    /// Submitting client.
    pub client: u32,
    /// The flow it was scheduled in.
    pub flow: FlowId,
    /// Length in bytes.
    pub len: u32,
    /// The client's opaque value given to [`crate::Client::submit`] (a buffer
    /// index, a sequence number, a timestamp...).
    pub cookie: u64,
    /// How many times to send it: 1, or 2 when a pipe duplicated it
    /// (`duplicate`, [`pspat_sched::Packet::copies`]): the backend sends the
    /// same bytes again right after the original. The runtime counts the
    /// packet once in [`crate::Stats`]' `transmitted`; counting the copy is
    /// the backend's (it may fail to send one but not the other).
    pub copies: u8,
    /// Whether a pipe corrupted it (`corrupt`,
    /// [`pspat_sched::Packet::is_corrupt`]): the backend flips one bit of
    /// the packet's bytes before sending them (every copy carries the same
    /// flipped bit). The runtime counts it like any packet.
    pub corrupt: bool,
    /// Whether a pipe marked it Congestion Experienced (RED with `ecn`,
    /// [`pspat_sched::Packet::is_ce`]; only packets submitted with
    /// [`crate::Submission::ect`]): the backend sets the ECN field of the
    /// packet's IP header to 3 (and fixes the IPv4 header checksum) before
    /// sending it, every copy alike.
    pub ce: bool,
}

impl Default for TxPacket {
    /// Client 0, flow 0, length 0, cookie 0, sent once, not corrupted, not
    /// marked.
    fn default() -> Self {
        TxPacket {
            client: 0,
            flow: FlowId(0),
            len: 0,
            cookie: 0,
            copies: 1,
            corrupt: false,
            ce: false,
        }
    }
}

/// Sends released packets somewhere. Implementations must not block for
/// long: the calling thread is the arbiter when T = 0.
///
/// A panic in `transmit` is contained: the runtime fails and closes, the
/// backend is never called again, and the packets of that call and all
/// later ones are counted as dropped with reason `"fault"` (see
/// [`crate::runtime`], *Faults*).
///
/// # Examples
/// ```
/// use pspat::{TxBackend, TxPacket};
/// struct Count(u64);
/// impl TxBackend for Count {
///     fn transmit(&mut self, _now: pspat_sched::Instant, pkts: &[TxPacket]) {
///         self.0 += pkts.len() as u64;
///     }
/// }
/// let mut c = Count(0);
/// c.transmit(pspat_sched::Instant::ZERO, &[TxPacket::default(); 3]);
/// assert_eq!(c.0, 3);
/// ```
pub trait TxBackend: Send + 'static {
    /// Transmits every packet of `pkts`, in order. `now` was read once for
    /// the batch with the runtime's [`crate::Clock`].
    fn transmit(&mut self, now: Instant, pkts: &[TxPacket]);

    /// Whether [`TxPacket::cookie`] is needed. When the arbiter transmits
    /// (T = 0) and this is false, clients skip writing their descriptors
    /// and the arbiter skips reading them (one cache line per 8 packets on
    /// each side) and passes 0. Asked once, when the runtime starts.
    /// Default true.
    fn wants_cookies(&self) -> bool {
        true
    }
}

/// The null backend: counts packets and bytes, and optionally records the
/// latency of one client's packets (whose cookie is then its submit time)
/// into a buffer allocated up front: `now - cookie` with
/// [`NullTx::with_latency_sampling`] (virtual time, or the round's clock
/// read), or with [`NullTx::with_latency_clock`] the clock read at the
/// hand-off itself. The round reads its clock before it collects, so a
/// packet submitted after that read and handed off in the same round would
/// show a negative latency against `now`; threaded runs should use the
/// clock.
///
/// # Examples
/// ```
/// use pspat::{NullTx, TxBackend, TxPacket};
/// let mut tx = NullTx::with_latency_sampling(7, 16);
/// let p = TxPacket { client: 7, len: 60, cookie: 100, ..Default::default() };
/// tx.transmit(pspat_sched::Instant::from_nanos(350), &[p]);
/// assert_eq!((tx.packets(), tx.bytes()), (1, 60));
/// assert_eq!(tx.latencies_ns(), &[250]);
/// ```
#[derive(Debug, Default)]
pub struct NullTx {
    packets: u64,
    bytes: u64,
    sample_client: Option<u32>,
    latencies: Vec<u64>,
    sample_cap: usize,
    samples_lost: u64,
    clock: Option<crate::Clock>,
}

impl NullTx {
    /// Counts only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also records latencies of `client`'s packets, up to `capacity` samples
    /// (later ones are counted in [`NullTx::samples_lost`]).
    pub fn with_latency_sampling(client: u32, capacity: usize) -> Self {
        NullTx {
            sample_client: Some(client),
            latencies: Vec::with_capacity(capacity),
            sample_cap: capacity,
            ..Self::default()
        }
    }

    /// As [`NullTx::with_latency_sampling`], but a packet's latency is
    /// `clock.now() − cookie`, the clock read once per `transmit` call that
    /// holds one of `client`'s packets; the client stamps its cookies with
    /// the same `clock`.
    pub fn with_latency_clock(client: u32, capacity: usize, clock: crate::Clock) -> Self {
        NullTx {
            clock: Some(clock),
            ..Self::with_latency_sampling(client, capacity)
        }
    }

    /// Packets transmitted.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Bytes transmitted.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Recorded latencies in nanoseconds, in transmit order.
    pub fn latencies_ns(&self) -> &[u64] {
        &self.latencies
    }

    /// Samples that did not fit the buffer.
    pub fn samples_lost(&self) -> u64 {
        self.samples_lost
    }
}

impl TxBackend for NullTx {
    fn wants_cookies(&self) -> bool {
        self.sample_client.is_some()
    }

    #[inline]
    fn transmit(&mut self, now: Instant, pkts: &[TxPacket]) {
        self.packets += pkts.len() as u64;
        for p in pkts {
            self.bytes += u64::from(p.len);
        }
        if let Some(c) = self.sample_client {
            let mut at = self.clock.is_none().then_some(now);
            for p in pkts.iter().filter(|p| p.client == c) {
                let now = *at.get_or_insert_with(|| self.clock.map_or(now, |k| k.now()));
                if self.latencies.len() < self.sample_cap {
                    self.latencies.push(now.as_nanos().saturating_sub(p.cookie));
                } else {
                    self.samples_lost += 1;
                }
            }
        }
    }
}
