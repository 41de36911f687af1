//! The `ipfw(8)` line syntax: a tokenizer that keeps line and column, the
//! grammar of `pipe|queue|sched N config ...`, `add ...`, `table N add ...`
//! and the control commands, and the builder that folds statements into a
//! [`Config`]. The TOML syntax feeds its values through the same keyword
//! parsers ([`parse_object_keyword`], [`parse_rule_body`]), so both syntaxes
//! accept exactly the same values.
//!
//! Accepted beyond the grammar of the man page: a leading `ipfw` with `-q`/`-f`
//! flags, `#` comments, ipfw's `// comment` at the end of a line (read
//! and dropped), `;` between statements, `flowset` for `queue`, and
//! pspat's extensions `jitter`, `distribution`, `reorder` (a flag, or
//! tc-netem's `reorder P` with `gap N`), `correlation`, `slot`, `gemodel`,
//! `lossstate` (tc-netem's 4-state `loss state P13 [P31 [P32 [P23
//! [P14]]]]`), `duplicate`, `corrupt`,
//! `packetoverhead`, `cellsize`, `celloverhead`, `default allow|deny` and
//! `seed N`. `flush` lines are accepted
//! in a file only before the first configuration statement (a script's
//! preamble), where they change nothing.

use pspat_sched::AlgKind;

use crate::control::{ControlRequest, Deletable, Listing};
use crate::correlated_loss::{CorrelatedLoss, Percent};
use crate::error::{Error, ErrorKind, Pos};
use crate::mask::{FlowMask, MaskField, MASK_FIELDS};
use crate::model::{
    Action, Codel, Config, DefaultAction, Direction, Distribution, FqCodel, FqPie, GilbertElliott,
    InterfaceMatch, InterfaceRole, LinkParams, LossState, MatchProbability, Parent, Pie, Pipe,
    Proto, Queue, QueueParams, Red, Rule, Sched, Site, SiteKind, SlotInterval, SlotParams, Table,
    TableEntry, Target,
};
use crate::net::{parse_ports, AddrMatch};
use crate::units::{
    parse_i32, parse_probability, parse_rate, parse_real, parse_size, parse_time_us, parse_u32,
    parse_uint, QueueLimit, ValueError,
};

/// One whitespace-separated word and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tok {
    pub text: String,
    pub line: u32,
    pub column: u32,
}

impl Tok {
    pub fn pos(&self) -> Pos {
        Pos::new(self.line, self.column, self.text.clone())
    }
}

/// Splits text into statements of tokens: lines, cut at `#` and `;`; a
/// word that starts with `//` (ipfw's rule comment) ends the line too. The
/// comment is dropped (profile files take none); [`tokenize_keeping_comments`]
/// keeps it.
pub(crate) fn tokenize(text: &str) -> Vec<Vec<Tok>> {
    split_statements(text, false)
}

/// [`tokenize`], with a line's comment as the last token of the line's last
/// statement: a token whose text is the comment as written, from its `//`
/// to the end of the line or a `#`, at the column of the `//`. A comment on
/// a line without a statement is dropped.
pub(crate) fn tokenize_keeping_comments(text: &str) -> Vec<Vec<Tok>> {
    split_statements(text, true)
}

/// The longest rule comment, in bytes (ipfw's limit).
pub(crate) const COMMENT_MAX_BYTES: usize = 80;

/// The comment text of a rule as given (its words, or the TOML string),
/// normalised: words separated by one space. `Ok(None)` for no words.
///
/// # Errors
/// When the text holds `#` or a control character (it could not be
/// written back on an ipfw line) or is longer than [`COMMENT_MAX_BYTES`].
pub(crate) fn rule_comment(text: &str) -> Result<Option<String>, ValueError> {
    if text.contains(|c: char| c == '#' || c.is_control()) {
        return Err(ValueError::syntax(
            "a rule comment cannot hold '#', a line break or another control character",
        ));
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return Ok(None);
    }
    let comment = words.join(" ");
    if comment.len() > COMMENT_MAX_BYTES {
        return Err(ValueError::range(format!(
            "a rule comment is at most {COMMENT_MAX_BYTES} bytes, as ipfw's (this one has {})",
            comment.len()
        )));
    }
    Ok(Some(comment))
}

fn split_statements(text: &str, keep_comments: bool) -> Vec<Vec<Tok>> {
    let mut statements = Vec::new();
    for (line_index, line) in text.lines().enumerate() {
        let line_no = u32::try_from(line_index + 1).unwrap_or(u32::MAX);
        let mut current: Vec<Tok> = Vec::new();
        let mut word = String::new();
        let mut word_col = 0u32;
        let mut column = 0u32;
        let mut comment: Option<Tok> = None;
        for (at, c) in line.char_indices() {
            column = column.saturating_add(1);
            if c == '#' {
                break;
            }
            if word.is_empty() && line[at..].starts_with("//") {
                // A comment: the rest of the line (up to a `#`) is its
                // text, kept as written (an error quotes it so).
                let rest = line[at..].split('#').next().unwrap_or_default();
                comment = Some(Tok {
                    text: rest.trim_end().to_string(),
                    line: line_no,
                    column,
                });
                break;
            }
            if c.is_whitespace() || c == ';' {
                if !word.is_empty() {
                    current.push(Tok {
                        text: std::mem::take(&mut word),
                        line: line_no,
                        column: word_col,
                    });
                }
                if c == ';' && !current.is_empty() {
                    statements.push(std::mem::take(&mut current));
                }
                continue;
            }
            if word.is_empty() {
                word_col = column;
            }
            word.push(c);
        }
        if !word.is_empty() {
            current.push(Tok {
                text: word,
                line: line_no,
                column: word_col,
            });
        }
        if !current.is_empty() {
            if keep_comments {
                current.extend(comment);
            }
            statements.push(current);
        }
    }
    statements
}

/// A read position in one statement's tokens.
pub(crate) struct Cursor<'t> {
    toks: &'t [Tok],
    next: usize,
    pub file: &'t str,
}

impl<'t> Cursor<'t> {
    pub fn new(toks: &'t [Tok], file: &'t str) -> Self {
        Cursor {
            toks,
            next: 0,
            file,
        }
    }

    pub fn peek(&self) -> Option<&'t Tok> {
        self.toks.get(self.next)
    }

    /// The token `n` places after the next one (`peek_at(0)` is `peek`).
    pub fn peek_at(&self, n: usize) -> Option<&'t Tok> {
        self.toks.get(self.next.checked_add(n)?)
    }

    pub fn bump(&mut self) -> Option<&'t Tok> {
        let t = self.toks.get(self.next)?;
        self.next += 1;
        Some(t)
    }

    /// The value after `keyword`, or an error naming the keyword.
    pub fn value(&mut self, keyword: &Tok, example: &str) -> Result<&'t Tok, Error> {
        self.bump().ok_or_else(|| {
            keyword.pos().error(
                self.file,
                ErrorKind::Syntax,
                format!("'{}' needs a value (example: {example})", keyword.text),
            )
        })
    }

    pub fn error(&self, tok: &Tok, kind: ErrorKind, message: impl std::fmt::Display) -> Error {
        tok.pos().error(self.file, kind, message)
    }

    /// Converts a [`ValueError`] about `tok` into an [`Error`] at `tok`.
    pub fn check<T>(&self, tok: &Tok, r: Result<T, ValueError>) -> Result<T, Error> {
        r.map_err(|e| self.error(tok, e.kind, e.message))
    }
}

/// Positions of the values of one statement, by field name.
pub(crate) type Fields = Vec<(&'static str, Pos)>;

fn record(
    fields: &mut Fields,
    cur: &Cursor,
    field: &'static str,
    keyword: &Tok,
    value: Pos,
) -> Result<(), Error> {
    if fields.iter().any(|(f, _)| *f == field) {
        return Err(cur.error(
            keyword,
            ErrorKind::Duplicate,
            format!("'{}' is given twice in this statement", keyword.text),
        ));
    }
    fields.push((field, value));
    Ok(())
}

/// The three configurable objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ObjKind {
    Sched,
    Pipe,
    Queue,
}

impl ObjKind {
    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Sched => "sched",
            ObjKind::Pipe => "pipe",
            ObjKind::Queue => "queue",
        }
    }

    pub fn keywords(self) -> &'static str {
        match self {
            ObjKind::Sched => "type, bw, delay, burst, profile, jitter, distribution, correlation, reorder, gap, slot, packetoverhead, cellsize, celloverhead, buckets, mask",
            ObjKind::Pipe => "type, bw, delay, burst, profile, jitter, distribution, correlation, reorder, gap, slot, packetoverhead, cellsize, celloverhead, queue, plr, red, gred, codel, pie, droptail, ecn, buckets, noerror, gemodel, lossstate, lossecn, duplicate, corrupt, mask",
            ObjKind::Queue => "sched, pipe, weight, lmax, pri, queue, plr, red, gred, codel, pie, droptail, ecn, buckets, noerror, gemodel, lossstate, lossecn, duplicate, corrupt, mask",
        }
    }

    fn takes(self, keyword: &str) -> bool {
        let link = matches!(
            keyword,
            "bw" | "bandwidth"
                | "delay"
                | "burst"
                | "profile"
                | "jitter"
                | "distribution"
                | "reorder"
                | "gap"
                | "slot"
                | "correlation"
                | "packetoverhead"
                | "cellsize"
                | "celloverhead"
        );
        let queue = matches!(
            keyword,
            "queue"
                | "plr"
                | "red"
                | "gred"
                | "codel"
                | "pie"
                | "droptail"
                | "ecn"
                | "lossecn"
                | "noerror"
                | "gemodel"
                | "lossstate"
                | "duplicate"
                | "corrupt"
        );
        match self {
            ObjKind::Sched => {
                link || matches!(
                    keyword,
                    "type" | "buckets" | "mask" | "sched_mask" | "sched-mask"
                )
            }
            ObjKind::Pipe => {
                link || queue
                    || matches!(
                        keyword,
                        "type" | "buckets" | "mask" | "sched_mask" | "sched-mask"
                    )
            }
            ObjKind::Queue => {
                queue
                    || matches!(
                        keyword,
                        "sched"
                            | "pipe"
                            | "weight"
                            | "lmax"
                            | "pri"
                            | "priority"
                            | "buckets"
                            | "mask"
                            | "flow_mask"
                            | "flow-mask"
                    )
            }
        }
    }
}

