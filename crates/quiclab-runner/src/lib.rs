//! quiclab's campaigns: a plan ([`plan`]) expands into trials ([`expand`]), each run on a fresh
//! topology with real endpoints ([`trial`]), recorded in the campaign's store ([`campaign`]);
//! telemetry trials are measured per unit, with their stalls traced to dropped packets
//! ([`telemetry`]).
//!
//! Contract: arms compared within an iteration share its seed, so they see the same packet
//! fates; a trial's identity is a hash of its resolved configuration, so a campaign resumes
//! without redoing finished trials; a failed trial is recorded with its reason and never stops
//! a campaign; every namespace and process a trial creates is gone when the trial returns.

pub mod bulk;
pub mod campaign;
pub mod expand;
mod keys;
pub mod outputs;
mod page;
pub mod plan;
pub mod stacks;
pub mod telemetry;
pub mod trial;
pub mod workloads;
