//! Refusing, before anything starts, a configuration that needs more than
//! half of the machine's memory: a scheduler arena of a billion packets
//! (18 GB) is a usage error, not a run that swaps or is killed.
//!
//! The need comes from the libraries' estimates
//! (`pspat_sched::SchedulerConfig::memory_estimate`,
//! `pspat::memory_estimate`, `pspat_bench::BenchConfig::memory_estimate`);
//! the machine's memory from `/proc/meminfo` (`MemAvailable`, else
//! `MemTotal`; proc(5)). Where neither can be read nothing is refused.

/// The fraction of the available memory one configuration may take.
pub const MAX_FRACTION: f64 = 0.5;

/// Bytes of memory available now: `MemAvailable`, else `MemTotal`, from
/// `/proc/meminfo`; `None` where it cannot be read.
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

/// `MemAvailable` (else `MemTotal`) of a `/proc/meminfo` text, in bytes.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    };
    field("MemAvailable:").or_else(|| field("MemTotal:"))
}

/// `Ok` when `needed` bytes fit in [`MAX_FRACTION`] of `available` (or
/// the available memory is unknown); otherwise one line naming `what`.
///
/// # Errors
/// The message for the user, naming what to lower.
pub fn check(what: &str, needed: u64, available: Option<u64>) -> Result<(), String> {
    let Some(avail) = available else {
        return Ok(());
    };
    let limit = (avail as f64 * MAX_FRACTION) as u64;
    if needed <= limit {
        return Ok(());
    }
    Err(format!(
        "{what} needs about {} of memory, more than half of the {} available on this machine; lower it",
        gib(needed),
        gib(avail)
    ))
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_read_in_bytes() {
        let text = "MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(parse_meminfo(text), Some(8_000_000 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 2 kB\n"), Some(2048));
        assert_eq!(parse_meminfo("nothing"), None);
    }

    #[test]
    fn more_than_half_is_refused_by_name() {
        assert!(check("x", 10, Some(20)).is_ok());
        let e = check("--sched-config f.json", 11, Some(20)).unwrap_err();
        assert!(e.starts_with("--sched-config f.json needs about"), "{e}");
        assert!(check("x", u64::MAX, None).is_ok());
    }
}
