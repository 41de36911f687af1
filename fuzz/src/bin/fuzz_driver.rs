//! The stable-toolchain fuzz driver: for each target of `pspat_fuzz`,
//! replays the corpus (`fuzz/corpus/<target>/*`), then feeds generated and
//! mutated inputs until the time budget is spent. A broken contract (a
//! panic) prints the target and the input in hex, writes the input to
//! `fuzz/crashes/<target>-<n>`, and makes the driver exit 1.
//!
//! Usage: `fuzz-driver [TARGET...]`; `FUZZ_SECONDS` is the budget for all
//! targets together (default 40), `FUZZ_SEED` the generator's seed (default:
//! the time).
//!
//! Inputs are built from each target's dictionary (digits, units, commas,
//! JSON keys and values, configuration lines and keywords, header bytes),
//! random bytes, and mutations of earlier inputs (bit flips, insertions,
//! deletions, splices, repeats), from a xorshift generator: not coverage
//! guided, but fast (hundreds of thousands of inputs per second on the
//! unit parsers) and with no nightly toolchain. Two targets get generated
//! inputs with their structure: `frame` a stack of headers (Ethernet,
//! VLAN tags, IP, extension headers, transport), `classify` configuration
//! lines, a NUL byte and random bytes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pspat_fuzz::TARGETS;

