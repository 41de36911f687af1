use pspat_config::{parse_ipfw, parse_toml, print_ipfw, print_toml};

/// (input as the man page or the brief writes it, normalised output)
const EXAMPLES: &[(&str, &str)] = &[
    (
        "pipe 1 config bw 10Mbit/s delay 20ms plr 0.01 queue 50",
        "pipe 1 config bw 10Mbit/s delay 20ms queue 50 plr 0.01\n",
    ),
    (
        "sched 4 config type qfq bw 4Mbit/s mask src-ip 0xff",
        "sched 4 config type qfq bw 4Mbit/s mask src-ip 0x000000ff\n",
    ),
    (
        "queue 1 config weight 10 sched 4 mask dst-ip 0xffffffff",
        "queue 1 config weight 10 sched 4 mask dst-ip 0xffffffff\n",
    ),
    (
        "add 100 queue 1 ip from 10.0.0.0/24 to any dst-port 80",
        "add 100 queue 1 ip from 10.0.0.0/24 to any dst-port 80\n",
    ),
    ("table 1 add 1.2.3.0/24 20", "table 1 add 1.2.3.0/24 20\n"),
    ("ipfw sched 4 config type qfq bw 4Mbit/s", "sched 4 config type qfq bw 4Mbit/s\n"),
    (
        "ipfw queue 1 config weight 10 sched 4;  ipfw queue 2 config weight 3 sched 4",
        "queue 1 config weight 10 sched 4\nqueue 2 config weight 3 sched 4\n",
    ),
    (
        "ipfw add 100 queue 1 out src-ip 1.2.3.4",
        "add 100 queue 1 ip from 1.2.3.4 to any out\n",
    ),
    (
        "ipfw add 100 pipe 1 ip from any to any not dst-port 80",
        "add 100 pipe 1 ip from any to any not dst-port 80\n",
    ),
    (
        "ipfw add 200 pipe 1 not udp from any not 1000-2000 to any not via eth0",
        "add 200 pipe 1 not udp from any to any not src-port 1000-2000 not via eth0\n",
    ),
    (
        "ipfw queue 2 config weight 1 sched 5 mask dst-ip 0xff       # one queue per host",
        "queue 2 config weight 1 sched 5 mask dst-ip 0x000000ff\n",
    ),
    (
        "ipfw sched 5 config type QFQ bw 4Mbit/s mask src-ip 0xff    # one instance per host",
        "sched 5 config type qfq bw 4Mbit/s mask src-ip 0x000000ff\n",
    ),
    (
        "ipfw add queue tablearg out src-ip table(1); ipfw table 1 add 1.2.3.0/24 20",
        "table 1 add 1.2.3.0/24 20\nadd queue tablearg ip from table(1) to any out\n",
    ),
    (
        "ipfw pipe 1 config bw 500Kbit/s queue 100 red 0.002/30/80/0.1",
        "pipe 1 config bw 500Kbit/s queue 100 red 0.002/30/80/0.1\n",
    ),
    // dummynet's `ecn` after RED, on a pipe and on a queue, and in any
    // place among the options; printed right after the RED values.
    (
        "ipfw pipe 1 config bw 10Mbit/s queue 100 red 0.002/30/80/0.1 ecn",
        "pipe 1 config bw 10Mbit/s queue 100 red 0.002/30/80/0.1 ecn\n",
    ),
    (
        "ipfw queue 2 config weight 5 sched 1 gred 0.002/30/80/0.1 ecn",
        "queue 2 config weight 5 sched 1 gred 0.002/30/80/0.1 ecn\n",
    ),
    (
        "pipe 3 config ecn noerror bw 1Mbit/s red 0.002/30/80/0.1 buckets 128",
        "pipe 3 config bw 1Mbit/s red 0.002/30/80/0.1 ecn buckets 128 noerror\n",
    ),
    // `lossecn` (tc-netem's `ecn`) with each random loss, in any place
    // among the options; printed after the loss models, before
    // `duplicate`.
    (
        "ipfw pipe 1 config bw 10Mbit/s plr 1% lossecn",
        "pipe 1 config bw 10Mbit/s plr 0.01 lossecn\n",
    ),
    (
        "pipe 4 config lossecn duplicate 0.01 gemodel 0.01 plr 0.001 red 0.002/30/80/0.1 ecn",
        "pipe 4 config plr 0.001 red 0.002/30/80/0.1 ecn gemodel 0.01 0.99 1 0 lossecn duplicate 0.01\n",
    ),
    (
        "ipfw queue 2 config weight 5 lossecn sched 1 lossstate 0.01 noerror",
        "queue 2 config weight 5 sched 1 noerror lossstate 0.01 0.99 0 1 0 lossecn\n",
    ),
    // dummynet's `codel`: its parameters in any order right after it,
    // printed in RED's place with both times; `noecn` is the default.
    (
        "ipfw pipe 1 config bw 10Mbit/s codel",
        "pipe 1 config bw 10Mbit/s codel target 5ms interval 100ms\n",
    ),
    (
        "pipe 2 config codel ecn interval 50ms target 1500us queue 100 noerror",
        "pipe 2 config queue 100 codel target 1500us interval 50ms ecn noerror\n",
    ),
    (
        "ipfw queue 3 config sched 1 codel noecn target 0.5 weight 2",
        "queue 3 config weight 2 sched 1 codel target 500us interval 100ms\n",
    ),
    (
        "ipfw pipe 3 config delay 80ms bw 40Mbit/s plr 0.01 queue 1000Kbytes",
        "pipe 3 config bw 40Mbit/s delay 80ms queue 1000KB plr 0.01\n",
    ),
    (
        "pipe 1 config bw 300Kbit/s queue 50KBytes",
        "pipe 1 config bw 300Kbit/s queue 50KB\n",
    ),
    (
        "pipe 1 config mask src-ip 0x000000ff bw 200Kbit/s queue 20Kbytes",
        "pipe 1 config bw 200Kbit/s queue 20KB mask src-ip 0x000000ff\n",
    ),
    ("pipe 10 config plr 0.05", "pipe 10 config plr 0.05\n"),
    (
        "add pipe 3 in src-port 80,443,8080",
        "add pipe 3 ip from any to any src-port 80,443,8080 in\n",
    ),
    ("queue 1 config weight 10 sched 4", "queue 1 config weight 10 sched 4\n"),
    (
        "pipe 2 config bw 1Mbit/s delay 500us jitter 100us distribution normal reorder gemodel 0.01 0.3 1 0 duplicate 0.001",
        "pipe 2 config bw 1Mbit/s delay 500us jitter 100us distribution normal reorder gemodel 0.01 0.3 1 0 duplicate 0.001\n",
    ),
    (
        "pipe 1 config bw 8Mbit/s packetoverhead 10 cellsize 48 celloverhead 5",
        "pipe 1 config bw 8Mbit/s packetoverhead 10 cellsize 48 celloverhead 5\n",
    ),
    (
        "pipe 4 config cellsize 48 bw 2Mbit/s celloverhead 5 packetoverhead -8",
        "pipe 4 config bw 2Mbit/s packetoverhead -8 cellsize 48 celloverhead 5\n",
    ),
    (
        "pipe 5 config delay 10ms reorder 25% gap 5",
        "pipe 5 config delay 10ms reorder 0.25 gap 5\n",
    ),
    (
        "pipe 6 config delay 10ms reorder 0.5",
        "pipe 6 config delay 10ms reorder 0.5\n",
    ),
    (
        "pipe 3 config corrupt 0.001 delay 5ms duplicate 0.01",
        "pipe 3 config delay 5ms duplicate 0.01 corrupt 0.001\n",
    ),
    (
        "pipe 7 config bw 50Mbit/s slot 800us 1ms packets 32 bytes 64000 delay 2ms",
        "pipe 7 config bw 50Mbit/s delay 2ms slot 800us 1ms packets 32 bytes 64000B\n",
    ),
    (
        "pipe 8 config slot 2ms",
        "pipe 8 config slot 2ms\n",
    ),
    (
        "pipe 2 config delay 100ms jitter 10ms correlation 25%",
        "pipe 2 config delay 100ms jitter 10ms correlation 0.25\n",
    ),
    (
        "pipe 9 config delay 100ms jitter 20ms distribution paretonormal",
        "pipe 9 config delay 100ms jitter 20ms distribution paretonormal\n",
    ),
    // tc-netem's `loss state`: the defaults of the values not given are
    // printed (p31 = 1 - p13, p32 = 0, p23 = 1, p14 = 0).
    (
        "pipe 1 config lossstate 0.01",
        "pipe 1 config lossstate 0.01 0.99 0 1 0\n",
    ),
    (
        "pipe 3 config bw 1Mbit/s lossstate 0.02 0.2 0.3 0.1 0.01 plr 0.001",
        "pipe 3 config bw 1Mbit/s plr 0.001 lossstate 0.02 0.2 0.3 0.1 0.01\n",
    ),
    (
        "pipe 4 config lossstate 0.1 0.5 queue 20",
        "pipe 4 config queue 20 lossstate 0.1 0.5 0 1 0\n",
    ),
    (
        "pipe 5 config lossstate 0 1 0 1 0.05 duplicate 0.01",
        "pipe 5 config lossstate 0 1 0 1 0.05 duplicate 0.01\n",
    ),
    // dummynet's unlimited bandwidth.
    ("pipe 5 config bw 0 delay 10", "pipe 5 config bw 0 delay 10ms\n"),
    // tc-netem's `loss gemodel` with values left out: r = 1 - p, 1-h = 1,
    // 1-k = 0, printed.
    (
        "pipe 6 config gemodel 0.01",
        "pipe 6 config gemodel 0.01 0.99 1 0\n",
    ),
    (
        "pipe 7 config gemodel 0.02 0.3 delay 10ms",
        "pipe 7 config delay 10ms gemodel 0.02 0.3 1 0\n",
    ),
    // Probabilities as tc-netem writes them, printed as fractions.
    (
        "pipe 8 config plr 1% duplicate 0.5% corrupt 0.25% gemodel 1% 30% 100% 0%",
        "pipe 8 config plr 0.01 gemodel 0.01 0.3 1 0 duplicate 0.005 corrupt 0.0025\n",
    ),
    (
        "queue 3 config pipe 8 lossstate 1% 30%",
        "queue 3 config pipe 8 lossstate 0.01 0.3 0 1 0\n",
    ),
    (
        "sched 9 config type qfq slot distribution normal 1ms 200us bytes 16KB",
        "sched 9 config type qfq slot distribution normal 1ms 200us bytes 16KB\n",
    ),
    (
        "sched 1 config type rr\nadd 200 pipe 1 udp from 2001:db8::/32 to me 53 xmit eth0",
        "sched 1 config type drr\nadd 200 pipe 1 udp from 2001:db8::/32 to me dst-port 53 xmit eth0\n",
    ),
    // `any` as a port list is no port condition (OPNsense's generated
    // rules write it, with a trailing `//` comment, which the rule keeps).
    (
        "add 60001 pipe 10000 ip from any to any src-port  any dst-port any in via em0 // up:  pipe",
        "add 60001 pipe 10000 ip from any to any in via em0 // up: pipe\n",
    ),
    (
        "add 60002 queue 7 tcp from 192.168.1.0/24 to any src-port any dst-port 443 out via em0",
        "add 60002 queue 7 tcp from 192.168.1.0/24 to any dst-port 443 out via em0\n",
    ),
];

