//! What `pspat run` and `pspat shape` say about the receive offloads the
//! bridge turns off while they run (docs/RUN.md, *Offloads*), and a
//! watchdog for them ([`Offloads`]): a child process that
//! turns them back on if its parent ends without doing so itself, as after
//! `kill -9` or the OOM killer, which no exit path of the parent survives.
//!
//! # Protocol
//! The parent starts `pspat offload-guard --parent PID` (a hidden command)
//! with a pipe on its standard input, writes one line per interface,
//! `IF FEATURE[,FEATURE]` (ethtool's names, `generic-receive-offload`,
//! `large-receive-offload`), and keeps the pipe open while it runs. After
//! its own restore at exit it writes `done`, and the guard exits doing
//! nothing. When the pipe closes without `done` (the parent died, however,
//! or left through an error before it could say `done`),
//! the guard turns on every listed feature of every listed interface, says
//! so on standard error, and exits. Turning on a feature that is already on
//! changes nothing, so a parent that restored and then died before writing
//! `done` costs nothing.
//!
//! The guard is the parent's child: it runs in the same network namespace
//! and with the same capabilities. It ignores SIGINT, SIGTERM and SIGHUP (a
//! Ctrl-C reaches the whole process group, and the parent's own clean exit
//! must come first); only `kill -9` of the guard itself, or of the whole
//! group at once, leaves the offloads off. Its standard output is closed, so
//! that it never mixes into the parent's report.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pspat_bridge::{OffloadReport, Report};
use pspat_io::offload::{GRO, LRO};

/// The line that tells the guard its parent restored the offloads itself.
const DONE: &str = "done";

/// `pspat offload-guard` (hidden: started by `pspat run` and `pspat shape`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The process whose offloads this guards (for its messages).
    #[arg(long)]
    parent: u32,
}

/// The rows of interfaces where the bridge turned something off: the ones
/// the notes and the guard are about.
fn turned_off(offloads: &[OffloadReport]) -> impl Iterator<Item = &OffloadReport> {
    offloads.iter().filter(|o| !o.turned_off.is_empty())
}

/// What the bridge did to the receive offloads of the interfaces it reads
/// ([`pspat_bridge::BridgeConfig::receive_offloads_off`]), from a live
/// report: a line for each interface where it turned some off until exit,
/// and a warning for each where it could not or the device kept one on
/// (the bridge's own lines).
fn offload_notes(report: &Report) -> (Vec<String>, Vec<String>) {
    let done = turned_off(&report.offloads)
        .map(|o| {
            format!(
                "{} off on {} until exit",
                o.turned_off.join(" and "),
                o.interface
            )
        })
        .collect();
    (done, report.offload_warnings.clone())
}

/// The same at exit, from the final report: a line for each interface
/// whose receive offloads are on again, a warning for each where turning
/// them back on failed (`ethtool -K IF gro on` does it by hand).
fn offload_exit_notes(report: &Report) -> (Vec<String>, Vec<String>) {
    let mut done = Vec::new();
    let mut warnings = Vec::new();
    for o in turned_off(&report.offloads) {
        match &o.restore_error {
            None => done.push(format!(
                "{} on again on {}",
                o.turned_off.join(" and "),
                o.interface
            )),
            Some(e) => warnings.push(format!(
                "{}: {} not turned back on ({e})",
                o.interface,
                o.turned_off.join(" and ")
            )),
        }
    }
    (done, warnings)
}

/// One line about the offloads, for the command to say its own way.
pub(crate) enum Note {
    /// What was done.
    Done(String),
    /// What could not be.
    Warning(String),
}

/// The offloads of a running bridge: what was said at its start, and the
/// guard (module docs) until [`Offloads::stopped`].
pub(crate) struct Offloads {
    guard: Option<Guard>,
}

impl Offloads {
    /// Says what the bridge turned off (and where it could not), from its
    /// first report, and starts the guard when something is off.
    pub(crate) fn started(report: &Report, say: &dyn Fn(Note)) -> Self {
        let (done, warnings) = offload_notes(report);
        done.into_iter().for_each(|l| say(Note::Done(l)));
        warnings.into_iter().for_each(|l| say(Note::Warning(l)));
        let guard = spawn(&report.offloads, &|w| say(Note::Warning(w)));
        Offloads { guard }
    }

    /// Says what is on again, from the bridge's final report, and tells the
    /// guard it has nothing to do.
    pub(crate) fn stopped(self, report: &Report, say: &dyn Fn(Note)) {
        let (done, warnings) = offload_exit_notes(report);
        done.into_iter().for_each(|l| say(Note::Done(l)));
        warnings.into_iter().for_each(|l| say(Note::Warning(l)));
        if let Some(g) = self.guard {
            g.disarm();
        }
    }
}

