//! Parsing of the units users type, one convention for every command:
//!
//! * **durations**: a number with a unit, `ns`, `us` (or `µs`), `ms` or `s`
//!   (`10s`, `20ms`, `500us`, `1.5ms`); a bare number is seconds (`0.5`).
//! * **rates**: bit/s, a number with an optional K/M/G/T suffix (powers of
//!   1000) and an optional `bit`, `bps`, `bit/s` or `b/s` (`1M`, `1Mbit/s`,
//!   `10G`, `2.5Gbit`); a bare number is bit/s.
//! * **weight lists**: comma separated whole numbers, each 1..=65536.
//! * **mode lists** (`bench --mode`): comma separated `pspat`, `lock`, `none`.
//!
//! Every error is one line that quotes at most [`QUOTE_MAX`] characters of
//! the text given ([`quote`]), so a 50 MB argument never becomes a 50 MB
//! message. Each parser has a printer (`format_*`) whose output it reads
//! back to the same value: the fuzz targets check that round trip.

use std::ops::RangeInclusive;
use std::time::Duration;

/// Longest prefix of a user's text an error message quotes.
pub const QUOTE_MAX: usize = 40;

/// `text` as a quoted string for an error message, cut after
/// [`QUOTE_MAX`] characters with `…`.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
    }
}

/// Longest message [`elide_long_words`] lets through, in characters.
pub const MESSAGE_MAX: usize = 400;

/// Shortens every run of more than [`QUOTE_MAX`] non-blank characters in
/// a message to its first [`QUOTE_MAX`] characters and `…`, and the whole
/// message to [`MESSAGE_MAX`] characters and `…`, and escapes control
/// characters (`\n`): the last guard before a message reaches the terminal
/// (clap and serde quote values whole), so it stays one short line.
pub fn elide_long_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4096));
    // Characters written so far, and the length of the current word.
    let mut written = 0usize;
    let mut run = 0usize;
    // Control characters (a newline inside a JSON key the user wrote) are
    // written escaped, so the message stays on one line.
    let chars = message.chars().flat_map(|c| {
        let escape = c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
        let (plain, escaped) = if escape {
            (None, Some(c.escape_default()))
        } else {
            (Some(c), None)
        };
        plain.into_iter().chain(escaped.into_iter().flatten())
    });
    for c in chars {
        run = if c.is_whitespace() { 0 } else { run + 1 };
        if run > QUOTE_MAX + 1 {
            continue;
        }
        if written == MESSAGE_MAX {
            if !out.ends_with('…') {
                out.push('…');
            }
            break;
        }
        out.push(if run == QUOTE_MAX + 1 { '…' } else { c });
        written += 1;
    }
    out
}

/// Parses a duration: `10s`, `20ms`, `500us`, `1.5ms`, `100ns`; a bare
/// number is seconds. Nanosecond resolution (rounded).
///
/// # Errors
/// Not a non-negative number with a known unit, or beyond 2^64 ns.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, ns_per_unit) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        (t, 1e9)
    };
    let bad = || {
        format!(
            "{} is not a duration (a number with ns, us, ms or s, e.g. 10s, 20ms, 500us; a bare number is seconds)",
            quote(text)
        )
    };
    let num = num.trim();
    // Digits, one dot, an exponent: no sign, no "inf"/"nan".
    if num.is_empty() || !num.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let v: f64 = num.parse().map_err(|_| bad())?;
    let ns = (v * ns_per_unit).round();
    if !ns.is_finite() || ns < 0.0 || ns >= u64::MAX as f64 {
        return Err(format!("{} is out of range (at most 2^64 ns)", quote(text)));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// Prints a duration as [`parse_duration`] reads it back exactly, in the
/// largest of `s`, `ms`, `us` and `ns` that divides it (`10us`, `1500ms`,
/// `7ns`; zero is `0s`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    let (scale, unit) = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")]
        .into_iter()
        .find(|&(scale, _)| ns.is_multiple_of(scale))
        .unwrap_or((1, "ns"));
    format!("{}{unit}", ns / scale)
}

/// `--duration` of the commands that measure and report (`bench`, `demo`):
/// up to an hour.
pub const MEASURED_RUN: RangeInclusive<Duration> =
    RangeInclusive::new(Duration::from_nanos(1), Duration::from_secs(3600));

/// `--duration` of the commands that forward until stopped (`run`,
/// `shape`): up to a million seconds.
pub const FORWARDING_RUN: RangeInclusive<Duration> =
    RangeInclusive::new(Duration::from_nanos(1), Duration::from_secs(1_000_000));

/// Checks a duration flag's value against `range`; the error names the
/// flag and the range as they are typed (`--duration must be above 0 and
/// at most 3600s, got 0s`; a lower end of zero or one nanosecond reads
/// "above 0").
///
/// # Errors
/// The message above, for the caller's usage error.
pub fn check_duration(
    flag: &str,
    d: Duration,
    range: RangeInclusive<Duration>,
) -> Result<(), String> {
    if range.contains(&d) {
        return Ok(());
    }
    let (min, max) = range.into_inner();
    let low = if min <= Duration::from_nanos(1) {
        "above 0".to_string()
    } else {
        format!("at least {}", format_duration(min))
    };
    Err(format!(
        "{flag} must be {low} and at most {}, got {}",
        format_duration(max),
        format_duration(d)
    ))
}