#[test]
fn every_man_page_example_parses_and_prints_normalised() {
    for (input, normal) in EXAMPLES {
        let cfg = parse_ipfw(input, "example").unwrap_or_else(|e| panic!("{input}: {e}"));
        let printed = print_ipfw(&cfg);
        assert_eq!(&printed, normal, "normal form of {input:?}");
        let again = parse_ipfw(&printed, "normal").unwrap();
        assert_eq!(
            again, cfg,
            "the normal form of {input:?} parses to the same model"
        );
        assert_eq!(print_ipfw(&again), printed, "printing is idempotent");
        let via_toml = parse_toml(&print_toml(&cfg), "example.toml").unwrap();
        assert_eq!(via_toml, cfg, "TOML round trip of {input:?}");
    }
}

/// The queue of the first pipe of ipfw lines `text`.
fn ipfw_queue(text: &str) -> pspat_config::QueueParams {
    parse_ipfw(text, "x").unwrap().pipes[0].queue.clone()
}

/// The queue of pipe 1 configured with `key = table` in TOML.
fn toml_queue(key: &str, table: &str) -> pspat_config::QueueParams {
    parse_toml(
        &format!("[[pipe]]\nnumber = 1\n{key} = {table}\n"),
        "x.toml",
    )
    .unwrap()
    .pipes[0]
        .queue
        .clone()
}

