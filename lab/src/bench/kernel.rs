//! `lab bench kernel`: how long kernels take to build, cold (the default recipe from its source)
//! and as a one-patch variant from the base's cached object tree.
//!
//! By default the figures are read from the cache: every entry's `manifest.json` records its
//! build's `seconds` (unpacking, patching, configuring, `make`, installing), `jobs` and whether
//! it started from a base's tree (`incremental_from`). The entry of each recipe as it is now is
//! preferred; without one the newest entry of that recipe name is shown and marked as built
//! from an older recipe.
//!
//! With `--cold` both are built now, by a child `lab kernel build BASE VARIANT` into a temporary
//! `LAB_CACHE_DIR` under the cache, which is removed afterwards. That takes minutes (about ten
//! for v6.12 on two cores) and keeps a few GiB of object tree until it ends (a killed run leaves
//! it in `<cache>/.bench/`, to be removed by hand). The temporary cache
//! shares the real cache's apt state, so the source package is not downloaded again: the cold
//! figure is the build, not the network.

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::cache::Cache;
use crate::kernel::{self, BuildOptions, CachedKernel};

/// The one-patch variant the table times: S1's revert on top of the default kernel.
pub const DEFAULT_VARIANT: &str = "v6.12+wake-affine-idle-revert";

/// One build as its manifest records it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelBuild {
    pub recipe: String,
    pub key: String,
    pub seconds: f64,
    pub jobs: usize,
    /// Key of the base whose tree it started from; `None`: a cold build.
    pub incremental_from: Option<String>,
    /// Whether this is the entry of the recipe as it is now (else: an older recipe's).
    pub current: bool,
}

impl KernelBuild {
    fn from_cached(k: &CachedKernel, current: bool) -> KernelBuild {
        KernelBuild {
            recipe: k.manifest.recipe.clone(),
            key: k.key.clone(),
            seconds: k.manifest.build.seconds,
            jobs: k.manifest.build.jobs,
            incremental_from: k.manifest.build.incremental_from.clone(),
            current,
        }
    }

    /// `992.8 s = 16 min 33 s (cold, make -j2, entry a91fe3ef08)`, with the share of `base`'s
    /// cold build when given.
    pub(crate) fn text(&self, base: Option<&KernelBuild>) -> String {
        let how = match &self.incremental_from {
            None => "cold".to_string(),
            Some(key) => format!("from the tree of {}", &key[..key.len().min(10)]),
        };
        let share = match base {
            Some(b) if b.incremental_from.is_none() && b.seconds > 0.0 => {
                format!(", {:.1}% of cold", 100.0 * self.seconds / b.seconds)
            }
            _ => String::new(),
        };
        let minutes = if self.seconds >= 60.0 {
            format!(" = {}", super::minutes(self.seconds))
        } else {
            String::new()
        };
        format!(
            "{:.1} s{minutes} ({how}{share}, make -j{}, entry {}{})",
            self.seconds,
            self.jobs,
            &self.key[..self.key.len().min(10)],
            if self.current {
                ""
            } else {
                ", an older version of the recipe"
            }
        )
    }
}

/// The kernel rows of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTimes {
    /// Where the figures come from ("the cache at ..." or "built now ...").
    pub(crate) source: String,
    pub(crate) base_recipe: String,
    pub(crate) variant_recipe: String,
    pub(crate) base: Option<KernelBuild>,
    pub(crate) variant: Option<KernelBuild>,
    /// The entry the variant's build started from, when still cached (its share of cold is
    /// taken against that build, which need not be `base`'s newest).
    pub(crate) variant_from: Option<KernelBuild>,
}

impl KernelTimes {
    /// The times as `lab bench kernel` prints them.
    pub fn render(&self) -> String {
        let line =
            |recipe: &str, build: &Option<KernelBuild>, base: Option<&KernelBuild>| match build {
                Some(b) => format!("  {recipe:<32} {}\n", b.text(base)),
                None => format!("  {recipe:<32} no cached build\n"),
            };
        let mut out = format!("kernel builds ({}):\n", self.source);
        out += &line(&self.base_recipe, &self.base, None);
        out += &line(
            &self.variant_recipe,
            &self.variant,
            self.variant_from.as_ref(),
        );
        out
    }
}

/// `lab bench kernel`: the times of `base` and `variant` in the lab's cache, from its manifests,
/// or, with `build_now`, built now into a temporary cache (`cold`).
pub async fn times(
    cache: &Cache,
    lab_exe: &Path,
    build_now: bool,
    base: &str,
    variant: &str,
) -> Result<KernelTimes> {
    let cache = cache.clone();
    if build_now {
        cold(&cache, lab_exe, base, variant).await
    } else {
        let (base, variant) = (base.to_string(), variant.to_string());
        tokio::task::spawn_blocking(move || from_cache(&cache, &base, &variant)).await?
    }
}

/// The builds of `base` and `variant` recorded in `cache`.
pub(crate) fn from_cache(cache: &Cache, base: &str, variant: &str) -> Result<KernelTimes> {
    let current = kernel::current_keys(cache, &BuildOptions::default())?;
    let entries = kernel::list(cache)?;
    let variant_build = pick(&entries, &current, variant);
    let variant_from = variant_build
        .as_ref()
        .and_then(|v| v.incremental_from.as_deref())
        .and_then(|key| entries.iter().find(|e| e.key == key))
        .map(|e| {
            let current = current.iter().any(|(_, k)| *k == e.key);
            KernelBuild::from_cached(e, current)
        });
    Ok(KernelTimes {
        source: format!("manifests in {}", cache.dir(kernel::KIND).display()),
        base_recipe: base.to_string(),
        variant_recipe: variant.to_string(),
        base: pick(&entries, &current, base),
        variant: variant_build,
        variant_from,
    })
}

