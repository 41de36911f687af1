//! The parsing half of the `pspat` command, as a library so the fuzz
//! targets (`fuzz/`) and the tests call exactly the functions the command
//! calls: units (`10G`, `20ms`), weight lists, mode lists and the
//! `--sched-config` file. The subcommands themselves live in the binary.

/// The units paragraph of every command's `--help` (see [`units`]), as a
/// literal for `concat!`.
#[macro_export]
macro_rules! units_help {
    () => {
        "Units (every command): durations are a number with ns, us, ms or s (10s, 20ms, 500us, 1.5ms);
a bare number is seconds. Rates are bit/s: a number with an optional K, M, G or T (powers of 1000)
and an optional bit, bps or bit/s (1M, 1Mbit/s, 10G); a bare number is bit/s."
    };
}

pub mod memory;
pub mod sched_config;
pub mod units;

/// The version of every command's `--json` layout (docs/JSON.md); raised
/// when a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

/// An error that is the user's: printed as one line, exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Shorthand: `Err(usage("--clients must be 1..=1000, got 0"))`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}
