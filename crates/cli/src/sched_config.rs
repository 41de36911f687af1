//! `--sched-config FILE`: a scheduler configuration in JSON, for the commands
//! that run the threaded runtime (`demo`, `bench`).
//!
//! The file is one [`SchedulerConfig`] object; every field is optional and
//! takes its default, so `{"alg": "shaped-drr", "eiffel": {"rate_bps":
//! 1000000}}` is a whole file. Errors name the file and the field's path
//! (`eiffel.rates_bps[2]`), unknown fields included; values that parse but are
//! out of range are refused when the scheduler is built, again by name.

use std::path::{Path, PathBuf};

use pspat_sched::{AlgKind, SchedulerConfig};

use crate::usage;

/// How `demo` and `bench` choose their scheduler: `--alg NAME` or
/// `--sched-config FILE`.
#[derive(clap::Args, Debug)]
pub struct SchedulerFlags {
    /// Scheduling algorithm (see `pspat sched-bench --help` for the list).
    #[arg(long, default_value = "drr")]
    alg: String,
    /// Scheduler configuration in JSON (algorithm, capacity, DRR quantum, hierarchy, Eiffel
    /// parameters, WF2Q+ link-rate hint); every field optional. Replaces --alg.
    #[arg(long = "sched-config", value_name = "FILE", conflicts_with = "alg")]
    sched_config: Option<PathBuf>,
}

impl SchedulerFlags {
    /// The `--sched-config` file, if one was given.
    pub fn file(&self) -> Option<&std::path::Path> {
        self.sched_config.as_deref()
    }
}

impl Default for SchedulerFlags {
    /// The flags' defaults: DRR.
    fn default() -> Self {
        SchedulerFlags {
            alg: "drr".into(),
            sched_config: None,
        }
    }
}

impl SchedulerFlags {
    /// The scheduler configuration of `--sched-config FILE` when given,
    /// otherwise the defaults of `--alg NAME`.
    ///
    /// # Errors
    /// A usage error (exit code 2) naming the file and field, or the
    /// algorithm.
    pub fn config(&self) -> anyhow::Result<SchedulerConfig> {
        match &self.sched_config {
            Some(path) => load(path),
            None => {
                let alg = AlgKind::parse(&self.alg).map_err(|e| usage(format!("--alg: {e}")))?;
                Ok(SchedulerConfig::new(alg))
            }
        }
    }

    /// Where the scheduler configuration comes from, for messages: the
    /// file's path or `--alg NAME`.
    pub fn source(&self) -> String {
        match &self.sched_config {
            Some(path) => path.display().to_string(),
            None => format!("--alg {}", self.alg),
        }
    }

    /// A usage error for a value the scheduler refused when built: prefixed
    /// with the file it came from (`FILE: eiffel.rate_bps = -5 is out of
    /// range ...`), or with `--alg NAME`.
    pub fn refused(&self, e: impl std::fmt::Display) -> anyhow::Error {
        match &self.sched_config {
            Some(path) => usage(format!("{}: {e}", path.display())),
            None => usage(format!("--alg {}: {e}", self.alg)),
        }
    }
}

/// Reads and parses `path`.
///
/// # Errors
/// A usage error (exit code 2) naming the file, and the field for a parse
/// error.
pub fn load(path: &Path) -> anyhow::Result<SchedulerConfig> {
    let text = pspat_config::read_text_file(path)
        .map_err(|e| usage(format!("--sched-config {}: {e}", path.display())))?;
    parse(&text).map_err(|e| usage(format!("{}: {e}", path.display())))
}

