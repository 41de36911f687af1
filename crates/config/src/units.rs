//! Values with units as dummynet's `ipfw(8)` writes them: rates, times,
//! byte sizes and queue limits, parsed exactly (decimal text, integer
//! arithmetic, no rounding) and printed in a normal form that parses back to
//! the same value.
//!
//! * rates: `N[K|M|G|T]{bit/s | Byte/s}` with decimal multiples, as dummynet's
//!   `read_bandwidth()`; a bare number is bit/s; `0` means unlimited;
//! * times: `N{s|ms|us}`, a bare number is milliseconds (dummynet's `delay`);
//!   the resolution is one microsecond;
//! * sizes: `N[K|M|G][B|bytes]` with binary multiples, as dummynet's queue
//!   sizes (`50KBytes` is 51200 bytes);
//! * queue limits: a bare number is slots, a number with a byte unit is bytes.

use serde::{Deserialize, Serialize};

use crate::error::ErrorKind;

/// A value that did not parse: the class and the message (the caller adds the position).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueError {
    /// The class of the error.
    pub kind: ErrorKind,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl ValueError {
    pub(crate) fn syntax(message: impl Into<String>) -> Self {
        ValueError {
            kind: ErrorKind::Syntax,
            message: message.into(),
        }
    }
    pub(crate) fn range(message: impl Into<String>) -> Self {
        ValueError {
            kind: ErrorKind::OutOfRange,
            message: message.into(),
        }
    }
}

/// Splits `10.5Mbit/s` into `("10.5", "Mbit/s")`.
pub(crate) fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// `number × scale` for a decimal `number` (`2.5`), exactly, or `None` when
/// the product is not a whole number, the text is not a decimal or it overflows.
pub(crate) fn scaled_decimal(number: &str, scale: u128) -> Option<u128> {
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || int.len() > 30
        || frac.len() > 30
    {
        return None;
    }
    let int_value: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut value = int_value.checked_mul(scale)?;
    if !frac.is_empty() {
        let frac_value: u128 = frac.parse().ok()?;
        let denominator = 10u128.checked_pow(u32::try_from(frac.len()).ok()?)?;
        let numerator = frac_value.checked_mul(scale)?;
        if numerator % denominator != 0 {
            return None;
        }
        value = value.checked_add(numerator / denominator)?;
    }
    Some(value)
}

/// A link rate in bit/s (`0`: unlimited).
///
/// # Examples
/// ```
/// use pspat_config::units::parse_rate;
/// assert_eq!(parse_rate("10Mbit/s").unwrap(), 10_000_000);
/// assert_eq!(parse_rate("2KByte/s").unwrap(), 16_000);
/// assert_eq!(parse_rate("500Kbit/s").unwrap(), 500_000);
/// assert!(parse_rate("fast").is_err());
/// ```
///
/// # Errors
/// [`ValueError`] for text that is not a rate or is not a whole number of bit/s.
pub fn parse_rate(text: &str) -> Result<u64, ValueError> {
    let bad = || {
        ValueError::syntax(format!(
            "'{text}' is not a rate (examples: 10Mbit/s, 500Kbit/s, 1Gbit/s, 100KByte/s, 0 for unlimited)"
        ))
    };
    let (number, unit) = split_number(text);
    let (multiplier, rest) = match unit.chars().next() {
        Some('K' | 'k') => (1_000u128, &unit[1..]),
        Some('M' | 'm') => (1_000_000, &unit[1..]),
        Some('G' | 'g') => (1_000_000_000, &unit[1..]),
        Some('T' | 't') => (1_000_000_000_000, &unit[1..]),
        _ => (1, unit),
    };
    let bits_per_unit = match rest {
        "" | "bit/s" | "Bit/s" | "bps" | "bit" | "b/s" => 1,
        "Byte/s" | "byte/s" | "Bytes/s" | "bytes/s" | "B/s" | "Bps" => 8,
        _ => return Err(bad()),
    };
    let bits = scaled_decimal(number, multiplier * bits_per_unit).ok_or_else(|| {
        if scaled_decimal(number, 1_000_000_000_000_000).is_some() {
            ValueError::range(format!("'{text}' is not a whole number of bit/s"))
        } else {
            bad()
        }
    })?;
    u64::try_from(bits).map_err(|_| ValueError::range(format!("'{text}' exceeds 2^64 bit/s")))
}

