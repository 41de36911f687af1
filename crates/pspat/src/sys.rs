//! The current CPU, used to pick a per-CPU client list (\[J\] §3.1).
//!
//! A wrong or stale answer is harmless: the client lists accept
//! announcements from any CPU (they are `fetch_or` bitmaps, see
//! `pspat_mailbox::client_list`), so the CPU only decides which list, and so
//! which read gate, serves a client. The answer comes from `rustix`'s safe
//! `sched_getcpu`, on rustix's libc backend (workspace `Cargo.toml`), so
//! from the C library's, which valgrind can run. A client asks once per
//! [`CPU_REFRESH`] submits, so the call costs well under a nanosecond per
//! packet.

/// Submits between two reads of the current CPU.
pub(crate) const CPU_REFRESH: u32 = 256;

/// The CPU the calling thread runs on now.
#[cfg(target_os = "linux")]
pub(crate) fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

/// The CPU the calling thread runs on now (0 on systems without
/// `sched_getcpu`).
#[cfg(not(target_os = "linux"))]
pub(crate) fn current_cpu() -> usize {
    0
}