/// xorshift64* (Vigna): small, fast, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens a target's grammar is made of.
fn dictionary(target: &str) -> &'static [&'static str] {
    match target {
        "sched_config" => &[
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "\"",
            " ",
            "\"alg\"",
            "\"capacity\"",
            "\"quantum_unit\"",
            "\"hierarchy\"",
            "\"eiffel\"",
            "\"link_rate_bps\"",
            "\"rate_bps\"",
            "\"rates_bps\"",
            "\"deadline_ns\"",
            "\"nodes\"",
            "\"name\"",
            "\"parent\"",
            "\"weight\"",
            "\"drr\"",
            "\"fifo\"",
            "\"wf2q+\"",
            "\"qfq\"",
            "\"htb\"",
            "\"srpt\"",
            "\"shaped-drr\"",
            "null",
            "true",
            "false",
            "0",
            "1",
            "-1",
            "1500",
            "65536",
            "1073741823",
            "18446744073709551615",
            "1e400",
            "0.5",
            "\"\\u0000\"",
            "{\"alg\": \"drr\"}",
            "//",
            "/*",
        ],
        "duration" => &[
            "0",
            "1",
            "9",
            ".",
            "e",
            "E",
            "-",
            "+",
            "s",
            "ms",
            "us",
            "µs",
            "ns",
            " ",
            "10",
            "1e9",
            "inf",
            "nan",
            "18446744073709551615",
            "0.000000001",
            "m",
            "h",
        ],
        "rate" => &[
            "0",
            "1",
            "9",
            ".",
            "e",
            "-",
            "k",
            "K",
            "m",
            "M",
            "g",
            "G",
            "t",
            "T",
            "bit",
            "bps",
            "bit/s",
            "b/s",
            "/",
            " ",
            "1e19",
            "inf",
            "18446744073709551615",
        ],
        "weights" => &[
            "0",
            "1",
            "9",
            ",",
            " ",
            "65536",
            "65537",
            "-1",
            "4294967296",
            "",
            "x",
            "1,2,4,8",
        ],
        "modes" => &["pspat", "lock", "none", ",", " ", "PSPAT", "fast", ""],
        "flowsets" => &[
            "0",
            "1",
            "8",
            ":",
            ",",
            "-",
            "k",
            "K",
            "m",
            "M",
            "n",
            "65536",
            "65535",
            "70000",
            "1::512",
            "8::64",
            "1:60:32768",
            "1-8-4",
            "4294967296",
            " ",
        ],
        "ipfw" => &[
            "pipe 1 config bw 10Mbit/s delay 20ms plr 0.01 queue 50\n",
            "sched 4 config type qfq bw 4Mbit/s mask src-ip 0xff\n",
            "queue 1 config weight 10 sched 4 mask dst-ip 0xffffffff\n",
            "add 100 queue 1 ip from 10.0.0.0/24 to any dst-port 80\n",
            "table 1 add 1.2.3.0/24 20\n",
            "ipfw ",
            "-q ",
            "pipe ",
            "queue ",
            "flowset ",
            "sched ",
            "config ",
            "add ",
            "table ",
            "default ",
            "seed ",
            "flush",
            "show",
            "delete",
            "bw ",
            "bandwidth ",
            "delay ",
            "burst ",
            "profile ",
            "jitter ",
            "distribution ",
            "normal",
            "reorder",
            "plr ",
            "red ",
            "gred ",
            "droptail",
            "codel ",
            "target ",
            "interval ",
            "noecn",
            "fq_codel ",
            "fq_pie ",
            "pie ",
            "tupdate ",
            "alpha ",
            "beta ",
            "max_burst ",
            "max_ecnth ",
            "capdrop",
            "nocapdrop",
            "derand",
            "noderand",
            "onoff",
            "noonoff",
            "dre",
            "ts",
            "0.125",
            "15ms",
            "quantum ",
            "limit ",
            "flows ",
            "1514",
            "10240",
            "65536",
            "buckets ",
            "noerror",
            "ecn",
            "lossecn",
            "gemodel ",
            "lossstate ",
            "1% ",
            "25% ",
            "slot ",
            "correlation ",
            "packets ",
            "bytes ",
            "paretonormal",
            "duplicate ",
            "weight ",
            "lmax ",
            "pri ",
            "type ",
            "qfq",
            "wf2q+",
            "prio",
            "mask ",
            "all",
            "src-ip ",
            "dst-ip ",
            "src-ip6 ",
            "dst-ip6 ",
            "src-port ",
            "dst-port ",
            "proto ",
            "flow-id ",
            "allow",
            "deny",
            "tablearg",
            "ip",
            "ip6",
            "tcp",
            "udp",
            "icmp",
            "from ",
            "to ",
            "any",
            "me",
            "table(1)",
            "in",
            "out",
            "via ",
            "xmit ",
            "eth0",
            "eth*",
            "1",
            "0",
            "4",
            "100",
            "0xff",
            "0xffffffff",
            "/24",
            "/64",
            "ffff::",
            "1.2.3.4",
            "2001:db8::/32",
            "::ffff:1.2.3.4",
            "80,443",
            "1000-2000",
            "10Mbit/s",
            "1KByte/s",
            "20ms",
            "500us",
            "1s",
            "64KB",
            "50KBytes",
            "0.01",
            "0.002/30/80/0.1",
            "1e-300",
            "-0",
            "4294967296",
            "18446744073709551616",
            " ",
            "\n",
            ";",
            "#",
            "\r\n",
            "\t",
            "é",
        ],
        "config_toml" => &[
            "[[pipe]]\n",
            "[[sched]]\n",
            "[[queue]]\n",
            "[[table]]\n",
            "[[rule]]\n",
            "number = 1\n",
            "number = 4\n",
            "bw = \"10Mbit/s\"\n",
            "delay = \"20ms\"\n",
            "jitter = \"5ms\"\n",
            "distribution = \"normal\"\n",
            "profile = \"wifi.prof\"\n",
            "limit = 50\n",
            "limit = \"64KB\"\n",
            "plr = 0.01\n",
            "duplicate = 1e-4\n",
            "red = \"0.002/30/80/0.1\"\n",
            "gemodel = { p = 0.01, r = 0.3, 1-h = 1.0, 1-k = 0.0 }\n",
            "gemodel = { p = \"1%\", 1-k = 0.01 }\n",
            "plr = \"1%\"\n",
            "lossstate = { p13 = 0.01, p32 = 0.3 }\n",
            "lossecn = true\n",
            "codel = { target = \"5ms\", interval = \"100ms\", ecn = true }\n",
            "codel = true\n",
            "type = \"fq_codel\"\n",
            "fq_codel = { target = \"5ms\", interval = \"100ms\", ecn = true, quantum = 1514, limit = 10240, flows = 1024 }\n",
            "fq_codel = { flows = 256, ecn = false }\n",
            "pie = { target = \"15ms\", tupdate = \"15ms\", alpha = 0.125, beta = 1.25, max_burst = \"150ms\", max_ecnth = 0.1, ecn = true, capdrop = true, derand = true, onoff = false, estimator = \"dre\" }\n",
            "pie = true\n",
            "type = \"fq_pie\"\n",
            "fq_pie = { target = \"10ms\", estimator = \"ts\", quantum = 1514, limit = 10240, flows = 1024 }\n",
            "slot = { min = \"1ms\", max = \"3ms\", packets = 8 }\n",
            "slot = { distribution = \"paretonormal\", delay = \"2ms\", jitter = \"1ms\" }\n",
            "mask = { src-ip = \"0xffffff00\" }\n",
            "mask = { dst-ip6 = \"/64\", proto = \"0xff\" }\n",
            "mask = \"all\"\n",
            "type = \"qfq\"\n",
            "sched = 4\n",
            "pipe = 1\n",
            "weight = 10\n",
            "lmax = 1500\n",
            "pri = 0\n",
            "buckets = 64\n",
            "reorder = true\n",
            "noerror = false\n",
            "entries = { \"10.1.0.0/16\" = 1, \"2001:db8::/32\" = 3 }\n",
            "action = \"queue tablearg\"\n",
            "action = \"pipe 1\"\n",
            "proto = \"udp\"\n",
            "from = \"table(1)\"\n",
            "to = \"any\"\n",
            "dst-port = \"80,443\"\n",
            "src-port = \"1000-2000\"\n",
            "direction = \"out\"\n",
            "via = \"eth0\"\n",
            "default = \"deny\"\n",
            "seed = 42\n",
            "number",
            "entries",
            "mask",
            " = ",
            "=",
            "\"",
            "'",
            "\"\"\"",
            "[",
            "]",
            "{",
            "}",
            ",",
            ".",
            "\n",
            " ",
            "#",
            "0x10",
            "0o7",
            "1_000",
            "+1",
            "-1",
            "1e3",
            "inf",
            "nan",
            "true",
            "4294967296",
            "\\u0000",
            "\\n",
            "é",
        ],
        "control" => &[
            "pipe show",
            "queue show",
            "sched show",
            "show rules",
            "show",
            "list",
            "pipe 1 delete",
            "delete 100",
            "zero",
            "zero 100 200",
            "flush",
            "pipe flush",
            "table 1 flush",
            "table 1 list",
            "pipe 1 show",
            "pipe 1 config bw 20Mbit/s",
            "queue 1 config weight 5",
            "sched 1 config type fq_codel quantum 3000",
            "sched 1 config type fq_pie target 10ms flows 64",
            "pipe 1 config type wf2q+",
            "pipe 1 config type fq_codel target 5ms flows 64",
            "pipe 1 config pie alpha 0.5 ts",
            "add 100 pipe 1 ip from any to any",
            "table 1 add 10.0.0.0/8 1",
            "default deny",
            "seed 1",
            "ipfw ",
            "-q ",
            "-f ",
            "pipe ",
            "queue ",
            "sched ",
            "table ",
            "config ",
            "delete ",
            "show ",
            "1 ",
            "2",
            "0x",
            "4294967296",
            ";",
            " ",
            "#",
            "\t",
            "\n",
        ],
        "netem" => &[
            "tc qdisc add dev eth0 root netem ",
            "netem ",
            "delay ",
            "del ",
            "latency ",
            "d ",
            "limit ",
            "l ",
            "loss ",
            "drop ",
            "lo ",
            "random ",
            "state ",
            "gemodel ",
            "ecn ",
            "reorder ",
            "corrupt ",
            "gap ",
            "duplicate ",
            "du ",
            "distribution ",
            "uniform ",
            "normal ",
            "pareto ",
            "paretonormal ",
            "experimental ",
            "rate ",
            "slot ",
            "packets ",
            "bytes ",
            "seed ",
            "help ",
            "0",
            "1",
            "5",
            "25",
            "100",
            "1000",
            "4294967296",
            ".",
            "-",
            "%",
            " ",
            "ms",
            "msec",
            "s",
            "secs",
            "us",
            "usec",
            "ns",
            "nsecs",
            "bit",
            "kbit",
            "mbit",
            "gbit",
            "tbit",
            "bps",
            "kbps",
            "mbps",
            "kibit",
            "mibps",
            "\n",
            "\t",
        ],
        "frame" => &[],
        "classify" => &[
            "pipe 1 config bw 10Mbit/s delay 20ms queue 50\n",
            "pipe 2 config bw 2Mbit/s mask src-ip 0xffffffff\n",
            "sched 4 config type qfq bw 4Mbit/s mask src-ip 0xff\n",
            "sched 5 config type drr mask dst-ip6 /64\n",
            "queue 1 config weight 10 sched 4 mask dst-ip 0xffffffff\n",
            "queue 2 config sched 4 mask all\n",
            "queue 3 config sched 5 mask src-port 0xffff proto 0xff\n",
            "queue 4 config pipe 1\n",
            "table 1 add 10.0.0.0/24 1\n",
            "table 1 add 2001:db8::/32 2\n",
            "add 100 queue 1 ip from 10.0.0.0/24 to any dst-port 80\n",
            "add 150 queue tablearg ip from table(1) to any\n",
            "add 200 pipe 1 udp from any to any out xmit eth1\n",
            "add 250 queue 3 ip6 from any to any via eth*\n",
            "add 300 deny tcp from any to me dst-port 22\n",
            "add 400 pipe 2 ip from any to any in recv eth0\n",
            "add 500 allow icmp from any to any\n",
            "add 600 queue 2 ip from any to any\n",
            "default deny\n",
        ],
        _ => &["a", " ", "\n", "é", "x", "0"],
    }
}

