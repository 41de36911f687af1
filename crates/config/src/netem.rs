//! tc-netem's options as one pipe: the argument list of `tc qdisc ... netem`
//! read with tc's grammar and units, and written as the pipe that does the
//! same (`pspat config from-netem`).
//!
//! # What is read
//! The options after the word `netem` (a whole `tc qdisc add dev eth0 root
//! netem ...` command may be pasted; without `netem` every word is an
//! option): `limit`, `delay`/`latency` TIME [JITTER [CORRELATION]],
//! `distribution`, `loss`/`drop` [`random`] P [C], `loss state` P13 [P31
//! [P32 [P23 [P14]]]], `loss gemodel` P [R [1-H [1-K]]], `duplicate` P [C],
//! `corrupt` P [C], `ecn`,
//! `reorder` P [C] [`gap` N], `rate` RATE [PACKETOVERHEAD [CELLSIZE
//! [CELLOVERHEAD]]], `slot` and `seed`, in any order, each keyword also as
//! a prefix of itself as tc takes it (`del 10ms`, tried in tc's order).
//! tc's units: a probability is a percentage with or without `%` (`loss 1`
//! is 1%), a rate without unit is bit/s and `bps` is *bytes* per second
//! (`kbit`, `mbit`, `gbit`, `tbit`, `bps`, `kbps`, `mbps`, `gbps`, `tbps`
//! and the `kibit`..`tibps` binary forms), a time takes `s`, `sec`, `secs`,
//! `ms`, `msec`, `msecs`, `us`, `usec`, `usecs`, `ns`, `nsec`, `nsecs`.
//!
//! # What is written
//! `pipe N config` with the counterpart of each option (docs/RECIPES.md,
//! *From tc-netem*), `queue 1000` when no `limit` is given (netem's default
//! limit), `distribution uniform` when jitter comes without one (netem's
//! default), `reorder` when jitter comes without `rate` (netem reorders such
//! packets by their delays, pspat keeps their order unless asked), a rule
//! `add 100 pipe N ip from any to any` and `seed N` when given; `loss P C`
//! becomes a Gilbert-Elliott model (below). `ecn` becomes `lossecn`
//! (netem's marks ECN-capable packets instead of its loss dropping them;
//! pspat's `ecn` is dummynet's, which marks instead of RED's drops) and,
//! as tc refuses it, needs a loss model: `loss P [C]` with P above 0,
//! `loss state` or `loss gemodel`. The result is parsed and validated as
//! any configuration, so what pspat cannot do is refused: a rate as a
//! percentage of the device's, a distribution table other than the
//! built-in ones, and a time without unit (tc versions read it as
//! microseconds or as nanoseconds).
//! `duplicate P C`, `corrupt P C` and `reorder P C` keep their words:
//! pspat reads the second value as the correlation of a two-state chain of
//! the decisions, as for loss below (long-run share P, lag-1 correlation
//! C), where netem draws them as it draws loss.
//!
//! # Correlated loss
//! netem's documentation (its wiki's examples) describes `loss P C` as P
//! of the packets lost, each packet's chance depending by C on the previous
//! one's; tc-netem(8) calls the correlation deprecated for how it behaves.
//! netem draws it as a weighted mean of a fresh uniform number and the
//! previous draw, which narrows the draws around one half, so far fewer
//! than P are lost when P is small: its formula, run a million times at
//! `loss 1% 25%` (a test below), loses a few packets per million, and about
//! 1.7% at `loss 10% 25%`. pspat writes what the description asks for
//! instead: the two-state chain with loss rate P and lag-1 correlation C,
//! `gemodel P·(1−C) (1−P)·(1−C)`, computed exactly from the words' digits
//! (`crate::correlated_loss`); `C = 0` is plain `plr P`, and C must be
//! under 100%.
//!
//! # Errors
//! One [`Error`] naming the netem option's column and token, for the
//! option itself or for a range the validation found in what it became.
//!
//! # Complexity
//! Linear in the text.

use crate::correlated_loss::{CorrelatedLoss, CorrelatedLossError, Percent};
use crate::model::Distribution;
use crate::units::{format_rate, format_time_us, scaled_decimal, split_number};
use crate::{parse_ipfw, Config, Error, ErrorKind, NoProfiles};

/// netem's queue limit when none is given, in packets.
pub const NETEM_DEFAULT_LIMIT: u32 = 1000;

/// The rule number of the rule that sends every packet to the pipe.
const RULE: u32 = 100;

/// A word of the input with its 1-based line and column in characters.
#[derive(Clone, Copy, Debug)]
struct Word<'a> {
    text: &'a str,
    line: u32,
    column: u32,
}

/// One piece of the pipe line and the netem word it came from.
struct Piece {
    text: String,
    from: usize,
}

/// The words of `text` with their places (options are usually one line;
/// a newline counts as a space that starts the next line).
fn words(text: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut start: Option<(usize, u32, u32)> = None;
    let (mut line, mut column) = (1u32, 0u32);
    for (i, c) in text.char_indices() {
        column += 1;
        if c.is_whitespace() {
            if let Some((s, l, col)) = start.take() {
                out.push(Word {
                    text: &text[s..i],
                    line: l,
                    column: col,
                });
            }
            if c == '\n' {
                line += 1;
                column = 0;
            }
        } else if start.is_none() {
            start = Some((i, line, column));
        }
    }
    if let Some((s, l, col)) = start {
        out.push(Word {
            text: &text[s..],
            line: l,
            column: col,
        });
    }
    out
}

/// tc's `matches`: `word` is a non-empty prefix of `keyword`.
fn matches(word: &str, keyword: &str) -> bool {
    !word.is_empty() && keyword.starts_with(word)
}

