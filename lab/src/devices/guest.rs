//! The guest side of every device: wait until its driver has bound, list its MSI-X vectors with
//! their affinities and whether the kernel manages them, and pin the vectors the spec names.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::RunningDevice;
use crate::guest::Shell;
use crate::topology::{format_cpulist, parse_cpulist};

/// One MSI-X vector of a bound device, as the guest saw it after pinning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vector {
    /// Index in the device's vector list (MSI-X order).
    pub vector: usize,
    /// Its Linux IRQ number (the `/proc/interrupts` row).
    pub irq: u32,
    /// The kernel spreads and owns this vector's affinity (`pci_alloc_irq_vectors_affinity`):
    /// writes to `smp_affinity_list` fail with EIO.
    pub managed: bool,
    /// `smp_affinity_list`.
    pub affinity: Vec<u32>,
    /// `effective_affinity_list` (on x86 it follows a new mask when the vector next fires).
    pub effective: Vec<u32>,
}

/// A bound device in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundDevice {
    /// Position in the VM's device list.
    pub index: usize,
    /// Its PCI address in the guest (`0000:00:10.0`).
    pub pci_address: String,
    /// The driver that bound it.
    pub driver: String,
    /// IRQ numbers by vector.
    pub irqs: Vec<u32>,
    /// Its MSI-X vectors, in order.
    pub vectors: Vec<Vector>,
}

impl BoundDevice {
    /// What `lab run` shows of it: a line for the device, then one per vector with its IRQ,
    /// whether the kernel manages it, and its requested and effective CPUs.
    pub(crate) fn describe(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "device {} at {} bound by {}",
            self.index, self.pci_address, self.driver
        )];
        for v in &self.vectors {
            lines.push(format!(
                "  vector {} IRQ {}{} affinity {} effective {}",
                v.vector,
                v.irq,
                if v.managed { " (managed)" } else { "" },
                format_cpulist(&v.affinity),
                format_cpulist(&v.effective)
            ));
        }
        lines
    }
}

/// Loads the devices' driver modules, waits until every driver has bound and every vector list
/// is stable, then lists each device's vectors and pins those the spec names. Pinning a
/// managed vector is an error that says so; the requested mask must read back.
///
/// Listing is one device after another: the listing writes each unmanaged vector's mask back,
/// which makes the arm64 ITS pick a least-loaded target again, and concurrent picks race.
pub async fn bind_and_pin(
    guest: &impl Shell,
    devices: &[RunningDevice],
) -> Result<Vec<BoundDevice>> {
    if devices.is_empty() {
        return Ok(Vec::new());
    }
    let waits: Vec<DriverWait> = devices
        .iter()
        .map(|d| DriverWait {
            address: d.pci_address(),
            driver: d.spec.guest_driver(),
        })
        .collect();
    let labels: Vec<String> = devices
        .iter()
        .map(|d| format!("device {} ({})", d.index, d.spec.label()))
        .collect();
    guest
        .sh(&wait_script(PCI_DEVICES, &waits, WAIT_POLLS))
        .await
        .with_context(|| format!("binding {}", labels.join(", ")))?;
    let mut bound = Vec::new();
    for ((device, wait), what) in devices.iter().zip(&waits).zip(&labels) {
        let addr = &wait.address;
        let listing = guest
            .sh(&listing_script(PCI_DEVICES, addr))
            .await
            .with_context(|| format!("listing the vectors of {what}"))?;
        let (driver, mut vectors) =
            parse_listing(&listing).with_context(|| format!("{what}: reading its vectors"))?;
        for (vector, cpus) in device.spec.irq_cpus.iter().enumerate() {
            let Some(cpus) = cpus else { continue };
            let count = vectors.len();
            let v = vectors
                .get_mut(vector)
                .with_context(|| format!("{what} has no MSI-X vector {vector} (it has {count})"))?;
            let list = format_cpulist(cpus);
            if v.managed {
                bail!(
                    "{what}: vector {vector} (IRQ {}) is managed by the kernel, which fixed its \
                     affinity at {} (effective {}); managed vectors cannot be pinned: choose their \
                     masks through the number of queues",
                    v.irq,
                    format_cpulist(&v.affinity),
                    format_cpulist(&v.effective)
                );
            }
            let irq = v.irq;
            let readback = guest
                .sh(&format!(
                    "echo {list} > /proc/irq/{irq}/smp_affinity_list\nread a < /proc/irq/{irq}/smp_affinity_list\necho $a"
                ))
                .await
                .with_context(|| format!("{what}: pinning IRQ {irq} to {list}"))?;
            // x86 moves an MSI only when it next fires, so `effective_affinity_list` lags; the
            // requested mask must read back, and workloads check where completions land.
            let requested = parse_cpulist(readback.trim()).unwrap_or_default();
            if requested != *cpus {
                bail!("{what}: IRQ {irq} was pinned to {list} but reads back {requested:?}");
            }
            v.affinity = requested;
        }
        bound.push(BoundDevice {
            index: device.index,
            pci_address: addr.clone(),
            driver,
            irqs: vectors.iter().map(|v| v.irq).collect(),
            vectors,
        });
    }
    Ok(bound)
}

