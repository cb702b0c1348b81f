//! Passthrough of host PCI devices to a guest with `vfio-pci`: a `Claim` on one device of
//! the host file (`crate::hosts`) and its whole IOMMU group.
//!
//! Taking a device: the IOMMU must be on; the address must hold the host file's vendor:device
//! ID; the host must not be using it (`Sysfs::users`: a mounted or held NVMe namespace, a
//! dmaengine channel in use, an interface up); no other member of its IOMMU group may be in
//! use while bound to a host driver (bridges stay as they are; members on `vfio-pci` or
//! `pci-stub` are free), and none bound to a host driver may be taken unless the host file
//! lists it as a device of its own (default deny: an AHCI controller, a USB host or a GPU that
//! shares the group is refused, never unbound). Then, with the group's lock held, the journal (`<cache>/passthrough/
//! group-N.json`: every member's address, driver and `driver_override`) is written, atomically,
//! before anything changes; each member gets `driver_override = vfio-pci`, is unbound from its
//! driver and bound to `vfio-pci`. Releasing the claim (the VM going, its drop, a failed start)
//! gives each member back its driver and override and removes the journal.
//!
//! A lab that was killed leaves its journal behind and its lock free (the kernel drops flocks
//! of dead processes). `restore_all`, run at every lab start and by `lab host restore`,
//! replays each journal whose lock is free; a claim on the same group replays it first too.
//! Restoring is idempotent: a member already back on its driver is left alone.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::sysfs::{Sysfs, FREE_DRIVERS};
use super::{Attached, Attachment, Device, GuestDriver, HostLookup, HostPart};
use crate::hosts::{Bdf, HostDevice, HostFile, StandIn};

/// A device on the command line, `passthrough:NAME`, and what the host file says it is once
/// resolved ([`super::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Passthrough {
    /// The device's name in the host file.
    pub name: String,
    /// The host file's entry, filled in by [`super::resolve`] before boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostDevice>,
    /// Every address the host file lists: the group members the claim may take from a host
    /// driver besides the device itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listed: Vec<Bdf>,
}

/// One group member as it was before the lab took it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JournalEntry {
    pub bdf: Bdf,
    /// The driver it was bound to (None: unbound).
    pub driver: Option<String>,
    /// Its `driver_override` (None: unset).
    pub driver_override: Option<String>,
}

/// What a claim changed, written before it changes anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Journal {
    /// The sysfs root it applies to (`/sys`; a test's fake tree elsewhere): replayed only there.
    pub sysfs: PathBuf,
    pub group: String,
    /// The device asked for (host file name and address) and the process that took it.
    pub device: String,
    pub pid: u32,
    pub members: Vec<JournalEntry>,
}

/// A device and its IOMMU group, taken from the host for one VM. Dropping it restores the
/// host's drivers (errors are logged; [`Claim::release`] returns them).
#[derive(Debug)]
pub(crate) struct Claim {
    pub device: HostDevice,
    pub group: String,
    sysfs: Sysfs,
    journal_path: PathBuf,
    journal: Journal,
    /// The group's lock: held while the claim lives, so no other lab replays or takes it.
    _lock: File,
    released: bool,
}

/// Where the journals and group locks live.
pub(crate) fn journal_dir(cache: &crate::cache::Cache) -> PathBuf {
    cache.dir("passthrough")
}

fn group_paths(dir: &Path, group: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("group-{group}.json")),
        dir.join(format!("group-{group}.lock")),
    )
}

/// Takes the group's lock without waiting; None when another live process holds it.
fn try_lock(path: &Path) -> Result<Option<File>> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

fn write_journal(path: &Path, journal: &Journal) -> Result<()> {
    let dir = path.parent().context("journal path without a directory")?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".journal-")
        .tempfile_in(dir)?;
    serde_json::to_writer_pretty(&mut tmp, journal)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A journal, its driver names checked: replaying one writes to `drivers/<name>/bind`, so a
/// name that is not a plain driver name (`../x`) is refused, not followed.
fn read_journal(path: &Path) -> Result<Journal> {
    let text = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let journal: Journal =
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))?;
    for m in &journal.members {
        for name in [&m.driver, &m.driver_override].into_iter().flatten() {
            let plain = !name.is_empty()
                && name != "."
                && name != ".."
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
            if !plain {
                bail!(
                    "{}: member {}: {name:?} is not a driver name: refused (restore it by hand)",
                    path.display(),
                    m.bdf
                );
            }
        }
    }
    Ok(journal)
}

