//! `lab bundle`: one file with everything a host without network or cargo needs to run a
//! comparison (`lab bundle create`), and running the lab from it (`lab bundle run`).
//!
//! The file is an OCI image layout tarball ([`layout`]) of these layers:
//! - `lab programs`: the running `lab` executable and the `lab-dma` beside it, debug info
//!   stripped. The running executable, not a fresh release build: the guest images' keys hash
//!   the agent it embeds, so the bundled images are the ones this binary finds, and nothing is
//!   compiled for a bundle (a release build of the lab takes many minutes on two cores);
//! - `qemu`: the pinned QEMU bundle's x86_64 emulator with its library closure (read from the ELF
//!   files), loader, firmware and modules; the other emulators and the docs stay out;
//! - `kernel NAME` per kernel (the lab's default kernel and every variant's): the cache entry
//!   without `tree/`, which only incremental builds need;
//! - `image RECIPE for KERNEL` per guest image the variants boot;
//! - `recipes`: `images/` (kernel and guest recipes, the lock), `topologies/`, `hosts/` and the
//!   recorded resolutions of the QEMU and image bundles, which warm lookups read instead of apt.
//!
//! Unpacked, the tree is `bin/`, `repo/` and `cache/`; `run` points the bundled lab at them
//! (`LAB_REPO_DIR`, `LAB_CACHE_DIR`, `LAB_DMA_BIN`) and pins the kernels' toolchain
//! ([`crate::kernel::PINNED_TOOLCHAIN_ENV`]): a kernel's key hashes the compiler that built it,
//! which the target host need not have.

mod layout;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::cache::Cache;
use crate::variant::Variant;
use crate::Lab;

/// The bundle's OCI artifact type (its config's media type adds `+json`).
pub const ARTIFACT_TYPE: &str = "application/vnd.lab.bundle.v1";
/// The metadata format this lab writes and reads.
const FORMAT: u32 = 1;

/// A `lab bundle` verb.
#[derive(Debug, Clone)]
pub enum Command {
    /// [`create`].
    Create(CreateRequest),
    /// [`run`].
    Run(RunRequest),
}

/// What `lab bundle create` bundles: a scenario's comparison, as `lab compare` takes it.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    /// The scenario: a shipped one's name (`lab scenarios`), or a scenario file (a path ending
    /// in `.toml`), which the bundle carries as `scenarios/FILE`.
    pub scenario: String,
    /// The variants, base first (empty: the scenario's).
    pub variants: Vec<Variant>,
    /// Parameter overrides for every variant (they may choose another image).
    pub set: BTreeMap<String, String>,
    /// The topology (default: the scenario's).
    pub topology: Option<String>,
    /// The file to write.
    pub output: PathBuf,
}

/// What a bundle says about itself (the config's metadata).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Metadata {
    format: u32,
    /// The bundled lab's version.
    lab: String,
    scenario: String,
    /// The scenario file the bundle carries (`scenarios/NAME.toml` under its repository), for
    /// `compare --scenario`.
    #[serde(default)]
    scenario_file: Option<String>,
    variants: Vec<String>,
    topology: String,
    /// The compiler and linker the bundled kernels' keys hash.
    kernel_toolchain: String,
}

/// A written bundle and its size by part.
#[derive(Debug, Clone)]
pub struct Created {
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Per layer: name, compressed bytes, unpacked bytes, files.
    pub parts: Vec<(String, u64, u64, usize)>,
}

/// The size table: a line per part, then the whole file.
impl fmt::Display for Created {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        writeln!(
            f,
            "{:<48} {:>8} {:>9} {:>6}",
            "part", "MiB", "unpacked", "files"
        )?;
        for (name, compressed, unpacked, files) in &self.parts {
            writeln!(
                f,
                "{name:<48} {:>8.2} {:>9.2} {files:>6}",
                mib(*compressed),
                mib(*unpacked)
            )?;
        }
        writeln!(
            f,
            "{:<48} {:>8.2}\nwrote {}",
            "bundle",
            mib(self.bytes),
            self.path.display()
        )
    }
}

