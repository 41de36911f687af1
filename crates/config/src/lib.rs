//! dummynet's user model for pspat, as pure data.
//!
//! # Guarantees
//! * **Two syntaxes, one model.** [`parse_ipfw`] reads `ipfw(8)` lines (the
//!   man page's examples as written), [`parse_toml`] reads TOML with explicit
//!   units; both give a [`Config`], and [`print_ipfw`] / [`print_toml`] print
//!   it back so that parsing the output gives an equal [`Config`].
//! * **Errors name the place.** Every [`Error`] carries the file, line,
//!   column and offending token; its `Display` is `file:line:column: message`.
//!   Bad input never panics.
//! * **All or nothing.** [`Config::validate`] resolves defaults and checks every
//!   range and reference, then returns a complete [`Plan`] or the first error
//!   in file order; nothing is half applied.
//! * **Minimal changes.** [`diff()`] lists only what differs between two plans,
//!   in an order where every intermediate plan's references stay valid;
//!   [`apply`] replays a change.
//!
//! # Complexity
//! Parsing and printing are linear in the text; validation and [`diff()`] are
//! O(n log n) in the number of objects (maps keyed by number).
//!
//! # Layers
//! ```text
//! text ──parse_ipfw / parse_toml──▶ Config ──validate(loader)──▶ Plan ──diff(old, new)──▶ [Change] ──▶ daemon
//!                                      ▲   (profiles read through the loader)
//!                          print_ipfw / print_toml
//! ```
//!
//! # Example
//! ```
//! let text = "sched 4 config type qfq bw 4Mbit/s mask src-ip 0xff\n\
//!             queue 1 config weight 10 sched 4 mask dst-ip 0xffffffff\n\
//!             add 100 queue 1 ip from 10.0.0.0/24 to any dst-port 80\n";
//! let config = pspat_config::parse_ipfw(text, "cfg.ipfw").unwrap();
//! let plan = config.validate(&pspat_config::NoProfiles).unwrap();
//! assert_eq!(plan.queues[&1].weight, 10);
//! assert_eq!(plan.scheds[&4].link.bw_bps, 4_000_000);
//! ```
//!
//! Sources: `ipfw(8)` and `dummynet.c` of the Linux/Windows dummynet port and
//! of FreeBSD (`sbin/ipfw/dummynet.c`); tc-netem(8) for the delay
//! distribution, Gilbert-Elliott loss, the 4-state loss model (`loss
//! state`) and duplication.
#![forbid(unsafe_code)]

pub mod control;
mod correlated_loss;
mod diff;
pub mod dscp;
mod error;
pub mod header;
mod ipfw;
pub mod mask;
pub mod model;
pub mod net;
mod netem;
mod pipe_config;
mod plan;
mod print;
mod profile;
mod read;
mod toml_syntax;
pub mod units;

pub use control::{merge, ControlRequest, Deletable, Listing};
pub use diff::{apply, diff, Change};
pub use error::{Error, ErrorKind, Pos};
pub use mask::{FlowMask, MaskField};
pub use model::{
    Action, Codel, Config, DefaultAction, Direction, Distribution, FqCodel, FqPie, GilbertElliott,
    InterfaceMatch, InterfaceRole, LinkParams, LossState, MatchProbability, Parent, Pie, Pipe,
    Proto, Queue, QueueParams, Red, Rule, Sched, SlotInterval, SlotParams, Table, TableEntry,
    Target,
};
pub use net::{AddrList, AddrListError, AddrMatch, PortRange, Prefix, MAX_ADDR_LIST_LEN};
pub use netem::{netem_to_config, NETEM_DEFAULT_LIMIT};
pub use pipe_config::{
    delay_line_capacity, pie_config, pipe_config, pipe_seed, plan_pipe_configs, queue_config,
    sched_config,
};
pub use plan::{
    FsProfiles, LinkPlan, LoadedProfile, NoProfiles, PipePlan, Plan, ProfileLoader, QueuePlan,
    QueueSetPlan, RulePlan, SchedPlan, SCHEMA_VERSION,
};
pub use print::{
    codel_words, fq_codel_words, fq_pie_words, mask_text, pie_words, print_ipfw, print_toml,
    rule_line, slot_words,
};
pub use profile::{parse_profile, Profile, ProfilePoint};
pub use read::{read_regular_text_file, read_text_file, MAX_FILE_BYTES};
pub use units::QueueLimit;

/// Parses one control line (a leading `ipfw` and `-q`/`-f` flags are accepted).
///
/// # Examples
/// ```
/// use pspat_config::{parse_control, ControlRequest, Deletable, Listing};
/// assert_eq!(parse_control("ipfw pipe show", "ctl").unwrap(),
///            ControlRequest::Show { what: Listing::Pipes, number: None });
/// assert_eq!(parse_control("pipe 3 delete", "ctl").unwrap(),
///            ControlRequest::Delete { what: Deletable::Pipe, numbers: vec![3] });
/// assert!(matches!(parse_control("pipe 1 config bw 1Mbit/s", "ctl").unwrap(),
///                  ControlRequest::Configure(_)));
/// ```
///
/// # Errors
/// [`Error`] naming the first token that does not fit.
pub fn parse_control(line: &str, file: &str) -> Result<ControlRequest, Error> {
    ipfw::parse_control_line(line, file)
}

/// Parses `ipfw(8)` lines: `pipe|queue|sched N config ...`, `add ...`,
/// `table N add ...`, pspat's `default` and `seed`; a leading `ipfw`, `#`
/// comments and `;` separators are accepted.
///
/// # Examples
/// ```
/// let cfg = pspat_config::parse_ipfw("ipfw pipe 1 config bw 10Mbit/s delay 20ms plr 0.01 queue 50", "x").unwrap();
/// assert_eq!(cfg.pipes[0].link.bw, Some(10_000_000));
/// assert_eq!(cfg.pipes[0].link.delay_us, Some(20_000));
/// ```
///
/// # Errors
/// [`Error`] at the first token that does not fit the grammar; control
/// commands (`pipe show`) are refused with [`ErrorKind::NotConfiguration`].
pub fn parse_ipfw(text: &str, file_name: &str) -> Result<Config, Error> {
    ipfw::parse(text, file_name)
}

/// Parses the TOML syntax described in `docs/CONFIG.md`.
///
/// # Examples
/// ```
/// let cfg = pspat_config::parse_toml("[[pipe]]\nnumber = 1\nbw = \"10Mbit/s\"\ndelay = \"500us\"\n", "x.toml").unwrap();
/// assert_eq!(cfg.pipes[0].link.delay_us, Some(500));
/// ```
///
/// # Errors
/// [`Error`] at the first key or value that does not fit.
pub fn parse_toml(text: &str, file_name: &str) -> Result<Config, Error> {
    toml_syntax::parse(text, file_name)
}

/// Parses a file by its name: `.toml` is TOML, anything else is ipfw lines.
///
/// # Errors
/// As [`parse_toml`] or [`parse_ipfw`].
pub fn parse_file_text(text: &str, file_name: &str) -> Result<Config, Error> {
    if file_name.ends_with(".toml") {
        parse_toml(text, file_name)
    } else {
        parse_ipfw(text, file_name)
    }
}