#[test]
fn lossstate_defaults_and_toml_agree_with_the_ipfw_words() {
    use pspat_config::{merge, LossState, NoProfiles};
    let words = |text: &str| ipfw_queue(text).lossstate.unwrap();
    let m = |p13, p31, p32, p23, p14| LossState {
        p13,
        p31,
        p32,
        p23,
        p14,
    };
    assert_eq!(
        words("pipe 1 config lossstate 0.25"),
        m(0.25, 0.75, 0.0, 1.0, 0.0)
    );
    assert_eq!(
        words("pipe 1 config lossstate 0.25 0.5"),
        m(0.25, 0.5, 0.0, 1.0, 0.0)
    );
    assert_eq!(
        words("pipe 1 config lossstate 0.25 0.5 0.125 0.75"),
        m(0.25, 0.5, 0.125, 0.75, 0.0)
    );
    // TOML: only p13 is required; keys left out take the defaults, also
    // before a key given.
    let toml = |table: &str| toml_queue("lossstate", table).lossstate.unwrap();
    assert_eq!(toml("{ p13 = 0.25 }"), m(0.25, 0.75, 0.0, 1.0, 0.0));
    assert_eq!(
        toml("{ p14 = 0.125, p13 = 0.25 }"),
        m(0.25, 0.75, 0.0, 1.0, 0.125)
    );
    assert_eq!(
        toml("{ p13 = 0.25, p31 = 0.5, p32 = 0.125, p23 = 0.75, p14 = 0.0625 }"),
        m(0.25, 0.5, 0.125, 0.75, 0.0625)
    );
    // The plan carries it; a live line giving one loss model replaces the
    // other.
    let running = parse_ipfw("pipe 1 config gemodel 0.01 0.3 1 0", "run").unwrap();
    let lines = parse_ipfw("pipe 1 config lossstate 0.01", "<ctl>").unwrap();
    let plan = merge(&running, &lines).validate(&NoProfiles).unwrap();
    assert_eq!(plan.pipes[&1].queue.gemodel, None);
    assert_eq!(
        plan.pipes[&1].queue.lossstate,
        Some(m(0.01, 0.99, 0.0, 1.0, 0.0))
    );
    let back = parse_ipfw("pipe 1 config gemodel 0.01 0.3 1 0", "<ctl>").unwrap();
    let plan = merge(&merge(&running, &lines), &back)
        .validate(&NoProfiles)
        .unwrap();
    assert_eq!(plan.pipes[&1].queue.lossstate, None);
    assert!(plan.pipes[&1].queue.gemodel.is_some());
    // And the core gets the same five values.
    let core = pspat_config::queue_config(
        &merge(&running, &lines).validate(&NoProfiles).unwrap().pipes[&1].queue,
    );
    assert_eq!(
        core.loss_state,
        Some(pspat_sched::pipe::LossState {
            p13: 0.01,
            p31: 0.99,
            p32: 0.0,
            p23: 1.0,
            p14: 0.0
        })
    );
    assert_eq!(core.gilbert_elliott, None);
}

