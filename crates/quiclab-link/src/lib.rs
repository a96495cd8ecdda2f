//! quiclab's link emulator core.
//!
//! Sans-IO: nothing here reads a clock, a file or a socket. Time is a [`Duration`] since the
//! link's epoch, passed into every call; a runtime (see `quiclab-netns`) feeds packets from TUN
//! devices and writes departures back, and tests drive the same code in virtual time.
//!
//! A [`Pipeline`] is one direction: filters (MTU, outages, listed drops, i.i.d. or burst loss,
//! duplication) decide on arrival; a bottleneck (constant rate or Mahimahi trace, behind a
//! drop-tail queue) and a delay line (with jitter and reordering) hold packets until their exact
//! exit time. Every random decision is a pure function of `(seed, direction, packet index)`
//! ([`rng`]), so the same seed gives the same packet fates whatever the traffic.
//!
//! [`Duration`]: std::time::Duration

pub mod config;
pub mod event;
pub mod pipeline;
pub mod rng;
pub mod stage;
pub mod trace;
pub mod units;

pub use config::{ConfigError, DirectionConfig, KEYS, LinkConfig};
pub use event::{Counters, DropReason, Event, EventKind, LATE_EVENT};
pub use pipeline::{Departure, Pipeline};
pub use stage::Payload;
pub use trace::Trace;
pub use units::{QueueLimit, Rate};

use serde::Serialize;

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// Both directions of a link.
pub struct Link {
    pub up: Pipeline,
    pub down: Pipeline,
}

impl Link {
    pub fn new(cfg: &LinkConfig, log: bool) -> Result<Self, ConfigError> {
        Ok(Link {
            up: Pipeline::new(Direction::Up, &cfg.up, cfg.seed, log)?,
            down: Pipeline::new(Direction::Down, &cfg.down, cfg.seed, log)?,
        })
    }
}
