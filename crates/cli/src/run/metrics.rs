//! `pspat run --metrics ADDR`: the daemon's counters for Prometheus, on
//! `GET /metrics` over plain HTTP at the one address given (docs/RUN.md,
//! *Metrics*).
//!
//! Every scrape builds a fresh [`Registry`] from the counters as the
//! arbiter last published them (at most 100 ms old, docs/RUN.md) and the
//! rule counters, and encodes it in the OpenMetrics text format
//! (prometheus-client). Per pipe (label `pipe`, `pass` for the pass pipe):
//! packets and bytes in and out, copies sent by `duplicate`, packets
//! corrupted by `corrupt`, packets RED marked CE (`ecn`), drops by `reason`, packets held, the
//! configured rate and delay; per rule (label `rule`, `default`): packets
//! and bytes; the classifier's decisions and drops by reason; per queue
//! and the sojourn histograms, from the arbiter on request (run/qstats.rs);
//! the bridge's frames in, out, duplicated, corrupted, dropped by reason,
//! missed and held, per direction (label `direction`), from a report of
//! the running bridge.
//!
//! The responder is a few lines over [`TcpListener`]: one request per
//! connection, answered in turn by one thread; anything but `GET /metrics`
//! is answered 404 or 405. Cost: O(pipes + rules + queues + flow ids) per
//! scrape, off the packet path (it reads what the arbiter publishes, asks
//! it for the queues, takes the classifier's lock twice, and sums the
//! bridge's per-flow counters under the lock that keeps the bridge).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::control::Live;
use super::pipes_json;
use super::qstats::{Board, LinkQueues, QueueJson, BUCKETS_NS};
use crate::doorbell::Service;

pub(super) type Labels = Vec<(String, String)>;

/// Counters of one family, filled from absolute values.
pub(super) fn counters() -> Family<Labels, Counter> {
    Family::default()
}

/// Adds drops by reason (absolute counts) to `drops`, labelled `(key,
/// value)` and `reason`.
fn add_drops<R: std::fmt::Display>(
    drops: &Family<Labels, Counter>,
    (key, value): (&str, &str),
    dropped: &std::collections::BTreeMap<R, u64>,
) {
    for (reason, n) in dropped {
        drops
            .get_or_create(&label(&[
                (key, value.to_string()),
                ("reason", reason.to_string()),
            ]))
            .inc_by(*n);
    }
}

/// Packets and bytes in and out under the same labels, registered
/// together: the per-pipe, per-queue and per-direction series.
pub(super) struct InOut {
    in_p: Family<Labels, Counter>,
    in_b: Family<Labels, Counter>,
    out_p: Family<Labels, Counter>,
    out_b: Family<Labels, Counter>,
}

impl InOut {
    pub(super) fn new() -> Self {
        InOut {
            in_p: counters(),
            in_b: counters(),
            out_p: counters(),
            out_b: counters(),
        }
    }

    /// Adds the four counts (absolute values) under `l`.
    pub(super) fn add(&self, l: &Labels, [in_p, in_b, out_p, out_b]: [u64; 4]) {
        self.in_p.get_or_create(l).inc_by(in_p);
        self.in_b.get_or_create(l).inc_by(in_b);
        self.out_p.get_or_create(l).inc_by(out_p);
        self.out_b.get_or_create(l).inc_by(out_b);
    }

    /// Registers the four families, in that order, each with its `(name,
    /// help)`.
    pub(super) fn register(self, reg: &mut Registry, names: [(&str, &str); 4]) {
        let [a, b, c, d] = names;
        reg.register(a.0, a.1, self.in_p);
        reg.register(b.0, b.1, self.in_b);
        reg.register(c.0, c.1, self.out_p);
        reg.register(d.0, d.1, self.out_b);
    }
}

