//! `pspat config check|convert`: validate a configuration file and print it
//! in its normal form, or convert it between the TOML and ipfw-line syntaxes
//! (a `.toml` file is TOML, any other file is ipfw lines; see
//! `docs/CONFIG.md`).
//!
//! Errors are one line, `file:line:column: message`, exit code 2.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use pspat_config::{
    netem_to_config, parse_file_text, print_ipfw, print_toml, Config, FsProfiles, Plan,
};

use crate::usage;

/// Arguments of `pspat config`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: ConfigCommand,
}

/// The syntaxes a configuration can be printed in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// TOML with explicit units.
    Toml,
    /// ipfw(8) lines.
    Ipfw,
}

#[derive(clap::Subcommand, Debug)]
enum ConfigCommand {
    /// Validate FILE (profiles included) and print it normalised, in its own syntax.
    Check {
        /// The configuration: `.toml` is TOML, anything else ipfw lines.
        file: PathBuf,
        /// Print the validated plan as JSON (with "schema_version": 1) instead.
        #[arg(long)]
        json: bool,
    },
    /// Print FILE in the other syntax (or the one given with --to).
    Convert {
        /// The configuration: `.toml` is TOML, anything else ipfw lines.
        file: PathBuf,
        /// The syntax to print (default: the other one).
        #[arg(long, value_enum)]
        to: Option<Syntax>,
    },
    /// Print the pipe that does what tc-netem's options do (`delay 100ms 10ms loss 1% rate 10mbit`, or a whole `tc qdisc add ... netem ...` command), with a rule sending every packet to it.
    FromNetem {
        /// The pipe's number.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65535))]
        pipe: u32,
        /// The syntax to print.
        #[arg(long, value_enum, default_value_t = Syntax::Ipfw)]
        to: Syntax,
        /// netem's options, as tc takes them (tc's units: `loss 1` is 1%, `bps` is bytes per second).
        #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
        options: Vec<String>,
    },
}

fn syntax_of(path: &Path) -> Syntax {
    if path.extension().is_some_and(|e| e == "toml") {
        Syntax::Toml
    } else {
        Syntax::Ipfw
    }
}

fn load(path: &Path) -> anyhow::Result<Config> {
    let name = path.display().to_string();
    let text = pspat_config::read_text_file(path)
        .map_err(|e| usage(format!("{name}: cannot read the configuration: {e}")))?;
    parse_file_text(&text, &name).map_err(|e| usage(e.to_string()))
}

