//! quiclab-msquic: msquic's server and client (Microsoft's QUIC implementation, C over quictls),
//! driven the way quiclab drives an external stack (docs/stacks.md and
//! crates/quiclab-external/stacks/msquic.toml).
//!
//! msquic has no HTTP/3. Both sides speak what the QUIC interop runner calls `hq-interop`
//! (ALPN "hq-interop"): the client opens one bidirectional stream, writes `GET /PATH\r\n` and
//! ends it; the server answers with the file's bytes and ends the stream, or aborts the stream
//! when there is no such file. There is no status and no header.
//!
//! The server serves a documents directory until SIGINT or SIGTERM. The client fetches one URL
//! and prints one line per event as it happens, for quiclab to stamp: "start", "handshake
//! complete alpn=hq-interop", "first byte", "last byte", and "error: ..." on failure. msquic
//! writes no qlog (its traces go to LTTng), so neither side writes one.

mod client;
mod server;

use std::ffi::c_void;

use clap::{Parser, Subcommand};
use msquic::{BufferRef, Registration, RegistrationConfig, SendFlags, Settings, Stream};

/// The ALPN both sides offer.
const ALPN: &str = "hq-interop";

#[derive(Parser)]
#[command(about = "msquic's hq-interop endpoints for quiclab (see docs/stacks.md)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Server(server::Args),
    Client(client::Args),
}

fn main() {
    let result = match Cli::parse().command {
        Command::Server(a) => server::run(a),
        Command::Client(a) => client::run(a),
    };
    if let Err(e) = result {
        println!("error: {e}");
        std::process::exit(1);
    }
}

/// msquic's `QUIC_CONGESTION_CONTROL_ALGORITHM` for a controller's name.
fn cc_algorithm(cc: &str) -> Result<u16, String> {
    match cc {
        "cubic" => Ok(0),
        "bbr" => Ok(1),
        _ => Err(format!(
            "--cc {cc:?}: allowed: cubic (msquic's default), bbr"
        )),
    }
}

/// The transport settings both sides share: msquic's defaults but the controller, and an idle
/// timeout that outlasts a lab's slowest transfer.
fn settings(cc: &str) -> Result<Settings, String> {
    Ok(Settings::new()
        .set_CongestionControlAlgorithm(cc_algorithm(cc)?)
        .set_IdleTimeoutMs(30_000)
        .set_PeerBidiStreamCount(1000))
}

/// Bytes being sent and the buffer list msquic reads them through, kept alive from
/// [`send_and_end`] until the stream's SendComplete event hands them to [`release_sent`].
type Sending = (Vec<u8>, Box<[BufferRef; 1]>);

/// Sends `bytes` on `stream` and ends its sending side. msquic holds the bytes until the
/// stream's SendComplete event, whose handler must pass its context to [`release_sent`].
fn send_and_end(stream: &Stream, bytes: Vec<u8>) -> Result<(), msquic::Status> {
    let buffers = Box::new([BufferRef::from(bytes.as_slice())]);
    let ctx = Box::new((bytes, buffers));
    unsafe {
        stream.send(
            ctx.1.as_slice(),
            SendFlags::FIN,
            ctx.as_ref() as *const Sending as *const c_void,
        )
    }?;
    let _ = Box::into_raw(ctx);
    Ok(())
}

/// Frees what [`send_and_end`] sent, given the context of the stream's SendComplete event.
///
/// # Safety
/// `client_context` is the context of a SendComplete event of a send by [`send_and_end`],
/// released once.
unsafe fn release_sent(client_context: *const c_void) {
    drop(unsafe { Box::from_raw(client_context as *mut Sending) });
}

/// One registration per process (msquic's handle for an application).
fn registration() -> Result<Registration, String> {
    Registration::new(&RegistrationConfig::new().set_app_name("quiclab-msquic".into()))
        .map_err(|e| format!("msquic registration: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn controllers_are_named_as_msquic_numbers_them_and_others_refused() {
        assert_eq!(super::cc_algorithm("cubic"), Ok(0));
        assert_eq!(super::cc_algorithm("bbr"), Ok(1));
        let e = super::cc_algorithm("reno").unwrap_err();
        assert!(e.contains("allowed: cubic") && e.contains("bbr"), "{e}");
    }

    #[test]
    fn requests_are_parsed_as_the_interop_runner_writes_them() {
        use crate::server::request_path;
        assert_eq!(request_path(b"GET /a/b.bin\r\n"), Some("/a/b.bin"));
        assert_eq!(request_path(b"GET /x\n"), Some("/x"));
        assert_eq!(request_path(b"GET /x"), None);
        assert_eq!(request_path(b"POST /x\r\n"), None);
    }
}
