//! Hostile guest, property-based: random register writes and reads, random descriptors
//! (addresses outside guest RAM, in guard bytes, in read-only maps, zero and oversized lengths,
//! unknown opcodes, self-looping `next`), resets in the middle of transfers, unmaps and remaps,
//! bus mastering switched off and on.
//! After every sequence: nothing outside the writable mappings changed, and after a device reset
//! every channel still performs a good copy. A panic in the model fails the case (worker
//! threads that die stop completing, which the final check catches).
//!
//! Bounded to 256 cases per engine so CI stays fast; set PROPTEST_CASES to run more.

mod common;

use std::os::unix::fs::FileExt;

use common::*;
use lab_dma::DeviceKind;
use proptest::prelude::*;
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

const RING: u64 = LOW + 0x1000;
const SLOTS: u64 = 16;

#[derive(Debug, Clone)]
enum Op {
    Write {
        off: u64,
        width: usize,
        val: u64,
    },
    Read {
        off: u64,
        width: usize,
    },
    /// A descriptor (I/OAT: 64 bytes, PTDMA: 32 bytes) into slot `slot` of the test ring.
    Desc {
        slot: u64,
        words: [u64; 4],
    },
    /// Point a channel (or the PTDMA queue) at ring slot `slot` and ring the doorbell for
    /// `count` descriptors, the way a driver starts work, so random descriptors get executed.
    Start {
        ch: u64,
        slot: u64,
        count: u16,
    },
    Reset,
    UnmapHigh,
    RemapHigh,
    Pause,
    /// A command register write (bus mastering and memory space on and off).
    Command(u16),
}

fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0..LOW_SIZE).prop_map(|o| LOW + o),
        2 => (0..0x2000u64).prop_map(|o| LOW + LOW_SIZE - 0x1000 + o),
        1 => (0..0x1000u64).prop_map(|o| LOW - 0x800 + o),
        2 => (0..HIGH_SIZE).prop_map(|o| HIGH + o),
        1 => (0..RO_SIZE).prop_map(|o| RO + o),
        1 => (0..SLOTS).prop_map(|k| RING + 64 * k),
        1 => any::<u64>(),
        1 => Just(0u64),
    ]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        1..0x2000u64,
        Just(1 << 20),
        Just((1 << 20) + 1),
        Just(u64::from(u32::MAX)),
        any::<u32>().prop_map(u64::from),
    ]
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => any::<u64>(),
        1 => Just(0u64),
        1 => Just(0x1d),
        1 => Just(0x20),
        1 => Just(0x04),
        1 => Just(0x09),
        1 => (0..4u64).prop_map(|k| 0x0050_0012 | k),
        2 => addr(),
        2 => (0..SLOTS).prop_map(|k| RING + 64 * k),
        1 => 0..0x10000u64,
    ]
}

fn ioat_offset(channels: u64) -> impl Strategy<Value = u64> {
    let chan_regs = [
        0x00u64, 0x04, 0x06, 0x08, 0x10, 0x14, 0x18, 0x1c, 0x28, 0x2c, 0x30,
    ];
    prop_oneof![
        6 => (0..channels, proptest::sample::select(chan_regs.to_vec()))
            .prop_map(|(c, r)| 0x80 * (c + 1) + r),
        1 => proptest::sample::select(vec![0u64, 1, 3, 4, 8, 0xc, 0x10, 0x4c]),
        1 => 0..0x4000u64,
        1 => any::<u64>(),
    ]
}

fn ptdma_offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => proptest::sample::select(vec![
            0x1000u64, 0x1004, 0x1008, 0x100c, 0x1010, 0x1100, 0x1104, 0x0, 0x4, 0x8, 0x1120, 0x6004,
        ]),
        1 => 0..0x10000u64,
        1 => any::<u64>(),
    ]
}

fn desc_words() -> impl Strategy<Value = [u64; 4]> {
    // Word 0: size | ctl << 32 (I/OAT) or dw0 | len << 32 (PTDMA); 1: src; 2: dst; 3: next.
    let ctl = prop_oneof![
        Just(0u64),
        Just(0x29),
        Just(0x09),
        Just(0x0050_0012),
        any::<u32>().prop_map(u64::from),
        (0x80..0xffu64).prop_map(|op| op << 24 | 0x9),
    ];
    (size(), ctl, addr(), addr(), addr()).prop_map(|(size, ctl, src, dst, next)| {
        [(size & 0xffff_ffff) | (ctl << 32), src, dst, next]
    })
}

