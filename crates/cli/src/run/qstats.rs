//! Per-queue views of a running `pspat run`: the counters of every dynamic
//! queue (and instance) copied out of the arbiter on request, and the
//! sojourn time of every packet through its pipe (docs/RUN.md, *Per-queue
//! rows* and *Metrics*).
//!
//! # How the rows leave the arbiter
//! The arbiter owns the pipes, so nothing else may read them. A reader
//! ([`Board::fetch`]: `pspat ctl pipe show`, `queue show`, a scrape of the
//! metrics) raises a request number; the arbiter, between two calls of
//! the runtime (where it takes live changes), sees it ([`Recorder::poll`]),
//! copies the counters of at most [`MAX_ROWS`] queues that saw a packet,
//! plus exact per-link totals over all of them, into the board, and
//! publishes the request number it answered. The request wakes the
//! arbiter ([`Board::wake_on_request`]): one asleep until a packet is due
//! from a long delay line, or idle, answers at once rather than at its next
//! wake-up. The reader waits at most [`FETCH_WAIT`] for that answer;
//! without one (an arbiter busy elsewhere) it takes the last copy and says
//! it is not fresh.
//!
//! When the runtime drops the pipe set (after the drain at shutdown), the
//! arbiter makes one last copy ([`Recorder::finish`]) for the final report.
//!
//! An idle arbiter sleeps up to a second, so the arbiter also copies the
//! queues when its pipes are empty and the counters moved since its last
//! copy, and marks the copy current: a reader then takes it at once
//! (nothing moved since), until the next packet arrives. Those copies take
//! at most 1% of the arbiter's time: after a copy that took `d`, the next
//! waits at least `100·d` ([`IDLE_COPY_FACTOR`]).
//!
//! # Sojourn times
//! [`Recorder::entered`] notes the arbiter's `now` when the pipe set takes
//! a packet, in a table indexed by the packet's descriptor (the runtime's
//! token is `client << 32 | descriptor`, crates/pspat/src/token.rs; the
//! RX threads are the clients), allocated once; [`Recorder::left`] adds
//! `now − entered` to its pipe's histogram when the set hands it out.
//! Dropped packets are not in it. A token outside the table (none in
//! `pspat run`), and a packet handed out after its pipe was deleted (no
//! member owns its flow id any more), are counted as unmeasured.
//!
//! # Cost
//! Per packet: one store at entry; a binary search of the member
//! (O(log M)) and of the link's histogram, and one bucket search of
//! [`BUCKETS_NS`] at exit. Per request: O(flow ids of the set) in the
//! arbiter (a scan of the pipes' 56-byte queue records; about 65 536 at most), and
//! nothing allocated after the first requests grew the scratch buffers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pspat_sched::{AnyScheduler, FlowCounters, FlowId, Packet, PipeSet, Scheduler};

/// Queues whose counters one request copies at most (all of them are in
/// the per-link totals).
pub const MAX_ROWS: usize = 8192;

/// How long a reader waits for the arbiter's answer.
pub const FETCH_WAIT: Duration = Duration::from_millis(300);

/// A copy made because the pipes emptied waits this many times the
/// duration of the previous one.
pub const IDLE_COPY_FACTOR: u64 = 100;

/// Upper bounds of the sojourn histogram's buckets, ns (then +Inf).
pub const BUCKETS_NS: [u64; 14] = [
    100_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
];

/// One pipe's sojourn histogram: counts per bucket (not cumulative; the
/// last is +Inf), their count and sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hist {
    pub buckets: [u64; BUCKETS_NS.len() + 1],
    pub count: u64,
    pub sum_ns: u64,
}

impl Hist {
    fn observe(&mut self, ns: u64) {
        let i = BUCKETS_NS.partition_point(|&b| b < ns);
        self.buckets[i] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }
}

/// One queue's counters as the arbiter copied them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Row {
    pub link: u32,
    pub instance: u32,
    /// The flow id on the link (the classifier's [`pspat_classify::Placement::flow`]).
    pub flow: u32,
    pub counters: FlowCounters,
    /// Packets and bytes in the queue now (what its limit sees).
    pub queued_packets: u64,
    pub queued_bytes: u64,
}

/// Sums over every queue of a link that saw a packet.
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkTotal {
    pub link: u32,
    /// Queues (of all instances) that saw a packet.
    pub queues: u64,
    pub counters: FlowCounters,
    pub queued_packets: u64,
    pub queued_bytes: u64,
}

/// One copy of the queues (module docs).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub rows: Vec<Row>,
    pub links: Vec<LinkTotal>,
    /// More queues saw a packet than [`MAX_ROWS`]: some have no row.
    pub truncated: bool,
}

/// Where readers and the arbiter meet (module docs).
#[derive(Debug, Default)]
pub struct Board {
    /// The last request number. Release by the reader after nothing else
    /// (the number is the message); Acquire by the arbiter in `poll`.
    requested: AtomicU64,
    /// The last request number answered. Stored with Release after the
    /// snapshot is in place (pairs with the reader's Acquire load).
    answered: AtomicU64,
    snapshot: Mutex<Snapshot>,
    /// The copy is current: the pipes are empty and nothing arrived since
    /// it was made. Stored with Release after the copy is in place (pairs
    /// with the reader's Acquire load), cleared by the arbiter when a
    /// packet arrives.
    current: std::sync::atomic::AtomicBool,
    hists: Mutex<Vec<(u32, Hist)>>,
    unmeasured: AtomicU64,
    /// The arbiters a request wakes.
    arbiters: super::live::Arbiters,
}

