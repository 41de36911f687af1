//! `pipe N config ... type T`: dummynet's scheduler of a pipe, read in
//! both syntaxes, printed without the default (FIFO), refused at the
//! offending token, and lowered onto the flowsets attached to the pipe as
//! a sched's is; an OPNsense-style file loads.

use pspat_config::{
    parse_toml, pipe_config, print_ipfw, print_toml, Codel, ErrorKind, FlowMask, FqCodel,
    NoProfiles, Parent, Plan, QueueLimit,
};
use pspat_sched::AlgKind;

use crate::support::{assert_at, error_of, ipfw, plan};

#[test]
fn a_pipe_takes_any_sched_type_and_prints_it_normalised() {
    let c = ipfw(
        "pipe 1 config bw 10Mbit/s type qfq\n\
         pipe 2 config type wf2qp delay 5ms\n\
         pipe 3 config bw 1Mbit/s type fifo\n\
         pipe 4 config bw 1Mbit/s\n\
         pipe 5 config type rr\n",
    );
    let algs: Vec<_> = c.pipes.iter().map(|p| p.alg).collect();
    assert_eq!(
        algs,
        [
            Some(AlgKind::Qfq),
            Some(AlgKind::Wf2qPlus),
            Some(AlgKind::Fifo),
            None,
            Some(AlgKind::Drr)
        ]
    );
    // The type first; `type fifo`, the default, left out.
    assert_eq!(
        print_ipfw(&c),
        "pipe 1 config type qfq bw 10Mbit/s\n\
         pipe 2 config type wf2q+ delay 5ms\n\
         pipe 3 config bw 1Mbit/s\n\
         pipe 4 config bw 1Mbit/s\n\
         pipe 5 config type drr\n"
    );
    let toml = print_toml(&c);
    assert!(
        toml.contains("[[pipe]]\nnumber = 1\ntype = \"qfq\"\nbw = \"10Mbit/s\"\n"),
        "{toml}"
    );
    assert!(
        toml.contains("[[pipe]]\nnumber = 3\nbw = \"1Mbit/s\"\n"),
        "{toml}"
    );
    // Both ways: the same plan (fifo and no type are one plan).
    let p = c.validate(&NoProfiles).unwrap();
    let back = parse_toml(&toml, "x.toml").unwrap();
    assert_eq!(back.validate(&NoProfiles).unwrap(), p);
    assert_eq!(
        p.pipes.values().map(|p| p.alg).collect::<Vec<_>>(),
        [
            AlgKind::Qfq,
            AlgKind::Wf2qPlus,
            AlgKind::Fifo,
            AlgKind::Fifo,
            AlgKind::Drr
        ]
    );
}

#[test]
fn a_pipe_takes_fq_codel_with_its_parameters_in_both_syntaxes() {
    let text = "pipe 1 config bw 20Mbit/s queue 100 type fq_codel target 2 interval 50 noecn quantum 3000 limit 500 flows 64 delay 10\n";
    let c = ipfw(text);
    let p = &c.pipes[0];
    assert_eq!(p.alg, Some(AlgKind::Fq));
    assert_eq!(
        p.fq_codel,
        Some(FqCodel {
            codel: Codel {
                target_us: 2_000,
                interval_us: 50_000,
                ecn: false
            },
            quantum: 3000,
            limit: 500,
            flows: 64
        })
    );
    // The parameters ended at `delay`: the link's; the pipe's own queue
    // size is its `queue`.
    assert_eq!(p.link.delay_us, Some(10_000));
    let printed = print_ipfw(&c);
    assert_eq!(
        printed,
        "pipe 1 config type fq_codel target 2ms interval 50ms noecn quantum 3000 limit 500 flows 64 bw 20Mbit/s delay 10ms queue 100\n"
    );
    assert_eq!(ipfw(&printed), c);
    let toml = print_toml(&c);
    assert!(
        toml.contains("type = \"fq_codel\"\nfq_codel = { target = \"2ms\", interval = \"50ms\", ecn = false, quantum = 3000, limit = 500, flows = 64 }\n"),
        "{toml}"
    );
    // `limit` of the pipe itself is its queue's size, not fq_codel's.
    assert!(toml.contains("\nlimit = 100\n"), "{toml}");
    assert_eq!(parse_toml(&toml, "x.toml").unwrap(), c);
    // fq_pie in TOML, the table's keys as the words after the type.
    let c = parse_toml(
        "[[pipe]]\nnumber = 2\ntype = \"fq_pie\"\nfq_pie = { target = \"10ms\", flows = 32 }\n",
        "x.toml",
    )
    .unwrap();
    let f = c.pipes[0].fq_pie.unwrap();
    assert_eq!((f.pie.target_us, f.flows, f.limit), (10_000, 32, 10_240));
    assert_eq!(c.pipes[0].alg, Some(AlgKind::Fq));
    assert_eq!(ipfw(&print_ipfw(&c)), c);
}

