//! Emulated DMA engines for the lab, served to QEMU over vfio-user: Intel I/OAT (`ioatdma`)
//! and AMD PTDMA (`ptdma`). One process serves one PCI function on one unix socket.
//!
//! Layout: [`pci_config`] (config space), [`msix`] (interrupt eventfds), [`bar`] (register
//! access plumbing), [`guest_ram`] (DMA-mapped guest memory), [`ioat`] and [`ptdma`] (the
//! engines), [`server`] (the vfio-user backend).

pub mod bar;
pub mod device;
pub mod guest_ram;
pub mod ioat;
pub mod msix;
pub mod pci_config;
pub mod ptdma;
pub mod server;

pub use device::Device;
pub use guest_ram::GuestRam;
pub use server::{serve, Backend, DeviceKind, Ended};
