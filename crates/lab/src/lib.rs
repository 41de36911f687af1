//! A test bed that puts pspat next to the kernel: three network namespaces
//! joined by two veth pairs, with a shaper in the middle that is a kernel
//! bridge, a bridge with HTB, or `pspat shape`; a UDP/TCP traffic generator
//! and receiver; and the experiments of PSPAT \[J\] §6 run through all three.
//!
//! * [`topology`]: the namespaces, links, addresses and shaper modes
//!   (`pspat lab up|down`), with a guard that removes them.
//! * [`traffic`]: `pspat traffic send|recv`: sendmmsg senders, per-flow
//!   rates by weight, sequence numbers and send timestamps in each payload;
//!   a receiver that counts loss, reordering and one-way latency.
//! * [`local`]: `pspat traffic send --via pspat`: the sending threads
//!   are clients of a pspat runtime, whose arbiter or dispatchers send
//!   with a UDP backend ([`local::UdpTx`]).
//! * [`compare`]: `pspat lab compare`: the experiments, their JSON, CSV,
//!   plots and summary.
//! * [`clock`], [`procstat`], [`stop`]: the shared monotonic clock, CPU
//!   time from `/proc`, and the Ctrl-C flag every loop polls.
//!
//! Everything here needs root (namespaces, `tc`); [`pspat_io::netns::unavailable`]
//! says why not. Every name carries the `pspat-` prefix and every address
//! is in 10.199.100.0/24.
//!
//! \[J\] L. Rizzo, P. Valente, G. Lettieri, V. Maffione, "PSPAT: software
//! packet scheduling at hardware speed" (the journal version); docs/LAB.md
//! has the picture, the commands and how to read the output.
pub mod clock;
pub mod compare;
mod compare_report;
pub mod local;
mod plot;
pub mod procstat;
mod sending;
pub mod stop;
pub mod topology;
pub mod traffic;

pub use topology::{Lab, LabError, Mode};