impl Claim {
    /// Checks and takes `device` (see the module docs); `listed`: the addresses the host file
    /// lists, the only group members it may take from a host driver. Every refusal names its
    /// reason.
    pub(crate) fn take(
        sysfs: &Sysfs,
        journal_dir: &Path,
        device: &HostDevice,
        listed: &[Bdf],
    ) -> Result<Claim> {
        let what = format!(
            "passthrough device {} ({}, declared at {})",
            device.name, device.bdf, device.declared_at
        );
        if !sysfs.iommu_on() {
            bail!(
                "{what}: the IOMMU is off ({} lists no groups): boot the host with \
                 intel_iommu=on (Intel) or amd_iommu=on (AMD) and load vfio-pci",
                sysfs.root().join("kernel/iommu_groups").display()
            );
        }
        if !sysfs.exists(&device.bdf) {
            bail!(
                "{what}: no PCI device {} on this host (no {})",
                device.bdf,
                sysfs.device_dir(&device.bdf).display()
            );
        }
        let found = sysfs.id(&device.bdf)?;
        if found != device.id {
            bail!(
                "{what}: the host file's id = {} but {} holds {found}: not the device listed \
                 (check `lspci -nn -s {}`)",
                device.id,
                device.bdf,
                device.bdf
            );
        }
        let group = sysfs.group(&device.bdf)?;
        fs::create_dir_all(journal_dir)
            .with_context(|| format!("creating {}", journal_dir.display()))?;
        let (journal_path, lock_path) = group_paths(journal_dir, &group);
        let Some(lock) = try_lock(&lock_path)? else {
            return Err(crate::Error::DeviceInUse {
                device: what,
                users: format!(
                    "IOMMU group {group} is taken by another lab process (lock {})",
                    lock_path.display()
                ),
            }
            .into());
        };
        // A journal nobody holds is a killed lab's: give the host its drivers back first, or
        // this claim would record vfio-pci as the original driver.
        if journal_path.exists() {
            let stale = read_journal(&journal_path)?;
            tracing::warn!(
                group,
                pid = stale.pid,
                "restoring a killed lab's passthrough first"
            );
            restore(sysfs, &stale)?;
            fs::remove_file(&journal_path)?;
        }
        let members = sysfs.group_members(&group)?;
        let mut refusals = Vec::new();
        let mut entries = Vec::new();
        for member in &members {
            let driver = sysfs.driver(member);
            let users = sysfs.users(member)?;
            if *member == device.bdf {
                if !users.is_empty() {
                    refusals.push(format!(
                        "{member} is in use by the host (driver {}): {}",
                        driver.as_deref().unwrap_or("none"),
                        users.join("; ")
                    ));
                }
            } else if sysfs.is_bridge(member) {
                continue;
            } else if driver
                .as_deref()
                .is_some_and(|d| !FREE_DRIVERS.contains(&d))
                && !users.is_empty()
            {
                refusals.push(format!(
                    "IOMMU group {group} also holds {member} (driver {}), which the host is using: {}; \
                     passing {} through would take it too",
                    driver.as_deref().unwrap_or("none"),
                    users.join("; "),
                    device.bdf
                ));
            } else if let Some(d) = driver
                .as_deref()
                .filter(|d| !FREE_DRIVERS.contains(d) && !listed.contains(member))
            {
                refusals.push(format!(
                    "IOMMU group {group} also holds {member} (driver {d}), which the host file \
                     does not list: passing {} through would unbind it from {d}; list it in the \
                     host file as a device of its own if the host can spare it",
                    device.bdf
                ));
            }
            if driver.as_deref() == Some("pci-stub") {
                continue;
            }
            entries.push(JournalEntry {
                bdf: member.clone(),
                driver,
                driver_override: sysfs.driver_override(member)?,
            });
        }
        if !refusals.is_empty() {
            return Err(crate::Error::DeviceInUse {
                device: what,
                users: refusals.join("; "),
            }
            .into());
        }
        let journal = Journal {
            sysfs: sysfs.root().to_path_buf(),
            group: group.clone(),
            device: format!("{} {}", device.name, device.bdf),
            pid: std::process::id(),
            members: entries,
        };
        write_journal(&journal_path, &journal)?;
        let mut claim = Claim {
            device: device.clone(),
            group,
            sysfs: sysfs.clone(),
            journal_path,
            journal,
            _lock: lock,
            released: false,
        };
        if let Err(e) = claim.bind_all() {
            return Err(match claim.release_inner() {
                Ok(()) => e.context(format!("{what}: binding to vfio-pci (host drivers restored)")),
                Err(r) => e.context(format!(
                    "{what}: binding to vfio-pci; restoring failed too ({r:#}): run `lab host restore`"
                )),
            });
        }
        tracing::info!(device = %claim.device.name, bdf = %claim.device.bdf, group = %claim.group, "passed to vfio-pci");
        Ok(claim)
    }

