//! Guest images: an initramfs assembled from pinned Debian packages (busybox-static unpacked
//! whole; single programs such as hackbench or fio with only their shared-library closure, see
//! `programs`), the lab's guest agent as `/init`, the lab's own workloads the recipe lists
//! (`lab_programs`, from `crate::agent::LAB_PROGRAMS`), and the kernel's modules;
//! content-addressed in the cache. An image is for its kernel's architecture: an aarch64
//! guest's packages come from Debian's arm64 archive (bundles `guest-<name>-arm64`), its
//! programs' libraries from the arm64 multiarch directories, and its lab programs are built
//! with the cross toolchain (`crate::cross::guest_programs`).
//!
//! Public: [`GuestImage`], what [`crate::Lab::image_for`] builds.

pub(crate) mod programs;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::agent::LabProgram;
use crate::arch::Arch;
use crate::cache::{hash_parts, Cache};
use crate::cross::ProgramFile;
use crate::debian::{self, Archive};
use crate::kernel::BootKernel;

/// A guest image recipe (`images/guest/*.toml`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImageRecipe {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Debian packages unpacked whole into the image, with their dependency closure (bundle
    /// `guest-<name>` in the lock).
    pub packages: Vec<String>,
    /// Programs by package (`rt-tests = ["hackbench"]`): each program, as its package has it in
    /// usr/bin, usr/sbin, bin or sbin, with its shared libraries and loader taken from the
    /// packages' dependency closure (bundle `guest-<name>-programs`); the rest stays out.
    #[serde(default)]
    pub programs: BTreeMap<String, Vec<String>>,
    /// Kernel modules (with their dependencies) copied from the kernel; ones the kernel lacks
    /// are listed in the image manifest as missing.
    #[serde(default)]
    pub modules: Vec<String>,
    /// The lab's own guest programs the image carries (`lab_programs = ["lab-numa01"]`), by
    /// their names in [`crate::agent::LAB_PROGRAMS`]; the agent is always there, as `/init`.
    #[serde(default)]
    pub lab_programs: Vec<String>,
}

impl ImageRecipe {
    pub(crate) fn load(path: &Path) -> Result<ImageRecipe> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let recipe: ImageRecipe =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        recipe
            .validate()
            .with_context(|| format!("{}", path.display()))?;
        Ok(recipe)
    }

    /// Program names are file names: the walk looks them up under fixed dirs. Lab programs are
    /// ones the lab builds.
    fn validate(&self) -> Result<()> {
        self.listed_lab_programs()?;
        for (package, names) in &self.programs {
            if names.is_empty() {
                bail!("programs: {package} lists no program");
            }
            for name in names {
                if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                    bail!("programs: {package}: {name:?} is not a program name");
                }
            }
        }
        Ok(())
    }

    /// The lab programs the recipe lists, by name (so their order in the recipe is no part of
    /// the image's key).
    fn listed_lab_programs(&self) -> Result<Vec<&'static LabProgram>> {
        let mut listed = BTreeMap::new();
        for name in &self.lab_programs {
            let Some(program) = crate::agent::listable_program(name) else {
                let known: Vec<&str> = crate::agent::listable_programs().map(|p| p.name).collect();
                bail!(
                    "lab_programs: {name:?} is not a lab program an image can list; the known \
                     ones are {} (the agent, {:?}, is in every image as /init unlisted)",
                    known.join(", "),
                    crate::agent::AGENT.name
                );
            };
            listed.insert(program.name, program);
        }
        Ok(listed.into_values().collect())
    }

    /// The bundle of the packages unpacked whole, for `arch`'s guests.
    fn packages_bundle(&self, arch: Arch) -> Bundle<'_> {
        Bundle {
            name: format!("guest-{}{}", self.name, bundle_suffix(arch)),
            roots: self.packages.iter().map(String::as_str).collect(),
        }
    }

    /// The bundle the programs come from (their packages' closure), if the recipe has programs.
    fn programs_bundle(&self, arch: Arch) -> Option<Bundle<'_>> {
        (!self.programs.is_empty()).then(|| Bundle {
            name: format!("guest-{}-programs{}", self.name, bundle_suffix(arch)),
            roots: self.programs.keys().map(String::as_str).collect(),
        })
    }

    /// The lock-file bundles this recipe's images for `arch` are made from (their recorded
    /// resolutions are what a warm lookup reads).
    pub(crate) fn bundle_names(&self, arch: Arch) -> Vec<String> {
        std::iter::once(self.packages_bundle(arch).name)
            .chain(self.programs_bundle(arch).map(|b| b.name))
            .collect()
    }

    pub(crate) fn by_name(name: &str) -> Result<ImageRecipe> {
        let path = crate::repo_path(&format!("images/guest/{name}.toml"));
        if !path.exists() {
            bail!(
                "no guest image recipe {name:?} ({} does not exist)",
                path.display()
            );
        }
        ImageRecipe::load(&path)
    }
}

