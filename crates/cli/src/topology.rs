//! The machine's CPU topology for cache-aware placement: read from Linux
//! sysfs, or from a JSON file that overrides it; plus cost-matrix files.
//!
//! The parsing of sysfs text lives in the core
//! (`pspat_sched::place::Topology::from_sysfs`); this module only reads the
//! files: `/sys/devices/system/cpu/cpuN/topology/physical_package_id` and
//! `/sys/devices/system/cpu/cpuN/cache/indexM/{level,type,shared_cpu_list}`
//! (Linux `Documentation/ABI/testing/sysfs-devices-system-cpu`). CPUs
//! without a `topology` directory (offline) are skipped.
//!
//! # Topology file (JSON)
//! ```json
//! {"cpus": [{"cpu": 0, "package": 0, "l2": 0, "llc": 0},
//!           {"cpu": 1, "package": 0, "l2": 0, "llc": 0}],
//!  "ratios": {"shared_l2": 2, "shared_llc": 4, "same_package": 4, "other_package": 12}}
//! ```
//! `l2`/`llc` name the group (any number shared by the CPUs in it) and may be
//! omitted; `ratios` and each of its fields may be omitted (defaults shown,
//! from the dissertation's Xeon E5335 figures). Unknown fields are errors.
//!
//! # Topology file (TOML)
//! A file whose name ends in `.toml` holds the same fields:
//! ```toml
//! [[cpus]]
//! cpu = 0
//! package = 0
//! l2 = 0
//!
//! [ratios]
//! other_package = 20
//! ```
//! pspat reads the subset of TOML this needs (tables, arrays of tables,
//! `key = number | true | false | "string"`, `#` comments) without a TOML
//! library; anything else is reported with its line number.
//!
//! # Cost-matrix file (JSON)
//! An array of rows, `rows[target][source]`, square over the topology's CPUs
//! (in CPU-number order), every entry finite and ≥ 1.

use std::path::{Path, PathBuf};

use pspat_sched::place::{CostMatrix, CostRatios, CpuPlace, SysfsCache, SysfsCpu, Topology};
use serde::Deserialize;

use crate::usage;

/// The sysfs CPU directory.
pub const SYSFS_CPU: &str = "/sys/devices/system/cpu";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    cpus: Vec<CpuPlace>,
    #[serde(default)]
    ratios: CostRatios,
}

/// Reads the topology under `root` (normally [`SYSFS_CPU`]).
///
/// # Errors
/// A usage error naming the file that cannot be read or does not parse.
pub fn read_sysfs(root: &Path) -> anyhow::Result<Topology> {
    let entries = std::fs::read_dir(root)
        .map_err(|e| usage(format!("--topology sysfs: {}: {e}", root.display())))?;
    // Owned text of each CPU: (cpu, package id, [(level, type, list)]).
    let mut texts: Vec<(u32, String, Vec<[String; 3]>)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| usage(format!("--topology sysfs: {e}")))?;
        let name = entry.file_name();
        let Some(cpu) = name
            .to_str()
            .and_then(|n| n.strip_prefix("cpu"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let pkg_path = dir.join("topology/physical_package_id");
        if !pkg_path.exists() {
            continue;
        }
        let package = read(&pkg_path)?;
        let mut caches = Vec::new();
        let mut m = 0;
        loop {
            let index = dir.join(format!("cache/index{m}"));
            if !index.exists() {
                break;
            }
            caches.push([
                read(&index.join("level"))?,
                read(&index.join("type"))?,
                read(&index.join("shared_cpu_list"))?,
            ]);
            m += 1;
        }
        texts.push((cpu, package, caches));
    }
    let cpus: Vec<SysfsCpu<'_>> = texts
        .iter()
        .map(|(cpu, package, caches)| SysfsCpu {
            cpu: *cpu,
            physical_package_id: package,
            caches: caches
                .iter()
                .map(|[level, ty, list]| SysfsCache {
                    level,
                    cache_type: ty,
                    shared_cpu_list: list,
                })
                .collect(),
        })
        .collect();
    Topology::from_sysfs(&cpus).map_err(|e| usage(format!("--topology sysfs: {e}")))
}

fn read(path: &PathBuf) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--topology sysfs: {}: {e}", path.display())))
}

/// Parses a topology file's text (see the module docs).
///
/// # Errors
/// A message naming the field at fault.
pub fn parse_topology(text: &str) -> Result<(Topology, CostRatios), String> {
    let file: TopologyFile = parse_json(text)?;
    let topology = Topology::new(file.cpus).map_err(|e| format!("cpus: {e}"))?;
    file.ratios.check().map_err(|e| format!("ratios.{e}"))?;
    Ok((topology, file.ratios))
}

