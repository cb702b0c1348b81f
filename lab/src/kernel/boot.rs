//! The kernel a VM boots: [`BootKernel`], and the one place that turns a name into one (a
//! recipe, built on demand, or `debian` for Debian's prebuilt kernel), with the script that
//! applies its boot-time settings (scheduler features, sysctls) in a guest (run by
//! `vm::settings`).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::build::{build_recipe, BuildOptions, BuiltKernel};
use super::recipe::{load as load_recipe, BootSettings};
use crate::arch::Arch;
use crate::cache::{hash_parts, Cache};
use crate::debian::{self, Archive};

/// The name that boots Debian's prebuilt kernel instead of a recipe.
pub(crate) const DEBIAN: &str = "debian";

/// The kernel a VM boots.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootKernel {
    /// The recipe name (`v6.12`), or `debian-<version>`.
    pub name: String,
    /// `uname -r` of the image.
    pub release: String,
    /// The architecture it runs on.
    #[serde(default)]
    pub arch: Arch,
    /// The kernel image (`bzImage`, arm64's `Image`, Debian's `vmlinuz`).
    pub image: PathBuf,
    /// `lib/modules/<release>` of this kernel, copied into the guest image.
    pub(crate) modules: Option<PathBuf>,
    /// Identity for manifests (package + version + sha256, or recipe and cache key).
    pub(crate) identity: String,
    /// The kernel's timer frequency (`CONFIG_HZ`), from its config; `None` when unknown.
    #[serde(default)]
    pub(crate) hz: Option<u32>,
}

impl BootKernel {
    /// What a VM needs of a built recipe kernel.
    pub(crate) fn from_build(built: &BuiltKernel) -> BootKernel {
        BootKernel {
            name: built.manifest.recipe.clone(),
            release: built.manifest.release.clone(),
            arch: built.manifest.arch,
            image: built.image(),
            modules: Some(built.modules_dir()),
            identity: format!(
                "recipe {} key {}",
                built.manifest.recipe, built.manifest.key
            ),
            hz: config_hz(&built.config()),
        }
    }
}

/// A kernel ready to boot with the boot settings it brings (its recipe's `[boot]` table merged
/// with the caller's extra settings).
#[derive(Debug, Clone)]
pub struct ReadyKernel {
    /// The kernel.
    pub kernel: BootKernel,
    /// Its boot settings: the recipe's `[boot]` table, then the variant's.
    pub settings: BootSettings,
}

/// Finds or builds kernel `name` (a recipe, or [`DEBIAN`]) and merges `extra` onto its recipe's
/// boot settings. Blocking: a cold build takes minutes. With `arch`, the kernel must be for it
/// (checked before anything is built; [`DEBIAN`] is that architecture's package); without,
/// a recipe builds for its own and [`DEBIAN`] is the host's.
pub(crate) fn prepare(
    cache: &Cache,
    name: &str,
    extra: &BootSettings,
    opts: &BuildOptions,
    arch: Option<Arch>,
) -> Result<ReadyKernel> {
    extra.validate(&format!("kernel {name}"))?;
    if name == DEBIAN {
        return Ok(ReadyKernel {
            kernel: debian_kernel(cache, arch.unwrap_or_else(Arch::host))?,
            settings: extra.clone(),
        });
    }
    let recipe = load_recipe(&opts.dirs, name)?;
    if let Some(arch) = arch {
        check_arch(&recipe, &opts.dirs, arch)?;
    }
    let built =
        build_recipe(cache, &recipe, opts).with_context(|| format!("building kernel {name}"))?;
    Ok(ReadyKernel {
        kernel: BootKernel::from_build(&built),
        settings: recipe.boot.merged(extra),
    })
}

