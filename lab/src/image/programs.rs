//! Single programs from Debian packages, without the rest of their package: the program, its
//! shared-library closure (DT_NEEDED, recursively, through RPATH/RUNPATH and the loader's
//! default dirs) and its dynamic loader (PT_INTERP), read from the ELF files with `object`.
//! Symlinks met on the way (soname links, merged-/usr links) are kept as links in the image.
//!
//! Paths here are relative to a root (an unpacked tree or the image), `/`-separated; symlinks
//! inside a tree are resolved against that tree, as the guest will resolve them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use object::read::elf::{ElfFile, FileHeader, ProgramHeader};

/// Where a program is looked for in its package.
pub(super) const PROGRAM_DIRS: [&str; 4] = ["usr/bin", "usr/sbin", "bin", "sbin"];

/// Where Debian's loader for `arch` looks for a library no RPATH/RUNPATH names, without an
/// `ld.so.cache` (the image has none): its system search path, as `ld.so --help` prints it.
pub(super) fn library_dirs(arch: crate::arch::Arch) -> [String; 4] {
    let t = arch.triplet();
    [
        format!("lib/{t}"),
        format!("usr/lib/{t}"),
        "lib".to_string(),
        "usr/lib".to_string(),
    ]
}

/// What the walk needs of one ELF file.
#[derive(Debug, Clone)]
struct ElfInfo {
    is_64: bool,
    machine: object::elf::Machine,
    interp: Option<String>,
    soname: Option<String>,
    needed: Vec<String>,
    rpath: Vec<String>,
    /// `None` without DT_RUNPATH; with one, DT_RPATH is ignored (as ld.so does).
    runpath: Option<Vec<String>>,
}

/// Reads `path`'s ELF header, PT_INTERP and dynamic section; `None` when it is not ELF.
fn read_elf(path: &Path) -> Result<Option<ElfInfo>> {
    let data = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let info = match object::FileKind::parse(&*data) {
        Ok(object::FileKind::Elf32) => {
            elf_info::<object::elf::FileHeader32<object::Endianness>>(&data)
        }
        Ok(object::FileKind::Elf64) => {
            elf_info::<object::elf::FileHeader64<object::Endianness>>(&data)
        }
        _ => return Ok(None),
    };
    info.map(Some)
        .with_context(|| format!("reading the ELF file {}", path.display()))
}

fn elf_info<Elf: FileHeader<Endian = object::Endianness>>(data: &[u8]) -> Result<ElfInfo> {
    let file = ElfFile::<Elf>::parse(data)?;
    let endian = file.endian();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut interp = None;
    let mut has_dynamic_segment = false;
    for header in file.elf_program_headers() {
        if let Some(path) = header.interpreter(endian, data)? {
            interp = Some(text(path));
        }
        has_dynamic_segment |= header.p_type(endian) == object::elf::PT_DYNAMIC;
    }
    let table = file.elf_dynamic_table()?;
    if has_dynamic_segment && table.is_empty() {
        // Stripped of section headers: the segment's entries would need address mapping.
        bail!("it has a dynamic segment but no dynamic section");
    }
    let mut info = ElfInfo {
        is_64: file.elf_header().is_type_64(),
        machine: file.elf_header().e_machine(endian),
        interp,
        soname: None,
        needed: Vec::new(),
        rpath: Vec::new(),
        runpath: None,
    };
    let split = |value: String| -> Vec<String> {
        value
            .split(':')
            .filter(|d| !d.is_empty())
            .map(str::to_string)
            .collect()
    };
    for entry in &table {
        let value = || table.string(entry).map(text);
        match entry.tag {
            object::elf::DT_NEEDED => info.needed.push(value()?),
            object::elf::DT_SONAME => info.soname = Some(value()?),
            object::elf::DT_RPATH => info.rpath.extend(split(value()?)),
            object::elf::DT_RUNPATH => info
                .runpath
                .get_or_insert_with(Vec::new)
                .extend(split(value()?)),
            _ => {}
        }
    }
    Ok(info)
}