/// Parses a topology file in the TOML subset of the module docs.
///
/// # Errors
/// A message naming the line, or the field at fault.
pub fn parse_topology_toml(text: &str) -> Result<(Topology, CostRatios), String> {
    let value = toml_subset_to_json(text)?;
    let json = serde_json::to_string(&value).map_err(|e| e.to_string())?;
    parse_topology(&json)
}

/// Converts the TOML subset to a JSON value (a root object).
fn toml_subset_to_json(text: &str) -> Result<serde_json::Value, String> {
    use serde_json::{Map, Value};
    let mut root = Map::new();
    // Where `key = value` lines go: the root, a table, or the last element
    // of an array of tables.
    enum Target {
        Root,
        Table(String),
        ArrayLast(String),
    }
    let mut target = Target::Root;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let bad = |what: &str| format!("line {line_no}: {what}");
        let line = match raw.find('#') {
            Some(k) if !raw[..k].contains('"') => &raw[..k],
            _ => raw,
        }
        .trim();
        if line.is_empty() {
            continue;
        }
        let is_key = |k: &str| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            let name = name.trim();
            if !is_key(name) {
                return Err(bad(&format!("bad table name {name:?}")));
            }
            let entry = root
                .entry(name.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            match entry {
                Value::Array(a) => a.push(Value::Object(Map::new())),
                _ => return Err(bad(&format!("{name} is not an array of tables"))),
            }
            target = Target::ArrayLast(name.to_string());
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            if !is_key(name) {
                return Err(bad(&format!("bad table name {name:?}")));
            }
            if root.contains_key(name) {
                return Err(bad(&format!("table {name} defined twice")));
            }
            root.insert(name.to_string(), Value::Object(Map::new()));
            target = Target::Table(name.to_string());
        } else if let Some((key, value)) = line.split_once('=') {
            let key = key.trim();
            if !is_key(key) {
                return Err(bad(&format!("bad key {key:?}")));
            }
            let value = value.trim();
            let parsed = if value == "true" || value == "false" {
                Value::Bool(value == "true")
            } else if let Some(s) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                if s.contains(['"', '\\']) {
                    return Err(bad("escapes in strings are not supported"));
                }
                Value::String(s.to_string())
            } else if let Ok(n) = value.replace('_', "").parse::<i64>() {
                Value::from(n)
            } else if let Some(x) = value
                .replace('_', "")
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
            {
                Value::Number(x)
            } else {
                return Err(bad(&format!(
                    "{value:?} is not a number, true, false or a \"string\""
                )));
            };
            let table = match &target {
                Target::Root => &mut root,
                Target::Table(t) => match root.get_mut(t) {
                    Some(Value::Object(o)) => o,
                    _ => return Err(bad("internal: table vanished")),
                },
                Target::ArrayLast(t) => match root.get_mut(t) {
                    Some(Value::Array(a)) => match a.last_mut() {
                        Some(Value::Object(o)) => o,
                        _ => return Err(bad("internal: array of tables vanished")),
                    },
                    _ => return Err(bad("internal: array of tables vanished")),
                },
            };
            if table.insert(key.to_string(), parsed).is_some() {
                return Err(bad(&format!("key {key} given twice")));
            }
        } else {
            return Err(bad(&format!(
                "{line:?} is not a [table], [[array]] or key = value (pspat reads a TOML subset)"
            )));
        }
    }
    Ok(Value::Object(root))
}

/// Reads a topology: `sysfs` for this machine, else a JSON file (a TOML
/// file when the name ends in `.toml`).
///
/// # Errors
/// A usage error (exit 2) naming `--topology`, the file and the field.
pub fn load_topology(arg: &str) -> anyhow::Result<(Topology, CostRatios)> {
    if arg == "sysfs" {
        return Ok((read_sysfs(Path::new(SYSFS_CPU))?, CostRatios::default()));
    }
    let text = pspat_config::read_text_file(Path::new(arg))
        .map_err(|e| usage(format!("--topology {arg}: {e}")))?;
    let parsed = if arg.ends_with(".toml") {
        parse_topology_toml(&text)
    } else {
        parse_topology(&text)
    };
    parsed.map_err(|e| usage(format!("--topology {arg}: {e}")))
}

