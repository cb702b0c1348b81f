//! Host-side benchmark of the device models (not a test): `cargo bench -p lab-dma`.
//!
//! 1. The engines' data path (`GuestRam::copy` on memfd-backed guest RAM, what both I/OAT and
//!    PTDMA run per descriptor) against a plain memcpy of the same size, as a ratio from this
//!    run, for 4 KiB, 64 KiB and 1 MiB.
//! 2. The whole I/OAT descriptor path per size: DMACOUNT doorbell (as the MMIO handler
//!    receives it) -> worker fetches the descriptor, copies, writes the completion word ->
//!    MSI-X eventfd readable, again against memcpy.
//! 3. Doorbell-to-interrupt latency for one 64 KiB descriptor (median, p10, p99).
//!
//! A plain `harness = false` binary rather than criterion: the numbers wanted are a few ratios
//! from one run, and criterion's dependency tree would double this crate's build time.

use std::fs::File;
use std::hint::black_box;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use lab_dma::{Backend, DeviceKind};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::{DmaMapFlags, ServerBackend};
use vmm_sys_util::eventfd::EventFd;

const RAM: u64 = 64 << 20;
const GPA: u64 = 0x1_0000_0000;
const SRC: u64 = GPA + (8 << 20);
const DST: u64 = GPA + (24 << 20);
const DESC: u64 = GPA + 0x1000;
const CMP: u64 = GPA;

fn memfd(size: u64) -> File {
    // SAFETY: memfd_create with a static NUL-terminated name; the fd is checked and owned.
    let fd = unsafe { libc::memfd_create(c"lab-dma-bench".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create failed");
    // SAFETY: fresh descriptor we own.
    let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(size).expect("size memfd");
    f
}

fn dup_file(fd: i32) -> File {
    // SAFETY: dup of a live descriptor; the new fd is owned by the returned File.
    let d = unsafe { libc::dup(fd) };
    assert!(d >= 0, "dup failed");
    // SAFETY: fresh descriptor we own.
    unsafe { File::from_raw_fd(d) }
}

/// Median, p10 and p99 of `n` timed runs of `f` (after `n / 10` warm-up runs).
fn measure(n: usize, mut f: impl FnMut() -> Duration) -> (Duration, Duration, Duration) {
    for _ in 0..n / 10 {
        f();
    }
    let mut t: Vec<Duration> = (0..n).map(|_| f()).collect();
    t.sort();
    (t[n / 2], t[n / 10], t[(n * 99) / 100])
}

fn memcpy_time(size: usize, n: usize) -> Duration {
    let src = vec![0x5au8; size];
    let mut dst = vec![0u8; size];
    measure(n, || {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
        t.elapsed()
    })
    .0
}

fn us(d: Duration) -> String {
    format!("{:.2} us", d.as_secs_f64() * 1e6)
}

fn main() {
    let ram = memfd(RAM);
    let mut backend = Backend::new(DeviceKind::Ioat { channels: 1 }).expect("device");
    backend
        .dma_map(
            DmaMapFlags::READ_WRITE,
            0,
            GPA,
            RAM,
            Some(dup_file(ram.as_raw_fd())),
        )
        .expect("dma_map");
    // Memory space and bus mastering on, as a bound driver leaves them.
    backend
        .region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &6u16.to_le_bytes())
        .expect("command register");
    // Blocking eventfd: the benchmark thread sleeps in read() like an interrupt waiter.
    let irq = EventFd::new(0).expect("eventfd");
    backend
        .set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            1,
            vec![dup_file(irq.as_raw_fd())],
        )
        .expect("set_irqs");
    let guest = backend.ram().clone();
    guest.write(SRC, &vec![0xa5; 1 << 20]).expect("fill source");

    println!("lab-dma copy path benchmark (one run; ratios are device time / memcpy time)");
    println!();
    println!("1. data path: GuestRam::copy (bounds checks + memmove in guest RAM) vs memcpy");
    println!(
        "{:>8}  {:>12}  {:>12}  {:>7}",
        "size", "memcpy", "device copy", "ratio"
    );
    for size in [4usize << 10, 64 << 10, 1 << 20] {
        let n = if size >= 1 << 20 { 300 } else { 3000 };
        let m = memcpy_time(size, n);
        let (d, _, _) = measure(n, || {
            let t = Instant::now();
            guest.copy(SRC, DST, size as u64).expect("copy");
            t.elapsed()
        });
        println!(
            "{:>7}K  {:>12}  {:>12}  {:>7.2}",
            size >> 10,
            us(m),
            us(d),
            d.as_secs_f64() / m.as_secs_f64()
        );
    }

    let dev = backend.device();
    let ch = 0x80u64;
    dev.write(0x03, &[0x09]);
    dev.write(ch, &0x1du16.to_le_bytes());
    dev.write(ch + 0x18, &CMP.to_le_bytes());
    let mut count: u16 = 0;
    let mut run_desc = |size: u32| -> Duration {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&size.to_le_bytes());
        d[4..8].copy_from_slice(&0x9u32.to_le_bytes());
        d[8..16].copy_from_slice(&SRC.to_le_bytes());
        d[16..24].copy_from_slice(&DST.to_le_bytes());
        d[24..32].copy_from_slice(&DESC.to_le_bytes());
        guest.write(DESC, &d).expect("descriptor");
        count = count.wrapping_add(1);
        let t = Instant::now();
        dev.write(ch + 0x06, &count.to_le_bytes());
        irq.read().expect("interrupt");
        let e = t.elapsed();
        // Re-arm like the driver's cleanup tasklet.
        dev.write(ch, &0x1du16.to_le_bytes());
        e
    };
    dev.write(ch + 0x10, &DESC.to_le_bytes());

    println!();
    println!(
        "2. whole I/OAT descriptor: DMACOUNT write -> copy -> completion -> eventfd, vs memcpy"
    );
    println!(
        "{:>8}  {:>12}  {:>12}  {:>7}",
        "size", "memcpy", "descriptor", "ratio"
    );
    for size in [4usize << 10, 64 << 10, 1 << 20] {
        let n = if size >= 1 << 20 { 300 } else { 2000 };
        let m = memcpy_time(size, n);
        let (d, _, _) = measure(n, || run_desc(size as u32));
        println!(
            "{:>7}K  {:>12}  {:>12}  {:>7.2}",
            size >> 10,
            us(m),
            us(d),
            d.as_secs_f64() / m.as_secs_f64()
        );
    }

    println!();
    let (med, p10, p99) = measure(5000, || run_desc(64 << 10));
    println!(
        "3. doorbell -> interrupt eventfd, one 64 KiB descriptor (5000 runs): median {}, p10 {}, p99 {}",
        us(med),
        us(p10),
        us(p99)
    );
    let mut word = [0u8; 8];
    guest.read(CMP, &mut word).expect("completion");
    assert_eq!(
        u64::from_le_bytes(word) & 7,
        1,
        "last completion reports DONE"
    );
}