/// Everything a sched, pipe or queue statement can set.
#[derive(Default)]
pub(crate) struct Draft {
    pub alg: Option<AlgKind>,
    pub fq_codel: Option<FqCodel>,
    pub fq_pie: Option<FqPie>,
    pub sched_buckets: Option<u32>,
    pub link: LinkParams,
    pub params: QueueParams,
    pub weight: Option<u32>,
    pub lmax: Option<u32>,
    pub pri: Option<u32>,
    pub parent: Option<Parent>,
    pub mask: FlowMask,
    pub fields: Fields,
}

fn parse_red(cur: &Cursor, keyword: &Tok, tok: &Tok) -> Result<Red, Error> {
    let parts: Vec<&str> = tok.text.split('/').collect();
    let bad = || {
        cur.error(
            tok,
            ErrorKind::Syntax,
            format!(
                "'{}' needs w_q/min_th/max_th/max_p (example: {} 0.002/30/80/0.1)",
                keyword.text, keyword.text
            ),
        )
    };
    if parts.len() != 4 {
        return Err(bad());
    }
    let w_q = parse_real(parts[0]).map_err(|_| bad())?;
    let min_th = parse_u32(parts[1]).map_err(|_| bad())?;
    let max_th = parse_u32(parts[2]).map_err(|_| bad())?;
    let max_p = parse_real(parts[3]).map_err(|_| bad())?;
    Ok(Red {
        gentle: keyword.text == "gred",
        w_q,
        min_th,
        max_th,
        max_p,
    })
}

/// Parses the mask fields after `mask`, up to the next keyword of `kind`.
pub(crate) fn parse_mask(
    cur: &mut Cursor,
    kind: ObjKind,
    keyword: &Tok,
    mask: &mut FlowMask,
) -> Result<(), Error> {
    let mut count = 0;
    while let Some(tok) = cur.peek() {
        let Some(field) = MaskField::from_name(&tok.text) else {
            if count > 0 && kind.takes(&tok.text) {
                break;
            }
            let also = if count > 0 {
                format!("; or a {} keyword: {}", kind.name(), kind.keywords())
            } else {
                String::new()
            };
            return Err(cur.error(
                tok,
                ErrorKind::UnknownMaskField,
                format!(
                    "unknown mask field '{}' (allowed: {MASK_FIELDS}{also})",
                    tok.text
                ),
            ));
        };
        cur.bump();
        count += 1;
        if field != MaskField::All {
            let value = cur.value(tok, "0xffffffff")?;
            cur.check(value, mask.set(field, &value.text))?;
        } else {
            *mask = FlowMask::all();
        }
    }
    if count == 0 {
        return Err(cur.error(
            keyword,
            ErrorKind::Syntax,
            format!(
                "'{}' needs at least one field ({MASK_FIELDS})",
                keyword.text
            ),
        ));
    }
    Ok(())
}

/// `text` (the part of `tok` from character `skip` on) as an address
/// match; an error inside a list names the offending entry at its column.
fn parse_addr(cur: &Cursor, tok: &Tok, text: &str, skip: u32) -> Result<AddrMatch, Error> {
    AddrMatch::parse_located(text).map_err(|e| {
        let offset = u32::try_from(e.offset).unwrap_or(u32::MAX);
        let entry = Tok {
            text: e.token,
            line: tok.line,
            column: tok.column.saturating_add(skip).saturating_add(offset),
        };
        cur.error(&entry, e.error.kind, e.error.message)
    })
}

/// ipfw's or-block of addresses, `{ 10.0.0.1 or 10.0.0.0/24 or ... }`,
/// from its opening token `open` (the braces may be words of their own or
/// glued to the first and last address): the address list of every entry
/// (an entry may itself be a list), printed back as that list. Only
/// addresses and prefixes: `any`, `me` and tables have no place in it.
fn parse_addr_or_block(cur: &mut Cursor, open: &Tok) -> Result<AddrMatch, Error> {
    const EXAMPLE: &str = "{ 10.0.0.1 or 10.0.0.0/24 }";
    let mut prefixes = Vec::new();
    // The entry glued to the opening brace, if any.
    let mut pending: Option<(&Tok, u32)> = (open.text.len() > 1).then_some((open, 1));
    let unclosed = |cur: &Cursor| {
        cur.error(
            open,
            ErrorKind::Syntax,
            format!("the or-block opened here is not closed with '}}' (example: {EXAMPLE})"),
        )
    };
    let mut after_or = false;
    loop {
        let (tok, skip) = match pending.take() {
            Some(p) => p,
            None => (cur.bump().ok_or_else(|| unclosed(cur))?, 0),
        };
        let body = &tok.text[skip as usize..];
        let (entry, closed) = match body.strip_suffix('}') {
            Some(e) => (e, true),
            None => (body, false),
        };
        if entry == "}" || (entry.is_empty() && (!closed || after_or)) || entry == "or" {
            return Err(cur.error(
                tok,
                ErrorKind::Syntax,
                format!(
                    "an address is missing before '{}' in the or-block (example: {EXAMPLE})",
                    tok.text
                ),
            ));
        }
        if !entry.is_empty() {
            match parse_addr(cur, tok, entry, skip)? {
                AddrMatch::Prefix(p) => prefixes.push(p),
                AddrMatch::List(l) => prefixes.extend(l.prefixes().iter().copied()),
                _ => {
                    return Err(cur.error(
                        tok,
                        ErrorKind::Syntax,
                        format!("'{entry}' cannot be in an or-block (entries are addresses or prefixes, example: {EXAMPLE})"),
                    ))
                }
            }
        } else if prefixes.is_empty() {
            return Err(cur.error(
                tok,
                ErrorKind::Syntax,
                format!("an empty or-block (example: {EXAMPLE})"),
            ));
        }
        if closed {
            break;
        }
        let next = cur.bump().ok_or_else(|| unclosed(cur))?;
        match next.text.as_str() {
            "or" => after_or = true,
            "}" => break,
            _ => {
                return Err(cur.error(
                    next,
                    ErrorKind::Syntax,
                    format!(
                        "expected 'or' or '}}' in the or-block, found '{}' (example: {EXAMPLE})",
                        next.text
                    ),
                ))
            }
        }
    }
    AddrMatch::any_of(prefixes).map_err(|e| cur.error(open, ErrorKind::OutOfRange, e))
}

/// tc-netem's `slot MIN [MAX] [packets N] [bytes N]` or `slot distribution
/// D DELAY JITTER [packets N] [bytes N]`, after the keyword. Records the
/// first value as `slot`, and `slot.max`, `slot.jitter`, `slot.packets`,
/// `slot.bytes` where given, for the checks' messages.
fn parse_slot(cur: &mut Cursor, kw: &Tok, fields: &mut Fields) -> Result<SlotParams, Error> {
    const EXAMPLE: &str = "slot 800us 1ms packets 32, or slot distribution normal 1ms 200us";
    let first = cur.value(kw, EXAMPLE)?;
    let interval = if first.text == "distribution" {
        let d = cur.value(first, "slot distribution normal 1ms 200us")?;
        record(fields, cur, "slot", kw, d.pos())?;
        let distribution = Distribution::from_name(&d.text).ok_or_else(|| {
            cur.error(
                d,
                ErrorKind::UnknownKeyword,
                format!(
                    "unknown distribution '{}' (allowed: {})",
                    d.text,
                    Distribution::names()
                ),
            )
        })?;
        let delay = cur.value(d, "slot distribution normal 1ms 200us")?;
        let delay_us = cur.check(delay, parse_time_us(&delay.text))?;
        let jitter = cur.value(delay, "slot distribution normal 1ms 200us")?;
        let jitter_us = cur.check(jitter, parse_time_us(&jitter.text))?;
        record(fields, cur, "slot.jitter", kw, jitter.pos())?;
        SlotInterval::Distribution {
            distribution,
            delay_us,
            jitter_us,
        }
    } else {
        let min_us = cur.check(first, parse_time_us(&first.text))?;
        record(fields, cur, "slot", kw, first.pos())?;
        let max_us = match cur.peek() {
            Some(t) if t.text.starts_with(|c: char| c.is_ascii_digit()) => {
                let t = cur.bump().unwrap_or(first);
                record(fields, cur, "slot.max", kw, t.pos())?;
                cur.check(t, parse_time_us(&t.text))?
            }
            _ => min_us,
        };
        SlotInterval::Uniform { min_us, max_us }
    };
    let mut slot = SlotParams {
        interval,
        packets: None,
        bytes: None,
    };
    while let Some(t) = cur.peek() {
        match t.text.as_str() {
            "packets" => {
                let t = cur.bump().unwrap_or(first);
                let v = cur.value(t, "32")?;
                slot.packets = Some(number(cur, v)?);
                record(fields, cur, "slot.packets", t, v.pos())?;
            }
            "bytes" => {
                let t = cur.bump().unwrap_or(first);
                let v = cur.value(t, "64KB")?;
                slot.bytes = Some(cur.check(v, parse_size(&v.text))?.0);
                record(fields, cur, "slot.bytes", t, v.pos())?;
            }
            _ => break,
        }
    }
    Ok(slot)
}