impl Board {
    /// Asks the arbiter for a copy and waits up to `wait` for it; returns
    /// the copy and whether it answers this request (`false`: the last one
    /// the arbiter made, perhaps older).
    pub fn fetch(&self, wait: Duration) -> (Snapshot, bool) {
        // Acquire: pairs with the Release store in `Recorder::copy_idle`.
        if self.current.load(Ordering::Acquire) {
            let snap = self.snapshot.lock().map(|s| s.clone()).unwrap_or_default();
            // Still current after the copy was read: it was exact.
            if self.current.load(Ordering::Acquire) {
                return (snap, true);
            }
        }
        // Release: pairs with the Acquire load in `Recorder::poll`.
        let want = self.requested.fetch_add(1, Ordering::Release) + 1;
        // After the request, so the round it wakes for sees the number.
        self.arbiters.wake();
        let deadline = Instant::now() + wait;
        // Acquire: pairs with the Release store in `Recorder::poll`.
        let mut fresh = self.answered.load(Ordering::Acquire) >= want;
        while !fresh && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            fresh = self.answered.load(Ordering::Acquire) >= want;
        }
        let snap = self.snapshot.lock().map(|s| s.clone()).unwrap_or_default();
        (snap, fresh)
    }

    /// The arbiters [`Board::fetch`] wakes from now on; the first call
    /// sets them, later ones are ignored.
    pub fn wake_on_request(&self, wakers: Vec<pspat::ArbiterWaker>) {
        self.arbiters.set(wakers);
    }

    /// The sojourn histograms as last published, by link.
    pub fn hists(&self) -> Vec<(u32, Hist)> {
        self.hists.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Packets whose sojourn could not be measured.
    pub fn unmeasured(&self) -> u64 {
        self.unmeasured.load(Ordering::Relaxed)
    }
}

/// The arbiter's side (module docs).
#[derive(Debug)]
pub struct Recorder {
    board: std::sync::Arc<Board>,
    seen: u64,
    /// Entry time per descriptor, ns.
    entered: Vec<u64>,
    per_client: usize,
    /// Sorted by link.
    hists: Vec<(u32, Hist)>,
    unmeasured: u64,
    scratch: Snapshot,
    /// No copy because the pipes emptied before this (arbiter ns).
    next_idle_copy: u64,
    /// `board.current` is set.
    current: bool,
}

impl Recorder {
    /// For `clients` clients of `per_client` descriptors each.
    pub fn new(board: std::sync::Arc<Board>, clients: usize, per_client: usize) -> Self {
        Recorder {
            board,
            seen: 0,
            entered: vec![0; clients.saturating_mul(per_client)],
            per_client,
            hists: Vec::new(),
            unmeasured: 0,
            scratch: Snapshot::default(),
            next_idle_copy: 0,
            current: false,
        }
    }

    fn slot(&self, token: u64) -> Option<usize> {
        // A duplicated, corrupted or CE-marked packet leaves with its marks
        // in its token, an ECN-capable one with its bit.
        let token = token & !Packet::FLAG_BITS;
        let (client, desc) = ((token >> 32) as usize, (token as u32) as usize);
        let i = client.checked_mul(self.per_client)?.checked_add(desc)?;
        (desc < self.per_client && i < self.entered.len()).then_some(i)
    }

    /// The set took `token` at `now_ns`.
    pub fn entered(&mut self, now_ns: u64, token: u64) {
        match self.slot(token) {
            Some(i) => self.entered[i] = now_ns,
            None => self.unmeasured += 1,
        }
    }

    /// The counters may change (a packet offered, a live change): the copy
    /// is no longer current. One branch when it was not.
    pub fn touched(&mut self) {
        if self.current {
            self.current = false;
            // Relaxed: the reader that still sees `true` takes a copy that
            // was exact an instant ago.
            self.board.current.store(false, Ordering::Relaxed);
        }
    }

    /// The set handed `pkt` out at `now_ns`.
    pub fn left(&mut self, now_ns: u64, pkt: &Packet, set: &PipeSet<AnyScheduler>) {
        let (Some(i), Some((link, _, _))) = (self.slot(pkt.token), set.member_of(pkt.flow)) else {
            self.unmeasured += 1;
            return;
        };
        let ns = now_ns.saturating_sub(self.entered[i]);
        let h = match self.hists.binary_search_by_key(&link, |h| h.0) {
            Ok(h) => h,
            Err(at) => {
                // Once per link: the first packet it hands out.
                self.hists.insert(at, (link, Hist::default()));
                at
            }
        };
        self.hists[h].1.observe(ns);
    }

    /// Publishes the histograms (with the pipes' counters).
    pub fn publish(&self) {
        if let Ok(mut h) = self.board.hists.lock() {
            h.clone_from(&self.hists);
        }
        self.board
            .unmeasured
            .store(self.unmeasured, Ordering::Relaxed);
    }

    /// Whether a request waits for [`Recorder::poll`].
    pub fn requested(&self) -> bool {
        // Acquire: pairs with the Release in `Board::fetch`.
        self.board.requested.load(Ordering::Acquire) != self.seen
    }