/// tc's `NEXT_IS_NUMBER`: the word starts with a digit.
fn is_number(word: Option<&Word>) -> bool {
    word.is_some_and(|w| w.text.starts_with(|c: char| c.is_ascii_digit()))
}

/// tc's `NEXT_IS_SIGNED_NUMBER`: a digit or a minus sign first.
fn is_signed_number(word: Option<&Word>) -> bool {
    word.is_some_and(|w| w.text.starts_with(|c: char| c.is_ascii_digit() || c == '-'))
}

/// The reader of one netem option list.
struct Reader<'a> {
    file: &'a str,
    words: Vec<Word<'a>>,
    at: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, word: usize, kind: ErrorKind, message: impl Into<String>) -> Error {
        let (line, column, token) = match self.words.get(word) {
            Some(w) => (w.line, w.column, w.text.to_string()),
            None => (1, 1, String::new()),
        };
        Error {
            file: self.file.to_string(),
            line,
            column,
            token,
            message: message.into(),
            kind,
        }
    }

    fn peek(&self) -> Option<&Word<'a>> {
        self.words.get(self.at)
    }

    /// The next word, as the value of the word at `of` (`what` names it
    /// when it is missing).
    fn value(&mut self, of: usize, what: &str) -> Result<usize, Error> {
        if self.at >= self.words.len() {
            return Err(self.error(
                of,
                ErrorKind::Syntax,
                format!("'{}' needs {what}", self.words[of].text),
            ));
        }
        self.at += 1;
        Ok(self.at - 1)
    }

    fn text(&self, word: usize) -> &'a str {
        self.words[word].text
    }

    /// A percentage as tc writes it (`1` and `1%` are both 1%), written
    /// back as `N%`.
    fn percent(&self, word: usize) -> Result<String, Error> {
        let text = self.text(word);
        let number = text.strip_suffix('%').unwrap_or(text);
        if !is_decimal(number) {
            return Err(self.error(
                word,
                ErrorKind::Syntax,
                format!("'{text}' is not a percentage (examples: 1%, 0.5, 25%)"),
            ));
        }
        Ok(format!("{number}%"))
    }

    /// A time with one of tc's units, in whole microseconds.
    fn time(&self, word: usize) -> Result<String, Error> {
        let text = self.text(word);
        let (number, unit) = split_number(text);
        let ns_per_unit: u128 = match unit.to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" => 1_000_000_000,
            "ms" | "msec" | "msecs" => 1_000_000,
            "us" | "usec" | "usecs" => 1_000,
            "ns" | "nsec" | "nsecs" => 1,
            "" => {
                return Err(self.error(
                    word,
                    ErrorKind::Syntax,
                    format!(
                        "'{text}' has no unit: write one (10ms, 500us); tc versions read a bare number as microseconds or as nanoseconds"
                    ),
                ))
            }
            _ => {
                return Err(self.error(
                    word,
                    ErrorKind::Syntax,
                    format!("'{text}' is not a time (examples: 10ms, 500us, 1s, 2000ns)"),
                ))
            }
        };
        let ns = scaled_decimal(number, ns_per_unit).ok_or_else(|| {
            self.error(
                word,
                ErrorKind::Syntax,
                format!("'{text}' is not a time (examples: 10ms, 500us, 1s, 2000ns)"),
            )
        })?;
        if ns % 1_000 != 0 {
            return Err(self.error(
                word,
                ErrorKind::OutOfRange,
                format!("'{text}' is finer than pspat's 1 us resolution"),
            ));
        }
        let us = u64::try_from(ns / 1_000).map_err(|_| {
            self.error(
                word,
                ErrorKind::OutOfRange,
                format!("'{text}' is too long a time"),
            )
        })?;
        Ok(format_time_us(us))
    }

    /// A rate with one of tc's units, in bit/s.
    fn rate(&self, word: usize) -> Result<String, Error> {
        let text = self.text(word);
        if text.ends_with('%') {
            return Err(self.error(
                word,
                ErrorKind::Syntax,
                format!("'{text}': a rate as a share of the device's speed has no counterpart; write the rate (example: 10mbit)"),
            ));
        }
        let (number, unit) = split_number(text);
        let bits: u128 = match unit.to_ascii_lowercase().as_str() {
            "" | "bit" => 1,
            "kbit" => 1_000,
            "mbit" => 1_000_000,
            "gbit" => 1_000_000_000,
            "tbit" => 1_000_000_000_000,
            "bps" => 8,
            "kbps" => 8_000,
            "mbps" => 8_000_000,
            "gbps" => 8_000_000_000,
            "tbps" => 8_000_000_000_000,
            "kibit" => 1 << 10,
            "mibit" => 1 << 20,
            "gibit" => 1 << 30,
            "tibit" => 1 << 40,
            "kibps" => 8 << 10,
            "mibps" => 8 << 20,
            "gibps" => 8 << 30,
            "tibps" => 8 << 40,
            _ => {
                return Err(self.error(
                    word,
                    ErrorKind::Syntax,
                    format!("'{text}' is not a rate (examples: 10mbit, 512kbit, 1gbit, 100kbps = 800 kbit/s)"),
                ))
            }
        };
        let bps = scaled_decimal(number, bits)
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| {
                self.error(
                    word,
                    ErrorKind::Syntax,
                    format!("'{text}' is not a whole number of bit/s (examples: 10mbit, 1.5mbit)"),
                )
            })?;
        if bps == 0 {
            return Err(self.error(
                word,
                ErrorKind::OutOfRange,
                format!("'{text}': a rate of 0 is no rate"),
            ));
        }
        Ok(format_rate(bps))
    }

    /// The probability after `reorder`, `corrupt` or `duplicate` (the word
    /// at `kw`) and its optional correlation: the pipe's `keyword P% [C%]`
    /// (the same two-state chain netem's documentation describes, module
    /// docs) and the probability's word. A correlation of 0 is left out;
    /// one of 100% or more is refused at its word.
    fn probability_and_correlation(
        &mut self,
        kw: usize,
        keyword: &str,
    ) -> Result<(String, usize), Error> {
        let v = self.value(kw, &format!("a probability (example: {keyword} 1%)"))?;
        let mut text = format!("{keyword} {}", self.percent(v)?);
        if is_number(self.peek()) {
            let c = self.value(kw, "")?;
            let percent = self.percent(c)?;
            // Exactly, in decimal, as `loss P C`'s correlation; a word with
            // more digits than `Percent` keeps is written on, for the
            // validation to range.
            let exact = Percent::parse(percent.trim_end_matches('%'));
            if exact.is_some_and(|p| p.is_all()) {
                return Err(self.error(
                    c,
                    ErrorKind::OutOfRange,
                    format!(
                        "'{}': a {keyword} correlation must be under 100% (at 100% the first packet's answer would be every packet's)",
                        self.text(c)
                    ),
                ));
            }
            // netem's correlation 0 is none.
            if !exact.is_some_and(|p| p.is_zero()) {
                text.push(' ');
                text.push_str(&percent);
            }
        }
        Ok((text, v))
    }

    /// One of the built-in distributions by its name (netem's tables of the
    /// same names); another table has no counterpart.
    fn distribution(&self, word: usize) -> Result<String, Error> {
        let name = self.text(word);
        match Distribution::from_name(name) {
            Some(d) => Ok(d.name().to_string()),
            None => Err(self.error(
                word,
                ErrorKind::UnknownKeyword,
                format!(
                    "distribution table '{name}' is not built in (allowed: {}; a profile file gives a measured distribution, docs/CONFIG.md)",
                    Distribution::names()
                ),
            )),
        }
    }

    /// A whole number, written back as given.
    fn whole(&self, word: usize, signed: bool) -> Result<String, Error> {
        let text = self.text(word);
        let digits = if signed {
            text.strip_prefix('-').unwrap_or(text)
        } else {
            text
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(
                word,
                ErrorKind::Syntax,
                format!("'{text}' is not a whole number"),
            ));
        }
        Ok(text.to_string())
    }

    /// `loss P C` (the words at `loss` and `correlation`): the loss
    /// probability P with lag-1 correlation C between successive packets'
    /// fates, as the two-state chain of [`CorrelatedLoss`] (module docs,
    /// *Correlated loss*); plain `plr P` when C is 0.
    fn correlated_loss(&self, loss: usize, correlation: usize) -> Result<String, Error> {
        // The syntax check of any percentage (its text is not kept).
        self.percent(correlation)?;
        let digits = |word: usize| {
            let text = self.text(word);
            Percent::parse(text.strip_suffix('%').unwrap_or(text)).ok_or_else(|| {
                self.error(
                    word,
                    ErrorKind::Syntax,
                    format!("'{text}' has more digits than a probability needs"),
                )
            })
        };
        let (p, c) = (digits(loss)?, digits(correlation)?);
        match CorrelatedLoss::new(p, c) {
            Ok(CorrelatedLoss::Plain) => Ok(format!("plr {}", p.fraction())),
            Ok(CorrelatedLoss::Chain { to_bad, to_good }) => Ok(format!(
                "gemodel {} {}",
                to_bad.fraction(),
                to_good.fraction()
            )),
            Err(CorrelatedLossError::LossAboveOne) => Err(self.error(
                loss,
                ErrorKind::OutOfRange,
                format!(
                    "'{}' is out of range: a probability is at most 100%",
                    self.text(loss)
                ),
            )),
            Err(CorrelatedLossError::CorrelationOne) => Err(self.error(
                correlation,
                ErrorKind::OutOfRange,
                format!(
                    "'{}': a loss correlation must be under 100% (at 100% the first packet's fate would be every packet's)",
                    self.text(correlation)
                ),
            )),
            Err(CorrelatedLossError::TooManyDigits) => Err(self.error(
                correlation,
                ErrorKind::Syntax,
                "the loss and its correlation have more digits together than pspat computes with",
            )),
        }
    }
}

