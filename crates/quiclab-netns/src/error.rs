use std::io;

/// Errors of the Linux runtime. Messages say what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error(transparent)]
    Config(#[from] quiclab_link::ConfigError),
    #[error("network namespaces and TUN devices need root; run quiclab as root (e.g. with sudo)")]
    NotRoot,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds context to an `io::Error`.
pub(crate) trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            what: what(),
            source,
        })
    }
}