/// Refuses a recipe for another architecture than `arch`, naming the recipe's file and the
/// recipes that would do.
pub(crate) fn check_arch(
    recipe: &super::Recipe,
    dirs: &super::RecipeDirs,
    arch: Arch,
) -> Result<()> {
    if recipe.arch == arch {
        return Ok(());
    }
    let fitting: Vec<String> = super::recipe_names(dirs)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| load_recipe(dirs, n).is_ok_and(|r| r.arch == arch))
        .collect();
    Err(crate::error::bad_input(
        dirs.recipes.join(format!("{}.toml", recipe.name)),
        "arch",
        format!(
            "kernel {} builds for {}, but the guest is {arch}: boot a {arch} kernel ({}) or a {} topology",
            recipe.name,
            recipe.arch,
            if fitting.is_empty() {
                "no recipe builds one".to_string()
            } else {
                fitting.join(", ")
            },
            recipe.arch
        ),
    ))
}

/// The architecture kernel `name` is for: its recipe's; `None` for [`DEBIAN`], which exists
/// for every architecture. Loads the recipe only; builds nothing.
pub(crate) fn arch_of(name: &str, dirs: &super::RecipeDirs) -> Result<Option<Arch>> {
    if name == DEBIAN {
        return Ok(None);
    }
    Ok(Some(load_recipe(dirs, name)?.arch))
}

/// [`prepare`] with no extra settings and the default build options.
pub(crate) fn resolve(cache: &Cache, name: &str, arch: Option<Arch>) -> Result<BootKernel> {
    Ok(prepare(
        cache,
        name,
        &BootSettings::default(),
        &BuildOptions::default(),
        arch,
    )?
    .kernel)
}

/// The lab's default kernel for `arch`'s guests: on x86_64 `LAB_DEFAULT_KERNEL` (a recipe name
/// or `debian`), else [`super::default_recipe`], built on first use.
pub(crate) fn default_kernel(cache: &Cache, arch: Arch) -> Result<BootKernel> {
    let name = match std::env::var("LAB_DEFAULT_KERNEL") {
        Ok(name) if arch == Arch::X86_64 => name,
        _ => super::default_recipe(arch).to_string(),
    };
    resolve(cache, &name, Some(arch))
        .with_context(|| format!("preparing the default {arch} kernel {name}"))
}

/// The guest-side shell commands that apply `settings` before the workload (scheduler features
/// through debugfs, sysctls through /proc/sys). Values are validated, so they need no quoting.
pub(crate) fn apply_script(settings: &BootSettings) -> Result<String> {
    settings.validate("boot settings")?;
    let mut script = String::new();
    if !settings.sched_features.is_empty() {
        script.push_str(
            "mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug\n",
        );
        for f in &settings.sched_features {
            script.push_str(&format!("echo {f} > /sys/kernel/debug/sched/features\n"));
        }
    }
    for (k, v) in &settings.sysctls {
        let path = k.replace('.', "/");
        script.push_str(&format!("echo '{v}' > /proc/sys/{path}\n"));
    }
    Ok(script)
}

