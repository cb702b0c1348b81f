//! Test kit: a guest RAM made in the test (memfd-backed, with guard bytes around every mapped
//! window that must never change), eventfds for the MSI-X vectors, and register helpers.
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use lab_dma::pci_config::command;
use lab_dma::{Backend, DeviceKind};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::{DmaMapFlags, ServerBackend};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Guest address of the low RAM window.
pub const LOW: u64 = 0x10_0000;
/// Size of the low RAM window.
pub const LOW_SIZE: u64 = 0x40_0000;
/// Guest address of a second window with a hole below it.
pub const HIGH: u64 = 0x1_0000_0000;
pub const HIGH_SIZE: u64 = 0x10_0000;
/// A read-only window (like a ROM section).
pub const RO: u64 = 0x80_0000;
pub const RO_SIZE: u64 = 0x1_0000;
/// Guard bytes around each window in the backing file.
pub const GUARD: u64 = 0x1_0000;
pub const GUARD_BYTE: u8 = 0xa5;

/// File layout: [guard][low][guard][high][guard][ro][guard].
const LOW_OFF: u64 = GUARD;
const HIGH_OFF: u64 = LOW_OFF + LOW_SIZE + GUARD;
const RO_OFF: u64 = HIGH_OFF + HIGH_SIZE + GUARD;
const FILE_SIZE: u64 = RO_OFF + RO_SIZE + GUARD;

/// Command register with memory space and bus mastering enabled, as a bound driver leaves it.
pub const ENABLED: u16 = command::MEMORY | command::MASTER;

/// One device model with its guest.
pub struct Rig {
    pub backend: Backend,
    pub file: File,
    pub irqs: Vec<EventFd>,
}