/// Parses a configuration: exactly one JSON object, nothing after it but
/// whitespace. The error names the field at fault, or the position.
///
/// # Errors
/// One line: `field.path: what is wrong`, or the syntax error and its
/// position.
pub fn parse(text: &str) -> Result<SchedulerConfig, String> {
    // serde would take an array as the fields in order (`["fifo", 1]`):
    // refuse anything but an object before it gets the chance.
    match text.trim_start().chars().next() {
        Some('{') => {}
        None => {
            return Err("empty file: expected one JSON object such as {\"alg\": \"drr\"}".into())
        }
        Some(c) => {
            return Err(format!(
                "expected one JSON object such as {{\"alg\": \"drr\"}}, found {}",
                describe_start(c)
            ))
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let config: SchedulerConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // "." is the whole document, "?" a position before any field (a
        // syntax error): neither names a field.
        if path == "." || path == "?" {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })?;
    de.end().map_err(|e| {
        format!("text after the JSON object ({e}): a file holds exactly one object")
    })?;
    Ok(config)
}

/// Names what a document starts with instead of `{`.
fn describe_start(c: char) -> String {
    match c {
        '[' => "an array".into(),
        '"' => "a string".into(),
        '-' | '0'..='9' => "a number".into(),
        't' | 'f' => "a boolean".into(),
        'n' => "null".into(),
        c if c.is_control() => format!("the control character U+{:04X}", u32::from(c)),
        c => format!("{c:?}"),
    }
}

/// Prints a configuration back as the JSON `parse` reads.
///
/// # Errors
/// Never in practice (every field serializes); the serializer's message.
pub fn to_json(config: &SchedulerConfig) -> Result<String, String> {
    serde_json::to_string(config).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_optional() {
        let c = parse("{}").unwrap();
        assert_eq!(c, SchedulerConfig::default());
        let c = parse(r#"{"alg": "wf2q+", "link_rate_bps": 10000000000}"#).unwrap();
        assert_eq!(c.alg, AlgKind::Wf2qPlus);
        assert_eq!(c.link_rate_bps, Some(10_000_000_000));
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse(r#"{"eiffel": {"deadline_ns": -5}}"#).unwrap_err();
        assert!(e.starts_with("eiffel.deadline_ns: "), "{e}");
        let e = parse(r#"{"eiffel": {"rates_bps": [1000, "x"]}}"#).unwrap_err();
        assert!(e.starts_with("eiffel.rates_bps[1]: "), "{e}");
        let e = parse(r#"{"eiffel": {"rate_bsp": 1000}}"#).unwrap_err();
        assert!(e.contains("rate_bsp"), "{e}");
        let e = parse(r#"{"alg": "nope"}"#).unwrap_err();
        assert!(e.starts_with("alg: "), "{e}");
        let e = parse("{").unwrap_err();
        assert!(e.contains("EOF"), "{e}");
        let e = parse("{nope").unwrap_err();
        assert!(e.starts_with("key must be a string"), "{e}");
    }

    #[test]
    fn exactly_one_object_and_nothing_after_it() {
        for bad in ["[]", r#"["fifo", 1]"#, "\"drr\"", "3", "null", "", "  "] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.contains("expected one JSON object") || e.contains("empty"),
                "{bad}: {e}"
            );
        }
        let e = parse(r#"{"alg":"fifo"} this is not JSON at all !!!"#).unwrap_err();
        assert!(e.contains("text after the JSON object"), "{e}");
        let e = parse(r#"{"alg":"fifo"}{}"#).unwrap_err();
        assert!(e.contains("text after the JSON object"), "{e}");
        assert_eq!(
            parse(" \n{\"alg\": \"fifo\"}\n\t ").unwrap().alg,
            AlgKind::Fifo
        );
    }

    #[test]
    fn a_parsed_config_prints_back_the_same() {
        let c = parse(r#"{"alg": "shaped-drr", "capacity": 100, "eiffel": {"rate_bps": 5000}}"#)
            .unwrap();
        assert_eq!(parse(&to_json(&c).unwrap()).unwrap(), c);
    }

    #[test]
    fn a_negative_shaping_rate_is_refused_by_name_when_built() {
        let c = parse(r#"{"alg": "shaped-drr", "eiffel": {"rate_bps": -1000}}"#).unwrap();
        let e = c
            .build(pspat_sched::FlowTable::uniform(2).unwrap())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("eiffel.rate_bps") && e.contains("-1000"), "{e}");
    }
}
