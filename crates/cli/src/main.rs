//! `pspat`: run, measure and check the PSPAT packet scheduler.
//!
//! Exit codes: 0 success; 1 the run failed (I/O, a worker panicked, a check
//! did not hold); 2 usage or configuration error, nothing started.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pspat_cli::{sched_config, units, usage, UsageError, SCHEMA_VERSION};

mod bench;
mod config_cmd;
mod ctl;
mod demo;
mod demo_lab;
mod doorbell;
mod lab;
mod machine;
mod offload_guard;
mod place_bench;
mod pq_bench;
mod run;
mod sched_bench;
mod shape;
mod supervise;
mod topology;
mod traffic;
mod wfi;

/// Large blocks (the scheduler's packet arena, per-flow tables, mailboxes)
/// on transparent huge pages: fewer TLB misses on the hot path.
#[global_allocator]
static ALLOC: pspat_io::HugePageAlloc = pspat_io::HugePageAlloc;

/// Software packet scheduling at hardware speed.
#[derive(Parser)]
#[command(name = "pspat", version, about, long_about = None, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

const EXIT_CODES: &str =
    "Exit codes: 0 success; 1 the run failed; 2 usage or configuration error (nothing started).";

#[derive(Subcommand)]
enum Command {
    /// The default job: weighted clients and a latency-sensitive victim through the threaded runtime (~10 s).
    Demo(demo::Args),
    /// Runtime throughput: PSPAT against a lock-based scheduler and no scheduler.
    Bench(bench::Args),
    /// Cost of one algorithm alone, dummynet-harness style (no threads).
    SchedBench(sched_bench::Args),
    /// Service guarantees: worst-case lag against the fluid (GPS) reference.
    Wfi(wfi::Args),
    /// Integer priority queues (cFFS, hFFS) against a binary heap.
    PqBench(pq_bench::Args),
    /// Validate a configuration (TOML or ipfw lines), print it normalised, convert between the syntaxes.
    Config(config_cmd::Args),
    /// Flow placement (HRW family): decision cost, balance, disruption.
    PlaceBench(place_bench::Args),
    /// Facts every benchmark figure must carry: CPU, caches, memory, kernel and a load-latency curve.
    Machine(machine::Args),
    /// The three-namespace test bed: up, down, and compare pspat with the kernel's bridge and HTB.
    Lab(lab::Args),
    /// UDP/TCP test traffic: send flows with weights, receive with loss and latency counts.
    Traffic(traffic::Args),
    /// Shape real traffic: a bump in the wire between two interfaces (AF_PACKET; needs root).
    Shape(shape::Args),
    /// dummynet's model (pipes, queues, scheds, rules) shaping real traffic between two interfaces (needs root).
    Run(run::Args),
    /// Send one ipfw line to a running `pspat run` (change a pipe, show pipes, queues, rules).
    Ctl(ctl::Args),
    /// Started by `run` and `shape`: turns the receive offloads they turned off back on if they die first.
    #[command(hide = true)]
    OffloadGuard(offload_guard::Args),
}

/// A command-line error as the one line `pspat` prints. Clap's first line
/// names the flag and the problem for most errors; two kinds put what the
/// user needs on the lines after it, so they are folded in: the missing
/// arguments (listed one per line below the first), and a missing
/// subcommand (clap prints the command's help, whose first line is its
/// description: the line names the subcommands instead).
fn one_line(e: &clap::Error) -> String {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    let mut lines = text.lines();
    let first = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    match e.kind() {
        ErrorKind::MissingRequiredArgument => {
            let missing: Vec<&str> = lines
                .take_while(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty())
                .map(str::trim)
                .collect();
            if missing.is_empty() {
                first
            } else {
                format!("{} {}", first, missing.join(", "))
            }
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // "Usage: pspat config <COMMAND>" names the command; the
            // "Commands:" section lists its subcommands, one per line.
            let command = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("Usage: "))
                .map(|u| u.split(" <").next().unwrap_or(u).trim().to_string())
                .unwrap_or_else(|| "pspat".to_string());
            let names: Vec<&str> = text
                .lines()
                .skip_while(|l| l.trim() != "Commands:")
                .skip(1)
                .take_while(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty())
                .filter_map(|l| l.split_whitespace().next())
                .filter(|n| *n != "help")
                .collect();
            if names.is_empty() {
                // Help shown for missing arguments, not subcommands.
                return format!("{first} (see {command} --help)");
            }
            // The line starts with "pspat: " already.
            let shown = command.strip_prefix("pspat ").unwrap_or(&command);
            format!(
                "{shown} needs a subcommand: {} (see {command} --help)",
                names.join(", ")
            )
        }
        ErrorKind::InvalidValue => {
            // clap lists an enumerated flag's values on a line of its own.
            let allowed = lines.find_map(|l| {
                l.trim()
                    .strip_prefix("[possible values: ")
                    .and_then(|v| v.strip_suffix(']'))
            });
            match allowed {
                Some(values) => format!("{first} (allowed: {values})"),
                None => first,
            }
        }
        _ => first,
    }
}

