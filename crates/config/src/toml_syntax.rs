//! The TOML syntax: the same objects and keywords as the ipfw lines, with
//! explicit units in strings (`bw = "10Mbit/s"`, `delay = "20ms"`).
//!
//! The document is read with its spans (`toml::de::DeTable`), each key and
//! value becomes a token at its line and column, and the tokens go through the
//! ipfw keyword parsers, so both syntaxes accept the same values and report
//! errors the same way. The format is documented in `docs/CONFIG.md`.
//!
//! Top level: `default = "allow"|"deny"`, `seed = N`, and arrays of tables
//! `[[sched]]`, `[[pipe]]`, `[[queue]]`, `[[table]]`, `[[rule]]`, each with a
//! `number`. A queue limit is `limit` (`limit = 50` slots, `limit = "64KB"`);
//! flags are booleans (`reorder = true`, `ecn = true`, `lossecn = true`); `mask` is `"all"`
//! or a table of fields (`mask = { src-ip = "0xff" }`); `gemodel` is a table with key `p`
//! and optional `r`, `1-h`, `1-k`, `lossstate` one with key `p13` and
//! optional `p31`, `p32`, `p23`, `p14` (tc-netem's defaults for those not
//! given); `duplicate`, `corrupt` and `reorder` a probability or a table
//! with key `p` and optional `correlation` (`duplicate = { p = 0.01,
//! correlation = 0.25 }`); a probability is a number or a percentage
//! (`plr = "1%"`);
//! `slot` a table with `min` and `max`, or
//! `distribution`, `delay` and `jitter`, and optional `packets` and `bytes`; `red`/`gred` are dummynet's `"w_q/min_th/max_th/max_p"`;
//! `codel` a table with optional `target`, `interval` (times) and `ecn`
//! (a boolean: `noecn` when false), or `true` for all of dummynet's
//! defaults (`false`: no CoDel); a sched or pipe of `type = "fq_codel"`
//! takes an `fq_codel` table with optional `target`, `interval`, `ecn`,
//! `quantum`, `limit` and `flows` (the words after `type fq_codel`), and
//! no other sched or pipe takes one; `pie` a table with optional `target`, `tupdate`,
//! `max_burst` (times), `alpha`, `beta`, `max_ecnth` (numbers), `ecn`,
//! `capdrop`, `derand`, `onoff` (booleans: the `no` word when false) and
//! `estimator` (`"dre"` or `"ts"`), or `true` for dummynet's defaults; a sched
//! or pipe of `type = "fq_pie"` takes an `fq_pie` table with PIE's keys and
//! `quantum`, `limit`, `flows`.
//! In a rule, `not ` before a value negates it as the ipfw word does:
//! `from = "not 10.0.0.0/8"`, `proto = "not udp"`, `dst-port = "not 80,443"`,
//! `via = "not eth0"`.

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::error::{Error, ErrorKind, Pos};
use crate::ipfw::{
    empty_rule, parse_object_keyword, parse_rule_body, parse_rule_prob, rule_comment, Builder,
    Cursor, Draft, Fields, ObjKind, Statement, Tok,
};
use crate::model::{Action, Config, DefaultAction, GilbertElliott, LossState, TableEntry};
use crate::units::{parse_probability, parse_u32, parse_uint};

/// A keyword whose values TOML writes as a table (a loss model, or a
/// probability with its correlation): its keys in the order of its ipfw
/// words, and the values of all of them from the first alone (as many as
/// it has keys; the rest of the array unused).
struct TableKeyword {
    keys: &'static [&'static str],
    example: &'static str,
    defaults: fn(f64) -> [f64; 5],
}

const GEMODEL: TableKeyword = TableKeyword {
    keys: &["p", "r", "1-h", "1-k"],
    example: "gemodel = { p = 0.01, r = 0.3 }",
    defaults: |p| {
        let m = GilbertElliott::with_defaults(p);
        [m.p, m.r, m.one_minus_h, m.one_minus_k, 0.0]
    },
};

/// `duplicate`, `corrupt` and `reorder` as a table: a probability and the
/// correlation of successive decisions (`duplicate 0.01 0.25`).
const fn chance(example: &'static str) -> TableKeyword {
    TableKeyword {
        keys: &["p", "correlation"],
        example,
        defaults: |_| [0.0; 5],
    }
}

const DUPLICATE: TableKeyword = chance("duplicate = { p = 0.01, correlation = 0.25 }");
const CORRUPT: TableKeyword = chance("corrupt = { p = 0.001, correlation = 0.25 }");
const REORDER: TableKeyword = chance("reorder = { p = 0.25, correlation = 0.5 }");

const LOSSSTATE: TableKeyword = TableKeyword {
    keys: &["p13", "p31", "p32", "p23", "p14"],
    example: "lossstate = { p13 = 0.01, p31 = 0.3 }",
    defaults: |p| {
        let m = LossState::with_defaults(p);
        [m.p13, m.p31, m.p32, m.p23, m.p14]
    },
};

