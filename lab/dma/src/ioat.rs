//! Intel I/OAT (QuickData / CBDMA) engine as the Linux `ioatdma` driver sees it: identity
//! 8086:0b00 (ICX), CBVER 3.4, memcpy and null descriptors only, 1 to 4 channels with one
//! MSI-X vector each. Register semantics follow DEVICES.md section 1.
//!
//! Each channel has a worker thread that walks the descriptor chain. MMIO handlers run on the
//! vfio-user thread and update status synchronously (DMACOUNT makes the channel ACTIVE before
//! the write returns). Commands that change the chain (RESET, SUSPEND, CHAINADDR) first wait
//! for the descriptor in flight to finish, so no data moves after they return.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::bar::{put, read_image, split_write, touches, Reg};
use crate::device::Device;
use crate::guest_ram::{Fault, GuestRam};
use crate::msix::Vectors;
use crate::pci_config::{BarSpec, Identity, MsixSpec};

/// Most channels the driver supports per function.
pub const MAX_CHANNELS: usize = 4;
/// BAR0 size: registers at 0x000-0x2ff, MSI-X table at 0x2000, PBA at 0x3000.
pub const BAR_SIZE: u64 = 16 * 1024;
/// log2 of the largest transfer one descriptor may carry (1 MiB).
pub const XFERCAP_LOG2: u8 = 20;
/// CBVER: I/OAT 3.4.
pub const CBVER: u8 = 0x34;
/// Bytes per descriptor; descriptors are 64-byte aligned.
pub const DESC_SIZE: u64 = 64;
const BLOCK: u64 = 0x80;

/// CHANSTS / completion-word states (bits 2:0).
pub mod state {
    pub const ACTIVE: u64 = 0;
    pub const DONE: u64 = 1;
    pub const SUSPENDED: u64 = 2;
    pub const HALTED: u64 = 3;
    pub const MASK: u64 = 7;
    /// Bits 63:6 hold the address of the last completed descriptor.
    pub const ADDR_MASK: u64 = !0x3f;
}

/// CHANERR bits this model reports.
pub mod chanerr {
    pub const NEXT_DESC_ADDR: u32 = 1 << 2;
    pub const NEXT_DESC_ALIGN: u32 = 1 << 3;
    /// Source outside guest RAM; the driver's error handler recovers from this one.
    pub const READ_DATA: u32 = 1 << 8;
    /// Destination outside guest RAM; the driver's error handler recovers from this one.
    pub const WRITE_DATA: u32 = 1 << 9;
    pub const DESC_CONTROL: u32 = 1 << 10;
    pub const LENGTH: u32 = 1 << 11;
    pub const COMPLETION_ADDR: u32 = 1 << 12;
}

/// Channel register offsets, relative to the channel block (0x80 * (i + 1)).
pub mod reg {
    pub const CHANCTRL: u64 = 0x00;
    pub const CHANCMD: u64 = 0x04;
    pub const DMACOUNT: u64 = 0x06;
    pub const CHANSTS: u64 = 0x08;
    pub const CHAINADDR: u64 = 0x10;
    pub const CHAINADDR_HI: u64 = 0x14;
    pub const CHANCMP: u64 = 0x18;
    pub const CHANCMP_HI: u64 = 0x1c;
    pub const CDAR: u64 = 0x20;
    pub const CHANERR: u64 = 0x28;
    pub const CHANERR_MASK: u64 = 0x2c;
    pub const DCACTRL: u64 = 0x30;
    /// Global registers (BAR0-relative).
    pub const CHANCNT: u64 = 0x00;
    pub const XFERCAP: u64 = 0x01;
    pub const INTRCTRL: u64 = 0x03;
    pub const ATTNSTATUS: u64 = 0x04;
    pub const CBVER: u64 = 0x08;
    pub const INTRDELAY: u64 = 0x0c;
    pub const DMACAPABILITY: u64 = 0x10;
}

/// CHANCTRL bits.
pub mod chanctrl {
    pub const INT_REARM: u16 = 1 << 0;
    pub const ERR_COMPLETION_EN: u16 = 1 << 2;
    pub const ERR_INT_EN: u16 = 1 << 4;
}

