//! The one place of this crate that calls the operating system through
//! `unsafe`: the current CPU, used to pick a per-CPU client list.
//!
//! A wrong or stale answer is harmless: the client lists accept
//! announcements from any CPU (they are `fetch_or` bitmaps, see
//! [`crate::runtime`]), so the CPU only decides which list, and so which
//! read gate, serves a client.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::unnecessary_safety_comment)]

/// The CPU the calling thread runs on now, or 0 if the OS cannot say.
#[cfg(target_os = "linux")]
pub(crate) fn current_cpu() -> usize {
    // SAFETY: `sched_getcpu` takes no arguments, touches no memory of ours
    // and is thread-safe; it returns -1 on failure, handled below.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).unwrap_or(0)
}

/// The CPU the calling thread runs on now (0 on systems without
/// `sched_getcpu`).
#[cfg(not(target_os = "linux"))]
pub(crate) fn current_cpu() -> usize {
    0
}
