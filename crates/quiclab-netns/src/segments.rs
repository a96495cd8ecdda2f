//! Super-packets from a TUN device with offloads, kept whole while their segments travel
//! together.
//!
//! The sender's kernel hands over a super-packet (up to 64 KiB of TCP or UDP with one set of
//! headers and an offload header saying how to cut it). The link decides per wire packet, so
//! each of the segments the kernel would have sent enters the pipeline on its own, with its own
//! index and its own wire size ([`Frame::Segment`]); but the bytes are cut only when needed:
//! when the segments part ways (one is dropped, queued behind a rate, held by jitter) or a capture
//! wants them. Segments that leave together, all of them and in order, are the super-packet as
//! read, and are written as read: no copy, no checksum, which is what a bare copy between the
//! devices costs.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use quiclab_link::Payload;
use tun_rs::{
    VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4,
    VIRTIO_NET_HDR_LEN, VirtioNetHdr,
};

/// `gso_type` of a packet that is not a super-packet.
pub(crate) const GSO_NONE: u8 = 0;
/// `gso_type` flag: TCP with ECN.
const GSO_ECN: u8 = 0x80;
/// `flags`: the transport checksum is left to the receiver of the header (partial).
const NEEDS_CSUM: u8 = 1;
const UDP_HEADER: u16 = 8;
/// Bytes in front of the TCP data offset field in a TCP header.
const TCP_DATA_OFFSET_AT: usize = 12;
/// Buffers kept for reuse, each kind.
const POOL: usize = 256;

/// What the forwarder's pipelines carry.
#[derive(Clone)]
pub(crate) enum Frame {
    /// A wire packet's bytes, checksummed.
    Bytes(Vec<u8>),
    /// Segment `.1` of a super-packet.
    Segment(Arc<SuperPacket>, u16),
}

impl Payload for Frame {
    fn wire_len(&self) -> usize {
        match self {
            Frame::Bytes(b) => b.len(),
            Frame::Segment(sp, seq) => sp.segment_len(*seq),
        }
    }
}

/// A super-packet as read (offload header first) and the shape of its segments.
pub(crate) struct SuperPacket {
    /// Its offload header, with `hdr_len` taken from the packet's own headers.
    hdr: VirtioNetHdr,
    is_v6: bool,
    /// Bytes of the IP packet (after the offload header).
    len: usize,
    count: u16,
    /// The bytes, and the segments once cut (taken one by one as they leave).
    bytes: Mutex<Bytes>,
}

struct Bytes {
    raw: Vec<u8>,
    segments: Vec<Vec<u8>>,
}

/// Reusable buffers of one direction.
#[derive(Default)]
pub(crate) struct Pools {
    /// Read buffers (offload header + the largest packet).
    reads: Vec<Vec<u8>>,
    /// Segment buffers.
    segments: Vec<Vec<u8>>,
}

impl Pools {
    /// A read buffer of `len` bytes (its contents are whatever was there).
    pub(crate) fn read_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.reads.pop().unwrap_or_default();
        b.resize(len, 0);
        b
    }

    /// An empty buffer for a packet's bytes.
    pub(crate) fn segment_buffer(&mut self) -> Vec<u8> {
        let mut b = self.segments.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// Takes a departed packet's buffer back.
    pub(crate) fn give_segment(&mut self, b: Vec<u8>) {
        if self.segments.len() < POOL && b.capacity() > 0 {
            self.segments.push(b);
        }
    }

    /// Takes back what a super-packet held once nothing refers to it any more.
    pub(crate) fn reclaim(&mut self, sp: Arc<SuperPacket>) {
        if let Ok(sp) = Arc::try_unwrap(sp) {
            let bytes = sp.bytes.into_inner().unwrap_or_else(|p| p.into_inner());
            if self.reads.len() < POOL {
                self.reads.push(bytes.raw);
            }
            for s in bytes.segments {
                self.give_segment(s);
            }
        }
    }
}

/// What one read from a device with offloads holds.
pub(crate) enum Read {
    /// One wire packet, checksummed.
    Packet(Vec<u8>),
    /// A super-packet of several segments.
    Super(SuperPacket),
}

