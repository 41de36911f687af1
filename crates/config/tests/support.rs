//! What the syntax tests share: parsing and validating a text, and where
//! its error is.

use pspat_config::{
    parse_ipfw, parse_toml, print_ipfw, print_toml, Config, Error, ErrorKind, NoProfiles, Plan,
};

/// `text` as ipfw lines of `cfg.ipfw` (panics with the error).
pub fn ipfw(text: &str) -> Config {
    parse_ipfw(text, "cfg.ipfw").unwrap_or_else(|e| panic!("{e}"))
}

/// `cfg` printed as ipfw lines and as TOML, each checked to read back as
/// `cfg`: (ipfw, toml).
pub fn printed_both(cfg: &Config) -> (String, String) {
    let printed = print_ipfw(cfg);
    assert_eq!(&ipfw(&printed), cfg, "{printed}");
    let toml = print_toml(cfg);
    assert_eq!(&parse_toml(&toml, "cfg.toml").unwrap(), cfg, "{toml}");
    (printed, toml)
}

/// `text` as ipfw lines, validated (panics with the error).
pub fn plan(text: &str) -> Plan {
    ipfw(text)
        .validate(&NoProfiles)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Parses (and validates) `text` in the syntax its file name says; the
/// one error.
pub fn error_of(text: &str, file: &str) -> Error {
    let parsed = if file.ends_with(".toml") {
        parse_toml(text, file)
    } else {
        parse_ipfw(text, file)
    };
    match parsed {
        Err(e) => e,
        Ok(c) => c.validate(&NoProfiles).expect_err("the input is invalid"),
    }
}

/// `e` is at `line`:`column` on `token`, of `kind`; its one line starts
/// with `file:line:column: ` and contains `says`.
pub fn assert_at(e: &Error, at: (u32, u32, &str), kind: ErrorKind, says: &str) {
    assert_eq!(
        (e.line, e.column, e.token.as_str(), e.kind),
        (at.0, at.1, at.2, kind),
        "{e}"
    );
    let line = e.to_string();
    assert!(
        line.starts_with(&format!("{}:{}:{}: ", e.file, at.0, at.1)),
        "{line}"
    );
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(e.message.contains(says), "{e}");
}
