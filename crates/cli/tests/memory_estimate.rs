//! The memory estimates (`SchedulerConfig::memory_estimate`,
//! `pspat::memory_estimate`) against the measured growth of this process's
//! resident set (`VmRSS` in /proc/self/status) for a few small
//! configurations, within ±30%. One test, so nothing else runs in this
//! process while it measures.

use pspat::{NullTx, Runtime, RuntimeConfig};
use pspat_sched::{AlgKind, FlowId, FlowTable, Instant, Packet, Scheduler, SchedulerConfig};

/// The resident set now, bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kb * 1024
}

fn within(what: &str, estimate: u64, measured: u64) {
    let ratio = estimate as f64 / measured.max(1) as f64;
    eprintln!("{what}: estimate {estimate} B, measured {measured} B, ratio {ratio:.2}");
    assert!(
        (0.7..=1.3).contains(&ratio),
        "{what}: estimate {estimate} B is not within 30% of the measured {measured} B"
    );
}

/// Builds the scheduler and fills its arena; returns the RSS growth.
fn measure_scheduler(cfg: &SchedulerConfig, flows: usize) -> u64 {
    let before = rss();
    let mut s = cfg.build(FlowTable::uniform(flows).unwrap()).unwrap();
    for i in 0..cfg.capacity as u64 {
        let flow = FlowId((i % flows as u64) as u32);
        // A full flow or arena refuses: fine, the arena is what is measured.
        let _ = s.enqueue(Instant::ZERO, Packet::new(flow, 100, i));
    }
    let grown = rss().saturating_sub(before);
    drop(s);
    grown
}

/// The configurations measured: (algorithm, capacity, flows); `None` is
/// the runtime case.
const CASES: [Option<(AlgKind, usize, usize)>; 8] = [
    Some((AlgKind::Fifo, 2_000_000, 1)),
    Some((AlgKind::Drr, 2_000_000, 1_000)),
    Some((AlgKind::Drr, 1_000_000, 50_000)),
    Some((AlgKind::Wf2qPlus, 1_000_000, 10_000)),
    Some((AlgKind::Qfq, 1_000_000, 10_000)),
    Some((AlgKind::Srpt, 1_000_000, 1_000)),
    Some((AlgKind::Hierarchy, 500_000, 1_000)),
    None,
];

/// Measures case `i` in this process: (what, estimate, measured growth).
fn measure_case(i: usize) -> (String, u64, u64) {
    match CASES[i] {
        Some((alg, capacity, flows)) => {
            let mut cfg = SchedulerConfig::new(alg);
            cfg.capacity = capacity;
            let measured = measure_scheduler(&cfg, flows);
            (
                format!("{alg} capacity {capacity}, {flows} flows"),
                cfg.memory_estimate(flows),
                measured,
            )
        }
        None => {
            let mut rc = RuntimeConfig::default();
            rc.max_clients = 512;
            rc.descriptors_per_client = 4096;
            rc.mailbox_entries = 4096;
            let mut sched = SchedulerConfig::new(AlgKind::Fifo);
            sched.capacity = 1024;
            let before = rss();
            let rt = Runtime::start(
                rc.clone(),
                sched.build(FlowTable::uniform(1).unwrap()).unwrap(),
                |_| NullTx::new(),
            )
            .unwrap();
            let clients: Vec<_> = (0..rc.max_clients).map(|_| rt.client().unwrap()).collect();
            let measured = rss().saturating_sub(before);
            drop(clients);
            rt.shutdown().unwrap();
            (
                "runtime, 512 clients x 4096 descriptors and mailbox slots".into(),
                pspat::memory_estimate(&rc) + sched.memory_estimate(1),
                measured,
            )
        }
    }
}

/// Child side: with `PSPAT_MEMORY_CASE=i`, measures case i in this fresh
/// process and prints `estimate measured` (the allocator's reuse of freed
/// blocks would hide a second measurement in the same process).
#[test]
fn measure_one_case_in_a_child() {
    let Ok(i) = std::env::var("PSPAT_MEMORY_CASE") else {
        return;
    };
    let (_, estimate, measured) = measure_case(i.parse().expect("a case index"));
    println!("MEASURED {estimate} {measured}");
}

#[test]
fn estimates_match_the_measured_resident_set() {
    if std::env::var("PSPAT_MEMORY_CASE").is_ok() {
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    for (i, case) in CASES.iter().enumerate() {
        let out = std::process::Command::new(&exe)
            .args(["--exact", "measure_one_case_in_a_child", "--nocapture"])
            .env("PSPAT_MEMORY_CASE", i.to_string())
            .output()
            .expect("the test binary runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("MEASURED "))
            .unwrap_or_else(|| panic!("case {i}: no measurement in {text}"));
        let mut v = line.split(' ').map(|x| x.parse::<u64>().unwrap());
        let (estimate, measured) = (v.next().unwrap(), v.next().unwrap());
        within(&format!("{case:?}"), estimate, measured);
    }
}
