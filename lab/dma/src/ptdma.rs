//! AMD PassThru DMA (PTDMA, 1022:1498) as the Linux `ptdma` driver sees it: one command queue
//! of 32-byte descriptors in guest memory, registers in BAR2, MSI-X vector 0. Register
//! semantics follow DEVICES.md section 2.
//!
//! A worker thread executes commands from HEAD to TAIL while the queue runs, moving data in
//! bursts ([`crate::guest_ram::BURST`]). A command may ask for up to 4 GiB, so register writes
//! that take the queue away from it (RUN cleared, HEAD rewritten, reset) stop it at the next
//! burst instead of waiting for it: the vfio-user thread waits for one burst at most. A TAIL that
//! HEAD can never reach (misaligned, or outside the ring HEAD walks) is a queue error, not an
//! endless walk round the ring. The interrupt rule
//! is edge based: vector 0 fires whenever (INT_STATUS & INT_ENABLE) goes from zero to non-zero,
//! whether a status bit is set or INT_ENABLE is written, because the driver's handler disables,
//! submits the next command and re-enables.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::bar::{split_write, Reg};
use crate::device::Device;
use crate::guest_ram::{CopyError, GuestRam};
use crate::msix::Vectors;
use crate::pci_config::{BarSpec, Identity, MsixSpec};

/// BAR2 size: registers up to 0x6007, MSI-X table at 0x8000, PBA at 0x9000.
pub const BAR_SIZE: u64 = 64 * 1024;
/// The BAR holding the registers.
pub const BAR_INDEX: u8 = 2;
/// Bytes per command descriptor.
pub const DESC_SIZE: u64 = 32;
/// CMD_PT_VERSION: version 1, one queue (bits 18:15).
pub const VERSION: u32 = (1 << 15) | 1;

/// Register offsets in BAR2.
pub mod reg {
    pub const QUEUE_PRIO: u64 = 0x0000;
    pub const REQID_CONFIG: u64 = 0x0004;
    pub const TIMEOUT: u64 = 0x0008;
    pub const PT_VERSION: u64 = 0x0010;
    pub const IRQ_MASK: u64 = 0x0040;
    pub const Q_CONTROL: u64 = 0x1000;
    pub const Q_TAIL_LO: u64 = 0x1004;
    pub const Q_HEAD_LO: u64 = 0x1008;
    pub const Q_INT_ENABLE: u64 = 0x100c;
    pub const Q_INT_STATUS: u64 = 0x1010;
    pub const Q_STATUS: u64 = 0x1100;
    pub const Q_INT_STATUS_RO: u64 = 0x1104;
    pub const CMD_CONFIG: u64 = 0x1120;
    pub const CLK_GATE_CTL: u64 = 0x6004;
}

/// Q_CONTROL bits.
pub mod control {
    pub const RUN: u32 = 1 << 0;
    pub const HALT: u32 = 1 << 1;
    pub const SIZE_SHIFT: u32 = 3;
    pub const SIZE_MASK: u32 = 0x1f;
}

/// Q_INTERRUPT_STATUS / Q_INT_ENABLE bits.
pub mod int {
    pub const COMPLETION: u32 = 1 << 0;
    pub const ERROR: u32 = 1 << 1;
}

/// Error codes reported in Q_STATUS[5:0] (all <= 0x19, the size of the driver's string table).
pub mod error {
    pub const ILLEGAL_ENGINE: u32 = 0x01;
    pub const ILLEGAL_FUNCTION_TYPE: u32 = 0x03;
    pub const ILLEGAL_BUFFER_LENGTH: u32 = 0x09;
    /// Also reported when TAIL or HEAD is not a slot of the ring (HEAD could never reach TAIL).
    pub const ILLEGAL_MEM_ADDR: u32 = 0x0b;
    pub const ILLEGAL_MEM_SEL: u32 = 0x0c;
}

const ENGINE_PASSTHRU: u32 = 5;