/// A decimal number that `scaled_decimal` refuses at scale 1 only because
/// it has a fraction (`0.5`).
fn is_decimal(text: &str) -> bool {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    !(int.is_empty() && frac.is_empty())
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// What the options said, as pipe keywords.
#[derive(Default)]
struct Options {
    pieces: Vec<Piece>,
    limit: bool,
    delay: Option<usize>,
    jitter: bool,
    distribution: Option<(String, usize)>,
    loss: Option<usize>,
    /// The loss is `loss P [C]` with P 0: no loss model for tc.
    loss_zero: bool,
    ecn: Option<usize>,
    reorder: Option<usize>,
    gap: Option<(String, usize)>,
    rate: bool,
    seed: Option<(String, usize)>,
}

/// The words after `netem`, or every word when there is none.
fn option_words(all: Vec<Word<'_>>) -> Vec<Word<'_>> {
    match all.iter().position(|w| w.text == "netem") {
        Some(i) => all[i + 1..].to_vec(),
        None => all,
    }
}

fn read_options(r: &mut Reader) -> Result<Options, Error> {
    let mut o = Options::default();
    let push = |o: &mut Options, text: String, from: usize| o.pieces.push(Piece { text, from });
    while r.at < r.words.len() {
        let kw = r.at;
        r.at += 1;
        let word = r.text(kw);
        if matches(word, "limit") {
            let v = r.value(kw, "a number of packets (example: limit 1000)")?;
            let n = r.whole(v, false)?;
            push(&mut o, format!("queue {n}"), v);
            o.limit = true;
        } else if matches(word, "latency") || matches(word, "delay") {
            let v = r.value(kw, "a time (example: delay 100ms 10ms 25%)")?;
            push(&mut o, format!("delay {}", r.time(v)?), v);
            o.delay = Some(kw);
            if is_number(r.peek()) {
                let j = r.value(kw, "")?;
                push(&mut o, format!("jitter {}", r.time(j)?), j);
                o.jitter = true;
                if is_number(r.peek()) {
                    let c = r.value(kw, "")?;
                    push(&mut o, format!("correlation {}", r.percent(c)?), c);
                }
            }
        } else if matches(word, "loss") || matches(word, "drop") {
            if let Some(first) = o.loss {
                return Err(r.error(
                    kw,
                    ErrorKind::Duplicate,
                    format!(
                        "a second loss model (the first at column {})",
                        r.words[first].column
                    ),
                ));
            }
            o.loss = Some(kw);
            let v = r.value(
                kw,
                "a probability or a model (example: loss 1%, loss gemodel 1% 10%)",
            )?;
            let model = r.text(v);
            let (keyword, names): (&str, &[&str]) = if model
                .starts_with(|c: char| c.is_ascii_digit())
                || model == "random"
            {
                ("plr", &["loss probability"])
            } else if model == "state" {
                ("lossstate", &["p13", "p31", "p32", "p23", "p14"])
            } else if model == "gemodel" {
                ("gemodel", &["p", "r", "1-h", "1-k"])
            } else {
                return Err(r.error(
                    v,
                    ErrorKind::UnknownKeyword,
                    format!("unknown loss parameter '{model}' (allowed: a probability, random, state, gemodel)"),
                ));
            };
            let first = if model.starts_with(|c: char| c.is_ascii_digit()) {
                v
            } else {
                r.value(v, names[0])?
            };
            let mut text = format!("{keyword} {}", r.percent(first)?);
            if keyword == "plr" {
                // tc's `opt.loss <= 0`, read exactly.
                o.loss_zero = Percent::probability(r.text(first)).is_some_and(|p| p.is_zero());
                if is_number(r.peek()) {
                    let c = r.value(kw, "")?;
                    text = r.correlated_loss(first, c)?;
                }
            } else {
                for _ in 1..names.len() {
                    if !is_number(r.peek()) {
                        break;
                    }
                    let p = r.value(v, "")?;
                    text.push(' ');
                    text.push_str(&r.percent(p)?);
                }
            }
            push(&mut o, text, first);
        } else if matches(word, "ecn") {
            if let Some(first) = o.ecn {
                return Err(r.error(
                    kw,
                    ErrorKind::Duplicate,
                    format!(
                        "'{word}' is given twice (the first at column {})",
                        r.words[first].column
                    ),
                ));
            }
            o.ecn = Some(kw);
        } else if let Some(keyword) = ["reorder", "corrupt"]
            .into_iter()
            .find(|k| matches(word, k))
        {
            let (text, v) = r.probability_and_correlation(kw, keyword)?;
            push(&mut o, text, v);
            if keyword == "reorder" {
                o.reorder = Some(kw);
            }
        } else if matches(word, "gap") {
            let v = r.value(kw, "a number of packets (example: reorder 25% gap 5)")?;
            o.gap = Some((r.whole(v, false)?, v));
        } else if matches(word, "duplicate") {
            let (text, v) = r.probability_and_correlation(kw, "duplicate")?;
            push(&mut o, text, v);
        } else if matches(word, "distribution") {
            let v = r.value(kw, "a name (normal, pareto, paretonormal)")?;
            o.distribution = Some((r.distribution(v)?, v));
        } else if matches(word, "rate") {
            let v = r.value(kw, "a rate (example: rate 10mbit)")?;
            push(&mut o, format!("bw {}", r.rate(v)?), v);
            o.rate = true;
            if is_signed_number(r.peek()) {
                let p = r.value(kw, "")?;
                push(&mut o, format!("packetoverhead {}", r.whole(p, true)?), p);
                if is_number(r.peek()) {
                    let c = r.value(kw, "")?;
                    push(&mut o, format!("cellsize {}", r.whole(c, false)?), c);
                    if is_signed_number(r.peek()) {
                        let co = r.value(kw, "")?;
                        push(&mut o, format!("celloverhead {}", r.whole(co, true)?), co);
                    }
                }
            }
        } else if matches(word, "slot") {
            let first = r.value(
                kw,
                "a time or 'distribution' (example: slot 2ms 4ms packets 16)",
            )?;
            let mut text = String::from("slot");
            if is_number(Some(&r.words[first])) {
                text.push(' ');
                text.push_str(&r.time(first)?);
                if is_number(r.peek()) {
                    let max = r.value(kw, "")?;
                    text.push(' ');
                    text.push_str(&r.time(max)?);
                }
            } else if r.text(first) == "distribution" {
                let d = r.value(
                    first,
                    "a name (example: slot distribution normal 3ms 500us)",
                )?;
                let name = r.distribution(d)?;
                let delay = r.value(d, "a delay and a jitter")?;
                let jitter = r.value(delay, "a jitter")?;
                text = format!(
                    "slot distribution {name} {} {}",
                    r.time(delay)?,
                    r.time(jitter)?
                );
            } else {
                return Err(r.error(
                    first,
                    ErrorKind::UnknownKeyword,
                    format!("unknown slot parameter '{}' (example: slot 2ms 4ms packets 16 bytes 20000)", r.text(first)),
                ));
            }
            for budget in ["packets", "bytes"] {
                if r.peek().is_some_and(|w| matches(w.text, budget)) {
                    let b = r.at;
                    r.at += 1;
                    let n = r.value(b, "a number")?;
                    text.push_str(&format!(" {budget} {}", r.whole(n, false)?));
                }
            }
            push(&mut o, text, first);
        } else if matches(word, "seed") {
            let v = r.value(kw, "a number (example: seed 7)")?;
            o.seed = Some((r.whole(v, false)?, v));
        } else {
            return Err(r.error(
                kw,
                ErrorKind::UnknownKeyword,
                format!("unknown netem option '{word}' (allowed: limit, delay, distribution, loss, ecn, duplicate, corrupt, reorder, gap, rate, slot, seed)"),
            ));
        }
    }
    Ok(o)
}

/// Checks netem's own combinations and completes the pipe with netem's
/// defaults.
fn complete(r: &Reader, o: &mut Options) -> Result<(), Error> {
    if let Some(ecn) = o.ecn {
        if o.loss.is_none() || o.loss_zero {
            return Err(r.error(
                ecn,
                ErrorKind::MissingReference,
                "'ecn' needs a loss model, as with tc-netem: it marks the ECN-capable packets the loss would drop (example: loss 1% ecn; 'loss 0%' is none)",
            ));
        }
        // pspat's `ecn` is dummynet's (RED's marks): netem's is `lossecn`.
        o.pieces.push(Piece {
            text: "lossecn".into(),
            from: ecn,
        });
    }
    if let Some(reorder) = o.reorder {
        if o.delay.is_none() {
            return Err(r.error(
                reorder,
                ErrorKind::Syntax,
                "'reorder' needs a delay, as with tc-netem (example: delay 10ms reorder 25% gap 5)",
            ));
        }
        if let Some((gap, from)) = o.gap.take() {
            o.pieces.push(Piece {
                text: format!("gap {gap}"),
                from,
            });
        }
    } else if let Some((_, from)) = &o.gap {
        return Err(r.error(
            *from,
            ErrorKind::Syntax,
            "'gap' without a reorder probability (example: delay 10ms reorder 25% gap 5)",
        ));
    }
    if let Some((name, from)) = o.distribution.take() {
        if !o.jitter {
            return Err(r.error(
                from,
                ErrorKind::Syntax,
                "a distribution needs a delay and a jitter, as with tc-netem (example: delay 100ms 10ms distribution normal)",
            ));
        }
        o.pieces.push(Piece {
            text: format!("distribution {name}"),
            from,
        });
    } else if o.jitter {
        let from = o.delay.unwrap_or(0);
        o.pieces.push(Piece {
            text: "distribution uniform".into(),
            from,
        });
    }
    if o.jitter && !o.rate && o.reorder.is_none() {
        let from = o.delay.unwrap_or(0);
        o.pieces.push(Piece {
            text: "reorder".into(),
            from,
        });
    }
    if !o.limit {
        o.pieces.push(Piece {
            text: format!("queue {NETEM_DEFAULT_LIMIT}"),
            from: 0,
        });
    }
    Ok(())
}

/// Reads tc-netem's options in `text` (errors name `file`, line 1) and
/// returns the configuration of pipe `pipe` that does the same, with a rule
/// sending every packet to it, validated.
///
/// # Examples
/// ```
/// let cfg = pspat_config::netem_to_config(
///     "tc qdisc add dev eth0 root netem delay 100ms 10ms distribution normal loss 1% rate 10mbit",
///     1,
///     "netem",
/// )
/// .unwrap();
/// let line = pspat_config::print_ipfw(&cfg);
/// assert!(line.contains("pipe 1 config bw 10Mbit/s delay 100ms jitter 10ms distribution normal"), "{line}");
/// assert!(line.contains("plr 0.01") && line.contains("queue 1000"), "{line}");
/// ```
///
/// # Errors
/// [`Error`] at the netem word that cannot be read or has no counterpart,
/// or whose value is out of pspat's range.
pub fn netem_to_config(text: &str, pipe: u32, file: &str) -> Result<Config, Error> {
    let mut r = Reader {
        file,
        words: option_words(words(text)),
        at: 0,
    };
    if r.words.is_empty() {
        return Err(Error {
            file: file.to_string(),
            line: 1,
            column: 1,
            token: String::new(),
            message: "no netem options (example: delay 100ms 10ms loss 1% rate 10mbit)".into(),
            kind: ErrorKind::Syntax,
        });
    }
    let mut o = read_options(&mut r)?;
    complete(&r, &mut o)?;
    // The generated lines, and where each piece sits on the pipe's line.
    let mut generated = String::new();
    let mut seed_from = None;
    if let Some((seed, from)) = &o.seed {
        generated.push_str(&format!("seed {seed}\n"));
        seed_from = Some(*from);
    }
    let pipe_line = 1 + u32::from(seed_from.is_some());
    let mut line = format!("pipe {pipe} config");
    let mut spans = Vec::with_capacity(o.pieces.len());
    for piece in &o.pieces {
        line.push(' ');
        let start = line.chars().count() as u32 + 1;
        line.push_str(&piece.text);
        spans.push((start, line.chars().count() as u32, piece.from));
    }
    generated.push_str(&line);
    generated.push_str(&format!("\nadd {RULE} pipe {pipe} ip from any to any\n"));
    let to_source = |e: Error| -> Error {
        let from = if e.line == pipe_line {
            spans
                .iter()
                .find(|(start, end, _)| (*start..=*end).contains(&e.column))
                .map(|s| s.2)
        } else if e.line == 1 && seed_from.is_some() {
            seed_from
        } else {
            None
        };
        let mut mapped = match from {
            Some(w) => r.error(w, e.kind, e.message.clone()),
            None => r.error(0, e.kind, e.message.clone()),
        };
        if from.is_none() {
            mapped.message = format!("{} (in '{}')", e.message, line);
        }
        mapped
    };
    let config = parse_ipfw(&generated, file).map_err(to_source)?;
    config.validate(&NoProfiles).map_err(to_source)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::print_ipfw;

    fn pipe_line(text: &str) -> String {
        let cfg = netem_to_config(text, 1, "netem").unwrap_or_else(|e| panic!("{text}: {e}"));
        let printed = print_ipfw(&cfg);
        printed
            .lines()
            .find(|l| l.starts_with("pipe 1 config"))
            .unwrap_or_else(|| panic!("no pipe line in {printed}"))
            .to_string()
    }

    fn error(text: &str) -> Error {
        netem_to_config(text, 1, "netem").expect_err(text)
    }

    #[test]
    fn every_row_of_the_recipes_table_converts() {
        // (netem options, what the pipe line must contain)
        let cases = [
            ("delay 40ms", "delay 40ms"),
            (
                "delay 40ms 5ms distribution normal",
                "delay 40ms jitter 5ms distribution normal",
            ),
            ("delay 100ms 10ms 25%", "correlation 0.25"),
            ("delay 10ms reorder 25% gap 5", "reorder 0.25 gap 5"),
            ("loss 1%", "plr 0.01"),
            ("loss random 1", "plr 0.01"),
            ("drop 0.5", "plr 0.005"),
            ("loss gemodel 1% 10% 70% 0.1%", "gemodel 0.01 0.1 0.7 0.001"),
            ("loss state 1% 30%", "lossstate 0.01 0.3"),
            ("loss 1% ecn", "plr 0.01 lossecn"),
            ("duplicate 1%", "duplicate 0.01"),
            ("duplicate 1% 25%", "duplicate 0.01 0.25"),
            ("corrupt 0.1", "corrupt 0.001"),
            ("corrupt 0.1% 25%", "corrupt 0.001 0.25"),
            ("delay 10ms reorder 25% 50%", "reorder 0.25 0.5"),
            (
                "rate 10mbit 24 48 5",
                "bw 10Mbit/s packetoverhead 24 cellsize 48 celloverhead 5",
            ),
            ("rate 100kbps -4", "bw 800Kbit/s packetoverhead -4"),
            ("rate 1mibit", "bw 1048576bit/s"),
            ("limit 50", "queue 50"),
            (
                "slot 2ms 4ms packets 16 bytes 20000",
                "slot 2ms 4ms packets 16 bytes 20000",
            ),
            (
                "slot distribution normal 3ms 500us",
                "slot distribution normal 3ms 500us",
            ),
            ("delay 1500usecs", "delay 1500us"),
            ("delay 2000000ns", "delay 2ms"),
            ("delay 1.5s", "delay 1500ms"),
        ];
        for (netem, expect) in cases {
            let line = pipe_line(netem);
            assert!(line.contains(expect), "{netem}: {line} lacks {expect}");
        }
    }

    /// The gemodel values of a converted pipe line.
    fn gemodel_of(line: &str) -> (f64, f64, f64, f64) {
        let rest = line
            .split("gemodel ")
            .nth(1)
            .unwrap_or_else(|| panic!("no gemodel in {line}"));
        let v: Vec<f64> = rest
            .split_whitespace()
            .take(4)
            .map(|t| t.parse().unwrap_or_else(|_| panic!("{t} in {line}")))
            .collect();
        (v[0], v[1], v[2], v[3])
    }

    #[test]
    fn a_correlated_loss_becomes_the_chain_with_its_rate_and_correlation() {
        for (netem, exact, p, c) in [
            ("loss 1% 25%", "gemodel 0.0075 0.7425 1 0", 0.01, 0.25),
            ("loss 0.3% 25%", "gemodel 0.00225 0.74775 1 0", 0.003, 0.25),
            ("loss random 10 50", "gemodel 0.05 0.45 1 0", 0.1, 0.5),
            (
                "drop 0.001% 99.9%",
                "gemodel 0.00000001 0.00099999 1 0",
                0.00001,
                0.999,
            ),
            ("loss 100% 25%", "gemodel 0.75 0 1 0", 1.0, 0.25),
        ] {
            let line = pipe_line(netem);
            assert!(line.contains(exact), "{netem}: {line} lacks {exact}");
            assert!(!line.contains("plr"), "{netem}: {line}");
            let (a, b, loss_bad, loss_good) = gemodel_of(&line);
            assert_eq!((loss_bad, loss_good), (1.0, 0.0), "{line}");
            // Long-run loss a / (a + b) and lag-1 correlation 1 − a − b.
            assert!((a / (a + b) - p).abs() < 1e-12, "{netem}: {line}");
            assert!((1.0 - a - b - c).abs() < 1e-12, "{netem}: {line}");
        }
        // No correlation is the plain loss; whole commands too.
        assert!(pipe_line("loss 1% 0%").contains("plr 0.01"));
        assert!(pipe_line("loss 1 0").contains("plr 0.01"));
        let cfg = netem_to_config(
            "tc qdisc add dev eth0 root netem delay 100ms 10ms 25% loss 0.3% 25% rate 10mbit",
            1,
            "netem",
        )
        .unwrap();
        let printed = print_ipfw(&cfg);
        assert!(
            printed.contains("correlation 0.25 queue 1000 gemodel 0.00225 0.74775 1 0"),
            "{printed}"
        );
        assert_eq!(parse_ipfw(&printed, "again").unwrap(), cfg);
    }

    /// tc-netem's correlated draw (`get_crandom`): the next 32-bit number
    /// is `(u·(2^32 − ρ') + last·ρ') >> 32` with `ρ' = ρ + 1`, ρ the
    /// correlation scaled to 32 bits; a packet is lost when the loss
    /// probability (scaled alike) is at least the draw. The uniform
    /// numbers here come from splitmix64.
    fn netem_correlated_loss(loss: f64, correlation: f64, draws: u32) -> f64 {
        let scale = |x: f64| (x * f64::from(u32::MAX)).round() as u64;
        let (loss, rho) = (scale(loss), scale(correlation) + 1);
        let mut seed = 0x5eed_u64;
        let mut uniform = || {
            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) >> 32
        };
        let mut last = uniform();
        let mut lost = 0u32;
        for _ in 0..draws {
            let answer = (uniform() * ((1u64 << 32) - rho) + last * rho) >> 32;
            last = answer;
            if loss >= answer {
                lost += 1;
            }
        }
        f64::from(lost) / f64::from(draws)
    }

    #[test]
    fn netem_s_correlated_draws_lose_far_fewer_than_asked() {
        // What the module docs say of netem's own `loss P C`: at 1% with
        // 25% correlation almost nothing is lost, at 10% about 1.7%.
        let one = netem_correlated_loss(0.01, 0.25, 1_000_000);
        assert!(one < 0.0001, "{one}");
        let ten = netem_correlated_loss(0.10, 0.25, 1_000_000);
        assert!((0.012..0.022).contains(&ten), "{ten}");
        // Without correlation the formula is the plain draw: P is kept.
        let plain = netem_correlated_loss(0.01, 0.0, 1_000_000);
        assert!((0.0095..0.0105).contains(&plain), "{plain}");
    }

    #[test]
    fn netem_defaults_are_written_out() {
        // netem's limit of 1000 packets, uniform jitter, and jitter that
        // reorders unless a rate is set.
        let line = pipe_line("delay 100ms 10ms");
        for part in ["queue 1000", "distribution uniform", "reorder"] {
            assert!(line.contains(part), "{line} lacks {part}");
        }
        let with_rate = pipe_line("delay 100ms 10ms rate 1mbit");
        assert!(!with_rate.contains("reorder"), "{with_rate}");
        assert!(!pipe_line("delay 100ms").contains("reorder"));
        assert!(pipe_line("limit 20").contains("queue 20"));
        assert!(!pipe_line("limit 20").contains("queue 1000"));
    }

    #[test]
    fn a_whole_tc_command_and_tc_s_abbreviations_are_read() {
        let cfg = netem_to_config(
            "tc qdisc add dev eth0 root netem del 20ms lo 1% du 1% seed 7",
            3,
            "netem",
        )
        .unwrap();
        assert_eq!(cfg.seed, Some(7));
        let printed = print_ipfw(&cfg);
        assert!(
            printed.contains("pipe 3 config delay 20ms queue 1000 plr 0.01 duplicate 0.01"),
            "{printed}"
        );
        assert!(
            printed.contains("add 100 pipe 3 ip from any to any"),
            "{printed}"
        );
        // "d" is delay (tried before duplicate and distribution), "l" limit.
        assert!(pipe_line("d 5ms l 10").contains("delay 5ms"));
        assert!(pipe_line("d 5ms l 10").contains("queue 10"));
    }

    #[test]
    fn a_correlation_of_duplication_corruption_or_reordering_is_kept_and_zero_is_none() {
        // tc-netem(8)'s example of correlated reordering.
        let line = pipe_line("delay 10ms reorder 25% 50%");
        assert!(line.contains("delay 10ms reorder 0.25 0.5"), "{line}");
        for (netem, expect) in [
            ("duplicate 1% 0", "duplicate 0.01"),
            ("corrupt 1% 0%", "corrupt 0.01"),
            ("delay 10ms reorder 25% 0 gap 5", "reorder 0.25 gap 5"),
        ] {
            let line = pipe_line(netem);
            assert!(line.contains(expect), "{netem}: {line} lacks {expect}");
        }
        // The chain's parameters reach the pipe.
        let cfg = netem_to_config(
            "delay 10ms reorder 25% 50% duplicate 1% 20% corrupt 2% 10%",
            1,
            "netem",
        )
        .unwrap();
        let plan = cfg.validate(&crate::NoProfiles).unwrap();
        let pipe = crate::pipe_config(&plan.pipes[&1], plan.seed).unwrap();
        let reorder = pipe.netem_reorder.unwrap();
        assert_eq!((reorder.probability, reorder.correlation), (0.25, 0.5));
        assert_eq!(
            (pipe.queue.duplicate, pipe.queue.duplicate_correlation),
            (0.01, 0.2)
        );
        assert_eq!(
            (pipe.queue.corrupt, pipe.queue.corrupt_correlation),
            (0.02, 0.1)
        );
    }

    #[test]
    fn what_has_no_counterpart_is_refused_at_its_word() {
        let cases = [
            ("delay 10ms loss 1% 100%", 20, "under 100%"),
            ("loss 101% 25%", 6, "at most 100%"),
            ("loss 1% 25x", 9, "not a percentage"),
            (
                "duplicate 1% 100%",
                14,
                "duplicate correlation must be under 100%",
            ),
            (
                "corrupt 1% 100",
                12,
                "corrupt correlation must be under 100%",
            ),
            (
                "delay 10ms reorder 1% 150%",
                23,
                "reorder correlation must be under 100%",
            ),
            ("duplicate 1% 25x", 14, "not a percentage"),
            (
                "delay 10ms ecn",
                12,
                "'ecn' needs a loss model, as with tc-netem",
            ),
            ("loss 0% ecn", 9, "'ecn' needs a loss model"),
            (
                "loss 1% ecn ecn",
                13,
                "'ecn' is given twice (the first at column 9)",
            ),
            ("rate 50%", 6, "share of the device"),
            ("delay 10", 7, "has no unit"),
            (
                "delay 10ms 10ms distribution experimental",
                30,
                "not built in",
            ),
            ("delay 1500ns", 7, "finer than"),
            ("reorder 10%", 1, "needs a delay"),
            ("delay 1ms gap 3", 15, "without a reorder"),
            ("distribution normal", 14, "needs a delay and a jitter"),
            ("loss 1% loss 2%", 9, "second loss model"),
            ("loss bogus 1", 6, "unknown loss parameter"),
            ("jitter 5ms", 1, "unknown netem option"),
            ("delay", 1, "needs a time"),
            ("", 1, "no netem options"),
            ("loss 150%", 6, "out of range"),
            ("delay 100s", 7, "out of range"),
            ("rate 1bit", 6, "out of range"),
        ];
        for (netem, column, words) in cases {
            let e = error(netem);
            assert!(e.to_string().contains(words), "{netem}: {e}");
            assert_eq!(e.column, column, "{netem}: {e}");
            assert_eq!(e.line, 1, "{netem}: {e}");
            assert!(!e.to_string().contains('\n'), "{netem}: {e}");
        }
    }

    /// tc-netem's `ecn` marks what its loss model would drop: pspat's
    /// `lossecn` beside the loss it came with, in any order; without a
    /// loss model, or with `loss 0%`, it is refused at its word as tc
    /// refuses it.
    #[test]
    fn ecn_becomes_lossecn_beside_its_loss_model() {
        for (netem, expect) in [
            ("loss 1% ecn", "plr 0.01 lossecn"),
            ("ecn drop 1", "plr 0.01 lossecn"),
            ("loss random 1% e", "plr 0.01 lossecn"),
            ("loss 5% 25% ecn", "gemodel 0.0375 0.7125 1 0 lossecn"),
            (
                "loss state 0.01 ecn",
                "lossstate 0.0001 0.9999 0 1 0 lossecn",
            ),
            ("loss gemodel 1% 10% ecn", "gemodel 0.01 0.1 1 0 lossecn"),
            // tc takes a loss model at 0 (it only refuses `loss 0`).
            ("loss state 0 ecn", "lossstate 0 1 0 1 0 lossecn"),
            (
                "tc qdisc add dev eth0 root netem delay 10ms loss 1% ecn rate 10mbit",
                "plr 0.01 lossecn",
            ),
        ] {
            let line = pipe_line(netem);
            assert!(line.contains(expect), "{netem}: {line} lacks {expect}");
            assert!(!line.contains(" ecn"), "{netem}: {line}");
        }
        // docs/RECIPES.md's example.
        assert_eq!(
            pipe_line("delay 10ms loss 1% ecn"),
            "pipe 1 config delay 10ms queue 1000 plr 0.01 lossecn"
        );
        // The converted text validates, and the marking reaches the core.
        let cfg = netem_to_config("delay 10ms loss 1% ecn", 1, "netem").unwrap();
        let plan = cfg.validate(&crate::NoProfiles).unwrap();
        assert!(plan.pipes[&1].queue.lossecn && !plan.pipes[&1].queue.ecn);
        assert!(crate::queue_config(&plan.pipes[&1].queue).loss_ecn);
        assert_eq!(parse_ipfw(&print_ipfw(&cfg), "again").unwrap(), cfg);
        // Without a loss model: at `ecn`, in whatever column it is.
        for (netem, column) in [
            ("ecn", 1),
            ("delay 10ms ecn", 12),
            ("ecn delay 10ms", 1),
            ("loss 0% ecn", 9),
            ("loss 0 25% ecn", 12),
            ("loss random 0.0 ecn", 17),
            ("tc qdisc add dev eth0 root netem delay 5ms ecn", 44),
        ] {
            let e = error(netem);
            assert_eq!(
                (e.line, e.column, e.token.as_str(), e.kind),
                (1, column, "ecn", ErrorKind::MissingReference),
                "{netem}: {e}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "netem:1:{column}: 'ecn' needs a loss model, as with tc-netem: it marks the ECN-capable packets the loss would drop (example: loss 1% ecn; 'loss 0%' is none)"
                ),
                "{netem}"
            );
        }
    }

    #[test]
    fn the_result_parses_back_from_its_own_printing() {
        let cfg = netem_to_config(
            "delay 40ms 5ms 10% distribution paretonormal loss state 1% 30% 5% 40% 0.1% duplicate 0.1% corrupt 0.05% reorder 1% gap 3 rate 20mbit 14 limit 500 seed 9",
            2,
            "netem",
        )
        .unwrap();
        let again = parse_ipfw(&print_ipfw(&cfg), "again").unwrap();
        assert_eq!(again, cfg);
        assert_eq!(
            crate::parse_toml(&crate::print_toml(&cfg), "again.toml").unwrap(),
            cfg
        );
    }
}
