//! Fuzz targets for the input pspat reads from users and from the wire,
//! one function per parser, each taking arbitrary bytes and panicking when
//! its contract does not hold.
//!
//! The text parsers (units and lists of the command line, `--sched-config`,
//! ipfw and TOML configurations, control lines) share one contract:
//!
//! * no panic inside the parser;
//! * an accepted input is printed back by the matching printer and parsed
//!   again to the same value (round trip);
//! * a refused input gives one clear error: one line, not empty, and short
//!   (at most [`MAX_ERROR_CHARS`] once the command line's last guard,
//!   `units::elide_long_words`, has shortened long words; the unit parsers
//!   quote at most 40 characters themselves);
//! * a configuration error also names its place, as `pspat_config::Error`
//!   promises: the file, and a line and column inside the text.
//!
//! The frame parser and the classifier print nothing back: their targets
//! ([`frame`], [`classify`]) check what their crates' docs promise instead.
//!
//! The targets are plain functions so any engine can drive them: the stable
//! driver `src/bin/fuzz_driver.rs` (corpus replay plus generated and
//! mutated inputs, used by `.ci/fuzz.sh`), or a coverage-guided engine such
//! as libFuzzer through a one-line `fuzz_target!` wrapper.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::sync::OnceLock;

use pspat_classify::{
    Classifier, ClassifierLimits, ClassifierStats, DropReason, OverflowPolicy, PacketDirection,
    PacketKey, Placement, Verdict,
};
use pspat_cli::{sched_config, units};
use pspat_config::{
    merge, netem_to_config, parse_control, parse_ipfw, parse_toml, print_ipfw, print_toml, Config,
    ControlRequest, NoProfiles, Plan,
};
use pspat_eval::harness::Flowsets;
use pspat_io::parse::{
    ecn_capable, ecn_capable_parsed, mark_ce, parse_frame, FlowKey, FlowKeyKind, IpVersion,
    ParseLimits, ParseReason, ETHERNET_HEADER_LEN, MAX_VLAN_TAGS, VLAN_TAG_LEN,
};
use pspat_sched::Instant;

/// Longest error message accepted, in characters, once shortened as the
/// command line shortens it.
pub const MAX_ERROR_CHARS: usize = units::MESSAGE_MAX + 1;

/// A fuzz target: bytes in, panics on a broken contract.
pub type Target = fn(&[u8]);