/// Where the guest's PCI functions are in sysfs.
const PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// Polls of 0.1 s (plus the `sleep`'s own start) before a driver that has not bound is an error.
const WAIT_POLLS: u32 = 150;

/// One device the wait script waits for.
#[derive(Clone)]
struct DriverWait {
    address: String,
    driver: super::GuestDriver,
}

/// Shell functions every ready test may use, none of which forks: under TCG a fork and exec
/// of busybox costs about 20 ms (measured on an arm64 guest: 10 `cat`s 0.23 s, 10 `read`s
/// 0.01 s), and a poll loop of forks made binding 3 NVMe controllers take 3.4 s.
/// `exists GLOB`: the glob matched something.
const READY_HELPERS: &str = "exists() { [ -e \"$1\" ]; }\n\
     count() { set -- \"$1\"/msi_irqs/*; if [ -e \"$1\" ]; then n=$#; else n=0; fi; }\n";

/// Loads the modules, then polls every device at once until each has a driver, passes its
/// ready test and has vectors, and the vector counts have not changed for 3 polls (a driver
/// may allocate one vector first and its queues' vectors later); a device still missing one of
/// these after the last poll is named with what it lacks.
fn wait_script(root: &str, devices: &[DriverWait], polls: u32) -> String {
    let mut modules: Vec<&str> = devices
        .iter()
        .filter_map(|d| d.driver.module.as_deref())
        .collect();
    modules.sort();
    modules.dedup();
    let mut script: String = modules.iter().map(|m| format!("modprobe {m}\n")).collect();
    script.push_str(READY_HELPERS);
    let mut poll = String::new();
    let mut check = String::new();
    for d in devices {
        let (addr, ready, driver) = (&d.address, &d.driver.ready_test, &d.driver.driver);
        poll.push_str(&format!(
            "  dev={root}/{addr}\n\
               if [ -e $dev/driver ] && {ready}; then count $dev; [ $n -gt 0 ] || ok=0; now=\"$now $n\"; else ok=0; fi\n"
        ));
        check.push_str(&format!(
            "dev={root}/{addr}\n\
             [ -e $dev/driver ] || {{ echo '{driver} did not bind {addr}' >&2; dmesg | tail -30 >&2; exit 1; }}\n\
             {ready} || {{ echo '{driver} bound {addr} but did not finish setting it up' >&2; dmesg | tail -30 >&2; exit 1; }}\n\
             count $dev; [ $n -gt 0 ] || {{ echo '{addr} has no MSI-X vectors' >&2; exit 1; }}\n"
        ));
    }
    script.push_str(&format!(
        "last=; same=0; i=0\n\
         while [ $i -lt {polls} ]; do\n\
           i=$((i + 1)); ok=1; now=\n\
         {poll}\
           if [ $ok = 1 ] && [ \"$now\" = \"$last\" ]; then same=$((same + 1)); else same=0; fi\n\
           last=$now; [ $same -ge 3 ] && break\n\
           sleep 0.1\n\
         done\n\
         {check}"
    ));
    script
}

/// Prints a bound device's driver name and one line per vector: `vector IRQ MANAGED AFFINITY
/// EFFECTIVE`. The managed test writes the current mask back: the kernel refuses that (EIO)
/// only for managed vectors.
fn listing_script(root: &str, addr: &str) -> String {
    format!(
        "dev={root}/{addr}\n\
         d=$(readlink $dev/driver); echo driver ${{d##*/}}\n\
         for irq in $(ls $dev/msi_irqs | sort -n); do\n\
           read a < /proc/irq/$irq/smp_affinity_list\n\
           e=-; {{ read e < /proc/irq/$irq/effective_affinity_list; }} 2>/dev/null\n\
           if echo $a > /proc/irq/$irq/smp_affinity_list 2>/dev/null; then m=0; else m=1; fi\n\
           echo vector $irq $m $a ${{e:--}}\n\
         done\n"
    )
}

