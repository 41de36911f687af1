//! The one codec for the 64-bit words that name a client's descriptor on its
//! way through the runtime.
//!
//! A packet is named by a [`DescRef`] — the submitting client and the index
//! of its descriptor in that client's pool — from `submit` to recycling. It
//! travels in four words, each encoded and decoded only here:
//!
//! | word | written by | read by | layout |
//! |---|---|---|---|
//! | client slot | client (`submit`) | arbiter (collect) | `desc << 40 \| flow << 16 \| len` (the client is implied by the mailbox) |
//! | scheduler token | arbiter | arbiter (release) | `client << 32 \| desc` in [`pspat_sched::Packet::token`]; bits 63 and 62 are the pipe's copy and corruption marks ([`pspat_sched::Packet::COPY_BIT`], [`pspat_sched::Packet::CORRUPT_BIT`]), set by the scheduler, read and cleared at release |
//! | TX slot | arbiter | dispatcher | the token with bit 63 set (non-zero), bit 31 = send twice, bit 30 = corrupt |
//! | grant | arbiter | client (client-transmit mode) | bit 63, bit 62 = dropped, bit 61 = send twice, bit 60 = corrupt, `desc` in the low 32 bits |
//!
//! Every mailbox word must be non-zero (zero marks an empty slot): the client
//! slot is, because `len >= 1`; the TX slot and grant carry bit 63.
//!
//! # Ranges
//! `desc < 2^24` (descriptors per client are at most 2^20), `flow < 2^24`
//! ([`MAX_FLOW_ID`]), `1 <= len <= 65535`, `client < 2^30` (clients are at
//! most 2^20), so a token never has the pipe's marks set.

use std::num::NonZeroU64;

use pspat_sched::{FlowId, Packet};

/// Flow ids must be below this to fit the client slot (24 bits).
pub const MAX_FLOW_ID: u32 = 1 << 24;

const MARK: u64 = 1 << 63;
const DROPPED: u64 = 1 << 62;
/// In a grant: transmit the descriptor twice.
const GRANT_COPY: u64 = 1 << 61;
/// In a grant: flip one bit of the packet before transmitting it.
const GRANT_CORRUPT: u64 = 1 << 60;
/// In a TX slot: transmit the descriptor twice (a bit `desc < 2^24` leaves
/// free).
const SLOT_COPY: u64 = 1 << 31;
/// In a TX slot: flip one bit of the packet before transmitting it.
const SLOT_CORRUPT: u64 = 1 << 30;
/// The pipe's marks in a scheduler token.
const PIPE_MARKS: u64 = Packet::COPY_BIT | Packet::CORRUPT_BIT;

/// What a pipe decided about a released packet beyond its release: how
/// many times to send it and whether to corrupt it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marks {
    /// 1, or 2 for a pipe's duplicate.
    pub(crate) copies: u8,
    /// One bit of it is to be flipped (a pipe's `corrupt`).
    pub(crate) corrupt: bool,
}

impl Marks {
    /// Sent once, unchanged.
    pub(crate) const PLAIN: Marks = Marks {
        copies: 1,
        corrupt: false,
    };
}

/// One descriptor of one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DescRef {
    pub(crate) client: u32,
    pub(crate) desc: u32,
}

impl DescRef {
    /// The scheduler's [`pspat_sched::Packet::token`].
    #[inline]
    pub(crate) fn token(self) -> u64 {
        (u64::from(self.client) << 32) | u64::from(self.desc)
    }

    /// Inverse of [`DescRef::token`]; ignores the marks a pipe may have
    /// set ([`pspat_sched::Packet::COPY_BIT`],
    /// [`pspat_sched::Packet::CORRUPT_BIT`]).
    #[inline]
    pub(crate) fn from_token(token: u64) -> Self {
        let token = token & !PIPE_MARKS;
        DescRef {
            client: (token >> 32) as u32,
            desc: token as u32,
        }
    }

    /// The descriptor of a released packet and the pipe's marks on it
    /// ([`pspat_sched::Packet::copies`]: 1, or 2 for a pipe's duplicate;
    /// [`pspat_sched::Packet::is_corrupt`]).
    #[inline]
    pub(crate) fn released(p: &Packet) -> (Self, Marks) {
        (
            Self::from_token(p.token),
            Marks {
                copies: p.copies(),
                corrupt: p.is_corrupt(),
            },
        )
    }

    /// The word a dispatcher's TX mailbox carries, for a packet with
    /// `marks`.
    #[inline]
    pub(crate) fn tx_slot(self, marks: Marks) -> NonZeroU64 {
        let copy = if marks.copies > 1 { SLOT_COPY } else { 0 };
        let corrupt = if marks.corrupt { SLOT_CORRUPT } else { 0 };
        NonZeroU64::new(self.token() | MARK | copy | corrupt).unwrap_or(NonZeroU64::MIN)
    }

