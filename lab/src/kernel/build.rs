//! Building a recipe into the cache, listing and collecting entries.
//!
//! Entry layout (`<cache>/kernels/<key>/`):
//! - `bzImage`, `config` (the final `.config`), `manifest.json`, `build.log`
//! - `modules/lib/modules/<release>/` (stripped, with `modules.dep`; copy `modules/` into an
//!   initramfs root and busybox `modprobe` works)
//! - `tree/` (optional, kept by default): the patched source with its object tree in `tree/obj`,
//!   the starting point of cheap variants. `lab kernel gc --trees` drops it.
//!
//! The object tree lives directly inside the source tree (`O=obj`), which makes kbuild refer to
//! the source as `..`: the tree can be renamed into the cache and copied for a variant without
//! kbuild seeing a changed command line. Failed builds leave only a log in `kernels/.failed/`.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::config::{self, Setting};
use super::patch;
use super::recipe::{self, BootSettings, FragmentRef, PatchRef, Recipe, RecipeDirs};
use super::source::{ResolvedSource, SourceResolver};
use crate::cache::{hash_parts, Cache};

/// Cache kind of built kernels.
pub const KIND: &str = "kernels";

/// Bumped whenever the build procedure changes what ends up in an entry.
const BUILDER_VERSION: &str = "kernel-builder-2";

/// kbuild's `uname -v` timestamp: fixed, so equal inputs give equal kernels. Short, because
/// kbuild cuts UTS_VERSION (`#1-<recipe> SMP PREEMPT_DYNAMIC <timestamp>`) at 64 bytes.
const BUILD_TIMESTAMP: &str = "2000-01-01";

/// How to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub dirs: RecipeDirs,
    /// The lock file pinning Debian sources (`images/lock.toml`).
    pub lock_path: PathBuf,
    /// `make -j` (`LAB_KERNEL_JOBS`, default: available CPUs).
    pub jobs: usize,
    /// Run make under `nice -n` this (`LAB_KERNEL_NICE`, default 10; the host is shared).
    pub nice: Option<i32>,
    /// Report compile progress through [`crate::progress`].
    pub progress: bool,
    /// Keep `tree/` (source + objects) in the entry so variants build incrementally.
    pub keep_tree: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        let env_num = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<i64>().ok());
        BuildOptions {
            dirs: RecipeDirs::default_dirs(),
            lock_path: crate::debian::LockFile::default_path(),
            jobs: env_num("LAB_KERNEL_JOBS")
                .filter(|j| *j > 0)
                .map(|j| j as usize)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
            nice: match env_num("LAB_KERNEL_NICE") {
                Some(0) => None,
                Some(n) => Some(n as i32),
                None => Some(10),
            },
            progress: true,
            keep_tree: true,
        }
    }
}

/// The base an incremental build started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRef {
    pub recipe: String,
    pub key: String,
}

/// How the entry was built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildInfo {
    /// Key of the base entry whose object tree this build started from; None: cold build.
    pub incremental_from: Option<String>,
    pub seconds: f64,
    pub jobs: usize,
    /// Number of compile/link steps make printed (a cold build's count sizes the next bar).
    pub steps: u64,
    /// Unix time the build finished.
    pub finished_at: u64,
}

/// `manifest.json` of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub recipe: String,
    /// The cache key: hash of every input (source digest, patches, fragments, toolchain).
    pub key: String,
    /// `uname -r` in the guest; ends in `-lab<key prefix>`.
    pub release: String,
    /// `uname -v` in the guest.
    pub uts_version: String,
    pub description: String,
    pub base: Option<BaseRef>,
    pub source: ResolvedSource,
    /// Applied patches in order, with their sha256.
    pub patches: Vec<PatchRef>,
    pub config_fragments: Vec<FragmentRef>,
    pub defconfig: String,
    pub kconfig_targets: Vec<String>,
    pub toolchain: String,
    /// The recipe's boot-time settings (not part of the key).
    pub boot: BootSettings,
    pub build: BuildInfo,
}

