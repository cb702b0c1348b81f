//! The pinned cross toolchain for guests of another architecture (today aarch64 on an x86_64
//! host): Debian's `gcc-aarch64-linux-gnu` and binutils for kernels, and Debian's `rustc` with
//! the arm64 `libstd-rust-dev` of one exact version for the lab's static guest programs (rustup
//! cannot fetch another target's std here, and Debian's arm64 rlibs only load into Debian's
//! rustc of the same version). Both come from the lock file's `cross-<arch>` bundle, are
//! unpacked into the cache on first use (an x86-only user never downloads them) and are
//! recorded in the kernel's manifest and key.
//!
//! The bundle is trixie(-backports)'s, whose executables need trixie's glibc; the host may be
//! older (bookworm). As with QEMU, the bundle brings its own dynamic loader: every host
//! executable in it (the compiler driver, `cc1`, `as`, `ld`, `collect2`, `rustc`, ...) is moved
//! under `.real/` and replaced by a two-line `sh` wrapper that runs it through the bundle's
//! `ld-linux-x86-64.so.2` with the bundle's libraries, passing its own path as `argv[0]` so
//! gcc still finds its parts relative to itself. A wrapper per file is written by hand because
//! no crate relocates a Debian toolchain; the loader's `--argv0` is what makes it this small.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::cache::{hash_parts, Cache};
use crate::debian::{self, Archive, ResolvedBundle};

/// Cache kind of unpacked toolchains.
const TOOLCHAINS: &str = "toolchains";
/// Cache kind of the lab's guest programs built for another architecture.
const GUEST_PROGRAMS: &str = "guest-programs";
/// Debian release the toolchain comes from: trixie itself, whose rustc (1.85) and arm64
/// `libstd-rust-dev` move together at a point release. trixie-backports uploads rustc per
/// architecture (amd64 reached 1.98 while arm64 stayed at 1.97), which left no consistent pair
/// there and broke every fresh machine's suite; `lab-agent`'s `rust-version` keeps the guest
/// programs buildable with this rustc.
const RELEASE: Option<&str> = Some("trixie");
/// Bumped when the unpacked layout (the wrappers) changes.
const LAYOUT: &str = "cross-layout-2";

/// A provisioned cross toolchain.
#[derive(Debug, Clone)]
pub(crate) struct CrossToolchain {
    pub arch: Arch,
    /// The unpacked bundle (its `usr/`, `.real/` and the wrappers in place).
    pub root: PathBuf,
    /// What kernel keys hash: the compiler's and binutils' package versions.
    pub id: String,
    /// `name=version` of every package, for manifests.
    pub packages: Vec<String>,
}

/// The lock bundle of `arch`'s toolchain and its roots.
fn bundle_name(arch: Arch) -> String {
    format!("cross-{}", arch.name())
}

fn roots(arch: Arch) -> Vec<String> {
    let t = arch.triplet();
    let d = arch.debian();
    vec![
        format!("gcc-{t}"),
        format!("libc6-dev-{d}-cross"),
        "rustc".to_string(),
        format!("libstd-rust-dev:{d}"),
    ]
}

fn archs(arch: Arch) -> Vec<&'static str> {
    vec![Arch::host().debian(), arch.debian()]
}

/// The toolchain's identity from its resolution: the versions of the packages that decide the
/// code a kernel build emits.
fn identity(arch: Arch, packages: &[debian::PackageRef]) -> String {
    let t = arch.triplet();
    let mut parts: Vec<String> = packages
        .iter()
        .filter(|p| {
            p.name.starts_with("gcc-")
                && p.name.ends_with(&format!("-{t}"))
                && p.name != format!("gcc-{t}")
                || p.name == format!("binutils-{t}")
        })
        .map(|p| format!("{}={}", p.name, p.version))
        .collect();
    parts.sort();
    format!("{t} cross (Debian {})", parts.join(", "))
}

