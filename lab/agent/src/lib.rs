//! The lab's guest agent and its wire protocol.
//!
//! The agent runs as PID 1 of the guest initramfs and serves [`protocol`] requests over a
//! virtio-serial port named [`protocol::PORT_NAME`]. The host side (`lab::guest`) and the agent
//! share the encode/decode helpers here so the two can never disagree about framing.

pub mod protocol;
