//! PCI configuration space of the emulated function: a 256-byte type-0 header with an MSI-X
//! capability and nothing else (conventional PCI, no INTx).
//!
//! The `vfio_user` crate knows nothing about PCI, so the device owns these bytes. Written by
//! hand rather than with a PCI crate because the layout is tiny and fixed, and the crates that
//! exist (e.g. the vfio-user gpio example's helper, cloud-hypervisor's `pci`) are either not a
//! library or pull in a whole VMM. QEMU emulates the MSI-X capability registers and the BARs on
//! its side; the bytes here tell it the layout, and the write masks keep reads coherent.

/// Size of the config region (conventional PCI).
pub const CONFIG_SIZE: usize = 256;

const MSIX_CAP: usize = 0x40;

/// Command register bits the function acts on.
pub mod command {
    /// Memory Space Enable: the function answers accesses to its memory BAR.
    pub const MEMORY: u16 = 1 << 1;
    /// Bus Master Enable: the function may read and write memory (DMA, MSI-X messages).
    pub const MASTER: u16 = 1 << 2;
}

/// A memory BAR the function exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarSpec {
    /// BAR number (0..=5); a 64-bit BAR also uses `index + 1`.
    pub index: u8,
    /// Size in bytes, a power of two >= 16.
    pub size: u64,
    pub is_64bit: bool,
}

/// Where the MSI-X table and PBA live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixSpec {
    /// Number of table entries (1..=2048).
    pub vectors: u16,
    pub bar: u8,
    pub table_offset: u32,
    pub pba_offset: u32,
}

/// Identity and resources of a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub vendor: u16,
    pub device: u16,
    pub revision: u8,
    /// 24-bit class code: class << 16 | subclass << 8 | prog-if.
    pub class: u32,
    pub subsystem_vendor: u16,
    pub subsystem: u16,
    pub bar: BarSpec,
    pub msix: MsixSpec,
}

/// The config space bytes plus, per byte, which bits the guest may change.
#[derive(Debug, Clone)]
pub struct PciConfig {
    bytes: [u8; CONFIG_SIZE],
    writable: [u8; CONFIG_SIZE],
    reset_bytes: [u8; CONFIG_SIZE],
}

impl PciConfig {
    pub fn new(id: &Identity) -> Self {
        let mut c = Self {
            bytes: [0; CONFIG_SIZE],
            writable: [0; CONFIG_SIZE],
            reset_bytes: [0; CONFIG_SIZE],
        };
        c.set16(0x00, id.vendor);
        c.set16(0x02, id.device);
        // Command: I/O, memory, bus master, parity, SERR, INTx disable are guest-writable.
        c.mask16(0x04, 0x0547);
        // Status: capabilities list present.
        c.set16(0x06, 1 << 4);
        c.bytes[0x08] = id.revision;
        c.bytes[0x09] = id.class as u8;
        c.bytes[0x0a] = (id.class >> 8) as u8;
        c.bytes[0x0b] = (id.class >> 16) as u8;
        // Cache line size and latency timer are plain storage.
        c.writable[0x0c] = 0xff;
        c.writable[0x0d] = 0xff;
        // Header type 0, single function.
        c.bytes[0x0e] = 0;

        let bar = id.bar;
        let off = 0x10 + 4 * usize::from(bar.index);
        let size_mask = !(bar.size.max(16) - 1);
        let type_bits: u32 = if bar.is_64bit { 0b100 } else { 0 };
        c.set32(off, type_bits);
        c.mask32(off, (size_mask as u32) & !0xf);
        if bar.is_64bit && off + 4 < 0x28 {
            c.mask32(off + 4, (size_mask >> 32) as u32);
        }

        c.set16(0x2c, id.subsystem_vendor);
        c.set16(0x2e, id.subsystem);
        c.bytes[0x34] = MSIX_CAP as u8;
        // Interrupt line is storage for the OS; pin 0 = no INTx (QEMU would otherwise wire it).
        c.writable[0x3c] = 0xff;
        c.bytes[0x3d] = 0;

        // MSI-X capability: ID, next = 0, control (table size - 1; enable and function-mask
        // bits writable), table and PBA offset/BIR.
        let m = id.msix;
        c.bytes[MSIX_CAP] = 0x11;
        c.bytes[MSIX_CAP + 1] = 0;
        c.set16(MSIX_CAP + 2, m.vectors.clamp(1, 2048) - 1);
        c.mask16(MSIX_CAP + 2, 0xc000);
        c.set32(MSIX_CAP + 4, (m.table_offset & !7) | u32::from(m.bar & 7));
        c.set32(MSIX_CAP + 8, (m.pba_offset & !7) | u32::from(m.bar & 7));

        c.reset_bytes = c.bytes;
        c
    }

