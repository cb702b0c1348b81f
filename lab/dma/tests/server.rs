//! The `lab-dma` binary over a real vfio-user socket, with the `vfio_user` crate's client
//! standing in for QEMU: the CLI contract (listening line, exit 0 on disconnect and SIGTERM,
//! stale sockets), the region/IRQ tables, DMA_MAP through a memfd, SET_IRQS with `start`, and
//! a copy end to end.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::Client;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

struct Server {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

/// The device model: nextest's path for it (remapped when the tests run from an archive on
/// another machine), else cargo's.
fn lab_dma() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_lab-dma")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lab-dma")))
}

fn start(args: &[&str]) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("dev.sock");
    start_at(dir, socket, args)
}

fn start_at(dir: tempfile::TempDir, socket: PathBuf, args: &[&str]) -> Server {
    let log = dir.path().join("dev.log");
    let mut child = Command::new(lab_dma())
        .arg("--socket")
        .arg(&socket)
        .arg("--log")
        .arg(&log)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn lab-dma");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read listening line");
    assert_eq!(
        line.trim_end(),
        format!("lab-dma: listening on {}", socket.display())
    );
    assert!(socket.exists(), "socket bound before the line");
    Server {
        child,
        socket,
        _dir: dir,
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("lab-dma did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn memfd(size: u64) -> File {
    // SAFETY: memfd_create with a static NUL-terminated name; the fd is checked and owned.
    let fd = unsafe { libc::memfd_create(c"lab-dma-e2e".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: fresh descriptor we own.
    let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(size).expect("size");
    f
}

fn connect(path: &Path) -> Client {
    Client::new(path).expect("vfio-user handshake")
}

#[test]
fn ioat_end_to_end_over_the_socket_then_exit_zero_on_disconnect() {
    let mut s = start(&["--device", "ioat", "--channels", "2"]);
    let mut c = connect(&s.socket);
    assert_eq!(c.region(0).map(|r| r.size), Some(16 * 1024));
    assert_eq!(
        c.region(VFIO_PCI_CONFIG_REGION_INDEX).map(|r| r.size),
        Some(256)
    );
    assert_eq!(
        c.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX)
            .expect("irq info")
            .count,
        2
    );
    let mut id = [0u8; 4];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut id)
        .expect("config read");
    assert_eq!(u32::from_le_bytes(id), 0x0b00_8086);

    // Guest RAM: 4 MiB at 0x1000_0000 from offset 1 MiB of a memfd.
    const GPA: u64 = 0x1000_0000;
    const OFF: u64 = 0x10_0000;
    let ram = memfd(0x50_0000);
    c.dma_map(OFF, GPA, 0x40_0000, ram.as_raw_fd())
        .expect("dma_map");
    // Vector 1 wired alone (start = 1), the way QEMU sends one fd per message.
    let irq = EventFd::new(EFD_NONBLOCK).expect("eventfd");
    c.set_irqs(
        VFIO_PCI_MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        1,
        1,
        &[irq.as_raw_fd()],
    )
    .expect("set_irqs");

    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    ram.write_all_at(&data, OFF + 0x2000).expect("src");
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&4096u32.to_le_bytes());
    d[4..8].copy_from_slice(&0x9u32.to_le_bytes());
    d[8..16].copy_from_slice(&(GPA + 0x2000).to_le_bytes());
    d[16..24].copy_from_slice(&(GPA + 0x4000).to_le_bytes());
    d[24..32].copy_from_slice(&(GPA + 0x1040).to_le_bytes());
    ram.write_all_at(&d, OFF + 0x1000).expect("desc");

    // Memory space and bus mastering on, as the guest's PCI core and driver set them.
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &6u16.to_le_bytes())
        .expect("command register");
    let ch1 = 0x100u64;
    c.region_write(0, 0x03, &[0x09]).expect("INTRCTRL");
    c.region_write(0, ch1, &0x1du16.to_le_bytes())
        .expect("CHANCTRL");
    c.region_write(0, ch1 + 0x18, &(GPA as u32).to_le_bytes())
        .expect("CHANCMP lo");
    c.region_write(0, ch1 + 0x1c, &((GPA >> 32) as u32).to_le_bytes())
        .expect("CHANCMP hi");
    c.region_write(0, ch1 + 0x10, &((GPA + 0x1000) as u32).to_le_bytes())
        .expect("CHAINADDR lo");
    c.region_write(0, ch1 + 0x14, &0u32.to_le_bytes())
        .expect("CHAINADDR hi");
    c.region_write(0, ch1 + 0x06, &1u16.to_le_bytes())
        .expect("DMACOUNT");

    let end = Instant::now() + Duration::from_secs(5);
    while irq.read().is_err() {
        assert!(Instant::now() < end, "no interrupt on vector 1");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut out = vec![0u8; 4096];
    ram.read_exact_at(&mut out, OFF + 0x4000).expect("dst");
    assert_eq!(out, data);
    let mut word = [0u8; 8];
    ram.read_exact_at(&mut word, OFF).expect("completion");
    assert_eq!(u64::from_le_bytes(word), (GPA + 0x1000) | 1);
    let mut sts = [0u8; 8];
    c.region_read(0, ch1 + 0x08, &mut sts).expect("CHANSTS");
    assert_eq!(u64::from_le_bytes(sts), (GPA + 0x1000) | 1);

    c.dma_unmap(GPA, 0x40_0000).expect("dma_unmap");
    c.reset().expect("device reset");
    drop(c);
    let status = wait_exit(&mut s.child);
    assert!(status.success(), "exit status {status}");
}

