//! The host's PCI devices as sysfs shows them, rooted anywhere: `/sys` on a real host, a temp
//! dir with the same layout in tests. Reads: IDs, class, bound driver, `driver_override`, IOMMU
//! group and its members, and what shows the host is using a device. Writes: `driver_override`,
//! a driver's `unbind` and `bind` (files opened for writing only, never created).
//!
//! Layout read (under the root, `/sys`): `bus/pci/devices/BDF/{vendor,device,class,
//! driver_override}`, the links `bus/pci/devices/BDF/driver` and `.../iommu_group`,
//! `kernel/iommu_groups/N/devices/BDF`, `bus/pci/drivers/NAME/{bind,unbind}`, and below a
//! device `nvme/nvmeX/nvmeXnY[/nvmeXnYpZ]/holders/`, `dma/dmaXchanY/in_use`,
//! `net/IFACE/operstate`. Mounts come from a mounts file (`/proc/self/mounts`); on the host
//! also swap areas (`/proc/swaps`) and processes holding a namespace, a partition or the
//! controller open (`/proc/PID/fd/*`), read from a proc directory that tests fake too.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::hosts::{Bdf, PciId};

/// A sysfs tree and the mounts file that go together.
#[derive(Debug, Clone)]
pub(crate) struct Sysfs {
    root: PathBuf,
    mounts: PathBuf,
    /// Where `swaps` and `PID/fd/` are read (`/proc` on the host; none: not looked at).
    proc_dir: Option<PathBuf>,
    /// Tests: act out the kernel's side of `bind`, `unbind` and `driver_override` writes on a
    /// fake tree (links appear and go), see [`Sysfs::emulated`].
    emulate: bool,
}

/// Drivers a device may be bound to and still count as free for `vfio-pci`'s group check.
pub(crate) const FREE_DRIVERS: &[&str] = &["vfio-pci", "pci-stub"];

impl Sysfs {
    /// This host's `/sys` and `/proc/self/mounts`.
    pub(crate) fn host() -> Sysfs {
        Sysfs::at("/sys", "/proc/self/mounts").with_proc("/proc")
    }

    /// Also reads swap areas and open file descriptors from `dir`, laid out as `/proc`.
    pub(crate) fn with_proc(mut self, dir: impl Into<PathBuf>) -> Sysfs {
        self.proc_dir = Some(dir.into());
        self
    }

    /// A tree at `root` (the directory standing for `/sys`) with mounts read from `mounts`.
    pub(crate) fn at(root: impl Into<PathBuf>, mounts: impl Into<PathBuf>) -> Sysfs {
        Sysfs {
            root: root.into(),
            mounts: mounts.into(),
            proc_dir: None,
            emulate: false,
        }
    }