/// Validates `config`, read from `file` (profiles are relative to its
/// directory): a usage error with the position of the first problem.
fn validate(config: &Config, file: &Path) -> anyhow::Result<Plan> {
    let loader = FsProfiles {
        base: file.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    config.validate(&loader).map_err(|e| usage(e.to_string()))
}

/// `config` in `syntax`, its rules numbered and in the order they are
/// tried ([`Config::in_rule_order`]).
fn print(config: &Config, syntax: Syntax) -> String {
    let config = config.in_rule_order();
    match syntax {
        Syntax::Toml => print_toml(&config),
        Syntax::Ipfw => print_ipfw(&config),
    }
}

/// Runs `pspat config`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        ConfigCommand::Check { file, json } => {
            let config = load(&file)?;
            let plan = validate(&config, &file)?;
            if json {
                let text = serde_json::to_string_pretty(&plan).context("serialising the plan")?;
                println!("{text}");
            } else {
                print!("{}", print(&config, syntax_of(&file)));
            }
        }
        ConfigCommand::Convert { file, to } => {
            let config = load(&file)?;
            // Only a valid configuration is converted: the other syntax
            // would carry the same mistake, and nothing would have said so.
            validate(&config, &file)?;
            let target = to.unwrap_or(match syntax_of(&file) {
                Syntax::Toml => Syntax::Ipfw,
                Syntax::Ipfw => Syntax::Toml,
            });
            print!("{}", print(&config, target));
        }
        ConfigCommand::FromNetem { pipe, to, options } => {
            let config = netem_to_config(&options.join(" "), pipe, "netem")
                .map_err(|e| usage(e.to_string()))?;
            print!("{}", print(&config, to));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pspat-config-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn check_and_convert_accept_both_syntaxes() {
        let ipfw = temp_file(
            "ok.ipfw",
            "sched 4 config type qfq bw 4Mbit/s\nqueue 1 config weight 10 sched 4\n",
        );
        let toml = temp_file("ok.toml", &print_toml(&load(&ipfw).unwrap()));
        assert_eq!(load(&toml).unwrap(), load(&ipfw).unwrap());
        for (file, json) in [(&ipfw, false), (&toml, true)] {
            let args = Args {
                command: ConfigCommand::Check {
                    file: file.clone(),
                    json,
                },
            };
            assert_eq!(run(args).unwrap(), ExitCode::SUCCESS);
        }
        let args = Args {
            command: ConfigCommand::Convert {
                file: ipfw,
                to: None,
            },
        };
        assert_eq!(run(args).unwrap(), ExitCode::SUCCESS);
    }

    #[test]
    fn errors_are_one_usage_line_with_the_position() {
        let bad = temp_file(
            "bad.ipfw",
            "pipe 1 config\nqueue 3 config sched 1 mask src-mac 0xff\n",
        );
        let args = Args {
            command: ConfigCommand::Check {
                file: bad.clone(),
                json: false,
            },
        };
        let err = run(args).unwrap_err();
        let usage_error = err
            .downcast_ref::<crate::UsageError>()
            .expect("a usage error: exit 2");
        assert_eq!(usage_error.0, format!("{}:2:29: unknown mask field 'src-mac' (allowed: src-ip, dst-ip, src-ip6, dst-ip6, src-port, dst-port, proto, flow-id, all)", bad.display()));
        assert!(!usage_error.0.contains('\n'));
        let missing = Args {
            command: ConfigCommand::Convert {
                file: bad.with_extension("nope"),
                to: Some(Syntax::Toml),
            },
        };
        assert!(run(missing)
            .unwrap_err()
            .downcast_ref::<crate::UsageError>()
            .is_some());
    }

    #[test]
    fn from_netem_prints_a_pipe_or_one_usage_line() {
        let ok = Args {
            command: ConfigCommand::FromNetem {
                pipe: 2,
                to: Syntax::Toml,
                options: [
                    "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "20ms",
                ]
                .map(String::from)
                .to_vec(),
            },
        };
        assert_eq!(run(ok).unwrap(), ExitCode::SUCCESS);
        let bad = Args {
            command: ConfigCommand::FromNetem {
                pipe: 1,
                to: Syntax::Ipfw,
                options: ["delay", "10ms", "duplicate", "1%", "100%"]
                    .map(String::from)
                    .to_vec(),
            },
        };
        let err = run(bad).unwrap_err();
        let usage_error = err
            .downcast_ref::<crate::UsageError>()
            .expect("a usage error: exit 2");
        assert!(
            usage_error
                .0
                .starts_with("netem:1:25: '100%': a duplicate correlation must be under 100%"),
            "{}",
            usage_error.0
        );
    }

    #[test]
    fn convert_refuses_what_check_refuses() {
        // Each parses, and fails only validation.
        for (name, text) in [
            ("plr.ipfw", "pipe 1 config plr 2\n"),
            ("dangling.ipfw", "queue 1 config weight 10 sched 99\n"),
            ("duplicate.ipfw", "pipe 1 config\npipe 1 config\n"),
        ] {
            let file = temp_file(name, text);
            let check = run(Args {
                command: ConfigCommand::Check {
                    file: file.clone(),
                    json: false,
                },
            })
            .unwrap_err();
            let convert = run(Args {
                command: ConfigCommand::Convert {
                    file,
                    to: Some(Syntax::Toml),
                },
            })
            .unwrap_err();
            let (check, convert) = (
                check.downcast_ref::<crate::UsageError>().expect("exit 2"),
                convert.downcast_ref::<crate::UsageError>().expect("exit 2"),
            );
            assert_eq!(check.0, convert.0, "{name}");
        }
    }

    #[test]
    fn rules_print_numbered_in_the_order_they_are_tried() {
        let file = temp_file(
            "order.ipfw",
            "pipe 1 config bw 1Mbit/s\nadd 200 pipe 1 ip from any to any\nadd pipe 1 udp from any to any\nadd 100 deny tcp from any to any\n",
        );
        let config = load(&file).unwrap();
        let plan = validate(&config, &file).unwrap();
        for syntax in [Syntax::Ipfw, Syntax::Toml] {
            let text = print(&config, syntax);
            let again = match syntax {
                Syntax::Ipfw => pspat_config::parse_ipfw(&text, "printed"),
                Syntax::Toml => pspat_config::parse_toml(&text, "printed"),
            }
            .unwrap();
            let numbers: Vec<Option<u32>> = again.rules.iter().map(|r| r.number).collect();
            assert_eq!(numbers, [Some(100), Some(200), Some(300)], "{text}");
            // The same plan: the rules are tried in the same order.
            assert_eq!(again.validate(&pspat_config::NoProfiles).unwrap(), plan);
        }
        let ipfw = print(&config, Syntax::Ipfw);
        let rules: Vec<&str> = ipfw.lines().filter(|l| l.starts_with("add")).collect();
        assert_eq!(
            rules,
            [
                "add 100 deny tcp from any to any",
                "add 200 pipe 1 ip from any to any",
                "add 300 pipe 1 udp from any to any"
            ]
        );
    }
}