/// Ethernet headers: two addresses and an EtherType (IPv4, IPv6, 802.1Q,
/// 802.1ad, ARP, the old QinQ type, MACsec).
const ETHERNET: &[&[u8]] = &[
    b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00",
    b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x86\xdd",
    b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x81\x00",
    b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x88\xa8",
    b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x06",
    b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x91\x00",
    b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x88\xe5",
];

/// VLAN tags: an ID and the next EtherType.
const VLAN_TAGS: &[&[u8]] = &[
    b"\x00\x64\x08\x00",
    b"\x00\xc8\x86\xdd",
    b"\x20\x0a\x81\x00",
    b"\xef\xff\x08\x00",
    b"\x00\x01\x88\xa8",
];

/// IP headers: IPv4 (UDP, TCP, ICMP, a first and a later fragment, with
/// options, an authentication header next, IHL 4) and IPv6 (UDP, TCP,
/// ICMPv6, then hop-by-hop, fragment, routing, destination options),
/// their lengths those of the usual next headers.
const IP: &[&[u8]] = &[
    b"\x45\x00\x00\x1c\x00\x01\x00\x00\x40\x11\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02",
    b"\x45\x00\x00\x28\x00\x01\x40\x00\x40\x06\x00\x00\x0a\xc7\x00\x07\x01\x02\x03\x04",
    b"\x45\x00\x00\x1c\x00\x01\x00\x00\x40\x01\x00\x00\xc0\xa8\x01\x01\x0a\x00\x00\x01",
    b"\x45\x00\x00\x1c\x00\x01\x20\x00\x40\x11\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02",
    b"\x45\x00\x00\x1c\x00\x01\x00\x10\x40\x11\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02",
    b"\x46\x00\x00\x20\x00\x01\x00\x00\x40\x11\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02\x01\x01\x01\x00",
    b"\x45\x00\x00\x28\x00\x01\x00\x00\x40\x33\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02",
    b"\x44\x00\x00\x1c\x00\x01\x00\x00\x40\x11\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02",
    b"\x60\x00\x00\x00\x00\x08\x11\x40\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x02",
    b"\x60\x00\x00\x00\x00\x14\x06\x40\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x02",
    b"\x60\x00\x00\x00\x00\x08\x3a\x40\xfe\x80\0\0\0\0\0\0\0\0\0\0\0\0\0\x01\xff\x02\0\0\0\0\0\0\0\0\0\0\0\0\0\x01",
    b"\x60\x00\x00\x00\x00\x10\x00\x40\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x02",
    b"\x60\x00\x00\x00\x00\x10\x2c\x40\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x02",
    b"\x60\x00\x00\x00\x00\x10\x2b\x40\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x02",
    b"\x60\x00\x00\x00\x00\x10\x3c\x40\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x02",
];

