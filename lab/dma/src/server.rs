//! The vfio-user side: region and interrupt tables for the client, and a
//! [`vfio_user::ServerBackend`] that routes config space, BAR accesses, DMA maps and SET_IRQS
//! to the PCI config, the device model, guest RAM and the MSI-X vectors.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_NORESIZE, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion};

use crate::device::Device;
use crate::guest_ram::GuestRam;
use crate::ioat::Ioat;
use crate::msix::Vectors;
use crate::pci_config::{command, PciConfig, CONFIG_SIZE};
use crate::ptdma::Ptdma;

/// Which engine a server process models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// Intel I/OAT with 1..=4 channels.
    Ioat { channels: usize },
    /// AMD PTDMA (one queue).
    Ptdma,
}

/// Everything one served function consists of.
pub struct Backend {
    config: PciConfig,
    device: Box<dyn Device>,
    ram: GuestRam,
    vectors: Arc<Vectors>,
}

impl Backend {
    /// Builds the device model of `kind` with fresh guest RAM and vectors.
    pub fn new(kind: DeviceKind) -> io::Result<Self> {
        let ram = GuestRam::new();
        let (device, vectors): (Box<dyn Device>, Arc<Vectors>) = match kind {
            DeviceKind::Ioat { channels } => {
                let vectors = Arc::new(Vectors::new(Ioat::vectors_needed(channels)));
                let dev = Ioat::new(channels, ram.clone(), Arc::clone(&vectors))?;
                (Box::new(dev), vectors)
            }
            DeviceKind::Ptdma => {
                let vectors = Arc::new(Vectors::new(Ptdma::VECTORS));
                let dev = Ptdma::new(ram.clone(), Arc::clone(&vectors))?;
                (Box::new(dev), vectors)
            }
        };
        let config = PciConfig::new(&device.identity());
        let backend = Self {
            config,
            device,
            ram,
            vectors,
        };
        backend.apply_command();
        Ok(backend)
    }

    /// Makes the device follow the command register: Bus Master Enable gates every guest
    /// memory access and MSI-X message. Clearing it returns once no access is in flight, so
    /// after a driver unbinds (which clears it) no register write can make the device touch
    /// guest memory; work in flight faults and halts with an error.
    fn apply_command(&self) {
        let master = self.config.command() & command::MASTER != 0;
        self.ram.set_bus_master(master);
        self.vectors.set_bus_master(master);
    }

    /// Memory Space Enable: with it clear the function does not claim BAR accesses.
    fn memory_enabled(&self) -> bool {
        self.config.command() & command::MEMORY != 0
    }

    /// The device model.
    pub fn device(&self) -> &dyn Device {
        self.device.as_ref()
    }

    /// Guest RAM as mapped by the client.
    pub fn ram(&self) -> &GuestRam {
        &self.ram
    }

    /// The MSI-X vectors.
    pub fn vectors(&self) -> &Arc<Vectors> {
        &self.vectors
    }

    /// The region table: all nine VFIO PCI regions in index order, only the register BAR and
    /// config space non-empty. No region is mmappable, so every access traps to the model.
    pub fn regions(&self) -> Vec<ServerRegion> {
        let bar = self.device.identity().bar;
        (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let size = if index == u32::from(bar.index) {
                    bar.size
                } else if index == VFIO_PCI_CONFIG_REGION_INDEX {
                    CONFIG_SIZE as u64
                } else {
                    0
                };
                let flags = if size > 0 {
                    VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
                } else {
                    0
                };
                ServerRegion {
                    region_info: vfio_region_info {
                        argsz: std::mem::size_of::<vfio_region_info>() as u32,
                        flags,
                        index,
                        cap_offset: 0,
                        size,
                        offset: 0,
                    },
                    sparse_areas: Vec::new(),
                    mmap_fd: None,
                }
            })
            .collect()
    }

    /// The interrupt table: INTx, MSI, MSI-X, ERR, REQ; only MSI-X has vectors.
    pub fn irqs(&self) -> Vec<IrqInfo> {
        (0..VFIO_PCI_NUM_IRQS)
            .map(|index| {
                if index == VFIO_PCI_MSIX_IRQ_INDEX {
                    IrqInfo {
                        index,
                        flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
                        count: self.vectors.count() as u32,
                    }
                } else {
                    IrqInfo {
                        index,
                        flags: 0,
                        count: 0,
                    }
                }
            })
            .collect()
    }

    fn bar_region(&self) -> (u32, u64) {
        let bar = self.device.identity().bar;
        (u32::from(bar.index), bar.size)
    }
}