    fn bind_all(&self) -> Result<()> {
        for m in &self.journal.members {
            if m.driver.as_deref() == Some("vfio-pci") {
                continue;
            }
            self.sysfs.set_driver_override(&m.bdf, Some("vfio-pci"))?;
            if let Some(driver) = &m.driver {
                if m.bdf != self.device.bdf {
                    tracing::info!(bdf = %m.bdf, driver, group = %self.group, "taking an idle member of the group too");
                }
                self.sysfs.unbind(&m.bdf, driver)?;
            }
            self.sysfs.bind(&m.bdf, "vfio-pci")?;
            let now = self.sysfs.driver(&m.bdf);
            if now.as_deref() != Some("vfio-pci") {
                bail!("{} is bound to {now:?} after binding it to vfio-pci", m.bdf);
            }
        }
        Ok(())
    }

    /// The journal this claim wrote.
    #[cfg(test)]
    pub(crate) fn journal_path(&self) -> &Path {
        &self.journal_path
    }

    /// Gives the group back to the host's drivers and removes the journal.
    #[cfg(test)]
    pub(crate) fn release(mut self) -> Result<()> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        restore(&self.sysfs, &self.journal).with_context(|| {
            format!(
                "giving {} back to the host (journal {} kept: `lab host restore` retries)",
                self.device.bdf,
                self.journal_path.display()
            )
        })?;
        self.released = true;
        fs::remove_file(&self.journal_path)
            .with_context(|| format!("removing {}", self.journal_path.display()))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Err(e) = self.release_inner() {
            tracing::error!("{e:#}");
            crate::progress::warn(format!("{e:#}"));
        }
    }
}

/// Puts every member of a journal back as it was; members already so are left alone.
pub(crate) fn restore(sysfs: &Sysfs, journal: &Journal) -> Result<()> {
    let mut errors = Vec::new();
    for m in journal.members.iter().rev() {
        if let Err(e) = restore_member(sysfs, m) {
            errors.push(format!("{}: {e:#}", m.bdf));
        }
    }
    if !errors.is_empty() {
        bail!(
            "restoring IOMMU group {}: {}",
            journal.group,
            errors.join("; ")
        );
    }
    Ok(())
}

fn restore_member(sysfs: &Sysfs, m: &JournalEntry) -> Result<()> {
    if !sysfs.exists(&m.bdf) {
        tracing::warn!(bdf = %m.bdf, "gone from the host; nothing to restore");
        return Ok(());
    }
    let current = sysfs.driver(&m.bdf);
    if sysfs.driver_override(&m.bdf)? != m.driver_override {
        sysfs.set_driver_override(&m.bdf, m.driver_override.as_deref())?;
    }
    if current == m.driver {
        return Ok(());
    }
    if let Some(now) = &current {
        sysfs.unbind(&m.bdf, now)?;
    }
    if let Some(driver) = &m.driver {
        sysfs.bind(&m.bdf, driver)?;
        let now = sysfs.driver(&m.bdf);
        if now.as_deref() != Some(driver.as_str()) {
            bail!("bound to {now:?} after binding it to {driver}");
        }
    }
    Ok(())
}

/// What [`restore_all`] did with one journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replayed {
    /// Its devices are back on their drivers and the journal is gone.
    Restored { group: String, device: String },
    /// A live lab process holds it.
    InUse { group: String, device: String },
    /// It belongs to another sysfs root (a test's fake tree, or the host's while testing).
    OtherRoot { path: PathBuf, root: PathBuf },
}

impl std::fmt::Display for Replayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replayed::Restored { group, device } => {
                write!(f, "IOMMU group {group} ({device}): host drivers restored")
            }
            Replayed::InUse { group, device } => {
                write!(
                    f,
                    "IOMMU group {group} ({device}): in use by a running lab, left alone"
                )
            }
            Replayed::OtherRoot { path, root } => {
                write!(
                    f,
                    "{}: for sysfs at {}, left alone",
                    path.display(),
                    root.display()
                )
            }
        }
    }
}