/// Finds or builds everything the comparison boots (as `lab compare` would), and writes it
/// with the lab itself into one bundle file.
pub async fn create(request: &CreateRequest) -> Result<Created> {
    let file = request
        .scenario
        .ends_with(".toml")
        .then(|| PathBuf::from(&request.scenario));
    let mut compare = crate::scenarios::Request {
        scenario: request.scenario.clone(),
        file: file.clone(),
        variants: request.variants.clone(),
        set: request.set.clone(),
        topology: request.topology.clone(),
        ..crate::scenarios::Request::default()
    };
    compare.check()?;
    let lab = Lab::ready().await?;
    let materials = crate::scenarios::materials(&lab, &compare).await?;
    if materials.arch != Arch::host() {
        bail!(
            "{}: its guests are {}, and a bundle carries {} guests only (another \
             architecture's guest programs are built with cargo and a cross toolchain, keyed \
             by the agent's sources)",
            request.scenario,
            materials.arch,
            Arch::host()
        );
    }
    let default_kernel = lab.default_kernel().clone();
    let (cache, request) = (lab.cache.clone(), request.clone());
    let file = match file {
        Some(path) => Some(crate::scenarios::file::ScenarioFile::read(&path)?),
        None => None,
    };
    tokio::task::spawn_blocking(move || {
        assemble(&cache, &request, file.as_ref(), default_kernel, materials)
    })
    .await?
}

/// Writes the bundle of `materials` (blocking: it copies and compresses some 150 MB).
fn assemble(
    cache: &Cache,
    request: &CreateRequest,
    file: Option<&crate::scenarios::file::ScenarioFile>,
    default_kernel: crate::kernel::BootKernel,
    materials: crate::experiment::Materials,
) -> Result<Created> {
    let scratch = tempfile::Builder::new()
        .prefix("lab-bundle-staging-")
        .tempdir()?;
    let mut layers = vec![programs_layer(scratch.path())?];
    layers.push(qemu_layer(cache, scratch.path())?);
    let mut kernels = vec![("the default kernel".to_string(), default_kernel)];
    kernels.extend(
        materials
            .variants
            .iter()
            .map(|(variant, kernel, _)| (format!("variant {variant}"), kernel.clone())),
    );
    let mut seen = BTreeSet::new();
    let mut toolchains = BTreeSet::new();
    for (whose, kernel) in &kernels {
        if !seen.insert(kernel.image.clone()) {
            continue;
        }
        let (layer, toolchain) =
            kernel_layer(cache, kernel).with_context(|| format!("{whose}: its kernel"))?;
        layers.push(layer);
        toolchains.insert(toolchain);
    }
    let [kernel_toolchain]: [String; 1] =
        Vec::from_iter(toolchains)
            .try_into()
            .map_err(|t: Vec<String>| {
                anyhow::anyhow!("the kernels were built with different toolchains: {t:?}")
            })?;
    let mut bundles = BTreeSet::from([crate::toolchain::QEMU_BUNDLE.to_string()]);
    for (variant, kernel, image) in &materials.variants {
        let recipe = crate::image::ImageRecipe::by_name(&image.recipe)?;
        bundles.extend(recipe.bundle_names(kernel.arch));
        if !seen.insert(image.path.clone()) {
            continue;
        }
        let entry = entry_of(cache, "images", &image.path)
            .with_context(|| format!("variant {variant}: its image {}", image.recipe))?;
        layers.push(layout::LayerSpec {
            name: format!("image {} for {}", image.recipe, kernel.name),
            sources: vec![source(&entry, &format!("cache/images/{}", image.hash), &[])],
        });
    }
    let mut recipes = recipes_layer(cache, &bundles)?;
    let scenario_file = file.map(|f| {
        let name = format!("scenarios/{}.toml", crate::host::sanitize(f.name()));
        recipes
            .sources
            .push(source(f.path(), &format!("repo/{name}"), &[]));
        name
    });
    layers.push(recipes);
    let scenario = match file {
        Some(f) => f.name().to_string(),
        None => request.scenario.clone(),
    };
    let metadata = Metadata {
        format: FORMAT,
        lab: env!("CARGO_PKG_VERSION").to_string(),
        scenario: scenario.clone(),
        scenario_file,
        variants: materials.variants.iter().map(|v| v.0.clone()).collect(),
        topology: materials.topology.clone(),
        kernel_toolchain,
    };
    let written = layout::write(
        &request.output,
        ARTIFACT_TYPE,
        &scenario,
        serde_json::to_value(&metadata)?,
        &layers,
    )?;
    Ok(Created {
        path: request.output.clone(),
        bytes: written.bytes,
        parts: written
            .layers
            .into_iter()
            .map(|l| (l.name, l.compressed, l.unpacked, l.files))
            .collect(),
    })
}

