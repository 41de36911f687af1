//! `pspat run CONFIG --in IF --out IF`: dummynet's model (pipes, scheds,
//! queues, masks, rules, delay, loss, RED) shaping the frames that cross a
//! bump in the wire (docs/RUN.md).
//!
//! ```text
//! --in ─▶ RX thread(s): parse ─▶ Classifier (rules, tables, masks; one, shared)
//!          ─▶ global flow id ─▶ arbiter: PipeSet (one Pipe per link and instance,
//!             + a pass pipe) ─▶ dispatcher ─▶ --out
//! --out ─▶ RX thread(s) ─▶ --in          (unshaped, as `pspat shape`'s reverse thread)
//! ```
//!
//! While a rule names a direction or an interface (or always with
//! `--shape-reverse`), the RX threads of `--out` classify their frames too
//! and send them through the pipes, and every frame is classified in two
//! passes, as ipfw on a bridge; a live change turns it on or off
//! ([`bridged`]).
//!
//! The configuration file is read once (`.toml` is TOML, any other name
//! ipfw lines); an error is one line `file:line:col: message`, exit 2.
//! Each dummynet link (pipe or sched number) and each of its instances is
//! one [`Pipe`] in one [`PipeSet`], hosted by the runtime's arbiter; a
//! classifier `Pass` verdict (an `allow` rule or the default) and frames
//! that are not IP go to one more pipe (unlimited, no delay, FIFO), so they
//! flow and are counted. The arbiter wakes for every packet's exit time
//! (`wake_batch = 1`): exit-time precision matters more here than the cost
//! of wake-ups.
//!
//! Prints `run: ready ...` on stderr once the rings are open, a line a
//! second per active pipe (rate, queue, drops), stops on SIGINT, SIGTERM or
//! `--duration`, drains, and prints dummynet's `pipe show`-like table and
//! the rule counters, or one JSON object (`--json`, docs/JSON.md).
//!
//! While it runs, the configuration changes live: `pspat ctl` lines on the
//! control socket and SIGHUP reloads ([`control`]) are planned against the
//! running plan and applied by the arbiter between two scheduler calls
//! ([`live`]); `--metrics` serves the counters to Prometheus ([`metrics`]);
//! the log goes through `tracing`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use pspat_bridge::{
    Bridge, BridgeConfig, BridgeError, FlowCounters, Report, ReverseSwitch, Verdict,
};
use pspat_classify::{
    Classifier, ClassifierLimits, ClassifierStats, PacketDirection, PacketKey, Verdict as Decision,
};
use pspat_config::{
    parse_file_text, pipe_config, queue_config, sched_config, Action, Config, FsProfiles, Plan,
    Target,
};
use pspat_io::parse::{FlowKey, ParseError, ParseReason};
use pspat_sched::pipe::random::splitmix64;
use pspat_sched::pipe::{PipeConfig, PipeCounters, QueueConfig, QueueLimit};
use pspat_sched::{
    AlgKind, AnyScheduler, DropReason, FlowId, FlowTable, Packet, Pipe, PipeRoutes, PipeSet,
    Rejected, Scheduler, SchedulerConfig,
};

use crate::units::{self, human_rate};
use crate::usage;

mod bridged;
mod control;
mod live;
mod metrics;
mod qstats;

pub use control::{default_socket, MAX_REQUEST};

/// The link number of the pass pipe (above every dummynet number).
pub const PASS_LINK: u32 = u32::MAX;

/// Flags of `pspat run`.
#[derive(clap::Args, Debug)]
#[command(after_help = concat!(pspat_cli::units_help!(), "\n\nNeeds root or CAP_NET_RAW (not with --dry-run). See docs/RUN.md.\n\nExit codes: 0 success; 1 the run failed (an interface went away, an accounting check failed); 2 usage or configuration error (nothing started)."))]
pub struct Args {
    /// The configuration: a `.toml` file is TOML, any other file ipfw lines (docs/CONFIG.md).
    config: PathBuf,
    /// Interface to read and shape frames from (at most 15 bytes).
    #[arg(
        long = "in",
        value_name = "IF",
        allow_hyphen_values = true,
        required_unless_present = "dry_run"
    )]
    input: Option<String>,
    /// Interface to send shaped frames on (at most 15 bytes; not the same as --in).
    #[arg(
        long = "out",
        value_name = "IF",
        allow_hyphen_values = true,
        required_unless_present = "dry_run"
    )]
    output: Option<String>,
    /// Stop after this long (above 0, at most 10^6 s); runs until SIGINT or SIGTERM if not given.
    #[arg(long, value_parser = units::duration_arg, allow_hyphen_values = true)]
    duration: Option<Duration>,
    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// RX threads on --in, 1..=64. They share one classifier (behind a lock), so more threads
    /// add contention, not capacity.
    #[arg(long = "rx-threads", default_value_t = 1, allow_negative_numbers = true, value_parser = ranged::<1, 64>)]
    rx_threads: i64,
    /// Dispatcher threads, 0..=64 (0: the arbiter sends itself).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = ranged::<0, 64>)]
    dispatchers: i64,
    /// Frames per RX thread, a multiple of 64 in 64..=65536: every packet in a queue or a delay line holds one.
    #[arg(long, default_value_t = 4096, allow_negative_numbers = true, value_parser = ranged::<64, 65536>)]
    descriptors: i64,
    /// Dynamic queues per masked flowset (dummynet `mask` on a queue), 1..=65536.
    #[arg(long = "max-queues", default_value_t = 256, allow_negative_numbers = true, value_parser = ranged::<1, 65536>)]
    max_queues: i64,
    /// Instances per masked pipe or sched (each has its own link and delay line), 1..=4096.
    #[arg(long = "max-instances", default_value_t = 16, allow_negative_numbers = true, value_parser = ranged::<1, 4096>)]
    max_instances: i64,
    /// A dynamic queue or instance unused this long is reclaimed for other keys, and a key
    /// sent to an overflow queue takes a queue of its own only after this long away from it
    /// (1ms..=3600s).
    #[arg(long = "idle-expiry", value_name = "DURATION", default_value = "10s", value_parser = units::duration_arg, allow_hyphen_values = true)]
    idle_expiry: Duration,
    /// Flow ids reserved for pipes, scheds and queues added while it runs, 0..=65536 (each
    /// instance of a new link takes its flow count: 1 for a pipe, plus 1 per flowset, plus
    /// --max-queues per masked flowset). Default: 1024, or what the bridge has left.
    #[arg(long = "spare-flows", allow_negative_numbers = true, value_parser = ranged::<0, 65536>)]
    spare_flows: Option<i64>,
    /// Build the classifier and the pipes, print them, and exit without opening interfaces.
    #[arg(long = "dry-run")]
    dry_run: bool,
    /// The control socket `pspat ctl` talks to (mode 0600; default: /run/pspat/pspat.sock for
    /// root, else $XDG_RUNTIME_DIR/pspat.sock or /tmp/pspat-UID/pspat.sock).
    #[arg(long, value_name = "PATH", conflicts_with = "no_control")]
    control: Option<PathBuf>,
    /// Open no control socket (SIGHUP still reloads the file).
    #[arg(long = "no-control")]
    no_control: bool,
    /// Leave GRO and LRO as they are on --in and --out (default: off while
    /// running, back on at exit: a TCP stream otherwise arrives as
    /// aggregates above the MTU, dropped as too_long).
    #[arg(long = "keep-offloads")]
    keep_offloads: bool,
    /// Serve Prometheus metrics on GET /metrics at this address only (`127.0.0.1:9101`;
    /// port 0 picks a free port, printed as `run: metrics: http://ADDR/metrics`).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Shape the --out to --in direction too (two-pass classification, as ipfw on a bridge),
    /// always, even while no rule names a direction or an interface (while one does, it is
    /// on anyway).
    #[arg(long = "shape-reverse")]
    shape_reverse: bool,
}

/// A whole number in `LO..=HI`, for clap: the error names the range.
fn ranged<const LO: i64, const HI: i64>(text: &str) -> Result<i64, String> {
    match text.trim().parse::<i64>() {
        Ok(v) if (LO..=HI).contains(&v) => Ok(v),
        _ => Err(format!(
            "{} is not a whole number in {LO}..={HI}",
            units::quote(text)
        )),
    }
}

/// Reads, parses and validates `path`; refuses what the daemon cannot do.
fn load(path: &Path) -> anyhow::Result<(Config, Plan)> {
    let name = path.display().to_string();
    let text = pspat_config::read_text_file(path)
        .map_err(|e| usage(format!("{name}: cannot read the configuration: {e}")))?;
    let config = parse_file_text(&text, &name).map_err(|e| usage(e.to_string()))?;
    let loader = FsProfiles {
        base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    let plan = config.validate(&loader).map_err(|e| usage(e.to_string()))?;
    Ok((config, plan))
}

/// What one member of the set is, for the reports.
#[derive(Clone, Debug)]
struct LinkInfo {
    number: u32,
    kind: &'static str,
    alg: AlgKind,
    bw_bps: Option<u64>,
    delay_ns: u64,
    /// A pipe's own queue limit (a sched's queues are its flowsets').
    queue: Option<QueueLimit>,
    instances: u32,
    /// Deleted while the daemon ran: kept for the final report only.
    removed: bool,
    /// Its parameters beyond rate, delay and queue limit, as ipfw words
    /// (`burst`, framing, jitter, reordering, loss, RED, duplication,
    /// corruption: `run::live::link_extras`, `queue_extras`); empty when
    /// none.
    settings: String,
}

/// The classifier, the pipes and what the reports need to name them.
struct Built {
    classifier: Classifier,
    set: PipeSet<AnyScheduler>,
    routes: PipeRoutes,
    pass_flow: FlowId,
    links: Vec<LinkInfo>,
    max_delay_ns: u64,
}

/// The default of `--spare-flows`.
const DEFAULT_SPARE_FLOWS: u32 = 1024;

/// The pipes count every queue and hold its limit: the bridge keeps its
/// totals (one counter group) and no per-flow queue limit of its own.
const BRIDGE_COUNTERS: FlowCounters = FlowCounters::Groups(1);

/// One link's pipes (one per instance), built from a plan and its layout.
struct LinkBuild {
    pipes: Vec<(u32, Pipe<AnyScheduler>)>,
    flows: u32,
    info: LinkInfo,
    /// The longest a packet can stay in its delay line.
    span_ns: u64,
}

/// Builds the pipes of `link` (`None`: the plan has no such pipe or sched).
fn build_link(
    plan: &Plan,
    link: &pspat_classify::LinkLayout,
    capacity: usize,
) -> anyhow::Result<Option<LinkBuild>> {
    let (base, kind) = match plan.pipes.get(&link.number) {
        Some(p) => (pipe_config(p, plan.seed)?, "pipe"),
        None => match plan.scheds.get(&link.number) {
            Some(s) => (sched_config(s, plan.seed)?, "sched"),
            None => return Ok(None),
        },
    };
    let span_ns = base.delay_ns
        + base.jitter.as_ref().map_or(0, |j| j.ns.saturating_mul(4))
        + base
            .profile
            .as_ref()
            .and_then(|p| p.table_ns().iter().copied().max())
            .unwrap_or(0);
    let flows = link.flow_count();
    if flows == 0 {
        // Valid in the model (ipfw takes a sched before its queues), but
        // there is nothing to schedule: no rule can reach it.
        return Err(usage(format!(
            "{kind} {0} serves no queue; add 'queue N config sched {0}' in the same file or ctl line",
            link.number
        )));
    }
    let table = link.flow_table()?;
    // The configuration of every flow id: the pipe's own queue, then
    // each flowset's range.
    let mut ranges: Vec<(u32, u32, QueueConfig)> = Vec::new();
    for range in &link.ranges {
        let qc = match range.owner {
            pspat_classify::FlowOwner::Pipe(_) => base.queue,
            pspat_classify::FlowOwner::Queue(q) => match plan.queues.get(&q) {
                Some(qp) => queue_config(&qp.queue),
                None => continue,
            },
        };
        ranges.push((range.first.0, range.len(), qc));
    }
    // The configuration most ids share is every queue's default; the
    // others are set one by one (each `Pipe::set_queue` is linear in
    // the flows, so this keeps a large masked flowset linear).
    let default_queue = ranges
        .iter()
        .max_by_key(|r| r.1)
        .map_or(base.queue, |r| r.2);
    let mut pipes = Vec::with_capacity(link.instances as usize);
    // An fq_codel or fq_pie sched's or pipe's quantum (FQ's; other
    // algorithms ignore it).
    let fq = match plan.pipes.get(&link.number) {
        Some(p) => (p.fq_codel, p.fq_pie),
        None => plan
            .scheds
            .get(&link.number)
            .map_or((None, None), |s| (s.fq_codel, s.fq_pie)),
    };
    let fq_quantum = fq.0.map(|f| f.quantum).or(fq.1.map(|f| f.quantum));
    for instance in 0..link.instances {
        let mut sc = SchedulerConfig::new(link.alg);
        sc.capacity = capacity;
        if let Some(q) = fq_quantum {
            sc.fq_quantum = q;
        }
        sc.link_rate_bps = base.bw.map(|r| r.bps());
        let sched = sc.build(table.clone())?;
        let cfg = PipeConfig {
            seed: instance_seed(base.seed, instance),
            queue: default_queue,
            // CoDel's and PIE's enqueue times: one for each packet the
            // scheduler holds.
            held_capacity: capacity,
            ..base.clone()
        };
        let mut pipe = Pipe::new(cfg, sched, flows as usize)?;
        for (first, len, qc) in &ranges {
            if *qc != default_queue {
                for i in 0..*len {
                    pipe.set_queue(FlowId(first + i), *qc)?;
                }
            }
        }
        pipes.push((instance, pipe));
    }
    Ok(Some(LinkBuild {
        pipes,
        flows,
        info: LinkInfo {
            number: link.number,
            kind,
            alg: link.alg,
            bw_bps: base.bw.map(|r| r.bps()),
            delay_ns: base.delay_ns,
            queue: (kind == "pipe").then_some(base.queue.limit),
            instances: link.instances,
            removed: false,
            settings: String::new(),
        },
        span_ns,
    }))
}

/// Mixes an instance number into a link's seed (instance 0 keeps it).
fn instance_seed(seed: u64, instance: u32) -> u64 {
    if instance == 0 {
        return seed;
    }
    let mut s = seed ^ u64::from(instance);
    splitmix64(&mut s)
}

/// The classifier's limits for `plan`: `base` (the flags'), with the cap
/// of each flowset of an fq_codel sched at the sched's `flows`
/// ([`Plan::flowset_queue_caps`]) instead of `--max-queues`. Every
/// classifier of the daemon is built with these, at the start and for a
/// live change.
pub(crate) fn plan_limits(base: &ClassifierLimits, plan: &Plan) -> ClassifierLimits {
    ClassifierLimits {
        flowset_queues: plan.flowset_queue_caps(),
        ..base.clone()
    }
}

/// Builds the classifier and one pipe per link and instance, plus the pass
/// pipe; the classifier with [`plan_limits`].
fn build(
    plan: &Plan,
    limits: &ClassifierLimits,
    capacity: usize,
    spare: Option<u32>,
) -> anyhow::Result<Built> {
    let classifier = Classifier::from_plan(plan, &plan_limits(limits, plan))
        .map_err(|e| usage(e.to_string()))?;
    let mut set = PipeSet::new();
    let mut links = Vec::new();
    let mut max_delay_ns = 0u64;
    for link in &classifier.layout().links {
        let Some(lb) = build_link(plan, link, capacity)? else {
            continue;
        };
        max_delay_ns = max_delay_ns.max(lb.span_ns);
        for (instance, pipe) in lb.pipes {
            set.push(link.number, instance, pipe, lb.flows)?;
        }
        links.push(lb.info);
    }
    // The pass pipe: unlimited, no delay, FIFO, room for every descriptor.
    let pass_cfg = PipeConfig {
        queue: QueueConfig {
            limit: QueueLimit::Slots(capacity as u32),
            ..QueueConfig::default()
        },
        delay_line_capacity: 4096,
        ..PipeConfig::default()
    };
    let mut sc = SchedulerConfig::new(AlgKind::Fifo);
    sc.capacity = capacity;
    let pass = Pipe::new(pass_cfg, sc.build(FlowTable::uniform(1)?)?, 1)?;
    set.push(PASS_LINK, 0, pass, 1)?;
    links.push(LinkInfo {
        number: PASS_LINK,
        kind: "pass",
        alg: AlgKind::Fifo,
        bw_bps: None,
        delay_ns: 0,
        queue: Some(QueueLimit::Slots(capacity as u32)),
        instances: 1,
        removed: false,
        settings: String::new(),
    });
    if set.flows() > pspat_bridge::MAX_FLOWS {
        return Err(usage(format!(
            "{}: the configuration needs {} flow ids, more than the bridge's {}; lower --max-queues, --max-instances or the flows of an fq_codel sched",
            "run",
            set.flows(),
            pspat_bridge::MAX_FLOWS
        )));
    }
    let left = pspat_bridge::MAX_FLOWS - set.flows();
    let spare = match spare {
        None => DEFAULT_SPARE_FLOWS.min(left),
        Some(n) if n > left => {
            return Err(usage(format!(
                "--spare-flows {n}: the configuration uses {} of the bridge's {} flow ids, so at most {left} can be spare",
                set.flows(),
                pspat_bridge::MAX_FLOWS
            )))
        }
        Some(n) => n,
    };
    set.reserve(spare)?;
    let routes = set.routes();
    let pass_flow = routes
        .global(PASS_LINK, 0, FlowId(0))
        .ok_or_else(|| anyhow::anyhow!("run: the pass pipe has no flow id"))?;
    Ok(Built {
        classifier,
        set,
        routes,
        pass_flow,
        links,
        max_delay_ns,
    })
}

/// One member's counters as last published by the arbiter.
#[derive(Clone, Copy, Debug, Default)]
struct MemberSnap {
    link: u32,
    counters: PipeCounters,
    queued: usize,
    /// The final counters of a member taken out of the set: of a link
    /// deleted while the daemon ran (`true`), or replaced when its
    /// flowsets changed (`false`: they still count for the link).
    removed: bool,
}

/// The pipes' counters, published by the arbiter's thread.
type Snapshots = Arc<Mutex<Vec<MemberSnap>>>;

/// The longest an idle arbiter sleeps without a kick
/// ([`pspat::RuntimeConfig::idle_safety_wake_ns`]; the runtime's default is
/// 100 ms).
const IDLE_SAFETY_WAKE_NS: u64 = 1_000_000_000;

/// The longest the arbiter sleeps while the pipes hold packets (a long
/// delay line), so that the counters it publishes every 100 ms of its clock
/// (the progress lines read them) are never much older while packets wait;
/// a live change and a request for the rows wake it anyway
/// ([`live::Inbox::wake_on_submit`], [`qstats::Board::wake_on_request`]).
/// An idle arbiter parks for at most [`IDLE_SAFETY_WAKE_NS`].
const MAX_SLEEP_WHILE_HOLDING_NS: u64 = 50_000_000;

/// The [`PipeSet`] as the arbiter runs it: every call forwarded, the
/// counters copied out every 100 ms of the arbiter's clock, when the set
/// empties (at most once a millisecond), and when the runtime drops it at
/// the end (so the final copy is exact, the per-queue rows' too).
struct Observed {
    set: PipeSet<AnyScheduler>,
    out: Snapshots,
    /// Live changes, taken at the start of every `enqueue` and `dequeue`.
    inbox: Arc<live::Inbox>,
    /// The final counters of the members taken out of the set.
    gone: Vec<MemberSnap>,
    last: pspat_sched::Instant,
    next: pspat_sched::Instant,
    dirty: bool,
    /// Per-queue copies and sojourn times (run/qstats.rs).
    queues: Option<qstats::Recorder>,
    /// The bridge's frames, once it started: a rebuilt link's held
    /// packets are placed by their own keys (live.rs, `by_key`).
    frames: Arc<OnceLock<HeldFrames>>,
    /// The running classifier (shared with the RX threads), and the old
    /// ids of the links last rebuilt by key: a frame routed there before
    /// the classifier changed is placed by its own key as well.
    classifier: Option<Arc<Mutex<Classifier>>>,
    rerouted: Vec<Rerouted>,
}

/// A link rebuilt by key ([`live::LiveOp::Install`] with `by_key`): its
/// old members' ids and where its old ids' owners are now, until
/// [`REROUTE_NS`] after the change or the next change.
struct Rerouted {
    link: u32,
    /// `(instance, first global id, ids)` of each old member, by first id.
    old: Vec<(u32, u32, u32)>,
    moves: pspat_classify::LinkMoves,
    until: pspat_sched::Instant,
}

impl Rerouted {
    fn new(
        link: u32,
        mut old: Vec<(u32, u32, u32)>,
        moves: pspat_classify::LinkMoves,
        until: pspat_sched::Instant,
    ) -> Self {
        old.sort_unstable_by_key(|o| o.1);
        Rerouted {
            link,
            old,
            moves,
            until,
        }
    }

    /// The first global id of the old member `flow` belonged to, if any:
    /// O(log members), so a link of many instances costs a packet no walk.
    fn base_of(&self, flow: FlowId) -> Option<u32> {
        let k = self.old.partition_point(|o| o.1 <= flow.0).checked_sub(1)?;
        let (_, first, ids) = self.old[k];
        (flow.0 - first < ids).then_some(first)
    }

    /// Whether an old member's ids meet `first..first + ids`.
    fn overlaps(&self, first: u32, ids: u32) -> bool {
        self.old
            .iter()
            .any(|o| o.1 < first + ids && first < o.1 + o.2)
    }
}

/// How long frames routed to a rebuilt link's old ids are placed by key:
/// such a frame was classified before the change and waited at most a
/// few descriptors' time in its client's mailbox.
const REROUTE_NS: u64 = 1_000_000_000;

/// Reads the headers of a frame whose descriptor the arbiter's scheduler
/// holds: the bridge's frame `client · D + desc` (one egress interface;
/// [`Bridge::frames`]) for the runtime's token `client << 32 | desc`.
struct HeldFrames {
    arena: Arc<pspat_io::FrameArena>,
    per_client: usize,
    limits: pspat_io::parse::ParseLimits,
}

impl HeldFrames {
    /// The classifier's key of the packet `token` names, `None` when its
    /// frame cannot be read or parsed. Only for a packet the scheduler
    /// holds (its frame in flight): the frame is reclaimed, read and
    /// released again, so whoever takes the descriptor next finds it as
    /// it was.
    fn key_of(&self, token: u64) -> Option<PacketKey> {
        // A packet past its pipe's link may carry the pipe's marks, and an
        // ECN-capable one its bit.
        let token = token & !Packet::FLAG_BITS;
        let (client, desc) = ((token >> 32) as usize, (token as u32) as usize);
        if desc >= self.per_client {
            return None;
        }
        let index = u32::try_from(client.checked_mul(self.per_client)?.checked_add(desc)?).ok()?;
        let frame = self.arena.reclaim(index).ok()?;
        let key = self.arena.bytes(&frame).ok().and_then(|b| {
            let k = pspat_io::parse::parse_frame(b, &self.limits).ok()?;
            // A packet in flight, reread: the flags too, whatever the rules.
            Some(packet_key(b, &k, true))
        });
        if self.arena.release(frame).is_err() {
            // Never expected (the frame came from this arena): the token
            // is dropped, so the frame stays owned, and its descriptor's
            // next holder finds it missing and counts it.
            tracing::error!(target: "pspat::run", "frame {index} could not be released after reading it");
            return None;
        }
        key
    }
}

impl Observed {
    fn new(set: PipeSet<AnyScheduler>, out: Snapshots, inbox: Arc<live::Inbox>) -> Self {
        let mut o = Observed {
            set,
            out,
            inbox,
            gone: Vec::new(),
            last: pspat_sched::Instant::ZERO,
            next: pspat_sched::Instant::ZERO,
            dirty: true,
            queues: None,
            frames: Arc::default(),
            classifier: None,
            rerouted: Vec::new(),
        };
        o.publish();
        o
    }

    /// Reads held packets' frames through `frames` once it is set, and
    /// places frames routed to a rebuilt link's old ids by their keys in
    /// `classifier` (the running one).
    fn with_frames(
        mut self,
        frames: Arc<OnceLock<HeldFrames>>,
        classifier: Arc<Mutex<Classifier>>,
    ) -> Self {
        self.frames = frames;
        self.classifier = Some(classifier);
        self
    }

    /// The flow a frame routed to an old id of a link rebuilt by key goes
    /// to now: the instance and queue its own key has in the running
    /// classifier (which the control side replaced, under the lock this
    /// waits for, right after the rebuild). `None`: it stays as routed
    /// (the set sends it to the old queue's heir).
    fn reroute(&mut self, now: pspat_sched::Instant, pkt: &Packet) -> Option<FlowId> {
        if self.rerouted.iter().any(|r| now > r.until) {
            self.rerouted.retain(|r| now <= r.until);
        }
        let (r, base) = self
            .rerouted
            .iter()
            .find_map(|r| r.base_of(pkt.flow).map(|b| (r, b)))?;
        let key = self.frames.get()?.key_of(pkt.token)?;
        let placed = self.classifier.as_ref()?.lock().ok()?.place_carried(
            &r.moves,
            FlowId(pkt.flow.0 - base),
            &key,
        );
        let (i, f) = placed?;
        self.set.global(r.link, i, f)
    }

    /// Also answers per-queue requests and measures sojourn times.
    fn with_queues(mut self, recorder: qstats::Recorder) -> Self {
        self.queues = Some(recorder);
        self
    }

    fn publish(&mut self) {
        let snaps = self.set.members().map(|(link, _, _, p)| MemberSnap {
            link,
            counters: *p.pipe().counters(),
            // In the queues, on the link or in the delay line.
            queued: p.pipe().held() as usize,
            removed: false,
        });
        if let Ok(mut out) = self.out.lock() {
            out.clear();
            out.extend(snaps);
            out.extend(self.gone.iter().copied());
        }
        if let Some(q) = &self.queues {
            q.publish();
        }
        self.dirty = false;
    }

    /// Applies the changes waiting in the inbox (between two calls of the
    /// runtime, so never inside a packet's handling) and answers them.
    fn take_changes(&mut self, now: pspat_sched::Instant) {
        for (id, ops) in self.inbox.take() {
            // A change ends the rerouting of the ids it may reuse; the
            // links it rebuilds by key start theirs.
            let mut started = Vec::new();
            for op in &ops {
                if let live::LiveOp::Install {
                    link,
                    members,
                    by_key,
                    moves,
                    ..
                } = op
                {
                    self.rerouted.retain(|r| {
                        r.link != *link && !members.iter().any(|m| r.overlaps(m.base, m.flows))
                    });
                    if let (Some(_), Some(m)) = (by_key, moves) {
                        started.push(Rerouted::new(
                            *link,
                            self.set
                                .members()
                                .filter(|x| x.0 == *link)
                                .map(|x| (x.1, x.2, x.3.pipe().all_flow_counters().len() as u32))
                                .collect(),
                            m.clone(),
                            now.saturating_add_nanos(REROUTE_NS),
                        ));
                    }
                }
                if let live::LiveOp::Remove { link } = op {
                    self.rerouted.retain(|r| r.link != *link);
                }
            }
            let mut gone = Vec::new();
            let frames = self.frames.get();
            let r = live::apply_keyed(&mut self.set, now, ops, &mut gone, &mut |t| {
                frames.and_then(|f| f.key_of(t))
            });
            if r.is_ok() {
                self.rerouted.extend(started);
            }
            for g in gone {
                if g.removed {
                    // Earlier parts of a deleted link are deleted with it.
                    for old in self.gone.iter_mut().filter(|o| o.link == g.link) {
                        old.removed = true;
                    }
                }
                self.gone.push(MemberSnap {
                    link: g.link,
                    counters: g.counters,
                    queued: 0,
                    removed: g.removed,
                });
            }
            if let Some(q) = &mut self.queues {
                q.touched();
            }
            self.publish();
            self.inbox.answer(id, r);
        }
        // The pipes' totals first, so a reader of the rows finds totals at
        // least as new (`pipe show` reads them after the rows).
        if self
            .queues
            .as_ref()
            .is_some_and(qstats::Recorder::requested)
        {
            self.publish();
        }
        if let Some(q) = &mut self.queues {
            q.poll(now.as_nanos(), &self.set);
        }
    }

    fn after(&mut self, now: pspat_sched::Instant) {
        self.dirty = true;
        self.last = self.last.max(now);
        if now >= self.next || self.set.is_empty() {
            self.publish();
            let step = if self.set.is_empty() {
                1_000_000
            } else {
                100_000_000
            };
            self.next = now.saturating_add_nanos(step);
        }
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if let Some(q) = &mut self.queues {
            q.finish(self.last.as_nanos(), &self.set);
        }
        self.publish();
    }
}

impl Scheduler for Observed {
    fn enqueue(&mut self, now: pspat_sched::Instant, mut pkt: Packet) -> Result<(), Rejected> {
        self.take_changes(now);
        if !self.rerouted.is_empty() {
            if let Some(f) = self.reroute(now, &pkt) {
                pkt.flow = f;
            }
        }
        if let Some(q) = &mut self.queues {
            q.touched();
        }
        let r = self.set.enqueue(now, pkt);
        if let (Ok(()), Some(q)) = (&r, &mut self.queues) {
            q.entered(now.as_nanos(), pkt.token);
        }
        self.after(now);
        r
    }

    fn dequeue(&mut self, now: pspat_sched::Instant) -> Option<Packet> {
        self.take_changes(now);
        let p = self.set.dequeue(now);
        if let Some(q) = &mut self.queues {
            if let Some(pkt) = &p {
                q.left(now.as_nanos(), pkt, &self.set);
            }
            if self.set.is_empty() {
                q.emptied(now.as_nanos(), &self.set);
            }
        }
        if p.is_some() || self.dirty {
            self.after(now);
        }
        p
    }

    fn queued(&self) -> usize {
        self.set.queued()
    }

    /// The pipes' next exit or link event, but at most [`MAX_SLEEP_WHILE_HOLDING_NS`]
    /// ahead: the arbiter sleeps until then or until woken (an early
    /// wake-up finds nothing due and sleeps again; no exit time moves).
    fn next_eligible(&self, now: pspat_sched::Instant) -> Option<pspat_sched::Instant> {
        self.set
            .next_eligible(now)
            .map(|t| t.min(now.saturating_add_nanos(MAX_SLEEP_WHILE_HOLDING_NS)))
    }

    fn name(&self) -> &'static str {
        self.set.name()
    }

    fn add_flow(
        &mut self,
        flow: FlowId,
        params: pspat_sched::FlowParams,
    ) -> Result<(), pspat_sched::FlowError> {
        self.set.add_flow(flow, params)
    }

    fn change_flow(
        &mut self,
        flow: FlowId,
        params: pspat_sched::FlowParams,
    ) -> Result<(), pspat_sched::FlowError> {
        self.set.change_flow(flow, params)
    }

    fn remove_flow(
        &mut self,
        flow: FlowId,
        purge: &mut dyn FnMut(Rejected),
    ) -> Result<(), pspat_sched::FlowError> {
        let r = self.set.remove_flow(flow, purge);
        self.dirty = true;
        r
    }

    fn flow_queued(&self, flow: FlowId) -> Option<usize> {
        self.set.flow_queued(flow)
    }

    fn take_late_drops(&mut self, out: &mut dyn FnMut(Rejected)) {
        self.set.take_late_drops(out);
    }

    fn counts_from_arrival(&self) -> bool {
        self.set.counts_from_arrival()
    }
}