    /// A fake tree whose writes the lab acts out as the kernel would: `bind` creates the
    /// `driver` link (refused when another driver holds the device or `driver_override` names
    /// another), `unbind` removes it, `driver_override` keeps the name or `(null)`. Every write
    /// is also appended to `writes.log` in the root. For tests only; the real kernel does this.
    #[cfg(test)]
    pub(crate) fn emulated(root: impl Into<PathBuf>, mounts: impl Into<PathBuf>) -> Sysfs {
        Sysfs {
            emulate: true,
            ..Sysfs::at(root, mounts)
        }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn device_dir(&self, bdf: &Bdf) -> PathBuf {
        self.root.join("bus/pci/devices").join(bdf.as_str())
    }

    fn driver_dir(&self, driver: &str) -> PathBuf {
        self.root.join("bus/pci/drivers").join(driver)
    }

    pub(crate) fn exists(&self, bdf: &Bdf) -> bool {
        self.device_dir(bdf).is_dir()
    }

    fn read(&self, path: &Path) -> Result<String> {
        Ok(fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_string())
    }

    fn hex_attr(&self, bdf: &Bdf, name: &str) -> Result<u32> {
        let path = self.device_dir(bdf).join(name);
        let text = self.read(&path)?;
        u32::from_str_radix(text.trim_start_matches("0x"), 16)
            .with_context(|| format!("{}: {text:?} is not a hex number", path.display()))
    }

    /// The vendor:device ID the address holds.
    pub(crate) fn id(&self, bdf: &Bdf) -> Result<PciId> {
        Ok(PciId {
            vendor: self.hex_attr(bdf, "vendor")? as u16,
            device: self.hex_attr(bdf, "device")? as u16,
        })
    }

    /// A PCI-to-PCI or CardBus bridge (class 06 04/06 07/06 09): vfio-pci lets a group hold
    /// bridges bound to any driver (`pcieport`).
    pub(crate) fn is_bridge(&self, bdf: &Bdf) -> bool {
        self.hex_attr(bdf, "class")
            .is_ok_and(|c| matches!(c >> 8, 0x0604 | 0x0607 | 0x0609))
    }

    /// The driver bound to the device, if any.
    pub(crate) fn driver(&self, bdf: &Bdf) -> Option<String> {
        let link = fs::read_link(self.device_dir(bdf).join("driver")).ok()?;
        link.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// `driver_override`, None when unset (`(null)`).
    pub(crate) fn driver_override(&self, bdf: &Bdf) -> Result<Option<String>> {
        let text = self.read(&self.device_dir(bdf).join("driver_override"))?;
        Ok((!text.is_empty() && text != "(null)").then_some(text))
    }

    /// Whether the IOMMU is on: the kernel lists IOMMU groups only then.
    pub(crate) fn iommu_on(&self) -> bool {
        fs::read_dir(self.root.join("kernel/iommu_groups"))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
    }

    /// The device's IOMMU group number.
    pub(crate) fn group(&self, bdf: &Bdf) -> Result<String> {
        let link = self.device_dir(bdf).join("iommu_group");
        let target = fs::read_link(&link)
            .with_context(|| format!("{bdf} has no IOMMU group ({} is missing)", link.display()))?;
        Ok(target
            .file_name()
            .context("IOMMU group link without a name")?
            .to_string_lossy()
            .into_owned())
    }

    /// Every device in IOMMU group `group`, sorted.
    pub(crate) fn group_members(&self, group: &str) -> Result<Vec<Bdf>> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group)
            .join("devices");
        let mut members = Vec::new();
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            members.push(
                name.parse::<Bdf>()
                    .map_err(anyhow::Error::msg)
                    .with_context(|| format!("in {}", dir.display()))?,
            );
        }
        members.sort();
        Ok(members)
    }

    /// What shows the host is using the device, one reason each: a mounted, held, swapped-on
    /// or open NVMe namespace (or partition, or an open controller), a dmaengine channel in
    /// use, a network interface that is up. Empty: nothing sysfs, the mounts file and the
    /// proc directory show.
    pub(crate) fn users(&self, bdf: &Bdf) -> Result<Vec<String>> {
        let dev = self.device_dir(bdf);
        let mounts = fs::read_to_string(&self.mounts)
            .with_context(|| format!("reading {}", self.mounts.display()))?;
        let mut reasons = Vec::new();
        // Device nodes (`/dev/NAME`) whose users the proc directory shows.
        let mut nodes: Vec<String> = subdirs(&dev.join("nvme"))
            .iter()
            .map(|c| file_name(c))
            .collect();
        // Namespaces: `nvme0n1` under the controller, or with native multipath a hidden
        // path device `nvme0c0n1` there and the block device `nvme0n1` in `block/`.
        let mut namespaces = std::collections::BTreeMap::new();
        for ctrl in subdirs(&dev.join("nvme")) {
            for child in subdirs(&ctrl) {
                let Some(ns) = namespace_name(&file_name(&child)) else {
                    continue;
                };
                let block = if file_name(&child) == ns {
                    child
                } else {
                    self.root.join("block").join(&ns)
                };
                namespaces.entry(ns).or_insert(block);
            }
        }
        for (ns, dir) in namespaces {
            let mut blocks = vec![(ns.clone(), dir.clone())];
            for part in subdirs(&dir) {
                let name = file_name(&part);
                if name.starts_with(&format!("{ns}p")) {
                    blocks.push((name, part));
                }
            }
            for (name, block) in blocks {
                nodes.push(name.clone());
                for line in mounts.lines() {
                    let mut words = line.split_whitespace();
                    if words.next() == Some(&format!("/dev/{name}")) {
                        let on = words.next().unwrap_or("?");
                        reasons.push(format!("{name} is mounted on {on}"));
                    }
                }
                let holders: Vec<String> = entries(&block.join("holders"))
                    .iter()
                    .map(|p| file_name(p))
                    .collect();
                if !holders.is_empty() {
                    reasons.push(format!("{name} is held by {}", holders.join(", ")));
                }
            }
        }
        if let Some(proc_dir) = &self.proc_dir {
            reasons.extend(node_users(proc_dir, &nodes));
        }
        for chan in subdirs(&dev.join("dma")) {
            if self.read(&chan.join("in_use")).is_ok_and(|v| v == "1") {
                reasons.push(format!(
                    "dmaengine channel {} is in use (a client holds it)",
                    file_name(&chan)
                ));
            }
        }
        for iface in subdirs(&dev.join("net")) {
            if self.read(&iface.join("operstate")).is_ok_and(|v| v == "up") {
                reasons.push(format!("network interface {} is up", file_name(&iface)));
            }
        }
        Ok(reasons)
    }

    /// Sets (`Some`) or clears (`None`) the device's `driver_override`.
    pub(crate) fn set_driver_override(&self, bdf: &Bdf, driver: Option<&str>) -> Result<()> {
        let path = self.device_dir(bdf).join("driver_override");
        self.write(&path, &format!("{}\n", driver.unwrap_or("")))
    }

    /// Unbinds the device from `driver`.
    pub(crate) fn unbind(&self, bdf: &Bdf, driver: &str) -> Result<()> {
        self.write(&self.driver_dir(driver).join("unbind"), bdf.as_str())
    }

    /// Binds the device to `driver`, which must be loaded.
    pub(crate) fn bind(&self, bdf: &Bdf, driver: &str) -> Result<()> {
        let dir = self.driver_dir(driver);
        if !dir.is_dir() {
            bail!(
                "driver {driver} is not loaded (no {}){}",
                dir.display(),
                if driver == "vfio-pci" {
                    ": run `modprobe vfio-pci` as root"
                } else {
                    ""
                }
            );
        }
        self.write(&dir.join("bind"), bdf.as_str())
    }

    fn write(&self, path: &Path, value: &str) -> Result<()> {
        if self.emulate {
            return self.emulate_write(path, value);
        }
        use std::io::Write;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("opening {} for writing (run as root?)", path.display()))?;
        file.write_all(value.as_bytes())
            .with_context(|| format!("writing {value:?} to {}", path.display()))
    }

    /// The kernel's side of a write, acted out on a fake tree (see [`Sysfs::emulated`]).
    fn emulate_write(&self, path: &Path, value: &str) -> Result<()> {
        use std::io::Write;
        let rel = path
            .strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string();
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("writes.log"))?;
        writeln!(log, "{rel} <- {}", value.trim())?;
        let name = file_name(path);
        let parent = path.parent().context("write without a directory")?;
        match name.as_str() {
            "driver_override" => {
                let v = value.trim();
                fs::write(
                    path,
                    if v.is_empty() {
                        "(null)\n".to_string()
                    } else {
                        format!("{v}\n")
                    },
                )?;
            }
            "bind" | "unbind" => {
                let driver = file_name(parent);
                let bdf: Bdf = value.trim().parse().map_err(anyhow::Error::msg)?;
                let link = self.device_dir(&bdf).join("driver");
                let current = self.driver(&bdf);
                if name == "unbind" {
                    if current.as_deref() != Some(driver.as_str()) {
                        bail!("writing {bdf} to {}: No such device", path.display());
                    }
                    fs::remove_file(&link)?;
                } else {
                    let over = self.driver_override(&bdf)?;
                    if current.is_some() || over.as_deref().is_some_and(|o| o != driver) {
                        bail!(
                            "writing {bdf} to {}: Device or resource busy",
                            path.display()
                        );
                    }
                    std::os::unix::fs::symlink(parent, &link)?;
                }
            }
            other => bail!(
                "the emulated kernel has no file {other} ({})",
                path.display()
            ),
        }
        Ok(())
    }
}

