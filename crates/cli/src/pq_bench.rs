//! `pspat pq-bench` (being built on its own branch).

use std::process::ExitCode;

/// Flags of `pspat pq-bench`.
#[derive(clap::Args, Default)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Err(crate::usage("this command is not built yet"))
}
