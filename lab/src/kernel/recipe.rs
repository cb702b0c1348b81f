//! Kernel recipes: `images/kernels/<name>.toml`.
//!
//! A recipe names a source (a Debian `linux-source-X.Y` series package, a local git tree and a
//! ref, or a local tarball with its checksum), an ordered list of patches, config fragments and
//! boot-time settings. A recipe with `base = "<other recipe>"` inherits all of that and adds its
//! own patches and fragments; it is built from the base's cached object tree when that exists.
//! `arch = "arm64"` builds for aarch64 guests with the lab's pinned cross toolchain (`crate::cross`);
//! without it a recipe builds for x86_64 with the host's compiler, and a `base` fixes it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cache::sha256_file;

/// Where recipes, patches and config fragments live (`images/kernels` in the checkout).
#[derive(Debug, Clone)]
pub(crate) struct RecipeDirs {
    pub recipes: PathBuf,
    pub patches: PathBuf,
    pub config: PathBuf,
}

impl RecipeDirs {
    /// `dir/*.toml`, `dir/patches/`, `dir/config/`.
    pub(crate) fn at(dir: impl Into<PathBuf>) -> RecipeDirs {
        let recipes = dir.into();
        RecipeDirs {
            patches: recipes.join("patches"),
            config: recipes.join("config"),
            recipes,
        }
    }

    /// The checkout's `images/kernels` (`LAB_KERNEL_RECIPES` overrides).
    pub(crate) fn default_dirs() -> RecipeDirs {
        match std::env::var_os("LAB_KERNEL_RECIPES") {
            Some(dir) => RecipeDirs::at(PathBuf::from(dir)),
            None => RecipeDirs::at(crate::repo_path("images/kernels")),
        }
    }
}

/// The `[source]` table: exactly one of `debian`, `git` (+ `ref`), `tarball` (+ `sha256`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourceSpec {
    /// A Debian source series package, e.g. `linux-source-6.12`; the exact version and checksum
    /// are pinned in `images/lock.toml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debian: Option<String>,
    /// A local git repository (absolute, or relative to the recipe file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<PathBuf>,
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// A local source tarball (absolute, or relative to the recipe file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tarball: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Where the kernel source comes from, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Source {
    Debian { package: String },
    Git { repo: PathBuf, reference: String },
    Tarball { path: PathBuf, sha256: String },
}

/// Boot-time settings that need no rebuild.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootSettings {
    /// Extra kernel command-line arguments.
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// Written to `/sys/kernel/debug/sched/features` before the workload (`NO_RUN_TO_PARITY`).
    #[serde(default)]
    pub sched_features: Vec<String>,
    /// `sysctl -w key=value` before the workload.
    #[serde(default)]
    pub sysctls: BTreeMap<String, String>,
}

impl BootSettings {
    /// `self` followed by `more`: arguments and features appended, sysctls overridden.
    pub(crate) fn merged(&self, more: &BootSettings) -> BootSettings {
        let mut out = self.clone();
        out.cmdline.extend(more.cmdline.iter().cloned());
        out.sched_features
            .extend(more.sched_features.iter().cloned());
        out.sysctls
            .extend(more.sysctls.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    /// Rejects values that could not be written safely into the guest (they end up in a shell
    /// script and on the kernel command line).
    pub(crate) fn validate(&self, what: &str) -> Result<()> {
        for (i, arg) in self.cmdline.iter().enumerate() {
            if arg.is_empty()
                || arg
                    .chars()
                    .any(|c| c.is_whitespace() || c == '"' || c == '\'')
            {
                bail!(
                    "{what}: cmdline[{i}] = {arg:?}: one argument per entry, no spaces or quotes"
                );
            }
        }
        for (i, f) in self.sched_features.iter().enumerate() {
            if f.is_empty()
                || !f
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                bail!("{what}: sched_features[{i}] = {f:?}: expected a feature name like NO_RUN_TO_PARITY");
            }
        }
        for (k, v) in &self.sysctls {
            let key_ok = !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-'));
            if !key_ok {
                bail!("{what}: sysctls: bad key {k:?}");
            }
            if v.is_empty()
                || !v.chars().all(|c| {
                    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ' ' | ',' | ':')
                })
            {
                bail!("{what}: sysctls.{k} = {v:?}: unsupported characters in value");
            }
        }
        Ok(())
    }
}

/// The file format of a recipe.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipeFile {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    arch: Option<String>,
    #[serde(default)]
    base: Option<String>,
    #[serde(default)]
    source: Option<SourceSpec>,
    #[serde(default)]
    defconfig: Option<String>,
    #[serde(default)]
    kconfig_targets: Option<Vec<String>>,
    #[serde(default)]
    config: Vec<String>,
    #[serde(default)]
    patches: Vec<String>,
    #[serde(default)]
    boot: BootSettings,
}