fn source(path: &Path, dest: &str, skip: &[&str]) -> layout::Source {
    layout::Source {
        path: path.to_path_buf(),
        dest: dest.to_string(),
        skip: skip.iter().map(|s| s.to_string()).collect(),
    }
}

/// The cache entry (`<cache>/<kind>/<key>`) that holds `file`.
fn entry_of(cache: &Cache, kind: &str, file: &Path) -> Result<PathBuf> {
    let entry = file.parent().context("a file without a directory")?;
    if entry.parent() != Some(cache.dir(kind).as_path()) {
        bail!(
            "{} is not in a cache entry of {}: a bundle carries what the lab built",
            file.display(),
            cache.dir(kind).display()
        );
    }
    Ok(entry.to_path_buf())
}

/// The running `lab` and its `lab-dma`, stripped of debug info into `scratch/bin`.
fn programs_layer(scratch: &Path) -> Result<layout::LayerSpec> {
    let bin = scratch.join("bin");
    std::fs::create_dir_all(&bin)?;
    let lab = std::env::current_exe().context("finding the running lab")?;
    let dma = crate::devices::lab_dma::locate()?;
    for (from, name) in [(&lab, "lab"), (&dma, "lab-dma")] {
        strip_into(from, &bin.join(name))?;
    }
    Ok(layout::LayerSpec {
        name: "lab programs".into(),
        sources: vec![source(&bin, "bin", &[])],
    })
}

