//! What a command prints, readable or as JSON (`--json`).
//!
//! Readable: the lines go to standard output as they are made. With `--json`, standard output
//! holds one JSON object only, printed when the command ends (a summary of what it measured),
//! and the readable lines go to standard error, so that a person watching still sees progress
//! while a script reads standard output.

use std::fmt::Display;
use std::io::Write;

use serde_json::Value;

#[derive(Clone, Copy)]
pub struct Out {
    json: bool,
}

impl Out {
    pub fn new(json: bool) -> Self {
        Out { json }
    }

    /// A readable line, shown at once (even when the stream is a pipe).
    pub fn line(&self, text: impl Display) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
            let _ = std::io::stdout().flush();
        }
    }

    /// The command's JSON summary: printed with `--json`, dropped otherwise.
    pub fn summary(&self, value: impl FnOnce() -> Value) {
        if self.json {
            println!("{}", value());
        }
    }
}
