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
//! Why a bridge wants receive aggregation off on the interfaces it reads
//! ([`ReceiveOffloads`]): GRO (and a NIC's LRO) merge the segments of a TCP
//! stream into one buffer before packet sockets see them, so an AF_PACKET
//! reader gets aggregates far above the MTU that it cannot send on as
//! frames; with both off it reads the frames that were on the wire.
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
    (GRO, SET_GRO, GET_GRO),
];

/// ethtool's name of generic receive offload, as [`ReceiveOffloads`]
/// names what it turned off.
pub const GRO: &str = "generic-receive-offload";
/// ethtool's name of large receive offload.
pub const LRO: &str = "large-receive-offload";

/// `ETHTOOL_GGRO` / `ETHTOOL_SGRO`.
const GET_GRO: u32 = 0x2b;
const SET_GRO: u32 = 0x2c;
/// `ETHTOOL_GFLAGS` / `ETHTOOL_SFLAGS`, and `ETH_FLAG_LRO` among the flags.
const GET_FLAGS: u32 = 0x25;
const SET_FLAGS: u32 = 0x26;
const FLAG_LRO: u32 = 1 << 15;

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
/// device cannot change (EOPNOTSUPP or EINVAL) is left as it is and
/// reported by its read-back value; any other failure is an error.
pub fn disable_offloads(interface: &str) -> Result<OffloadState, IoError> {
    let name = sys::interface_name(interface)?;
    let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut features = Vec::with_capacity(FEATURES.len());
    for (feature, set, get) in FEATURES {
        set_value(&fd, &name, set, 0)?;
        features.push((feature, get_value(&fd, &name, get)? != 0));
    }
    Ok(OffloadState { features })
}

/// Reads one `ethtool_value` with `get`.
fn get_value(fd: &impl AsRawFd, name: &std::ffi::CStr, get: u32) -> Result<u32, IoError> {
    let mut value = EthtoolValue { cmd: get, data: 0 };
    ethtool(fd, name, &mut value, "SIOCETHTOOL get")?;
    Ok(value.data)
}