/// One pipe (all its instances) in the final report.
#[derive(serde::Serialize, Clone, Debug, Default)]
struct PipeJson {
    number: Option<u32>,
    kind: &'static str,
    alg: String,
    bw_bps: Option<u64>,
    delay_ns: u64,
    queue_limit: String,
    instances: u32,
    /// Its parameters beyond rate, delay and queue limit, as ipfw words
    /// (empty when none).
    settings: String,
    in_packets: u64,
    in_bytes: u64,
    out_packets: u64,
    out_bytes: u64,
    /// Copies sent after their original (`duplicate`), not in `out_*`.
    duplicates: u64,
    /// Packets marked to leave with one bit flipped (`corrupt`), once
    /// each: they are in `out_*` (a duplicated one's copy carries the same
    /// bit).
    corrupted: u64,
    /// Packets sent ahead of the delay (`reorder P`, tc-netem's); in
    /// `out_*`.
    reordered: u64,
    /// Packets RED marked Congestion Experienced instead of dropping them
    /// (`ecn`); they go on as any packet.
    marked: u64,
    dropped: BTreeMap<&'static str, u64>,
    dropped_total: u64,
    queued: u64,
    /// Deleted while the daemon ran (only in the final report).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    removed: bool,
}

#[derive(serde::Serialize, Clone, Debug)]
struct RuleJson {
    number: Option<u32>,
    action: String,
    /// The rule as an ipfw line (`add 100 pipe 1 udp from any to any
    /// dst-port 9`); the default action as `action`.
    rule: String,
    /// The rule's `//` comment, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
    packets: u64,
    bytes: u64,
}

#[derive(serde::Serialize, Clone, Debug, Default)]
struct ClassifierJson {
    packets: u64,
    enqueued: u64,
    passed: u64,
    dropped: BTreeMap<&'static str, u64>,
    not_ip_passed: u64,
}

#[derive(serde::Serialize, Clone, Debug)]
struct TotalsJson {
    received: u64,
    received_bytes: u64,
    transmitted: u64,
    transmitted_bytes: u64,
    /// Copies of duplicated packets: `received + duplicated = transmitted +
    /// dropped_total + in_flight`.
    duplicated: u64,
    /// Packets the transmitters sent (or dropped) with one bit flipped, once
    /// each: not in the accounting sum (they are in `transmitted` or
    /// `dropped`).
    corrupted: u64,
    /// Packets a pipe's RED marked Congestion Experienced whose IP header
    /// the transmitters set to CE, once each; not in the accounting sum.
    ce_marked: u64,
    /// Packets marked that the transmitters found no ECN-capable IP header
    /// in (never expected), sent as they came.
    ce_unmarkable: u64,
    dropped: BTreeMap<String, u64>,
    dropped_total: u64,
    in_flight: u64,
    not_received: u64,
    conserved: bool,
    pipes_conserved: bool,
}

/// How `pspat run` says an offload note: in its log.
fn run_note(note: crate::offload_guard::Note) {
    match note {
        crate::offload_guard::Note::Done(line) => tracing::info!(target: "pspat::run", "{line}"),
        crate::offload_guard::Note::Warning(line) => tracing::warn!(target: "pspat::run", "{line}"),
    }
}

/// `pspat run --json` (docs/JSON.md).
#[derive(serde::Serialize)]
struct RunJson<'a> {
    schema_version: u32,
    command: &'static str,
    config: String,
    input: &'a str,
    output: &'a str,
    elapsed_s: f64,
    /// Pipe objects with their per-queue rows (`control::pipes_with_queues`).
    pipes: Vec<serde_json::Value>,
    rules: Vec<RuleJson>,
    classifier: ClassifierJson,
    totals: TotalsJson,
    reverse: &'a pspat_bridge::ReverseReport,
    /// Receive aggregation turned off while running and back on at exit.
    offloads: &'a [pspat_bridge::OffloadReport],
    offload_warnings: &'a [String],
    error: Option<String>,
}

/// `pspat run --dry-run --json` (docs/JSON.md): what a start would build.
#[derive(serde::Serialize)]
struct DryRunJson {
    schema_version: u32,
    command: &'static str,
    dry_run: bool,
    config: String,
    /// Pipes built: every instance of every link, and the pass pipe.
    pipe_count: usize,
    /// Flow ids the links' schedulers are built over.
    flow_ids: u64,
    /// Pipe objects, every count 0.
    pipes: Vec<PipeJson>,
    /// Rule objects, every count 0.
    rules: Vec<RuleJson>,
}

fn limit_text(q: QueueLimit) -> String {
    match q {
        QueueLimit::Slots(n) => format!("{n} sl."),
        QueueLimit::Bytes(b) if b % 1024 == 0 => format!("{} KB", b / 1024),
        QueueLimit::Bytes(b) => format!("{b} B"),
    }
}

fn pipes_json(links: &[LinkInfo], snaps: &[MemberSnap]) -> Vec<PipeJson> {
    links
        .iter()
        .map(|l| {
            let mut p = PipeJson {
                number: (l.number != PASS_LINK).then_some(l.number),
                kind: l.kind,
                alg: l.alg.to_string(),
                bw_bps: l.bw_bps,
                delay_ns: l.delay_ns,
                queue_limit: l.queue.map_or_else(|| "-".into(), limit_text),
                instances: l.instances,
                removed: l.removed,
                settings: l.settings.clone(),
                ..PipeJson::default()
            };
            for s in snaps
                .iter()
                .filter(|s| s.link == l.number && s.removed == l.removed)
            {
                let c = &s.counters;
                p.in_packets += c.in_packets;
                p.in_bytes += c.in_bytes;
                p.out_packets += c.out_packets;
                p.out_bytes += c.out_bytes;
                p.duplicates += c.duplicates;
                p.corrupted += c.corrupted;
                p.reordered += c.reordered;
                p.marked += c.marked;
                for r in DropReason::ALL {
                    let n = c.dropped(r);
                    if n > 0 {
                        *p.dropped.entry(r.as_str()).or_default() += n;
                    }
                }
                p.dropped_total += c.dropped_total();
                p.queued += s.queued as u64;
            }
            p
        })
        .collect()
}

fn action_text(a: &Action) -> String {
    let target = |t: &Target| match t {
        Target::Number(n) => n.to_string(),
        Target::Tablearg => "tablearg".into(),
    };
    match a {
        Action::Pipe(t) => format!("pipe {}", target(t)),
        Action::Queue(t) => format!("queue {}", target(t)),
        Action::Allow => "allow".into(),
        Action::Deny => "deny".into(),
    }
}

fn rules_json(plan: &Plan, c: &Classifier) -> Vec<RuleJson> {
    let mut rules: Vec<RuleJson> = c
        .rule_counters()
        .map(|(n, rc)| {
            let rule = plan.rules.get(&n);
            RuleJson {
                number: Some(n),
                action: rule.map_or_else(|| "?".into(), |r| action_text(&r.action)),
                rule: rule.map_or_else(|| "?".into(), control::rule_text),
                comment: rule.and_then(|r| r.comment.clone()),
                packets: rc.packets,
                bytes: rc.bytes,
            }
        })
        .collect();
    let d = c.default_counters();
    let default = format!("default {:?}", plan.default_action).to_lowercase();
    rules.push(RuleJson {
        number: None,
        action: default.clone(),
        rule: default,
        comment: None,
        packets: d.packets,
        bytes: d.bytes,
    });
    rules
}

fn classifier_json(s: &ClassifierStats, not_ip: u64) -> ClassifierJson {
    let mut dropped = BTreeMap::new();
    for r in pspat_classify::DropReason::ALL {
        let n = s.dropped[r.index()];
        if n > 0 {
            dropped.insert(r.counter_name(), n);
        }
    }
    ClassifierJson {
        packets: s.packets,
        enqueued: s.enqueued,
        passed: s.passed,
        dropped,
        not_ip_passed: not_ip,
    }
}

fn reasons<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn rate_text(bw: Option<u64>) -> String {
    match bw {
        None => "unlimited".into(),
        Some(b) if b >= 1_000_000 => format!("{:7.3} Mbit/s", b as f64 / 1e6),
        Some(b) if b >= 1_000 => format!("{:7.3} Kbit/s", b as f64 / 1e3),
        Some(b) => format!("{b} bit/s"),
    }
}

