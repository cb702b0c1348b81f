//! What the vfio-user server needs from a device model.

use crate::pci_config::Identity;

/// A PCI function with one register BAR, served by [`crate::server::Backend`].
///
/// Accesses come from the guest through the client and must never fail: unknown offsets read
/// as zero and writes to them are dropped.
pub trait Device: Send + Sync {
    /// PCI identity, BAR and MSI-X layout.
    fn identity(&self) -> Identity;
    /// A read of `data.len()` bytes at `offset` inside the register BAR.
    fn read(&self, offset: u64, data: &mut [u8]);
    /// A write of `data` at `offset` inside the register BAR.
    fn write(&self, offset: u64, data: &[u8]);
    /// Device (function-level) reset: back to the power-on register state.
    fn reset(&self);
}
