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
    // Validate the ratios now, with the field named.
    topology
        .cost_matrix(&file.ratios)
        .map_err(|e| format!("ratios: {e}"))?;
    Ok((topology, file.ratios))
}

/// Reads a topology: `sysfs` for this machine, else a JSON file.
///
/// # Errors
/// A usage error (exit 2) naming `--topology`, the file and the field.
pub fn load_topology(arg: &str) -> anyhow::Result<(Topology, CostRatios)> {
    if arg == "sysfs" {
        return Ok((read_sysfs(Path::new(SYSFS_CPU))?, CostRatios::default()));
    }
    let text = std::fs::read_to_string(arg).map_err(|e| usage(format!("--topology {arg}: {e}")))?;
    parse_topology(&text).map_err(|e| usage(format!("--topology {arg}: {e}")))
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
    let text =
        std::fs::read_to_string(path).map_err(|e| usage(format!("--cost-matrix {path}: {e}")))?;
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
        assert!(e.starts_with("ratios: "), "{e}");
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
