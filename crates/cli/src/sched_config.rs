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
}

/// Reads and parses `path`.
///
/// # Errors
/// A usage error (exit code 2) naming the file, and the field for a parse
/// error.
pub fn load(path: &Path) -> anyhow::Result<SchedulerConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--sched-config {}: {e}", path.display())))?;
    parse(&text).map_err(|e| usage(format!("--sched-config {}: {e}", path.display())))
}

/// Parses a configuration, naming the field at fault in the error.
pub fn parse(text: &str) -> Result<SchedulerConfig, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // "." is the whole document, "?" a position before any field (a
        // syntax error): neither names a field.
        if path == "." || path == "?" {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })
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