    /// Inverse of [`DescRef::tx_slot`].
    #[inline]
    pub(crate) fn from_tx_slot(v: NonZeroU64) -> (Self, Marks) {
        let v = v.get();
        (
            Self::from_token(v & !(MARK | SLOT_COPY | SLOT_CORRUPT)),
            Marks {
                copies: 1 + u8::from(v & SLOT_COPY != 0),
                corrupt: v & SLOT_CORRUPT != 0,
            },
        )
    }
}

/// What a client slot carries: the arbiter never reads the descriptor itself
/// on the way in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientSlot {
    pub(crate) desc: u32,
    pub(crate) flow: FlowId,
    pub(crate) len: u32,
}

impl ClientSlot {
    /// The word a client pushes; `len` must be in 1..=65535 and `flow` below
    /// [`MAX_FLOW_ID`] (checked by `submit`).
    #[inline]
    pub(crate) fn encode(self) -> NonZeroU64 {
        let v = (u64::from(self.desc) << 40) | (u64::from(self.flow.0) << 16) | u64::from(self.len);
        // len >= 1, so v != 0.
        NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
    }

    /// Inverse of [`ClientSlot::encode`].
    #[inline]
    pub(crate) fn decode(v: NonZeroU64) -> Self {
        let v = v.get();
        ClientSlot {
            desc: (v >> 40) as u32,
            flow: FlowId(((v >> 16) & 0xff_ffff) as u32),
            len: (v & 0xffff) as u32,
        }
    }
}

/// A grant: the arbiter tells a client (client-transmit mode) that one of its
/// descriptors may be transmitted, or was dropped and may be reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) desc: u32,
    pub(crate) dropped: bool,
    /// Times to transmit it and whether to corrupt it.
    pub(crate) marks: Marks,
}

impl Grant {
    #[inline]
    pub(crate) fn encode(self) -> NonZeroU64 {
        let v = MARK
            | if self.dropped { DROPPED } else { 0 }
            | if self.marks.copies > 1 { GRANT_COPY } else { 0 }
            | if self.marks.corrupt { GRANT_CORRUPT } else { 0 }
            | u64::from(self.desc);
        NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
    }

    #[inline]
    pub(crate) fn decode(v: NonZeroU64) -> Self {
        let v = v.get();
        Grant {
            desc: v as u32,
            dropped: v & DROPPED != 0,
            marks: Marks {
                copies: 1 + u8::from(v & GRANT_COPY != 0),
                corrupt: v & GRANT_CORRUPT != 0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_slot_round_trips_at_the_field_limits() {
        for (d, f, l) in [
            (0, 0, 1),
            ((1 << 24) - 1, MAX_FLOW_ID - 1, 65_535),
            (5, 7, 60),
        ] {
            let s = ClientSlot {
                desc: d,
                flow: FlowId(f),
                len: l,
            };
            assert_eq!(ClientSlot::decode(s.encode()), s);
        }
    }

    #[test]
    fn tokens_and_tx_slots_round_trip() {
        for (client, desc) in [(0, 0), (1023, 1 << 20), ((1 << 30) - 1, (1 << 24) - 1)] {
            let r = DescRef { client, desc };
            assert_eq!(DescRef::from_token(r.token()), r);
            assert_eq!(r.token() & PIPE_MARKS, 0);
            for marks in all_marks() {
                assert_eq!(DescRef::from_tx_slot(r.tx_slot(marks)), (r, marks));
                assert_ne!(r.tx_slot(marks).get() & MARK, 0);
            }
            // The pipe's marks are read and cleared at release.
            let p = Packet::new(FlowId(3), 60, r.token());
            assert_eq!(DescRef::released(&p), (r, Marks::PLAIN));
            let copy = Marks {
                copies: 2,
                corrupt: false,
            };
            assert_eq!(DescRef::released(&p.with_copy()), (r, copy));
            let both = Marks {
                copies: 2,
                corrupt: true,
            };
            assert_eq!(DescRef::released(&p.with_copy().with_corrupt()), (r, both));
        }
    }

    #[test]
    fn grants_carry_the_descriptor_and_the_drop_flag() {
        for dropped in [false, true] {
            for marks in all_marks() {
                let g = Grant {
                    desc: (1 << 24) - 1,
                    dropped,
                    marks,
                };
                assert_eq!(Grant::decode(g.encode()), g);
            }
        }
    }

    fn all_marks() -> [Marks; 4] {
        [(1, false), (2, false), (1, true), (2, true)]
            .map(|(copies, corrupt)| Marks { copies, corrupt })
    }
}
