//! Building a recipe into the cache, listing and collecting entries.
//!
//! Entry layout (`<cache>/kernels/<key>/`):
//! - the kernel image (`bzImage` on x86_64, `Image` on aarch64), `config` (the final
//!   `.config`), `manifest.json`, `build.log`
//! - `modules/lib/modules/<release>/` (stripped, with `modules.dep`; copy `modules/` into an
//!   initramfs root and busybox `modprobe` works)
//! - `tree/` (optional, kept by default): the patched source with its object tree in `tree/obj`,
//!   the starting point of cheap variants. `lab kernel gc --trees` drops it.
//!
//! The object tree lives directly inside the source tree (`O=obj`), which makes kbuild refer to
//! the source as `..`: the tree can be renamed into the cache and copied for a variant without
//! kbuild seeing a changed command line. Failed builds leave only a log in `kernels/.failed/`.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::config::{self, Setting};
use super::key::{
    build_version, cache_key, local_version, pinned_toolchain, toolchain_id, PINNED_TOOLCHAIN_ENV,
};
use super::patch;
use super::recipe::{self, BootSettings, FragmentRef, PatchRef, Recipe, RecipeDirs};
use super::source::{ResolvedSource, SourceResolver};
use super::tree::{copy_tree, relocate_tool_cmds};
use crate::cache::Cache;

/// Cache kind of built kernels.
pub(crate) const KIND: &str = "kernels";

/// Tools the kernel's Kconfig probes that the key does not name (it names gcc and ld,
/// [`super::key`]), each pointed at a command that does not exist. Kconfig writes their
/// versions into `.config` (`CONFIG_RUSTC_VERSION`, `CONFIG_RUSTC_LLVM_VERSION`,
/// `CONFIG_PAHOLE_VERSION`), and `CONFIG_IKCONFIG` puts `.config` into the bzImage: with rustc
/// on `PATH` (a developer's `~/.cargo/bin`) a build made another bzImage under the same key
/// than one without (a CI shard with no cargo). Measured 2026-12-04: the revert built from a
/// pulled v6.12 tree, sha256 5302...9e9e with rustc 1.95 on PATH, 7798...141c without. Rust in
/// the guest kernel is not supported: a recipe that asks for `CONFIG_RUST` does not get it.
const UNSEEN_TOOLS: &[(&str, &str)] = &[
    ("RUSTC", "lab-no-rustc"),
    ("HOSTRUSTC", "lab-no-rustc"),
    ("BINDGEN", "lab-no-bindgen"),
    ("PAHOLE", "lab-no-pahole"),
];

/// kbuild's `uname -v` timestamp: fixed, so equal inputs give equal kernels. Short, because
/// kbuild cuts UTS_VERSION (`#1-<recipe> SMP PREEMPT_DYNAMIC <timestamp>`) at 64 bytes.
const BUILD_TIMESTAMP: &str = "2000-01-01";

/// How to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub(crate) dirs: RecipeDirs,
    /// The lock file pinning Debian sources (`images/lock.toml`).
    pub(crate) lock_path: PathBuf,
    /// `make -j` (`LAB_KERNEL_JOBS`, default: available CPUs).
    pub(crate) jobs: usize,
    /// Run make under `nice -n` this (`LAB_KERNEL_NICE`, default 10; the host is shared).
    pub(crate) nice: Option<i32>,
    /// Report compile progress through [`crate::progress`].
    pub(crate) progress: bool,
    /// Keep `tree/` (source + objects) in the entry so variants build incrementally.
    pub(crate) keep_tree: bool,
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
pub(crate) struct BaseRef {
    pub recipe: String,
    pub key: String,
}

/// How the entry was built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BuildInfo {
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
pub(crate) struct Manifest {
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
    /// The architecture it was built for (entries from before architectures: x86_64).
    #[serde(default)]
    pub arch: crate::arch::Arch,
    pub toolchain: String,
    /// The recipe's boot-time settings (not part of the key).
    pub boot: BootSettings,
    pub build: BuildInfo,
}

/// A kernel in the cache.
#[derive(Debug, Clone)]
pub struct BuiltKernel {
    pub(crate) dir: PathBuf,
    pub(crate) manifest: Manifest,
}

/// `RECIPE RELEASE (DIR)`: what `lab kernel build` prints of each kernel.
impl std::fmt::Display for BuiltKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} ({})",
            self.manifest.recipe,
            self.manifest.release,
            self.dir.display()
        )
    }
}