/// Prints a rate with the largest unit that divides it: `4Mbit/s`,
/// `1500Kbit/s`; 0 (dummynet's unlimited) as `0`.
pub fn format_rate(bps: u64) -> String {
    if bps == 0 {
        return "0".into();
    }
    for (unit, div) in [
        ("Tbit/s", 1_000_000_000_000u64),
        ("Gbit/s", 1_000_000_000),
        ("Mbit/s", 1_000_000),
        ("Kbit/s", 1_000),
    ] {
        if bps != 0 && bps.is_multiple_of(div) {
            return format!("{}{unit}", bps / div);
        }
    }
    format!("{bps}bit/s")
}

/// A time in microseconds; a bare number is milliseconds (dummynet's `delay 20`).
///
/// # Examples
/// ```
/// use pspat_config::units::parse_time_us;
/// assert_eq!(parse_time_us("20ms").unwrap(), 20_000);
/// assert_eq!(parse_time_us("500us").unwrap(), 500);
/// assert_eq!(parse_time_us("1.5").unwrap(), 1_500);
/// assert!(parse_time_us("0.5us").is_err());
/// ```
///
/// # Errors
/// [`ValueError`] for text that is not a time or is finer than a microsecond.
pub fn parse_time_us(text: &str) -> Result<u64, ValueError> {
    let (number, unit) = split_number(text);
    let scale: u128 = match unit {
        "" | "ms" => 1_000,
        "us" | "µs" => 1,
        "s" | "sec" => 1_000_000,
        _ => {
            return Err(ValueError::syntax(format!(
                "'{text}' is not a time (examples: 20ms, 500us, 1s; a bare number is ms)"
            )))
        }
    };
    let us = scaled_decimal(number, scale).ok_or_else(|| {
        if scaled_decimal(number, 1_000_000_000_000).is_some() {
            ValueError::range(format!("'{text}' is finer than the 1 us resolution"))
        } else {
            ValueError::syntax(format!(
                "'{text}' is not a time (examples: 20ms, 500us, 1s; a bare number is ms)"
            ))
        }
    })?;
    u64::try_from(us).map_err(|_| ValueError::range(format!("'{text}' is too long a time")))
}

/// Prints microseconds as `Ns` when whole seconds (but 0), `Nms` when whole
/// milliseconds, else `Nus`.
pub fn format_time_us(us: u64) -> String {
    if us != 0 && us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us.is_multiple_of(1_000) {
        format!("{}ms", us / 1_000)
    } else {
        format!("{us}us")
    }
}

/// A size in bytes: a bare number is bytes, `K`/`M`/`G` are binary multiples,
/// optionally followed by `B`, `Bytes`, `bytes` (`64KB`, `50KBytes`, `1MB`).
///
/// Returns the bytes and whether a unit was written (queue limits read a bare
/// number as slots).
///
/// # Errors
/// [`ValueError`] for text that is not a size or overflows 64 bits.
pub fn parse_size(text: &str) -> Result<(u64, bool), ValueError> {
    let (number, unit) = split_number(text);
    let (multiplier, rest) = match unit.chars().next() {
        Some('K' | 'k') => (1u128 << 10, &unit[1..]),
        Some('M' | 'm') => (1 << 20, &unit[1..]),
        Some('G' | 'g') => (1 << 30, &unit[1..]),
        _ => (1, unit),
    };
    let has_unit = !unit.is_empty();
    match rest {
        "" | "B" | "b" | "Bytes" | "bytes" | "Byte" | "byte" => {}
        _ => {
            return Err(ValueError::syntax(format!(
                "'{text}' is not a size (examples: 1500, 64KB, 50KBytes, 1MB)"
            )))
        }
    }
    let bytes = scaled_decimal(number, multiplier).ok_or_else(|| {
        ValueError::syntax(format!(
            "'{text}' is not a whole number of bytes (examples: 1500, 64KB, 1MB)"
        ))
    })?;
    let bytes =
        u64::try_from(bytes).map_err(|_| ValueError::range(format!("'{text}' is too large")))?;
    Ok((bytes, has_unit))
}