/// A built initramfs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GuestImage {
    /// The image recipe's name (`default`).
    pub recipe: String,
    /// The initramfs.
    pub path: PathBuf,
    /// The cache key (hash of packages, agent, kernel modules).
    pub hash: String,
    /// The Debian packages unpacked into it, `name=version`.
    pub packages: Vec<String>,
    /// What the recipe's programs brought: programs, libraries, loaders (paths in the image).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub program_files: Vec<String>,
    /// Kernel modules copied in (with their dependencies).
    pub modules: Vec<String>,
    /// Modules the recipe lists that the kernel lacks.
    pub missing_modules: Vec<String>,
}

/// A bundle of an image recipe in the lock file.
struct Bundle<'a> {
    name: String,
    roots: Vec<&'a str>,
}

/// Guest packages come from Debian trixie, like the kernels.
const RELEASE: Option<&str> = Some("trixie");

/// What a bundle's name gets for a guest architecture: nothing for x86_64 (the names it had
/// before), `-arm64` for aarch64.
fn bundle_suffix(arch: Arch) -> String {
    match arch {
        Arch::X86_64 => String::new(),
        other => format!("-{}", other.debian()),
    }
}

impl Bundle<'_> {
    fn recorded(&self, cache: &Cache, lock: &Path) -> Result<Option<debian::ResolvedBundle>> {
        debian::recorded_resolution(cache, lock, &self.name, &self.roots, None)
    }

    fn resolve(&self, archive: &Archive, lock: &Path) -> Result<debian::ResolvedBundle> {
        debian::resolve_bundle(archive, lock, &self.name, &self.roots, RELEASE, None)
    }
}

/// The guest agent and the lab programs `recipe` lists, for `arch`.
fn lab_programs_for(
    cache: &Cache,
    recipe: &ImageRecipe,
    arch: Arch,
) -> Result<(ProgramFile, Vec<ProgramFile>)> {
    let listed = recipe
        .listed_lab_programs()
        .with_context(|| format!("guest image recipe {:?}", recipe.name))?;
    let all = crate::cross::guest_programs(cache, arch)?;
    let find = |name: &str| {
        all.iter()
            .find(|p| p.name == name)
            .cloned()
            .with_context(|| format!("no {arch} build of the lab program {name}"))
    };
    let agent = find(crate::agent::AGENT.name)?;
    let listed = listed
        .iter()
        .map(|p| find(p.name))
        .collect::<Result<Vec<_>>>()?;
    Ok((agent, listed))
}

