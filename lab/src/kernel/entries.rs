//! The cache's built kernels as a whole: listing them, the keys the current recipes map to,
//! and collecting what no recipe needs (`lab kernel list`, `keys`, `gc`).

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use anyhow::{bail, Result};

use super::build::{BuildOptions, BuiltKernel, Manifest, KIND};
use super::key::{cache_key, toolchain_id};
use super::recipe;
use super::source::SourceResolver;
use crate::cache::Cache;

/// One cached kernel.
#[derive(Debug, Clone)]
pub(crate) struct CachedKernel {
    pub key: String,
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub has_tree: bool,
}

/// Every complete entry, newest first.
pub(crate) fn list(cache: &Cache) -> Result<Vec<CachedKernel>> {
    let dir = cache.dir(KIND);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        match BuiltKernel::open(&e.path()) {
            Ok(k) => out.push(CachedKernel {
                key: name,
                has_tree: k.tree().is_some(),
                dir: k.dir,
                manifest: k.manifest,
            }),
            Err(err) => tracing::warn!("skipping {}: {err:#}", e.path().display()),
        }
    }
    out.sort_by(|a, b| {
        b.manifest
            .build
            .finished_at
            .cmp(&a.manifest.build.finished_at)
    });
    Ok(out)
}

/// The key each recipe in `opts.dirs` currently maps to (sources resolved from the lock file).
pub(crate) fn current_keys(cache: &Cache, opts: &BuildOptions) -> Result<Vec<(String, String)>> {
    Ok(recipe_keys(cache, opts)?
        .into_iter()
        .map(|(name, _, key)| (name, key))
        .collect())
}

/// (recipe, architecture, key) of every recipe in `opts.dirs`, by name.
fn recipe_keys(
    cache: &Cache,
    opts: &BuildOptions,
) -> Result<Vec<(String, crate::arch::Arch, String)>> {
    let mut resolver = SourceResolver::new(cache, opts.lock_path.clone());
    let mut out = Vec::new();
    for name in recipe::recipe_names(&opts.dirs)? {
        let recipe = recipe::load(&opts.dirs, &name)?;
        let toolchain = toolchain_id(cache, recipe.arch)?;
        let source = resolver.resolve_offline(&recipe.source)?;
        out.push((name, recipe.arch, cache_key(&recipe, &source, &toolchain)));
    }
    Ok(out)
}

/// `lab kernel keys`: one line per recipe, `NAME ARCH KEY`, the cache keys the current recipes
/// need on this host's toolchain (what a workflow pushes or pulls as `kernels/KEY`). Nothing is
/// built or downloaded.
pub fn keys_table(cache: &Cache, opts: &BuildOptions) -> Result<String> {
    let mut out = String::new();
    for (name, arch, key) in recipe_keys(cache, opts)? {
        out.push_str(&format!("{name} {} {key}\n", arch.name()));
    }
    Ok(out)
}

/// What `gc` should do.
#[derive(Debug, Clone, Default)]
pub(crate) struct GcOptions {
    /// Keys to keep (e.g. from [`current_keys`]); everything else is removed.
    pub keep: BTreeSet<String>,
    /// Also drop `tree/` from the kept entries (saves most of the space; variants then build cold).
    pub drop_trees: bool,
    /// Keys whose `tree/` stays when `drop_trees` drops the others.
    pub keep_trees: BTreeSet<String>,
    /// Report only.
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default)]
/// What `lab kernel gc` removed (or would, with `dry_run`).
pub struct GcReport {
    /// (recipe, key) of removed entries.
    pub removed: Vec<(String, String)>,
    /// (recipe, key) of entries whose tree was dropped.
    pub trees_dropped: Vec<(String, String)>,
    /// Logs of failed builds removed.
    pub failed_logs_removed: usize,
    /// Staging directories of dead builds removed.
    pub staging_removed: usize,
}

