//! The errors of the socket back ends, typed by what the caller can do
//! about them.
use std::io;

/// Longest interface name Linux accepts (bytes; `IFNAMSIZ` less the NUL).
pub const MAX_INTERFACE_NAME: usize = 15;

/// Why a socket could not be opened, configured or used.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// No interface has this name (in the caller's network namespace).
    #[error("no such interface: {0:?}")]
    NoSuchInterface(String),
    /// The interface exists but is administratively down.
    #[error("interface {0:?} is down")]
    InterfaceDown(String),
    /// The name is longer than [`MAX_INTERFACE_NAME`] bytes.
    #[error("interface name {0:?} is longer than {MAX_INTERFACE_NAME} bytes")]
    InterfaceNameTooLong(String),
    /// The name is empty, `.` or `..`, or holds a NUL, `/`, `:` or white
    /// space (Linux's `dev_valid_name`).
    #[error("bad interface name {0:?}: no NUL, '/', ':' or spaces, not empty, '.' or '..'")]
    BadInterfaceName(String),
    /// The caller may not open this socket (AF_PACKET needs root or
    /// CAP_NET_RAW).
    #[error("permission denied to {operation}: AF_PACKET needs root or CAP_NET_RAW")]
    PermissionDenied {
        /// What was refused.
        operation: &'static str,
    },
    /// The interface went down or disappeared while the socket was in use
    /// (ENETDOWN, ENXIO or ENODEV from a send, a poll or a receive).
    #[error("interface {interface:?} went down or disappeared: {source}")]
    LinkLost {
        /// The interface the socket was bound to.
        interface: String,
        /// The system's error.
        source: io::Error,
    },
    /// A ring or batch geometry the kernel would refuse or that cannot
    /// hold one frame.
    #[error("bad configuration: {0}")]
    BadConfig(String),
    /// A frame longer than the socket can send (the interface's MTU plus
    /// an Ethernet header, plus a VLAN tag when the frame is tagged).
    #[error("frame of {len} bytes exceeds the {max} bytes this socket sends")]
    FrameTooLong {
        /// The frame's length.
        len: usize,
        /// The most this socket sends in one frame.
        max: usize,
    },
    /// A batch names a frame beyond the frames given
    /// ([`crate::PacketTx::send_frames_picked`]).
    #[error("pick {pick} names no frame of the {frames} given")]
    BadPick {
        /// The pick.
        pick: u32,
        /// Frames given.
        frames: usize,
    },
    /// A frame token that is not of the arena given.
    #[error(transparent)]
    Frame(#[from] crate::frames::FrameError),
    /// Any other system error, with the operation that failed.
    #[error("{operation} failed: {source}")]
    Os {
        /// The system call or step that failed.
        operation: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

impl IoError {
    /// Whether this error means the link is gone (the socket should be
    /// closed and, when the interface is back, reopened).
    pub fn is_link_lost(&self) -> bool {
        matches!(self, IoError::LinkLost { .. })
    }
}

/// Whether a read or write that failed with `kind` should simply be tried
/// again: a non-blocking socket had nothing ready (`WouldBlock`), a
/// socket timeout expired (`TimedOut`; Linux reports `SO_RCVTIMEO` and
/// `SO_SNDTIMEO` as `WouldBlock`, other systems as `TimedOut`), or a
/// signal interrupted the call (`Interrupted`).
///
/// # Examples
/// ```
/// use std::io::ErrorKind;
/// assert!(pspat_io::error::is_retryable(ErrorKind::Interrupted));
/// assert!(!pspat_io::error::is_retryable(ErrorKind::ConnectionReset));
/// ```
pub fn is_retryable(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Whether an errno means the bound interface went down or away.
pub(crate) fn is_link_errno(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
    )
}

/// Classifies an errno from an operation on a socket bound to `interface`.
pub(crate) fn classify(operation: &'static str, interface: &str, error: io::Error) -> IoError {
    if is_link_errno(&error) {
        IoError::LinkLost {
            interface: interface.to_owned(),
            source: error,
        }
    } else if matches!(error.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
        IoError::PermissionDenied { operation }
    } else {
        IoError::Os {
            operation,
            source: error,
        }
    }
}

/// An `Os` error from the last errno.
pub(crate) fn last_os(operation: &'static str) -> IoError {
    IoError::Os {
        operation,
        source: io::Error::last_os_error(),
    }
}
