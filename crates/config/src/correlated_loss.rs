//! tc-netem's correlated loss (`loss P C`) as the two-state chain that has
//! its loss rate and its correlation, computed exactly from the digits the
//! user wrote.
//!
//! netem's documentation describes `loss P C` as P of the packets lost,
//! each packet's chance depending by C on the previous one's. The
//! Gilbert-Elliott chain `gemodel a b` with `a = P·(1−C)` (good → bad),
//! `b = (1−P)·(1−C)` (bad → good), every packet lost in the bad state and
//! none in the good one, loses `a / (a + b) = P` in the long run, and the
//! fates of successive packets have lag-1 correlation `1 − a − b = C`.
//! `pspat config from-netem` writes it for `loss P C`; the ipfw syntax's
//! error for `plr P C` names it.
//!
//! # Exactness
//! Values are decimal numbers of percent kept as an integer mantissa and a
//! count of fraction digits (at most 16 from a word), so a product never
//! rounds: `0.3% · 75%` is written `0.00225`, not the nearest `f64`'s
//! digits. A value with more digits is refused.
//!
//! # Complexity
//! Linear in the digits.

/// A non-negative decimal number of percent, exactly:
/// `mantissa / 10^scale` percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Percent {
    mantissa: u128,
    scale: u32,
}

/// The most fraction digits a [`Percent`] keeps from a word (a product has
/// the digits of both plus four, well inside `u128`).
const MAX_FRACTION_DIGITS: u32 = 16;

/// The most integer digits a [`Percent`] takes from a word.
const MAX_INTEGER_DIGITS: usize = 20;

impl Percent {
    /// A number of percent written in decimal digits (`0.3`, `25`), or
    /// `None` for anything else or more digits than it keeps.
    pub(crate) fn parse(number: &str) -> Option<Percent> {
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let frac = frac.trim_end_matches('0');
        let scale = u32::try_from(frac.len()).ok()?;
        if scale > MAX_FRACTION_DIGITS || int.len() > MAX_INTEGER_DIGITS {
            return None;
        }
        let mut mantissa: u128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(u128::from(b - b'0'))?;
        }
        Some(Percent { mantissa, scale })
    }

    /// A probability as the ipfw syntax takes it: a fraction of 1 (`0.01`)
    /// or a percentage (`1%`).
    pub(crate) fn probability(text: &str) -> Option<Percent> {
        if let Some(number) = text.strip_suffix('%') {
            return Percent::parse(number);
        }
        let fraction = Percent::parse(text)?;
        // A fraction is a hundred times as many percent.
        Some(match fraction.scale.checked_sub(2) {
            Some(scale) => Percent { scale, ..fraction },
            None => Percent {
                mantissa: fraction
                    .mantissa
                    .checked_mul(10u128.pow(2 - fraction.scale))?,
                scale: 0,
            },
        })
    }

    /// Whether this is 0%.
    pub(crate) fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// Whether this is 100% or more: a correlation of successive decisions
    /// that would never let a chain leave its first state.
    pub(crate) fn is_all(&self) -> bool {
        self.complement().is_none_or(|left| left.is_zero())
    }

    /// 100% minus this, when this is at most 100%.
    fn complement(&self) -> Option<Percent> {
        let hundred = 100u128.checked_mul(10u128.checked_pow(self.scale)?)?;
        Some(Percent {
            mantissa: hundred.checked_sub(self.mantissa)?,
            scale: self.scale,
        })
    }

    /// This percentage of `other` (`self · other / 100`), in percent.
    fn percent_of(&self, other: &Percent) -> Option<Percent> {
        Some(Percent {
            mantissa: self.mantissa.checked_mul(other.mantissa)?,
            scale: self.scale + other.scale + 2,
        })
    }

    /// Written as a fraction of 1 (`0.0075` for 0.75%), without trailing
    /// zeros: the parser reads a fraction to the nearest `f64`, where a
    /// percentage would be divided by 100 after.
    pub(crate) fn fraction(&self) -> String {
        let digits = self.mantissa.to_string();
        let scale = self.scale as usize + 2;
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        match frac.trim_end_matches('0') {
            "" => int.to_string(),
            frac => format!("{int}.{frac}"),
        }
    }
}