fn parse_listing(text: &str) -> Result<(String, Vec<Vector>)> {
    let mut driver = None;
    let mut vectors = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["driver", name] => driver = Some(name.to_string()),
            ["vector", irq, managed, affinity, effective] => {
                let cpus = |s: &str| -> Result<Vec<u32>> {
                    if s == "-" {
                        Ok(vec![])
                    } else {
                        parse_cpulist(s).with_context(|| format!("bad CPU list {s:?} in {line:?}"))
                    }
                };
                vectors.push(Vector {
                    vector: vectors.len(),
                    irq: irq
                        .parse()
                        .with_context(|| format!("bad IRQ in {line:?}"))?,
                    managed: *managed == "1",
                    affinity: cpus(affinity)?,
                    effective: cpus(effective)?,
                });
            }
            _ => {}
        }
    }
    Ok((driver.context("no driver line")?, vectors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_gives_vectors_in_order_with_managed_flags() {
        let (driver, v) =
            parse_listing("driver nvme\nvector 24 0 0-7 0\nvector 25 1 0-1 1\nvector 26 1 2-3 -\n")
                .unwrap();
        assert_eq!(driver, "nvme");
        assert_eq!(v.len(), 3);
        assert_eq!((v[1].vector, v[1].irq, v[1].managed), (1, 25, true));
        assert_eq!(v[1].affinity, [0, 1]);
        assert_eq!(v[1].effective, [1]);
        assert!(v[2].effective.is_empty());
        assert!(parse_listing("vector 1 0 0 0\n").is_err());
    }

    #[test]
    fn a_bound_device_is_described_with_its_vectors() {
        let vector = |vector, irq, managed| Vector {
            vector,
            irq,
            managed,
            affinity: vec![0, 1, 2, 3],
            effective: vec![2],
        };
        let device = BoundDevice {
            index: 0,
            pci_address: "0000:00:10.0".into(),
            driver: "nvme".into(),
            irqs: vec![24, 25],
            vectors: vec![vector(0, 24, false), vector(1, 25, true)],
        };
        assert_eq!(
            device.describe(),
            [
                "device 0 at 0000:00:10.0 bound by nvme",
                "  vector 0 IRQ 24 affinity 0-3 effective 2",
                "  vector 1 IRQ 25 (managed) affinity 0-3 effective 2",
            ]
        );
    }

    fn wait(address: &str, ready: &str) -> DriverWait {
        DriverWait {
            address: address.into(),
            driver: super::super::GuestDriver::new("nvme", None, ready),
        }
    }

    /// A fake sysfs tree: `addr/driver`, `addr/msi_irqs/N...` and `addr/ready`.
    fn fake_device(root: &std::path::Path, addr: &str, driver: bool, irqs: &[u32], ready: bool) {
        let dev = root.join(addr);
        std::fs::create_dir_all(dev.join("msi_irqs")).unwrap();
        if driver {
            std::fs::create_dir_all(root.join("drivers/nvme")).unwrap();
            std::os::unix::fs::symlink(root.join("drivers/nvme"), dev.join("driver")).unwrap();
        }
        for irq in irqs {
            std::fs::write(dev.join("msi_irqs").join(irq.to_string()), "").unwrap();
        }
        if ready {
            std::fs::write(dev.join("ready"), "").unwrap();
        }
    }

    fn run_sh(script: &str) -> std::process::Output {
        std::process::Command::new("sh")
            .args(["-c", script])
            .output()
            .unwrap()
    }

    #[test]
    fn the_wait_script_passes_ready_devices_and_names_the_one_that_is_not() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path().to_str().unwrap();
        fake_device(root.path(), "0000:00:10.0", true, &[24, 26], true);
        fake_device(root.path(), "0000:00:11.0", true, &[25], true);
        fake_device(root.path(), "0000:00:12.0", true, &[], true);
        fake_device(root.path(), "0000:00:13.0", true, &[30], false);
        fake_device(root.path(), "0000:00:14.0", false, &[], false);
        let ready = "exists $dev/read*";
        let both = [wait("0000:00:10.0", ready), wait("0000:00:11.0", ready)];
        let out = run_sh(&wait_script(r, &both, 20));
        assert!(out.status.success(), "{out:?}");
        for (addr, says) in [
            ("0000:00:12.0", "0000:00:12.0 has no MSI-X vectors"),
            (
                "0000:00:13.0",
                "nvme bound 0000:00:13.0 but did not finish setting it up",
            ),
            ("0000:00:14.0", "nvme did not bind 0000:00:14.0"),
        ] {
            let out = run_sh(&wait_script(r, &[both[0].clone(), wait(addr, ready)], 3));
            assert!(!out.status.success(), "{addr}: {out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains(says), "{addr}: {stderr}");
        }
    }

    #[test]
    fn the_listing_script_is_valid_shell() {
        let status = std::process::Command::new("sh")
            .args(["-n", "-c", &listing_script(PCI_DEVICES, "0000:00:10.0")])
            .status()
            .unwrap();
        assert!(status.success());
    }
}
