//! The programs the lab puts into every guest image, built for the guest by `lab/build.rs` and
//! embedded here: the agent (`/init`) and `lab-numa01`. Below every other module (images embed
//! them, the guest side talks to the agent), so it imports none.

/// The static guest agent (x86_64, no PT_INTERP), built by `lab/build.rs`; the image puts it
/// at `/init`.
pub const AGENT_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lab-agent"));

/// The sha256 of [`AGENT_BINARY`] (hex), computed by `lab/build.rs` when the agent was built.
pub const AGENT_SHA256: &str = include_str!(concat!(env!("OUT_DIR"), "/lab-agent.sha256"));

/// Path of the agent binary on the build host (the file [`AGENT_BINARY`] was read from).
pub const AGENT_BINARY_PATH: &str = concat!(env!("OUT_DIR"), "/lab-agent");

/// The static `lab-numa01` workload (seed S4's numa01_THREAD_ALLOC shape), built with the agent
/// by `lab/build.rs`; every image has it at [`NUMA01_GUEST_PATH`].
pub const NUMA01_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lab-numa01"));

/// The sha256 of [`NUMA01_BINARY`] (hex), part of the image cache key.
pub const NUMA01_SHA256: &str = include_str!(concat!(env!("OUT_DIR"), "/lab-numa01.sha256"));

/// Where the image puts [`NUMA01_BINARY`].
pub const NUMA01_GUEST_PATH: &str = "/usr/bin/lab-numa01";