/// IPv6 extension headers, UDP, TCP or another extension header next:
/// hop-by-hop or destination options with padding, routing, a first and a
/// later fragment (8 bytes each), an authentication header (12 bytes).
const EXTENSIONS: &[&[u8]] = &[
    b"\x11\x00\x01\x04\x00\x00\x00\x00",
    b"\x3c\x00\x01\x04\x00\x00\x00\x00",
    b"\x00\x00\x01\x04\x00\x00\x00\x00",
    b"\x11\x00\x00\x00\x00\x00\x00\x00",
    b"\x11\x00\x00\x01\x00\x00\x00\x01",
    b"\x06\x00\x00\x08\x00\x00\x00\x01",
    b"\x2c\x00\x00\x01\x00\x00\x00\x01",
    b"\x11\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x01",
];

/// Transport headers: UDP, TCP (data offset 5, then 4), ICMP echo,
/// ICMPv6 echo.
const TRANSPORT: &[&[u8]] = &[
    b"\x04\xd2\x00\x35\x00\x08\x00\x00",
    b"\x04\xd2\x00\x50\x00\x00\x00\x01\x00\x00\x00\x00\x50\x02\xff\xff\x00\x00\x00\x00",
    b"\x04\xd2\x00\x50\x00\x00\x00\x01\x00\x00\x00\x00\x40\x02\xff\xff\x00\x00\x00\x00",
    b"\x08\x00\x00\x00\x00\x01\x00\x01",
    b"\x80\x00\x00\x00\x00\x01\x00\x01",
];