/// CHANCMD bits.
pub mod chancmd {
    pub const SUSPEND: u8 = 1 << 2;
    pub const ABORT: u8 = 1 << 3;
    pub const RESUME: u8 = 1 << 4;
    pub const RESET: u8 = 1 << 5;
}

/// Descriptor control bits.
pub mod ctl {
    pub const INT_EN: u32 = 1 << 0;
    pub const COMPL_WRITE: u32 = 1 << 3;
    pub const NULL: u32 = 1 << 5;
    pub const OP_SHIFT: u32 = 24;
    pub const OP_COPY: u32 = 0;
}

/// INTRCTRL bits.
mod intrctrl {
    pub const MASTER_INT_EN: u8 = 1 << 0;
    pub const INT_STATUS: u8 = 1 << 1;
    pub const INT: u8 = 1 << 2;
    pub const MSIX_VECTOR_CONTROL: u8 = 1 << 3;
}

const GLOBAL_REGS: &[Reg] = &[
    Reg::new(reg::INTRCTRL, 1),
    Reg::new(reg::INTRDELAY, 2),
    Reg::new(0x4c, 1), // PREFETCH_LIMIT: only written when CAP.DPS, which is not advertised
];

const CHAN_REGS: &[Reg] = &[
    Reg::new(reg::CHANCTRL, 2),
    Reg::new(reg::CHANCMD, 1),
    Reg::new(reg::DMACOUNT, 2),
    Reg::new(reg::CHAINADDR, 4),
    Reg::new(reg::CHAINADDR_HI, 4),
    Reg::new(reg::CHANCMP, 4),
    Reg::new(reg::CHANCMP_HI, 4),
    Reg::new(reg::CHANERR, 4),
    Reg::new(reg::CHANERR_MASK, 4),
    Reg::new(reg::DCACTRL, 4),
];

/// State of one channel, guarded by the channel mutex.
#[derive(Debug, Default, Clone)]
struct ChanState {
    chanctrl: u16,
    /// CHANSTS: last completed descriptor address | state.
    chansts: u64,
    chainaddr: u64,
    chancmp: u64,
    /// Next descriptor the engine will fetch (CDAR).
    cur: u64,
    done_cnt: u16,
    dmacount: u16,
    chanerr: u32,
    chanerr_mask: u32,
    dcactrl: u32,
    /// Interrupt armed by a CHANCTRL write with INT_REARM.
    armed: bool,
    /// An interrupt was requested while not armed; delivered at the next re-arm.
    pending: bool,
    /// The worker is executing a descriptor outside the lock.
    busy: bool,
    /// A register write is waiting for that descriptor; the worker starts no other meanwhile
    /// (the wait releases the lock, and the worker would otherwise win it back every time).
    held: bool,
    shutdown: bool,
}

impl ChanState {
    fn power_on() -> Self {
        Self {
            chansts: state::HALTED,
            ..Self::default()
        }
    }

    fn state(&self) -> u64 {
        self.chansts & state::MASK
    }

    fn set_state(&mut self, s: u64) {
        self.chansts = (self.chansts & state::ADDR_MASK) | s;
    }

    fn runnable(&self) -> bool {
        self.state() == state::ACTIVE
            && self.done_cnt != self.dmacount
            && self.chanerr == 0
            && !self.held
    }

    /// CHANCMD RESET: abandon the chain, clear errors and addresses, read back HALTED with
    /// address 0 (what real hardware shows). CHANCTRL, and with it the interrupt arm, survives:
    /// the driver's timer-driven recovery resets and restarts without re-arming.
    fn channel_reset(&mut self) {
        self.chansts = state::HALTED;
        self.chainaddr = 0;
        self.chancmp = 0;
        self.cur = 0;
        self.done_cnt = 0;
        self.dmacount = 0;
        self.chanerr = 0;
        self.pending = false;
    }
}

struct Channel {
    st: Mutex<ChanState>,
    cv: Condvar,
}

