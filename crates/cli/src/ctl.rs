//! `pspat ctl [--socket PATH] [--json] WORDS...`: one ipfw line to a
//! running `pspat run` over its control socket (docs/RUN.md, *Control*).
//!
//! The line is checked here first (the same parser as the daemon's, errors
//! `<ctl>:1:COL: message`, exit 2, nothing sent), then sent; the daemon
//! answers with one JSON object (docs/JSON.md, `pspat ctl`): its `text` is
//! printed, or the whole object with `--json`. A refusal (an invalid
//! change, one that cannot be made live, an unauthorised user) is one line
//! on stderr and exit 2; no daemon behind the socket is one line and exit 2.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::usage;

/// How long `pspat ctl` waits for the daemon's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of `pspat ctl`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  pspat ctl pipe 1 config bw 20Mbit/s\n  pspat ctl pipe show\n  pspat ctl --json show rules\n  pspat ctl add 300 pipe 2 udp from any to any dst-port 53\n  pspat ctl delete 300\n\nSee docs/RUN.md.\n\nExit codes: 0 done; 1 the conversation with the daemon failed midway; 2 the line is invalid, the daemon refused it, or no daemon answers on the socket."
)]
pub struct Args {
    /// The daemon's control socket (default: pspat run's default, /run/pspat/pspat.sock for
    /// root, else $XDG_RUNTIME_DIR/pspat.sock or /tmp/pspat-UID/pspat.sock). Also
    /// `--control`, the name `pspat run` gives it.
    #[arg(long, visible_alias = "control", value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the daemon's whole answer as one JSON object.
    #[arg(long)]
    json: bool,
    /// The request in ipfw words: `pipe 1 config bw 20Mbit/s`, `pipe show`, `queue show`,
    /// `sched show`, `show rules`, `add ...`, `delete N`, `zero [N]`, `table N create|add P V|delete P|flush|destroy` (a leading `ipfw` is accepted).
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true, trailing_var_arg = true)]
    words: Vec<String>,
}

/// Runs the command.
pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    // `pspat ctl pipe show --json`: a trailing flag is taken as one.
    if args.words.last().is_some_and(|w| w == "--json") {
        args.words.pop();
        args.json = true;
    }
    let line = args.words.join(" ");
    if let Err(why) = check_line(&line) {
        if args.json {
            // The shape the daemon answers in, so that a script reads one
            // shape whoever refused the line.
            let refused = Answer {
                schema_version: 1,
                command: "ctl".into(),
                request: line,
                ok: false,
                error: Some(why.clone()),
                text: String::new(),
                result: serde_json::Value::Null,
            };
            let mut out = std::io::stdout().lock();
            serde_json::to_writer_pretty(&mut out, &refused)?;
            writeln!(out)?;
        }
        return Err(usage(why));
    }
    let path = args
        .socket
        .clone()
        .unwrap_or_else(crate::run::default_socket);
    let shown = path.display();
    let mut stream = UnixStream::connect(&path).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => {
                "no pspat run is listening (the socket does not exist); start one, or give its --control path".to_string()
            }
            // connect(2) answers ECONNREFUSED for a path that is not a
            // socket too (a directory, a plain file).
            std::io::ErrorKind::ConnectionRefused
                if std::fs::symlink_metadata(&path)
                    .is_ok_and(|m| !std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) =>
            {
                "not a socket (give the path `pspat run --control` listens on)".to_string()
            }
            std::io::ErrorKind::ConnectionRefused => {
                "no pspat run answers (a stale socket)".to_string()
            }
            std::io::ErrorKind::PermissionDenied => {
                "permission denied (the socket belongs to another user)".to_string()
            }
            _ => e.to_string(),
        };
        usage(format!("--socket {shown}: {why}"))
    })?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    stream.set_write_timeout(Some(ANSWER_TIMEOUT))?;
    let talk = |stream: &mut UnixStream| -> std::io::Result<String> {
        stream.write_all(format!("{line}\n").as_bytes())?;
        stream.shutdown(std::net::Shutdown::Write)?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    };
    let answer = talk(&mut stream).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => anyhow::anyhow!(
            "ctl: {shown}: no answer within {} s (the daemon is busy or stuck; a change may still be applied: check with pipe show)",
            ANSWER_TIMEOUT.as_secs()
        ),
        _ => anyhow::anyhow!("ctl: {shown}: the daemon did not answer: {e}"),
    })?;
    let reply: Answer = serde_json::from_str(answer.trim())
        .map_err(|e| anyhow::anyhow!("ctl: {shown}: not an answer of pspat run: {e}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &reply)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", reply.text)?;
    }
    out.flush()?;
    if reply.ok {
        return Ok(ExitCode::SUCCESS);
    }
    Err(usage(reply.error.unwrap_or_else(|| "refused".into())))
}

/// What `pspat ctl` refuses before connecting: more than one line, a line
/// the daemon would refuse whole for its length, or one that does not
/// parse.
fn check_line(line: &str) -> Result<(), String> {
    if line.contains('\n') {
        return Err("ctl: the request must be one line".into());
    }
    if line.len() as u64 > crate::run::MAX_REQUEST {
        return Err(format!(
            "ctl: the request is longer than {} KiB",
            crate::run::MAX_REQUEST >> 10
        ));
    }
    pspat_config::parse_control(line, "<ctl>")
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The daemon's answer (docs/JSON.md, `pspat ctl`), its keys in this order.
#[derive(serde::Serialize, serde::Deserialize)]
struct Answer {
    schema_version: u32,
    command: String,
    request: String,
    ok: bool,
    error: Option<String>,
    text: String,
    result: serde_json::Value,
}