/// Every target, by name.
pub const TARGETS: [(&str, Target); 13] = [
    ("sched_config", sched_config_json),
    ("duration", duration),
    ("rate", rate),
    ("weights", weights),
    ("modes", modes),
    ("flowsets", flowsets),
    ("elide", elide),
    ("ipfw", ipfw),
    ("config_toml", config_toml),
    ("control", control),
    ("netem", netem),
    ("frame", frame),
    ("classify", classify),
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

/// The file name the ipfw targets parse under.
const IPFW_FILE: &str = "fuzz.conf";
/// The file name the TOML target parses under.
const TOML_FILE: &str = "fuzz.toml";
/// The file name the control target parses under (the daemon's is `<ctl>`).
const CONTROL_FILE: &str = "ctl";

/// Checks that a configuration error names its place in `input`: the file
/// it was parsed under, a 1-based line of the text, a 1-based column at
/// most one past that line's last character, and a `Display` of
/// `file:line:column: message`. With `exact`, the token the error quotes
/// is also the text at that column (ipfw lines, whose tokens are the words
/// of a line as written).
fn names_the_place(target: &str, input: &str, file: &str, e: &pspat_config::Error, exact: bool) {
    assert_eq!(
        e.to_string(),
        format!("{}:{}:{}: {}", e.file, e.line, e.column, e.message),
        "{target}: error display for {input:?}"
    );
    assert_eq!(e.file, file, "{target}: {e} names another file");
    let line = usize::try_from(e.line)
        .ok()
        .and_then(|l| l.checked_sub(1))
        .and_then(|i| input.split('\n').nth(i))
        .unwrap_or_else(|| panic!("{target}: {e} names no line of {input:?}"));
    let column = usize::try_from(e.column).unwrap_or(usize::MAX);
    assert!(
        column >= 1 && column <= line.chars().count() + 1,
        "{target}: {e} names a column outside line {line:?}"
    );
    if exact {
        let from_column: String = line.chars().skip(column - 1).collect();
        assert!(
            from_column.starts_with(&e.token),
            "{target}: {e} quotes {:?}, not the text at its column in {line:?}",
            e.token
        );
    }
}

/// Validates an accepted configuration: no panic; a refusal is one clear
/// error that names its place in `input` (as [`names_the_place`]).
fn validated(target: &str, input: &str, file: &str, cfg: &Config, exact: bool) -> Option<Plan> {
    match cfg.validate(&NoProfiles) {
        Ok(plan) => Some(plan),
        Err(e) => {
            one_clear_error(target, input, &e.to_string());
            names_the_place(target, input, file, &e, exact);
            None
        }
    }
}

/// The round trips of an accepted configuration, as
/// `crates/config/tests/roundtrip.rs` states them: printed as ipfw lines
/// and as TOML, each parses back to an equal configuration; the TOML
/// converted back to ipfw lines gives the same lines (the printers' normal
/// form); and the printed configuration validates to the same plan (or
/// is refused too).
fn round_trips(target: &str, input: &str, cfg: &Config, plan: Option<&Plan>) {
    let lines = print_ipfw(cfg);
    let from_lines = parse_ipfw(&lines, IPFW_FILE)
        .unwrap_or_else(|e| panic!("{target}: {lines:?} does not parse back: {e}"));
    assert_eq!(&from_lines, cfg, "{target}: ipfw round trip of {input:?}");
    let toml = print_toml(cfg);
    let from_toml = parse_toml(&toml, TOML_FILE)
        .unwrap_or_else(|e| panic!("{target}: {toml:?} does not parse back: {e}"));
    assert_eq!(&from_toml, cfg, "{target}: TOML round trip of {input:?}");
    assert_eq!(
        print_ipfw(&from_toml),
        lines,
        "{target}: converting {input:?} to TOML and back changes its ipfw lines"
    );
    let again = from_lines.validate(&NoProfiles).ok();
    assert_eq!(
        again.as_ref(),
        plan,
        "{target}: {lines:?} validates differently from {input:?}"
    );
}

/// ipfw lines (`pipe 1 config bw 10Mbit/s`, `add 100 queue 1 ip from ...`):
/// the text contract, with errors that name their place and quote the
/// token there; an accepted configuration validates without panicking.
pub fn ipfw(data: &[u8]) {
    configuration("ipfw", parse_ipfw, IPFW_FILE, true, data);
}

/// The file name the netem target reads under (`pspat config from-netem`'s).
const NETEM_FILE: &str = "netem";

/// tc-netem's options read as a pipe (`pspat config from-netem`): as
/// [`ipfw`], with errors at the netem word they concern.
pub fn netem(data: &[u8]) {
    configuration(
        "netem",
        |text, file| netem_to_config(text, 1, file),
        NETEM_FILE,
        true,
        data,
    );
}

/// TOML configurations (`docs/CONFIG.md`): as [`ipfw`], with errors at a
/// line and column of the text (a TOML token is a value, not always the
/// text at its column: escapes, radixes).
pub fn config_toml(data: &[u8]) {
    configuration("config_toml", parse_toml, TOML_FILE, false, data);
}

/// The contract of a configuration syntax read by `parse` under `file`:
/// an accepted text validates and round-trips ([`round_trips`]), a
/// refused one gives one clear error that names its place (quoting the
/// text at its column when `exact`).
fn configuration(
    target: &str,
    parse: fn(&str, &str) -> Result<Config, pspat_config::Error>,
    file: &str,
    exact: bool,
    data: &[u8],
) {
    let input = text(data);
    match parse(&input, file) {
        Ok(cfg) => {
            let plan = validated(target, &input, file, &cfg, exact);
            round_trips(target, &input, &cfg, plan.as_ref());
        }
        Err(e) => {
            one_clear_error(target, &input, &e.to_string());
            names_the_place(target, &input, file, &e, exact);
        }
    }
}

/// The running configuration that [`control`] merges configuration lines
/// into, as the daemon does.
fn running() -> &'static Config {
    static RUNNING: OnceLock<Config> = OnceLock::new();
    RUNNING.get_or_init(|| {
        let text = "sched 4 config type qfq bw 4Mbit/s mask src-ip 0xff\n\
                    pipe 1 config bw 10Mbit/s delay 20ms plr 0.01 queue 50\n\
                    queue 1 config weight 10 sched 4 mask dst-ip 0xffffffff\n\
                    table 1 add 10.0.0.0/24 1\n\
                    add 100 queue 1 ip from 10.0.0.0/24 to any dst-port 80\n\
                    add 200 pipe 1 ip from any to table(1)\n";
        parse_ipfw(text, "running.conf").unwrap_or_else(|e| panic!("control: {e}"))
    })
}

