//! The one place of this crate that calls the operating system through
//! `unsafe`: the current CPU, used to pick a per-CPU client list.
//!
//! A wrong or stale answer is harmless: the client lists accept
//! announcements from any CPU (they are `fetch_or` bitmaps, see
//! `pspat_mailbox::client_list`), so the CPU only decides which list, and so
//! which read gate, serves a client.
//!
//! Why here and not in `pspat-io`: the runtime needs the CPU on every 64th
//! submit to pick a per-CPU list (\[J\] §3.1), and `pspat-io` sits above the
//! runtime (its RX loop is a client), so the runtime cannot depend on it. The
//! standard library has no safe `getcpu`; this one call is the runtime's only
//! `unsafe`.
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