const REGS: &[Reg] = &[
    Reg::new(reg::QUEUE_PRIO, 4),
    Reg::new(reg::REQID_CONFIG, 4),
    Reg::new(reg::TIMEOUT, 4),
    Reg::new(reg::IRQ_MASK, 4),
    Reg::new(reg::Q_CONTROL, 4),
    Reg::new(reg::Q_TAIL_LO, 4),
    Reg::new(reg::Q_HEAD_LO, 4),
    Reg::new(reg::Q_INT_ENABLE, 4),
    Reg::new(reg::Q_INT_STATUS, 4),
    Reg::new(reg::CMD_CONFIG, 4),
    Reg::new(reg::CLK_GATE_CTL, 4),
];

#[derive(Debug, Default, Clone)]
struct QueueState {
    /// Q_CONTROL as written (HALT is reported from `halted`).
    control: u32,
    halted: bool,
    tail: u32,
    head: u32,
    int_enable: u32,
    int_status: u32,
    q_status: u32,
    prio: u32,
    reqid: u32,
    timeout: u32,
    irq_mask: u32,
    config: u32,
    clk_gate: u32,
    busy: bool,
    /// A register write is waiting for the worker to let go; no new command starts meanwhile
    /// (the wait releases the lock, and the worker would otherwise win it back).
    held: bool,
    shutdown: bool,
}

impl QueueState {
    fn runnable(&self) -> bool {
        self.control & control::RUN != 0 && !self.halted && !self.held && self.head != self.tail
    }

    /// Guest address of the command at HEAD: Q_CONTROL[31:16] supplies bits 47:32.
    fn head_addr(&self) -> u64 {
        (u64::from(self.control >> 16) << 32) | u64::from(self.head)
    }

    /// Bytes in the ring: 2^(size+1) entries of 32 bytes (at most 2^37, so no overflow).
    fn ring_bytes(&self) -> u64 {
        let size = (self.control >> control::SIZE_SHIFT) & control::SIZE_MASK;
        DESC_SIZE << (size + 1)
    }

    /// HEAD advanced by one slot, wrapping inside the queue (2^(size+1) entries, aligned).
    fn next_head(&self) -> u32 {
        let bytes = self.ring_bytes();
        let head = u64::from(self.head);
        let base = head & !(bytes - 1);
        (base | (head.wrapping_add(DESC_SIZE) & (bytes - 1))) as u32
    }

    /// True when walking from HEAD reaches TAIL: both are slots of the same ring. Otherwise the
    /// engine would execute the ring round and round until the guest stopped it.
    fn tail_reachable(&self) -> bool {
        let bytes = self.ring_bytes();
        let (head, tail) = (u64::from(self.head), u64::from(self.tail));
        head.is_multiple_of(DESC_SIZE)
            && tail.is_multiple_of(DESC_SIZE)
            && head & !(bytes - 1) == tail & !(bytes - 1)
    }
}

struct Shared {
    ram: GuestRam,
    vectors: Arc<Vectors>,
    st: Mutex<QueueState>,
    cv: Condvar,
    /// Set (under the lock) by a register write that takes the queue away from the command in
    /// flight; the worker's copy stops at the next burst. Cleared when a command starts.
    stop: AtomicBool,
}