impl Channel {
    fn lock(&self) -> MutexGuard<'_, ChanState> {
        // Poisoning only follows a panic elsewhere; the state is plain data and still usable.
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no descriptor is in flight (at most the one executing now).
    fn idle<'a>(&self, mut st: MutexGuard<'a, ChanState>) -> MutexGuard<'a, ChanState> {
        st.held = true;
        while st.busy {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.held = false;
        st
    }
}

struct Shared {
    ram: GuestRam,
    vectors: Arc<Vectors>,
    channels: Vec<Channel>,
    intrctrl: AtomicU8,
    attn: AtomicU32,
    intrdelay: AtomicU16,
}

/// What executing one descriptor produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Executed {
    ctl: u32,
    next: u64,
}

impl Shared {
    fn interrupts_enabled(&self) -> bool {
        let v = self.intrctrl.load(Ordering::Acquire);
        v & (intrctrl::MASTER_INT_EN | intrctrl::MSIX_VECTOR_CONTROL) != 0
    }

    /// Requests channel `i`'s interrupt: delivered now if armed, else latched until re-arm.
    fn raise(&self, i: usize, st: &mut ChanState) {
        self.attn.fetch_or(1 << i, Ordering::AcqRel);
        if st.armed && self.interrupts_enabled() && self.vectors.signal(i) {
            st.armed = false;
            st.pending = false;
        } else {
            st.pending = true;
        }
    }

    fn rearm(&self, i: usize, st: &mut ChanState) {
        st.armed = true;
        if st.pending && self.interrupts_enabled() && self.vectors.signal(i) {
            st.armed = false;
            st.pending = false;
        }
    }

    /// Fetches and executes the descriptor at `addr`. Runs without the channel lock.
    fn execute(&self, addr: u64) -> Result<Executed, u32> {
        if !addr.is_multiple_of(DESC_SIZE) {
            return Err(chanerr::NEXT_DESC_ALIGN);
        }
        let mut raw = [0u8; DESC_SIZE as usize];
        self.ram
            .read(addr, &mut raw)
            .map_err(|_| chanerr::NEXT_DESC_ADDR)?;
        let word = |o: usize| u32::from_le_bytes([raw[o], raw[o + 1], raw[o + 2], raw[o + 3]]);
        let quad = |o: usize| u64::from(word(o)) | (u64::from(word(o + 4)) << 32);
        let size = word(0x00);
        let ctl = word(0x04);
        let (src, dst, next) = (quad(0x08), quad(0x10), quad(0x18));
        if ctl >> ctl::OP_SHIFT != ctl::OP_COPY {
            return Err(chanerr::DESC_CONTROL);
        }
        // The driver's null descriptors carry size 1 because the hardware rejects size 0.
        if size == 0 || u64::from(size) > 1u64 << XFERCAP_LOG2 {
            return Err(chanerr::LENGTH);
        }
        if ctl & ctl::NULL == 0 {
            self.ram
                .copy(src, dst, u64::from(size))
                .map_err(|f| match f {
                    Fault::Read { .. } => chanerr::READ_DATA,
                    Fault::Write { .. } => chanerr::WRITE_DATA,
                })?;
        }
        Ok(Executed { ctl, next })
    }

    /// Applies the outcome of the descriptor at `addr` to channel `i` (lock held).
    fn finish(&self, i: usize, st: &mut ChanState, addr: u64, outcome: Result<Executed, u32>) {
        match outcome {
            Ok(done) => {
                st.done_cnt = st.done_cnt.wrapping_add(1);
                st.cur = done.next;
                let s = if st.done_cnt == st.dmacount {
                    state::DONE
                } else {
                    state::ACTIVE
                };
                st.chansts = (addr & state::ADDR_MASK) | s;
                if done.ctl & ctl::COMPL_WRITE != 0
                    && self.ram.store_u64(st.chancmp, st.chansts).is_err()
                {
                    tracing::debug!(
                        channel = i,
                        chancmp = st.chancmp,
                        "completion address fault"
                    );
                    self.fail(i, st, chanerr::COMPLETION_ADDR);
                    return;
                }
                if done.ctl & ctl::INT_EN != 0 {
                    self.raise(i, st);
                }
            }
            Err(bits) => {
                tracing::debug!(channel = i, desc = addr, chanerr = bits, "descriptor error");
                self.fail(i, st, bits);
            }
        }
    }

