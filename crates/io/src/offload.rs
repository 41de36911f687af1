//! Turning segmentation and checksum offloads off on an interface, without
//! the `ethtool` program: the `SIOCETHTOOL` ioctl with the legacy one-value
//! commands (`ETHTOOL_S{TXCSUM,TSO,GSO,GRO}`), which every Linux since 2.6
//! still accepts and maps onto its feature flags.
//!
//! Why a test bed wants them off: with TSO/GSO a veth hands its peer
//! 64 KiB "frames" that a bump in the wire reading raw frames would then have
//! to send as one, and with TX checksum offload a frame read from an
//! AF_PACKET socket carries an unfinished checksum that the receiver drops
//! once the frame is sent again. With the four off, every frame is at most
//! MTU + 14 bytes and carries a finished checksum.
//!
//! Source: `include/uapi/linux/ethtool.h`, `net/ethtool/ioctl.c`,
//! netdevice(7). Cost: two ioctls per feature, on a throwaway UDP socket.
use std::os::fd::AsRawFd;

use crate::error::IoError;
use crate::sys;

/// One feature that [`disable_offloads`] turns off: `(name, set command,
/// get command)`.
const FEATURES: [(&str, u32, u32); 4] = [
    // ETHTOOL_STXCSUM / ETHTOOL_GTXCSUM
    ("tx-checksumming", 0x17, 0x16),
    // ETHTOOL_STSO / ETHTOOL_GTSO
    ("tcp-segmentation-offload", 0x1f, 0x1e),
    // ETHTOOL_SGSO / ETHTOOL_GGSO
    ("generic-segmentation-offload", 0x24, 0x23),
    // ETHTOOL_SGRO / ETHTOOL_GGRO
    ("generic-receive-offload", 0x2c, 0x2b),
];

/// `struct ethtool_value`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// What [`disable_offloads`] left on one interface: each feature's name
/// and whether it is still on afterwards (read back from the kernel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadState {
    /// `(feature, still on)` in a fixed order: tx-checksumming,
    /// tcp-segmentation-offload, generic-segmentation-offload,
    /// generic-receive-offload.
    pub features: Vec<(&'static str, bool)>,
}

impl OffloadState {
    /// Every feature is off.
    pub fn all_off(&self) -> bool {
        self.features.iter().all(|(_, on)| !on)
    }
}

fn ethtool(
    fd: &impl AsRawFd,
    name: &std::ffi::CStr,
    value: &mut EthtoolValue,
    operation: &'static str,
) -> Result<(), IoError> {
    // SAFETY: an all-zero ifreq is valid (a byte array and a union of
    // integers and pointers).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(name.to_bytes()) {
        *dst = *src as libc::c_char;
    }
    request.ifr_ifru.ifru_data = (value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the NUL-terminated name (at most 15 bytes
    // in 16 zeroed ones) and the `ethtool_value` that ifru_data points to,
    // which lives across the call and which the kernel reads and (for a get
    // command) writes within its 8 bytes.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL as _, &mut request) };
    if rc < 0 {
        let error = std::io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::ENODEV) => IoError::NoSuchInterface(name.to_string_lossy().into_owned()),
            Some(libc::EPERM | libc::EACCES) => IoError::PermissionDenied { operation },
            _ => IoError::Os {
                operation,
                source: error,
            },
        });
    }
    Ok(())
}

/// Turns TX checksumming, TSO, GSO and GRO off on `interface` (of the
/// calling thread's network namespace) and reads each back. A feature the
/// device cannot change (EOPNOTSUPP) is left as it is and reported by its
/// read-back value; any other failure is an error.
pub fn disable_offloads(interface: &str) -> Result<OffloadState, IoError> {
    let name = sys::interface_name(interface)?;
    let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut features = Vec::with_capacity(FEATURES.len());
    for (feature, set, get) in FEATURES {
        let mut value = EthtoolValue { cmd: set, data: 0 };
        match ethtool(&fd, &name, &mut value, "SIOCETHTOOL set") {
            Ok(()) => {}
            Err(IoError::Os { source, .. }) if source.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(other) => return Err(other),
        }
        let mut value = EthtoolValue { cmd: get, data: 0 };
        ethtool(&fd, &name, &mut value, "SIOCETHTOOL get")?;
        features.push((feature, value.data != 0));
    }
    Ok(OffloadState { features })
}

/// [`disable_offloads`] inside the named network namespace
/// (`/var/run/netns/<namespace>`, as `ip netns add` makes it), on a
/// short-lived thread that enters it; the caller's namespace is untouched.
pub fn disable_offloads_in(namespace: &str, interface: &str) -> Result<OffloadState, IoError> {
    let path = format!("/var/run/netns/{namespace}");
    let file = std::fs::File::open(&path).map_err(|source| IoError::Os {
        operation: "open the network namespace",
        source,
    })?;
    let outcome = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: setns takes a descriptor held open across the call
                // and a flag; it moves only this thread, which ends right
                // after.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(IoError::Os {
                        operation: "setns into the network namespace",
                        source: std::io::Error::last_os_error(),
                    });
                }
                disable_offloads(interface)
            })
            .join()
    });
    match outcome {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_named() {
        // Without root the ioctl says ENODEV or EPERM: both typed.
        match disable_offloads("pspat-nosuch0") {
            Err(IoError::NoSuchInterface(name)) => assert_eq!(name, "pspat-nosuch0"),
            Err(IoError::PermissionDenied { .. }) => {}
            other => panic!("expected a typed error, got {other:?}"),
        }
    }

    #[test]
    fn a_bad_name_is_refused_before_any_call() {
        assert!(matches!(
            disable_offloads("a/b"),
            Err(IoError::BadInterfaceName(_))
        ));
    }

    #[test]
    fn offloads_go_off_on_a_veth() {
        if let Some(reason) = crate::netns::unavailable() {
            println!("skipped: {reason}");
            return;
        }
        let a = crate::netns::Namespace::create().expect("namespace");
        let b = crate::netns::Namespace::create().expect("namespace");
        let pair = crate::netns::VethPair::create(&a, &b).expect("veth pair");
        let state = disable_offloads_in(a.name(), &pair.a).expect("ethtool ioctl");
        assert_eq!(state.features.len(), 4);
        assert!(state.all_off(), "still on: {state:?}");
    }
}
