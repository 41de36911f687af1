//! The stable-toolchain fuzz driver: for each target of `pspat_fuzz`,
//! replays the corpus (`fuzz/corpus/<target>/*`), then feeds generated and
//! mutated inputs until the time budget is spent. A broken contract (a
//! panic) prints the target and the input in hex, writes the input to
//! `fuzz/crashes/<target>-<n>`, and makes the driver exit 1.
//!
//! Usage: `fuzz-driver [TARGET...]`; `FUZZ_SECONDS` is the budget for all
//! targets together (default 40), `FUZZ_SEED` the generator's seed (default:
//! the time).
//!
//! Inputs are built from each target's dictionary (digits, units, commas,
//! JSON keys and values), random bytes, and mutations of earlier inputs
//! (bit flips, insertions, deletions, splices, repeats), from a xorshift
//! generator: not coverage guided, but fast (hundreds of thousands of
//! inputs per second on these parsers) and with no nightly toolchain.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pspat_fuzz::TARGETS;

/// xorshift64* (Vigna): small, fast, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens a target's grammar is made of.
fn dictionary(target: &str) -> &'static [&'static str] {
    match target {
        "sched_config" => &[
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "\"",
            " ",
            "\"alg\"",
            "\"capacity\"",
            "\"quantum_unit\"",
            "\"hierarchy\"",
            "\"eiffel\"",
            "\"link_rate_bps\"",
            "\"rate_bps\"",
            "\"rates_bps\"",
            "\"deadline_ns\"",
            "\"nodes\"",
            "\"name\"",
            "\"parent\"",
            "\"weight\"",
            "\"drr\"",
            "\"fifo\"",
            "\"wf2q+\"",
            "\"qfq\"",
            "\"htb\"",
            "\"srpt\"",
            "\"shaped-drr\"",
            "null",
            "true",
            "false",
            "0",
            "1",
            "-1",
            "1500",
            "65536",
            "1073741823",
            "18446744073709551615",
            "1e400",
            "0.5",
            "\"\\u0000\"",
            "{\"alg\": \"drr\"}",
            "//",
            "/*",
        ],
        "duration" => &[
            "0",
            "1",
            "9",
            ".",
            "e",
            "E",
            "-",
            "+",
            "s",
            "ms",
            "us",
            "µs",
            "ns",
            " ",
            "10",
            "1e9",
            "inf",
            "nan",
            "18446744073709551615",
            "0.000000001",
            "m",
            "h",
        ],
        "rate" => &[
            "0",
            "1",
            "9",
            ".",
            "e",
            "-",
            "k",
            "K",
            "m",
            "M",
            "g",
            "G",
            "t",
            "T",
            "bit",
            "bps",
            "bit/s",
            "b/s",
            "/",
            " ",
            "1e19",
            "inf",
            "18446744073709551615",
        ],
        "weights" => &[
            "0",
            "1",
            "9",
            ",",
            " ",
            "65536",
            "65537",
            "-1",
            "4294967296",
            "",
            "x",
            "1,2,4,8",
        ],
        "modes" => &["pspat", "lock", "none", ",", " ", "PSPAT", "fast", ""],
        "flowsets" => &[
            "0",
            "1",
            "8",
            ":",
            ",",
            "-",
            "k",
            "K",
            "m",
            "M",
            "n",
            "65536",
            "65535",
            "70000",
            "1::512",
            "8::64",
            "1:60:32768",
            "1-8-4",
            "4294967296",
            " ",
        ],
        _ => &["a", " ", "\n", "é", "x", "0"],
    }
}

fn generate(rng: &mut Rng, target: &str) -> Vec<u8> {
    let dict = dictionary(target);
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(12) {
        if rng.below(8) == 0 {
            out.push(rng.next() as u8);
        } else {
            out.extend_from_slice(dict[rng.below(dict.len())].as_bytes());
        }
    }
    out
}

fn mutate(rng: &mut Rng, target: &str, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let dict = dictionary(target);
                let tok = dict[rng.below(dict.len())].as_bytes();
                v.splice(at..at, tok.iter().copied());
            }
            2 if !v.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 => v.insert(at, rng.next() as u8),
            4 if !v.is_empty() && v.len() < 1 << 16 => {
                // Repeat a slice: long numbers, long lists, deep nesting.
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(16)).min(v.len());
                let piece = v[start..end].to_vec();
                for _ in 0..1 + rng.below(64) {
                    v.splice(at..at, piece.iter().copied());
                }
            }
            _ => v.truncate(at),
        }
    }
    v
}

fn corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// One input taking longer than this is reported as slow.
const SLOW: Duration = Duration::from_millis(500);

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> std::process::ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let targets: Vec<_> = TARGETS
        .iter()
        .filter(|(name, _)| wanted.is_empty() || wanted.iter().any(|w| w == name))
        .collect();
    if targets.is_empty() {
        eprintln!(
            "fuzz-driver: no such target (known: {})",
            TARGETS.iter().map(|t| t.0).collect::<Vec<_>>().join(", ")
        );
        return std::process::ExitCode::from(2);
    }
    let total: f64 = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40.0);
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    let per_target = Duration::from_secs_f64(total / targets.len() as f64);
    // Panics are the findings: report them ourselves, one line each.
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = 0;
    for (name, run) in targets {
        let mut rng = Rng(seed);
        let seeds = corpus(&root.join("corpus").join(name));
        let mut pool = seeds.clone();
        let start = Instant::now();
        let mut runs = 0u64;
        let mut found = 0;
        let next_input = |rng: &mut Rng, pool: &Vec<Vec<u8>>, i: u64| -> Vec<u8> {
            if (i as usize) < seeds.len() {
                seeds[i as usize].clone()
            } else if pool.is_empty() || rng.below(3) == 0 {
                generate(rng, name)
            } else {
                let pick = rng.below(pool.len());
                mutate(rng, name, &pool[pick])
            }
        };
        while (runs as usize) < seeds.len() || start.elapsed() < per_target {
            let input = next_input(&mut rng, &pool, runs);
            runs += 1;
            let t = Instant::now();
            let outcome = std::panic::catch_unwind(|| run(&input));
            if t.elapsed() > SLOW {
                // Not a broken contract, but worth knowing: printed, kept.
                let dir = root.join("crashes");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{name}-slow-{runs}"));
                let _ = std::fs::write(&path, &input);
                eprintln!(
                    "SLOW {name}: {:.1} s for input {} (saved to {})",
                    t.elapsed().as_secs_f64(),
                    hex(&input[..input.len().min(200)]),
                    path.display()
                );
            }
            if let Err(payload) = outcome {
                let why = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                let why: String = why.chars().take(300).collect();
                found += 1;
                let dir = root.join("crashes");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{name}-{found}"));
                let _ = std::fs::write(&path, &input);
                let shown = hex(&input[..input.len().min(200)]);
                eprintln!(
                    "FAIL {name}: {why}; input {shown}{} (saved to {}); rerun: FUZZ_SEED={seed}",
                    if input.len() > 200 { "..." } else { "" },
                    path.display()
                );
                if found >= 5 {
                    break;
                }
            } else if rng.below(64) == 0 && pool.len() < 4096 && input.len() < 4096 {
                pool.push(input);
            }
        }
        failures += found;
        println!(
            "{name}: {runs} inputs in {:.1} s, {found} failures (seed {seed})",
            start.elapsed().as_secs_f64()
        );
    }
    if failures > 0 {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
