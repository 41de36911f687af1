//! Reading configuration and profile files with a size cap.
//!
//! Both are text files written by people or by scripts: a few kilobytes, a
//! few megabytes for a long rule list or a fine-grained profile. A path that
//! names something else (`/dev/zero`, `/dev/urandom`, a log that keeps
//! growing) must fail at once with a clear error rather than fill memory, so
//! at most [`MAX_FILE_BYTES`] are read. A leading UTF-8 byte-order mark is
//! dropped. O(file size), one allocation.

use std::io::{self, Read};
use std::path::Path;

/// The largest configuration or profile file read: 16 MiB (a rule list of
/// about 200 000 lines, a profile of about a million points).
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads `path` as UTF-8 text of at most [`MAX_FILE_BYTES`], without a
/// leading byte-order mark.
///
/// # Errors
/// The file's own I/O error; [`io::ErrorKind::InvalidData`] when it holds
/// more than [`MAX_FILE_BYTES`] (or never ends) or is not UTF-8.
pub fn read_text_file(path: &Path) -> io::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "more than {} MiB: not a configuration or profile file",
                MAX_FILE_BYTES >> 20
            ),
        ));
    }
    let mut text = String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))?;
    // Some editors start a UTF-8 file with a byte-order mark; it is not
    // part of the first line (and would be an invisible token in an error).
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// [`read_text_file`] for a file the daemon reads while it runs (a
/// profile named by a change, the configuration on SIGHUP): only a regular
/// file, since opening a FIFO waits for a writer and would stall every
/// other control request behind it.
///
/// # Errors
/// As [`read_text_file`]; [`io::ErrorKind::InvalidData`] for anything but a
/// regular file (after symbolic links).
pub fn read_regular_text_file(path: &Path) -> io::Result<String> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    read_text_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_never_ends_is_refused_after_the_cap() {
        let e = read_text_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("more than 16 MiB"), "{e}");
    }

    #[test]
    fn text_is_read_whole_and_bytes_that_are_not_utf8_are_refused() {
        let dir = std::env::temp_dir().join(format!("pspat-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = dir.join("a.ipfw");
        std::fs::write(&text, "pipe 1 config bw 1Mbit/s\n").unwrap();
        assert_eq!(read_text_file(&text).unwrap(), "pipe 1 config bw 1Mbit/s\n");
        let marked = dir.join("bom.ipfw");
        std::fs::write(&marked, "\u{feff}pipe 1 config\n").unwrap();
        assert_eq!(read_text_file(&marked).unwrap(), "pipe 1 config\n");
        let binary = dir.join("b.ipfw");
        std::fs::write(&binary, [0x70, 0xff, 0xfe, 0x0a]).unwrap();
        let e = read_text_file(&binary).unwrap_err();
        assert_eq!(e.to_string(), "not UTF-8 text");
        assert_eq!(
            read_text_file(&dir.join("missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            read_regular_text_file(&text).unwrap(),
            "pipe 1 config bw 1Mbit/s\n"
        );
        for not_regular in [dir.as_path(), Path::new("/dev/zero")] {
            let e = read_regular_text_file(not_regular).unwrap_err();
            assert_eq!(e.to_string(), "not a regular file");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
