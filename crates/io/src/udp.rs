//! UDP sockets that send and receive batches of datagrams in one system
//! call each (`sendmmsg(2)`, `recvmmsg(2)`), for local senders that hold no
//! privilege.
//!
//! Sources: sendmmsg(2), recvmmsg(2), socket(7) (`SO_TIMESTAMPNS`,
//! `SCM_TIMESTAMPNS`), cmsg(3).
//!
//! A [`UdpBatchSocket`] is bound on creation and connected to one peer for
//! [`UdpBatchSocket::send_batch`]; [`UdpBatchSocket::recv_batch`] fills up
//! to [`MAX_BATCH`] caller buffers, each with its [`RecvMeta`]: length,
//! whether it was cut, the source, and a timestamp from the kernel (when
//! the datagram arrived, `SO_TIMESTAMPNS`) or from user space (when the
//! batch was read, one clock read per call), as [`Timestamps`] chose. Both
//! clocks are the realtime clock. Nothing is allocated per call.
use std::net::{
    Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, ToSocketAddrs, UdpSocket,
};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::error::IoError;
use crate::sys;

/// The most datagrams one call sends or receives.
pub const MAX_BATCH: usize = 64;

/// Which clock stamps received datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timestamps {
    /// No timestamps.
    #[default]
    None,
    /// The kernel's, taken when each datagram arrived (`SO_TIMESTAMPNS`).
    Kernel,
    /// One read of the realtime clock when the batch was received.
    User,
}

/// What came with one received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvMeta {
    /// Bytes written into the buffer.
    pub len: usize,
    /// The datagram was longer than the buffer and was cut.
    pub truncated: bool,
    /// Who sent it.
    pub source: Option<SocketAddr>,
    /// When (realtime clock, since the Unix epoch), per [`Timestamps`].
    pub timestamp: Option<Duration>,
}

/// A UDP socket with batch send and receive (module docs).
#[derive(Debug)]
pub struct UdpBatchSocket {
    socket: UdpSocket,
    timestamps: Timestamps,
}

fn os(operation: &'static str) -> impl FnOnce(std::io::Error) -> IoError {
    move |source| IoError::Os { operation, source }
}

/// Aligned room for one control message (a `timespec`).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Control([u8; 64]);

fn socket_address(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, which
            // it is large and aligned enough for.
            let v4 =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)),
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let v6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(v6.sin6_addr.s6_addr),
                u16::from_be(v6.sin6_port),
                v6.sin6_flowinfo,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The `SCM_TIMESTAMPNS` of a received message, if it has one.
fn kernel_timestamp(header: &libc::msghdr) -> Option<Duration> {
    // SAFETY: `header` is a msghdr the kernel just filled, whose control
    // buffer (msg_control, msg_controllen) is live; the CMSG_* walk stays
    // within msg_controllen, and the data of an SCM_TIMESTAMPNS message is a
    // timespec, read unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let time = libc::CMSG_DATA(cmsg)
                    .cast::<libc::timespec>()
                    .read_unaligned();
                return Some(Duration::new(
                    u64::try_from(time.tv_sec).unwrap_or(0),
                    u32::try_from(time.tv_nsec).unwrap_or(0).min(999_999_999),
                ));
            }
            cmsg = libc::CMSG_NXTHDR(header, cmsg);
        }
    }
    None
}

impl UdpBatchSocket {
    /// Binds a socket to `address` (port 0: any free port).
    pub fn bind(address: impl ToSocketAddrs, timestamps: Timestamps) -> Result<Self, IoError> {
        let socket = UdpSocket::bind(address).map_err(os("bind the UDP socket"))?;
        let this = Self { socket, timestamps };
        if timestamps == Timestamps::Kernel {
            let on: libc::c_int = 1;
            sys::setsockopt(
                &this.socket,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                &on,
                "set SO_TIMESTAMPNS",
            )?;
        }
        Ok(this)
    }

    /// Sends every later [`UdpBatchSocket::send_batch`] to `peer` and
    /// receives only from it.
    pub fn connect(&self, peer: impl ToSocketAddrs) -> Result<(), IoError> {
        self.socket
            .connect(peer)
            .map_err(os("connect the UDP socket"))
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr, IoError> {
        self.socket.local_addr().map_err(os("getsockname"))
    }

    /// The socket's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Sends up to [`MAX_BATCH`] datagrams from the front of `datagrams` to
    /// the connected peer in one system call; returns how many the kernel
    /// took. Blocks while the send buffer is full.
    pub fn send_batch(&self, datagrams: &[&[u8]]) -> Result<usize, IoError> {
        let count = datagrams.len().min(MAX_BATCH);
        sys::sendmmsg(self.socket.as_raw_fd(), datagrams[..count].iter().copied()).map_err(
            |source| IoError::Os {
                operation: "sendmmsg",
                source,
            },
        )
    }

    /// Receives up to `min(buffers.len(), meta.len(), MAX_BATCH)`
    /// datagrams, waiting up to `timeout` for the first; fills `buffers[i]`
    /// and `meta[i]` for each and returns how many (0 after a timeout).
    pub fn recv_batch(
        &self,
        buffers: &mut [&mut [u8]],
        meta: &mut [RecvMeta],
        timeout: Duration,
    ) -> Result<usize, IoError> {
        let count = buffers.len().min(meta.len()).min(MAX_BATCH);
        if count == 0 {
            return Ok(0);
        }
        let ready = sys::poll(self.socket.as_raw_fd(), libc::POLLIN, None, timeout)?;
        if !ready.readable && !ready.error {
            return Ok(0);
        }
        let mut iovecs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH];
        // SAFETY: all-zero sockaddr_storage and mmsghdr values are valid
        // (integers, byte arrays, null pointers).
        let mut addresses: [libc::sockaddr_storage; MAX_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut messages: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let mut controls = [Control([0; 64]); MAX_BATCH];
        for (i, buffer) in buffers[..count].iter_mut().enumerate() {
            iovecs[i].iov_base = buffer.as_mut_ptr().cast();
            iovecs[i].iov_len = buffer.len();
            let header = &mut messages[i].msg_hdr;
            header.msg_iov = &mut iovecs[i];
            header.msg_iovlen = 1;
            header.msg_name = (&mut addresses[i] as *mut libc::sockaddr_storage).cast();
            header.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            if self.timestamps == Timestamps::Kernel {
                header.msg_control = controls[i].0.as_mut_ptr().cast();
                header.msg_controllen = controls[i].0.len() as _;
            }
        }
        // SAFETY: each of the `count` messages points to one iovec over a
        // caller buffer borrowed mutably for this call, to its own address
        // storage and control buffer with their true lengths; the kernel
        // writes within those lengths. MSG_DONTWAIT: poll already waited.
        let rc = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                messages.as_mut_ptr(),
                count as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let error = std::io::Error::last_os_error();
            if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) {
                return Ok(0);
            }
            return Err(IoError::Os {
                operation: "recvmmsg",
                source: error,
            });
        }
        let received = rc as usize;
        let user_time = (self.timestamps == Timestamps::User).then(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
        });
        for i in 0..received {
            let header = &messages[i].msg_hdr;
            meta[i] = RecvMeta {
                len: messages[i].msg_len as usize,
                truncated: header.msg_flags & libc::MSG_TRUNC != 0,
                source: socket_address(&addresses[i], header.msg_namelen),
                timestamp: match self.timestamps {
                    Timestamps::None => None,
                    Timestamps::Kernel => kernel_timestamp(header),
                    Timestamps::User => user_time,
                },
            };
        }
        Ok(received)
    }
}