fn pipe_table(out: &mut impl Write, pipes: &[PipeJson]) -> std::io::Result<()> {
    for p in pipes {
        let name = p.number.map_or("pass ".into(), |n| format!("{n:05}"));
        writeln!(
            out,
            "{name}: {} {:4} ms  {} {} {} instance(s) {}{}",
            rate_text(p.bw_bps),
            p.delay_ns / 1_000_000,
            p.kind,
            p.alg,
            p.instances,
            p.queue_limit,
            if p.removed { " (deleted)" } else { "" }
        )?;
        if !p.settings.is_empty() {
            writeln!(out, "       {}", p.settings)?;
        }
        writeln!(
            out,
            "       in {} pkt {} B  out {} pkt {} B  queued {}  dropped {} ({})",
            p.in_packets,
            p.in_bytes,
            p.out_packets,
            p.out_bytes,
            p.queued,
            p.dropped_total,
            reasons(&p.dropped)
        )?;
        if p.duplicates > 0 {
            writeln!(out, "       duplicated {} pkt", p.duplicates)?;
        }
        if p.corrupted > 0 {
            writeln!(out, "       corrupted {} pkt", p.corrupted)?;
        }
        if p.reordered > 0 {
            writeln!(out, "       sent ahead of the delay {} pkt", p.reordered)?;
        }
        if p.marked > 0 {
            writeln!(out, "       marked CE {} pkt", p.marked)?;
        }
    }
    Ok(())
}

fn progress(elapsed: f64, dt: f64, prev: &[PipeJson], now: &[PipeJson]) -> String {
    let mut line = format!("run: {elapsed:6.1} s");
    for n in now.iter().filter(|n| !n.removed) {
        // A pipe added since the last line starts from zero.
        let zero = PipeJson::default();
        let p = prev
            .iter()
            .find(|p| p.number == n.number && !p.removed)
            .unwrap_or(&zero);
        if n.in_packets == p.in_packets && n.queued == 0 {
            continue;
        }
        let name = n.number.map_or("pass".into(), |x| x.to_string());
        line.push_str(&format!(
            " | {} {} q{} d{}",
            name,
            human_rate(n.out_bytes.saturating_sub(p.out_bytes) as f64 * 8.0 / dt.max(1e-9)),
            n.queued,
            n.dropped_total.saturating_sub(p.dropped_total)
        ));
    }
    line
}

fn check_interface(flag: &str, name: &str) -> anyhow::Result<()> {
    let max = pspat_io::error::MAX_INTERFACE_NAME;
    if name.is_empty() || name.len() > max {
        return Err(usage(format!(
            "{flag}: interface name {} must be 1..={max} bytes, got {}",
            units::quote(name),
            name.len()
        )));
    }
    Ok(())
}

/// The interface indexes the classifier binds the names to. Only equality
/// between a rule's binding and a packet's index matters, so the daemon
/// numbers its two interfaces itself (a process in another network
/// namespace than its `/sys` mount cannot read the kernel's indexes there).
const INPUT_INDEX: u32 = 1;
const OUTPUT_INDEX: u32 = 2;

/// Where each link's ids are in the [`PipeSet`], as the RX threads read
/// them: the control thread replaces the routes when a pipe is added or
/// deleted, and each RX thread copies them again when the generation
/// moved (one Acquire load per frame otherwise).
#[derive(Debug, Default)]
pub struct SharedRoutes {
    routes: Mutex<PipeRoutes>,
    /// Raised with Release after `routes` changed (pairs with the Acquire
    /// load in [`SharedRoutes::refresh`]).
    generation: AtomicU64,
}

impl SharedRoutes {
    fn new(routes: PipeRoutes) -> Self {
        SharedRoutes {
            routes: Mutex::new(routes),
            generation: AtomicU64::new(0),
        }
    }