/// Builds (or reuses) the initramfs of `recipe` for `kernel`. Warm (the recipe's bundles
/// resolved before under the same lock entries and the image built), this reads the lock file,
/// one small memo per bundle and the image's manifest, and asks neither apt nor the network.
pub(crate) fn build_image(
    cache: &Cache,
    recipe: &ImageRecipe,
    kernel: &BootKernel,
) -> Result<GuestImage> {
    let lock = debian::LockFile::default_path();
    let arch = kernel.arch;
    let (agent, lab_programs) = lab_programs_for(cache, recipe, arch)?;
    let listed: Vec<&ProgramFile> = lab_programs.iter().collect();
    let whole = recipe.packages_bundle(arch);
    let programs = recipe.programs_bundle(arch);
    if let Some(packages) = whole.recorded(cache, &lock)? {
        let program_packages = match &programs {
            Some(bundle) => bundle.recorded(cache, &lock)?.map(Some),
            None => Some(None),
        };
        if let Some(program_packages) = program_packages {
            let key = image_key(
                &packages,
                program_packages.as_ref(),
                &agent,
                &listed,
                recipe,
                kernel,
            );
            if let Some(entry) = cache.lookup("images", &key) {
                packages.note_substitutions();
                if let Some(p) = &program_packages {
                    p.note_substitutions();
                }
                return open_image(&entry, kernel);
            }
        }
    }
    let archive = Archive::open_for(cache, &[arch.debian()])?;
    let bundle = whole.resolve(&archive, &lock)?;
    let program_packages = match &programs {
        Some(b) => Some(b.resolve(&archive, &lock)?),
        None => None,
    };
    let package_list = package_list(&bundle);
    let key = image_key(
        &bundle,
        program_packages.as_ref(),
        &agent,
        &listed,
        recipe,
        kernel,
    );
    let entry = cache.get_or_build("images", &key, |dir| {
        let root = dir.join("root");
        debian::unpack_bundle(&archive, &bundle, &root)?;
        prune_docs(&root);
        add_merged_usr_links(&root)?;
        // Before busybox's applets, so a real program wins over an applet of the same name
        // (and no lab program is written through an applet's link).
        let program_files = match &program_packages {
            Some(b) => add_programs(&archive, recipe, arch, b, &root, &dir.join("programs"))?,
            None => Vec::new(),
        };
        for program in std::iter::once(&agent).chain(lab_programs.iter()) {
            write_lab_program(&root, program)?;
        }
        add_busybox_applets(cache, &bundle, arch, &root, &dir.join("applets"))?;
        let _ = fs::remove_dir_all(dir.join("applets"));
        let (modules, missing) = match &kernel.modules {
            Some(dir) => copy_modules(dir, &root, &kernel.release, &recipe.modules)?,
            None => (vec![], recipe.modules.clone()),
        };
        for dir in ["proc", "sys", "dev", "tmp", "run", "mnt", "root", "etc"] {
            fs::create_dir_all(root.join(dir))?;
        }
        fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
        fs::write(root.join("etc/group"), "root:x:0:\n")?;
        let mut out = std::io::BufWriter::new(fs::File::create(dir.join("initramfs.cpio"))?);
        write_newc(&root, &mut out)?;
        out.flush()?;
        drop(out);
        fs::remove_dir_all(&root)?;
        let manifest = GuestImage {
            recipe: recipe.name.clone(),
            path: PathBuf::new(),
            hash: key.clone(),
            packages: package_list.clone(),
            program_files,
            modules,
            missing_modules: missing,
        };
        fs::write(
            dir.join("manifest.json"),
            serde_json::to_string_pretty(&manifest)?,
        )?;
        Ok(())
    })?;
    open_image(&entry, kernel)
}