    /// Halts channel `i` with `bits` in CHANERR. The completion word keeps the last completed
    /// descriptor's address, which is what `ioat_eh` expects (it treats the descriptor after
    /// that one as the failing one).
    fn fail(&self, i: usize, st: &mut ChanState, bits: u32) {
        st.chanerr |= bits;
        st.set_state(state::HALTED);
        if st.chanctrl & chanctrl::ERR_COMPLETION_EN != 0 {
            // Nothing more to report if the completion address itself is bad.
            let _ = self.ram.store_u64(st.chancmp, st.chansts);
        }
        if st.chanctrl & chanctrl::ERR_INT_EN != 0 {
            self.raise(i, st);
        }
    }

    fn worker(&self, i: usize) {
        let ch = &self.channels[i];
        let mut st = ch.lock();
        loop {
            while !st.shutdown && !st.runnable() {
                st = ch.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.shutdown {
                return;
            }
            let addr = st.cur;
            st.busy = true;
            drop(st);
            let outcome = self.execute(addr);
            st = ch.lock();
            self.finish(i, &mut st, addr, outcome);
            st.busy = false;
            ch.cv.notify_all();
        }
    }

    fn global_image(&self, clear_attn: bool) -> [u8; BLOCK as usize] {
        let mut img = [0u8; BLOCK as usize];
        let attn = if clear_attn {
            self.attn.swap(0, Ordering::AcqRel)
        } else {
            self.attn.load(Ordering::Acquire)
        };
        let ctrl = self.intrctrl.load(Ordering::Acquire);
        let mut ic = ctrl & (intrctrl::MASTER_INT_EN | intrctrl::MSIX_VECTOR_CONTROL);
        if attn != 0 {
            ic |= intrctrl::INT_STATUS;
            if ctrl & intrctrl::MASTER_INT_EN != 0 {
                ic |= intrctrl::INT;
            }
        }
        img[reg::CHANCNT as usize] = self.channels.len() as u8;
        img[reg::XFERCAP as usize] = XFERCAP_LOG2;
        img[reg::INTRCTRL as usize] = ic;
        put(&mut img, reg::ATTNSTATUS as usize, 4, u64::from(attn));
        img[reg::CBVER as usize] = CBVER;
        put(
            &mut img,
            reg::INTRDELAY as usize,
            2,
            u64::from(self.intrdelay.load(Ordering::Acquire)),
        );
        put(&mut img, reg::DMACAPABILITY as usize, 4, 0);
        img
    }

    fn channel_image(st: &ChanState) -> [u8; BLOCK as usize] {
        let mut img = [0u8; BLOCK as usize];
        put(&mut img, reg::CHANCTRL as usize, 2, u64::from(st.chanctrl));
        put(&mut img, reg::DMACOUNT as usize, 2, u64::from(st.dmacount));
        put(&mut img, reg::CHANSTS as usize, 8, st.chansts);
        put(&mut img, reg::CHAINADDR as usize, 8, st.chainaddr);
        put(&mut img, reg::CHANCMP as usize, 8, st.chancmp);
        put(&mut img, reg::CDAR as usize, 8, st.cur);
        put(&mut img, reg::CHANERR as usize, 4, u64::from(st.chanerr));
        put(
            &mut img,
            reg::CHANERR_MASK as usize,
            4,
            u64::from(st.chanerr_mask),
        );
        put(&mut img, reg::DCACTRL as usize, 4, u64::from(st.dcactrl));
        img
    }

    fn write_global(&self, rel: u64, data: &[u8]) {
        for w in split_write(GLOBAL_REGS, rel, data) {
            match GLOBAL_REGS[w.index].offset {
                reg::INTRCTRL => {
                    let old = u64::from(self.intrctrl.load(Ordering::Acquire));
                    let v = w.merge(old) as u8;
                    // INT_STATUS is write-1-to-clear attention.
                    if v & intrctrl::INT_STATUS != 0 {
                        self.attn.store(0, Ordering::Release);
                    }
                    self.intrctrl.store(
                        v & (intrctrl::MASTER_INT_EN | intrctrl::MSIX_VECTOR_CONTROL),
                        Ordering::Release,
                    );
                }
                reg::INTRDELAY => {
                    let old = u64::from(self.intrdelay.load(Ordering::Acquire));
                    self.intrdelay
                        .store((w.merge(old) as u16) & 0x3fff, Ordering::Release);
                }
                _ => {}
            }
        }
    }

    fn write_channel(&self, i: usize, rel: u64, data: &[u8]) {
        let ch = &self.channels[i];
        for w in split_write(CHAN_REGS, rel, data) {
            let mut st = ch.lock();
            match CHAN_REGS[w.index].offset {
                reg::CHANCTRL => {
                    st.chanctrl = w.merge(u64::from(st.chanctrl)) as u16;
                    if st.chanctrl & chanctrl::INT_REARM != 0 {
                        self.rearm(i, &mut st);
                    }
                }
                reg::CHANCMD => {
                    let cmd = w.merge(0) as u8;
                    st = ch.idle(st);
                    self.command(&mut st, cmd);
                    ch.cv.notify_all();
                }
                reg::DMACOUNT => {
                    let v = w.merge(u64::from(st.dmacount)) as u16;
                    st.dmacount = v;
                    // The driver polls CHANSTS right after this write and expects ACTIVE or
                    // DONE, so the state changes here, not in the worker.
                    if st.chanerr == 0 && st.done_cnt != v && st.state() != state::ACTIVE {
                        st.set_state(state::ACTIVE);
                    }
                    ch.cv.notify_all();
                }
                off @ (reg::CHAINADDR | reg::CHAINADDR_HI) => {
                    st = ch.idle(st);
                    let shift = (off - reg::CHAINADDR) * 8;
                    let half = (st.chainaddr >> shift) & 0xffff_ffff;
                    let half = w.merge(half) & 0xffff_ffff;
                    st.chainaddr = (st.chainaddr & !(0xffff_ffffu64 << shift)) | (half << shift);
                    // A new chain: the doorbell count restarts from zero.
                    st.cur = st.chainaddr;
                    st.done_cnt = 0;
                    st.dmacount = 0;
                }
                off @ (reg::CHANCMP | reg::CHANCMP_HI) => {
                    let shift = (off - reg::CHANCMP) * 8;
                    let half = (st.chancmp >> shift) & 0xffff_ffff;
                    let half = w.merge(half) & 0xffff_ffff;
                    st.chancmp = (st.chancmp & !(0xffff_ffffu64 << shift)) | (half << shift);
                }
                reg::CHANERR => {
                    // Write-1-to-clear.
                    st.chanerr &= !(w.merge(0) as u32);
                }
                reg::CHANERR_MASK => st.chanerr_mask = w.merge(u64::from(st.chanerr_mask)) as u32,
                reg::DCACTRL => st.dcactrl = w.merge(u64::from(st.dcactrl)) as u32,
                _ => {}
            }
        }
    }

    /// CHANCMD (no descriptor in flight). Reads of CHANCMD return 0, i.e. every command
    /// completes at once.
    fn command(&self, st: &mut ChanState, cmd: u8) {
        if cmd & chancmd::RESET != 0 {
            st.channel_reset();
            return;
        }
        let s = st.state();
        if cmd & chancmd::ABORT != 0 {
            st.dmacount = st.done_cnt;
            if s != state::HALTED {
                st.set_state(state::HALTED);
            }
        } else if cmd & chancmd::SUSPEND != 0 {
            if s == state::ACTIVE || s == state::DONE {
                st.set_state(state::SUSPENDED);
            }
        } else if cmd & chancmd::RESUME != 0 && s == state::SUSPENDED {
            let next = if st.done_cnt != st.dmacount && st.chanerr == 0 {
                state::ACTIVE
            } else {
                state::DONE
            };
            st.set_state(next);
        }
    }
}

/// The I/OAT function: register file plus one worker thread per channel.
pub struct Ioat {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Ioat {
    /// A device with `channels` channels (clamped to 1..=4) that moves data in `ram` and
    /// signals through `vectors` (vector i = channel i).
    pub fn new(channels: usize, ram: GuestRam, vectors: Arc<Vectors>) -> std::io::Result<Self> {
        let n = channels.clamp(1, MAX_CHANNELS);
        let shared = Arc::new(Shared {
            ram,
            vectors,
            channels: (0..n)
                .map(|_| Channel {
                    st: Mutex::new(ChanState::power_on()),
                    cv: Condvar::new(),
                })
                .collect(),
            intrctrl: AtomicU8::new(0),
            attn: AtomicU32::new(0),
            intrdelay: AtomicU16::new(0),
        });
        let mut dev = Self {
            shared,
            workers: Vec::with_capacity(n),
        };
        for i in 0..n {
            let s = Arc::clone(&dev.shared);
            // On failure `dev` drops here and stops the workers already started.
            let w = std::thread::Builder::new()
                .name(format!("ioat-chan{i}"))
                .spawn(move || s.worker(i))?;
            dev.workers.push(w);
        }
        Ok(dev)
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.shared.channels.len()
    }

