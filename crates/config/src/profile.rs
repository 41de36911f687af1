//! dummynet's empirical delay/loss profiles (`ipfw pipe N config profile FILE`).
//!
//! The file format is that of `ipfw(8)`: whitespace-separated words, `#`
//! comments, one setting per line — `name ID`, `bw RATE` (optional),
//! `loss-level L` (probability above which packets are lost, default 1),
//! `samples N` (2..=1024, default 100) — then a column header `prob delay` or
//! `delay prob` and at least two data lines, unsorted, delays in
//! milliseconds (0..=60 000, the cap of a pipe's own `delay`). The points
//! are the inverse of the extra delay's cumulative distribution;
//! [`Profile::delay_table_us`] samples it by linear interpolation, as ipfw
//! builds the table it hands to the kernel.
//!
//! Example (from the man page):
//! ```text
//! samples 100
//! loss-level 0.86
//! prob delay
//! 0 200
//! 0.5 200
//! 0.5 300
//! 0.8 1000
//! 0.9 1300
//! 1 1300
//! ```

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Pos};
use crate::ipfw::tokenize;
use crate::plan::MAX_DELAY_US;
use crate::units::{parse_rate, parse_real, parse_u32};

/// One point of a profile: with probability `prob`, the extra delay is at most `delay_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfilePoint {
    /// Cumulative probability, 0..=1.
    pub prob: f64,
    /// Extra delay in milliseconds, >= 0.
    pub delay_ms: f64,
}

/// A parsed profile file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// `name`: the profile's name, if given.
    pub name: Option<String>,
    /// `bw`: the link rate the profile was measured at, bit/s.
    pub bw: Option<u64>,
    /// `loss-level`: packets drawing a probability above it are lost (default 1: none).
    pub loss_level: f64,
    /// `samples`: entries of the delay table (default 100).
    pub samples: u32,
    /// The data points, in file order.
    pub points: Vec<ProfilePoint>,
}

/// Smallest and largest `samples`.
pub const SAMPLES_RANGE: std::ops::RangeInclusive<u32> = 2..=1024;

impl Profile {
    /// The extra delay, in microseconds, at `samples` evenly spaced
    /// probabilities from 0 to 1, interpolated linearly between the points
    /// sorted by probability (flat before the first and after the last).
    ///
    /// # Examples
    /// ```
    /// let p = pspat_config::parse_profile("samples 3\nprob delay\n0 0\n1 10\n", "p").unwrap();
    /// assert_eq!(p.delay_table_us(), vec![0, 5_000, 10_000]);
    /// ```
    pub fn delay_table_us(&self) -> Vec<u64> {
        let mut points = self.points.clone();
        points.sort_by(|a, b| {
            a.prob
                .total_cmp(&b.prob)
                .then(a.delay_ms.total_cmp(&b.delay_ms))
        });
        let n = self.samples.max(2);
        (0..n)
            .map(|i| {
                let q = f64::from(i) / f64::from(n - 1);
                let delay_ms = match points.iter().position(|p| p.prob >= q) {
                    None => points.last().map_or(0.0, |p| p.delay_ms),
                    Some(0) => points[0].delay_ms,
                    Some(k) => {
                        let (a, b) = (points[k - 1], points[k]);
                        if b.prob > a.prob {
                            a.delay_ms
                                + (b.delay_ms - a.delay_ms) * (q - a.prob) / (b.prob - a.prob)
                        } else {
                            b.delay_ms
                        }
                    }
                };
                (delay_ms * 1_000.0).round() as u64
            })
            .collect()
    }
}