fn label(pairs: &[(&str, String)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

/// The metrics now, in the OpenMetrics text format.
pub fn render(live: &Live) -> String {
    let mut reg = Registry::with_prefix("pspat");
    // The queues first: the arbiter publishes the pipes' totals before it
    // answers, so the pipes' series are at least as new as the queues'.
    let (view, _) = live.queue_view();
    let links = live.links.lock().map(|l| l.clone()).unwrap_or_default();
    let snaps = live.snaps.lock().map(|s| s.clone()).unwrap_or_default();
    // A pipe deleted while the daemon runs is no longer exported.
    let mut pipes = pipes_json(&links, &snaps);
    pipes.retain(|p| !p.removed);
    let (traffic, drops, dups, corrupted) = (InOut::new(), counters(), counters(), counters());
    let marked = counters();
    let queued: Family<Labels, Gauge> = Family::default();
    let rate: Family<Labels, Gauge> = Family::default();
    let delay: Family<Labels, Gauge<f64, AtomicU64>> = Family::default();
    for p in &pipes {
        let name = p.number.map_or("pass".to_string(), |n| n.to_string());
        let l = label(&[("pipe", name.clone())]);
        traffic.add(&l, [p.in_packets, p.in_bytes, p.out_packets, p.out_bytes]);
        dups.get_or_create(&l).inc_by(p.duplicates);
        corrupted.get_or_create(&l).inc_by(p.corrupted);
        marked.get_or_create(&l).inc_by(p.marked);
        queued
            .get_or_create(&l)
            .set(i64::try_from(p.queued).unwrap_or(i64::MAX));
        rate.get_or_create(&l)
            .set(p.bw_bps.map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX)));
        delay.get_or_create(&l).set(p.delay_ns as f64 / 1e9);
        add_drops(&drops, ("pipe", &name), &p.dropped);
    }
    traffic.register(
        &mut reg,
        [
            (
                "pipe_in_packets",
                "Packets offered to the pipe (all instances)",
            ),
            ("pipe_in_bytes", "Bytes offered to the pipe"),
            ("pipe_out_packets", "Packets the pipe sent"),
            ("pipe_out_bytes", "Bytes the pipe sent"),
        ],
    );
    reg.register(
        "pipe_duplicates",
        "Copies the pipe sent right after their original (duplicate), not in out",
        dups,
    );
    reg.register(
        "pipe_corrupted",
        "Packets the pipe marked to leave with one bit flipped (corrupt), in out",
        corrupted,
    );
    reg.register(
        "pipe_marked",
        "Packets the pipe's RED marked Congestion Experienced instead of dropping them (ecn)",
        marked,
    );
    reg.register(
        "pipe_dropped_packets",
        "Packets the pipe dropped, by reason",
        drops,
    );
    reg.register(
        "pipe_queued_packets",
        "Packets the pipe holds (queues, link, delay line)",
        queued,
    );
    reg.register(
        "pipe_bandwidth_bits_per_second",
        "The pipe's configured rate (0: unlimited)",
        rate,
    );
    reg.register("pipe_delay_seconds", "The pipe's configured delay", delay);

    let plan = live.plan();
    let (rules, stats) = live.rules_and_stats(&plan);
    let (rule_p, rule_b) = (counters(), counters());
    for r in &rules {
        let name = r.number.map_or("default".to_string(), |n| n.to_string());
        let l = label(&[("rule", name)]);
        rule_p.get_or_create(&l).inc_by(r.packets);
        rule_b.get_or_create(&l).inc_by(r.bytes);
    }
    reg.register("rule_packets", "Packets that matched the rule", rule_p);
    reg.register("rule_bytes", "Bytes that matched the rule", rule_b);
    let cls = super::classifier_json(&stats, live.not_ip.load(Ordering::Relaxed));
    let decisions = counters();
    for (what, n) in [
        ("enqueued", cls.enqueued),
        ("passed", cls.passed),
        ("not_ip_passed", cls.not_ip_passed),
    ] {
        decisions
            .get_or_create(&label(&[("decision", what.to_string())]))
            .inc_by(n);
    }
    for (reason, n) in &cls.dropped {
        decisions
            .get_or_create(&label(&[
                ("decision", "dropped".to_string()),
                ("reason", reason.to_string()),
            ]))
            .inc_by(*n);
    }
    reg.register(
        "classifier_packets",
        "The classifier's decisions (drops by reason)",
        decisions,
    );
    if let Some(bridge) = live.bridge.lock().ok().as_ref().and_then(|b| b.as_ref()) {
        register_bridge(&mut reg, &bridge.report());
    }
    register_metrics(&mut reg, &view, &live.queues, &|link| {
        if link == super::PASS_LINK {
            "pass".to_string()
        } else {
            link.to_string()
        }
    });
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// The bridge's counters by direction (label `direction`): `forward`
/// (`--in` to `--out`) always, `reverse` (`--out` to `--in`) whenever it
/// is forwarded, shaped or not: its frames are counted apart
/// ([`pspat_bridge::ReverseReport`]) and its series run on across a live
/// toggle of its shaping (docs/RUN.md, *Both directions*). `r` is
/// a report of the running bridge: what the pipes dropped is still in
/// `in_flight` there (docs/RUN.md, *Metrics*).
fn register_bridge(reg: &mut Registry, r: &pspat_bridge::Report) {
    let traffic = InOut::new();
    let (dups, corrupted, drops, missed) = (counters(), counters(), counters(), counters());
    let ce_marked = counters();
    let in_flight: Family<Labels, Gauge> = Family::default();
    let forward = [
        r.received,
        r.received_bytes,
        r.transmitted,
        r.transmitted_bytes,
    ];
    let v = &r.reverse;
    let reverse = [v.received, v.received_bytes, v.transmitted, v.bytes];
    let mut directions = vec![(
        "forward",
        forward,
        [r.duplicated, r.corrupted, r.ce_marked],
        &r.dropped,
        r.not_received,
        r.in_flight,
    )];
    if v.enabled {
        directions.push((
            "reverse",
            reverse,
            [v.duplicated, v.corrupted, v.ce_marked],
            &v.dropped,
            v.not_received,
            v.in_flight,
        ));
    }
    for (direction, counts, [duplicated, corrupt, marked], dropped, not_received, held) in
        directions
    {
        let l = label(&[("direction", direction.to_string())]);
        traffic.add(&l, counts);
        dups.get_or_create(&l).inc_by(duplicated);
        corrupted.get_or_create(&l).inc_by(corrupt);
        ce_marked.get_or_create(&l).inc_by(marked);
        missed.get_or_create(&l).inc_by(not_received);
        in_flight
            .get_or_create(&l)
            .set(i64::try_from(held).unwrap_or(i64::MAX));
        add_drops(&drops, ("direction", direction), dropped);
    }
    traffic.register(
        reg,
        [
            (
                "bridge_received_packets",
                "Frames the direction's input ring(s) gave the bridge",
            ),
            ("bridge_received_bytes", "Their bytes"),
            (
                "bridge_transmitted_packets",
                "Frames the bridge sent in the direction (duplicated copies included)",
            ),
            ("bridge_transmitted_bytes", "Their bytes"),
        ],
    );
    reg.register(
        "bridge_duplicated_packets",
        "Copies of the direction's packets a pipe duplicated, each then sent or dropped",
        dups,
    );
    reg.register(
        "bridge_corrupted_packets",
        "The direction's packets a pipe corrupted, one bit flipped by the transmitter (in transmitted or dropped)",
        corrupted,
    );
    reg.register(
        "bridge_ce_marked_packets",
        "The direction's packets a pipe's RED marked, set to Congestion Experienced by the transmitter (in transmitted or dropped)",
        ce_marked,
    );
    reg.register(
        "bridge_dropped_packets",
        "Frames the bridge dropped in the direction, by reason (the pipes' drops once the bridge stops)",
        drops,
    );
    reg.register(
        "bridge_not_received_packets",
        "Frames the kernel dropped because the direction's ring was full",
        missed,
    );
    reg.register(
        "bridge_in_flight_packets",
        "Received and duplicated less transmitted and dropped: in the bridge and its pipes",
        in_flight,
    );
}

/// Binds `addr` (only it).
///
/// # Errors
/// One line naming `--metrics`.
pub fn listen(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let l = TcpListener::bind(addr)
        .map_err(|e| crate::usage(format!("--metrics {addr}: cannot listen: {e}")))?;
    l.set_nonblocking(true)
        .map_err(|e| crate::usage(format!("--metrics {addr}: {e}")))?;
    Ok(l)
}

/// Answers one HTTP request.
fn serve_one(live: &Live, mut stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let mut reader = BufReader::new((&stream).take(16 * 1024));
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    // The headers, up to the blank line (ignored).
    let mut header = String::new();
    while matches!(reader.read_line(&mut header), Ok(n) if n > 2) {
        header.clear();
    }
    let mut words = first.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, kind, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(live),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "only /metrics\n".into()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET /metrics\n".into(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

/// The responder's thread, until `stop` (set before [`Service::stop`]);
/// answers a connection as it comes.
pub fn spawn(
    live: Arc<Live>,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Service> {
    Service::spawn("pspat-metrics", &[], move |doorbell| {
        // Acquire: pairs with the Release store of the main thread.
        while !stop.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((stream, _)) => serve_one(&live, stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    doorbell.wait(Some(&listener), super::control::SAFETY_WAKE);
                }
                Err(e) => {
                    tracing::warn!(target: "pspat::run", "metrics: {e}");
                    // Not at once again: an error that stays (no file
                    // descriptors left) would spin.
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    })
}

/// Instances with their own series in the metrics, per pipe.
pub const METRIC_INSTANCES: u32 = 16;
/// Buckets with their own series in the metrics, per flowset (or masked pipe).
pub const METRIC_BUCKETS: u32 = 64;

/// A sojourn histogram as prometheus-client encodes one (fixed values).
#[derive(Debug, Default)]
struct FixedHist(Mutex<HistValues>);

/// Sum (s), count, and `(upper bound, count)` per bucket (not cumulative).
type HistValues = (f64, u64, Vec<(f64, u64)>);

impl prometheus_client::encoding::EncodeMetric for FixedHist {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        let v = self.0.lock().map_err(|_| std::fmt::Error)?;
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(v.0, v.1, &v.2, None)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

impl prometheus_client::metrics::TypedMetric for FixedHist {
    const TYPE: prometheus_client::metrics::MetricType =
        prometheus_client::metrics::MetricType::Histogram;
}

/// Adds the per-queue series and the per-pipe sojourn histograms to `reg`
/// and the count of packets whose sojourn was not measured
/// (docs/RUN.md, *Metrics*): each pipe's queues of the first
/// [`METRIC_INSTANCES`] instances and [`METRIC_BUCKETS`] buckets have
/// their own series (labels `pipe`, `flowset` (`-` for a pipe's own
/// queue), `instance`, `bucket`); the rest of the pipe's queues are summed
/// under `flowset="other",instance="other",bucket="other"`, so a pipe has
/// at most 16 × 64 × flowsets + 1 series whatever its traffic.
pub fn register_metrics(
    reg: &mut prometheus_client::registry::Registry,
    view: &[LinkQueues],
    board: &Board,
    name: &dyn Fn(u32) -> String,
) {
    let hists = board.hists();
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    let (traffic, drops) = (InOut::new(), counters());
    let (len_p, len_b) = (
        Family::<Labels, Gauge>::default(),
        Family::<Labels, Gauge>::default(),
    );
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for lq in view {
        let pipe = name(lq.link);
        let mut rest = lq.total;
        let put = |flowset: String, instance: String, bucket: String, r: &QueueJson| {
            let l: Labels = vec![
                ("pipe".into(), pipe.clone()),
                ("flowset".into(), flowset),
                ("instance".into(), instance),
                ("bucket".into(), bucket),
            ];
            traffic.add(&l, [r.in_packets, r.in_bytes, r.out_packets, r.out_bytes]);
            drops.get_or_create(&l).inc_by(r.dropped);
            len_p.get_or_create(&l).set(gauge(r.queued_packets));
            len_b.get_or_create(&l).set(gauge(r.queued_bytes));
        };
        for r in lq
            .rows
            .iter()
            .filter(|r| r.instance < METRIC_INSTANCES && r.bucket < METRIC_BUCKETS)
        {
            let flowset = r.flowset.map_or("-".into(), |q| q.to_string());
            let bucket = if r.overflow {
                "overflow".into()
            } else {
                r.bucket.to_string()
            };
            put(flowset, r.instance.to_string(), bucket, r);
            rest.queues -= 1;
            rest.counters.in_packets -= r.in_packets;
            rest.counters.in_bytes -= r.in_bytes;
            rest.counters.out_packets -= r.out_packets;
            rest.counters.out_bytes -= r.out_bytes;
            rest.counters.dropped_packets -= r.dropped;
            rest.queued_packets -= r.queued_packets;
            rest.queued_bytes -= r.queued_bytes;
        }
        if rest.queues > 0 {
            let other = QueueJson {
                in_packets: rest.counters.in_packets,
                in_bytes: rest.counters.in_bytes,
                out_packets: rest.counters.out_packets,
                out_bytes: rest.counters.out_bytes,
                dropped: rest.counters.dropped_packets,
                queued_packets: rest.queued_packets,
                queued_bytes: rest.queued_bytes,
                ..QueueJson::default()
            };
            put("other".into(), "other".into(), "other".into(), &other);
        }
    }
    traffic.register(
        reg,
        [
            ("queue_in_packets", "Packets offered to the dynamic queue"),
            ("queue_in_bytes", "Bytes offered to the dynamic queue"),
            ("queue_out_packets", "Packets the dynamic queue sent"),
            ("queue_out_bytes", "Bytes the dynamic queue sent"),
        ],
    );
    reg.register(
        "queue_dropped_packets",
        "Packets the dynamic queue dropped (any reason)",
        drops,
    );
    reg.register(
        "queue_length_packets",
        "Packets in the dynamic queue now",
        len_p,
    );
    reg.register(
        "queue_length_bytes",
        "Bytes in the dynamic queue now",
        len_b,
    );
    let fam = Family::<Labels, FixedHist>::default();
    for (link, h) in &hists {
        let mut buckets: Vec<(f64, u64)> = BUCKETS_NS
            .iter()
            .zip(h.buckets.iter())
            .map(|(&b, &n)| (b as f64 / 1e9, n))
            .collect();
        buckets.push((f64::MAX, h.buckets[BUCKETS_NS.len()]));
        let l: Labels = vec![("pipe".into(), name(*link))];
        if let Ok(mut v) = fam.get_or_create(&l).0.lock() {
            *v = (h.sum_ns as f64 / 1e9, h.count, buckets);
        }
    }
    reg.register(
        "pipe_sojourn_seconds",
        "Time from entering the pipe to leaving it, per transmitted packet",
        fam,
    );
    let unmeasured = Counter::<u64>::default();
    unmeasured.inc_by(board.unmeasured());
    reg.register(
        "sojourn_unmeasured_packets",
        "Packets whose sojourn could not be measured (not in the histograms)",
        unmeasured,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(r: &pspat_bridge::Report) -> String {
        let mut reg = Registry::with_prefix("pspat");
        register_bridge(&mut reg, r);
        let mut out = String::new();
        encode(&mut out, &reg).unwrap();
        out
    }

    #[test]
    fn bridge_series_carry_the_direction_and_the_reverse_one_whatever_its_mode() {
        let mut r = pspat_bridge::Report::default();
        r.received = 12;
        r.received_bytes = 1200;
        r.transmitted = 9;
        r.transmitted_bytes = 900;
        r.duplicated = 1;
        r.corrupted = 2;
        r.dropped.insert("filtered".into(), 3);
        r.in_flight = 1;
        let m = encoded(&r);
        // Not forwarded: no reverse series.
        assert!(!m.contains("reverse"), "{m}");
        r.reverse.enabled = true;
        r.reverse.received = 40;
        r.reverse.transmitted = 40;
        let m = encoded(&r);
        for want in [
            "pspat_bridge_received_packets_total{direction=\"forward\"} 12",
            "pspat_bridge_received_bytes_total{direction=\"forward\"} 1200",
            "pspat_bridge_transmitted_packets_total{direction=\"forward\"} 9",
            "pspat_bridge_transmitted_bytes_total{direction=\"forward\"} 900",
            "pspat_bridge_duplicated_packets_total{direction=\"forward\"} 1",
            "pspat_bridge_corrupted_packets_total{direction=\"forward\"} 2",
            "pspat_bridge_dropped_packets_total{direction=\"forward\",reason=\"filtered\"} 3",
            "pspat_bridge_not_received_packets_total{direction=\"forward\"} 0",
            "pspat_bridge_in_flight_packets{direction=\"forward\"} 1",
        ] {
            assert!(m.contains(want), "{want} not in\n{m}");
        }
        // Unshaped, the reverse direction's frames are counted apart too.
        for want in [
            "pspat_bridge_received_packets_total{direction=\"reverse\"} 40",
            "pspat_bridge_transmitted_packets_total{direction=\"reverse\"} 40",
        ] {
            assert!(m.contains(want), "{want} not in\n{m}");
        }
        r.reverse.shaped = true;
        r.reverse.received_bytes = 4000;
        r.reverse.bytes = 3800;
        r.reverse.transmitted = 38;
        r.reverse.dropped.insert("filtered".into(), 2);
        r.reverse.not_received = 5;
        r.reverse.corrupted = 4;
        let m = encoded(&r);
        for want in [
            "pspat_bridge_received_packets_total{direction=\"reverse\"} 40",
            "pspat_bridge_received_bytes_total{direction=\"reverse\"} 4000",
            "pspat_bridge_transmitted_packets_total{direction=\"reverse\"} 38",
            "pspat_bridge_transmitted_bytes_total{direction=\"reverse\"} 3800",
            "pspat_bridge_dropped_packets_total{direction=\"reverse\",reason=\"filtered\"} 2",
            "pspat_bridge_not_received_packets_total{direction=\"reverse\"} 5",
            "pspat_bridge_corrupted_packets_total{direction=\"reverse\"} 4",
            "pspat_bridge_dropped_packets_total{direction=\"forward\",reason=\"filtered\"} 3",
        ] {
            assert!(m.contains(want), "{want} not in\n{m}");
        }
    }
}