/// `clap` value parser for duration flags: [`parse_duration`].
///
/// # Errors
/// As [`parse_duration`]; clap prefixes the flag.
pub fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text)
}

/// `clap` value parser for rate flags: [`parse_rate`].
///
/// # Errors
/// As [`parse_rate`]; clap prefixes the flag.
pub fn rate_arg(text: &str) -> Result<u64, String> {
    parse_rate(text)
}

/// `bps` if a rate flag accepts it (the core's range,
/// [`pspat_sched::rate::MIN_RATE_BPS`]..=[`pspat_sched::rate::MAX_RATE_BPS`]),
/// else why not, without the flag's name: one phrasing for every command.
///
/// # Errors
/// A rate outside the range.
pub fn rate_in_range(bps: u64) -> Result<u64, String> {
    let (lo, hi) = (
        pspat_sched::rate::MIN_RATE_BPS,
        pspat_sched::rate::MAX_RATE_BPS,
    );
    if (lo..=hi).contains(&bps) {
        Ok(bps)
    } else {
        Err(format!(
            "must be in {lo}..={hi} bit/s (e.g. 100M), got {bps}"
        ))
    }
}

/// [`rate_in_range`] with the flag's name in front of the reason.
///
/// # Errors
/// A rate outside the range.
pub fn check_rate(flag: &str, bps: u64) -> Result<u64, String> {
    rate_in_range(bps).map_err(|e| format!("{flag} {e}"))
}

/// Prints a rate as [`parse_rate`] reads it back exactly (bit/s).
pub fn format_rate(bps: u64) -> String {
    bps.to_string()
}

/// Prints a weight list as [`parse_weights`] reads it back.
pub fn format_weights(weights: &[u32]) -> String {
    weights
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses `bench --mode`: a comma list of `pspat`, `lock`, `none`, each
/// at most once, in the order given.
///
/// # Errors
/// An unknown or repeated mode, or an empty list.
pub fn parse_modes(text: &str) -> Result<Vec<pspat_bench::Mode>, String> {
    let mut modes = Vec::new();
    for item in text.split(',') {
        let m: pspat_bench::Mode = item.parse().map_err(|_| {
            format!(
                "--mode: unknown mode {} (allowed: pspat, lock, none, or a comma list)",
                quote(item.trim())
            )
        })?;
        if modes.contains(&m) {
            return Err(format!("--mode: {m} is listed twice"));
        }
        modes.push(m);
    }
    Ok(modes)
}

/// Prints a mode list as [`parse_modes`] reads it back.
pub fn format_modes(modes: &[pspat_bench::Mode]) -> String {
    modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(",")
}

/// Parses a rate in bit/s: a plain number or one with a K/M/G/T suffix
/// (powers of 1000), optionally followed by `bit`, `bps` or `bit/s`.
///
/// # Errors
/// Not a non-negative number with a known suffix, or 2^64 bit/s or more.
///
/// ```text
/// 10G, 10Gbit, 10gbps, 2.5G, 1000000, 40Gbit/s
/// ```
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim().to_ascii_lowercase();
    let t = t
        .trim_end_matches("bit/s")
        .trim_end_matches("bps")
        .trim_end_matches("bit")
        .trim_end_matches("b/s");
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('g') => (&t[..t.len() - 1], 1e9),
        Some('t') => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    let bad = || {
        format!(
            "{} is not a rate (bit/s: a number with K, M, G or T, e.g. 1M, 1Mbit/s, 10G; a bare number is bit/s)",
            quote(text)
        )
    };
    let num = num.trim();
    if num.is_empty() || !num.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let value: f64 = num.parse().map_err(|_| bad())?;
    let bits = (value * mult).round();
    if !bits.is_finite() || bits < 0.0 || bits >= u64::MAX as f64 {
        return Err(format!(
            "{} is out of range (at most 2^64 bit/s)",
            quote(text)
        ));
    }
    Ok(bits as u64)
}

/// Parses a comma-separated list of weights, each in `1..=65536`.
///
/// # Errors
/// One message naming `flag` and the item (by position) at fault.
pub fn parse_weights(flag: &str, text: &str) -> Result<Vec<u32>, String> {
    let max = pspat_sched::MAX_WEIGHT;
    text.split(',')
        .enumerate()
        .map(|(i, item)| {
            let item = item.trim();
            match item.parse::<u32>() {
                Ok(w) if (1..=max).contains(&w) => Ok(w),
                Ok(w) => Err(format!("{flag}: weight #{} = {w} is out of range (allowed: 1..={max})", i + 1)),
                Err(_) => Err(format!(
                    "{flag}: weight #{} = {} is not a whole number (expected a comma list like 1,2,4 with each weight in 1..={max})",
                    i + 1,
                    quote(item)
                )),
            }
        })
        .collect()
}

