//! Thin, checked wrappers of the system calls the socket back ends share:
//! socket options, interface lookup, `mmap`, `poll`. Every `unsafe` block
//! of the socket code that is not about a ring's layout lives here.
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::time::Duration;

use crate::error::{last_os, IoError, MAX_INTERFACE_NAME};

/// Opens a socket; EPERM/EACCES become [`IoError::PermissionDenied`].
pub(crate) fn socket(domain: i32, kind: i32, protocol: i32) -> Result<OwnedFd, IoError> {
    // SAFETY: socket(2) takes plain integers and returns a new descriptor
    // or -1; nothing is borrowed.
    let fd = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        let error = io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => IoError::PermissionDenied {
                operation: "open a packet socket",
            },
            _ => IoError::Os {
                operation: "socket",
                source: error,
            },
        });
    }
    // SAFETY: `fd` was just returned by socket(2), is valid and owned by
    // nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets a socket option whose value is a plain `T` (an integer or a
/// `repr(C)` struct of integers).
pub(crate) fn setsockopt<T: Copy>(
    fd: &impl AsRawFd,
    level: i32,
    name: i32,
    value: &T,
    operation: &'static str,
) -> Result<(), IoError> {
    // SAFETY: `value` points to a live `T` of the size passed; the kernel
    // only reads it during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        let error = io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => IoError::PermissionDenied { operation },
            _ => IoError::Os {
                operation,
                source: error,
            },
        });
    }
    Ok(())
}

/// Reads a socket option whose value is a plain `T` that any bit pattern
/// makes valid (integers, structs of integers).
pub(crate) fn getsockopt<T: Copy + Default>(
    fd: &impl AsRawFd,
    level: i32,
    name: i32,
    operation: &'static str,
) -> Result<T, IoError> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live, writable `T` of `len` bytes; the kernel
    // writes at most `len` bytes of integers into it.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(last_os(operation));
    }
    Ok(value)
}

/// The pending error of a socket (SO_ERROR), cleared by reading it.
pub(crate) fn take_socket_error(fd: &OwnedFd) -> Option<io::Error> {
    let code: i32 = getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, "read SO_ERROR").ok()?;
    (code != 0).then(|| io::Error::from_raw_os_error(code))
}

/// Checks an interface name and turns it into a C string.
pub(crate) fn interface_name(name: &str) -> Result<CString, IoError> {
    let bad = name.is_empty()
        || name.len() > MAX_INTERFACE_NAME
        || name
            .bytes()
            .any(|b| b == b'/' || b == 0 || b.is_ascii_whitespace());
    if bad {
        return Err(IoError::BadInterfaceName(name.to_owned()));
    }
    CString::new(name).map_err(|_| IoError::BadInterfaceName(name.to_owned()))
}

/// The index and flags of an interface of the calling thread's network
/// namespace; [`IoError::NoSuchInterface`] when there is none.
pub(crate) fn interface_index_and_flags(fd: &OwnedFd, name: &str) -> Result<(i32, i32), IoError> {
    let c_name = interface_name(name)?;
    // SAFETY: `c_name` is a NUL-terminated string that lives across the call.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        return Err(IoError::NoSuchInterface(name.to_owned()));
    }
    // SAFETY: an all-zero ifreq is a valid value (a byte array and a union
    // of integers and pointers that the kernel fills).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(c_name.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads `ifr_name` (NUL-terminated: the name has at
    // most 15 bytes and the array 16 zeroed ones) and writes the flags into
    // the union; `request` lives across the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) };
    if rc < 0 {
        let error = io::Error::last_os_error();
        return Err(if error.raw_os_error() == Some(libc::ENODEV) {
            IoError::NoSuchInterface(name.to_owned())
        } else {
            IoError::Os {
                operation: "read interface flags (SIOCGIFFLAGS)",
                source: error,
            }
        });
    }
    // SAFETY: SIOCGIFFLAGS succeeded, so the union holds the flags member.
    let flags = i32::from(unsafe { request.ifr_ifru.ifru_flags });
    let index = i32::try_from(index).map_err(|_| IoError::NoSuchInterface(name.to_owned()))?;
    Ok((index, flags))
}

/// A shared, read-write mapping of a socket's ring, unmapped on drop.
pub(crate) struct RingMap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory shared with the kernel; the rings
// that own a RingMap synchronize every access to it through the status
// words (Acquire/Release), and the map is only unmapped in Drop, by its
// single owner.
unsafe impl Send for RingMap {}

impl RingMap {
    /// Maps `len` bytes of the socket's rings (RX ring first, then TX).
    pub(crate) fn new(fd: &OwnedFd, len: usize) -> Result<Self, IoError> {
        Self::with_offset(fd, len, 0, "mmap the packet ring")
    }

