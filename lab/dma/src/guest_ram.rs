//! Guest RAM as the device sees it: the regions the client DMA-mapped, and nothing else.
//!
//! Every access a device model makes on behalf of the guest goes through [`GuestRam`], which
//! checks the whole range against the mapped regions before touching a byte, so a descriptor
//! that points outside guest RAM becomes an error the engine reports, never a stray access.
//!
//! It is also the function's bus-master port: with Bus Master Enable clear every access faults,
//! and both a BME clear and a DMA_UNMAP wait for the accesses in flight (at most one
//! [`BURST`]), so after they return the device touches no memory it may no longer touch.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use thiserror::Error;
use vm_memory::{
    Address, Bytes, FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic,
    GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap, MmapRegion,
};

/// Why a DMA_MAP could not be honoured.
#[derive(Debug, Error)]
pub enum MapError {
    #[error(
        "DMA_MAP of {size:#x} bytes at {address:#x} (fd offset {offset:#x}): mmap failed: {source}"
    )]
    Mmap {
        address: u64,
        size: u64,
        offset: u64,
        #[source]
        source: vm_memory::mmap::MmapRegionError,
    },
    #[error(
        "DMA_MAP of {size:#x} bytes at {address:#x} (fd offset {offset:#x}, file pages of \
         {page:#x} bytes): mmap failed: {source}"
    )]
    PageMmap {
        address: u64,
        size: u64,
        offset: u64,
        page: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("DMA_MAP of {size:#x} bytes at {address:#x}: range wraps the address space")]
    Range { address: u64, size: u64 },
    #[error("DMA_MAP at {address:#x}: region table rejected it: {reason}")]
    Table { address: u64, reason: String },
}

/// A guest access that the mapped regions do not cover (or made with bus mastering off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Fault {
    #[error("read of {len:#x} bytes at {addr:#x} is outside the DMA-mapped guest RAM")]
    Read { addr: u64, len: u64 },
    #[error("write of {len:#x} bytes at {addr:#x} is outside the DMA-mapped guest RAM")]
    Write { addr: u64, len: u64 },
}

/// Why [`GuestRam::copy_until`] ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CopyError {
    #[error(transparent)]
    Fault(#[from] Fault),
    /// The caller's stop condition held between two bursts; `done` bytes were copied.
    #[error("copy stopped after {done:#x} bytes")]
    Stopped { done: u64 },
}

/// Bytes a copy moves per burst. Between bursts it lets an unmap or a bus-master clear in and
/// re-checks its range and its caller's stop condition, so nothing waits for a whole
/// descriptor (PTDMA's may be 4 GiB).
pub const BURST: u64 = 64 * 1024;

/// The DMA-mapped guest RAM, shared between the vfio-user thread (which maps and unmaps) and
/// the engine threads (which read descriptors and move data). Every access holds the `port`
/// lock shared for one burst; map, unmap and a bus-master change hold it exclusively, so they
/// wait for the burst in flight and the next burst sees the new map. An unmap therefore drops
/// the last reference to the mapping before the server replies, as the vfio-user protocol
/// requires, and a copy that loses its range mid-way faults at the next burst.
///
/// Two views are kept: every mapping (for reads) and the mappings the client allowed writes to
/// (for writes); read-only maps are also mmapped without PROT_WRITE.
#[derive(Clone)]
pub struct GuestRam {
    all: GuestMemoryAtomic<GuestMemoryMmap>,
    writable: GuestMemoryAtomic<GuestMemoryMmap>,
    update: Arc<Mutex<()>>,
    /// Bus Master Enable; read-locked by every access for one burst.
    port: Arc<RwLock<bool>>,
    /// The mmaps behind regions that start inside a file page (see [`PageMapping`]), dropped
    /// once no view holds their region.
    page_mappings: Arc<Mutex<Vec<PageMapping>>>,
}

/// A DMA region whose fd offset is not a multiple of its file's page size. Guest RAM backed by
/// hugepages (a hugetlbfs memfd) has 2 MiB or 1 GiB pages, and QEMU maps its RAM in pieces at
/// offsets such as 1 MiB (after the legacy VGA and ROM holes); mmap takes only page-aligned
/// offsets there. The mapping starts at the page below, and the region the engines see starts
/// at the region's own first byte, so the bytes before it (the holes QEMU left out) stay out of
/// reach. vm-memory cannot own such a mapping (its region would start at the page), so this
/// does, and unmaps it once the region is gone from every view.
struct PageMapping {
    base: *mut libc::c_void,
    len: usize,
    /// The region's first byte (`base` plus the offset's distance from its page).
    region: *mut u8,
}

