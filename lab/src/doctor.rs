//! `lab doctor`: what this host offers the lab (cache, QEMU and where it came from, the
//! accelerator and why, kernels, topologies, hugepages), gathered once and shown as text.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::toolchain::{Qemu, QemuOrigin};
use crate::topology::Topology;
use crate::Lab;

/// What `lab doctor` found.
#[derive(Debug, Clone)]
pub struct Doctor {
    pub(crate) cache_dir: PathBuf,
    pub(crate) qemu: Qemu,
    /// The accelerator's name and why it was chosen.
    pub(crate) accel: String,
    pub(crate) accel_reason: String,
    pub(crate) host_cpu: String,
    /// The default kernel's name and `uname -r`.
    pub(crate) default_kernel: (String, String),
    pub(crate) kernel_recipes: Vec<String>,
    pub(crate) cached_kernels: usize,
    pub(crate) topologies: Vec<String>,
    /// The host's hugepage pools; `None` when the host's shape could not be read.
    pub(crate) hugepages: Option<Vec<String>>,
    /// How long the looking took (a fresh host provisions QEMU and the default kernel first).
    pub(crate) took: Duration,
}

impl Doctor {
    /// Readies the lab (provisioning what is missing) and looks at everything around it.
    pub async fn examine() -> Result<Doctor> {
        let started = Instant::now();
        let lab = Lab::ready().await?;
        let k = lab.default_kernel();
        let dirs = crate::kernel::RecipeDirs::default_dirs();
        Ok(Doctor {
            cache_dir: lab.cache.root().to_path_buf(),
            qemu: lab.qemu.clone(),
            accel: lab.accelerator().to_string(),
            accel_reason: lab.host_accel().1.reason.clone(),
            host_cpu: crate::toolchain::host_cpu_model(),
            default_kernel: (k.name.clone(), k.release.clone()),
            kernel_recipes: crate::kernel::recipe_names(&dirs)?,
            cached_kernels: crate::kernel::list(&lab.cache)?.len(),
            topologies: Topology::list()?,
            hugepages: crate::host_topology::HostTopology::this_host()
                .ok()
                .map(|host| host.hugepage_pools()),
            took: started.elapsed(),
        })
    }
}

/// One line per finding, the name in a column of its own.
impl fmt::Display for Doctor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = &self.qemu;
        writeln!(f, "cache dir      {}", self.cache_dir.display())?;
        writeln!(f, "QEMU           {} ({})", q.version, q.binary.display())?;
        match &q.origin {
            QemuOrigin::Host => writeln!(f, "QEMU origin    host")?,
            QemuOrigin::Bundle {
                packages,
                substitutions,
            } => {
                writeln!(
                    f,
                    "QEMU origin    pinned Debian bundle ({} packages)",
                    packages.len()
                )?;
                for s in substitutions {
                    writeln!(
                        f,
                        "  WARNING: {} {} left the archive; using {}",
                        s.package, s.locked, s.used
                    )?;
                }
            }
        }
        let vfio_user = if q.has_vfio_user { "yes" } else { "NO" };
        writeln!(f, "vfio-user-pci  {vfio_user}")?;
        writeln!(f, "accelerator    {} ({})", self.accel, self.accel_reason)?;
        writeln!(f, "host CPU       {}", self.host_cpu)?;
        let (name, release) = &self.default_kernel;
        writeln!(f, "default kernel {name} ({release})")?;
        writeln!(f, "kernel recipes {}", self.kernel_recipes.join(", "))?;
        writeln!(
            f,
            "cached kernels {} (lab kernel list)",
            self.cached_kernels
        )?;
        writeln!(f, "topologies     {}", self.topologies.join(", "))?;
        if let Some(pools) = &self.hugepages {
            let pools = if pools.is_empty() {
                "no pools".to_string()
            } else {
                pools.join(", ")
            };
            writeln!(f, "hugepages      {pools}")?;
        }
        writeln!(f, "(checked in {:.1?})", self.took)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> Doctor {
        Doctor {
            cache_dir: "/cache".into(),
            qemu: Qemu {
                binary: "/usr/bin/qemu-system-x86_64".into(),
                loader: None,
                data_dirs: Vec::new(),
                module_dir: None,
                version: "11.1.0".into(),
                has_vfio_user: true,
                origin: QemuOrigin::Host,
                sha256: String::new(),
            },
            accel: "kvm".into(),
            accel_reason: "probe booted".into(),
            host_cpu: "AMD EPYC".into(),
            default_kernel: ("v6.12".into(), "6.12.0-lab1234".into()),
            kernel_recipes: vec!["v6.12".into(), "v6.12+x".into()],
            cached_kernels: 2,
            topologies: vec!["a".into(), "b".into()],
            hugepages: Some(Vec::new()),
            took: Duration::from_millis(1500),
        }
    }

    #[test]
    fn the_report_has_a_line_per_finding() {
        assert_eq!(
            found().to_string(),
            "cache dir      /cache\n\
             QEMU           11.1.0 (/usr/bin/qemu-system-x86_64)\n\
             QEMU origin    host\n\
             vfio-user-pci  yes\n\
             accelerator    kvm (probe booted)\n\
             host CPU       AMD EPYC\n\
             default kernel v6.12 (6.12.0-lab1234)\n\
             kernel recipes v6.12, v6.12+x\n\
             cached kernels 2 (lab kernel list)\n\
             topologies     a, b\n\
             hugepages      no pools\n\
             (checked in 1.5s)\n"
        );
    }

    #[test]
    fn a_bundle_names_its_substitutions_and_no_host_shape_no_hugepage_line() {
        let mut d = found();
        d.qemu.has_vfio_user = false;
        d.qemu.origin = QemuOrigin::Bundle {
            packages: vec!["qemu-system-x86".into(), "libc6".into()],
            substitutions: vec![crate::debian::Substitution {
                package: "libc6".into(),
                locked: "2.41-1".into(),
                used: "2.41-2".into(),
            }],
        };
        d.hugepages = None;
        let text = d.to_string();
        assert!(
            text.contains(
                "QEMU origin    pinned Debian bundle (2 packages)\n  \
                 WARNING: libc6 2.41-1 left the archive; using 2.41-2\nvfio-user-pci  NO\n"
            ),
            "{text}"
        );
        assert!(!text.contains("hugepages"), "{text}");
    }
}
