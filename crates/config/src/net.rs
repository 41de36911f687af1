//! Addresses and ports as rules write them: IPv4 and IPv6 prefixes, address
//! lists (`10.0.0.1,10.0.0.0/24`), `any`, `me`, `table(N)`, and port lists
//! with ranges (`80,443,1000-2000`), as in `ipfw(8)`'s rule body.

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

/// The most entries an address list may have; a longer set of prefixes
/// belongs in a table (`table N add PREFIX`, matched with `table(N)`).
pub const MAX_ADDR_LIST_LEN: usize = 256;

/// Why prefixes do not make an [`AddrList`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrListError {
    /// Fewer than two prefixes: one prefix alone is [`AddrMatch::Prefix`].
    #[error(
        "an address list needs at least 2 entries, not {0} (a single prefix is written alone)"
    )]
    TooShort(usize),
    /// More than [`MAX_ADDR_LIST_LEN`] prefixes.
    #[error(
        "an address list has at most {MAX_ADDR_LIST_LEN} entries, not {0}; put the prefixes in a table"
    )]
    TooLong(usize),
}

/// An address list, ipfw's `addr-list`: 2 to [`MAX_ADDR_LIST_LEN`] prefixes
/// or addresses, of either family, in the order written
/// (`10.0.0.1,10.0.0.0/24,2001:db8::/32`). An address matches when one of
/// them contains it; an entry of the other family never does.
///
/// # Examples
/// ```
/// use pspat_config::{AddrList, AddrMatch};
/// let m = AddrMatch::parse("10.0.0.1,10.0.0.0/24,2001:db8::/32").unwrap();
/// let AddrMatch::List(list) = &m else { panic!("{m:?}") };
/// assert_eq!(list.prefixes().len(), 3);
/// assert_eq!(m.to_string(), "10.0.0.1,10.0.0.0/24,2001:db8::/32");
/// assert!(AddrList::new(vec!["10.0.0.1".parse().unwrap()]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<Prefix>", into = "Vec<Prefix>")]
pub struct AddrList(Box<[Prefix]>);

impl AddrList {
    /// The list of `prefixes`, in order.
    ///
    /// # Errors
    /// [`AddrListError`] for fewer than 2 prefixes or more than
    /// [`MAX_ADDR_LIST_LEN`].
    pub fn new(prefixes: Vec<Prefix>) -> Result<Self, AddrListError> {
        match prefixes.len() {
            n @ 0..=1 => Err(AddrListError::TooShort(n)),
            n if n > MAX_ADDR_LIST_LEN => Err(AddrListError::TooLong(n)),
            _ => Ok(AddrList(prefixes.into_boxed_slice())),
        }
    }

    /// The entries, in the order written.
    pub fn prefixes(&self) -> &[Prefix] {
        &self.0
    }
}

impl TryFrom<Vec<Prefix>> for AddrList {
    type Error = AddrListError;

    fn try_from(prefixes: Vec<Prefix>) -> Result<Self, AddrListError> {
        AddrList::new(prefixes)
    }
}

impl From<AddrList> for Vec<Prefix> {
    fn from(list: AddrList) -> Self {
        list.0.into_vec()
    }
}

impl fmt::Display for AddrList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// The source or destination of a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
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
    /// Addresses inside any prefix of an address list
    /// (`10.0.0.1,10.0.0.0/24`); no `tablearg`.
    List(AddrList),
    /// `not LIST`: every address inside none of the list's prefixes, those
    /// of a family the list does not name included.
    NotList(AddrList),
}

/// A parse error located inside an address's text: the offending part (an
/// entry of a list, or the whole text) and where it starts, in characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocatedError {
    /// Characters of the text before the offending part.
    pub(crate) offset: usize,
    /// The offending part as written.
    pub(crate) token: String,
    /// What is wrong.
    pub(crate) error: ValueError,
}

impl AddrMatch {
    /// Parses `any`, `me`, `table(N)`, a prefix or an address list
    /// (`10.0.0.1,10.0.0.0/24`), each but `any` optionally after `not `
    /// (`not 10.0.0.0/8`, `not 10.0.0.0/8,192.168.0.0/16`). A list of one
    /// entry is that prefix.
    ///
    /// # Errors
    /// [`ValueError`] for anything else, for `not any` (it would match
    /// nothing), and for a list with an empty entry, an entry that is not
    /// a prefix or more than [`MAX_ADDR_LIST_LEN`] entries.
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        if let Some(rest) = text.strip_prefix("not ") {
            return Self::parse_located(rest.trim_start())
                .map_err(|e| e.error)?
                .negated_as_written(text);
        }
        Self::parse_located(text).map_err(|e| e.error)
    }

    /// [`AddrMatch::parse`] without `not`, its error naming the offending
    /// entry of a list and where it starts.
    pub(crate) fn parse_located(text: &str) -> Result<Self, LocatedError> {
        if text.contains(',') {
            return parse_list(text);
        }
        let whole = |error| LocatedError {
            offset: 0,
            token: text.to_string(),
            error,
        };
        match text {
            "any" => Ok(AddrMatch::Any),
            "me" => Ok(AddrMatch::Me),
            _ => {
                if let Some(inner) = text
                    .strip_prefix("table(")
                    .and_then(|t| t.strip_suffix(')'))
                {
                    return crate::units::parse_u32(inner)
                        .map(AddrMatch::Table)
                        .map_err(whole);
                }
                text.parse()
                    .map(AddrMatch::Prefix)
                    .map_err(|e: ValueError| {
                        whole(ValueError {
                            kind: e.kind,
                            message: format!(
                                "{} (or any, me, table(N), or a comma-separated list)",
                                e.message
                            ),
                        })
                    })
            }
        }
    }

    /// The negation of this match as `text` wrote it (`not ...`).
    ///
    /// # Errors
    /// [`ValueError`] for `not any`, which would match nothing.
    pub(crate) fn negated_as_written(self, text: &str) -> Result<Self, ValueError> {
        self.negated().ok_or_else(|| {
            ValueError::syntax(format!(
                "'{text}' matches nothing (not may precede me, table(N), a prefix or an address list)"
            ))
        })
    }
}

