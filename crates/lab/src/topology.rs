//! The lab's topology: three named namespaces and two veth pairs, with the
//! sender and the receiver on one /24 so that the shaper in the middle can
//! be a layer-2 bump in the wire.
//!
//! ```text
//!  pspat-lab-snd            pspat-lab-shp                 pspat-lab-rcv
//! [pspat-snd0]--veth--[pspat-shin]  shaper  [pspat-shout]--veth--[pspat-rcv0]
//!  10.199.100.1/24                                          10.199.100.2/24
//! ```
//!
//! Shaper modes ([`Mode`]): `bridge` (a kernel bridge `pspat-br0` over
//! shin and shout, no qdisc), `htb` (the same bridge plus HTB on shout's
//! egress, one class per flow, u32 filters on the UDP destination port),
//! `pspat` (no bridge: both interfaces up without addresses, for
//! `pspat shape --in pspat-shin --out pspat-shout`).
//!
//! Guarantees: names are fixed (`pspat-lab-*`, `pspat-*`), MAC addresses
//! are fixed locally administered ones with static neighbour entries (no
//! ARP on the wire), IPv6 is off in the three namespaces, TX checksum,
//! TSO, GSO and GRO are off on the four veths (every frame ≤ 1514 bytes with
//! a finished checksum). [`Lab::up`] first removes a stale lab; [`down`]
//! removes everything whatever state a crash left; a [`Lab`] removes the
//! lab when dropped unless [`Lab::keep`] was called. Cost: about 30 `ip`/`tc`
//! invocations, well under a second.
use std::process::{Command, Stdio};

use pspat_io::netns::{self, NetnsError};

/// The sender's namespace.
pub const NS_SND: &str = "pspat-lab-snd";
/// The shaper's namespace.
pub const NS_SHP: &str = "pspat-lab-shp";
/// The receiver's namespace.
pub const NS_RCV: &str = "pspat-lab-rcv";
/// Every namespace of the lab.
pub const NAMESPACES: [&str; 3] = [NS_SND, NS_SHP, NS_RCV];
/// The sender's interface.
pub const SND_IF: &str = "pspat-snd0";
/// The shaper's interface toward the sender (`pspat shape --in`).
pub const SHP_IN: &str = "pspat-shin";
/// The shaper's interface toward the receiver (`pspat shape --out`).
pub const SHP_OUT: &str = "pspat-shout";
/// The receiver's interface.
pub const RCV_IF: &str = "pspat-rcv0";
/// The bridge of modes `bridge` and `htb`.
pub const BRIDGE: &str = "pspat-br0";
/// The sender's address.
pub const SND_ADDR: &str = "10.199.100.1";
/// The receiver's address.
pub const RCV_ADDR: &str = "10.199.100.2";
/// The subnet's prefix length.
pub const PREFIX: u8 = 24;
const SND_MAC: &str = "02:70:73:00:64:01";
const SHIN_MAC: &str = "02:70:73:00:64:11";
const SHOUT_MAC: &str = "02:70:73:00:64:12";
const RCV_MAC: &str = "02:70:73:00:64:02";

/// Why the lab could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Namespaces cannot be made here (not root, no `ip`, no capability).
    #[error("the lab needs network namespaces: {0}")]
    Unavailable(String),
    /// An `ip` step failed.
    #[error(transparent)]
    Ip(#[from] NetnsError),
    /// Another command (`tc`, `sysctl`) failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// Turning offloads off failed.
    #[error("cannot turn offloads off on {interface}: {source}")]
    Offload {
        /// The interface.
        interface: &'static str,
        /// The cause.
        source: pspat_io::IoError,
    },
    /// A stop (Ctrl-C) was asked for while building.
    #[error("interrupted")]
    Interrupted,
    /// A bad experiment parameter.
    #[error("{0}")]
    Config(String),
    /// Reading or writing a file, or a child process.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// What sits between `pspat-shin` and `pspat-shout` (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A kernel bridge, no qdisc ("kernel forwarding").
    Bridge,
    /// The bridge plus HTB on shout's egress.
    Htb,
    /// No bridge; `pspat shape` forwards.
    Pspat,
}

impl Mode {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Bridge => "bridge",
            Mode::Htb => "htb",
            Mode::Pspat => "pspat",
        }
    }
}

/// HTB's configuration for mode `htb`: a rate shared by flows on UDP
/// destination ports `base_port + i` with `weights[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtbPlan {
    /// The link rate, bit/s (each class's ceil; the classes' rates share it
    /// in proportion to the weights).
    pub rate_bps: u64,
    /// One weight per flow (each ≥ 1).
    pub weights: Vec<u32>,
    /// The first flow's destination port.
    pub base_port: u16,
    /// Each class's queue, packets: a `pfifo` of this limit under every
    /// leaf class (`None`: the kernel's default leaf queue, the device's
    /// `txqueuelen` packets).
    pub leaf_limit: Option<u32>,
}

