//! Integration tests of `pspat-bench`: every mode conserves packet counts
//! and reports every field; bad configurations are typed errors naming the
//! field. Counts and shapes only, never wall-clock speed.

use std::time::Duration;

use pspat::{RuntimeError, TxMode};
use pspat_bench::{BenchConfig, Mode, VictimConfig};

fn quick(mode: Mode, clients: usize) -> BenchConfig {
    let mut c = BenchConfig::new(mode, clients);
    c.duration = Duration::from_millis(200);
    c.pin = false;
    c
}

#[test]
fn bench_modes_conserve_counts() {
    for mode in [Mode::Pspat, Mode::Lock, Mode::None] {
        let mut cfg = quick(mode, 4);
        cfg.victim = Some(VictimConfig {
            weight: 1,
            pps: 2000,
            pkt_len: 60,
        });
        let r = pspat_bench::run(&cfg, &mut |_| {}).unwrap();
        assert_eq!(r.in_flight, 0, "{mode}");
        assert_eq!(r.submitted, r.transmitted + r.dropped, "{mode}");
        assert_eq!(r.per_client.len(), 5);
        assert!(r.transmitted > 0, "{mode}");
        assert_eq!(r.arbiter.is_some(), mode == Mode::Pspat);
        assert!(r.victim.as_ref().is_some_and(|v| v.samples > 0), "{mode}");
        let json = serde_json::to_value(&r).unwrap();
        for key in [
            "mode",
            "alg",
            "clients",
            "duration_s",
            "submitted",
            "transmitted",
            "dropped",
            "in_flight",
            "decisions_per_sec",
            "per_client",
            "arbiter",
            "pinning",
            "lmax",
        ] {
            assert!(json.get(key).is_some(), "{mode}: missing {key}");
        }
        assert_eq!(json["mode"], mode.name());
        assert_eq!(json["lmax"], 1500, "{mode}: the default lmax, one MTU");
        assert!(json["per_client"][0].get("share").is_some());
    }
}

#[test]
fn bench_invalid_configs_are_typed_errors() {
    let e = pspat_bench::run(&quick(Mode::Pspat, 0), &mut |_| {}).unwrap_err();
    assert!(matches!(e, RuntimeError::OutOfRange { .. }));
    assert_eq!(
        e.to_string(),
        "clients = 0 is out of range (allowed: 1..=1000)"
    );
    assert!(pspat_bench::run(&quick(Mode::Lock, 1001), &mut |_| {}).is_err());
    let mut c = quick(Mode::Pspat, 2);
    c.pkt_len = 0;
    assert!(c.validate().unwrap_err().to_string().contains("pkt_len"));
    let mut c = quick(Mode::Pspat, 2);
    c.weights = vec![1, 2, 3];
    assert!(matches!(c.validate(), Err(RuntimeError::Invalid { .. })));
    let mut c = quick(Mode::Pspat, 2);
    c.weights = vec![0];
    assert!(matches!(c.validate(), Err(RuntimeError::Sched(_))));
    let mut c = quick(Mode::Lock, 2);
    c.rate_bps = Some(0);
    assert!(c.validate().is_err());
    let mut c = quick(Mode::Pspat, 2);
    c.sched.capacity = 0;
    assert_eq!(
        c.validate().unwrap_err().to_string(),
        format!(
            "scheduler capacity (packets) = 0 is out of range (allowed: 1..={})",
            pspat_sched::PacketQueues::MAX_CAPACITY
        )
    );
    let mut c = quick(Mode::Pspat, 2);
    c.mailbox_entries = 100;
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("mailbox_entries"));
    assert!("bogus".parse::<Mode>().is_err());
    assert_eq!("client".parse::<TxMode>().unwrap(), TxMode::Client);
}

/// Rates count only the measured window: on a 1 Mbit/s link the report
/// never shows more than the link's rate (plus one packet of slack), even
/// though the descriptors still queued at the end drain afterwards.
#[test]
fn rates_count_only_the_measured_window() {
    for mode in [Mode::Pspat, Mode::Lock] {
        let mut cfg = quick(mode, 2);
        cfg.duration = Duration::from_millis(300);
        cfg.rate_bps = Some(1_000_000);
        // The smallest scheduler that holds every descriptor (2 x 1024
        // packets), so the drain after the window takes about a second.
        cfg.sched.capacity = 1;
        let r = pspat_bench::run(&cfg, &mut |_| {}).unwrap();
        let slack = 2.0 * 60.0 * 8.0 / r.duration_s;
        assert!(
            r.throughput_bps <= 1_000_000.0 * 1.02 + slack,
            "{mode}: {} bit/s on a 1 Mbit/s link",
            r.throughput_bps
        );
        assert!(r.throughput_bps > 500_000.0, "{mode}: {}", r.throughput_bps);
        let sum: f64 = r.per_client.iter().map(|c| c.rate_bps).sum();
        assert!((sum - r.throughput_bps).abs() < 1.0, "{mode}");
        // The whole run includes the drain, so it counts at least as much.
        assert!(r.transmitted_bytes >= r.window_bytes, "{mode}");
        assert!(
            r.transmitted > r.window_transmitted,
            "{mode}: nothing drained?"
        );
    }
}
