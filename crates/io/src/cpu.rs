//! Which CPU the calling thread runs on, for reports of where threads ran.
//!
//! One call of `rustix`'s safe `sched_getcpu` (the C library's, on rustix's
//! libc backend: workspace `Cargo.toml`); the answer may
//! be stale as soon as it is returned, since the scheduler may
//! move the thread at any moment, so it is for reports, not decisions.

/// The CPU the calling thread runs on now, or `None` if the system cannot
/// say.
#[cfg(target_os = "linux")]
pub fn current_cpu() -> Option<usize> {
    Some(rustix::thread::sched_getcpu())
}

/// The CPU the calling thread runs on now (`None` on systems without
/// `sched_getcpu`).
#[cfg(not(target_os = "linux"))]
pub fn current_cpu() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_current_cpu_is_one_of_the_machine() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(cpu) = super::current_cpu() {
            // CPU numbers may be sparse, but never beyond the kernel's limit.
            assert!(cpu < cpus.max(4096), "cpu {cpu}");
        }
    }
}