/// Single bytes and lengths that header fields are made of: protocol and
/// next-header numbers (TCP, UDP, ICMP, ICMPv6, hop-by-hop, routing,
/// fragment, destination options, authentication, none), versions and
/// IHLs, lengths.
const HEADER_BYTES: &[&[u8]] = &[
    b"\x06",
    b"\x11",
    b"\x01",
    b"\x3a",
    b"\x00",
    b"\x2b",
    b"\x2c",
    b"\x3c",
    b"\x33",
    b"\x3b",
    b"\x45",
    b"\x4f",
    b"\x60",
    b"\xff",
    b"\x00\x1c",
    b"\x05\xdc",
    b"\xff\xff",
    b"\x00\x00",
];

/// Byte tokens of a binary target (empty for text targets).
fn byte_tokens(target: &str) -> &'static [&'static [&'static [u8]]] {
    match target {
        "frame" => &[ETHERNET, VLAN_TAGS, IP, EXTENSIONS, TRANSPORT, HEADER_BYTES],
        _ => &[],
    }
}

/// One token of `target`'s dictionaries, text or bytes.
fn token(rng: &mut Rng, target: &str) -> &'static [u8] {
    let groups = byte_tokens(target);
    if groups.is_empty() {
        let dict = dictionary(target);
        dict[rng.below(dict.len())].as_bytes()
    } else {
        let group = groups[rng.below(groups.len())];
        group[rng.below(group.len())]
    }
}

/// A frame's headers in order: Ethernet, up to two VLAN tags, IP, up to
/// two extension headers, transport, and a few trailing bytes.
fn generate_frame(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    let mut layer = |rng: &mut Rng, tokens: &[&[u8]]| {
        out.extend_from_slice(tokens[rng.below(tokens.len())]);
    };
    layer(rng, ETHERNET);
    for _ in 0..rng.below(3) {
        layer(rng, VLAN_TAGS);
    }
    layer(rng, IP);
    for _ in 0..rng.below(3) {
        layer(rng, EXTENSIONS);
    }
    layer(rng, TRANSPORT);
    for _ in 0..rng.below(8) {
        out.push(rng.next() as u8);
    }
    out
}

/// Configuration lines (every object of the dictionary, about a third of
/// its rules, so that most configurations validate), a NUL byte, then
/// random bytes (the packets).
fn generate_classify(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for line in dictionary("classify") {
        let object = !line.starts_with("add") && !line.starts_with("default");
        if object || rng.below(3) == 0 {
            out.extend_from_slice(line.as_bytes());
        }
    }
    out.push(0);
    for _ in 0..8 + rng.below(256) {
        out.push(rng.next() as u8);
    }
    out
}