/// Replays every journal in `dir` that no live lab holds (a killed lab's), for `sysfs`.
pub(crate) fn restore_all(sysfs: &Sysfs, dir: &Path) -> Result<Vec<Replayed>> {
    let mut done = Vec::new();
    let Ok(listing) = fs::read_dir(dir) else {
        return Ok(done);
    };
    let mut journals: Vec<PathBuf> = listing
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("group-"))
        })
        .collect();
    journals.sort();
    let mut errors = Vec::new();
    for path in journals {
        // Lock first, then read: a journal read under the free lock is a dead lab's, and no
        // claim can replace it meanwhile.
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let group = stem.trim_start_matches("group-").to_string();
        let (_, lock_path) = group_paths(dir, &group);
        let lock = try_lock(&lock_path)?;
        let journal = match read_journal(&path) {
            Ok(j) => j,
            // Restored and removed by its owner or another lab since the listing.
            Err(_) if !path.exists() => continue,
            Err(e) => {
                errors.push(format!("{e:#}"));
                continue;
            }
        };
        if journal.sysfs != sysfs.root() {
            done.push(Replayed::OtherRoot {
                path,
                root: journal.sysfs,
            });
            continue;
        }
        let Some(_lock) = lock else {
            done.push(Replayed::InUse {
                group: journal.group,
                device: journal.device,
            });
            continue;
        };
        match restore(sysfs, &journal) {
            Ok(()) => {
                fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
                done.push(Replayed::Restored {
                    group: journal.group,
                    device: journal.device,
                });
            }
            Err(e) => errors.push(format!("{}: {e:#}", path.display())),
        }
    }
    if !errors.is_empty() {
        bail!("restoring passed-through devices: {}", errors.join("; "));
    }
    Ok(done)
}

/// At a lab's start (an explicit call of the CLI and the test helper, never a side effect of
/// building a `Lab`): replays a killed lab's journals on `sysfs`, warning on what fails (the
/// start goes on; `lab host restore` retries and reports).
pub(crate) fn restore_at_start(cache: &crate::cache::Cache, sysfs: &Sysfs) {
    let dir = journal_dir(cache);
    if !dir.is_dir() {
        return;
    }
    match restore_all(sysfs, &dir) {
        Ok(done) => {
            for r in done
                .iter()
                .filter(|r| matches!(r, Replayed::Restored { .. }))
            {
                crate::progress::step(format!("a killed lab's passthrough: {r}"));
            }
        }
        Err(e) => crate::progress::warn(format!("{e:#} (run `lab host restore` as root)")),
    }
}

/// `lab host restore`: gives this host (`/sys`) back every device a killed lab left on
/// `vfio-pci`, replaying the journals in `cache`; running it twice changes nothing.
pub fn restore_host(cache: &crate::cache::Cache) -> Result<Restoration> {
    Ok(Restoration(restore_all(
        &Sysfs::host(),
        &journal_dir(cache),
    )?))
}

/// What `lab host restore` did, a line per journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restoration(pub(crate) Vec<Replayed>);

impl std::fmt::Display for Restoration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            writeln!(f, "nothing to restore")?;
        }
        for r in &self.0 {
            writeln!(f, "{r}")?;
        }
        Ok(())
    }
}

/// `lab host show`: a host file's devices as this host has them. Reads only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostReport {
    pub(crate) file: PathBuf,
    pub(crate) description: String,
    pub(crate) iommu_on: bool,
    /// [`describe`] of each listed device.
    pub(crate) devices: Vec<String>,
}

impl HostReport {
    /// The devices of `file` as `sysfs` has them.
    pub(crate) fn read(sysfs: &Sysfs, file: &HostFile) -> HostReport {
        HostReport {
            file: file.path.clone(),
            description: file.description.clone(),
            iommu_on: sysfs.iommu_on(),
            devices: file.devices.values().map(|d| describe(sysfs, d)).collect(),
        }
    }

    /// The host file `host` names (see `HostFile::select`) against this host's `/sys`.
    pub fn this_host(host: Option<&str>) -> Result<HostReport> {
        Ok(HostReport::read(&Sysfs::host(), &HostFile::select(host)?))
    }
}