/// Control socket requests (`pipe show`, `pipe 1 delete`, `pipe 1 config
/// bw 20Mbit/s`): the input's first line, trimmed as the daemon trims a
/// request. No panic; a refusal is one clear line (as sent back on the
/// socket, before any shortening) naming its place; configuration lines
/// round-trip as [`ipfw`] does, and merged into a running configuration
/// they validate without panicking.
pub fn control(data: &[u8]) {
    let whole = text(data);
    let line = whole.split('\n').next().unwrap_or_default().trim();
    match parse_control(line, CONTROL_FILE) {
        Ok(ControlRequest::Configure(cfg)) => {
            let plan = cfg.validate(&NoProfiles).ok();
            round_trips("control", line, &cfg, plan.as_ref());
            if let Err(e) = merge(running(), &cfg).validate(&NoProfiles) {
                one_clear_error("control", line, &e.to_string());
            }
        }
        Ok(_) => {}
        Err(e) => {
            let message = e.to_string();
            one_clear_error("control", line, &message);
            assert!(
                !message.contains('\n'),
                "control: multi-line error for {line:?}"
            );
            names_the_place("control", line, CONTROL_FILE, &e, true);
        }
    }
}

/// Received Ethernet frames (`pspat_io::parse::parse_frame` with the
/// default limits, as the daemon parses every frame off the wire, so a
/// panic would be remotely triggerable). No panic, the same outcome twice;
/// a frame longer than the limit is refused as oversize, one shorter than
/// an Ethernet header as truncated, and a refusal's offset lies inside the
/// frame (at most its length); a key agrees with its frame as
/// `key_matches_frame` checks, and its projections keep exactly the
/// fields they name. The ECN functions (`ecn_capable`, `mark_ce`) keep
/// their contract (`check_ecn`) on the frame, and on copies of it with
/// each ECN codepoint written into its IP header (the IPv4 checksum made
/// right first, so that the checksum update is checked on every input
/// with an IPv4 header).
pub fn frame(data: &[u8]) {
    let limits = ParseLimits::default();
    let outcome = parse_frame(data, &limits);
    assert_eq!(
        parse_frame(data, &limits),
        outcome,
        "frame: two parses of {data:02x?} differ"
    );
    let expected = if data.len() > limits.max_frame_len {
        Some(ParseReason::OversizeFrame)
    } else if data.len() < ETHERNET_HEADER_LEN {
        Some(ParseReason::TruncatedEthernet)
    } else {
        None
    };
    if let Some(reason) = expected {
        assert_eq!(
            outcome.map_err(|e| e.reason),
            Err(reason),
            "frame: a {}-byte frame",
            data.len()
        );
    }
    match outcome {
        Ok(key) => key_matches_frame(data, &key),
        Err(e) => assert!(
            e.offset <= data.len(),
            "frame: {e} beyond the end of {data:02x?}"
        ),
    }
    check_ecn(data, &limits);
    if let Some((v6, at)) = ip_header_of(data) {
        for ecn in 0..=3u8 {
            let mut variant = data.to_vec();
            if v6 {
                variant[at + 1] = (variant[at + 1] & 0xcf) | ecn << 4;
            } else {
                variant[at + 1] = (variant[at + 1] & 0xfc) | ecn;
                let ihl = usize::from(variant[at] & 0x0f) * 4;
                let right = ipv4_checksum(&variant[at..at + ihl]);
                variant[at + 10..at + 12].copy_from_slice(&right.to_be_bytes());
            }
            check_ecn(&variant, &limits);
        }
    }
}

/// Where `frame`'s IP header is by the module docs of `pspat_io::parse`
/// (ECN), read by hand: after the Ethernet header and at most
/// `MAX_VLAN_TAGS` tags (TPID 0x8100, 0x88a8 or 0x9100), a whole IPv4
/// header (EtherType 0x0800, version 4, IHL of at least 5, every word
/// present) or a whole IPv6 one (0x86dd, version 6, 40 bytes). Whether it
/// is IPv6, and its offset.
fn ip_header_of(frame: &[u8]) -> Option<(bool, usize)> {
    let be16 = |at: usize| Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]));
    let mut at = ETHERNET_HEADER_LEN;
    let mut ether_type = be16(at - 2)?;
    let mut tags = 0;
    while matches!(ether_type, 0x8100 | 0x88a8 | 0x9100) {
        if tags == MAX_VLAN_TAGS {
            return None;
        }
        ether_type = be16(at + 2)?;
        at += VLAN_TAG_LEN;
        tags += 1;
    }
    let first = *frame.get(at)?;
    let whole = |len: usize| frame.len() >= at + len;
    match (ether_type, first >> 4) {
        (0x0800, 4) => {
            let ihl = usize::from(first & 0x0f) * 4;
            (ihl >= 20 && whole(ihl)).then_some((false, at))
        }
        (0x86dd, 6) => whole(40).then_some((true, at)),
        _ => None,
    }
}

/// The ECN field of the IP header at `at` (IPv6 when `v6`).
fn ecn_field(frame: &[u8], v6: bool, at: usize) -> u8 {
    if v6 {
        (frame[at + 1] >> 4) & 3
    } else {
        frame[at + 1] & 3
    }
}

