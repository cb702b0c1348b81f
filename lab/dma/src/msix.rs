//! MSI-X vectors as vfio-user delivers them: one eventfd per vector, handed over by the client
//! in SET_IRQS messages. QEMU emulates the MSI-X table and PBA itself; the device only writes
//! to the eventfd of the vector it wants to raise.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_MSIX_IRQ_INDEX,
};

/// The eventfd behind each MSI-X vector. Shared by the vfio-user thread, which rewires it, and
/// the engine threads, which signal through it; QEMU may swap a vector's eventfd at any time,
/// so it is looked up under the lock on every signal.
#[derive(Debug)]
pub struct Vectors {
    slots: Mutex<Vec<Option<File>>>,
    /// An MSI-X message is a memory write: with Bus Master Enable clear none is sent.
    bus_master: AtomicBool,
}

impl Vectors {
    /// `count` vectors, none wired yet.
    pub fn new(count: usize) -> Self {
        Self {
            slots: Mutex::new((0..count).map(|_| None).collect()),
            bus_master: AtomicBool::new(true),
        }
    }

    /// Follows the command register's Bus Master Enable; while clear, [`Vectors::signal`]
    /// sends nothing and returns false (the engines latch what they can).
    pub fn set_bus_master(&self, enabled: bool) {
        self.bus_master.store(enabled, Ordering::Release);
    }

    /// Number of vectors (the MSI-X table size).
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// True if vector `v` has an eventfd.
    pub fn is_wired(&self, v: usize) -> bool {
        self.lock().get(v).is_some_and(Option::is_some)
    }

    /// Raises vector `v`. Returns false (and does nothing) if the vector has no eventfd or bus
    /// mastering is off, so the caller can latch the interrupt instead of losing it.
    pub fn signal(&self, v: usize) -> bool {
        if !self.bus_master.load(Ordering::Acquire) {
            return false;
        }
        let mut slots = self.lock();
        let Some(Some(fd)) = slots.get_mut(v) else {
            return false;
        };
        match fd.write_all(&1u64.to_le_bytes()) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(vector = v, error = %e, "eventfd write failed");
                false
            }
        }
    }

    /// Applies one SET_IRQS message. Only the MSI-X index carries vectors; the others report
    /// count 0 to the client and are accepted and ignored.
    ///
    /// QEMU sends at most one fd per message (the server advertises max_msg_fds = 1), so a
    /// multi-vector setup arrives as several messages, each with its own `start`.
    pub fn set_irqs(&self, index: u32, flags: u32, start: u32, count: u32, fds: Vec<File>) {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            tracing::debug!(
                index,
                flags,
                start,
                count,
                "SET_IRQS for an index without vectors"
            );
            return;
        }
        if flags & VFIO_IRQ_SET_ACTION_TYPE_MASK != VFIO_IRQ_SET_ACTION_TRIGGER {
            // Mask/unmask is done by QEMU's emulated MSI-X table; nothing to do here.
            tracing::debug!(flags, start, count, "SET_IRQS mask/unmask ignored");
            return;
        }
        let data = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        if data == VFIO_IRQ_SET_DATA_NONE {
            if count == 0 {
                let mut slots = self.lock();
                slots.iter_mut().for_each(|s| *s = None);
                tracing::debug!("SET_IRQS: all MSI-X vectors released");
            } else {
                // VFIO semantics: DATA_NONE with a count triggers those vectors.
                let end = start.saturating_add(count).min(self.count() as u32);
                for v in start..end {
                    self.signal(v as usize);
                }
            }
            return;
        }
        if data != VFIO_IRQ_SET_DATA_EVENTFD {
            tracing::debug!(flags, "SET_IRQS with unsupported data type ignored");
            return;
        }
        let mut fds = fds.into_iter();
        let mut slots = self.lock();
        let end = start.saturating_add(count);
        if end as usize > slots.len() {
            tracing::warn!(
                start,
                count,
                table = slots.len(),
                "SET_IRQS names vectors past the table"
            );
        }
        for v in (start as usize)..(end as usize).min(slots.len()) {
            let fd = fds.next();
            tracing::debug!(vector = v, wired = fd.is_some(), "SET_IRQS");
            slots[v] = fd;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<File>>> {
        // A poisoned lock only means another thread panicked mid-update of a slot vector;
        // the vector itself is still consistent.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

    fn efd() -> (EventFd, File) {
        let e = EventFd::new(EFD_NONBLOCK).expect("eventfd");
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: dup of a live descriptor; the new fd is owned by the returned File.
        let fd = unsafe { libc::dup(e.as_raw_fd()) };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh descriptor we own.
        let f = unsafe { File::from_raw_fd(fd) };
        (e, f)
    }

    const EVENTFD: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;

    #[test]
    fn each_message_wires_the_vector_named_by_its_start() {
        let v = Vectors::new(4);
        let (e2, f2) = efd();
        let (e0, f0) = efd();
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, 2, 1, vec![f2]);
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, 0, 1, vec![f0]);
        assert!(v.signal(2));
        assert_eq!(e2.read().ok(), Some(1));
        assert!(e0.read().is_err(), "vector 0 must not fire for vector 2");
        assert!(!v.signal(1));
        assert!(v.signal(0));
        assert_eq!(e0.read().ok(), Some(1));
    }

    #[test]
    fn a_message_without_fds_unwires_and_none_clears_all() {
        let v = Vectors::new(2);
        let (_e, f) = efd();
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, 1, 1, vec![f]);
        assert!(v.is_wired(1));
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, 1, 1, vec![]);
        assert!(!v.is_wired(1));
        let (_e, f) = efd();
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, 0, 1, vec![f]);
        v.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            0,
            vec![],
        );
        assert!(!v.is_wired(0));
    }

    #[test]
    fn vectors_past_the_table_are_ignored() {
        let v = Vectors::new(1);
        let (_e, f) = efd();
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, 7, 1, vec![f]);
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, u32::MAX, 3, vec![]);
        assert!(!v.is_wired(0));
        // A huge count is bounded by the table, not iterated.
        let (e, f) = efd();
        let t = std::time::Instant::now();
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, EVENTFD, 0, u32::MAX, vec![f]);
        let trigger = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        v.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, trigger, 0, u32::MAX, vec![]);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(e.read().ok(), Some(1), "DATA_NONE with a count triggers");
    }
}
