//! Parsing of the units users type: rates (`10G`, `500Mbit`), weight lists.

/// Parses a rate in bit/s: a plain number or one with a K/M/G/T suffix
/// (powers of 1000), optionally followed by `bit`, `bps` or `bit/s`.
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
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a rate (examples: 10G, 500Mbit, 1000000)"))?;
    let bits = value * mult;
    if !bits.is_finite() || bits < 0.0 || bits > u64::MAX as f64 {
        return Err(format!("{text:?} is not a rate in 0..=2^64 bit/s"));
    }
    Ok(bits.round() as u64)
}

/// Parses a comma-separated list of weights, each in `1..=65536`.
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
                    "{flag}: weight #{} = {item:?} is not a whole number (expected a comma list like 1,2,4 with each weight in 1..={max})",
                    i + 1
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
