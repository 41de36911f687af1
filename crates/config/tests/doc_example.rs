use pspat_config::{
    parse_ipfw, parse_profile, parse_toml, print_ipfw, Action, AddrMatch, NoProfiles, Parent,
    Target,
};

const DOC: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/CONFIG.md"));

/// The body of the first fenced block with this language tag.
fn block(tag: &str) -> String {
    let open = format!("```{tag}\n");
    let start = DOC
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{tag} block in docs/CONFIG.md"))
        + open.len();
    let len = DOC[start..].find("```").expect("the block is closed");
    DOC[start..start + len].to_string()
}

#[test]
fn the_complete_example_loads_validates_and_matches_its_ipfw_form() {
    let toml = block("toml");
    let profile = block("profile");
    let cfg = parse_toml(&toml, "example.toml").unwrap_or_else(|e| panic!("{e}"));
    let loader = |name: &str| {
        if name == "wifi.prof" {
            Ok(profile.clone())
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                name.to_string(),
            ))
        }
    };
    let plan = cfg.validate(&loader).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.seed, 42);
    assert_eq!(plan.scheds[&1].link.bw_bps, 100_000_000);
    assert_eq!(u32::from(plan.scheds[&1].mask.src_ip), 0xffff_ff00);
    let wan = &plan.pipes[&10];
    assert_eq!((wan.link.delay_us, wan.link.jitter_us), (40_000, 5_000));
    let loaded = wan.link.profile.as_ref().expect("the profile is loaded");
    assert_eq!(
        loaded.profile,
        parse_profile(&profile, "wifi.prof").unwrap()
    );
    assert_eq!(loaded.delay_table_us.len(), 100);
    assert_eq!(plan.queues[&2].parent, Parent::Sched(1));
    assert_eq!(plan.queues[&2].weight, 3);
    assert!(
        plan.queues[&2].queue.ecn && plan.queues[&2].queue.red.is_some(),
        "queue 2 marks with its RED"
    );
    assert!(!plan.queues[&1].queue.ecn);
    assert!(
        wan.queue.lossecn && !wan.queue.ecn,
        "pipe 10 marks instead of its random losses"
    );
    assert_eq!(
        plan.queues[&3].queue.codel,
        Some(pspat_config::Codel {
            target_us: 5_000,
            interval_us: 100_000,
            ecn: true
        }),
        "queue 3 keeps its delay short with CoDel, marking ECN-capable packets"
    );
    assert!(plan.queues[&3].queue.red.is_none() && !plan.queues[&3].queue.ecn);
    assert_eq!(plan.queues[&2].queue.codel, None);
    assert_eq!(plan.tables[&1].len(), 3);
    assert_eq!(plan.rules[&200].action, Action::Queue(Target::Tablearg));
    assert_eq!(
        plan.rules[&100].src.to_string(),
        "192.168.1.0/24,192.168.2.0/24",
        "rule 100 reads an address list"
    );
    assert!(matches!(&plan.rules[&100].src, AddrMatch::List(l) if l.prefixes().len() == 2));
    assert_eq!(
        plan.rules.keys().copied().collect::<Vec<_>>(),
        vec![100, 200, 300]
    );
    assert!(plan.dangling_references().is_empty());

    let ipfw = block("ipfw");
    assert_eq!(
        print_ipfw(&cfg),
        ipfw,
        "the ipfw form in the document is what the printer gives"
    );
    assert_eq!(parse_ipfw(&ipfw, "example.ipfw").unwrap(), cfg);

    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["pipes"]["10"]["link"]["bw_bps"], 20_000_000);
}

/// The plain (unlabelled) code block of CONFIG.md that begins with
/// `first`, without its fences.
fn plain_block(first: &str) -> &'static str {
    let open = format!("```\n{first}");
    let start = DOC
        .find(&open)
        .unwrap_or_else(|| panic!("a block begins with {first}"))
        + 4;
    let len = DOC[start..].find("```").expect("the block is closed");
    &DOC[start..start + len]
}

#[test]
fn the_address_list_examples_load_in_both_syntaxes() {
    // The plain block of the rules section that shows address lists.
    let rules = plain_block("add 100 pipe 1 ip from 10.0.0.1,");
    let text = format!("pipe 1 config\npipe 2 config\n{rules}");
    let cfg = parse_ipfw(&text, "lists.ipfw").unwrap_or_else(|e| panic!("{e}"));
    let plan = cfg
        .clone()
        .validate(&NoProfiles)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(&plan.rules[&100].src, AddrMatch::List(l) if l.prefixes().len() == 3));
    assert!(matches!(&plan.rules[&200].src, AddrMatch::NotList(l) if l.prefixes().len() == 2));
    assert!(print_ipfw(&cfg).ends_with(rules), "{}", print_ipfw(&cfg));
    // The TOML strings the text gives for the same two lists.
    for (value, rule) in [
        ("10.0.0.1,10.0.0.0/24,2001:db8::/32", 100),
        ("not 10.0.0.0/8,192.168.0.0/16", 200),
    ] {
        assert!(
            DOC.contains(&format!("`from = \"{value}\"`")),
            "the text shows {value}"
        );
        let toml =
            format!("[[pipe]]\nnumber = 1\n[[rule]]\naction = \"pipe 1\"\nfrom = \"{value}\"\n");
        let from_toml = parse_toml(&toml, "lists.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_toml.rules[0].src, plan.rules[&rule].src, "{value}");
    }
}

