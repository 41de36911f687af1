//! DiffServ code points for ipfw's `dscp` rule option: the names ipfw
//! accepts, lists of them, and their normal form.
//!
//! A code point is the six high bits of the IPv4 TOS byte or of the IPv6
//! traffic class (RFC 2474), 0..=63. The names: `be` (0, default
//! forwarding), `cs0`..`cs7` (class selectors, 8 × n, RFC 2474), `af11`..
//! `af43` (assured forwarding, 8 × class + 2 × drop precedence, RFC 2597),
//! `va` (44, voice admit, RFC 5865) and `ef` (46, expedited forwarding,
//! RFC 3246).
//!
//! # Complexity
//! A list is at most 64 code points; parsing and printing are O(its length).

use crate::units::ValueError;

/// How many code points there are (0..=63): a list of them all cannot be
/// negated (`not dscp` of it would match no packet).
pub const CODE_POINTS: usize = 64;

/// Every name and its code point, in code order (`be` before `cs0` for 0,
/// which prints as `be`).
pub const NAMES: [(&str, u8); 23] = [
    ("be", 0),
    ("cs0", 0),
    ("cs1", 8),
    ("af11", 10),
    ("af12", 12),
    ("af13", 14),
    ("cs2", 16),
    ("af21", 18),
    ("af22", 20),
    ("af23", 22),
    ("cs3", 24),
    ("af31", 26),
    ("af32", 28),
    ("af33", 30),
    ("cs4", 32),
    ("af41", 34),
    ("af42", 36),
    ("af43", 38),
    ("cs5", 40),
    ("va", 44),
    ("ef", 46),
    ("cs6", 48),
    ("cs7", 56),
];

/// `ef,af41,10`: names or numbers 0..=63 separated by commas, as a sorted
/// set of code points.
///
/// # Errors
/// An empty entry, a name ipfw does not know, or a number above 63.
///
/// # Examples
/// ```
/// use pspat_config::dscp::parse_dscp_list;
/// assert_eq!(parse_dscp_list("ef,af41,10,ef").unwrap(), vec![10, 34, 46]);
/// assert!(parse_dscp_list("64").is_err());
/// ```
pub fn parse_dscp_list(text: &str) -> Result<Vec<u8>, ValueError> {
    let mut codes = Vec::new();
    for entry in text.split(',') {
        let code = match NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(entry)) {
            Some(&(_, c)) => c,
            None if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) => {
                match entry.parse::<u8>() {
                    Ok(c) if c <= 63 => c,
                    _ => {
                        return Err(ValueError::range(format!(
                            "dscp {entry} is out of range (a code point is 0..=63)"
                        )))
                    }
                }
            }
            None => {
                return Err(ValueError::syntax(format!(
                    "'{entry}' is not a DiffServ code point (a number 0..=63 or be, cs0..cs7, af11..af43, va, ef)"
                )))
            }
        };
        codes.push(code);
    }
    codes.sort_unstable();
    codes.dedup();
    Ok(codes)
}

/// A set of code points in its normal form: ascending, each by its name
/// when it has one (`10,ef` → `af11,ef`).
///
/// # Examples
/// ```
/// use pspat_config::dscp::format_dscp_list;
/// assert_eq!(format_dscp_list(&[0, 10, 46, 63]), "be,af11,ef,63");
/// ```
pub fn format_dscp_list(codes: &[u8]) -> String {
    let words: Vec<String> = codes
        .iter()
        .map(|&c| match NAMES.iter().find(|&&(_, v)| v == c) {
            Some((name, _)) => (*name).to_string(),
            None => c.to_string(),
        })
        .collect();
    words.join(",")
}
