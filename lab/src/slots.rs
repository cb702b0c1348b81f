//! The host's CPUs, shared by every lab process on the machine. Each running guest holds as
//! many CPU slots as host threads it keeps busy, so parallel tests, CI jobs on one runner and
//! `lab compare`'s parallel boots never put more guests on the host than it has CPUs: an
//! oversubscribed TCG guest runs at a fraction of its speed, and what it measures shifts with it.
//!
//! A slot is a lock file (`<cache>/slots/cpu-N.lock`) held with `flock`, so slots go with the
//! process that held them, also when it is killed. Hand-written: no crate offers a cross-process
//! counting semaphore that the kernel releases on death; flock on N files is one.

use std::fs::{self, File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cache::open_lock_file;
use crate::toolchain::Accel;

/// The host CPUs guests may keep busy at once.
#[derive(Debug, Clone)]
pub(crate) struct CpuSlots {
    dir: PathBuf,
    total: usize,
    /// How long a guest waits for its slots before [`crate::Error::SlotWaitTimeout`]; `None`:
    /// as long as it takes.
    max_wait: Option<Duration>,
}

/// Slots held by one guest; released when dropped.
#[derive(Debug)]
pub(crate) struct SlotGuard {
    _files: Vec<File>,
}

/// Host threads a guest keeps busy: single-threaded TCG runs every vCPU on one thread, KVM and
/// multi-threaded TCG one thread per vCPU; under multi-threaded TCG the fewer its scenario
/// measured there (`declared`: its vCPUs mostly wait; never more than one per vCPU, never
/// none). Not under KVM: a figure measured under TCG says nothing of a guest on real CPUs.
pub(crate) fn guest_cost(accel: Accel, vcpus: usize, declared: Option<usize>) -> usize {
    match accel {
        Accel::TcgSingle | Accel::TcgIcount => 1,
        Accel::TcgMulti => declared.unwrap_or(vcpus).min(vcpus).max(1),
        Accel::Kvm => vcpus.max(1),
    }
}

impl CpuSlots {
    pub(crate) fn new(dir: impl Into<PathBuf>, total: usize) -> Result<CpuSlots> {
        if total == 0 {
            bail!("a host needs at least one CPU slot");
        }
        Ok(CpuSlots {
            dir: dir.into(),
            total,
            max_wait: None,
        })
    }

    /// Gives up waiting for slots after `wait` (see [`CpuSlots::acquire`]).
    pub(crate) fn with_max_wait(mut self, wait: Option<Duration>) -> CpuSlots {
        self.max_wait = wait;
        self
    }

    /// The slots under `cache_root`: `LAB_CPUS` of them if set (for a host shared with other
    /// work), otherwise one per CPU this process may run on; a guest waits for them at most
    /// `LAB_SLOT_WAIT` seconds if set, else as long as any lock (`LAB_LOCK_WAIT_S`, 2 hours):
    /// a lab that hangs holding slots stops the others with an error, not for ever.
    pub(crate) fn for_host(cache_root: &Path) -> Result<CpuSlots> {
        let max_wait = match std::env::var("LAB_SLOT_WAIT") {
            Ok(text) => Duration::from_secs(
                text.trim()
                    .parse()
                    .with_context(|| format!("LAB_SLOT_WAIT={text:?}: expected whole seconds"))?,
            ),
            Err(_) => crate::cache::lock::wait_most(),
        };
        let max_wait = Some(max_wait);
        Ok(CpuSlots::with_total(cache_root)?.with_max_wait(max_wait))
    }

    fn with_total(cache_root: &Path) -> Result<CpuSlots> {
        let total = match std::env::var("LAB_CPUS") {
            Ok(text) => text
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .with_context(|| format!("LAB_CPUS={text:?}: expected a positive whole number"))?,
            Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        CpuSlots::new(cache_root.join("slots"), total)
    }

    /// How many guests of `cost` run side by side on this host (at least one: a guest larger
    /// than the host still runs, alone).
    pub(crate) fn guests_at_once(&self, cost: usize) -> usize {
        (self.total / cost.clamp(1, self.total)).max(1)
    }

    /// Takes `cost` slots (all of them if the guest is larger than the host), waiting while
    /// other guests hold them. Slots are taken all at once or not at all, so two large guests
    /// never deadlock holding half each.
    pub(crate) async fn acquire(&self, cost: usize) -> Result<SlotGuard> {
        let want = cost.clamp(1, self.total);
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        // Wait in line: only the holder of the queue lock tries for freed slots, so a guest that
        // has waited is not overtaken by later ones (without it, one test's boot waited five
        // minutes while another test's boots kept taking every slot freed).
        let queue = self.dir.join("queue.lock");
        let line = tokio::task::spawn_blocking(move || -> Result<File> {
            let file = open_lock_file(&queue)?;
            file.lock()
                .with_context(|| format!("locking {}", queue.display()))?;
            Ok(file)
        });
        let started = Instant::now();
        let mut told = false;
        let mut line = Some(line);
        let mut held_line = None;
        loop {
            if let Some(waiting) = line.as_mut() {
                tokio::select! {
                    got = waiting => {
                        held_line = Some(got.context("waiting in line for a CPU slot")??);
                        line = None;
                    }
                    // Wake now and then to say so, and to give up at the wait's limit.
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            } else {
                if let Some(guard) = self.try_acquire(want)? {
                    drop(held_line);
                    return Ok(guard);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if let Some(limit) = self.max_wait.filter(|l| started.elapsed() > *l) {
                return Err(crate::Error::SlotWaitTimeout {
                    wanted: want,
                    total: self.total,
                    waited: limit,
                }
                .into());
            }
            if !told && started.elapsed() > Duration::from_secs(2) {
                crate::progress::step(format!(
                    "waiting for {want} of the host's {} CPU slots (other guests hold them)",
                    self.total
                ));
                told = true;
            }
        }
    }

    fn try_acquire(&self, want: usize) -> Result<Option<SlotGuard>> {
        let mut held = Vec::with_capacity(want);
        for n in 0..self.total {
            let path = self.dir.join(format!("cpu-{n}.lock"));
            let file = open_lock_file(&path)?;
            match file.try_lock() {
                Ok(()) => {
                    held.push(file);
                    if held.len() == want {
                        return Ok(Some(SlotGuard { _files: held }));
                    }
                }
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()))
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_at_once_divides_the_host() {
        let slots = CpuSlots::new("/nonexistent", 16).unwrap();
        assert_eq!(slots.guests_at_once(1), 16);
        assert_eq!(slots.guests_at_once(8), 2);
        assert_eq!(slots.guests_at_once(5), 3);
        assert_eq!(slots.guests_at_once(32), 1);
        assert_eq!(guest_cost(Accel::TcgSingle, 8, None), 1);
        assert_eq!(guest_cost(Accel::Kvm, 8, None), 8);
        // A scenario's measured threads count under multi-threaded TCG, bounded by the vCPUs
        // and by one; single-threaded TCG takes one and KVM one per vCPU whatever is declared.
        assert_eq!(guest_cost(Accel::TcgMulti, 8, Some(1)), 1);
        assert_eq!(guest_cost(Accel::TcgMulti, 8, Some(3)), 3);
        assert_eq!(guest_cost(Accel::TcgMulti, 2, Some(4)), 2);
        assert_eq!(guest_cost(Accel::TcgMulti, 8, Some(0)), 1);
        assert_eq!(guest_cost(Accel::TcgSingle, 8, Some(4)), 1);
        assert_eq!(guest_cost(Accel::Kvm, 8, Some(1)), 8);
        assert!(CpuSlots::new("/nonexistent", 0).is_err());
    }

    #[tokio::test]
    async fn slots_are_exclusive_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let slots = CpuSlots::new(dir.path(), 2).unwrap();
        let a = slots.acquire(1).await.unwrap();
        let b = slots.acquire(1).await.unwrap();
        // Both taken (flock is per open file, so this holds within one process too).
        assert!(slots.try_acquire(1).unwrap().is_none());
        drop(a);
        let c = slots
            .try_acquire(1)
            .unwrap()
            .expect("a's slot is free again");
        drop((b, c));
        // A guest larger than the host takes all of it, and only when all are free.
        let all = slots.acquire(5).await.unwrap();
        assert!(slots.try_acquire(1).unwrap().is_none());
        drop(all);
        assert!(slots.try_acquire(2).unwrap().is_some());
    }

    /// Without `LAB_SLOT_WAIT` a guest still waits no longer than any lock: a lab that hangs
    /// holding slots must not stop the others for ever (issue W2). (Environment set here: each
    /// test is its own process under nextest.)
    #[test]
    fn the_slot_wait_is_bounded_by_default() {
        let dir = tempfile::tempdir().unwrap();
        std::env::remove_var("LAB_SLOT_WAIT");
        std::env::set_var("LAB_LOCK_WAIT_S", "7");
        let slots = CpuSlots::for_host(dir.path()).unwrap();
        assert_eq!(slots.max_wait, Some(Duration::from_secs(7)));
        std::env::set_var("LAB_SLOT_WAIT", "3");
        assert_eq!(
            CpuSlots::for_host(dir.path()).unwrap().max_wait,
            Some(Duration::from_secs(3))
        );
    }

    #[tokio::test]
    async fn a_bounded_wait_ends_in_a_typed_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let slots = CpuSlots::new(dir.path(), 1)
            .unwrap()
            .with_max_wait(Some(Duration::from_millis(300)));
        let held = slots.acquire(1).await.unwrap();
        let started = Instant::now();
        let err = slots.acquire(1).await.unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(matches!(
            crate::Error::find(&err),
            Some(crate::Error::SlotWaitTimeout {
                wanted: 1,
                total: 1,
                ..
            })
        ));
        drop(held);
        slots.acquire(1).await.unwrap();
    }

    #[tokio::test]
    async fn guests_get_freed_slots_in_the_order_they_asked() {
        let dir = tempfile::tempdir().unwrap();
        let slots = CpuSlots::new(dir.path(), 1).unwrap();
        let held = slots.acquire(1).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for who in 0..3 {
            let (slots, tx) = (slots.clone(), tx.clone());
            waiters.push(tokio::spawn(async move {
                let guard = slots.acquire(1).await.unwrap();
                tx.send(who).unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
                drop(guard);
            }));
            // Let each get in line before the next asks.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        drop(held);
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(10), w)
                .await
                .unwrap()
                .unwrap();
        }
        let mut order = Vec::new();
        while let Ok(who) = rx.try_recv() {
            order.push(who);
        }
        // The first in line is served first; the rest wait behind it.
        assert_eq!(order.len(), 3);
        assert_eq!(order[0], 0, "{order:?}");
    }

    #[tokio::test]
    async fn a_waiting_guest_starts_when_a_slot_frees() {
        let dir = tempfile::tempdir().unwrap();
        let slots = CpuSlots::new(dir.path(), 1).unwrap();
        let held = slots.acquire(1).await.unwrap();
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.acquire(1).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "took a slot that was held");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter never got the freed slot")
            .unwrap()
            .unwrap();
    }
}