/// Swap areas on, and processes holding open, any of `nodes` (`/dev/NAME`), from a directory
/// laid out as `/proc`: one reason per node and kind, naming up to three processes.
fn node_users(proc_dir: &Path, nodes: &[String]) -> Vec<String> {
    let mut reasons = Vec::new();
    let swaps = fs::read_to_string(proc_dir.join("swaps")).unwrap_or_default();
    for line in swaps.lines().skip(1) {
        if let Some(name) = line
            .split_whitespace()
            .next()
            .and_then(|d| d.strip_prefix("/dev/"))
        {
            if nodes.iter().any(|n| n == name) {
                reasons.push(format!("{name} is a swap area"));
            }
        }
    }
    let mut holders: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for process in entries(proc_dir) {
        let pid = file_name(&process);
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may exit meanwhile, and some fds are not readable: what is read counts.
        for fd in entries(&process.join("fd")) {
            let Ok(target) = fs::read_link(&fd) else {
                continue;
            };
            let Some(name) = target.to_str().and_then(|t| t.strip_prefix("/dev/")) else {
                continue;
            };
            if let Some(node) = nodes.iter().find(|n| *n == name) {
                let comm = fs::read_to_string(process.join("comm")).unwrap_or_default();
                let who = format!("{pid} ({})", comm.trim());
                let list = holders.entry(node.as_str()).or_default();
                if !list.contains(&who) {
                    list.push(who);
                }
            }
        }
    }
    for (node, who) in holders {
        let more = if who.len() > 3 {
            format!(" and {} more", who.len() - 3)
        } else {
            String::new()
        };
        let shown: Vec<&str> = who.iter().take(3).map(String::as_str).collect();
        reasons.push(format!(
            "{node} is open in process {}{more}",
            shown.join(", ")
        ));
    }
    reasons
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The namespace block device a child of an NVMe controller stands for: `nvme0n1` itself, or
/// `nvme0n1` for the multipath path device `nvme0c0n1`; None for anything else.
fn namespace_name(name: &str) -> Option<String> {
    let rest = name.strip_prefix("nvme")?;
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let (head, nsid) = rest.split_once('n')?;
    if !digits(nsid) {
        return None;
    }
    let subsys = match head.split_once('c') {
        Some((subsys, ctrl)) if digits(subsys) && digits(ctrl) => subsys,
        None if digits(head) => head,
        _ => return None,
    };
    Some(format!("nvme{subsys}n{nsid}"))
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// A fake sysfs tree for tests (here and in `passthrough`): devices, drivers, IOMMU groups.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;

    /// A temp dir laid out as `/sys`, with `mounts` beside it.
    pub(crate) struct FakeSys {
        pub dir: tempfile::TempDir,
    }

    impl Default for FakeSys {
        fn default() -> Self {
            FakeSys::new()
        }
    }

    impl FakeSys {
        pub(crate) fn new() -> FakeSys {
            let dir = tempfile::tempdir().unwrap();
            for d in [
                "sys/bus/pci/devices",
                "sys/bus/pci/drivers",
                "sys/kernel/iommu_groups",
            ] {
                fs::create_dir_all(dir.path().join(d)).unwrap();
            }
            fs::write(dir.path().join("mounts"), "proc /proc proc rw 0 0\n").unwrap();
            fs::create_dir_all(dir.path().join("proc")).unwrap();
            fs::write(
                dir.path().join("proc/swaps"),
                "Filename\tType\tSize\tUsed\tPriority\n",
            )
            .unwrap();
            FakeSys { dir }
        }

        pub(crate) fn root(&self) -> PathBuf {
            self.dir.path().join("sys")
        }

        pub(crate) fn mounts(&self) -> PathBuf {
            self.dir.path().join("mounts")
        }

        pub(crate) fn sysfs(&self) -> Sysfs {
            Sysfs::emulated(self.root(), self.mounts()).with_proc(self.proc_dir())
        }

        /// The directory standing for `/proc` (`swaps`, `PID/fd/`, `PID/comm`).
        pub(crate) fn proc_dir(&self) -> PathBuf {
            self.dir.path().join("proc")
        }

        /// A swap area on `/dev/NAME`.
        pub(crate) fn swap(&self, name: &str) -> &Self {
            let path = self.proc_dir().join("swaps");
            let mut text = fs::read_to_string(&path).unwrap();
            text.push_str(&format!("/dev/{name}\tpartition\t8388604\t0\t-2\n"));
            fs::write(path, text).unwrap();
            self
        }

        /// Process `pid` (`comm`) holding `/dev/NAME` open as descriptor `fd`.
        pub(crate) fn open_by(&self, pid: u32, comm: &str, fd: u32, name: &str) -> &Self {
            let dir = self.proc_dir().join(pid.to_string());
            fs::create_dir_all(dir.join("fd")).unwrap();
            fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
            std::os::unix::fs::symlink(format!("/dev/{name}"), dir.join("fd").join(fd.to_string()))
                .unwrap();
            self
        }

        pub(crate) fn driver(&self, name: &str) -> &Self {
            let d = self.root().join("bus/pci/drivers").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("bind"), "").unwrap();
            fs::write(d.join("unbind"), "").unwrap();
            self
        }

        /// A device `bdf` with `id` (`8086:2021`), class, in IOMMU group `group`, bound to
        /// `driver`.
        pub(crate) fn device(
            &self,
            bdf: &str,
            id: &str,
            class: u32,
            group: &str,
            driver: Option<&str>,
        ) -> &Self {
            let dev = self.root().join("bus/pci/devices").join(bdf);
            fs::create_dir_all(&dev).unwrap();
            let (v, d) = id.split_once(':').unwrap();
            fs::write(dev.join("vendor"), format!("0x{v}\n")).unwrap();
            fs::write(dev.join("device"), format!("0x{d}\n")).unwrap();
            fs::write(dev.join("class"), format!("0x{class:06x}\n")).unwrap();
            fs::write(dev.join("driver_override"), "(null)\n").unwrap();
            let g = self.root().join("kernel/iommu_groups").join(group);
            fs::create_dir_all(g.join("devices")).unwrap();
            std::os::unix::fs::symlink(&dev, g.join("devices").join(bdf)).unwrap();
            std::os::unix::fs::symlink(&g, dev.join("iommu_group")).unwrap();
            if let Some(driver) = driver {
                self.driver(driver);
                std::os::unix::fs::symlink(
                    self.root().join("bus/pci/drivers").join(driver),
                    dev.join("driver"),
                )
                .unwrap();
            }
            self
        }

        /// Makes `path` (relative to the device) a directory, with `file` = `value` in it.
        pub(crate) fn under(&self, bdf: &str, path: &str, file: Option<(&str, &str)>) -> &Self {
            let d = self.root().join("bus/pci/devices").join(bdf).join(path);
            fs::create_dir_all(&d).unwrap();
            if let Some((f, v)) = file {
                fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
            self
        }

        pub(crate) fn mount(&self, line: &str) -> &Self {
            let mut text = fs::read_to_string(self.mounts()).unwrap();
            text.push_str(line);
            text.push('\n');
            fs::write(self.mounts(), text).unwrap();
            self
        }

        pub(crate) fn writes(&self) -> String {
            fs::read_to_string(self.root().join("writes.log")).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeSys;
    use super::*;

    fn bdf(s: &str) -> Bdf {
        s.parse().unwrap()
    }

    #[test]
    fn reads_ids_groups_drivers_and_users_from_a_fake_tree() {
        let f = FakeSys::new();
        f.device("0000:00:04.0", "8086:2021", 0x088000, "7", Some("ioatdma"))
            .device("0000:00:04.1", "8086:2021", 0x088000, "7", None)
            .device("0000:00:1c.0", "8086:a110", 0x060400, "7", Some("pcieport"))
            .under("0000:00:04.0", "dma/dma0chan0", Some(("in_use", "1")))
            .device("0000:41:00.0", "144d:a808", 0x010802, "30", Some("nvme"))
            .under("0000:41:00.0", "nvme/nvme0/nvme0n1/nvme0n1p1/holders", None)
            .under("0000:41:00.0", "nvme/nvme0/nvme0n1/holders/dm-0", None)
            .under("0000:41:00.0", "nvme/nvme0/nvme0n1/nvme0n1p2/holders", None)
            .mount("/dev/nvme0n1p2 /boot ext4 rw 0 0");
        let s = f.sysfs();
        assert!(s.iommu_on());
        assert_eq!(s.id(&bdf("0000:00:04.0")).unwrap().to_string(), "8086:2021");
        assert_eq!(s.driver(&bdf("0000:00:04.0")).as_deref(), Some("ioatdma"));
        assert_eq!(s.driver(&bdf("0000:00:04.1")), None);
        assert_eq!(s.driver_override(&bdf("0000:00:04.0")).unwrap(), None);
        assert_eq!(s.group(&bdf("0000:00:04.0")).unwrap(), "7");
        assert_eq!(
            s.group_members("7").unwrap(),
            [
                bdf("0000:00:04.0"),
                bdf("0000:00:04.1"),
                bdf("0000:00:1c.0")
            ]
        );
        assert!(s.is_bridge(&bdf("0000:00:1c.0")));
        assert!(!s.is_bridge(&bdf("0000:00:04.0")));
        assert_eq!(
            s.users(&bdf("0000:00:04.0")).unwrap(),
            ["dmaengine channel dma0chan0 is in use (a client holds it)"]
        );
        assert!(s.users(&bdf("0000:00:04.1")).unwrap().is_empty());
        assert_eq!(
            s.users(&bdf("0000:41:00.0")).unwrap(),
            ["nvme0n1 is held by dm-0", "nvme0n1p2 is mounted on /boot"]
        );
    }

    #[test]
    fn the_hosts_proc_shows_this_process_holding_a_device_node() {
        // /dev/full: a node next to nothing else holds open (unlike /dev/null).
        let held = fs::File::open("/dev/full").unwrap();
        let reasons = node_users(Path::new("/proc"), &["full".to_string()]);
        let me = format!("{} (", std::process::id());
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("full is open in process") && r.contains(&me)),
            "{reasons:?}"
        );
        drop(held);
    }

    #[test]
    fn swap_and_open_descriptors_count_as_use() {
        let f = FakeSys::new();
        f.device("0000:41:00.0", "144d:a808", 0x010802, "30", Some("nvme"))
            .under("0000:41:00.0", "nvme/nvme0/nvme0n1/nvme0n1p1/holders", None)
            .under("0000:41:00.0", "nvme/nvme0/nvme0n1/nvme0n1p2/holders", None)
            .device("0000:42:00.0", "144d:a808", 0x010802, "31", Some("nvme"))
            .under("0000:42:00.0", "nvme/nvme1/nvme1n1/holders", None)
            .swap("nvme0n1p1")
            .open_by(812, "fio", 5, "nvme0n1p2")
            .open_by(812, "fio", 6, "nvme0n1p2")
            .open_by(901, "nvme", 3, "nvme0")
            .open_by(902, "bash", 1, "null")
            // A namespace that only shares a prefix with another device's is not its user.
            .open_by(903, "dd", 4, "nvme1n10");
        let s = f.sysfs();
        assert_eq!(
            s.users(&bdf("0000:41:00.0")).unwrap(),
            [
                "nvme0n1p1 is a swap area",
                "nvme0 is open in process 901 (nvme)",
                "nvme0n1p2 is open in process 812 (fio)"
            ]
        );
        assert!(s.users(&bdf("0000:42:00.0")).unwrap().is_empty());
        // Without a proc directory (plain `at`), only sysfs and the mounts file are read.
        assert!(Sysfs::at(f.root(), f.mounts())
            .users(&bdf("0000:41:00.0"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_emulated_kernel_binds_unbinds_and_honours_the_override() {
        let f = FakeSys::new();
        f.device("0000:00:04.0", "8086:2021", 0x088000, "7", Some("ioatdma"))
            .driver("vfio-pci");
        let s = f.sysfs();
        let b = bdf("0000:00:04.0");
        s.set_driver_override(&b, Some("vfio-pci")).unwrap();
        assert_eq!(s.driver_override(&b).unwrap().as_deref(), Some("vfio-pci"));
        assert!(s.bind(&b, "vfio-pci").is_err(), "still bound to ioatdma");
        s.unbind(&b, "ioatdma").unwrap();
        assert!(s.unbind(&b, "ioatdma").is_err());
        assert!(
            s.bind(&b, "ioatdma").is_err(),
            "the override names vfio-pci"
        );
        s.bind(&b, "vfio-pci").unwrap();
        assert_eq!(s.driver(&b).as_deref(), Some("vfio-pci"));
        s.set_driver_override(&b, None).unwrap();
        assert_eq!(s.driver_override(&b).unwrap(), None);
        assert!(s
            .bind(&b, "no-such-driver")
            .unwrap_err()
            .to_string()
            .contains("not loaded"));
        assert!(f
            .writes()
            .contains("bus/pci/drivers/ioatdma/unbind <- 0000:00:04.0"));
        // Without emulation a write goes to the file and nothing else happens; no file is made.
        let plain = Sysfs::at(f.root(), f.mounts());
        assert!(plain.bind(&b, "ghost").is_err());
        assert!(!f.root().join("bus/pci/drivers/ghost").exists());
    }
}
