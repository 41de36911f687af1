//! Packet descriptors and dense flow identifiers.
//!
//! The scheduler never sees payload: a [`Packet`] is 16 bytes carrying the
//! pre-classified flow, the wire length and an opaque `token` the owner of the
//! buffer uses to find it again (the runtime packs client id and buffer index).

use serde::{Deserialize, Serialize};

/// Largest packet length any scheduler accepts, in bytes (IPv4 total length).
pub const MAX_PACKET_LEN: u32 = 65_535;

/// A dense flow number: per-flow state lives in arrays indexed by it.
///
/// # Examples
/// ```
/// use pspat_sched::FlowId;
/// assert_eq!(FlowId(3).index(), 3);
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct FlowId(pub u32);

impl FlowId {
    /// The flow number as an array index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// What the scheduler knows about a packet.
///
/// # Examples
/// ```
/// use pspat_sched::{FlowId, Packet};
/// let p = Packet::new(FlowId(1), 60, 42);
/// assert_eq!((p.flow, p.len, p.token), (FlowId(1), 60, 42));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Packet {
    /// The flow it was classified into.
    pub flow: FlowId,
    /// Length on the wire in bytes, 1..=[`MAX_PACKET_LEN`].
    pub len: u32,
    /// Opaque to the scheduler; handed back unchanged on dequeue.
    pub token: u64,
}

impl Packet {
    /// The bit of [`Packet::token`] a [`crate::PipeScheduler`] sets on a
    /// packet it hands out to be sent twice (a `duplicate` decision of its
    /// pipe). Callers of that adapter keep it clear in the tokens they
    /// enqueue (pspat's runtime does: its tokens are below 2^63) and clear
    /// it with [`Packet::without_copy`] before they read their token.
    pub const COPY_BIT: u64 = 1 << 63;

    /// A descriptor for `len` bytes of `flow`, identified by `token`.
    pub const fn new(flow: FlowId, len: u32, token: u64) -> Self {
        Packet { flow, len, token }
    }

    /// How many times the packet is to be sent: 2 when [`Packet::COPY_BIT`]
    /// is set, else 1.
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{FlowId, Packet};
    /// let p = Packet::new(FlowId(0), 60, 42);
    /// assert_eq!((p.copies(), p.with_copy().copies()), (1, 2));
    /// assert_eq!(p.with_copy().without_copy(), p);
    /// ```
    #[inline]
    pub const fn copies(&self) -> u8 {
        1 + (self.token >> 63) as u8
    }

    /// The packet marked to be sent twice.
    #[inline]
    pub const fn with_copy(self) -> Self {
        Packet {
            token: self.token | Self::COPY_BIT,
            ..self
        }
    }

    /// The packet with the copy mark cleared.
    #[inline]
    pub const fn without_copy(self) -> Self {
        Packet {
            token: self.token & !Self::COPY_BIT,
            ..self
        }
    }

    /// The bit of [`Packet::token`] a [`crate::Pipe`] sets on a packet it
    /// corrupted (a `corrupt` decision of its queue): whoever holds the
    /// packet's bytes flips one bit of them before sending. Like
    /// [`Packet::COPY_BIT`], callers keep it clear in the tokens they
    /// enqueue (pspat's runtime does: its tokens are below 2^52) and clear
    /// it with [`Packet::without_marks`] before they read their token.
    pub const CORRUPT_BIT: u64 = 1 << 62;

    /// Whether a pipe corrupted the packet ([`Packet::CORRUPT_BIT`]).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{FlowId, Packet};
    /// let p = Packet::new(FlowId(0), 60, 42);
    /// assert!(!p.is_corrupt() && p.with_corrupt().is_corrupt());
    /// assert_eq!(p.with_corrupt().with_copy().without_marks(), p);
    /// ```
    #[inline]
    pub const fn is_corrupt(&self) -> bool {
        self.token & Self::CORRUPT_BIT != 0
    }

    /// The packet marked as corrupted.
    #[inline]
    pub const fn with_corrupt(self) -> Self {
        Packet {
            token: self.token | Self::CORRUPT_BIT,
            ..self
        }
    }

    /// The bit of [`Packet::token`] a [`crate::Pipe`] sets on a packet it
    /// marked instead of dropping it (its RED with `ecn`,
    /// [`crate::pipe::QueueConfig::ecn`], or a random loss with `lossecn`,
    /// [`crate::pipe::QueueConfig::loss_ecn`]): whoever holds the packet's bytes
    /// sets its IP header's ECN field to Congestion Experienced before
    /// sending. A pipe sets it only on a packet enqueued with
    /// [`Packet::ECT_BIT`]. Callers keep it clear in the tokens they enqueue
    /// and clear it with [`Packet::without_marks`] before they read their
    /// token.
    pub const CE_BIT: u64 = 1 << 61;

    /// The bit of [`Packet::token`] a caller sets on a packet whose IP
    /// header says ECN-capable transport (its ECN field not zero), so that
    /// a pipe with `ecn` may mark it instead of dropping it. A pipe reads
    /// it and leaves it; [`Packet::without_marks`] keeps it (it is the
    /// caller's, not a mark).
    pub const ECT_BIT: u64 = 1 << 60;

    /// Every bit of [`Packet::token`] this crate gives a meaning to: the
    /// pipe's marks ([`Packet::COPY_BIT`], [`Packet::CORRUPT_BIT`],
    /// [`Packet::CE_BIT`]) and the caller's [`Packet::ECT_BIT`]. A caller's
    /// own value is the token without them.
    pub const FLAG_BITS: u64 = Self::COPY_BIT | Self::CORRUPT_BIT | Self::CE_BIT | Self::ECT_BIT;

    /// Whether a pipe marked the packet Congestion Experienced
    /// ([`Packet::CE_BIT`]).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::{FlowId, Packet};
    /// let p = Packet::new(FlowId(0), 60, 42).with_ect();
    /// assert!(p.is_ect() && !p.is_ce() && p.with_ce().is_ce());
    /// assert_eq!(p.with_ce().with_copy().without_marks(), p);
    /// ```
    #[inline]
    pub const fn is_ce(&self) -> bool {
        self.token & Self::CE_BIT != 0
    }

    /// The packet marked Congestion Experienced.
    #[inline]
    pub const fn with_ce(self) -> Self {
        Packet {
            token: self.token | Self::CE_BIT,
            ..self
        }
    }

    /// Whether the caller said the packet is ECN-capable
    /// ([`Packet::ECT_BIT`]).
    #[inline]
    pub const fn is_ect(&self) -> bool {
        self.token & Self::ECT_BIT != 0
    }

    /// The packet said to be ECN-capable.
    #[inline]
    pub const fn with_ect(self) -> Self {
        Packet {
            token: self.token | Self::ECT_BIT,
            ..self
        }
    }

    /// The packet with the pipe's marks ([`Packet::COPY_BIT`],
    /// [`Packet::CORRUPT_BIT`], [`Packet::CE_BIT`]) cleared: the token as it
    /// was enqueued ([`Packet::ECT_BIT`], the caller's, stays).
    #[inline]
    pub const fn without_marks(self) -> Self {
        Packet {
            token: self.token & !(Self::COPY_BIT | Self::CORRUPT_BIT | Self::CE_BIT),
            ..self
        }
    }
}