/// The cache key of an image: its packages, modules, kernel and agent, (for a recipe with
/// programs) the programs and the packages they come from, and (for a recipe with lab programs)
/// those. What a program's closure walk finds follows from those packages, so the key covers
/// every byte of the image.
fn image_key(
    bundle: &debian::ResolvedBundle,
    program_packages: Option<&debian::ResolvedBundle>,
    agent: &ProgramFile,
    lab_programs: &[&ProgramFile],
    recipe: &ImageRecipe,
    kernel: &BootKernel,
) -> String {
    let packages = package_list(bundle).join("\n");
    let modules = recipe.modules.join(",");
    let mut parts: Vec<(&str, &[u8])> = vec![
        ("packages", packages.as_bytes()),
        ("modules", modules.as_bytes()),
        ("kernel", kernel.identity.as_bytes()),
        ("agent-sha256", agent.sha256.as_bytes()),
        ("format", b"newc-v1"),
    ];
    // x86_64 images keep the keys they had before architectures existed.
    if kernel.arch != Arch::X86_64 {
        parts.push(("arch", kernel.arch.name().as_bytes()));
    }
    // Only recipes with lab programs add this, so the others do not change with them.
    let listed: String = lab_programs
        .iter()
        .map(|p| format!("{} {} {}\n", p.name, p.guest_path, p.sha256))
        .collect();
    if !listed.is_empty() {
        parts.push(("lab-programs", listed.as_bytes()));
    }
    // Only recipes with programs add these, so images without programs keep their keys.
    let programs: String = recipe
        .programs
        .iter()
        .map(|(package, names)| format!("{package}: {}\n", names.join(" ")))
        .collect();
    let program_packages = program_packages.map(|b| package_list(b).join("\n"));
    if let Some(list) = &program_packages {
        parts.push(("programs", programs.as_bytes()));
        parts.push(("program-packages", list.as_bytes()));
        parts.push(("program-walk", b"v1"));
    }
    hash_parts(&parts)[..20].to_string()
}

fn package_list(bundle: &debian::ResolvedBundle) -> Vec<String> {
    bundle
        .packages
        .iter()
        .map(|p| format!("{}={} {}", p.name, p.version, p.sha256))
        .collect()
}

/// Puts the recipe's programs with their library closure into `root`. The programs' bundle is
/// unpacked into `scratch` whole for the walk, and each program's own package also on its own,
/// so a program is found only in the package the recipe names; only the walk's files are copied.
fn add_programs(
    archive: &Archive,
    recipe: &ImageRecipe,
    arch: Arch,
    bundle: &debian::ResolvedBundle,
    root: &Path,
    scratch: &Path,
) -> Result<Vec<String>> {
    let tree = scratch.join("tree");
    let mut own = BTreeMap::new();
    for (package, deb) in bundle
        .packages
        .iter()
        .zip(archive.download_many(&bundle.packages)?)
    {
        debian::extract_deb(&deb, &tree)?;
        if recipe.programs.contains_key(&package.name) {
            let dir = scratch.join("packages").join(&package.name);
            debian::extract_deb(&deb, &dir)?;
            own.insert(package.name.clone(), dir);
        }
    }
    // Programs name their loader /lib64/...; trixie's packages ship it under usr/.
    add_merged_usr_links(&tree)?;
    let files = programs::closure(&recipe.name, arch, &tree, &own, &recipe.programs)?;
    programs::install(&tree, root, &files)?;
    fs::remove_dir_all(scratch)?;
    Ok(files.into_iter().collect())
}

/// A built image entry.
fn open_image(entry: &Path, kernel: &BootKernel) -> Result<GuestImage> {
    let manifest = entry.join("manifest.json");
    let text =
        fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let mut image: GuestImage =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", manifest.display()))?;
    image.path = entry.join("initramfs.cpio");
    if !image.missing_modules.is_empty() {
        tracing::info!(
            "kernel {} lacks modules {:?} (image {})",
            kernel.name,
            image.missing_modules,
            image.recipe
        );
    }
    Ok(image)
}

/// One of the lab's own static programs (the agent, workloads) at its guest path, mode 0755.
fn write_lab_program(root: &Path, program: &ProgramFile) -> Result<()> {
    let path = root.join(program.guest_path.trim_start_matches('/'));
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&path, program.bytes()?).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Documentation and translations are dead weight in a RAM disk.
fn prune_docs(root: &Path) {
    for dir in [
        "usr/share/doc",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
        "usr/share/lintian",
    ] {
        let _ = fs::remove_dir_all(root.join(dir));
    }
}

