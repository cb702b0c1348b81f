//! A cache entry as an OCI artifact: its files packed into layers (tar + zstd), the list of
//! every file with its sha256 and size (the artifact's config blob), and the check a pulled
//! entry must pass before it is renamed into place.
//!
//! Media types (the lab's own, so nothing mistakes an entry for a container image):
//! - manifest `artifactType` [`ARTIFACT_TYPE`]; config [`CONFIG_MEDIA_TYPE`] ([`EntryConfig`]);
//! - each layer [`LAYER_MEDIA_TYPE`], a tar of the entry's files compressed with zstd;
//! - the file list of an optional layer [`LIST_MEDIA_TYPE`], a blob of its own: the kernel
//!   tree's 90 000 files would make the config, which every pull reads, 10 MB.
//!
//! An entry's top-level directories named in [`OPTIONAL_DIRS`] travel as optional layers,
//! pulled only when asked for; everything else is the `files` layer.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's `artifactType`.
pub(crate) const ARTIFACT_TYPE: &str = "application/vnd.lab.cache.v1";
/// The config blob: an [`EntryConfig`] as JSON.
pub(crate) const CONFIG_MEDIA_TYPE: &str = "application/vnd.lab.cache.entry.v1+json";
/// A layer: a tar of files, zstd-compressed.
pub(crate) const LAYER_MEDIA_TYPE: &str = "application/vnd.lab.cache.files.v1.tar+zstd";
/// An optional layer's file list: a `Vec<FileRecord>` as JSON.
pub(crate) const LIST_MEDIA_TYPE: &str = "application/vnd.lab.cache.filelist.v1+json";

/// Top-level directories of an entry that are optional layers: `tree` is a kernel's source and
/// object tree (`kernels/<key>/tree`), needed only to build variants from it.
pub(crate) const OPTIONAL_DIRS: &[&str] = &["tree"];

/// The layer every entry has: all files outside [`OPTIONAL_DIRS`].
pub(crate) const FILES_LAYER: &str = "files";

/// zstd level: 3 packs the 1.7 GB kernel tree to about a quarter at ~300 MB/s on one core.
const ZSTD_LEVEL: i32 = 3;

/// The config blob: what the entry is and every file of every layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EntryConfig {
    pub kind: String,
    pub key: String,
    pub layers: Vec<LayerInfo>,
}

/// One layer of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LayerInfo {
    /// `files`, or the optional directory it holds (`tree`).
    pub name: String,
    /// The layer blob's digest (`sha256:...`).
    pub digest: String,
    pub size: u64,
    pub optional: bool,
    /// The files of a required layer, listed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<FileRecord>>,
    /// The digest of an optional layer's file list blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_digest: Option<String>,
}

/// One path of an entry, relative to the entry's directory, `/`-separated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileRecord {
    pub path: String,
    #[serde(flatten)]
    pub what: FileKind,
}

/// What a path is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum FileKind {
    File {
        sha256: String,
        size: u64,
        mode: u32,
    },
    Link {
        target: String,
    },
    Dir,
}

/// A packed layer: its blob on disk, digest and size, and its files.
#[derive(Debug)]
pub(crate) struct Packed {
    pub digest: String,
    pub size: u64,
    pub files: Vec<FileRecord>,
}

/// The names of `entry`'s optional layers that are present.
pub(crate) fn optional_dirs_of(entry: &Path) -> Vec<&'static str> {
    OPTIONAL_DIRS
        .iter()
        .copied()
        .filter(|d| entry.join(d).is_dir())
        .collect()
}

/// Packs layer `layer` of `entry` (`files`: everything outside the optional dirs; else that
/// optional dir) into `out`, hashing every file on the way.
pub(crate) fn pack(entry: &Path, layer: &str, out: &Path) -> Result<Packed> {
    let blob = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let counted = HashingWriter::new(blob);
    let mut tar = tar::Builder::new(zstd::Encoder::new(counted, ZSTD_LEVEL)?);
    let mut files = Vec::new();
    let roots: Vec<String> = if layer == FILES_LAYER {
        let mut names: Vec<String> = fs::read_dir(entry)?
            .map(|e| Ok(utf8_name(&e?.file_name(), entry)?.to_string()))
            .collect::<Result<_>>()?;
        names.retain(|n| !OPTIONAL_DIRS.contains(&n.as_str()));
        names.sort();
        names
    } else {
        vec![layer.to_string()]
    };
    for root in roots {
        add_path(&mut tar, entry, &root, &mut files)?;
    }
    let counted = tar.into_inner()?.finish()?;
    let (mut blob, digest, size) = counted.finish();
    blob.flush()?;
    Ok(Packed {
        digest,
        size,
        files,
    })
}

