//! What a packet weighs on the link: tc-netem's `rate` framing
//! (`PACKETOVERHEAD`, `CELLSIZE`, `CELLOVERHEAD`).
//!
//! A link of `bw` spends `wire_len·8/bw` on a packet, where
//! `wire_len` is its length plus a per-packet overhead (may be negative,
//! floored at 0), then, with cells, rounded up to whole cells each carrying
//! its own overhead: `ceil(l / cell_size) · (cell_size + cell_overhead)`.
//! So Ethernet's preamble, inter-frame gap and FCS (24 bytes) are
//! `packet_overhead 24`; ATM (AAL5 over 48-byte cells with 5-byte headers)
//! is `cell_size 48, cell_overhead 5`, with the encapsulation's bytes in
//! `packet_overhead`. Only the link's time changes: counters, queue limits
//! and RED count the packet's own bytes.
//!
//! # Ranges
//! `packet_overhead` in −1024..=1024, `cell_size` 0 (no cells) or
//! 1..=65535, `cell_overhead` 0..=1024 and only with cells: the wire length
//! of a packet of at most 65 535 bytes then fits 32 bits.
//!
//! # Complexity
//! O(1): one addition without cells; a division with them.
//!
//! # Source
//! tc-netem(8), `rate RATE [PACKETOVERHEAD [CELLSIZE [CELLOVERHEAD]]]`, and
//! Linux `sch_netem.c` (`packet_time_ns`), whose rounding this follows.

use crate::ConfigError;

/// Largest per-packet or per-cell overhead, in bytes (either sign for the
/// packet's).
pub const MAX_OVERHEAD: u32 = 1024;

/// A link's framing (module docs).
///
/// # Examples
/// ```
/// use pspat_sched::pipe::Framing;
/// let atm = Framing { packet_overhead: 8, cell_size: 48, cell_overhead: 5 };
/// assert!(atm.validate().is_ok());
/// // 100 + 8 = 108 bytes: 3 cells of 53 bytes.
/// assert_eq!(atm.wire_len(100), 159);
/// assert_eq!(Framing::NONE.wire_len(100), 100);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Framing {
    /// Bytes added to every packet (negative: removed, down to 0).
    pub packet_overhead: i32,
    /// Cell payload in bytes; 0: no cells.
    pub cell_size: u32,
    /// Bytes added to every cell.
    pub cell_overhead: u32,
}

impl Framing {
    /// A packet weighs its own length.
    pub const NONE: Framing = Framing {
        packet_overhead: 0,
        cell_size: 0,
        cell_overhead: 0,
    };

    /// Checks every range (module docs).
    ///
    /// # Errors
    /// [`ConfigError`] naming the first bad parameter.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let max = MAX_OVERHEAD as i32;
        ConfigError::check_range("packetoverhead", self.packet_overhead, -max..=max)?;
        ConfigError::check_range("cellsize", self.cell_size, 0..=65_535)?;
        ConfigError::check_range("celloverhead", self.cell_overhead, 0..=MAX_OVERHEAD)?;
        if self.cell_size == 0 && self.cell_overhead != 0 {
            return Err(ConfigError::invalid(
                "celloverhead",
                "needs a cellsize (the overhead of each cell)",
            ));
        }
        Ok(())
    }

    /// Whether a packet weighs its own length.
    #[inline]
    pub fn is_none(&self) -> bool {
        *self == Framing::NONE
    }

    /// The bytes a packet of `len` bytes occupies on the link. Saturates
    /// (never reached within the ranges [`Framing::validate`] checks).
    #[inline]
    pub fn wire_len(&self, len: u32) -> u32 {
        let l = (i64::from(len) + i64::from(self.packet_overhead)).max(0) as u64;
        let wire = if self.cell_size == 0 {
            l
        } else {
            let size = u64::from(self.cell_size);
            l.div_ceil(size) * (size + u64::from(self.cell_overhead))
        };
        u32::try_from(wire).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_adds_and_floors_at_zero() {
        let f = |o| Framing {
            packet_overhead: o,
            ..Framing::NONE
        };
        assert_eq!(f(24).wire_len(60), 84);
        assert_eq!(f(-14).wire_len(60), 46);
        assert_eq!(f(-100).wire_len(60), 0);
        assert_eq!(f(0).wire_len(0), 0);
    }

    #[test]
    fn cells_round_up_and_carry_their_overhead() {
        let atm = Framing {
            packet_overhead: 0,
            cell_size: 48,
            cell_overhead: 5,
        };
        assert_eq!(atm.wire_len(48), 53);
        assert_eq!(atm.wire_len(49), 106);
        assert_eq!(atm.wire_len(1500), 32 * 53);
        assert_eq!(atm.wire_len(0), 0);
    }

    #[test]
    fn the_largest_packet_under_the_worst_framing_fits() {
        let worst = Framing {
            packet_overhead: MAX_OVERHEAD as i32,
            cell_size: 1,
            cell_overhead: MAX_OVERHEAD,
        };
        assert!(worst.validate().is_ok());
        let l = 65_535 + u64::from(MAX_OVERHEAD);
        assert_eq!(
            u64::from(worst.wire_len(65_535)),
            l * (1 + u64::from(MAX_OVERHEAD))
        );
    }

    #[test]
    fn out_of_range_values_are_named() {
        let bad = [
            Framing {
                packet_overhead: 1025,
                ..Framing::NONE
            },
            Framing {
                packet_overhead: -1025,
                ..Framing::NONE
            },
            Framing {
                cell_size: 65_536,
                ..Framing::NONE
            },
            Framing {
                cell_size: 48,
                cell_overhead: 1025,
                ..Framing::NONE
            },
            Framing {
                cell_overhead: 5,
                ..Framing::NONE
            },
        ];
        let names = [
            "packetoverhead",
            "packetoverhead",
            "cellsize",
            "celloverhead",
            "celloverhead",
        ];
        for (f, name) in bad.iter().zip(names) {
            let e = f.validate().unwrap_err().to_string();
            assert!(e.contains(name), "{f:?}: {e}");
        }
    }
}
