//! `lab prepare` (what `.config/prepare.sh` runs before the VM tests): QEMU, the kernels of the
//! shipped scenarios' default comparisons (or those named) and their guest images provisioned up
//! front, so later runs find everything in the cache and no two tests build one thing at once.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::arch::Arch;
use crate::cache::Cache;
use crate::host::DEFAULT_IMAGE;
use crate::image::{build_image, ImageRecipe};
use crate::kernel::{BuildOptions, RecipeDirs};
use crate::variant::Variant;
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
///
/// Each architecture's kernels are a chain of their own (a variant starts from its base's object
/// tree), and the chains run side by side: another architecture's needs only the cache (its
/// cross toolchain, kernels and images), so it starts at once, beside QEMU's provisioning and
/// the host's kernels. One after the other, a cold run left a 2-core host a third idle for
/// minutes at a time (unpacking packages, linking, compressing, the guest programs' cargo
/// build); side by side one chain's single-threaded steps overlap the other's compiles. Every
/// chain runs to its end, so what could be built is cached; then the first failure is the
/// error (the others are said as they come).
pub async fn prepare(request: &Request) -> Result<Prepared> {
    let started = Instant::now();
    let kernels = request.kernel_names()?;
    let dirs = RecipeDirs::default_dirs();
    let chains = chains_by_arch(&kernels, &dirs)?;
    let cache = Cache::from_env()?;
    let opts = BuildOptions {
        dirs,
        ..BuildOptions::default()
    };
    let start_chain = |chain: &Chain| {
        let (cache, opts, chain) = (cache.clone(), opts.clone(), chain.clone());
        let images = request.images.clone();
        tokio::task::spawn_blocking(move || chain.build(&cache, &opts, &images))
    };
    let others: Vec<_> = chains
        .iter()
        .filter(|c| c.arch != Arch::host())
        .map(|c| (c.arch, start_chain(c)))
        .collect();
    let host = async {
        let lab = Lab::ready().await?;
        let built = match chains.iter().find(|c| c.arch == Arch::host()) {
            Some(chain) => start_chain(chain).await??,
            None => Built::default(),
        };
        anyhow::Ok((lab, built))
    }
    .await;
    // The first failure is the error; the host's is said at once too (the other chains may
    // build for minutes before it is returned), and every later one as it comes.
    let mut built = Vec::new();
    let mut first: Option<anyhow::Error> = None;
    let mut lab = None;
    match host {
        Ok((l, b)) => {
            lab = Some(l);
            built.push((Arch::host(), b));
        }
        Err(e) => {
            if !others.is_empty() {
                crate::progress::warn(format!(
                    "preparing the {} kernels failed (the other architectures' go on): {e:#}",
                    Arch::host()
                ));
            }
            first = Some(e);
        }
    }
    for (arch, handle) in others {
        match handle.await.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(b) => built.push((arch, b)),
            Err(e) if first.is_none() => first = Some(e),
            Err(e) => {
                crate::progress::warn(format!("preparing the {arch} kernels failed too: {e:#}"))
            }
        }
    }
    if let Some(e) = first {
        return Err(e);
    }
    let lab = lab.expect("the host's chain succeeded");
    // In the request's order, as one chain after the other listed them.
    let mut prepared = Vec::new();
    for name in &kernels {
        let kernel = built
            .iter()
            .flat_map(|(_, b)| &b.kernels)
            .find(|k| &k.name == name)
            .expect("every requested kernel is in its architecture's chain");
        prepared.push(kernel.clone());
    }
    let images = chains
        .iter()
        .flat_map(|c| {
            built
                .iter()
                .filter(move |(arch, _)| *arch == c.arch)
                .flat_map(|(_, b)| b.images.clone())
        })
        .collect();
    Ok(Prepared {
        kernels: prepared,
        images,
        accel: lab.accelerator().to_string(),
        took: started.elapsed(),
    })
}

/// One architecture's kernels, in the request's order.
#[derive(Debug, Clone, PartialEq)]
struct Chain {
    arch: Arch,
    kernels: Vec<String>,
}

/// What a chain made ready.
#[derive(Debug, Default)]
struct Built {
    kernels: Vec<PreparedKernel>,
    images: Vec<PreparedImage>,
}

/// The kernels grouped by the architecture they build for (`debian`: the host's), the chains
/// in the order their first kernel comes. Loads the recipes only: a bad name fails here, before
/// anything is built.
fn chains_by_arch(kernels: &[String], dirs: &RecipeDirs) -> Result<Vec<Chain>> {
    let mut chains: Vec<Chain> = Vec::new();
    for name in kernels {
        let arch = crate::kernel::arch_of(name, dirs)?.unwrap_or_else(Arch::host);
        match chains.iter_mut().find(|c| c.arch == arch) {
            Some(chain) => chain.kernels.push(name.clone()),
            None => chains.push(Chain {
                arch,
                kernels: vec![name.clone()],
            }),
        }
    }
    Ok(chains)
}

impl Chain {
    /// Builds (or finds) each kernel with the default image, then the further `images` for the
    /// first one. Blocking: minutes when cold.
    fn build(&self, cache: &Cache, opts: &BuildOptions, images: &[String]) -> Result<Built> {
        let default = ImageRecipe::by_name(DEFAULT_IMAGE)?;
        let mut built = Built::default();
        let mut first = None;
        for name in &self.kernels {
            let ready = Variant::kernel(name).prepare(cache, opts, Some(self.arch))?;
            let image = build_image(cache, &default, &ready.kernel)?;
            built.kernels.push(PreparedKernel {
                name: name.clone(),
                release: ready.kernel.release.clone(),
                image_hash: image.hash,
            });
            first.get_or_insert((name, ready.kernel));
        }
        if let Some((name, kernel)) = first {
            for recipe in images {
                let image = build_image(cache, &ImageRecipe::by_name(recipe)?, &kernel)?;
                built.images.push(PreparedImage {
                    recipe: recipe.clone(),
                    kernel: name.clone(),
                    hash: image.hash,
                });
            }
        }
        Ok(built)
    }
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
    fn each_architecture_is_a_chain_in_the_order_its_first_kernel_comes() {
        let dirs = RecipeDirs::default_dirs();
        let names: Vec<String> = [
            "v6.12",
            "v6.12-arm64",
            "v6.12+ptdma-claim-once",
            "debian",
            "v6.12-arm64+its-first-cpu",
        ]
        .map(String::from)
        .to_vec();
        let chains = chains_by_arch(&names, &dirs).unwrap();
        // `debian` is the host's package: it joins the host's chain, in the request's order.
        let mut x86 = vec!["v6.12", "v6.12+ptdma-claim-once"];
        let mut arm = vec!["v6.12-arm64", "v6.12-arm64+its-first-cpu"];
        match Arch::host() {
            Arch::X86_64 => x86.push("debian"),
            Arch::Aarch64 => arm.insert(1, "debian"),
        }
        let want = |arch, kernels: Vec<&str>| Chain {
            arch,
            kernels: kernels.into_iter().map(String::from).collect(),
        };
        assert_eq!(
            chains,
            [want(Arch::X86_64, x86), want(Arch::Aarch64, arm)],
            "v6.12 comes first"
        );

        let err = chains_by_arch(&["v6.12".into(), "no-such-kernel".into()], &dirs).unwrap_err();
        assert!(format!("{err:#}").contains("no-such-kernel"), "{err:#}");
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