/// A patch file with its content, as hashed into the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PatchRef {
    pub name: String,
    pub sha256: String,
    #[serde(skip)]
    pub path: PathBuf,
}

/// A config fragment with its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FragmentRef {
    pub name: String,
    pub sha256: String,
    #[serde(skip)]
    pub path: PathBuf,
}

/// A recipe with its base chain folded in: everything a build needs.
#[derive(Debug, Clone)]
pub(crate) struct Recipe {
    pub name: String,
    pub description: String,
    /// The architecture it builds for (`arch`, default x86_64; a base's is inherited).
    pub arch: crate::arch::Arch,
    /// The recipe this one extends, if any (its cached object tree makes this one cheap).
    pub base: Option<Box<Recipe>>,
    pub source: Source,
    /// Make target that writes the starting `.config` (default `x86_64_defconfig`).
    pub defconfig: String,
    /// Kernel-provided fragments merged by make (default `kvm_guest.config`).
    pub kconfig_targets: Vec<String>,
    /// Lab fragments in merge order, the base's first.
    pub config: Vec<FragmentRef>,
    /// Patches in application order, the base's first.
    pub patches: Vec<PatchRef>,
    pub boot: BootSettings,
}

impl Recipe {
    /// The patches this recipe adds on top of its base (all of them without a base).
    pub(crate) fn own_patches(&self) -> &[PatchRef] {
        let skip = self.base.as_ref().map_or(0, |b| b.patches.len());
        &self.patches[skip..]
    }
}

/// A recipe name is used in file names, results and the guest's `uname -v`.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
        && !name.starts_with('.');
    if !ok {
        bail!("kernel recipe name {name:?}: use 1-64 characters from [A-Za-z0-9._+-], not starting with '.'");
    }
    Ok(())
}

/// Names of all recipes in `dirs.recipes`, sorted.
pub(crate) fn recipe_names(dirs: &RecipeDirs) -> Result<Vec<String>> {
    let entries = fs::read_dir(&dirs.recipes)
        .with_context(|| format!("reading kernel recipes in {}", dirs.recipes.display()))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".toml").map(str::to_string)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Loads recipe `name` (`dirs.recipes/<name>.toml`) and its base chain.
pub(crate) fn load(dirs: &RecipeDirs, name: &str) -> Result<Recipe> {
    load_chain(dirs, name, &mut Vec::new())
}

fn load_chain(dirs: &RecipeDirs, name: &str, seen: &mut Vec<String>) -> Result<Recipe> {
    validate_name(name)?;
    if seen.iter().any(|s| s == name) {
        seen.push(name.to_string());
        bail!("kernel recipe base chain loops: {}", seen.join(" -> "));
    }
    seen.push(name.to_string());
    let file = dirs.recipes.join(format!("{name}.toml"));
    let text = fs::read_to_string(&file)
        .with_context(|| format!("kernel recipe {name:?}: cannot read {}", file.display()))?;
    let raw: RecipeFile =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let bad = |field: &str, message: String| crate::error::bad_input(&file, field, message);

    let base = match &raw.base {
        Some(b) => {
            Some(Box::new(load_chain(dirs, b, seen).with_context(|| {
                format!("{}: base: {b:?}", file.display())
            })?))
        }
        None => None,
    };

    let arch = match (&raw.arch, &base) {
        (None, None) => crate::arch::Arch::X86_64,
        (None, Some(b)) => b.arch,
        (Some(text), base) => {
            let arch = crate::arch::Arch::parse(text).ok_or_else(|| {
                bad(
                    "arch",
                    format!("{text:?} is not an architecture the lab builds: use \"x86_64\" or \"arm64\""),
                )
            })?;
            if let Some(b) = base.as_ref().filter(|b| b.arch != arch) {
                return Err(bad(
                    "arch",
                    format!(
                        "is {arch} but its base {} builds for {}: a variant builds from its base's object tree, so it keeps the base's architecture",
                        b.name, b.arch
                    ),
                ));
            }
            arch
        }
    };
    let source = match (&raw.source, &base) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "source",
                "a recipe with `base` takes its source from the base".into(),
            ))
        }
        (None, Some(b)) => b.source.clone(),
        (None, None) => {
            return Err(bad(
                "source",
                "missing (set `base` or a [source] table)".into(),
            ))
        }
        (Some(spec), None) => source_from_spec(spec, &file)?,
    };

    let defconfig = match (&raw.defconfig, &base) {
        (Some(d), _) => d.clone(),
        (None, Some(b)) => b.defconfig.clone(),
        (None, None) => arch.default_defconfig().to_string(),
    };
    let kconfig_targets = match (&raw.kconfig_targets, &base) {
        (Some(t), _) => t.clone(),
        (None, Some(b)) => b.kconfig_targets.clone(),
        (None, None) => arch.default_kconfig_targets(),
    };
    for (field, value) in std::iter::once(("defconfig", &defconfig))
        .chain(kconfig_targets.iter().map(|t| ("kconfig_targets", t)))
    {
        if value.is_empty()
            || !value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return Err(bad(field, format!("{value:?} is not a make target name")));
        }
    }
    if let Some(b) = &base {
        if b.defconfig != defconfig || b.kconfig_targets != kconfig_targets {
            tracing::debug!("{name}: base config targets differ from {}", b.name);
        }
    }

    let mut config = base.as_ref().map(|b| b.config.clone()).unwrap_or_default();
    for (i, frag) in raw.config.iter().enumerate() {
        let path = resolve_in(&dirs.config, frag)
            .map_err(|e| bad(&format!("config[{i}]"), format!("{e:#}")))?;
        config.push(FragmentRef {
            name: frag.clone(),
            sha256: sha256_file(&path)?,
            path,
        });
    }
    let mut patches = base.as_ref().map(|b| b.patches.clone()).unwrap_or_default();
    for (i, p) in raw.patches.iter().enumerate() {
        let path = resolve_in(&dirs.patches, p)
            .map_err(|e| bad(&format!("patches[{i}]"), format!("{e:#}")))?;
        patches.push(PatchRef {
            name: p.clone(),
            sha256: sha256_file(&path)?,
            path,
        });
    }
    raw.boot.validate(&format!("{}: [boot]", file.display()))?;
    let boot = match &base {
        Some(b) => b.boot.merged(&raw.boot),
        None => raw.boot.clone(),
    };
    seen.pop();
    Ok(Recipe {
        name: name.to_string(),
        description: raw.description.unwrap_or_default(),
        arch,
        base,
        source,
        defconfig,
        kconfig_targets,
        config,
        patches,
        boot,
    })
}