/// Takes a read's `buf[..n]` (offload header first). A super-packet keeps `buf` when it fills
/// at least half of it (a fresh buffer from `pools` takes its place), else a copy of its bytes.
pub(crate) fn take(buf: &mut Vec<u8>, n: usize, pools: &mut Pools) -> io::Result<Read> {
    if n <= VIRTIO_NET_HDR_LEN {
        return Err(invalid(format!("a read of {n} bytes holds no packet")));
    }
    let mut hdr = VirtioNetHdr::decode(&buf[..VIRTIO_NET_HDR_LEN])?;
    let packet = &buf[VIRTIO_NET_HDR_LEN..n];
    if hdr.gso_type == GSO_NONE {
        let mut out = pools.segment_buffer();
        out.extend_from_slice(packet);
        if hdr.flags & NEEDS_CSUM != 0 {
            complete_checksum(&mut out, hdr.csum_start.into(), hdr.csum_offset.into())?;
        }
        return Ok(Read::Packet(out));
    }
    let is_v6 = match packet[0] >> 4 {
        4 => false,
        6 => true,
        v => return Err(invalid(format!("IP version {v} in a super-packet"))),
    };
    let tcp = match hdr.gso_type & !GSO_ECN {
        VIRTIO_NET_HDR_GSO_TCPV4 if !is_v6 => true,
        VIRTIO_NET_HDR_GSO_TCPV6 if is_v6 => true,
        VIRTIO_NET_HDR_GSO_UDP_L4 if hdr.gso_type & GSO_ECN == 0 => false,
        t => {
            return Err(invalid(format!(
                "offload type {t} for IPv{}",
                packet[0] >> 4
            )));
        }
    };
    // The header's own hdr_len is not to be trusted (it can cover a whole first segment): the
    // transport header's length comes from the packet.
    let start = usize::from(hdr.csum_start);
    let transport = if tcp {
        let at = start + TCP_DATA_OFFSET_AT;
        let Some(&b) = packet.get(at) else {
            return Err(invalid("a TCP super-packet shorter than its header".into()));
        };
        u16::from(b >> 4) * 4
    } else {
        UDP_HEADER
    };
    hdr.hdr_len = hdr
        .csum_start
        .checked_add(transport)
        .filter(|&h| usize::from(h) <= packet.len())
        .ok_or_else(|| invalid("a super-packet shorter than its headers".into()))?;
    if hdr.gso_size == 0 {
        return Err(invalid("a super-packet with a segment size of 0".into()));
    }
    let payload = packet.len() - usize::from(hdr.hdr_len);
    if payload == 0 {
        return Err(invalid("a super-packet without payload".into()));
    }
    let count = payload.div_ceil(usize::from(hdr.gso_size));
    let count = u16::try_from(count).map_err(|_| invalid(format!("{count} segments")))?;
    let sp = SuperPacket {
        hdr,
        is_v6,
        len: packet.len(),
        count,
        bytes: Mutex::new(Bytes {
            raw: Vec::new(),
            segments: Vec::new(),
        }),
    };
    if count <= 1 {
        // one segment: the packet itself, with its checksum completed by the split
        let mut segments = sp.cut(&mut buf[..n], pools)?;
        return Ok(Read::Packet(segments.pop().unwrap_or_default()));
    }
    let raw = if 2 * n >= buf.len() {
        let fresh = pools.read_buffer(buf.len());
        std::mem::replace(buf, fresh)
    } else {
        buf[..n].to_vec()
    };
    sp.lock().raw = raw;
    Ok(Read::Super(sp))
}

impl SuperPacket {
    /// Segments it stands for.
    pub(crate) fn count(&self) -> u16 {
        self.count
    }

    /// Wire size of segment `seq`: the headers and its share of the payload.
    pub(crate) fn segment_len(&self, seq: u16) -> usize {
        let hdr_len = usize::from(self.hdr.hdr_len);
        let gso = usize::from(self.hdr.gso_size);
        let before = usize::from(seq) * gso;
        hdr_len + gso.min((self.len - hdr_len).saturating_sub(before))
    }