/// Formats bit/s for people: `9.87 Gbit/s`.
pub fn human_rate(bps: f64) -> String {
    let (v, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else if bps >= 1e3 {
        (bps / 1e3, "kbit/s")
    } else {
        (bps, "bit/s")
    };
    format!("{v:.2} {unit}")
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_rate_flag_takes_the_core_s_range_and_names_itself_outside_it() {
        let (lo, hi) = (
            pspat_sched::rate::MIN_RATE_BPS,
            pspat_sched::rate::MAX_RATE_BPS,
        );
        assert_eq!(check_rate("--rate", lo), Ok(lo));
        assert_eq!(check_rate("--rate", hi), Ok(hi));
        for bad in [0, lo - 1, hi + 1, u64::MAX] {
            assert_eq!(
                check_rate("--rate", bad),
                Err(format!(
                    "--rate must be in {lo}..={hi} bit/s (e.g. 100M), got {bad}"
                ))
            );
        }
    }

    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10G").unwrap(), 10_000_000_000);
        assert_eq!(parse_rate("2.5Gbit/s").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("500mbit").unwrap(), 500_000_000);
        assert_eq!(parse_rate("1000").unwrap(), 1000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-5G").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("20ms").unwrap(), Duration::from_millis(20));
        assert_eq!(parse_duration("1.5us").unwrap(), Duration::from_nanos(1500));
        assert_eq!(parse_duration("500µs").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("7ns").unwrap(), Duration::from_nanos(7));
        for bad in ["", "s", "-1", "-1s", "10x", "inf", "nan", "1e300s", "+1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        let d = parse_duration("1.25ms").unwrap();
        assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
    }

    #[test]
    fn a_duration_out_of_its_range_names_the_flag_and_the_range() {
        let s = Duration::from_secs;
        assert_eq!(check_duration("--d", s(1), MEASURED_RUN), Ok(()));
        assert_eq!(
            check_duration("--d", Duration::ZERO, MEASURED_RUN),
            Err("--d must be above 0 and at most 3600s, got 0s".to_string())
        );
        assert_eq!(
            check_duration(
                "--e",
                Duration::from_micros(999),
                Duration::from_millis(1)..=s(3600)
            ),
            Err("--e must be at least 1ms and at most 3600s, got 999us".to_string())
        );
        assert_eq!(
            check_duration("--e", s(3601), Duration::from_millis(1)..=s(3600)),
            Err("--e must be at least 1ms and at most 3600s, got 3601s".to_string())
        );
    }

    #[test]
    fn durations_print_in_the_largest_exact_unit() {
        for (ns, text) in [
            (0, "0s"),
            (7, "7ns"),
            (10_000, "10us"),
            (1_250_000, "1250us"),
            (1_500_000_000, "1500ms"),
            (2_000_000_000, "2s"),
            (123_456_789, "123456789ns"),
        ] {
            let d = Duration::from_nanos(ns);
            assert_eq!(format_duration(d), text);
            assert_eq!(
                parse_duration(text).unwrap().as_nanos(),
                d.as_nanos(),
                "{text}"
            );
        }
    }

    #[test]
    fn errors_quote_a_short_prefix() {
        let huge = "9".repeat(1_000_000) + "x";
        for e in [
            parse_duration(&huge).unwrap_err(),
            parse_rate(&huge).unwrap_err(),
            parse_weights("--weights", &huge).unwrap_err(),
            parse_modes(&huge).unwrap_err(),
        ] {
            assert!(e.len() < 300 && e.contains('…'), "{} chars", e.len());
        }
        assert_eq!(quote("abc"), "\"abc\"");
        assert_eq!(elide_long_words("a\nb\tc d"), "a\\nb\\tc d");
        let long = elide_long_words(&format!("bad value '{huge}' for --x"));
        assert!(long.len() < 100 && long.ends_with("for --x"), "{long}");
    }

    #[test]
    fn modes() {
        use pspat_bench::Mode;
        assert_eq!(
            parse_modes("pspat, lock").unwrap(),
            [Mode::Pspat, Mode::Lock]
        );
        assert!(parse_modes("pspat,pspat").is_err());
        assert!(parse_modes("").is_err());
        assert!(parse_modes("fast").unwrap_err().contains("--mode"));
        assert_eq!(
            format_modes(&parse_modes("none,pspat").unwrap()),
            "none,pspat"
        );
    }

    #[test]
    fn weights() {
        assert_eq!(parse_weights("--weights", "1, 2,4").unwrap(), [1, 2, 4]);
        assert!(parse_weights("--weights", "1,0")
            .unwrap_err()
            .contains("1..=65536"));
        assert!(parse_weights("--weights", "1,x")
            .unwrap_err()
            .contains("#2"));
        assert!(parse_weights("--weights", "").is_err());
    }
}