    /// The MSI-X vector count the function advertises.
    pub fn vectors_needed(channels: usize) -> usize {
        channels.clamp(1, MAX_CHANNELS)
    }

    /// Identity for a function with `channels` channels.
    pub fn identity_for(channels: usize) -> Identity {
        Identity {
            vendor: 0x8086,
            device: 0x0b00,
            revision: 0,
            class: 0x088000,
            subsystem_vendor: 0x8086,
            subsystem: 0,
            bar: BarSpec {
                index: 0,
                size: BAR_SIZE,
                is_64bit: true,
            },
            msix: MsixSpec {
                vectors: Self::vectors_needed(channels) as u16,
                bar: 0,
                table_offset: 0x2000,
                pba_offset: 0x3000,
            },
        }
    }
}

impl Device for Ioat {
    fn identity(&self) -> Identity {
        Self::identity_for(self.channels())
    }

    fn read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let n = self.channels() as u64;
        let end = offset.saturating_add(data.len() as u64);
        let regs_end = BLOCK * (n + 1);
        if data.is_empty() || offset >= regs_end {
            return;
        }
        let first = offset / BLOCK;
        let last = ((end - 1) / BLOCK).min(n);
        let mut image = Vec::with_capacity(((last - first + 1) * BLOCK) as usize);
        for b in first..=last {
            if b == 0 {
                let clear = touches(offset, data.len(), reg::ATTNSTATUS, 4);
                image.extend_from_slice(&self.shared.global_image(clear));
            } else {
                let st = self.shared.channels[(b - 1) as usize].lock();
                image.extend_from_slice(&Shared::channel_image(&st));
            }
        }
        read_image(&image, first * BLOCK, offset, data);
    }

