//! The one error type of the crate: what went wrong, and where.
//!
//! Every error names the file, the 1-based line and column of the offending
//! token, the token itself and a message that says what is allowed instead.
//! Errors found while validating a model that was not parsed from text (built
//! in code) carry line and column 0.

use std::fmt;

/// The class of an [`Error`], for callers that react differently to each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Text that does not follow the grammar (a missing argument, a bad number or unit).
    Syntax,
    /// A keyword, command or TOML key that the object does not take.
    UnknownKeyword,
    /// A mask field that does not exist.
    UnknownMaskField,
    /// A number outside its allowed range (weight, probability, size...).
    OutOfRange,
    /// A second object with the same number, or a keyword given twice.
    Duplicate,
    /// A reference to a pipe, queue, sched or table that is not defined.
    MissingReference,
    /// A profile file that cannot be read.
    ProfileUnreadable,
    /// A profile file whose content is malformed.
    ProfileMalformed,
    /// A read-only or control command where configuration was expected.
    NotConfiguration,
}

/// A configuration error at one place in one file.
///
/// # Examples
/// ```
/// let err = pspat_config::parse_ipfw("pipe 1 config mask src-mac 0xff", "cfg.ipfw").unwrap_err();
/// assert_eq!((err.line, err.column, err.token.as_str()), (1, 20, "src-mac"));
/// assert!(err.to_string().starts_with("cfg.ipfw:1:20: unknown mask field 'src-mac'"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct Error {
    /// The file the token is in (the configuration or a profile file).
    pub file: String,
    /// 1-based line; 0 when the model was not parsed from text.
    pub line: u32,
    /// 1-based column in characters; 0 when the model was not parsed from text.
    pub column: u32,
    /// The offending token as written.
    pub token: String,
    /// What is wrong and what is allowed.
    pub message: String,
    /// The class of the error.
    pub kind: ErrorKind,
}

/// Where a token was written: line, column and the token's text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// 1-based line (0: unknown).
    pub line: u32,
    /// 1-based column in characters (0: unknown).
    pub column: u32,
    /// The token as written.
    pub token: String,
}

impl Pos {
    /// A position with a token.
    pub fn new(line: u32, column: u32, token: impl Into<String>) -> Self {
        Pos {
            line,
            column,
            token: token.into(),
        }
    }

    /// An error at this position.
    pub fn error(&self, file: &str, kind: ErrorKind, message: impl fmt::Display) -> Error {
        Error {
            file: file.to_string(),
            line: self.line,
            column: self.column,
            token: self.token.clone(),
            message: message.to_string(),
            kind,
        }
    }
}