/// The one's complement sum of `header`'s 16-bit words, folded.
fn ones_complement_sum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The IPv4 header checksum of `header` computed from scratch (RFC 791).
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut h = header.to_vec();
    h[10] = 0;
    h[11] = 0;
    !ones_complement_sum(&h)
}

/// The ECN contract of `pspat_io::parse` on one frame: `ecn_capable` is
/// true exactly for a frame with an IP header where `ip_header_of` finds
/// one and an ECN field other than 0, and agrees with
/// `ecn_capable_parsed` when the frame parses; `mark_ce` returns
/// `ecn_capable`'s answer, leaves a frame it refuses as it was, and on one
/// it marks changes only the ECN field (to 3) and, on IPv4, the checksum,
/// which verifies after if it verified before and is what a full
/// recomputation gives then; a marked frame is ECN-capable, marked again
/// without a change, and parses to the same key.
fn check_ecn(data: &[u8], limits: &ParseLimits) {
    let why = |what: &str| format!("frame: ECN: {what} for {data:02x?}");
    let header = ip_header_of(data);
    let capable = ecn_capable(data);
    assert_eq!(
        capable,
        header.is_some_and(|(v6, at)| ecn_field(data, v6, at) != 0),
        "{}",
        why("ecn_capable against the module docs")
    );
    let key = parse_frame(data, limits);
    if let Ok(key) = &key {
        assert_eq!(
            ecn_capable_parsed(data, key),
            capable,
            "{}",
            why("ecn_capable_parsed")
        );
    }
    let mut marked = data.to_vec();
    assert_eq!(mark_ce(&mut marked), capable, "{}", why("mark_ce's answer"));
    let Some((v6, at)) = header.filter(|_| capable) else {
        assert_eq!(marked, data, "{}", why("a refused frame changed"));
        return;
    };
    assert_eq!(
        ecn_field(&marked, v6, at),
        3,
        "{}",
        why("not CE after mark_ce")
    );
    assert!(ecn_capable(&marked), "{}", why("marked, not ECN-capable"));
    for (i, (a, b)) in data.iter().zip(&marked).enumerate() {
        // The bits that must stay: all but the ECN field, and on IPv4 the
        // checksum.
        let keep = match i {
            _ if i == at + 1 && v6 => 0xcf,
            _ if i == at + 1 => 0xfc,
            _ if !v6 && (i == at + 10 || i == at + 11) => 0,
            _ => 0xff,
        };
        assert_eq!(a & keep, b & keep, "{}", why("a bit beside ECN changed"));
    }
    if !v6 {
        let ihl = usize::from(data[at] & 0x0f) * 4;
        let (before, after) = (&data[at..at + ihl], &marked[at..at + ihl]);
        if ones_complement_sum(before) == 0xffff {
            assert_eq!(
                ones_complement_sum(after),
                0xffff,
                "{}",
                why("a verifying checksum no longer verifies")
            );
            assert_eq!(
                u16::from_be_bytes([after[10], after[11]]),
                ipv4_checksum(after),
                "{}",
                why("the checksum is not a full recomputation's")
            );
        }
    }
    let again = marked.clone();
    assert!(mark_ce(&mut marked), "{}", why("a marked frame refused"));
    assert_eq!(marked, again, "{}", why("marking twice changed it"));
    assert_eq!(
        parse_frame(&marked, limits),
        key,
        "{}",
        why("marking changed the parse")
    );
}