fn components(path: &str) -> impl DoubleEndedIterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// Where `rel` leads in `tree`, symlinks followed (absolute targets from the tree's root):
/// the path with no symlink in it and its metadata, or `None` if nothing is there. `on_link`
/// sees each symlink on the way (its path, its target).
fn resolve(
    tree: &Path,
    rel: &str,
    mut on_link: impl FnMut(&str, &Path),
) -> Result<Option<(String, fs::Metadata)>> {
    let mut todo: VecDeque<String> = components(rel).map(str::to_string).collect();
    let mut cur: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            cur.pop();
            continue;
        }
        cur.push(part);
        let here = cur.join("/");
        let meta = match fs::symlink_metadata(tree.join(&here)) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", tree.display())),
        };
        if meta.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                bail!("{rel} in {}: too many levels of symlinks", tree.display());
            }
            let target = fs::read_link(tree.join(&here))?;
            on_link(&here, &target);
            let target = target
                .to_str()
                .with_context(|| format!("non-UTF-8 link target at {here}"))?
                .to_string();
            cur.pop();
            if target.starts_with('/') {
                cur.clear();
            }
            for part in components(&target).rev() {
                todo.push_front(part.to_string());
            }
        } else if !todo.is_empty() && !meta.is_dir() {
            return Ok(None);
        }
    }
    let real = cur.join("/");
    let meta = fs::metadata(tree.join(&real))?;
    Ok(Some((real, meta)))
}

/// A regular file at `rel` in `tree` (through symlinks): its real path.
fn find_file(tree: &Path, rel: &str) -> Result<Option<String>> {
    Ok(resolve(tree, rel, |_, _| {})?
        .filter(|(_, meta)| meta.is_file())
        .map(|(real, _)| real))
}

/// The directory part of a relative path (`""` for a top-level name).
fn parent(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn file_name(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

/// An RPATH/RUNPATH entry as a tree-relative dir. `origin` (for `$ORIGIN`) is the object's real
/// dir, free of symlinks, so `..` right after it is its parent.
fn expand(dir: &str, origin: &str) -> String {
    for token in ["${ORIGIN}", "$ORIGIN"] {
        if let Some(rest) = dir.strip_prefix(token) {
            let mut base: Vec<&str> = components(origin).collect();
            let mut rest = components(rest).peekable();
            while rest.peek() == Some(&"..") {
                rest.next();
                base.pop();
            }
            base.extend(rest);
            return base.join("/");
        }
    }
    dir.trim_start_matches('/').to_string()
}

/// One object loaded for a program, and the RPATH dirs its dependencies inherit.
struct Loaded {
    /// As it was found (for messages) and its real path (for `$ORIGIN`).
    rel: String,
    real: String,
    info: ElfInfo,
    rpath_chain: Vec<String>,
}

/// Parsed ELF files by real path, shared by the programs of one image.
type Parsed = BTreeMap<String, Option<ElfInfo>>;

fn parsed<'a>(tree: &Path, real: &str, cache: &'a mut Parsed) -> Result<Option<&'a ElfInfo>> {
    if !cache.contains_key(real) {
        let info = read_elf(&tree.join(real))?;
        cache.insert(real.to_string(), info);
    }
    Ok(cache[real].as_ref())
}

/// The files that `programs` (package -> program names) bring into image `image`: each program
/// as its package has it (found in `package_dirs[package]`, that package's files alone), its
/// library closure and loader, all looked up in `tree` (every package of the programs'
/// dependency closure unpacked together). Paths as the programs and libraries name them; the
/// symlinks along them are for [`install`] to recreate.
pub(super) fn closure(
    image: &str,
    arch: crate::arch::Arch,
    tree: &Path,
    package_dirs: &BTreeMap<String, PathBuf>,
    programs: &BTreeMap<String, Vec<String>>,
) -> Result<BTreeSet<String>> {
    let mut files = BTreeSet::new();
    let mut cache = Parsed::new();
    for (package, names) in programs {
        let own = package_dirs.get(package).ok_or_else(|| {
            anyhow!("image {image:?}: package {package} is not in its programs' resolved closure")
        })?;
        for name in names {
            let rel = PROGRAM_DIRS
                .iter()
                .map(|dir| format!("{dir}/{name}"))
                .find(|rel| fs::symlink_metadata(own.join(rel)).is_ok())
                .ok_or_else(|| {
                    anyhow!(
                        "image {image:?}: package {package} has no program {name:?} (looked in {})",
                        PROGRAM_DIRS.join(", ")
                    )
                })?;
            let what = format!("{name} (package {package})");
            walk(image, arch, tree, &what, &rel, true, &mut files, &mut cache)?;
        }
    }
    Ok(files)
}