#[test]
fn the_man_page_examples_read_as_dummynet_means_them() {
    let cfg = parse_ipfw(
        "ipfw pipe 3 config delay 80ms bw 40Mbit/s plr 0.01 queue 1000Kbytes",
        "x",
    )
    .unwrap();
    let p = &cfg.pipes[0];
    assert_eq!(p.number, 3);
    assert_eq!(p.link.bw, Some(40_000_000));
    assert_eq!(p.link.delay_us, Some(80_000));
    assert_eq!(p.queue.plr, Some(0.01));
    assert_eq!(
        p.queue.limit,
        Some(pspat_config::QueueLimit::Bytes(1_024_000))
    );
    let cfg = parse_ipfw(
        "pipe 1 config bw 500Kbit/s queue 100 red 0.002/30/80/0.1",
        "x",
    )
    .unwrap();
    let red = cfg.pipes[0].queue.red.unwrap();
    assert_eq!(
        (red.gentle, red.w_q, red.min_th, red.max_th, red.max_p),
        (false, 0.002, 30, 80, 0.1)
    );
    let cfg = parse_ipfw("sched 5 config type QFQ bw 4Mbit/s mask src-ip 0xff", "x").unwrap();
    assert_eq!(cfg.scheds[0].alg, Some(pspat_sched::AlgKind::Qfq));
    assert_eq!(u32::from(cfg.scheds[0].mask.src_ip), 0xff);
}