impl CrossToolchain {
    /// The toolchain for `arch`, unpacked on first use. Warm (resolved before under the same
    /// lock entry and unpacked) this asks neither apt nor the network.
    pub(crate) fn provision(cache: &Cache, arch: Arch) -> Result<CrossToolchain> {
        if arch == Arch::host() {
            bail!("no cross toolchain is needed for {arch}, the host's architecture");
        }
        let name = bundle_name(arch);
        let roots = roots(arch);
        let root_refs: Vec<&str> = roots.iter().map(String::as_str).collect();
        let lock = debian::LockFile::default_path();
        if let Some(resolved) = debian::recorded_resolution(cache, &lock, &name, &root_refs, None)?
        {
            if let Some(entry) = cache.lookup(TOOLCHAINS, &toolchain_key(&resolved)) {
                resolved.note_substitutions();
                return Ok(CrossToolchain::at(arch, &entry, &resolved));
            }
        }
        let archive = Archive::open_for(cache, &archs(arch))?;
        let resolved = debian::resolve_bundle(&archive, &lock, &name, &root_refs, RELEASE, None)?;
        let entry = cache.get_or_build(TOOLCHAINS, &toolchain_key(&resolved), |dir| {
            crate::progress::step(format!(
                "provisioning the {arch} cross toolchain from {} Debian packages",
                resolved.packages.len()
            ));
            let root = dir.join("root");
            debian::unpack_bundle(&archive, &resolved, &root)?;
            let wrapped = wrap_executables(&root)?;
            tracing::info!("{arch} cross toolchain: {wrapped} host executables wrapped");
            Ok(())
        })?;
        Ok(CrossToolchain::at(arch, &entry, &resolved))
    }

    /// What kernel keys hash for `arch`'s toolchain, without unpacking it: from the recorded
    /// resolution, else the lock entry, else (a checkout whose lock lacks the bundle) by
    /// provisioning it.
    pub(crate) fn identity(cache: &Cache, arch: Arch) -> Result<String> {
        let name = bundle_name(arch);
        let roots = roots(arch);
        let root_refs: Vec<&str> = roots.iter().map(String::as_str).collect();
        let lock = debian::LockFile::default_path();
        if let Some(resolved) = debian::recorded_resolution(cache, &lock, &name, &root_refs, None)?
        {
            return Ok(identity(arch, &resolved.packages));
        }
        if let Some(locked) = debian::LockFile::load(&lock)?
            .bundle(&name)
            .filter(|b| b.roots == roots)
        {
            return Ok(identity(arch, &locked.packages));
        }
        Ok(CrossToolchain::provision(cache, arch)?.id)
    }

    fn at(arch: Arch, entry: &Path, resolved: &ResolvedBundle) -> CrossToolchain {
        CrossToolchain {
            arch,
            root: entry.join("root"),
            id: identity(arch, &resolved.packages),
            packages: resolved
                .packages
                .iter()
                .map(|p| format!("{}={}", p.name, p.version))
                .collect(),
        }
    }

    /// Kbuild's `CROSS_COMPILE`: the tools' common prefix.
    pub(crate) fn cross_compile(&self) -> String {
        format!("{}/usr/bin/{}-", self.root.display(), self.arch.triplet())
    }

    /// The C compiler driver, which also links Rust programs for the target.
    pub(crate) fn gcc(&self) -> PathBuf {
        PathBuf::from(format!("{}gcc", self.cross_compile()))
    }

    /// Debian's rustc (its wrapper).
    pub(crate) fn rustc(&self) -> PathBuf {
        self.root.join("usr/bin/rustc")
    }
}

/// The unpacked bundle's key: the bundle's (its packages) and the wrappers' layout.
fn toolchain_key(resolved: &ResolvedBundle) -> String {
    let bundle = crate::toolchain::bundle_key(resolved);
    hash_parts(&[("bundle", bundle.as_bytes()), ("layout", LAYOUT.as_bytes())])[..16].to_string()
}

/// Directories of the unpacked bundle that hold host executables.
const EXECUTABLE_DIRS: &[&str] = &["usr/bin", "usr/libexec", "usr/lib/gcc-cross"];

/// Moves every dynamically linked host executable of the bundle under `.real/` and puts a
/// wrapper that runs it through the bundle's loader in its place; returns how many.
fn wrap_executables(root: &Path) -> Result<usize> {
    let loader = root.join("usr/lib64/ld-linux-x86-64.so.2");
    if !loader.is_file() {
        bail!(
            "the cross toolchain bundle has no {}: its libc6 is missing from the closure",
            loader.display()
        );
    }
    let mut dirs: Vec<PathBuf> = EXECUTABLE_DIRS.iter().map(|d| root.join(d)).collect();
    // The binutils the compiler driver runs (`<triplet>/bin/as`, `ld`).
    for e in fs::read_dir(root.join("usr"))?.flatten() {
        if e.path().join("bin").is_dir() && e.file_name().to_string_lossy().contains("-linux-") {
            dirs.push(e.path().join("bin"));
        }
    }
    let mut wrapped = 0;
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let meta = fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                dirs.push(path);
                continue;
            }
            if !meta.is_file()
                || meta.permissions().mode() & 0o111 == 0
                || !is_dynamic_executable(&path)?
            {
                continue;
            }
            let relative = path.strip_prefix(root).expect("walked under root");
            let real = root.join(".real").join(relative);
            fs::create_dir_all(real.parent().expect("a file has a parent"))?;
            fs::rename(&path, &real)?;
            let depth = relative.components().count() - 1;
            fs::write(&path, wrapper(depth, relative))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
            wrapped += 1;
        }
    }
    Ok(wrapped)
}

