//! The redirect program: six eBPF instructions assembled at run time, an
//! XSKMAP, and a BPF link that attaches the program to one interface for
//! as long as the link's descriptor is open.
//!
//! Sources: bpf(2); the kernel's `include/uapi/linux/bpf.h` (the
//! `bpf_attr` layouts of `BPF_MAP_CREATE`, `BPF_MAP_UPDATE_ELEM`,
//! `BPF_PROG_LOAD` and `BPF_LINK_CREATE`, the `xdp_md` context, the
//! instruction encoding, helper 51 `bpf_redirect_map`) and
//! `include/uapi/linux/if_link.h` (`XDP_FLAGS_SKB_MODE`,
//! `XDP_FLAGS_DRV_MODE`); `net/core/dev.c` (`dev_xdp_attach`: which errno
//! says that another program holds the interface).
//!
//! The program, instruction by instruction (`r1` holds the `xdp_md`
//! context on entry; `r0` is the verdict):
//!
//! | # | instruction                   | meaning                                          |
//! |---|-------------------------------|--------------------------------------------------|
//! | 0 | `r2 = *(u32 *)(r1 + 16)`      | the queue the frame arrived on (`rx_queue_index`) |
//! | 1 | `r1 = map_fd` (two slots)     | the XSKMAP, patched in at load time               |
//! | 3 | `r3 = 2`                      | `XDP_PASS` as the verdict when the slot is empty  |
//! | 4 | `call 51`                     | `r0 = bpf_redirect_map(r1, r2, r3)`               |
//! | 5 | `exit`                        | return `r0`                                       |
//!
//! A frame of a queue whose map slot holds a socket goes to that socket
//! (`XDP_REDIRECT`); any other frame passes to the kernel's stack
//! unchanged (the low bits of the helper's flags are its verdict when the
//! lookup misses, Linux 5.13+).
//!
//! The link is the only owner of the attachment: closing its descriptor
//! (drop, process exit, a panic's unwinding or a kill) detaches the
//! program, so no program outlives the process on the interface.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::XdpError;
use crate::error::IoError;

/// Where the program attaches (`XDP_FLAGS_*` of `BPF_LINK_CREATE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AttachMode {
    /// Driver mode, and skb mode when the driver refuses.
    #[default]
    Auto,
    /// Driver (native) mode: the program runs in the driver's receive
    /// path, before any socket buffer is built; needed for zero-copy.
    Driver,
    /// skb (generic) mode: the program runs after the kernel built a socket
    /// buffer; works on every interface, costs an allocation per frame.
    Skb,
}

impl AttachMode {
    /// `auto`, `driver` or `skb`.
    pub const fn name(self) -> &'static str {
        match self {
            AttachMode::Auto => "auto",
            AttachMode::Driver => "driver",
            AttachMode::Skb => "skb",
        }
    }

    fn flags(self) -> u32 {
        match self {
            AttachMode::Skb => XDP_FLAGS_SKB_MODE,
            AttachMode::Driver | AttachMode::Auto => XDP_FLAGS_DRV_MODE,
        }
    }
}

impl std::fmt::Display for AttachMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AttachMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(AttachMode::Auto),
            "driver" => Ok(AttachMode::Driver),
            "skb" => Ok(AttachMode::Skb),
            _ => Err(format!("expected auto, driver or skb, got {s:?}")),
        }
    }
}

// bpf(2) commands, map and program types, attach type (uapi bpf.h).
const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_PROG_LOAD: u32 = 5;
const BPF_LINK_CREATE: u32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `union bpf_attr`: 144 bytes on Linux 6.x; a shorter or longer buffer is
/// accepted as long as the bytes the kernel does not know are zero.
#[repr(C, align(8))]
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Self {
        Attr([0; 144])
    }
    fn u32(mut self, offset: usize, value: u32) -> Self {
        self.0[offset..offset + 4].copy_from_slice(&value.to_ne_bytes());
        self
    }
    fn u64(mut self, offset: usize, value: u64) -> Self {
        self.0[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
        self
    }
    fn name(mut self, offset: usize, name: &str) -> Self {
        let bytes = &name.as_bytes()[..name.len().min(15)];
        self.0[offset..offset + bytes.len()].copy_from_slice(bytes);
        self
    }
}

