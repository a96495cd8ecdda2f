//! quiclab's campaigns: a plan ([`plan`]) expands into trials ([`expand`]), each run on a fresh
//! topology with real endpoints ([`trial`]), recorded in the campaign's store ([`campaign`]).
//! What an arm's endpoints are comes from the stack registry ([`stacks`], the crate
//! `quiclab-stacks`: one module per stack);
//! what a trial does and measures from the workload registry ([`workloads`]: one module per
//! kind), with their measurement helpers ([`telemetry`]: units and stalls traced to dropped
//! packets; [`bulk`]: acknowledged bytes and CPU; [`outputs`]: records and timelines read back).
//!
//! Contract: arms compared within an iteration share its seed, so they see the same packet
//! fates; a trial's identity is a hash of its resolved configuration, so a campaign resumes
//! without redoing finished trials; a failed trial is recorded with its reason and never stops
//! a campaign; every namespace and process a trial creates is gone when the trial returns.
//! It never prints (the CLI reports progress) and never matches on a stack's or a workload's
//! identity outside that stack's or workload's module.

pub mod budget;
pub mod bulk;
pub mod campaign;
pub mod expand;
pub mod fingerprint;
pub mod governor;
mod keys;
pub mod outputs;
mod page;
pub mod plan;
mod queue;
pub mod shard;
pub use quiclab_stacks as stacks;
pub mod telemetry;
pub mod trial;
pub mod workloads;
