//! The few route-netlink requests a topology needs (bring a device up, give it an address, make
//! a veth pair, read a device's drop counter), sent over a netlink socket of one namespace: no
//! `ip` process per step. A socket belongs to the namespace its creator was in, so a
//! [`Rtnl`] made on a thread inside a namespace keeps talking to that namespace from any
//! thread.

use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::{AddressFamily, link::InfoData};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// A route-netlink socket of the namespace it was created in.
pub(crate) struct Rtnl {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// A socket of the calling thread's namespace.
    pub(crate) fn new() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Rtnl {
            socket,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Sends `msg` and collects the kernel's answers until its acknowledgement; a refusal is
    /// the kernel's errno.
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = self.seq;
        let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        req.finalize();
        let mut out = vec![0; req.header.length as usize];
        req.serialize(&mut out);
        self.socket.send(&out, 0)?;
        let mut answers = Vec::new();
        loop {
            let n = self.socket.recv(&mut &mut self.buf[..], 0)?;
            let mut at = 0;
            while at < n {
                let reply: NetlinkMessage<RouteNetlinkMessage> =
                    NetlinkMessage::deserialize(&self.buf[at..n])
                        .map_err(|e| io::Error::other(format!("netlink answer: {e}")))?;
                let len = reply.header.length as usize;
                if reply.header.sequence_number == self.seq {
                    match reply.payload {
                        NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                        // the acknowledgement (an error message of code 0) ends the answer
                        NetlinkPayload::Error(_) | NetlinkPayload::Done(_) => return Ok(answers),
                        NetlinkPayload::InnerMessage(m) => answers.push(m),
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                at += len;
            }
        }
    }

    /// The index of device `name`.
    pub(crate) fn index(&mut self, name: &str) -> io::Result<u32> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.into()));
        self.request(RouteNetlinkMessage::GetLink(m), 0)?
            .into_iter()
            .find_map(|a| match a {
                RouteNetlinkMessage::NewLink(l) => Some(l.header.index),
                _ => None,
            })
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no device {name}")))
    }

    /// Brings device `index` up.
    pub(crate) fn up(&mut self, index: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        self.request(RouteNetlinkMessage::SetLink(m), 0).map(drop)
    }

    /// Sets the transmit queue length of device `index`. Through netlink, which asks for
    /// CAP_NET_ADMIN in the device's namespace's owner, where the SIOCSIFTXQLEN ioctl asks for
    /// it in the host's: a user namespace's root may set it here.
    pub(crate) fn set_tx_queue_len(&mut self, index: u32, len: u32) -> io::Result<()> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes.push(LinkAttribute::TxQueueLen(len));
        self.request(RouteNetlinkMessage::SetLink(m), 0).map(drop)
    }

    /// Gives device `index` the address `addr/prefix`, without duplicate address detection
    /// (which would delay an IPv6 address's use).
    pub(crate) fn add_address(&mut self, index: u32, addr: IpAddr, prefix: u8) -> io::Result<()> {
        let mut m = AddressMessage::default();
        m.header.family = match addr {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        m.header.prefix_len = prefix;
        m.header.index = index;
        m.attributes.push(AddressAttribute::Local(addr));
        m.attributes.push(AddressAttribute::Address(addr));
        m.attributes
            .push(AddressAttribute::Flags(AddressFlags::Nodad));
        self.request(
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map(drop)
    }

    /// Makes a veth pair of `mtu`: `name` here, its peer `peer` in the namespace open at
    /// `peer_ns`.
    pub(crate) fn add_veth(
        &mut self,
        name: &str,
        peer: &str,
        mtu: u32,
        peer_ns: RawFd,
    ) -> io::Result<()> {
        let mut other = LinkMessage::default();
        other.attributes.push(LinkAttribute::IfName(peer.into()));
        other.attributes.push(LinkAttribute::Mtu(mtu));
        other.attributes.push(LinkAttribute::NetNsFd(peer_ns));
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.into()));
        m.attributes.push(LinkAttribute::Mtu(mtu));
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(other))),
        ]));
        self.request(RouteNetlinkMessage::NewLink(m), NLM_F_CREATE | NLM_F_EXCL)
            .map(drop)
    }

    /// Packets device `name` dropped on transmit (its queue was full).
    pub(crate) fn tx_dropped(&mut self, name: &str) -> io::Result<u64> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.into()));
        let answers = self.request(RouteNetlinkMessage::GetLink(m), 0)?;
        answers
            .iter()
            .filter_map(|a| match a {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .flat_map(|l| &l.attributes)
            .find_map(|a| match a {
                LinkAttribute::Stats64(s) => Some(s.tx_dropped),
                _ => None,
            })
            .ok_or_else(|| io::Error::other(format!("no statistics for device {name}")))
    }
}