/// An address list's entries (`text` holds a comma, so at least two
/// entries, each checked).
fn parse_list(text: &str) -> Result<AddrMatch, LocatedError> {
    let mut prefixes = Vec::new();
    let mut offset = 0;
    for (index, entry) in text.split(',').enumerate() {
        let at = |error| LocatedError {
            offset,
            token: entry.to_string(),
            error,
        };
        if entry.is_empty() {
            return Err(LocatedError {
                offset: 0,
                token: text.to_string(),
                error: ValueError::syntax(format!(
                    "'{text}': entry {} of the address list is empty (one comma between entries, none at either end, no spaces)",
                    index + 1
                )),
            });
        }
        if index == MAX_ADDR_LIST_LEN {
            return Err(at(ValueError::range(format!(
                "an address list has at most {MAX_ADDR_LIST_LEN} entries; put more prefixes in a table (table N add PREFIX, then table(N))"
            ))));
        }
        let not_a_prefix = entry == "any"
            || entry == "me"
            || entry == "not"
            || (entry.starts_with("table(") && entry.ends_with(')'));
        if not_a_prefix {
            return Err(at(ValueError::syntax(format!(
                "'{entry}' cannot be in an address list (entries are addresses or prefixes, e.g. 10.0.0.1,10.0.0.0/24,2001:db8::/32)"
            ))));
        }
        prefixes.push(entry.parse::<Prefix>().map_err(at)?);
        offset += entry.chars().count() + 1;
    }
    AddrMatch::any_of(prefixes).map_err(|e| LocatedError {
        offset: 0,
        token: text.to_string(),
        error: ValueError::syntax(e.to_string()),
    })
}

impl AddrMatch {
    /// The addresses inside any of `prefixes`: the prefix itself for one
    /// (a list of one entry is that prefix), else an [`AddrMatch::List`].
    ///
    /// # Examples
    /// ```
    /// use pspat_config::{AddrMatch, Prefix};
    /// let p: Prefix = "10.0.0.0/8".parse().unwrap();
    /// assert_eq!(AddrMatch::any_of(vec![p]), Ok(AddrMatch::Prefix(p)));
    /// let two = AddrMatch::any_of(vec![p, "2001:db8::/32".parse().unwrap()]).unwrap();
    /// assert_eq!(two.to_string(), "10.0.0.0/8,2001:db8::/32");
    /// assert!(AddrMatch::any_of(Vec::new()).is_err());
    /// ```
    ///
    /// # Errors
    /// [`AddrListError`] for no prefix or more than [`MAX_ADDR_LIST_LEN`].
    pub fn any_of(prefixes: Vec<Prefix>) -> Result<AddrMatch, AddrListError> {
        match prefixes.as_slice() {
            [one] => Ok(AddrMatch::Prefix(*one)),
            _ => AddrList::new(prefixes).map(AddrMatch::List),
        }
    }

    /// The match of every address this one refuses (`not ...`), or the
    /// positive match of a negated one; `None` for `any`, whose negation
    /// would match nothing.
    pub fn negated(self) -> Option<AddrMatch> {
        Some(match self {
            AddrMatch::Any => return None,
            AddrMatch::Me => AddrMatch::NotMe,
            AddrMatch::Prefix(p) => AddrMatch::NotPrefix(p),
            AddrMatch::Table(n) => AddrMatch::NotTable(n),
            AddrMatch::List(l) => AddrMatch::NotList(l),
            AddrMatch::NotMe => AddrMatch::Me,
            AddrMatch::NotPrefix(p) => AddrMatch::Prefix(p),
            AddrMatch::NotTable(n) => AddrMatch::Table(n),
            AddrMatch::NotList(l) => AddrMatch::List(l),
        })
    }