#[test]
fn gemodel_defaults_and_toml_agree_with_the_ipfw_words() {
    use pspat_config::GilbertElliott;
    let words = |text: &str| ipfw_queue(text).gemodel.unwrap();
    let m = |p, r, one_minus_h, one_minus_k| GilbertElliott {
        p,
        r,
        one_minus_h,
        one_minus_k,
    };
    assert_eq!(words("pipe 1 config gemodel 0.25"), m(0.25, 0.75, 1.0, 0.0));
    assert_eq!(
        words("pipe 1 config gemodel 0.25 0.5"),
        m(0.25, 0.5, 1.0, 0.0)
    );
    assert_eq!(
        words("pipe 1 config gemodel 0.25 0.5 0.75"),
        m(0.25, 0.5, 0.75, 0.0)
    );
    assert_eq!(
        words("pipe 1 config gemodel 25% 50% 75% 12.5%"),
        m(0.25, 0.5, 0.75, 0.125)
    );
    // TOML: only p is required; keys left out take the defaults, also
    // before a key given; a percentage is a string.
    let toml = |table: &str| toml_queue("gemodel", table).gemodel.unwrap();
    assert_eq!(toml("{ p = 0.25 }"), m(0.25, 0.75, 1.0, 0.0));
    assert_eq!(toml("{ 1-k = 0.125, p = 0.25 }"), m(0.25, 0.75, 1.0, 0.125));
    assert_eq!(toml("{ p = \"25%\", r = \"50%\" }"), m(0.25, 0.5, 1.0, 0.0));
    let e = parse_toml("[[pipe]]\nnumber = 1\ngemodel = { r = 0.5 }\n", "x.toml").unwrap_err();
    assert!(e.message.contains("'gemodel' needs the key p"), "{e}");
    let e = parse_toml(
        "[[pipe]]\nnumber = 1\ngemodel = { p = 0.5, h = 1 }\n",
        "x.toml",
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("unknown gemodel key 'h' (allowed: p, r, 1-h, 1-k)"),
        "{e}"
    );
}