/// tc-netem writes a correlation as a second number after some values
/// (`loss 1% 25%`, `delay 100ms 10ms 25%`); where pspat's word takes none
/// (`plr`, `jitter`), a number right after `what`'s value is refused with
/// `hint`, rather than as an unknown keyword.
fn no_netem_correlation(cur: &mut Cursor, what: &str, hint: &str) -> Result<(), Error> {
    match cur.peek() {
        Some(t) if t.text.starts_with(|c: char| c.is_ascii_digit() || c == '.') => {
            let t = cur.bump().unwrap_or(t);
            Err(cur.error(
                t,
                ErrorKind::Syntax,
                format!(
                    "a second value after '{what}' (tc-netem's correlation) is not taken: {hint}"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The optional second value of `duplicate P [C]`, `corrupt P [C]` and
/// `reorder P [C]`: the correlation of successive decisions (tc-netem's
/// word order), taken when the next word looks like a number and recorded
/// as `field` (its range, below 1, is the validation's).
fn chain_correlation(
    cur: &mut Cursor,
    kw: &Tok,
    field: &'static str,
    fields: &mut Fields,
) -> Result<Option<f64>, Error> {
    let Some(t) = next_number(cur) else {
        return Ok(None);
    };
    let c = probability(cur, t)?;
    record(fields, cur, field, kw, t.pos())?;
    Ok(Some(c))
}

/// What to write instead of `plr P C` (`plr`'s value `loss`, then the
/// token after it): the gemodel of [`CorrelatedLoss`] when both read as
/// probabilities, else the loss models in general.
fn correlated_plr_hint(loss: &Tok, correlation: Option<&Tok>) -> String {
    let chain = Percent::probability(&loss.text)
        .zip(correlation.and_then(|c| Percent::probability(&c.text)));
    match chain.map(|(p, c)| CorrelatedLoss::new(p, c)) {
        Some(Ok(CorrelatedLoss::Chain { to_bad, to_good })) => format!(
            "for this loss rate with that correlation between successive packets, write 'gemodel {} {}' instead of plr (docs/RECIPES.md, From tc-netem)",
            to_bad.fraction(),
            to_good.fraction()
        ),
        _ => "for losses in bursts use 'gemodel p r 1-h 1-k' or 'lossstate p13 p31 p32 p23 p14'"
            .to_string(),
    }
}

fn probability(cur: &Cursor, tok: &Tok) -> Result<f64, Error> {
    cur.check(tok, parse_probability(&tok.text))
}

/// The next word if it looks like a number (an optional value of
/// `gemodel` or `lossstate`), taken.
fn next_number<'t>(cur: &mut Cursor<'t>) -> Option<&'t Tok> {
    let t = cur.peek().filter(|t| {
        t.text
            .starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '-')
    })?;
    cur.bump();
    Some(t)
}

/// `lossstate P13 [P31 [P32 [P23 [P14]]]]`: the values after `p13` are
/// taken while the next word looks like a number; those not given take
/// tc-netem's defaults ([`LossState::with_defaults`]).
fn parse_loss_state(cur: &mut Cursor, kw: &Tok, fields: &mut Fields) -> Result<LossState, Error> {
    const NAMES: [&str; 5] = [
        "lossstate.p13",
        "lossstate.p31",
        "lossstate.p32",
        "lossstate.p23",
        "lossstate.p14",
    ];
    // The keyword's own place: where a clash with `gemodel` is told.
    record(fields, cur, "lossstate", kw, kw.pos())?;
    let first = cur.value(kw, "0.01 0.3 0 1 0 (p13 [p31 [p32 [p23 [p14]]]])")?;
    let p13 = probability(cur, first)?;
    record(fields, cur, NAMES[0], kw, first.pos())?;
    let m = LossState::with_defaults(p13);
    let mut values = [m.p13, m.p31, m.p32, m.p23, m.p14];
    for (slot, name) in values.iter_mut().zip(NAMES).skip(1) {
        let Some(v) = next_number(cur) else {
            break;
        };
        *slot = probability(cur, v)?;
        record(fields, cur, name, kw, v.pos())?;
    }
    Ok(LossState {
        p13: values[0],
        p31: values[1],
        p32: values[2],
        p23: values[3],
        p14: values[4],
    })
}

/// A queue has one AQM: `red`/`gred`, `codel`, `pie` or `droptail`
/// (none). One of them after another in the same statement (`kw`, the
/// second) is refused at the second, as two drop policies. Two of RED's
/// words are told by `record` (they share the field `red`), two `codel`
/// or two `pie` too.
fn one_aqm(cur: &Cursor, kw: &Tok, d: &Draft) -> Result<(), Error> {
    let has = |field: &str| d.fields.iter().any(|(f, _)| *f == field);
    let red_word = || match d.params.red {
        Some(r) if r.gentle => "gred",
        Some(_) => "red",
        None => "droptail",
    };
    let group = |word: &str| match word {
        "codel" | "pie" => word.to_string(),
        _ => "red".to_string(),
    };
    let mine = group(&kw.text);
    let first = ["red", "codel", "pie"]
        .into_iter()
        .filter(|g| *g != mine && has(g))
        .map(|g| if g == "red" { red_word() } else { g })
        .next();
    let Some(first) = first else {
        return Ok(());
    };
    Err(cur.error(
        kw,
        ErrorKind::Duplicate,
        format!(
            "'{}' after '{first}' in the same statement: a queue has one AQM (red, gred, codel, pie, or droptail for none); give one of them",
            kw.text
        ),
    ))
}

/// Whose CoDel parameters are read: a queue's `codel` or a sched's `type
/// fq_codel`. Says which fields they are recorded as and how messages
/// name their owner.
#[derive(Clone, Copy)]
enum CodelOf {
    Queue,
    FqCodel,
}

impl CodelOf {
    /// The fields of `target`, `interval` and `ecn`/`noecn`.
    fn fields(self) -> [&'static str; 3] {
        match self {
            CodelOf::Queue => ["codel.target", "codel.interval", "codel.ecn"],
            CodelOf::FqCodel => ["fq_codel.target", "fq_codel.interval", "fq_codel.ecn"],
        }
    }

    fn name(self) -> &'static str {
        match self {
            CodelOf::Queue => "CoDel",
            CodelOf::FqCodel => "fq_codel",
        }
    }
}

/// One of CoDel's parameters at `t`, the next token, taken with its value
/// into `codel`: `target TIME`, `interval TIME` (times as `delay`), `ecn`
/// or `noecn`, each at most once and not both of `ecn` and `noecn`.
/// `false`, with nothing taken, when `t` is none of them. Records
/// `target` and `interval` at their values, `ecn` at its word.
fn codel_param<'t>(
    cur: &mut Cursor<'t>,
    t: &'t Tok,
    of: CodelOf,
    fields: &mut Fields,
    codel: &mut Codel,
) -> Result<bool, Error> {
    let [target, interval, ecn] = of.fields();
    match t.text.as_str() {
        "target" | "interval" => {
            cur.bump();
            let (field, example, slot) = if t.text == "target" {
                (target, "5ms", &mut codel.target_us)
            } else {
                (interval, "100ms", &mut codel.interval_us)
            };
            let v = cur.value(t, example)?;
            let us = cur.check(v, parse_time_us(&v.text))?;
            record(fields, cur, field, t, v.pos())?;
            *slot = us;
        }
        "ecn" | "noecn" => {
            cur.bump();
            let earlier = fields.iter().find(|(f, _)| *f == ecn);
            if let Some((_, first)) = earlier.filter(|(_, p)| p.token != t.text) {
                return Err(cur.error(
                    t,
                    ErrorKind::Duplicate,
                    format!(
                        "'{}' after '{}' (column {}): {} takes one of ecn and noecn",
                        t.text,
                        first.token,
                        first.column,
                        of.name()
                    ),
                ));
            }
            record(fields, cur, ecn, t, t.pos())?;
            codel.ecn = t.text == "ecn";
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// dummynet's `codel [target TIME] [interval TIME] [ecn | noecn]`, after
/// the keyword: its parameters follow it in any order, each at most once,
/// and the first other word ends them (an `ecn` after that word is RED's
/// flag, not CoDel's). Those not given take dummynet's defaults
/// ([`Codel::default`]); the ranges are the validation's. Records `codel`
/// at the keyword and `codel.target`, `codel.interval` at their values,
/// `codel.ecn` at `ecn`/`noecn`.
fn parse_codel(cur: &mut Cursor, kw: &Tok, fields: &mut Fields) -> Result<Codel, Error> {
    record(fields, cur, "codel", kw, kw.pos())?;
    let mut codel = Codel::default();
    while let Some(t) = cur.peek() {
        if !codel_param(cur, t, CodelOf::Queue, fields, &mut codel)? {
            break;
        }
    }
    Ok(codel)
}

/// Whose PIE parameters are read: a queue's `pie` or a sched's `type
/// fq_pie`. Says which fields they are recorded as and how messages name
/// their owner.
#[derive(Clone, Copy)]
pub(crate) enum PieOf {
    Queue,
    FqPie,
}

/// PIE's two-word switches: the word that turns each on, the one that
/// turns it off (dummynet's `dre`/`ts` pick the delay estimator).
const PIE_SWITCHES: [(&str, &str); 5] = [
    ("ecn", "noecn"),
    ("capdrop", "nocapdrop"),
    ("derand", "noderand"),
    ("onoff", "noonoff"),
    ("dre", "ts"),
];

impl PieOf {
    /// The fields of `target`, `tupdate`, `max_burst`, `alpha`, `beta`,
    /// `max_ecnth`, then the switches in [`PIE_SWITCHES`]' order.
    fn fields(self) -> [&'static str; 11] {
        match self {
            PieOf::Queue => [
                "pie.target",
                "pie.tupdate",
                "pie.max_burst",
                "pie.alpha",
                "pie.beta",
                "pie.max_ecnth",
                "pie.ecn",
                "pie.capdrop",
                "pie.derand",
                "pie.onoff",
                "pie.delay",
            ],
            PieOf::FqPie => [
                "fq_pie.target",
                "fq_pie.tupdate",
                "fq_pie.max_burst",
                "fq_pie.alpha",
                "fq_pie.beta",
                "fq_pie.max_ecnth",
                "fq_pie.ecn",
                "fq_pie.capdrop",
                "fq_pie.derand",
                "fq_pie.onoff",
                "fq_pie.delay",
            ],
        }
    }

    /// The fields of the six valued parameters (`target`, `tupdate`,
    /// `max_burst`, `alpha`, `beta`, `max_ecnth`), which validation checks
    /// for their ranges.
    pub(crate) fn valued_fields(self) -> [&'static str; 6] {
        let f = self.fields();
        [f[0], f[1], f[2], f[3], f[4], f[5]]
    }

    fn name(self) -> &'static str {
        match self {
            PieOf::Queue => "PIE",
            PieOf::FqPie => "fq_pie",
        }
    }
}

/// One of PIE's parameters at `t`, the next token, taken with its value
/// into `pie`: `target`, `tupdate` and `max_burst` with a time (as
/// `delay`), `alpha`, `beta` and `max_ecnth` with a number, and the
/// switches of [`PIE_SWITCHES`], each at most once and one word of each
/// pair. `false`, with nothing taken, when `t` is none of them. Records
/// each at its value (a switch at its word); the ranges are the
/// validation's.
fn pie_param<'t>(
    cur: &mut Cursor<'t>,
    t: &'t Tok,
    of: PieOf,
    fields: &mut Fields,
    pie: &mut Pie,
) -> Result<bool, Error> {
    let names = of.fields();
    let word = t.text.as_str();
    let time = match word {
        "target" => Some((names[0], "15ms", &mut pie.target_us)),
        "tupdate" => Some((names[1], "15ms", &mut pie.tupdate_us)),
        "max_burst" => Some((names[2], "150ms", &mut pie.max_burst_us)),
        _ => None,
    };
    if let Some((field, example, slot)) = time {
        cur.bump();
        let v = cur.value(t, example)?;
        let us = cur.check(v, parse_time_us(&v.text))?;
        record(fields, cur, field, t, v.pos())?;
        *slot = us;
        return Ok(true);
    }
    let real = match word {
        "alpha" => Some((names[3], "0.125", &mut pie.alpha)),
        "beta" => Some((names[4], "1.25", &mut pie.beta)),
        "max_ecnth" => Some((names[5], "0.1", &mut pie.max_ecnth)),
        _ => None,
    };
    if let Some((field, example, slot)) = real {
        cur.bump();
        let v = cur.value(t, example)?;
        let x = cur.check(v, parse_real(&v.text))?;
        record(fields, cur, field, t, v.pos())?;
        *slot = x;
        return Ok(true);
    }
    let Some(i) = PIE_SWITCHES
        .iter()
        .position(|(on, off)| word == *on || word == *off)
    else {
        return Ok(false);
    };
    cur.bump();
    let (on, off) = PIE_SWITCHES[i];
    let field = names[6 + i];
    let earlier = fields.iter().find(|(f, _)| *f == field);
    if let Some((_, first)) = earlier.filter(|(_, p)| p.token != t.text) {
        return Err(cur.error(
            t,
            ErrorKind::Duplicate,
            format!(
                "'{}' after '{}' (column {}): {} takes one of {on} and {off}",
                t.text,
                first.token,
                first.column,
                of.name()
            ),
        ));
    }
    record(fields, cur, field, t, t.pos())?;
    let value = word == on;
    match i {
        0 => pie.ecn = value,
        1 => pie.capdrop = value,
        2 => pie.derand = value,
        3 => pie.onoff = value,
        _ => pie.dre = value,
    }
    Ok(true)
}

/// dummynet's `pie [target TIME] [tupdate TIME] [alpha A] [beta B]
/// [max_burst TIME] [max_ecnth P] [ecn|noecn] [capdrop|nocapdrop]
/// [derand|noderand] [onoff|noonoff] [dre|ts]`, after the keyword: its
/// parameters follow it in any order, each at most once, and the first
/// other word ends them. Those not given take dummynet's defaults
/// ([`Pie::default`]). Records `pie` at the keyword and each parameter
/// as [`pie_param`] does.
fn parse_pie(cur: &mut Cursor, kw: &Tok, fields: &mut Fields) -> Result<Pie, Error> {
    record(fields, cur, "pie", kw, kw.pos())?;
    let mut pie = Pie::default();
    while let Some(t) = cur.peek() {
        if !pie_param(cur, t, PieOf::Queue, fields, &mut pie)? {
            break;
        }
    }
    Ok(pie)
}

/// An example of `type fq_pie` with its parameters, for messages.
const FQ_PIE_EXAMPLE: &str =
    "sched 1 config type fq_pie target 15ms quantum 1514 limit 10240 flows 1024 bw 10Mbit/s";

/// dummynet's `type fq_pie` parameters, after the type's name: PIE's
/// ([`pie_param`]) and `quantum BYTES`, `limit PACKETS`, `flows N`, in any
/// order, each at most once, ended by the first other word. Those not
/// given take dummynet's defaults ([`FqPie::default`]: ECN on, `ts`).
fn parse_fq_pie(cur: &mut Cursor, fields: &mut Fields) -> Result<FqPie, Error> {
    let mut f = FqPie::default();
    while let Some(t) = cur.peek() {
        if pie_param(cur, t, PieOf::FqPie, fields, &mut f.pie)? {
            continue;
        }
        let names = ["fq_pie.quantum", "fq_pie.limit", "fq_pie.flows"];
        let slots = [&mut f.quantum, &mut f.limit, &mut f.flows];
        if !fq_param(cur, t, names, fields, slots)? {
            break;
        }
    }
    Ok(f)
}

/// The flow-queueing part of `type fq_codel`'s and `type fq_pie`'s
/// parameters at `t`: `quantum BYTES`, `limit PACKETS` or `flows N`, read
/// into its slot of `slots` and recorded at its value as its name of
/// `names` (in that order). `false` for another word, left unread.
fn fq_param<'t>(
    cur: &mut Cursor<'t>,
    t: &'t Tok,
    names: [&'static str; 3],
    fields: &mut Fields,
    slots: [&mut u32; 3],
) -> Result<bool, Error> {
    let (i, example) = match t.text.as_str() {
        "quantum" => (0, "1514"),
        "limit" => (1, "10240"),
        "flows" => (2, "1024"),
        _ => return Ok(false),
    };
    cur.bump();
    let v = cur.value(t, example)?;
    let n = number(cur, v)?;
    record(fields, cur, names[i], t, v.pos())?;
    *slots[i] = n;
    Ok(true)
}

/// What to say of a word of PIE (one of its parameters that CoDel does
/// not share, or `fq_pie`) where statement `d` of `kind` does not take it.
/// `None` for other words.
fn pie_word_elsewhere(kind: ObjKind, word: &str, d: &Draft) -> Option<String> {
    let typed = kind != ObjKind::Queue;
    let obj = kind.name();
    let pie_word = matches!(
        word,
        "tupdate"
            | "alpha"
            | "beta"
            | "max_burst"
            | "max_ecnth"
            | "capdrop"
            | "nocapdrop"
            | "derand"
            | "noderand"
            | "onoff"
            | "noonoff"
            | "dre"
            | "ts"
    );
    if word == "fq_pie" {
        return Some(if typed {
            format!("fq_pie is a scheduler type: write 'type fq_pie' (example: {FQ_PIE_EXAMPLE})")
        } else {
            format!(
                "fq_pie is a sched's or pipe's type, not a {obj} keyword: write 'type fq_pie' on the sched line and attach flowsets to it with 'queue N config sched M' (example: {FQ_PIE_EXAMPLE})"
            )
        });
    }
    let fq_pie_parameter = typed && d.fq_pie.is_some() && fq_codel_parameter(word);
    if !(pie_word || fq_pie_parameter) {
        return None;
    }
    Some(if d.fq_pie.is_some() {
        format!(
            "'{word}' after another keyword: the parameters of fq_pie go right after 'type fq_pie', before the {obj}'s other keywords (example: {FQ_PIE_EXAMPLE})"
        )
    } else if kind != ObjKind::Sched {
        format!(
            "'{word}' is a parameter of PIE: write it right after 'pie' (pipe 1 config pie target 15ms {word} ...)"
        )
    } else {
        format!(
            "'{word}' is a parameter of PIE: on a sched line it goes right after 'type fq_pie' (example: {FQ_PIE_EXAMPLE})"
        )
    })
}

/// Whether `word` is a parameter of `type fq_codel` (and of `fq_pie`).
fn fq_codel_parameter(word: &str) -> bool {
    matches!(
        word,
        "quantum" | "limit" | "flows" | "target" | "interval" | "ecn" | "noecn"
    )
}

/// An example of `type fq_codel` with its parameters, for messages.
const FQ_CODEL_EXAMPLE: &str =
    "sched 1 config type fq_codel target 5ms quantum 1514 limit 10240 flows 1024 bw 10Mbit/s";

/// dummynet's `type fq_codel` parameters, after the type's name:
/// `target TIME`, `interval TIME`, `ecn` | `noecn`, `quantum BYTES`,
/// `limit PACKETS` and `flows N`, in any order, each at most once, ended
/// by the first other word. Those not given take dummynet's defaults
/// ([`FqCodel::default`]: ECN on); the ranges are the validation's.
/// Records `fq_codel.target`, `fq_codel.interval`, `fq_codel.quantum`,
/// `fq_codel.limit` and `fq_codel.flows` at their values, `fq_codel.ecn`
/// at `ecn`/`noecn`.
fn parse_fq_codel(cur: &mut Cursor, fields: &mut Fields) -> Result<FqCodel, Error> {
    let mut f = FqCodel::default();
    while let Some(t) = cur.peek() {
        if codel_param(cur, t, CodelOf::FqCodel, fields, &mut f.codel)? {
            continue;
        }
        let names = ["fq_codel.quantum", "fq_codel.limit", "fq_codel.flows"];
        let slots = [&mut f.quantum, &mut f.limit, &mut f.flows];
        if !fq_param(cur, t, names, fields, slots)? {
            break;
        }
    }
    Ok(f)
}

/// What to say of a word of `type fq_codel` (one of its parameters, or
/// the type's name) where statement `d` of `kind` does not take it: on a
/// queue line, on a sched or pipe line without `type fq_codel`, or after
/// another keyword ended fq_codel's parameters. `None` for other words.
fn fq_codel_word_elsewhere(kind: ObjKind, word: &str, d: &Draft) -> Option<String> {
    let typed = kind != ObjKind::Queue;
    let obj = kind.name();
    let parameter = match word {
        "quantum" | "limit" | "flows" => true,
        "target" | "interval" | "ecn" | "noecn" if typed => true,
        "fq_codel" => false,
        _ => return None,
    };
    Some(if !parameter {
        if typed {
            format!(
                "fq_codel is a scheduler type: write 'type fq_codel' (example: {FQ_CODEL_EXAMPLE})"
            )
        } else {
            format!(
                "fq_codel is a sched's or pipe's type, not a {obj} keyword: write 'type fq_codel' on the sched line and attach flowsets to it with 'queue N config sched M' (example: {FQ_CODEL_EXAMPLE})"
            )
        }
    } else if !typed {
        let size = if word == "limit" {
            "; a queue's own size is 'queue N'"
        } else {
            ""
        };
        format!(
            "'{word}' is a parameter of the fq_codel sched type, not a {obj} keyword: write it on the sched line right after 'type fq_codel' (example: {FQ_CODEL_EXAMPLE}){size}"
        )
    } else if d.fq_codel.is_some() {
        format!(
            "'{word}' after another keyword: the parameters of fq_codel go right after 'type fq_codel', before the {obj}'s other keywords (example: {FQ_CODEL_EXAMPLE})"
        )
    } else {
        let other = match d.alg {
            Some(a) => format!("; this {obj}'s type is {a}"),
            None => String::new(),
        };
        let own = match word {
            "target" | "interval" | "noecn" if kind == ObjKind::Pipe => {
                "; for the pipe's own queue it goes right after 'codel'"
            }
            "limit" if kind == ObjKind::Pipe => "; a pipe's own queue size is 'queue N'",
            _ => "",
        };
        format!(
            "'{word}' is a parameter of the fq_codel sched type and goes right after 'type fq_codel' (example: {FQ_CODEL_EXAMPLE}){other}{own}"
        )
    })
}

/// Parses one keyword of a sched, pipe or queue body, with its values.
pub(crate) fn parse_object_keyword(
    cur: &mut Cursor,
    kind: ObjKind,
    d: &mut Draft,
) -> Result<(), Error> {
    let Some(kw) = cur.bump() else { return Ok(()) };
    let word = kw.text.as_str();
    if !kind.takes(word) {
        if let Some(message) = pie_word_elsewhere(kind, word, d) {
            return Err(cur.error(kw, ErrorKind::UnknownKeyword, message));
        }
        if let Some(message) = fq_codel_word_elsewhere(kind, word, d) {
            return Err(cur.error(kw, ErrorKind::UnknownKeyword, message));
        }
        return Err(cur.error(
            kw,
            ErrorKind::UnknownKeyword,
            format!(
                "unknown {} keyword '{word}' (allowed: {})",
                kind.name(),
                kind.keywords()
            ),
        ));
    }
    match word {
        "bw" | "bandwidth" => {
            let v = cur.value(kw, "10Mbit/s")?;
            d.link.bw = Some(cur.check(v, parse_rate(&v.text))?);
            record(&mut d.fields, cur, "bw", kw, v.pos())?;
        }
        "delay" => {
            let v = cur.value(kw, "20ms")?;
            d.link.delay_us = Some(cur.check(v, parse_time_us(&v.text))?);
            record(&mut d.fields, cur, "delay", kw, v.pos())?;
        }
        "jitter" => {
            let v = cur.value(kw, "5ms")?;
            d.link.jitter_us = Some(cur.check(v, parse_time_us(&v.text))?);
            record(&mut d.fields, cur, "jitter", kw, v.pos())?;
            no_netem_correlation(
                cur,
                "jitter",
                "write it as 'correlation 25%' (example: delay 100ms jitter 10ms correlation 25%)",
            )?;
        }
        "distribution" => {
            let v = cur.value(kw, "normal")?;
            d.link.distribution = Some(Distribution::from_name(&v.text).ok_or_else(|| {
                cur.error(
                    v,
                    ErrorKind::UnknownKeyword,
                    format!(
                        "unknown distribution '{}' (allowed: {})",
                        v.text,
                        Distribution::names()
                    ),
                )
            })?);
            record(&mut d.fields, cur, "distribution", kw, v.pos())?;
        }
        "correlation" => {
            let v = cur.value(kw, "25% or 0.25")?;
            d.link.jitter_correlation = Some(probability(cur, v)?);
            record(&mut d.fields, cur, "correlation", kw, v.pos())?;
        }
        "reorder" => {
            d.link.reorder = true;
            // `reorder` alone lets jitter reorder; `reorder P` (a number
            // or a percentage, as tc-netem writes it) sends packets ahead.
            let value = cur.peek().filter(|t| {
                t.text
                    .starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '-')
            });
            match value {
                Some(v) => {
                    cur.bump();
                    d.link.reorder_probability = Some(probability(cur, v)?);
                    record(&mut d.fields, cur, "reorder", kw, v.pos())?;
                    d.link.reorder_correlation =
                        chain_correlation(cur, kw, "reorder.correlation", &mut d.fields)?;
                }
                None => record(&mut d.fields, cur, "reorder", kw, kw.pos())?,
            }
        }
        "gap" => {
            let v = cur.value(kw, "5")?;
            d.link.reorder_gap = Some(number(cur, v)?);
            record(&mut d.fields, cur, "gap", kw, v.pos())?;
        }
        "slot" => d.link.slot = Some(parse_slot(cur, kw, &mut d.fields)?),
        "burst" => {
            let v = cur.value(kw, "64KB")?;
            d.link.burst = Some(cur.check(v, parse_size(&v.text))?.0);
            record(&mut d.fields, cur, "burst", kw, v.pos())?;
        }
        "packetoverhead" => {
            let v = cur.value(kw, "24")?;
            d.link.packet_overhead = Some(cur.check(v, parse_i32(&v.text))?);
            record(&mut d.fields, cur, "packetoverhead", kw, v.pos())?;
        }
        "cellsize" => {
            let v = cur.value(kw, "48")?;
            d.link.cell_size = Some(number(cur, v)?);
            record(&mut d.fields, cur, "cellsize", kw, v.pos())?;
        }
        "celloverhead" => {
            let v = cur.value(kw, "5")?;
            d.link.cell_overhead = Some(number(cur, v)?);
            record(&mut d.fields, cur, "celloverhead", kw, v.pos())?;
        }
        "profile" => {
            let v = cur.value(kw, "profile.txt")?;
            d.link.profile = Some(v.text.clone());
            record(&mut d.fields, cur, "profile", kw, v.pos())?;
        }
        "queue" => {
            let v = cur.value(kw, "50 or 64KB")?;
            d.params.limit = Some(cur.check(v, QueueLimit::parse(&v.text))?);
            record(&mut d.fields, cur, "queue", kw, v.pos())?;
        }
        "plr" => {
            let v = cur.value(kw, "0.01")?;
            d.params.plr = Some(probability(cur, v)?);
            record(&mut d.fields, cur, "plr", kw, v.pos())?;
            no_netem_correlation(cur, "plr", &correlated_plr_hint(v, cur.peek()))?;
        }
        "duplicate" => {
            let v = cur.value(kw, "0.01")?;
            d.params.duplicate = Some(probability(cur, v)?);
            record(&mut d.fields, cur, "duplicate", kw, v.pos())?;
            d.params.duplicate_correlation =
                chain_correlation(cur, kw, "duplicate.correlation", &mut d.fields)?;
        }
        "corrupt" => {
            let v = cur.value(kw, "0.01")?;
            d.params.corrupt = Some(probability(cur, v)?);
            record(&mut d.fields, cur, "corrupt", kw, v.pos())?;
            d.params.corrupt_correlation =
                chain_correlation(cur, kw, "corrupt.correlation", &mut d.fields)?;
        }
        "red" | "gred" => {
            one_aqm(cur, kw, d)?;
            let v = cur.value(kw, "0.002/30/80/0.1")?;
            d.params.red = Some(parse_red(cur, kw, v)?);
            record(&mut d.fields, cur, "red", kw, v.pos())?;
        }
        "droptail" => {
            one_aqm(cur, kw, d)?;
            d.params.red = None;
            record(&mut d.fields, cur, "red", kw, kw.pos())?;
        }
        "codel" => {
            one_aqm(cur, kw, d)?;
            d.params.codel = Some(parse_codel(cur, kw, &mut d.fields)?);
        }
        "pie" => {
            one_aqm(cur, kw, d)?;
            d.params.pie = Some(parse_pie(cur, kw, &mut d.fields)?);
        }
        "noerror" => {
            d.params.noerror = true;
            record(&mut d.fields, cur, "noerror", kw, kw.pos())?;
        }
        "ecn" => {
            d.params.ecn = true;
            record(&mut d.fields, cur, "ecn", kw, kw.pos())?;
        }
        "lossecn" => {
            d.params.lossecn = true;
            record(&mut d.fields, cur, "lossecn", kw, kw.pos())?;
        }
        "gemodel" => {
            // `gemodel P [R [1-H [1-K]]]`: the values after `p` are taken
            // while the next word looks like a number; those not given take
            // tc-netem's defaults ([`GilbertElliott::with_defaults`]).
            // The keyword's own place: where a clash with `lossstate` is told.
            record(&mut d.fields, cur, "gemodel", kw, kw.pos())?;
            const NAMES: [&str; 4] = ["gemodel.p", "gemodel.r", "gemodel.1-h", "gemodel.1-k"];
            let first = cur.value(kw, "0.01 0.3 1 0 (p [r [1-h [1-k]]])")?;
            let p = probability(cur, first)?;
            record(&mut d.fields, cur, NAMES[0], kw, first.pos())?;
            let m = GilbertElliott::with_defaults(p);
            let mut values = [m.p, m.r, m.one_minus_h, m.one_minus_k];
            for (slot, name) in values.iter_mut().zip(NAMES).skip(1) {
                let Some(v) = next_number(cur) else {
                    break;
                };
                *slot = probability(cur, v)?;
                record(&mut d.fields, cur, name, kw, v.pos())?;
            }
            d.params.gemodel = Some(GilbertElliott {
                p: values[0],
                r: values[1],
                one_minus_h: values[2],
                one_minus_k: values[3],
            });
        }
        "lossstate" => d.params.lossstate = Some(parse_loss_state(cur, kw, &mut d.fields)?),
        "buckets" => {
            let v = cur.value(kw, "64")?;
            let n = cur.check(v, parse_u32(&v.text))?;
            if kind == ObjKind::Sched {
                d.sched_buckets = Some(n);
            } else {
                d.params.buckets = Some(n);
            }
            record(&mut d.fields, cur, "buckets", kw, v.pos())?;
        }
        "weight" => {
            let v = cur.value(kw, "10")?;
            d.weight = Some(cur.check(v, parse_u32(&v.text))?);
            record(&mut d.fields, cur, "weight", kw, v.pos())?;
        }
        "lmax" => {
            let v = cur.value(kw, "1500")?;
            d.lmax = Some(cur.check(v, parse_u32(&v.text))?);
            record(&mut d.fields, cur, "lmax", kw, v.pos())?;
        }
        "pri" | "priority" => {
            let v = cur.value(kw, "3")?;
            d.pri = Some(cur.check(v, parse_u32(&v.text))?);
            record(&mut d.fields, cur, "pri", kw, v.pos())?;
        }
        "sched" | "pipe" => {
            let v = cur.value(kw, "1")?;
            let n = cur.check(v, parse_u32(&v.text))?;
            d.parent = Some(if word == "sched" {
                Parent::Sched(n)
            } else {
                Parent::Pipe(n)
            });
            record(&mut d.fields, cur, "parent", kw, v.pos())?;
        }
        "type" => {
            let v = cur.value(kw, "qfq")?;
            match v.text.to_ascii_lowercase().as_str() {
                "fq_codel" => {
                    // The type's place first: a second `type` is told at
                    // its keyword before any parameter is read.
                    record(&mut d.fields, cur, "type", kw, v.pos())?;
                    d.alg = Some(AlgKind::Fq);
                    d.fq_codel = Some(parse_fq_codel(cur, &mut d.fields)?);
                }
                "fq_pie" => {
                    record(&mut d.fields, cur, "type", kw, v.pos())?;
                    d.alg = Some(AlgKind::Fq);
                    d.fq_pie = Some(parse_fq_pie(cur, &mut d.fields)?);
                }
                _ => {
                    d.alg = Some(AlgKind::parse(&v.text).map_err(|_| {
                        cur.error(
                            v,
                            ErrorKind::UnknownKeyword,
                            format!(
                                "unknown scheduler type '{}' (allowed: {}, fq_codel, fq_pie; rr means drr, wf2qp means wf2q+)",
                                v.text,
                                AlgKind::known_names()
                            ),
                        )
                    })?);
                    record(&mut d.fields, cur, "type", kw, v.pos())?;
                }
            }
        }
        _ => {
            // mask, sched_mask, flow_mask (the only keywords `takes` leaves).
            parse_mask(cur, kind, kw, &mut d.mask)?;
            record(&mut d.fields, cur, "mask", kw, kw.pos())?;
        }
    }
    Ok(())
}

/// Whether a word after a table entry's prefix is its value: digits only
/// (`20`, `0x14`), where a prefix holds `.`, `:` or `/`.
fn is_table_value(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_digit()) && !word.contains(['.', ':', '/'])
}