    /// Answers a waiting request, if any, at `now_ns`: copies the queues
    /// of `set`.
    pub fn poll(&mut self, now_ns: u64, set: &PipeSet<AnyScheduler>) {
        // Acquire: pairs with the Release in `Board::fetch`.
        let want = self.board.requested.load(Ordering::Acquire);
        if want == self.seen {
            return;
        }
        self.seen = want;
        self.copy(now_ns, set);
        // Release: pairs with the Acquire loads in `Board::fetch`.
        self.board.answered.store(want, Ordering::Release);
        if set.is_empty() {
            self.mark_current();
        }
    }

    /// The pipes of `set` are empty at `now_ns`: unless the copy is
    /// current or the last copy was too recent ([`IDLE_COPY_FACTOR`]),
    /// copies the queues and marks the copy current (module docs).
    pub fn emptied(&mut self, now_ns: u64, set: &PipeSet<AnyScheduler>) {
        if self.current || now_ns < self.next_idle_copy {
            return;
        }
        self.copy(now_ns, set);
        self.mark_current();
    }

    /// The arbiter lets go of `set` at `now_ns` (the runtime drops it once
    /// drained): one last copy of the queues, marked current, so that the
    /// final report reads it at once.
    pub fn finish(&mut self, now_ns: u64, set: &PipeSet<AnyScheduler>) {
        self.copy(now_ns, set);
        self.mark_current();
    }

    fn mark_current(&mut self) {
        self.current = true;
        // Release: pairs with the Acquire loads in `Board::fetch`.
        self.board.current.store(true, Ordering::Release);
    }

    /// Copies the queues of `set` into the board at `now_ns`.
    fn copy(&mut self, now_ns: u64, set: &PipeSet<AnyScheduler>) {
        // The daemon's side may read the clock (crates/sched does not).
        let started = Instant::now();
        let s = &mut self.scratch;
        s.rows.clear();
        s.links.clear();
        s.truncated = false;
        for (link, instance, _, p) in set.members() {
            let pipe = p.pipe();
            let at = match s.links.iter().position(|l| l.link == link) {
                Some(at) => at,
                None => {
                    s.links.push(LinkTotal {
                        link,
                        ..LinkTotal::default()
                    });
                    s.links.len() - 1
                }
            };
            for (flow, c) in pipe.all_flow_counters().enumerate() {
                if c.in_packets == 0 {
                    continue;
                }
                let (qp, qb) = pipe.queue_len(FlowId(flow as u32)).unwrap_or_default();
                let t = &mut s.links[at];
                t.queues += 1;
                t.counters.in_packets += c.in_packets;
                t.counters.in_bytes += c.in_bytes;
                t.counters.out_packets += c.out_packets;
                t.counters.out_bytes += c.out_bytes;
                t.counters.dropped_packets += c.dropped_packets;
                t.queued_packets += qp;
                t.queued_bytes += qb;
                if s.rows.len() < MAX_ROWS {
                    s.rows.push(Row {
                        link,
                        instance,
                        flow: flow as u32,
                        counters: *c,
                        queued_packets: qp,
                        queued_bytes: qb,
                    });
                } else {
                    s.truncated = true;
                }
            }
        }
        if let Ok(mut out) = self.board.snapshot.lock() {
            out.clone_from(&self.scratch);
        }
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.next_idle_copy = now_ns.saturating_add(took.saturating_mul(IDLE_COPY_FACTOR));
    }
}

/// Rows `pspat ctl` prints per pipe or flowset at most.
pub const MAX_SHOWN: usize = 100;

/// One dynamic queue (or instance) in `pipe show` / `queue show` and the
/// metrics (docs/JSON.md, `queues`).
#[derive(serde::Serialize, Clone, Debug, Default, PartialEq)]
pub struct QueueJson {
    /// The flowset, `None` for a pipe's own queue.
    pub flowset: Option<u32>,
    /// The scheduler instance.
    pub instance: u32,
    /// dummynet's `BKT`: the slot of a masked flowset, else the instance
    /// of a masked pipe or sched, else 0.
    pub bucket: u32,
    /// The overflow queue or instance (beyond `--max-queues` or
    /// `--max-instances`).
    pub overflow: bool,
    /// The flow id on the link.
    pub flow_id: u32,
    /// The masked key (`None` without a mask, or once the classifier
    /// forgot the entry: expired, or replaced by a rule change).
    pub proto: Option<u8>,
    pub src: Option<String>,
    pub src_port: Option<u16>,
    pub dst: Option<String>,
    pub dst_port: Option<u16>,
    pub in_packets: u64,
    pub in_bytes: u64,
    pub out_packets: u64,
    pub out_bytes: u64,
    pub dropped: u64,
    pub queued_packets: u64,
    pub queued_bytes: u64,
}

/// A link's queues, busiest first.
#[derive(Clone, Debug, Default)]
pub struct LinkQueues {
    pub link: u32,
    pub rows: Vec<QueueJson>,
    pub total: LinkTotal,
}

