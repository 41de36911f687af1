//! An idle bridge sleeps: with no traffic its threads block in poll(2) or
//! park. Alone in its test binary so that the process's CPU time is the
//! bridge's. Needs root: without it, it prints "skipped: <reason>".

mod common;

use std::time::{Duration, Instant};

use common::Bed;

/// CPU time of every thread of this process so far
/// (`/proc/self/task/*/schedstat`, first field: nanoseconds on a CPU).
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn an_idle_bridge_uses_almost_no_cpu() {
    let Some(bed) = Bed::new() else {
        return;
    };
    let mut cfg = bed.config();
    cfg.rate_bps = Some(100_000_000);
    cfg.flows = 4;
    let bridge = bed.start(cfg);
    // Let the threads start and the arbiter reach its park.
    std::thread::sleep(Duration::from_millis(500));
    let (t0, c0) = (Instant::now(), cpu_ns());
    std::thread::sleep(Duration::from_secs(3));
    let (wall, used) = (t0.elapsed(), cpu_ns() - c0);
    let share = used as f64 / wall.as_nanos() as f64;
    println!(
        "idle bridge: {:.3} ms of CPU in {:.1} s = {:.3}% of a core",
        used as f64 / 1e6,
        wall.as_secs_f64(),
        100.0 * share
    );
    let report = bridge.stop().expect("stop");
    assert!(report.conserved);
    // No thread spins: far below one percent of a core is expected; the
    // bound only catches a busy loop on a loaded machine.
    assert!(
        share < 0.05,
        "an idle bridge used {:.2}% of a core",
        100.0 * share
    );
}
