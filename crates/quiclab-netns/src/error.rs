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
    #[error(
        "network namespaces and TUN devices need root, or a user namespace of their own; run \
         quiclab as root (e.g. with sudo), or as a user where unprivileged user namespaces are \
         enabled"
    )]
    NotRoot,
    #[error(
        "cannot open /dev/net/tun ({source}; its mode is {mode}): the link emulator's TUN \
         devices need it readable and writable by this user (most distributions ship it 0666; \
         `chmod 0666 /dev/net/tun` as root), or run quiclab as root"
    )]
    NoTun { mode: String, source: io::Error },
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