/// The file and its description, whether the IOMMU is on, then a line per device.
impl std::fmt::Display for HostReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} ({})", self.file.display(), self.description)?;
        let iommu = if self.iommu_on {
            "on"
        } else {
            "off (intel_iommu=on / amd_iommu=on)"
        };
        writeln!(f, "IOMMU: {iommu}")?;
        for d in &self.devices {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

/// One line on a host file's device as this host has it (`lab host show`): whether the address
/// exists and holds the listed ID, its driver, IOMMU group (and the group's other members) and
/// what uses it. Reads only.
pub(crate) fn describe(sysfs: &Sysfs, d: &HostDevice) -> String {
    let head = format!(
        "{:<10} {} {} ({})",
        d.name,
        d.bdf,
        d.id,
        d.stands_in.driver()
    );
    if !sysfs.exists(&d.bdf) {
        return format!("{head}: no such device here");
    }
    let id = match sysfs.id(&d.bdf) {
        Ok(found) if found == d.id => "id ok".to_string(),
        Ok(found) => format!("ID MISMATCH: holds {found}"),
        Err(e) => format!("id unreadable: {e:#}"),
    };
    let driver = sysfs.driver(&d.bdf).unwrap_or_else(|| "none".into());
    let group = match sysfs.group(&d.bdf) {
        Ok(g) => {
            let others: Vec<String> = sysfs
                .group_members(&g)
                .unwrap_or_default()
                .into_iter()
                .filter(|m| *m != d.bdf)
                .map(|m| m.to_string())
                .collect();
            if others.is_empty() {
                format!("group {g}")
            } else {
                format!("group {g} with {}", others.join(" "))
            }
        }
        Err(_) => "no IOMMU group".into(),
    };
    let users = match sysfs.users(&d.bdf) {
        Ok(u) if u.is_empty() => "not in use".to_string(),
        Ok(u) => format!("IN USE: {}", u.join("; ")),
        Err(e) => format!("use unknown: {e:#}"),
    };
    format!("{head}: {id}, driver {driver}, {group}, {users}")
}

impl Passthrough {
    /// What the host function stands in for in the guest, once resolved.
    pub(crate) fn stands_in(&self) -> Option<StandIn> {
        self.host.as_ref().map(|h| h.stands_in)
    }
}

#[async_trait::async_trait]
impl Device for Passthrough {
    fn label(&self) -> String {
        "passthrough".to_string()
    }

    /// What it stands in for (`dma-engine`, `nvme`); `passthrough` while unresolved.
    fn role(&self) -> String {
        match self.stands_in() {
            Some(StandIn::Ioatdma | StandIn::Ptdma) => "dma-engine",
            Some(StandIn::Nvme) => "nvme",
            None => "passthrough",
        }
        .to_string()
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "passthrough": self })
    }

    fn validate(&self) -> Result<()> {
        if self.host.is_none() {
            bail!(
                "passthrough:{} was not looked up in a host file (devices::resolve)",
                self.name
            );
        }
        Ok(())
    }

    fn resolve(&self, hosts: &mut HostLookup) -> Result<Option<std::sync::Arc<dyn Device>>> {
        if self.host.is_some() {
            return Ok(None);
        }
        let file = hosts
            .host_file()
            .with_context(|| format!("passthrough:{}", self.name))?;
        let host = file
            .device(&self.name)
            .cloned()
            .with_context(|| format!("passthrough:{}", self.name))?;
        Ok(Some(std::sync::Arc::new(Passthrough {
            name: self.name.clone(),
            host: Some(host),
            listed: file.devices.values().map(|d| d.bdf.clone()).collect(),
        })))
    }

    fn exclusive(&self) -> bool {
        true
    }

    async fn attach(&self, at: &Attachment<'_>) -> Result<Attached> {
        let host = self.host.clone().with_context(|| {
            format!("passthrough:{} was not looked up in a host file", self.name)
        })?;
        let sysfs = at.host.sysfs.clone();
        let journals = journal_dir(&at.host.cache);
        let listed = self.listed.clone();
        let claim =
            tokio::task::spawn_blocking(move || Claim::take(&sysfs, &journals, &host, &listed))
                .await??;
        Ok(Attached {
            qemu_args: qemu_args(&at.id, &at.slot, &claim.device.bdf),
            host_part: Some(Box::new(claim)),
            ..Attached::default()
        })
    }

    fn guest_driver(&self) -> GuestDriver {
        match self.stands_in() {
            Some(StandIn::Nvme) => GuestDriver::new("nvme", None, super::builtin::NVME_READY),
            Some(s) => GuestDriver::new(s.driver(), Some(s.driver()), super::lab_dma::DMA_READY),
            None => GuestDriver::new("vfio-pci", None, super::lab_dma::DMA_READY),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A claim lives as long as the guest: dropped after QEMU, it gives the host its drivers back.
impl HostPart for Claim {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// QEMU's side: `vfio-pci` with the host address at guest slot `addr`.
pub(crate) fn qemu_args(id: &str, addr: &str, bdf: &Bdf) -> Vec<String> {
    vec![
        "-device".into(),
        serde_json::json!({"driver": "vfio-pci", "id": id, "addr": addr, "host": bdf.as_str()})
            .to_string(),
    ]
}

#[cfg(test)]
mod tests;
