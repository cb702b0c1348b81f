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

/// Loads each device's driver module if it has one, waits until the driver has bound and its
/// vector list is stable, and pins every vector the spec names. Pinning a managed vector is an
/// error that says so; the requested mask must read back.
pub async fn bind_and_pin(
    guest: &impl Shell,
    devices: &[RunningDevice],
) -> Result<Vec<BoundDevice>> {
    let mut bound = Vec::new();
    for device in devices {
        let what = format!("device {} ({})", device.index, device.spec.label());
        let addr = device.pci_address();
        let side = device.spec.guest_driver();
        let listing = guest
            .sh(&bind_script(
                &addr,
                side.module.as_deref(),
                &side.driver,
                &side.ready_test,
            ))
            .await
            .with_context(|| format!("binding {what}"))?;
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
                    "echo {list} > /proc/irq/{irq}/smp_affinity_list\ncat /proc/irq/{irq}/smp_affinity_list"
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
            pci_address: addr,
            driver,
            irqs: vectors.iter().map(|v| v.irq).collect(),
            vectors,
        });
    }
    Ok(bound)
}

/// Loads the module, waits for the driver, the device's ready test and a vector list that
/// stopped changing, then prints the driver name and one line per vector:
/// `irq managed affinity effective`. The managed test writes the current mask
/// back: the kernel refuses that (EIO) only for managed vectors.
fn bind_script(addr: &str, module: Option<&str>, driver: &str, ready: &str) -> String {
    let load = module
        .map(|m| format!("modprobe {m}\n"))
        .unwrap_or_default();
    format!(
        "{load}dev=/sys/bus/pci/devices/{addr}\n\
         count() {{ ls $dev/msi_irqs 2>/dev/null | wc -l; }}\n\
         last=-1; same=0\n\
         for i in $(seq 150); do\n\
           if [ -e $dev/driver ] && {ready}; then\n\
             n=$(count); if [ \"$n\" -gt 0 ] && [ \"$n\" = \"$last\" ]; then same=$((same + 1)); else same=0; fi\n\
             last=$n; [ $same -ge 3 ] && break\n\
           fi\n\
           sleep 0.1\n\
         done\n\
         [ -e $dev/driver ] || {{ echo '{driver} did not bind {addr}' >&2; dmesg | tail -30 >&2; exit 1; }}\n\
         {ready} || {{ echo '{driver} bound {addr} but did not finish setting it up' >&2; dmesg | tail -30 >&2; exit 1; }}\n\
         [ \"$(count)\" -gt 0 ] || {{ echo '{addr} has no MSI-X vectors' >&2; exit 1; }}\n\
         echo driver $(basename $(readlink $dev/driver))\n\
         for irq in $(ls $dev/msi_irqs | sort -n); do\n\
           a=$(cat /proc/irq/$irq/smp_affinity_list)\n\
           e=$(cat /proc/irq/$irq/effective_affinity_list 2>/dev/null || true)\n\
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

    #[test]
    fn bind_script_is_valid_shell() {
        let script = bind_script(
            "0000:00:10.0",
            Some("ioatdma"),
            "ioatdma",
            "ls -d $dev/dma/dma*chan* > /dev/null 2>&1",
        );
        let status = std::process::Command::new("sh")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    }
}
