//! BAR access plumbing shared by the device models.
//!
//! vfio-user forwards guest MMIO as (offset, bytes) with any width and alignment. Register
//! files here are described as tables of `(offset, width)`; a write is split into one merged
//! update per register it touches, and a read is served from a byte image of the registers,
//! so odd-sized or straddling accesses are handled uniformly and never fail.

/// One register in a block: its offset and width in bytes (1, 2, 4 or 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg {
    pub offset: u64,
    pub width: u8,
}

impl Reg {
    pub const fn new(offset: u64, width: u8) -> Self {
        Self { offset, width }
    }

    fn end(&self) -> u64 {
        self.offset + u64::from(self.width)
    }
}

/// The bytes of one access that land in one register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegWrite {
    /// Index of the register in the table.
    pub index: usize,
    /// The written bytes, placed at their position inside the register.
    pub value: u64,
    /// Which bits of the register the access wrote.
    pub mask: u64,
}

impl RegWrite {
    /// `old` with the written bytes replaced.
    pub fn merge(&self, old: u64) -> u64 {
        (old & !self.mask) | (self.value & self.mask)
    }
}

/// Splits a write of `data` at `offset` (relative to the table's base) into per-register
/// updates, in table order. Bytes that hit no register are dropped.
pub fn split_write(regs: &[Reg], offset: u64, data: &[u8]) -> Vec<RegWrite> {
    let end = offset.saturating_add(data.len() as u64);
    let mut out = Vec::new();
    for (index, reg) in regs.iter().enumerate() {
        let lo = reg.offset.max(offset);
        let hi = reg.end().min(end);
        if lo >= hi {
            continue;
        }
        let mut value = 0u64;
        let mut mask = 0u64;
        for addr in lo..hi {
            let byte = data[(addr - offset) as usize];
            let shift = (addr - reg.offset) * 8;
            value |= u64::from(byte) << shift;
            mask |= 0xffu64 << shift;
        }
        out.push(RegWrite { index, value, mask });
    }
    out
}

/// Fills `data` (an access at `offset`) from a register image that starts at `image_base`.
/// Bytes outside the image read as zero.
pub fn read_image(image: &[u8], image_base: u64, offset: u64, data: &mut [u8]) {
    for (i, byte) in data.iter_mut().enumerate() {
        let addr = offset.wrapping_add(i as u64);
        *byte = addr
            .checked_sub(image_base)
            .and_then(|rel| usize::try_from(rel).ok())
            .and_then(|rel| image.get(rel))
            .copied()
            .unwrap_or(0);
    }
}

/// Puts `value` little-endian into `image` at `offset` using `width` bytes.
pub fn put(image: &mut [u8], offset: usize, width: usize, value: u64) {
    let bytes = value.to_le_bytes();
    if let Some(dst) = image.get_mut(offset..offset + width) {
        dst.copy_from_slice(&bytes[..width]);
    }
}

/// True if the access `[offset, offset + len)` touches byte `at`.
pub fn touches(offset: u64, len: usize, at: u64, width: u8) -> bool {
    offset < at + u64::from(width) && at < offset.saturating_add(len as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGS: &[Reg] = &[
        Reg::new(0, 2),
        Reg::new(4, 1),
        Reg::new(8, 4),
        Reg::new(12, 4),
    ];

    #[test]
    fn a_wide_write_splits_into_each_register() {
        let w = split_write(REGS, 8, &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(w.len(), 2);
        assert_eq!(
            (w[0].index, w[0].value, w[0].mask),
            (2, 0x5566_7788, 0xffff_ffff)
        );
        assert_eq!(
            (w[1].index, w[1].value, w[1].mask),
            (3, 0x1122_3344, 0xffff_ffff)
        );
    }

    #[test]
    fn a_byte_write_merges_into_the_old_value() {
        let w = split_write(REGS, 1, &[0xab]);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].merge(0x1234), 0xab34);
    }

    #[test]
    fn bytes_between_registers_are_dropped() {
        assert!(split_write(REGS, 2, &[1, 2]).is_empty());
        assert!(split_write(REGS, u64::MAX, &[1]).is_empty());
    }

    #[test]
    fn reads_outside_the_image_are_zero() {
        let image = [1u8, 2, 3, 4];
        let mut data = [0xffu8; 4];
        read_image(&image, 0x10, 0x12, &mut data);
        assert_eq!(data, [3, 4, 0, 0]);
        read_image(&image, 0x10, 0x0e, &mut data);
        assert_eq!(data, [0, 0, 1, 2]);
    }
}