#[test]
fn ptdma_identity_over_the_socket() {
    let mut s = start(&["--device", "ptdma"]);
    let mut c = connect(&s.socket);
    assert_eq!(c.region(2).map(|r| r.size), Some(64 * 1024));
    assert_eq!(c.region(0).map(|r| r.size), Some(0));
    assert_eq!(
        c.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX).expect("irq").count,
        1
    );
    let mut id = [0u8; 4];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut id)
        .expect("config");
    assert_eq!(u32::from_le_bytes(id), 0x1498_1022);
    let mut v = [0u8; 4];
    c.region_read(2, 0x10, &mut v).expect("version");
    assert_eq!(v, [0xff; 4], "BAR unclaimed until memory space is enabled");
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 4, &2u16.to_le_bytes())
        .expect("command register");
    c.region_read(2, 0x10, &mut v).expect("version");
    assert_eq!(u32::from_le_bytes(v), lab_dma::ptdma::VERSION);
    c.shutdown().expect("shutdown");
    assert!(wait_exit(&mut s.child).success());
}

#[test]
fn sigterm_exits_zero_and_removes_the_socket() {
    let mut s = start(&["--device", "ioat"]);
    // SAFETY: plain kill(2) on our own child.
    let rc = unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    assert!(wait_exit(&mut s.child).success());
    assert!(!s.socket.exists(), "socket removed on SIGTERM");
}

#[test]
fn a_stale_socket_is_replaced_but_a_live_one_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(socket.exists());
    let mut s = start_at(dir, socket.clone(), &["--device", "ptdma"]);
    // A second server on the same, live socket must refuse.
    let out = Command::new(lab_dma())
        .args(["--device", "ptdma", "--socket"])
        .arg(&socket)
        .output()
        .expect("run second");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use"));
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        s.child.try_wait().expect("try_wait").is_none(),
        "the refused second server must not disturb the live one"
    );
    connect(&s.socket);
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut s.child).success());
}

#[test]
fn bad_arguments_are_rejected() {
    let out = Command::new(lab_dma())
        .args([
            "--device",
            "ioat",
            "--channels",
            "5",
            "--socket",
            "/nonexistent/x",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let out = Command::new(lab_dma())
        .args(["--device", "ioat", "--socket", "/nonexistent-dir/x.sock"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir/x.sock"));
}
