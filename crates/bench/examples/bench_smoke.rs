//! Smoke run of `pspat_bench::run`: `cargo run --release -p pspat-bench --example bench_smoke -- pspat 64 2`
//! (mode, clients, seconds [tx-mode [dispatchers [nopin]]]). Prints the JSON-able report as Debug.

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "pspat".into());
    let clients = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let secs = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let mode = match mode.parse::<pspat_bench::Mode>() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let mut cfg = pspat_bench::BenchConfig::new(mode, clients);
    cfg.duration = std::time::Duration::from_secs(secs);
    if let Some(t) = args.next() {
        cfg.tx_mode = t.parse().unwrap_or_default();
    }
    cfg.dispatchers = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    cfg.pin = args.next().is_none_or(|a| a != "nopin");
    match pspat_bench::run(&cfg, &mut |p| {
        eprintln!("{:.1}s {}", p.elapsed_s, p.transmitted)
    }) {
        Ok(r) => println!(
            "mode={} clients={} dps={:.0} tx={} sub={} drop={} inflight={} pin={} arb={:?}",
            r.mode,
            r.clients,
            r.decisions_per_sec,
            r.transmitted,
            r.submitted,
            r.dropped,
            r.in_flight,
            r.pinning,
            r.arbiter
        ),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}
