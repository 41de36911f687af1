//! Flow masks: which bits of the 5-tuple tell flows (flowset mask → dynamic
//! queues) or scheduler instances (sched mask → instances) apart, as
//! `ipfw(8)`'s `mask` with the fields `src-ip`, `dst-ip`, `src-ip6`,
//! `dst-ip6`, `src-port`, `dst-port`, `proto`, `flow-id` and `all`.
//!
//! An all-zero mask means "one queue" (or one instance). Values are written in
//! hexadecimal (`0xff`), decimal, dotted quad (`255.255.255.0`), IPv6 notation
//! (`ffff:ffff::`) or as a prefix length (`/24`) for address fields.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::units::{parse_uint, ValueError};

/// The bits of each 5-tuple field that select a flow or an instance.
///
/// # Examples
/// ```
/// use pspat_config::FlowMask;
/// let m = FlowMask::all();
/// assert_eq!(m.src_port, 0xffff);
/// assert!(FlowMask::default().is_empty());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FlowMask {
    /// IPv4 source address bits.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination address bits.
    pub dst_ip: Ipv4Addr,
    /// IPv6 source address bits.
    pub src_ip6: Ipv6Addr,
    /// IPv6 destination address bits.
    pub dst_ip6: Ipv6Addr,
    /// Source port bits.
    pub src_port: u16,
    /// Destination port bits.
    pub dst_port: u16,
    /// IP protocol bits.
    pub proto: u8,
    /// IPv6 flow label bits (20 bits).
    pub flow_id: u32,
}

impl Default for FlowMask {
    fn default() -> Self {
        FlowMask {
            src_ip: Ipv4Addr::UNSPECIFIED,
            dst_ip: Ipv4Addr::UNSPECIFIED,
            src_ip6: Ipv6Addr::UNSPECIFIED,
            dst_ip6: Ipv6Addr::UNSPECIFIED,
            src_port: 0,
            dst_port: 0,
            proto: 0,
            flow_id: 0,
        }
    }
}

/// One named field of a [`FlowMask`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskField {
    /// `src-ip`
    SrcIp,
    /// `dst-ip`
    DstIp,
    /// `src-ip6`
    SrcIp6,
    /// `dst-ip6`
    DstIp6,
    /// `src-port`
    SrcPort,
    /// `dst-port`
    DstPort,
    /// `proto`
    Proto,
    /// `flow-id`
    FlowId,
    /// `all`: every bit of every field (takes no value).
    All,
}

/// The field names `mask` accepts, for error messages.
pub const MASK_FIELDS: &str =
    "src-ip, dst-ip, src-ip6, dst-ip6, src-port, dst-port, proto, flow-id, all";

impl MaskField {
    /// Looks a field up by its `ipfw` name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "src-ip" => MaskField::SrcIp,
            "dst-ip" => MaskField::DstIp,
            "src-ip6" => MaskField::SrcIp6,
            "dst-ip6" => MaskField::DstIp6,
            "src-port" => MaskField::SrcPort,
            "dst-port" => MaskField::DstPort,
            "proto" => MaskField::Proto,
            "flow-id" => MaskField::FlowId,
            "all" => MaskField::All,
            _ => return None,
        })
    }

    /// The `ipfw` name.
    pub fn name(self) -> &'static str {
        match self {
            MaskField::SrcIp => "src-ip",
            MaskField::DstIp => "dst-ip",
            MaskField::SrcIp6 => "src-ip6",
            MaskField::DstIp6 => "dst-ip6",
            MaskField::SrcPort => "src-port",
            MaskField::DstPort => "dst-port",
            MaskField::Proto => "proto",
            MaskField::FlowId => "flow-id",
            MaskField::All => "all",
        }
    }
}

fn width_error(field: MaskField, text: &str, bits: u32) -> ValueError {
    ValueError::range(format!(
        "mask {} value '{text}' does not fit {bits} bits",
        field.name()
    ))
}

fn prefix_bits(text: &str, field: MaskField, bits: u32) -> Result<Option<u128>, ValueError> {
    let Some(len) = text.strip_prefix('/') else {
        return Ok(None);
    };
    match len.parse::<u32>() {
        Ok(n) if n <= bits && len.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(if n == 0 {
            0
        } else {
            (u128::MAX << (128 - n)) >> (128 - bits)
        })),
        _ => Err(width_error(field, text, bits)),
    }
}

fn small_value(field: MaskField, text: &str, bits: u32) -> Result<u64, ValueError> {
    let v = parse_uint(text).map_err(|_| {
        ValueError::syntax(format!(
            "mask {} value '{text}' is not a number (example: 0xffff)",
            field.name()
        ))
    })?;
    if bits < 64 && v >> bits != 0 {
        return Err(width_error(field, text, bits));
    }
    Ok(v)
}

impl FlowMask {
    /// Every bit of every field (`mask all`).
    pub fn all() -> Self {
        FlowMask {
            src_ip: Ipv4Addr::BROADCAST,
            dst_ip: Ipv4Addr::BROADCAST,
            src_ip6: Ipv6Addr::from(u128::MAX),
            dst_ip6: Ipv6Addr::from(u128::MAX),
            src_port: u16::MAX,
            dst_port: u16::MAX,
            proto: u8::MAX,
            flow_id: 0xf_ffff,
        }
    }

