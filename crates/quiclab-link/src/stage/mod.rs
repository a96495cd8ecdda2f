//! Stages of a pipeline. Filters decide instantly; timed stages hold packets and release each at
//! an exact exit time, which the next stage takes as its arrival time, so a late wake-up of the
//! runtime never shifts the schedule.

pub mod delay;
pub mod filter;
pub mod queue;

use std::time::Duration;

use crate::event::Recorder;

/// What a link carries: anything that knows its size on the wire. Stages decide by that size
/// alone; what the bytes are is the runtime's business (plain bytes in tests and most uses, or
/// a runtime's handle to bytes it holds elsewhere). A duplicated packet's payload is cloned.
pub trait Payload: Clone + Send + 'static {
    /// Bytes of the IP packet on the wire.
    fn wire_len(&self) -> usize;
}

impl Payload for Vec<u8> {
    fn wire_len(&self) -> usize {
        self.len()
    }
}

/// A packet inside the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<D = Vec<u8>> {
    /// Arrival index in its direction (a duplicate keeps its original's index).
    pub index: u64,
    /// True for the copy made by duplication.
    pub copy: bool,
    pub data: D,
}

impl<D: Payload> Packet<D> {
    pub fn size(&self) -> usize {
        self.data.wire_len()
    }
}

/// A stage that holds packets for a while.
///
/// Contract: `push` is called with non-decreasing `at`; `pop(now)` returns packets whose exit
/// time is `<= now`, in exit order, with that exit time; `next_exit` is the earliest exit time of
/// anything held (it may be a time at which nothing leaves, never a time later than the next
/// departure).
pub trait Stage<D: Payload = Vec<u8>>: Send {
    fn push(&mut self, at: Duration, pkt: Packet<D>, rec: &mut Recorder);
    fn pop(&mut self, now: Duration) -> Option<(Duration, Packet<D>)>;
    fn next_exit(&self) -> Option<Duration>;
}
