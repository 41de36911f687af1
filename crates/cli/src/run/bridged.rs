//! The two directions of `pspat run` as ipfw sees them on a bridge.
//!
//! A frame crossing from interface X to Y is classified in two passes, `in`
//! on X, then `out` on Y ([`pspat_classify::Classifier::classify_bridged`]).
//! The reverse direction (`--out` to `--in`) is read by RX threads of its
//! own on `--out` ([`pspat_bridge::BridgeConfig::shape_reverse`]), and
//! shaped while a rule of the running configuration names a direction
//! (`in`, `out`) or an interface (`recv`, `xmit`, `via`), or always with
//! `--shape-reverse`. A configuration that names neither was written for
//! the forward direction alone (the only one `pspat run` shaped before): it
//! keeps that meaning, and the reverse RX threads forward their frames
//! unshaped. While the reverse direction is shaped, every rule applies to
//! both directions as in ipfw, direction-less ones included, and every
//! frame is classified in two passes. A live change (`pspat ctl`, SIGHUP)
//! that brings the first such rule turns the shaping on, one that removes
//! the last turns it off ([`toggle`], [`pspat_bridge::ReverseSwitch`]).

use pspat_config::{Direction, Plan};

/// Whether a rule of `plan` names a direction or an interface.
pub(super) fn names_a_direction(plan: &Plan) -> bool {
    plan.rules
        .values()
        .any(|r| r.direction != Direction::Any || r.interface.is_some())
}

/// Whether the reverse direction is shaped with `plan` running
/// (`--shape-reverse`: `forced`).
pub(super) fn shaped(forced: bool, plan: &Plan) -> bool {
    forced || names_a_direction(plan)
}

/// The reverse direction's mode after a change to `plan`, when it differs
/// from `now` (`None`: it stays).
pub(super) fn toggle(forced: bool, now: bool, plan: &Plan) -> Option<bool> {
    let next = shaped(forced, plan);
    (next != now).then_some(next)
}

/// The line a toggle adds to the change's reply and log.
pub(super) fn toggle_line(shaped: bool, input: &str, output: &str) -> String {
    if shaped {
        format!("reverse direction {output} -> {input}: shaped (a rule names a direction or an interface; two passes: in, then out)")
    } else {
        format!("reverse direction {output} -> {input}: unshaped (no rule names a direction or an interface)")
    }
}

/// The (ingress, egress) interface indexes of RX thread `k` of the bridge:
/// threads `0..rx_threads` read `--in` (`input`), the others `--out`.
pub(super) fn interfaces(k: usize, rx_threads: usize, input: u32, output: u32) -> (u32, u32) {
    if k < rx_threads {
        (input, output)
    } else {
        (output, input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::run::test_plan as plan;

    #[test]
    fn a_direction_or_an_interface_turns_the_reverse_direction_on() {
        let base = "pipe 1 config delay 20ms\n";
        let off = [
            "add 100 pipe 1 icmp from any to any\n",
            "add 100 pipe 1 udp from 10.0.0.0/8 to any dst-port 53\n",
            "add 100 pipe 1 not udp from any to any not dst-port 53\n",
            "",
        ];
        for rule in off {
            assert!(
                !names_a_direction(&plan(&format!("{base}{rule}"))),
                "{rule}"
            );
        }
        let on = [
            "add 100 pipe 1 ip from any to any in\n",
            "add 100 pipe 1 ip from any to any out\n",
            "add 100 pipe 1 ip from any to any recv eth0\n",
            "add 100 pipe 1 ip from any to any out xmit eth1\n",
            "add 100 pipe 1 icmp from any to any\nadd 200 pipe 1 ip from any to any via eth1\n",
            // A negated interface still names one, and `not in` is `out`.
            "add 100 pipe 1 ip from any to any not via eth0\n",
            "add 100 pipe 1 ip from any to any not xmit eth1\n",
            "add 100 pipe 1 ip from any to any not in\n",
        ];
        for rule in on {
            assert!(names_a_direction(&plan(&format!("{base}{rule}"))), "{rule}");
        }
    }

    #[test]
    fn the_first_rule_with_a_direction_turns_it_on_and_the_last_one_off() {
        let base = "pipe 9 config delay 30ms\nadd 100 pipe 9 icmp from any to any\n";
        let with = format!("{base}add 50 pipe 9 icmp from any to any in recv eth1\n");
        let two = format!("{with}add 60 pipe 9 ip from any to any out\n");
        let (none, one, two) = (plan(base), plan(&with), plan(&two));
        // Off: the first such rule turns it on, a rule without one does not.
        assert_eq!(toggle(false, false, &one), Some(true));
        assert_eq!(toggle(false, false, &none), None);
        // On: another such rule, or removing one of two, keeps it on.
        assert_eq!(toggle(false, true, &two), None);
        assert_eq!(toggle(false, true, &one), None);
        // Removing the last one turns it off.
        assert_eq!(toggle(false, true, &none), Some(false));
        // --shape-reverse keeps it on whatever the rules.
        assert_eq!(toggle(true, true, &none), None);
        assert_eq!(toggle(true, true, &one), None);
        assert!(shaped(true, &none) && shaped(false, &one) && !shaped(false, &none));
        let (on, off) = (toggle_line(true, "a", "b"), toggle_line(false, "a", "b"));
        assert!(on.starts_with("reverse direction b -> a: shaped"), "{on}");
        assert!(
            off.starts_with("reverse direction b -> a: unshaped"),
            "{off}"
        );
    }

    #[test]
    fn reverse_threads_read_the_output() {
        assert_eq!(interfaces(0, 2, 1, 2), (1, 2));
        assert_eq!(interfaces(1, 2, 1, 2), (1, 2));
        assert_eq!(interfaces(2, 2, 1, 2), (2, 1));
        assert_eq!(interfaces(3, 2, 1, 2), (2, 1));
    }
}