    /// True if no bit is set: one queue (or one instance) for everything.
    pub fn is_empty(&self) -> bool {
        *self == FlowMask::default()
    }

    /// Sets `field` from its value text (`0xff`, `255.255.255.0`, `/24`, `ffff::`).
    ///
    /// # Errors
    /// [`ValueError`] for a value that does not parse or does not fit the field.
    pub fn set(&mut self, field: MaskField, text: &str) -> Result<(), ValueError> {
        match field {
            MaskField::All => *self = FlowMask::all(),
            MaskField::SrcIp | MaskField::DstIp => {
                let v = match prefix_bits(text, field, 32)? {
                    Some(v) => v as u32,
                    None => match text.parse::<Ipv4Addr>() {
                        Ok(a) => u32::from(a),
                        Err(_) => small_value(field, text, 32)? as u32,
                    },
                };
                let a = Ipv4Addr::from(v);
                if field == MaskField::SrcIp {
                    self.src_ip = a
                } else {
                    self.dst_ip = a
                }
            }
            MaskField::SrcIp6 | MaskField::DstIp6 => {
                let v = match prefix_bits(text, field, 128)? {
                    Some(v) => v,
                    None => match text.parse::<Ipv6Addr>() {
                        Ok(a) => u128::from(a),
                        Err(_) => {
                            let hex = text
                                .strip_prefix("0x")
                                .filter(|h| !h.is_empty() && h.len() <= 32)
                                .ok_or_else(|| {
                                    ValueError::syntax(format!(
                                        "mask {} value '{text}' is not an IPv6 mask (examples: /64, ffff:ffff::, 0xff)",
                                        field.name()
                                    ))
                                })?;
                            u128::from_str_radix(hex, 16)
                                .map_err(|_| width_error(field, text, 128))?
                        }
                    },
                };
                let a = Ipv6Addr::from(v);
                if field == MaskField::SrcIp6 {
                    self.src_ip6 = a
                } else {
                    self.dst_ip6 = a
                }
            }
            MaskField::SrcPort => self.src_port = small_value(field, text, 16)? as u16,
            MaskField::DstPort => self.dst_port = small_value(field, text, 16)? as u16,
            MaskField::Proto => self.proto = small_value(field, text, 8)? as u8,
            MaskField::FlowId => self.flow_id = small_value(field, text, 20)? as u32,
        }
        Ok(())
    }

    /// The non-zero fields as `(name, value text)` pairs in the normal form
    /// (`[("all", "")]` for [`FlowMask::all`]).
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        if *self == FlowMask::all() {
            return vec![("all", String::new())];
        }
        let v6 = |a: Ipv6Addr| {
            let bits = u128::from(a);
            let ones = bits.leading_ones();
            if ones == 128 || bits << ones == 0 {
                format!("/{ones}")
            } else {
                a.to_string()
            }
        };
        let mut out = Vec::new();
        if !self.src_ip.is_unspecified() {
            out.push(("src-ip", format!("0x{:08x}", u32::from(self.src_ip))));
        }
        if !self.dst_ip.is_unspecified() {
            out.push(("dst-ip", format!("0x{:08x}", u32::from(self.dst_ip))));
        }
        if !self.src_ip6.is_unspecified() {
            out.push(("src-ip6", v6(self.src_ip6)));
        }
        if !self.dst_ip6.is_unspecified() {
            out.push(("dst-ip6", v6(self.dst_ip6)));
        }
        if self.src_port != 0 {
            out.push(("src-port", format!("0x{:04x}", self.src_port)));
        }
        if self.dst_port != 0 {
            out.push(("dst-port", format!("0x{:04x}", self.dst_port)));
        }
        if self.proto != 0 {
            out.push(("proto", format!("0x{:02x}", self.proto)));
        }
        if self.flow_id != 0 {
            out.push(("flow-id", format!("0x{:05x}", self.flow_id)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_in_every_notation() {
        let mut m = FlowMask::default();
        m.set(MaskField::SrcIp, "0xff").unwrap();
        m.set(MaskField::DstIp, "255.255.255.0").unwrap();
        m.set(MaskField::SrcIp6, "/64").unwrap();
        m.set(MaskField::DstPort, "0xffff").unwrap();
        assert_eq!(u32::from(m.src_ip), 0xff);
        assert_eq!(u32::from(m.dst_ip), 0xffff_ff00);
        assert_eq!(u128::from(m.src_ip6), u128::MAX << 64);
        assert_eq!(
            m.fields(),
            vec![
                ("src-ip", "0x000000ff".to_string()),
                ("dst-ip", "0xffffff00".to_string()),
                ("src-ip6", "/64".to_string()),
                ("dst-port", "0xffff".to_string()),
            ]
        );
        assert!(m.set(MaskField::Proto, "0x100").is_err());
        assert!(m.set(MaskField::FlowId, "0x100000").is_err());
        assert!(m.set(MaskField::SrcIp, "/33").is_err());
        let mut p = FlowMask::default();
        p.set(MaskField::SrcIp, "/24").unwrap();
        assert_eq!(u32::from(p.src_ip), 0xffff_ff00);
        p.set(MaskField::SrcIp, "/0").unwrap();
        assert!(p.is_empty());
    }
}
