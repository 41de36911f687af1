//! Rule options on IP and TCP header fields: ipfw's `iplen`, `tcpflags`,
//! `setup` and `established`.
//!
//! * `iplen LIST`: the packet's IP length (IPv4's total length; IPv6's
//!   payload length plus its 40-byte header), in a list of lengths and
//!   ranges written as ports are (`0-80`, `40,52,1500`).
//! * `tcpflags SPEC`: a TCP packet whose flags named in SPEC are set and
//!   whose flags named with `!` are clear (`syn,!ack`); the names are
//!   ipfw's: `fin`, `syn`, `rst`, `psh`, `ack`, `urg`.
//! * `setup`: ipfw's name for `tcpflags syn,!ack` (a connection's first
//!   segment), printed back as `setup`.
//! * `established`: a TCP packet with `ack` or `rst` set.
//!
//! A packet of another protocol has no TCP flags: `tcpflags`, `setup` and
//! `established` refuse it, and so `not` before them admits it, as ipfw,
//! whose test fails on it before `not` inverts it.
//!
//! # Complexity
//! A flag spec is at most six names and a length list as long as it is
//! written; parsing and printing are O(their length).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::net::PortRange;
use crate::units::ValueError;

/// TCP's flag bits in the header's 14th byte (RFC 9293 §3.1), in the order
/// ipfw names and prints them.
pub const TCP_FLAG_NAMES: [(&str, u8); 6] = [
    ("syn", 0x02),
    ("fin", 0x01),
    ("ack", 0x10),
    ("psh", 0x08),
    ("rst", 0x04),
    ("urg", 0x20),
];

/// The `syn` bit.
pub const TCP_SYN: u8 = 0x02;
/// The `ack` bit.
pub const TCP_ACK: u8 = 0x10;
/// The `rst` bit.
pub const TCP_RST: u8 = 0x04;

/// A `tcpflags` condition: the flags that must be set and those that must
/// be clear (never both for one flag, never neither for all). Written and
/// serialised as ipfw writes it, `syn,!ack`.
///
/// # Examples
/// ```
/// use pspat_config::header::TcpFlags;
/// let setup: TcpFlags = "syn,!ack".parse().unwrap();
/// assert_eq!(setup, TcpFlags::SETUP);
/// assert!(setup.admits(0x02));
/// assert!(!setup.admits(0x12)); // SYN+ACK
/// assert_eq!(setup.to_string(), "syn,!ack");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TcpFlags {
    /// Flags that must be set.
    pub set: u8,
    /// Flags that must be clear.
    pub clear: u8,
}

impl TcpFlags {
    /// `setup`: `syn` set, `ack` clear.
    pub const SETUP: TcpFlags = TcpFlags {
        set: TCP_SYN,
        clear: TCP_ACK,
    };

    /// Whether a TCP header whose flag byte is `flags` meets the condition.
    pub fn admits(self, flags: u8) -> bool {
        flags & self.set == self.set && flags & self.clear == 0
    }

    /// Checks a condition built in code: no flag both set and clear, at
    /// least one flag named, only the six flags of [`TCP_FLAG_NAMES`].
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn check(self) -> Result<(), ValueError> {
        let known = TCP_FLAG_NAMES.iter().fold(0u8, |m, &(_, b)| m | b);
        if (self.set | self.clear) & !known != 0 {
            return Err(ValueError::range(format!(
                "tcpflags names bits {:#04x} that are none of fin, syn, rst, psh, ack, urg",
                (self.set | self.clear) & !known
            )));
        }
        if self.set & self.clear != 0 {
            let both = TCP_FLAG_NAMES
                .iter()
                .find(|&&(_, b)| self.set & self.clear & b != 0)
                .map_or("a flag", |&(n, _)| n);
            return Err(ValueError::syntax(format!(
                "tcpflags asks '{both}' both set and clear ('{both},!{both}'), which no packet is"
            )));
        }
        if self.set | self.clear == 0 {
            return Err(ValueError::syntax(
                "tcpflags names no flag (example: syn,!ack)",
            ));
        }
        Ok(())
    }
}

impl std::str::FromStr for TcpFlags {
    type Err = ValueError;

    /// `syn,!ack`: flag names separated by commas, each with `!` when it
    /// must be clear.
    fn from_str(text: &str) -> Result<Self, ValueError> {
        let mut flags = TcpFlags { set: 0, clear: 0 };
        for item in text.split(',') {
            let (name, clear) = match item.strip_prefix('!') {
                Some(rest) => (rest, true),
                None => (item, false),
            };
            let Some(&(_, bit)) = TCP_FLAG_NAMES.iter().find(|&&(n, _)| n == name) else {
                return Err(ValueError::syntax(if item.is_empty() {
                    format!("'{text}' has an empty entry (example: syn,!ack)")
                } else {
                    format!(
                        "'{item}' is not a TCP flag (allowed: fin, syn, rst, psh, ack, urg, each with ! when it must be clear)"
                    )
                }));
            };
            if clear {
                flags.clear |= bit;
            } else {
                flags.set |= bit;
            }
        }
        flags.check()?;
        Ok(flags)
    }
}

