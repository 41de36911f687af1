//! The control commands a running daemon will take on its control socket, as
//! `ipfw(8)` spells them: `pipe show [N]`, `queue show`, `sched show`,
//! `show` / `show rules`, `pipe N delete`, `delete N`, `flush`, `pipe flush`,
//! and any configuration line (`pipe 1 config bw 10Mbit/s`). This module only
//! parses them into messages; acting on them is the daemon's job.

use crate::error::Error;
use crate::model::Config;

/// What a `show` (or `list`) command lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Listing {
    /// `pipe show`.
    Pipes,
    /// `queue show`.
    Queues,
    /// `sched show`.
    Scheds,
    /// `show`, `show rules`, `list`.
    Rules,
    /// `table N list`.
    Table(u32),
}

/// What a `delete` command removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deletable {
    /// `pipe N delete`.
    Pipe,
    /// `queue N delete`.
    Queue,
    /// `sched N delete`.
    Sched,
    /// `delete N`: a rule.
    Rule,
}

/// One control request.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ControlRequest {
    /// List objects, all or one.
    Show {
        /// Which objects.
        what: Listing,
        /// One object, or all.
        number: Option<u32>,
    },
    /// Remove objects by number.
    Delete {
        /// Which kind.
        what: Deletable,
        /// The numbers, as written.
        numbers: Vec<u32>,
    },
    /// `flush` (rules), `pipe flush`, `queue flush`, `sched flush`, `table N flush`.
    Flush(Listing),
    /// Configuration lines, to merge into the running configuration.
    Configure(Config),
}

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
    crate::ipfw::parse_control_line(line, file)
}