fn source_from_spec(spec: &SourceSpec, file: &Path) -> Result<Source> {
    let bad = |field: &str, message: String| {
        crate::error::bad_input(file, format!("source.{field}"), message)
    };
    let set = [
        spec.debian.is_some(),
        spec.git.is_some(),
        spec.tarball.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if set != 1 {
        return Err(crate::error::bad_input(
            file,
            "source",
            "needs exactly one of `debian`, `git` (with `ref`), `tarball` (with `sha256`)",
        ));
    }
    let relative = |p: &PathBuf| {
        if p.is_absolute() {
            p.clone()
        } else {
            file.parent().unwrap_or(Path::new(".")).join(p)
        }
    };
    if let Some(package) = &spec.debian {
        if spec.reference.is_some() || spec.sha256.is_some() {
            return Err(bad(
                "debian",
                "`ref`/`sha256` do not apply to a Debian source (the lock file pins it)".into(),
            ));
        }
        if !package.starts_with("linux-source") || package.contains(char::is_whitespace) {
            return Err(bad(
                "debian",
                format!("{package:?} is not a linux-source package"),
            ));
        }
        return Ok(Source::Debian {
            package: package.clone(),
        });
    }
    if let Some(repo) = &spec.git {
        let reference = spec
            .reference
            .clone()
            .ok_or_else(|| bad("ref", "missing (a git source needs a ref)".into()))?;
        if reference.starts_with('-') || reference.is_empty() {
            return Err(bad("ref", format!("{reference:?} is not a git ref")));
        }
        return Ok(Source::Git {
            repo: relative(repo),
            reference,
        });
    }
    let tarball = spec.tarball.as_ref().expect("counted above");
    let sha256 = spec.sha256.clone().ok_or_else(|| {
        bad(
            "sha256",
            "missing (a tarball source needs its sha256)".into(),
        )
    })?;
    if sha256.len() != 64 || !sha256.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad("sha256", format!("{sha256:?} is not a hex sha256")));
    }
    Ok(Source::Tarball {
        path: relative(tarball),
        sha256: sha256.to_ascii_lowercase(),
    })
}

/// `dir/name`, refusing names that escape `dir`.
fn resolve_in(dir: &Path, name: &str) -> Result<PathBuf> {
    let bad = name.is_empty()
        || Path::new(name).is_absolute()
        || Path::new(name)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if bad {
        bail!("{name:?}: give a file name inside {}", dir.display());
    }
    let path = dir.join(name);
    if !path.is_file() {
        bail!("{name:?}: {} does not exist", path.display());
    }
    Ok(path)
}