/// The rows of `snap` with their flowsets, buckets and masked keys from
/// the classifier, per link, busiest (most bytes in, then most queued)
/// first. Control path.
pub fn resolve(snap: &Snapshot, c: &pspat_classify::Classifier) -> Vec<LinkQueues> {
    use std::collections::HashMap;
    let mut out: Vec<LinkQueues> = snap
        .links
        .iter()
        .map(|t| LinkQueues {
            link: t.link,
            rows: Vec::new(),
            total: *t,
        })
        .collect();
    let layout = c.layout();
    for lq in &mut out {
        let link = lq.link;
        let l = layout.link(link);
        let instances: Option<HashMap<u32, pspat_classify::DynamicKey>> =
            c.dynamic_instances(link).map(|v| v.into_iter().collect());
        let instance_cap = c.instance_stats(link).map(|s| s.capacity);
        let mut queues: HashMap<u32, HashMap<(u32, u32), pspat_classify::DynamicKey>> =
            HashMap::new();
        for r in snap.rows.iter().filter(|r| r.link == link) {
            let range = l.and_then(|l| l.owner_of(FlowId(r.flow)));
            let flowset = match range.map(|x| x.owner) {
                Some(pspat_classify::FlowOwner::Queue(q)) => Some(q),
                _ => None,
            };
            let dynamic = range.is_some_and(|x| x.dynamic > 0);
            let slot_overflow = range.and_then(|x| x.overflow) == Some(FlowId(r.flow));
            let key = match (flowset, dynamic) {
                (Some(q), true) => queues
                    .entry(q)
                    .or_insert_with(|| {
                        c.dynamic_queues(q)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(i, f, k)| ((i, f.0), k))
                            .collect()
                    })
                    .get(&(r.instance, r.flow))
                    .copied(),
                _ => instances.as_ref().and_then(|m| m.get(&r.instance)).copied(),
            };
            let bucket = if dynamic && !slot_overflow {
                range.map_or(0, |x| r.flow - x.first.0)
            } else if instances.is_some() {
                r.instance
            } else {
                0
            };
            let c = &r.counters;
            lq.rows.push(QueueJson {
                flowset,
                instance: r.instance,
                bucket,
                overflow: slot_overflow || instance_cap.is_some_and(|cap| r.instance >= cap),
                flow_id: r.flow,
                proto: key.map(|k| k.proto),
                src: key.map(|k| k.src.to_string()),
                src_port: key.map(|k| k.src_port),
                dst: key.map(|k| k.dst.to_string()),
                dst_port: key.map(|k| k.dst_port),
                in_packets: c.in_packets,
                in_bytes: c.in_bytes,
                out_packets: c.out_packets,
                out_bytes: c.out_bytes,
                dropped: c.dropped_packets,
                queued_packets: r.queued_packets,
                queued_bytes: r.queued_bytes,
            });
        }
        lq.rows.sort_by(|a, b| {
            b.in_bytes
                .cmp(&a.in_bytes)
                .then(b.queued_packets.cmp(&a.queued_packets))
                .then((a.instance, a.flow_id).cmp(&(b.instance, b.flow_id)))
        });
    }
    out
}

fn proto_name(p: Option<u8>) -> String {
    match p {
        None | Some(0) => "ip".into(),
        Some(1) => "icmp".into(),
        Some(6) => "tcp".into(),
        Some(17) => "udp".into(),
        Some(58) => "ipv6-icmp".into(),
        Some(n) => n.to_string(),
    }
}

/// The rows in dummynet's layout (`BKT Prot ___Source IP/port____ ...`),
/// at most [`MAX_SHOWN`] of `rows` (already in order), then how many of
/// `total` were left out.
pub fn table(rows: &[QueueJson], total: u64) -> String {
    let mut t = String::new();
    if rows.is_empty() {
        return t;
    }
    t.push_str("BKT Prot ___Source IP/port____ ____Dest. IP/port____ Tot_pkt/bytes Pkt/Byte Drp\n");
    for r in rows.iter().take(MAX_SHOWN) {
        let addr = |a: &Option<String>| a.clone().unwrap_or_else(|| "0.0.0.0".into());
        t.push_str(&format!(
            "{:3} {:<4} {:>15}/{:<5} {:>15}/{:<5} {:4} {:8} {:2} {:4} {:3}{}\n",
            r.bucket,
            proto_name(r.proto),
            addr(&r.src),
            r.src_port.unwrap_or(0),
            addr(&r.dst),
            r.dst_port.unwrap_or(0),
            r.in_packets,
            r.in_bytes,
            r.queued_packets,
            r.queued_bytes,
            r.dropped,
            if r.overflow { " overflow" } else { "" },
        ));
    }
    let shown = rows.len().min(MAX_SHOWN) as u64;
    if total > shown {
        t.push_str(&format!(
            "... {} more queue(s) not shown (busiest {shown} of {total})\n",
            total - shown
        ));
    }
    t
}

