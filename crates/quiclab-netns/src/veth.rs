//! A reference path without the emulator: the same two namespaces and addresses joined directly
//! by a veth pair. Benchmarks measure the emulator against it on the same machine.

use crate::error::Result;
use crate::ns::{Netns, PREFIX};
use crate::topology::{CLIENT_V4, CLIENT_V6, RunLock, SERVER_V4, SERVER_V6, Side, address, new_id};

/// Client and server namespaces joined by a veth pair; removed on drop.
pub struct Veth {
    client: Netns,
    server: Netns,
    _lock: RunLock,
}

impl Veth {
    /// Builds the pair with the given MTU. With `offloads` false, TSO/GSO/GRO are turned off
    /// on both ends (needs ethtool), so that the kernel handles one MTU-sized packet at a time
    /// as the emulator does.
    pub fn start(mtu: u32, offloads: bool) -> Result<Self> {
        let id = new_id();
        let lock = RunLock::take(&id)?;
        let client = Netns::create(&format!("{PREFIX}{id}-client"))?;
        let server = Netns::create(&format!("{PREFIX}{id}-server"))?;
        let mtu = mtu.to_string();
        client.ip(&[
            "link", "add", "quiclab0", "mtu", &mtu, "type", "veth", "peer", "name", "quiclab1",
            "mtu", &mtu,
        ])?;
        client.ip(&["link", "set", "quiclab1", "netns", server.name()])?;
        server.ip(&["link", "set", "quiclab1", "name", "quiclab0"])?;
        for (ns, v4, v6) in [
            (&client, CLIENT_V4, CLIENT_V6),
            (&server, SERVER_V4, SERVER_V6),
        ] {
            address(ns, "quiclab0", v4, v6)?;
            if !offloads {
                crate::ns::run(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        ns.name(),
                        "ethtool",
                        "-K",
                        "quiclab0",
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
        Ok(Veth {
            client,
            server,
            _lock: lock,
        })
    }

    pub fn ns(&self, side: Side) -> &Netns {
        match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        }
    }
}