/// A table of CoDel's, fq_codel's, PIE's or fq_pie's parameters: its keys
/// (the switches among them, booleans) and the names messages give it.
struct ParameterTable {
    /// The table's key, as `unknown ... key` names it.
    name: &'static str,
    /// Whose switches they are, as their messages name it.
    owner: &'static str,
    keys: &'static [&'static str],
    /// The boolean keys: each the word it stands for when true, with the
    /// word when false.
    switches: &'static [(&'static str, &'static str)],
}

const CODEL_TABLE: ParameterTable = ParameterTable {
    name: "codel",
    owner: "CoDel",
    keys: &["target", "interval", "ecn"],
    switches: &[("ecn", "noecn")],
};

const FQ_CODEL_TABLE: ParameterTable = ParameterTable {
    name: "fq_codel",
    owner: "fq_codel",
    keys: &["target", "interval", "ecn", "quantum", "limit", "flows"],
    switches: &[("ecn", "noecn")],
};

/// PIE's switches in TOML (`estimator`, a string, picks `dre` or `ts`).
const PIE_SWITCHES: &[(&str, &str)] = &[
    ("ecn", "noecn"),
    ("capdrop", "nocapdrop"),
    ("derand", "noderand"),
    ("onoff", "noonoff"),
];

const PIE_TABLE: ParameterTable = ParameterTable {
    name: "pie",
    owner: "PIE",
    keys: &[
        "target",
        "tupdate",
        "alpha",
        "beta",
        "max_burst",
        "max_ecnth",
        "ecn",
        "capdrop",
        "derand",
        "onoff",
        "estimator",
    ],
    switches: PIE_SWITCHES,
};

const FQ_PIE_TABLE: ParameterTable = ParameterTable {
    name: "fq_pie",
    owner: "fq_pie",
    keys: &[
        "target",
        "tupdate",
        "alpha",
        "beta",
        "max_burst",
        "max_ecnth",
        "ecn",
        "capdrop",
        "derand",
        "onoff",
        "estimator",
        "quantum",
        "limit",
        "flows",
    ],
    switches: PIE_SWITCHES,
};

/// A sched type whose parameters TOML gives in a table of their own: the
/// type's name (the table's key too) and the table.
const SCHED_TYPE_TABLES: [&ParameterTable; 2] = [&FQ_CODEL_TABLE, &FQ_PIE_TABLE];

/// Byte offsets to 1-based line and character column.
struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    fn at(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts[line - 1];
        let column = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (
            u32::try_from(line).unwrap_or(u32::MAX),
            u32::try_from(column + 1).unwrap_or(u32::MAX),
        )
    }
}

struct Reader<'a> {
    file: &'a str,
    lines: LineIndex<'a>,
}

type Entry<'i> = (Spanned<toml::de::DeString<'i>>, Spanned<DeValue<'i>>);

