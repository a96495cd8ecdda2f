//! Link options on the command line, generated from the core's key table: `--KEY` sets both
//! directions, `--up-KEY` / `--down-KEY` override one.

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
use quiclab_link::LinkConfig;
use quiclab_link::config::{ConfigError, KEYS};

/// Link options as given; resolved into a [`LinkConfig`] by [`LinkArgs::config`].
#[derive(Debug, Clone, Default)]
pub struct LinkArgs {
    /// (flag name, value) in command-line order.
    given: Vec<(String, String)>,
    pub seed: u64,
}

const SCOPES: [(&str, &str); 3] = [
    ("", "both directions"),
    ("up-", "client -> server"),
    ("down-", "server -> client"),
];

impl Args for LinkArgs {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for (prefix, scope) in SCOPES {
            for k in KEYS {
                let name: &'static str = format!("{prefix}{}", k.name).leak();
                let arg = Arg::new(name)
                    .long(name)
                    .value_name(k.value)
                    .help_heading("Link")
                    .action(ArgAction::Append);
                // one line of help per key; the per-direction forms are explained once, below
                let arg = if prefix.is_empty() {
                    arg.help(k.help)
                } else {
                    arg.help(format!("--{} for {scope} only", k.name))
                        .hide(true)
                };
                cmd = cmd.arg(arg);
            }
        }
        cmd.after_help(
            "Every link option also exists per direction: --up-KEY (client -> server) and \
             --down-KEY (server -> client) override --KEY for that direction, e.g. \
             --delay 10ms --down-rate 50mbit --up-rate 5mbit.",
        )
        .arg(
            Arg::new("seed")
                .long("seed")
                .value_name("N")
                .value_parser(clap::value_parser!(u64))
                .default_value("1")
                .help_heading("Link")
                .help("seed of every random decision: a packet's fate depends only on (seed, direction, index)"),
        )
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for LinkArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for (prefix, _) in SCOPES {
            for k in KEYS {
                let name = format!("{prefix}{}", k.name);
                if let Some(vals) = m.get_many::<String>(&name) {
                    given.extend(vals.map(|v| (name.clone(), v.clone())));
                }
            }
        }
        Ok(LinkArgs {
            given,
            seed: *m.get_one::<u64>("seed").unwrap_or(&1),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl LinkArgs {
    /// Applies symmetric options first, then per-direction overrides; errors name the flag.
    pub fn config(&self) -> Result<LinkConfig, ConfigError> {
        let load = |p: &str| {
            quiclab_link::Trace::read_file(std::path::Path::new(p)).map_err(|e| e.to_string())
        };
        LinkConfig::from_keys(self.seed, &self.given, &load).map_err(|e| ConfigError {
            key: format!("--{}", e.key),
            ..e
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        link: LinkArgs,
    }

    #[test]
    fn per_direction_overrides_symmetric() {
        let t = T::try_parse_from([
            "t",
            "--down-delay",
            "30ms",
            "--delay",
            "10ms",
            "--up-loss",
            "1%",
            "--seed",
            "9",
        ])
        .unwrap();
        let c = t.link.config().unwrap();
        assert_eq!(c.seed, 9);
        assert_eq!(c.up.delay, Duration::from_millis(10));
        assert_eq!(c.down.delay, Duration::from_millis(30));
        assert_eq!((c.up.loss, c.down.loss), (0.01, 0.0));
    }

    #[test]
    fn errors_name_the_flag() {
        let t = T::try_parse_from(["t", "--up-rate", "fast"]).unwrap();
        let e = t.link.config().unwrap_err().to_string();
        assert!(e.starts_with("--up-rate = \"fast\""), "{e}");
        let t = T::try_parse_from(["t", "--down-queue", "10pkt"]).unwrap();
        let e = t.link.config().unwrap_err().to_string();
        assert!(e.starts_with("--down-queue"), "{e}");
    }
}