#[test]
fn errors_name_the_offending_token() {
    let e = error_of("pipe 1 config bw 1Mbit/s type fq_cdel", "a.ipfw");
    assert_at(
        &e,
        (1, 31, "fq_cdel"),
        ErrorKind::UnknownKeyword,
        "unknown scheduler type 'fq_cdel' (allowed: ",
    );
    let e = error_of("pipe 1 config type drr quantum 300", "a.ipfw");
    assert_at(
        &e,
        (1, 24, "quantum"),
        ErrorKind::UnknownKeyword,
        "'quantum' is a parameter of the fq_codel sched type and goes right after 'type fq_codel' (example: sched 1 config type fq_codel target 5ms quantum 1514 limit 10240 flows 1024 bw 10Mbit/s); this pipe's type is drr",
    );
    let e = error_of("pipe 1 config flows 64 type fq_codel", "a.ipfw");
    assert_at(
        &e,
        (1, 15, "flows"),
        ErrorKind::UnknownKeyword,
        "goes right after 'type fq_codel'",
    );
    let e = error_of("pipe 1 config type fq_codel type wf2q+", "a.ipfw");
    assert_at(
        &e,
        (1, 29, "type"),
        ErrorKind::Duplicate,
        "'type' is given twice",
    );
    // Out of dummynet's range: at the value, named by the pipe.
    let e = error_of("pipe 9 config type fq_codel flows 0", "a.ipfw");
    assert_at(
        &e,
        (1, 35, "0"),
        ErrorKind::OutOfRange,
        "pipe 9 fq_codel flows 0 is out of range",
    );
    // TOML: the table without the type, a parameter outside the table.
    let e = error_of(
        "[[pipe]]\nnumber = 1\ntype = \"drr\"\nfq_codel = { flows = 3 }\n",
        "b.toml",
    );
    assert_at(
        &e,
        (4, 1, "fq_codel"),
        ErrorKind::MissingReference,
        "an 'fq_codel' table needs type = \"fq_codel\" on the same pipe (this one's type is \"drr\")",
    );
    let e = error_of(
        "[[pipe]]\nnumber = 1\ntype = \"fq_codel\"\nquantum = 300\n",
        "b.toml",
    );
    assert_at(
        &e,
        (4, 1, "quantum"),
        ErrorKind::UnknownKeyword,
        "in TOML it goes in the pipe's fq_codel table",
    );
    let e = error_of(
        "[[pipe]]\nnumber = 1\ntype = \"fq\"\nfq_pie = { flows = 3 }\n",
        "b.toml",
    );
    assert_at(
        &e,
        (4, 1, "fq_pie"),
        ErrorKind::MissingReference,
        "on the same pipe",
    );
    // A model built in code with fq_codel's parameters and another type.
    let mut c = ipfw("pipe 1 config type fq_codel");
    c.pipes[0].alg = Some(AlgKind::Drr);
    let e = c.validate(&NoProfiles).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Syntax, "{e}");
    assert!(
        e.message.contains(
            "pipe 1 has fq_codel's parameters but the type drr: an fq_codel pipe's type is fq"
        ),
        "{e}"
    );
}

/// The flowsets attached to an fq_codel pipe are lowered as a sched's:
/// `mask all`, the pipe's CoDel and limit, capped at its flows; the
/// pipe's own queue keeps what it sets; the held limit is on the link.
#[test]
fn fq_codel_is_lowered_onto_the_flowsets_attached_to_the_pipe() {
    let p = plan(
        "pipe 1 config type fq_codel target 3ms flows 16 limit 700 bw 10Mbit/s queue 40\n\
         queue 2 config pipe 1\n\
         queue 3 config sched 1 codel target 9ms queue 20 mask dst-ip 0xffffffff\n\
         pipe 4 config bw 1Mbit/s\n\
         queue 5 config pipe 4\n",
    );
    let q2 = &p.queues[&2];
    assert_eq!(q2.mask, FlowMask::all());
    assert_eq!(q2.queue.limit, QueueLimit::Slots(700));
    assert_eq!(
        q2.queue.codel,
        Some(Codel {
            target_us: 3_000,
            interval_us: 100_000,
            ecn: true
        })
    );
    let q3 = &p.queues[&3];
    assert_eq!(q3.queue.codel.unwrap().target_us, 9_000);
    assert_eq!(q3.queue.limit, QueueLimit::Slots(20));
    assert_ne!(q3.mask, FlowMask::all());
    // The pipe's own queue: one queue of its own size, without CoDel.
    assert_eq!(p.pipes[&1].queue.limit, QueueLimit::Slots(40));
    assert_eq!(p.pipes[&1].queue.codel, None);
    assert_eq!(p.flowset_queue_caps(), [(2, 16), (3, 16)].into());
    assert_eq!(
        pipe_config(&p.pipes[&1], p.seed).unwrap().held_limit,
        Some(700)
    );
    // A FIFO pipe's flowsets as written, no held limit.
    assert_eq!(p.queues[&5].mask, FlowMask::default());
    assert_eq!(pipe_config(&p.pipes[&4], p.seed).unwrap().held_limit, None);
}