/// Debian's data tarballs carry `usr/bin` etc.; base-files' top-level links are not unpacked.
fn add_merged_usr_links(root: &Path) -> Result<()> {
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        fs::create_dir_all(root.join(target))?;
        let path = root.join(link);
        if fs::symlink_metadata(&path).is_err() {
            std::os::unix::fs::symlink(target, &path)?;
        }
    }
    Ok(())
}

/// Links every busybox applet the image lacks, so the agent's commands find `sh`, `cat`, ...
/// without an install step at boot. busybox-static lists its applets on the host; for another
/// architecture's guest the host's build of the same version does (Debian builds every
/// architecture's busybox-static from one configuration), unpacked into `scratch`.
fn add_busybox_applets(
    cache: &Cache,
    bundle: &debian::ResolvedBundle,
    arch: Arch,
    root: &Path,
    scratch: &Path,
) -> Result<()> {
    let busybox = root.join("usr/bin/busybox");
    if !busybox.exists() {
        return Ok(());
    }
    let lister = if arch == Arch::host() {
        busybox.clone()
    } else {
        let package = bundle
            .packages
            .iter()
            .find(|p| p.name == "busybox-static")
            .context("the image has a busybox but no busybox-static package to list its applets")?;
        let host = Archive::open(cache)?;
        let found = host
            .lookup(&package.name, &package.version)?
            .with_context(|| {
                format!(
                    "the host's busybox-static {} (to list the applets of the {arch} one) is not in the archive",
                    package.version
                )
            })?;
        let deb = host.download(&found)?;
        debian::extract_deb(&deb, scratch)?;
        scratch.join("usr/bin/busybox")
    };
    let out = crate::process::output(crate::process::command(&lister).arg("--list-full"))
        .context("listing busybox applets")?;
    for applet in String::from_utf8_lossy(&out.stdout).lines() {
        // "bin/sh", "usr/sbin/chroot", ...: put them all under usr/ (merged /usr).
        let rel = applet.trim_start_matches("usr/");
        let path = root.join("usr").join(rel);
        if fs::symlink_metadata(&path).is_ok() || rel == "bin/busybox" {
            continue;
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink("/usr/bin/busybox", &path)?;
    }
    Ok(())
}

fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// Copies the requested modules and their dependencies (per `modules.dep`), decompressed, and
/// writes a `modules.dep` for busybox's modprobe. Returns (copied, missing).
fn copy_modules(
    modules_dir: &Path,
    root: &Path,
    release: &str,
    wanted: &[String],
) -> Result<(Vec<String>, Vec<String>)> {
    let dep_text = fs::read_to_string(modules_dir.join("modules.dep"))
        .with_context(|| format!("reading {}/modules.dep", modules_dir.display()))?;
    let mut deps: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for line in dep_text.lines() {
        let Some((module, rest)) = line.split_once(':') else {
            continue;
        };
        let requires = rest.split_whitespace().map(str::to_string).collect();
        deps.insert(module_name(module), (module.to_string(), requires));
    }
    let builtin = fs::read_to_string(modules_dir.join("modules.builtin")).unwrap_or_default();
    let builtin: BTreeSet<String> = builtin.lines().map(module_name).collect();
    let mut missing = Vec::new();
    let mut todo: Vec<String> = Vec::new();
    for name in wanted {
        let name = name.replace('-', "_");
        if deps.contains_key(&name) {
            todo.push(name);
        } else if !builtin.contains(&name) {
            missing.push(name);
        }
    }
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    while let Some(name) = todo.pop() {
        if chosen.contains_key(&name) {
            continue;
        }
        let Some((path, requires)) = deps.get(&name) else {
            continue;
        };
        chosen.insert(name, path.clone());
        todo.extend(requires.iter().map(|r| module_name(r)));
    }
    let dest = root.join("lib/modules").join(release);
    fs::create_dir_all(&dest)?;
    let plain = |p: &str| {
        p.trim_end_matches(".xz")
            .trim_end_matches(".zst")
            .trim_end_matches(".gz")
            .to_string()
    };
    let mut dep_out = String::new();
    for path in chosen.values() {
        let src = modules_dir.join(path);
        let dst = dest.join(plain(path));
        fs::create_dir_all(dst.parent().unwrap())?;
        let raw = fs::read(&src).with_context(|| format!("reading {}", src.display()))?;
        let bytes = if path.ends_with(".xz") {
            let mut out = Vec::new();
            xz2::read::XzDecoder::new(&raw[..]).read_to_end(&mut out)?;
            out
        } else if path.ends_with(".zst") {
            zstd::decode_all(&raw[..])?
        } else if path.ends_with(".gz") {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut out)?;
            out
        } else {
            raw
        };
        fs::write(&dst, bytes)?;
        let requires: Vec<String> = deps[&module_name(path)]
            .1
            .iter()
            .map(|r| plain(r))
            .collect();
        dep_out.push_str(&format!("{}: {}\n", plain(path), requires.join(" ")));
    }
    fs::write(dest.join("modules.dep"), dep_out)?;
    for extra in ["modules.builtin", "modules.order"] {
        let _ = fs::copy(modules_dir.join(extra), dest.join(extra));
    }
    Ok((chosen.keys().cloned().collect(), missing))
}