/// Runs one bpf(2) command; returns its (non-negative) result.
fn bpf(command: u32, attr: &mut Attr) -> io::Result<i32> {
    // SAFETY: `attr` is a live, writable buffer of the size passed; every
    // pointer stored in it (instructions, license, log, key, value) points
    // to memory the caller keeps alive across this call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command as libc::c_long,
            attr.0.as_mut_ptr(),
            attr.0.len() as libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    i32::try_from(rc).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

/// A bpf(2) result that is a new descriptor, owned.
fn bpf_fd(command: u32, attr: &mut Attr) -> io::Result<OwnedFd> {
    let fd = bpf(command, attr)?;
    // SAFETY: the command returns a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One eBPF instruction: opcode, destination and source registers,
/// offset, immediate (`struct bpf_insn`, fields in the machine's byte
/// order).
const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let off = off.to_ne_bytes();
    let imm = imm.to_ne_bytes();
    [
        code,
        // The register nibbles are C bit-fields: `dst_reg` is the low
        // nibble on a little-endian machine, the high one on a big-endian.
        if cfg!(target_endian = "big") {
            (dst << 4) | (src & 0x0f)
        } else {
            (src << 4) | (dst & 0x0f)
        },
        off[0],
        off[1],
        imm[0],
        imm[1],
        imm[2],
        imm[3],
    ]
}

/// `BPF_LDX | BPF_MEM | BPF_W`: 32-bit load from `src + off`.
const LDX_W: u8 = 0x61;
/// `BPF_LD | BPF_IMM | BPF_DW`: 64-bit immediate over two slots.
const LD_IMM64: u8 = 0x18;
/// `BPF_ALU64 | BPF_MOV | BPF_K`: register = immediate.
const MOV64_IMM: u8 = 0xb7;
/// `BPF_JMP | BPF_CALL`: call the helper numbered by the immediate.
const CALL: u8 = 0x85;
/// `BPF_JMP | BPF_EXIT`: return r0.
const EXIT: u8 = 0x95;
/// Source register value of a 64-bit immediate that names a map by fd.
const PSEUDO_MAP_FD: u8 = 1;
/// Offset of `rx_queue_index` in `struct xdp_md`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
/// The `XDP_PASS` verdict.
const XDP_PASS: i32 = 2;
/// `bpf_redirect_map`'s helper number.
const HELPER_REDIRECT_MAP: i32 = 51;
/// Index of the instruction whose immediate is the map's descriptor.
const MAP_FD_SLOT: usize = 1;

/// The program (module docs), the map's descriptor still 0.
const PROGRAM: [[u8; 8]; 6] = [
    insn(LDX_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
    insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, 0),
    insn(0, 0, 0, 0, 0),
    insn(MOV64_IMM, 3, 0, 0, XDP_PASS),
    insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),
    insn(EXIT, 0, 0, 0, 0),
];

/// The license the program declares: the kernel lets only programs of a
/// GPL-compatible license call some helpers; this one names the
/// project's license with GPL as the alternative.
const LICENSE: &[u8] = b"Dual BSD/GPL\0";

/// Bytes of verifier log kept when a load is refused.
const LOG_SIZE: usize = 64 * 1024;
/// Lines of the verifier log an error carries (its last ones).
const LOG_LINES: usize = 12;

/// The redirect program attached to one interface with its XSKMAP; drop
/// detaches it (module docs).
#[derive(Debug)]
pub struct XdpProgram {
    // The link first: dropping it detaches the program before the program
    // and map descriptors close.
    link: OwnedFd,
    program: OwnedFd,
    map: OwnedFd,
    mode: AttachMode,
    interface: String,
    slots: u32,
}