/// What a flow key says about its frame, by the `FlowKey` and module docs
/// of `pspat_io::parse`: both addresses are of the key's IP version and
/// are the IP header's, whose EtherType (`IpVersion::ether_type`) comes
/// right after the VLAN tags the key lists (12-bit IDs as the tags carry
/// them; an inner tag only under an outer one); the protocol is the IPv4
/// header's unless an authentication header follows, and the IPv6
/// header's next header when that is TCP, UDP or ICMPv6; a protocol other
/// than TCP and UDP has destination port 0, and one other than those and
/// ICMP/ICMPv6 source port 0 too; a fragment has no ports; the ports (or
/// ICMP type and code) of an unfragmented IPv4 packet, and of an IPv6 one
/// without extension headers, are its transport header's.
fn key_matches_frame(frame: &[u8], key: &FlowKey) {
    let byte = |at: usize| frame.get(at).copied();
    let be16 = |at: usize| Some(u16::from_be_bytes([byte(at)?, byte(at + 1)?]));
    let why = |what: &str| format!("frame: {what} of {key:?} from {frame:02x?}");
    assert!(
        key.inner_vlan.is_none() || key.outer_vlan.is_some(),
        "{}",
        why("an inner VLAN without an outer one")
    );
    let tags: Vec<u16> = key.outer_vlan.into_iter().chain(key.inner_vlan).collect();
    for (i, id) in tags.iter().enumerate() {
        let tag = ETHERNET_HEADER_LEN + i * VLAN_TAG_LEN;
        assert!(
            *id < 4096 && be16(tag).map(|tci| tci & 0xfff) == Some(*id),
            "{}",
            why("a VLAN ID not in its tag")
        );
    }
    let net = ETHERNET_HEADER_LEN + tags.len() * VLAN_TAG_LEN;
    assert_eq!(
        be16(net - 2),
        Some(key.ip_version.ether_type()),
        "{}",
        why("an EtherType other than the key's IP version")
    );
    let address = |at: usize, len: usize| -> Option<IpAddr> {
        let b = frame.get(at..at + len)?;
        Some(match len {
            4 => IpAddr::from(<[u8; 4]>::try_from(b).ok()?),
            _ => IpAddr::from(<[u8; 16]>::try_from(b).ok()?),
        })
    };
    let (addresses, transport) = match key.ip_version {
        IpVersion::V4 => {
            let ihl = usize::from(byte(net).unwrap_or(0) & 0xf) * 4;
            let fragment = be16(net + 6).is_some_and(|f| f & 0x3fff != 0);
            let next = byte(net + 9).filter(|p| *p != 51);
            if fragment {
                assert_eq!(
                    (key.src_port, key.dst_port),
                    (0, 0),
                    "{}",
                    why("ports of a fragment")
                );
            }
            (
                (address(net + 12, 4), address(net + 16, 4)),
                next.filter(|_| !fragment).map(|p| (p, net + ihl)),
            )
        }
        IpVersion::V6 => {
            let next = byte(net + 6).filter(|p| matches!(p, 6 | 17 | 58));
            (
                (address(net + 8, 16), address(net + 24, 16)),
                next.map(|p| (p, net + 40)),
            )
        }
    };
    assert_eq!(
        addresses,
        (Some(key.src), Some(key.dst)),
        "{}",
        why("addresses not the IP header's")
    );
    if let Some((protocol, at)) = transport {
        assert_eq!(
            key.protocol,
            protocol,
            "{}",
            why("a protocol not the header's")
        );
        let ports = match protocol {
            6 | 17 => (be16(at), be16(at + 2)),
            1 | 58 => (be16(at), Some(0)),
            _ => (Some(key.src_port), Some(key.dst_port)),
        };
        assert_eq!(
            ports,
            (Some(key.src_port), Some(key.dst_port)),
            "{}",
            why("ports not the transport header's")
        );
    }
    if !matches!(key.protocol, 6 | 17) {
        let src_port = if matches!(key.protocol, 1 | 58) {
            key.src_port
        } else {
            0
        };
        assert_eq!(
            (key.src_port, key.dst_port),
            (src_port, 0),
            "{}",
            why("ports of a portless protocol")
        );
    }
    let unspecified = match key.ip_version {
        IpVersion::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpVersion::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let cleared = FlowKey {
        ip_version: key.ip_version,
        outer_vlan: None,
        inner_vlan: None,
        src: unspecified,
        dst: unspecified,
        protocol: 0,
        src_port: 0,
        dst_port: 0,
    };
    for (kind, kept) in [
        (FlowKeyKind::FiveTuple, *key),
        (
            FlowKeyKind::SrcIp,
            FlowKey {
                src: key.src,
                ..cleared
            },
        ),
        (
            FlowKeyKind::DstIp,
            FlowKey {
                dst: key.dst,
                ..cleared
            },
        ),
        (
            FlowKeyKind::DstPort,
            FlowKey {
                protocol: key.protocol,
                dst_port: key.dst_port,
                ..cleared
            },
        ),
    ] {
        assert_eq!(key.project(kind), kept, "{}", why(kind.name()));
    }
}

/// The packet half of a [`classify`] input, read front to back; zeros once
/// it is spent.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at = self.at.saturating_add(1);
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) << 16 | u32::from(self.u16())
    }
}

/// An address (one selector byte, then operands): one in 10.0.0.0/22,
/// 10.199.0.0/22, 1.2.3.0/22 or 192.168.0.0/22 (IPv6: 2001:db8::/112,
/// fe80::/112, ::/112 or ::ffff:0:0/112), the prefixes configurations
/// name; or, for selectors from 0xf0, any address.
fn address(b: &mut Bytes, v6: bool) -> IpAddr {
    let pick = b.u8();
    if v6 {
        const NETS: [u128; 4] = [0x2001_0db8 << 96, 0xfe80 << 112, 0, 0xffff << 32];
        let bits = if pick >= 0xf0 {
            (0..4).fold(0u128, |a, _| a << 32 | u128::from(b.u32()))
        } else {
            NETS[usize::from(pick % 4)] | u128::from(pick >> 2) << 8 | u128::from(b.u8())
        };
        IpAddr::V6(Ipv6Addr::from(bits))
    } else {
        const NETS: [u32; 4] = [0x0a00_0000, 0x0ac7_0000, 0x0102_0300, 0xc0a8_0000];
        let bits = if pick >= 0xf0 {
            b.u32()
        } else {
            NETS[usize::from(pick % 4)] | u32::from(pick >> 6) << 8 | u32::from(b.u8())
        };
        IpAddr::V4(Ipv4Addr::from(bits))
    }
}

