//! Test-bed support: network namespaces and veth pairs that remove
//! themselves.
//!
//! Public for the tests and examples of this workspace, not a general
//! network-management API. It drives iproute2's `ip` command and needs root
//! (CAP_SYS_ADMIN and CAP_NET_ADMIN); [`unavailable`] says why not when it
//! cannot work, so that a test can print `skipped: <reason>` and return.
//!
//! * Names: every namespace is `pspat-<pid>-<n>` and every veth end
//!   `pspat-<pid>-<n>` in base 36 plus `a` or `b`, at most 15 bytes (`n`
//!   counts up within the process), so a leftover is recognisable and
//!   never collides with another process's.
//! * Addresses: a pair gets the /30 `10.199.<n / 64>.<4 × (n % 64)>`, the
//!   `a` end `.1` and the `b` end `.2`, assigned inside the namespaces only
//!   (10.199.0.0/16 is private, RFC 1918, and never routed out of them).
//!   IPv6 link-local addresses are not generated, so the links stay quiet.
//! * Clean-up: [`Namespace`] deletes its namespace on drop (with every
//!   interface inside it), [`VethPair`] its pair; drop runs during a
//!   panic's unwinding too. Errors while cleaning up are ignored (an
//!   interface a test removed on purpose is already gone).
//! * [`Namespace::run`] runs a closure on a fresh thread that `setns(2)`
//!   into the namespace; sockets opened there stay in that namespace when
//!   they are moved to other threads.
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why the test bed could not do something.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// An `ip` command failed.
    #[error("`ip {args}` failed: {stderr}")]
    Command {
        /// The arguments.
        args: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// `ip` could not be started.
    #[error("cannot run `ip`: {0}")]
    Spawn(std::io::Error),
    /// Entering the namespace failed.
    #[error("cannot enter namespace {name}: {source}")]
    Enter {
        /// The namespace.
        name: String,
        /// The system's error.
        source: std::io::Error,
    },
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn next_id() -> u32 {
    // Relaxed: only uniqueness matters.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn base36(mut value: u32) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit(value % 36, 36).unwrap_or('0'));
        value /= 36;
        if value == 0 {
            break;
        }
    }
    digits.iter().rev().collect()
}

/// Runs `ip <args>`; its standard error becomes the error.
pub fn ip(args: &[&str]) -> Result<(), NetnsError> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(NetnsError::Spawn)?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NetnsError::Command {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// Why namespaces cannot be made here (not root, no `ip`, missing
/// capabilities), or `None` when they can.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root for network namespaces and AF_PACKET".to_owned());
    }
    match Command::new("ip").arg("-V").stdout(Stdio::null()).status() {
        Ok(status) if status.success() => {}
        _ => return Some("iproute2's `ip` command is not installed".to_owned()),
    }
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        return Some("the kernel has no network namespaces".to_owned());
    }
    // CAP_NET_ADMIN (12), CAP_NET_RAW (13), CAP_SYS_ADMIN (21):
    // capabilities(7). A root without them (a restricted container) cannot
    // make namespaces or packet sockets.
    let needed = (1u64 << 12) | (1 << 13) | (1 << 21);
    let effective = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        });
    match effective {
        Some(caps) if caps & needed == needed => None,
        Some(_) => Some("root lacks CAP_NET_ADMIN, CAP_NET_RAW or CAP_SYS_ADMIN".to_owned()),
        None => Some("cannot read the effective capabilities".to_owned()),
    }
}

/// A network namespace named `pspat-<pid>-<n>`, deleted on drop.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// Creates a namespace with its loopback up.
    pub fn create() -> Result<Self, NetnsError> {
        let name = format!("pspat-{}-{}", std::process::id(), next_id());
        ip(&["netns", "add", &name])?;
        let namespace = Self { name };
        namespace.ip(&["link", "set", "lo", "up"])?;
        Ok(namespace)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n <name> <args>` (a command inside the namespace).
    pub fn ip(&self, args: &[&str]) -> Result<(), NetnsError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `f` on a new thread inside the namespace and returns its
    /// result; a panic in `f` is resumed in the caller.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        let path = format!("/var/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).map_err(|source| NetnsError::Enter {
            name: self.name.clone(),
            source,
        })?;
        let outcome = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: setns takes a descriptor we hold open and a
                    // flag; it changes the network namespace of this
                    // thread only, which ends when `f` returns.
                    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return Err(NetnsError::Enter {
                            name: self.name.clone(),
                            source: std::io::Error::last_os_error(),
                        });
                    }
                    Ok(f())
                })
                .join()
        });
        match outcome {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A veth pair between two namespaces, with a /30 and both ends up; the
/// pair is deleted on drop (module docs).
#[derive(Debug)]
pub struct VethPair {
    /// The `a` end's name (in the first namespace).
    pub a: String,
    /// The `b` end's name (in the second namespace).
    pub b: String,
    /// The `a` end's address.
    pub a_addr: Ipv4Addr,
    /// The `b` end's address.
    pub b_addr: Ipv4Addr,
    namespace_a: String,
}

impl VethPair {
    /// Creates a pair with end `a` in `ns_a` and end `b` in `ns_b`, both up
    /// with their addresses and IPv6 address generation off.
    pub fn create(ns_a: &Namespace, ns_b: &Namespace) -> Result<Self, NetnsError> {
        let id = next_id();
        let stem = format!("pspat-{}{}", base36(std::process::id()), base36(id));
        let (a, b) = (format!("{stem}a"), format!("{stem}b"));
        let subnet = id % (64 * 256);
        let (third, fourth) = ((subnet / 64) as u8, (subnet % 64 * 4) as u8);
        let a_addr = Ipv4Addr::new(10, 199, third, fourth + 1);
        let b_addr = Ipv4Addr::new(10, 199, third, fourth + 2);
        ip(&[
            "link", "add", &a, "netns", &ns_a.name, "type", "veth", "peer", "name", &b, "netns",
            &ns_b.name,
        ])?;
        let pair = Self {
            a,
            b,
            a_addr,
            b_addr,
            namespace_a: ns_a.name.clone(),
        };
        for (namespace, end, address) in [(ns_a, &pair.a, a_addr), (ns_b, &pair.b, b_addr)] {
            namespace.ip(&["link", "set", end, "addrgenmode", "none"])?;
            namespace.ip(&["addr", "add", &format!("{address}/30"), "dev", end])?;
            namespace.ip(&["link", "set", end, "up"])?;
        }
        Ok(pair)
    }

    /// Deletes the pair now (both ends), as a test does to pull a link
    /// away under a running socket.
    pub fn remove(&self) -> Result<(), NetnsError> {
        ip(&["-n", &self.namespace_a, "link", "del", &self.a])
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}
