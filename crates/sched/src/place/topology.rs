//! CPU topology for cache-aware placement: which CPUs share an L2, a last
//! level cache, a package; parsed from the text of Linux sysfs files by pure
//! functions (the caller reads the files), or given directly.
//!
//! # Sources
//! Linux `Documentation/ABI/testing/sysfs-devices-system-cpu` and
//! `Documentation/admin-guide/cputopology.rst`:
//! `/sys/devices/system/cpu/cpuN/topology/physical_package_id` (a decimal,
//! `-1` when unknown) and `/sys/devices/system/cpu/cpuN/cache/indexM/{level,
//! type, shared_cpu_list}` (`type` is `Data`, `Instruction` or `Unified`;
//! `shared_cpu_list` a list such as `0-3,8-11`).
//!
//! # Model
//! Each CPU gets a package and, when the caches say so, an L2 group and a
//! last-level-cache (L3 or above) group, each named by the lowest CPU that
//! shares it. From these, [`Topology::cost_matrix`] fills \[H\] §6.2's ratios
//! c_{i,j} ≥ 1 by the closest level two CPUs share, and [`Topology::tree`]
//! builds the package → LLC → L2 → CPU tree for H-CAHRW.
//!
//! \[H\] D. Guo, *Multicore Scheduling for Network Applications Based on
//! Highest Random Weight*, PhD thesis, UC Riverside, 2010.

use serde::Deserialize;

use super::cost::CostMatrix;
use super::error::PlaceError;
use super::hier::HierTree;

/// One CPU's place in the topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuPlace {
    /// The CPU number.
    pub cpu: u32,
    /// Its package (socket).
    pub package: u32,
    /// The group of CPUs sharing its L2 (the lowest CPU number in it), if known.
    #[serde(default)]
    pub l2: Option<u32>,
    /// The group sharing its last-level cache (L3 or above), if any.
    #[serde(default)]
    pub llc: Option<u32>,
}

/// Cost ratios by the closest level two CPUs share (\[H\] §6.2–6.3: 2, 4, 12 at
/// "core, L2 and socket level" on a Xeon E5335, read as: another core under
/// the same L2, another L2 of the socket, another socket).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostRatios {
    /// Another CPU under the same L2.
    pub shared_l2: f64,
    /// Another CPU under the same last-level cache, not the same L2.
    pub shared_llc: f64,
    /// Another CPU of the same package sharing no cache.
    pub same_package: f64,
    /// A CPU of another package.
    pub other_package: f64,
}

impl Default for CostRatios {
    fn default() -> Self {
        CostRatios {
            shared_l2: 2.0,
            shared_llc: 4.0,
            same_package: 4.0,
            other_package: 12.0,
        }
    }
}

impl CostRatios {
    /// `Ok` when every ratio is finite and at least 1.
    ///
    /// # Errors
    /// [`PlaceError::OutOfRange`] naming the first ratio at fault.
    pub fn check(&self) -> Result<(), PlaceError> {
        for (what, value) in [
            ("shared_l2", self.shared_l2),
            ("shared_llc", self.shared_llc),
            ("same_package", self.same_package),
            ("other_package", self.other_package),
        ] {
            if !(value.is_finite() && value >= 1.0) {
                return Err(PlaceError::OutOfRange {
                    what,
                    value: value.to_string(),
                    allowed: "finite and >= 1",
                });
            }
        }
        Ok(())
    }
}

/// The sysfs text of one cache index of one CPU.
#[derive(Clone, Copy, Debug)]
pub struct SysfsCache<'a> {
    /// Contents of `cache/indexM/level`.
    pub level: &'a str,
    /// Contents of `cache/indexM/type`.
    pub cache_type: &'a str,
    /// Contents of `cache/indexM/shared_cpu_list`.
    pub shared_cpu_list: &'a str,
}

/// The sysfs text of one CPU.
#[derive(Clone, Debug)]
pub struct SysfsCpu<'a> {
    /// The N of `cpuN`.
    pub cpu: u32,
    /// Contents of `topology/physical_package_id`.
    pub physical_package_id: &'a str,
    /// Its cache indexes.
    pub caches: Vec<SysfsCache<'a>>,
}

/// A validated set of CPUs, sorted by CPU number.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    cpus: Vec<CpuPlace>,
}