    fn lock(&self) -> MutexGuard<'_, Bytes> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `f` with the super-packet as read (offload header first).
    pub(crate) fn with_raw<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        f(&self.lock().raw[..VIRTIO_NET_HDR_LEN + self.len])
    }

    /// Segment `seq`'s bytes, checksummed (cutting the super-packet the first time; a second
    /// take of one segment, a duplicate's, cuts it again).
    pub(crate) fn take_segment(&self, seq: u16, pools: &mut Pools) -> io::Result<Vec<u8>> {
        let mut b = self.lock();
        let Bytes { raw, segments } = &mut *b;
        let taken = segments.get(usize::from(seq)).is_none_or(Vec::is_empty);
        if taken {
            let fresh = self.cut(raw, pools)?;
            for old in std::mem::replace(segments, fresh) {
                pools.give_segment(old);
            }
        }
        segments
            .get_mut(usize::from(seq))
            .map(std::mem::take)
            .ok_or_else(|| invalid(format!("no segment {seq} in {}", self.count)))
    }

    /// A copy of every segment's bytes (for a capture), leaving them cut for departure.
    pub(crate) fn segment_copies(&self, pools: &mut Pools) -> io::Result<Vec<Vec<u8>>> {
        let mut b = self.lock();
        let Bytes { raw, segments } = &mut *b;
        if segments.len() != usize::from(self.count) || segments.iter().any(Vec::is_empty) {
            *segments = self.cut(raw, pools)?;
        }
        Ok(segments.clone())
    }

    /// Cuts `raw` into its wire-size segments, each checksummed.
    fn cut(&self, raw: &mut [u8], pools: &mut Pools) -> io::Result<Vec<Vec<u8>>> {
        let count = usize::from(self.count.max(1));
        let mut out: Vec<Vec<u8>> = (0..count)
            .map(|_| {
                let mut b = pools.segment_buffer();
                b.resize(self.segment_len(0), 0);
                b
            })
            .collect();
        let mut sizes = vec![0; count];
        let packet = &mut raw[VIRTIO_NET_HDR_LEN..VIRTIO_NET_HDR_LEN + self.len];
        let n = tun_rs::gso_split(packet, self.hdr, &mut out, &mut sizes, 0, self.is_v6)?;
        out.truncate(n);
        for (b, &len) in out.iter_mut().zip(&sizes) {
            b.truncate(len);
        }
        Ok(out)
    }
}

