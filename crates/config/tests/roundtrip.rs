use proptest::prelude::*;
use pspat_config::{
    parse_control, parse_ipfw, parse_profile, parse_toml, print_ipfw, print_toml, NoProfiles,
};

use crate::strategies::config;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn ipfw_print_then_parse_is_identity(cfg in config()) {
        let text = print_ipfw(&cfg);
        let back = parse_ipfw(&text, "gen.ipfw").map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &cfg, "{}", text);
    }

    #[test]
    fn toml_print_then_parse_is_identity(cfg in config()) {
        let text = print_toml(&cfg);
        let back = parse_toml(&text, "gen.toml").map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &cfg, "{}", text);
    }

    #[test]
    fn toml_and_ipfw_convert_into_each_other(cfg in config()) {
        let toml = print_toml(&parse_ipfw(&print_ipfw(&cfg), "a.ipfw").unwrap());
        let ipfw = print_ipfw(&parse_toml(&toml, "b.toml").unwrap());
        prop_assert_eq!(&parse_ipfw(&ipfw, "c.ipfw").unwrap(), &cfg);
        prop_assert_eq!(ipfw, print_ipfw(&cfg), "conversion keeps the normal form");
    }

    #[test]
    fn random_text_never_panics(text in ".{0,200}") {
        if let Ok(cfg) = parse_ipfw(&text, "r") {
            let _ = cfg.validate(&NoProfiles);
        }
        if let Ok(cfg) = parse_toml(&text, "r.toml") {
            let _ = cfg.validate(&NoProfiles);
        }
        let _ = parse_profile(&text, "r.prof");
        let _ = parse_control(&text, "ctl");
    }

    #[test]
    fn random_words_never_panic(words in proptest::collection::vec(prop_oneof![
        proptest::sample::select(vec![
            "ipfw", "pipe", "queue", "sched", "config", "add", "table", "show", "delete", "flush", "bw", "delay",
            "mask", "src-ip", "all", "dst-ip6", "red", "gred", "ecn", "droptail", "lossecn", "codel", "target", "interval", "noecn", "weight", "plr", "gemodel", "lossstate", "jitter", "from", "to",
            "any", "me", "table(1)", "tablearg", "src-port", "via", "in", "out", "1", "0", "0xff", "/24", "10Mbit/s",
            "20ms", "64KB", "0.5", "1.2.3.0/24", "::1/64", "80,443", "1-2", ";", "\n", "#", "=", "[[pipe]]",
            "number", "\"", "{", "}", "prob", "samples", "99999999999999999999",
        ]).prop_map(str::to_string),
        ".{0,6}",
    ], 0..30)) {
        let text = words.join(" ");
        if let Ok(cfg) = parse_ipfw(&text, "w") {
            let _ = cfg.validate(&NoProfiles);
            prop_assert_eq!(parse_ipfw(&print_ipfw(&cfg), "w2").unwrap(), cfg);
        }
        if let Ok(cfg) = parse_toml(&text, "w.toml") {
            let _ = cfg.validate(&NoProfiles);
        }
        let _ = parse_profile(&text, "w.prof");
        let _ = parse_control(&text, "ctl");
    }
}