/// Parses a cost-matrix file's text for `targets` targets.
///
/// # Errors
/// A message for bad JSON, a wrong size or an entry below 1.
pub fn parse_cost_matrix(text: &str, targets: usize) -> Result<CostMatrix, String> {
    let rows: Vec<Vec<f64>> = parse_json(text)?;
    CostMatrix::new(rows, targets).map_err(|e| e.to_string())
}

/// Reads a cost-matrix file for `targets` targets.
///
/// # Errors
/// A usage error (exit 2) naming `--cost-matrix` and the file.
pub fn load_cost_matrix(path: &str, targets: usize) -> anyhow::Result<CostMatrix> {
    let text = pspat_config::read_text_file(Path::new(path))
        .map_err(|e| usage(format!("--cost-matrix {path}: {e}")))?;
    parse_cost_matrix(&text, targets).map_err(|e| usage(format!("--cost-matrix {path}: {e}")))
}

fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
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
    fn topology_files_parse_and_name_the_field_at_fault() {
        let (t, r) = parse_topology(
            r#"{"cpus": [{"cpu": 1, "package": 0, "l2": 0}, {"cpu": 0, "package": 0, "l2": 0}],
                "ratios": {"other_package": 20}}"#,
        )
        .unwrap();
        assert_eq!(t.cpus()[0].cpu, 0);
        assert_eq!(r.other_package, 20.0);
        assert_eq!(r.shared_l2, 2.0);
        let e = parse_topology(r#"{"cpus": [{"cpu": "x", "package": 0}]}"#).unwrap_err();
        assert!(e.starts_with("cpus[0].cpu: "), "{e}");
        let e = parse_topology(r#"{"cpus": [], "ratios": {}}"#).unwrap_err();
        assert!(e.starts_with("cpus: "), "{e}");
        let e = parse_topology(r#"{"cpus": [{"cpu": 0, "package": 0}], "extra": 1}"#).unwrap_err();
        assert!(e.contains("extra"), "{e}");
        let e = parse_topology(
            r#"{"cpus": [{"cpu": 0, "package": 0}, {"cpu": 1, "package": 1}],
                "ratios": {"other_package": 0.5}}"#,
        )
        .unwrap_err();
        assert!(e.starts_with("ratios.other_package = 0.5 "), "{e}");
    }

    #[test]
    fn toml_topology_files_read_the_same_fields() {
        let (t, r) = parse_topology_toml(
            "# two cores under one L2\n[[cpus]]\ncpu = 0\npackage = 0\nl2 = 0 # shared\n\n\
             [[cpus]]\ncpu = 1\npackage = 0\nl2 = 0\n\n[ratios]\nshared_l2 = 1.5\n",
        )
        .unwrap();
        assert_eq!(t.cpus().len(), 2);
        assert_eq!(t.cpus()[1].l2, Some(0));
        assert_eq!(r.shared_l2, 1.5);
        let e = parse_topology_toml("[[cpus]]\ncpu = zero\n").unwrap_err();
        assert!(e.starts_with("line 2: "), "{e}");
        let e = parse_topology_toml("[[cpus]]\ncpu = 0\n").unwrap_err();
        assert!(e.contains("package"), "{e}");
        let e = parse_topology_toml("cpus = [1, 2]\n").unwrap_err();
        assert!(e.starts_with("line 1: "), "{e}");
        let e = parse_topology_toml("[ratios]\nshared_l2 = 0.5\n[[cpus]]\ncpu = 0\npackage = 0\n")
            .unwrap_err();
        assert!(e.starts_with("ratios.shared_l2 = 0.5 "), "{e}");
    }

    #[test]
    fn cost_matrix_files_are_checked() {
        assert!(parse_cost_matrix("[[1, 2], [2, 1]]", 2).is_ok());
        assert!(parse_cost_matrix("[[1, 2], [2, 1]]", 3)
            .unwrap_err()
            .contains("expected 3x3"));
        assert!(parse_cost_matrix("[[1, 0.5], [2, 1]]", 2)
            .unwrap_err()
            .contains(">= 1"));
        assert!(parse_cost_matrix("[[1, \"x\"]]", 1).is_err());
    }

    #[test]
    fn this_machine_parses_when_sysfs_is_there() {
        let root = Path::new(SYSFS_CPU);
        if !root.join("cpu0/topology/physical_package_id").exists() {
            return; // not Linux, or sysfs not mounted: nothing to check
        }
        let t = read_sysfs(root).unwrap();
        assert!(!t.cpus().is_empty());
        assert!(t.tree().unwrap().targets() == t.cpus().len());
    }
}