/// The program at `rel` in `tree` (an unpacked root of `arch`) and its library closure, for
/// [`install`], without its loader: for a program run through a loader named explicitly
/// (`ld.so --library-path`), as the QEMU bundle is. `what` names the tree in errors.
pub(crate) fn library_closure(
    what: &str,
    arch: crate::arch::Arch,
    tree: &Path,
    rel: &str,
) -> Result<BTreeSet<String>> {
    let mut files = BTreeSet::new();
    walk(
        what,
        arch,
        tree,
        rel,
        rel,
        false,
        &mut files,
        &mut Parsed::new(),
    )?;
    Ok(files)
}

/// Adds one program, its loader (with `interp`) and its library closure to `files`,
/// breadth-first like ld.so.
#[allow(clippy::too_many_arguments)]
fn walk(
    image: &str,
    arch: crate::arch::Arch,
    tree: &Path,
    what: &str,
    rel: &str,
    interp: bool,
    files: &mut BTreeSet<String>,
    cache: &mut Parsed,
) -> Result<()> {
    let real = find_file(tree, rel)?.ok_or_else(|| {
        anyhow!("image {image:?}: {what} at {rel} is not a file (a dangling link?)")
    })?;
    let info = parsed(tree, &real, cache)?
        .cloned()
        .ok_or_else(|| anyhow!("image {image:?}: {what} at {rel} is not an ELF file"))?;
    files.insert(rel.to_string());
    // Sonames already loaded, as ld.so matches DT_NEEDED against them before searching.
    let mut loaded: BTreeSet<String> = BTreeSet::new();
    if let Some(interp) = info.interp.as_ref().filter(|_| interp) {
        let interp_rel = interp.trim_start_matches('/').to_string();
        let interp_real = find_file(tree, &interp_rel)?.ok_or_else(|| {
            anyhow!(
                "image {image:?}: {what} needs the loader {interp}, which no package of its \
                 closure provides"
            )
        })?;
        if let Some(soname) = parsed(tree, &interp_real, cache)?.and_then(|i| i.soname.clone()) {
            loaded.insert(soname);
        }
        files.insert(interp_rel);
    }
    let own_rpath = |info: &ElfInfo, origin: &str| -> Vec<String> {
        if info.runpath.is_some() {
            Vec::new()
        } else {
            info.rpath.iter().map(|d| expand(d, origin)).collect()
        }
    };
    let program = Loaded {
        rpath_chain: own_rpath(&info, parent(&real)),
        rel: rel.to_string(),
        real: real.clone(),
        info,
    };
    let mut queue = VecDeque::from([program]);
    while let Some(object) = queue.pop_front() {
        for soname in &object.info.needed {
            if !loaded.insert(soname.clone()) {
                continue;
            }
            let origin = parent(&object.real);
            let mut dirs: Vec<String> = Vec::new();
            if object.info.runpath.is_none() {
                dirs.extend(object.rpath_chain.iter().cloned());
            }
            if let Some(runpath) = &object.info.runpath {
                dirs.extend(runpath.iter().map(|d| expand(d, origin)));
            }
            dirs.extend(library_dirs(arch));
            let candidates: Vec<String> = if soname.contains('/') {
                vec![soname.trim_start_matches('/').to_string()]
            } else {
                dirs.iter()
                    .map(|d| {
                        if d.is_empty() {
                            soname.clone()
                        } else {
                            format!("{}/{soname}", d.trim_end_matches('/'))
                        }
                    })
                    .collect()
            };
            let mut found = None;
            for candidate in candidates {
                let Some(lib_real) = find_file(tree, &candidate)? else {
                    continue;
                };
                // ld.so skips a file of another class or machine and keeps searching.
                let Some(lib) = parsed(tree, &lib_real, cache)? else {
                    continue;
                };
                if lib.is_64 == object.info.is_64 && lib.machine == object.info.machine {
                    found = Some((candidate, lib_real, lib.clone()));
                    break;
                }
            }
            let Some((lib_rel, lib_real, lib)) = found else {
                let through = if object.real == real {
                    String::new()
                } else {
                    format!(" (through {})", file_name(&object.rel))
                };
                bail!(
                    "image {image:?}: {what} needs {soname}{through}, which no package of its \
                     closure provides (looked in {})",
                    dirs.join(", ")
                );
            };
            files.insert(lib_rel.clone());
            let mut rpath_chain = own_rpath(&lib, parent(&lib_real));
            rpath_chain.extend(object.rpath_chain.iter().cloned());
            queue.push_back(Loaded {
                rel: lib_rel,
                real: lib_real,
                info: lib,
                rpath_chain,
            });
        }
    }
    Ok(())
}