#[test]
fn ecn_reads_in_both_syntaxes_and_reaches_the_plan_and_the_core() {
    use pspat_config::{queue_config, NoProfiles};
    // ipfw: first, last or between the RED values' neighbours.
    for text in [
        "pipe 1 config ecn red 0.002/30/80/0.1",
        "pipe 1 config red 0.002/30/80/0.1 ecn",
        "pipe 1 config queue 100 ecn bw 1Mbit/s gred 0.002/30/80/0.1 noerror",
    ] {
        let q = ipfw_queue(text);
        assert!(q.ecn && q.red.is_some(), "{text}");
    }
    assert!(!ipfw_queue("pipe 1 config red 0.002/30/80/0.1").ecn);
    let cfg = parse_ipfw(
        "pipe 1 config bw 10Mbit/s\nqueue 2 config weight 5 ecn sched 1 gred 0.002/30/80/0.1",
        "x",
    )
    .unwrap();
    assert!(cfg.queues[0].params.ecn && cfg.queues[0].params.red.unwrap().gentle);
    // TOML: a boolean in the same table; false is the default.
    let toml = |flag: &str| {
        parse_toml(
            &format!(
                "[[pipe]]\nnumber = 1\nbw = \"10Mbit/s\"\n{flag}red = \"0.002/30/80/0.1\"\n\
                 [[queue]]\nnumber = 2\nsched = 1\ngred = \"0.002/30/80/0.1\"\n{flag}"
            ),
            "x.toml",
        )
        .unwrap()
    };
    let on = toml("ecn = true\n");
    assert!(on.pipes[0].queue.ecn && on.queues[0].params.ecn);
    let off = toml("ecn = false\n");
    assert!(!off.pipes[0].queue.ecn && !off.queues[0].params.ecn);
    assert_eq!(off, toml(""));
    assert!(print_toml(&on).contains("red = \"0.002/30/80/0.1\"\necn = true\n"));
    assert!(!print_toml(&off).contains("ecn"));
    assert_eq!(parse_toml(&print_toml(&on), "y.toml").unwrap(), on);
    assert_eq!(parse_ipfw(&print_ipfw(&on), "y").unwrap(), on);
    // The plan carries it, and so does the core's queue configuration.
    let plan = on.validate(&NoProfiles).unwrap();
    assert!(plan.pipes[&1].queue.ecn && plan.queues[&2].queue.ecn);
    assert!(queue_config(&plan.pipes[&1].queue).ecn);
    assert!(queue_config(&plan.queues[&2].queue).ecn);
    let plan_off = off.validate(&NoProfiles).unwrap();
    assert!(!queue_config(&plan_off.pipes[&1].queue).ecn);
    // A plan written before `ecn` existed (no such key) reads as off.
    let mut json = serde_json::to_value(&plan).unwrap();
    for (list, number) in [("pipes", "1"), ("queues", "2")] {
        let queue = &mut json[list][number]["queue"];
        assert_eq!(queue["ecn"], true);
        queue.as_object_mut().unwrap().remove("ecn");
    }
    let old: pspat_config::Plan = serde_json::from_value(json).unwrap();
    assert!(!old.pipes[&1].queue.ecn && !old.queues[&2].queue.ecn);
    assert_eq!(old.pipes[&1].queue.red, plan.pipes[&1].queue.red);
}

