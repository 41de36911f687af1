//! The test bed cleans up after itself, after a panic too. Needs root:
//! without it, each test prints "skipped: <reason>" and returns.
use std::process::Command;

use pspat_io::netns::{self, Namespace, VethPair};

fn namespaces() -> Vec<String> {
    let output = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn links_of(namespace: &str) -> String {
    let output = Command::new("ip")
        .args(["-n", namespace, "-o", "link"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn namespaces_and_pairs_are_named_addressed_and_removed_even_after_a_panic() {
    if let Some(reason) = netns::unavailable() {
        println!("skipped: {reason}");
        return;
    }
    let mut names = Vec::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let a = Namespace::create().unwrap();
        let b = Namespace::create().unwrap();
        let pair = VethPair::create(&a, &b).unwrap();
        names.push(a.name().to_owned());
        names.push(b.name().to_owned());
        for name in [a.name(), b.name(), &pair.a, &pair.b] {
            assert!(name.starts_with("pspat-"), "{name}");
        }
        assert!(pair.a.len() <= 15 && pair.b.len() <= 15);
        assert!(links_of(a.name()).contains(&pair.a));
        assert!(links_of(b.name()).contains(&pair.b));
        assert_eq!(pair.a_addr.octets()[..2], [10, 199]);
        assert_eq!(u32::from(pair.b_addr) - u32::from(pair.a_addr), 1);
        // The addresses reach each other inside the namespaces only.
        let reachable = a
            .run(|| {
                let socket = std::net::UdpSocket::bind((pair.a_addr, 0)).unwrap();
                socket.connect((pair.b_addr, 9)).is_ok()
            })
            .unwrap();
        assert!(reachable);
        a.run(|| panic!("a panic inside the namespace")).unwrap();
    }));
    assert!(outcome.is_err(), "the panic was resumed in the caller");
    assert_eq!(names.len(), 2);
    let left = namespaces();
    for name in &names {
        assert!(!left.contains(name), "{name} removed: {left:?}");
    }
}