/// The default per-flow queue of a comparison, packets: what HTB gives a
/// leaf class without a queue of its own on a veth device (its
/// `txqueuelen`, 1000), so that pspat and HTB hold the same per flow.
pub const DEFAULT_QUEUE_LIMIT: u32 = 1000;

impl HtbPlan {
    /// The `tc` commands (arguments after `tc -n pspat-lab-shp`) that build
    /// the plan on `pspat-shout`. Class `1:1` holds the rate; flow `i` is
    /// class `1:<hex 0x10 + i>` with rate `R·wᵢ/Σw`, ceil `R`, burst 64 KiB
    /// and a quantum of 1514 bytes times its weight over the smallest
    /// (clamped to HTB's 200 000), matched by a u32 filter on its port,
    /// with a `pfifo` of [`HtbPlan::leaf_limit`] packets when one is given.
    /// Frames no filter matches (none in the lab) leave unshaped through
    /// HTB's direct queue.
    pub fn commands(&self) -> Result<Vec<Vec<String>>, LabError> {
        if self.weights.is_empty() || self.weights.len() > 4000 {
            return Err(LabError::Config(format!(
                "htb needs 1 to 4000 flows, not {}",
                self.weights.len()
            )));
        }
        if self.weights.contains(&0) {
            return Err(LabError::Config("htb weights must be at least 1".into()));
        }
        if self.rate_bps < 8_000 {
            return Err(LabError::Config(
                "htb rate must be at least 8 kbit/s".into(),
            ));
        }
        if usize::from(self.base_port) + self.weights.len() > 65_536 {
            return Err(LabError::Config("htb flow ports pass 65535".into()));
        }
        if self.leaf_limit == Some(0) {
            return Err(LabError::Config(
                "htb leaf queue limit must be at least 1".into(),
            ));
        }
        let dev = SHP_OUT.to_owned();
        let total: u64 = self.weights.iter().map(|&w| u64::from(w)).sum();
        let smallest = u64::from(*self.weights.iter().min().unwrap_or(&1));
        let rate = format!("{}bit", self.rate_bps);
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let mut out = vec![
            s(&["qdisc", "add", "dev", &dev, "root", "handle", "1:", "htb"]),
            s(&[
                "class", "add", "dev", &dev, "parent", "1:", "classid", "1:1", "htb", "rate",
                &rate, "ceil", &rate, "burst", "64k", "cburst", "64k",
            ]),
        ];
        for (i, &w) in self.weights.iter().enumerate() {
            let class = format!("1:{:x}", 0x10 + i);
            let share = (u128::from(self.rate_bps) * u128::from(w) / u128::from(total)) as u64;
            let share = format!("{}bit", share.max(8));
            let quantum = (1514 * u64::from(w) / smallest)
                .clamp(1514, 200_000)
                .to_string();
            out.push(s(&[
                "class", "add", "dev", &dev, "parent", "1:1", "classid", &class, "htb", "rate",
                &share, "ceil", &rate, "burst", "64k", "cburst", "64k", "quantum", &quantum,
            ]));
            if let Some(limit) = self.leaf_limit {
                let limit = limit.to_string();
                out.push(s(&[
                    "qdisc", "add", "dev", &dev, "parent", &class, "pfifo", "limit", &limit,
                ]));
            }
            let port = (usize::from(self.base_port) + i).to_string();
            out.push(s(&[
                "filter", "add", "dev", &dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "ip", "dport", &port, "0xffff", "flowid", &class,
            ]));
        }
        Ok(out)
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), LabError> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Io {
            what: format!("cannot run `{program}`"),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LabError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The lab namespaces that exist now.
pub fn existing_namespaces() -> Vec<String> {
    output("ip", &["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("pspat-lab-"))
        .map(str::to_owned)
        .collect()
}

/// Lab links left in the caller's (root) namespace, e.g. by a crash
/// between creating a pair and moving it.
pub fn stray_links() -> Vec<String> {
    [SND_IF, SHP_IN, SHP_OUT, RCV_IF, BRIDGE]
        .iter()
        .filter(|name| {
            Command::new("ip")
                .args(["link", "show", "dev", name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|n| (*n).to_owned())
        .collect()
}

/// Removes everything a lab may have left, whatever state it is in: the
/// processes still in its namespaces get SIGTERM, then the namespaces and
/// any stray link go. Returns what was removed; succeeds when nothing was
/// there.
pub fn down() -> Result<Vec<String>, LabError> {
    let mut removed = Vec::new();
    for ns in existing_namespaces() {
        for pid in output("ip", &["netns", "pids", &ns])
            .lines()
            .filter_map(|l| l.trim().parse::<i32>().ok())
        {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        run("ip", &["netns", "del", &ns])?;
        removed.push(ns);
    }
    // Deleting one end of a veth pair deletes its peer too: look again
    // after each deletion.
    while let Some(link) = stray_links().into_iter().next() {
        run("ip", &["link", "del", &link])?;
        removed.push(link);
    }
    let left = existing_namespaces();
    if !left.is_empty() {
        return Err(LabError::Config(format!(
            "namespaces still there after removal: {}",
            left.join(", ")
        )));
    }
    Ok(removed)
}

/// The lab, removed on drop unless [`Lab::keep`] (module docs).
#[derive(Debug)]
pub struct Lab {
    mode: Mode,
    keep: bool,
    /// What the build found and removed first (a stale lab).
    pub removed_stale: Vec<String>,
}

fn ns_ip(ns: &str, args: &[&str]) -> Result<(), LabError> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    Ok(netns::ip(&all)?)
}

fn check_stop() -> Result<(), LabError> {
    if crate::stop::requested() {
        Err(LabError::Interrupted)
    } else {
        Ok(())
    }
}

impl Lab {
    /// Builds the lab in mode `mode` (`htb` needs `plan`), after removing a
    /// stale one. On any failure, what was built is removed again.
    pub fn up(mode: Mode, plan: Option<&HtbPlan>) -> Result<Self, LabError> {
        if let Some(reason) = netns::unavailable() {
            return Err(LabError::Unavailable(reason));
        }
        let removed_stale = down()?;
        // From here on, dropping `lab` removes what exists.
        let mut lab = Lab {
            mode: Mode::Bridge,
            keep: false,
            removed_stale,
        };
        for ns in NAMESPACES {
            check_stop()?;
            netns::ip(&["netns", "add", ns])?;
            ns_ip(ns, &["link", "set", "lo", "up"])?;
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    ns,
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ],
            )?;
        }
        for (a, a_mac, a_ns, b, b_mac, b_ns) in [
            (SND_IF, SND_MAC, NS_SND, SHP_IN, SHIN_MAC, NS_SHP),
            (SHP_OUT, SHOUT_MAC, NS_SHP, RCV_IF, RCV_MAC, NS_RCV),
        ] {
            check_stop()?;
            netns::ip(&[
                "link", "add", a, "address", a_mac, "netns", a_ns, "type", "veth", "peer", "name",
                b, "address", b_mac, "netns", b_ns,
            ])?;
            for (ns, dev) in [(a_ns, a), (b_ns, b)] {
                ns_ip(ns, &["link", "set", dev, "addrgenmode", "none"])?;
                pspat_io::offload::disable_offloads_in(ns, dev).map_err(|source| {
                    LabError::Offload {
                        interface: dev,
                        source,
                    }
                })?;
            }
        }
        let cidr = |a: &str| format!("{a}/{PREFIX}");
        ns_ip(NS_SND, &["addr", "add", &cidr(SND_ADDR), "dev", SND_IF])?;
        ns_ip(NS_RCV, &["addr", "add", &cidr(RCV_ADDR), "dev", RCV_IF])?;
        ns_ip(
            NS_SND,
            &[
                "neigh",
                "replace",
                RCV_ADDR,
                "lladdr",
                RCV_MAC,
                "dev",
                SND_IF,
                "nud",
                "permanent",
            ],
        )?;
        ns_ip(
            NS_RCV,
            &[
                "neigh",
                "replace",
                SND_ADDR,
                "lladdr",
                SND_MAC,
                "dev",
                RCV_IF,
                "nud",
                "permanent",
            ],
        )?;
        for (ns, dev) in [
            (NS_SND, SND_IF),
            (NS_SHP, SHP_IN),
            (NS_SHP, SHP_OUT),
            (NS_RCV, RCV_IF),
        ] {
            ns_ip(ns, &["link", "set", dev, "up"])?;
        }
        lab.set_mode(mode, plan)?;
        Ok(lab)
    }

    /// The current shaper mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Switches the shaper: removes HTB and the bridge, then builds what
    /// `mode` needs (`htb` needs `plan`).
    pub fn set_mode(&mut self, mode: Mode, plan: Option<&HtbPlan>) -> Result<(), LabError> {
        check_stop()?;
        // Either may be absent: errors here mean "nothing to remove".
        let _ = run(
            "tc",
            &["-n", NS_SHP, "qdisc", "del", "dev", SHP_OUT, "root"],
        );
        let _ = ns_ip(NS_SHP, &["link", "del", BRIDGE]);
        match mode {
            Mode::Bridge | Mode::Htb => {
                ns_ip(
                    NS_SHP,
                    &["link", "add", BRIDGE, "type", "bridge", "stp_state", "0"],
                )?;
                ns_ip(NS_SHP, &["link", "set", BRIDGE, "addrgenmode", "none"])?;
                for dev in [SHP_IN, SHP_OUT] {
                    ns_ip(NS_SHP, &["link", "set", dev, "promisc", "off"])?;
                    ns_ip(NS_SHP, &["link", "set", dev, "master", BRIDGE])?;
                }
                ns_ip(NS_SHP, &["link", "set", BRIDGE, "up"])?;
                // The bridge reports carrier a moment after its ports join;
                // wait for it (at most 2 s) so that a run's first packets
                // are not lost to the start-up.
                for _ in 0..200 {
                    let state = output("ip", &["-n", NS_SHP, "-br", "link", "show", "dev", BRIDGE]);
                    if state.split_whitespace().nth(1) == Some("UP") {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                if mode == Mode::Htb {
                    let plan =
                        plan.ok_or_else(|| LabError::Config("mode htb needs rates".into()))?;
                    for command in plan.commands()? {
                        let mut args = vec!["-n", NS_SHP];
                        args.extend(command.iter().map(String::as_str));
                        run("tc", &args)?;
                    }
                }
            }
            Mode::Pspat => {
                for dev in [SHP_IN, SHP_OUT] {
                    ns_ip(NS_SHP, &["link", "set", dev, "promisc", "on"])?;
                }
            }
        }
        self.mode = mode;
        Ok(())
    }

    /// Leaves the lab in place when this value is dropped (`pspat lab up`).
    pub fn keep(mut self) {
        self.keep = true;
    }

    /// A one-line description of the lab and its mode.
    pub fn describe(&self) -> String {
        format!(
            "lab up, mode {}: {NS_SND} {SND_IF} {SND_ADDR}/{PREFIX} <-> {SHP_IN} [{NS_SHP}] {SHP_OUT} <-> {RCV_IF} {RCV_ADDR}/{PREFIX} {NS_RCV}",
            self.mode.name()
        )
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.keep {
            let _ = down();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn htb_plan_splits_the_rate_by_weight() {
        let plan = HtbPlan {
            rate_bps: 110_000_000,
            weights: vec![10, 1],
            base_port: 5000,
            leaf_limit: None,
        };
        let commands = plan.commands().expect("valid");
        // qdisc, root class, then a class and a filter per flow.
        assert_eq!(commands.len(), 2 + 2 * 2);
        let heavy = commands[2].join(" ");
        assert!(heavy.contains("classid 1:10"), "{heavy}");
        assert!(heavy.contains("rate 100000000bit"), "{heavy}");
        assert!(heavy.contains("quantum 15140"), "{heavy}");
        let light = commands[4].join(" ");
        assert!(light.contains("rate 10000000bit"), "{light}");
        assert!(light.contains("quantum 1514"), "{light}");
        assert!(commands[5]
            .join(" ")
            .contains("dport 5001 0xffff flowid 1:11"));
    }

    #[test]
    fn htb_plan_refuses_nonsense() {
        let mut plan = HtbPlan {
            rate_bps: 1_000_000,
            weights: vec![],
            base_port: 5000,
            leaf_limit: None,
        };
        assert!(plan.commands().is_err());
        plan.weights = vec![1, 0];
        assert!(plan.commands().is_err());
        plan.weights = vec![1];
        plan.rate_bps = 10;
        assert!(plan.commands().is_err());
        plan.rate_bps = 1_000_000;
        plan.base_port = 65_535;
        plan.weights = vec![1, 1];
        assert!(plan.commands().is_err());
        plan.base_port = 5000;
        plan.leaf_limit = Some(0);
        assert!(plan.commands().is_err());
    }

    #[test]
    fn htb_plan_gives_each_class_the_leaf_queue_asked_for() {
        let plan = HtbPlan {
            rate_bps: 10_000_000,
            weights: vec![1, 1],
            base_port: 5000,
            leaf_limit: Some(256),
        };
        let commands: Vec<String> = plan
            .commands()
            .expect("valid")
            .iter()
            .map(|c| c.join(" "))
            .collect();
        // qdisc, root class, then a class, its queue and a filter per flow.
        assert_eq!(commands.len(), 2 + 2 * 3);
        assert_eq!(
            commands[3],
            "qdisc add dev pspat-shout parent 1:10 pfifo limit 256"
        );
        assert_eq!(
            commands[6],
            "qdisc add dev pspat-shout parent 1:11 pfifo limit 256"
        );
    }
}