/// Adds `rel` (and, for a directory, everything below it in name order) to the tar.
fn add_path<W: Write>(
    tar: &mut tar::Builder<W>,
    entry: &Path,
    rel: &str,
    files: &mut Vec<FileRecord>,
) -> Result<()> {
    let path = entry.join(rel);
    let meta =
        fs::symlink_metadata(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut header = tar::Header::new_gnu();
    header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
    header.set_uid(0);
    header.set_gid(0);
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = fs::read_link(&path)?;
        let target = target
            .to_str()
            .with_context(|| format!("{}: link target is not UTF-8", path.display()))?
            .to_string();
        header.set_size(0);
        tar.append_link(&mut header, rel, &target)?;
        files.push(FileRecord {
            path: rel.to_string(),
            what: FileKind::Link { target },
        });
    } else if ft.is_file() {
        let mut hashed = HashingReader::new(File::open(&path)?);
        tar.append_data(&mut header, rel, &mut hashed)
            .with_context(|| format!("packing {}", path.display()))?;
        let (sha256, size) = hashed.finish();
        files.push(FileRecord {
            path: rel.to_string(),
            what: FileKind::File {
                sha256,
                size,
                mode: meta.mode() & 0o7777,
            },
        });
    } else if ft.is_dir() {
        header.set_size(0);
        tar.append_data(&mut header, format!("{rel}/"), std::io::empty())?;
        files.push(FileRecord {
            path: rel.to_string(),
            what: FileKind::Dir,
        });
        let mut children: Vec<String> = fs::read_dir(&path)?
            .map(|e| Ok(utf8_name(&e?.file_name(), &path)?.to_string()))
            .collect::<Result<_>>()?;
        children.sort();
        for child in children {
            add_path(tar, entry, &format!("{rel}/{child}"), files)?;
        }
    } else {
        bail!(
            "{}: not a file, directory or symlink, so it cannot be pushed",
            path.display()
        );
    }
    Ok(())
}

fn utf8_name<'a>(name: &'a std::ffi::OsStr, dir: &Path) -> Result<&'a str> {
    name.to_str()
        .with_context(|| format!("{}: a name in it is not UTF-8", dir.display()))
}

/// Unpacks layer blob `blob` into `dest` and checks the result against `files`: every listed
/// path exists with its sha256, size and mode (files) or target (links), and nothing else does.
/// `what` names the entry in errors (`kernels/f73c8d6731`). On error `dest` may hold part of
/// the layer: the caller removes it.
pub(crate) fn unpack_verified(
    blob: &Path,
    dest: &Path,
    files: &[FileRecord],
    what: &str,
) -> Result<()> {
    let listed: BTreeMap<&str, &FileKind> =
        files.iter().map(|f| (f.path.as_str(), &f.what)).collect();
    for f in files {
        check_relative(&f.path).with_context(|| format!("{what}: the file list is refused"))?;
    }
    fs::create_dir_all(dest)?;
    let mut archive = tar::Archive::new(zstd::Decoder::new(File::open(blob)?)?);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    for item in archive
        .entries()
        .with_context(|| format!("{what}: reading a layer"))?
    {
        let mut item = item.with_context(|| format!("{what}: reading a layer"))?;
        let path = item
            .path()?
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        if !listed.contains_key(path.as_str()) {
            bail!("{what}: {path} is in the layer but not in the entry's file list: refused");
        }
        if !item
            .unpack_in(dest)
            .with_context(|| format!("{what}: unpacking {path}"))?
        {
            bail!("{what}: {path} would land outside the entry: refused");
        }
    }
    // A registry's layer may carry setuid or world-writable modes (an entry pushed before the
    // lab dropped them): never kept.
    crate::cache::drop_special_bits(dest)?;
    verify(dest, files, what)
}