fn generate(rng: &mut Rng, target: &str) -> Vec<u8> {
    match target {
        "frame" => return generate_frame(rng),
        "classify" => return generate_classify(rng),
        _ => {}
    }
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(12) {
        if rng.below(8) == 0 {
            out.push(rng.next() as u8);
        } else {
            out.extend_from_slice(token(rng, target));
        }
    }
    out
}

fn mutate(rng: &mut Rng, target: &str, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let tok = token(rng, target);
                v.splice(at..at, tok.iter().copied());
            }
            2 if !v.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(v.len());
                v.drain(at.min(end)..end);
            }
            3 => v.insert(at, rng.next() as u8),
            4 if !v.is_empty() && v.len() < 1 << 16 => {
                // Repeat a slice: long numbers, long lists, deep nesting.
                let start = rng.below(v.len());
                let end = (start + 1 + rng.below(16)).min(v.len());
                let piece = v[start..end].to_vec();
                for _ in 0..1 + rng.below(64) {
                    v.splice(at..at, piece.iter().copied());
                }
            }
            _ => v.truncate(at),
        }
    }
    v
}

fn corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// One input taking longer than this is reported as slow.
const SLOW: Duration = Duration::from_millis(500);

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> std::process::ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let targets: Vec<_> = TARGETS
        .iter()
        .filter(|(name, _)| wanted.is_empty() || wanted.iter().any(|w| w == name))
        .collect();
    if targets.is_empty() {
        eprintln!(
            "fuzz-driver: no such target (known: {})",
            TARGETS.iter().map(|t| t.0).collect::<Vec<_>>().join(", ")
        );
        return std::process::ExitCode::from(2);
    }
    let total: f64 = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40.0);
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    let per_target = Duration::from_secs_f64(total / targets.len() as f64);
    // Panics are the findings: report them ourselves, one line each.
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = 0;
    for (name, run) in targets {
        let mut rng = Rng(seed);
        let seeds = corpus(&root.join("corpus").join(name));
        let mut pool = seeds.clone();
        let start = Instant::now();
        let mut runs = 0u64;
        let mut found = 0;
        let next_input = |rng: &mut Rng, pool: &Vec<Vec<u8>>, i: u64| -> Vec<u8> {
            if (i as usize) < seeds.len() {
                seeds[i as usize].clone()
            } else if pool.is_empty() || rng.below(3) == 0 {
                generate(rng, name)
            } else if !seeds.is_empty() && rng.below(2) == 0 {
                // Half the mutations start from a seed: the corpus holds
                // the valid inputs that reach past the parsers' first
                // checks, which the pool's random picks rarely are.
                let pick = rng.below(seeds.len());
                mutate(rng, name, &seeds[pick])
            } else {
                let pick = rng.below(pool.len());
                mutate(rng, name, &pool[pick])
            }
        };
        while (runs as usize) < seeds.len() || start.elapsed() < per_target {
            let input = next_input(&mut rng, &pool, runs);
            runs += 1;
            let t = Instant::now();
            let outcome = std::panic::catch_unwind(|| run(&input));
            if t.elapsed() > SLOW {
                // Not a broken contract, but worth knowing: printed, kept.
                let dir = root.join("crashes");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{name}-slow-{runs}"));
                let _ = std::fs::write(&path, &input);
                eprintln!(
                    "SLOW {name}: {:.1} s for input {} (saved to {})",
                    t.elapsed().as_secs_f64(),
                    hex(&input[..input.len().min(200)]),
                    path.display()
                );
            }
            if let Err(payload) = outcome {
                let why = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                let why: String = why.chars().take(300).collect();
                found += 1;
                let dir = root.join("crashes");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{name}-{found}"));
                let _ = std::fs::write(&path, &input);
                let shown = hex(&input[..input.len().min(200)]);
                eprintln!(
                    "FAIL {name}: {why}; input {shown}{} (saved to {}); rerun: FUZZ_SEED={seed}",
                    if input.len() > 200 { "..." } else { "" },
                    path.display()
                );
                if found >= 5 {
                    break;
                }
            } else if rng.below(64) == 0 && pool.len() < 4096 && input.len() < 4096 {
                pool.push(input);
            }
        }
        failures += found;
        println!(
            "{name}: {runs} inputs in {:.1} s, {found} failures (seed {seed})",
            start.elapsed().as_secs_f64()
        );
    }
    if failures > 0 {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