/// Why a command did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// An error code for Q_STATUS.
    Code(u32),
    /// Abandoned at a burst boundary on request; HEAD stays, so it runs again from the start
    /// when the queue does.
    Stopped,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // Poisoning only follows a panic elsewhere; the state is plain data and still usable.
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn idle<'a>(&self, mut st: MutexGuard<'a, QueueState>) -> MutexGuard<'a, QueueState> {
        while st.busy {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st
    }

    /// Changes INT_STATUS / INT_ENABLE through `f` and fires vector 0 on a rising edge of
    /// their intersection.
    fn update_irq(&self, st: &mut QueueState, f: impl FnOnce(&mut QueueState)) {
        let before = st.int_status & st.int_enable;
        f(st);
        let after = st.int_status & st.int_enable;
        if before == 0 && after != 0 && !self.vectors.signal(0) {
            tracing::debug!("PTDMA interrupt with no MSI-X vector wired");
        }
    }

    /// Stops the command in flight at its next burst and waits for the worker to let go.
    fn halt_worker<'a>(&self, mut st: MutexGuard<'a, QueueState>) -> MutexGuard<'a, QueueState> {
        st.held = true;
        self.stop.store(true, Ordering::Release);
        let mut st = self.idle(st);
        st.held = false;
        st
    }

    /// Executes the command at `addr`; returns dw0, or why it did not complete.
    fn execute(&self, addr: u64) -> Result<u32, Failed> {
        self.run(addr)
            .map_err(|e| match e {
                CopyError::Stopped { .. } => Failed::Stopped,
                CopyError::Fault(_) => Failed::Code(error::ILLEGAL_MEM_ADDR),
            })?
            .map_err(Failed::Code)
    }

    /// The command itself: guest-memory faults and stops in the outer result, command errors
    /// (codes) in the inner one.
    fn run(&self, addr: u64) -> Result<Result<u32, u32>, CopyError> {
        let mut raw = [0u8; DESC_SIZE as usize];
        self.ram.read(addr, &mut raw)?;
        let w = |i: usize| {
            u32::from_le_bytes([raw[4 * i], raw[4 * i + 1], raw[4 * i + 2], raw[4 * i + 3]])
        };
        let (dw0, len, src_lo, dw3, dst_lo, dw5) = (w(0), w(1), w(2), w(3), w(4), w(5));
        if (dw0 >> 20) & 0xf != ENGINE_PASSTHRU {
            return Ok(Err(error::ILLEGAL_ENGINE));
        }
        // Function 0: plain copy (no bitwise operation, no byte swap).
        if (dw0 >> 5) & 0x7fff != 0 {
            return Ok(Err(error::ILLEGAL_FUNCTION_TYPE));
        }
        // Memory type 0 = system memory; the local storage block is not modelled.
        if (dw3 >> 16) & 3 != 0 || (dw5 >> 16) & 3 != 0 {
            return Ok(Err(error::ILLEGAL_MEM_SEL));
        }
        if len == 0 {
            return Ok(Err(error::ILLEGAL_BUFFER_LENGTH));
        }
        let src = u64::from(src_lo) | (u64::from(dw3 & 0xffff) << 32);
        let dst = u64::from(dst_lo) | (u64::from(dw5 & 0xffff) << 32);
        self.ram.copy_until(src, dst, u64::from(len), || {
            self.stop.load(Ordering::Acquire)
        })?;
        Ok(Ok(dw0))
    }

    /// Halts the queue with `code` in Q_STATUS and raises the error interrupt.
    fn fail(&self, st: &mut QueueState, code: u32) {
        tracing::debug!(head = st.head, tail = st.tail, code, "PTDMA queue error");
        st.q_status = code & 0x3f;
        st.halted = true;
        self.update_irq(st, |s| s.int_status |= int::ERROR);
    }

    fn finish(&self, st: &mut QueueState, outcome: Result<u32, Failed>) {
        match outcome {
            Ok(dw0) => {
                st.head = st.next_head();
                // SOC (stop on completion) is reported like IOC; the driver turns it into IOC.
                if dw0 & 0b11 != 0 {
                    self.update_irq(st, |s| s.int_status |= int::COMPLETION);
                }
            }
            Err(Failed::Code(code)) => self.fail(st, code),
            Err(Failed::Stopped) => {
                tracing::debug!(head = st.head, "PTDMA command stopped mid-copy");
            }
        }
    }

    fn worker(&self) {
        let mut st = self.lock();
        loop {
            while !st.shutdown && !st.runnable() {
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.shutdown {
                return;
            }
            if !st.tail_reachable() {
                self.fail(&mut st, error::ILLEGAL_MEM_ADDR);
                continue;
            }
            let addr = st.head_addr();
            st.busy = true;
            self.stop.store(false, Ordering::Release);
            drop(st);
            let outcome = self.execute(addr);
            st = self.lock();
            self.finish(&mut st, outcome);
            st.busy = false;
            self.cv.notify_all();
        }
    }

    fn value(st: &QueueState, off: u64) -> u32 {
        match off {
            reg::QUEUE_PRIO => st.prio,
            reg::REQID_CONFIG => st.reqid,
            reg::TIMEOUT => st.timeout,
            reg::PT_VERSION => VERSION,
            reg::IRQ_MASK => st.irq_mask,
            reg::Q_CONTROL => st.control | if st.halted { control::HALT } else { 0 },
            reg::Q_TAIL_LO => st.tail,
            reg::Q_HEAD_LO => st.head,
            reg::Q_INT_ENABLE => st.int_enable,
            reg::Q_INT_STATUS => st.int_status,
            reg::Q_STATUS => st.q_status,
            reg::CMD_CONFIG => st.config,
            reg::CLK_GATE_CTL => st.clk_gate,
            // Q_INT_STATUS_RO, DMA status, IRQ_STATUS and everything else read as 0.
            _ => 0,
        }
    }
}