    /// The routes now.
    pub fn get(&self) -> PipeRoutes {
        self.routes.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Replaces the routes.
    pub fn set(&self, routes: PipeRoutes) {
        if let Ok(mut r) = self.routes.lock() {
            *r = routes;
        }
        // Release: pairs with the Acquire load in `refresh`.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Copies the routes into `copy` if they changed since `seen`.
    fn refresh(&self, copy: &mut PipeRoutes, seen: &mut u64) {
        // Acquire: pairs with the Release increment in `set`.
        let g = self.generation.load(Ordering::Acquire);
        if g != *seen {
            if let Ok(r) = self.routes.lock() {
                copy.clone_from(&r);
            }
            *seen = g;
        }
    }
}

/// One RX thread's classifier: maps the bridge's view of a frame to the
/// classifier's (direction in, the input's ifindex) and the verdict to a
/// global flow id of the [`PipeSet`].
struct RxClassifier {
    classifier: Arc<Mutex<Classifier>>,
    /// The routes, shared with the control thread, and this thread's copy.
    shared: Arc<SharedRoutes>,
    routes: PipeRoutes,
    generation: u64,
    pass: FlowId,
    not_ip: Arc<AtomicU64>,
    start: Instant,
    ifindex: u32,
    /// With a shaped reverse direction: the interface the frame leaves by;
    /// each frame is then classified in two passes (`in` on `ifindex`,
    /// `out` on this one: [`Classifier::classify_bridged`]).
    egress: Option<u32>,
    /// A forward RX thread's view of a reverse direction shaped live: two
    /// passes while it is shaped, one while not (read under the
    /// classifier's lock, under which the control thread turns it).
    /// `None`: `egress` alone decides.
    switch: Option<ReverseSwitch>,
    /// Whether the classifier last seen under its lock had rules testing
    /// TCP flags ([`Classifier::reads_tcp_flags`]): they are then read
    /// before the lock is taken, so that a second walk over the headers
    /// does not lengthen the time it is held.
    reads_tcp_flags: bool,
}

impl pspat_bridge::Classifier for RxClassifier {
    fn classify(&mut self, frame: &[u8], key: Result<&FlowKey, &ParseError>) -> Verdict {
        let key = match key {
            Ok(k) => k,
            Err(e) if e.reason == ParseReason::NonIp => {
                // ARP and other non-IP frames: forwarded unshaped, counted.
                // Relaxed: a statistic read after the threads are joined.
                self.not_ip.fetch_add(1, Ordering::Relaxed);
                return Verdict::Flow(self.pass);
            }
            Err(e) => return Verdict::Unparsed(e.reason),
        };
        let mut pk = packet_key(frame, key, self.reads_tcp_flags);
        pk.ifindex = self.ifindex;
        pk.direction = PacketDirection::In;
        let now = pspat_sched::Instant::from_nanos(self.start.elapsed().as_nanos() as u64);
        let len = frame.len() as u32;
        let decision = match self.classifier.lock() {
            Ok(mut c) => {
                // Under the classifier's lock: the control thread replaces
                // the routes and the classifier together under it, so a
                // verdict is always mapped by the routes of its classifier.
                self.shared.refresh(&mut self.routes, &mut self.generation);
                // A classifier just replaced may test the flags where the
                // last did not: read them here this once.
                if c.reads_tcp_flags() != self.reads_tcp_flags {
                    self.reads_tcp_flags = c.reads_tcp_flags();
                    if self.reads_tcp_flags {
                        pk.tcp_flags = pspat_io::parse::tcp_flags_parsed(frame, key);
                    }
                }
                let two_pass = self.switch.as_ref().is_none_or(ReverseSwitch::shaped);
                match self.egress {
                    Some(egress) if two_pass => {
                        c.classify_bridged(now, &pk, self.ifindex, egress, len)
                    }
                    _ => c.classify(now, &pk, len),
                }
            }
            Err(_) => return Verdict::Filtered,
        };
        match decision {
            Decision::Enqueue(p) => self
                .routes
                .global(p.link, p.instance, p.flow)
                .map_or(Verdict::Filtered, Verdict::Flow),
            Decision::Pass => Verdict::Flow(self.pass),
            Decision::Drop(_) => Verdict::Filtered,
        }
    }
}

/// The classifier's key of `frame`, which [`pspat_io::parse::parse_frame`]
/// read as `k`: its flow key's fields, code point and IP length, and its
/// TCP flags when `tcp_flags` (otherwise 0); received on no interface yet.
fn packet_key(frame: &[u8], k: &FlowKey, tcp_flags: bool) -> PacketKey {
    let mut key = PacketKey::new(k.src, k.dst, k.protocol, k.src_port, k.dst_port);
    key.dscp = pspat_io::parse::dscp_parsed(frame, k);
    key.ip_len = pspat_io::parse::ip_len_parsed(frame, k);
    if tcp_flags {
        key.tcp_flags = pspat_io::parse::tcp_flags_parsed(frame, k);
    }
    key
}

/// How the reverse direction ran: `shaped` or `unshaped` at the end, and
/// with toggles, how many and the frames forwarded unshaped.
fn reverse_mode(r: &pspat_bridge::ReverseReport) -> String {
    let now = if r.shaped { "shaped" } else { "unshaped" };
    match r.toggles {
        0 => now.to_string(),
        n => format!(
            "{now} at the end, {n} toggle(s), {} frame(s) forwarded unshaped",
            r.received_unshaped
        ),
    }
}

/// Logs through `tracing` on stderr, filtered by `RUST_LOG` (default
/// `info`); a second call (tests) keeps the first subscriber.
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .try_init();
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (config, plan) = load(&args.config)?;
    let rx_threads = args.rx_threads as usize;
    let descriptors = args.descriptors as usize;
    if !descriptors.is_multiple_of(64) {
        return Err(usage(format!(
            "--descriptors must be a multiple of 64 in 64..=65536, got {descriptors}"
        )));
    }
    if let Some(d) = args.duration {
        units::check_duration("--duration", d, units::FORWARDING_RUN).map_err(usage)?;
    }
    units::check_duration(
        "--idle-expiry",
        args.idle_expiry,
        Duration::from_millis(1)..=Duration::from_secs(3600),
    )
    .map_err(usage)?;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let limits = ClassifierLimits {
        queues_per_flowset: args.max_queues as u32,
        instances_per_sched: args.max_instances as u32,
        idle_expiry_ns: args.idle_expiry.as_nanos() as u64,
        hash_seed: seed,
        ..ClassifierLimits::default()
    };
    // The reverse direction's RX threads are always runtime clients; they
    // shape while a rule names a direction or an interface (or always,
    // with --shape-reverse), else forward unshaped ([`bridged`]).
    let shape_reverse = bridged::shaped(args.shape_reverse, &plan);
    let switch = (!args.shape_reverse).then(|| ReverseSwitch::new(shape_reverse));
    // Every descriptor of both directions fits every pipe.
    let capacity = descriptors * rx_threads * 2;
    let spare = args.spare_flows.map(|n| n as u32);
    // Two different interfaces, checked before a dry run too (which opens
    // neither), so that it says what a real start would.
    if let (Some(input), Some(output)) = (&args.input, &args.output) {
        if input == output {
            return Err(usage(format!(
                "--out: {} is also --in: the bridge needs two different interfaces",
                units::quote(output)
            )));
        }
    }
    let mut built = build(&plan, &limits, capacity, spare)?;
    control::refresh_links(&mut built.links, &plan);
    if args.dry_run {
        let snaps: Vec<MemberSnap> = built
            .set
            .members()
            .map(|(link, _, _, _)| MemberSnap {
                link,
                ..MemberSnap::default()
            })
            .collect();
        let pipes = pipes_json(&built.links, &snaps);
        let mut out = std::io::stdout().lock();
        if args.json {
            let doc = DryRunJson {
                schema_version: crate::SCHEMA_VERSION,
                command: "run",
                dry_run: true,
                config: args.config.display().to_string(),
                pipe_count: built.set.pipe_count(),
                flow_ids: built.routes.used(),
                pipes,
                rules: rules_json(&plan, &built.classifier),
            };
            serde_json::to_writer_pretty(&mut out, &doc)?;
            writeln!(out)?;
            return Ok(ExitCode::SUCCESS);
        }
        writeln!(
            out,
            "run: {}: {} pipe(s) and instance(s), {} flow ids, {} rule(s)",
            args.config.display(),
            built.set.pipe_count(),
            built.routes.used(),
            plan.rules.len()
        )?;
        pipe_table(&mut out, &pipes)?;
        return Ok(ExitCode::SUCCESS);
    }
    let input = args.input.clone().unwrap_or_default();
    let output = args.output.clone().unwrap_or_default();
    check_interface("--in", &input)?;
    check_interface("--out", &output)?;
    built.classifier.bind_interface(&output, OUTPUT_INDEX);
    built.classifier.bind_interface(&input, INPUT_INDEX);
    let mut cfg = BridgeConfig::new(input.clone(), output.clone());
    cfg.rx_threads = rx_threads;
    cfg.dispatchers = args.dispatchers as usize;
    cfg.descriptors = descriptors;
    cfg.flows = built.set.flows();
    cfg.flow_counters = BRIDGE_COUNTERS;
    cfg.rate_bps = None;
    cfg.drain = Duration::from_secs(1) + Duration::from_nanos(built.max_delay_ns);
    cfg.shape_reverse = true;
    cfg.reverse_switch = switch.clone();
    cfg.receive_offloads_off = !args.keep_offloads;
    // The bits `corrupt` flips replay with the configuration's seed (a
    // live `seed` change moves them to the new one, as it does the pipes).
    cfg.corrupt_seed = plan.seed;
    cfg.validate().map_err(|e| usage(format!("{e}")))?;

    init_logs();
    // An explicit --control that cannot be opened is an error; the default
    // one (another daemon may hold it) only a warning: that run has none.
    // `socket` removes the file when dropped: on every early return below
    // (a failed start leaves no socket behind) and at the end of the run.
    let (socket, listener) = match (&args.control, args.no_control) {
        (_, true) => (None, None),
        (Some(p), false) => {
            let (l, file) = control::listen(p, control::SocketDir::Given)?;
            (Some(file), Some(l))
        }
        (None, false) => {
            let p = default_socket();
            match control::listen(&p, control::SocketDir::Default) {
                Ok((l, file)) => (Some(file), Some(l)),
                Err(e) => {
                    tracing::warn!(target: "pspat::run", "no control socket: {e:#} (give --control PATH)");
                    (None, None)
                }
            }
        }
    };
    let metrics_listener = args.metrics.map(metrics::listen).transpose()?;
    let term = Arc::new(AtomicBool::new(false));
    let stop_bell = crate::supervise::stop_signals(&term)
        .map_err(|e| anyhow::anyhow!("cannot install the signal handler: {e}"))?;
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))
        .map_err(|e| anyhow::anyhow!("cannot install the SIGHUP handler: {e}"))?;
    let snaps: Snapshots = Arc::new(Mutex::new(Vec::new()));
    let routes = built.routes.clone();
    let pass = built.pass_flow;
    let classifier = Arc::new(Mutex::new(built.classifier));
    let not_ip = Arc::new(AtomicU64::new(0));
    let inbox = Arc::new(live::Inbox::default());
    let shared_routes = Arc::new(SharedRoutes::new(routes.clone()));
    let board = Arc::new(qstats::Board::default());
    let frames: Arc<OnceLock<HeldFrames>> = Arc::default();
    let sched = Observed::new(built.set, Arc::clone(&snaps), Arc::clone(&inbox))
        .with_queues(
            // A shaped reverse direction's RX threads are clients too
            // (rx_threads..2 * rx_threads).
            qstats::Recorder::new(Arc::clone(&board), rx_threads * 2, descriptors),
        )
        .with_frames(Arc::clone(&frames), Arc::clone(&classifier));
    let mut config = config;
    control::pin_rule_numbers(&mut config);
    let live = Arc::new(control::Live {
        file: args.config.clone(),
        running: Mutex::new(control::Running {
            config,
            plan: plan.clone(),
        }),
        limits: limits.clone(),
        classifier: Arc::clone(&classifier),
        retired: Mutex::default(),
        links: Mutex::new(built.links.clone()),
        snaps: Arc::clone(&snaps),
        inbox,
        routes: Arc::clone(&shared_routes),
        total_flows: cfg.flows,
        capacity,
        not_ip: Arc::clone(&not_ip),
        input: input.clone(),
        output: output.clone(),
        queues: board,
        bridge: Mutex::default(),
        reverse: switch.clone(),
    });
    let links = || live.links.lock().map(|l| l.clone()).unwrap_or_default();
    let start = Instant::now();
    // RX threads rx_threads.. read --out (the shaped reverse direction).
    let make = |k: usize| {
        let (ingress, egress) = bridged::interfaces(k, rx_threads, INPUT_INDEX, OUTPUT_INDEX);
        RxClassifier {
            classifier: Arc::clone(&classifier),
            shared: Arc::clone(&shared_routes),
            routes: routes.clone(),
            generation: 0,
            pass,
            not_ip: Arc::clone(&not_ip),
            start,
            ifindex: ingress,
            egress: Some(egress),
            // The reverse RX threads classify only while it is shaped, and
            // always in two passes.
            switch: if k < rx_threads { switch.clone() } else { None },
            reads_tcp_flags: false,
        }
    };
    let bridge = Bridge::start_custom(
        cfg.clone(),
        sched,
        |rt: &mut pspat::RuntimeConfig| {
            rt.wake_batch = 1;
            // Changes and requests for the rows wake the arbiter
            // (`Arbiters`), as packets and shutdown do: an idle one needs
            // no more than a rare safety wake-up.
            rt.idle_safety_wake_ns = IDLE_SAFETY_WAKE_NS;
        },
        make,
    )
    .map_err(|e| match e {
        BridgeError::Interface { role, source, .. } if e.is_usage() => {
            let flag = if role == "input" { "--in" } else { "--out" };
            usage(format!("{flag}: {source}"))
        }
        e if e.is_usage() => usage(e.to_string()),
        e => anyhow::anyhow!("run: {e}"),
    })?;
    live.inbox.wake_on_submit(bridge.arbiter_wakers());
    live.queues.wake_on_request(bridge.arbiter_wakers());
    let offloads = crate::offload_guard::Offloads::started(&bridge.report(), &run_note);
    // Before the control thread starts: no change can come earlier.
    let _ = frames.set(HeldFrames {
        arena: Arc::clone(bridge.frames()),
        per_client: descriptors,
        limits: pspat_io::parse::ParseLimits::for_mtu(bridge.frame_size()),
    });
    // In `live` for the metrics; a poisoned lock still holds it.
    let the_bridge = || live.bridge.lock().unwrap_or_else(PoisonError::into_inner);
    *the_bridge() = Some(bridge);
    let stop_control = Arc::new(AtomicBool::new(false));
    let control_thread = control::spawn(
        Arc::clone(&live),
        listener,
        Arc::clone(&hup),
        Arc::clone(&stop_control),
    )
    .map_err(|e| anyhow::anyhow!("run: cannot start the control thread: {e}"))?;
    if let Some(s) = &socket {
        tracing::info!(target: "pspat::run", "control socket {}", s.path().display());
    }
    tracing::info!(target: "pspat::run", "ready: {input} -> {output} ({})", args.config.display());
    if shape_reverse {
        tracing::info!(
            target: "pspat::run",
            "the reverse direction {output} -> {input} is shaped too (two passes: in, then out)"
        );
    } else {
        tracing::info!(
            target: "pspat::run",
            "the reverse direction {output} -> {input} is forwarded unshaped until a rule names a direction or an interface"
        );
    }
    eprintln!(
        "run: ready: {} -> {} ({}: {} link(s), {} pipe instance(s), {} flow ids + {} spare, {} rule(s), {} RX thread(s), {} dispatcher(s))",
        input,
        output,
        args.config.display(),
        links().len() - 1,
        snaps.lock().map_or(0, |s| s.len()) - 1,
        routes.used(),
        u64::from(cfg.flows).saturating_sub(routes.used()),
        plan.rules.len(),
        cfg.rx_threads,
        cfg.dispatchers,
    );
    let metrics_thread = match metrics_listener {
        Some(l) => {
            let at = l
                .local_addr()
                .map_err(|e| anyhow::anyhow!("run: --metrics: {e}"))?;
            let h = metrics::spawn(Arc::clone(&live), l, Arc::clone(&stop_control))
                .map_err(|e| anyhow::anyhow!("run: cannot start the metrics thread: {e}"))?;
            tracing::info!(target: "pspat::run", "metrics on http://{at}/metrics");
            eprintln!("run: metrics: http://{at}/metrics");
            Some(h)
        }
        None => None,
    };
    let read = || snaps.lock().map(|s| s.clone()).unwrap_or_default();
    let mut prev = pipes_json(&links(), &read());
    let mut prev_t = start.elapsed().as_secs_f64();
    let failure = crate::supervise::until_stopped(
        &term,
        &stop_bell,
        start,
        args.duration,
        || the_bridge().as_ref().and_then(Bridge::failure),
        || {
            let now = pipes_json(&links(), &read());
            let t = start.elapsed().as_secs_f64();
            eprintln!("{}", progress(t, t - prev_t, &prev, &now));
            prev = now;
            prev_t = t;
        },
    );
    // Release: pairs with the control and metrics threads' Acquire loads,
    // which they make when their doorbells ring.
    stop_control.store(true, Ordering::Release);
    control_thread.stop();
    if let Some(m) = metrics_thread {
        m.stop();
    }
    // The control thread is gone: nobody answers on the socket any more.
    drop(socket);
    let bridge = the_bridge().take();
    let report: Report = bridge
        .ok_or_else(|| anyhow::anyhow!("run: the bridge was not kept"))?
        .stop()
        .map_err(|e| anyhow::anyhow!("run: {e}"))?;
    offloads.stopped(&report, &run_note);
    let pipes = pipes_json(&links(), &read());
    let (rules, cstats) = live.rules_and_stats(&live.plan());
    let pipes_conserved = pipes
        .iter()
        .all(|p| p.in_packets == p.out_packets + p.dropped_total + p.queued && p.queued == 0);
    let totals = TotalsJson {
        received: report.received,
        received_bytes: report.received_bytes,
        transmitted: report.transmitted,
        transmitted_bytes: report.transmitted_bytes,
        duplicated: report.duplicated,
        corrupted: report.corrupted,
        ce_marked: report.ce_marked,
        ce_unmarkable: report.ce_unmarkable,
        dropped: report.dropped.clone(),
        dropped_total: report.dropped_total,
        in_flight: report.in_flight,
        not_received: report.not_received,
        conserved: report.conserved,
        pipes_conserved,
    };
    let classifier = classifier_json(&cstats, not_ip.load(Ordering::Relaxed));
    // The arbiter's last copy of the queues, made as the runtime dropped
    // the drained pipes: current, so taken at once.
    let (view, queues_fresh) = live.queue_view();
    if !queues_fresh {
        eprintln!("run: per-queue rows: the arbiter's last copy before the end, not its final one");
    }
    let (pipe_text, pipe_rows) =
        control::pipes_with_queues(&pipes, &view).map_err(|e| anyhow::anyhow!("run: {e}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = RunJson {
            schema_version: crate::SCHEMA_VERSION,
            command: "run",
            config: args.config.display().to_string(),
            input: &input,
            output: &output,
            elapsed_s: report.elapsed_s,
            pipes: pipe_rows,
            rules,
            classifier,
            totals,
            reverse: &report.reverse,
            offloads: &report.offloads,
            offload_warnings: &report.offload_warnings,
            error: report.error.clone(),
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "run {} -> {}: {}, {:.1} s",
            input,
            output,
            args.config.display(),
            report.elapsed_s
        )?;
        out.write_all(pipe_text.as_bytes())?;
        writeln!(out, "rules:")?;
        for r in &rules {
            let n = r.number.map_or("default".into(), |n| format!("{n:05}"));
            writeln!(out, " {n:>7} {:>12} {:>14}  {}", r.packets, r.bytes, r.rule)?;
        }
        writeln!(
            out,
            "classifier: {} packets, {} enqueued, {} passed, dropped {}; not IP (passed) {}",
            classifier.packets,
            classifier.enqueued,
            classifier.passed,
            reasons(&classifier.dropped),
            classifier.not_ip_passed
        )?;
        writeln!(
            out,
            "total: received {} ({} bytes) transmitted {} ({} bytes) dropped {} ({}) in flight {}; not received (kernel ring full) {}",
            totals.received,
            totals.received_bytes,
            totals.transmitted,
            totals.transmitted_bytes,
            totals.dropped_total,
            reasons(&totals.dropped),
            totals.in_flight,
            totals.not_received
        )?;
        if totals.corrupted > 0 {
            writeln!(
                out,
                "corrupted: {} packets with one bit flipped (in transmitted or dropped)",
                totals.corrupted
            )?;
        }
        if report.reverse.enabled {
            let r = &report.reverse;
            writeln!(
                out,
                "reverse {} -> {} ({}): received {} ({} bytes) transmitted {} ({} bytes) dropped {} ({}) in flight {}; not received (kernel ring full) {}; accounting: {}",
                output,
                input,
                reverse_mode(r),
                r.received,
                r.received_bytes,
                r.transmitted,
                r.bytes,
                r.dropped_total,
                reasons(&r.dropped),
                r.in_flight,
                r.not_received,
                if r.conserved { "holds" } else { "FAILS" }
            )?;
        }
        let dup = if totals.duplicated > 0 {
            format!(" + duplicated {}", totals.duplicated)
        } else {
            String::new()
        };
        writeln!(
            out,
            "accounting: received {}{dup} = transmitted {} + dropped {} + in flight {}: {}; pipes: in = out + dropped: {}",
            totals.received,
            totals.transmitted,
            totals.dropped_total,
            totals.in_flight,
            if totals.conserved { "holds" } else { "FAILS" },
            if pipes_conserved { "holds" } else { "FAILS" }
        )?;
    }
    out.flush()?;
    if let Some(f) = failure.or(report.error.clone()) {
        eprintln!("pspat: run: {}", units::elide_long_words(&f));
        return Ok(ExitCode::from(1));
    }
    if !report.conserved || report.in_flight != 0 || !pipes_conserved {
        eprintln!("pspat: run: accounting check failed");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The plan of ipfw lines `text` (tests' shorthand; the text must be valid).
#[cfg(test)]
pub(crate) fn test_plan(text: &str) -> Plan {
    pspat_config::parse_ipfw(text, "t.ipfw")
        .and_then(|c| c.validate(&pspat_config::NoProfiles))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerouted_link_finds_an_old_id_by_its_member() {
        // Old members given out of order: instance 2 at ids 40..44,
        // instance 0 at 10..13, instance 1 at 20..21.
        let r = Rerouted::new(
            5,
            vec![(2, 40, 4), (0, 10, 3), (1, 20, 1)],
            pspat_classify::LinkMoves::default(),
            pspat_sched::Instant::ZERO,
        );
        let bases: Vec<Option<u32>> = [9, 10, 12, 13, 20, 21, 39, 40, 43, 44, u32::MAX]
            .into_iter()
            .map(|f| r.base_of(FlowId(f)))
            .collect();
        assert_eq!(
            bases,
            [
                None,
                Some(10),
                Some(10),
                None,
                Some(20),
                None,
                None,
                Some(40),
                Some(40),
                None,
                None
            ]
        );
        assert!(r.overlaps(12, 2) && r.overlaps(0, 11) && r.overlaps(43, 9));
        assert!(!r.overlaps(13, 7) && !r.overlaps(21, 19) && !r.overlaps(44, 1));
    }
    use pspat_config::{parse_ipfw, NoProfiles};

    fn built(text: &str) -> (Plan, Built) {
        let plan = parse_ipfw(text, "t.ipfw")
            .unwrap()
            .validate(&NoProfiles)
            .unwrap();
        let limits = ClassifierLimits {
            queues_per_flowset: 4,
            instances_per_sched: 2,
            ..ClassifierLimits::default()
        };
        let b = build(&plan, &limits, 1024, Some(64)).unwrap();
        assert_eq!(limits, self::limits());
        (plan, b)
    }

    /// As [`built`], with `spare` flow ids in reserve.
    fn built_spare(text: &str, spare: u32) -> (Plan, Built) {
        let plan = plan_of(text);
        (
            plan.clone(),
            build(&plan, &limits(), 1024, Some(spare)).unwrap(),
        )
    }

    fn key(src: &str, dport: u16) -> PacketKey {
        let mut k = PacketKey::new(
            src.parse().unwrap(),
            "10.199.9.9".parse().unwrap(),
            17,
            1000,
            dport,
        );
        k.ifindex = INPUT_INDEX;
        k.direction = PacketDirection::In;
        k
    }

    /// Classifies, routes and enqueues like the daemon; returns the global id.
    fn offer(b: &mut Built, set: &mut impl Scheduler, src: &str, dport: u16, token: u64) -> FlowId {
        let flow = match b
            .classifier
            .classify(pspat_sched::Instant::ZERO, &key(src, dport), 1000)
        {
            Decision::Enqueue(p) => b.routes.global(p.link, p.instance, p.flow).unwrap(),
            Decision::Pass => b.pass_flow,
            Decision::Drop(r) => panic!("dropped: {r:?}"),
        };
        set.enqueue(pspat_sched::Instant::ZERO, Packet::new(flow, 1000, token))
            .unwrap();
        flow
    }

    #[test]
    fn verdicts_reach_their_own_pipe_and_instance_with_its_timing() {
        let (_, mut b) = built(
            "pipe 1 config bw 8Mbit/s delay 20ms\n\
             pipe 2 config bw 8Mbit/s mask src-ip 0xffffffff\n\
             add 100 pipe 1 udp from any to any dst-port 5001\n\
             add 200 pipe 2 udp from any to any dst-port 5002\n\
             default allow\n",
        );
        // Pipe 1, pipe 2 with 2 instances + the overflow one, the pass pipe.
        assert_eq!(b.set.pipe_count(), 5);
        let snaps: Snapshots = Arc::new(Mutex::new(Vec::new()));
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::clone(&snaps), Arc::default());
        let a = offer(&mut b, &mut set, "10.199.0.1", 5001, 1);
        let h1 = offer(&mut b, &mut set, "10.199.0.1", 5002, 2);
        let h2 = offer(&mut b, &mut set, "10.199.0.2", 5002, 3);
        let h1b = offer(&mut b, &mut set, "10.199.0.1", 5002, 4);
        let pass = offer(&mut b, &mut set, "10.199.0.1", 7, 5);
        assert_eq!(pass, b.pass_flow);
        assert_eq!(h1, h1b, "one host, one instance");
        assert_ne!(h1, h2, "two hosts, two instances");
        assert!(a != h1 && a != pass);
        // Drive the set in virtual time, as the arbiter does.
        let mut now = pspat_sched::Instant::ZERO;
        let mut exits = Vec::new();
        for _ in 0..1000 {
            while let Some(p) = set.dequeue(now) {
                exits.push((p.token, now.as_nanos()));
            }
            match set.next_eligible(now) {
                Some(t) if t > now => now = t,
                Some(_) => {}
                None => break,
            }
        }
        exits.sort_unstable();
        // 1000 B at 8 Mbit/s take 1 ms. Pipe 1: + 20 ms. Each instance of
        // pipe 2 has its own link: hosts 1 and 2 both leave at 1 ms, host
        // 1's second packet at 2 ms. The pass pipe: at once.
        assert_eq!(
            exits,
            [
                (1, 21_000_000),
                (2, 1_000_000),
                (3, 1_000_000),
                (4, 2_000_000),
                (5, 0)
            ]
        );
        drop(set);
        // The last copy (on drop) is exact.
        let snaps = snaps.lock().unwrap().clone();
        let pipes = pipes_json(&b.links, &snaps);
        let by = |n: Option<u32>| pipes.iter().find(|p| p.number == n).unwrap().clone();
        assert_eq!((by(Some(1)).in_packets, by(Some(1)).out_packets), (1, 1));
        assert_eq!((by(Some(2)).in_packets, by(Some(2)).out_packets), (3, 3));
        assert_eq!(by(Some(2)).instances, 3);
        assert_eq!((by(None).in_packets, by(None).out_packets), (1, 1));
        let c = b.classifier.stats();
        assert_eq!((c.packets, c.enqueued, c.passed), (5, 4, 1));
    }

    #[test]
    fn a_sched_s_flowsets_keep_their_own_queue_limits() {
        let (plan, b) = built(
            "sched 4 config type qfq bw 1Mbit/s\n\
             queue 1 config sched 4 weight 1 queue 2\n\
             queue 2 config sched 4 weight 9 queue 5 plr 0.5\n\
             add 100 queue 1 udp from any to any dst-port 1\n\
             add 200 queue 2 udp from any to any dst-port 2\n",
        );
        let (_, _, _, member) = b.set.members().next().unwrap();
        let layout = b.classifier.layout().link(4).unwrap();
        for range in &layout.ranges {
            let pspat_classify::FlowOwner::Queue(q) = range.owner else {
                panic!("a sched has no pipe queue");
            };
            let want = queue_config(&plan.queues[&q].queue);
            assert_eq!(member.pipe().queue_config(range.first), Some(&want));
        }
        // A pipe with a masked flowset: the flowset's (larger) range takes
        // the default, the pipe's own queue (id 0) keeps its own.
        let (plan, b) = built(
            "pipe 1 config bw 1Mbit/s queue 7\n\
             queue 3 config pipe 1 queue 9 mask src-ip 0xff\n\
             add 100 queue 3 ip from any to any\n",
        );
        let (_, _, _, member) = b.set.members().next().unwrap();
        let own = member.pipe().queue_config(FlowId(0)).unwrap();
        assert_eq!(own, &queue_config(&plan.pipes[&1].queue));
        assert_eq!(own.limit, QueueLimit::Slots(7));
        let layout = b.classifier.layout().link(1).unwrap();
        let fs = layout
            .ranges
            .iter()
            .find(|r| r.owner == pspat_classify::FlowOwner::Queue(3))
            .unwrap();
        assert_eq!(fs.len(), 5, "4 dynamic queues and the overflow queue");
        for i in 0..fs.len() {
            let q = member.pipe().queue_config(FlowId(fs.first.0 + i)).unwrap();
            assert_eq!(q.limit, QueueLimit::Slots(9));
        }
    }

    /// An fq_codel sched: FQ with its quantum; each flowset capped at its
    /// `flows`, with the sched's CoDel and limit where it has none of its
    /// own, and one queue per 5-tuple without a mask of its own; the
    /// limit bounds the packets of all its flows.
    #[test]
    fn an_fq_codel_sched_runs_fq_and_its_flowsets_take_its_codel_limit_and_flows() {
        let (plan, mut b) = built(
            "sched 1 config type fq_codel quantum 3000 limit 5 flows 3 target 2ms bw 8Kbit/s\n\
             queue 1 config sched 1\n\
             queue 2 config sched 1 mask dst-port 0xffff codel target 9ms queue 7\n\
             add 100 queue 1 udp from any to any dst-port 1-999\n\
             add 200 queue 2 udp from any to any dst-port 1000-2000\n",
        );
        let layout = b.classifier.layout().link(1).unwrap().clone();
        let (_, _, _, member) = b.set.members().next().unwrap();
        let pspat_sched::AnyScheduler::Fq(fq) = member.pipe().scheduler() else {
            panic!("an fq_codel sched runs FQ");
        };
        for range in &layout.ranges {
            // `flows` (3) dynamic queues, not --max-queues (4), and the
            // overflow queue.
            assert_eq!((range.dynamic, range.len()), (3, 4), "{range:?}");
            assert_eq!(fq.quantum(range.first), Some(3000));
            let pspat_classify::FlowOwner::Queue(q) = range.owner else {
                panic!("a sched has no pipe queue");
            };
            let want = queue_config(&plan.queues[&q].queue);
            for i in 0..range.len() {
                let id = FlowId(range.first.0 + i);
                assert_eq!(member.pipe().queue_config(id), Some(&want), "queue {q}");
            }
        }
        // Queue 1 has the sched's CoDel (ECN on) and limit; queue 2 its own.
        let q1 = queue_config(&plan.queues[&1].queue);
        assert_eq!(q1.limit, QueueLimit::Slots(5));
        let c = q1.codel.unwrap();
        assert_eq!(
            (c.target_ns, c.interval_ns, c.ecn),
            (2_000_000, 100_000_000, true)
        );
        let q2 = queue_config(&plan.queues[&2].queue);
        assert_eq!(q2.limit, QueueLimit::Slots(7));
        assert_eq!(q2.codel.unwrap().target_ns, 9_000_000);
        // Queue 1 has `mask all`: each 5-tuple its own queue, up to 3,
        // then the overflow queue.
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::default(), Arc::default());
        let flows: Vec<FlowId> = (1..=5u16)
            .map(|port| offer(&mut b, &mut set, "10.199.0.1", port, u64::from(port)))
            .collect();
        let fs = layout
            .ranges
            .iter()
            .find(|r| r.owner == pspat_classify::FlowOwner::Queue(1))
            .unwrap();
        let overflow = b.routes.global(1, 0, fs.overflow.unwrap()).unwrap();
        assert!(flows[0] != flows[1] && flows[1] != flows[2] && flows[0] != flows[2]);
        assert_eq!((flows[3], flows[4]), (overflow, overflow), "{flows:?}");
        // The limit is on all the flows together (5 packets), not on each:
        // a 6th arrival is queued and the longest flow loses its oldest.
        offer(&mut b, &mut set, "10.199.0.1", 1, 6);
        let (_, _, _, member) = set.set.members().next().unwrap();
        assert_eq!(member.pipe().queued(), 5);
    }

    /// A pipe of `type wf2q+` runs WF2Q+ over its own queue and the
    /// flowsets attached to it, each with its weight: backlogged queues of
    /// weights 1 and 3 are served 1:3 in virtual time (a FIFO pipe, the
    /// default, serves them in arrival order).
    #[test]
    fn a_wf2q_pipe_serves_its_attached_queues_by_weight() {
        let text = "pipe 1 config bw 8Mbit/s type wf2q+\n\
                    queue 1 config pipe 1 weight 1\n\
                    queue 2 config pipe 1 weight 3\n\
                    add 100 queue 1 udp from any to any dst-port 1-999\n\
                    add 200 queue 2 udp from any to any dst-port 1000-2000\n";
        let served = |text: &str| {
            let (_, mut b) = built(text);
            let layout = b.classifier.layout().link(1).unwrap().clone();
            let weights: Vec<u32> = layout.ranges.iter().map(|r| r.params.weight).collect();
            let set = std::mem::take(&mut b.set);
            let mut set = Observed::new(set, Arc::default(), Arc::default());
            // 40 packets of queue 1 (tokens 1..=40), then 40 of queue 2.
            for t in 1..=40u64 {
                offer(&mut b, &mut set, "10.199.0.1", 5, t);
            }
            for t in 101..=140u64 {
                offer(&mut b, &mut set, "10.199.0.1", 1500, t);
            }
            let (_, _, _, member) = set.set.members().next().unwrap();
            let alg = match member.pipe().scheduler() {
                pspat_sched::AnyScheduler::Wf2qPlus(_) => AlgKind::Wf2qPlus,
                pspat_sched::AnyScheduler::Fifo(_) => AlgKind::Fifo,
                _ => panic!("a pipe of type wf2q+ or none"),
            };
            let mut now = pspat_sched::Instant::ZERO;
            let mut exits = Vec::new();
            // 1000 B at 8 Mbit/s take 1 ms: the first 20 packets by 20 ms.
            drive(&mut set, &mut now, 20_000_000, &mut exits);
            let second = exits.iter().filter(|(t, _)| *t > 100).count();
            (layout.alg, alg, weights, exits.len(), second)
        };
        let (layout_alg, alg, weights, n, second) = served(text);
        assert_eq!((layout_alg, alg), (AlgKind::Wf2qPlus, AlgKind::Wf2qPlus));
        // The pipe's own queue (weight 1), then queues 1 and 2.
        assert_eq!(weights, [1, 1, 3]);
        assert_eq!(n, 20);
        assert!((14..=16).contains(&second), "queue 2 sent {second} of 20");
        // Without a type: FIFO, queue 1's packets first.
        let (layout_alg, alg, _, n, second) = served(&text.replace(" type wf2q+", ""));
        assert_eq!(
            (layout_alg, alg, n, second),
            (AlgKind::Fifo, AlgKind::Fifo, 20, 0)
        );
    }

    /// A live `type` change on a pipe rebuilds its link, as a sched's does;
    /// a change of an fq_codel pipe's CoDel reaches its flowset's queues in
    /// place, and its quantum the pipe's FQ, without a rebuild.
    #[test]
    fn a_pipe_type_change_rebuilds_and_its_fq_codel_changes_in_place() {
        let base = "pipe 1 config type fq_codel target 2ms flows 3 bw 10Mbit/s\n\
                    queue 1 config pipe 1\n\
                    add 100 queue 1 udp from any to any\n\
                    add 200 pipe 1 tcp from any to any\n";
        let (old, b) = built(base);
        let (_, _, _, member) = b.set.members().next().unwrap();
        let pspat_sched::AnyScheduler::Fq(fq) = member.pipe().scheduler() else {
            panic!("an fq_codel pipe runs FQ");
        };
        let (_, r1) = b
            .classifier
            .layout()
            .range_of(pspat_classify::FlowOwner::Queue(1))
            .unwrap();
        // The flowset: `flows` dynamic queues and the overflow queue.
        assert_eq!((r1.dynamic, r1.len()), (3, 4));
        assert_eq!(fq.quantum(r1.first), Some(1514));
        let installs = |p: &live::Planned| {
            p.ops
                .iter()
                .filter(|op| {
                    matches!(
                        op,
                        live::LiveOp::Install {
                            link: 1,
                            replace: true,
                            ..
                        }
                    )
                })
                .count()
        };
        // CoDel only: the flowset's queues, in place.
        let p = plan_live(
            &old,
            &plan_of(&base.replace("target 2ms", "target 4ms")),
            &b,
        )
        .unwrap();
        assert_eq!(installs(&p), 0, "{:?}", p.log);
        let codel = p.ops.iter().find_map(|op| match op {
            live::LiveOp::Queue {
                link: 1,
                first,
                config,
                ..
            } if *first == r1.first.0 => config.codel,
            _ => None,
        });
        assert_eq!(codel.map(|c| c.target_ns), Some(4_000_000), "{:?}", p.ops);
        assert!(
            p.log
                .iter()
                .any(|l| l.contains("pipe 1: type fq_codel target 4ms")),
            "{:?}",
            p.log
        );
        // The quantum: on the running FQ.
        quantum_in_place(&old, &base.replace("flows 3", "flows 3 quantum 3000"), &b);
        // Another type, or other flows: rebuilt.
        for text in [
            base.replace("type fq_codel target 2ms flows 3", "type wf2q+"),
            base.replace("type fq_codel target 2ms flows 3 ", ""),
            base.replace("flows 3", "flows 4"),
        ] {
            let p = plan_live(&old, &plan_of(&text), &b).unwrap();
            assert_eq!(installs(&p), 1, "{text}: {:?}", p.log);
        }
    }

    /// A live change of an fq_codel sched: its CoDel reaches the flowsets'
    /// queues, its limit the pipe's held limit and its quantum the pipe's
    /// FQ without a rebuild (undone with the rest of a refused change); its
    /// flows rebuild the link.
    #[test]
    fn an_fq_codel_sched_changes_live_and_rebuilds_for_its_flows() {
        let base = "sched 1 config type fq_codel target 2ms flows 3 bw 10Mbit/s\n\
                    queue 1 config sched 1\n\
                    queue 2 config sched 1 codel target 9ms\n\
                    add 100 queue 1 udp from any to any\n\
                    add 200 queue 2 tcp from any to any\n";
        let (old, b) = built(base);
        let layout = b.classifier.layout();
        let (_, r1) = layout
            .range_of(pspat_classify::FlowOwner::Queue(1))
            .unwrap();
        let new = plan_of(&base.replace("target 2ms flows 3", "target 4ms flows 3 limit 50"));
        let p = plan_live(&old, &new, &b).unwrap();
        let held = p.ops.iter().find_map(|op| match op {
            live::LiveOp::Link { link: 1, config } => Some(config.held_limit),
            _ => None,
        });
        assert_eq!(held, Some(Some(50)), "{:?}", p.ops);
        let codel = p.ops.iter().find_map(|op| match op {
            live::LiveOp::Queue {
                link: 1,
                first,
                len,
                config,
            } if *first == r1.first.0 && *len == r1.len() => config.codel,
            _ => None,
        });
        assert_eq!(codel.map(|c| c.target_ns), Some(4_000_000), "{:?}", p.ops);
        // Queue 2 keeps its own CoDel, and takes the new limit: it has no
        // `queue` size of its own.
        let (_, r2) = layout
            .range_of(pspat_classify::FlowOwner::Queue(2))
            .unwrap();
        let q2 = p.ops.iter().find_map(|op| match op {
            live::LiveOp::Queue {
                link: 1,
                first,
                config,
                ..
            } if *first == r2.first.0 => Some(*config),
            _ => None,
        });
        let q2 = q2.expect("queue 2's new limit");
        assert_eq!(q2.codel.map(|c| c.target_ns), Some(9_000_000));
        assert_eq!(q2.limit, QueueLimit::Slots(50));
        assert_eq!(p.ops.len(), 3, "{:?}", p.ops);
        assert!(!p
            .ops
            .iter()
            .any(|op| matches!(op, live::LiveOp::Install { .. })));
        assert!(
            p.log.iter().any(|l| l.contains("type fq_codel target 4ms")),
            "{:?}",
            p.log
        );
        // The quantum: set on the running FQ, which keeps its packets.
        let (_, mut b) = built(base);
        let q = quantum_in_place(&old, &base.replace("flows 3", "flows 3 quantum 3000"), &b);
        assert!(
            q.log.iter().any(|l| l.contains("quantum 3000")),
            "{:?}",
            q.log
        );
        let fq_quantum = |b: &Built| match b
            .set
            .members()
            .find(|m| m.0 == 1)
            .unwrap()
            .3
            .pipe()
            .scheduler()
        {
            pspat_sched::AnyScheduler::Fq(fq) => fq.quantum(FlowId(r1.first.0)),
            _ => panic!("an fq_codel sched runs FQ"),
        };
        let mut gone = Vec::new();
        live::apply(&mut b.set, pspat_sched::Instant::ZERO, q.ops, &mut gone).unwrap();
        assert!(gone.is_empty());
        assert_eq!(fq_quantum(&b), Some(3000));
        // Refused in part, nothing applied: the quantum goes back.
        let bad = vec![
            live::LiveOp::Quantum {
                link: 1,
                bytes: 500,
                old: 3000,
            },
            live::LiveOp::Flow {
                link: 1,
                first: r1.first.0,
                len: 1,
                params: pspat_sched::FlowParams {
                    weight: 0,
                    ..pspat_sched::FlowParams::default()
                },
                old: pspat_sched::FlowParams::default(),
            },
        ];
        let e = live::apply(&mut b.set, pspat_sched::Instant::ZERO, bad, &mut gone).unwrap_err();
        assert!(e.contains("weight"), "{e}");
        assert_eq!(fq_quantum(&b), Some(3000));
        // The flows, another type, or bare FQ: rebuilt.
        for text in [
            base.replace("target 2ms flows 3", "target 2ms flows 4"),
            base.replace("type fq_codel target 2ms flows 3", "type drr"),
            base.replace("type fq_codel target 2ms flows 3", "type fq"),
        ] {
            let p = plan_live(&old, &plan_of(&text), &b).unwrap();
            assert!(rebuilds_link_1(&p), "{text}: {:?}", p.log);
        }
    }

    /// Through the control socket: a table's entries deleted, the table
    /// flushed (it stays, so the rule naming it stays valid) and destroyed
    /// once no rule names it; what does not exist is refused and nothing
    /// changes.
    #[test]
    fn ctl_deletes_flushes_and_destroys_a_table() {
        let (live, stop, arbiter) = live_of(
            "pipe 1 config bw 10Mbit/s\n\
             table 1 create type addr\n\
             table 1 add 10.199.0.0/24 1 10.199.1.0/24 1 10.199.2.0/24 1\n\
             add 100 pipe tablearg ip from table(1) to any\n",
        );
        let entries = |live: &control::Live| live.plan().tables[&1].len();
        assert_eq!(entries(&live), 3);
        assert!(
            live.request("table 1 delete 10.199.0.0/24 10.199.2.0/24")
                .ok
        );
        assert_eq!(entries(&live), 1);
        let r = live.request("table 1 delete 10.199.1.0/24 10.199.7.0/24");
        let e = r.error.as_deref().unwrap();
        assert!(e.contains("10.199.7.0/24 is not in table 1"), "{e}");
        assert_eq!(entries(&live), 1, "nothing changed");
        // Flushed, the table stays for the rule that names it.
        assert!(live.request("table 1 flush").ok);
        assert_eq!(entries(&live), 0);
        let r = live.request("table 1 destroy");
        let e = r.error.as_deref().unwrap();
        assert!(e.contains("rule 100 matches on table(1)"), "{e}");
        assert!(live.plan().tables.contains_key(&1));
        assert!(live.request("delete 100").ok);
        assert!(live.request("table 1 destroy").ok);
        assert!(!live.plan().tables.contains_key(&1));
        for line in [
            "table 1 destroy",
            "table 1 flush",
            "table 1 delete 10.0.0.0/8",
            "table 1 list",
        ] {
            let r = live.request(line);
            let e = r.error.as_deref().unwrap_or_default();
            assert!(e.contains("table 1 does not exist"), "{line}: {r:?}");
        }
        // A table created live, empty, takes entries after.
        assert!(live.request("table 2 create").ok);
        let r = live.request("table 2 list");
        assert!(
            r.ok && r.text.is_empty(),
            "an empty table lists nothing: {r:?}"
        );
        assert!(live.request("table 2 add 10.0.0.0/8 1 192.168.0.0/16 1").ok);
        assert_eq!(live.plan().tables[&2].len(), 2);
        // A create of a table that exists is refused, its entries kept,
        // and so is the whole request it came in.
        let before = live.plan();
        for line in ["table 2 create", "pipe 1 config bw 5Mbit/s\ntable 2 create"] {
            let r = live.request(line);
            let e = r.error.as_deref().unwrap_or_default();
            assert!(
                e.contains("table 2 create: table 2 exists already; nothing changed"),
                "{line}: {r:?}"
            );
        }
        assert_eq!(live.plan(), before, "nothing changed");
        assert_eq!(live.plan().tables[&2].len(), 2);
        // Every table at once: listed under a header each, then emptied,
        // each table kept.
        assert!(live.request("table 3 create").ok);
        assert!(live.request("table 3 add 172.16.0.0/12 3").ok);
        let r = live.request("table all list");
        assert!(r.ok, "{r:?}");
        assert_eq!(
            r.text,
            "--- table(2) ---\n10.0.0.0/8 1\n192.168.0.0/16 1\n--- table(3) ---\n172.16.0.0/12 3\n"
        );
        assert_eq!(
            r.result["tables"][1]["entries"][0]["prefix"], "172.16.0.0/12",
            "{r:?}"
        );
        assert!(live.request("table all flush").ok);
        let tables = live.plan().tables;
        assert_eq!(tables.keys().copied().collect::<Vec<_>>(), [2, 3]);
        assert!(tables.values().all(|t| t.is_empty()), "{tables:?}");
        // Release: pairs with the stand-in's Acquire load.
        stop.store(true, Ordering::Release);
        arbiter.join().unwrap();
    }

    /// Through the control socket: `sched show` prints fq_codel's words, a
    /// `type fq_codel` line is a whole setting, and the rebuilt link runs
    /// the new quantum, CoDel, limit and cap.
    #[test]
    fn ctl_shows_and_changes_an_fq_codel_sched() {
        let (live, stop, arbiter) = live_of(
            "sched 1 config type fq_codel target 2ms flows 3 bw 10Mbit/s\n\
             queue 1 config sched 1\n\
             add 100 queue 1 udp from any to any\n",
        );
        let words = "fq_codel target 2ms interval 100ms ecn quantum 1514 limit 10240 flows 3";
        let r = live.request("sched show");
        assert!(r.ok, "{r:?}");
        assert!(
            r.text.contains(&format!(" sched type {words} instances 1")),
            "{}",
            r.text
        );
        assert_eq!(r.result["scheds"][0]["fq_codel"], words);
        assert_eq!(r.result["scheds"][0]["alg"], "fq");
        // The quantum alone changes in place: no rebuild, no ids needed.
        let r = live.request("sched 1 config type fq_codel target 2ms flows 3 quantum 2000");
        assert!(r.ok, "{r:?}");
        assert!(!r.text.contains("rebuilt"), "{}", r.text);
        assert!(r.text.contains("quantum 2000"), "{}", r.text);
        // A whole setting: what the line leaves out is at its default, so
        // `flows` goes back to 1024, and the rebuilt link needs 1025 ids
        // where the daemon has 64 to spare: refused, naming the flag.
        let before = live.plan();
        let r = live.request("ipfw sched 1 config type fq_codel quantum 3000");
        let e = r.error.as_deref().unwrap();
        assert!(
            e.starts_with("sched 1 needs 1025 flow ids") && e.contains("--spare-flows"),
            "{e}"
        );
        assert_eq!(live.plan(), before);
        let r = live.request("ipfw sched 1 config type fq_codel quantum 3000 flows 30");
        assert!(r.ok, "{r:?}");
        assert!(r.text.contains("sched 1 rebuilt"), "{}", r.text);
        let f = live.plan().scheds[&1].fq_codel.unwrap();
        assert_eq!(
            f,
            pspat_config::FqCodel {
                quantum: 3000,
                flows: 30,
                ..pspat_config::FqCodel::default()
            }
        );
        assert_eq!(live.plan().scheds[&1].link.bw_bps, 10_000_000);
        let words = "type fq_codel target 5ms interval 100ms ecn quantum 3000 limit 10240 flows 30";
        let r = live.request("sched show 1");
        assert!(r.text.contains(words), "{}", r.text);
        let r = live.request("pipe show 1");
        assert!(r.text.contains(words), "{}", r.text);
        // A bad value: refused at its token, nothing changed.
        let r = live.request("sched 1 config type fq_codel flows 0");
        assert!(
            r.error.as_deref().unwrap().starts_with("<ctl>:1:36: "),
            "{r:?}"
        );
        assert_eq!(live.plan().scheds[&1].fq_codel, Some(f));
        let dynamic = live
            .classifier
            .lock()
            .unwrap()
            .layout()
            .range_of(pspat_classify::FlowOwner::Queue(1))
            .unwrap()
            .1
            .dynamic;
        assert_eq!(dynamic, 30, "the new flows cap");
        // Release: pairs with the stand-in arbiter's Acquire load.
        stop.store(true, Ordering::Release);
        let set = arbiter.join().unwrap();
        let (_, _, _, member) = set.set.members().find(|m| m.0 == 1).unwrap();
        let pspat_sched::AnyScheduler::Fq(fq) = member.pipe().scheduler() else {
            panic!("still FQ");
        };
        let q = member.pipe().queue_config(FlowId(0)).unwrap();
        assert_eq!(fq.quantum(FlowId(0)), Some(3000));
        assert_eq!(
            q.codel,
            Some(pspat_sched::pipe::Codel {
                target_ns: 5_000_000,
                interval_ns: 100_000_000,
                ecn: true
            })
        );
        assert_eq!(q.limit, QueueLimit::Slots(10_240));
    }

    /// An fq_pie sched: FQ with its quantum, each flowset capped at its
    /// `flows`, with the sched's PIE (fq_pie's defaults: ECN on,
    /// timestamps) and limit where it has none of its own; a pipe's `pie`
    /// (dummynet's defaults: departure rate). PIE decides on arrival: a
    /// queue's state is there once packets came.
    #[test]
    fn an_fq_pie_sched_runs_fq_and_its_flowsets_take_its_pie_limit_and_flows() {
        use pspat_sched::pipe::pie::DelayEstimator;
        let (plan, mut b) = built(
            "sched 1 config type fq_pie quantum 3000 limit 5 flows 3 target 10ms bw 8Kbit/s\n\
             queue 1 config sched 1\n\
             queue 2 config sched 1 mask dst-port 0xffff pie alpha 0.5 queue 7\n\
             pipe 3 config bw 1Mbit/s pie tupdate 30ms\n\
             add 100 queue 1 udp from any to any dst-port 1-999\n\
             add 200 queue 2 udp from any to any dst-port 1000-2000\n\
             add 300 pipe 3 tcp from any to any\n",
        );
        let layout = b.classifier.layout().link(1).unwrap().clone();
        let member = b.set.members().find(|m| m.0 == 1).unwrap().3;
        let pspat_sched::AnyScheduler::Fq(fq) = member.pipe().scheduler() else {
            panic!("an fq_pie sched runs FQ");
        };
        for range in &layout.ranges {
            assert_eq!((range.dynamic, range.len()), (3, 4), "{range:?}");
            assert_eq!(fq.quantum(range.first), Some(3000));
            let pspat_classify::FlowOwner::Queue(q) = range.owner else {
                panic!("a sched has no pipe queue");
            };
            let want = queue_config(&plan.queues[&q].queue);
            for i in 0..range.len() {
                let id = FlowId(range.first.0 + i);
                assert_eq!(member.pipe().queue_config(id), Some(&want), "queue {q}");
            }
        }
        let q1 = queue_config(&plan.queues[&1].queue);
        assert_eq!(q1.limit, QueueLimit::Slots(5));
        let p1 = q1.pie.unwrap();
        assert_eq!(
            (p1.target_ns, p1.ecn, p1.estimator, q1.codel),
            (10_000_000, true, DelayEstimator::Timestamp, None)
        );
        let q2 = queue_config(&plan.queues[&2].queue);
        assert_eq!(q2.limit, QueueLimit::Slots(7));
        let p2 = q2.pie.unwrap();
        assert_eq!(
            (p2.alpha, p2.ecn, p2.estimator),
            (0.5, false, DelayEstimator::DepartureRate)
        );
        let pipe = b.set.members().find(|m| m.0 == 3).unwrap().3;
        let p3 = pipe.pipe().queue_config(FlowId(0)).and_then(|q| q.pie);
        assert_eq!(p3.map(|p| p.tupdate_ns), Some(30_000_000));
        // Packets of queue 1: each dynamic queue's PIE state is kept.
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::default(), Arc::default());
        offer(&mut b, &mut set, "10.199.0.1", 7, 1);
        offer(&mut b, &mut set, "10.199.0.1", 8, 2);
        let member = set.set.members().find(|m| m.0 == 1).unwrap().3;
        let active = layout
            .ranges
            .iter()
            .flat_map(|r| (0..r.len()).map(move |i| FlowId(r.first.0 + i)))
            .filter(|&id| member.pipe().pie_state(id).is_some_and(|s| s.is_active()))
            .count();
        assert_eq!(active, 2, "one PIE state started for each 5-tuple's queue");
    }

    /// A live change of PIE's parameters, a queue's or an fq_pie sched's,
    /// reaches the queues without a rebuild (each keeps its PIE state), and
    /// so does fq_pie's quantum; its flows or type rebuild the link.
    #[test]
    fn pie_parameters_change_live_and_fq_pie_rebuilds_for_its_flows() {
        let base = "sched 1 config type fq_pie target 10ms flows 3 bw 10Mbit/s\n\
                    queue 1 config sched 1\n\
                    pipe 2 config bw 1Mbit/s pie\n\
                    add 100 queue 1 udp from any to any\n\
                    add 200 pipe 2 tcp from any to any\n";
        let (old, b) = built(base);
        let layout = b.classifier.layout();
        let (_, r1) = layout
            .range_of(pspat_classify::FlowOwner::Queue(1))
            .unwrap();
        let new = plan_of(
            &base
                .replace("target 10ms flows 3", "target 20ms flows 3 limit 50")
                .replace(
                    "pipe 2 config bw 1Mbit/s pie",
                    "pipe 2 config bw 1Mbit/s pie alpha 0.5 ts",
                ),
        );
        let p = plan_live(&old, &new, &b).unwrap();
        assert!(
            !p.ops
                .iter()
                .any(|op| matches!(op, live::LiveOp::Install { .. })),
            "{:?}",
            p.ops
        );
        let pie = |link: u32, at: u32| {
            p.ops.iter().find_map(|op| match op {
                live::LiveOp::Queue {
                    link: l,
                    first,
                    config,
                    ..
                } if *l == link && *first == at => config.pie,
                _ => None,
            })
        };
        assert_eq!(pie(1, r1.first.0).map(|x| x.target_ns), Some(20_000_000));
        let (_, r2) = layout.range_of(pspat_classify::FlowOwner::Pipe(2)).unwrap();
        let p2 = pie(2, r2.first.0).expect("pipe 2's new PIE");
        assert_eq!(p2.alpha, 0.5);
        let held = p.ops.iter().find_map(|op| match op {
            live::LiveOp::Link { link: 1, config } => Some(config.held_limit),
            _ => None,
        });
        assert_eq!(held, Some(Some(50)), "{:?}", p.ops);
        assert!(
            p.log.iter().any(|l| l.contains("type fq_pie target 20ms")),
            "{:?}",
            p.log
        );
        assert!(
            p.log
                .iter()
                .any(|l| l.contains("pie target 15ms tupdate 15ms alpha 0.5")),
            "{:?}",
            p.log
        );
        // The quantum: in place, as fq_codel's.
        quantum_in_place(&old, &base.replace("flows 3", "flows 3 quantum 3000"), &b);
        for text in [
            base.replace("target 10ms flows 3", "target 10ms flows 4"),
            base.replace("type fq_pie target 10ms flows 3", "type fq_codel flows 3"),
            base.replace("type fq_pie target 10ms flows 3", "type drr"),
        ] {
            let p = plan_live(&old, &plan_of(&text), &b).unwrap();
            assert!(rebuilds_link_1(&p), "{text}: {:?}", p.log);
        }
    }

    /// Through the control socket: `sched show` and `pipe show` print the
    /// PIE words, and a `pie` line changes a running pipe's PIE in place.
    #[test]
    fn ctl_shows_pie_and_changes_it_in_place() {
        let (live, stop, arbiter) = live_of(
            "sched 1 config type fq_pie flows 3 bw 10Mbit/s\n\
             queue 1 config sched 1\n\
             pipe 2 config bw 1Mbit/s pie ts\n\
             add 100 queue 1 udp from any to any\n\
             add 200 pipe 2 tcp from any to any\n",
        );
        let words = "fq_pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 ecn capdrop derand noonoff ts quantum 1514 limit 10240 flows 3";
        let r = live.request("sched show");
        assert!(r.ok, "{r:?}");
        assert!(
            r.text.contains(&format!(" sched type {words} instances 1")),
            "{}",
            r.text
        );
        assert_eq!(r.result["scheds"][0]["fq_pie"], words);
        let r = live.request("pipe 2 config pie beta 2 onoff");
        assert!(r.ok, "{r:?}");
        assert!(!r.text.contains("rebuilt"), "{}", r.text);
        // A whole setting: `ts` not given is `dre` again.
        let r = live.request("pipe show 2");
        let pie = "pie target 15ms tupdate 15ms alpha 0.125 beta 2 max_burst 150ms max_ecnth 0.1 noecn capdrop derand onoff dre";
        assert!(r.text.contains(pie), "{}", r.text);
        // `queue show` prints a flowset's lowered PIE.
        let r = live.request("queue show 1");
        assert!(r.ok, "{r:?}");
        assert!(
            r.text.contains("plr 0 pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms max_ecnth 0.1 ecn capdrop derand noonoff ts"),
            "{}",
            r.text
        );
        assert!(
            r.result["queues"][0]["settings"]
                .as_str()
                .is_some_and(|s| s.starts_with("pie target 15ms")),
            "{}",
            r.result
        );
        // A value out of dummynet's range: refused at its token.
        let r = live.request("pipe 2 config pie beta 8");
        assert!(
            r.error.as_deref().unwrap().starts_with("<ctl>:1:24: "),
            "{r:?}"
        );
        // Release: pairs with the stand-in arbiter's Acquire load.
        stop.store(true, Ordering::Release);
        let set = arbiter.join().unwrap();
        let (_, _, _, member) = set.set.members().find(|m| m.0 == 2).unwrap();
        let p = member
            .pipe()
            .queue_config(FlowId(0))
            .and_then(|q| q.pie)
            .unwrap();
        assert_eq!(
            (p.beta, p.onoff, p.estimator),
            (
                2.0,
                true,
                pspat_sched::pipe::pie::DelayEstimator::DepartureRate
            )
        );
    }

    fn limits() -> ClassifierLimits {
        ClassifierLimits {
            queues_per_flowset: 4,
            instances_per_sched: 2,
            ..ClassifierLimits::default()
        }
    }

    /// Drives `set` in virtual time up to `until`, collecting `(token, ns)`.
    fn drive(
        set: &mut Observed,
        now: &mut pspat_sched::Instant,
        until: u64,
        out: &mut Vec<(u64, u64)>,
    ) {
        let until = pspat_sched::Instant::from_nanos(until);
        loop {
            while let Some(p) = set.dequeue(*now) {
                out.push((p.token, now.as_nanos()));
            }
            match set.next_eligible(*now) {
                Some(t) if t > *now && t <= until => *now = t,
                Some(t) if t <= *now => {}
                _ => {
                    *now = until;
                    return;
                }
            }
        }
    }

    /// The plan of a change by mask from `old` to `new` on `b`, with the
    /// moves of `running`'s dynamic queues into `fresh` (the classifier
    /// built from `new`) filled in.
    fn planned_remask(
        b: &Built,
        old: &Plan,
        new: &Plan,
        fresh: &mut Classifier,
        running: &Classifier,
        total: u32,
    ) -> live::Planned {
        let mut planned = plan_in_room(old, new, b, fresh, total).unwrap();
        assert!(live::remasks(&planned.ops), "{:?}", planned.log);
        let carry = fresh.carry_dynamic_from(running);
        assert!(live::fill_moves(&mut planned.ops, &carry));
        planned
    }

    /// Submits `ops` from another thread, as the control side does, and
    /// drives `set` up to `until` meanwhile: the change applies between
    /// two of its calls, at its next call once the change is pending.
    fn submit_while_driving(
        inbox: &live::Inbox,
        ops: Vec<live::LiveOp>,
        set: &mut Observed,
        now: &mut pspat_sched::Instant,
        until: u64,
        exits: &mut Vec<(u64, u64)>,
    ) {
        std::thread::scope(|s| {
            let h = s.spawn(|| inbox.submit(ops, Duration::from_secs(10)));
            while !inbox.is_pending() {
                std::thread::yield_now();
            }
            drive(set, now, until, exits);
            h.join().unwrap().unwrap();
        });
    }

    #[test]
    fn a_change_from_the_inbox_applies_between_calls_from_the_next_packet_on() {
        let (plan, mut b) =
            built("pipe 1 config bw 8Mbit/s\nadd 100 pipe 1 udp from any to any dst-port 5001\n");
        let inbox: Arc<live::Inbox> = Arc::default();
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::default(), Arc::clone(&inbox));
        for t in 0..7 {
            offer(&mut b, &mut set, "10.199.0.1", 5001, t);
        }
        let mut now = pspat_sched::Instant::ZERO;
        let mut exits = Vec::new();
        drive(&mut set, &mut now, 2_500_000, &mut exits);
        let new = parse_ipfw(
            "pipe 1 config bw 16Mbit/s\nadd 100 pipe 1 udp from any to any dst-port 5001\n",
            "t.ipfw",
        )
        .unwrap()
        .validate(&NoProfiles)
        .unwrap();
        let planned = plan_live(&plan, &new, &b).unwrap();
        assert!(!planned.classifier);
        assert_eq!(planned.log.len(), 1, "{:?}", planned.log);
        // The arbiter's next call, at 2.5 ms, takes the change.
        submit_while_driving(
            &inbox,
            planned.ops,
            &mut set,
            &mut now,
            100_000_000,
            &mut exits,
        );
        // 1000 B: 1 ms at 8 Mbit/s; packet 2 was on the link at 2.5 ms
        // (old rate, ends at 3 ms); the rest take 0.5 ms each.
        assert_eq!(
            exits,
            [
                (0, 1_000_000),
                (1, 2_000_000),
                (2, 3_000_000),
                (3, 3_500_000),
                (4, 4_000_000),
                (5, 4_500_000),
                (6, 5_000_000)
            ]
        );
        assert_eq!(
            set.set
                .members()
                .next()
                .unwrap()
                .3
                .pipe()
                .rate()
                .unwrap()
                .bps(),
            16_000_000
        );
    }

    /// Plans `old` → `new` on the daemon `b` was built for.
    fn plan_live(old: &Plan, new: &Plan, b: &Built) -> Result<live::Planned, String> {
        let fresh =
            Classifier::from_plan(new, &plan_limits(&limits(), new)).map_err(|e| e.to_string())?;
        plan_in_room(old, new, b, &fresh, b.set.flows())
    }

    /// Plans `old` → `new` on `b`'s classifier and routes, `fresh` built
    /// from `new`, with `total` flow ids in the set (taken out of `b`).
    fn plan_in_room(
        old: &Plan,
        new: &Plan,
        b: &Built,
        fresh: &Classifier,
        total: u32,
    ) -> Result<live::Planned, String> {
        live::plan_change(
            old,
            new,
            &live::Room {
                layout: b.classifier.layout(),
                new_layout: fresh.layout(),
                routes: &b.routes,
                total,
                capacity: 1024,
            },
        )
    }

    /// Whether `p` rebuilds link 1 (an install that replaces it).
    fn rebuilds_link_1(p: &live::Planned) -> bool {
        p.ops.iter().any(|op| {
            matches!(
                op,
                live::LiveOp::Install {
                    link: 1,
                    replace: true,
                    ..
                }
            )
        })
    }

    /// The live plan from `old` to `text`: only link 1's quantum, 1514 →
    /// 3000 bytes, set in place (asserted).
    fn quantum_in_place(old: &Plan, text: &str, b: &Built) -> live::Planned {
        let p = plan_live(old, &plan_of(text), b).unwrap();
        assert!(
            matches!(
                p.ops[..],
                [live::LiveOp::Quantum {
                    link: 1,
                    bytes: 3000,
                    old: 1514
                }]
            ),
            "{:?}",
            p.ops
        );
        p
    }

    fn plan_of(text: &str) -> Plan {
        parse_ipfw(text, "t.ipfw")
            .unwrap()
            .validate(&NoProfiles)
            .unwrap()
    }

    #[test]
    fn what_cannot_change_live_is_refused_by_name() {
        let base = "sched 4 config type wf2q+ bw 4Mbit/s\n\
                    queue 1 config sched 4 weight 2\n\
                    pipe 2 config bw 1Mbit/s\n\
                    add 100 queue 1 ip from any to any\n";
        let (old, b) = built(base);
        let layout = b.classifier.layout();
        // A new seed: every running link's streams, nothing rebuilt.
        let p = plan_live(&old, &plan_of(&format!("{base}seed 7\n")), &b).unwrap();
        assert_eq!(
            p.ops,
            [
                live::LiveOp::Seed {
                    link: 2,
                    seed: pspat_config::pipe_seed(7, 2)
                },
                live::LiveOp::Seed {
                    link: 4,
                    seed: pspat_config::pipe_seed(7, 4)
                }
            ]
        );
        assert!(p.log[0].starts_with("seed 7: "), "{:?}", p.log);
        // A new type, a wf2q+ sched's bw, reorder, a flowset's parent, a
        // mask: the link is rebuilt (a new scheduler), the others keep
        // their ids; a mask's rebuild moves packets by key (`remask`).
        let rebuilt_as = |text: &str, links: &[u32], remasked: bool| {
            let p = plan_live(&old, &plan_of(text), &b).unwrap();
            let got: Vec<u32> = p
                .ops
                .iter()
                .filter_map(|op| match op {
                    live::LiveOp::Install {
                        link,
                        replace: true,
                        remask,
                        ..
                    } => {
                        assert_eq!(*remask, remasked, "{text}");
                        Some(*link)
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(got, links, "{text}: {:?}", p.log);
            assert!(p.log.iter().any(|l| l.contains("rebuilt")), "{:?}", p.log);
        };
        let rebuilt = |text: &str, links: &[u32]| rebuilt_as(text, links, false);
        rebuilt_as(
            &base.replace("weight 2", "weight 2 mask src-ip 0xff"),
            &[4],
            true,
        );
        rebuilt_as(
            &base.replace(
                "pipe 2 config bw 1Mbit/s",
                "pipe 2 config bw 1Mbit/s mask dst-ip 0xff",
            ),
            &[2],
            true,
        );
        rebuilt_as(
            &base.replace("wf2q+ bw 4Mbit/s", "qfq bw 4Mbit/s mask src-ip 0xff"),
            &[4],
            true,
        );
        rebuilt(&base.replace("wf2q+ bw 4", "qfq bw 4"), &[4]);
        rebuilt(&base.replace("wf2q+ bw 4", "wf2q+ bw 8"), &[4]);
        rebuilt(
            &base.replace("bw 1Mbit/s", "bw 1Mbit/s delay 3ms jitter 1ms reorder"),
            &[2],
        );
        rebuilt(
            &format!("{base}queue 5 config sched 4\n")
                .replace("queue 1 config sched 4", "queue 1 config pipe 2"),
            &[2, 4],
        );
        // What can: a weight, a queue limit, a pipe's delay, a rule.
        let ok = plan_live(
            &old,
            &plan_of(&format!(
                "{}add 200 pipe 2 udp from any to any\n",
                base.replace("weight 2", "weight 5 queue 9")
                    .replace("bw 1Mbit/s", "bw 1Mbit/s delay 3ms")
            )),
            &b,
        )
        .unwrap();
        assert!(ok.classifier);
        let (_, r) = layout
            .range_of(pspat_classify::FlowOwner::Queue(1))
            .unwrap();
        assert!(ok.ops.contains(&live::LiveOp::Flow {
            link: 4,
            first: r.first.0,
            len: r.len(),
            params: pspat_sched::FlowParams {
                weight: 5,
                ..r.params
            },
            old: r.params,
        }));
        assert_eq!(ok.ops.len(), 3, "{:?}", ok.ops);
        assert_eq!(ok.log.len(), 4, "{:?}", ok.log);
    }

    /// A `Live` over `text`'s configuration, its pipes driven by an
    /// arbiter stand-in thread until the returned flag is set.
    fn live_of(
        text: &str,
    ) -> (
        Arc<control::Live>,
        Arc<AtomicBool>,
        std::thread::JoinHandle<Observed>,
    ) {
        live_at(text, PathBuf::from("t.ipfw"))
    }

    /// As [`live_of`], reloading from `file`.
    fn live_at(
        text: &str,
        file: PathBuf,
    ) -> (
        Arc<control::Live>,
        Arc<AtomicBool>,
        std::thread::JoinHandle<Observed>,
    ) {
        live_full(text, file, None)
    }

    /// As [`live_at`], the reverse direction's shaping turned by `reverse`.
    fn live_full(
        text: &str,
        file: PathBuf,
        reverse: Option<ReverseSwitch>,
    ) -> (
        Arc<control::Live>,
        Arc<AtomicBool>,
        std::thread::JoinHandle<Observed>,
    ) {
        let (plan, mut b) = built(text);
        let config = parse_ipfw(text, "t.ipfw").unwrap();
        let inbox: Arc<live::Inbox> = Arc::default();
        let snaps: Snapshots = Arc::default();
        let set = std::mem::take(&mut b.set);
        let set_flows = set.flows();
        let board = Arc::new(qstats::Board::default());
        let mut set = Observed::new(set, Arc::clone(&snaps), Arc::clone(&inbox))
            .with_queues(qstats::Recorder::new(Arc::clone(&board), 1, 1024));
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let arbiter = std::thread::spawn(move || {
            let mut t = 0u64;
            // Acquire: pairs with the test's Release store.
            while !stop2.load(Ordering::Acquire) {
                t += 1_000_000;
                let _ = set.dequeue(pspat_sched::Instant::from_nanos(t));
                std::thread::sleep(Duration::from_millis(1));
            }
            set
        });
        let live = Arc::new(control::Live {
            file,
            running: Mutex::new(control::Running { config, plan }),
            limits: limits(),
            classifier: Arc::new(Mutex::new(b.classifier)),
            retired: Mutex::default(),
            links: Mutex::new(b.links),
            snaps,
            inbox,
            routes: Arc::new(SharedRoutes::new(b.routes.clone())),
            total_flows: set_flows,
            capacity: 1024,
            not_ip: Arc::default(),
            input: "pspat-in".into(),
            output: "pspat-out".into(),
            queues: board,
            bridge: Mutex::default(),
            reverse,
        });
        (live, stop, arbiter)
    }

    #[test]
    fn a_change_turns_the_reverse_shaping_on_and_off_and_says_so() {
        let text = "pipe 9 config delay 30ms\nadd 100 pipe 9 udp from any to any\n";
        let switch = ReverseSwitch::new(false);
        let (live, stop, arbiter) = live_full(text, PathBuf::from("t.ipfw"), Some(switch.clone()));
        let toggled = |r: &control::Reply| {
            r.result["changes"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c.as_str())
                .filter(|c| c.starts_with("reverse direction pspat-out -> pspat-in: "))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        // A rule without a direction: no toggle.
        let r = live.request("add 200 pipe 9 tcp from any to any");
        assert!(r.ok, "{r:?}");
        assert!(toggled(&r).is_empty() && !switch.shaped(), "{r:?}");
        // The first rule naming an interface turns it on, in the reply.
        let r = live.request("add 50 pipe 9 icmp from any to any in recv pspat-out");
        assert!(r.ok, "{r:?}");
        let t = toggled(&r);
        assert!(t.len() == 1 && t[0].contains(": shaped"), "{r:?}");
        assert!(r.text.contains("changed: reverse direction"), "{}", r.text);
        assert!(switch.shaped());
        // A second one keeps it on; removing one of the two too.
        assert!(toggled(&live.request("add 60 pipe 9 ip from any to any out")).is_empty());
        assert!(toggled(&live.request("delete 60")).is_empty());
        assert!(switch.shaped());
        // A refused change turns nothing.
        assert!(!live.request("delete 50 51").ok);
        assert!(switch.shaped());
        // Removing the last one turns it off.
        let r = live.request("delete 50");
        let t = toggled(&r);
        assert!(t.len() == 1 && t[0].contains(": unshaped"), "{r:?}");
        assert!(!switch.shaped());
        assert_eq!(switch.toggles(), 2);
        stop.store(true, Ordering::Release);
        arbiter.join().unwrap();
    }

    #[test]
    fn a_sighup_reload_turns_the_reverse_shaping_as_a_ctl_change_does() {
        let dir = std::env::temp_dir().join(format!("pspat-revhup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("run.ipfw");
        let first = "pipe 9 config delay 30ms\nadd 100 pipe 9 udp from any to any\n";
        let switch = ReverseSwitch::new(false);
        let (live, stop, arbiter) = live_full(first, file.clone(), Some(switch.clone()));
        let with = format!("{first}add 50 pipe 9 icmp from any to any in recv pspat-out\n");
        std::fs::write(&file, &with).unwrap();
        let log = live.reload().unwrap();
        assert!(
            log.iter()
                .any(|l| l.starts_with("reverse direction pspat-out -> pspat-in: shaped")),
            "{log:?}"
        );
        assert!(switch.shaped());
        // Reloading the same file again turns nothing.
        let log = live.reload().unwrap();
        assert!(log.is_empty(), "{log:?}");
        std::fs::write(&file, first).unwrap();
        let log = live.reload().unwrap();
        assert!(
            log.iter()
                .any(|l| l.starts_with("reverse direction pspat-out -> pspat-in: unshaped")),
            "{log:?}"
        );
        assert!(!switch.shaped());
        assert_eq!(switch.toggles(), 2);
        stop.store(true, Ordering::Release);
        arbiter.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ctl_requests_change_the_running_pipes_or_leave_everything_as_it_was() {
        let (live, stop, arbiter) = live_of(
            "pipe 1 config bw 5Mbit/s delay 10ms queue 20\n\
             queue 3 config pipe 1 weight 2\n\
             add 100 pipe 1 udp from any to any dst-port 5001\n",
        );
        let r = live.request("pipe 1 config bw 20Mbit/s");
        assert!(r.ok, "{r:?}");
        assert_eq!(r.result["changes"].as_array().unwrap().len(), 1);
        let r = live.request("ipfw pipe show 1");
        assert!(r.ok, "{r:?}");
        assert_eq!(r.result["pipes"][0]["bw_bps"], 20_000_000);
        assert_eq!(r.result["pipes"][0]["delay_ns"], 10_000_000, "delay kept");
        assert!(
            r.text.starts_with("00001:  20.000 Mbit/s   10 ms"),
            "{}",
            r.text
        );
        // A bad line: the position on the <ctl> line, nothing changed.
        let r = live.request("pipe 1 config bw 20Mbit/s delya 5ms");
        assert!(!r.ok);
        let e = r.error.unwrap();
        assert!(e.starts_with("<ctl>:1:27: "), "{e}");
        let r = live.request("pipe 1 config plr 1.5");
        assert!(r.error.unwrap().starts_with("<ctl>:1:"));
        // Refused: deleting a pipe a rule sends to; the running plan stays.
        let before = live.plan();
        let r = live.request("pipe 1 delete");
        let e = r.error.unwrap();
        assert!(e.contains("pipe 1") && e.contains("100"), "{e}");
        assert_eq!(live.plan(), before);
        // Duplication changes live, on the pipe's queue only.
        let r = live.request("pipe 1 config duplicate 0.5");
        assert!(r.ok, "{r:?}");
        assert_eq!(live.plan().pipes[&1].queue.duplicate, 0.5);
        assert_eq!(live.plan().rules, before.rules);
        // So does corruption.
        let r = live.request("pipe 1 config corrupt 0.25");
        assert!(r.ok, "{r:?}");
        assert!(r.text.contains("corrupt 0.25"), "{}", r.text);
        assert_eq!(live.plan().pipes[&1].queue.corrupt, 0.25);
        assert_eq!(live.plan().pipes[&1].queue.duplicate, 0.5);
        // And the link's framing, taken by the running pipe.
        let r = live.request("pipe 1 config packetoverhead 24 cellsize 48 celloverhead 5");
        assert!(r.ok, "{r:?}");
        assert!(
            r.text
                .contains("packetoverhead 24 cellsize 48 celloverhead 5"),
            "{}",
            r.text
        );
        let link = &live.plan().pipes[&1].link;
        assert_eq!(
            (link.packet_overhead, link.cell_size, link.cell_overhead),
            (24, 48, 5)
        );
        let r = live.request("pipe 1 config celloverhead 5000");
        assert!(!r.ok, "{r:?}");
        assert_eq!(live.plan().pipes[&1].link.cell_overhead, 5);
        // `pipe show` lists what runs beyond rate, delay and queue limit.
        let r = live.request("pipe show 1");
        assert!(r.ok, "{r:?}");
        let want = "packetoverhead 24 cellsize 48 celloverhead 5 duplicate 0.5 corrupt 0.25";
        assert!(r.text.contains(want), "{}", r.text);
        // Rules: add, show, delete; the counters of a replaced classifier stay.
        live.classifier.lock().unwrap().classify(
            pspat_sched::Instant::ZERO,
            &key("10.199.0.1", 5001),
            100,
        );
        let r = live.request("add 200 pipe 1 tcp from any to any // web  and mail");
        assert!(r.ok, "{r:?}");
        // A weight changed live, then a rule: the flow ids stay the same.
        assert!(live.request("queue 3 config weight 7").ok);
        let r = live.request("add 300 queue 3 ip from any to any");
        assert!(r.ok, "{r:?}");
        assert!(live.request("delete 300").ok);
        let r = live.request("show rules");
        assert!(r.ok);
        let rules = r.result["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert_eq!(
            (rules[0]["number"].as_u64(), rules[0]["packets"].as_u64()),
            (Some(100), Some(1))
        );
        // The rule's comment is shown with it, in the text and the JSON.
        assert!(
            r.text
                .contains("add 200 pipe 1 tcp from any to any // web and mail"),
            "{}",
            r.text
        );
        assert_eq!(rules[1]["comment"], "web and mail", "{rules:?}");
        assert!(live.request("delete 200").ok);
        assert!(!live.request("delete 200").ok);
        assert_eq!(live.plan().rules.len(), 1);
        assert!(live.request("queue show").ok);
        // A link's mask in `sched show --json`: its configuration words,
        // null without one.
        assert!(
            live.request("pipe 4 config bw 1Mbit/s mask src-ip 0xffffff00")
                .ok
        );
        let r = live.request("sched show");
        assert!(r.ok, "{r:?}");
        let masks: Vec<_> = r.result["scheds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["number"].as_u64(), l["mask"].clone()))
            .collect();
        assert_eq!(
            masks,
            [
                (Some(1), serde_json::Value::Null),
                (Some(4), serde_json::json!("mask src-ip 0xffffff00"))
            ]
        );
        // Release: pairs with the stand-in's Acquire load.
        stop.store(true, Ordering::Release);
        let set = arbiter.join().unwrap();
        let pipe = set.set.members().next().unwrap().3.pipe();
        assert_eq!(pipe.rate().unwrap().bps(), 20_000_000);
        assert_eq!(
            pipe.queue_config(FlowId(0)).unwrap().limit,
            QueueLimit::Slots(20)
        );
    }

    #[test]
    fn metrics_name_every_pipe_rule_and_drop_reason() {
        let (live, stop, arbiter) = live_of(
            "pipe 1 config bw 5Mbit/s delay 10ms\n\
             add 100 pipe 1 udp from any to any dst-port 5001\n",
        );
        live.classifier.lock().unwrap().classify(
            pspat_sched::Instant::ZERO,
            &key("10.199.0.1", 5001),
            100,
        );
        // Release: pairs with the stand-in's Acquire load; the stand-in
        // publishes no more once stopped.
        stop.store(true, Ordering::Release);
        arbiter.join().unwrap();
        {
            let mut snaps = live.snaps.lock().unwrap();
            snaps[0].counters.in_packets = 7;
            snaps[0].counters.dropped_packets[DropReason::FlowLimit.index()] = 2;
        }
        let text = metrics::render(&live);
        for want in [
            "pspat_pipe_in_packets_total{pipe=\"1\"} 7",
            "pspat_pipe_in_packets_total{pipe=\"pass\"} 0",
            "pspat_pipe_dropped_packets_total{pipe=\"1\",reason=\"flow_limit\"} 2",
            "pspat_pipe_bandwidth_bits_per_second{pipe=\"1\"} 5000000",
            "pspat_pipe_delay_seconds{pipe=\"1\"} 0.01",
            "pspat_pipe_queued_packets{pipe=\"1\"} 0",
            "pspat_rule_packets_total{rule=\"100\"} 1",
            "pspat_rule_bytes_total{rule=\"100\"} 100",
            "pspat_rule_packets_total{rule=\"default\"} 0",
            "pspat_classifier_packets_total{decision=\"enqueued\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
    }

    #[test]
    fn a_long_delay_line_wakes_the_arbiter_every_50ms_without_moving_exits() {
        let (_, mut b) = built(
            "pipe 1 config bw 8Mbit/s delay 10s\nadd 100 pipe 1 udp from any to any dst-port 5001\n",
        );
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::default(), Arc::default());
        offer(&mut b, &mut set, "10.199.0.1", 5001, 1);
        let mut now = pspat_sched::Instant::ZERO;
        let mut exits = Vec::new();
        let mut wakes = 0;
        while exits.is_empty() {
            let next = set.next_eligible(now).unwrap();
            assert!(next.as_nanos() - now.as_nanos() <= MAX_SLEEP_WHILE_HOLDING_NS);
            now = next;
            wakes += 1;
            while let Some(p) = set.dequeue(now) {
                exits.push((p.token, now.as_nanos()));
            }
        }
        assert_eq!(exits, [(1, 10_001_000_000)]);
        assert!(wakes >= 200, "{wakes}");
    }

    #[test]
    fn a_live_weight_change_keeps_every_packet_and_each_flow_s_order() {
        let text = "sched 4 config type qfq bw 8Mbit/s\n\
                    queue 1 config sched 4 weight 1 queue 100\n\
                    queue 2 config sched 4 weight 1 queue 100\n\
                    add 100 queue 1 udp from any to any dst-port 5001\n\
                    add 200 queue 2 udp from any to any dst-port 5002\n";
        let (plan, mut b) = built(text);
        let inbox: Arc<live::Inbox> = Arc::default();
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::default(), Arc::clone(&inbox));
        // 40 packets each; tokens 0.. for port 5001, 1000.. for 5002.
        for t in 0..40 {
            offer(&mut b, &mut set, "10.199.0.1", 5001, t);
            offer(&mut b, &mut set, "10.199.0.1", 5002, 1000 + t);
        }
        let mut now = pspat_sched::Instant::ZERO;
        let mut exits = Vec::new();
        drive(&mut set, &mut now, 10_000_000, &mut exits);
        let new = plan_of(&text.replace(
            "queue 2 config sched 4 weight 1",
            "queue 2 config sched 4 weight 9",
        ));
        let planned = plan_live(&plan, &new, &b).unwrap();
        submit_while_driving(
            &inbox,
            planned.ops,
            &mut set,
            &mut now,
            1_000_000_000,
            &mut exits,
        );
        assert_eq!(exits.len(), 80, "every packet left");
        for flow in [0..1000, 1000..2000] {
            flow_in_order(&exits, flow);
        }
        // 1 ms per packet: before 10 ms the two flows alternate; in the
        // next 20 ms, flow 2 (weight 9) gets most of the link.
        let share = |from: u64, to: u64| {
            let w: Vec<_> = exits.iter().filter(|e| e.1 > from && e.1 <= to).collect();
            let two = w.iter().filter(|e| e.0 >= 1000).count();
            (two, w.len())
        };
        let (two, all) = share(0, 10_000_000);
        assert!(two.abs_diff(all - two) <= 1, "{two} of {all}");
        let (two, all) = share(10_000_000, 30_000_000);
        assert!(two * 10 >= all * 8, "{two} of {all}");
    }

    #[test]
    fn pipes_and_scheds_added_live_take_free_ids_from_the_reserve() {
        let base = "pipe 1 config bw 1Mbit/s\nadd 100 pipe 1 ip from any to any\n";
        // Pipe 1 and the pass pipe: ids 0 and 1; 8 spare.
        let (old, b) = built_spare(base, 8);
        assert_eq!(b.set.flows(), 10);
        let planned = plan_live(
            &old,
            &plan_of(&format!(
                "{base}pipe 3 config bw 2Mbit/s delay 5ms\n\
                 sched 5 config type drr bw 4Mbit/s\n\
                 queue 7 config sched 5 weight 3\n\
                 queue 8 config sched 5 weight 1\n\
                 add 300 pipe 3 udp from any to any dst-port 5002\n"
            )),
            &b,
        )
        .unwrap();
        assert!(planned.classifier);
        assert!(planned.removals.is_empty());
        // Pipe 3: one id at 2; sched 5: two ids (its two flowsets) at 3.
        assert_eq!(planned.ops.len(), 2, "{:?}", planned.ops);
        let installs: Vec<_> = planned
            .ops
            .iter()
            .map(|op| match op {
                live::LiveOp::Install {
                    link,
                    members,
                    replace,
                    ..
                } => (*link, members[0].base, members[0].flows, *replace),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(installs, [(3, 2, 1, false), (5, 3, 2, false)]);
        let routes = planned.routes.unwrap();
        assert_eq!(routes.global(3, 0, FlowId(0)), Some(FlowId(2)));
        assert_eq!(routes.global(5, 0, FlowId(1)), Some(FlowId(4)));
        assert_eq!(
            routes.global(1, 0, FlowId(0)),
            b.routes.global(1, 0, FlowId(0))
        );
        let added: Vec<_> = planned.added.iter().map(|l| (l.number, l.kind)).collect();
        assert_eq!(added, [(3, "pipe"), (5, "sched")]);
        assert!(
            planned
                .log
                .iter()
                .any(|l| l.starts_with("pipe 3 added: bw 2")),
            "{:?}",
            planned.log
        );
    }

    #[test]
    fn a_deleted_pipe_frees_its_ids_after_the_classifier_changed() {
        let base = "pipe 1 config bw 1Mbit/s\npipe 2 config bw 2Mbit/s\n\
                    add 100 pipe 1 ip from any to any\n";
        let (old, b) = built_spare(base, 0);
        let planned = plan_live(
            &old,
            &plan_of(&base.replace("pipe 2 config bw 2Mbit/s\n", "")),
            &b,
        )
        .unwrap();
        assert!(planned.ops.is_empty(), "nothing before the classifier swap");
        assert_eq!(planned.removals, [live::LiveOp::Remove { link: 2 }]);
        assert_eq!(planned.removed, [2]);
        let routes = planned.routes.unwrap();
        assert_eq!(routes.global(2, 0, FlowId(0)), None);
        assert_eq!(
            routes.free_base(b.set.flows(), 1, &[]),
            Some(1),
            "pipe 2's id is free"
        );
        // Replaced by a sched of the same number: rebuilt in its own ids.
        let text = base.replace(
            "pipe 2 config bw 2Mbit/s\n",
            "sched 2 config type qfq bw 2Mbit/s\nqueue 9 config sched 2\n",
        );
        let e = plan_live(&old, &plan_of(&text), &b).unwrap_err();
        assert!(
            e.contains("sched 2 needs 1 flow ids and 0 of the spare"),
            "{e}"
        );
        assert!(e.contains("--spare-flows"), "{e}");
        let (old, b) = built_spare(base, 1);
        let planned = plan_live(&old, &plan_of(&text), &b).unwrap();
        assert!(matches!(
            &planned.ops[..],
            [live::LiveOp::Install {
                link: 2,
                replace: true,
                ..
            }]
        ));
        assert!(planned.removals.is_empty());
    }

    #[test]
    fn a_link_beyond_the_reserve_is_refused_naming_the_flag_and_nothing_is_planned() {
        let base = "pipe 1 config bw 1Mbit/s\nadd 100 pipe 1 ip from any to any\n";
        let (old, b) = built_spare(base, 2);
        // Two pipes fit; a masked pipe (2 instances + the overflow one) does not.
        assert!(plan_live(
            &old,
            &plan_of(&format!("{base}pipe 2 config\npipe 3 config\n")),
            &b
        )
        .is_ok());
        let e = plan_live(
            &old,
            &plan_of(&format!(
                "{base}pipe 2 config\npipe 3 config\npipe 4 config\n"
            )),
            &b,
        )
        .unwrap_err();
        assert!(
            e.starts_with("pipe 4 needs 1 flow ids and 0 of the spare ones are free"),
            "{e}"
        );
        let e = plan_live(
            &old,
            &plan_of(&format!("{base}pipe 2 config mask src-ip 0xffffffff\n")),
            &b,
        )
        .unwrap_err();
        assert!(
            e.contains("pipe 2 needs 3 flow ids and 0 of the spare"),
            "{e}"
        );
        assert!(
            e.contains("restart pspat run with a larger --spare-flows"),
            "{e}"
        );
    }

    #[test]
    fn a_batch_the_arbiter_refuses_in_part_applies_nothing() {
        let text = "sched 4 config type qfq bw 8Mbit/s\n\
                    queue 1 config sched 4 weight 1\n\
                    add 100 queue 1 ip from any to any\n";
        let (old, mut b) = built_spare(text, 4);
        let new = plan_of(&format!(
            "{}pipe 2 config bw 1Mbit/s\n",
            text.replace("8Mbit/s", "16Mbit/s")
        ));
        let planned = plan_live(&old, &new, &b).unwrap();
        let mut ops = planned.ops;
        assert_eq!(ops.len(), 2, "{ops:?}");
        // Spoil the install: its ids overlap sched 4's.
        for op in &mut ops {
            if let live::LiveOp::Install { members, .. } = op {
                members[0].base = 0;
            }
        }
        let mut gone = Vec::new();
        let e = live::apply(&mut b.set, pspat_sched::Instant::ZERO, ops, &mut gone).unwrap_err();
        assert!(e.contains("not free"), "{e}");
        assert!(gone.is_empty());
        assert_eq!(b.set.pipe_count(), 2, "sched 4 and the pass pipe");
        let rate = b.set.members().next().unwrap().3.pipe().rate().unwrap();
        assert_eq!(rate.bps(), 8_000_000, "the rate was not changed");
    }

    #[test]
    fn ctl_adds_a_pipe_routes_to_it_and_deletes_it_only_once_no_rule_sends_to_it() {
        let (live, stop, arbiter) =
            live_of("pipe 1 config bw 5Mbit/s\nadd 100 pipe 1 udp from any to any dst-port 5001\n");
        let r = live.request("pipe 2 config bw 1Mbit/s delay 4ms");
        assert!(r.ok, "{r:?}");
        assert!(r.text.contains("pipe 2 added"), "{}", r.text);
        assert!(
            live.request("add 200 pipe 2 udp from any to any dst-port 5002")
                .ok
        );
        let r = live.request("pipe show 2");
        assert!(r.ok, "{r:?}");
        assert_eq!(r.result["pipes"][0]["bw_bps"], 1_000_000);
        // The classifier sends port 5002 to pipe 2, and the routes know it.
        let verdict = live.classifier.lock().unwrap().classify(
            pspat_sched::Instant::ZERO,
            &key("10.199.0.1", 5002),
            100,
        );
        let Decision::Enqueue(p) = verdict else {
            panic!("{verdict:?}");
        };
        assert_eq!(p.link, 2);
        let routes = live.routes.get();
        let global = routes.global(2, 0, p.flow).unwrap();
        // Refused while rule 200 sends to it; nothing changed.
        let r = live.request("pipe 2 delete");
        let e = r.error.unwrap();
        assert!(e.contains("rule 200 still sends to it"), "{e}");
        assert!(live.plan().pipes.contains_key(&2));
        assert!(live
            .request("queue 9 delete")
            .error
            .unwrap()
            .contains("does not exist"));
        assert!(live.request("delete 200").ok);
        let r = live.request("pipe 2 delete");
        assert!(r.ok, "{r:?}");
        assert!(r.text.contains("pipe 2 deleted"), "{}", r.text);
        assert!(live
            .request("pipe show 2")
            .error
            .unwrap()
            .contains("does not exist"));
        assert!(live.routes.get().global(2, 0, FlowId(0)).is_none());
        let text = metrics::render(&live);
        assert!(
            text.contains("pspat_pipe_in_packets_total{pipe=\"1\"}"),
            "{text}"
        );
        assert!(!text.contains("pipe=\"2\""), "{text}");
        // Added again: it takes the freed ids.
        assert!(live.request("pipe 2 config bw 3Mbit/s").ok);
        assert_eq!(live.routes.get().global(2, 0, FlowId(0)), Some(global));
        assert!(live.request("pipe 2 delete").ok);
        // Release: pairs with the stand-in's Acquire load.
        stop.store(true, Ordering::Release);
        let set = arbiter.join().unwrap();
        assert_eq!(set.set.pipe_count(), 2, "pipe 1 and the pass pipe");
        // The final report keeps one row for the deleted pipe 2.
        let snaps = live.snaps.lock().unwrap().clone();
        let pipes = pipes_json(&live.links.lock().unwrap(), &snaps);
        let rows: Vec<_> = pipes.iter().map(|p| (p.number, p.removed)).collect();
        assert_eq!(rows, [(Some(1), false), (Some(2), true), (None, false)]);
        assert_eq!(
            snaps.iter().filter(|s| s.removed).count(),
            2,
            "two lives of pipe 2"
        );
    }

    #[test]
    fn a_sighup_reload_adds_and_deletes_pipes_with_their_rules_in_one_change() {
        let dir = std::env::temp_dir().join(format!("pspat-livepipes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("run.ipfw");
        let first = "pipe 1 config bw 5Mbit/s\npipe 2 config bw 1Mbit/s\n\
                     add 100 pipe 1 udp from any to any dst-port 5001\n\
                     add 200 pipe 2 udp from any to any dst-port 5002\n";
        let (live, stop, arbiter) = live_at(first, file.clone());
        // A new pipe with its rule, and a probability out of range: nothing
        // applied.
        std::fs::write(
            &file,
            first.replace(
                "pipe 1 config bw 5Mbit/s",
                "pipe 1 config bw 5Mbit/s plr 1.5",
            ) + "pipe 3 config bw 2Mbit/s\nadd 300 pipe 3 udp from any to any dst-port 5003\n",
        )
        .unwrap();
        let e = live.reload().unwrap_err();
        assert!(e.contains("plr"), "{e}");
        assert!(live.routes.get().global(3, 0, FlowId(0)).is_none());
        assert!(!live.plan().pipes.contains_key(&3));
        // Pipe 2 gone while rule 200 stays: refused, nothing changed.
        std::fs::write(&file, first.replace("pipe 2 config bw 1Mbit/s\n", "")).unwrap();
        let e = live.reload().unwrap_err();
        assert!(e.contains("pipe 2"), "{e}");
        assert!(live.plan().pipes.contains_key(&2));
        // Pipe 2 and its rule gone, pipe 3 and its rule new: one change.
        std::fs::write(
            &file,
            "pipe 1 config bw 5Mbit/s\npipe 3 config bw 2Mbit/s\n\
             add 100 pipe 1 udp from any to any dst-port 5001\n\
             add 300 pipe 3 udp from any to any dst-port 5003\n",
        )
        .unwrap();
        let log = live.reload().unwrap();
        assert!(log.contains(&"pipe 2 deleted".to_string()), "{log:?}");
        assert!(log.iter().any(|l| l.starts_with("pipe 3 added")), "{log:?}");
        let routes = live.routes.get();
        assert!(routes.global(2, 0, FlowId(0)).is_none());
        assert!(routes.global(3, 0, FlowId(0)).is_some());
        // Release: pairs with the stand-in's Acquire load.
        stop.store(true, Ordering::Release);
        let set = arbiter.join().unwrap();
        let mut links: Vec<u32> = set.set.members().map(|m| m.0).collect();
        links.sort_unstable();
        assert_eq!(links, [1, 3, PASS_LINK]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_queue_added_to_or_deleted_from_a_running_sched_rebuilds_that_sched_only() {
        let (live, stop, arbiter) = live_of(
            "pipe 1 config bw 5Mbit/s\n\
             sched 4 config type drr bw 8Mbit/s\n\
             queue 1 config sched 4 weight 1\n\
             add 100 pipe 1 udp from any to any dst-port 5001\n\
             add 200 queue 1 udp from any to any dst-port 5002\n",
        );
        let before = live.routes.get();
        let r = live.request("queue 2 config sched 4 weight 3");
        assert!(r.ok, "{r:?}");
        let log = r.result["changes"].as_array().unwrap();
        assert!(
            log.iter()
                .any(|l| l.as_str().unwrap().starts_with("sched 4 rebuilt")),
            "{log:?}"
        );
        let after = live.routes.get();
        assert_eq!(
            before.global(1, 0, FlowId(0)),
            after.global(1, 0, FlowId(0)),
            "pipe 1 keeps its ids"
        );
        let four: Vec<_> = after.entries().iter().filter(|e| e.0 == 4).collect();
        assert_eq!(four.len(), 1);
        assert_eq!(four[0].3, 2, "two flowsets");
        assert!(
            live.request("add 300 queue 2 udp from any to any dst-port 5003")
                .ok
        );
        // A sched whose flowset a rule sends to, a flowset a rule sends to: refused.
        let e = live.request("sched 4 delete").error.unwrap();
        assert!(e.contains("rule 200 still sends to its queue 1"), "{e}");
        let e = live.request("queue 2 delete").error.unwrap();
        assert!(e.contains("rule 300 still sends to it"), "{e}");
        assert!(live.request("delete 300").ok);
        let r = live.request("queue 2 delete");
        assert!(r.ok, "{r:?}");
        assert_eq!(
            live.routes
                .get()
                .entries()
                .iter()
                .find(|e| e.0 == 4)
                .unwrap()
                .3,
            1
        );
        // The last flowset of a sched cannot go alone; the sched goes with it.
        assert!(live.request("delete 200").ok);
        let e = live.request("queue 1 delete").error.unwrap();
        assert!(e.contains("last flowset of sched 4"), "{e}");
        let r = live.request("sched 4 delete");
        assert!(r.ok, "{r:?}");
        let log = r.result["changes"].as_array().unwrap();
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(!live.plan().queues.contains_key(&1));
        // A sched and its flowsets added in one line (`;` between statements).
        let r = live.request("sched 4 config type qfq bw 2Mbit/s; queue 1 config sched 4 weight 2");
        assert!(r.ok, "{r:?}");
        assert!(
            live.request("add 200 queue 1 udp from any to any dst-port 5002")
                .ok
        );
        // Release: pairs with the stand-in's Acquire load.
        stop.store(true, Ordering::Release);
        let set = arbiter.join().unwrap();
        let sizes: Vec<(u32, u32)> = set
            .set
            .routes()
            .entries()
            .iter()
            .map(|e| (e.0, e.3))
            .collect();
        assert_eq!(sizes, [(1, 1), (4, 1), (PASS_LINK, 1)]);
        // Sched 4's first life (three members: built, two rebuilds) is in
        // its deleted row; the new sched 4 is its own.
        let snaps = live.snaps.lock().unwrap().clone();
        assert_eq!(snaps.iter().filter(|s| s.link == 4 && s.removed).count(), 3);
        let pipes = pipes_json(&live.links.lock().unwrap(), &snaps);
        let rows: Vec<_> = pipes
            .iter()
            .map(|p| (p.number, p.removed, p.alg.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                (Some(1), false, "fifo"),
                (Some(4), true, "drr"),
                (Some(4), false, "qfq"),
                (None, false, "fifo")
            ]
        );
    }

    #[test]
    fn a_flowset_added_to_a_busy_sched_keeps_every_queued_packet_in_order() {
        let text = "sched 4 config type drr bw 8Mbit/s delay 5ms\n\
                    queue 1 config sched 4 queue 100\n\
                    queue 3 config sched 4 queue 100\n\
                    add 100 queue 1 udp from any to any dst-port 5001\n\
                    add 300 queue 3 udp from any to any dst-port 5003\n";
        let (plan, mut b) = built_spare(text, 8);
        let inbox: Arc<live::Inbox> = Arc::default();
        let snaps: Snapshots = Arc::default();
        let total = b.set.flows();
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::clone(&snaps), Arc::clone(&inbox));
        for t in 0..20 {
            offer(&mut b, &mut set, "10.199.0.1", 5001, t);
            offer(&mut b, &mut set, "10.199.0.1", 5003, 1000 + t);
        }
        let mut now = pspat_sched::Instant::ZERO;
        let mut exits = Vec::new();
        drive(&mut set, &mut now, 7_500_000, &mut exits);
        // Queue 2 comes between 1 and 3: queue 3's id moves.
        let new = plan_of(&format!(
            "{text}queue 2 config sched 4 weight 5\nadd 200 queue 2 udp from any to any dst-port 5002\n"
        ));
        let fresh = Classifier::from_plan(&new, &limits()).unwrap();
        let planned = plan_in_room(&plan, &new, &b, &fresh, total).unwrap();
        assert!(planned.log.iter().any(|l| l.starts_with("sched 4 rebuilt")));
        submit_while_driving(
            &inbox,
            planned.ops,
            &mut set,
            &mut now,
            1_000_000_000,
            &mut exits,
        );
        // 1 ms a packet + 5 ms, without a pause at the change (7.5 ms).
        sched_4_drained(set, &snaps, &b.links, &exits, 40, 40, |exits| {
            for flow in [0..1000, 1000..2000] {
                assert_eq!(flow_in_order(exits, flow), 20);
            }
        });
    }

    /// Checks that the exits whose tokens fall in `flow` left in token
    /// order (one flow's packets carry increasing tokens); returns how many.
    fn flow_in_order(exits: &[(u64, u64)], flow: std::ops::Range<u64>) -> usize {
        let tokens: Vec<u64> = exits
            .iter()
            .map(|e| e.0)
            .filter(|t| flow.contains(t))
            .collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        tokens.len()
    }

    /// The checks after a live change on sched 4 (8 Mbit/s, 5 ms: 1 ms a
    /// 1000-byte packet): nothing dropped late, all `n` packets left, each
    /// flow in its order (`in_order`), the first `paced` one a millisecond
    /// after the delay with no pause at the change, and the sched's counts
    /// (`n` in, `n` out, none dropped) once the arbiter let go of the set.
    fn sched_4_drained(
        mut set: Observed,
        snaps: &Snapshots,
        links: &[LinkInfo],
        exits: &[(u64, u64)],
        n: u64,
        paced: u64,
        in_order: impl FnOnce(&[(u64, u64)]),
    ) {
        let mut late = Vec::new();
        set.take_late_drops(&mut |r| late.push(r));
        assert!(late.is_empty(), "{late:?}");
        assert_eq!(exits.len() as u64, n, "every packet left");
        in_order(exits);
        let times: Vec<u64> = exits.iter().map(|e| e.1).take(paced as usize).collect();
        assert_eq!(
            times,
            (1..=paced)
                .map(|i| i * 1_000_000 + 5_000_000)
                .collect::<Vec<_>>()
        );
        drop(set);
        let snaps = snaps.lock().unwrap().clone();
        let pipes = pipes_json(links, &snaps);
        let four = pipes.iter().find(|p| p.number == Some(4)).unwrap();
        assert_eq!(
            (four.in_packets, four.out_packets, four.dropped_total),
            (n, n, 0)
        );
    }

    #[test]
    fn a_mask_changed_on_a_busy_sched_moves_every_packet_to_its_new_queue_in_order() {
        // One dynamic queue per (source, port), then one per source (a
        // coarser mask), then an instance per source as well (finer).
        let text = "sched 4 config type drr bw 8Mbit/s delay 5ms\n\
                    queue 1 config sched 4 queue 100 mask src-ip 0xffffffff dst-port 0xffff\n\
                    add 100 queue 1 udp from any to any\n";
        let (plan, mut b) = built_spare(text, 32);
        let inbox: Arc<live::Inbox> = Arc::default();
        let snaps: Snapshots = Arc::default();
        let total = b.set.flows();
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::clone(&snaps), Arc::clone(&inbox));
        // Token: flow * 1000 + sequence; flows 0..4 are (source, port).
        let flows = [
            ("10.199.0.1", 5001),
            ("10.199.0.1", 5002),
            ("10.199.0.2", 5001),
            ("10.199.0.2", 5002),
        ];
        let mut old_ids = std::collections::BTreeSet::new();
        for seq in 0..10 {
            for (f, (src, port)) in flows.iter().enumerate() {
                old_ids.insert(offer(&mut b, &mut set, src, *port, f as u64 * 1000 + seq));
            }
        }
        assert_eq!(old_ids.len(), 4);
        let mut now = pspat_sched::Instant::ZERO;
        let mut exits = Vec::new();
        drive(&mut set, &mut now, 7_500_000, &mut exits);
        let change = |b: &mut Built,
                      set: &mut Observed,
                      old: &Plan,
                      new_text: &str,
                      now: &mut pspat_sched::Instant,
                      exits: &mut Vec<(u64, u64)>| {
            let new = plan_of(new_text);
            let mut fresh = Classifier::from_plan(&new, &limits()).unwrap();
            let mut planned = planned_remask(b, old, &new, &mut fresh, &b.classifier, total);
            let ops = std::mem::take(&mut planned.ops);
            let until = now.as_nanos() + 1_000_000;
            submit_while_driving(&inbox, ops, set, now, until, exits);
            fresh.bind_interface("in", INPUT_INDEX);
            b.classifier = fresh;
            b.routes = planned.routes.unwrap();
            new
        };
        let coarser = text.replace(" dst-port 0xffff", "");
        let plan2 = change(&mut b, &mut set, &plan, &coarser, &mut now, &mut exits);
        // New packets of a flow find the queue its packets went to.
        let mut new_ids = std::collections::BTreeSet::new();
        for (f, (src, port)) in flows.iter().enumerate() {
            new_ids.insert(offer(&mut b, &mut set, src, *port, f as u64 * 1000 + 10));
        }
        assert_eq!(new_ids.len(), 2, "one queue per source");
        assert!(
            new_ids.is_disjoint(&old_ids),
            "the sched moved to other ids"
        );
        drive(&mut set, &mut now, 20_000_000, &mut exits);
        // A finer sched mask: an instance per source.
        let finer = coarser.replace("delay 5ms", "delay 5ms mask src-ip 0xffffffff");
        change(&mut b, &mut set, &plan2, &finer, &mut now, &mut exits);
        for (f, (src, port)) in flows.iter().enumerate() {
            offer(&mut b, &mut set, src, *port, f as u64 * 1000 + 11);
        }
        drive(&mut set, &mut now, 1_000_000_000, &mut exits);
        // Up to the second change (20 ms) the link sends a packet a ms
        // with no pause at the first (7.5 ms): the 15th leaves at 20 ms.
        sched_4_drained(set, &snaps, &b.links, &exits, 48, 15, |exits| {
            // Each flow keeps its order across the coarser mask; across the
            // finer one its carried packets keep theirs, and its next packet
            // (in its own instance, on its own link) may overtake them: this
            // test lends no classifier, so each old queue moves whole (the
            // split by key: a_finer_mask_places_each_held_packet_by_the_key_its_frame_gives).
            for f in 0..4u64 {
                let mut tokens: Vec<u64> = exits
                    .iter()
                    .map(|e| e.0)
                    .filter(|t| t / 1000 == f)
                    .collect();
                let last = tokens.iter().position(|t| t % 1000 == 11).unwrap();
                tokens.remove(last);
                assert_eq!(
                    tokens,
                    (0..11).map(|s| f * 1000 + s).collect::<Vec<_>>(),
                    "flow {f}"
                );
            }
        });
    }

    /// A UDP frame of `key(src, dport)`.
    fn frame_of(src: &str, dport: u16) -> Vec<u8> {
        let (src, dst): (std::net::Ipv4Addr, std::net::Ipv4Addr) =
            (src.parse().unwrap(), "10.199.9.9".parse().unwrap());
        let mut out = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(src.octets(), dst.octets(), 64)
            .udp(1000, dport)
            .write(&mut out, &[0u8; 958])
            .unwrap();
        out
    }

    #[test]
    fn a_finer_mask_places_each_held_packet_by_the_key_its_frame_gives() {
        // One queue for three sources, then one queue per source. The held
        // packets' frames are in a pool (client 0, descriptor = token) as
        // the bridge's are; the new classifier is lent to the arbiter.
        let text = "sched 4 config type drr bw 8Mbit/s delay 5ms\n\
                    queue 1 config sched 4 queue 100\n\
                    add 100 queue 1 udp from any to any\n";
        let (plan, mut b) = built_spare(text, 32);
        let total = b.set.flows();
        let mut pool = pspat_io::FramePool::new(64, 2048).unwrap();
        let arena = Arc::clone(pool.arena());
        let mut free: Vec<pspat_io::Frame> = std::iter::from_fn(|| pool.alloc()).collect();
        free.sort_by_key(|f| std::cmp::Reverse(f.index()));
        let frames: Arc<OnceLock<HeldFrames>> = Arc::default();
        assert!(frames
            .set(HeldFrames {
                arena: Arc::clone(&arena),
                per_client: 64,
                limits: pspat_io::parse::ParseLimits::default(),
            })
            .is_ok());
        let running = Arc::new(Mutex::new(b.classifier.clone()));
        let inbox: Arc<live::Inbox> = Arc::default();
        let snaps: Snapshots = Arc::default();
        let set = std::mem::take(&mut b.set);
        let mut set = Observed::new(set, Arc::clone(&snaps), Arc::clone(&inbox))
            .with_frames(frames, Arc::clone(&running));
        // Token t: source t % 3, sequence t / 3 (frames 0..21 written).
        let sources = ["10.199.0.1", "10.199.0.2", "10.199.0.3"];
        let mut with_frame = |t: u64| {
            let mut f = free.pop().unwrap();
            assert_eq!(u64::from(f.index()), t);
            arena
                .write(&mut f, &frame_of(sources[(t % 3) as usize], 7000))
                .unwrap();
            assert_eq!(u64::from(arena.release(f).unwrap()), t);
        };
        for t in 0..18u64 {
            with_frame(t);
            offer(&mut b, &mut set, sources[(t % 3) as usize], 7000, t);
        }
        // Classified before the change, taken by the arbiter after it.
        let late: Vec<(u64, FlowId)> = (18..21u64)
            .map(|t| {
                with_frame(t);
                let flow = match b.classifier.classify(
                    pspat_sched::Instant::ZERO,
                    &key(sources[(t % 3) as usize], 7000),
                    1000,
                ) {
                    Decision::Enqueue(p) => b.routes.global(p.link, p.instance, p.flow).unwrap(),
                    v => panic!("{v:?}"),
                };
                (t, flow)
            })
            .collect();
        let mut now = pspat_sched::Instant::ZERO;
        let mut exits = Vec::new();
        drive(&mut set, &mut now, 7_500_000, &mut exits);
        let new = plan_of(&text.replace("queue 100", "queue 100 mask src-ip 0xffffffff"));
        let mut fresh = Classifier::from_plan(&new, &limits()).unwrap();
        fresh.bind_interface("in", INPUT_INDEX);
        let mut held = running.lock().unwrap();
        let mut planned = planned_remask(&b, &plan, &new, &mut fresh, &held, total);
        let lent = live::Lent::new(fresh);
        live::lend(&mut planned.ops, &lent);
        let ops = std::mem::take(&mut planned.ops);
        let until = now.as_nanos() + 1_000_000;
        submit_while_driving(&inbox, ops, &mut set, &mut now, until, &mut exits);
        let fresh = lent.take_back();
        b.classifier = fresh.clone();
        // The control side replaces the running classifier, then lets go.
        *held = fresh;
        drop(held);
        b.routes = planned.routes.unwrap();
        for (t, flow) in late {
            set.enqueue(now, Packet::new(flow, 1000, t)).unwrap();
        }
        // Next packets, in their own queues (no frame needed).
        for t in 21..30u64 {
            offer(&mut b, &mut set, sources[(t % 3) as usize], 7000, t);
        }
        drive(&mut set, &mut now, 1_000_000_000, &mut exits);
        let mut dropped = Vec::new();
        set.take_late_drops(&mut |r| dropped.push(r));
        assert!(dropped.is_empty(), "{dropped:?}");
        assert_eq!(exits.len(), 30, "every packet left");
        for s in 0..3u64 {
            let seq: Vec<u64> = exits.iter().map(|e| e.0).filter(|t| t % 3 == s).collect();
            assert_eq!(
                seq,
                (0..10).map(|k| k * 3 + s).collect::<Vec<_>>(),
                "source {s} in order: {exits:?}"
            );
        }
        // Every frame still in flight (released), none lost to the reads.
        for t in 0..21u32 {
            assert!(arena.reclaim(t).is_ok(), "frame {t}");
        }
    }

    #[test]
    fn a_rule_change_keeps_dynamic_queues_and_a_mask_change_merges_them() {
        let (live, stop, arbiter) = live_of(
            "sched 4 config type drr bw 8Mbit/s\n\
             queue 1 config sched 4 mask src-ip 0xffffffff\n\
             add 100 queue 1 udp from any to any\n",
        );
        let place = |src: &str| -> (u32, FlowId, bool) {
            match live.classifier.lock().unwrap().classify(
                pspat_sched::Instant::ZERO,
                &key(src, 5001),
                100,
            ) {
                Decision::Enqueue(p) => (p.instance, p.flow, p.new_queue),
                d => panic!("{d:?}"),
            }
        };
        let srcs = ["10.199.0.1", "10.199.0.2", "10.199.0.3"];
        let before: Vec<_> = srcs.iter().map(|s| place(s)).collect();
        assert!(before.iter().all(|p| p.2), "{before:?}");
        // A rule: a new classifier, the same dynamic queues.
        let r = live.request("add 50 deny tcp from any to any");
        assert!(r.ok, "{r:?}");
        let after: Vec<_> = srcs.iter().map(|s| place(s)).collect();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!((b.0, b.1, false), *a);
        }
        // A coarser mask: one queue for the /24, found by every source.
        let r = live.request("queue 1 config mask src-ip 0xffffff00");
        assert!(r.ok, "{r:?}");
        assert!(r.text.contains("queue 1: new mask"), "{}", r.text);
        assert!(r.text.contains("sched 4 rebuilt"), "{}", r.text);
        let merged: Vec<_> = srcs.iter().map(|s| place(s)).collect();
        assert!(
            merged.iter().all(|m| (m.1, m.2) == (merged[0].1, false)),
            "{merged:?}"
        );
        // The seed: accepted, nothing rebuilt.
        let r = live.request("seed 11");
        assert!(r.ok, "{r:?}");
        assert!(r.text.starts_with("changed: seed 11: "), "{}", r.text);
        assert_eq!(live.plan().seed, 11);
        // Release: pairs with the stand-in's Acquire load.
        stop.store(true, Ordering::Release);
        arbiter.join().unwrap();
    }
}
