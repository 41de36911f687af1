//! The pipe's link: a serializer at `bw` with dummynet's `burst` credit.
//!
//! The link keeps `busy_until`, the instant it can start the next packet. A
//! packet of `len` bytes started there finishes `wire·8/bw` later (through a
//! [`Pacer`], which carries fractional ns so a long run loses no rate), plus
//! the profile's extra airtime if any, where `wire` is `len` under the
//! link's [`Framing`] (its own length unless overheads or cells are
//! configured). Burst credit is counted in those bytes too.
//!
//! # Burst (dummynet's `burst`, `ip_dn_io.c`)
//! When a packet arrives at `t` on an idle pipe (nothing queued, the link
//! finished at `busy_until < t`), the link gets a credit of
//! `min(burst, bw·(t − busy_until))` bytes: bytes covered by credit take no
//! time (they leave "at line speed", as dummynet lets them out in the same
//! tick). A packet partly covered pays for the rest. As in dummynet, credit
//! is recomputed on each wake-up, not accumulated across idle periods.
//!
//! Bound: over any window `W`, the bytes whose transmission ends in the
//! window are at most `bw·W + burst +` one packet (the credit granted inside
//! a window is at most the link's idle time in it times `bw`, except the
//! first grant, at most `burst`).
//!
//! # Complexity
//! O(1) per packet.

use super::framing::Framing;
use crate::rate::{Pacer, Rate, UNITS_PER_BYTE};
use crate::Instant;

/// A serializer with burst credit.
#[derive(Clone, Debug)]
pub(crate) struct BurstLink {
    rate: Option<Rate>,
    pacer: Pacer,
    burst: u64,
    /// `None` when a packet weighs its own length (one test a packet).
    framing: Option<Framing>,
    /// Bytes that may still leave in no time.
    pub credit: u64,
    /// When the next transmission can start.
    pub busy_until: Instant,
    /// When the last transmission ended.
    pub last_finish: Instant,
}

impl BurstLink {
    pub fn new(rate: Option<Rate>, burst: u64, framing: Framing) -> Self {
        BurstLink {
            rate,
            pacer: rate.map_or(Pacer::UNLIMITED, Pacer::new),
            burst,
            framing: (!framing.is_none()).then_some(framing),
            credit: 0,
            busy_until: Instant::ZERO,
            last_finish: Instant::ZERO,
        }
    }

    /// Bytes the link sends in `ns` at its rate (floor), saturating.
    fn bytes_in(&self, ns: u64) -> u64 {
        match self.rate {
            None => u64::MAX,
            Some(r) => {
                let b = r.service_units(ns) / u128::from(UNITS_PER_BYTE);
                u64::try_from(b).unwrap_or(u64::MAX)
            }
        }
    }

    /// A packet arrives at `now` on a pipe with nothing queued.
    pub fn wake(&mut self, now: Instant) {
        if now > self.busy_until {
            let idle = now.saturating_nanos_since(self.busy_until);
            self.credit = self.burst.min(self.bytes_in(idle));
            self.pacer.reset();
            self.busy_until = now;
        }
    }

    /// Transmits `len` bytes (plus `airtime_ns`) from `busy_until`; returns
    /// when the transmission ends.
    pub fn transmit(&mut self, len: u32, airtime_ns: u64) -> Instant {
        let len = match &self.framing {
            None => len,
            Some(f) => f.wire_len(len),
        };
        // Without credit (no burst, or spent) the whole packet pays.
        let paid = if self.credit == 0 {
            len
        } else {
            let covered = self.credit.min(u64::from(len));
            self.credit -= covered;
            // covered <= len: the difference fits u32.
            len - covered as u32
        };
        let ns = self.pacer.advance(paid).saturating_add(airtime_ns);
        let finish = self.busy_until.saturating_add_nanos(ns);
        self.busy_until = finish;
        self.last_finish = finish;
        finish
    }

    /// Takes over the credit left on the link this one replaces (a link
    /// rebuilt while it runs), capped at this link's burst: bytes the old
    /// link could still send at line speed in its busy period keep that
    /// right. A later wake-up after idle recomputes the credit as usual.
    pub fn carry_credit(&mut self, credit: u64) {
        self.credit = self.credit.max(credit.min(self.burst));
    }

    /// The configured rate, `None` when unlimited.
    pub fn rate(&self) -> Option<Rate> {
        self.rate
    }

    /// A new rate, burst and framing for the packets that start from now
    /// on: the transmission in progress (ending at `busy_until`) keeps its
    /// end, the credit left is capped at the new burst, the fraction
    /// carried is dropped (at most 1 ns).
    pub fn set_rate(&mut self, rate: Option<Rate>, burst: u64, framing: Framing) {
        self.rate = rate;
        self.pacer = rate.map_or(Pacer::UNLIMITED, Pacer::new);
        self.burst = burst;
        self.framing = (!framing.is_none()).then_some(framing);
        self.credit = self.credit.min(burst);
    }
}