/// Completes a partial transport checksum (the offload header's `NEEDS_CSUM`): the field holds
/// the pseudo-header's sum, to be folded with the sum of everything from `start` on.
fn complete_checksum(packet: &mut [u8], start: usize, offset: usize) -> io::Result<()> {
    let at = start + offset;
    if at + 2 > packet.len() {
        return Err(invalid("a checksum field beyond the packet".into()));
    }
    let initial = u16::from_be_bytes([packet[at], packet[at + 1]]);
    packet[at..at + 2].fill(0);
    let sum = !tun_rs::checksum(&packet[start..], u64::from(initial));
    packet[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    Ok(())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 4] = [10, 0, 0, 1];
    const DST: [u8; 4] = [10, 0, 0, 2];

    /// The one's-complement sum a checksum starts from: the IPv4 pseudo-header.
    fn pseudo(proto: u8, len: usize) -> u16 {
        let mut sum: u32 = 0;
        for w in [SRC, DST] {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            sum += u32::from(u16::from_be_bytes([w[2], w[3]]));
        }
        sum += u32::from(proto) + len as u32;
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    /// A TCP/IPv4 super-packet of `payload` bytes cut at `mss`, as a sender's kernel hands it
    /// over: offload header, IP and TCP headers, the payload, the checksum left partial.
    fn tcp_super_packet(payload: usize, mss: u16) -> Vec<u8> {
        let hdr = VirtioNetHdr {
            flags: NEEDS_CSUM,
            gso_type: VIRTIO_NET_HDR_GSO_TCPV4,
            hdr_len: 40,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        };
        let mut b = vec![0; VIRTIO_NET_HDR_LEN];
        hdr.encode(&mut b).unwrap();
        let total = (40 + payload) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&SRC);
        ip.extend_from_slice(&DST);
        b.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&443u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&50000u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&1000u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x18; // PSH, ACK
        tcp[16..18].copy_from_slice(&pseudo(6, 20 + payload).to_be_bytes());
        b.extend_from_slice(&tcp);
        b.extend((0..payload).map(|i| (i % 251) as u8));
        b
    }

    /// True when the TCP checksum of an IPv4 packet verifies.
    fn tcp_checksum_valid(p: &[u8]) -> bool {
        let seg = &p[20..];
        tun_rs::checksum(seg, u64::from(pseudo(6, seg.len()))) == 0xffff
    }

    #[test]
    fn a_super_packet_stands_for_the_segments_its_kernel_would_send() {
        // 10,000 bytes at an MSS of 1448: six full segments and one of 1312
        let mut buf = tcp_super_packet(10_000, 1448);
        let n = buf.len();
        buf.resize(VIRTIO_NET_HDR_LEN + 65_536, 0);
        let mut pools = Pools::default();
        // a short super-packet is copied out, the read buffer stays
        let Read::Super(sp) = take(&mut buf, n, &mut pools).unwrap() else {
            panic!("a super-packet")
        };
        assert_eq!(buf.len(), VIRTIO_NET_HDR_LEN + 65_536);
        assert_eq!(sp.count(), 7);
        let sizes: Vec<usize> = (0..7).map(|s| sp.segment_len(s)).collect();
        assert_eq!(sizes, [1488, 1488, 1488, 1488, 1488, 1488, 1352]);
        // written whole: the bytes as read
        sp.with_raw(|raw| assert_eq!(raw, &tcp_super_packet(10_000, 1448)[..]));
        // cut: each segment as long as its wire size said, sequence numbers MSS apart, the
        // payload in order, every checksum valid
        let sp = Arc::new(sp);
        let mut payload = Vec::new();
        for s in 0..7u16 {
            let seg = sp.take_segment(s, &mut pools).unwrap();
            assert_eq!(seg.len(), sizes[usize::from(s)], "segment {s}");
            let seq = u32::from_be_bytes(seg[24..28].try_into().unwrap());
            assert_eq!(seq, 1000 + 1448 * u32::from(s));
            assert!(tcp_checksum_valid(&seg), "segment {s}'s checksum");
            payload.extend_from_slice(&seg[40..]);
        }
        assert_eq!(
            payload,
            (0..10_000).map(|i| (i % 251) as u8).collect::<Vec<_>>()
        );
        // a duplicate's second take of a segment gets the same bytes again
        let again = sp.take_segment(3, &mut pools).unwrap();
        assert_eq!(again.len(), 1488);
        assert!(tcp_checksum_valid(&again));
    }

    #[test]
    fn a_large_super_packet_keeps_its_read_buffer() {
        let mut buf = tcp_super_packet(60_000, 8948);
        let n = buf.len();
        buf.resize(VIRTIO_NET_HDR_LEN + 65_536, 0);
        let before = buf.as_ptr();
        let mut pools = Pools::default();
        let Read::Super(sp) = take(&mut buf, n, &mut pools).unwrap() else {
            panic!("a super-packet")
        };
        assert_eq!(sp.count(), 7);
        assert_eq!(sp.segment_len(6), 40 + 60_000 - 6 * 8948);
        sp.with_raw(|raw| assert_eq!(raw.as_ptr(), before));
        assert_ne!(buf.as_ptr(), before);
        assert_eq!(buf.len(), VIRTIO_NET_HDR_LEN + 65_536);
        // once nothing refers to it, its buffer goes back to the pool
        pools.reclaim(Arc::new(sp));
        let reused = pools.read_buffer(10);
        assert_eq!(reused.as_ptr(), before);
    }

    #[test]
    fn a_lone_packet_with_a_partial_checksum_is_completed() {
        // one segment's worth: not a super-packet, the checksum left to us
        let mut buf = tcp_super_packet(500, 1448);
        buf[1] = GSO_NONE;
        let n = buf.len();
        let mut pools = Pools::default();
        let Read::Packet(p) = take(&mut buf, n, &mut pools).unwrap() else {
            panic!("a packet")
        };
        assert_eq!(p.len(), 540);
        assert!(tcp_checksum_valid(&p));
        // a super-packet of one segment is that packet too
        let mut buf = tcp_super_packet(500, 1448);
        let n = buf.len();
        let Read::Packet(p) = take(&mut buf, n, &mut pools).unwrap() else {
            panic!("a packet")
        };
        assert_eq!(p.len(), 540);
        assert!(tcp_checksum_valid(&p));
    }

    #[test]
    fn malformed_offload_headers_are_refused() {
        let mut pools = Pools::default();
        let mut buf = tcp_super_packet(5000, 0);
        let n = buf.len();
        assert!(take(&mut buf, n, &mut pools).is_err(), "segment size 0");
        let mut buf = tcp_super_packet(5000, 1448);
        buf[1] = VIRTIO_NET_HDR_GSO_TCPV6;
        let n = buf.len();
        assert!(
            take(&mut buf, n, &mut pools).is_err(),
            "TCPv6 offload on IPv4"
        );
        let mut buf = tcp_super_packet(0, 1448);
        let n = buf.len();
        assert!(
            take(&mut buf, n, &mut pools).is_err(),
            "headers without payload"
        );
        let mut buf = tcp_super_packet(5000, 1448);
        assert!(
            take(&mut buf, 30, &mut pools).is_err(),
            "shorter than its headers"
        );
        assert!(
            take(&mut buf, 8, &mut pools).is_err(),
            "shorter than the offload header"
        );
    }
}