/// The wrapper of the executable at `relative` (`depth` directories below the root): the root
/// is found from the wrapper's own resolved path, so the entry may move (staging dir, then the
/// cache) and a symlink to it elsewhere in the tree (`<triplet>/bin/as` to `usr/bin/<triplet>-as`)
/// still finds it; `argv[0]` stays the name it was called by.
fn wrapper(depth: usize, relative: &Path) -> String {
    let up = vec![".."; depth].join("/");
    format!(
        "#!/bin/sh\n\
         # Runs {rel} through the bundle's own loader and libraries (lab::cross).\n\
         s=$(readlink -f \"$0\"); r=\"${{s%/*}}/{up}\"\n\
         exec \"$r/usr/lib64/ld-linux-x86-64.so.2\" --library-path \"$r/usr/lib/x86_64-linux-gnu:$r/lib/x86_64-linux-gnu\" --argv0 \"$0\" \"$r/.real/{rel}\" \"$@\"\n",
        rel = relative.display()
    )
}

/// Whether `path` is an ELF program that names a dynamic loader (PT_INTERP): what the system's
/// loader would run with the host's older libraries.
fn is_dynamic_executable(path: &Path) -> Result<bool> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let mut head = [0u8; 4];
    {
        use std::io::Read;
        let mut f = fs::File::open(path)?;
        if f.read(&mut head)? < 4 || head != *b"\x7fELF" {
            return Ok(false);
        }
    }
    let data = fs::read(path)?;
    let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(&*data) else {
        return Ok(false);
    };
    let Ok(endian) = header.endian() else {
        return Ok(false);
    };
    let Ok(headers) = header.program_headers(endian, &*data) else {
        return Ok(false);
    };
    Ok(headers
        .iter()
        .any(|h| h.p_type(endian) == object::elf::PT_INTERP))
}

/// One of the lab's guest programs for one architecture, as an image takes it.
#[derive(Debug, Clone)]
pub(crate) struct ProgramFile {
    pub name: &'static str,
    pub guest_path: &'static str,
    pub sha256: String,
    bytes: ProgramBytes,
}

#[derive(Debug, Clone)]
enum ProgramBytes {
    /// Embedded in the lab (the host's architecture, built by `lab/build.rs`).
    Embedded(&'static [u8]),
    /// Built into a cache entry (read when an image is assembled, not to find one).
    File(PathBuf),
}

impl ProgramFile {
    /// An embedded program.
    pub(crate) fn embedded(p: &'static crate::agent::LabProgram) -> ProgramFile {
        ProgramFile {
            name: p.name,
            guest_path: p.guest_path,
            sha256: p.sha256.to_string(),
            bytes: ProgramBytes::Embedded(p.bytes),
        }
    }

    /// Its bytes.
    pub(crate) fn bytes(&self) -> Result<std::borrow::Cow<'static, [u8]>> {
        Ok(match &self.bytes {
            ProgramBytes::Embedded(b) => std::borrow::Cow::Borrowed(b),
            ProgramBytes::File(path) => std::borrow::Cow::Owned(
                fs::read(path).with_context(|| format!("reading {}", path.display()))?,
            ),
        })
    }
}

/// What [`guest_programs`] left in a cache entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ProgramsManifest {
    arch: Arch,
    toolchain: Vec<String>,
    /// name -> sha256.
    programs: std::collections::BTreeMap<String, String>,
    seconds: f64,
}