/// Writes one `ethtool_value` with `set`. A device that cannot change it
/// (EOPNOTSUPP, or EINVAL for a flag it does not know) is no error: the
/// callers read the value back.
fn set_value(fd: &impl AsRawFd, name: &std::ffi::CStr, set: u32, data: u32) -> Result<(), IoError> {
    let mut value = EthtoolValue { cmd: set, data };
    match ethtool(fd, name, &mut value, "SIOCETHTOOL set") {
        Err(IoError::Os { source, .. })
            if matches!(source.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// Whether generic receive offload is on for `interface`.
pub fn generic_receive_offload(interface: &str) -> Result<bool, IoError> {
    let name = sys::interface_name(interface)?;
    let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    Ok(get_value(&fd, &name, GET_GRO)? != 0)
}

/// Turns generic receive offload on or off for `interface`; returns the
/// state read back (unchanged when the device cannot change it).
pub fn set_generic_receive_offload(interface: &str, on: bool) -> Result<bool, IoError> {
    let name = sys::interface_name(interface)?;
    let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    set_value(&fd, &name, SET_GRO, u32::from(on))?;
    Ok(get_value(&fd, &name, GET_GRO)? != 0)
}

/// Turns generic receive offload (when `gro`) and large receive offload
/// (when `lro`) on for `interface`: what [`ReceiveOffloads::restore`] does,
/// also for a process that outlives the one that turned them off (a
/// watchdog that restores them after `kill -9`).
///
/// # Errors
/// The interface is gone, or an ioctl failed (the first error; the other
/// feature is still tried).
pub fn turn_on_receive_offloads(interface: &str, gro: bool, lro: bool) -> Result<(), IoError> {
    if !gro && !lro {
        return Ok(());
    }
    let name = sys::interface_name(interface)?;
    let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut first_error = None;
    if gro {
        if let Err(e) = set_value(&fd, &name, SET_GRO, 1) {
            first_error = Some(e);
        }
    }
    if lro {
        let step = get_value(&fd, &name, GET_FLAGS)
            .and_then(|flags| set_value(&fd, &name, SET_FLAGS, flags | FLAG_LRO));
        if let Err(e) = step {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Receive aggregation (GRO and LRO) turned off on one interface, and
/// turned back on by [`ReceiveOffloads::restore`] (or on drop) where it was
/// on: a bridge that reads raw frames holds one per interface it reads
/// (module docs).
#[derive(Debug)]
pub struct ReceiveOffloads {
    interface: String,
    /// GRO was on and this turned it off.
    gro_was_on: bool,
    /// LRO was on and this turned it off.
    lro_was_on: bool,
    /// Still on afterwards, by name: what the device would not change.
    still_on: Vec<&'static str>,
    restored: bool,
}

impl ReceiveOffloads {
    /// Turns GRO and LRO off on `interface` (of the calling thread's
    /// network namespace), remembering which were on. A feature the device
    /// cannot change is left as it is and named in
    /// [`ReceiveOffloads::still_on`].
    ///
    /// # Errors
    /// [`IoError::NoSuchInterface`], [`IoError::PermissionDenied`] (no
    /// `CAP_NET_ADMIN`), or another failed ioctl. The interface is then as
    /// it was: a failure after GRO went off turns it back on.
    pub fn turn_off(interface: &str) -> Result<Self, IoError> {
        let name = sys::interface_name(interface)?;
        let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
        let mut taken = ReceiveOffloads {
            interface: interface.to_string(),
            gro_was_on: false,
            lro_was_on: false,
            still_on: Vec::new(),
            restored: false,
        };
        if get_value(&fd, &name, GET_GRO)? != 0 {
            set_value(&fd, &name, SET_GRO, 0)?;
            if get_value(&fd, &name, GET_GRO)? != 0 {
                taken.still_on.push(GRO);
            } else {
                taken.gro_was_on = true;
            }
        }
        // From here on a failure drops `taken`, which turns GRO back on.
        let flags = get_value(&fd, &name, GET_FLAGS)?;
        if flags & FLAG_LRO != 0 {
            set_value(&fd, &name, SET_FLAGS, flags & !FLAG_LRO)?;
            if get_value(&fd, &name, GET_FLAGS)? & FLAG_LRO != 0 {
                taken.still_on.push(LRO);
            } else {
                taken.lro_was_on = true;
            }
        }
        Ok(taken)
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Whether this turned anything off (and will turn it back on).
    pub fn changed(&self) -> bool {
        self.gro_was_on || self.lro_was_on
    }

    /// What this turned off, by ethtool's feature names.
    pub fn turned_off(&self) -> Vec<&'static str> {
        let mut off = Vec::new();
        if self.gro_was_on {
            off.push(GRO);
        }
        if self.lro_was_on {
            off.push(LRO);
        }
        off
    }

    /// What stays on because the device would not change it.
    pub fn still_on(&self) -> &[&'static str] {
        &self.still_on
    }

    /// Turns back on what this turned off. Called again, or on drop
    /// afterwards, it does nothing.
    ///
    /// # Errors
    /// The interface is gone, or the ioctl failed.
    pub fn restore(&mut self) -> Result<(), IoError> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        if !self.changed() {
            return Ok(());
        }
        turn_on_receive_offloads(&self.interface, self.gro_was_on, self.lro_was_on)
    }
}

impl Drop for ReceiveOffloads {
    fn drop(&mut self) {
        // Best effort: an interface removed meanwhile has nothing to restore.
        let _ = self.restore();
    }
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

    /// A veth pair between two namespaces of the test's own (the pair
    /// drops first), or `None` (reason printed) without root.
    struct TestVeth {
        pair: crate::netns::VethPair,
        a: crate::netns::Namespace,
        _b: crate::netns::Namespace,
    }

    fn test_veth() -> Option<TestVeth> {
        if let Some(reason) = crate::netns::unavailable() {
            println!("skipped: {reason}");
            return None;
        }
        let a = crate::netns::Namespace::create().expect("namespace");
        let b = crate::netns::Namespace::create().expect("namespace");
        let pair = crate::netns::VethPair::create(&a, &b).expect("veth pair");
        Some(TestVeth { pair, a, _b: b })
    }

    #[test]
    fn receive_offloads_go_off_and_come_back_on_a_veth() {
        let Some(veth) = test_veth() else {
            return;
        };
        let (pair, a) = (&veth.pair, &veth.a);
        a.run(|| {
            assert!(set_generic_receive_offload(&pair.a, true).expect("GRO on"));
            let mut taken = ReceiveOffloads::turn_off(&pair.a).expect("turned off");
            assert_eq!(taken.interface(), pair.a);
            assert!(taken.changed());
            assert_eq!(taken.turned_off(), ["generic-receive-offload"]);
            assert!(taken.still_on().is_empty(), "{:?}", taken.still_on());
            assert!(!generic_receive_offload(&pair.a).unwrap(), "off while held");
            taken.restore().expect("restored");
            assert!(generic_receive_offload(&pair.a).unwrap(), "on again");
            // Off by hand after the restore: a second restore and the drop
            // leave it alone.
            assert!(!set_generic_receive_offload(&pair.a, false).unwrap());
            taken.restore().expect("nothing to do");
            drop(taken);
            assert!(!generic_receive_offload(&pair.a).unwrap());
            // Nothing on: nothing changed, nothing restored on drop.
            let taken = ReceiveOffloads::turn_off(&pair.a).expect("turned off");
            assert!(!taken.changed() && taken.turned_off().is_empty());
            drop(taken);
            assert!(!generic_receive_offload(&pair.a).unwrap());
            // Dropped without a restore: turned back on.
            set_generic_receive_offload(&pair.a, true).unwrap();
            drop(ReceiveOffloads::turn_off(&pair.a).expect("turned off"));
            assert!(
                generic_receive_offload(&pair.a).unwrap(),
                "on after the drop"
            );
        })
        .expect("in the namespace");
    }

    #[test]
    fn receive_offloads_of_a_missing_interface_are_a_typed_error() {
        match ReceiveOffloads::turn_off("pspat-nosuch0") {
            Err(IoError::NoSuchInterface(name)) => assert_eq!(name, "pspat-nosuch0"),
            Err(IoError::PermissionDenied { .. }) => {}
            other => panic!("expected a typed error, got {other:?}"),
        }
        match turn_on_receive_offloads("pspat-nosuch0", true, false) {
            Err(IoError::NoSuchInterface(name)) => assert_eq!(name, "pspat-nosuch0"),
            Err(IoError::PermissionDenied { .. }) => {}
            other => panic!("expected a typed error, got {other:?}"),
        }
        assert!(
            turn_on_receive_offloads("pspat-nosuch0", false, false).is_ok(),
            "nothing to turn on: the interface is not even looked up"
        );
    }

    #[test]
    fn offloads_go_off_on_a_veth() {
        let Some(veth) = test_veth() else {
            return;
        };
        let (pair, a) = (&veth.pair, &veth.a);
        let state = disable_offloads_in(a.name(), &pair.a).expect("ethtool ioctl");
        assert_eq!(state.features.len(), 4);
        assert!(state.all_off(), "still on: {state:?}");
    }
}