#[test]
fn lossecn_reads_in_both_syntaxes_and_reaches_the_plan_and_the_core() {
    use pspat_config::{queue_config, NoProfiles};
    // ipfw: before or after its loss, with each random loss.
    for text in [
        "pipe 1 config lossecn plr 0.01",
        "pipe 1 config plr 1% lossecn",
        "pipe 1 config queue 100 lossecn bw 1Mbit/s gemodel 0.01 noerror",
        "pipe 1 config lossstate 0.01 lossecn",
        "pipe 1 config plr 0 gemodel 0.01 lossecn",
    ] {
        let q = ipfw_queue(text);
        assert!(q.lossecn && q.random_loss() && !q.ecn, "{text}");
    }
    assert!(!ipfw_queue("pipe 1 config plr 0.01").lossecn);
    // Both marking flags on one queue, each with what it marks instead of.
    let q = ipfw_queue("pipe 1 config red 0.002/30/80/0.1 ecn plr 0.01 lossecn");
    assert!(q.ecn && q.lossecn);
    let cfg = parse_ipfw(
        "pipe 1 config bw 10Mbit/s\nqueue 2 config weight 5 lossecn sched 1 gemodel 0.02",
        "x",
    )
    .unwrap();
    assert!(cfg.queues[0].params.lossecn && cfg.queues[0].params.gemodel.is_some());
    // TOML: a boolean in the same table; false is the default.
    let toml = |flag: &str| {
        parse_toml(
            &format!(
                "[[pipe]]\nnumber = 1\nbw = \"10Mbit/s\"\n{flag}plr = \"1%\"\n\
                 [[queue]]\nnumber = 2\nsched = 1\nlossstate = {{ p13 = 0.01 }}\n{flag}"
            ),
            "x.toml",
        )
        .unwrap()
    };
    let on = toml("lossecn = true\n");
    assert!(on.pipes[0].queue.lossecn && on.queues[0].params.lossecn);
    let off = toml("lossecn = false\n");
    assert!(!off.pipes[0].queue.lossecn && !off.queues[0].params.lossecn);
    assert_eq!(off, toml(""));
    let printed = print_toml(&on);
    assert!(
        printed.contains("plr = 0.01\nlossecn = true\n"),
        "{printed}"
    );
    assert!(
        printed.contains("p14 = 0.0 }\nlossecn = true\n"),
        "after the loss model: {printed}"
    );
    assert!(!print_toml(&off).contains("lossecn"));
    assert_eq!(parse_toml(&printed, "y.toml").unwrap(), on);
    let ipfw = print_ipfw(&on);
    assert!(ipfw.contains("plr 0.01 lossecn\n"), "{ipfw}");
    assert_eq!(parse_ipfw(&ipfw, "y").unwrap(), on);
    // The plan carries it, and so does the core's queue configuration.
    let plan = on.validate(&NoProfiles).unwrap();
    assert!(plan.pipes[&1].queue.lossecn && plan.queues[&2].queue.lossecn);
    assert!(!plan.pipes[&1].queue.ecn);
    assert!(queue_config(&plan.pipes[&1].queue).loss_ecn);
    assert!(queue_config(&plan.queues[&2].queue).loss_ecn);
    assert!(!queue_config(&plan.pipes[&1].queue).ecn);
    let plan_off = off.validate(&NoProfiles).unwrap();
    assert!(!queue_config(&plan_off.pipes[&1].queue).loss_ecn);
    // A plan written before `lossecn` existed (no such key) reads as off.
    let mut json = serde_json::to_value(&plan).unwrap();
    for (list, number) in [("pipes", "1"), ("queues", "2")] {
        let queue = &mut json[list][number]["queue"];
        assert_eq!(queue["lossecn"], true);
        queue.as_object_mut().unwrap().remove("lossecn");
    }
    let old: pspat_config::Plan = serde_json::from_value(json).unwrap();
    assert!(!old.pipes[&1].queue.lossecn && !old.queues[&2].queue.lossecn);
    assert_eq!(old.pipes[&1].queue.plr, plan.pipes[&1].queue.plr);
}

