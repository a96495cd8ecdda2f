//! quiclab's Linux runtime: network namespaces joined by TUN devices, the link emulator
//! ([`quiclab_link`]) run on the real clock between them, processes started inside them, and the
//! probes that measure them.
//!
//! Contract: everything created here is owned by a guard and removed on drop (normal exit, error,
//! panic unwinding); what a SIGKILLed run leaves is found by name prefix and lock file and
//! removed by [`clean::clean`]. Nothing here kills a process it did not start or that is not
//! inside one of its namespaces.

pub mod clean;
pub mod error;
pub mod forward;
pub mod ns;
pub mod pcap;
pub mod probe;
pub mod process;
pub mod reaper;
pub mod rootless;
mod rtnl;
mod segments;
pub mod selftest;
pub mod sys;
pub mod topology;
mod veth;
pub mod watch;

pub use error::{Error, Result};
pub use forward::DirectionReport;
pub use ns::Netns;
pub use process::{Mode, Process, Setup};
pub use topology::{Side, Topology, TopologyConfig};
