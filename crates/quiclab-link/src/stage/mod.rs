//! Stages of a pipeline. Filters decide instantly; timed stages hold packets and release each at
//! an exact exit time, which the next stage takes as its arrival time, so a late wake-up of the
//! runtime never shifts the schedule.

pub mod delay;
pub mod filter;
pub mod queue;

use std::time::Duration;

use crate::event::Recorder;

/// A packet inside the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Arrival index in its direction (a duplicate keeps its original's index).
    pub index: u64,
    /// True for the copy made by duplication.
    pub copy: bool,
    pub data: Vec<u8>,
}

impl Packet {
    pub fn size(&self) -> usize {
        self.data.len()
    }
}

/// A stage that holds packets for a while.
///
/// Contract: `push` is called with non-decreasing `at`; `pop(now)` returns packets whose exit
/// time is `<= now`, in exit order, with that exit time; `next_exit` is the earliest exit time of
/// anything held (it may be a time at which nothing leaves, never a time later than the next
/// departure).
pub trait Stage: Send {
    fn push(&mut self, at: Duration, pkt: Packet, rec: &mut Recorder);
    fn pop(&mut self, now: Duration) -> Option<(Duration, Packet)>;
    fn next_exit(&self) -> Option<Duration>;
}