    /// Maps `len` bytes of what the socket offers at byte `offset` (an
    /// AF_XDP socket names each of its rings by such an offset).
    pub(crate) fn with_offset(
        fd: &OwnedFd,
        len: usize,
        offset: libc::off_t,
        operation: &'static str,
    ) -> Result<Self, IoError> {
        // SAFETY: a fresh shared mapping of the socket's ring at an address
        // the kernel chooses; nothing existing is replaced.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd.as_raw_fd(),
                offset,
            )
        };
        let ptr = if ptr == libc::MAP_FAILED {
            // MAP_LOCKED may be refused (RLIMIT_MEMLOCK); retry without it.
            // SAFETY: as above.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    offset,
                )
            }
        } else {
            ptr
        };
        if ptr == libc::MAP_FAILED {
            return Err(last_os(operation));
        }
        let base = NonNull::new(ptr.cast()).ok_or_else(|| last_os(operation))?;
        Ok(Self { base, len })
    }

    /// A private, zero-filled, page-aligned area of `len` bytes, its pages
    /// populated up front (an AF_XDP socket's packet buffers).
    #[cfg(feature = "xdp")]
    pub(crate) fn anonymous(len: usize, operation: &'static str) -> Result<Self, IoError> {
        // SAFETY: a fresh private anonymous mapping at an address the
        // kernel chooses; nothing existing is replaced.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(last_os(operation));
        }
        let base = NonNull::new(ptr.cast()).ok_or_else(|| last_os(operation))?;
        Ok(Self { base, len })
    }

    /// The mapping's length in bytes.
    #[cfg(feature = "xdp")]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The mapping's first byte.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `new`, unmapped
        // once; no reference into it outlives its owner (the ring borrows
        // it for the duration of each call only).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// What `poll` saw on one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Readiness {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) error: bool,
    /// The [`crate::StopLatch`] waited on beside it was raised.
    pub(crate) stopped: bool,
}

/// Waits up to `timeout` (rounded up to a millisecond) for `events` on `fd`,
/// or for the latch `stop` (a [`crate::StopLatch`]'s eventfd) to be raised.
/// EINTR counts as a timeout (the caller's loop polls again).
pub(crate) fn poll(
    fd: RawFd,
    events: i16,
    stop: Option<RawFd>,
    timeout: Duration,
) -> Result<Readiness, IoError> {
    let mut fds = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            // A negative descriptor is skipped by poll(2).
            fd: stop.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let count = if stop.is_some() { 2 } else { 1 };
    let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: `fds` holds two live pollfds and `count` is at most 2.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), count, millis) };
    if rc < 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(IoError::Os {
                operation: "poll",
                source: error,
            });
        }
        fds[0].revents = 0;
        fds[1].revents = 0;
    }
    let revents = fds[0].revents;
    Ok(Readiness {
        readable: revents & libc::POLLIN != 0,
        writable: revents & libc::POLLOUT != 0,
        error: revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
        stopped: count == 2 && fds[1].revents != 0,
    })
}

/// Buffers one [`sendmmsg`] call sends at most.
pub(crate) const SENDMMSG_BATCH: usize = 64;

/// Sends up to [`SENDMMSG_BATCH`] buffers of `buffers`, one message each, in
/// one `sendmmsg(2)` on `fd` (a bound or connected socket: no address is
/// given); returns how many the kernel took.
pub(crate) fn sendmmsg<'a>(
    fd: RawFd,
    buffers: impl Iterator<Item = &'a [u8]>,
) -> io::Result<usize> {
    let mut iovecs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SENDMMSG_BATCH];
    // SAFETY: an all-zero mmsghdr is valid: null pointers, zero lengths.
    let mut messages: [libc::mmsghdr; SENDMMSG_BATCH] = unsafe { std::mem::zeroed() };
    let mut count = 0;
    for ((buffer, iovec), message) in buffers.zip(iovecs.iter_mut()).zip(messages.iter_mut()) {
        iovec.iov_base = buffer.as_ptr().cast_mut().cast();
        iovec.iov_len = buffer.len();
        message.msg_hdr.msg_iov = iovec;
        message.msg_hdr.msg_iovlen = 1;
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: `messages[..count]` each point to one iovec of `iovecs`, which
    // points into a buffer borrowed for `'a`, longer than this call; the
    // kernel only reads the buffers and writes the `msg_len` fields; no
    // address is given (the caller's socket is bound or connected).
    let rc = unsafe { libc::sendmmsg(fd, messages.as_mut_ptr(), count as libc::c_uint, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as usize)
}