fn op(offset: BoxedStrategy<u64>) -> impl Strategy<Value = Op> {
    let width = proptest::sample::select(vec![1usize, 2, 4, 8]);
    prop_oneof![
        8 => (offset.clone(), width.clone(), value()).prop_map(|(off, width, val)| Op::Write { off, width, val }),
        2 => (offset, width).prop_map(|(off, width)| Op::Read { off, width }),
        5 => (0..SLOTS, desc_words()).prop_map(|(slot, words)| Op::Desc { slot, words }),
        3 => (0..4u64, 0..SLOTS, prop_oneof![1..8u16, any::<u16>()])
            .prop_map(|(ch, slot, count)| Op::Start { ch, slot, count }),
        1 => Just(Op::Reset),
        1 => Just(Op::UnmapHigh),
        1 => Just(Op::RemapHigh),
        1 => Just(Op::Pause),
        1 => any::<u16>().prop_map(Op::Command),
    ]
}

fn apply(r: &mut Rig, op: &Op, ptdma: bool) {
    match op {
        Op::Write { off, width, val } => {
            r.backend.device().write(*off, &val.to_le_bytes()[..*width]);
        }
        Op::Read { off, width } => {
            let mut b = [0u8; 8];
            r.backend.device().read(*off, &mut b[..*width]);
        }
        Op::Desc { slot, words } => {
            let mut d = [0u8; 64];
            for (i, w) in words.iter().enumerate() {
                d[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
            }
            let (len, at) = if ptdma {
                (32usize, HIGH + 32 * slot)
            } else {
                (64, RING + 64 * slot)
            };
            if r.backend.ram().regions() >= 3 || !ptdma {
                r.poke(at, &d[..len]);
            }
        }
        Op::Start { ch, slot, count } => {
            if ptdma {
                let q = HIGH;
                let tail = q + 32 * ((slot + u64::from(*count)) % 32);
                r.write(0x100c, 4, 3);
                r.write(0x1008, 4, (q + 32 * slot) & 0xffff_ffff);
                r.write(0x1004, 4, tail & 0xffff_ffff);
                r.write(0x1000, 4, ((q >> 32) << 16) | (4 << 3) | 1);
            } else {
                let b = 0x80 * (ch + 1);
                r.write(b, 2, 0x1d);
                r.write(b + 0x18, 8, LOW + 64 * ch);
                r.write(b + 0x10, 8, RING + 64 * slot);
                r.write(b + 0x06, 2, u64::from(*count));
            }
        }
        Op::Reset => {
            r.backend.reset().expect("reset never fails");
            // Reset clears bus mastering; the driver sets it again.
            r.set_command(ENABLED);
        }
        Op::UnmapHigh => {
            r.backend
                .dma_unmap(DmaUnmapFlags::empty(), HIGH, HIGH_SIZE)
                .expect("unmap never fails");
        }
        Op::RemapHigh => {
            let fd = r.file.try_clone().expect("dup");
            let off = GUARD + LOW_SIZE + GUARD;
            r.backend
                .dma_map(DmaMapFlags::READ_WRITE, off, HIGH, HIGH_SIZE, Some(fd))
                .expect("remap");
        }
        Op::Command(v) => r.set_command(*v),
        Op::Pause => std::thread::sleep(std::time::Duration::from_micros(300)),
    }
}

/// After a device reset, a good copy on every I/OAT channel completes with an interrupt.
fn ioat_still_serves(r: &Rig, channels: usize) {
    use lab_dma::ioat::state;
    r.write(0x03, 1, 0x09);
    for ch in 0..channels {
        let b = 0x80 * (ch as u64 + 1);
        let desc = LOW + 0x30_0000 + 64 * ch as u64;
        let cmp = LOW + 0x30_1000 + 64 * ch as u64;
        let src = LOW + 0x31_0000;
        let dst = LOW + 0x32_0000 + 0x1000 * ch as u64;
        r.poke(src, &pattern(0x1000, 42));
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&0x1000u32.to_le_bytes());
        d[4..8].copy_from_slice(&0x9u32.to_le_bytes());
        d[8..16].copy_from_slice(&src.to_le_bytes());
        d[16..24].copy_from_slice(&dst.to_le_bytes());
        d[24..32].copy_from_slice(&desc.to_le_bytes());
        r.poke(desc, &d);
        r.irq_count(ch);
        r.write(b, 2, 0x1d);
        r.write(b + 0x18, 8, cmp);
        r.write(b + 0x10, 8, desc);
        r.write(b + 0x06, 2, 1);
        assert!(
            eventually(|| r.peek_u64(cmp) == desc | state::DONE),
            "channel {ch} stopped serving: CHANSTS {:#x} CHANERR {:#x}",
            r.read(b + 0x08, 8),
            r.read(b + 0x28, 4)
        );
        assert_eq!(r.peek(dst, 0x1000), pattern(0x1000, 42));
        assert!(r.wait_irq(ch) >= 1, "channel {ch} interrupt");
    }
}