/// The lab's guest programs (the agent and the workloads of `crate::agent::LAB_PROGRAMS`) for
/// `arch`: the embedded ones on the host's architecture, otherwise built from the agent crate's
/// sources in this checkout with the cross toolchain (cargo from `$CARGO` or `PATH`; the
/// crates come from cargo's own cache, which building the lab filled), cached by a key of the
/// sources and the toolchain.
pub(crate) fn guest_programs(cache: &Cache, arch: Arch) -> Result<Vec<ProgramFile>> {
    if arch == Arch::host() {
        return Ok(crate::agent::LAB_PROGRAMS
            .iter()
            .map(ProgramFile::embedded)
            .collect());
    }
    let sources = crate::repo_path("lab/agent");
    let key = programs_key(cache, arch, &sources)?;
    let entry = match cache.lookup(GUEST_PROGRAMS, &key) {
        Some(entry) => entry,
        None => {
            let toolchain = CrossToolchain::provision(cache, arch)?;
            let target_dir = cache
                .dir(GUEST_PROGRAMS)
                .join(format!(".target-{}", arch.name()));
            cache.get_or_build(GUEST_PROGRAMS, &key, |dir| {
                build_programs(&toolchain, &target_dir, dir)
            })?
        }
    };
    let text = fs::read_to_string(entry.join("manifest.json"))?;
    let manifest: ProgramsManifest = serde_json::from_str(&text)
        .with_context(|| format!("reading {}", entry.join("manifest.json").display()))?;
    crate::agent::LAB_PROGRAMS
        .iter()
        .map(|p| {
            let sha256 = manifest
                .programs
                .get(p.name)
                .with_context(|| format!("{} lists no {}", entry.display(), p.name))?
                .clone();
            Ok(ProgramFile {
                name: p.name,
                guest_path: p.guest_path,
                sha256,
                bytes: ProgramBytes::File(entry.join(p.name)),
            })
        })
        .collect()
}