/// Whether `dest` holds exactly `files`.
pub(crate) fn verify(dest: &Path, files: &[FileRecord], what: &str) -> Result<()> {
    for f in files {
        let path = dest.join(&f.path);
        let meta = fs::symlink_metadata(&path)
            .with_context(|| format!("{what}: {} is missing after the pull: refused", f.path))?;
        match &f.what {
            FileKind::Dir => {
                if !meta.is_dir() {
                    bail!("{what}: {} is not a directory: refused", f.path);
                }
            }
            FileKind::Link { target } => {
                let got = fs::read_link(&path).ok();
                if !meta.file_type().is_symlink() || got.as_deref() != Some(Path::new(target)) {
                    bail!("{what}: {} is not a link to {target}: refused", f.path);
                }
            }
            FileKind::File { sha256, size, mode } => {
                if !meta.is_file() {
                    bail!("{what}: {} is not a file: refused", f.path);
                }
                if meta.len() != *size {
                    bail!(
                        "{what}: {} has {} bytes, the entry's list says {size}: refused",
                        f.path,
                        meta.len()
                    );
                }
                let got = crate::cache::sha256_file(&path)?;
                if got != *sha256 {
                    bail!(
                        "{what}: {} has sha256 {got}, the entry's list says {sha256}: refused",
                        f.path
                    );
                }
                let got_mode = meta.permissions().mode() & 0o7777;
                if got_mode != *mode & crate::cache::KEPT_MODE {
                    bail!(
                        "{what}: {} has mode {got_mode:o}, the entry's list says {mode:o}: refused",
                        f.path
                    );
                }
            }
        }
    }
    // Nothing unlisted below the layer's top-level directories: a layer that carried more
    // than its list is not the entry. (Other layers of the entry may sit beside them.)
    let listed: std::collections::BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut stack: Vec<std::path::PathBuf> = files
        .iter()
        .filter(|f| !f.path.contains('/') && f.what == FileKind::Dir)
        .map(|f| dest.join(&f.path))
        .collect();
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir)? {
            let e = e?;
            let rel = e.path();
            let rel = rel.strip_prefix(dest).expect("below dest");
            let rel = rel.to_string_lossy();
            if !listed.contains(rel.as_ref()) {
                bail!("{what}: {rel} is not in the entry's file list: refused");
            }
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(())
}

/// A listed path must stay inside the entry: relative, no `..`, no `.`.
fn check_relative(path: &str) -> Result<()> {
    let p = Path::new(path);
    if path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        bail!("{path:?} is not a plain relative path");
    }
    Ok(())
}

/// The files a layer's list names, as a short phrase for errors.
pub(crate) fn describe_files(files: &[FileRecord]) -> String {
    let top: std::collections::BTreeSet<&str> = files
        .iter()
        .map(|f| f.path.split('/').next().unwrap_or(&f.path))
        .collect();
    let names: Vec<&str> = top.into_iter().collect();
    format!("{} files: {}", files.len(), names.join(", "))
}

/// A writer that hashes and counts what passes through.
pub(crate) struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    size: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            size: 0,
        }
    }
    /// The inner writer, `sha256:<hex>` of everything written and its length.
    pub(crate) fn finish(self) -> (W, String, u64) {
        let digest = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        (self.inner, digest, self.size)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that hashes and counts what is read.
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    size: u64,
}