/// The entry of `recipe` as it is now, else its newest (`entries` are newest first).
fn pick(
    entries: &[CachedKernel],
    current: &[(String, String)],
    recipe: &str,
) -> Option<KernelBuild> {
    let key = current
        .iter()
        .find(|(name, _)| name == recipe)
        .map(|(_, k)| k.as_str());
    if let Some(k) = entries.iter().find(|e| Some(e.key.as_str()) == key) {
        return Some(KernelBuild::from_cached(k, true));
    }
    entries
        .iter()
        .find(|e| e.manifest.recipe == recipe)
        .map(|k| KernelBuild::from_cached(k, false))
}

/// Builds `base` cold and then `variant` from its tree, by running `lab_exe kernel build` with a
/// temporary `LAB_CACHE_DIR` (see the module's documentation); returns their manifests' times.
pub(crate) async fn cold(
    cache: &Cache,
    lab_exe: &Path,
    base: &str,
    variant: &str,
) -> Result<KernelTimes> {
    let parent = cache.root().join(".bench");
    std::fs::create_dir_all(&parent)?;
    let tmp = tempfile::Builder::new()
        .prefix("cold-")
        .tempdir_in(&parent)?;
    let root = tmp.path().join("cache");
    share_apt_state(cache.root(), &root)?;
    let log_path = tmp.path().join("build.log");
    crate::progress::step(format!(
        "building {base} cold, then {variant}, in {} (minutes; log {})",
        root.display(),
        log_path.display()
    ));
    let args = ["kernel", "build", base, variant].map(std::ffi::OsStr::new);
    let (status, wall) =
        super::run_lab_logged(lab_exe, &args, &[("LAB_CACHE_DIR", &root)], &log_path).await?;
    if !status.success() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "`lab kernel build {base} {variant}` in a temporary cache failed ({status}):\n{}",
            tail.join("\n")
        );
    }
    let built = Cache::at(&root)?;
    let mut times = from_cache(&built, base, variant)?;
    times.source = format!(
        "built now in a temporary cache, {} for both",
        super::minutes(wall.as_secs_f64())
    );
    Ok(times)
}

/// Makes `tmp_root`'s apt state the real cache's (a link), with the apt locks linked too, so
/// both caches take the same locks around it.
fn share_apt_state(real_root: &Path, tmp_root: &Path) -> Result<()> {
    std::fs::create_dir_all(tmp_root.join(".locks"))?;
    let apt = real_root.join("apt");
    if apt.is_dir() {
        std::os::unix::fs::symlink(&apt, tmp_root.join("apt"))
            .context("linking the apt state into the temporary cache")?;
    }
    for entry in std::fs::read_dir(real_root.join(".locks"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("apt-") {
            std::os::unix::fs::symlink(entry.path(), tmp_root.join(".locks").join(&name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A current cache entry's build, for tables here and in `bench`'s own tests.
    pub(in crate::bench) fn build(
        recipe: &str,
        key: &str,
        seconds: f64,
        from: Option<&str>,
    ) -> KernelBuild {
        KernelBuild {
            recipe: recipe.into(),
            key: key.into(),
            seconds,
            jobs: 2,
            incremental_from: from.map(str::to_string),
            current: true,
        }
    }

    #[test]
    fn cold_cache_shares_the_apt_state_and_its_locks() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("apt/0123")).unwrap();
        std::fs::create_dir_all(real.join(".locks")).unwrap();
        std::fs::write(real.join(".locks/apt-0123.lock"), b"").unwrap();
        std::fs::write(real.join(".locks/kernels-abc.lock"), b"").unwrap();
        let tmp = dir.path().join("tmp");
        share_apt_state(&real, &tmp).unwrap();
        assert!(tmp.join("apt/0123").is_dir());
        assert_eq!(
            std::fs::read_link(tmp.join(".locks/apt-0123.lock")).unwrap(),
            real.join(".locks/apt-0123.lock")
        );
        // Kernel builds keep their own locks: the temporary cache builds cold.
        assert!(!tmp.join(".locks/kernels-abc.lock").exists());
    }

    #[test]
    fn rows_say_how_each_kernel_was_built() {
        let base = build("v6.12", "a91fe3ef0841682b", 992.78, None);
        let variant = build(
            "v6.12+wake-affine-idle-revert",
            "db1b2a74cd6f",
            49.5,
            Some("a91fe3ef0841682b"),
        );
        assert_eq!(
            base.text(None),
            "992.8 s = 16 min 33 s (cold, make -j2, entry a91fe3ef08)"
        );
        assert_eq!(
            variant.text(Some(&base)),
            "49.5 s (from the tree of a91fe3ef08, 5.0% of cold, make -j2, entry db1b2a74cd)"
        );
        let times = KernelTimes {
            source: "test".into(),
            base_recipe: base.recipe.clone(),
            variant_recipe: "v6.12+x".into(),
            base: Some(base),
            variant: None,
            variant_from: None,
        };
        let text = times.render();
        assert!(
            text.starts_with("kernel builds (test):\n  v6.12 "),
            "{text}"
        );
        assert!(
            text.contains("v6.12+x                          no cached build"),
            "{text}"
        );
    }
}