/// Parses a kernel CPU list (`0-3,8,10-11`, surrounding whitespace allowed).
///
/// # Examples
/// ```
/// use pspat_sched::place::parse_cpu_list;
/// assert_eq!(parse_cpu_list("0-2,8\n").unwrap(), vec![0, 1, 2, 8]);
/// assert!(parse_cpu_list("3-1").is_err());
/// ```
///
/// # Errors
/// [`PlaceError::Topology`] for an empty list, a non-number, a reversed range
/// or a range longer than 65536.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, PlaceError> {
    let bad = |reason: String| PlaceError::Topology {
        what: format!("cpu list {:?}", text.trim()),
        reason,
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(bad("empty".into()));
    }
    let num = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| bad(format!("{s:?} is not a CPU number")))
    };
    let mut out = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a >= 65_536 {
                    return Err(bad(format!("bad range {part:?}")));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

impl Topology {
    /// A topology from CPU places.
    ///
    /// # Errors
    /// [`PlaceError::NoTargets`] for none; [`PlaceError::Topology`] when a CPU
    /// appears twice.
    pub fn new(mut cpus: Vec<CpuPlace>) -> Result<Self, PlaceError> {
        if cpus.is_empty() {
            return Err(PlaceError::NoTargets);
        }
        cpus.sort_by_key(|c| c.cpu);
        if let Some(w) = cpus.windows(2).find(|w| w[0].cpu == w[1].cpu) {
            return Err(PlaceError::Topology {
                what: format!("cpu {}", w[0].cpu),
                reason: "appears twice".into(),
            });
        }
        Ok(Topology { cpus })
    }

    /// A topology from sysfs text (see the module docs).
    ///
    /// # Examples
    /// ```
    /// use pspat_sched::place::{SysfsCache, SysfsCpu, Topology};
    /// let cpus: Vec<SysfsCpu> = (0..4)
    ///     .map(|cpu| SysfsCpu {
    ///         cpu,
    ///         physical_package_id: "0\n",
    ///         caches: vec![SysfsCache {
    ///             level: "2\n",
    ///             cache_type: "Unified\n",
    ///             shared_cpu_list: if cpu < 2 { "0-1\n" } else { "2-3\n" },
    ///         }],
    ///     })
    ///     .collect();
    /// let t = Topology::from_sysfs(&cpus).unwrap();
    /// assert_eq!(t.cpus()[3].l2, Some(2));
    /// ```
    ///
    /// # Errors
    /// [`PlaceError::Topology`] naming the CPU and file whose text does not
    /// parse, or a shared list that omits the CPU itself.
    pub fn from_sysfs(cpus: &[SysfsCpu<'_>]) -> Result<Self, PlaceError> {
        let mut places = Vec::with_capacity(cpus.len());
        for c in cpus {
            let bad = |file: &str, reason: String| PlaceError::Topology {
                what: format!("cpu{} {file}", c.cpu),
                reason,
            };
            let pkg = c.physical_package_id.trim();
            let package = match pkg.parse::<i64>() {
                // -1: unknown; every such CPU lands in one package.
                Ok(-1) => u32::MAX,
                Ok(p) if (0..i64::from(u32::MAX)).contains(&p) => p as u32,
                _ => {
                    return Err(bad(
                        "topology/physical_package_id",
                        format!("{pkg:?} is not a package number"),
                    ))
                }
            };
            let mut place = CpuPlace {
                cpu: c.cpu,
                package,
                l2: None,
                llc: None,
            };
            let mut llc_level = 0u8;
            for (m, cache) in c.caches.iter().enumerate() {
                let level = cache.level.trim().parse::<u8>().map_err(|_| {
                    bad(
                        &format!("cache/index{m}/level"),
                        format!("{:?} is not a level", cache.level.trim()),
                    )
                })?;
                match cache.cache_type.trim() {
                    "Instruction" => continue,
                    "Data" | "Unified" => {}
                    other => {
                        return Err(bad(
                            &format!("cache/index{m}/type"),
                            format!("{other:?} is not Data, Instruction or Unified"),
                        ))
                    }
                }
                let list = parse_cpu_list(cache.shared_cpu_list)
                    .map_err(|e| bad(&format!("cache/index{m}/shared_cpu_list"), e.to_string()))?;
                if !list.contains(&c.cpu) {
                    return Err(bad(
                        &format!("cache/index{m}/shared_cpu_list"),
                        format!("{:?} omits the cpu itself", cache.shared_cpu_list.trim()),
                    ));
                }
                let group = list.iter().copied().min().unwrap_or(c.cpu);
                if level == 2 {
                    place.l2 = Some(group);
                } else if level >= 3 && level > llc_level {
                    llc_level = level;
                    place.llc = Some(group);
                }
            }
            places.push(place);
        }
        Self::new(places)
    }

    /// The CPUs, sorted by number; target positions follow this order.
    pub fn cpus(&self) -> &[CpuPlace] {
        &self.cpus
    }

    /// The ratio for running on `target` a flow whose home is `source`.
    pub fn ratio(target: &CpuPlace, source: &CpuPlace, r: &CostRatios) -> f64 {
        let (a, b) = (target, source);
        let same = |x: Option<u32>, y: Option<u32>| x.is_some() && x == y;
        if a.cpu == b.cpu {
            1.0
        } else if same(a.l2, b.l2) {
            r.shared_l2
        } else if same(a.llc, b.llc) {
            r.shared_llc
        } else if a.package == b.package {
            r.same_package
        } else {
            r.other_package
        }
    }

    /// The cost matrix of \[H\] §6.2 over the CPUs, in [`Topology::cpus`] order.
    ///
    /// # Errors
    /// [`PlaceError::OutOfRange`] when a ratio is below 1 or not finite.
    pub fn cost_matrix(&self, ratios: &CostRatios) -> Result<CostMatrix, PlaceError> {
        ratios.check()?;
        let rows = self
            .cpus
            .iter()
            .map(|t| {
                self.cpus
                    .iter()
                    .map(|s| Self::ratio(t, s, ratios))
                    .collect()
            })
            .collect();
        CostMatrix::new(rows, self.cpus.len())
    }

    /// The package → LLC → L2 → CPU tree (levels that split nothing are
    /// dropped), leaves in [`Topology::cpus`] order.
    ///
    /// # Errors
    /// None in practice; [`PlaceError::Tree`] beyond 2^24 CPUs.
    pub fn tree(&self) -> Result<HierTree, PlaceError> {
        let paths: Vec<Vec<u32>> = self
            .cpus
            .iter()
            .map(|c| vec![c.package, c.llc.unwrap_or(u32::MAX), c.l2.unwrap_or(c.cpu)])
            .collect();
        HierTree::from_paths(&paths)
    }
}