// SAFETY: the mapping is plain shared memory; the raw pointers are only compared and unmapped.
unsafe impl Send for PageMapping {}

impl Drop for PageMapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned, and no view holds the region
        // any more (see `GuestRam::drop_unused_page_mappings`).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The page size of `file`'s filesystem (`st_blksize`: the hugepage size on hugetlbfs).
fn file_page_size(file: &File) -> u64 {
    use std::os::unix::fs::MetadataExt;
    file.metadata()
        .map(|m| m.blksize())
        .unwrap_or(4096)
        .max(4096)
}

impl Default for GuestRam {
    fn default() -> Self {
        Self::new()
    }
}

impl GuestRam {
    /// An empty map: every access faults until the client maps something.
    pub fn new() -> Self {
        Self {
            all: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            writable: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            update: Arc::new(Mutex::new(())),
            port: Arc::new(RwLock::new(true)),
            page_mappings: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Follows the command register's Bus Master Enable. Clearing it returns only once no
    /// access is in flight; from then on every access faults (no read, no write, no
    /// completion word) until it is set again.
    pub fn set_bus_master(&self, enabled: bool) {
        let mut port = self.port.write().unwrap_or_else(|e| e.into_inner());
        if *port != enabled {
            tracing::info!(enabled, "bus master");
        }
        *port = enabled;
    }

    /// True while the device may access guest memory.
    pub fn bus_master(&self) -> bool {
        *self.read_port()
    }

    /// Shares the port for one access. Never taken twice by one thread at once: a writer
    /// waiting in between would deadlock it.
    fn read_port(&self) -> RwLockReadGuard<'_, bool> {
        self.port.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Maps `size` bytes of `file` starting at `offset` at guest address `address`, replacing
    /// any earlier mapping that overlaps it (the newest map wins, as with an IOMMU).
    pub fn map(
        &self,
        address: u64,
        size: u64,
        file: File,
        offset: u64,
        writable: bool,
    ) -> Result<(), MapError> {
        let page = file_page_size(&file);
        self.map_in_pages(address, size, file, offset, writable, page)
    }

    /// [`Self::map`] for a file whose mmap offsets must be multiples of `page`.
    fn map_in_pages(
        &self,
        address: u64,
        size: u64,
        file: File,
        offset: u64,
        writable: bool,
        page: u64,
    ) -> Result<(), MapError> {
        if size == 0 {
            return Ok(());
        }
        let last = address
            .checked_add(size - 1)
            .ok_or(MapError::Range { address, size })?;
        let len = usize::try_from(size).map_err(|_| MapError::Range { address, size })?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let flags = libc::MAP_SHARED | libc::MAP_NORESERVE;
        let (mmap, page_mapping) = if offset.is_multiple_of(page) {
            let mmap = MmapRegion::build(Some(FileOffset::new(file, offset)), len, prot, flags)
                .map_err(|source| MapError::Mmap {
                    address,
                    size,
                    offset,
                    source,
                })?;
            (mmap, None)
        } else {
            let into_page = offset % page;
            let page_err = |source| MapError::PageMmap {
                address,
                size,
                offset,
                page,
                source,
            };
            let map_len = (size + into_page)
                .checked_next_multiple_of(page)
                .and_then(|l| usize::try_from(l).ok())
                .ok_or(MapError::Range { address, size })?;
            let start = libc::off_t::try_from(offset - into_page)
                .map_err(|_| MapError::Range { address, size })?;
            use std::os::fd::AsRawFd;
            // SAFETY: a new shared mapping of the client's file; nothing else refers to it yet.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    prot,
                    flags,
                    file.as_raw_fd(),
                    start,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(page_err(std::io::Error::last_os_error()));
            }
            let mapping = PageMapping {
                base,
                len: map_len,
                // SAFETY: `into_page + size <= map_len`, inside the mapping just made.
                region: unsafe { base.cast::<u8>().add(into_page as usize) },
            };
            // SAFETY: `region..region + len` lies inside `mapping`, which lives until no view
            // holds this region (`drop_unused_page_mappings`); prot and flags are the mmap's.
            let mmap = unsafe { MmapRegion::build_raw(mapping.region, len, prot, flags) }
                .map_err(|e| page_err(std::io::Error::other(e.to_string())))?;
            (mmap, Some(mapping))
        };
        let region = Arc::new(
            GuestRegionMmap::new(mmap, GuestAddress(address))
                .ok_or(MapError::Range { address, size })?,
        );
        let _update = self.update.lock().unwrap_or_else(|e| e.into_inner());
        // A replaced mapping must not be in use either (see `unmap`).
        let _port = self.port.write().unwrap_or_else(|e| e.into_inner());
        for (view, add) in [(&self.all, true), (&self.writable, writable)] {
            let mut next: GuestMemoryMmap = (*view.memory()).clone();
            for (start, len) in overlapping(&next, address, last) {
                if add || !writable {
                    tracing::warn!(
                        old_start = start,
                        old_len = len,
                        address,
                        size,
                        "DMA_MAP overlaps an existing mapping; the old one is dropped"
                    );
                }
                if let Ok((rest, _)) = next.remove_region(GuestAddress(start), len) {
                    next = rest;
                }
            }
            if add {
                next = next
                    .insert_region(Arc::clone(&region))
                    .map_err(|e| MapError::Table {
                        address,
                        reason: e.to_string(),
                    })?;
            }
            view.lock()
                .map_err(|_| MapError::Table {
                    address,
                    reason: "map lock poisoned".into(),
                })?
                .replace(next);
        }
        if let Some(mapping) = page_mapping {
            self.page_mappings
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(mapping);
        }
        self.drop_unused_page_mappings();
        Ok(())
    }

    /// Unmaps the [`PageMapping`]s whose region no view holds any more. Called with the port
    /// held exclusively, so no access has a view with such a region in hand.
    fn drop_unused_page_mappings(&self) {
        let all = self.all.memory();
        let held: Vec<*mut u8> = all.iter().map(|r| r.as_ptr()).collect();
        self.page_mappings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| held.contains(&m.region));
    }