/// A port: a well-known one (0, 1, 53, 80, 443, 5060, 8080, 65535), or
/// for selectors from 0xc0 any port.
fn port(b: &mut Bytes) -> u16 {
    let pick = b.u8();
    if pick >= 0xc0 {
        b.u16()
    } else {
        [0, 1, 53, 80, 443, 5060, 8080, 65535][usize::from(pick % 8)]
    }
}

/// A packet's key and length: a flags byte (bit 0 IPv6; bits 1 and 2 both
/// set: the destination of the other family; bit 3 sent, not received;
/// bits 4-5 the interface index, 0 to 3; bit 6 a flow label follows), the
/// source and destination ([`address`]), a protocol byte (UDP, TCP,
/// ICMP/ICMPv6 of the family or of the other one, or the byte itself),
/// the ports ([`port`]), the flow label, and a length selector (60, 1500,
/// any 16-bit or any 32-bit length).
fn packet(b: &mut Bytes) -> (PacketKey, u32) {
    let flags = b.u8();
    let v6 = flags & 1 != 0;
    let src = address(b, v6);
    let dst = address(b, v6 != (flags & 6 == 6));
    let p = b.u8();
    let proto = match p % 8 {
        0..=2 => 17,
        3 | 4 => 6,
        5 if v6 => 58,
        5 => 1,
        6 if v6 => 1,
        6 => 58,
        _ => p,
    };
    let mut key = PacketKey::new(src, dst, proto, port(b), port(b));
    key.direction = if flags & 8 != 0 {
        PacketDirection::Out
    } else {
        PacketDirection::In
    };
    key.ifindex = u32::from(flags >> 4 & 3);
    if flags & 0x40 != 0 {
        key.flow_label = b.u32();
    }
    if flags & 0x80 != 0 {
        // Any byte: the classifier reads the low six bits.
        key.dscp = b.u8();
    }
    let len = match b.u8() % 4 {
        0 => 60,
        1 => 1500,
        2 => u32::from(b.u16()),
        _ => b.u32(),
    };
    // The IP length as the frame's (cut to 16 bits), and any flag byte:
    // the classifier reads them only for rules that test them.
    key.ip_len = len as u16;
    key.tcp_flags = b.u8();
    (key, len)
}

/// A classifier's packet counters and the packets and bytes its rules
/// (and default) matched.
fn counts(c: &Classifier) -> (ClassifierStats, u64, u64) {
    c.rule_counters()
        .map(|(_, r)| r)
        .chain([c.default_counters()])
        .fold((c.stats(), 0, 0), |(s, p, b), r| {
            (s, p + r.packets, b + r.bytes)
        })
}

/// Checks one call's counters: exactly one packet, counted under its
/// verdict, and `matches` rule (or default) matches of `len` bytes each.
fn counted(
    before: &(ClassifierStats, u64, u64),
    c: &Classifier,
    verdict: Verdict,
    matches: RangeInclusive<u64>,
    len: u32,
    why: &dyn Fn(&str) -> String,
) {
    let after = counts(c);
    let mut expected = before.0;
    expected.packets += 1;
    match verdict {
        Verdict::Enqueue(_) => expected.enqueued += 1,
        Verdict::Pass => expected.passed += 1,
        Verdict::Drop(r) => expected.dropped[r.index()] += 1,
    }
    assert_eq!(after.0, expected, "{}", why("packet counters"));
    let matched = after.1 - before.1;
    assert!(matches.contains(&matched), "{}", why("rule matches"));
    assert_eq!(
        after.2 - before.2,
        matched * u64::from(len),
        "{}",
        why("rule bytes")
    );
}

