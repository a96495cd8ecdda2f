//! A path without the emulator: the client and server namespaces joined directly by a veth
//! pair, with the same device name and addresses as the emulated path. Bulk workloads measure
//! the stacks on it (`direct` conditions) and benchmarks measure the emulator against it.

use std::os::fd::AsRawFd;

use crate::error::{Context, Result};
use crate::ns::Netns;
use crate::topology::{CLIENT_V4, CLIENT_V6, SERVER_V4, SERVER_V6, TUN_NAME, address};

/// Joins `client` and `server` by a veth pair of the given MTU, named like the emulated path's
/// devices and given the same addresses. With `offloads` false, TSO/GSO/GRO are turned off on
/// both ends (needs ethtool), so that the kernel handles one MTU-sized packet at a time as the
/// emulator does. The pair goes with the namespaces.
pub(crate) fn join(client: &Netns, server: &Netns, mtu: u32, offloads: bool) -> Result<()> {
    let peer_ns = std::fs::File::open(server.path())
        .context(|| format!("cannot open namespace {}", server.name()))?;
    client
        .rtnl()
        .add_veth(TUN_NAME, TUN_NAME, mtu, peer_ns.as_raw_fd())
        .context(|| format!("cannot make a veth pair from {}", client.name()))?;
    for (ns, v4, v6) in [
        (client, CLIENT_V4, CLIENT_V6),
        (server, SERVER_V4, SERVER_V6),
    ] {
        address(ns, TUN_NAME, v4, v6)?;
        if !offloads {
            crate::ns::run(
                "ip",
                &[
                    "netns",
                    "exec",
                    ns.name(),
                    "ethtool",
                    "-K",
                    TUN_NAME,
                    "tso",
                    "off",
                    "gso",
                    "off",
                    "gro",
                    "off",
                ],
            )?;
        }
    }
    Ok(())
}