pub fn memfd() -> File {
    // SAFETY: memfd_create with a static NUL-terminated name; the fd is checked and owned.
    let fd = unsafe { libc::memfd_create(c"lab-dma-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor we own.
    File::from(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `File` on a duplicate of the eventfd, as the client would send it.
pub fn eventfd_file(e: &EventFd) -> File {
    // SAFETY: dup of a live descriptor; the new fd is owned by the returned File.
    let fd = unsafe { libc::dup(e.as_raw_fd()) };
    assert!(fd >= 0, "dup: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor we own.
    File::from(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Rig {
    pub fn new(kind: DeviceKind) -> Self {
        let file = memfd();
        file.set_len(FILE_SIZE).expect("size memfd");
        file.write_all_at(&vec![GUARD_BYTE; FILE_SIZE as usize], 0)
            .expect("fill guards");
        let mut backend = Backend::new(kind).expect("device");
        let rw = DmaMapFlags::READ_WRITE;
        for (addr, size, off, flags) in [
            (LOW, LOW_SIZE, LOW_OFF, rw),
            (HIGH, HIGH_SIZE, HIGH_OFF, rw),
            (RO, RO_SIZE, RO_OFF, DmaMapFlags::READ),
        ] {
            let fd = file.try_clone().expect("dup");
            backend
                .dma_map(flags, off, addr, size, Some(fd))
                .expect("dma_map");
            // Clear the window itself so only guards carry the pattern.
            file.write_all_at(&vec![0; size as usize], off)
                .expect("clear");
        }
        // The driver's pci_enable_device + pci_set_master.
        backend
            .region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &ENABLED.to_le_bytes())
            .expect("command register");
        // A map without fd (a ROM section) must be accepted and ignored.
        backend
            .dma_map(DmaMapFlags::READ, 0, 0xfffc_0000, 0x4_0000, None)
            .expect("fd-less map");
        let n = backend.vectors().count();
        let irqs: Vec<EventFd> = (0..n)
            .map(|_| EventFd::new(EFD_NONBLOCK).expect("eventfd"))
            .collect();
        // One message per vector, as QEMU sends them (max_msg_fds = 1), in reverse order so a
        // backend that ignored `start` would be caught.
        for (v, e) in irqs.iter().enumerate().rev() {
            let f = eventfd_file(e);
            backend
                .set_irqs(
                    VFIO_PCI_MSIX_IRQ_INDEX,
                    VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                    v as u32,
                    1,
                    vec![f],
                )
                .expect("set_irqs");
        }
        Self {
            backend,
            file,
            irqs,
        }
    }

    fn file_off(&self, gpa: u64, len: u64) -> u64 {
        for (base, size, off) in [
            (LOW, LOW_SIZE, LOW_OFF),
            (HIGH, HIGH_SIZE, HIGH_OFF),
            (RO, RO_SIZE, RO_OFF),
        ] {
            if gpa >= base && gpa + len <= base + size {
                return off + (gpa - base);
            }
        }
        panic!("test bug: {gpa:#x}+{len:#x} is not in a test window");
    }

    /// Writes guest memory directly (as the guest CPU would).
    pub fn poke(&self, gpa: u64, data: &[u8]) {
        let off = self.file_off(gpa, data.len() as u64);
        self.file.write_all_at(data, off).expect("poke");
    }

    pub fn peek(&self, gpa: u64, len: usize) -> Vec<u8> {
        let off = self.file_off(gpa, len as u64);
        let mut v = vec![0; len];
        self.file.read_exact_at(&mut v, off).expect("peek");
        v
    }

    /// Reads `len` bytes at `off` of a test-made backing file.
    pub fn peek_file(&self, off: u64, len: usize, f: &File) -> Vec<u8> {
        let mut v = vec![0; len];
        f.read_exact_at(&mut v, off).expect("peek file");
        v
    }

    pub fn peek_u64(&self, gpa: u64) -> u64 {
        u64::from_le_bytes(self.peek(gpa, 8).try_into().unwrap_or([0; 8]))
    }

    /// Asserts every guard byte still holds the pattern.
    pub fn assert_guards_intact(&self) {
        for (off, len) in [
            (0, GUARD),
            (LOW_OFF + LOW_SIZE, GUARD),
            (HIGH_OFF + HIGH_SIZE, GUARD),
            (RO_OFF + RO_SIZE, GUARD),
        ] {
            let mut v = vec![0; len as usize];
            self.file.read_exact_at(&mut v, off).expect("read guard");
            if let Some(i) = v.iter().position(|&b| b != GUARD_BYTE) {
                panic!("guard byte at file offset {:#x} changed", off + i as u64);
            }
        }
    }

    /// Read-only window contents unchanged from zero.
    pub fn assert_ro_untouched(&self) {
        assert!(
            self.peek(RO, RO_SIZE as usize).iter().all(|&b| b == 0),
            "device wrote into a read-only DMA mapping"
        );
    }

    pub fn read(&self, off: u64, width: usize) -> u64 {
        let mut b = [0u8; 8];
        self.backend.device().read(off, &mut b[..width]);
        u64::from_le_bytes(b)
    }

    pub fn write(&self, off: u64, width: usize, v: u64) {
        self.backend.device().write(off, &v.to_le_bytes()[..width]);
    }

    pub fn config_read(&mut self, off: u64, width: usize) -> u64 {
        let mut b = [0u8; 8];
        self.backend
            .region_read(VFIO_PCI_CONFIG_REGION_INDEX, off, &mut b[..width])
            .expect("config read");
        u64::from_le_bytes(b)
    }

    pub fn config_write(&mut self, off: u64, width: usize, v: u64) {
        self.backend
            .region_write(VFIO_PCI_CONFIG_REGION_INDEX, off, &v.to_le_bytes()[..width])
            .expect("config write");
    }

    /// Writes the command register (what unbind/bind and `setpci` do).
    pub fn set_command(&mut self, v: u16) {
        self.config_write(4, 2, u64::from(v));
    }

    /// Interrupts counted on vector `v` so far (drains the eventfd).
    pub fn irq_count(&self, v: usize) -> u64 {
        self.irqs[v].read().unwrap_or(0)
    }

    /// Waits up to 2 s for at least one interrupt on vector `v`; returns the count seen.
    pub fn wait_irq(&self, v: usize) -> u64 {
        let end = Instant::now() + Duration::from_secs(2);
        loop {
            let n = self.irq_count(v);
            if n > 0 || Instant::now() > end {
                return n;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub fn fd_of(&self, v: usize) -> i32 {
        self.irqs[v].as_raw_fd()
    }
}

/// Polls `f` until it returns true or 2 s pass.
pub fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Lets any stray engine activity happen before asserting that nothing happened.
pub fn settle() {
    std::thread::sleep(Duration::from_millis(30));
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
