//! A thread's doorbell: the thread sleeps in `poll(2)` on the doorbell (and
//! on its listening socket, if it has one) and wakes when a connection
//! arrives or someone rings (a signal handler, the main thread stopping
//! it), not on a timer. Used by `pspat run`'s control and metrics threads
//! and by the main thread of `run` and `shape` (`crate::supervise`).
//!
//! The doorbell is a pair of connected Unix stream sockets: ringing writes
//! one byte to one end (non-blocking: when bytes already wait, the thread
//! wakes anyway and a full buffer loses nothing); waiting polls the other
//! end and reads every byte waiting. Rings are not counted: after a wake-up
//! the thread looks at every flag it serves (stop, SIGHUP) once.
//!
//! Guarantee: a ring after the ringer's stores (a flag set with Release, or
//! a signal handler's store) wakes a thread that waits, and a thread that
//! was not waiting finds the byte at its next wait and returns at once, so
//! a ring is never lost; the thread's Acquire loads after the wake-up see
//! the stores, the byte's write and read ordering them (the kernel's socket
//! buffer lock). A safety timeout bounds every wait all the same.
//!
//! Cost: no wake-up while nothing happens but one per safety timeout; one
//! system call per ring.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The waiting end (module docs).
#[derive(Debug)]
pub struct Doorbell {
    bell: UnixStream,
    ringer: UnixStream,
}

/// The ringing end: cloned for each ringer.
#[derive(Debug)]
pub struct Ringer(UnixStream);

/// A thread that sleeps on its own doorbell, and the ringer that wakes it.
#[derive(Debug)]
pub struct Service {
    thread: std::thread::JoinHandle<()>,
    ringer: Ringer,
}

impl Service {
    /// Spawns thread `name` running `body` with a new doorbell, which
    /// `signals` ring too (register their flags first).
    ///
    /// # Errors
    /// The doorbell, a signal's handler or the thread cannot be made.
    pub fn spawn(
        name: &str,
        signals: &[i32],
        body: impl FnOnce(Doorbell) + Send + 'static,
    ) -> std::io::Result<Service> {
        let bell = Doorbell::new()?;
        for &s in signals {
            bell.ring_on_signal(s)?;
        }
        let ringer = bell.ringer()?;
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(bell))?;
        Ok(Service { thread, ringer })
    }

    /// Rings the thread's doorbell (after the caller set the flag that
    /// tells it to stop) and waits for it to end.
    pub fn stop(self) {
        self.ringer.ring();
        let _ = self.thread.join();
    }
}

impl Doorbell {
    /// A new doorbell.
    ///
    /// # Errors
    /// The socket pair cannot be made or set non-blocking.
    pub fn new() -> std::io::Result<Self> {
        let (bell, ringer) = UnixStream::pair()?;
        bell.set_nonblocking(true)?;
        ringer.set_nonblocking(true)?;
        Ok(Doorbell { bell, ringer })
    }

    /// A ringer for this doorbell.
    ///
    /// # Errors
    /// The socket cannot be duplicated.
    pub fn ringer(&self) -> std::io::Result<Ringer> {
        self.ringer.try_clone().map(Ringer)
    }

    /// Rings this doorbell from `signal`'s handler too (the handler writes
    /// a byte; signal-hook's pipe registration). Register it after any flag
    /// the signal sets: a signal's actions run in the order they were
    /// registered, so the thread wakes to a flag already set.
    ///
    /// # Errors
    /// The socket cannot be duplicated or the handler installed.
    pub fn ring_on_signal(&self, signal: i32) -> std::io::Result<()> {
        signal_hook::low_level::pipe::register(signal, self.ringer.try_clone()?).map(|_| ())
    }

    /// Waits until `listener` (if any) has a connection to accept, the bell
    /// rang, `timeout` passed, or a signal interrupted the wait; then
    /// empties the bell. Errors end the wait early: the caller looks at its
    /// flags and its listener either way.
    pub fn wait(&self, listener: Option<&impl AsFd>, timeout: Duration) {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut fds = Vec::with_capacity(2);
        fds.push(PollFd::new(&self.bell, PollFlags::IN));
        if let Some(l) = listener {
            fds.push(PollFd::new(l, PollFlags::IN));
        }
        // A timeout beyond a Timespec's range waits without one.
        let timeout = rustix::event::Timespec::try_from(timeout).ok();
        let _ = poll(&mut fds, timeout.as_ref());
        let mut chunk = [0u8; 512];
        while matches!((&self.bell).read(&mut chunk), Ok(n) if n > 0) {}
    }
}

impl Ringer {
    /// Wakes the doorbell's thread (module docs).
    pub fn ring(&self) {
        // WouldBlock: bytes already wait, the thread wakes anyway.
        let _ = (&self.0).write(&[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn a_ring_before_the_wait_is_not_lost_and_is_used_up_by_it() {
        let bell = Doorbell::new().unwrap();
        let ringer = bell.ringer().unwrap();
        for _ in 0..3 {
            ringer.ring();
        }
        let t = Instant::now();
        bell.wait(None::<&UnixListener>, LONG);
        assert!(t.elapsed() < LONG / 2, "the ring was lost");
        // The rings were read: a second wait times out.
        let t = Instant::now();
        bell.wait(None::<&UnixListener>, Duration::from_millis(30));
        assert!(
            t.elapsed() >= Duration::from_millis(30),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_ring_from_another_thread_wakes_a_waiting_thread() {
        let bell = Doorbell::new().unwrap();
        let ringer = bell.ringer().unwrap();
        let t = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            ringer.ring();
        });
        bell.wait(None::<&UnixListener>, LONG);
        h.join().unwrap();
        assert!(t.elapsed() < LONG / 2, "not woken");
    }

    #[test]
    fn a_connection_wakes_the_wait_and_stays_to_be_accepted() {
        let dir = std::env::temp_dir().join(format!("pspat-doorbell-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let bell = Doorbell::new().unwrap();
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let t = Instant::now();
        bell.wait(Some(&listener), LONG);
        assert!(t.elapsed() < LONG / 2, "not woken by the connection");
        assert!(listener.accept().is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_thousand_rings_without_a_wait_do_not_block_the_ringer() {
        let bell = Doorbell::new().unwrap();
        let ringer = bell.ringer().unwrap();
        // Far more than the socket buffer holds at one byte each would block
        // a blocking writer; a non-blocking one drops the extra bytes.
        for _ in 0..1_000_000 {
            ringer.ring();
        }
        bell.wait(None::<&UnixListener>, LONG);
    }
}
