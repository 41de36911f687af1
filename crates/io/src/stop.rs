//! A latch that ends the waits of receiving threads at once.
//!
//! A thread that reads a socket waits for it in `poll(2)`; to see a stop
//! request it would otherwise wake at a timeout and look at a flag, which
//! costs an idle process a wake-up per thread and per timeout. A
//! [`StopLatch`] given to a socket ([`crate::PacketRx::stop_waits_on`],
//! `XdpSocket::stop_waits_on`) is waited on beside it: once
//! [`StopLatch::raise`]d, every wait on it returns at once, now and later,
//! so the threads can wait long and still stop promptly.
//!
//! # Guarantees
//! A raise is never lost: the latch is an `eventfd(2)` whose counter is
//! never read back, so it stays readable from the first raise on (a wait
//! begun after the raise returns at once too). The latch carries no data:
//! a caller that stops threads with it stores its stop flag (Release)
//! before the raise and loads it (Acquire) after each wait, as the bridge
//! does; the latch only ends the wait. Nothing hangs on that order: a
//! thread that still read the flag unset waits again, and that wait ends
//! at once too, until the flag's store reaches it.
//!
//! # Cost
//! One `write(2)` per raise; one more descriptor in each `poll(2)`.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::event::{eventfd, EventfdFlags};

use crate::IoError;

/// An eventfd that stays readable once raised (module docs).
#[derive(Debug)]
pub struct StopLatch {
    fd: OwnedFd,
}

impl StopLatch {
    /// A latch not raised yet.
    ///
    /// # Errors
    /// [`IoError::Os`] when the kernel gives no eventfd (descriptors
    /// exhausted).
    pub fn new() -> Result<Self, IoError> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(|e| {
            IoError::Os {
                operation: "eventfd",
                source: e.into(),
            }
        })?;
        Ok(StopLatch { fd })
    }

    /// Raises the latch: every wait on it ends, now and from now on.
    /// Raising it again changes nothing.
    pub fn raise(&self) {
        // EAGAIN (the counter at its maximum) leaves it readable as well;
        // no other error can happen on a valid eventfd with 8 bytes.
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Whether it was raised (a poll that does not wait).
    pub fn is_raised(&self) -> bool {
        crate::sys::poll(
            self.fd.as_raw_fd(),
            libc::POLLIN,
            None,
            std::time::Duration::ZERO,
        )
        .is_ok_and(|r| r.readable)
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Waits up to `timeout` on a socket that never becomes readable (its
    /// peer stays open and sends nothing) beside `latch`.
    fn wait_beside(latch: &StopLatch, timeout: Duration) -> crate::sys::Readiness {
        let (read, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        crate::sys::poll(
            read.as_raw_fd(),
            libc::POLLIN,
            Some(latch.raw_fd()),
            timeout,
        )
        .unwrap()
    }

    #[test]
    fn a_raise_ends_a_wait_begun_before_and_every_later_one() {
        let latch = Arc::new(StopLatch::new().unwrap());
        assert!(!latch.is_raised());
        let raiser = {
            let latch = Arc::clone(&latch);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                latch.raise();
            })
        };
        let begun = Instant::now();
        let ready = wait_beside(&latch, Duration::from_secs(10));
        assert!(ready.stopped && !ready.readable, "{ready:?}");
        assert!(begun.elapsed() < Duration::from_secs(5));
        raiser.join().unwrap();
        for _ in 0..3 {
            assert!(wait_beside(&latch, Duration::from_secs(10)).stopped);
        }
        latch.raise();
        assert!(latch.is_raised());
    }

    #[test]
    fn without_a_raise_the_wait_lasts_its_timeout() {
        let latch = StopLatch::new().unwrap();
        let begun = Instant::now();
        let ready = wait_beside(&latch, Duration::from_millis(30));
        assert!(!ready.stopped && !ready.readable);
        assert!(begun.elapsed() >= Duration::from_millis(30));
    }
}
