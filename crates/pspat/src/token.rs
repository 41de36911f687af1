//! The one codec for the 64-bit words that name a client's descriptor on its
//! way through the runtime.
//!
//! A packet is named by a [`DescRef`] — the submitting client and the index
//! of its descriptor in that client's pool — from `submit` to recycling. It
//! travels in four words, each encoded and decoded only here:
//!
//! | word | written by | read by | layout |
//! |---|---|---|---|
//! | client slot | client (`submit`) | arbiter (collect) | bit 63 = ECN-capable, `desc << 40 \| flow << 16 \| len` (the client is implied by the mailbox) |
//! | scheduler token | arbiter | arbiter (release) | `client << 32 \| desc` in [`pspat_sched::Packet::token`], bit 60 = ECN-capable ([`pspat_sched::Packet::ECT_BIT`]); bits 63, 62 and 61 are the pipe's copy, corruption and Congestion Experienced marks ([`pspat_sched::Packet::COPY_BIT`], [`pspat_sched::Packet::CORRUPT_BIT`], [`pspat_sched::Packet::CE_BIT`]), set by the scheduler, read and cleared at release |
//! | TX slot | arbiter | dispatcher | the token with bit 63 set (non-zero), bit 31 = send twice, bit 30 = corrupt, bit 29 = mark CE |
//! | grant | arbiter | client (client-transmit mode) | bit 63, bit 62 = dropped, bit 61 = send twice, bit 60 = corrupt, bit 59 = mark CE, `desc` in the low 32 bits |
//!
//! Every mailbox word must be non-zero (zero marks an empty slot): the client
//! slot is, because `len >= 1`; the TX slot and grant carry bit 63.
//!
//! # Ranges
//! `desc < 2^23` (descriptors per client are at most 2^20), `flow < 2^24`
//! ([`MAX_FLOW_ID`]), `1 <= len <= 65535`, `client < 2^28` (clients are at
//! most 2^20), so a token never has the pipe's marks or the ECN-capable bit
//! set but where they are meant.

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
/// In a grant: mark the packet Congestion Experienced before transmitting
/// it.
const GRANT_CE: u64 = 1 << 59;
/// In a TX slot: transmit the descriptor twice (a bit `desc < 2^24` leaves
/// free).
const SLOT_COPY: u64 = 1 << 31;
/// In a TX slot: flip one bit of the packet before transmitting it.
const SLOT_CORRUPT: u64 = 1 << 30;
/// In a TX slot: mark the packet Congestion Experienced before
/// transmitting it.
const SLOT_CE: u64 = 1 << 29;
/// In a client slot: the packet is ECN-capable (a bit `desc < 2^23` leaves
/// free).
const CLIENT_ECT: u64 = 1 << 63;
/// The bits of a scheduler token beyond the descriptor: the pipe's marks
/// and the ECN-capable bit.
const TOKEN_FLAGS: u64 = Packet::FLAG_BITS;

/// What a pipe decided about a released packet beyond its release: how
/// many times to send it, whether to corrupt it and whether to mark it
/// Congestion Experienced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marks {
    /// 1, or 2 for a pipe's duplicate.
    pub(crate) copies: u8,
    /// One bit of it is to be flipped (a pipe's `corrupt`).
    pub(crate) corrupt: bool,
    /// Its ECN field is to be set to Congestion Experienced (a pipe's RED
    /// with `ecn`).
    pub(crate) ce: bool,
}

