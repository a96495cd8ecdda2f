//! quinn's own perf tool (`quinn-perf`, from the `perf` crate of quinn's repository) as the
//! ceiling of the QUIC implementation quiclab's HTTP/3 is built on, measured beside it by
//! `quiclab bench stacks`.
//!
//! The tool is not published on crates.io; `cargo install --git
//! https://github.com/quinn-rs/quinn perf` builds it (the binary is `quinn-perf`). It runs
//! here as quiclab's own endpoints do: server and client in the two namespaces of a direct veth
//! pair, one connection, one stream downloading for the whole run, the UDP payload fixed (no
//! MTU discovery), GSO on, and socket buffers as large as quiclab's
//! ([`quiclab_quic::socket::SOCKET_BUFFER`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use quiclab_netns::topology::SERVER_V4;
use quiclab_netns::{Mode, Process, Side, Topology};
use quiclab_runner::bulk::process_cpu_s;

use crate::signals::Signals;

/// The program's name on `PATH`.
pub const PROGRAM: &str = "quinn-perf";

/// How to get the program, for the line printed when it is missing.
pub const HOW_TO_GET: &str = "cargo install --git https://github.com/quinn-rs/quinn perf";

/// The largest payload the tool can send with GSO: quinn batches up to 10 datagrams, and a
/// batch must fit one 65,507-byte UDP send (larger payloads fail the send and fall back to
/// 1200 bytes; quiclab's own endpoints cap the batch instead, see `quiclab_quic::socket`).
pub const BATCH_SAFE_PAYLOAD: u16 = 6550;

/// The payloads the tool runs at: those of quiclab's rows, and [`BATCH_SAFE_PAYLOAD`] where
/// one of them is larger (its best at jumbo frames).
pub fn payloads(rows: [u16; 2]) -> Vec<u16> {
    let mut p = rows.to_vec();
    if rows.iter().any(|&r| r > BATCH_SAFE_PAYLOAD) {
        p.push(BATCH_SAFE_PAYLOAD);
    }
    p
}

/// What one run measured, over whole one-second intervals after the first (the warm-up).
pub struct PerfRun {
    pub gbps: f64,
    pub server_cpu_s_per_gb: f64,
    pub client_cpu_s_per_gb: f64,
}

/// Where the tool is: `given` (a path or a name), else `quinn-perf` on `PATH`.
pub fn locate(given: Option<&Path>) -> Option<PathBuf> {
    let name = given.map_or(PROGRAM.to_string(), |p| p.display().to_string());
    quiclab_external::def::locate_program(&name)
}

/// Downloads from a `quinn-perf` server to its client over a direct veth pair at `mtu`, with
/// the UDP payload fixed at `payload`, for `measured` (rounded up to whole seconds) after a
/// one-second warm-up.
pub fn run(
    program: &Path,
    mtu: u32,
    payload: u16,
    measured: Duration,
    signals: &Signals,
) -> anyhow::Result<PerfRun> {
    let seconds = measured.as_secs_f64().ceil().max(1.0) as u64;
    let topo = Topology::direct(mtu, true)?;
    let dir = crate::cmd_bench::ScratchDir::new("bench-quinn-perf")?;
    let json = dir.path().join("client.json");
    let buffers = quiclab_quic::socket::SOCKET_BUFFER;
    let common = format!(
        "--max-udp-payload-size {payload} --initial-mtu {payload} \
         --send-buffer-size {buffers} --recv-buffer-size {buffers}"
    );
    let program = program.display();
    let result = (|| {
        let mut server = Process::spawn(
            topo.ns(Side::Server),
            "quinn-perf server",
            &format!("exec {program} server --listen {SERVER_V4}:4433 {common} >/dev/null 2>&1"),
            &[],
            Mode::Background,
        )?;
        std::thread::sleep(Duration::from_millis(300));
        // the warm-up second, the measured ones, and one more so the last is whole
        let total = seconds + 2;
        let mut client = Process::spawn(
            topo.ns(Side::Client),
            "quinn-perf client",
            &format!(
                "exec {program} client --ip {SERVER_V4} localhost:4433 --duration {total} \
                 --download-size 1T --upload-size 0 {common} --json {} >/dev/null 2>&1",
                json.display()
            ),
            &[],
            Mode::Background,
        )?;
        let start = Instant::now();
        let pids = (server.pid(), client.pid());
        let cpu = || {
            (
                pids.0.map_or(0.0, process_cpu_s),
                pids.1.map_or(0.0, process_cpu_s),
            )
        };
        let mut marks = Vec::new();
        for at in [1, seconds + 1] {
            let until = start + Duration::from_secs(at);
            while Instant::now() < until {
                if signals.any() {
                    bail!("interrupted");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            marks.push(cpu());
        }
        let deadline = start + Duration::from_secs(total + 10);
        let status = crate::cmd_bench::wait_for_exit(&mut client, deadline, signals)
            .context("quinn-perf's client")?;
        server.stop(Duration::from_millis(200));
        if !status.success() {
            bail!("quinn-perf's client failed ({status})");
        }
        let text = std::fs::read_to_string(&json)
            .with_context(|| format!("quinn-perf wrote no statistics to {}", json.display()))?;
        let bytes = received_bytes(&text, 1, seconds as usize)?;
        let gb = bytes as f64 / 1e9;
        let (s0, c0) = marks[0];
        let (s1, c1) = marks[1];
        Ok(PerfRun {
            gbps: gb * 8.0 / seconds as f64,
            server_cpu_s_per_gb: (s1 - s0) / gb,
            client_cpu_s_per_gb: (c1 - c0) / gb,
        })
    })();
    drop(dir);
    drop(topo);
    result
}

/// Bytes received over `count` one-second intervals from interval `first` of a `quinn-perf
/// client --json` report (its `intervals[].sum.bytes`).
fn received_bytes(json: &str, first: usize, count: usize) -> anyhow::Result<u64> {
    let v: serde_json::Value =
        serde_json::from_str(json).context("quinn-perf's statistics are not JSON")?;
    let intervals = v["intervals"]
        .as_array()
        .context("quinn-perf's statistics have no intervals")?;
    let wanted = intervals.get(first..first + count).with_context(|| {
        format!(
            "quinn-perf reported {} intervals, fewer than the {} needed",
            intervals.len(),
            first + count
        )
    })?;
    wanted
        .iter()
        .map(|i| {
            i["sum"]["bytes"]
                .as_u64()
                .context("a quinn-perf interval has no sum.bytes")
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumbo_frames_add_the_tools_largest_batch_safe_payload() {
        assert_eq!(payloads([1252, 1472]), vec![1252, 1472]);
        assert_eq!(payloads([1252, 8972]), vec![1252, 8972, 6550]);
    }

    #[test]
    fn intervals_after_the_warm_up_are_summed() {
        let json = r#"{"start":{},"intervals":[
            {"streams":[],"sum":{"bytes":100,"seconds":1.0}},
            {"streams":[],"sum":{"bytes":1000,"seconds":1.0}},
            {"streams":[],"sum":{"bytes":2000,"seconds":1.0}},
            {"streams":[],"sum":{"bytes":5,"seconds":0.1}}]}"#;
        assert_eq!(received_bytes(json, 1, 2).unwrap(), 3000);
        let e = received_bytes(json, 1, 4).unwrap_err().to_string();
        assert!(e.contains("4 intervals, fewer than the 5"), "{e}");
        assert!(received_bytes("{}", 0, 1).is_err());
    }
}