/// Writes `root` as a "newc" cpio archive (what the kernel unpacks as an initramfs).
///
/// Written by hand (about 50 lines) rather than with a crate or the host's `cpio`: the archive
/// must be byte-for-byte reproducible (sorted entries, zero mtimes and owners) for the cache
/// key to mean anything, and hosts may lack a `cpio` binary.
pub(crate) fn write_newc(root: &Path, out: &mut impl Write) -> Result<()> {
    let mut entries = Vec::new();
    collect(root, root, &mut entries)?;
    entries.sort();
    for (ino, rel) in (1u32..).zip(&entries) {
        let path = root.join(rel);
        let meta = fs::symlink_metadata(&path)?;
        let mode = meta.mode();
        let data = if meta.file_type().is_symlink() {
            fs::read_link(&path)?.into_os_string().into_encoded_bytes()
        } else if meta.is_file() {
            fs::read(&path)?
        } else {
            Vec::new()
        };
        write_entry(out, rel, ino, mode, &data)?;
    }
    write_entry(out, "TRAILER!!!", 0, 0, &[])?;
    Ok(())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let rel = path
            .strip_prefix(root)?
            .to_str()
            .context("non-UTF-8 path in image")?
            .to_string();
        let file_type = entry.file_type()?;
        out.push(rel);
        if file_type.is_dir() {
            collect(root, &path, out)?;
        }
    }
    Ok(())
}

fn write_entry(out: &mut impl Write, name: &str, ino: u32, mode: u32, data: &[u8]) -> Result<()> {
    let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
    let header = format!(
        "070701{ino:08x}{mode:08x}{uid:08x}{gid:08x}{nlink:08x}{mtime:08x}{size:08x}{dmaj:08x}{dmin:08x}{rmaj:08x}{rmin:08x}{namesize:08x}{check:08x}",
        uid = 0,
        gid = 0,
        mtime = 0,
        size = data.len(),
        dmaj = 0,
        dmin = 0,
        rmaj = 0,
        rmin = 0,
        namesize = name.len() + 1,
        check = 0,
    );
    out.write_all(header.as_bytes())?;
    out.write_all(name.as_bytes())?;
    out.write_all(&[0])?;
    pad(out, header.len() + name.len() + 1)?;
    out.write_all(data)?;
    pad(out, data.len())?;
    Ok(())
}

fn pad(out: &mut impl Write, len: usize) -> Result<()> {
    let fill = (4 - len % 4) % 4;
    out.write_all(&[0u8; 3][..fill])?;
    Ok(())
}

#[cfg(test)]
mod tests;