/// Removes entries not in `opts.keep` (each under its key's lock, so a build reading it as a base
/// finishes first), failed-build logs and dead staging dirs.
pub(crate) fn gc(cache: &Cache, opts: &GcOptions) -> Result<GcReport> {
    let mut report = GcReport::default();
    let trash = cache.dir(KIND).join(".staging");
    for k in list(cache)? {
        let id = (k.manifest.recipe.clone(), k.key.clone());
        if !opts.keep.contains(&k.key) {
            report.removed.push(id);
            if !opts.dry_run {
                let _lock = cache.lock(&format!("{KIND}-{}", k.key))?;
                fs::create_dir_all(&trash)?;
                // Rename first: the entry disappears at once, deletion may take a while.
                let doomed = trash.join(format!(".gc-{}", k.key));
                fs::rename(&k.dir, &doomed)?;
                fs::remove_dir_all(&doomed)?;
            }
        } else if opts.drop_trees && k.has_tree && !opts.keep_trees.contains(&k.key) {
            report.trees_dropped.push(id);
            if !opts.dry_run {
                let _lock = cache.lock(&format!("{KIND}-{}", k.key))?;
                fs::remove_dir_all(k.dir.join("tree"))?;
            }
        }
    }
    let failed = cache.dir(KIND).join(".failed");
    if let Ok(entries) = fs::read_dir(&failed) {
        for e in entries.flatten() {
            report.failed_logs_removed += 1;
            if !opts.dry_run {
                fs::remove_file(e.path()).ok();
            }
        }
    }
    if !opts.dry_run {
        report.staging_removed = cache.remove_stale_staging(KIND)?;
    }
    Ok(report)
}

/// `lab kernel list`: one line per entry.
pub fn list_table(cache: &Cache) -> Result<String> {
    let mut out = format!(
        "{:<14} {:<36} {:<28} {:<8} {:>7}  {}\n",
        "KEY", "RECIPE", "RELEASE", "TREE", "BUILD", "BUILT FROM"
    );
    for k in list(cache)? {
        let from = match &k.manifest.build.incremental_from {
            Some(base) => format!("incremental from {}", &base[..12.min(base.len())]),
            None => "cold".to_string(),
        };
        out.push_str(&format!(
            "{:<14} {:<36} {:<28} {:<8} {:>6.0}s  {}\n",
            &k.key[..12.min(k.key.len())],
            k.manifest.recipe,
            k.manifest.release,
            if k.has_tree { "kept" } else { "-" },
            k.manifest.build.seconds,
            from
        ));
    }
    Ok(out)
}

/// What `lab kernel gc` is asked to do.
#[derive(Debug, Clone, Default)]
pub struct GcRequest {
    /// Remove every cached kernel, not only those no current recipe maps to.
    pub all: bool,
    /// Also drop the object trees of the kernels that stay.
    pub drop_trees: bool,
    /// Recipes whose entry keeps its tree all the same (the base that variants and bisect probes
    /// are built from, when a CI cache is saved without the other trees).
    pub keep_trees: Vec<String>,
    /// Only say what would be removed.
    pub dry_run: bool,
}

/// `lab kernel gc`: keep the entries the current recipes map to (all removed with `all`). A
/// recipe named in `keep_trees` that no current recipe has is an error naming it.
pub fn gc_unused(cache: &Cache, opts: &BuildOptions, request: &GcRequest) -> Result<GcReport> {
    let current = current_keys(cache, opts)?;
    let mut keep_trees = BTreeSet::new();
    for name in &request.keep_trees {
        match current.iter().find(|(recipe, _)| recipe == name) {
            Some((_, key)) => keep_trees.insert(key.clone()),
            None => bail!(
                "--keep-tree {name}: no kernel recipe of that name in {}",
                opts.dirs.recipes.display()
            ),
        };
    }
    let keep = if request.all {
        BTreeSet::new()
    } else {
        current.into_iter().map(|(_, key)| key).collect()
    };
    gc(
        cache,
        &GcOptions {
            keep,
            drop_trees: request.drop_trees,
            keep_trees,
            dry_run: request.dry_run,
        },
    )
}

impl std::fmt::Display for GcReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (recipe, key) in &self.removed {
            writeln!(f, "removed {} ({recipe})", &key[..12.min(key.len())])?;
        }
        for (recipe, key) in &self.trees_dropped {
            writeln!(
                f,
                "dropped the tree of {} ({recipe})",
                &key[..12.min(key.len())]
            )?;
        }
        write!(
            f,
            "{} entries removed, {} trees dropped, {} failed-build logs and {} staging dirs removed",
            self.removed.len(),
            self.trees_dropped.len(),
            self.failed_logs_removed,
            self.staging_removed
        )
    }
}
