//! Addresses and ports as rules write them: IPv4 and IPv6 prefixes, `any`,
//! `me`, `table(N)`, and port lists with ranges (`80,443,1000-2000`), as in
//! `ipfw(8)`'s rule body.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::units::ValueError;

/// An IPv4 or IPv6 prefix, kept as written (`1.2.3.4/24` keeps its host bits;
/// matching masks them).
///
/// # Examples
/// ```
/// use pspat_config::Prefix;
/// let p: Prefix = "10.0.0.0/24".parse().unwrap();
/// assert_eq!(p.len, 24);
/// assert_eq!(p.to_string(), "10.0.0.0/24");
/// assert_eq!("2001:db8::1".parse::<Prefix>().unwrap().len, 128);
/// assert!("10.0.0.0/33".parse::<Prefix>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    /// The address.
    pub addr: IpAddr,
    /// Leading bits that must match: 0..=32 (IPv4) or 0..=128 (IPv6).
    pub len: u8,
}

impl Prefix {
    /// Bits of the address family: 32 or 128.
    pub fn max_len(&self) -> u8 {
        if self.addr.is_ipv4() {
            32
        } else {
            128
        }
    }
}

impl FromStr for Prefix {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        let (addr_text, len_text) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| {
            ValueError::syntax(format!(
                "'{text}' is not an address or prefix (examples: 10.0.0.0/24, 1.2.3.4, 2001:db8::/32)"
            ))
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len_text {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max && l.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => {
                    return Err(ValueError::range(format!(
                        "'{text}': prefix length must be 0..={max}"
                    )))
                }
            },
        };
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.len == self.max_len() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

impl Serialize for Prefix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e: ValueError| serde::de::Error::custom(e.message))
    }
}

/// The source or destination of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddrMatch {
    /// Every address.
    #[default]
    Any,
    /// Any address of this host.
    Me,
    /// Addresses inside a prefix.
    Prefix(Prefix),
    /// Addresses found in lookup table N (`table(N)`); the entry's value is the `tablearg`.
    Table(u32),
    /// `not me`: every address but this host's.
    NotMe,
    /// `not PREFIX`: every address outside the prefix, those of the other
    /// family included (as ipfw, whose address test fails on the other
    /// family before `not` inverts it).
    NotPrefix(Prefix),
    /// `not table(N)`: every address table N has no prefix for (no
    /// `tablearg`).
    NotTable(u32),
}

impl AddrMatch {
    /// Parses `any`, `me`, `table(N)` or a prefix, each but `any` optionally
    /// after `not ` (`not 10.0.0.0/8`).
    ///
    /// # Errors
    /// [`ValueError`] for anything else, and for `not any` (it would match
    /// nothing).
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        if let Some(rest) = text.strip_prefix("not ") {
            return Self::parse(rest.trim_start())?.negated().ok_or_else(|| {
                ValueError::syntax(format!(
                    "'{text}' matches nothing (not may precede me, table(N) or a prefix)"
                ))
            });
        }
        match text {
            "any" => Ok(AddrMatch::Any),
            "me" => Ok(AddrMatch::Me),
            _ => {
                if let Some(inner) = text
                    .strip_prefix("table(")
                    .and_then(|t| t.strip_suffix(')'))
                {
                    return crate::units::parse_u32(inner).map(AddrMatch::Table);
                }
                text.parse()
                    .map(AddrMatch::Prefix)
                    .map_err(|e: ValueError| ValueError {
                        kind: e.kind,
                        message: format!("{} (or any, me, table(N))", e.message),
                    })
            }
        }
    }
}

impl AddrMatch {
    /// The match of every address this one refuses (`not ...`), or the
    /// positive match of a negated one; `None` for `any`, whose negation
    /// would match nothing.
    pub fn negated(self) -> Option<AddrMatch> {
        Some(match self {
            AddrMatch::Any => return None,
            AddrMatch::Me => AddrMatch::NotMe,
            AddrMatch::Prefix(p) => AddrMatch::NotPrefix(p),
            AddrMatch::Table(n) => AddrMatch::NotTable(n),
            AddrMatch::NotMe => AddrMatch::Me,
            AddrMatch::NotPrefix(p) => AddrMatch::Prefix(p),
            AddrMatch::NotTable(n) => AddrMatch::Table(n),
        })
    }

    /// The positive match and whether this one is negated: `not
    /// 10.0.0.0/8` is (`10.0.0.0/8`, true).
    ///
    /// # Examples
    /// ```
    /// use pspat_config::AddrMatch;
    /// let m = AddrMatch::parse("not table(3)").unwrap();
    /// assert_eq!(m.to_string(), "not table(3)");
    /// assert_eq!(m.split(), (AddrMatch::Table(3), true));
    /// assert!(AddrMatch::parse("not any").is_err());
    /// ```
    pub fn split(self) -> (AddrMatch, bool) {
        match self {
            AddrMatch::NotMe | AddrMatch::NotPrefix(_) | AddrMatch::NotTable(_) => {
                (self.negated().unwrap_or(AddrMatch::Any), true)
            }
            positive => (positive, false),
        }
    }

    /// The table this match looks up, negated or not.
    pub fn table(self) -> Option<u32> {
        match self {
            AddrMatch::Table(n) | AddrMatch::NotTable(n) => Some(n),
            _ => None,
        }
    }
}

impl fmt::Display for AddrMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrMatch::Any => f.write_str("any"),
            AddrMatch::Me => f.write_str("me"),
            AddrMatch::Prefix(p) => write!(f, "{p}"),
            AddrMatch::Table(n) => write!(f, "table({n})"),
            AddrMatch::NotMe | AddrMatch::NotPrefix(_) | AddrMatch::NotTable(_) => {
                write!(f, "not {}", self.split().0)
            }
        }
    }
}

/// An inclusive range of ports (`80` is `80-80`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port, `>= lo`.
    pub hi: u16,
}

/// Parses `80,443,1000-2000` into ranges, in the order written.
///
/// # Examples
/// ```
/// use pspat_config::net::{parse_ports, format_ports, PortRange};
/// let p = parse_ports("80,443,1000-2000").unwrap();
/// assert_eq!(p[2], PortRange { lo: 1000, hi: 2000 });
/// assert_eq!(format_ports(&p), "80,443,1000-2000");
/// assert!(parse_ports("2000-1000").is_err());
/// ```
///
/// # Errors
/// [`ValueError`] for an item that is not a port, or a range whose end is below its start.
pub fn parse_ports(text: &str) -> Result<Vec<PortRange>, ValueError> {
    let port = |p: &str| -> Result<u16, ValueError> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValueError::syntax(format!(
                "'{text}' is not a port list (example: 80,443,1000-2000)"
            )));
        }
        p.parse::<u16>()
            .map_err(|_| ValueError::range(format!("port '{p}' in '{text}' exceeds 65535")))
    };
    text.split(',')
        .map(|item| {
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (port(a)?, port(b)?),
                None => {
                    let p = port(item)?;
                    (p, p)
                }
            };
            if hi < lo {
                return Err(ValueError::range(format!(
                    "port range '{item}' ends before it starts"
                )));
            }
            Ok(PortRange { lo, hi })
        })
        .collect()
}

/// Prints port ranges as `80,443,1000-2000`.
pub fn format_ports(ports: &[PortRange]) -> String {
    ports
        .iter()
        .map(|r| {
            if r.lo == r.hi {
                r.lo.to_string()
            } else {
                format!("{}-{}", r.lo, r.hi)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}
