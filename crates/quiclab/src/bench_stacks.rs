//! `quiclab bench stacks`: bulk throughput and CPU cost per byte of HTTP/2 over TLS/TCP and
//! HTTP/3 over QUIC on a direct veth pair, the NTT study's comparison on one machine.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use quiclab_model::record::now_us;
use quiclab_netns::Topology;
use quiclab_netns::topology::SERVER_V4;
use quiclab_netns::{Mode, Netns, Process, Side};
use quiclab_runner::bulk;
use quiclab_stack::quic::GSO_MAX_PAYLOAD;

use crate::signals::Signals;

/// Bulk download throughput and CPU per GB: HTTP/2 over TLS/TCP against HTTP/3 over QUIC.
///
/// On a direct veth pair (no emulator, offloads on) at MTU 1500 and 9000, `quiclab serve` sends
/// a 10 GB object to 1 and N `quiclab get` clients (one connection each) for --duration: H2
/// over TLS/TCP (cubic), and H3 (quinn, cubic) with the UDP payload fixed at 1252 bytes and at
/// the MTU's maximum (1472 or 8972; with GSO on at most 6550, since 10 datagrams per send must
/// fit in 65,507 bytes), GSO on and off. Throughput is the bytes the server's connections had
/// acknowledged (from its timelines; QUIC counts packet bytes) after a warm-up, per second;
/// CPU is user + system time of the server and of the clients over the same interval, per GB
/// acknowledged. The QUIC/TCP ratio compares each QUIC row with TCP at the same MTU and number
/// of connections, measured in the same run.
#[derive(Args)]
pub struct StacksBench {
    /// Length of each measurement (after a warm-up of a fifth of it, at most 1 s).
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = crate::recordargs::duration)]
    duration: Duration,
    /// N, the number of parallel connections of the multi-connection rows.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=64))]
    connections: u32,
}

/// One configuration measured.
struct Case {
    quic: Option<Quic>,
    conns: u32,
}

#[derive(Clone, Copy)]
struct Quic {
    payload: u16,
    gso: bool,
}

struct Measured {
    gbps: f64,
    server_cpu_per_gb: f64,
    client_cpu_per_gb: f64,
}

pub fn stacks(b: StacksBench) -> anyhow::Result<i32> {
    let signals = Signals::install()?;
    let bin = std::env::current_exe().context("finding the quiclab binary")?;
    let dir = std::env::temp_dir().join(format!("quiclab-bench-stacks-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "Bulk download on a direct veth pair, {:.1} s per row (H2: TLS 1.3 over TCP, cubic; H3: quinn, cubic)",
        b.duration.as_secs_f64()
    );
    println!(
        "{:<6} {:<34} {:>6} {:>9} {:>15} {:>15} {:>10}",
        "MTU", "stack", "conns", "Gbit/s", "server CPU s/GB", "client CPU s/GB", "QUIC/TCP"
    );
    let result = (|| {
        for mtu in [1500u32, 9000] {
            let veth = Topology::direct(mtu, true)?;
            let max = (mtu - 28) as u16;
            for conns in [1, b.connections] {
                let mut cases = vec![Case { quic: None, conns }];
                for payload in [1252, max] {
                    for gso in [true, false] {
                        let payload = if gso {
                            payload.min(GSO_MAX_PAYLOAD)
                        } else {
                            payload
                        };
                        cases.push(Case {
                            quic: Some(Quic { payload, gso }),
                            conns,
                        });
                    }
                }
                let mut tcp = None;
                for case in cases {
                    if signals.any() {
                        bail!("interrupted");
                    }
                    let m = measure(&veth, &bin, &dir, &case, b.duration)?;
                    let (label, ratio) = match case.quic {
                        None => {
                            tcp = Some(m.gbps);
                            ("H2, TLS/TCP".to_string(), "-".to_string())
                        }
                        Some(q) => (
                            format!(
                                "H3, payload {}, GSO {}",
                                q.payload,
                                if q.gso { "on" } else { "off" }
                            ),
                            tcp.map_or("-".into(), |t| format!("{:.2}", m.gbps / t)),
                        ),
                    };
                    println!(
                        "{mtu:<6} {label:<34} {conns:>6} {:>9.2} {:>15.2} {:>15.2} {ratio:>10}",
                        m.gbps, m.server_cpu_per_gb, m.client_cpu_per_gb
                    );
                }
            }
        }
        Ok(0)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(
    veth: &Topology,
    bin: &Path,
    dir: &Path,
    case: &Case,
    d: Duration,
) -> anyhow::Result<Measured> {
    let cert = dir.join("cert.pem");
    let timeline = dir.join("timeline.jsonl");
    let _ = std::fs::remove_file(&cert);
    let quic_args = match case.quic {
        Some(q) => format!(
            "--quic-cc cubic --quic-mtu-discovery off --quic-initial-mtu {p} --quic-max-udp-payload {p} --quic-gso {}",
            if q.gso { "on" } else { "off" },
            p = q.payload
        ),
        None => String::new(),
    };
    let (kind, http) = match case.quic {
        Some(_) => ("quic", "3"),
        None => ("tcp", "2 --tcp-cc cubic"),
    };
    let server_cmd = format!(
        "exec {} serve --listen 0.0.0.0:443 --write-cert {} --tcp-cc cubic --{kind}-timeline {} {quic_args} >/dev/null 2>&1",
        bin.display(),
        cert.display(),
        timeline.display()
    );
    let mut server = Process::spawn(
        veth.ns(Side::Server),
        "quiclab serve",
        &server_cmd,
        &[],
        Mode::Background,
    )?;
    wait_for(&cert)?;
    std::thread::sleep(Duration::from_millis(300));
    let client_cmd = format!(
        "exec {} get --http {http} {quic_args} --cacert {} https://{SERVER_V4}/bytes/10000000000 >/dev/null 2>&1",
        bin.display(),
        cert.display()
    );
    let mut clients = (0..case.conns)
        .map(|i| {
            Process::spawn(
                veth.ns(Side::Client),
                &format!("quiclab get {i}"),
                &client_cmd,
                &[],
                Mode::Background,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let warmup = bulk::warmup(d);
    std::thread::sleep(warmup);
    let (t0, cpu0) = (now_us(), bulk::cpu_s(&server, &clients));
    std::thread::sleep(d);
    let (t1, cpu1) = (now_us(), bulk::cpu_s(&server, &clients));
    for c in &mut clients {
        c.stop(Duration::from_millis(200));
    }
    server.stop(Duration::from_secs(2));
    let text = std::fs::read_to_string(&timeline)
        .with_context(|| format!("reading {}", timeline.display()))?;
    let samples = bulk::samples(&text).map_err(anyhow::Error::msg)?;
    let bytes = bulk::acked_between(&samples, t0, t1);
    let gb = bytes as f64 / 1e9;
    if gb <= 0.0 {
        bail!(
            "nothing was acknowledged: is the server running in {}?",
            ns_name(veth)
        );
    }
    Ok(Measured {
        gbps: bytes as f64 * 8.0 / ((t1 - t0) as f64 / 1e6) / 1e9,
        server_cpu_per_gb: (cpu1.0 - cpu0.0) / gb,
        client_cpu_per_gb: (cpu1.1 - cpu0.1) / gb,
    })
}

fn ns_name(veth: &Topology) -> &str {
    let ns: &Netns = veth.ns(Side::Server);
    ns.name()
}

fn wait_for(file: &Path) -> anyhow::Result<()> {
    for _ in 0..100 {
        if file.exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("quiclab serve did not start (no {})", file.display())
}