impl BuiltKernel {
    pub(crate) fn open(dir: &Path) -> Result<BuiltKernel> {
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
    pub(crate) fn image(&self) -> PathBuf {
        self.dir.join(self.manifest.arch.kernel_image_target())
    }
    /// Root to copy into an initramfs: it holds `lib/modules/<release>`.
    pub(crate) fn modules_root(&self) -> PathBuf {
        self.dir.join("modules")
    }
    pub(crate) fn modules_dir(&self) -> PathBuf {
        self.modules_root()
            .join("lib/modules")
            .join(&self.manifest.release)
    }
    /// The final `.config` the kernel was built with.
    pub(crate) fn config(&self) -> PathBuf {
        self.dir.join("config")
    }
    pub(crate) fn build_log(&self) -> PathBuf {
        self.dir.join("build.log")
    }
    /// Source + object tree, when kept.
    pub(crate) fn tree(&self) -> Option<PathBuf> {
        let t = self.dir.join("tree");
        t.join("obj/.config").is_file().then_some(t)
    }
}

/// Builds recipe `name` (and its base first, if it has one), or returns the cached entry.
pub(crate) fn build(cache: &Cache, name: &str, opts: &BuildOptions) -> Result<BuiltKernel> {
    let recipe = recipe::load(&opts.dirs, name)?;
    build_recipe(cache, &recipe, opts)
}

/// `lab kernel build`: each recipe of `names` in order (none: the default recipe), built or
/// found in the cache.
pub fn build_all(cache: &Cache, names: &[String], opts: &BuildOptions) -> Result<Vec<BuiltKernel>> {
    if names.is_empty() {
        return Ok(vec![build(cache, super::DEFAULT_RECIPE, opts)?]);
    }
    names.iter().map(|name| build(cache, name, opts)).collect()
}

/// The cached build of `recipe`, if there is one: nothing is built or downloaded (a Debian
/// source is looked up by its lock-file pin). A bisect asks it to prefer probes already built.
pub(crate) fn cached(
    cache: &Cache,
    recipe: &Recipe,
    opts: &BuildOptions,
) -> Result<Option<BuiltKernel>> {
    let toolchain = toolchain_id(cache, recipe.arch)?;
    let mut resolver = SourceResolver::new(cache, opts.lock_path.clone());
    let offline = resolver.resolve_offline(&recipe.source)?;
    let key = cache_key(recipe, &offline, &toolchain);
    cache
        .lookup(KIND, &key)
        .map(|dir| BuiltKernel::open(&dir))
        .transpose()
}

/// Builds an already loaded recipe.
pub(crate) fn build_recipe(
    cache: &Cache,
    recipe: &Recipe,
    opts: &BuildOptions,
) -> Result<BuiltKernel> {
    let mut toolchain = toolchain_id(cache, recipe.arch)?;
    let mut resolver = SourceResolver::new(cache, opts.lock_path.clone());
    // The lock file's pin is enough to find a cached build without asking the archive.
    let offline = resolver.resolve_offline(&recipe.source)?;
    let key = cache_key(recipe, &offline, &toolchain);
    if let Some(dir) = cache.lookup(KIND, &key) {
        return BuiltKernel::open(&dir);
    }
    // A cross toolchain is unpacked only for a build; the key is then that of what it resolved
    // to (another version when the locked one left the archive).
    let cross = if recipe.arch == crate::arch::Arch::host() {
        None
    } else {
        let provisioned = crate::cross::CrossToolchain::provision(cache, recipe.arch)?;
        toolchain = provisioned.id.clone();
        Some(provisioned)
    };
    if recipe.arch == crate::arch::Arch::host() {
        if let Some(pinned) = pinned_toolchain() {
            bail!(
                "kernel {} (key {}) is not in the cache {}, and {PINNED_TOOLCHAIN_ENV} pins the \
                 toolchain of prebuilt kernels ({pinned}): nothing is built under it (a bundle \
                 holds the kernels of the variants it was made for: `lab bundle create --variant`)",
                recipe.name,
                &key[..12],
                cache.root().display()
            );
        }
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
    if let Some(dir) = cache.lookup(KIND, &key) {
        return BuiltKernel::open(&dir);
    }
    super::tools::ensure_build_tools(&cache.dir("logs"))?;
    // A base pulled from the remote cache came without its object tree (an optional layer):
    // fetch it now that a variant must be built from it.
    if let Some(b) = base.as_ref().filter(|b| b.tree().is_none()) {
        cache.fetch_layer(KIND, &b.manifest.key, "tree");
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
            cross: cross.as_ref(),
            tmp,
            log: File::create(&log_path)?,
            resolver: &mut resolver,
            started: Instant::now(),
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
    /// The cross toolchain of a recipe for another architecture than the host's.
    cross: Option<&'a crate::cross::CrossToolchain>,
    tmp: &'a Path,
    log: File,
    resolver: &'a mut SourceResolver<'r>,
    /// When the build started: every phase and make call in the log carries its offset.
    started: Instant,
}

impl Builder<'_, '_> {
    fn run(mut self, base: Option<&BuiltKernel>) -> Result<()> {
        let started = self.started;
        let tree = self.tmp.join("tree");
        let base_tree = base.and_then(|b| b.tree().map(|t| (b, t)));
        // A variant that only adds patches has its base's config but for the release suffix.
        let config_as_base = base_tree
            .as_ref()
            .is_some_and(|(b, _)| same_config_inputs(&b.manifest, self.recipe));
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
        self.configure(&tree, config_as_base)?;
        let image_target = self.recipe.arch.kernel_image_target();
        let steps = self.make(&tree, &[image_target, "modules"], "building")?;
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
            arch: self.recipe.arch,
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
        writeln!(
            self.log,
            "### [{:7.1} s] {what}",
            self.started.elapsed().as_secs_f64()
        )?;
        Ok(())
    }

    /// The host tools under `obj/tools` (objtool) are built by their own build system, which
    /// records absolute paths in its `.cmd` files: in the copied tree every recorded command
    /// looks changed, it rebuilds objtool (8-30 s here), and a newer objtool makes kbuild
    /// recompile every object. So the base tree's path is first rewritten to this tree's in
    /// those files ([`relocate_tool_cmds`]), which leaves the tools build nothing to do; then
    /// make runs anyway and whatever it still rebuilt gets the base's timestamps back, so the
    /// kernel build sees the tools as unchanged.
    fn settle_tools(&mut self, tree: &Path) -> Result<()> {
        let tools = tree.join("obj/tools");
        let Ok(objtool) = fs::metadata(tools.join("objtool/objtool")) else {
            return Ok(());
        };
        let when = objtool.modified()?;
        let relocated = relocate_tool_cmds(&tools, tree)?;
        writeln!(
            self.log,
            "rewrote the tree path in {relocated} .cmd files under obj/tools"
        )?;
        self.phase("checking objtool in the copied tree")?;
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
    /// With `as_base` (the copied tree's `.config` came from the same defconfig, targets and
    /// fragments) the base's `.config` is kept with only its release suffix replaced: the
    /// defconfig and olddefconfig steps would write the same file again, and the build's own
    /// syncconfig applies the new suffix (one Kconfig pass instead of three).
    fn configure(&mut self, tree: &Path, as_base: bool) -> Result<()> {
        if as_base {
            self.phase("configuring (the base's .config with this build's release suffix)")?;
        } else {
            self.phase("configuring")?;
            let defconfig = self.recipe.defconfig.clone();
            self.make(tree, &[defconfig.as_str()], "defconfig")?;
            let targets = self.recipe.kconfig_targets.clone();
            for t in &targets {
                self.make(tree, &[t.as_str()], t)?;
            }
        }
        let mut settings: Vec<Setting> = Vec::new();
        let mut merged = String::new();
        for f in &self.recipe.config {
            let text = fs::read_to_string(&f.path)
                .with_context(|| format!("reading {}", f.path.display()))?;
            settings.extend(config::parse_fragment(&f.name, &text)?);
            if !as_base {
                merged.push_str(&format!("\n# --- {} ---\n{text}\n", f.name));
            }
        }
        let localversion = format!("CONFIG_LOCALVERSION=\"{}\"\n", local_version(self.key));
        settings.extend(config::parse_fragment(
            "(lab release suffix)",
            &localversion,
        )?);
        merged.push_str(&localversion);
        let dot_config = tree.join("obj/.config");
        let replaced = as_base && replace_localversion(&dot_config, localversion.trim_end())?;
        if !replaced {
            let mut file = fs::OpenOptions::new().append(true).open(&dot_config)?;
            file.write_all(merged.as_bytes())?;
            drop(file);
            self.make(tree, &["olddefconfig"], "olddefconfig")?;
        }
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
        // A recipe may start from any defconfig; say early what the lab will miss in its guests.
        for (who, symbol, wanted, got) in config::unmet_needs(&config::parse_dot_config(&text)) {
            tracing::warn!(
                "kernel {}: {symbol} is {got}, but {who} needs ={wanted}",
                self.recipe.name
            );
            writeln!(
                self.log,
                "warning: {symbol} is {got}, but {who} needs ={wanted}"
            )?;
        }
        Ok(())
    }

    /// Runs make in the tree's object dir, logging everything and counting steps.
    fn make(&mut self, tree: &Path, targets: &[&str], label: &str) -> Result<u64> {
        let mut cmd = match self.opts.nice {
            Some(n) => {
                let mut c = crate::process::command("nice");
                c.args(["-n", &n.to_string(), "make"]);
                c
            }
            None => crate::process::command("make"),
        };
        cmd.arg("-C")
            .arg(tree)
            .arg("O=obj")
            .arg(format!("-j{}", self.opts.jobs.max(1)))
            .args(UNSEEN_TOOLS.iter().map(|(var, cmd)| format!("{var}={cmd}")))
            .args(targets)
            .env("KBUILD_BUILD_TIMESTAMP", BUILD_TIMESTAMP)
            .env("KBUILD_BUILD_USER", "lab")
            .env("KBUILD_BUILD_HOST", "lab")
            .env("KBUILD_BUILD_VERSION", build_version(&self.recipe.name))
            .env("LC_ALL", "C")
            .env_remove("ARCH")
            .env_remove("CROSS_COMPILE")
            .env_remove("MAKEFLAGS");
        if let Some(cross) = self.cross {
            cmd.arg(format!("ARCH={}", self.recipe.arch.kernel_arch()))
                .arg(format!("CROSS_COMPILE={}", cross.cross_compile()));
        }
        writeln!(
            self.log,
            "$ make O=obj {}    [at {:.1} s]",
            targets.join(" "),
            self.started.elapsed().as_secs_f64()
        )?;
        let make_started = Instant::now();
        let (reader, writer) = std::io::pipe()?;
        // Kconfig asks on stdin about symbols a .config lacks; the lab never answers.
        cmd.stdin(std::process::Stdio::null())
            .stdout(writer.try_clone()?)
            .stderr(writer);
        let mut child = crate::process::spawn_tree(&mut cmd)
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
        let status = child.inner().wait()?;
        drop(task);
        writeln!(
            self.log,
            "# make {} took {:.1} s",
            targets.join(" "),
            make_started.elapsed().as_secs_f64()
        )?;
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
        let arch = self.recipe.arch;
        fs::copy(
            tree.join("obj").join(arch.kernel_image_path()),
            self.tmp.join(arch.kernel_image_target()),
        )
        .with_context(|| format!("copying {}", arch.kernel_image_target()))?;
        fs::copy(tree.join("obj/.config"), self.tmp.join("config"))?;
        Ok(())
    }
}

/// Replaces the `CONFIG_LOCALVERSION=` line of `dot_config` with `line`; false when it has none.
fn replace_localversion(dot_config: &Path, line: &str) -> Result<bool> {
    let text = fs::read_to_string(dot_config)?;
    let mut found = false;
    let mut out = String::with_capacity(text.len() + line.len());
    for l in text.lines() {
        if l.starts_with("CONFIG_LOCALVERSION=") {
            found = true;
            out.push_str(line);
        } else {
            out.push_str(l);
        }
        out.push('\n');
    }
    if found {
        fs::write(dot_config, out)?;
    }
    Ok(found)
}

/// Whether `recipe` configures exactly as the build recorded in `base` did: same defconfig,
/// kernel targets and lab fragments (by name and content). Only the release suffix differs.
fn same_config_inputs(base: &Manifest, recipe: &Recipe) -> bool {
    let fragments = |f: &[FragmentRef]| -> Vec<(String, String)> {
        f.iter()
            .map(|f| (f.name.clone(), f.sha256.clone()))
            .collect()
    };
    base.defconfig == recipe.defconfig
        && base.kconfig_targets == recipe.kconfig_targets
        && fragments(&base.config_fragments) == fragments(&recipe.config)
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
    super::entries::list(cache)
        .ok()?
        .iter()
        .filter(|k| k.manifest.build.incremental_from.is_none())
        .map(|k| k.manifest.build.steps)
        .max()
}