    fn write(&self, offset: u64, data: &[u8]) {
        let n = self.channels() as u64;
        let mut pos = 0usize;
        while pos < data.len() {
            let at = offset.saturating_add(pos as u64);
            let block = at / BLOCK;
            if block > n {
                break;
            }
            let block_end = (block + 1) * BLOCK;
            let take = ((block_end - at) as usize).min(data.len() - pos);
            let piece = &data[pos..pos + take];
            let rel = at - block * BLOCK;
            if block == 0 {
                self.shared.write_global(rel, piece);
            } else {
                self.shared.write_channel((block - 1) as usize, rel, piece);
            }
            pos += take;
        }
    }

    fn reset(&self) {
        for ch in &self.shared.channels {
            let st = ch.lock();
            let mut st = ch.idle(st);
            let shutdown = st.shutdown;
            *st = ChanState::power_on();
            st.shutdown = shutdown;
            ch.cv.notify_all();
        }
        self.shared.intrctrl.store(0, Ordering::Release);
        self.shared.attn.store(0, Ordering::Release);
        self.shared.intrdelay.store(0, Ordering::Release);
    }
}

impl Drop for Ioat {
    fn drop(&mut self) {
        for ch in &self.shared.channels {
            ch.lock().shutdown = true;
            ch.cv.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