/// The key of `arch`'s guest programs: every file of the agent crate, the workspace's lock and
/// manifest (dependency versions, profiles) and the toolchain.
fn programs_key(cache: &Cache, arch: Arch, sources: &Path) -> Result<String> {
    let mut files = Vec::new();
    let mut dirs = vec![sources.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = e?.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let workspace = sources
        .parent()
        .and_then(Path::parent)
        .context("lab/agent lies inside the workspace")?;
    files.push(workspace.join("Cargo.lock"));
    files.push(workspace.join("Cargo.toml"));
    let mut listing = String::new();
    for f in &files {
        let relative = f.strip_prefix(workspace).unwrap_or(f);
        listing += &format!("{} {}\n", relative.display(), cache.file_sha256(f)?);
    }
    let toolchain = CrossToolchain::identity(cache, arch)?;
    Ok(hash_parts(&[
        ("arch", arch.name().as_bytes()),
        ("sources", listing.as_bytes()),
        ("toolchain", toolchain.as_bytes()),
        ("rustc-bundle", bundle_versions(cache, arch)?.as_bytes()),
        ("flags", b"release,crt-static,strip=debuginfo,remap-paths"),
    ])[..20]
        .to_string())
}

/// Every package version of the toolchain bundle (rustc and std included), offline.
fn bundle_versions(cache: &Cache, arch: Arch) -> Result<String> {
    let name = bundle_name(arch);
    let roots = roots(arch);
    let root_refs: Vec<&str> = roots.iter().map(String::as_str).collect();
    let lock = debian::LockFile::default_path();
    let packages = match debian::recorded_resolution(cache, &lock, &name, &root_refs, None)? {
        Some(r) => r.packages,
        None => match debian::LockFile::load(&lock)?.bundle(&name) {
            Some(b) => b.packages.clone(),
            None => CrossToolchain::provision(cache, arch)?
                .packages
                .iter()
                .map(|p| {
                    let (name, version) = p.split_once('=').unwrap_or((p, ""));
                    debian::PackageRef {
                        name: name.into(),
                        version: version.into(),
                        sha256: String::new(),
                    }
                })
                .collect(),
        },
    };
    Ok(packages
        .iter()
        .map(|p| format!("{}={}\n", p.name, p.version))
        .collect())
}

/// Builds the agent crate's guest binaries for the toolchain's target into `dest`.
fn build_programs(toolchain: &CrossToolchain, target_dir: &Path, dest: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    let arch = toolchain.arch;
    crate::progress::step(format!("building the lab's guest programs for {arch}"));
    let workspace = crate::repo_path("");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = arch.rust_target();
    let env_target = target.to_uppercase().replace('-', "_");
    let mut cmd = Command::new(&cargo);
    crate::process::without_cargo_run_env(&mut cmd)
        .arg("build")
        .args(["--release", "--locked", "-p", "lab-agent"])
        .args(
            crate::agent::LAB_PROGRAMS
                .iter()
                .flat_map(|p| ["--bin", p.name]),
        )
        .args(["--target", target])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .env("RUSTC", toolchain.rustc())
        .env(format!("CARGO_TARGET_{env_target}_LINKER"), toolchain.gcc())
        // The cross libc's linker scripts name its archives by absolute paths: the bundle is
        // their sysroot. Static glibc's getaddrinfo note is expected (the agent resolves no
        // names) and silenced.
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            [
                "-Ctarget-feature=+crt-static".to_string(),
                format!("-Clink-arg=--sysroot={}", toolchain.root.display()),
                "-Alinker_messages".to_string(),
            ]
            .into_iter()
            .chain(crate::build_paths::remap_flags(&workspace, target_dir))
            .collect::<Vec<_>>()
            .join("\x1f"),
        )
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    let out = crate::process::output(&mut cmd).with_context(|| {
        format!("running {cargo:?}: building the {arch} guest programs needs cargo (the one that built the lab)")
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        bail!(
            "building the lab's guest programs for {arch} failed ({}):\n{}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let mut programs = std::collections::BTreeMap::new();
    for p in crate::agent::LAB_PROGRAMS {
        let built = target_dir.join(target).join("release").join(p.name);
        let bytes = fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
        check_elf_machine(&bytes, arch).with_context(|| format!("{}", built.display()))?;
        fs::write(dest.join(p.name), &bytes)?;
        use sha2::Digest as _;
        programs.insert(
            p.name.to_string(),
            hex::encode(sha2::Sha256::digest(&bytes)),
        );
    }
    let manifest = ProgramsManifest {
        arch,
        toolchain: toolchain.packages.clone(),
        programs,
        seconds: started.elapsed().as_secs_f64(),
    };
    fs::write(
        dest.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    Ok(())
}

/// Fails unless `bytes` is an ELF file for `arch`.
fn check_elf_machine(bytes: &[u8], arch: Arch) -> Result<()> {
    if bytes.len() < 20 || !bytes.starts_with(b"\x7fELF") {
        bail!("not an ELF file");
    }
    let machine = u16::from_le_bytes([bytes[18], bytes[19]]);
    if machine != arch.elf_machine() {
        bail!("an ELF file for machine {machine}, not {arch}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_find_the_root_from_their_own_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("usr/lib64")).unwrap();
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        // The host's own loader stands in for the bundle's, a host program for a tool.
        fs::copy(
            "/lib64/ld-linux-x86-64.so.2",
            root.join("usr/lib64/ld-linux-x86-64.so.2"),
        )
        .unwrap();
        fs::copy("/bin/echo", root.join("usr/bin/echo")).unwrap();
        fs::write(root.join("usr/bin/script"), "#!/bin/sh\necho hi\n").unwrap();
        fs::set_permissions(
            root.join("usr/bin/script"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_eq!(wrap_executables(&root).unwrap(), 1, "only the ELF program");
        assert!(root.join(".real/usr/bin/echo").is_file());
        // The entry moves (staging dir -> cache) after the wrappers are written.
        let moved = dir.path().join("moved");
        fs::rename(&root, &moved).unwrap();
        let out = Command::new(moved.join("usr/bin/echo"))
            .arg("through the loader")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "through the loader\n");
        // A symlink to a wrapper from a deeper directory (gcc runs `<triplet>/bin/as`, a link
        // to `usr/bin/<triplet>-as`) still finds the root.
        fs::create_dir_all(moved.join("usr/aarch64-linux-gnu/bin")).unwrap();
        std::os::unix::fs::symlink(
            "../../bin/echo",
            moved.join("usr/aarch64-linux-gnu/bin/echo"),
        )
        .unwrap();
        let out = Command::new(moved.join("usr/aarch64-linux-gnu/bin/echo"))
            .arg("linked")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "linked\n");
        let script = fs::read_to_string(moved.join("usr/bin/script")).unwrap();
        assert_eq!(script, "#!/bin/sh\necho hi\n", "scripts stay as they are");
    }

    #[test]
    fn identity_names_the_compiler_and_binutils() {
        let p = |name: &str, version: &str| debian::PackageRef {
            name: name.into(),
            version: version.into(),
            sha256: String::new(),
        };
        let id = identity(
            Arch::Aarch64,
            &[
                p("gcc-aarch64-linux-gnu", "4:14.2.0-1"),
                p("gcc-14-aarch64-linux-gnu", "14.2.0-19cross1"),
                p("binutils-aarch64-linux-gnu", "2.44-3"),
                p("rustc", "1.85.1+dfsg1-1+deb13u1"),
                p("cpp-14-aarch64-linux-gnu", "14.2.0-19cross1"),
            ],
        );
        assert_eq!(
            id,
            "aarch64-linux-gnu cross (Debian binutils-aarch64-linux-gnu=2.44-3, gcc-14-aarch64-linux-gnu=14.2.0-19cross1)"
        );
        assert!(check_elf_machine(b"not elf", Arch::Aarch64).is_err());
    }
}