impl fmt::Display for TcpFlags {
    /// ipfw's order: set or clear, each flag of [`TCP_FLAG_NAMES`] in turn.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for &(name, bit) in &TCP_FLAG_NAMES {
            let bang = if self.clear & bit != 0 {
                "!"
            } else if self.set & bit != 0 {
                ""
            } else {
                continue;
            };
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{bang}{name}")?;
        }
        Ok(())
    }
}

impl TryFrom<String> for TcpFlags {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse().map_err(|e: ValueError| e.message)
    }
}

impl From<TcpFlags> for String {
    fn from(flags: TcpFlags) -> String {
        flags.to_string()
    }
}

/// `0-80`, `40,52,1500`: IP lengths (0..=65535) and inclusive ranges of
/// them, separated by commas, as written (not sorted).
///
/// # Errors
/// An empty entry, a word that is not a number, a number above 65535 or a
/// range whose first length is above its last.
///
/// # Examples
/// ```
/// use pspat_config::header::parse_ip_lengths;
/// let l = parse_ip_lengths("0-80,1500").unwrap();
/// assert_eq!((l[0].lo, l[0].hi, l[1].lo), (0, 80, 1500));
/// assert!(parse_ip_lengths("80-0").is_err());
/// ```
pub fn parse_ip_lengths(text: &str) -> Result<Vec<PortRange>, ValueError> {
    let length = |p: &str| -> Result<u16, ValueError> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValueError::syntax(format!(
                "'{text}' is not a list of IP lengths (example: 0-80 or 40,52,1500)"
            )));
        }
        p.parse::<u16>()
            .map_err(|_| ValueError::range(format!("IP length {p} exceeds 65535")))
    };
    text.split(',')
        .map(|item| {
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (length(a)?, length(b)?),
                None => {
                    let l = length(item)?;
                    (l, l)
                }
            };
            if lo > hi {
                return Err(ValueError::range(format!(
                    "IP length range '{item}' runs backwards (write {hi}-{lo})"
                )));
            }
            Ok(PortRange { lo, hi })
        })
        .collect()
}

/// Whether `ranges` together hold every length 0..=65535: negated, such a
/// list would match no packet (refused where it is read and by validation).
pub fn covers_every_length(ranges: &[PortRange]) -> bool {
    let mut sorted: Vec<PortRange> = ranges.to_vec();
    sorted.sort_unstable_by_key(|r| r.lo);
    // The first length not yet covered, past 65535 once all are.
    let mut next: u32 = 0;
    for r in &sorted {
        if u32::from(r.lo) > next {
            return false;
        }
        next = next.max(u32::from(r.hi) + 1);
    }
    next > u32::from(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_print_and_refuse() {
        let f: TcpFlags = "ack,!syn,fin".parse().unwrap();
        assert_eq!(f.set, 0x11);
        assert_eq!(f.clear, TCP_SYN);
        // ipfw's order: syn, fin, ack, psh, rst, urg.
        assert_eq!(f.to_string(), "!syn,fin,ack");
        assert_eq!(f.to_string().parse::<TcpFlags>().unwrap(), f);
        for bad in ["", "syn,", "push", "syn,!syn", "!", "SYN"] {
            let e = bad.parse::<TcpFlags>().unwrap_err();
            assert!(!e.message.is_empty(), "{bad}");
        }
        assert!("syn,!syn"
            .parse::<TcpFlags>()
            .unwrap_err()
            .message
            .contains("both set and clear"));
        assert!(TcpFlags {
            set: 0x40,
            clear: 0
        }
        .check()
        .is_err());
    }

    #[test]
    fn flags_admit_what_they_name() {
        let est_like: TcpFlags = "ack".parse().unwrap();
        assert!(est_like.admits(0x10) && est_like.admits(0x18) && !est_like.admits(0x02));
        assert!(TcpFlags::SETUP.admits(TCP_SYN | 0x08));
        assert!(!TcpFlags::SETUP.admits(TCP_SYN | TCP_ACK));
    }

    #[test]
    fn lengths_parse_and_refuse() {
        assert_eq!(
            parse_ip_lengths("40").unwrap(),
            vec![PortRange { lo: 40, hi: 40 }]
        );
        for bad in ["", "0-", "-80", "65536", "x", "80-40", "1,,2"] {
            assert!(parse_ip_lengths(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn coverage_of_every_length_is_seen_in_any_order() {
        let l = |t: &str| parse_ip_lengths(t).unwrap();
        assert!(covers_every_length(&l("0-65535")));
        assert!(covers_every_length(&l("40001-65535,0-100,90-40000")));
        assert!(!covers_every_length(&l("0-100,102-65535")));
        assert!(!covers_every_length(&l("1-65535")));
        assert!(!covers_every_length(&l("0-65534")));
        assert!(!covers_every_length(&[]));
    }
}