/// Copies `from` to `to` without debug info (binutils' `strip`, which kernel builds need too);
/// where `strip` fails the binary goes in whole, with a warning.
fn strip_into(from: &Path, to: &Path) -> Result<()> {
    let out = crate::process::output(
        crate::process::command("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(to)
            .arg(from),
    );
    match out {
        Ok(out) if out.status.success() => Ok(()),
        failed => {
            let why = match failed {
                Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
                Err(e) => format!("{e:#}"),
            };
            crate::progress::warn(format!(
                "bundle: {} goes in with its debug info: strip failed ({why})",
                from.display()
            ));
            std::fs::copy(from, to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
            Ok(())
        }
    }
}

/// The pinned QEMU bundle (whatever QEMU this host runs): its x86_64 emulator's closure and
/// its data and module dirs, at the cache entry's paths.
fn qemu_layer(cache: &Cache, scratch: &Path) -> Result<layout::LayerSpec> {
    let qemu = crate::toolchain::Qemu::bundle(cache)?;
    let root = qemu
        .binary
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .context("the QEMU bundle's binary is not under root/usr/bin")?
        .to_path_buf();
    let entry = root.parent().context("QEMU's root has no entry")?;
    let key = entry
        .file_name()
        .context("QEMU's entry has no name")?
        .to_string_lossy()
        .into_owned();
    let rel = |p: &Path| -> Result<String> {
        Ok(p.strip_prefix(&root)
            .with_context(|| format!("{} is outside {}", p.display(), root.display()))?
            .to_string_lossy()
            .into_owned())
    };
    let mut files = crate::image::programs::library_closure(
        "QEMU bundle",
        Arch::host(),
        &root,
        &rel(&qemu.binary)?,
    )?;
    // The lab runs the bundle's QEMU through the bundle's own loader, named explicitly.
    let loader = qemu
        .loader
        .as_ref()
        .context("the QEMU bundle has no loader")?;
    files.insert(rel(&loader.ld_so)?);
    let staged = scratch.join("qemu-root");
    crate::image::programs::install(&root, &staged, &files)?;
    let dest = format!("cache/qemu/{key}/root");
    let mut sources = vec![source(&staged, &dest, &[])];
    for dir in qemu.data_dirs.iter().chain(qemu.module_dir.as_ref()) {
        sources.push(source(dir, &format!("{dest}/{}", rel(dir)?), &[]));
    }
    Ok(layout::LayerSpec {
        name: "qemu".into(),
        sources,
    })
}

/// A kernel's cache entry without its object tree, and the toolchain its key hashes.
fn kernel_layer(
    cache: &Cache,
    kernel: &crate::kernel::BootKernel,
) -> Result<(layout::LayerSpec, String)> {
    let entry = entry_of(cache, crate::kernel::KIND, &kernel.image).with_context(|| {
        format!(
            "kernel {} is not a built recipe (Debian's packaged kernel is not bundled)",
            kernel.name
        )
    })?;
    let built = crate::kernel::BuiltKernel::open(&entry)?;
    let layer = layout::LayerSpec {
        name: format!("kernel {}", kernel.name),
        sources: vec![source(
            &entry,
            &format!("cache/kernels/{}", built.manifest.key),
            &["tree"],
        )],
    };
    Ok((layer, built.manifest.toolchain.clone()))
}

/// The checkout's recipes, topologies and host files, and the recorded resolutions of the
/// lock's `bundles` (a few KB each).
fn recipes_layer(cache: &Cache, bundles: &BTreeSet<String>) -> Result<layout::LayerSpec> {
    let mut sources = Vec::new();
    for dir in ["images", "topologies", "hosts"] {
        let path = crate::repo_path(dir);
        if path.is_dir() {
            sources.push(source(&path, &format!("repo/{dir}"), &[]));
        }
    }
    let memos = cache
        .root()
        .join("memo")
        .join(crate::cache::RESOLUTIONS_MEMO);
    let mut found = BTreeSet::new();
    let mut entries: Vec<_> = std::fs::read_dir(&memos)
        .with_context(|| format!("reading {}", memos.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Ok(text) = std::fs::read(entry.path()) else {
            continue;
        };
        let Ok(resolved) = serde_json::from_slice::<crate::debian::ResolvedBundle>(&text) else {
            continue;
        };
        if bundles.contains(&resolved.name) {
            found.insert(resolved.name);
            let name = entry.file_name().to_string_lossy().into_owned();
            sources.push(source(
                &entry.path(),
                &format!("cache/memo/{}/{name}", crate::cache::RESOLUTIONS_MEMO),
                &[],
            ));
        }
    }
    if let Some(missing) = bundles.difference(&found).next() {
        bail!(
            "no recorded resolution of bundle {missing} in {}: the lab that built it did not \
             record one",
            memos.display()
        );
    }
    Ok(layout::LayerSpec {
        name: "recipes".into(),
        sources,
    })
}

/// What `lab bundle run` runs.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The bundle file.
    pub file: PathBuf,
    /// Where to unpack it (must be missing or empty; it is kept). Default: a temporary
    /// directory, removed after the run.
    pub dir: Option<PathBuf>,
    /// The bundled lab's arguments (`compare --repetitions 1`, `doctor`).
    pub args: Vec<OsString>,
}

/// Unpacks the bundle (every file checked against its sha256) and runs its lab with
/// `request.args` on its own cache, recipes and topologies; the lab's exit code (128 + the
/// signal when one ended it). The bundled lab dies with this process.
pub fn run(request: &RunRequest) -> Result<i32> {
    let temporary;
    let dir = match &request.dir {
        Some(dir) => {
            let used = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
            if used {
                bail!(
                    "--dir {}: not empty (a bundle unpacks into an empty or new directory)",
                    dir.display()
                );
            }
            dir.clone()
        }
        None => {
            temporary = tempfile::Builder::new().prefix("lab-bundle-").tempdir()?;
            temporary.path().to_path_buf()
        }
    };
    crate::progress::step(format!(
        "bundle: unpacking {} into {}",
        request.file.display(),
        dir.display()
    ));
    let unpacked = layout::read(&request.file, &dir, ARTIFACT_TYPE)?;
    let metadata: Metadata = serde_json::from_value(unpacked.config.metadata.clone())
        .with_context(|| format!("{}: its metadata", request.file.display()))?;
    if metadata.format != FORMAT {
        bail!(
            "{}: bundle format {} (this lab reads {FORMAT})",
            request.file.display(),
            metadata.format
        );
    }
    crate::progress::step(format!(
        "bundle: {} ({}), lab {}: {} on {}",
        unpacked.reference.as_deref().unwrap_or(&metadata.scenario),
        unpacked.digest,
        metadata.lab,
        metadata.variants.join(" vs "),
        metadata.topology
    ));
    if let Some(file) = &metadata.scenario_file {
        crate::progress::step(format!(
            "bundle: its scenario is the file {file}: `compare --scenario {file}` runs it"
        ));
    }
    let mut cmd = command(&dir, &metadata, &request.args)?;
    let status = crate::process::status(&mut cmd)?;
    Ok(exit_code(status))
}

/// The bundled lab's command: its cache, recipes, device model and kernel toolchain; results
/// where the caller's `LAB_RESULTS_DIR` says, else `results/` in the current directory (the
/// unpacked tree may be temporary).
fn command(dir: &Path, metadata: &Metadata, args: &[OsString]) -> Result<std::process::Command> {
    let mut cmd = std::process::Command::new(dir.join("bin/lab"));
    cmd.args(args)
        .env("LAB_CACHE_DIR", dir.join("cache"))
        .env("LAB_REPO_DIR", dir.join("repo"))
        .env("LAB_DMA_BIN", dir.join("bin/lab-dma"))
        .env(
            crate::kernel::PINNED_TOOLCHAIN_ENV,
            &metadata.kernel_toolchain,
        )
        // Set by `cargo run`: the bundled lab must not look for a checkout to build in.
        .env_remove("CARGO");
    if std::env::var_os("LAB_RESULTS_DIR").is_none() {
        let cwd = std::env::current_dir().context("the current directory")?;
        cmd.env("LAB_RESULTS_DIR", cwd.join("results"));
    }
    Ok(cmd)
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_table_has_a_line_per_part_and_the_total() {
        let created = Created {
            path: "s1.bundle".into(),
            bytes: 3 << 20,
            parts: vec![
                ("qemu".into(), 2 << 20, 8 << 20, 60),
                ("kernel v6.12".into(), 1 << 20, 1 << 20, 9),
            ],
        };
        let text = created.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[1].starts_with("qemu") && lines[1].contains("2.00"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("bundle") && lines[3].ends_with("3.00"),
            "{text}"
        );
        assert_eq!(lines[4], "wrote s1.bundle");
    }

    #[test]
    fn the_bundled_lab_gets_the_bundles_cache_recipes_and_toolchain() {
        let metadata = Metadata {
            format: FORMAT,
            lab: "0".into(),
            scenario: "dma-wakeup".into(),
            scenario_file: None,
            variants: vec!["a".into(), "b".into()],
            topology: "t".into(),
            kernel_toolchain: "gcc 1; ld 2".into(),
        };
        let dir = Path::new("/u");
        let cmd = command(dir, &metadata, &["doctor".into()]).unwrap();
        assert_eq!(cmd.get_program(), "/u/bin/lab");
        let envs: BTreeMap<_, _> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(|v| v.to_owned())))
            .collect();
        assert_eq!(envs["LAB_CACHE_DIR"], Some("/u/cache".into()));
        assert_eq!(envs["LAB_REPO_DIR"], Some("/u/repo".into()));
        assert_eq!(envs["LAB_DMA_BIN"], Some("/u/bin/lab-dma".into()));
        assert_eq!(
            envs[crate::kernel::PINNED_TOOLCHAIN_ENV],
            Some("gcc 1; ld 2".into())
        );
        assert_eq!(envs["CARGO"], None);
    }

    #[test]
    fn exit_codes_pass_through() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(9)), 137);
    }
}