/// Checks a verdict against the layout and the overflow policy: a
/// placement names a link of the layout, one of its instances and a flow
/// id one of its ranges owns, a new queue only in a range's dynamic slots;
/// overflow drops only under [`OverflowPolicy::Drop`]. Returns whether the
/// placement is a key's own (neither an overflow queue nor an overflow
/// instance).
fn placed_well(
    c: &Classifier,
    limits: &ClassifierLimits,
    verdict: Verdict,
    why: &dyn Fn(&str) -> String,
) -> bool {
    match verdict {
        Verdict::Drop(DropReason::QueueOverflow | DropReason::InstanceOverflow) => {
            assert_eq!(
                limits.overflow,
                OverflowPolicy::Drop,
                "{}",
                why("an overflow drop")
            );
            false
        }
        Verdict::Enqueue(p) => {
            let link = c
                .layout()
                .link(p.link)
                .unwrap_or_else(|| panic!("{}", why("a link the layout lacks")));
            assert!(p.instance < link.instances, "{}", why("an instance"));
            let range = link
                .owner_of(p.flow)
                .unwrap_or_else(|| panic!("{}", why("a flow id no range owns")));
            assert!(
                !p.new_queue || p.flow.0 - range.first.0 < range.dynamic,
                "{}",
                why("a new queue outside the dynamic slots")
            );
            p.instance < limits.instances_per_sched && range.overflow != Some(p.flow)
        }
        _ => false,
    }
}

/// The last use of each dynamic queue's flow id, by link: when, and by
/// which instance.
type SlotUses = HashMap<(u32, u32), (Instant, u32)>;

/// Checks that a dynamic queue's flow id serves one instance while it
/// lives (a slot is unique across the instances of its link, and an entry
/// used less than the idle time ago keeps its slot), and records the use.
fn one_instance_per_slot(
    slots: &mut SlotUses,
    c: &Classifier,
    limits: &ClassifierLimits,
    now: Instant,
    verdict: Verdict,
    why: &dyn Fn(&str) -> String,
) {
    let Verdict::Enqueue(p) = verdict else {
        return;
    };
    let dynamic = c
        .layout()
        .link(p.link)
        .and_then(|l| l.owner_of(p.flow))
        .is_some_and(|r| p.flow.0 - r.first.0 < r.dynamic);
    if !dynamic {
        return;
    }
    if let Some((then, instance)) = slots.insert((p.link, p.flow.0), (now, p.instance)) {
        if now.saturating_nanos_since(then) < limits.idle_expiry_ns {
            assert_eq!(
                instance,
                p.instance,
                "{}",
                why("a live dynamic queue's id in two instances")
            );
        }
    }
}