/// What `loss P C` is as a loss model (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CorrelatedLoss {
    /// C is 0: independent loss of P (`plr P`).
    Plain,
    /// The two-state chain: gemodel's `p` and `r`.
    Chain {
        /// Good → bad, `P·(1−C)`.
        to_bad: Percent,
        /// Bad → good, `(1−P)·(1−C)`.
        to_good: Percent,
    },
}

/// Why `loss P C` has no chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CorrelatedLossError {
    /// P is above 100%.
    LossAboveOne,
    /// C is 100% or more: a chain that never leaves its first state.
    CorrelationOne,
    /// The products need more digits than a `u128` holds.
    TooManyDigits,
}

impl CorrelatedLoss {
    /// The model of loss `loss` with correlation `correlation`.
    pub(crate) fn new(loss: Percent, correlation: Percent) -> Result<Self, CorrelatedLossError> {
        let loss_left = loss.complement().ok_or(CorrelatedLossError::LossAboveOne)?;
        if correlation.is_zero() {
            return Ok(CorrelatedLoss::Plain);
        }
        let correlation_left = correlation
            .complement()
            .filter(|c| !c.is_zero())
            .ok_or(CorrelatedLossError::CorrelationOne)?;
        let to_bad = loss.percent_of(&correlation_left);
        let to_good = loss_left.percent_of(&correlation_left);
        match (to_bad, to_good) {
            (Some(to_bad), Some(to_good)) => Ok(CorrelatedLoss::Chain { to_bad, to_good }),
            _ => Err(CorrelatedLossError::TooManyDigits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(p: &str, c: &str) -> (String, String) {
        match CorrelatedLoss::new(Percent::parse(p).unwrap(), Percent::parse(c).unwrap()) {
            Ok(CorrelatedLoss::Chain { to_bad, to_good }) => {
                (to_bad.fraction(), to_good.fraction())
            }
            other => panic!("{p} {c}: {other:?}"),
        }
    }

    #[test]
    fn the_chain_is_computed_exactly_from_the_digits() {
        assert_eq!(chain("1", "25"), ("0.0075".into(), "0.7425".into()));
        assert_eq!(chain("0.3", "25"), ("0.00225".into(), "0.74775".into()));
        assert_eq!(chain("100", "25"), ("0.75".into(), "0".into()));
        let plain =
            CorrelatedLoss::new(Percent::parse("1").unwrap(), Percent::parse("0.0").unwrap());
        assert_eq!(plain, Ok(CorrelatedLoss::Plain));
    }

    #[test]
    fn out_of_range_and_unreadable_values_are_refused() {
        let p = |t: &str| Percent::parse(t).unwrap();
        assert_eq!(
            CorrelatedLoss::new(p("100.5"), p("25")),
            Err(CorrelatedLossError::LossAboveOne)
        );
        assert_eq!(
            CorrelatedLoss::new(p("1"), p("100")),
            Err(CorrelatedLossError::CorrelationOne)
        );
        assert_eq!(
            CorrelatedLoss::new(p("1"), p("250")),
            Err(CorrelatedLossError::CorrelationOne)
        );
        for bad in [
            "",
            ".",
            "1e3",
            "-1",
            "1.2.3",
            "0.12345678901234567",
            "123456789012345678901",
        ] {
            assert_eq!(Percent::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_ipfw_probability_is_a_fraction_or_a_percentage() {
        let fraction = |t: &str| Percent::probability(t).map(|p| p.fraction());
        assert_eq!(fraction("0.01").as_deref(), Some("0.01"));
        assert_eq!(fraction("1%").as_deref(), Some("0.01"));
        assert_eq!(fraction("0.5").as_deref(), Some("0.5"));
        assert_eq!(fraction("1").as_deref(), Some("1"));
        assert_eq!(fraction("0.00225").as_deref(), Some("0.00225"));
        assert_eq!(fraction("1e-2"), None);
    }
}