/// Prints bytes as `NMB`, `NKB` or `NB` (binary multiples, exact).
pub fn format_size(bytes: u64) -> String {
    if bytes != 0 && bytes.is_multiple_of(1 << 20) {
        format!("{}MB", bytes >> 20)
    } else if bytes != 0 && bytes.is_multiple_of(1 << 10) {
        format!("{}KB", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

/// A queue's capacity: packets (slots) or bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueLimit {
    /// At most this many packets (`queue 50`).
    Slots(u32),
    /// At most this many bytes (`queue 64KB`).
    Bytes(u64),
}

impl QueueLimit {
    /// dummynet's default: 50 slots.
    pub const DEFAULT: QueueLimit = QueueLimit::Slots(50);

    /// Parses `50` (slots) or `64KB` (bytes).
    ///
    /// # Errors
    /// [`ValueError`] for text that is neither.
    pub fn parse(text: &str) -> Result<Self, ValueError> {
        let (value, has_unit) = parse_size(text)?;
        if has_unit {
            Ok(QueueLimit::Bytes(value))
        } else {
            u32::try_from(value)
                .map(QueueLimit::Slots)
                .map_err(|_| ValueError::range(format!("'{text}' slots is too many")))
        }
    }
}

impl std::fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueLimit::Slots(n) => write!(f, "{n}"),
            QueueLimit::Bytes(b) => f.write_str(&format_size(*b)),
        }
    }
}

/// A probability or other real number: finite decimal text.
///
/// # Errors
/// [`ValueError`] for text that is not a finite number.
pub fn parse_real(text: &str) -> Result<f64, ValueError> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(ValueError::syntax(format!(
            "'{text}' is not a number (example: 0.01)"
        ))),
    }
}

/// A probability as a fraction (`0.25`) or, as tc-netem writes it, a
/// percentage (`25%`): the fraction. The range (0..=1) is checked by
/// validation, which names the parameter.
///
/// # Errors
/// [`ValueError`] for text that is neither.
///
/// # Examples
/// ```
/// use pspat_config::units::parse_probability;
/// assert_eq!(parse_probability("0.25").unwrap(), 0.25);
/// assert_eq!(parse_probability("25%").unwrap(), 0.25);
/// assert!(parse_probability("%").is_err());
/// ```
pub fn parse_probability(text: &str) -> Result<f64, ValueError> {
    let (number, per) = match text.strip_suffix('%') {
        Some(pct) => (pct, 100.0),
        None => (text, 1.0),
    };
    parse_real(number).map(|v| v / per).map_err(|_| {
        ValueError::syntax(format!(
            "'{text}' is not a probability (example: 0.01 or 1%)"
        ))
    })
}

/// A whole number: decimal, or hexadecimal with `0x`.
///
/// # Errors
/// [`ValueError`] for text that is not a whole number or does not fit 64 bits.
pub fn parse_uint(text: &str) -> Result<u64, ValueError> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text.parse().ok(),
        None => None,
    };
    parsed.ok_or_else(|| {
        if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
            ValueError::range(format!("'{text}' does not fit 64 bits"))
        } else {
            ValueError::syntax(format!("'{text}' is not a whole number"))
        }
    })
}

/// A whole number that fits `u32`.
///
/// # Errors
/// [`ValueError`] for text that is not a whole number or exceeds `u32::MAX`.
pub fn parse_u32(text: &str) -> Result<u32, ValueError> {
    let v = parse_uint(text)?;
    u32::try_from(v).map_err(|_| ValueError::range(format!("'{text}' exceeds {}", u32::MAX)))
}