    /// Reads `data.len()` bytes at `offset`; bytes past the end read as 0.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        crate::bar::read_image(&self.bytes, 0, offset, data);
    }

    /// Writes through the per-bit write mask; bytes past the end are dropped.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            let Some(at) = offset
                .checked_add(i as u64)
                .and_then(|a| usize::try_from(a).ok())
                .filter(|&a| a < CONFIG_SIZE)
            else {
                continue;
            };
            let w = self.writable[at];
            self.bytes[at] = (self.bytes[at] & !w) | (b & w);
        }
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        u16::from_le_bytes([self.bytes[0x04], self.bytes[0x05]])
    }

    /// Back to power-on contents (function-level reset).
    pub fn reset(&mut self) {
        self.bytes = self.reset_bytes;
    }

    fn set16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn set32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn mask16(&mut self, off: usize, m: u16) {
        self.writable[off..off + 2].copy_from_slice(&m.to_le_bytes());
    }

    fn mask32(&mut self, off: usize, m: u32) {
        self.writable[off..off + 4].copy_from_slice(&m.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ioat_like() -> Identity {
        Identity {
            vendor: 0x8086,
            device: 0x0b00,
            revision: 0,
            class: 0x088000,
            subsystem_vendor: 0x8086,
            subsystem: 0,
            bar: BarSpec {
                index: 0,
                size: 16 * 1024,
                is_64bit: true,
            },
            msix: MsixSpec {
                vectors: 4,
                bar: 0,
                table_offset: 0x2000,
                pba_offset: 0x3000,
            },
        }
    }

    fn dword(c: &PciConfig, off: u64) -> u32 {
        let mut b = [0u8; 4];
        c.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn header_and_msix_capability_describe_the_function() {
        let c = PciConfig::new(&ioat_like());
        assert_eq!(dword(&c, 0), 0x0b00_8086);
        assert_eq!(dword(&c, 8) >> 8, 0x088000);
        assert_eq!(dword(&c, 0x10) & 0xf, 0b100, "64-bit memory BAR");
        assert_eq!(dword(&c, 0x34) & 0xff, 0x40);
        assert_eq!(dword(&c, 0x3c) >> 8 & 0xff, 0, "no interrupt pin");
        let cap = dword(&c, 0x40);
        assert_eq!(cap & 0xff, 0x11);
        assert_eq!(cap >> 16 & 0x7ff, 3, "table size - 1");
        assert_eq!(dword(&c, 0x44), 0x2000);
        assert_eq!(dword(&c, 0x48), 0x3000);
    }

    #[test]
    fn bar_sizing_reads_back_the_size_mask() {
        let mut c = PciConfig::new(&ioat_like());
        c.write(0x10, &[0xff; 8]);
        assert_eq!(dword(&c, 0x10), 0xffff_c004);
        assert_eq!(dword(&c, 0x14), 0xffff_ffff);
        c.reset();
        assert_eq!(dword(&c, 0x10), 0x4);
    }

    #[test]
    fn read_only_bytes_ignore_writes_and_reads_past_the_end_are_zero() {
        let mut c = PciConfig::new(&ioat_like());
        c.write(0, &[0; 4]);
        c.write(0xfe, &[1, 2, 3, 4]);
        assert_eq!(dword(&c, 0), 0x0b00_8086);
        let mut b = [0xffu8; 8];
        c.read(0xfc, &mut b);
        assert_eq!(&b[4..], &[0, 0, 0, 0]);
    }
}
