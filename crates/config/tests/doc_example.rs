use pspat_config::{parse_ipfw, parse_profile, parse_toml, print_ipfw, Action, Parent, Target};

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
    assert_eq!(plan.tables[&1].len(), 3);
    assert_eq!(plan.rules[&200].action, Action::Queue(Target::Tablearg));
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