fn ptdma_still_serves(r: &Rig) {
    let q = LOW + 0x30_0000;
    let src = LOW + 0x31_0000;
    let dst = LOW + 0x32_0000;
    r.poke(src, &pattern(0x1000, 43));
    let mut d = [0u8; 32];
    for (i, w) in [0x0050_0012u32, 0x1000, src as u32, 0, dst as u32, 0]
        .iter()
        .enumerate()
    {
        d[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    r.poke(q, &d);
    r.irq_count(0);
    r.write(0x100c, 4, 3);
    r.write(0x1004, 4, q);
    r.write(0x1008, 4, q);
    r.write(0x1004, 4, q + 32);
    r.write(0x1000, 4, (4 << 3) | 1);
    assert!(r.wait_irq(0) >= 1, "ptdma stopped interrupting");
    assert_eq!(r.peek(dst, 0x1000), pattern(0x1000, 43));
}

fn remap_if_needed(r: &mut Rig) {
    if r.backend.ram().regions() < 3 {
        apply(r, &Op::RemapHigh, false);
    }
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ioat_survives_hostile_sequences(
        channels in 1usize..=4,
        ops in proptest::collection::vec(op(ioat_offset(4).boxed()), 1..48),
    ) {
        let mut r = Rig::new(DeviceKind::Ioat { channels });
        for o in &ops {
            apply(&mut r, o, false);
        }
        r.backend.reset().expect("reset");
        r.set_command(ENABLED);
        r.assert_guards_intact();
        r.assert_ro_untouched();
        remap_if_needed(&mut r);
        ioat_still_serves(&r, channels);
        r.assert_guards_intact();
    }

    #[test]
    fn ptdma_survives_hostile_sequences(
        ops in proptest::collection::vec(op(ptdma_offset().boxed()), 1..48),
    ) {
        let mut r = Rig::new(DeviceKind::Ptdma);
        for o in &ops {
            apply(&mut r, o, true);
        }
        r.backend.reset().expect("reset");
        r.set_command(ENABLED);
        r.assert_guards_intact();
        r.assert_ro_untouched();
        remap_if_needed(&mut r);
        ptdma_still_serves(&r);
        r.assert_guards_intact();
    }
}

/// Config space takes any access without failing and keeps its read-only identity.
#[test]
fn config_space_survives_random_writes() {
    let mut r = Rig::new(DeviceKind::Ioat { channels: 2 });
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = x % 0x120;
        let len = 1 + (x >> 20) as usize % 8;
        let data = x.to_le_bytes();
        r.backend
            .region_write(7, off, &data[..len])
            .expect("config write");
        let mut b = vec![0u8; len];
        r.backend.region_read(7, off, &mut b).expect("config read");
        // Regions that do not exist also answer.
        r.backend
            .region_write(3, off, &data[..len])
            .expect("empty region write");
        r.backend
            .region_read(5, off, &mut b)
            .expect("empty region read");
    }
    assert_eq!(r.config_read(0, 4), 0x0b00_8086);
    assert_eq!(r.config_read(0x40, 1), 0x11);
    let _ = r.file.read_at(&mut [0u8; 1], 0);
}