/// A running guard, held by the parent for as long as the offloads are off.
struct Guard {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// Starts a guard for the interfaces of `offloads` where something was
/// turned off; `None` when there is none, or (with a warning line, through
/// `warn`) when the guard cannot be started.
fn spawn(offloads: &[OffloadReport], warn: &dyn Fn(String)) -> Option<Guard> {
    let lines: Vec<String> = turned_off(offloads)
        .map(|o| format!("{} {}", o.interface, o.turned_off.join(",")))
        .collect();
    if lines.is_empty() {
        return None;
    }
    let started = std::env::current_exe().and_then(|exe| {
        Command::new(exe)
            .args(["offload-guard", "--parent", &std::process::id().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
    });
    let mut child = match started {
        Ok(c) => c,
        Err(e) => {
            warn(format!(
                "no guard for the receive offloads ({e}): after kill -9 they stay off"
            ));
            return None;
        }
    };
    let mut stdin = child.stdin.take();
    let written = stdin.as_mut().map(|s| {
        lines
            .iter()
            .try_for_each(|l| writeln!(s, "{l}"))
            .and_then(|()| s.flush())
    });
    if let Some(Err(e)) = written {
        warn(format!(
            "the guard for the receive offloads did not take its list ({e}): after kill -9 they stay off"
        ));
    }
    Some(Guard { child, stdin })
}

impl Guard {
    /// The parent restored the offloads: the guard exits without acting.
    /// Waits for it (it exits as soon as it reads `done`, or at the end of
    /// its input if the line could not be written), so that no guard
    /// outlives its parent's clean exit.
    fn disarm(mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "{DONE}").and_then(|()| s.flush());
        }
        let _ = self.child.wait();
    }
}

/// One interface and what to turn back on there.
#[derive(Debug, PartialEq, Eq)]
struct Listed {
    interface: String,
    gro: bool,
    lro: bool,
}

/// Parses one `IF FEATURE[,FEATURE]` line; `None` for anything else.
fn parse_line(line: &str) -> Option<Listed> {
    let (interface, features) = line.trim().split_once(' ')?;
    let mut listed = Listed {
        interface: interface.to_string(),
        gro: false,
        lro: false,
    };
    for f in features.trim().split(',') {
        match f {
            GRO => listed.gro = true,
            LRO => listed.lro = true,
            _ => return None,
        }
    }
    Some(listed)
}

/// What the guard read before its input ended: the interfaces to restore,
/// or `None` when the parent wrote `done`.
fn read_list(input: impl BufRead) -> Option<Vec<Listed>> {
    let mut listed = Vec::new();
    for line in input.lines().map_while(Result::ok) {
        if line.trim() == DONE {
            return None;
        }
        if let Some(l) = parse_line(&line) {
            listed.push(l);
        }
    }
    Some(listed)
}

/// The guard itself (module docs).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        return Err(crate::usage(
            "offload-guard is started by `pspat run` and `pspat shape`, not by hand",
        ));
    }
    // A handler that only sets a flag replaces the default action
    // (terminate): the signals no longer end the guard.
    let ignored = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(signal, Arc::clone(&ignored))?;
    }
    let Some(listed) = read_list(std::io::stdin().lock()) else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut failed = false;
    for l in &listed {
        let names: Vec<&str> = [(l.gro, GRO), (l.lro, LRO)]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
        match pspat_io::offload::turn_on_receive_offloads(&l.interface, l.gro, l.lro) {
            Ok(()) => eprintln!(
                "pspat: offload guard: process {} stopped without saying it turned them back on; {} on again on {}",
                args.parent,
                names.join(" and "),
                l.interface
            ),
            Err(e) => {
                failed = true;
                eprintln!(
                    "pspat: offload guard: process {} stopped without saying it turned them back on, and {} could not be turned on on {} ({e})",
                    args.parent,
                    names.join(" and "),
                    l.interface
                );
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_read_until_done_or_the_end_of_input() {
        let both = format!("veth0 {GRO},{LRO}\nveth1 {GRO}\n");
        assert_eq!(
            read_list(both.as_bytes()),
            Some(vec![
                Listed {
                    interface: "veth0".into(),
                    gro: true,
                    lro: true
                },
                Listed {
                    interface: "veth1".into(),
                    gro: true,
                    lro: false
                },
            ]),
            "input ended without done: restore"
        );
        assert_eq!(
            read_list(format!("{both}{DONE}\n").as_bytes()),
            None,
            "done: nothing to do"
        );
        assert_eq!(read_list(&b""[..]), Some(Vec::new()));
    }

    #[test]
    fn offload_notes_name_each_interface_turned_off_and_whether_it_came_back() {
        let row = |interface: &str, restored: bool, restore_error: Option<&str>| OffloadReport {
            interface: interface.into(),
            turned_off: vec![
                "generic-receive-offload".into(),
                "large-receive-offload".into(),
            ],
            still_on: Vec::new(),
            restored,
            restore_error: restore_error.map(String::from),
        };
        let mut live = Report::default();
        live.offloads = vec![
            row("veth0", false, None),
            OffloadReport {
                interface: "veth1".into(),
                still_on: vec!["large-receive-offload".into()],
                ..Default::default()
            },
        ];
        live.offload_warnings = vec!["veth1: large-receive-offload stays on".into()];
        let (done, warnings) = offload_notes(&live);
        assert_eq!(
            done,
            ["generic-receive-offload and large-receive-offload off on veth0 until exit"]
        );
        assert_eq!(warnings, live.offload_warnings);
        let mut last = Report::default();
        last.offloads = vec![
            row("veth0", true, None),
            row("veth2", false, Some("No such device")),
        ];
        let (done, warnings) = offload_exit_notes(&last);
        assert_eq!(
            done,
            ["generic-receive-offload and large-receive-offload on again on veth0"]
        );
        assert_eq!(
            warnings,
            ["veth2: generic-receive-offload and large-receive-offload not turned back on (No such device)"]
        );
    }

    #[test]
    fn a_line_that_names_no_known_feature_is_skipped() {
        assert_eq!(parse_line("veth0 tx-checksumming"), None);
        assert_eq!(parse_line("veth0"), None);
        assert_eq!(
            parse_line(&format!("eth1 {LRO}")),
            Some(Listed {
                interface: "eth1".into(),
                gro: false,
                lro: true
            })
        );
    }
}