/// The classifier (`pspat_classify`). The input up to its first NUL byte
/// is ipfw lines; when they parse and validate, the bytes after it give
/// the classifier's limits (queues per flowset 1 to 64, instances per
/// sched 1 to 16, an idle time of 1 ns to about 1 ms, the overflow policy,
/// the hash seed, a cap for the first flowset) and then operations, each
/// an opcode byte and its operands: a time step (0 to 8 idle times),
/// a packet (`packet`), a batch of 1 to 40 packets at one instant, a
/// bridged packet between interfaces 0 to 3, or `expire`.
///
/// Checked, as the crate's docs promise: a validated plan builds; no key
/// panics; every call counts exactly one packet under its verdict and one
/// rule match (a bridged packet one or two); placements fit the layout
/// (`placed_well`); a key seen again within the idle time keeps its
/// placement, and a dynamic queue's id its instance
/// (`one_instance_per_slot`); and a second classifier built from the
/// same plan and limits, given the batches through `classify_batch`, gives
/// the same verdicts, counters, expiries and table statistics.
pub fn classify(data: &[u8]) {
    let (conf, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let input = text(conf);
    let Some(plan) = parse_ipfw(&input, IPFW_FILE)
        .ok()
        .and_then(|cfg| cfg.validate(&NoProfiles).ok())
    else {
        return;
    };
    let mut b = Bytes { data: rest, at: 0 };
    let mut limits = ClassifierLimits {
        queues_per_flowset: 1 + u32::from(b.u8() % 64),
        instances_per_sched: 1 + u32::from(b.u8() % 16),
        idle_expiry_ns: 1 + u64::from(b.u16()) * 16,
        overflow: if b.u8() & 1 == 0 {
            OverflowPolicy::SharedQueue
        } else {
            OverflowPolicy::Drop
        },
        hash_seed: u64::from(b.u32()),
        ..ClassifierLimits::default()
    };
    let cap = b.u8();
    if let (Some(q), 0..=15) = (plan.queues.keys().next(), cap) {
        limits.flowset_queues.insert(*q, 1 + u32::from(cap));
    }
    let build = || {
        let mut c = Classifier::from_plan(&plan, &limits)
            .unwrap_or_else(|e| panic!("classify: {e} from the plan of {input:?}"));
        c.bind_interface("eth0", 1);
        c.bind_interface("eth1", 2);
        for r in plan.rules.values() {
            if let Some(i) = &r.interface {
                c.bind_interface(&i.name.replace('*', "0"), 3);
            }
        }
        c.set_local_addrs(&[
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        ]);
        c
    };
    let mut one = build();
    let mut two = build();
    let mut now = Instant::ZERO;
    let mut seen: HashMap<PacketKey, (Instant, Placement)> = HashMap::new();
    // When each key was last placed in an overflow queue or instance.
    let mut overflowed: HashMap<PacketKey, Instant> = HashMap::new();
    let mut slots = SlotUses::new();
    // One packet through `one.classify`, checked.
    let mut single =
        |one: &mut Classifier, slots: &mut SlotUses, now: Instant, key: &PacketKey, len: u32| {
            let why = |what: &str| format!("classify: {what} for {key:?} under {input:?}");
            let before = counts(one);
            let verdict = one.classify(now, key, len);
            counted(&before, one, verdict, 1..=1, len, &why);
            let own = placed_well(one, &limits, verdict, &why);
            one_instance_per_slot(slots, one, &limits, now, verdict, &why);
            if let Some((then, p)) = seen.get(key) {
                if now.saturating_nanos_since(*then) < limits.idle_expiry_ns {
                    let kept = Placement {
                        new_queue: false,
                        ..*p
                    };
                    assert_eq!(
                        verdict,
                        Verdict::Enqueue(kept),
                        "{}",
                        why("a placement not kept within the idle time")
                    );
                }
            }
            // A key in the overflow queue gets no queue of its own within
            // the idle time (its packets there would be overtaken).
            if let (Verdict::Enqueue(p), Some(then)) = (verdict, overflowed.get(key)) {
                assert!(
                    !(own && p.new_queue)
                        || now.saturating_nanos_since(*then) >= limits.idle_expiry_ns,
                    "{}",
                    why("a queue of its own within the idle time of an overflow")
                );
            }
            match verdict {
                Verdict::Enqueue(p) if own => seen.insert(*key, (now, p)),
                _ => seen.remove(key),
            };
            if matches!(verdict, Verdict::Enqueue(_)) && !own {
                overflowed.insert(*key, now);
            }
            verdict
        };
    for _ in 0..4096 {
        if b.done() {
            break;
        }
        match b.u8() % 8 {
            0 => {
                let step = limits.idle_expiry_ns.saturating_mul(u64::from(b.u8())) / 32;
                now = now.saturating_add_nanos(step);
            }
            1..=3 => {
                let (key, len) = packet(&mut b);
                let verdict = single(&mut one, &mut slots, now, &key, len);
                assert_eq!(
                    two.classify(now, &key, len),
                    verdict,
                    "classify: two classifiers built alike differ on {key:?} under {input:?}"
                );
            }
            4 | 5 => {
                let n = 1 + usize::from(b.u8() % 40);
                let (keys, lens): (Vec<PacketKey>, Vec<u32>) =
                    (0..n).map(|_| packet(&mut b)).unzip();
                let expected: Vec<Verdict> = keys
                    .iter()
                    .zip(&lens)
                    .map(|(k, l)| single(&mut one, &mut slots, now, k, *l))
                    .collect();
                let mut got = vec![Verdict::Pass; n];
                assert_eq!(
                    two.classify_batch(now, &keys, &lens, &mut got),
                    n,
                    "classify: a batch of {n} under {input:?}"
                );
                assert_eq!(
                    got, expected,
                    "classify: a batch differs from one by one under {input:?}"
                );
            }
            6 => {
                let (ingress, egress) = (u32::from(b.u8() % 4), u32::from(b.u8() % 4));
                let (key, len) = packet(&mut b);
                let why =
                    |what: &str| format!("classify: {what} for bridged {key:?} under {input:?}");
                let before = counts(&one);
                let verdict = one.classify_bridged(now, &key, ingress, egress, len);
                counted(&before, &one, verdict, 1..=2, len, &why);
                placed_well(&one, &limits, verdict, &why);
                one_instance_per_slot(&mut slots, &one, &limits, now, verdict, &why);
                assert_eq!(
                    two.classify_bridged(now, &key, ingress, egress, len),
                    verdict,
                    "{}",
                    why("two classifiers built alike differ")
                );
            }
            _ => assert_eq!(
                one.expire(now),
                two.expire(now),
                "classify: expiries differ under {input:?}"
            ),
        }
        assert_eq!(
            one.stats(),
            two.stats(),
            "classify: counters differ under {input:?}"
        );
    }
    assert!(
        one.rule_counters().eq(two.rule_counters())
            && one.default_counters() == two.default_counters(),
        "classify: rule counters differ under {input:?}"
    );
    let tables = plan
        .queues
        .keys()
        .map(|q| (one.flowset_stats(*q), two.flowset_stats(*q)))
        .chain(
            one.layout()
                .links
                .iter()
                .map(|l| (one.instance_stats(l.number), two.instance_stats(l.number))),
        );
    for (a, b) in tables {
        assert_eq!(a, b, "classify: table statistics differ under {input:?}");
        if let Some(s) = a {
            assert!(s.live <= s.capacity, "classify: {s:?} under {input:?}");
        }
    }
}