/// A whole number that fits `i32`, with an optional sign.
///
/// # Errors
/// [`ValueError`] for text that is not a whole number or does not fit `i32`.
pub fn parse_i32(text: &str) -> Result<i32, ValueError> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let v = i64::from(parse_u32(digits)?);
    i32::try_from(if negative { -v } else { v })
        .map_err(|_| ValueError::range(format!("'{text}' does not fit 32 bits")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_numbers_parse_with_either_sign() {
        assert_eq!(parse_i32("-14").unwrap(), -14);
        assert_eq!(parse_i32("+24").unwrap(), 24);
        assert_eq!(parse_i32("0").unwrap(), 0);
        assert!(parse_i32("--1").is_err());
        assert!(parse_i32("3000000000").is_err());
        assert!(parse_i32("").is_err());
    }

    #[test]
    fn rates_parse_exactly_and_print_back() {
        assert_eq!(parse_rate("2.5Mbit/s").unwrap(), 2_500_000);
        assert_eq!(parse_rate("300Kbit/s").unwrap(), 300_000);
        assert_eq!(parse_rate("1MByte/s").unwrap(), 8_000_000);
        assert_eq!(parse_rate("0").unwrap(), 0);
        assert_eq!(parse_rate("1000").unwrap(), 1000);
        assert_eq!(format_rate(2_500_000), "2500Kbit/s");
        assert_eq!(format_rate(0), "0");
        assert_eq!(format_rate(1_001), "1001bit/s");
        assert_eq!(
            parse_rate("0.5bit/s").unwrap_err().kind,
            ErrorKind::OutOfRange
        );
        assert_eq!(parse_rate("10Mbit/h").unwrap_err().kind, ErrorKind::Syntax);
        assert!(parse_rate("").is_err());
        assert!(parse_rate(".").is_err());
        assert!(parse_rate("99999999999999999999999Tbit/s").is_err());
        for bps in [1, 999, 1000, 4_000_000, 40_000_000_000, u64::MAX] {
            assert_eq!(parse_rate(&format_rate(bps)).unwrap(), bps);
        }
    }

    #[test]
    fn times_sizes_and_limits() {
        assert_eq!(parse_time_us("80ms").unwrap(), 80_000);
        assert_eq!(parse_time_us("1s").unwrap(), 1_000_000);
        assert_eq!(parse_time_us("20").unwrap(), 20_000);
        assert_eq!(format_time_us(1_500), "1500us");
        assert_eq!(format_time_us(20_000), "20ms");
        assert_eq!(format_time_us(2_000_000), "2s");
        assert_eq!(format_time_us(2_500_000), "2500ms");
        assert_eq!(format_time_us(0), "0ms");
        assert_eq!(parse_size("50KBytes").unwrap(), (51_200, true));
        assert_eq!(parse_size("1000Kbytes").unwrap(), (1_024_000, true));
        assert_eq!(parse_size("1500").unwrap(), (1_500, false));
        assert_eq!(format_size(65_536), "64KB");
        assert_eq!(format_size(1_500), "1500B");
        assert_eq!(QueueLimit::parse("50").unwrap(), QueueLimit::Slots(50));
        assert_eq!(
            QueueLimit::parse("64KB").unwrap(),
            QueueLimit::Bytes(65_536)
        );
        assert_eq!(
            QueueLimit::parse("1500B").unwrap(),
            QueueLimit::Bytes(1_500)
        );
        assert!(QueueLimit::parse("64Kbit").is_err());
        assert_eq!(parse_uint("0xff").unwrap(), 255);
        assert!(parse_uint("0x").is_err());
        assert!(parse_real("nan").is_err());
        assert!(parse_real("inf").is_err());
        assert_eq!(parse_real("0.01").unwrap(), 0.01);
    }
}
