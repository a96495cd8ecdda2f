//! A transfer's time budget: its time to last byte split into a floor (what the path and the
//! protocol's design force) and named components (where the rest went), which add up to the
//! TTLB. `quiclab-explain` computes it from the link's per-packet log and the sender's record;
//! docs/explain.md defines each component and how it is measured.

use serde::{Deserialize, Serialize};

/// What a stack's own record of its sending side (quinn's recorder, TCP_INFO, a qlog) offers
/// the time budget beyond the link's log. A stack says which it offers (an external stack in
/// its file's `[records]`); the budget reads those only, and where a trial's record lacks one
/// the stack offers, the budget says so ([`Budget::unread`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SenderRecord {
    /// The congestion window over time: a gap is the window's or the sender's own.
    Cwnd,
    /// Smoothed RTT samples.
    Rtt,
    /// When the congestion window was cut: ramp-up ends, window after loss begins.
    CongestionEvents,
    /// A count of the signs that the peer's flow control held the sender back (QUIC
    /// `DATA_BLOCKED` / `STREAM_DATA_BLOCKED` frames sent, TCP's `tcpi_rwnd_limited`).
    FlowBlocked,
}

impl SenderRecord {
    pub const ALL: [SenderRecord; 4] = [
        SenderRecord::Cwnd,
        SenderRecord::Rtt,
        SenderRecord::CongestionEvents,
        SenderRecord::FlowBlocked,
    ];

    /// The name stack files and budgets use.
    pub fn name(self) -> &'static str {
        match self {
            SenderRecord::Cwnd => "cwnd",
            SenderRecord::Rtt => "rtt",
            SenderRecord::CongestionEvents => "congestion-events",
            SenderRecord::FlowBlocked => "flow-blocked",
        }
    }

    pub fn from_name(s: &str) -> Option<SenderRecord> {
        SenderRecord::ALL.into_iter().find(|r| r.name() == s)
    }

    /// Every name, for an error's "allowed".
    pub fn names() -> String {
        SenderRecord::ALL.map(SenderRecord::name).join(", ")
    }
}

/// Where time beyond the floor went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    /// Handshake round trips beyond the design's: a HelloRetryRequest, a Retry, lost or
    /// retransmitted handshake packets, a PTO before the handshake completed.
    Handshake,
    /// The bottleneck idle within a round trip before the first congestion signal: the
    /// sender's window below the path's BDP (initial window, packet size, slow start).
    RampUp,
    /// The bottleneck idle within a round trip after a congestion signal: the window cut below
    /// the BDP.
    WindowAfterLoss,
    /// Longer than a round trip with nothing delivered, after a loss: the sender waited for
    /// loss detection, a PTO or an RTO.
    LossRecoveryWait,
    /// The sender's window had room and it sent nothing, and its record says the peer's
    /// flow-control limit held it back (TCP's receive window chronograph grew, a QUIC sender
    /// sent DATA_BLOCKED or STREAM_DATA_BLOCKED).
    FlowControl,
    /// The same, and its record says flow control did not hold it back: the application,
    /// pacing or a send buffer.
    SenderLimited,
    /// The same, where the sender's record does not say whether flow control held it back:
    /// the peer's flow-control limit, the application, pacing or a send buffer.
    FlowOrSender,
    /// The bottleneck idle within a round trip where the sender's record gives no window: its
    /// window, flow control or pacing (not told apart).
    WindowOrSender,
    /// The bottleneck busy with bytes beyond the response body: packet and frame headers,
    /// handshake flights, acknowledgements, retransmissions.
    Overhead,
    /// The bottleneck idle while the server had no requested byte left to send: the client had
    /// not asked yet (a page's next resources, discovered in what arrived: each level of
    /// dependency a round trip at least; a sequence's next request).
    Requests,
    /// The endpoints' own time: the server's from the request's arrival to its first byte
    /// sent, and the client's from the last packet's delivery to its last byte read.
    Endpoint,
}