#[test]
fn codel_reads_in_both_syntaxes_and_reaches_the_plan_and_the_core() {
    use pspat_config::{queue_config, Codel, NoProfiles};
    // ipfw: the defaults for what is left out, in any order.
    assert_eq!(
        ipfw_queue("pipe 1 config codel").codel,
        Some(Codel::default())
    );
    assert_eq!(
        (Codel::DEFAULT_TARGET_US, Codel::DEFAULT_INTERVAL_US),
        (5_000, 100_000),
        "dummynet's and RFC 8289's defaults"
    );
    let mine = Codel {
        target_us: 2_000,
        interval_us: 1_000_000,
        ecn: true,
    };
    for text in [
        "pipe 1 config codel target 2ms interval 1s ecn",
        "pipe 1 config codel ecn interval 1000ms target 2000us",
        "pipe 1 config bw 1Mbit/s codel interval 1s ecn target 2 queue 20",
    ] {
        assert_eq!(ipfw_queue(text).codel, Some(mine), "{text}");
    }
    // `ecn` right after codel's words is CoDel's, RED's flag stays off.
    let q = ipfw_queue("pipe 1 config codel target 2ms interval 1s ecn");
    assert!(!q.ecn && q.red.is_none());
    assert!(!ipfw_queue("pipe 1 config codel noecn").codel.unwrap().ecn);
    // TOML: a table, every key optional; `true` for all the defaults.
    let toml = |value: &str| toml_queue("codel", value).codel;
    assert_eq!(
        toml("{ target = \"2ms\", interval = \"1s\", ecn = true }"),
        Some(mine)
    );
    assert_eq!(
        toml("{ ecn = true, interval = 1000, target = \"2000us\" }"),
        Some(mine),
        "any order; a bare number is ms, as delay's"
    );
    assert_eq!(toml("true"), Some(Codel::default()));
    assert_eq!(toml("{}"), Some(Codel::default()));
    assert_eq!(toml("{ ecn = false }"), Some(Codel::default()));
    assert_eq!(toml("false"), None);
    // Printed with both times, `ecn` only when it marks.
    let cfg = parse_ipfw(
        "pipe 1 config bw 10Mbit/s codel\nqueue 2 config sched 1 codel target 2ms interval 1s ecn",
        "x",
    )
    .unwrap();
    let printed = print_toml(&cfg);
    assert!(
        printed.contains("codel = { target = \"5ms\", interval = \"100ms\" }\n"),
        "{printed}"
    );
    assert!(
        printed.contains("codel = { target = \"2ms\", interval = \"1s\", ecn = true }\n"),
        "{printed}"
    );
    // `config convert` both ways.
    let back = parse_toml(&printed, "y.toml").unwrap();
    assert_eq!(back, cfg);
    assert_eq!(print_ipfw(&back), print_ipfw(&cfg));
    assert!(print_ipfw(&back).contains("queue 2 config sched 1 codel target 2ms interval 1s ecn\n"));
    // The plan carries it; the core's queue configuration in ns.
    let plan = cfg.validate(&NoProfiles).unwrap();
    assert_eq!(plan.pipes[&1].queue.codel, Some(Codel::default()));
    assert_eq!(plan.queues[&2].queue.codel, Some(mine));
    let core = queue_config(&plan.queues[&2].queue).codel.unwrap();
    assert_eq!(
        (core.target_ns, core.interval_ns, core.ecn),
        (2_000_000, 1_000_000_000, true)
    );
    assert_eq!(
        queue_config(&plan.pipes[&1].queue).codel,
        Some(pspat_sched::pipe::Codel::default()),
        "the config's defaults are the core's"
    );
    let drop_tail = parse_ipfw("pipe 1 config bw 1Mbit/s", "x")
        .unwrap()
        .validate(&NoProfiles)
        .unwrap();
    assert_eq!(queue_config(&drop_tail.pipes[&1].queue).codel, None);
    // A plan written before `codel` existed (no such key) has none.
    let mut json = serde_json::to_value(&plan).unwrap();
    for (list, number) in [("pipes", "1"), ("queues", "2")] {
        let queue = &mut json[list][number]["queue"];
        assert!(queue["codel"].is_object());
        queue.as_object_mut().unwrap().remove("codel");
    }
    let old: pspat_config::Plan = serde_json::from_value(json).unwrap();
    assert!(old.pipes[&1].queue.codel.is_none() && old.queues[&2].queue.codel.is_none());
}