    /// Whether this is a `not ...` match.
    pub fn is_negated(&self) -> bool {
        matches!(
            self,
            AddrMatch::NotMe
                | AddrMatch::NotPrefix(_)
                | AddrMatch::NotTable(_)
                | AddrMatch::NotList(_)
        )
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
    /// let list = AddrMatch::parse("not 10.0.0.0/8,192.168.0.0/16").unwrap();
    /// assert_eq!(list.split().0.to_string(), "10.0.0.0/8,192.168.0.0/16");
    /// ```
    pub fn split(&self) -> (AddrMatch, bool) {
        if self.is_negated() {
            (self.clone().negated().unwrap_or(AddrMatch::Any), true)
        } else {
            (self.clone(), false)
        }
    }

    /// The table this match looks up, negated or not.
    pub fn table(&self) -> Option<u32> {
        match self {
            AddrMatch::Table(n) | AddrMatch::NotTable(n) => Some(*n),
            _ => None,
        }
    }

    /// The prefixes this match tests, negated or not: the prefix of
    /// `PREFIX`, the entries of a list, none for `any`, `me` and tables.
    pub fn prefixes(&self) -> &[Prefix] {
        match self {
            AddrMatch::Prefix(p) | AddrMatch::NotPrefix(p) => std::slice::from_ref(p),
            AddrMatch::List(l) | AddrMatch::NotList(l) => l.prefixes(),
            _ => &[],
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
            AddrMatch::List(l) => write!(f, "{l}"),
            AddrMatch::NotMe
            | AddrMatch::NotPrefix(_)
            | AddrMatch::NotTable(_)
            | AddrMatch::NotList(_) => {
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

/// Service names a port list accepts in place of a number, as ipfw looks
/// them up in `/etc/services`: the IANA names of common services, without
/// a dash (a dash separates a range). Built in, so a file means the same on
/// every host.
pub const SERVICE_PORTS: &[(&str, u16)] = &[
    ("echo", 7),
    ("discard", 9),
    ("ftp", 21),
    ("ssh", 22),
    ("telnet", 23),
    ("smtp", 25),
    ("domain", 53),
    ("bootps", 67),
    ("bootpc", 68),
    ("tftp", 69),
    ("http", 80),
    ("www", 80),
    ("kerberos", 88),
    ("pop3", 110),
    ("sunrpc", 111),
    ("nntp", 119),
    ("ntp", 123),
    ("imap", 143),
    ("imap2", 143),
    ("snmp", 161),
    ("bgp", 179),
    ("ldap", 389),
    ("https", 443),
    ("syslog", 514),
    ("submission", 587),
    ("ldaps", 636),
    ("rsync", 873),
    ("imaps", 993),
    ("pop3s", 995),
    ("openvpn", 1194),
    ("mysql", 3306),
    ("sip", 5060),
    ("sips", 5061),
    ("postgresql", 5432),
];

/// The port of a service name of [`SERVICE_PORTS`].
///
/// # Examples
/// ```
/// use pspat_config::net::service_port;
/// assert_eq!(service_port("https"), Some(443));
/// assert_eq!(service_port("gopherish"), None);
/// ```
pub fn service_port(name: &str) -> Option<u16> {
    SERVICE_PORTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, p)| p)
}

/// Parses `80,443,1000-2000` into ranges, in the order written; an item or
/// a range end may be a service name of [`SERVICE_PORTS`] (`http,https`,
/// `ssh-1024`), printed back as its number.
///
/// # Examples
/// ```
/// use pspat_config::net::{parse_ports, format_ports, PortRange};
/// let p = parse_ports("80,443,1000-2000").unwrap();
/// assert_eq!(p[2], PortRange { lo: 1000, hi: 2000 });
/// assert_eq!(format_ports(&p), "80,443,1000-2000");
/// assert_eq!(format_ports(&parse_ports("http,domain").unwrap()), "80,53");
/// assert!(parse_ports("2000-1000").is_err());
/// // An error names the list only when it holds more than the bad item.
/// assert!(parse_ports("gopher").unwrap_err().message.starts_with("'gopher' is neither"));
/// assert!(parse_ports("80,gopher").unwrap_err().message.starts_with("'gopher' in '80,gopher'"));
/// assert_eq!(parse_ports("70000").unwrap_err().message, "port '70000' exceeds 65535");
/// ```
///
/// # Errors
/// [`ValueError`] for an item that is neither a port nor a known service
/// name, or a range whose end is below its start.
pub fn parse_ports(text: &str) -> Result<Vec<PortRange>, ValueError> {
    // "'x' in 'y'" names the list only when it is more than the item.
    let within = |p: &str| {
        if p == text {
            format!("'{p}'")
        } else {
            format!("'{p}' in '{text}'")
        }
    };
    let port = |p: &str| -> Result<u16, ValueError> {
        if p.bytes().next().is_some_and(|b| b.is_ascii_alphabetic()) {
            return service_port(p).ok_or_else(|| {
                ValueError::syntax(format!(
                    "{} is neither a port nor a known service name \
                     (example: 80,443,1000-2000 or http,https)",
                    within(p)
                ))
            });
        }
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValueError::syntax(format!(
                "'{text}' is not a port list (example: 80,443,1000-2000)"
            )));
        }
        p.parse::<u16>()
            .map_err(|_| ValueError::range(format!("port {} exceeds 65535", within(p))))
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