impl Component {
    pub const ALL: [Component; 11] = [
        Component::Handshake,
        Component::RampUp,
        Component::WindowAfterLoss,
        Component::LossRecoveryWait,
        Component::FlowControl,
        Component::SenderLimited,
        Component::FlowOrSender,
        Component::WindowOrSender,
        Component::Overhead,
        Component::Requests,
        Component::Endpoint,
    ];

    /// As data names it (`budget.csv`, JSON): "ramp-up".
    pub fn name(self) -> &'static str {
        match self {
            Component::Handshake => "handshake",
            Component::RampUp => "ramp-up",
            Component::WindowAfterLoss => "window-after-loss",
            Component::LossRecoveryWait => "loss-recovery-wait",
            Component::FlowControl => "flow-control",
            Component::SenderLimited => "sender-limited",
            Component::FlowOrSender => "flow-control-or-sender-limited",
            Component::WindowOrSender => "window-or-sender-limited",
            Component::Overhead => "overhead",
            Component::Requests => "requests",
            Component::Endpoint => "endpoint",
        }
    }

    /// As the report writes it: "ramp-up", "window after loss".
    pub fn title(self) -> &'static str {
        match self {
            Component::Handshake => "handshake",
            Component::RampUp => "ramp-up",
            Component::WindowAfterLoss => "window after loss",
            Component::LossRecoveryWait => "loss recovery wait",
            Component::FlowControl => "flow control",
            Component::SenderLimited => "sender-limited",
            Component::FlowOrSender => "flow control or sender-limited",
            Component::WindowOrSender => "window or sender-limited",
            Component::Overhead => "overhead",
            Component::Requests => "waiting for requests",
            Component::Endpoint => "endpoint processing",
        }
    }
}

/// What the path and the protocol's design force, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    /// The handshake's round trips by design (1 for QUIC, 2 for TCP with TLS 1.3, 1 for TCP
    /// alone) at the path's propagation round trip.
    pub handshake_ms: f64,
    /// One round trip for the request.
    pub request_ms: f64,
    /// The response body's bytes at the bottleneck rate.
    pub serialisation_ms: f64,
}

impl Floor {
    pub fn total_ms(&self) -> f64 {
        self.handshake_ms + self.request_ms + self.serialisation_ms
    }
}

/// Time charged to one component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Charge {
    pub component: Component,
    pub ms: f64,
    /// When, as the client saw it: `[from, to]` ms from the request's start, merged where
    /// close; the longest first when there were too many to keep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<[f64; 2]>,
}

/// A transfer's time budget: `floor` and `charges` add up to `ttlb_ms`, less `residual_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub ttlb_ms: f64,
    pub floor: Floor,
    /// One per component that took time, in [`Component::ALL`]'s order.
    pub charges: Vec<Charge>,
    /// What the floor and the charges leave of the TTLB (positive) or exceed it by (negative):
    /// where the client's clock and the link's disagree.
    pub residual_ms: f64,
    /// Bytes the bottleneck carried towards the client beyond the body, after the handshake.
    pub overhead_bytes: u64,
    /// Packets the link dropped towards the client in the transfer.
    pub drops_to_client: u32,
    /// Congestion events the sender recorded in the transfer (`None` where its record has
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_events: Option<u32>,
    /// What the budget read beyond the link's log and the client's record: "cwnd" when the
    /// sender's record gave its congestion window, "flow-blocked" when it said whether the
    /// peer's flow control held it back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// What the server's stack says its record offers ([`SenderRecord`] names) but this
    /// trial's record lacked: a promise its record did not keep (e.g. a qlog without the
    /// congestion window), so the budget fell back to the link's log there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

impl Budget {
    /// The time charged to `c`, ms (0 when none was).
    pub fn ms(&self, c: Component) -> f64 {
        self.charges
            .iter()
            .filter(|x| x.component == c)
            .map(|x| x.ms)
            .sum()
    }

    /// The floor and every charge, ms: the TTLB less the residual.
    pub fn accounted_ms(&self) -> f64 {
        self.floor.total_ms() + self.charges.iter().map(|c| c.ms).sum::<f64>()
    }
}