// Every guest-triggered access returns Ok: an error reply confuses the client (a failed read
// may be taken as a zero-byte success, an error to a posted write arrives as an unexpected
// reply). Unknown regions and offsets read as zero and drop writes.
impl ServerBackend for Backend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        let (bar, size) = self.bar_region();
        data.fill(0);
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            self.config.read(offset, data);
        } else if region == bar && offset < size && !self.memory_enabled() {
            // Unclaimed (memory space disabled): a master abort reads all ones.
            data.fill(0xff);
        } else if region == bar && offset < size {
            self.device.read(offset, data);
        } else {
            tracing::debug!(region, offset, len = data.len(), "read of an empty region");
        }
        tracing::trace!(region, offset, len = data.len(), ?data, "region read");
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let (bar, size) = self.bar_region();
        tracing::trace!(region, offset, ?data, "region write");
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            self.config.write(offset, data);
            if crate::bar::touches(offset, data.len(), 0x04, 2) {
                self.apply_command();
            }
        } else if region == bar && offset < size && !self.memory_enabled() {
            tracing::debug!(offset, "BAR write with memory space disabled dropped");
        } else if region == bar && offset < size {
            self.device.write(offset, data);
        } else {
            tracing::debug!(
                region,
                offset,
                len = data.len(),
                "write to an empty region dropped"
            );
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        let Some(fd) = fd else {
            // Sections without an fd (ROM/flash) cannot be reached by this server; an error
            // reply would fail the client's whole map, so accept and ignore them.
            tracing::debug!(address, size, "DMA_MAP without fd ignored");
            return Ok(());
        };
        let writable = flags.contains(DmaMapFlags::WRITE);
        match self.ram.map(address, size, fd, offset, writable) {
            Ok(()) => {
                tracing::info!(
                    address = format_args!("{address:#x}"),
                    size = format_args!("{size:#x}"),
                    offset = format_args!("{offset:#x}"),
                    ?flags,
                    regions = self.ram.regions(),
                    "DMA_MAP"
                );
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "DMA_MAP failed");
                Err(io::Error::other(e.to_string()))
            }
        }
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        let all = flags.contains(DmaUnmapFlags::UNMAP_ALL);
        // Returns once no engine uses the range: the reply must follow the last access.
        let dropped = self.ram.unmap(address, size, all);
        tracing::info!(
            address = format_args!("{address:#x}"),
            size = format_args!("{size:#x}"),
            all,
            dropped,
            regions = self.ram.regions(),
            "DMA_UNMAP"
        );
        Ok(())
    }

    fn reset(&mut self) -> io::Result<()> {
        tracing::info!("device reset");
        // Command register first: bus mastering off stops work in flight before the reset.
        self.config.reset();
        self.apply_command();
        self.device.reset();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        tracing::debug!(index, flags, start, count, fds = fds.len(), "SET_IRQS");
        self.vectors.set_irqs(index, flags, start, count, fds);
        Ok(())
    }
}

/// How a served session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The client closed (or dropped) the connection.
    Disconnected,
}

/// Binds `socket`, calls `listening` once bound, serves one client until it disconnects.
pub fn serve(socket: &Path, kind: DeviceKind, listening: impl FnOnce()) -> anyhow::Result<Ended> {
    remove_stale_socket(socket)?;
    let mut backend = Backend::new(kind).context("starting the device model")?;
    let server = Server::new(socket, true, backend.irqs(), backend.regions())
        .with_context(|| format!("binding vfio-user socket {}", socket.display()))?;
    listening();
    match server.run(&mut backend) {
        Ok(()) => Ok(Ended::Disconnected),
        Err(vfio_user::Error::ReceiveWithFd(e)) if is_disconnect(e.errno()) => {
            tracing::info!(error = %e, "client connection dropped");
            Ok(Ended::Disconnected)
        }
        Err(vfio_user::Error::StreamWrite(e)) | Err(vfio_user::Error::StreamRead(e))
            if e.kind() == io::ErrorKind::BrokenPipe
                || e.kind() == io::ErrorKind::ConnectionReset
                || e.kind() == io::ErrorKind::UnexpectedEof =>
        {
            tracing::info!(error = %e, "client connection dropped");
            Ok(Ended::Disconnected)
        }
        Err(e) => {
            Err(anyhow::Error::new(e)
                .context(format!("serving vfio-user socket {}", socket.display())))
        }
    }
}

fn is_disconnect(errno: i32) -> bool {
    errno == libc::ECONNRESET || errno == libc::EPIPE
}

/// A socket file left by a dead server blocks binding; one with a live listener must not be
/// stolen. Liveness is read from /proc/net/unix rather than by connecting, because a probe
/// connection would be accepted as the live server's one and only client and end its session.
fn remove_stale_socket(socket: &Path) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(socket) else {
        return Ok(());
    };
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_socket() {
        bail!(
            "{} exists and is not a socket; refusing to replace it",
            socket.display()
        );
    }
    let table = std::fs::read_to_string("/proc/net/unix")
        .context("reading /proc/net/unix to tell a stale socket from a live one")?;
    if socket_is_bound(&table, socket) {
        bail!("{} is in use by a live server", socket.display());
    }
    std::fs::remove_file(socket)
        .with_context(|| format!("removing stale socket {}", socket.display()))?;
    tracing::info!(socket = %socket.display(), "removed stale socket");
    Ok(())
}

/// True if `table` (the text of /proc/net/unix) lists a socket bound to `socket`, by the path
/// as given or its canonical form.
fn socket_is_bound(table: &str, socket: &Path) -> bool {
    let given = socket.to_string_lossy().into_owned();
    let canonical = std::fs::canonicalize(socket)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| given.clone());
    table.lines().skip(1).any(|line| {
        // Fields: Num RefCount Protocol Flags Type St Inode [Path]
        let path = line.split_whitespace().nth(7);
        path.is_some_and(|p| p == given || p == canonical)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_sockets_are_recognised_in_proc_net_unix() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                     0000000000000000: 00000002 00000000 00010000 0001 01 12345 /run/a.sock\n\
                     0000000000000000: 00000002 00000000 00000000 0001 03 12346\n";
        assert!(socket_is_bound(table, Path::new("/run/a.sock")));
        assert!(!socket_is_bound(table, Path::new("/run/b.sock")));
    }
}