/// An error and its causes on one line, joined by ": " as `{:#}` joins
/// them, but a cause whose text the line already ends with is not written
/// again: many errors of the I/O and lab crates name their cause in their
/// own message and also return it as their source.
fn chain_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => 2,
            };
            if code == 0 {
                let _ = e.print();
            } else {
                eprintln!("pspat: {}", units::elide_long_words(&one_line(&e)));
            }
            return ExitCode::from(code);
        }
    };
    let result = match cli.command.unwrap_or(Command::Demo(demo::Args::default())) {
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => bench::run(a),
        Command::SchedBench(a) => sched_bench::run(a),
        Command::Wfi(a) => wfi::run(a),
        Command::PqBench(a) => pq_bench::run(a),
        Command::Config(a) => config_cmd::run(a),
        Command::PlaceBench(a) => place_bench::run(a),
        Command::Machine(a) => machine::run(a),
        Command::Lab(a) => lab::run(a),
        Command::Traffic(a) => traffic::run(a),
        Command::Shape(a) => shape::run(a),
        Command::Run(a) => run::run(a),
        Command::Ctl(a) => ctl::run(a),
        Command::OffloadGuard(a) => offload_guard::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let code = if e.downcast_ref::<UsageError>().is_some()
                || e.downcast_ref::<pspat_sched::ConfigError>().is_some()
            {
                2
            } else {
                1
            };
            // A closed stdout (`pspat bench | head`) is not a failure,
            // whether a write or a JSON document's write found it closed.
            let broken =
                |kind: Option<std::io::ErrorKind>| kind == Some(std::io::ErrorKind::BrokenPipe);
            if broken(e.downcast_ref::<std::io::Error>().map(std::io::Error::kind))
                || broken(
                    e.downcast_ref::<serde_json::Error>()
                        .and_then(serde_json::Error::io_error_kind),
                )
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("pspat: {}", units::elide_long_words(&chain_line(&e)));
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_line(args: &[&str]) -> String {
        match Cli::try_parse_from(args) {
            Ok(_) => panic!("{args:?} parsed"),
            Err(e) => one_line(&e),
        }
    }

    #[test]
    fn a_missing_argument_is_named_on_the_line() {
        assert_eq!(
            error_line(&["pspat", "shape", "--in", "eth0"]),
            "the following required arguments were not provided: --out <IF[:RATE],...>"
        );
        let line = error_line(&["pspat", "run"]);
        assert!(line.ends_with("--in <IF>, --out <IF>, <CONFIG>"), "{line}");
    }

    #[test]
    fn a_missing_subcommand_lists_the_subcommands() {
        assert_eq!(
            error_line(&["pspat", "config"]),
            "config needs a subcommand: check, convert, from-netem (see pspat config --help)"
        );
        assert_eq!(
            error_line(&["pspat", "lab"]),
            "lab needs a subcommand: up, down, compare (see pspat lab --help)"
        );
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        // As thiserror derives it for `#[error("...: {source}")]`.
        #[derive(Debug)]
        struct Named {
            source: std::io::Error,
        }
        impl std::fmt::Display for Named {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot create out: {}", self.source)
            }
        }
        impl std::error::Error for Named {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let io = || std::io::Error::from(std::io::ErrorKind::AlreadyExists);
        let named = anyhow::Error::new(Named { source: io() });
        assert_eq!(chain_line(&named), format!("cannot create out: {}", io()));
        let context = anyhow::Error::new(io()).context("lab compare");
        assert_eq!(chain_line(&context), format!("lab compare: {}", io()));
    }

    #[test]
    fn an_unknown_value_of_an_enumerated_flag_lists_the_values() {
        assert_eq!(
            error_line(&["pspat", "demo", "--traffic", "nosuch"]),
            "invalid value 'nosuch' for '--traffic <TRAFFIC>' (allowed: auto, lab, emulated)"
        );
        assert_eq!(
            error_line(&["pspat", "sched-bench", "--dummynet", "--dummynet-part", "x"]),
            "invalid value 'x' for '--dummynet-part <DUMMYNET_PART>' (allowed: both, classifier, pipe)"
        );
    }

    #[test]
    fn other_errors_keep_clap_first_line() {
        assert_eq!(
            error_line(&["pspat", "bench", "--clients", "x"]),
            "invalid value 'x' for '--clients <CLIENTS>': invalid digit found in string"
        );
    }
}