/// A kernel in the cache.
#[derive(Debug, Clone)]
pub struct BuiltKernel {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl BuiltKernel {
    pub fn open(dir: &Path) -> Result<BuiltKernel> {
        let path = dir.join("manifest.json");
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let manifest =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        Ok(BuiltKernel {
            dir: dir.to_path_buf(),
            manifest,
        })
    }
    pub fn bzimage(&self) -> PathBuf {
        self.dir.join("bzImage")
    }
    /// Root to copy into an initramfs: it holds `lib/modules/<release>`.
    pub fn modules_root(&self) -> PathBuf {
        self.dir.join("modules")
    }
    pub fn modules_dir(&self) -> PathBuf {
        self.modules_root()
            .join("lib/modules")
            .join(&self.manifest.release)
    }
    pub fn config(&self) -> PathBuf {
        self.dir.join("config")
    }
    pub fn build_log(&self) -> PathBuf {
        self.dir.join("build.log")
    }
    /// Source + object tree, when kept.
    pub fn tree(&self) -> Option<PathBuf> {
        let t = self.dir.join("tree");
        t.join("obj/.config").is_file().then_some(t)
    }
}

/// The compiler and linker that build kernels, as a string hashed into keys.
pub fn toolchain_id() -> Result<String> {
    static ID: OnceLock<Result<String, String>> = OnceLock::new();
    ID.get_or_init(|| {
        let first_line = |prog: &str| -> Result<String, String> {
            let out = Command::new(prog)
                .arg("--version")
                .output()
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
pub fn cache_key(recipe: &Recipe, source: &ResolvedSource, toolchain: &str) -> String {
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
pub fn local_version(key: &str) -> String {
    format!("-lab{}", &key[..10])
}

/// `KBUILD_BUILD_VERSION` of a recipe: `uname -v` starts with `#1-<recipe>`.
fn build_version(recipe: &str) -> String {
    format!("1-{recipe}")
}

/// Builds recipe `name` (and its base first, if it has one), or returns the cached entry.
pub fn build(cache: &Cache, name: &str, opts: &BuildOptions) -> Result<BuiltKernel> {
    let recipe = recipe::load(&opts.dirs, name)?;
    build_recipe(cache, &recipe, opts)
}

/// Builds an already loaded recipe.
pub fn build_recipe(cache: &Cache, recipe: &Recipe, opts: &BuildOptions) -> Result<BuiltKernel> {
    let toolchain = toolchain_id()?;
    let mut resolver = SourceResolver::new(cache, opts.lock_path.clone());
    // The lock file's pin is enough to find a cached build without asking the archive.
    let offline = resolver.resolve_offline(&recipe.source)?;
    let key = cache_key(recipe, &offline, &toolchain);
    if let Some(dir) = cache.lookup(KIND, &key) {
        return BuiltKernel::open(&dir);
    }
    let source = if offline.verified {
        offline
    } else {
        resolver.resolve(&recipe.source)?
    };
    let key = cache_key(recipe, &source, &toolchain);
    if let Some(sub) = &source.substitution {
        tracing::warn!(
            "{}: building from {} {} instead of the locked {}",
            recipe.name,
            sub.package,
            sub.used,
            sub.locked
        );
    }
    let base = match &recipe.base {
        Some(b) => Some(build_recipe(cache, b, opts)?),
        None => None,
    };
    if cache.lookup(KIND, &key).is_none() {
        super::tools::ensure_build_tools()?;
    }
    let failed_dir = cache.dir(KIND).join(".failed");
    let dir = cache.get_or_build(KIND, &key, |tmp| {
        let log_path = tmp.join("build.log");
        let result = Builder {
            cache,
            recipe,
            source: &source,
            key: &key,
            toolchain: &toolchain,
            opts,
            tmp,
            log: File::create(&log_path)?,
            resolver: &mut resolver,
        }
        .run(base.as_ref());
        if result.is_err() {
            // The staging dir disappears with the failure; keep its log where the user can read it.
            let kept = failed_dir.join(format!("{}-{}.log", recipe.name, &key[..12]));
            if fs::create_dir_all(&failed_dir).is_ok() && fs::copy(&log_path, &kept).is_ok() {
                // Context keeps the typed cause (PatchError, ConfigMismatch) for downcasting.
                return result.with_context(|| {
                    format!(
                        "kernel {}: build failed (build log: {})",
                        recipe.name,
                        kept.display()
                    )
                });
            }
        }
        result
    })?;
    BuiltKernel::open(&dir)
}

struct Builder<'a, 'r> {
    cache: &'a Cache,
    recipe: &'a Recipe,
    source: &'a ResolvedSource,
    key: &'a str,
    toolchain: &'a str,
    opts: &'a BuildOptions,
    tmp: &'a Path,
    log: File,
    resolver: &'a mut SourceResolver<'r>,
}

impl Builder<'_, '_> {
    fn run(mut self, base: Option<&BuiltKernel>) -> Result<()> {
        let started = Instant::now();
        let tree = self.tmp.join("tree");
        let base_tree = base.and_then(|b| b.tree().map(|t| (b, t)));
        let incremental_from = match base_tree {
            Some((b, base_tree)) => {
                self.phase(&format!(
                    "copying the object tree of {} ({})",
                    b.manifest.recipe,
                    &b.manifest.key[..12]
                ))?;
                let _base_lock = self.cache.lock(&format!("{KIND}-{}", b.manifest.key))?;
                copy_tree(&base_tree, &tree, &mut self.log)?;
                drop(_base_lock);
                self.settle_tools(&tree)?;
                let own = self.recipe.own_patches().to_vec();
                self.apply_patches(&tree, &own)?;
                Some(b.manifest.key.clone())
            }
            None => {
                if base.is_some() {
                    self.phase("the base entry has no tree (collected); building cold")?;
                }
                self.phase(&format!(
                    "unpacking {} {}",
                    describe(self.source),
                    self.source.version
                ))?;
                let scratch = self.tmp.join("scratch");
                self.resolver.unpack(self.source, &tree, &scratch)?;
                fs::remove_dir_all(&scratch).ok();
                let all = self.recipe.patches.clone();
                self.apply_patches(&tree, &all)?;
                fs::create_dir_all(tree.join("obj"))?;
                None
            }
        };
        self.configure(&tree)?;
        let steps = self.make(&tree, &["bzImage", "modules"], "building")?;
        self.install(&tree)?;
        let release = fs::read_to_string(tree.join("obj/include/config/kernel.release"))
            .context("reading kernel.release")?
            .trim()
            .to_string();
        let uts_version = read_uts_version(&tree.join("obj")).unwrap_or_default();
        let manifest = Manifest {
            recipe: self.recipe.name.clone(),
            key: self.key.to_string(),
            release,
            uts_version,
            description: self.recipe.description.clone(),
            base: self.recipe.base.as_ref().map(|b| BaseRef {
                recipe: b.name.clone(),
                key: base.map(|k| k.manifest.key.clone()).unwrap_or_default(),
            }),
            source: self.source.clone(),
            patches: self.recipe.patches.clone(),
            config_fragments: self.recipe.config.clone(),
            defconfig: self.recipe.defconfig.clone(),
            kconfig_targets: self.recipe.kconfig_targets.clone(),
            toolchain: self.toolchain.to_string(),
            boot: self.recipe.boot.clone(),
            build: BuildInfo {
                incremental_from,
                seconds: started.elapsed().as_secs_f64(),
                jobs: self.opts.jobs,
                steps,
                finished_at: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            },
        };
        if !self.opts.keep_tree {
            fs::remove_dir_all(&tree)?;
        }
        fs::write(
            self.tmp.join("manifest.json"),
            serde_json::to_string_pretty(&manifest)?,
        )?;
        self.phase(&format!(
            "built {} ({}) in {:.0} s",
            manifest.recipe, manifest.release, manifest.build.seconds
        ))?;
        Ok(())
    }

    fn phase(&mut self, what: &str) -> Result<()> {
        tracing::info!("kernel {}: {what}", self.recipe.name);
        writeln!(self.log, "### {what}")?;
        Ok(())
    }

    /// The host tools under `obj/tools` (objtool) are built by their own build system, which
    /// records absolute paths: in the copied tree it rebuilds them, and a newer objtool makes
    /// kbuild recompile every object. Rebuild them now, then put their timestamps back to the
    /// base's, so the kernel build sees them as unchanged.
    fn settle_tools(&mut self, tree: &Path) -> Result<()> {
        let tools = tree.join("obj/tools");
        let Ok(objtool) = fs::metadata(tools.join("objtool/objtool")) else {
            return Ok(());
        };
        let when = objtool.modified()?;
        self.phase("rebuilding objtool for the copied tree")?;
        self.make(tree, &["tools/objtool"], "objtool")?;
        let mut reset = 0usize;
        let mut stack = vec![tools];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir)?.flatten() {
                let meta = e.path().symlink_metadata()?;
                if meta.is_dir() {
                    stack.push(e.path());
                }
                if meta.file_type().is_symlink() || meta.modified()? <= when {
                    continue;
                }
                File::open(e.path())?.set_modified(when).with_context(|| {
                    format!("resetting the timestamp of {}", e.path().display())
                })?;
                reset += 1;
            }
        }
        writeln!(
            self.log,
            "reset the timestamps of {reset} files under obj/tools"
        )?;
        Ok(())
    }

    fn apply_patches(&mut self, tree: &Path, patches: &[PatchRef]) -> Result<()> {
        for p in patches {
            self.phase(&format!("applying {} ({})", p.name, &p.sha256[..12]))?;
            patch::apply(tree, p, &mut self.log)?;
        }
        Ok(())
    }

    /// defconfig, kernel fragments, lab fragments + LOCALVERSION, olddefconfig, then the check.
    fn configure(&mut self, tree: &Path) -> Result<()> {
        self.phase("configuring")?;
        let defconfig = self.recipe.defconfig.clone();
        self.make(tree, &[defconfig.as_str()], "defconfig")?;
        let targets = self.recipe.kconfig_targets.clone();
        for t in &targets {
            self.make(tree, &[t.as_str()], t)?;
        }
        let mut settings: Vec<Setting> = Vec::new();
        let mut merged = String::new();
        for f in &self.recipe.config {
            let text = fs::read_to_string(&f.path)
                .with_context(|| format!("reading {}", f.path.display()))?;
            settings.extend(config::parse_fragment(&f.name, &text)?);
            merged.push_str(&format!("\n# --- {} ---\n{text}\n", f.name));
        }
        let localversion = format!("CONFIG_LOCALVERSION=\"{}\"\n", local_version(self.key));
        settings.extend(config::parse_fragment(
            "(lab release suffix)",
            &localversion,
        )?);
        merged.push_str(&localversion);
        let dot_config = tree.join("obj/.config");
        let mut file = fs::OpenOptions::new().append(true).open(&dot_config)?;
        file.write_all(merged.as_bytes())?;
        drop(file);
        self.make(tree, &["olddefconfig"], "olddefconfig")?;
        let text = fs::read_to_string(&dot_config)?;
        let mut bad = config::mismatches(&settings, &config::parse_dot_config(&text));
        if let Some(first) = bad.first_mut() {
            config::explain(tree, first);
            let others: Vec<String> = bad.iter().skip(1).map(|m| m.symbol.clone()).collect();
            let first = bad.remove(0);
            if others.is_empty() {
                return Err(first.into());
            }
            return Err(
                anyhow::Error::new(first).context(format!("also wrong: {}", others.join(", ")))
            );
        }
        Ok(())
    }

    /// Runs make in the tree's object dir, logging everything and counting steps.
    fn make(&mut self, tree: &Path, targets: &[&str], label: &str) -> Result<u64> {
        let mut cmd = match self.opts.nice {
            Some(n) => {
                let mut c = Command::new("nice");
                c.args(["-n", &n.to_string(), "make"]);
                c
            }
            None => Command::new("make"),
        };
        cmd.arg("-C")
            .arg(tree)
            .arg("O=obj")
            .arg(format!("-j{}", self.opts.jobs.max(1)))
            .args(targets)
            .env("KBUILD_BUILD_TIMESTAMP", BUILD_TIMESTAMP)
            .env("KBUILD_BUILD_USER", "lab")
            .env("KBUILD_BUILD_HOST", "lab")
            .env("KBUILD_BUILD_VERSION", build_version(&self.recipe.name))
            .env("LC_ALL", "C")
            .env_remove("ARCH")
            .env_remove("CROSS_COMPILE")
            .env_remove("MAKEFLAGS");
        writeln!(self.log, "$ make O=obj {}", targets.join(" "))?;
        let (reader, writer) = std::io::pipe()?;
        cmd.stdout(writer.try_clone()?).stderr(writer);
        let mut child = cmd
            .spawn()
            .context("running make (install make, gcc, flex, bison, bc, libelf-dev, libssl-dev)")?;
        drop(cmd);
        let task = self.progress_task(label);
        let mut steps = 0u64;
        let mut tail: std::collections::VecDeque<String> = Default::default();
        for line in BufReader::new(reader).lines() {
            let line = line.unwrap_or_default();
            writeln!(self.log, "{line}")?;
            if line.starts_with("  ") {
                steps += 1;
                if let Some(task) = &task {
                    task.set(steps, line.trim());
                }
            }
            tail.push_back(line);
            if tail.len() > 25 {
                tail.pop_front();
            }
        }
        let status = child.wait()?;
        drop(task);
        if !status.success() {
            let tail: Vec<String> = tail.into_iter().collect();
            bail!(
                "kernel {}: make {} failed ({status}); last lines:\n{}",
                self.recipe.name,
                targets.join(" "),
                tail.join("\n")
            );
        }
        Ok(steps)
    }

    /// A progress task for the compile step (the other make calls are short).
    fn progress_task(&self, label: &str) -> Option<crate::progress::Task> {
        if !self.opts.progress || label != "building" {
            return None;
        }
        Some(crate::progress::Task::start(
            format!("kernel {}", self.recipe.name),
            expected_steps(self.cache),
        ))
    }

    /// modules_install into `modules/`, bzImage and .config next to it.
    fn install(&mut self, tree: &Path) -> Result<()> {
        self.phase("installing modules")?;
        let modules = self.tmp.join("modules");
        fs::create_dir_all(&modules)?;
        let install_path = format!("INSTALL_MOD_PATH={}", modules.display());
        self.make(
            tree,
            &["modules_install", &install_path, "INSTALL_MOD_STRIP=1"],
            "modules_install",
        )?;
        // `build` points into the staging tree, which moves; the entry's tree/ replaces it.
        if let Ok(entries) = fs::read_dir(modules.join("lib/modules")) {
            for e in entries.flatten() {
                // kbuild only warns when depmod is missing; without modules.dep modprobe fails.
                if !e.path().join("modules.dep").is_file() {
                    bail!(
                        "modules_install wrote no {}/modules.dep: install the kmod package (depmod)",
                        e.path().display()
                    );
                }
                for link in ["build", "source"] {
                    let p = e.path().join(link);
                    if p.symlink_metadata().is_ok() {
                        fs::remove_file(&p)?;
                    }
                }
            }
        }
        fs::copy(
            tree.join("obj/arch/x86/boot/bzImage"),
            self.tmp.join("bzImage"),
        )
        .context("copying bzImage")?;
        fs::copy(tree.join("obj/.config"), self.tmp.join("config"))?;
        Ok(())
    }
}

fn describe(source: &ResolvedSource) -> String {
    match &source.source {
        recipe::Source::Debian { package } => package.clone(),
        recipe::Source::Git { repo, .. } => repo.display().to_string(),
        recipe::Source::Tarball { path, .. } => path.display().to_string(),
    }
}

fn read_uts_version(obj: &Path) -> Option<String> {
    let text = fs::read_to_string(obj.join("include/generated/utsversion.h"))
        .or_else(|_| fs::read_to_string(obj.join("include/generated/compile.h")))
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("#define UTS_VERSION "))
        .map(|v| v.trim().trim_matches('"').to_string())
}

/// The largest step count of a cold build in the cache: the bar's length for the next one.
fn expected_steps(cache: &Cache) -> Option<u64> {
    list(cache)
        .ok()?
        .iter()
        .filter(|k| k.manifest.build.incremental_from.is_none())
        .map(|k| k.manifest.build.steps)
        .max()
}

/// Copies a base's tree for a variant: sources as hard links (patch replaces files instead of
/// writing through links), the object tree as a real copy (the compiler and fixdep rewrite their
/// outputs in place, which would corrupt the base through links). Timestamps are kept, so make
/// only redoes what the variant's patches and config touch.
fn copy_tree(base: &Path, dest: &Path, log: &mut File) -> Result<()> {
    fs::create_dir_all(dest)?;
    for entry in fs::read_dir(base)? {
        let entry = entry?;
        let name = entry.file_name();
        let target = dest.join(&name);
        let (args, what): (&[&str], &str) = if name == "obj" {
            (&["-a", "--reflink=auto"], "copy")
        } else {
            (&["-al"], "link")
        };
        let out = Command::new("cp")
            .args(args)
            .arg(entry.path())
            .arg(&target)
            .output()
            .context("running cp")?;
        if !out.status.success() {
            bail!(
                "cannot {what} {} to {}: {}",
                entry.path().display(),
                target.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    writeln!(log, "copied {} -> {}", base.display(), dest.display())?;
    Ok(())
}

/// One cached kernel.
#[derive(Debug, Clone)]
pub struct CachedKernel {
    pub key: String,
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub has_tree: bool,
}

/// Every complete entry, newest first.
pub fn list(cache: &Cache) -> Result<Vec<CachedKernel>> {
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
pub fn current_keys(cache: &Cache, opts: &BuildOptions) -> Result<Vec<(String, String)>> {
    let toolchain = toolchain_id()?;
    let mut resolver = SourceResolver::new(cache, opts.lock_path.clone());
    let mut out = Vec::new();
    for name in recipe::recipe_names(&opts.dirs)? {
        let recipe = recipe::load(&opts.dirs, &name)?;
        let source = resolver.resolve_offline(&recipe.source)?;
        out.push((name, cache_key(&recipe, &source, &toolchain)));
    }
    Ok(out)
}

/// What `gc` should do.
#[derive(Debug, Clone, Default)]
pub struct GcOptions {
    /// Keys to keep (e.g. from [`current_keys`]); everything else is removed.
    pub keep: BTreeSet<String>,
    /// Also drop `tree/` from the kept entries (saves most of the space; variants then build cold).
    pub drop_trees: bool,
    /// Report only.
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default)]
pub struct GcReport {
    /// (recipe, key) of removed entries.
    pub removed: Vec<(String, String)>,
    /// (recipe, key) of entries whose tree was dropped.
    pub trees_dropped: Vec<(String, String)>,
    pub failed_logs_removed: usize,
    pub staging_removed: usize,
}

/// Removes entries not in `opts.keep` (each under its key's lock, so a build reading it as a base
/// finishes first), failed-build logs and dead staging dirs.
pub fn gc(cache: &Cache, opts: &GcOptions) -> Result<GcReport> {
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
        } else if opts.drop_trees && k.has_tree {
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

/// `lab kernel gc`: keep the entries the current recipes map to (all removed with `all`).
pub fn gc_unused(
    cache: &Cache,
    opts: &BuildOptions,
    all: bool,
    drop_trees: bool,
    dry_run: bool,
) -> Result<GcReport> {
    let keep = if all {
        BTreeSet::new()
    } else {
        current_keys(cache, opts)?
            .into_iter()
            .map(|(_, key)| key)
            .collect()
    };
    gc(
        cache,
        &GcOptions {
            keep,
            drop_trees,
            dry_run,
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