/// A file in the form OPNsense's shaper generates: every pipe with a
/// type, flowsets attached with `pipe N`, rules with `src-port any
/// dst-port any` and a `// comment`.
#[test]
fn an_opnsense_style_file_loads_and_lowers() {
    let text = "\
pipe 10000 config bw 100Mbit/s type  wf2q+
pipe 10001 config bw 20Mbit/s queue 100 mask dst-ip 0xffffffff  delay 10  type  fq_codel  target 5  interval 100  ecn   quantum 1514   limit 10240   flows 1024
queue 10000 config pipe 10000 mask src-ip 0xffffffff  weight 1
queue 10001 config pipe 10000 mask src-ip 0xffffffff  weight 3 codel  target 5 noecn
queue 10002 config pipe 10001
add 60000 queue 10000 ip from any to any src-port any dst-port any via em0 // bulk
add 60001 queue 10001 tcp from any to any src-port any dst-port 22 via em0 // ssh: interactive
add 60002 queue 10002 ip from any to any src-port any dst-port any xmit em0 // upload
";
    let p = plan(text);
    assert_eq!(p.pipes[&10000].alg, AlgKind::Wf2qPlus);
    assert_eq!(p.pipes[&10001].alg, AlgKind::Fq);
    assert_eq!(p.pipes[&10001].link.delay_us, 10_000);
    assert_eq!(p.pipes[&10001].queue.limit, QueueLimit::Slots(100));
    let f = p.pipes[&10001].fq_codel.unwrap();
    assert_eq!(
        (
            f.codel.target_us,
            f.codel.interval_us,
            f.codel.ecn,
            f.quantum,
            f.limit,
            f.flows
        ),
        (5_000, 100_000, true, 1514, 10_240, 1024)
    );
    // The wf2q+ pipe's flowsets keep their weights, masks and AQM.
    let (q0, q1) = (&p.queues[&10000], &p.queues[&10001]);
    assert_eq!((q0.parent, q0.weight), (Parent::Pipe(10000), 1));
    assert_eq!((q1.parent, q1.weight), (Parent::Pipe(10000), 3));
    assert_eq!(q0.queue.codel, None);
    assert_eq!(
        q1.queue.codel,
        Some(Codel {
            target_us: 5_000,
            interval_us: 100_000,
            ecn: false
        })
    );
    assert_ne!(q0.mask, FlowMask::all());
    // The fq_codel pipe's flowset: mask all, capped at flows, its CoDel
    // and limit.
    let q2 = &p.queues[&10002];
    assert_eq!(q2.mask, FlowMask::all());
    assert_eq!(q2.queue.codel, Some(f.codel));
    assert_eq!(q2.queue.limit, QueueLimit::Slots(10_240));
    assert_eq!(p.flowset_queue_caps(), [(10002, 1024)].into());
    // Rules: no port condition for `any`, the comment dropped.
    assert!(p.rules[&60000].dst_ports.is_empty());
    assert_eq!(p.rules[&60001].dst_ports.len(), 1);
    // Printed and read back: the same plan, in both syntaxes.
    let c = ipfw(text);
    assert_eq!(plan(&print_ipfw(&c)), p);
    let toml = parse_toml(&print_toml(&c), "x.toml").unwrap();
    assert_eq!(toml.validate(&NoProfiles).unwrap(), p);
}

/// A plan written before pipes took a type (no `alg`, `fq_codel`,
/// `fq_pie` on its pipes) loads as FIFO pipes.
#[test]
fn old_plan_json_has_no_pipe_type() {
    let p = plan("pipe 3 config bw 1Mbit/s\nqueue 4 config pipe 3 weight 2\n");
    let mut json: serde_json::Value = serde_json::to_value(&p).unwrap();
    let pipe = json["pipes"]["3"].as_object_mut().unwrap();
    for key in ["alg", "fq_codel", "fq_pie"] {
        assert!(pipe.remove(key).is_some(), "{key}");
    }
    let back: Plan = serde_json::from_value(json).unwrap();
    assert_eq!(back, p);
    assert_eq!(back.pipes[&3].alg, AlgKind::Fifo);
}
