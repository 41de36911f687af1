//! The two directions of `pspat run` as ipfw sees them on a bridge.
//!
//! A frame crossing from interface X to Y is classified in two passes, `in`
//! on X, then `out` on Y ([`pspat_classify::Classifier::classify_bridged`]).
//! The reverse direction (`--out` to `--in`) is shaped, by RX threads of its
//! own on `--out` ([`pspat_bridge::BridgeConfig::shape_reverse`]), when a
//! rule names a direction (`in`, `out`) or an interface (`recv`, `xmit`,
//! `via`), or with `--shape-reverse`. A configuration that names neither was
//! written for the forward direction alone (the only one `pspat run` shaped
//! before): it keeps that meaning, and its reverse direction stays
//! unshaped. Once the reverse direction is shaped, every rule applies to
//! both directions as in ipfw, direction-less ones included.

use pspat_config::{Direction, Plan};

/// Whether a rule of `plan` names a direction or an interface.
pub(super) fn names_a_direction(plan: &Plan) -> bool {
    plan.rules
        .values()
        .any(|r| r.direction != Direction::Any || r.interface.is_some())
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

    fn plan(text: &str) -> Plan {
        pspat_config::parse_ipfw(text, "t.ipfw")
            .unwrap()
            .validate(&pspat_config::NoProfiles)
            .unwrap()
    }

    #[test]
    fn a_direction_or_an_interface_turns_the_reverse_direction_on() {
        let base = "pipe 1 config delay 20ms\n";
        let off = [
            "add 100 pipe 1 icmp from any to any\n",
            "add 100 pipe 1 udp from 10.0.0.0/8 to any dst-port 53\n",
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
        ];
        for rule in on {
            assert!(names_a_direction(&plan(&format!("{base}{rule}"))), "{rule}");
        }
    }

    #[test]
    fn reverse_threads_read_the_output() {
        assert_eq!(interfaces(0, 2, 1, 2), (1, 2));
        assert_eq!(interfaces(1, 2, 1, 2), (1, 2));
        assert_eq!(interfaces(2, 2, 1, 2), (2, 1));
        assert_eq!(interfaces(3, 2, 1, 2), (2, 1));
    }
}