impl Marks {
    /// Sent once, unchanged.
    pub(crate) const PLAIN: Marks = Marks {
        copies: 1,
        corrupt: false,
        ce: false,
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
    /// [`pspat_sched::Packet::CORRUPT_BIT`], [`pspat_sched::Packet::CE_BIT`])
    /// and the ECN-capable bit ([`pspat_sched::Packet::ECT_BIT`]).
    #[inline]
    pub(crate) fn from_token(token: u64) -> Self {
        let token = token & !TOKEN_FLAGS;
        DescRef {
            client: (token >> 32) as u32,
            desc: token as u32,
        }
    }

    /// The descriptor of a released packet and the pipe's marks on it
    /// ([`pspat_sched::Packet::copies`]: 1, or 2 for a pipe's duplicate;
    /// [`pspat_sched::Packet::is_corrupt`]; [`pspat_sched::Packet::is_ce`]).
    #[inline]
    pub(crate) fn released(p: &Packet) -> (Self, Marks) {
        (
            Self::from_token(p.token),
            Marks {
                copies: p.copies(),
                corrupt: p.is_corrupt(),
                ce: p.is_ce(),
            },
        )
    }

    /// The word a dispatcher's TX mailbox carries, for a packet with
    /// `marks`.
    #[inline]
    pub(crate) fn tx_slot(self, marks: Marks) -> NonZeroU64 {
        let copy = if marks.copies > 1 { SLOT_COPY } else { 0 };
        let corrupt = if marks.corrupt { SLOT_CORRUPT } else { 0 };
        let ce = if marks.ce { SLOT_CE } else { 0 };
        NonZeroU64::new(self.token() | MARK | copy | corrupt | ce).unwrap_or(NonZeroU64::MIN)
    }

    /// Inverse of [`DescRef::tx_slot`].
    #[inline]
    pub(crate) fn from_tx_slot(v: NonZeroU64) -> (Self, Marks) {
        let v = v.get();
        (
            Self::from_token(v & !(MARK | SLOT_COPY | SLOT_CORRUPT | SLOT_CE)),
            Marks {
                copies: 1 + u8::from(v & SLOT_COPY != 0),
                corrupt: v & SLOT_CORRUPT != 0,
                ce: v & SLOT_CE != 0,
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
    /// The packet is ECN-capable ([`crate::Submission::ect`]).
    pub(crate) ect: bool,
}

impl ClientSlot {
    /// The word a client pushes; `len` must be in 1..=65535 and `flow` below
    /// [`MAX_FLOW_ID`] (checked by `submit`).
    #[inline]
    pub(crate) fn encode(self) -> NonZeroU64 {
        let v = (u64::from(self.desc) << 40)
            | (u64::from(self.flow.0) << 16)
            | u64::from(self.len)
            | if self.ect { CLIENT_ECT } else { 0 };
        // len >= 1, so v != 0.
        NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)
    }

    /// Inverse of [`ClientSlot::encode`].
    #[inline]
    pub(crate) fn decode(v: NonZeroU64) -> Self {
        let v = v.get();
        ClientSlot {
            desc: ((v & !CLIENT_ECT) >> 40) as u32,
            flow: FlowId(((v >> 16) & 0xff_ffff) as u32),
            len: (v & 0xffff) as u32,
            ect: v & CLIENT_ECT != 0,
        }
    }

    /// The packet the arbiter enqueues for this slot of `client`: its
    /// descriptor's token, with [`pspat_sched::Packet::ECT_BIT`] when the
    /// client said it is ECN-capable.
    #[inline]
    pub(crate) fn packet(self, client: u32) -> (DescRef, Packet) {
        let r = DescRef {
            client,
            desc: self.desc,
        };
        let ect = if self.ect { Packet::ECT_BIT } else { 0 };
        (r, Packet::new(self.flow, self.len, r.token() | ect))
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
            | if self.marks.ce { GRANT_CE } else { 0 }
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
                ce: v & GRANT_CE != 0,
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
            ((1 << 23) - 1, MAX_FLOW_ID - 1, 65_535),
            (5, 7, 60),
        ] {
            for ect in [false, true] {
                let s = ClientSlot {
                    desc: d,
                    flow: FlowId(f),
                    len: l,
                    ect,
                };
                assert_eq!(ClientSlot::decode(s.encode()), s);
                let (r, p) = s.packet(9);
                assert_eq!((r.client, r.desc), (9, d));
                assert_eq!((p.flow, p.len, p.is_ect()), (FlowId(f), l, ect));
                assert_eq!(DescRef::from_token(p.token), r);
            }
        }
    }

    #[test]
    fn tokens_and_tx_slots_round_trip() {
        for (client, desc) in [(0, 0), (1023, 1 << 20), ((1 << 28) - 1, (1 << 23) - 1)] {
            let r = DescRef { client, desc };
            assert_eq!(DescRef::from_token(r.token()), r);
            assert_eq!(r.token() & TOKEN_FLAGS, 0);
            for marks in all_marks() {
                assert_eq!(DescRef::from_tx_slot(r.tx_slot(marks)), (r, marks));
                assert_ne!(r.tx_slot(marks).get() & MARK, 0);
            }
            // The pipe's marks are read and cleared at release.
            let p = Packet::new(FlowId(3), 60, r.token());
            assert_eq!(DescRef::released(&p), (r, Marks::PLAIN));
            let copy = Marks {
                copies: 2,
                ..Marks::PLAIN
            };
            assert_eq!(DescRef::released(&p.with_copy()), (r, copy));
            let both = Marks {
                copies: 2,
                corrupt: true,
                ce: false,
            };
            assert_eq!(DescRef::released(&p.with_copy().with_corrupt()), (r, both));
            let ce = Marks {
                ce: true,
                ..Marks::PLAIN
            };
            assert_eq!(DescRef::released(&p.with_ect().with_ce()), (r, ce));
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

    /// Every combination of the three marks.
    fn all_marks() -> impl Iterator<Item = Marks> {
        (0..8u8).map(|b| Marks {
            copies: 1 + (b & 1),
            corrupt: b & 2 != 0,
            ce: b & 4 != 0,
        })
    }
}