impl Reader<'_> {
    fn tok(&self, text: impl Into<String>, offset: usize) -> Tok {
        let (line, column) = self.lines.at(offset);
        Tok {
            text: text.into(),
            line,
            column,
        }
    }

    /// The string `value` of key `name`, or an error at the value naming
    /// the key and an `example` string.
    fn string<'v>(
        &self,
        value: &'v Spanned<DeValue<'_>>,
        name: &str,
        example: &str,
    ) -> Result<&'v str, Error> {
        match value.get_ref() {
            DeValue::String(s) => Ok(s),
            other => {
                let t = self.tok(other.type_str(), value.span().start);
                Err(self.error(
                    &t,
                    ErrorKind::Syntax,
                    format!("'{name}' takes a string (example: \"{example}\")"),
                ))
            }
        }
    }

    fn key_tok(&self, key: &Spanned<toml::de::DeString<'_>>) -> Tok {
        self.tok(key.get_ref().to_string(), key.span().start)
    }

    /// An error at `tok`. Keys and values are quoted in messages as
    /// written, and a quoted TOML key may hold any character: control
    /// characters are escaped (`\n`), so that the message stays one line
    /// in the daemon's log as on the command line.
    fn error(&self, tok: &Tok, kind: ErrorKind, message: impl std::fmt::Display) -> Error {
        let mut text = String::new();
        for c in message.to_string().chars() {
            if c.is_control() {
                text.extend(c.escape_default());
            } else {
                text.push(c);
            }
        }
        tok.pos().error(self.file, kind, text)
    }

    /// A scalar as one token: a string's content (column after the quote), a number's text.
    fn scalar(&self, key: &Tok, value: &Spanned<DeValue<'_>>) -> Result<Tok, Error> {
        let start = value.span().start;
        match value.get_ref() {
            DeValue::String(s) => {
                if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '#' || c == ';') {
                    let t = self.tok(s.to_string(), start + 1);
                    return Err(self.error(
                        &t,
                        ErrorKind::Syntax,
                        format!("'{}' must be one word without spaces, '#' or ';'", key.text),
                    ));
                }
                Ok(self.tok(s.to_string(), start + 1))
            }
            DeValue::Integer(i) => {
                let text = if i.radix() == 10 {
                    i.as_str().to_string()
                } else {
                    i128::from_str_radix(i.as_str(), i.radix())
                        .map(|v| v.to_string())
                        .unwrap_or_else(|_| i.to_string())
                };
                Ok(self.tok(text, start))
            }
            DeValue::Float(f) => Ok(self.tok(f.as_str().to_string(), start)),
            other => {
                let t = self.tok(other.type_str(), start);
                Err(self.error(
                    &t,
                    ErrorKind::Syntax,
                    format!(
                        "'{}' takes a string or a number, not {}",
                        key.text,
                        other.type_str()
                    ),
                ))
            }
        }
    }

    fn table<'v, 'i>(
        &self,
        key: &Tok,
        value: &'v Spanned<DeValue<'i>>,
    ) -> Result<&'v DeTable<'i>, Error> {
        value.get_ref().as_table().ok_or_else(|| {
            let t = self.tok(value.get_ref().type_str(), value.span().start);
            self.error(
                &t,
                ErrorKind::Syntax,
                format!("'{}' must be a table", key.text),
            )
        })
    }

    fn number(&self, table: &DeTable<'_>, header: &Tok) -> Result<(u32, Tok), Error> {
        let Some((k, v)) = table.iter().find(|(k, _)| k.get_ref() == "number") else {
            return Err(self.error(
                header,
                ErrorKind::Syntax,
                format!("each [[{}]] needs a 'number'", header.text),
            ));
        };
        let t = self.scalar(&self.key_tok(k), v)?;
        let n = parse_u32(&t.text).map_err(|e| self.error(&t, e.kind, e.message))?;
        Ok((n, t))
    }

    /// Converts one key and value of a sched/pipe/queue into tokens.
    fn object_tokens(
        &self,
        kind: ObjKind,
        key: &Tok,
        value: &Spanned<DeValue<'_>>,
    ) -> Result<Vec<Tok>, Error> {
        let mut kw = key.clone();
        if kw.text == "limit" && kind != ObjKind::Sched {
            kw.text = "queue".into();
        }
        let flag = matches!(
            kw.text.as_str(),
            "reorder" | "noerror" | "droptail" | "ecn" | "lossecn"
        );
        match value.get_ref() {
            DeValue::Boolean(b) if flag => Ok(if *b { vec![kw] } else { Vec::new() }),
            // `reorder = 0.25`: tc-netem's reordering probability.
            DeValue::Float(_) | DeValue::Integer(_) if kw.text == "reorder" => {
                let v = self.scalar(&kw, value)?;
                Ok(vec![kw, v])
            }
            // `reorder = { p = 0.25, correlation = 0.5 }`.
            DeValue::Table(t) if kw.text == "reorder" => self.table_tokens(kw, t, &REORDER),
            _ if flag => {
                let t = self.tok(value.get_ref().type_str(), value.span().start);
                Err(self.error(
                    &t,
                    ErrorKind::Syntax,
                    format!("'{}' takes true or false", key.text),
                ))
            }
            DeValue::Table(t)
                if kw.text == "mask"
                    || kw.text.ends_with("_mask")
                    || kw.text.ends_with("-mask") =>
            {
                let mut toks = vec![kw];
                for (k, v) in t.iter() {
                    let field = self.key_tok(k);
                    let v = self.scalar(&field, v)?;
                    toks.push(field);
                    toks.push(v);
                }
                Ok(toks)
            }
            DeValue::Table(t) if kw.text == "slot" => self.slot_tokens(kw, t),
            DeValue::Table(t) if kw.text == "codel" => self.codel_tokens(kw, t),
            // `codel = true`: every parameter at its default.
            DeValue::Boolean(b) if kw.text == "codel" => Ok(if *b { vec![kw] } else { Vec::new() }),
            _ if kw.text == "codel" => {
                let t = self.tok(value.get_ref().type_str(), value.span().start);
                Err(self.error(
                    &t,
                    ErrorKind::Syntax,
                    "'codel' takes a table or true (example: codel = { target = \"5ms\", interval = \"100ms\", ecn = true })",
                ))
            }
            DeValue::Table(t) if kw.text == "pie" => {
                let mut toks = vec![kw];
                toks.extend(self.parameter_tokens(t, &PIE_TABLE)?);
                Ok(toks)
            }
            // `pie = true`: every parameter at its default.
            DeValue::Boolean(b) if kw.text == "pie" => Ok(if *b { vec![kw] } else { Vec::new() }),
            _ if kw.text == "pie" => {
                let t = self.tok(value.get_ref().type_str(), value.span().start);
                Err(self.error(
                    &t,
                    ErrorKind::Syntax,
                    "'pie' takes a table or true (example: pie = { target = \"15ms\", tupdate = \"15ms\", estimator = \"ts\" })",
                ))
            }
            // A pipe's or queue's `fq_codel` or `fq_pie` (a sched's is
            // read with its `type`): the keyword alone, refused by the
            // keyword parser with what to write instead.
            _ if kw.text == "fq_codel" || kw.text == "fq_pie" => Ok(vec![kw]),
            DeValue::Table(t) if kw.text == "lossstate" => self.table_tokens(kw, t, &LOSSSTATE),
            DeValue::Table(t) if kw.text == "gemodel" => self.table_tokens(kw, t, &GEMODEL),
            DeValue::Table(t) if kw.text == "duplicate" => self.table_tokens(kw, t, &DUPLICATE),
            DeValue::Table(t) if kw.text == "corrupt" => self.table_tokens(kw, t, &CORRUPT),
            _ => Ok(vec![kw, self.scalar(key, value)?]),
        }
    }

    /// A table keyword's table as the words of its ipfw keyword
    /// (`lossstate = { p13 = 0.01, p31 = 0.3 }` as `lossstate 0.01 0.3`,
    /// `gemodel = { p = 0.01, r = 0.3, 1-h = 1, 1-k = 0 }` as `gemodel 0.01
    /// 0.3 1 0`): the first key is required; a key left out before one
    /// given becomes its default, written at the table's key; those left
    /// out after the last one given are left to the ipfw parser's defaults.
    fn table_tokens(
        &self,
        kw: Tok,
        t: &DeTable<'_>,
        model: &TableKeyword,
    ) -> Result<Vec<Tok>, Error> {
        let keys = model.keys;
        if let Some((k, _)) = t
            .iter()
            .find(|(k, _)| !keys.contains(&k.get_ref().as_ref()))
        {
            let t = self.key_tok(k);
            return Err(self.error(
                &t,
                ErrorKind::UnknownKeyword,
                format!(
                    "unknown {} key '{}' (allowed: {})",
                    kw.text,
                    t.text,
                    keys.join(", ")
                ),
            ));
        }
        let mut given = Vec::with_capacity(keys.len());
        for name in keys {
            given.push(match t.iter().find(|(k, _)| k.get_ref() == name) {
                Some((k, v)) => Some(self.scalar(&self.key_tok(k), v)?),
                None => None,
            });
        }
        let Some(first) = given[0].clone() else {
            return Err(self.error(
                &kw,
                ErrorKind::Syntax,
                format!(
                    "'{}' needs the key {} (example: {})",
                    kw.text, keys[0], model.example
                ),
            ));
        };
        let last = given.iter().rposition(Option::is_some).unwrap_or(0);
        // A first value that is no probability is told by the ipfw
        // parser, at its key.
        let defaults = (model.defaults)(parse_probability(&first.text).unwrap_or(0.0));
        let mut toks = vec![kw.clone()];
        for (i, v) in given.into_iter().enumerate().take(last + 1) {
            toks.push(v.unwrap_or_else(|| {
                let mut d = kw.clone();
                d.text = defaults[i].to_string();
                d
            }));
        }
        Ok(toks)
    }

    /// `codel = { target = "5ms", interval = "100ms", ecn = true }` as the
    /// words of `codel target 5ms interval 100ms ecn`, in the table's
    /// order: every key optional (the ipfw parser's defaults), `ecn =
    /// false` as `noecn`.
    fn codel_tokens(&self, kw: Tok, t: &DeTable<'_>) -> Result<Vec<Tok>, Error> {
        let mut toks = vec![kw];
        toks.extend(self.parameter_tokens(t, &CODEL_TABLE)?);
        Ok(toks)
    }

    /// The words of a table of CoDel's, fq_codel's, PIE's or fq_pie's
    /// parameters, in the table's order: `key value` for each key but the
    /// switches, whose boolean is the word or its `no` word, and PIE's
    /// `estimator`, whose string is the word `dre` or `ts`.
    fn parameter_tokens(&self, t: &DeTable<'_>, model: &ParameterTable) -> Result<Vec<Tok>, Error> {
        let mut toks = Vec::new();
        for (k, v) in t.iter() {
            let key = self.key_tok(k);
            if let Some((on, off)) = model.switches.iter().find(|(on, _)| key.text == *on) {
                match v.get_ref() {
                    DeValue::Boolean(b) => {
                        let mut word = key;
                        word.text = if *b { on } else { off }.to_string();
                        toks.push(word);
                    }
                    other => {
                        let t = self.tok(other.type_str(), v.span().start);
                        return Err(self.error(
                            &t,
                            ErrorKind::Syntax,
                            format!("{}'s '{on}' takes true or false", model.owner),
                        ));
                    }
                }
            } else if key.text == "estimator" && model.keys.contains(&"estimator") {
                let mut word = self.scalar(&key, v)?;
                if !matches!(word.text.as_str(), "dre" | "ts") {
                    return Err(self.error(
                        &word,
                        ErrorKind::Syntax,
                        format!(
                            "{}'s 'estimator' takes \"dre\" (departure rate) or \"ts\" (timestamps), not '{}'",
                            model.owner, word.text
                        ),
                    ));
                }
                // At the key, as a switch's word is.
                word.line = key.line;
                word.column = key.column;
                toks.push(word);
            } else if model.keys.contains(&key.text.as_str()) {
                let v = self.scalar(&key, v)?;
                toks.extend([key, v]);
            } else {
                return Err(self.error(
                    &key,
                    ErrorKind::UnknownKeyword,
                    format!(
                        "unknown {} key '{}' (allowed: {})",
                        model.name,
                        key.text,
                        model.keys.join(", ")
                    ),
                ));
            }
        }
        Ok(toks)
    }

    /// A sched's `fq_codel` or `fq_pie` table (`model`) as the words after
    /// its `type` (`fq_codel = { target = "2ms", flows = 256 }` as `target
    /// 2ms flows 256`); `value` is refused at itself when it is no table.
    fn type_table_tokens(
        &self,
        value: &Spanned<DeValue<'_>>,
        model: &ParameterTable,
    ) -> Result<Vec<Tok>, Error> {
        match value.get_ref() {
            DeValue::Table(t) => self.parameter_tokens(t, model),
            other => {
                let t = self.tok(other.type_str(), value.span().start);
                let example = if model.name == "fq_pie" {
                    "fq_pie = { target = \"15ms\", tupdate = \"15ms\", ecn = true, estimator = \"ts\", quantum = 1514, limit = 10240, flows = 1024 }"
                } else {
                    "fq_codel = { target = \"5ms\", interval = \"100ms\", ecn = true, quantum = 1514, limit = 10240, flows = 1024 }"
                };
                Err(self.error(
                    &t,
                    ErrorKind::Syntax,
                    format!("'{}' takes a table (example: {example})", model.name),
                ))
            }
        }
    }

    /// `slot = { min = "800us", max = "1ms", packets = 32, bytes = "64KB" }`
    /// or `slot = { distribution = "normal", delay = "1ms", jitter =
    /// "200us" }` as the words of `slot ...`, in their order.
    fn slot_tokens(&self, kw: Tok, t: &DeTable<'_>) -> Result<Vec<Tok>, Error> {
        const KEYS: &str = "min, max, distribution, delay, jitter, packets, bytes";
        if let Some((k, _)) = t.iter().find(|(k, _)| {
            !matches!(
                k.get_ref().as_ref(),
                "min" | "max" | "distribution" | "delay" | "jitter" | "packets" | "bytes"
            )
        }) {
            let t = self.key_tok(k);
            return Err(self.error(
                &t,
                ErrorKind::UnknownKeyword,
                format!("unknown slot key '{}' (allowed: {KEYS})", t.text),
            ));
        }
        let value = |name: &str| -> Result<Option<(Tok, Tok)>, Error> {
            match t.iter().find(|(k, _)| k.get_ref() == name) {
                Some((k, v)) => {
                    let key = self.key_tok(k);
                    let v = self.scalar(&key, v)?;
                    Ok(Some((key, v)))
                }
                None => Ok(None),
            }
        };
        let missing = |what: &str| {
            self.error(
                &kw,
                ErrorKind::Syntax,
                format!(
                    "'slot' needs {what} (example: slot = {{ min = \"800us\", max = \"1ms\", packets = 32 }})"
                ),
            )
        };
        let mut toks = vec![kw.clone()];
        match value("distribution")? {
            Some((key, d)) => {
                if let Some((k, _)) = value("min")?.or(value("max")?) {
                    return Err(self.error(
                        &k,
                        ErrorKind::Syntax,
                        "a slot has either min and max or a distribution with delay and jitter, not both",
                    ));
                }
                let (_, delay) =
                    value("delay")?.ok_or_else(|| missing("a 'delay' with its distribution"))?;
                let (_, jitter) =
                    value("jitter")?.ok_or_else(|| missing("a 'jitter' with its distribution"))?;
                let mut word = key;
                word.text = "distribution".into();
                toks.extend([word, d, delay, jitter]);
            }
            None => {
                if let Some((k, _)) = value("delay")?.or(value("jitter")?) {
                    return Err(self.error(
                        &k,
                        ErrorKind::Syntax,
                        "a slot's 'delay' and 'jitter' go with a 'distribution'; a uniform interval is 'min' and 'max'",
                    ));
                }
                let (_, min) = value("min")?
                    .ok_or_else(|| missing("'min' (and 'max'), or a 'distribution'"))?;
                toks.push(min);
                if let Some((_, max)) = value("max")? {
                    toks.push(max);
                }
            }
        }
        for name in ["packets", "bytes"] {
            if let Some((key, v)) = value(name)? {
                toks.extend([key, v]);
            }
        }
        Ok(toks)
    }

    fn object(&self, kind: ObjKind, header: &Tok, table: &DeTable<'_>) -> Result<Statement, Error> {
        let (number, number_tok) = self.number(table, header)?;
        let mut draft = Draft::default();
        draft.fields.push(("number", number_tok.pos()));
        // A sched's `fq_codel` or `fq_pie` table: its words follow `type
        // fq_codel` or `type fq_pie`, wherever the table stands among the
        // keys.
        let find = |name: &str| table.iter().find(|(k, _)| k.get_ref() == name);
        let type_name = find("type").and_then(|(_, v)| match v.get_ref() {
            DeValue::String(s) => Some(s.to_ascii_lowercase()),
            _ => None,
        });
        // The table of this sched's type, when it is one of them.
        let own = SCHED_TYPE_TABLES
            .into_iter()
            .find(|m| type_name.as_deref() == Some(m.name))
            .filter(|_| kind != ObjKind::Queue);
        let obj = kind.name();
        for (k, v) in table.iter() {
            if k.get_ref() == "number" {
                continue;
            }
            let key = self.key_tok(k);
            let typed = SCHED_TYPE_TABLES.into_iter().find(|m| key.text == m.name);
            if let (true, Some(m)) = (kind != ObjKind::Queue, typed) {
                if own.is_some_and(|o| o.name == m.name) {
                    continue;
                }
                let has = match &type_name {
                    Some(t) => format!("this one's type is \"{t}\""),
                    None => "this one has no type".to_string(),
                };
                return Err(self.error(
                    &key,
                    ErrorKind::MissingReference,
                    format!(
                        "an '{0}' table needs type = \"{0}\" on the same {obj} ({has})",
                        m.name
                    ),
                ));
            }
            // A parameter of a sched type on the sched itself: named with
            // the type it belongs to (this sched's when it has it).
            let belongs = own
                .filter(|m| m.keys.contains(&key.text.as_str()))
                .or_else(|| {
                    SCHED_TYPE_TABLES
                        .into_iter()
                        .find(|m| m.keys.contains(&key.text.as_str()))
                });
            // A pipe's own `limit` (its queue's size) and `ecn` (RED's)
            // are its keys.
            let pipe_key = kind == ObjKind::Pipe && matches!(key.text.as_str(), "limit" | "ecn");
            if let (true, Some(m)) = (kind != ObjKind::Queue && !pipe_key, belongs) {
                return Err(self.error(
                    &key,
                    ErrorKind::UnknownKeyword,
                    format!(
                        "'{0}' is a parameter of the {1} sched type: in TOML it goes in the {obj}'s {1} table (example: type = \"{1}\" and {1} = {{ {0} = {2} }})",
                        key.text,
                        m.name,
                        match key.text.as_str() {
                            "target" if m.name == "fq_pie" => "\"15ms\"",
                            "target" => "\"5ms\"",
                            "interval" => "\"100ms\"",
                            "tupdate" => "\"15ms\"",
                            "max_burst" => "\"150ms\"",
                            "alpha" => "0.125",
                            "beta" => "1.25",
                            "max_ecnth" => "0.1",
                            "estimator" => "\"ts\"",
                            "ecn" | "capdrop" | "derand" | "onoff" => "true",
                            "quantum" => "1514",
                            "limit" => "10240",
                            _ => "1024",
                        }
                    ),
                ));
            }
            let mut toks = self.object_tokens(kind, &key, v)?;
            if let (Some(m), "type") = (own, key.text.as_str()) {
                if let Some((_, fv)) = find(m.name) {
                    toks.extend(self.type_table_tokens(fv, m)?);
                }
            }
            let mut cur = Cursor::new(&toks, self.file);
            while cur.peek().is_some() {
                parse_object_keyword(&mut cur, kind, &mut draft)?;
            }
        }
        Ok(Statement::Object(kind, number, Box::new(draft)))
    }

    fn rule(&self, header: &Tok, table: &DeTable<'_>) -> Result<Statement, Error> {
        let mut rule = empty_rule(Action::Allow);
        let mut fields = Fields::new();
        let mut toks = Vec::new();
        let find = |name: &str| table.iter().find(|(k, _)| k.get_ref() == name);
        for (k, _) in table.iter() {
            if !matches!(
                k.get_ref().as_ref(),
                "number"
                    | "action"
                    | "proto"
                    | "from"
                    | "to"
                    | "src-port"
                    | "dst-port"
                    | "direction"
                    | "via"
                    | "recv"
                    | "xmit"
                    | "dscp"
                    | "iplen"
                    | "tcpflags"
                    | "established"
                    | "prob"
                    | "comment"
            ) {
                let t = self.key_tok(k);
                return Err(self.error(&t, ErrorKind::UnknownKeyword, format!("unknown rule key '{}' (allowed: number, prob, action, proto, from, to, src-port, dst-port, dscp, iplen, tcpflags, established, direction, via, recv, xmit, comment)", t.text)));
            }
        }
        match find("number") {
            Some(_) => {
                let (n, t) = self.number(table, header)?;
                rule.number = Some(n);
                fields.push(("number", t.pos()));
            }
            None => fields.push(("number", header.pos())),
        }
        let Some((ak, av)) = find("action") else {
            return Err(self.error(
                header,
                ErrorKind::Syntax,
                "each [[rule]] needs an 'action' (example: action = \"pipe 1\")",
            ));
        };
        let akey = self.key_tok(ak);
        let action = self.string(av, "action", "queue 1")?;
        let base = av.span().start + 1;
        let mut offset = 0;
        for word in action.split(' ') {
            if !word.is_empty() {
                toks.push(self.tok(word, base + offset));
            }
            offset += word.len() + 1;
        }
        if toks.is_empty() {
            return Err(self.error(
                &akey,
                ErrorKind::Syntax,
                "'action' is empty (example: \"queue 1\")",
            ));
        }
        for (name, keyword) in [
            ("proto", None),
            ("from", Some("from")),
            ("to", Some("to")),
            ("src-port", Some("src-port")),
            ("dst-port", Some("dst-port")),
            ("dscp", Some("dscp")),
            ("iplen", Some("iplen")),
            ("tcpflags", Some("tcpflags")),
            ("direction", None),
            ("via", Some("via")),
            ("recv", Some("recv")),
            ("xmit", Some("xmit")),
        ] {
            if let Some((k, v)) = find(name) {
                let key = self.key_tok(k);
                // `from = "not 10.0.0.0/8"`, `dst-port = "not 80,443"`,
                // `via = "not eth0"`, `proto = "not udp"`: the words of the
                // ipfw line (`from not ...`, `not dst-port ...`).
                let negated = match v.get_ref() {
                    DeValue::String(text) => text.strip_prefix("not ").map(|rest| {
                        let skipped = text.len() - rest.trim_start().len();
                        (rest.trim_start().to_string(), skipped)
                    }),
                    _ => None,
                };
                let (not, value) = match negated {
                    Some((rest, skipped)) => {
                        let start = v.span().start + 1;
                        if rest.is_empty()
                            || rest.contains(|c: char| c.is_whitespace() || c == '#' || c == ';')
                        {
                            let t = self.tok(rest, start + skipped);
                            return Err(self.error(
                                &t,
                                ErrorKind::Syntax,
                                format!(
                                    "'{}' must be one word after 'not', without spaces, '#' or ';'",
                                    key.text
                                ),
                            ));
                        }
                        (
                            Some(self.tok("not".to_string(), start)),
                            self.tok(rest, start + skipped),
                        )
                    }
                    None => (None, self.scalar(&key, v)?),
                };
                if name == "direction" && !matches!(value.text.as_str(), "in" | "out") {
                    return Err(self.error(
                        &value,
                        ErrorKind::UnknownKeyword,
                        format!("unknown direction '{}' (allowed: in, out)", value.text),
                    ));
                }
                if name == "proto" && crate::model::Proto::from_name(&value.text).is_none() {
                    return Err(self.error(
                        &value,
                        ErrorKind::UnknownKeyword,
                        format!(
                            "unknown proto '{}' (allowed: ip, ip4, ip6, tcp, udp, icmp)",
                            value.text
                        ),
                    ));
                }
                let keyword = keyword.map(|kw| {
                    let mut kt = key.clone();
                    kt.text = kw.into();
                    kt
                });
                if matches!(name, "from" | "to") {
                    // `from not ADDR`: the negation follows the keyword.
                    toks.extend(keyword);
                    toks.extend(not);
                } else {
                    // `not dst-port 80`, `not via eth0`, `not udp`, `not in`.
                    toks.extend(not);
                    toks.extend(keyword);
                }
                toks.push(value);
            }
        }
        if let Some((k, v)) = find("established") {
            // `established = true` is the word `established`; `false` is
            // `not established` (every packet the test refuses).
            let key = self.key_tok(k);
            let DeValue::Boolean(yes) = v.get_ref() else {
                let t = self.scalar(&key, v)?;
                return Err(self.error(
                    &t,
                    ErrorKind::Syntax,
                    "'established' is true (a TCP packet with ack or rst) or false (any other packet)",
                ));
            };
            if !yes {
                toks.push(self.tok("not".to_string(), v.span().start));
            }
            toks.push(key);
        }
        let add = header.clone();
        if let Some((k, v)) = find("prob") {
            // `prob = 0.5` (or "50%"): the words `prob 0.5` before the action.
            let key = self.key_tok(k);
            toks.insert(0, self.scalar(&key, v)?);
            toks.insert(0, key);
        }
        let mut cur = Cursor::new(&toks, self.file);
        parse_rule_prob(&mut cur, &mut rule, &mut fields)?;
        parse_rule_body(&mut cur, &add, &mut rule, &mut fields)?;
        if let Some((_, v)) = find("comment") {
            let text = self.string(v, "comment", "web servers")?;
            let t = self.tok(text.to_string(), v.span().start + 1);
            rule.comment = rule_comment(text).map_err(|e| self.error(&t, e.kind, e.message))?;
            fields.push(("comment", t.pos()));
        }
        Ok(Statement::Rule(rule, fields))
    }

    fn table_entries(&self, header: &Tok, table: &DeTable<'_>) -> Result<Vec<Statement>, Error> {
        let (number, number_tok) = self.number(table, header)?;
        let mut out = Vec::new();
        for (k, v) in table.iter() {
            let key = self.key_tok(k);
            match key.text.as_str() {
                "number" => {}
                "entries" => {
                    let entries = self.table(&key, v)?;
                    for (pk, pv) in entries.iter() {
                        let prefix_tok = self.key_tok(pk);
                        let prefix =
                            prefix_tok
                                .text
                                .parse()
                                .map_err(|e: crate::units::ValueError| {
                                    self.error(&prefix_tok, e.kind, e.message)
                                })?;
                        let value_tok = self.scalar(&prefix_tok, pv)?;
                        let value = parse_u32(&value_tok.text)
                            .map_err(|e| self.error(&value_tok, e.kind, e.message))?;
                        out.push(Statement::TableAdd {
                            number,
                            number_pos: number_tok.pos(),
                            entry: TableEntry { prefix, value },
                            prefix_pos: prefix_tok.pos(),
                            value_pos: value_tok.pos(),
                        });
                    }
                }
                _ => {
                    return Err(self.error(
                        &key,
                        ErrorKind::UnknownKeyword,
                        format!(
                            "unknown table key '{}' (allowed: number, entries)",
                            key.text
                        ),
                    ))
                }
            }
        }
        if out.is_empty() {
            // Without entries: the table exists, empty (ipfw's `create`).
            out.push(Statement::TableCreate {
                number,
                number_pos: number_tok.pos(),
            });
        }
        Ok(out)
    }

    fn array_of_tables<'v, 'i>(
        &self,
        key: &Tok,
        value: &'v Spanned<DeValue<'i>>,
    ) -> Result<Vec<&'v DeTable<'i>>, Error> {
        let Some(items) = value.get_ref().as_array() else {
            let t = self.tok(value.get_ref().type_str(), value.span().start);
            return Err(self.error(
                &t,
                ErrorKind::Syntax,
                format!(
                    "'{}' must be an array of tables ([[{}]])",
                    key.text, key.text
                ),
            ));
        };
        items.iter().map(|item| self.table(key, item)).collect()
    }

    fn document(&self, doc: &DeTable<'_>) -> Result<Config, Error> {
        let mut builder = Builder::new(self.file);
        let entries: Vec<Entry<'_>> = doc.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (k, v) in &entries {
            let key = self.key_tok(k);
            match key.text.as_str() {
                "seed" => {
                    let t = self.scalar(&key, v)?;
                    let seed = parse_uint(&t.text).map_err(|e| self.error(&t, e.kind, e.message))?;
                    builder.add(Statement::Seed(seed, t.pos()))?;
                }
                "default" => {
                    let t = self.scalar(&key, v)?;
                    let action = match t.text.as_str() {
                        "allow" => DefaultAction::Allow,
                        "deny" => DefaultAction::Deny,
                        _ => return Err(self.error(&t, ErrorKind::UnknownKeyword, format!("unknown default action '{}' (allowed: allow, deny)", t.text))),
                    };
                    builder.add(Statement::Default(action, t.pos()))?;
                }
                "sched" | "pipe" | "queue" => {
                    let kind = match key.text.as_str() {
                        "sched" => ObjKind::Sched,
                        "pipe" => ObjKind::Pipe,
                        _ => ObjKind::Queue,
                    };
                    for table in self.array_of_tables(&key, v)? {
                        builder.add(self.object(kind, &key, table)?)?;
                    }
                }
                "rule" => {
                    for table in self.array_of_tables(&key, v)? {
                        builder.add(self.rule(&key, table)?)?;
                    }
                }
                "table" => {
                    for table in self.array_of_tables(&key, v)? {
                        for st in self.table_entries(&key, table)? {
                            builder.add(st)?;
                        }
                    }
                }
                _ => {
                    return Err(self.error(&key, ErrorKind::UnknownKeyword, format!("unknown top-level key '{}' (allowed: default, seed, sched, pipe, queue, table, rule)", key.text)))
                }
            }
        }
        Ok(builder.config)
    }
}

/// Parses a TOML configuration (see [`crate::parse_toml`]).
pub(crate) fn parse(text: &str, file: &str) -> Result<Config, Error> {
    let reader = Reader {
        file,
        lines: LineIndex::new(text),
    };
    let doc = DeTable::parse(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let (line, column) = reader.lines.at(span.start);
        let token: String = text
            .get(span.clone())
            .unwrap_or("")
            .chars()
            .take(40)
            .collect();
        let message = e
            .message()
            .lines()
            .next()
            .unwrap_or("invalid TOML")
            .to_string();
        Pos::new(line, column, token).error(
            file,
            ErrorKind::Syntax,
            format!("invalid TOML: {message}"),
        )
    })?;
    reader.document(doc.get_ref())
}