    /// Drops every mapping that intersects `[address, address + size)`; `all` drops everything.
    /// Returns how many mappings were dropped. Waits for the access in flight, so when it
    /// returns no engine holds a dropped mapping (its mmap and fd are gone).
    pub fn unmap(&self, address: u64, size: u64, all: bool) -> usize {
        let _update = self.update.lock().unwrap_or_else(|e| e.into_inner());
        let _port = self.port.write().unwrap_or_else(|e| e.into_inner());
        let mut dropped_total = 0;
        for (i, view) in [&self.all, &self.writable].into_iter().enumerate() {
            let mut next: GuestMemoryMmap = (*view.memory()).clone();
            let victims = if all {
                overlapping(&next, 0, u64::MAX)
            } else if size == 0 {
                Vec::new()
            } else {
                overlapping(&next, address, address.saturating_add(size - 1))
            };
            let mut dropped = 0;
            for (start, len) in victims {
                if let Ok((rest, _)) = next.remove_region(GuestAddress(start), len) {
                    next = rest;
                    dropped += 1;
                }
            }
            if dropped > 0 {
                if let Ok(guard) = view.lock() {
                    guard.replace(next);
                }
            }
            if i == 0 {
                dropped_total = dropped;
            }
        }
        self.drop_unused_page_mappings();
        dropped_total
    }

    /// Number of mapped regions (for logs and tests).
    pub fn regions(&self) -> usize {
        self.all.memory().num_regions()
    }