/// `queues`, `queues_total`, `queues_omitted` of one pipe or flowset
/// (docs/JSON.md).
pub fn json_fields(rows: &[QueueJson], total: u64) -> serde_json::Value {
    let shown = &rows[..rows.len().min(MAX_SHOWN)];
    serde_json::json!({
        "queues": shown,
        "queues_total": total,
        "queues_omitted": total - shown.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::metrics::register_metrics;
    use pspat_sched::pipe::PipeConfig;
    use pspat_sched::rate::Rate;
    use pspat_sched::{AlgKind, FlowTable, Pipe, Scheduler, SchedulerConfig};
    use std::sync::Arc;

    fn pipe(flows: usize) -> Pipe<AnyScheduler> {
        let cfg = PipeConfig {
            bw: Some(Rate::checked("bw", 8_000_000).unwrap()),
            delay_ns: 5_000_000,
            ..PipeConfig::default()
        };
        let sched = SchedulerConfig::new(AlgKind::Drr)
            .build(FlowTable::uniform(flows).unwrap())
            .unwrap();
        Pipe::new(cfg, sched, flows).unwrap()
    }

    #[test]
    fn a_request_copies_every_busy_queue_and_sojourns_are_binned_per_link() {
        let mut set = PipeSet::new();
        set.push(1, 0, pipe(4), 4).unwrap();
        set.push(1, 1, pipe(4), 4).unwrap();
        set.push(2, 0, pipe(1), 1).unwrap();
        let board = Arc::new(Board::default());
        let mut rec = Recorder::new(Arc::clone(&board), 2, 64);
        // Link 1 instance 0 flows 0 and 2, instance 1 flow 3; link 2 flow 0.
        let flows = [0u32, 2, 7, 8];
        let mut token = 0u64;
        for &f in &flows {
            for _ in 0..3 {
                // Client 1, descriptor `token`.
                let t = (1u64 << 32) | token;
                token += 1;
                set.enqueue(pspat_sched::Instant::ZERO, Packet::new(FlowId(f), 1000, t))
                    .unwrap();
                rec.entered(0, t);
            }
        }
        // Nothing asked yet: nothing copied.
        rec.poll(0, &set);
        assert!(board.snapshot.lock().unwrap().rows.is_empty());
        let reader = {
            let board = Arc::clone(&board);
            std::thread::spawn(move || board.fetch(Duration::from_secs(5)))
        };
        while board.requested.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        rec.poll(0, &set);
        let (snap, fresh) = reader.join().unwrap();
        assert!(fresh && !snap.truncated);
        assert_eq!(snap.rows.len(), 4);
        let l1 = snap.links.iter().find(|l| l.link == 1).unwrap();
        assert_eq!(
            (l1.queues, l1.counters.in_packets, l1.queued_packets),
            (3, 9, 7)
        );
        let r = snap
            .rows
            .iter()
            .find(|r| r.link == 1 && r.instance == 1)
            .unwrap();
        assert_eq!((r.flow, r.counters.in_packets, r.queued_packets), (3, 3, 2));
        // Drain: 1000 B take 1 ms, then 5 ms of delay.
        let mut now = pspat_sched::Instant::ZERO;
        let mut out = 0;
        while let Some(t) = set.next_eligible(now) {
            now = now.max(t);
            while let Some(p) = set.dequeue(now) {
                rec.left(now.as_nanos(), &p, &set);
                out += 1;
            }
        }
        assert_eq!(out, 12);
        rec.publish();
        let hists = board.hists();
        let h1 = hists.iter().find(|h| h.0 == 1).unwrap().1;
        let h2 = hists.iter().find(|h| h.0 == 2).unwrap().1;
        assert_eq!((h1.count, h2.count), (9, 3));
        // Link 2: 6, 7 and 8 ms, all in the 10 ms bucket.
        assert_eq!(h2.sum_ns, 21_000_000);
        assert_eq!(h2.buckets[5], 3);
        assert_eq!(board.unmeasured(), 0);
        // A token beyond the table is counted, not measured.
        rec.entered(0, 5u64 << 32);
        rec.publish();
        assert_eq!(board.unmeasured(), 1);
        // A duplicated packet leaves with the copy mark: still measured.
        let t = (1u64 << 32) | 3;
        set.enqueue(now, Packet::new(FlowId(8), 1000, t)).unwrap();
        rec.entered(now.as_nanos(), t);
        let left = now.saturating_add_nanos(6_000_000);
        let p = set.dequeue(left).expect("due after 1 + 5 ms");
        rec.left(left.as_nanos(), &p.with_copy(), &set);
        rec.publish();
        assert_eq!(board.unmeasured(), 1);
        let hists = board.hists();
        assert_eq!(hists.iter().find(|h| h.0 == 2).unwrap().1.count, 4);
        // A reader the arbiter does not answer gets the last copy, not fresh.
        let (snap, fresh) = board.fetch(Duration::from_millis(5));
        assert!(!fresh);
        assert_eq!(snap.rows.len(), 4);
        assert_eq!(
            snap.links
                .iter()
                .map(|l| l.counters.out_packets)
                .sum::<u64>(),
            0
        );
        // The pipes emptied: the arbiter copies them and a reader takes the
        // copy at once.
        let t = now.as_nanos() + 1_000_000_000;
        rec.emptied(t, &set);
        let (snap, fresh) = board.fetch(Duration::ZERO);
        assert!(fresh);
        assert_eq!(
            snap.links
                .iter()
                .map(|l| l.counters.out_packets)
                .sum::<u64>(),
            13,
            "the 12 drained and the duplicated one"
        );
        // A packet arrives: the copy is no longer current.
        rec.touched();
        assert!(!board.fetch(Duration::ZERO).1);
        // Not again within 100 times the last copy's duration.
        rec.emptied(t, &set);
        assert!(!board.fetch(Duration::ZERO).1);
        rec.emptied(t + 1_000_000_000, &set);
        assert!(board.fetch(Duration::ZERO).1);
    }

    #[test]
    fn a_packet_s_marks_do_not_change_its_descriptor() {
        let rec = Recorder::new(Arc::new(Board::default()), 2, 64);
        let t = (1u64 << 32) | 63;
        assert_eq!(rec.slot(t), Some(127));
        for marks in [
            Packet::COPY_BIT,
            Packet::CORRUPT_BIT,
            Packet::COPY_BIT | Packet::CORRUPT_BIT,
            Packet::CE_BIT | Packet::ECT_BIT,
            Packet::FLAG_BITS,
        ] {
            assert_eq!(rec.slot(t | marks), Some(127), "{marks:#x}");
        }
        assert_eq!(rec.slot((2u64 << 32) | Packet::CORRUPT_BIT), None);
    }

    /// Through the daemon's own pieces: the classifier and pipes `build`
    /// makes, the arbiter's wrapper answering a request between two calls,
    /// the rows resolved to masked keys, the table and the metrics.
    #[test]
    fn the_daemon_s_queues_resolve_to_keys_in_dummynet_s_layout_and_metrics() {
        use crate::run::{build, Observed, INPUT_INDEX};
        use pspat_classify::{ClassifierLimits, PacketDirection, PacketKey, Verdict};
        let plan = pspat_config::parse_ipfw(
            "pipe 1 config bw 8Mbit/s queue 3 mask src-ip 0xffffffff\n\
             sched 2 config type qfq bw 8Mbit/s\n\
             queue 21 config sched 2 mask src-ip 0xffffffff dst-port 0xffff\n\
             add 100 pipe 1 udp from any to any dst-port 5001\n\
             add 200 queue 21 udp from any to any dst-port 7000-7100\n",
            "t.ipfw",
        )
        .unwrap()
        .validate(&pspat_config::NoProfiles)
        .unwrap();
        let limits = ClassifierLimits {
            queues_per_flowset: 70,
            instances_per_sched: 4,
            ..ClassifierLimits::default()
        };
        let mut b = build(&plan, &limits, 1024, Some(0)).unwrap();
        let board = Arc::new(Board::default());
        let set = std::mem::take(&mut b.set);
        let mut obs = Observed::new(set, Arc::default(), Arc::default())
            .with_queues(Recorder::new(Arc::clone(&board), 1, 1024));
        let mut token = 0u64;
        let mut offer = |obs: &mut Observed, src: &str, dport: u16, n: u32| {
            for _ in 0..n {
                let mut k = PacketKey::new(
                    src.parse().unwrap(),
                    "10.199.9.9".parse().unwrap(),
                    17,
                    1000,
                    dport,
                );
                k.ifindex = INPUT_INDEX;
                k.direction = PacketDirection::In;
                let Verdict::Enqueue(p) =
                    b.classifier.classify(pspat_sched::Instant::ZERO, &k, 1000)
                else {
                    panic!("not enqueued");
                };
                let flow = b.routes.global(p.link, p.instance, p.flow).unwrap();
                // Refusals (the queue limit) are counted in the queue.
                let _ = obs.enqueue(pspat_sched::Instant::ZERO, Packet::new(flow, 1000, token));
                token += 1;
            }
        };
        // Pipe 1: three sources, 2, 5 and 9 packets (limit 3 per instance).
        offer(&mut obs, "10.0.0.1", 5001, 2);
        offer(&mut obs, "10.0.0.2", 5001, 5);
        offer(&mut obs, "10.0.0.3", 5001, 9);
        // Queue 21: 65 destination ports from one source, one packet each.
        for port in 7000..7065 {
            offer(&mut obs, "10.0.0.7", port, 1);
        }
        let reader = {
            let board = Arc::clone(&board);
            std::thread::spawn(move || board.fetch(Duration::from_secs(10)))
        };
        // The arbiter's calls answer the request; then everything drains.
        let mut now = pspat_sched::Instant::ZERO;
        let mut out = 0;
        while !reader.is_finished() {
            let _ = obs.dequeue(now);
            std::thread::yield_now();
        }
        let (snap, fresh) = reader.join().unwrap();
        assert!(fresh);
        let view = resolve(&snap, &b.classifier);
        let pipe1 = view.iter().find(|l| l.link == 1).unwrap();
        assert_eq!(pipe1.total.queues, 3);
        let got: Vec<(Option<String>, u64, u64, u64)> = pipe1
            .rows
            .iter()
            .map(|r| {
                (
                    r.src.clone(),
                    r.in_packets,
                    r.dropped,
                    r.in_packets - r.out_packets - r.dropped,
                )
            })
            .collect();
        // Busiest first; 1 on the link and 3 queued at most per instance.
        assert!(pipe1.rows.iter().all(|r| r.queued_packets <= 3));
        assert_eq!(
            got,
            [
                (Some("10.0.0.3".into()), 9, 5, 4),
                (Some("10.0.0.2".into()), 5, 1, 4),
                (Some("10.0.0.1".into()), 2, 0, 2),
            ]
        );
        for r in &pipe1.rows {
            assert_eq!(
                (r.bucket, r.flowset, r.dst.as_deref()),
                (r.instance, None, Some("0.0.0.0"))
            );
        }
        let text = table(&pipe1.rows, pipe1.total.queues);
        assert!(text.starts_with("BKT Prot ___Source IP/port____"), "{text}");
        let line = text.lines().nth(1).unwrap();
        assert!(
            line.contains("ip          10.0.0.3/0             0.0.0.0/0        9     9000"),
            "{line}"
        );
        let sched = view.iter().find(|l| l.link == 2).unwrap();
        assert_eq!((sched.total.queues, sched.rows.len()), (65, 65));
        for r in &sched.rows {
            assert_eq!(r.flowset, Some(21));
            assert_eq!(r.dst_port, Some(7000 + r.bucket as u16), "{r:?}");
        }
        // At most MAX_SHOWN rows, the rest counted.
        let few = &sched.rows[..3];
        let j = json_fields(few, 120);
        assert_eq!(
            (
                j["queues"].as_array().unwrap().len(),
                j["queues_omitted"].as_u64()
            ),
            (3, Some(117))
        );
        // Drain, then the histograms and the metrics.
        while let Some(t) = obs.next_eligible(now) {
            now = now.max(t);
            while obs.dequeue(now).is_some() {
                out += 1;
            }
        }
        assert_eq!(out, 2 + 4 + 4 + 65);
        drop(obs);
        let mut reg = prometheus_client::registry::Registry::with_prefix("pspat");
        let n = |l: u32| l.to_string();
        register_metrics(&mut reg, &view, &board, &n);
        let mut m = String::new();
        prometheus_client::encoding::text::encode(&mut m, &reg).unwrap();
        let r3 = &pipe1.rows[0];
        let want = format!(
            "pspat_queue_dropped_packets_total{{pipe=\"1\",flowset=\"-\",instance=\"{0}\",bucket=\"{0}\"}} 5",
            r3.instance
        );
        assert!(m.contains(&want), "{want} not in\n{m}");
        // Buckets 0..63 of queue 21 have their own series, bucket 64 is summed.
        assert!(m.contains("pspat_queue_in_packets_total{pipe=\"2\",flowset=\"21\",instance=\"0\",bucket=\"63\"} 1"), "{m}");
        assert!(m.contains("pspat_queue_in_packets_total{pipe=\"2\",flowset=\"other\",instance=\"other\",bucket=\"other\"} 1"), "{m}");
        // 1000-byte packets at 8 Mbit/s: 1 ms each; 75 sojourns measured.
        let count = |pipe: &str| {
            let key = format!("pspat_pipe_sojourn_seconds_count{{pipe=\"{pipe}\"}} ");
            m.lines()
                .find_map(|l| l.strip_prefix(key.as_str()))
                .map(|v| v.parse::<u64>().unwrap())
        };
        assert_eq!((count("1"), count("2")), (Some(10), Some(65)));
        assert!(
            m.contains("pspat_pipe_sojourn_seconds_bucket{le=\"0.0005\",pipe=\"2\"} 0")
                || m.contains("pspat_pipe_sojourn_seconds_bucket{pipe=\"2\",le=\"0.0005\"} 0"),
            "{m}"
        );
        assert!(
            m.contains("pspat_sojourn_unmeasured_packets_total 0"),
            "{m}"
        );
    }

    fn rss_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb * 1024
    }

    /// Builds `text` with `queues` dynamic queues per flowset, sends one
    /// packet through each (so every per-queue structure is written) and
    /// returns the growth of the resident set and the classifier's and
    /// scheduler's own estimates.
    fn grown(text: &str, queues: u32) -> (u64, f64, [usize; 2]) {
        use crate::run::{build, BRIDGE_COUNTERS, INPUT_INDEX};
        use pspat_classify::{ClassifierLimits, PacketDirection, PacketKey, Verdict};
        let plan = pspat_config::parse_ipfw(text, "t.ipfw")
            .unwrap()
            .validate(&pspat_config::NoProfiles)
            .unwrap();
        let limits = ClassifierLimits {
            queues_per_flowset: queues,
            ..ClassifierLimits::default()
        };
        let before = rss_bytes();
        let mut b = build(&plan, &limits, 1024, Some(0)).unwrap();
        for i in 0..queues {
            let src = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            let mut k = PacketKey::new(src.into(), "10.199.9.9".parse().unwrap(), 17, 1, 2);
            k.ifindex = INPUT_INDEX;
            k.direction = PacketDirection::In;
            let Verdict::Enqueue(p) = b.classifier.classify(pspat_sched::Instant::ZERO, &k, 100)
            else {
                panic!("not enqueued");
            };
            let flow = b.routes.global(p.link, p.instance, p.flow).unwrap();
            b.set
                .enqueue(
                    pspat_sched::Instant::ZERO,
                    Packet::new(flow, 100, u64::from(i)),
                )
                .unwrap();
            assert!(b.set.dequeue(pspat_sched::Instant::ZERO).is_some());
        }
        let grown = rss_bytes().saturating_sub(before);
        // The cost of one copy of every queue (the arbiter's side).
        let board = Arc::new(Board::default());
        let mut rec = Recorder::new(Arc::clone(&board), 1, 64);
        for _ in 0..2 {
            board.requested.fetch_add(1, Ordering::Release);
            let t = Instant::now();
            rec.poll(0, &b.set);
            println!("copy of {queues} queues: {:?}", t.elapsed());
        }
        let classifier = b.classifier.memory_estimate().bytes_per_slot();
        // The bridge's state for these flow ids, as `pspat run` counts them
        // and per flow id.
        let mut bridge = pspat_bridge::BridgeConfig::new("in", "out");
        bridge.flows = b.set.flows();
        let bytes = [BRIDGE_COUNTERS, pspat_bridge::FlowCounters::PerFlow].map(|c| {
            bridge.flow_counters = c;
            bridge.flow_state_bytes()
        });
        drop(b);
        (grown, classifier, bytes)
    }

    /// One measurement of [`grown`] in a process of its own, so that no
    /// memory an earlier build freed (and the allocator kept) is reused:
    /// the test binary runs itself with `PSPAT_MEMORY_PROBE` set to
    /// `CONFIG_INDEX:QUEUES:SMALL_PAGES` and reads back one line.
    fn grown_in_child(config: usize, queues: u32, small_pages: bool) -> (u64, f64, [usize; 2]) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "run::qstats::tests::memory_per_dynamic_queue",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                "PSPAT_MEMORY_PROBE",
                format!("{config}:{queues}:{}", u8::from(small_pages)),
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("memory-probe: "))
            .unwrap_or_else(|| panic!("no probe line in {text}"));
        let v: Vec<f64> = line.split(' ').map(|w| w.parse().unwrap()).collect();
        (v[0] as u64, v[1], [v[2] as usize, v[3] as usize])
    }

    const MEMORY_CONFIGS: [(&str, &str, AlgKind); 2] = [
        (
            "FIFO pipe, masked flowset",
            "pipe 1 config\n\
             queue 1 config pipe 1 mask src-ip 0xffffffff\n\
             add 100 queue 1 udp from any to any\n",
            AlgKind::Fifo,
        ),
        (
            "QFQ sched, masked flowset",
            "sched 1 config type qfq\n\
             queue 1 config sched 1 mask src-ip 0xffffffff\n\
             add 100 queue 1 udp from any to any\n",
            AlgKind::Qfq,
        ),
    ];

    /// The memory of one dynamic queue (docs/RUN.md, *Memory*): the growth
    /// of the resident set between 2 000 and 62 000 queues, each in a fresh
    /// process, against the sum of the parts, measured twice: on 4 KiB
    /// pages (transparent huge pages disabled for the process), which counts
    /// the bytes each queue's records take, and with the huge pages the
    /// `pspat` binary's allocator advises, where every table of a megabyte
    /// or more is also rounded up to whole 2 MiB pages (a fixed cost of less
    /// than 2 MiB per table, whatever the number of queues, that these
    /// 60 000 queues share). Run alone:
    /// `cargo test -p pspat-cli --bin pspat memory_per_dynamic_queue -- --ignored --nocapture`.
    #[test]
    #[ignore = "measures the resident set of child processes: run alone"]
    fn memory_per_dynamic_queue() {
        if let Ok(probe) = std::env::var("PSPAT_MEMORY_PROBE") {
            let v: Vec<u32> = probe.split(':').map(|w| w.parse().unwrap()).collect();
            if v[2] == 1 {
                rustix::thread::disable_transparent_huge_pages(true).unwrap();
            }
            let (g, c, b) = grown(MEMORY_CONFIGS[v[0] as usize].1, v[1]);
            println!("memory-probe: {g} {c} {} {}", b[0], b[1]);
            return;
        }
        let pipe_part = Pipe::<AnyScheduler>::PER_FLOW_BYTES as f64;
        for (config, (what, _, alg)) in MEMORY_CONFIGS.into_iter().enumerate() {
            let (small, large) = (2_000u32, 62_000u32);
            let per_queue =
                |g1: u64, g2: u64| g2.saturating_sub(g1) as f64 / f64::from(large - small);
            // On 4 KiB pages, then with huge pages as the system allows.
            let mut measured = [0.0; 2];
            let mut bridge_bytes = ([0usize; 2], [0usize; 2]);
            let mut classifier = 0.0;
            for (i, small_pages) in [true, false].into_iter().enumerate() {
                let (g1, _, b1) = grown_in_child(config, small, small_pages);
                let (g2, c, b2) = grown_in_child(config, large, small_pages);
                measured[i] = per_queue(g1, g2);
                classifier = c;
                bridge_bytes = (b1, b2);
            }
            let (b1, b2) = bridge_bytes;
            let [bridge, per_flow] =
                [0, 1].map(|i| (b2[i] - b1[i]) as f64 / f64::from(large - small));
            let mut sc = SchedulerConfig::new(alg);
            sc.capacity = 1024;
            let sched = (sc.memory_estimate(large as usize + 1)
                - sc.memory_estimate(small as usize + 1)) as f64
                / f64::from(large - small);
            let sum = classifier + pipe_part + sched;
            let [small_pages, huge_pages] = measured;
            println!(
                "{what}: measured {small_pages:.0} B per dynamic queue on 4 KiB pages, {huge_pages:.0} B with huge pages (tables of 1 to 2 MiB take a whole one); parts: classifier {classifier:.1} + pipe {pipe_part:.0} + scheduler {sched:.0} (estimate) = {sum:.0} B; bridge {bridge:.1} B (counted per flow id: {per_flow:.0} B)"
            );
            assert!(
                (small_pages - sum).abs() <= 0.3 * sum,
                "{what}: measured {small_pages:.0} B, parts {sum:.0} B"
            );
            // Huge pages only add rounding: never less than the records.
            assert!(
                huge_pages + 8.0 >= small_pages,
                "{what}: {huge_pages:.0} B with huge pages, {small_pages:.0} B without"
            );
            // The bridge counts `pspat run`'s flows in a fixed number of
            // groups: nothing of it grows with the queues.
            assert!(bridge < 1.0, "{what}: bridge {bridge} B per queue");
        }
    }
}
