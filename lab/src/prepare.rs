//! `lab prepare` (what `.config/prepare.sh` runs before the VM tests): QEMU, the kernels of the
//! shipped scenarios' default comparisons (or those named) and their guest images provisioned up
//! front, so later runs find everything in the cache and no two tests build one thing at once.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::Lab;

/// What to prepare; empty `kernels` means every kernel of the registry's default comparisons.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Kernel recipes to build (empty: every kernel of the registered scenarios' default comparisons).
    pub kernels: Vec<String>,
    /// Kernels to build besides those (the device tests' ptdma fix).
    pub also: Vec<String>,
    /// Guest images to build besides the default one, for the first kernel of each architecture.
    pub images: Vec<String>,
}

impl Request {
    /// The kernels to build, in order, each once.
    pub(crate) fn kernel_names(&self) -> Result<Vec<String>> {
        let mut kernels = if self.kernels.is_empty() {
            crate::scenarios::default_kernels()?
        } else {
            self.kernels.clone()
        };
        for k in &self.also {
            if !kernels.contains(k) {
                kernels.push(k.clone());
            }
        }
        Ok(kernels)
    }
}

/// A kernel made ready, with the default guest image for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreparedKernel {
    pub name: String,
    pub release: String,
    pub image_hash: String,
}

/// A further guest image, built for the first kernel of its architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreparedImage {
    pub recipe: String,
    pub kernel: String,
    pub hash: String,
}

/// What `lab prepare` made ready.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub(crate) kernels: Vec<PreparedKernel>,
    pub(crate) images: Vec<PreparedImage>,
    /// The accelerator the lab found.
    pub(crate) accel: String,
    pub(crate) took: Duration,
}

/// Readies the lab, then builds (or finds) each kernel of `request` with the default image, and
/// the further images for the first kernel of each architecture (an aarch64 scenario's images
/// are arm64 builds).
pub async fn prepare(request: &Request) -> Result<Prepared> {
    let started = Instant::now();
    let kernels = request.kernel_names()?;
    let lab = Lab::ready().await?;
    let mut prepared = Vec::new();
    let mut firsts: Vec<(String, crate::kernel::BootKernel)> = Vec::new();
    for name in kernels {
        let ready = lab.prepare(&crate::variant::Variant::kernel(&name)).await?;
        let image = lab
            .image_for(crate::host::DEFAULT_IMAGE, &ready.kernel)
            .await?;
        prepared.push(PreparedKernel {
            name: name.clone(),
            release: ready.kernel.release.clone(),
            image_hash: image.hash,
        });
        if firsts.iter().all(|(_, k)| k.arch != ready.kernel.arch) {
            firsts.push((name, ready.kernel));
        }
    }
    let mut images = Vec::new();
    for (name, kernel) in firsts {
        for recipe in &request.images {
            let image = lab.image_for(recipe, &kernel).await?;
            images.push(PreparedImage {
                recipe: recipe.clone(),
                kernel: name.clone(),
                hash: image.hash,
            });
        }
    }
    Ok(Prepared {
        kernels: prepared,
        images,
        accel: lab.accelerator().to_string(),
        took: started.elapsed(),
    })
}

/// A line per kernel (`NAME: RELEASE (image HASH)`), per further image, and the time taken.
impl fmt::Display for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for k in &self.kernels {
            writeln!(f, "{}: {} (image {})", k.name, k.release, k.image_hash)?;
        }
        for i in &self.images {
            writeln!(f, "image {} for {}: {}", i.recipe, i.kernel, i.hash)?;
        }
        writeln!(f, "prepared in {:.0?} ({})", self.took, self.accel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registrys_kernels_come_first_and_also_adds_each_once() {
        let defaults = crate::scenarios::default_kernels().unwrap();
        let request = Request {
            also: vec!["v6.12+ptdma-claim-once".into(), defaults[0].clone()],
            ..Request::default()
        };
        let mut want = defaults.clone();
        want.push("v6.12+ptdma-claim-once".into());
        assert_eq!(request.kernel_names().unwrap(), want);
        let named = Request {
            kernels: vec!["v6.12".into()],
            also: vec!["v6.12".into(), "debian".into()],
            ..Request::default()
        };
        assert_eq!(named.kernel_names().unwrap(), ["v6.12", "debian"]);
    }

    #[test]
    fn the_output_has_a_line_per_kernel_and_image() {
        let prepared = Prepared {
            kernels: vec![
                PreparedKernel {
                    name: "v6.12".into(),
                    release: "6.12.0-lab1".into(),
                    image_hash: "aaaa".into(),
                },
                PreparedKernel {
                    name: "v6.12+x".into(),
                    release: "6.12.0-lab2".into(),
                    image_hash: "bbbb".into(),
                },
            ],
            images: vec![PreparedImage {
                recipe: "sched".into(),
                kernel: "v6.12".into(),
                hash: "cccc".into(),
            }],
            accel: "kvm".into(),
            took: Duration::from_secs(42),
        };
        assert_eq!(
            prepared.to_string(),
            "v6.12: 6.12.0-lab1 (image aaaa)\n\
             v6.12+x: 6.12.0-lab2 (image bbbb)\n\
             image sched for v6.12: cccc\n\
             prepared in 42s (kvm)\n"
        );
    }
}