/// Parses a profile file's text.
///
/// # Examples
/// ```
/// let p = pspat_config::parse_profile("name wifi\nloss-level 0.9\ndelay prob\n10 0\n30 1\n", "wifi.prof").unwrap();
/// assert_eq!(p.name.as_deref(), Some("wifi"));
/// assert_eq!(p.points[1].delay_ms, 30.0);
/// assert!(pspat_config::parse_profile("prob delay\n0 1\n", "short").is_err());
/// ```
///
/// # Errors
/// [`Error`] (kind [`ErrorKind::ProfileMalformed`]) at the offending word: an
/// unknown setting, a value out of range (a delay above a pipe's 60 s cap
/// included), a data line before the header or with other than two numbers,
/// fewer than two data lines.
pub fn parse_profile(text: &str, file: &str) -> Result<Profile, Error> {
    let malformed = |pos: Pos, msg: String| pos.error(file, ErrorKind::ProfileMalformed, msg);
    let mut profile = Profile {
        name: None,
        bw: None,
        loss_level: 1.0,
        samples: 100,
        points: Vec::new(),
    };
    let mut prob_first: Option<bool> = None;
    let mut last = Pos::new(1, 1, "");
    let mut seen: Vec<String> = Vec::new();
    for line in tokenize(text) {
        let head = &line[0];
        last = head.pos();
        let word = head.text.as_str();
        if let Some(prob_first) = prob_first {
            if line.len() != 2 {
                return Err(malformed(
                    head.pos(),
                    format!(
                        "a data line has two numbers ({}), found {} words",
                        if prob_first {
                            "prob delay"
                        } else {
                            "delay prob"
                        },
                        line.len()
                    ),
                ));
            }
            let a = parse_real(&line[0].text).map_err(|e| malformed(line[0].pos(), e.message))?;
            let b = parse_real(&line[1].text).map_err(|e| malformed(line[1].pos(), e.message))?;
            let (prob, delay_ms, prob_tok, delay_tok) = if prob_first {
                (a, b, &line[0], &line[1])
            } else {
                (b, a, &line[1], &line[0])
            };
            if !(0.0..=1.0).contains(&prob) {
                return Err(malformed(
                    prob_tok.pos(),
                    format!("probability {prob} is out of range (allowed: 0..=1)"),
                ));
            }
            if delay_ms < 0.0 {
                return Err(malformed(
                    delay_tok.pos(),
                    format!("delay {delay_ms} ms is negative"),
                ));
            }
            // A profile delay is an extra delay of the same link, so it gets
            // the cap of a pipe's own `delay`: without one, a typo (or 1e20 ms)
            // would pass here and saturate silently in the delay table.
            // The cap (60 s) is exact in f64, so the comparison is too.
            if delay_ms * 1_000.0 > MAX_DELAY_US as f64 {
                return Err(malformed(
                    delay_tok.pos(),
                    format!(
                        "delay {} ms is out of range (allowed: 0..={} ms, the cap of a pipe's delay)",
                        delay_tok.text,
                        MAX_DELAY_US / 1_000
                    ),
                ));
            }
            profile.points.push(ProfilePoint { prob, delay_ms });
            continue;
        }
        if seen.iter().any(|s| s == word) {
            return Err(malformed(head.pos(), format!("'{word}' is given twice")));
        }
        seen.push(word.to_string());
        let value = || -> Result<&crate::ipfw::Tok, Error> {
            match line.as_slice() {
                [_, v] => Ok(v),
                _ => Err(malformed(
                    head.pos(),
                    format!("'{word}' takes exactly one value"),
                )),
            }
        };
        match word {
            "name" => profile.name = Some(value()?.text.clone()),
            "bw" => {
                let v = value()?;
                profile.bw = Some(parse_rate(&v.text).map_err(|e| malformed(v.pos(), e.message))?);
            }
            "loss-level" => {
                let v = value()?;
                let l = parse_real(&v.text).map_err(|e| malformed(v.pos(), e.message))?;
                if !(0.0..=1.0).contains(&l) {
                    return Err(malformed(
                        v.pos(),
                        format!("loss-level {l} is out of range (allowed: 0..=1)"),
                    ));
                }
                profile.loss_level = l;
            }
            "samples" => {
                let v = value()?;
                let n = parse_u32(&v.text).map_err(|e| malformed(v.pos(), e.message))?;
                if !SAMPLES_RANGE.contains(&n) {
                    return Err(malformed(
                        v.pos(),
                        format!("samples {n} is out of range (allowed: 2..=1024)"),
                    ));
                }
                profile.samples = n;
            }
            "prob" | "delay" => {
                let other = if word == "prob" { "delay" } else { "prob" };
                if line.len() != 2 || line[1].text != other {
                    return Err(malformed(
                        head.pos(),
                        "the column header is 'prob delay' or 'delay prob'".to_string(),
                    ));
                }
                prob_first = Some(word == "prob");
            }
            _ => {
                const ALLOWED: &str = "allowed: name, bw, loss-level, samples, then 'prob delay' \
                                       or 'delay prob' and data lines";
                // A word that could be a misspelt setting is quoted; any
                // other is not: a daemon may be pointed at a file that is
                // no profile, and its content must not reach the answer
                // and the log.
                let plausible = word.len() <= 24
                    && word
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                let message = if plausible {
                    format!("unknown profile setting '{word}' ({ALLOWED})")
                } else {
                    format!("not a profile setting ({ALLOWED}); is this a profile file?")
                };
                return Err(malformed(head.pos(), message));
            }
        }
    }
    if prob_first.is_none() {
        return Err(malformed(
            last,
            "no column header: add 'prob delay' (or 'delay prob') before the data lines".into(),
        ));
    }
    if profile.points.len() < 2 {
        return Err(malformed(
            last,
            format!(
                "a profile needs at least two data lines, found {}",
                profile.points.len()
            ),
        ));
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_man_page_profile() {
        let text = "# from ipfw(8)\nsamples 100\nloss-level 0.86\nprob delay\n0 200\n0.5 200\n0.5 300\n0.8 1000\n0.9 1300\n1 1300\n";
        let p = parse_profile(text, "p").unwrap();
        assert_eq!(p.samples, 100);
        assert_eq!(p.loss_level, 0.86);
        assert_eq!(p.points.len(), 6);
        let table = p.delay_table_us();
        assert_eq!(table.len(), 100);
        assert_eq!(table[0], 200_000);
        assert_eq!(table[99], 1_300_000);
        assert!(
            table.windows(2).all(|w| w[0] <= w[1]),
            "the table is monotone"
        );
    }

    #[test]
    fn malformed_profiles_name_the_word() {
        let e = parse_profile("samples 5000\nprob delay\n0 1\n1 2\n", "p").unwrap_err();
        assert_eq!((e.line, e.column, e.token.as_str()), (1, 9, "5000"));
        let e = parse_profile("prob delay\n0 1\n1.5 2\n", "p").unwrap_err();
        assert_eq!((e.line, e.column, e.token.as_str()), (3, 1, "1.5"));
        let e = parse_profile("colour blue\n", "p").unwrap_err();
        assert_eq!(e.token, "colour");
        assert_eq!(e.kind, ErrorKind::ProfileMalformed);
    }

    #[test]
    fn a_file_that_is_no_profile_is_not_quoted() {
        let e = parse_profile("root:$6$salt$hash:19000:0:99999:7:::\n", "shadow").unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProfileMalformed);
        assert!(!e.to_string().contains("salt"), "{e}");
        assert!(e.to_string().contains("is this a profile file?"), "{e}");
        let e = parse_profile("colour 3\n", "p").unwrap_err();
        assert!(
            e.to_string().contains("unknown profile setting 'colour'"),
            "{e}"
        );
    }

    #[test]
    fn delays_are_capped_like_a_pipe_delay() {
        // 60 000 ms is the cap itself: accepted, in either column order.
        let p = parse_profile("prob delay\n0 0\n1 60000\n", "p").unwrap();
        assert_eq!(p.delay_table_us().last(), Some(&MAX_DELAY_US));
        assert!(parse_profile("delay prob\n60000 1\n0 0\n", "p").is_ok());
        // Just above it, and far above it, refused at the delay.
        let e = parse_profile("prob delay\n0 1\n1 60001\n", "p.prof").unwrap_err();
        assert_eq!((e.line, e.column, e.token.as_str()), (3, 3, "60001"));
        assert_eq!(e.kind, ErrorKind::ProfileMalformed);
        assert_eq!(
            e.to_string(),
            "p.prof:3:3: delay 60001 ms is out of range (allowed: 0..=60000 ms, the cap of a pipe's delay)"
        );
        let e = parse_profile("prob delay\n0 60000.001\n1 1\n", "p").unwrap_err();
        assert_eq!((e.line, e.column, e.token.as_str()), (2, 3, "60000.001"));
        let e = parse_profile("prob delay\n0 1\n1 99999999999999999999\n", "p").unwrap_err();
        assert_eq!(
            (e.line, e.token.as_str(), e.kind),
            (3, "99999999999999999999", ErrorKind::ProfileMalformed)
        );
        let e = parse_profile("delay prob\n1 0\n60001 1\n", "p").unwrap_err();
        assert_eq!((e.line, e.column, e.token.as_str()), (3, 1, "60001"));
    }
}