impl<R: Read> HashingReader<R> {
    fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            size: 0,
        }
    }
    fn finish(self) -> (String, u64) {
        (hex::encode(self.hasher.finalize()), self.size)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// An entry like a kernel's: files, a link, an empty dir and an optional `tree/`.
    fn entry(root: &Path) {
        fs::create_dir_all(root.join("modules/lib/modules/6.12")).unwrap();
        fs::create_dir_all(root.join("empty")).unwrap();
        fs::create_dir_all(root.join("tree/obj")).unwrap();
        fs::write(root.join("bzImage"), b"kernel image").unwrap();
        fs::write(root.join("modules/lib/modules/6.12/modules.dep"), b"").unwrap();
        fs::write(root.join("tree/obj/.config"), b"CONFIG_X=y\n").unwrap();
        let exe = root.join("tree/run");
        fs::write(&exe, b"#!/bin/sh\n").unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        symlink("bzImage", root.join("vmlinuz")).unwrap();
    }

    #[test]
    fn layers_round_trip_and_the_tree_stays_apart() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        entry(&src);
        assert_eq!(optional_dirs_of(&src), vec!["tree"]);
        let files = pack(&src, FILES_LAYER, &dir.path().join("files.tar.zst")).unwrap();
        assert!(files.files.iter().all(|f| !f.path.starts_with("tree")));
        assert!(files.files.iter().any(|f| f.path == "vmlinuz"
            && f.what
                == FileKind::Link {
                    target: "bzImage".into()
                }));
        assert!(files
            .files
            .iter()
            .any(|f| f.path == "empty" && f.what == FileKind::Dir));
        let tree = pack(&src, "tree", &dir.path().join("tree.tar.zst")).unwrap();
        assert!(tree.files.iter().all(|f| f.path.starts_with("tree")));
        assert_eq!(
            tree.size,
            fs::metadata(dir.path().join("tree.tar.zst")).unwrap().len()
        );

        let dest = dir.path().join("dest");
        unpack_verified(
            &dir.path().join("files.tar.zst"),
            &dest,
            &files.files,
            "t/k",
        )
        .unwrap();
        assert_eq!(fs::read(dest.join("bzImage")).unwrap(), b"kernel image");
        assert!(!dest.join("tree").exists());
        unpack_verified(&dir.path().join("tree.tar.zst"), &dest, &tree.files, "t/k").unwrap();
        let mode = fs::metadata(dest.join("tree/run"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // Timestamps travel: make in a pulled tree sees its objects as up to date.
        assert_eq!(
            fs::metadata(src.join("tree/obj/.config")).unwrap().mtime(),
            fs::metadata(dest.join("tree/obj/.config")).unwrap().mtime()
        );
    }

    #[test]
    fn a_pulled_setuid_file_keeps_no_s_bit() {
        // An entry pushed before the lab dropped special bits: its list says 4755.
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        entry(&src);
        fs::set_permissions(src.join("bzImage"), fs::Permissions::from_mode(0o4755)).unwrap();
        let blob = dir.path().join("files.tar.zst");
        let packed = pack(&src, FILES_LAYER, &blob).unwrap();
        let dest = dir.path().join("dest");
        unpack_verified(&blob, &dest, &packed.files, "t/k").unwrap();
        let mode = fs::metadata(dest.join("bzImage"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
    }

    #[test]
    fn a_changed_file_is_refused_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        entry(&src);
        let blob = dir.path().join("files.tar.zst");
        let mut packed = pack(&src, FILES_LAYER, &blob).unwrap();
        // A list that says otherwise about one file: the pulled bytes are not what was pushed.
        for f in &mut packed.files {
            if let FileKind::File { sha256, .. } = &mut f.what {
                if f.path == "bzImage" {
                    *sha256 = "0".repeat(64);
                }
            }
        }
        let err = unpack_verified(&blob, &dir.path().join("d1"), &packed.files, "kernels/0a12")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kernels/0a12") && err.contains("bzImage"),
            "{err}"
        );
        // A file the list does not name.
        let short: Vec<FileRecord> = packed
            .files
            .iter()
            .filter(|f| f.path != "vmlinuz")
            .cloned()
            .collect();
        let err = unpack_verified(&blob, &dir.path().join("d2"), &short, "kernels/0a12")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("vmlinuz") && err.contains("not in the entry's file list"),
            "{err}"
        );
        // A list that reaches outside the entry.
        let mut evil = packed.files.clone();
        evil.push(FileRecord {
            path: "../escape".into(),
            what: FileKind::Dir,
        });
        let err =
            unpack_verified(&blob, &dir.path().join("d3"), &evil, "kernels/0a12").unwrap_err();
        assert!(format!("{err:#}").contains("../escape"), "{err:#}");
    }
}
