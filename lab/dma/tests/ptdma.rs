//! PTDMA model, driven through BAR2 the way `ptdma` drives it, with a guest RAM made in the
//! test. No QEMU involved.

mod common;

use common::*;
use lab_dma::ptdma::{control, error, int, reg, VERSION};
use lab_dma::DeviceKind;

/// Queue base: page aligned, 32 entries of 32 bytes.
const Q: u64 = HIGH;
const SRC: u64 = LOW + 0x10_0000;
const DST: u64 = LOW + 0x20_0000;
/// Q_SIZE field the driver programs (32 entries).
const QSIZE: u32 = 4 << control::SIZE_SHIFT;
const DW0: u32 = 0x0050_0012; // IOC | EOM | engine 5

fn cmd(dw0: u32, len: u32, src: u64, dst: u64) -> [u8; 32] {
    let mut d = [0u8; 32];
    let w = [
        dw0,
        len,
        src as u32,
        (src >> 32) as u32 & 0xffff,
        dst as u32,
        (dst >> 32) as u32 & 0xffff,
        0,
        0,
    ];
    for (i, v) in w.iter().enumerate() {
        d[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    d
}

/// The driver-side state: cached control and the next free slot.
struct Driver {
    r: Rig,
    qcontrol: u32,
    qidx: u64,
}

impl Driver {
    /// `pt_core_init`.
    fn init() -> Self {
        let r = Rig::new(DeviceKind::Ptdma);
        r.write(reg::CMD_CONFIG, 4, 1);
        r.write(reg::QUEUE_PRIO, 4, 6);
        r.write(reg::TIMEOUT, 4, 0);
        r.write(reg::CLK_GATE_CTL, 4, 0x1001);
        r.write(reg::REQID_CONFIG, 4, 0);
        r.write(reg::Q_INT_ENABLE, 4, 0);
        r.write(reg::Q_CONTROL, 4, 0);
        r.read(reg::Q_INT_STATUS_RO, 4);
        r.read(reg::Q_STATUS, 4);
        r.write(reg::Q_INT_STATUS, 4, 3);
        let qcontrol = QSIZE | (((Q >> 32) as u32) << 16);
        r.write(reg::Q_TAIL_LO, 4, Q & 0xffff_ffff);
        r.write(reg::Q_HEAD_LO, 4, Q & 0xffff_ffff);
        r.write(reg::Q_CONTROL, 4, u64::from(qcontrol));
        r.write(reg::Q_INT_ENABLE, 4, 3);
        Self {
            r,
            qcontrol,
            qidx: 0,
        }
    }

    /// `pt_core_perform_passthru` + `pt_core_execute_cmd`.
    fn submit(&mut self, d: [u8; 32], int_en: bool) {
        self.r
            .write(reg::Q_INT_ENABLE, 4, if int_en { 3 } else { 0 });
        self.r.poke(Q + 32 * self.qidx, &d);
        self.qidx = (self.qidx + 1) % 32;
        self.r
            .write(reg::Q_TAIL_LO, 4, (Q + 32 * self.qidx) & 0xffff_ffff);
        self.r
            .write(reg::Q_CONTROL, 4, u64::from(self.qcontrol | control::RUN));
    }

    /// The IRQ handler: disable, read status, ack, (flush on error), re-enable.
    fn handle_irq(&mut self) -> (u32, u32) {
        self.r.write(reg::Q_INT_ENABLE, 4, 0);
        let status = self.r.read(reg::Q_INT_STATUS, 4) as u32;
        let mut code = 0;
        if status != 0 {
            let q = self.r.read(reg::Q_STATUS, 4) as u32;
            if status & int::ERROR != 0 {
                code = q & 0x3f;
                self.r
                    .write(reg::Q_HEAD_LO, 4, (Q + 32 * self.qidx) & 0xffff_ffff);
            }
            self.r.write(reg::Q_INT_STATUS, 4, u64::from(status));
        }
        self.r.write(reg::Q_INT_ENABLE, 4, 3);
        (status, code)
    }
}

fn head(r: &Rig) -> u64 {
    r.read(reg::Q_HEAD_LO, 4)
}

#[test]
fn init_sequence_and_identity() {
    let mut d = Driver::init();
    assert_eq!(d.r.config_read(0, 4), 0x1498_1022);
    assert_eq!(d.r.config_read(0x18, 4) & 0xf, 0, "BAR2: 32-bit memory");
    assert_eq!(d.r.read(reg::PT_VERSION, 4), u64::from(VERSION));
    assert_eq!(d.r.read(reg::CLK_GATE_CTL, 4), 0x1001);
    assert_eq!(d.r.read(reg::Q_CONTROL, 4) as u32, d.qcontrol);
    settle();
    assert_eq!(d.r.irq_count(0), 0, "nothing pending at init");
}

#[test]
fn memcpy_completes_with_one_interrupt() {
    let mut d = Driver::init();
    let data = pattern(0x10000, 1);
    d.r.poke(SRC, &data);
    d.submit(cmd(DW0, 0x10000, SRC, DST), true);
    assert_eq!(d.r.wait_irq(0), 1);
    assert_eq!(d.r.peek(DST, 0x10000), data);
    assert_eq!(head(&d.r), (Q + 32) & 0xffff_ffff);
    assert_eq!(d.handle_irq(), (int::COMPLETION, 0));
    settle();
    assert_eq!(
        d.r.irq_count(0),
        0,
        "ack + re-enable with nothing pending: no edge"
    );
    d.r.assert_guards_intact();
}

#[test]
fn completion_while_disabled_fires_on_the_reenable_edge() {
    let mut d = Driver::init();
    d.r.poke(SRC, &pattern(64, 2));
    // The handler disables interrupts, submits the next command, and re-enables: the next
    // completion may land while disabled, and only the re-enable delivers it.
    d.r.write(reg::Q_INT_ENABLE, 4, 0);
    d.r.poke(Q, &cmd(DW0, 64, SRC, DST));
    d.qidx = 1;
    d.r.write(reg::Q_TAIL_LO, 4, (Q + 32) & 0xffff_ffff);
    d.r.write(reg::Q_CONTROL, 4, u64::from(d.qcontrol | control::RUN));
    assert!(
        eventually(|| d.r.read(reg::Q_INT_STATUS, 4) == 1),
        "latched while disabled"
    );
    settle();
    assert_eq!(d.r.irq_count(0), 0);
    d.r.write(reg::Q_INT_ENABLE, 4, 3);
    assert_eq!(d.r.wait_irq(0), 1, "rising edge on enable");
    // Writing the same enable again is not an edge.
    d.r.write(reg::Q_INT_ENABLE, 4, 3);
    settle();
    assert_eq!(d.r.irq_count(0), 0);
}

#[test]
fn polled_mode_sees_status_without_interrupts() {
    let mut d = Driver::init();
    d.r.poke(SRC, &pattern(4096, 3));
    d.submit(cmd(DW0, 4096, SRC, DST), false);
    assert!(eventually(|| d.r.read(reg::Q_INT_STATUS, 4) == 1));
    settle();
    assert_eq!(d.r.irq_count(0), 0);
    // dmaengine_terminate_sync: W1C both bits.
    d.r.write(reg::Q_INT_STATUS, 4, 3);
    assert_eq!(d.r.read(reg::Q_INT_STATUS, 4), 0);
    assert_eq!(d.r.peek(DST, 4096), pattern(4096, 3));
}

#[test]
fn queue_wraps_after_32_commands() {
    let mut d = Driver::init();
    for i in 0..40u64 {
        let src = SRC + 64 * i;
        d.r.poke(src, &pattern(64, i as u8));
        d.submit(cmd(DW0, 64, src, DST + 64 * i), true);
        assert_eq!(d.r.wait_irq(0), 1, "command {i}");
        assert_eq!(d.handle_irq().0, int::COMPLETION);
    }
    assert_eq!(head(&d.r), (Q + 32 * 8) & 0xffff_ffff);
    for i in 0..40u64 {
        assert_eq!(d.r.peek(DST + 64 * i, 64), pattern(64, i as u8));
    }
}

fn failing(c: [u8; 32], expect: u32) {
    let mut d = Driver::init();
    d.submit(c, true);
    assert_eq!(d.r.wait_irq(0), 1);
    assert_ne!(
        d.r.read(reg::Q_CONTROL, 4) as u32 & control::HALT,
        0,
        "halted"
    );
    assert_eq!(
        head(&d.r),
        Q & 0xffff_ffff,
        "head stays at the failing command"
    );
    let (status, code) = d.handle_irq();
    assert_eq!(status, int::ERROR);
    assert_eq!(code, expect);
    assert_eq!(
        d.r.read(reg::Q_CONTROL, 4) as u32 & control::HALT,
        0,
        "flush lifts halt"
    );
    d.r.assert_guards_intact();
    d.r.assert_ro_untouched();
    // Keeps serving.
    d.r.poke(SRC, &pattern(128, 4));
    d.submit(cmd(DW0, 128, SRC, DST), true);
    assert_eq!(d.r.wait_irq(0), 1);
    assert_eq!(d.handle_irq(), (int::COMPLETION, 0));
    assert_eq!(d.r.peek(DST, 128), pattern(128, 4));
}

#[test]
fn errors_are_reported_in_queue_status() {
    failing(cmd(0x0010_0012, 64, SRC, DST), error::ILLEGAL_ENGINE);
    failing(
        cmd(DW0 | (1 << 5), 64, SRC, DST),
        error::ILLEGAL_FUNCTION_TYPE,
    );
    failing(cmd(DW0, 0, SRC, DST), error::ILLEGAL_BUFFER_LENGTH);
    failing(cmd(DW0, 64, 0xffff_0000_0000, DST), error::ILLEGAL_MEM_ADDR);
    failing(
        cmd(DW0, 64, SRC, LOW + LOW_SIZE - 16),
        error::ILLEGAL_MEM_ADDR,
    );
    failing(cmd(DW0, 64, SRC, RO), error::ILLEGAL_MEM_ADDR);
    failing(cmd(DW0, u32::MAX, SRC, DST), error::ILLEGAL_MEM_ADDR);
    let mut sel = cmd(DW0, 64, SRC, DST);
    sel[14] = 1; // src memory type 1
    failing(sel, error::ILLEGAL_MEM_SEL);
}

#[test]
fn queue_outside_guest_ram_is_an_address_error() {
    let r = Rig::new(DeviceKind::Ptdma);
    r.write(reg::Q_INT_ENABLE, 4, 3);
    r.write(reg::Q_HEAD_LO, 4, 0x4000_0000);
    r.write(reg::Q_TAIL_LO, 4, 0x4000_0020);
    r.write(reg::Q_CONTROL, 4, u64::from(QSIZE | control::RUN));
    assert_eq!(r.wait_irq(0), 1);
    assert_eq!(r.read(reg::Q_STATUS, 4) as u32, error::ILLEGAL_MEM_ADDR);
}

#[test]
fn stopping_and_reset_mid_transfer() {
    use vfio_user::ServerBackend;
    let mut d = Driver::init();
    // 31 queued 1 MiB copies; RUN cleared at once, then a device reset.
    d.r.poke(SRC, &pattern(1 << 20, 5));
    for _ in 0..31 {
        d.submit(cmd(DW0, 1 << 20, SRC, DST), true);
    }
    d.r.write(reg::Q_CONTROL, 4, u64::from(d.qcontrol));
    d.r.backend.reset().expect("reset");
    assert_eq!(d.r.read(reg::Q_CONTROL, 4), 0);
    assert_eq!(head(&d.r), 0);
    d.r.poke(DST, &[0; 64]);
    settle();
    assert_eq!(d.r.peek(DST, 64), vec![0; 64], "no data moved after reset");
    d.r.assert_guards_intact();
}

/// With Bus Master Enable clear a submitted command moves nothing and sends no interrupt: the
/// queue halts with ILLEGAL_MEM_ADDR (the command could not be fetched). After bus mastering
/// is set again and the queue flushed, the same command runs.
#[test]
fn nothing_moves_while_bus_master_is_clear() {
    use lab_dma::pci_config::command;
    let mut d = Driver::init();
    d.r.set_command(command::MEMORY);
    d.r.poke(SRC, &pattern(0x1000, 6));
    d.submit(cmd(DW0, 0x1000, SRC, DST), true);
    assert!(eventually(|| d.r.read(reg::Q_CONTROL, 4) as u32
        & control::HALT
        != 0));
    assert_eq!(d.r.read(reg::Q_STATUS, 4) as u32, error::ILLEGAL_MEM_ADDR);
    assert_eq!(d.r.read(reg::Q_INT_STATUS, 4) as u32, int::ERROR);
    settle();
    assert_eq!(d.r.peek(DST, 0x1000), vec![0; 0x1000], "data moved");
    assert_eq!(d.r.irq_count(0), 0, "MSI-X sent without bus mastering");
    // Rebind: bus master on, the queue restarts at the failed slot.
    d.r.set_command(ENABLED);
    d.r.write(reg::Q_INT_STATUS, 4, 3);
    d.r.write(reg::Q_HEAD_LO, 4, Q & 0xffff_ffff);
    assert!(eventually(|| head(&d.r) == (Q + 32) & 0xffff_ffff));
    assert_eq!(d.r.peek(DST, 0x1000), pattern(0x1000, 6));
    assert_eq!(d.r.wait_irq(0), 1);
}

/// Fills every slot of the ring with a good small copy, so an endless walk would never fault.
fn fill_ring(d: &Driver) {
    d.r.poke(SRC, &pattern(64, 2));
    for slot in 0..32 {
        d.r.poke(Q + 32 * slot, &cmd(0x0050_0010, 64, SRC, DST));
    }
}

/// A TAIL that HEAD never reaches (outside the ring, or not on a slot) is a queue error: the
/// queue halts with ILLEGAL_MEM_ADDR before executing anything, instead of walking the ring
/// until the guest stops it.
#[test]
fn an_unreachable_tail_is_a_queue_error() {
    for tail in [Q + 0x1_0000, Q + 8, Q + 32 * 32] {
        let mut d = Driver::init();
        fill_ring(&d);
        d.r.write(reg::Q_TAIL_LO, 4, tail & 0xffff_ffff);
        d.r.write(reg::Q_CONTROL, 4, u64::from(d.qcontrol | control::RUN));
        assert!(
            eventually(|| d.r.read(reg::Q_CONTROL, 4) as u32 & control::HALT != 0),
            "tail {tail:#x}: the queue kept running"
        );
        assert_eq!(d.r.read(reg::Q_STATUS, 4) as u32, error::ILLEGAL_MEM_ADDR);
        assert_eq!(head(&d.r), Q & 0xffff_ffff, "nothing executed");
        assert_eq!(d.r.peek(DST, 64), vec![0; 64]);
        // The driver's flush (HEAD := TAIL) leaves an idle queue.
        assert_eq!(d.handle_irq(), (int::ERROR, error::ILLEGAL_MEM_ADDR));
        d.r.write(reg::Q_HEAD_LO, 4, tail & 0xffff_ffff);
        settle();
        assert_eq!(d.r.read(reg::Q_CONTROL, 4) as u32 & control::HALT, 0);
    }
}

/// Guest address of a 4 GiB window made of 64 aliases of one 64 MiB memfd (4 GiB of guest
/// address space for 64 MiB of host memory).
const BIG: u64 = 0x100_0000_0000;
const ALIAS: u64 = 64 << 20;

fn map_big(d: &mut Driver) -> std::fs::File {
    use std::os::unix::fs::FileExt;
    use vfio_user::{DmaMapFlags, ServerBackend};
    let f = memfd();
    f.set_len(ALIAS).expect("size");
    f.write_all_at(&pattern(4096, 1), 0).expect("fill");
    for i in 0..64 {
        let fd = f.try_clone().expect("dup");
        d.r.backend
            .dma_map(DmaMapFlags::READ_WRITE, 0, BIG + i * ALIAS, ALIAS, Some(fd))
            .expect("map alias");
    }
    f
}

/// Submits one command copying almost 4 GiB inside the aliased window and waits until its
/// first burst has landed.
fn start_huge_copy(d: &mut Driver, f: &std::fs::File) {
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[0; 16], 0x1000).expect("clear dst");
    d.submit(cmd(DW0, 0xffff_f000, BIG, BIG + 0x1000), true);
    let mut b = [0u8; 1];
    assert!(
        eventually(|| {
            f.read_exact_at(&mut b, 0x1000).expect("dst");
            b[0] != 0
        }),
        "huge copy started"
    );
}

/// Times one register access.
fn timed(f: impl FnOnce()) -> std::time::Duration {
    let t = std::time::Instant::now();
    f();
    t.elapsed()
}

/// A command may ask for 4 GiB. While it runs, register reads answer at once, and a HEAD
/// write (the driver's flush), clearing RUN and a device reset each take the queue off it
/// within one burst instead of waiting for the whole copy (seconds).
#[test]
fn a_four_gib_command_does_not_hold_up_the_register_thread() {
    use vfio_user::ServerBackend;
    const QUICK: std::time::Duration = std::time::Duration::from_millis(150);
    let mut d = Driver::init();
    let f = map_big(&mut d);

    start_huge_copy(&mut d, &f);
    assert!(timed(|| assert_eq!(d.r.read(reg::Q_STATUS, 4), 0)) < QUICK);
    let flush = (Q + 32 * d.qidx) & 0xffff_ffff;
    let t = timed(|| d.r.write(reg::Q_HEAD_LO, 4, flush));
    assert!(t < QUICK, "HEAD write waited {t:?}");

    start_huge_copy(&mut d, &f);
    let t = timed(|| d.r.write(reg::Q_CONTROL, 4, u64::from(d.qcontrol)));
    assert!(t < QUICK, "RUN clear waited {t:?}");
    assert_eq!(head(&d.r), flush, "a stopped command keeps HEAD");
    let before = d.r.peek_file(0, 1 << 20, &f);
    settle();
    assert_eq!(
        d.r.peek_file(0, 1 << 20, &f),
        before,
        "data moved after RUN clear"
    );

    d.r.write(reg::Q_CONTROL, 4, u64::from(d.qcontrol | control::RUN));
    let t = timed(|| d.r.backend.reset().expect("reset"));
    assert!(t < QUICK, "device reset waited {t:?}");
    assert_eq!(head(&d.r), 0);
}