    /// Reads `buf.len()` bytes at `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let port = self.read_port();
        let mem = self.all.memory();
        let fault = Fault::Read {
            addr,
            len: buf.len() as u64,
        };
        if !*port || !covered(&mem, addr, buf.len() as u64) {
            return Err(fault);
        }
        mem.read_slice(buf, GuestAddress(addr)).map_err(|_| fault)
    }

    /// Writes `buf` at `addr`.
    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), Fault> {
        let port = self.read_port();
        let mem = self.writable.memory();
        let fault = Fault::Write {
            addr,
            len: buf.len() as u64,
        };
        if !*port || !covered(&mem, addr, buf.len() as u64) {
            return Err(fault);
        }
        mem.write_slice(buf, GuestAddress(addr)).map_err(|_| fault)
    }

    /// Stores a little-endian u64 with one aligned 64-bit store (release ordering), so a
    /// driver polling the word never sees a torn value. `addr` must be 8-byte aligned.
    pub fn store_u64(&self, addr: u64, value: u64) -> Result<(), Fault> {
        let port = self.read_port();
        let mem = self.writable.memory();
        let fault = Fault::Write { addr, len: 8 };
        if !*port || !addr.is_multiple_of(8) || !covered(&mem, addr, 8) {
            return Err(fault);
        }
        mem.store(value.to_le(), GuestAddress(addr), Ordering::Release)
            .map_err(|_| fault)
    }

    /// Copies `len` bytes from guest `src` to guest `dst`. Both ranges are checked in full
    /// before anything is written, so a copy that faults from the start writes nothing; one
    /// whose range is unmapped (or bus mastering cleared) while it runs stops at a burst
    /// boundary with a fault, as a real transfer would.
    pub fn copy(&self, src: u64, dst: u64, len: u64) -> Result<(), Fault> {
        match self.copy_until(src, dst, len, || false) {
            Ok(()) => Ok(()),
            Err(CopyError::Fault(f)) => Err(f),
            // `stop` never holds.
            Err(CopyError::Stopped { .. }) => Err(Fault::Read { addr: src, len }),
        }
    }

    /// [`GuestRam::copy`] that also ends, with [`CopyError::Stopped`], when `stop()` holds
    /// before a burst; engines pass their halt/reset request so the register thread never
    /// waits for more than one burst.
    pub fn copy_until(
        &self,
        src: u64,
        dst: u64,
        len: u64,
        stop: impl Fn() -> bool,
    ) -> Result<(), CopyError> {
        {
            let port = self.read_port();
            if !*port || !covered(&self.all.memory(), src, len) {
                return Err(Fault::Read { addr: src, len }.into());
            }
            if !covered(&self.writable.memory(), dst, len) {
                return Err(Fault::Write { addr: dst, len }.into());
            }
        }
        let mut done = 0;
        while done < len {
            if stop() {
                return Err(CopyError::Stopped { done });
            }
            let n = BURST.min(len - done);
            self.burst(src + done, dst + done, n)?;
            done += n;
        }
        Ok(())
    }

    /// Copies one burst (ranges already known not to wrap) under the shared port lock.
    fn burst(&self, src: u64, dst: u64, len: u64) -> Result<(), Fault> {
        let port = self.read_port();
        let mem = self.all.memory();
        let wmem = self.writable.memory();
        // The map may have changed since the previous burst.
        if !*port || !covered(&mem, src, len) {
            return Err(Fault::Read { addr: src, len });
        }
        if !covered(&wmem, dst, len) {
            return Err(Fault::Write { addr: dst, len });
        }
        let (mut src, mut dst, mut left) = (src, dst, len);
        while left > 0 {
            let (Some(sp), Some(dp)) = (host_span(&mem, src, left), host_span(&wmem, dst, left))
            else {
                // Unreachable after `covered`, but a fault is the safe answer.
                return Err(Fault::Read {
                    addr: src,
                    len: left,
                });
            };
            let n = sp.1.min(dp.1);
            // vm-memory's own slice copy uses copy_nonoverlapping; a hostile guest can make
            // source and destination overlap (even through two aliases of one memfd), so this
            // uses memmove on the host addresses instead.
            // SAFETY: both host ranges lie inside live mappings held by `mem`/`wmem` for the
            // duration of the burst (checked by `host_span`; unmap waits for the port lock);
            // `ptr::copy` allows overlap. The guest may write the same memory concurrently,
            // exactly as with real DMA.
            unsafe { std::ptr::copy(sp.0, dp.0, n as usize) };
            src += n;
            dst += n;
            left -= n;
        }
        Ok(())
    }
}

/// True when every byte of `[addr, addr + len)` lies in some mapped region.
fn covered(mem: &GuestMemoryMmap, addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    let Some(_) = addr.checked_add(len - 1) else {
        return false;
    };
    let mut cur = addr;
    let mut left = len;
    while left > 0 {
        let Some(region) = mem.find_region(GuestAddress(cur)) else {
            return false;
        };
        let avail = region.last_addr().raw_value() - cur + 1;
        let n = avail.min(left);
        left -= n;
        cur = cur.wrapping_add(n);
    }
    true
}