/// Copies `files` from `tree` into `root` at the same paths: every symlink on the way (the
/// file's own soname link, a merged-/usr link, a link inside a dir) is recreated as a link
/// where `root` has nothing yet, and the file it leads to is copied with its mode.
pub(crate) fn install(tree: &Path, root: &Path, files: &BTreeSet<String>) -> Result<()> {
    for rel in files {
        let mut links: Vec<(String, PathBuf)> = Vec::new();
        let (real, meta) = resolve(tree, rel, |link, target| {
            links.push((link.to_string(), target.to_path_buf()))
        })?
        .with_context(|| format!("{rel} vanished from {}", tree.display()))?;
        if !meta.is_file() {
            bail!("{rel} in {} is not a file", tree.display());
        }
        for (link, target) in links {
            let path = root.join(&link);
            if fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            fs::create_dir_all(root.join(parent(&link)))?;
            std::os::unix::fs::symlink(&target, &path)
                .with_context(|| format!("linking {}", path.display()))?;
        }
        let dest = root.join(&real);
        if fs::symlink_metadata(&dest).is_err() {
            fs::create_dir_all(root.join(parent(&real)))?;
            fs::copy(tree.join(&real), &dest)
                .with_context(|| format!("copying {real} into {}", root.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::process::Command;

    /// Builds an ELF file with the host's C compiler and nothing of the host's libraries
    /// (`-nostdlib`): `-shared` objects with a soname, programs with a loader, each linked
    /// against the libraries in `dir` that `needs` names, so they become its DT_NEEDED.
    fn cc(dir: &Path, out: &str, soname: Option<&str>, needs: &[&str], extra: &[&str]) {
        let src = dir.join("empty.c");
        fs::write(&src, "int lab_fixture(void) { return 0; }\n").unwrap();
        let mut cmd = Command::new("cc");
        cmd.current_dir(dir)
            .args(["-nostdlib", "-fPIC", "-o", out])
            .arg(&src);
        match soname {
            Some(name) => cmd.args(["-shared", &format!("-Wl,-soname,{name}")]),
            None => cmd.args([
                "-Wl,-e,lab_fixture",
                "-Wl,--dynamic-linker=/lib64/ld-linux-x86-64.so.2",
            ]),
        };
        cmd.args(["-L", ".", "-Wl,-rpath-link,.", "-Wl,--no-as-needed"]);
        for lib in needs {
            cmd.arg(format!("-l:{lib}"));
        }
        cmd.args(extra);
        let status = cmd
            .status()
            .expect("these tests compile tiny ELF files with `cc`, which is not installed");
        assert!(status.success(), "cc -o {out} failed");
    }

    /// An unpacked closure like Debian's: libc6's loader under usr/lib with its /lib64 link,
    /// libc, a library behind its soname link, a private library found through RUNPATH, one
    /// nothing needs, and three programs in their packages' own dirs.
    struct Fixture {
        _dir: tempfile::TempDir,
        tree: PathBuf,
        packages: BTreeMap<String, PathBuf>,
        image: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let build = dir.path().join("build");
        fs::create_dir_all(&build).unwrap();
        let lib =
            |file: &str, soname: &str, needs: &[&str]| cc(&build, file, Some(soname), needs, &[]);
        lib("ld-linux-x86-64.so.2", "ld-linux-x86-64.so.2", &[]);
        lib("libc.so.6", "libc.so.6", &["ld-linux-x86-64.so.2"]);
        lib("libnuma.so.1.0.0", "libnuma.so.1", &["libc.so.6"]);
        lib("libprivate.so", "libprivate.so", &["libc.so.6"]);
        lib("libunused.so.1", "libunused.so.1", &[]);
        lib("libgone.so.1", "libgone.so.1", &[]);
        lib("libhole.so.1", "libhole.so.1", &["libgone.so.1"]);
        cc(
            &build,
            "numactl",
            None,
            &["libnuma.so.1.0.0", "libc.so.6", "libprivate.so"],
            &["-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib/numactl"],
        );
        cc(&build, "holey", None, &["libhole.so.1", "libc.so.6"], &[]);
        cc(&build, "lonely", None, &["libgone.so.1"], &[]);

        let tree = dir.path().join("tree");
        let multiarch = tree.join("usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(&multiarch).unwrap();
        fs::create_dir_all(tree.join("usr/lib64")).unwrap();
        fs::create_dir_all(tree.join("usr/lib/numactl")).unwrap();
        fs::create_dir_all(tree.join("usr/bin")).unwrap();
        let put = |file: &str, to: &Path| {
            fs::copy(build.join(file), to).unwrap();
        };
        put(
            "ld-linux-x86-64.so.2",
            &multiarch.join("ld-linux-x86-64.so.2"),
        );
        symlink(
            "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            tree.join("usr/lib64/ld-linux-x86-64.so.2"),
        )
        .unwrap();
        put("libc.so.6", &multiarch.join("libc.so.6"));
        put("libnuma.so.1.0.0", &multiarch.join("libnuma.so.1.0.0"));
        symlink("libnuma.so.1.0.0", multiarch.join("libnuma.so.1")).unwrap();
        put("libunused.so.1", &multiarch.join("libunused.so.1"));
        put("libhole.so.1", &multiarch.join("libhole.so.1"));
        put("libprivate.so", &tree.join("usr/lib/numactl/libprivate.so"));
        let mut packages = BTreeMap::new();
        for (package, program) in [
            ("numactl", "numactl"),
            ("hole", "holey"),
            ("hole", "lonely"),
        ] {
            put(program, &tree.join("usr/bin").join(program));
            let own = dir.path().join("packages").join(package);
            fs::create_dir_all(own.join("usr/bin")).unwrap();
            put(program, &own.join("usr/bin").join(program));
            packages.insert(package.to_string(), own);
        }
        packages.insert("libnuma1".into(), dir.path().join("packages/libnuma1"));
        super::super::add_merged_usr_links(&tree).unwrap();
        let image = dir.path().join("image");
        fs::create_dir_all(&image).unwrap();
        super::super::add_merged_usr_links(&image).unwrap();
        Fixture {
            tree,
            packages,
            image,
            _dir: dir,
        }
    }

    fn programs(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        list.iter()
            .map(|(p, names)| (p.to_string(), names.iter().map(|n| n.to_string()).collect()))
            .collect()
    }

    #[test]
    fn program_brings_its_library_closure_and_loader_with_their_links() {
        let f = fixture();
        let files = closure(
            "sched",
            crate::arch::Arch::X86_64,
            &f.tree,
            &f.packages,
            &programs(&[("numactl", &["numactl"])]),
        )
        .unwrap();
        let want: BTreeSet<String> = [
            "usr/bin/numactl",
            // PT_INTERP, through lib64 -> usr/lib64 and libc6's link into the multiarch dir.
            "lib64/ld-linux-x86-64.so.2",
            // The first default dir; `lib` is the merged-/usr link.
            "lib/x86_64-linux-gnu/libnuma.so.1",
            "lib/x86_64-linux-gnu/libc.so.6",
            // RUNPATH $ORIGIN/../lib/numactl.
            "usr/lib/numactl/libprivate.so",
        ]
        .into_iter()
        .map(str::to_string)
        .collect();
        assert_eq!(files, want);

        install(&f.tree, &f.image, &files).unwrap();
        let multiarch = f.image.join("usr/lib/x86_64-linux-gnu");
        assert_eq!(
            fs::read_link(multiarch.join("libnuma.so.1")).unwrap(),
            Path::new("libnuma.so.1.0.0"),
            "the soname link stays a link"
        );
        assert!(fs::symlink_metadata(multiarch.join("libnuma.so.1.0.0"))
            .unwrap()
            .is_file());
        assert_eq!(
            fs::read_link(f.image.join("usr/lib64/ld-linux-x86-64.so.2")).unwrap(),
            Path::new("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        );
        assert!(fs::metadata(f.image.join("lib64/ld-linux-x86-64.so.2"))
            .unwrap()
            .is_file());
        assert!(multiarch.join("libc.so.6").is_file());
        assert!(f.image.join("usr/lib/numactl/libprivate.so").is_file());
        let mode = fs::metadata(f.image.join("usr/bin/numactl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "the program stays executable");
        assert!(!multiarch.join("libunused.so.1").exists());
        assert!(!multiarch.join("libhole.so.1").exists());
    }

    #[test]
    fn a_program_the_package_lacks_names_package_and_file() {
        let f = fixture();
        let err = closure(
            "sched",
            crate::arch::Arch::X86_64,
            &f.tree,
            &f.packages,
            &programs(&[("numactl", &["numactl", "numastat"])]),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "image \"sched\": package numactl has no program \"numastat\" (looked in usr/bin, \
             usr/sbin, bin, sbin)"
        );
        // In the closure's tree, but not in the package the recipe names.
        let err = closure(
            "sched",
            crate::arch::Arch::X86_64,
            &f.tree,
            &f.packages,
            &programs(&[("libnuma1", &["numactl"])]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("package libnuma1 has no program \"numactl\""),
            "{err}"
        );
    }

    #[test]
    fn a_library_no_package_provides_names_library_and_program() {
        let f = fixture();
        let err = closure(
            "storage",
            crate::arch::Arch::X86_64,
            &f.tree,
            &f.packages,
            &programs(&[("hole", &["lonely"])]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "image \"storage\": lonely (package hole) needs libgone.so.1, which no package \
                 of its closure provides (looked in lib/x86_64-linux-gnu, "
            ),
            "{err}"
        );
        let err = closure(
            "storage",
            crate::arch::Arch::X86_64,
            &f.tree,
            &f.packages,
            &programs(&[("hole", &["holey"])]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "image \"storage\": holey (package hole) needs libgone.so.1 (through \
                 libhole.so.1), which no package of its closure provides"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_missing_loader_is_an_error() {
        let f = fixture();
        fs::remove_file(f.tree.join("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")).unwrap();
        let err = closure(
            "sched",
            crate::arch::Arch::X86_64,
            &f.tree,
            &f.packages,
            &programs(&[("numactl", &["numactl"])]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("numactl (package numactl) needs the loader /lib64/ld-linux-x86-64.so.2"),
            "{err}"
        );
    }

    #[test]
    fn origin_and_links_resolve_inside_the_tree() {
        assert_eq!(expand("$ORIGIN/../lib/x", "usr/bin"), "usr/lib/x");
        assert_eq!(expand("${ORIGIN}", "usr/bin"), "usr/bin");
        assert_eq!(expand("/opt/lib", "usr/bin"), "opt/lib");
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path();
        fs::create_dir_all(tree.join("usr/lib/real")).unwrap();
        fs::write(tree.join("usr/lib/real/f"), b"x").unwrap();
        // An absolute link is read from the tree's root, not the host's.
        symlink("/usr/lib/real", tree.join("usr/lib/abs")).unwrap();
        symlink("loop", tree.join("loop")).unwrap();
        let mut seen = Vec::new();
        let (real, _) = resolve(tree, "usr/lib/abs/f", |link, _| seen.push(link.to_string()))
            .unwrap()
            .unwrap();
        assert_eq!(real, "usr/lib/real/f");
        assert_eq!(seen, vec!["usr/lib/abs".to_string()]);
        assert!(find_file(tree, "usr/lib/abs/nothing").unwrap().is_none());
        assert!(find_file(tree, "usr/lib/real/f/g").unwrap().is_none());
        assert!(resolve(tree, "loop/x", |_, _| {}).is_err());
    }
}
