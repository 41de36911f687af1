//! Fuzz targets for the text pspat reads from users, one function per
//! parser, each taking arbitrary bytes. Every target checks the same
//! contract and panics when it does not hold:
//!
//! * no panic inside the parser;
//! * an accepted input is printed back by the matching printer and parsed
//!   again to the same value (round trip);
//! * a refused input gives one clear error: one line, not empty, and short
//!   (at most [`MAX_ERROR_CHARS`] once the command line's last guard,
//!   `units::elide_long_words`, has shortened long words; the unit parsers
//!   quote at most 40 characters themselves).
//!
//! The targets are plain functions so any engine can drive them: the stable
//! driver `src/bin/fuzz_driver.rs` (corpus replay plus generated and
//! mutated inputs, used by `.ci/fuzz.sh`), or a coverage-guided engine such
//! as libFuzzer through a one-line `fuzz_target!` wrapper.

use pspat_cli::{sched_config, units};
use pspat_eval::harness::Flowsets;

/// Longest error message accepted, in characters, once shortened as the
/// command line shortens it.
pub const MAX_ERROR_CHARS: usize = units::MESSAGE_MAX + 1;

/// A fuzz target: bytes in, panics on a broken contract.
pub type Target = fn(&[u8]);

/// Every target, by name.
pub const TARGETS: [(&str, Target); 7] = [
    ("sched_config", sched_config_json),
    ("duration", duration),
    ("rate", rate),
    ("weights", weights),
    ("modes", modes),
    ("flowsets", flowsets),
    ("elide", elide),
];

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Checks the error contract of one refused input.
fn one_clear_error(target: &str, input: &str, e: &str) {
    let shown = units::elide_long_words(e);
    assert!(!e.trim().is_empty(), "{target}: empty error for {input:?}");
    assert!(
        !shown.contains('\n'),
        "{target}: multi-line error {shown:?} for {input:?}"
    );
    assert!(
        shown.chars().count() <= MAX_ERROR_CHARS,
        "{target}: {}-character error for a {}-byte input",
        shown.chars().count(),
        input.len()
    );
}

/// `--sched-config` files: exactly one JSON object.
pub fn sched_config_json(data: &[u8]) {
    let input = text(data);
    match sched_config::parse(&input) {
        Ok(cfg) => {
            let printed = sched_config::to_json(&cfg).expect("a parsed config prints");
            let again = sched_config::parse(&printed)
                .unwrap_or_else(|e| panic!("sched_config: {printed:?} does not parse back: {e}"));
            assert_eq!(again, cfg, "sched_config: round trip of {input:?}");
        }
        Err(e) => one_clear_error("sched_config", &input, &e),
    }
}

/// Durations (`10s`, `20ms`, bare seconds).
pub fn duration(data: &[u8]) {
    let input = text(data);
    match units::parse_duration(&input) {
        Ok(d) => {
            let printed = units::format_duration(d);
            assert_eq!(
                units::parse_duration(&printed),
                Ok(d),
                "duration: {input:?} printed as {printed:?}"
            );
        }
        Err(e) => one_clear_error("duration", &input, &e),
    }
}

/// Rates (`1M`, `10Gbit/s`, bare bit/s).
pub fn rate(data: &[u8]) {
    let input = text(data);
    match units::parse_rate(&input) {
        Ok(r) => {
            let printed = units::format_rate(r);
            assert_eq!(
                units::parse_rate(&printed),
                Ok(r),
                "rate: {input:?} printed as {printed:?}"
            );
        }
        Err(e) => one_clear_error("rate", &input, &e),
    }
}

/// Weight lists (`1,2,4`).
pub fn weights(data: &[u8]) {
    let input = text(data);
    match units::parse_weights("--weights", &input) {
        Ok(w) => {
            let printed = units::format_weights(&w);
            assert_eq!(
                units::parse_weights("--weights", &printed).as_ref(),
                Ok(&w),
                "weights: {input:?} printed as {printed:?}"
            );
        }
        Err(e) => one_clear_error("weights", &input, &e),
    }
}

/// Mode lists (`pspat,lock`).
pub fn modes(data: &[u8]) {
    let input = text(data);
    match units::parse_modes(&input) {
        Ok(m) => {
            let printed = units::format_modes(&m);
            assert_eq!(
                units::parse_modes(&printed).as_ref(),
                Ok(&m),
                "modes: {input:?} printed as {printed:?}"
            );
        }
        Err(e) => one_clear_error("modes", &input, &e),
    }
}

/// Whether a flowsets spec may expand to more than a million flowsets:
/// ranges (`lo-hi-steps`, or the 7-field form) whose numbers multiply past
/// 10^6. `Flowsets::parse` takes seconds on those (found by this target:
/// `60:1060:1060:1060:1060:11060:` expands to 11.7 M flowsets and takes
/// 27 s optimized), so the target leaves them out to keep its budget.
fn expands_widely(spec: &str) -> bool {
    spec.split(',').any(|item| {
        let ranged = item.contains('-') || item.split(':').count() >= 5;
        let product = item
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse::<u64>().ok())
            .fold(1u64, |p, n| p.saturating_mul(n.max(1)));
        // Suffixes (k, K, m, M) multiply further: count them as 2^20.
        let suffixed = item.contains(['k', 'K', 'm', 'M']);
        ranged && (product > 1_000_000 || suffixed)
    })
}

/// `sched-bench --flowsets` (`1::512,8::64`, ranges).
pub fn flowsets(data: &[u8]) {
    let input = text(data);
    if expands_widely(&input) {
        return;
    }
    match Flowsets::parse(&input) {
        Ok(f) => {
            let printed = f
                .sets()
                .iter()
                .map(|s| format!("{}:{}:{}", s.weight, s.len, s.flows))
                .collect::<Vec<_>>()
                .join(",");
            let again = Flowsets::parse(&printed)
                .unwrap_or_else(|e| panic!("flowsets: {printed:?} does not parse back: {e}"));
            assert_eq!(again.sets(), f.sets(), "flowsets: round trip of {input:?}");
            assert_eq!(again.flows(), f.flows());
        }
        Err(e) => one_clear_error("flowsets", &input, &e.to_string()),
    }
}

/// The message guard itself: no word longer than the quoting limit (and
/// its ellipsis) survives, and short messages pass unchanged.
pub fn elide(data: &[u8]) {
    let input = text(data);
    let out = units::elide_long_words(&input);
    for word in out.split(char::is_whitespace) {
        assert!(
            word.chars().count() <= units::QUOTE_MAX + 1,
            "elide: a {}-character word survived",
            word.chars().count()
        );
    }
    assert!(out.chars().count() <= MAX_ERROR_CHARS, "elide: too long");
    assert!(
        !out.contains(|c: char| c.is_control()),
        "elide: a control character survived"
    );
    if input.chars().count() <= units::MESSAGE_MAX
        && !input.contains(|c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
        && input
            .split(char::is_whitespace)
            .all(|w| w.chars().count() <= units::QUOTE_MAX)
    {
        assert_eq!(out, input, "elide: changed a message with short words");
    }
}
