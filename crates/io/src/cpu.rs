//! Which CPU the calling thread runs on, for reports of where threads ran,
//! and the kernel's time slice of a thread.
//!
//! [`current_cpu`]: one `getcpu` system call (`rustix`'s safe
//! `sched_getcpu`); the answer may be stale as soon as it is returned, since
//! the scheduler may move the thread at any moment, so it is for reports,
//! not decisions.
//!
//! [`set_time_slice`]: Linux's fair scheduler (EEVDF, since 6.6) gives each
//! runnable thread a slice of its CPU (a few ms by default) and, from 6.12,
//! honours a per-thread request: `sched_setattr(2)` with `SCHED_OTHER` and
//! `sched_runtime` set to the slice, from 100 µs to 100 ms. A thread with a
//! shorter slice than the one running may preempt it when it wakes (the
//! kernel's `PREEMPT_SHORT`), where a thread with the default slice waits,
//! on a busy core, until the running thread's slice ends at a timer tick
//! (every 4 ms at `HZ=250`). Older kernels accept the call and ignore the
//! request; [`set_time_slice`] reads it back to say which.

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

/// Shortest and longest slice the kernel accepts (it clamps to these).
pub const TIME_SLICE_RANGE: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_micros(100),
    std::time::Duration::from_millis(100),
);

/// Asks the kernel for a time slice of `slice` for thread `tid` (0: the
/// calling thread), keeping its policy `SCHED_OTHER` and its nice value.
/// Returns whether the kernel took the request (its `sched_getattr` reports
/// the slice back); `Ok(false)` on a kernel without custom slices (before
/// 6.12), where the thread keeps the default.
///
/// # Errors
/// A slice outside [`TIME_SLICE_RANGE`] ([`IoError::BadConfig`]); a thread
/// that does not exist or is not the caller's to change, or a thread under
/// a real-time policy ([`IoError::Os`]).
#[cfg(target_os = "linux")]
pub fn set_time_slice(tid: u32, slice: std::time::Duration) -> Result<bool, crate::IoError> {
    use crate::IoError;
    let (min, max) = TIME_SLICE_RANGE;
    if slice < min || slice > max {
        return Err(IoError::BadConfig(format!(
            "time slice {slice:?} outside {min:?}..={max:?}"
        )));
    }
    let os = |operation| IoError::Os {
        operation,
        source: std::io::Error::last_os_error(),
    };
    let mut attr = read_sched_attr(tid).map_err(|source| IoError::Os {
        operation: "sched_getattr",
        source,
    })?;
    if attr.sched_policy != libc::SCHED_OTHER as u32 {
        return Err(IoError::Os {
            operation: "sched_setattr",
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!(
                    "thread {tid} runs under scheduling policy {}, not SCHED_OTHER",
                    attr.sched_policy
                ),
            ),
        });
    }
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_flags = 0;
    attr.sched_runtime = slice.as_nanos() as u64;
    attr.sched_deadline = 0;
    attr.sched_period = 0;
    // SAFETY: `attr` is a valid, initialised `sched_attr` whose `size`
    // field names its own size; the kernel only reads it during the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid as libc::c_long,
            &attr as *const libc::sched_attr,
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        return Err(os("sched_setattr"));
    }
    let back = read_sched_attr(tid).map_err(|source| IoError::Os {
        operation: "sched_getattr",
        source,
    })?;
    Ok(back.sched_runtime == attr.sched_runtime)
}

/// The scheduling attributes of thread `tid` (0: the caller).
#[cfg(target_os = "linux")]
fn read_sched_attr(tid: u32) -> std::io::Result<libc::sched_attr> {
    // SAFETY: `sched_attr` is plain integers, for which all zeroes is a
    // valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
    // SAFETY: `attr` is writable for `size` bytes, the size passed; the
    // kernel writes at most that many and does not keep the pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::c_long,
            &mut attr as *mut libc::sched_attr,
            size,
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr)
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

    #[test]
    fn a_time_slice_is_taken_or_reported_unsupported_and_bad_ones_refused() {
        use std::time::Duration;
        // A thread of its own, so the test runner's threads keep theirs.
        let taken = std::thread::spawn(|| {
            let before = super::read_sched_attr(0).expect("sched_getattr");
            let taken = super::set_time_slice(0, Duration::from_micros(250)).expect("set");
            let after = super::read_sched_attr(0).expect("sched_getattr");
            assert_eq!(after.sched_policy, before.sched_policy);
            assert_eq!(
                after.sched_nice, before.sched_nice,
                "the nice value is kept"
            );
            if taken {
                assert_eq!(after.sched_runtime, 250_000);
            }
            taken
        })
        .join()
        .expect("thread");
        eprintln!("custom time slices supported by this kernel: {taken}");
        for bad in [
            Duration::from_micros(99),
            Duration::from_millis(101),
            Duration::ZERO,
        ] {
            assert!(matches!(
                super::set_time_slice(0, bad),
                Err(crate::IoError::BadConfig(_))
            ));
        }
        // No such thread.
        assert!(matches!(
            super::set_time_slice(u32::MAX >> 2, Duration::from_millis(1)),
            Err(crate::IoError::Os { .. })
        ));
    }
}