impl XdpProgram {
    /// Creates an XSKMAP of `slots` entries (one per receive queue), loads
    /// the program and attaches it to the interface of index `ifindex` in
    /// `mode` ([`AttachMode::Auto`] tries driver mode, then skb mode).
    pub(crate) fn attach(
        interface: &str,
        ifindex: u32,
        mode: AttachMode,
        slots: u32,
    ) -> Result<Self, XdpError> {
        let bpf_error = |operation: &'static str, error: io::Error| -> XdpError {
            match error.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => {
                    XdpError::Io(IoError::PermissionDenied { operation })
                }
                _ => XdpError::Io(IoError::Os {
                    operation,
                    source: error,
                }),
            }
        };
        let slots = slots.max(1);
        let mut attr = Attr::new()
            .u32(0, BPF_MAP_TYPE_XSKMAP)
            .u32(4, 4)
            .u32(8, 4)
            .u32(12, slots)
            .name(28, "pspat_xsks");
        let map = bpf_fd(BPF_MAP_CREATE, &mut attr)
            .map_err(|e| bpf_error("create the XSKMAP (bpf BPF_MAP_CREATE)", e))?;
        let program = load(&map)?;
        let (link, mode) = match mode {
            AttachMode::Auto => match link(&program, interface, ifindex, AttachMode::Driver) {
                Ok(link) => (link, AttachMode::Driver),
                Err(XdpError::AttachRefused { .. }) => (
                    link(&program, interface, ifindex, AttachMode::Skb)?,
                    AttachMode::Skb,
                ),
                Err(other) => return Err(other),
            },
            fixed => (link(&program, interface, ifindex, fixed)?, fixed),
        };
        Ok(Self {
            link,
            program,
            map,
            mode,
            interface: interface.to_owned(),
            slots,
        })
    }

    /// The mode the program runs in ([`AttachMode::Driver`] or
    /// [`AttachMode::Skb`], never `Auto`).
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The interface the program is attached to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Puts socket `fd` into the map slot of `queue`, so that the frames
    /// of that queue go to it.
    pub(crate) fn insert(&self, queue: u32, fd: RawFd) -> Result<(), XdpError> {
        if queue >= self.slots {
            return Err(XdpError::NoSuchQueue {
                interface: self.interface.clone(),
                queue,
                queues: Some(self.slots),
            });
        }
        let key = queue;
        let value = u32::try_from(fd).unwrap_or(u32::MAX);
        let mut attr = Attr::new()
            .u32(0, self.map.as_raw_fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, &value as *const u32 as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map_err(|error| {
            XdpError::Io(IoError::Os {
                operation: "insert the socket into the XSKMAP (bpf BPF_MAP_UPDATE_ELEM)",
                source: error,
            })
        })?;
        Ok(())
    }

    /// The descriptors of the link and the program (for diagnostics: a
    /// caller may query the kernel about them).
    pub fn link_fd(&self) -> RawFd {
        self.link.as_raw_fd()
    }

    /// The loaded program's descriptor.
    pub fn program_fd(&self) -> RawFd {
        self.program.as_raw_fd()
    }
}

/// Loads the program with the map's descriptor patched in; a refusal
/// carries the last lines of the verifier's log (a second load, with the
/// log on, gathers it).
fn load(map: &OwnedFd) -> Result<OwnedFd, XdpError> {
    let mut code = PROGRAM;
    let fd = map.as_raw_fd().to_ne_bytes();
    code[MAP_FD_SLOT][4..8].copy_from_slice(&fd);
    load_code(&code)
}