#[test]
fn the_not_before_options_examples_load_in_both_syntaxes() {
    // The plain block of the rules section that shows `not` before options.
    let rules = plain_block("add 300 pipe 1 tcp from any to any not dst-port");
    let text = format!("pipe 1 config\npipe 2 config\n{rules}");
    let cfg = parse_ipfw(&text, "not.ipfw").unwrap_or_else(|e| panic!("{e}"));
    let plan = cfg
        .clone()
        .validate(&NoProfiles)
        .unwrap_or_else(|e| panic!("{e}"));
    let (r300, r400, r500) = (&plan.rules[&300], &plan.rules[&400], &plan.rules[&500]);
    assert!(r300.dst_ports_negated && !r300.proto_negated);
    assert!(r400.proto_negated && r400.src_ports_negated);
    assert!(r400.interface.as_ref().is_some_and(|i| i.negated));
    assert!(r500.interface.as_ref().is_some_and(|i| i.negated));
    // Printed back the same, but for the ports after the address, which
    // move to their option.
    let printed = print_ipfw(&cfg);
    let expected = rules.replace(
        "from any not 1000-2000 to any",
        "from any to any not src-port 1000-2000",
    );
    assert!(printed.ends_with(&expected), "{printed}");
    assert!(
        DOC.contains("add 400 pipe 2 not udp from any not 1000-2000 to any not via eth0"),
        "the example keeps the ports after the address"
    );
    // The TOML values the text gives, each against its rule.
    for (key, value, rule) in [
        ("dst-port", "not 80,443", 300),
        ("proto", "not udp", 400),
        ("src-port", "not 1000-2000", 400),
        ("via", "not eth0", 400),
        ("xmit", "not eth1", 500),
    ] {
        let shown = format!("`{key} = \"{value}\"`");
        assert!(DOC.contains(&shown), "the text shows {shown}");
        let toml = format!(
            "[[pipe]]\nnumber = 1\n[[rule]]\nnumber = {rule}\naction = \"pipe 1\"\n{key} = \"{value}\"\n"
        );
        let r = &parse_toml(&toml, "not.toml")
            .unwrap_or_else(|e| panic!("{e}"))
            .rules[0];
        let want = &plan.rules[&rule];
        match key {
            "dst-port" => assert_eq!((&r.dst_ports, r.dst_ports_negated), (&want.dst_ports, true)),
            "src-port" => assert_eq!((&r.src_ports, r.src_ports_negated), (&want.src_ports, true)),
            "proto" => assert_eq!((r.proto, r.proto_negated), (want.proto, true)),
            _ => assert_eq!(r.interface, want.interface, "{key}"),
        }
    }
}

/// The first fenced block with this language tag after `heading`.
fn block_after(heading: &str, tag: &str) -> String {
    let from = DOC
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading} in docs/CONFIG.md"));
    let open = format!("```{tag}\n");
    let start = from
        + DOC[from..]
            .find(&open)
            .unwrap_or_else(|| panic!("no ```{tag} block after {heading}"))
        + open.len();
    let len = DOC[start..].find("```").expect("the block is closed");
    DOC[start..start + len].to_string()
}

#[test]
fn the_fq_codel_example_loads_in_both_syntaxes_and_lowers_as_the_text_says() {
    use pspat_config::{Codel, FlowMask, FqCodel, QueueLimit};
    let heading = "\n## FQ-CoDel\n";
    let toml = block_after(heading, "toml");
    let ipfw = block_after(heading, "ipfw");
    let cfg = parse_toml(&toml, "fq.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(print_ipfw(&cfg), ipfw, "the ipfw form is the printer's");
    assert_eq!(parse_ipfw(&ipfw, "fq.ipfw").unwrap(), cfg);
    let plan = cfg.validate(&NoProfiles).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.scheds[&1].fq_codel, Some(FqCodel::default()));
    let (q1, q2) = (&plan.queues[&1], &plan.queues[&2]);
    assert_eq!(q1.mask, FlowMask::all());
    assert_eq!(q1.queue.codel, Some(FqCodel::default().codel));
    assert_eq!(q1.queue.limit, QueueLimit::Slots(10_240));
    assert_eq!(u32::from(q2.mask.dst_ip), 0xffff_ffff);
    assert_eq!(
        q2.queue.codel,
        Some(Codel {
            target_us: 2_000,
            ..Codel::default()
        })
    );
    assert_eq!(plan.flowset_queue_caps(), [(1, 1024), (2, 1024)].into());
}

#[test]
fn the_fq_pie_example_loads_in_both_syntaxes_and_lowers_as_the_text_says() {
    use pspat_config::{FlowMask, FqPie, Pie, QueueLimit};
    let heading = "\n## FQ-PIE\n";
    let toml = block_after(heading, "toml");
    let ipfw = block_after(heading, "ipfw");
    let cfg = parse_toml(&toml, "fqpie.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(print_ipfw(&cfg), ipfw, "the ipfw form is the printer's");
    assert_eq!(parse_ipfw(&ipfw, "fqpie.ipfw").unwrap(), cfg);
    let plan = cfg.validate(&NoProfiles).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.scheds[&1].fq_pie, Some(FqPie::default()));
    let q1 = &plan.queues[&1];
    assert_eq!(q1.mask, FlowMask::all());
    assert_eq!(q1.queue.pie, Some(Pie::fq_default()));
    assert_eq!(q1.queue.limit, QueueLimit::Slots(10_240));
    assert_eq!(
        plan.pipes[&2].queue.pie,
        Some(Pie {
            target_us: 5_000,
            alpha: 0.25,
            dre: false,
            ..Pie::default()
        })
    );
    assert_eq!(plan.flowset_queue_caps(), [(1, 1024)].into());
}