/// Host pointer for guest `addr` and how many bytes (at most `len`) are contiguous there.
fn host_span(mem: &GuestMemoryMmap, addr: u64, len: u64) -> Option<(*mut u8, u64)> {
    let region = mem.find_region(GuestAddress(addr))?;
    let avail = region.last_addr().raw_value() - addr + 1;
    let n = avail.min(len);
    let slice = mem.get_slice(GuestAddress(addr), n as usize).ok()?;
    Some((slice.ptr_guard_mut().as_ptr(), n))
}

/// `(start, len)` of every region that intersects `[first, last]`.
fn overlapping(mem: &GuestMemoryMmap, first: u64, last: u64) -> Vec<(u64, u64)> {
    mem.iter()
        .filter(|r| r.start_addr().raw_value() <= last && r.last_addr().raw_value() >= first)
        .map(|r| (r.start_addr().raw_value(), r.len()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::FileExt;

    fn memfd(size: u64) -> File {
        named_memfd(c"guest-ram-test", size)
    }

    fn named_memfd(name: &std::ffi::CStr, size: u64) -> File {
        // SAFETY: memfd_create with a NUL-terminated name; the fd is checked and owned.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fresh descriptor we own.
        let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        f.set_len(size).expect("size");
        f
    }

    /// Two NUMA nodes' memfds mapped back to back, like QEMU's per-node RAM backends.
    fn two_nodes() -> (GuestRam, File, File) {
        let ram = GuestRam::new();
        ram.set_bus_master(true);
        let (a, b) = (memfd(0x2_0000), memfd(0x2_0000));
        ram.map(
            0x10_0000,
            0x1_0000,
            a.try_clone().expect("dup"),
            0x1_0000,
            true,
        )
        .expect("map a");
        ram.map(0x11_0000, 0x1_0000, b.try_clone().expect("dup"), 0, true)
            .expect("map b");
        (ram, a, b)
    }

    #[test]
    fn copies_span_adjacent_mappings_from_different_files() {
        let (ram, a, b) = two_nodes();
        let data: Vec<u8> = (0..0x2000u32).map(|i| (i * 13) as u8).collect();
        ram.write(0x10_f000, &data).expect("write across");
        ram.copy(0x10_f000, 0x10_f800, 0x1000)
            .expect("overlapping copy across");
        let mut out = vec![0u8; 0x1000];
        ram.read(0x10_f800, &mut out).expect("read back");
        assert_eq!(out, data[..0x1000]);
        // The bytes really live in the two files at the mapped offsets.
        let mut first = [0u8; 1];
        a.read_exact_at(&mut first, 0x1_0000 + 0xf000)
            .expect("file a");
        assert_eq!(first[0], data[0]);
        let mut tail = [0u8; 1];
        b.read_exact_at(&mut tail, 0x7ff).expect("file b");
        assert_eq!(tail[0], data[0xfff]);
    }

    #[test]
    fn ranges_touching_a_hole_fault_without_writing() {
        let (ram, _a, _b) = two_nodes();
        assert_eq!(
            ram.copy(0x10_0000, 0x11_ff00, 0x200),
            Err(Fault::Write {
                addr: 0x11_ff00,
                len: 0x200
            })
        );
        let mut b = [0u8; 0x100];
        ram.read(0x11_ff00, &mut b).expect("in range");
        assert!(b.iter().all(|&x| x == 0), "faulting copy wrote nothing");
        assert!(ram.copy(0xf_fff0, 0x10_0000, 0x20).is_err());
        assert!(ram.copy(u64::MAX - 4, 0x10_0000, 16).is_err());
        assert!(ram.store_u64(0x10_0004, 1).is_err(), "misaligned store");
        assert!(ram.copy(0x10_0000, 0x10_0000, 0).is_ok(), "empty copy");
    }

    #[test]
    fn unmap_and_overlapping_map_replace_regions() {
        let (ram, _a, _b) = two_nodes();
        assert_eq!(ram.unmap(0x10_8000, 0x10, false), 1);
        assert_eq!(ram.regions(), 1);
        assert!(ram.read(0x10_0000, &mut [0u8; 4]).is_err());
        let c = memfd(0x1_0000);
        ram.map(0x11_8000, 0x1_0000, c, 0, false)
            .expect("overlapping map");
        assert_eq!(ram.regions(), 1, "the overlapped mapping was dropped");
        assert!(ram.read(0x11_8000, &mut [0u8; 4]).is_ok());
        assert!(ram.write(0x11_8000, &[1]).is_err(), "read-only map");
        assert_eq!(ram.unmap(0, 0, true), 1);
        assert_eq!(ram.regions(), 0);
    }

    /// Lines of /proc/self/maps that map the memfd called `name`.
    #[test]
    fn a_region_inside_a_file_page_maps_from_the_page_and_shows_nothing_before_it() {
        // 64 KiB "pages" on a plain memfd stand in for hugetlbfs's 2 MiB ones.
        let name = c"guest-ram-paged";
        let file = named_memfd(name, 0x4_0000);
        let bytes: Vec<u8> = (0..0x4_0000u32).map(|i| (i / 7) as u8).collect();
        file.write_all_at(&bytes, 0).expect("fill");
        let ram = GuestRam::new();
        let before = mappings_of("guest-ram-paged");
        ram.map_in_pages(0x10_0000, 0x1_0000, file, 0x1_8000, true, 0x1_0000)
            .expect("map inside a page");
        assert_eq!(mappings_of("guest-ram-paged"), before + 1);
        let mut got = vec![0u8; 0x1_0000];
        ram.read(0x10_0000, &mut got).expect("the region");
        assert_eq!(
            got,
            bytes[0x1_8000..0x2_8000],
            "region starts at its own offset"
        );
        assert!(
            ram.read(0xf_ffff, &mut [0u8; 1]).is_err(),
            "the page's bytes before it"
        );
        assert!(ram.read(0x11_0000, &mut [0u8; 1]).is_err(), "past its end");
        ram.write(0x10_0010, &[0xaa]).expect("write");
        assert_eq!(ram.unmap(0x10_0000, 0x1_0000, false), 1);
        assert_eq!(
            mappings_of("guest-ram-paged"),
            before,
            "unmapped with its region"
        );
        // An overlapping map drops it as well.
        let again = named_memfd(name, 0x4_0000);
        ram.map_in_pages(
            0x10_0000,
            0x1_0000,
            again.try_clone().unwrap(),
            0x8000,
            true,
            0x1_0000,
        )
        .expect("map");
        ram.map(0x10_8000, 0x1000, again, 0, true).expect("overlap");
        assert_eq!(
            mappings_of("guest-ram-paged"),
            before + 1,
            "only the new plain map"
        );
    }

    /// A part of a test this host cannot run, in `lab::skip::host_lacks`'s words (lab-dma does
    /// not depend on the lab): a `LAB-SKIP` line on stdout and stderr, or, with
    /// `LAB_REQUIRE_HOST=1` (set by `.ci/run` where it provides the hugepages), a failure.
    fn host_lacks(test: &str, what: &str, how: &str) {
        let line = format!("LAB-SKIP {test}: {what}. {how}");
        let required = std::env::var("LAB_REQUIRE_HOST")
            .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"));
        assert!(
            !required,
            "{line} (LAB_REQUIRE_HOST=1 makes this skip a failure)"
        );
        println!("{line}");
        eprintln!("{line}");
    }

    /// Guest RAM of hugepages as QEMU maps it: a region 1 MiB into a 2 MiB page. Needs two free
    /// 2 MiB hugepages on the host (`.ci/run` reserves them); without them a visible skip.
    #[test]
    fn hugetlb_memory_maps_at_an_offset_inside_a_hugepage() {
        const TEST: &str = "hugetlb_memory_maps_at_an_offset_inside_a_hugepage";
        const HOW: &str = "Reserve hugepages as root: `echo 8 > \
                           /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages`.";
        // SAFETY: memfd_create with a NUL-terminated name; the fd is checked and owned.
        let fd = unsafe {
            libc::memfd_create(
                c"guest-ram-huge".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_HUGETLB | libc::MFD_HUGE_2MB,
            )
        };
        if fd < 0 {
            let why = std::io::Error::last_os_error();
            return host_lacks(TEST, &format!("no 2 MiB hugetlb memfd here ({why})"), HOW);
        }
        // SAFETY: fresh descriptor we own.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // memfd_create and set_len succeed with an empty pool and the first touch is a SIGBUS:
        // fallocate takes the pages now, or says ENOSPC.
        // SAFETY: a valid descriptor; offset and length in range.
        let taken = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, 4 << 20) };
        if taken != 0 {
            let why = std::io::Error::last_os_error();
            return host_lacks(
                TEST,
                &format!("two free 2 MiB hugepages could not be taken ({why})"),
                HOW,
            );
        }
        assert_eq!(file_page_size(&file), 2 << 20);
        let ram = GuestRam::new();
        ram.map(
            0x10_0000,
            0x30_0000,
            file.try_clone().unwrap(),
            0x10_0000,
            true,
        )
        .expect("a region 1 MiB into a hugepage");
        // Whole pages of the same file at another guest address see the bytes.
        ram.map(0x1_0000_0000, 4 << 20, file, 0, false)
            .expect("aligned");
        ram.write(0x10_0000, b"first").expect("write");
        ram.write(0x3f_fffb, b"last!").expect("write at the end");
        let mut got = [0u8; 5];
        ram.read(0x1_0010_0000, &mut got).expect("read");
        assert_eq!(&got, b"first");
        ram.read(0x1_003f_fffb, &mut got).expect("read");
        assert_eq!(&got, b"last!");
        assert!(ram.read(0xf_ffff, &mut [0u8; 1]).is_err());
        assert_eq!(ram.unmap(0, 0, true), 2);
    }

    fn mappings_of(name: &str) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        maps.lines().filter(|l| l.contains(name)).count()
    }

    #[test]
    fn bus_master_off_faults_every_access() {
        let (ram, _a, _b) = two_nodes();
        ram.set_bus_master(false);
        assert!(ram.read(0x10_0000, &mut [0u8; 4]).is_err());
        assert!(ram.write(0x10_0000, &[1]).is_err());
        assert!(ram.store_u64(0x10_0000, 1).is_err());
        assert!(ram.copy(0x10_0000, 0x10_1000, 16).is_err());
        ram.set_bus_master(true);
        ram.write(0x10_0000, &[1]).expect("enabled again");
    }

    /// vfio-user: the server must drop every reference to an unmapped region before it
    /// replies. A 96 MiB copy is running when the unmap arrives: once `unmap` returns the
    /// mmap is gone and the copy writes nothing more. The copy is paced (1 ms before each of
    /// its 1,536 bursts) so it still runs when the unmap comes on a loaded host (unpaced, it
    /// once finished first in a CI run beside VM tests).
    #[test]
    fn unmap_waits_for_the_copy_in_flight_and_drops_the_mapping() {
        const NAME: &str = "unmap-while-copying";
        const HALF: u64 = 96 << 20;
        let ram = GuestRam::new();
        ram.set_bus_master(true);
        let f = named_memfd(c"unmap-while-copying", 2 * HALF);
        f.write_all_at(&vec![0x5a; HALF as usize], 0)
            .expect("source");
        ram.map(0x1000_0000, 2 * HALF, f.try_clone().expect("dup"), 0, true)
            .expect("map");
        assert_eq!(mappings_of(NAME), 1);
        let copier = {
            let ram = ram.clone();
            let pace = || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                false
            };
            std::thread::spawn(move || ram.copy_until(0x1000_0000, 0x1000_0000 + HALF, HALF, pace))
        };
        // Unmap as soon as the copy has begun.
        let mut first = [0u8; 1];
        while first[0] == 0 {
            f.read_exact_at(&mut first, HALF).expect("dst");
        }
        assert_eq!(ram.unmap(0, 0, true), 1);
        assert_eq!(
            mappings_of(NAME),
            0,
            "a copy still holds the unmapped region"
        );
        let mut tail = [0u8; 4096];
        f.read_exact_at(&mut tail, 2 * HALF - 4096)
            .expect("dst tail");
        let result = copier.join().expect("copier");
        assert!(result.is_err(), "the copy ran to its end after the unmap");
        let mut after = [0u8; 4096];
        f.read_exact_at(&mut after, 2 * HALF - 4096)
            .expect("dst tail");
        assert_eq!(tail, after, "data moved after the unmap returned");
    }
}