/// Loads `code` as an XDP program (see [`load`]).
fn load_code(code: &[[u8; 8]]) -> Result<OwnedFd, XdpError> {
    let attempt = |log: Option<&mut Vec<u8>>| -> io::Result<OwnedFd> {
        let mut attr = Attr::new()
            .u32(0, BPF_PROG_TYPE_XDP)
            .u32(4, code.len() as u32)
            .u64(8, code.as_ptr() as u64)
            .u64(16, LICENSE.as_ptr() as u64)
            .name(48, "pspat_xsk")
            .u32(68, BPF_XDP);
        if let Some(log) = log {
            attr = attr
                .u32(24, 1)
                .u32(28, log.len() as u32)
                .u64(32, log.as_mut_ptr() as u64);
        }
        bpf_fd(BPF_PROG_LOAD, &mut attr)
    };
    match attempt(None) {
        Ok(fd) => Ok(fd),
        Err(error) if error.raw_os_error() == Some(libc::EPERM) => {
            Err(XdpError::Io(IoError::PermissionDenied {
                operation: "load the XDP program (needs CAP_BPF and CAP_NET_ADMIN)",
            }))
        }
        Err(error) => {
            let mut log = vec![0u8; LOG_SIZE];
            match attempt(Some(&mut log)) {
                Ok(fd) => Ok(fd),
                Err(_) => Err(XdpError::VerifierRefused {
                    log: last_lines(&log, LOG_LINES),
                    source: error,
                }),
            }
        }
    }
}

/// The last `count` non-empty lines of a NUL-terminated log.
fn last_lines(log: &[u8], count: usize) -> String {
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// Attaches the program by a BPF link in `mode` (Driver or Skb).
fn link(
    program: &OwnedFd,
    interface: &str,
    ifindex: u32,
    mode: AttachMode,
) -> Result<OwnedFd, XdpError> {
    let mut attr = Attr::new()
        .u32(0, program.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, BPF_XDP)
        .u32(12, mode.flags());
    bpf_fd(BPF_LINK_CREATE, &mut attr).map_err(|error| match error.raw_os_error() {
        // dev_xdp_attach: a program or link already holds the interface
        // (EBUSY), or one in the other mode does (EEXIST).
        Some(libc::EBUSY | libc::EEXIST) => XdpError::InterfaceBusy {
            interface: interface.to_owned(),
        },
        Some(libc::EPERM | libc::EACCES) => XdpError::Io(IoError::PermissionDenied {
            operation: "attach the XDP program (needs CAP_NET_ADMIN)",
        }),
        Some(libc::ENODEV | libc::ENXIO) => {
            XdpError::Io(IoError::NoSuchInterface(interface.to_owned()))
        }
        _ => XdpError::AttachRefused {
            interface: interface.to_owned(),
            mode,
            source: error,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_endian = "little")]
    fn instructions_encode_registers_offset_and_immediate() {
        assert_eq!(PROGRAM[0], [0x61, 0x12, 16, 0, 0, 0, 0, 0]);
        assert_eq!(PROGRAM[1][..2], [0x18, 0x11]);
        assert_eq!(PROGRAM[2], [0; 8]);
        assert_eq!(PROGRAM[3], [0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        assert_eq!(PROGRAM[4], [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(PROGRAM[5], [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn verifier_log_keeps_its_last_lines() {
        let log = b"a\nb\n\nc\nd\0garbage";
        assert_eq!(last_lines(log, 2), "c\nd");
        assert_eq!(last_lines(b"", 3), "");
    }

    #[test]
    fn a_refused_program_carries_the_verifier_log() {
        // SAFETY: geteuid takes nothing and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipped: loading a BPF program needs root");
            return;
        }
        // `exit` with r0 never written: the verifier refuses it.
        let code = [insn(EXIT, 0, 0, 0, 0)];
        match load_code(&code) {
            Err(XdpError::VerifierRefused { log, .. }) => {
                assert!(log.contains("R0 !read_ok"), "log: {log}");
            }
            other => panic!("expected a verifier refusal, got {other:?}"),
        }
    }

    #[test]
    fn attach_modes_parse_and_print() {
        for mode in [AttachMode::Auto, AttachMode::Driver, AttachMode::Skb] {
            assert_eq!(mode.name().parse::<AttachMode>(), Ok(mode));
        }
        assert!("native".parse::<AttachMode>().is_err());
    }
}