/// The PTDMA function: one queue and its worker thread.
pub struct Ptdma {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

impl Ptdma {
    pub fn new(ram: GuestRam, vectors: Arc<Vectors>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            ram,
            vectors,
            st: Mutex::new(QueueState::default()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("ptdma-q0".into())
            .spawn(move || s.worker())?;
        Ok(Self {
            shared,
            worker: Some(worker),
        })
    }

    /// MSI-X vectors the function advertises (the driver uses exactly one).
    pub const VECTORS: usize = 1;

    pub fn identity_static() -> Identity {
        Identity {
            vendor: 0x1022,
            device: 0x1498,
            revision: 0,
            class: 0x088000,
            subsystem_vendor: 0x1022,
            subsystem: 0x1498,
            bar: BarSpec {
                index: BAR_INDEX,
                size: BAR_SIZE,
                is_64bit: false,
            },
            msix: MsixSpec {
                vectors: Self::VECTORS as u16,
                bar: BAR_INDEX,
                table_offset: 0x8000,
                pba_offset: 0x9000,
            },
        }
    }
}

impl Device for Ptdma {
    fn identity(&self) -> Identity {
        Self::identity_static()
    }

    fn read(&self, offset: u64, data: &mut [u8]) {
        let st = self.shared.lock();
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset.wrapping_add(i as u64);
            let dword = Shared::value(&st, at & !3);
            *byte = (dword >> ((at & 3) * 8)) as u8;
        }
    }

    fn write(&self, offset: u64, data: &[u8]) {
        let sh = &self.shared;
        for w in split_write(REGS, offset, data) {
            let mut st = sh.lock();
            let off = REGS[w.index].offset;
            let v = w.merge(u64::from(Shared::value(&st, off))) as u32;
            match off {
                reg::QUEUE_PRIO => st.prio = v,
                reg::REQID_CONFIG => st.reqid = v,
                reg::TIMEOUT => st.timeout = v,
                reg::IRQ_MASK => st.irq_mask = v,
                reg::CMD_CONFIG => st.config = v,
                reg::CLK_GATE_CTL => st.clk_gate = v,
                reg::Q_CONTROL => {
                    // Clearing RUN takes the queue off the command in flight (the driver does
                    // it before freeing the queue); setting it again re-runs that command.
                    if v & control::RUN == 0 {
                        st = sh.halt_worker(st);
                    }
                    st.control = v & !control::HALT;
                }
                reg::Q_TAIL_LO => st.tail = v,
                reg::Q_HEAD_LO => {
                    // Software repositions the queue (the driver's error flush); this also
                    // lifts a halt and abandons the command in flight.
                    st = sh.halt_worker(st);
                    st.head = v;
                    st.halted = false;
                }
                reg::Q_INT_ENABLE => sh.update_irq(&mut st, |s| s.int_enable = v),
                reg::Q_INT_STATUS => {
                    // Write-1-to-clear; the merge above used the current value, so take the
                    // written bytes only.
                    let clear = w.merge(0) as u32;
                    st.int_status &= !clear;
                }
                _ => {}
            }
            sh.cv.notify_all();
        }
    }

    fn reset(&self) {
        let sh = &self.shared;
        let st = sh.lock();
        let mut st = sh.halt_worker(st);
        let shutdown = st.shutdown;
        *st = QueueState::default();
        st.shutdown = shutdown;
        sh.cv.notify_all();
    }
}

impl Drop for Ptdma {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.lock().shutdown = true;
        self.shared.cv.notify_all();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}