/// The options of `table N create` (ipfw's): `type addr` (or `cidr`),
/// `valtype legacy` or `pipe` (a value a pipe or queue number can be) and
/// `algo` are read and change nothing here; anything else is refused by
/// name.
fn parse_table_create(cur: &mut Cursor) -> Result<(), Error> {
    // Each option with a value, the values accepted, and why no other is.
    const CHOICES: [(&str, &[&str], &str); 2] = [
        (
            "type",
            &["addr", "cidr"],
            "pspat's tables hold IPv4 and IPv6 prefixes",
        ),
        (
            "valtype",
            &["legacy", "pipe"],
            "a value here is a pipe or queue number for tablearg",
        ),
    ];
    while let Some(kw) = cur.bump() {
        if kw.text == "algo" {
            cur.value(kw, "addr:radix")?;
            continue;
        }
        let Some(&(name, allowed, why)) = CHOICES.iter().find(|(n, _, _)| *n == kw.text) else {
            return Err(cur.error(
                kw,
                ErrorKind::UnknownKeyword,
                format!(
                    "unknown table create option '{}' (allowed: type, valtype, algo)",
                    kw.text
                ),
            ));
        };
        let v = cur.value(kw, allowed[0])?;
        if !allowed.contains(&v.text.as_str()) {
            return Err(cur.error(
                v,
                ErrorKind::UnknownKeyword,
                format!(
                    "table {name} '{}' is not supported (allowed: {}): {why}",
                    v.text,
                    allowed.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// `prob P` before a rule's action, if it is there.
pub(crate) fn parse_rule_prob(
    cur: &mut Cursor,
    rule: &mut Rule,
    fields: &mut Fields,
) -> Result<(), Error> {
    let Some(kw) = cur.peek().filter(|t| t.text == "prob") else {
        return Ok(());
    };
    cur.bump();
    let v = cur.value(kw, "0.5")?;
    let p = cur.check(v, parse_probability(&v.text))?;
    if !(p > 0.0 && p <= 1.0) {
        return Err(cur.error(
            v,
            ErrorKind::OutOfRange,
            format!(
                "prob {} is out of range: a rule matches with a probability above 0, at most 1",
                v.text
            ),
        ));
    }
    rule.prob = Some(MatchProbability(p));
    fields.push(("prob", v.pos()));
    Ok(())
}

/// Parses a rule's action and body (everything after `add [N] [prob P]`).
pub(crate) fn parse_rule_body(
    cur: &mut Cursor,
    add: &Tok,
    rule: &mut Rule,
    fields: &mut Fields,
) -> Result<(), Error> {
    let act = cur.value(add, "pipe 1 ip from any to any")?;
    rule.action = match act.text.as_str() {
        "pipe" | "queue" => {
            let v = cur.value(act, "1 or tablearg")?;
            let target = if v.text == "tablearg" {
                Target::Tablearg
            } else {
                Target::Number(cur.check(v, parse_u32(&v.text))?)
            };
            record(fields, cur, "action", act, v.pos())?;
            if act.text == "pipe" {
                Action::Pipe(target)
            } else {
                Action::Queue(target)
            }
        }
        "allow" | "accept" | "pass" | "permit" => {
            record(fields, cur, "action", act, act.pos())?;
            Action::Allow
        }
        "deny" | "drop" => {
            record(fields, cur, "action", act, act.pos())?;
            Action::Deny
        }
        _ => {
            return Err(cur.error(
                act,
                ErrorKind::UnknownKeyword,
                format!("unknown rule action '{}' (allowed: pipe N, queue N, pipe tablearg, queue tablearg, allow, deny)", act.text),
            ))
        }
    };
    // A `not` read and not yet applied: it negates the next option.
    let mut pending_not = false;
    while let Some(tok) = cur.bump() {
        let mut word = tok.text.as_str();
        // `!OPTION` (`!dst-port 80`, `!via eth0`) is ipfw's other spelling
        // of `not OPTION`.
        if let Some(option) = word
            .strip_prefix('!')
            .filter(|w| !w.is_empty() && *w != "not")
        {
            if pending_not {
                return Err(cur.error(
                    tok,
                    ErrorKind::Syntax,
                    "'not' is given twice in a row (one 'not' negates the option after it)",
                ));
            }
            pending_not = true;
            word = option;
        }
        if word == "not" {
            if pending_not {
                return Err(cur.error(
                    tok,
                    ErrorKind::Syntax,
                    "'not' is given twice in a row (one 'not' negates the option after it)",
                ));
            }
            if cur.peek().is_none() {
                return Err(cur.error(
                    tok,
                    ErrorKind::Syntax,
                    format!("'not' needs a rule option after it ({NEGATABLE})"),
                ));
            }
            pending_not = true;
            continue;
        }
        let negated = std::mem::take(&mut pending_not);
        if let Some(proto) = Proto::from_name(word) {
            if negated && proto == Proto::Ip {
                return Err(cur.error(
                    tok,
                    ErrorKind::Syntax,
                    format!(
                        "'not {word}' matches nothing (not may precede ip4, ip6, tcp, udp or icmp)"
                    ),
                ));
            }
            rule.proto = proto;
            rule.proto_negated = negated;
            record(fields, cur, "proto", tok, tok.pos())?;
            continue;
        }
        match word {
            "from" | "to" | "src-ip" | "dst-ip" | "src-ip6" | "dst-ip6" => {
                if negated && matches!(word, "from" | "to") {
                    return Err(cur.error(
                        tok,
                        ErrorKind::Syntax,
                        format!("'not' cannot precede '{word}'; write '{word} not ADDR' to negate the address"),
                    ));
                }
                let source = matches!(word, "from" | "src-ip" | "src-ip6");
                let mut v = cur.value(tok, "10.0.0.0/24, any, me, table(1) or a list 10.0.0.1,10.0.0.0/24")?;
                // `from not 10.0.0.0/8`: two words in ipfw lines, one value
                // ("not 10.0.0.0/8") in TOML. `not src-ip ADDR` is the same
                // as `src-ip not ADDR`, as ipfw.
                let inner_not = v.text == "not";
                if inner_not {
                    if negated {
                        return Err(cur.error(
                            v,
                            ErrorKind::Syntax,
                            format!("'not' is given twice for one address ('not {word} not ...'); keep one"),
                        ));
                    }
                    v = cur.value(v, "10.0.0.0/24, me, table(1) or a list 10.0.0.1,10.0.0.0/24 after not")?;
                }
                let negated = negated || inner_not;
                // An error inside a list names the offending entry, at its column.
                let positive = if v.text.starts_with('{') {
                    parse_addr_or_block(cur, v)?
                } else {
                    parse_addr(cur, v, &v.text, 0)?
                };
                let addr = if negated {
                    cur.check(v, positive.negated_as_written(&format!("not {}", v.text)))?
                } else {
                    positive
                };
                let field = if source { "src" } else { "dst" };
                record(fields, cur, field, tok, v.pos())?;
                if source {
                    rule.src = addr;
                } else {
                    rule.dst = addr;
                }
                // `from ADDR [not] PORTS`: classic ipfw puts ports (negated
                // or not) right after the address.
                if matches!(word, "from" | "to") {
                    // A port list begins with a digit or a service name
                    // (no option word is one).
                    let digits = |t: &Tok| {
                        t.text.starts_with(|c: char| c.is_ascii_digit())
                            || t.text
                                .split([',', '-'])
                                .next()
                                .and_then(crate::net::service_port)
                                .is_some()
                    };
                    let ports_not = cur.peek().is_some_and(|t| t.text == "not")
                        && cur.peek_at(1).is_some_and(digits);
                    if ports_not {
                        cur.bump();
                    }
                    if let Some(p) = cur.peek().filter(|p| digits(p)) {
                        cur.bump();
                        let ports = cur.check(p, parse_ports(&p.text))?;
                        let field = if source { "src-port" } else { "dst-port" };
                        record(fields, cur, field, tok, p.pos())?;
                        if source {
                            rule.src_ports = ports;
                            rule.src_ports_negated = ports_not;
                        } else {
                            rule.dst_ports = ports;
                            rule.dst_ports_negated = ports_not;
                        }
                    }
                }
            }
            "src-port" | "dst-port" => {
                let v = cur.value(tok, "80,443,1000-2000")?;
                let field = if word == "src-port" { "src-port" } else { "dst-port" };
                if v.text == "any" {
                    // ipfw takes `any` as no port condition (OPNsense's
                    // rules write `src-port any dst-port any`).
                    if negated {
                        let none: Result<(), ValueError> = Err(ValueError::syntax(format!(
                            "'not {word} any' matches no packet; leave the option out"
                        )));
                        cur.check(v, none)?;
                    }
                    record(fields, cur, field, tok, v.pos())?;
                    continue;
                }
                let ports = cur.check(v, parse_ports(&v.text))?;
                record(fields, cur, field, tok, v.pos())?;
                if word == "src-port" {
                    rule.src_ports = ports;
                    rule.src_ports_negated = negated;
                } else {
                    rule.dst_ports = ports;
                    rule.dst_ports_negated = negated;
                }
            }
            "dscp" => {
                let v = cur.value(tok, "ef or af41,af42")?;
                let codes = cur.check(v, crate::dscp::parse_dscp_list(&v.text))?;
                if negated && codes.len() == crate::dscp::CODE_POINTS {
                    let refused: Result<(), ValueError> = Err(ValueError::syntax(
                        "'not dscp' of every code point matches no packet",
                    ));
                    cur.check(v, refused)?;
                }
                record(fields, cur, "dscp", tok, v.pos())?;
                rule.dscp = codes;
                rule.dscp_negated = negated;
            }
            "iplen" => {
                let v = cur.value(tok, "0-80 or 40,52,1500")?;
                let lengths = cur.check(v, crate::header::parse_ip_lengths(&v.text))?;
                if negated && crate::header::covers_every_length(&lengths) {
                    let refused: Result<(), ValueError> = Err(ValueError::syntax(
                        "'not iplen' of every length matches no packet",
                    ));
                    cur.check(v, refused)?;
                }
                record(fields, cur, "iplen", tok, v.pos())?;
                rule.ip_len = lengths;
                rule.ip_len_negated = negated;
            }
            "tcpflags" | "setup" => {
                // `setup` is ipfw's `tcpflags syn,!ack`; one field, so a
                // rule names one of the two once.
                let (flags, at) = if word == "setup" {
                    (crate::header::TcpFlags::SETUP, tok)
                } else {
                    let v = cur.value(tok, "syn,!ack")?;
                    (cur.check(v, v.text.parse::<crate::header::TcpFlags>())?, v)
                };
                record(fields, cur, "tcpflags", tok, at.pos())?;
                rule.tcp_flags = Some(flags);
                rule.tcp_flags_negated = negated;
            }
            "established" => {
                record(fields, cur, "established", tok, tok.pos())?;
                rule.established = true;
                rule.established_negated = negated;
            }
            "in" | "out" => {
                // ipfw compiles `out` as `not in`: `not in` is `out`.
                rule.direction = if (word == "in") != negated { Direction::In } else { Direction::Out };
                record(fields, cur, "direction", tok, tok.pos())?;
            }
            "via" | "recv" | "xmit" => {
                let v = cur.value(tok, "eth0")?;
                let role = match word {
                    "via" => InterfaceRole::Via,
                    "recv" => InterfaceRole::Recv,
                    _ => InterfaceRole::Xmit,
                };
                rule.interface = Some(InterfaceMatch {
                    role,
                    name: v.text.clone(),
                    negated,
                });
                record(fields, cur, "interface", tok, v.pos())?;
            }
            _ => {
                return Err(cur.error(
                    tok,
                    ErrorKind::UnknownKeyword,
                    format!("unknown rule option '{word}' (allowed: ip, ip4, ip6, tcp, udp, icmp, from, to, src-ip, dst-ip, src-port, dst-port, dscp, iplen, tcpflags, setup, established, in, out, via, recv, xmit, not)"),
                ))
            }
        }
    }
    Ok(())
}

/// What `not` may precede, for messages.
const NEGATABLE: &str =
    "ip4, ip6, tcp, udp, icmp, src-port, dst-port, dscp, iplen, tcpflags, setup, established, via, recv, xmit, in, out, src-ip or dst-ip";

/// A rule with every option at its default and the given action.
pub(crate) fn empty_rule(action: Action) -> Rule {
    Rule {
        number: None,
        action,
        proto: Proto::Ip,
        proto_negated: false,
        src: AddrMatch::Any,
        dst: AddrMatch::Any,
        src_ports: Vec::new(),
        src_ports_negated: false,
        dst_ports: Vec::new(),
        dst_ports_negated: false,
        direction: Direction::Any,
        interface: None,
        dscp: Vec::new(),
        dscp_negated: false,
        ip_len: Vec::new(),
        ip_len_negated: false,
        tcp_flags: None,
        tcp_flags_negated: false,
        established: false,
        established_negated: false,
        prob: None,
        comment: None,
    }
}

/// One parsed statement (an object's draft boxed: it is by far the
/// largest).
pub(crate) enum Statement {
    Object(ObjKind, u32, Box<Draft>),
    Rule(Rule, Fields),
    /// Several statements from one (`table N add P V P V ...`).
    Many(Vec<Statement>),
    /// `table N create ...`: table N exists, empty until entries are added.
    TableCreate {
        number: u32,
        number_pos: Pos,
    },
    TableAdd {
        number: u32,
        number_pos: Pos,
        entry: TableEntry,
        prefix_pos: Pos,
        value_pos: Pos,
    },
    Default(DefaultAction, Pos),
    Seed(u64, Pos),
    Control(ControlRequest, Pos),
}

fn number(cur: &Cursor, tok: &Tok) -> Result<u32, Error> {
    cur.check(tok, parse_u32(&tok.text))
}

fn expect_end(cur: &mut Cursor) -> Result<(), Error> {
    match cur.bump() {
        None => Ok(()),
        Some(t) => Err(cur.error(
            t,
            ErrorKind::Syntax,
            format!("unexpected '{}' at the end of the command", t.text),
        )),
    }
}

/// Parses one statement's tokens.
///
/// A comment ([`tokenize_keeping_comments`]) is kept by a rule and ignored
/// on any other statement.
pub(crate) fn parse_statement(toks: &[Tok], file: &str) -> Result<Statement, Error> {
    let (toks, comment) = match toks.split_last() {
        Some((last, rest)) if last.text.starts_with("//") => (rest, Some(last)),
        _ => (toks, None),
    };
    let mut cur = Cursor::new(toks, file);
    let Some(mut first) = cur.bump() else {
        return Err(Error {
            file: file.to_string(),
            line: 0,
            column: 0,
            token: String::new(),
            message: "empty command".into(),
            kind: ErrorKind::Syntax,
        });
    };
    if first.text == "ipfw" || first.text == "dnctl" {
        while cur
            .peek()
            .is_some_and(|t| matches!(t.text.as_str(), "-q" | "-f"))
        {
            cur.bump();
        }
        first = cur.value(first, "pipe 1 config bw 10Mbit/s")?;
    }
    let word = first.text.as_str();
    let kind = match word {
        "pipe" => Some(ObjKind::Pipe),
        "queue" | "flowset" => Some(ObjKind::Queue),
        "sched" => Some(ObjKind::Sched),
        _ => None,
    };
    if let Some(kind) = kind {
        let listing = match kind {
            ObjKind::Pipe => Listing::Pipes,
            ObjKind::Queue => Listing::Queues,
            ObjKind::Sched => Listing::Scheds,
        };
        let second = cur.value(first, &format!("{word} 1 config ..."))?;
        match second.text.as_str() {
            "show" | "list" => {
                let number = match cur.bump() {
                    Some(t) => Some(number(&cur, t)?),
                    None => None,
                };
                expect_end(&mut cur)?;
                return Ok(Statement::Control(
                    ControlRequest::Show {
                        what: listing,
                        number,
                    },
                    first.pos(),
                ));
            }
            "flush" => {
                expect_end(&mut cur)?;
                return Ok(Statement::Control(
                    ControlRequest::Flush(listing),
                    first.pos(),
                ));
            }
            "delete" => {
                let mut numbers = Vec::new();
                while let Some(t) = cur.bump() {
                    numbers.push(number(&cur, t)?);
                }
                if numbers.is_empty() {
                    return Err(cur.error(
                        second,
                        ErrorKind::Syntax,
                        "'delete' needs at least one number",
                    ));
                }
                let what = match kind {
                    ObjKind::Pipe => Deletable::Pipe,
                    ObjKind::Queue => Deletable::Queue,
                    ObjKind::Sched => Deletable::Sched,
                };
                return Ok(Statement::Control(
                    ControlRequest::Delete { what, numbers },
                    first.pos(),
                ));
            }
            _ => {}
        }
        let n = number(&cur, second)?;
        let third = cur.value(second, "config")?;
        match third.text.as_str() {
            "config" => {}
            "delete" => {
                expect_end(&mut cur)?;
                let what = match kind {
                    ObjKind::Pipe => Deletable::Pipe,
                    ObjKind::Queue => Deletable::Queue,
                    ObjKind::Sched => Deletable::Sched,
                };
                return Ok(Statement::Control(
                    ControlRequest::Delete {
                        what,
                        numbers: vec![n],
                    },
                    first.pos(),
                ));
            }
            "show" | "list" => {
                expect_end(&mut cur)?;
                return Ok(Statement::Control(
                    ControlRequest::Show {
                        what: listing,
                        number: Some(n),
                    },
                    first.pos(),
                ));
            }
            other => {
                return Err(cur.error(
                    third,
                    ErrorKind::UnknownKeyword,
                    format!(
                        "expected 'config', 'delete' or 'show' after '{word} {n}', found '{other}'"
                    ),
                ))
            }
        }
        let mut draft = Draft::default();
        draft.fields.push(("number", second.pos()));
        while cur.peek().is_some() {
            parse_object_keyword(&mut cur, kind, &mut draft)?;
        }
        return Ok(Statement::Object(kind, n, Box::new(draft)));
    }
    match word {
        "add" => {
            let mut rule = empty_rule(Action::Allow);
            let mut fields = Fields::new();
            if let Some(t) = cur.peek().filter(|t| t.text.starts_with(|c: char| c.is_ascii_digit())) {
                cur.bump();
                rule.number = Some(number(&cur, t)?);
                fields.push(("number", t.pos()));
            } else {
                fields.push(("number", first.pos()));
            }
            parse_rule_prob(&mut cur, &mut rule, &mut fields)?;
            parse_rule_body(&mut cur, first, &mut rule, &mut fields)?;
            if let Some(c) = comment {
                rule.comment = cur.check(c, rule_comment(&c.text[2..]))?;
                fields.push(("comment", c.pos()));
            }
            Ok(Statement::Rule(rule, fields))
        }
        "table" => {
            let num_tok = cur.value(first, "1 add 10.0.0.0/8 1")?;
            if num_tok.text == "all" {
                // ipfw's `table all flush|list`: every table at once.
                let op = cur.value(num_tok, "list")?;
                let what = Listing::AllTables;
                let request = match op.text.as_str() {
                    "flush" => ControlRequest::Flush(what),
                    "list" | "show" => ControlRequest::Show { what, number: None },
                    _ => return Err(cur.error(op, ErrorKind::UnknownKeyword, format!("unknown 'table all' command '{}' (allowed: flush, list)", op.text))),
                };
                expect_end(&mut cur)?;
                return Ok(Statement::Control(request, first.pos()));
            }
            let n = number(&cur, num_tok)?;
            let op = cur.value(num_tok, "add")?;
            match op.text.as_str() {
                "add" => {
                    // `add PREFIX [VALUE] [PREFIX [VALUE] ...]`: a word
                    // that starts with a digit and holds no `.`, `:` or
                    // `/` is a value, any other a prefix.
                    let mut entries = Vec::new();
                    let mut p = cur.value(op, "10.0.0.0/8")?;
                    loop {
                        let prefix = cur.check(p, p.text.parse())?;
                        let (value, value_pos) = match cur.peek().filter(|v| is_table_value(&v.text)) {
                            Some(v) => {
                                cur.bump();
                                (number(&cur, v)?, v.pos())
                            }
                            None => (0, p.pos()),
                        };
                        entries.push(Statement::TableAdd {
                            number: n,
                            number_pos: num_tok.pos(),
                            entry: TableEntry { prefix, value },
                            prefix_pos: p.pos(),
                            value_pos,
                        });
                        match cur.bump() {
                            Some(next) => p = next,
                            None => break,
                        }
                    }
                    Ok(Statement::Many(entries))
                }
                "create" => {
                    parse_table_create(&mut cur)?;
                    Ok(Statement::TableCreate {
                        number: n,
                        number_pos: num_tok.pos(),
                    })
                }
                "flush" => {
                    expect_end(&mut cur)?;
                    Ok(Statement::Control(ControlRequest::Flush(Listing::Table(n)), first.pos()))
                }
                "delete" => {
                    let mut prefixes = Vec::new();
                    while let Some(p) = cur.bump() {
                        prefixes.push(cur.check(p, p.text.parse())?);
                    }
                    if prefixes.is_empty() {
                        return Err(cur.error(op, ErrorKind::Syntax, "'delete' needs at least one prefix (example: table 1 delete 10.0.0.0/8)"));
                    }
                    Ok(Statement::Control(ControlRequest::TableDelete { table: n, prefixes }, first.pos()))
                }
                "destroy" => {
                    expect_end(&mut cur)?;
                    Ok(Statement::Control(ControlRequest::TableDestroy(n), first.pos()))
                }
                "list" | "show" => {
                    expect_end(&mut cur)?;
                    Ok(Statement::Control(ControlRequest::Show { what: Listing::Table(n), number: None }, first.pos()))
                }
                _ => Err(cur.error(op, ErrorKind::UnknownKeyword, format!("unknown table command '{}' (allowed: create, add, delete, flush, destroy, list)", op.text))),
            }
        }
        "flush" => {
            expect_end(&mut cur)?;
            Ok(Statement::Control(ControlRequest::Flush(Listing::Rules), first.pos()))
        }
        "show" | "list" => {
            let number = match cur.bump() {
                Some(t) if t.text == "rules" => None,
                Some(t) => Some(number(&cur, t)?),
                None => None,
            };
            expect_end(&mut cur)?;
            Ok(Statement::Control(ControlRequest::Show { what: Listing::Rules, number }, first.pos()))
        }
        "delete" => {
            let mut numbers = Vec::new();
            while let Some(t) = cur.bump() {
                numbers.push(number(&cur, t)?);
            }
            if numbers.is_empty() {
                return Err(cur.error(first, ErrorKind::Syntax, "'delete' needs at least one rule number"));
            }
            Ok(Statement::Control(ControlRequest::Delete { what: Deletable::Rule, numbers }, first.pos()))
        }
        "zero" => {
            let mut numbers = Vec::new();
            while let Some(t) = cur.bump() {
                numbers.push(number(&cur, t)?);
            }
            Ok(Statement::Control(ControlRequest::Zero(numbers), first.pos()))
        }
        "default" => {
            let v = cur.value(first, "allow")?;
            let action = match v.text.as_str() {
                "allow" | "accept" | "pass" => DefaultAction::Allow,
                "deny" | "drop" => DefaultAction::Deny,
                _ => return Err(cur.error(v, ErrorKind::UnknownKeyword, format!("unknown default action '{}' (allowed: allow, deny)", v.text))),
            };
            expect_end(&mut cur)?;
            Ok(Statement::Default(action, v.pos()))
        }
        "seed" => {
            let v = cur.value(first, "42")?;
            let seed = cur.check(v, parse_uint(&v.text))?;
            expect_end(&mut cur)?;
            Ok(Statement::Seed(seed, v.pos()))
        }
        _ => Err(cur.error(
            first,
            ErrorKind::UnknownKeyword,
            format!("unknown command '{word}' (allowed: pipe, queue, sched, add, table, default, seed; and show, delete, flush, zero on the control socket)"),
        )),
    }
}

/// Folds statements into a [`Config`], recording positions.
pub(crate) struct Builder {
    pub config: Config,
    seen_default: bool,
    started: bool,
    /// Each table's position in `config.tables`, by number (one lookup a
    /// `table N add` line, however many tables there are).
    table_at: std::collections::HashMap<u32, usize>,
}

fn site(kind: SiteKind, index: usize, sub: usize, field: &'static str) -> Site {
    Site {
        kind,
        index,
        sub,
        field,
    }
}

impl Builder {
    pub fn new(file: &str) -> Self {
        Builder {
            config: Config {
                sources: crate::model::SourceMap::new(file),
                ..Config::default()
            },
            seen_default: false,
            started: false,
            table_at: std::collections::HashMap::new(),
        }
    }

    fn positions(&mut self, kind: SiteKind, index: usize, fields: Fields) {
        for (field, pos) in fields {
            self.config.sources.insert(site(kind, index, 0, field), pos);
        }
    }

    /// Adds one statement; control statements are refused (see module docs for `flush`).
    pub fn add(&mut self, st: Statement) -> Result<(), Error> {
        let file = self.config.sources.file.clone();
        match st {
            Statement::Control(ControlRequest::Flush(_), _) if !self.started => return Ok(()),
            Statement::Control(_, pos) => {
                return Err(pos.error(
                    &file,
                    ErrorKind::NotConfiguration,
                    format!("'{}' is a control command, not configuration (flush is accepted only before the first statement)", pos.token),
                ))
            }
            _ => {}
        }
        self.started = true;
        match st {
            Statement::Many(statements) => {
                for st in statements {
                    self.add(st)?;
                }
            }
            Statement::TableCreate { number, number_pos } => {
                if self.table_at.contains_key(&number) {
                    return Err(number_pos.error(
                        &file,
                        ErrorKind::Duplicate,
                        format!(
                            "table {number} exists already (created, or given an entry, above)"
                        ),
                    ));
                }
                self.config.tables.push(Table {
                    number,
                    entries: Vec::new(),
                });
                let i = self.config.tables.len() - 1;
                self.table_at.insert(number, i);
                self.config
                    .sources
                    .insert(site(SiteKind::Table, i, 0, "number"), number_pos);
            }
            Statement::Object(kind, number, d) => match kind {
                ObjKind::Sched => {
                    let index = self.config.scheds.len();
                    self.config.scheds.push(Sched {
                        number,
                        alg: d.alg,
                        fq_codel: d.fq_codel,
                        fq_pie: d.fq_pie,
                        link: d.link,
                        mask: d.mask,
                        buckets: d.sched_buckets,
                    });
                    self.positions(SiteKind::Sched, index, d.fields);
                }
                ObjKind::Pipe => {
                    let index = self.config.pipes.len();
                    self.config.pipes.push(Pipe {
                        number,
                        alg: d.alg,
                        fq_codel: d.fq_codel,
                        fq_pie: d.fq_pie,
                        link: d.link,
                        queue: d.params,
                        mask: d.mask,
                    });
                    self.positions(SiteKind::Pipe, index, d.fields);
                }
                ObjKind::Queue => {
                    let index = self.config.queues.len();
                    self.config.queues.push(Queue {
                        number,
                        parent: d.parent,
                        weight: d.weight,
                        lmax: d.lmax,
                        pri: d.pri,
                        params: d.params,
                        mask: d.mask,
                    });
                    self.positions(SiteKind::Queue, index, d.fields);
                }
            },
            Statement::Rule(rule, fields) => {
                let index = self.config.rules.len();
                self.config.rules.push(rule);
                self.positions(SiteKind::Rule, index, fields);
            }
            Statement::TableAdd {
                number,
                number_pos,
                entry,
                prefix_pos,
                value_pos,
            } => {
                let index = match self.table_at.get(&number) {
                    Some(&i) => i,
                    None => {
                        self.config.tables.push(Table {
                            number,
                            entries: Vec::new(),
                        });
                        let i = self.config.tables.len() - 1;
                        self.table_at.insert(number, i);
                        self.config
                            .sources
                            .insert(site(SiteKind::Table, i, 0, "number"), number_pos);
                        i
                    }
                };
                let table = &mut self.config.tables[index];
                let sub = table.entries.len();
                table.entries.push(entry);
                self.config
                    .sources
                    .insert(site(SiteKind::Table, index, sub, "prefix"), prefix_pos);
                self.config
                    .sources
                    .insert(site(SiteKind::Table, index, sub, "value"), value_pos);
            }
            Statement::Default(action, pos) => {
                if self.seen_default {
                    return Err(pos.error(&file, ErrorKind::Duplicate, "'default' is given twice"));
                }
                self.seen_default = true;
                self.config.default_action = action;
                self.config
                    .sources
                    .insert(site(SiteKind::Global, 0, 0, "default"), pos);
            }
            Statement::Seed(seed, pos) => {
                if self.config.seed.is_some() {
                    return Err(pos.error(&file, ErrorKind::Duplicate, "'seed' is given twice"));
                }
                self.config.seed = Some(seed);
                self.config
                    .sources
                    .insert(site(SiteKind::Global, 0, 0, "seed"), pos);
            }
            Statement::Control(..) => {}
        }
        Ok(())
    }
}

/// Parses a file of ipfw lines into a [`Config`] (see [`crate::parse_ipfw`]).
pub(crate) fn parse(text: &str, file: &str) -> Result<Config, Error> {
    let mut builder = Builder::new(file);
    for toks in tokenize_keeping_comments(text) {
        let st = parse_statement(&toks, file)?;
        builder.add(st)?;
    }
    Ok(builder.config)
}

/// Parses one control line (see [`crate::parse_control`]).
pub(crate) fn parse_control_line(line: &str, file: &str) -> Result<ControlRequest, Error> {
    let statements = tokenize_keeping_comments(line);
    let mut builder = Builder::new(file);
    let mut configured = false;
    for (i, toks) in statements.iter().enumerate() {
        match parse_statement(toks, file)? {
            Statement::Control(req, pos) => {
                if statements.len() > 1 || i > 0 {
                    return Err(pos.error(
                        file,
                        ErrorKind::Syntax,
                        "a control command must stand alone on its line",
                    ));
                }
                return Ok(req);
            }
            st => {
                configured = true;
                builder.add(st)?;
            }
        }
    }
    if !configured {
        return Err(Error {
            file: file.to_string(),
            line: 1,
            column: 1,
            token: String::new(),
            message: "empty command".into(),
            kind: ErrorKind::Syntax,
        });
    }
    Ok(ControlRequest::Configure(builder.config))
}
