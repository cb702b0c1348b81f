//! A built kernel's identity: the content-addressed key of a recipe, its source and the
//! toolchain that builds it, and the release and version strings a guest reads back.

use std::sync::OnceLock;

use anyhow::Result;

use super::recipe::Recipe;
use super::source::ResolvedSource;
use crate::cache::{hash_parts, Cache};

/// Bumped whenever the build procedure changes what ends up in an entry (3: builds no longer
/// see the host's rustc, bindgen and pahole, [`UNSEEN_TOOLS`]).
const BUILDER_VERSION: &str = "kernel-builder-3";

/// The compiler and linker that build kernels for `arch`, as a string hashed into keys: the
/// host's for its own architecture, the pinned cross toolchain's versions for another
/// (known from the lock without unpacking it).
pub(crate) fn toolchain_id(cache: &Cache, arch: crate::arch::Arch) -> Result<String> {
    if arch == crate::arch::Arch::host() {
        if let Some(pinned) = pinned_toolchain() {
            return Ok(pinned);
        }
        host_toolchain_id()
    } else {
        crate::cross::CrossToolchain::identity(cache, arch)
    }
}

/// Names the toolchain that built the cache's host-architecture kernels (`lab bundle run` sets
/// it to the bundle's): their keys are found on a host with another compiler or none, and
/// nothing is built under it, since a build here would not be what the key says.
pub(crate) const PINNED_TOOLCHAIN_ENV: &str = "LAB_KERNEL_TOOLCHAIN";

pub(crate) fn pinned_toolchain() -> Option<String> {
    std::env::var(PINNED_TOOLCHAIN_ENV)
        .ok()
        .filter(|v| !v.is_empty())
}

/// The host's `gcc` and `ld`.
fn host_toolchain_id() -> Result<String> {
    static ID: OnceLock<Result<String, String>> = OnceLock::new();
    ID.get_or_init(|| {
        let first_line = |prog: &str| -> Result<String, String> {
            let out = crate::process::output(crate::process::command(prog).arg("--version"))
                .map_err(|e| format!("{prog} not found ({e}): install build-essential"))?;
            Ok(String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string())
        };
        Ok(format!("{}; {}", first_line("gcc")?, first_line("ld")?))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// The content-addressed key of `recipe` built from `source` with `toolchain`.
pub(crate) fn cache_key(recipe: &Recipe, source: &ResolvedSource, toolchain: &str) -> String {
    let mut parts: Vec<(String, Vec<u8>)> = vec![
        ("builder".into(), BUILDER_VERSION.into()),
        ("recipe".into(), recipe.name.clone().into_bytes()),
        ("source".into(), source.digest.clone().into_bytes()),
        ("defconfig".into(), recipe.defconfig.clone().into_bytes()),
        (
            "kconfig_targets".into(),
            recipe.kconfig_targets.join("\n").into_bytes(),
        ),
        ("toolchain".into(), toolchain.as_bytes().to_vec()),
    ];
    // x86_64 keys stay what they were before architectures existed.
    if recipe.arch != crate::arch::Arch::X86_64 {
        parts.push(("arch".into(), recipe.arch.name().into()));
    }
    for f in &recipe.config {
        parts.push((
            "config".into(),
            format!("{}\0{}", f.name, f.sha256).into_bytes(),
        ));
    }
    for p in &recipe.patches {
        parts.push((
            "patch".into(),
            format!("{}\0{}", p.name, p.sha256).into_bytes(),
        ));
    }
    let borrowed: Vec<(&str, &[u8])> = parts
        .iter()
        .map(|(l, b)| (l.as_str(), b.as_slice()))
        .collect();
    hash_parts(&borrowed)
}

/// `CONFIG_LOCALVERSION` of a key: the guest's `uname -r` names the build.
pub(crate) fn local_version(key: &str) -> String {
    format!("-lab{}", &key[..10])
}

/// `KBUILD_BUILD_VERSION` of a recipe: `uname -v` starts with `#1-<recipe>`.
pub(crate) fn build_version(recipe: &str) -> String {
    format!("1-{recipe}")
}