/// The prebuilt Debian 6.12 kernel (trixie's `linux-image-amd64` target, `linux-image-arm64`
/// for aarch64 guests), unpacked into the cache. On x86 it has `ioatdma` but neither `ptdma`
/// nor `dmatest`; recipe kernels have all three. Warm (its lock entry resolved before and the
/// package unpacked), this asks neither apt nor the network, as the QEMU bundle does.
fn debian_kernel(cache: &Cache, arch: Arch) -> Result<BootKernel> {
    const KIND: &str = "debian-kernels";
    const RELEASE: Option<&str> = Some("trixie");
    const ONLY: Option<&str> = Some("linux-image-6.");
    let package = arch.debian_kernel_package();
    let bundle_name = match arch {
        // The x86 bundle keeps the name it had before other architectures.
        Arch::X86_64 => "kernel-debian-6.12".to_string(),
        _ => format!("kernel-debian-6.12-{}", arch.debian()),
    };
    let lock = debian::LockFile::default_path();
    if let Some(resolved) =
        debian::recorded_resolution(cache, &lock, &bundle_name, &[package], ONLY)?
    {
        if let Some(image) = resolved.packages.first() {
            if let Some(entry) = cache.lookup(KIND, &unpacked_key(image)) {
                resolved.note_substitutions();
                return unpacked_kernel(&entry, image, arch);
            }
        }
    }
    let archive = Archive::open_for(cache, &[arch.debian()])?;
    let bundle = debian::resolve_bundle(&archive, &lock, &bundle_name, &[package], RELEASE, ONLY)?;
    let image = bundle
        .packages
        .first()
        .with_context(|| format!("{package} resolved to no kernel image"))?
        .clone();
    let entry = cache.get_or_build(KIND, &unpacked_key(&image), |dir| {
        crate::progress::step(format!(
            "unpacking Debian kernel {} {}",
            image.name, image.version
        ));
        debian::unpack_bundle(&archive, &bundle, dir)?;
        // The package leaves modules.dep to its postinst; depmod reads <base>/lib/modules.
        if !dir.join("lib").exists() {
            std::os::unix::fs::symlink("usr/lib", dir.join("lib"))?;
        }
        let release = fs::read_dir(dir.join("usr/lib/modules"))?
            .flatten()
            .next()
            .context("the Debian kernel package has no modules")?
            .file_name();
        let status = crate::process::status(
            crate::process::command("depmod")
                .arg("-b")
                .arg(dir)
                .arg(&release),
        )
        .context("running depmod (install kmod)")?;
        if !status.success() {
            bail!("depmod failed for the Debian kernel");
        }
        Ok(())
    })?;
    unpacked_kernel(&entry, &image, arch)
}

/// The cache key of an unpacked Debian kernel: its package's checksum.
fn unpacked_key(image: &debian::PackageRef) -> String {
    hash_parts(&[("deb", image.sha256.as_bytes())])[..16].to_string()
}

/// The kernel in an unpacked Debian kernel entry.
fn unpacked_kernel(entry: &Path, image: &debian::PackageRef, arch: Arch) -> Result<BootKernel> {
    let boot = entry.join("boot");
    let vmlinuz = fs::read_dir(&boot)
        .with_context(|| format!("reading {}", boot.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .context("the Debian kernel package has no vmlinuz")?;
    let release = vmlinuz
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("vmlinuz-")
        .to_string();
    let modules = ["usr/lib/modules", "lib/modules"]
        .iter()
        .map(|d| entry.join(d).join(&release))
        .find(|p| p.is_dir());
    let hz = config_hz(&boot.join(format!("config-{release}")));
    Ok(BootKernel {
        name: format!("debian-{}", image.version),
        release,
        arch,
        image: vmlinuz,
        modules,
        identity: format!("{}={} sha256:{}", image.name, image.version, image.sha256),
        hz,
    })
}

/// `CONFIG_HZ` of the kernel whose `.config` is at `config`; `None` when the file or the line
/// is missing.
pub(crate) fn config_hz(config: &Path) -> Option<u32> {
    parse_config_hz(&fs::read_to_string(config).ok()?)
}

fn parse_config_hz(config: &str) -> Option<u32> {
    config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&hz| hz > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_refuses_what_would_need_quoting() {
        let settings = BootSettings {
            sched_features: vec!["NO_DELAY_DEQUEUE".into()],
            ..BootSettings::default()
        };
        let s = apply_script(&settings).unwrap();
        assert!(s.contains("echo NO_DELAY_DEQUEUE > /sys/kernel/debug/sched/features"));
        let bad = BootSettings {
            sched_features: vec!["X; rm -rf /".into()],
            ..BootSettings::default()
        };
        assert!(apply_script(&bad).is_err());
    }

    #[test]
    fn the_timer_frequency_comes_from_the_config_line() {
        let config = "# CONFIG_HZ_250 is not set\nCONFIG_HZ_1000=y\nCONFIG_HZ=1000\n";
        assert_eq!(parse_config_hz(config), Some(1000));
        assert_eq!(parse_config_hz("CONFIG_HZ_1000=y\n"), None);
        assert_eq!(parse_config_hz("CONFIG_HZ=\n"), None);
        assert_eq!(parse_config_hz("CONFIG_HZ=0\n"), None);
    }
}
